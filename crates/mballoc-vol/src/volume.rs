//! A mounted volume: the engine, its journal, and the folio cache, behind
//! file operations that carry data.

use crate::cache::{FileCache, Folio};
use crate::device::Device;
use crate::error::{Result, VolError};
use crate::format::{FormatOptions, Superblock, VolumeState, SUPERBLOCK_BYTES};
use crate::home::{Home, ReadMode, Scan};
use crate::wal;
use mballoc_fs::{
    Change, ChangeLog, ExtentState, FallocateMode, FileId, Fs, FsConfig, ImportedFile, LogFailure, MappedExtent,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Read-write or read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    #[default]
    ReadWrite,
    /// Nothing is ever written; mutating calls fail with `ReadOnly`.
    ReadOnly,
}

/// How a volume is mounted.
#[derive(Debug, Clone)]
pub struct MountOptions {
    pub access: Access,
    /// Bytes per cache folio: a power of two from the block size to 2 MiB.
    pub folio_size: u32,
    /// Cached bytes (clean and dirty) before clean folios are dropped.
    pub cache_bytes: u64,
    /// Dirty bytes before a writer writes back.
    pub dirty_bytes: u64,
    /// Engine operations between journal commits (the commit timer); 0
    /// commits only on fsync, sync and unmount.
    pub commit_interval_ops: u64,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            access: Access::ReadWrite,
            folio_size: 2 << 20,
            cache_bytes: 512 << 20,
            dirty_bytes: 128 << 20,
            commit_interval_ops: 1000,
        }
    }
}

/// The most one device write of file data carries, unless a folio is
/// larger: like a block device's largest request.
const MAX_DATA_WRITE: u64 = 2 << 20;

/// Counters of the persistence path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VolumeStats {
    /// Journal transactions written.
    pub transactions: u64,
    /// Journal blocks written.
    pub journal_blocks: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Device flushes.
    pub flushes: u64,
    /// Data bytes written to the device.
    pub data_bytes: u64,
    /// Device writes of file data.
    pub data_writes: u64,
    /// Transactions replayed at mount.
    pub replayed: u64,
}

/// The journal as the engine sees it: changes are encoded as they come and
/// written at commit.
struct Log {
    dev: Arc<dyn Device>,
    running: Mutex<Vec<u8>>,
    home: Mutex<Home>,
    data_written: AtomicBool,
    aborted: AtomicBool,
    transactions: AtomicU64,
    journal_blocks: AtomicU64,
    checkpoints: AtomicU64,
    flushes: AtomicU64,
}

impl Log {
    fn flush(&self) -> Result<()> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.dev.flush().map_err(|e| VolError::io("flushing", e))
    }

    fn checkpoint(&self, home: &mut Home, state: VolumeState) -> Result<()> {
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.flushes.fetch_add(3, Ordering::Relaxed);
        home.checkpoint(&*self.dev, state)
    }

    fn commit_inner(&self) -> Result<()> {
        if self.aborted.load(Ordering::Acquire) {
            return Err(VolError::ReadOnly);
        }
        let mut home = self.home.lock();
        let payload = std::mem::take(&mut *self.running.lock());
        let data = self.data_written.swap(false, Ordering::AcqRel);
        if payload.is_empty() {
            return if data { self.flush() } else { Ok(()) };
        }
        // data=ordered: data the changes describe reaches the device first.
        self.flush()?;
        let sb = home.sb.clone();
        let (bs, log_blocks) = (sb.block_size as usize, u64::from(sb.log_blocks));
        for chunk in wal::chunks(&payload, bs, log_blocks) {
            let blocks = wal::blocks_for(chunk.len(), bs);
            if home.head + blocks > log_blocks {
                self.checkpoint(&mut home, VolumeState::Mounted)?;
            }
            let tx = wal::frame(chunk, home.next_seq, home.sb.checkpoints, sb.seed(), bs);
            let at = sb.log_start + home.head;
            self.dev.write_at(sb.offset(at), &tx).map_err(|e| VolError::io("writing the journal", e))?;
            self.flush()?;
            for c in wal::decode(chunk).expect("an encoded transaction decodes") {
                if let Err(e) = home.state.apply(&c) {
                    panic!("committed change {c:?} does not follow the committed state: {e}");
                }
            }
            home.head += blocks;
            home.next_seq += 1;
            self.transactions.fetch_add(1, Ordering::Relaxed);
            self.journal_blocks.fetch_add(blocks, Ordering::Relaxed);
        }
        if home.head > log_blocks / 2 {
            self.checkpoint(&mut home, VolumeState::Mounted)?;
        }
        Ok(())
    }
}

