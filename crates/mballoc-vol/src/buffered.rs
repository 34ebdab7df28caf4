//! Buffered I/O through the folio cache: writes land in folios and
//! reserve their blocks at once; writeback allocates the file's delayed
//! runs and writes each physically contiguous piece in bounded device
//! writes, then records the blocks written. Truncate and punch zero the
//! partial blocks they leave so no stale byte is ever read back.

use crate::cache::{FileCache, Folio};
use crate::error::{Result, VolError};
use crate::volume::Volume;
use mballoc_fs::{ExtentState, FileId};
use std::sync::atomic::Ordering;

/// The most one device write of file data carries, unless a folio is
/// larger: like a block device's largest request.
const MAX_DATA_WRITE: u64 = 2 << 20;

impl Volume {
    /// A folio with the file's data as the device has it.
    pub(crate) fn fill(&self, f: FileId, idx: u64) -> Result<Folio> {
        let (bs, fb) = (self.block_size(), self.folio_blocks());
        let mut folio = Folio::zeroed(self.opts.folio_size as usize, fb as usize);
        let first = idx * fb;
        for e in self.fs.lookup(f, first, first + fb)? {
            if e.state != ExtentState::Written {
                continue;
            }
            let (a, b) = (e.logical.max(first), e.logical_end().min(first + fb));
            let p = e.physical_of(a);
            let dst = folio.slice_mut(((a - first) * bs) as usize..((b - first) * bs) as usize);
            self.dev.read_at(p * bs, dst).map_err(|e| VolError::io(format!("reading block {p}"), e))?;
        }
        self.cached.fetch_add(folio.kept(), Ordering::AcqRel);
        Ok(folio)
    }

