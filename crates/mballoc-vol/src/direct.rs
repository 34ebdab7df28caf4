//! I/O that bypasses the folio cache: unbuffered I/O (`O_DIRECT`), and
//! buffered writes long enough to stream (`write_through_bytes`). Both
//! take block-aligned ranges straight to and from the device; cached
//! copies are written back and dropped first so neither path sees a stale
//! copy. An unbuffered write allocates the holes unwritten, writes the
//! data, then records the blocks written. A streamed write is a buffered
//! write written back at once: its blocks are reserved and allocated as
//! writeback allocates delayed blocks (the same policy, and the place a
//! writeback of that write alone gives it), so only the copy through a
//! folio is saved.

use crate::cache::FileCache;
use crate::error::{Result, VolError};
use crate::volume::Volume;
use mballoc_fs::{ExtentState, FallocateMode, FileId};
use std::sync::atomic::Ordering;

impl Volume {
    pub(crate) fn check_aligned(&self, offset: u64, len: u64) -> Result<()> {
        let bs = self.block_size();
        if !offset.is_multiple_of(bs) || !len.is_multiple_of(bs) || len == 0 {
            return Err(VolError::InvalidArgument(format!(
                "unbuffered I/O needs a non-empty range aligned to {bs} bytes (offset {offset}, length {len})"
            )));
        }
        Ok(())
    }

    /// Drop the file's cached folios after writing back their dirty data,
    /// so that unbuffered I/O sees and leaves no stale copy.
    pub(crate) fn invalidate(&self, f: FileId, fc: &mut FileCache) -> Result<()> {
        self.writeback_locked(f, fc)?;
        let dropped = fc.drop_clean();
        self.cached.fetch_sub(dropped, Ordering::AcqRel);
        Ok(())
    }

    /// Unbuffered write (`O_DIRECT`): block-aligned; holes are allocated
    /// unwritten, the data written, then the blocks recorded written and
    /// the size grown.
    pub(crate) fn write_uncached(&self, f: FileId, offset: u64, data: &[u8]) -> Result<()> {
        self.writable()?;
        let len = data.len() as u64;
        self.check_aligned(offset, len)?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        // Zeroed past the old end first; the invalidation then drops that
        // block's cached copy, which this write may overwrite.
        self.zero_tail_before_growth(f, &mut fc, offset + len)?;
        self.invalidate(f, &mut fc)?;
        self.admit_records(f, 2)?;
        self.engine(self.fs.fallocate(f, offset, len, FallocateMode::KeepSize))?;
        self.write_to_blocks(f, offset, data)?;
        self.fs.mark_written(f, offset, len)?;
        if offset + len > self.fs.size(f)? {
            self.fs.truncate(f, offset + len)?;
        }
        Ok(())
    }

    /// A buffered write of whole blocks written straight to its blocks:
    /// reserved as delayed, allocated as writeback allocates, written from
    /// `data`, then recorded written and the size logged, as writeback
    /// records a folio's blocks.
    pub(crate) fn write_streamed(&self, f: FileId, offset: u64, data: &[u8]) -> Result<()> {
        self.writable()?;
        let len = data.len() as u64;
        self.check_aligned(offset, len)?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        self.zero_tail_before_growth(f, &mut fc, offset + len)?;
        if !fc.folios.is_empty() {
            self.invalidate(f, &mut fc)?;
        }
        // A write can split one extent in three.
        self.admit_records(f, 2)?;
        self.fs.write(f, offset, len)?;
        // Nothing else of the file is delayed (the cache was written back),
        // so this allocates exactly the blocks just reserved. Should it
        // fail, the reserved blocks wait in the cache like any write's.
        if self.engine(self.fs.writeback(f)).is_err() {
            return self.cache_instead(f, &mut fc, offset, data);
        }
        if self.write_to_blocks(f, offset, data).is_err() {
            return self.cache_instead(f, &mut fc, offset, data);
        }
        self.fs.mark_written(f, offset, len)?;
        self.engine(self.fs.log_size(f))
    }

    /// Write `data` (whole blocks at `offset`) to the blocks the file maps
    /// there, one device write per mapped piece; the first failure stops
    /// it, with some pieces perhaps written.
    fn write_to_blocks(&self, f: FileId, offset: u64, data: &[u8]) -> Result<()> {
        let bs = self.block_size();
        let (first, end) = (offset / bs, (offset + data.len() as u64) / bs);
        for e in self.fs.lookup(f, first, end)? {
            let (a, b) = (e.logical.max(first), e.logical_end().min(end));
            let p = e.physical_of(a);
            let bytes = &data[((a - first) * bs) as usize..((b - first) * bs) as usize];
            self.dev.write_at(p * bs, bytes).map_err(|e| VolError::io(format!("writing block {p}"), e))?;
            self.data_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            self.data_writes.fetch_add(1, Ordering::Relaxed);
        }
        self.log.data_written.store(true, Ordering::Release);
        Ok(())
    }

    /// A streamed write the device refused (or whose blocks could not be
    /// mapped): its data waits in the cache as any buffered write's does,
    /// for a writeback whose error, if the device fails again, fsync
    /// reports. The write itself succeeded, as a buffered write succeeds
    /// before its writeback; nothing it was given is lost.
    fn cache_instead(&self, f: FileId, fc: &mut FileCache, offset: u64, data: &[u8]) -> Result<()> {
        self.load_folios(f, fc, offset, offset + data.len() as u64)?;
        self.copy_in(fc, offset, data);
        Ok(())
    }

    /// Whether a buffered write of `len` bytes at `offset` is streamed
    /// ([`crate::MountOptions::write_through_bytes`]).
    pub(crate) fn streams(&self, offset: u64, len: usize) -> bool {
        let min = self.opts.write_through_bytes;
        let bs = self.block_size();
        // A range past 2^64 goes the cached way, which refuses it.
        let fits = offset.checked_add(len as u64).is_some();
        min > 0 && fits && len as u64 >= min && offset.is_multiple_of(bs) && (len as u64).is_multiple_of(bs)
    }

    /// Unbuffered read (`O_DIRECT`): block-aligned, straight from the
    /// device after writing back cached data.
    pub fn read_direct(&self, f: FileId, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.check_aligned(offset, buf.len() as u64)?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        if self.opts.access.writes() && fc.dirty_blocks > 0 {
            self.invalidate(f, &mut fc)?;
        }
        let size = self.fs.size(f)?;
        if offset >= size {
            return Ok(0);
        }
        let len = buf.len().min((size - offset) as usize);
        let bs = self.block_size();
        let (first, end) = (offset / bs, (offset + len as u64).div_ceil(bs));
        buf[..len].fill(0);
        for e in self.fs.lookup(f, first, end)? {
            if e.state != ExtentState::Written {
                continue;
            }
            // One device read per piece; the last block may pass the end
            // of the file, so its tail goes through a scratch block.
            let (a, b) = (e.logical.max(first), e.logical_end().min(end));
            let p = e.physical_of(a);
            let at = ((a - first) * bs) as usize;
            let want = (((b - a) * bs) as usize).min(len - at);
            let whole = want / bs as usize * bs as usize;
            let io = |e| VolError::io(format!("reading block {p}"), e);
            self.dev.read_at(p * bs, &mut buf[at..at + whole]).map_err(io)?;
            if whole < want {
                let mut block = vec![0u8; bs as usize];
                self.dev.read_at((p + whole as u64 / bs) * bs, &mut block).map_err(io)?;
                buf[at + whole..at + want].copy_from_slice(&block[..want - whole]);
            }
        }
        Ok(len)
    }
}