impl ChangeLog for Log {
    fn record(&self, change: Change) {
        wal::encode(&change, &mut self.running.lock());
    }

    fn commit(&self) -> std::result::Result<(), LogFailure> {
        self.commit_inner().map_err(|e| {
            self.aborted.store(true, Ordering::Release);
            LogFailure(e.to_string())
        })
    }
}

/// A mounted volume.
///
/// ```
/// use mballoc_vol::{FormatOptions, MemDevice, MountOptions, Volume};
/// use std::sync::Arc;
///
/// let dev = Arc::new(MemDevice::new(64 << 20));
/// Volume::format(dev.clone(), &FormatOptions::default())?;
/// let vol = Volume::open(dev.clone(), MountOptions::default())?;
/// let f = vol.create()?;
/// vol.write(f, 0, b"hello, extents")?;
/// vol.fsync(f)?; // durable: data first, then the journal
/// drop(vol);     // a crash: no unmount
///
/// let vol = Volume::open(dev, MountOptions::default())?; // replays the journal
/// let mut buf = [0u8; 14];
/// assert_eq!(vol.read(f, 0, &mut buf)?, 14);
/// assert_eq!(&buf, b"hello, extents");
/// # Ok::<(), mballoc_vol::VolError>(())
/// ```
pub struct Volume {
    dev: Arc<dyn Device>,
    fs: Fs,
    log: Arc<Log>,
    sb: Superblock,
    opts: MountOptions,
    files: Mutex<HashMap<u64, Arc<Mutex<FileCache>>>>,
    cached: AtomicU64,
    dirty: AtomicU64,
    live_files: AtomicU64,
    data_bytes: AtomicU64,
    data_writes: AtomicU64,
    replayed: u64,
}

fn uuid() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut out = [0u8; 16];
    for (i, half) in out.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.write_u32(std::process::id());
        h.write_usize(i);
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}

/// Extents as the engine holds them: no longer than an extent may be.
fn engine_extents(f: &crate::state::FileState) -> Vec<MappedExtent> {
    let mut out = Vec::new();
    for e in f.extent_list() {
        let state = if e.unwritten { ExtentState::Unwritten } else { ExtentState::Written };
        let (mut l, mut p, mut n) = (e.logical, e.physical, e.len);
        while n > 0 {
            let len = n.min(u64::from(state.max_len()));
            out.push(MappedExtent { logical: l, physical: p, len: len as u32, state });
            l += len;
            p += len;
            n -= len;
        }
    }
    out
}

impl Volume {
    /// Write an empty volume onto `dev`, using all of it.
    pub fn format(dev: Arc<dyn Device>, opts: &FormatOptions) -> Result<Superblock> {
        let sb = Superblock::layout(dev.len(), opts, uuid())?;
        let bs = u64::from(sb.block_size);
        // No old inode or journal block may survive under the new seed.
        let zero = vec![0u8; (256 * bs) as usize];
        for (start, n) in [(sb.log_start, 2), (sb.itable_start, sb.itable_blocks())] {
            let mut b = start;
            while b < start + n {
                let k = (start + n - b).min(256);
                dev.write_at(sb.offset(b), &zero[..(k * bs) as usize]).map_err(|e| VolError::io("formatting", e))?;
                b += k;
            }
        }
        let mut home = Home::empty(sb.clone());
        home.state.dirty_groups = (0..sb.groups).collect();
        home.checkpoint(&*dev, VolumeState::Clean)?;
        Ok(home.sb)
    }