    /// Folio `idx` of the file, filled from the device if not cached.
    pub(crate) fn folio_mut<'a>(&self, f: FileId, fc: &'a mut FileCache, idx: u64) -> Result<&'a mut Folio> {
        match fc.folios.entry(idx) {
            std::collections::btree_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::btree_map::Entry::Vacant(v) => Ok(v.insert(self.fill(f, idx)?)),
        }
    }

    /// [`Volume::write`] without the rules of [`Volume::edit`].
    pub(crate) fn write_cached(&self, f: FileId, offset: u64, data: &[u8]) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        let end = offset.checked_add(data.len() as u64).ok_or_else(|| {
            VolError::InvalidArgument(format!("a write of {} bytes at {offset} passes 2^64", data.len()))
        })?;
        if self.dirty.load(Ordering::Acquire) > self.opts.dirty_bytes {
            // Still over the limit: an earlier writeback failed. Try again
            // before this write changes anything.
            self.writeback_locked(f, &mut fc)?;
            self.balance(f)?;
        }
        self.zero_tail_before_growth(f, &mut fc, end)?;
        self.load_folios(f, &mut fc, offset, end)?;
        // A write can split one extent in three.
        self.admit_records(f, 2)?;
        self.fs.write(f, offset, data.len() as u64)?;
        let dirty = self.copy_in(&mut fc, offset, data);
        // The write is done; what follows only keeps the cache in its
        // limits, and a failure of it is met again by the next call.
        if dirty > self.opts.dirty_bytes {
            if self.writeback_locked(f, &mut fc).is_ok() {
                drop(fc);
                let _ = self.balance(f);
            }
        } else if self.cached.load(Ordering::Acquire) > self.opts.cache_bytes {
            let dropped = fc.drop_clean();
            self.cached.fetch_sub(dropped, Ordering::AcqRel);
            drop(fc);
            let _ = self.balance(f);
        }
        Ok(())
    }

    /// Every folio of bytes `offset..end` in the cache, filled from the
    /// device where it was not.
    pub(crate) fn load_folios(&self, f: FileId, fc: &mut FileCache, offset: u64, end: u64) -> Result<()> {
        let fsz = u64::from(self.opts.folio_size);
        for idx in offset / fsz..end.div_ceil(fsz) {
            self.folio_mut(f, fc, idx)?;
        }
        Ok(())
    }

    /// Copy `data` into the file's folios at `offset` (all loaded) and mark
    /// its blocks dirty; returns the volume's dirty bytes after.
    pub(crate) fn copy_in(&self, fc: &mut FileCache, offset: u64, data: &[u8]) -> u64 {
        let (bs, fsz) = (self.block_size(), u64::from(self.opts.folio_size));
        let mut at = 0usize;
        let mut newly_dirty = 0;
        let kept_before = fc.kept();
        while at < data.len() {
            let pos = offset + at as u64;
            let idx = pos / fsz;
            let in_folio = (pos % fsz) as usize;
            let n = (fsz as usize - in_folio).min(data.len() - at);
            let folio = fc.folios.get_mut(&idx).expect("the caller loaded every folio of the range");
            folio.write(in_folio, &data[at..at + n]);
            let (b0, b1) = (in_folio as u64 / bs, ((in_folio + n) as u64).div_ceil(bs));
            for b in b0..b1 {
                if folio.set_dirty(b as usize) {
                    newly_dirty += 1;
                }
            }
            at += n;
        }
        fc.dirty_blocks += newly_dirty;
        self.cached.fetch_add(fc.kept() - kept_before, Ordering::AcqRel);
        self.dirty.fetch_add(newly_dirty * bs, Ordering::AcqRel) + newly_dirty * bs
    }

    /// Write back and drop clean folios of other files until the cache is
    /// under its limits. Files busy in another thread are skipped.
    pub(crate) fn balance(&self, except: FileId) -> Result<()> {
        if self.dirty.load(Ordering::Acquire) <= self.opts.dirty_bytes
            && self.cached.load(Ordering::Acquire) <= self.opts.cache_bytes
        {
            return Ok(());
        }
        for (ino, c) in self.caches().into_iter().filter(|(k, _)| *k != except.0) {
            let Some(mut fc) = c.try_lock() else { continue };
            if self.dirty.load(Ordering::Acquire) > self.opts.dirty_bytes / 2 {
                self.writeback_locked(FileId(ino), &mut fc)?;
            }
            if self.cached.load(Ordering::Acquire) > self.opts.cache_bytes / 2 {
                let dropped = fc.drop_clean();
                self.cached.fetch_sub(dropped, Ordering::AcqRel);
            }
        }
        Ok(())
    }

    /// Allocate the file's delayed blocks and write every dirty block to
    /// the device, one device write per physically contiguous piece of up
    /// to [`MAX_DATA_WRITE`] bytes (or one folio, if larger); then record
    /// the blocks as written.
    pub(crate) fn writeback_locked(&self, f: FileId, fc: &mut FileCache) -> Result<()> {
        if fc.dirty_blocks == 0 {
            return self.log_size(f);
        }
        let (bs, fb) = (self.block_size(), self.folio_blocks());
        let runs = fc.dirty_runs(fb);
        self.engine(self.fs.writeback(f))?;
        // A device write covers at most MAX_DATA_WRITE bytes, or one folio
        // where folios are larger: big enough that per-call costs vanish,
        // small enough that a run spanning many small folios is gathered
        // in a buffer that stays in cache (a run's worth of gather buffer,
        // 128 MiB under the default dirty limit, cost more in page faults
        // than the copy itself).
        let max_blocks = (MAX_DATA_WRITE / bs).max(1);
        let mut scratch = Vec::new();
        for &(first, n) in &runs {
            for e in self.fs.lookup(f, first, first + n)? {
                let (a, b) = (e.logical.max(first), e.logical_end().min(first + n));
                let mut l = a;
                while l < b {
                    let end = b.min(if fb >= max_blocks { (l / fb + 1) * fb } else { l + max_blocks });
                    let bytes = if l / fb == (end - 1) / fb {
                        fc.blocks(l, end, fb, bs)
                    } else {
                        scratch.clear();
                        let mut m = l;
                        while m < end {
                            let stop = end.min((m / fb + 1) * fb);
                            scratch.extend_from_slice(fc.blocks(m, stop, fb, bs));
                            m = stop;
                        }
                        &scratch[..]
                    };
                    let p = e.physical_of(l);
                    self.dev.write_at(p * bs, bytes).map_err(|e| VolError::io(format!("writing block {p}"), e))?;
                    self.data_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    self.data_writes.fetch_add(1, Ordering::Relaxed);
                    l = end;
                }
            }
        }
        self.log.data_written.store(true, Ordering::Release);
        for &(first, n) in &runs {
            self.fs.mark_written(f, first * bs, n * bs)?;
        }
        let cleaned: u64 = fc.folios.values_mut().map(|folio| folio.clean_all()).sum();
        debug_assert_eq!(cleaned, fc.dirty_blocks);
        fc.dirty_blocks = 0;
        self.dirty.fetch_sub(cleaned * bs, Ordering::AcqRel);
        self.log_size(f)
    }

    /// Every byte written to `f` is on the device (or a write it made
    /// failed and stays dirty): the journal may now have the size writes
    /// gave the file, and a crash then shows it no longer than its data.
    fn log_size(&self, f: FileId) -> Result<()> {
        match self.fs.log_size(f) {
            Err(mballoc_fs::FsError::Unlinked(_) | mballoc_fs::FsError::UnknownFile(_)) => Ok(()),
            r => Ok(r?),
        }
    }

    /// Zero `[from, to)` inside one block of the cache; if the block holds
    /// data (mapped, or dirty), mark it dirty so the zeroes reach the
    /// device.
    pub(crate) fn zero_partial(&self, f: FileId, fc: &mut FileCache, from: u64, to: u64) -> Result<()> {
        let (bs, fsz, fb) = (self.block_size(), u64::from(self.opts.folio_size), self.folio_blocks());
        let l = from / bs;
        let idx = from / fsz;
        let mapped = !self.fs.lookup(f, l, l + 1)?.is_empty();
        let cached_dirty = fc.folios.get(&idx).is_some_and(|x| x.is_dirty((l % fb) as usize));
        if !mapped && !cached_dirty {
            if let Some(folio) = fc.folios.get_mut(&idx) {
                folio.zero((from % fsz) as usize..((to - 1) % fsz + 1) as usize);
            }
            return Ok(());
        }
        self.folio_mut(f, fc, idx)?;
        // A mapped block needs nothing from the engine: writeback writes
        // every dirty cached block, and `mark_written` converts it.
        let folio = fc.folios.get_mut(&idx).expect("inserted above");
        // Kept whole: the block becomes dirty and goes to the device.
        let before = folio.kept();
        folio.slice_mut((from % fsz) as usize..((to - 1) % fsz + 1) as usize).fill(0);
        self.cached.fetch_add(folio.kept() - before, Ordering::AcqRel);
        if folio.set_dirty((l % fb) as usize) {
            fc.dirty_blocks += 1;
            self.dirty.fetch_add(bs, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Forget cached data of logical blocks `[first, end)`, which the file
    /// no longer maps, and zero it.
    pub(crate) fn forget_blocks(&self, fc: &mut FileCache, first: u64, end: u64) {
        let (bs, fb) = (self.block_size(), self.folio_blocks());
        let keys: Vec<u64> = fc.folios.range(first / fb..end.div_ceil(fb)).map(|(&k, _)| k).collect();
        let mut cleaned = 0;
        for idx in keys {
            let folio = fc.folios.get_mut(&idx).expect("key listed");
            let (a, b) = (first.max(idx * fb), end.min((idx + 1) * fb));
            for l in a..b {
                if folio.set_clean((l - idx * fb) as usize) {
                    cleaned += 1;
                }
            }
            folio.zero(((a - idx * fb) * bs) as usize..((b - idx * fb) * bs) as usize);
            if a == idx * fb && b == (idx + 1) * fb {
                let gone = fc.folios.remove(&idx).expect("key listed");
                self.cached.fetch_sub(gone.kept(), Ordering::AcqRel);
            }
        }
        fc.dirty_blocks -= cleaned;
        self.dirty.fetch_sub(cleaned * bs, Ordering::AcqRel);
    }

    /// Before the size grows past `new_size`'s predecessor: the bytes
    /// between the current end of file and the end of its block must read
    /// as zeros once they are inside the file, in the cache and on the
    /// device, whatever an earlier truncate or a crash left there. So the
    /// last block is zeroed past the end in the cache and, when it is a
    /// written block, written to the device now: the commit that records
    /// the new size flushes it first (data=ordered), as ext4 zeroes a
    /// partial last block when a file grows.
    pub(crate) fn zero_tail_before_growth(&self, f: FileId, fc: &mut FileCache, new_size: u64) -> Result<()> {
        let (bs, fsz, fb) = (self.block_size(), u64::from(self.opts.folio_size), self.folio_blocks());
        let size = self.fs.size(f)?;
        if new_size <= size || size % bs == 0 {
            return Ok(());
        }
        let l = size / bs;
        let written = self.fs.lookup(f, l, l + 1)?.into_iter().find(|e| e.state == ExtentState::Written);
        let idx = size / fsz;
        let folio = self.folio_mut(f, fc, idx)?;
        let block_end = (l + 1) * bs;
        folio.zero((size % fsz) as usize..((block_end - 1) % fsz + 1) as usize);
        if let Some(e) = written {
            let p = e.physical_of(l);
            let at = ((l % fb) * bs) as usize;
            let before = folio.kept();
            folio.slice_mut(at..at + bs as usize);
            self.cached.fetch_add(folio.kept() - before, Ordering::AcqRel);
            self.dev
                .write_at(p * bs, folio.slice(at..at + bs as usize))
                .map_err(|e| VolError::io(format!("writing block {p}"), e))?;
            self.data_bytes.fetch_add(bs, Ordering::Relaxed);
            self.data_writes.fetch_add(1, Ordering::Relaxed);
            self.log.data_written.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Set the size; shrinking frees the blocks past the end (after the
    /// next commit) and zeroes the rest of the last block; growing zeroes
    /// the old last block past the old end first.
    pub(crate) fn resize(&self, f: FileId, size: u64) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        let old = self.fs.size(f)?;
        let bs = self.block_size();
        self.zero_tail_before_growth(f, &mut fc, size)?;
        if size < old && !size.is_multiple_of(bs) {
            // The block that keeps a partial tail is read now, so the
            // truncate below cannot be left half done by a read error.
            self.prepare_partial(f, &mut fc, size)?;
        }
        self.fs.truncate(f, size)?;
        if size < old {
            self.forget_blocks(&mut fc, size.div_ceil(bs), u64::MAX / bs);
            if !size.is_multiple_of(bs) {
                self.zero_partial(f, &mut fc, size, size.next_multiple_of(bs))?;
            }
        }
        Ok(())
    }

    /// Load the folios of the partial blocks at either edge of
    /// `[offset, end)` that zeroing inside a file of `size` bytes touches.
    fn prepare_edges(&self, f: FileId, fc: &mut FileCache, offset: u64, end: u64, size: u64) -> Result<()> {
        let bs = self.block_size();
        if !offset.is_multiple_of(bs) && offset < size {
            self.prepare_partial(f, fc, offset)?;
        }
        if !end.is_multiple_of(bs) && end > offset && end <= size {
            self.prepare_partial(f, fc, end)?;
        }
        Ok(())
    }

    /// Load the folio of the block holding byte `at` if zeroing part of it
    /// will need it (the block holds data), so that no read is left for
    /// after an engine change.
    pub(crate) fn prepare_partial(&self, f: FileId, fc: &mut FileCache, at: u64) -> Result<()> {
        let l = at / self.block_size();
        if !self.fs.lookup(f, l, l + 1)?.is_empty() {
            self.folio_mut(f, fc, at / u64::from(self.opts.folio_size))?;
        }
        Ok(())
    }

    /// Deallocate the whole blocks in the range and zero its partial ones;
    /// the size does not change.
    pub(crate) fn punch(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        // The partial blocks it zeroes, read now: at the start, and at the
        // end of the range or of the file, whichever comes first (a range
        // that ends in the last block's slack zeroes that block to the
        // size), so no read is left for after the engine's change.
        let size = self.fs.size(f)?;
        self.prepare_edges(f, &mut fc, offset, offset.saturating_add(len).min(size), size)?;
        // A hole inside an extent splits it in two.
        self.admit_records(f, 1)?;
        self.fs.punch_hole(f, offset, len)?;
        let size = self.fs.size(f)?;
        let end = (offset + len).min(size);
        self.clear_cached(f, &mut fc, offset, end, end)
    }

    /// After the engine cleared `[offset, forget_end)`: drop the cache's
    /// whole blocks of it, and zero the cached partial blocks at the
    /// edges of `[offset, zero_end)` (the part inside the file).
    fn clear_cached(&self, f: FileId, fc: &mut FileCache, offset: u64, forget_end: u64, zero_end: u64) -> Result<()> {
        let bs = self.block_size();
        let (first, last) = (offset.div_ceil(bs), forget_end / bs);
        if first < last {
            self.forget_blocks(fc, first, last);
        }
        let head_end = offset.next_multiple_of(bs).min(zero_end);
        if offset < zero_end && !offset.is_multiple_of(bs) {
            self.zero_partial(f, fc, offset, head_end)?;
        }
        if !zero_end.is_multiple_of(bs) && zero_end > head_end.max(offset) && zero_end / bs >= first {
            self.zero_partial(f, fc, (zero_end / bs * bs).max(offset), zero_end)?;
        }
        Ok(())
    }

    /// `FALLOC_FL_ZERO_RANGE`: the range reads as zeros and its blocks
    /// are allocated, the size growing past it unless `mode` keeps it. As
    /// ext4 does it, no block moves: the file's dirty data is written back,
    /// the range's holes are allocated unwritten (NoSpace here changes
    /// nothing), then its written blocks become unwritten in place and the
    /// partial blocks at its edges are zeroed, neither of which can fail
    /// once the edges' folios are read. All or nothing.
    pub(crate) fn zero(&self, f: FileId, offset: u64, len: u64, mode: mballoc_fs::FallocateMode) -> Result<()> {
        self.writable()?;
        let end = offset
            .checked_add(len)
            .ok_or_else(|| VolError::InvalidArgument(format!("a range of {len} bytes at {offset} passes 2^64")))?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        // What the range holds in the cache reaches its blocks first, so
        // the conversion covers it (writing back changes nothing a reader
        // sees).
        self.writeback_locked(f, &mut fc)?;
        let size = self.fs.size(f)?;
        let new_size = if mode == mballoc_fs::FallocateMode::ExtendSize { size.max(end) } else { size };
        self.prepare_edges(f, &mut fc, offset, end.min(size), size)?;
        if new_size > size {
            self.zero_tail_before_growth(f, &mut fc, new_size)?;
        }
        // Allocating splits at most two extents; converting, two more.
        self.admit_records(f, 4)?;
        self.engine(self.fs.fallocate(f, offset, len, mode))?;
        self.engine(self.fs.mark_unwritten(f, offset, len))?;
        self.clear_cached(f, &mut fc, offset, end, end.min(new_size))
    }

    /// `FALLOC_FL_COLLAPSE_RANGE`: take the whole blocks
    /// `[offset, offset + len)` out of the file and move what follows
    /// down; the size shrinks by `len`. The file is written back and its
    /// cache dropped first, as ext4 does.
    pub(crate) fn collapse(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        self.shift_range(f, |fs| fs.collapse_range(f, offset, len))
    }

    /// `FALLOC_FL_INSERT_RANGE`: move everything from `offset` up by
    /// `len` whole blocks, leaving a hole; the size grows by `len`.
    pub(crate) fn insert(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        self.shift_range(f, |fs| fs.insert_range(f, offset, len))
    }

    fn shift_range(&self, f: FileId, shift: impl FnOnce(&mballoc_fs::Fs) -> mballoc_fs::Result<()>) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        // Every byte on the device and nothing cached: the extents move
        // under the data, and no folio is left at its old offset.
        self.invalidate(f, &mut fc)?;
        // A moved range can split one extent in two.
        self.admit_records(f, 2)?;
        self.engine(shift(&self.fs))
    }
}