    /// Mount: check the superblock and every structure, replay the journal
    /// and, read-write, write the replayed state home. A volume that fails
    /// a check is not written to.
    pub fn open(dev: Arc<dyn Device>, opts: MountOptions) -> Result<Volume> {
        Self::open_with(dev, opts, |_| {})
    }

    /// [`Volume::open`] with the engine's allocation policy chosen by
    /// `policy`: tunables, normalization, locality groups, stream goals,
    /// concurrency and stream placement. Policy is a mount-time choice,
    /// like ext4's mount options and sysfs knobs: nothing of it is
    /// persisted, and what it may not change (the geometry, the dirty and
    /// commit limits the volume runs the engine with) is kept.
    pub fn open_with(dev: Arc<dyn Device>, opts: MountOptions, policy: impl FnOnce(&mut FsConfig)) -> Result<Volume> {
        let bs_ok = opts.folio_size.is_power_of_two() && opts.folio_size <= 2 << 20;
        let mut head = vec![0u8; SUPERBLOCK_BYTES];
        dev.read_at(0, &mut head).map_err(|e| VolError::io("reading the superblock", e))?;
        let sb = Superblock::decode(&head, dev.len())?;
        if !bs_ok || opts.folio_size < sb.block_size {
            return Err(VolError::InvalidArgument(format!(
                "folio size {} must be a power of two from the block size {} to 2 MiB",
                opts.folio_size, sb.block_size
            )));
        }
        let Scan { home, replayed, stale_groups, stale_counters, .. } =
            Home::read(&*dev, sb.clone(), ReadMode::Strict)?;
        let geo = sb.geometry();
        let mut chosen = FsConfig::new(geo);
        policy(&mut chosen);
        let mut cfg = FsConfig::new(geo);
        cfg.tunables = chosen.tunables;
        cfg.normalization = chosen.normalization;
        cfg.locality_groups = chosen.locality_groups;
        cfg.stream_goals = chosen.stream_goals;
        cfg.concurrency = chosen.concurrency;
        cfg.stream_placement = chosen.stream_placement;
        cfg.dirty_limit_blocks = u64::MAX;
        cfg.commit_interval_ops = opts.commit_interval_ops;
        let files: Vec<ImportedFile> = home
            .state
            .files
            .iter()
            .map(|(&ino, f)| ImportedFile { ino, size: f.size, extents: engine_extents(f) })
            .collect();
        let live = files.len() as u64;
        let mut fs = Fs::import(cfg, &home.state.bitmaps, files)?;
        let needs_write = replayed > 0 || !stale_groups.is_empty() || stale_counters;
        let log = Arc::new(Log {
            dev: dev.clone(),
            running: Mutex::new(Vec::new()),
            home: Mutex::new(home),
            data_written: AtomicBool::new(false),
            aborted: AtomicBool::new(opts.access == Access::ReadOnly),
            transactions: AtomicU64::new(0),
            journal_blocks: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        });
        if opts.access == Access::ReadWrite && needs_write {
            let mut h = log.home.lock();
            log.checkpoint(&mut h, VolumeState::Mounted)?;
        }
        fs.attach_change_log(log.clone());
        Ok(Volume {
            dev,
            fs,
            log,
            sb,
            opts,
            files: Mutex::new(HashMap::new()),
            cached: AtomicU64::new(0),
            dirty: AtomicU64::new(0),
            live_files: AtomicU64::new(live),
            data_bytes: AtomicU64::new(0),
            data_writes: AtomicU64::new(0),
            replayed: replayed as u64,
        })
    }

    /// The engine underneath (extent maps, allocator statistics).
    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    /// The superblock as mounted.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// Counters so far.
    pub fn stats(&self) -> VolumeStats {
        VolumeStats {
            transactions: self.log.transactions.load(Ordering::Relaxed),
            journal_blocks: self.log.journal_blocks.load(Ordering::Relaxed),
            checkpoints: self.log.checkpoints.load(Ordering::Relaxed),
            flushes: self.log.flushes.load(Ordering::Relaxed),
            data_bytes: self.data_bytes.load(Ordering::Relaxed),
            data_writes: self.data_writes.load(Ordering::Relaxed),
            replayed: self.replayed,
        }
    }

    fn writable(&self) -> Result<()> {
        if self.log.aborted.load(Ordering::Acquire) {
            Err(VolError::ReadOnly)
        } else {
            Ok(())
        }
    }

    fn block_size(&self) -> u64 {
        u64::from(self.sb.block_size)
    }

    fn folio_blocks(&self) -> u64 {
        u64::from(self.opts.folio_size) / self.block_size()
    }

    /// Every file's cache, taken out of the table's lock.
    fn caches(&self) -> Vec<(u64, Arc<Mutex<FileCache>>)> {
        self.files.lock().iter().map(|(&k, v)| (k, v.clone())).collect()
    }

    fn cache_of(&self, f: FileId) -> Arc<Mutex<FileCache>> {
        self.files.lock().entry(f.0).or_default().clone()
    }

    /// Every live file.
    pub fn files(&self) -> Vec<FileId> {
        let mut v = self.fs.files();
        v.sort_unstable();
        v
    }

    /// Create an empty file, open once.
    pub fn create(&self) -> Result<FileId> {
        self.writable()?;
        let n = self.live_files.fetch_add(1, Ordering::AcqRel);
        if n >= u64::from(self.sb.inode_count) {
            self.live_files.fetch_sub(1, Ordering::AcqRel);
            return Err(VolError::NoInodes(self.sb.inode_count));
        }
        self.fs.create().map_err(|e| {
            self.live_files.fetch_sub(1, Ordering::AcqRel);
            e.into()
        })
    }

    /// Open another handle.
    pub fn open_file(&self, f: FileId) -> Result<()> {
        Ok(self.fs.open(f)?)
    }

    /// Close a handle; the last close gives back the file's preallocations.
    pub fn close(&self, f: FileId) -> Result<()> {
        Ok(self.fs.close(f)?)
    }

    /// File size in bytes.
    pub fn size(&self, f: FileId) -> Result<u64> {
        Ok(self.fs.size(f)?)
    }

    /// The file's allocated extents.
    pub fn extents(&self, f: FileId) -> Result<Vec<MappedExtent>> {
        Ok(self.fs.extents(f)?)
    }

    /// A folio with the file's data as the device has it.
    fn fill(&self, f: FileId, idx: u64) -> Result<Folio> {
        let (bs, fb) = (self.block_size(), self.folio_blocks());
        let mut folio = Folio::zeroed(self.opts.folio_size as usize, fb as usize);
        let first = idx * fb;
        for e in self.fs.lookup(f, first, first + fb)? {
            if e.state != ExtentState::Written {
                continue;
            }
            let (a, b) = (e.logical.max(first), e.logical_end().min(first + fb));
            let p = e.physical_of(a);
            let dst = &mut folio.data[((a - first) * bs) as usize..((b - first) * bs) as usize];
            self.dev.read_at(p * bs, dst).map_err(|e| VolError::io(format!("reading block {p}"), e))?;
        }
        self.cached.fetch_add(u64::from(self.opts.folio_size), Ordering::AcqRel);
        Ok(folio)
    }

    /// Folio `idx` of the file, filled from the device if not cached.
    fn folio_mut<'a>(&self, f: FileId, fc: &'a mut FileCache, idx: u64) -> Result<&'a mut Folio> {
        match fc.folios.entry(idx) {
            std::collections::btree_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::btree_map::Entry::Vacant(v) => Ok(v.insert(self.fill(f, idx)?)),
        }
    }

    /// A buffered write: the data goes to the cache, blocks are reserved
    /// now and allocated at writeback. NoSpace changes nothing.
    pub fn write(&self, f: FileId, offset: u64, data: &[u8]) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        self.fs.write(f, offset, data.len() as u64)?;
        let (bs, fsz) = (self.block_size(), u64::from(self.opts.folio_size));
        let mut at = 0usize;
        let mut newly_dirty = 0;
        while at < data.len() {
            let pos = offset + at as u64;
            let idx = pos / fsz;
            let in_folio = (pos % fsz) as usize;
            let n = (fsz as usize - in_folio).min(data.len() - at);
            self.folio_mut(f, &mut fc, idx)?;
            let folio = fc.folios.get_mut(&idx).expect("inserted above");
            folio.data[in_folio..in_folio + n].copy_from_slice(&data[at..at + n]);
            let (b0, b1) = (in_folio as u64 / bs, ((in_folio + n) as u64).div_ceil(bs));
            for b in b0..b1 {
                if folio.set_dirty(b as usize) {
                    newly_dirty += 1;
                }
            }
            at += n;
        }
        fc.dirty_blocks += newly_dirty;
        let dirty = self.dirty.fetch_add(newly_dirty * bs, Ordering::AcqRel) + newly_dirty * bs;
        if dirty > self.opts.dirty_bytes {
            self.writeback_locked(f, &mut fc)?;
            drop(fc);
            self.balance(f)?;
        } else if self.cached.load(Ordering::Acquire) > self.opts.cache_bytes {
            let dropped = fc.drop_clean();
            self.cached.fetch_sub(dropped, Ordering::AcqRel);
            drop(fc);
            self.balance(f)?;
        }
        Ok(())
    }

    /// Write back and drop clean folios of other files until the cache is
    /// under its limits. Files busy in another thread are skipped.
    fn balance(&self, except: FileId) -> Result<()> {
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
    fn writeback_locked(&self, f: FileId, fc: &mut FileCache) -> Result<()> {
        if fc.dirty_blocks == 0 {
            return Ok(());
        }
        let (bs, fb) = (self.block_size(), self.folio_blocks());
        let runs = fc.dirty_runs(fb);
        self.fs.writeback(f)?;
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
        Ok(())
    }

    /// Read up to `buf.len()` bytes at `offset`; returns how many (fewer at
    /// the end of the file).
    pub fn read(&self, f: FileId, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        let size = self.fs.size(f)?;
        if offset >= size {
            return Ok(0);
        }
        let len = buf.len().min((size - offset) as usize);
        let fsz = u64::from(self.opts.folio_size);
        let mut at = 0;
        while at < len {
            let pos = offset + at as u64;
            let idx = pos / fsz;
            let in_folio = (pos % fsz) as usize;
            let n = (fsz as usize - in_folio).min(len - at);
            self.folio_mut(f, &mut fc, idx)?;
            buf[at..at + n].copy_from_slice(&fc.folios[&idx].data[in_folio..in_folio + n]);
            at += n;
        }
        if self.cached.load(Ordering::Acquire) > self.opts.cache_bytes {
            let dropped = fc.drop_clean();
            self.cached.fetch_sub(dropped, Ordering::AcqRel);
        }
        Ok(len)
    }

    fn check_aligned(&self, offset: u64, len: u64) -> Result<()> {
        let bs = self.block_size();
        if offset % bs != 0 || len % bs != 0 || len == 0 {
            return Err(VolError::InvalidArgument(format!(
                "unbuffered I/O needs a non-empty range aligned to {bs} bytes (offset {offset}, length {len})"
            )));
        }
        Ok(())
    }

    /// Drop the file's cached folios after writing back their dirty data,
    /// so that unbuffered I/O sees and leaves no stale copy.
    fn invalidate(&self, f: FileId, fc: &mut FileCache) -> Result<()> {
        self.writeback_locked(f, fc)?;
        let dropped = fc.drop_clean();
        self.cached.fetch_sub(dropped, Ordering::AcqRel);
        Ok(())
    }

    /// Unbuffered write (`O_DIRECT`): block-aligned; holes are allocated
    /// unwritten, the data written, then the blocks recorded written and
    /// the size grown.
    pub fn write_direct(&self, f: FileId, offset: u64, data: &[u8]) -> Result<()> {
        self.writable()?;
        let len = data.len() as u64;
        self.check_aligned(offset, len)?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        self.invalidate(f, &mut fc)?;
        self.fs.fallocate(f, offset, len, FallocateMode::KeepSize)?;
        let bs = self.block_size();
        let (first, end) = (offset / bs, (offset + len) / bs);
        for e in self.fs.lookup(f, first, end)? {
            let (a, b) = (e.logical.max(first), e.logical_end().min(end));
            let p = e.physical_of(a);
            let bytes = &data[((a - first) * bs) as usize..((b - first) * bs) as usize];
            self.dev.write_at(p * bs, bytes).map_err(|e| VolError::io(format!("writing block {p}"), e))?;
            self.data_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            self.data_writes.fetch_add(1, Ordering::Relaxed);
        }
        self.log.data_written.store(true, Ordering::Release);
        self.fs.mark_written(f, offset, len)?;
        if offset + len > self.fs.size(f)? {
            self.fs.truncate(f, offset + len)?;
        }
        Ok(())
    }

    /// Unbuffered read (`O_DIRECT`): block-aligned, straight from the
    /// device after writing back cached data.
    pub fn read_direct(&self, f: FileId, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.check_aligned(offset, buf.len() as u64)?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        if !matches!(self.opts.access, Access::ReadOnly) && fc.dirty_blocks > 0 {
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

    /// Allocate unwritten blocks for the range's holes.
    pub fn fallocate(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let _fc = cache.lock();
        Ok(self.fs.fallocate(f, offset, len, mode)?)
    }

    /// Zero `[from, to)` inside one block of the cache; if the block holds
    /// data (mapped, or dirty), mark it dirty so the zeroes reach the
    /// device.
    fn zero_partial(&self, f: FileId, fc: &mut FileCache, from: u64, to: u64) -> Result<()> {
        let (bs, fsz, fb) = (self.block_size(), u64::from(self.opts.folio_size), self.folio_blocks());
        let l = from / bs;
        let idx = from / fsz;
        let mapped = !self.fs.lookup(f, l, l + 1)?.is_empty();
        let cached_dirty = fc.folios.get(&idx).is_some_and(|x| x.is_dirty((l % fb) as usize));
        if !mapped && !cached_dirty {
            if let Some(folio) = fc.folios.get_mut(&idx) {
                folio.data[(from % fsz) as usize..((to - 1) % fsz + 1) as usize].fill(0);
            }
            return Ok(());
        }
        self.folio_mut(f, fc, idx)?;
        // A mapped block needs nothing from the engine: writeback writes
        // every dirty cached block, and `mark_written` converts it.
        let folio = fc.folios.get_mut(&idx).expect("inserted above");
        folio.data[(from % fsz) as usize..((to - 1) % fsz + 1) as usize].fill(0);
        if folio.set_dirty((l % fb) as usize) {
            fc.dirty_blocks += 1;
            self.dirty.fetch_add(bs, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Forget cached data of logical blocks `[first, end)`, which the file
    /// no longer maps, and zero it.
    fn forget_blocks(&self, fc: &mut FileCache, first: u64, end: u64) {
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
            folio.data[((a - idx * fb) * bs) as usize..((b - idx * fb) * bs) as usize].fill(0);
            if a == idx * fb && b == (idx + 1) * fb {
                fc.folios.remove(&idx);
                self.cached.fetch_sub(u64::from(self.opts.folio_size), Ordering::AcqRel);
            }
        }
        fc.dirty_blocks -= cleaned;
        self.dirty.fetch_sub(cleaned * bs, Ordering::AcqRel);
    }

    /// Set the size; shrinking frees the blocks past the end (after the
    /// next commit) and zeroes the rest of the last block.
    pub fn truncate(&self, f: FileId, size: u64) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        let old = self.fs.size(f)?;
        self.fs.truncate(f, size)?;
        if size < old {
            let bs = self.block_size();
            self.forget_blocks(&mut fc, size.div_ceil(bs), u64::MAX / bs);
            if size % bs != 0 {
                self.zero_partial(f, &mut fc, size, size.next_multiple_of(bs))?;
            }
        }
        Ok(())
    }

    /// Deallocate the whole blocks in the range and zero its partial ones;
    /// the size does not change.
    pub fn punch_hole(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        self.fs.punch_hole(f, offset, len)?;
        let bs = self.block_size();
        let size = self.fs.size(f)?;
        let end = (offset + len).min(size);
        let (first, last) = (offset.div_ceil(bs), end / bs);
        if first < last {
            self.forget_blocks(&mut fc, first, last);
        }
        // The partial blocks at either edge, inside the file.
        let head_end = offset.next_multiple_of(bs).min(end);
        if offset < end && offset % bs != 0 {
            self.zero_partial(f, &mut fc, offset, head_end)?;
        }
        if end % bs != 0 && end > head_end.max(offset) && end / bs >= first {
            self.zero_partial(f, &mut fc, (end / bs * bs).max(offset), end)?;
        }
        Ok(())
    }

    /// Remove the file and its cached data.
    pub fn unlink(&self, f: FileId) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        self.fs.unlink(f)?;
        self.live_files.fetch_sub(1, Ordering::AcqRel);
        let bs = self.block_size();
        self.dirty.fetch_sub(fc.dirty_blocks * bs, Ordering::AcqRel);
        self.cached.fetch_sub(fc.folios.len() as u64 * u64::from(self.opts.folio_size), Ordering::AcqRel);
        *fc = FileCache::default();
        self.files.lock().remove(&f.0);
        Ok(())
    }

    /// Make the file's data and metadata durable: write back its dirty
    /// folios, then commit the journal (which flushes the data first).
    pub fn fsync(&self, f: FileId) -> Result<()> {
        self.writable()?;
        {
            let cache = self.cache_of(f);
            let mut fc = cache.lock();
            self.fs.size(f)?;
            self.writeback_locked(f, &mut fc)?;
        }
        self.fs.try_commit()?;
        Ok(())
    }

    /// Write back one file's dirty data without committing.
    pub fn writeback(&self, f: FileId) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        self.writeback_locked(f, &mut fc)
    }

    /// Write back every file and commit.
    pub fn sync(&self) -> Result<()> {
        self.writable()?;
        for (ino, c) in self.caches() {
            let mut fc = c.lock();
            match self.writeback_locked(FileId(ino), &mut fc) {
                Err(VolError::Fs(mballoc_fs::FsError::Unlinked(_))) => {}
                r => r?,
            }
        }
        self.fs.try_commit()?;
        Ok(())
    }

    /// Sync, checkpoint and mark the volume clean.
    pub fn unmount(self) -> Result<()> {
        if self.opts.access == Access::ReadOnly {
            return Ok(());
        }
        self.sync()?;
        self.fs.discard_preallocations();
        let mut home = self.log.home.lock();
        self.log.checkpoint(&mut home, VolumeState::Clean)
    }

    /// The device underneath.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.dev
    }
}
