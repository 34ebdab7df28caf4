//! The file system engine: files and their operations. The allocation path
//! and the checker live in the submodules.

mod alloc_path;
mod check;
mod import;
mod streams;

pub use import::ImportedFile;
pub use streams::{StreamPlacement, APPEND_WINDOW_MAX};

use crate::change_log::{Change, ChangeLog};
use crate::error::{FsError, Result};
use crate::extent_map::{ExtentMap, ExtentState, MappedExtent, MAX_UNWRITTEN_LEN};
use crate::journal::{Journal, JournalStats, WhenBusy};
use crate::normalize::{Normalization, MAX_LOGICAL_BLOCKS};
use crate::percpu::{cpu_slot, FileTable, PerCpu};
use crate::prealloc::{GroupPa, InodePas, LocalityGroup};
use crate::ranges::RangeSet;
use crate::space::Space;
use mballoc::{Allocator, Concurrency, Geometry, Tunables};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// A file's number (its inode number). Numbers are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u64);

/// First inode number handed to a file (ext4's first non-reserved inode
/// after `lost+found`).
const FIRST_INO: u64 = 12;

/// What `fallocate` does to the file size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FallocateMode {
    /// Grow the size to cover the range.
    #[default]
    ExtendSize,
    /// Leave the size alone (`FALLOC_FL_KEEP_SIZE`).
    KeepSize,
}

/// How a FIEMAP-style extent is backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FiemapKind {
    /// Allocated and written.
    Written,
    /// Allocated, reads as zeroes (`FIEMAP_EXTENT_UNWRITTEN`).
    Unwritten,
    /// Dirty data without blocks yet (`FIEMAP_EXTENT_DELALLOC`).
    Delayed,
}

/// One extent as FIEMAP would report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiemapExtent {
    /// First logical block.
    pub logical: u64,
    /// First physical block; `None` for delayed data.
    pub physical: Option<u64>,
    /// Blocks.
    pub len: u64,
    /// Written, unwritten or delayed.
    pub kind: FiemapKind,
}

/// How the engine is set up.
#[derive(Debug, Clone)]
pub struct FsConfig {
    /// The volume's shape.
    pub geometry: Geometry,
    /// Allocator knobs; `mb_stream_req` and `mb_group_prealloc` steer this layer.
    pub tunables: Tunables,
    /// Window sizes for stream requests.
    pub normalization: Normalization,
    /// Inodes per group: a file's home group is its inode's group, as in
    /// ext4 (default: one inode per 16 KiB, mke2fs's default ratio).
    pub inodes_per_group: u32,
    /// Locality groups (one per CPU in the kernel).
    pub locality_groups: usize,
    /// Dirty blocks (delayed or written-into-unwritten) that start background
    /// writeback, oldest file first, down to half of it. `u64::MAX` turns it off.
    pub dirty_limit_blocks: u64,
    /// Operations between automatic commits (the journal timer); 0 = only
    /// on fsync, sync or explicit commit.
    pub commit_interval_ops: u64,
    /// Extra metadata ranges `(start, len)` never allocated.
    pub reserved: Vec<(u64, u64)>,
    /// Stream goals (default `min(CPUs, groups / 4)`).
    pub stream_goals: Option<u32>,
    /// Lock-free, sharded shared state, or the pre-2025 kernel's locks.
    pub concurrency: Concurrency,
    /// Placement of fallocate appends: per-file streams or ext4's.
    pub stream_placement: StreamPlacement,
}

impl FsConfig {
    /// Defaults for a volume of this shape.
    pub fn new(geometry: Geometry) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ipg = (u64::from(geometry.blocks_per_group()) * u64::from(geometry.block_size()) / 16384).max(1);
        FsConfig {
            geometry,
            tunables: Tunables::default(),
            normalization: Normalization::KernelWindows,
            inodes_per_group: ipg.min(u64::from(u32::MAX)) as u32,
            locality_groups: cpus,
            dirty_limit_blocks: (geometry.total_blocks() / 10).clamp(256, 1 << 18),
            commit_interval_ops: 1000,
            reserved: Vec::new(),
            stream_goals: None,
            concurrency: Concurrency::Scalable,
            stream_placement: StreamPlacement::PerFile,
        }
    }
}

/// Counters of the file layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsStats {
    /// Requests passed to the allocator.
    pub alloc_requests: u64,
    /// Requests served from a file's own preallocation.
    pub inode_pa_hits: u64,
    /// Requests served from a locality group.
    pub group_pa_hits: u64,
    /// Inode preallocations created.
    pub inode_pas_created: u64,
    /// Locality-group runs created.
    pub group_pas_created: u64,
    /// Blocks put into preallocations.
    pub preallocated: u64,
    /// Unused preallocated blocks given back.
    pub discarded: u64,
    /// Contiguous dirty runs written back.
    pub writeback_runs: u64,
    /// Times allocation pressure discarded every preallocation and committed.
    pub reclaims: u64,
    /// Transactions committed, pending records and merges.
    pub journal: JournalStats,
}

#[derive(Default)]
struct Counters {
    alloc_requests: AtomicU64,
    inode_pa_hits: AtomicU64,
    group_pa_hits: AtomicU64,
    inode_pas_created: AtomicU64,
    group_pas_created: AtomicU64,
    preallocated: AtomicU64,
    discarded: AtomicU64,
    writeback_runs: AtomicU64,
    reclaims: AtomicU64,
}

fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

struct Inode {
    id: u64,
    size: u64,
    map: ExtentMap,
    delayed: RangeSet,
    dirty_unwritten: RangeSet,
    open: u32,
    home_group: u32,
    on_dirty_list: bool,
    unlinked: bool,
}

struct FileNode {
    inode: Mutex<Inode>,
    /// Separate from the inode lock so that pressure discards can take a
    /// file's preallocations while another thread holds that file.
    pas: Mutex<InodePas>,
}

/// The file system engine. Every method takes `&self`; files are locked one
/// at a time, so the engine can be shared between threads.
///
/// ```
/// use mballoc::Geometry;
/// use mballoc_fs::{Fs, FsConfig};
///
/// let fs = Fs::new(FsConfig::new(Geometry::new(4096, 1 << 18)?))?;
/// let f = fs.create()?;
/// fs.write(f, 0, 12 << 20)?; // 12 MiB, delayed: no blocks yet
/// fs.fsync(f)?;              // one allocation for the whole run
/// assert_eq!(fs.extents(f)?.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Fs {
    alloc: Allocator,
    cfg: FsConfig,
    block_bits: u32,
    files: FileTable<Arc<FileNode>>,
    next_ino: AtomicU64,
    lgs: Vec<Mutex<LocalityGroup>>,
    journal: Journal,
    space: Space,
    pa_free: PerCpu<AtomicI64>,
    dirty: AtomicU64,
    dirty_files: Mutex<VecDeque<u64>>,
    ops: AtomicU64,
    local_ops: PerCpu<AtomicU64>,
    metadata_blocks: u64,
    counters: PerCpu<Counters>,
    log: Option<Arc<dyn ChangeLog>>,
    windows_in_flight: PerCpu<AtomicU64>,
}

/// A preallocation window on its way from the allocator to its pool,
/// counted while it is visible to neither: a thread short of promised
/// blocks waits for such windows to land before it counts a failed attempt
/// (`map_range`). Dropping the guard ends the flight. Counted in the
/// thread's own slot, which is read only on that rare path.
struct WindowInFlight<'a>(&'a AtomicU64);

impl Drop for WindowInFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether requests may grow into preallocation windows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Normalize {
    Yes,
    No,
}

impl Fs {
    /// Build an engine on an empty volume.
    pub fn new(cfg: FsConfig) -> Result<Fs> {
        if cfg.locality_groups == 0 {
            return Err(FsError::InvalidConfig("at least one locality group is needed".into()));
        }
        if cfg.inodes_per_group == 0 {
            return Err(FsError::InvalidConfig("inodes_per_group must be positive".into()));
        }
        if let Normalization::Table(t) = &cfg.normalization {
            if t.largest() > cfg.geometry.blocks_per_group() {
                return Err(FsError::InvalidConfig(format!(
                    "prealloc_table entry {} exceeds the group size {}",
                    t.largest(),
                    cfg.geometry.blocks_per_group()
                )));
            }
        }
        let mut b = Allocator::builder(cfg.geometry).tunables(cfg.tunables).concurrency(cfg.concurrency);
        for &(s, l) in &cfg.reserved {
            b = b.reserve(s, l);
        }
        if let Some(n) = cfg.stream_goals {
            b = b.stream_goals(n);
        }
        let alloc = b.build()?;
        let free = alloc.free_blocks();
        let concurrency = cfg.concurrency;
        Ok(Fs {
            block_bits: cfg.geometry.block_size().trailing_zeros(),
            metadata_blocks: cfg.geometry.total_blocks() - free,
            log: None,
            lgs: (0..cfg.locality_groups).map(|_| Mutex::new(LocalityGroup::default())).collect(),
            alloc,
            cfg,
            files: FileTable::new(),
            next_ino: AtomicU64::new(FIRST_INO),
            journal: Journal::new(concurrency),
            space: Space::new(free),
            pa_free: PerCpu::default(),
            dirty: AtomicU64::new(0),
            dirty_files: Mutex::new(VecDeque::new()),
            ops: AtomicU64::new(0),
            local_ops: PerCpu::default(),
            counters: PerCpu::default(),
            windows_in_flight: PerCpu::default(),
        })
    }

    /// The allocator underneath (for its statistics and reports).
    pub fn allocator(&self) -> &Allocator {
        &self.alloc
    }

    /// The configuration.
    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u64 {
        1 << self.block_bits
    }

    /// Largest file size in bytes.
    pub fn max_file_size(&self) -> u64 {
        MAX_LOGICAL_BLOCKS << self.block_bits
    }

    /// Blocks that can still be promised to new data (free, counting
    /// discardable preallocations and pending frees, minus reservations).
    pub fn available_blocks(&self) -> u64 {
        self.space.claimable()
    }

    /// Blocks promised to delayed data or an `fallocate` in progress.
    pub fn reserved_blocks(&self) -> u64 {
        self.space.reserved()
    }

    /// Unused blocks held in preallocations.
    pub fn preallocated_blocks(&self) -> u64 {
        self.pa_free.iter().map(|s| s.load(Ordering::Acquire)).sum::<i64>() as u64
    }

    /// Blocks freed by the running transaction, not yet reusable.
    pub fn pending_free_blocks(&self) -> u64 {
        self.journal.pending_blocks()
    }

    /// Dirty blocks waiting for writeback.
    pub fn dirty_blocks(&self) -> u64 {
        self.dirty.load(Ordering::Acquire)
    }

    /// Counters so far.
    pub fn stats(&self) -> FsStats {
        let sum = |f: fn(&Counters) -> &AtomicU64| self.counters.iter().map(|c| f(c).load(Ordering::Relaxed)).sum();
        FsStats {
            alloc_requests: sum(|c| &c.alloc_requests),
            inode_pa_hits: sum(|c| &c.inode_pa_hits),
            group_pa_hits: sum(|c| &c.group_pa_hits),
            inode_pas_created: sum(|c| &c.inode_pas_created),
            group_pas_created: sum(|c| &c.group_pas_created),
            preallocated: sum(|c| &c.preallocated),
            discarded: sum(|c| &c.discarded),
            writeback_runs: sum(|c| &c.writeback_runs),
            reclaims: sum(|c| &c.reclaims),
            journal: self.journal.stats(),
        }
    }

    /// Ids of the files that exist, ascending.
    pub fn files(&self) -> Vec<FileId> {
        self.files.entries().into_iter().map(|(k, _)| FileId(k)).collect()
    }

    fn node(&self, f: FileId) -> Result<Arc<FileNode>> {
        if let Some(n) = self.files.get(f.0) {
            return Ok(n);
        }
        if f.0 >= FIRST_INO && f.0 < self.next_ino.load(Ordering::Acquire) {
            Err(FsError::Unlinked(f))
        } else {
            Err(FsError::UnknownFile(f))
        }
    }

    /// Lock a live file.
    fn with_inode<R>(
        &self,
        f: FileId,
        need_open: bool,
        op: impl FnOnce(&FileNode, &mut Inode) -> Result<R>,
    ) -> Result<R> {
        let node = self.node(f)?;
        let mut ino = node.inode.lock();
        if ino.unlinked {
            return Err(FsError::Unlinked(f));
        }
        if need_open && ino.open == 0 {
            return Err(FsError::NotOpen(f));
        }
        op(&node, &mut ino)
    }

    /// Blocks `[first, end)` touched by the byte range, after checking it.
    fn block_range(&self, offset: u64, len: u64) -> Result<(u64, u64)> {
        let max = self.max_file_size();
        match offset.checked_add(len) {
            Some(end) if end <= max => {
                let bs = self.block_size();
                Ok((offset >> self.block_bits, end.div_ceil(bs)))
            }
            _ => Err(FsError::FileTooLarge { offset, len, max }),
        }
    }

    /// Count an operation; commit when the interval is reached.
    fn tick(&self) {
        let interval = self.cfg.commit_interval_ops;
        if interval == 0 {
            return;
        }
        // Operations are counted per CPU and added to the shared count in
        // batches, so the count costs no shared write per operation; a
        // commit comes when the shared count crosses a multiple of the
        // interval, within a batch per CPU of it.
        let batch = (interval / 16).clamp(1, 64);
        let local = self.local_ops.local().fetch_add(1, Ordering::Relaxed) + 1;
        if local % batch != 0 {
            return;
        }
        let before = self.ops.fetch_add(batch, Ordering::Relaxed);
        if before / interval != (before + batch) / interval {
            // In memory a commit is short, and a writer that waited for
            // one would sleep behind a committer that may be preempted: it
            // skips. With a log, a commit writes the journal, and waiting
            // for it is the writers' back-pressure, as jbd2 holds new
            // handles while a large transaction commits; skipping there
            // left one writer doing every commit while the others piled up
            // records for it. A failed log commit turns the log's owner
            // read-only; the frees stay pending for a later commit.
            let when_busy = if self.log.is_some() { WhenBusy::Wait } else { WhenBusy::Skip };
            let _ = self.commit_when(when_busy);
        }
    }
}

/// Files: create, open, close, unlink, and what FIEMAP would say.
impl Fs {
    /// Create an empty file, open once (like `creat`).
    pub fn create(&self) -> Result<FileId> {
        let id = self.next_ino.fetch_add(1, Ordering::AcqRel);
        if id > u64::from(u32::MAX) {
            return Err(FsError::InvalidConfig("inode numbers exhausted".into()));
        }
        self.note(Change::Create { ino: id });
        self.insert_file(id, 0, ExtentMap::new(), 1);
        self.tick();
        Ok(FileId(id))
    }

    /// Enter file `id` into the table. Its home group is its inode's
    /// group, as in ext4.
    fn insert_file(&self, id: u64, size: u64, map: ExtentMap, open: u32) {
        let home_group =
            (((id - 1) / u64::from(self.cfg.inodes_per_group)) % u64::from(self.alloc.geometry().groups())) as u32;
        let inode = Inode {
            id,
            size,
            map,
            delayed: RangeSet::new(),
            dirty_unwritten: RangeSet::new(),
            open,
            home_group,
            on_dirty_list: false,
            unlinked: false,
        };
        let node = Arc::new(FileNode { inode: Mutex::new(inode), pas: Mutex::new(InodePas::default()) });
        self.files.insert(id, node);
    }

    /// Open another handle on `f`.
    pub fn open(&self, f: FileId) -> Result<()> {
        self.with_inode(f, false, |_, ino| {
            ino.open += 1;
            Ok(())
        })
    }

    /// Close one handle. The last close gives back the file's unused
    /// preallocations.
    pub fn close(&self, f: FileId) -> Result<()> {
        self.with_inode(f, true, |node, ino| {
            ino.open -= 1;
            if ino.open == 0 {
                self.discard_inode_pas(node);
            }
            Ok(())
        })
    }

    /// File size in bytes.
    pub fn size(&self, f: FileId) -> Result<u64> {
        self.with_inode(f, false, |_, ino| Ok(ino.size))
    }

    /// The file's allocated extents (written and unwritten), ascending.
    pub fn extents(&self, f: FileId) -> Result<Vec<MappedExtent>> {
        self.with_inode(f, false, |_, ino| Ok(ino.map.iter().collect()))
    }

    /// Extents as `filefrag` counts them: records that continue one another
    /// both logically and physically count once, whatever their state or
    /// the extent-length limit split them into.
    pub fn fragments(&self, f: FileId) -> Result<u64> {
        self.with_inode(f, false, |_, ino| {
            let mut n = 0;
            let mut next = None;
            for e in ino.map.iter() {
                if next != Some((e.logical, e.physical)) {
                    n += 1;
                }
                next = Some((e.logical_end(), e.physical + u64::from(e.len)));
            }
            Ok(n)
        })
    }

    /// Everything FIEMAP would report: allocated extents and delayed runs,
    /// ascending by logical block.
    pub fn fiemap(&self, f: FileId) -> Result<Vec<FiemapExtent>> {
        self.with_inode(f, false, |_, ino| {
            let mut v: Vec<FiemapExtent> = ino
                .map
                .iter()
                .map(|e| FiemapExtent {
                    logical: e.logical,
                    physical: Some(e.physical),
                    len: e.len.into(),
                    kind: match e.state {
                        ExtentState::Written => FiemapKind::Written,
                        ExtentState::Unwritten => FiemapKind::Unwritten,
                    },
                })
                .chain(ino.delayed.iter().map(|(s, e)| FiemapExtent {
                    logical: s,
                    physical: None,
                    len: e - s,
                    kind: FiemapKind::Delayed,
                }))
                .collect();
            v.sort_unstable_by_key(|e| e.logical);
            Ok(v)
        })
    }

    /// Remove the file: its delayed data is dropped, its blocks go to the
    /// running transaction, its preallocations are given back.
    pub fn unlink(&self, f: FileId) -> Result<()> {
        let node = self.node(f)?;
        let mut ino = node.inode.lock();
        if ino.unlinked {
            return Err(FsError::Unlinked(f));
        }
        ino.unlinked = true;
        self.files.remove(f.0);
        self.cut(&mut ino, 0, u64::MAX);
        // After the unmap, so that every prefix of the log names only
        // files that exist.
        self.note(Change::Unlink { ino: f.0 });
        self.discard_inode_pas(&node);
        drop(ino);
        self.tick();
        Ok(())
    }
}

/// Data operations.
impl Fs {
    /// A buffered write of `len` bytes at `offset`. Blocks are not allocated
    /// now: every hole the write covers is reserved (so writeback cannot run
    /// out of space) and marked delayed. Writes into unwritten extents are
    /// converted at writeback. Fails with NoSpace, changing nothing, when the
    /// new delayed blocks cannot be reserved.
    pub fn write(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        let (first, end) = self.block_range(offset, len)?;
        self.with_inode(f, true, |_, ino| {
            if len == 0 {
                return Ok(());
            }
            let mut holes = Vec::new();
            let mut unwritten = Vec::new();
            let mut at = first;
            for e in ino.map.overlapping(first, end) {
                if e.logical > at {
                    holes.push((at, e.logical));
                }
                if e.state == ExtentState::Unwritten {
                    unwritten.push((e.logical, e.logical_end()));
                }
                at = e.logical_end();
            }
            if at < end {
                holes.push((at, end));
            }
            let new: u64 = holes.iter().map(|&(s, e)| e - s - ino.delayed.count_in(s, e)).sum();
            self.space.claim(new)?;
            let mut dirtied = new;
            for (s, e) in holes {
                ino.delayed.insert(s, e);
            }
            for (s, e) in unwritten {
                dirtied += ino.dirty_unwritten.insert(s, e);
            }
            if offset + len > ino.size {
                ino.size = offset + len;
                self.note(Change::Size { ino: ino.id, size: ino.size });
            }
            if dirtied > 0 {
                self.dirty.fetch_add(dirtied, Ordering::AcqRel);
                if !ino.on_dirty_list {
                    ino.on_dirty_list = true;
                    self.dirty_files.lock().push_back(ino.id);
                }
            }
            Ok(())
        })?;
        if self.dirty.load(Ordering::Acquire) > self.cfg.dirty_limit_blocks {
            self.background_writeback();
        }
        self.tick();
        Ok(())
    }

    /// Allocate unwritten blocks for every hole of the range (`fallocate`).
    /// Delayed blocks in the range keep their reservation. All or nothing:
    /// NoSpace when the holes cannot all be covered.
    pub fn fallocate(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<()> {
        if len == 0 {
            return Err(FsError::ZeroLength);
        }
        let (first, end) = self.block_range(offset, len)?;
        self.with_inode(f, true, |node, ino| {
            let holes: Vec<(u64, u64)> =
                ino.map.holes(first, end).into_iter().flat_map(|(s, e)| ino.delayed.gaps(s, e)).collect();
            let need: u64 = holes.iter().map(|(s, e)| e - s).sum();
            self.space.claim(need)?;
            // ext4 does not grow an fallocate that fits one extent into a
            // preallocation window.
            let normalize = if end - first <= u64::from(MAX_UNWRITTEN_LEN) { Normalize::No } else { Normalize::Yes };
            for (s, e) in holes {
                self.map_range(node, ino, s, e, ExtentState::Unwritten, normalize);
            }
            if mode == FallocateMode::ExtendSize && offset + len > ino.size {
                ino.size = offset + len;
                self.note(Change::Size { ino: ino.id, size: ino.size });
            }
            Ok(())
        })?;
        self.tick();
        Ok(())
    }

    /// Set the size. Shrinking drops delayed data past the end, sends the
    /// blocks past the end to the running transaction and gives back the
    /// file's preallocations.
    pub fn truncate(&self, f: FileId, size: u64) -> Result<()> {
        if size > self.max_file_size() {
            return Err(FsError::FileTooLarge { offset: size, len: 0, max: self.max_file_size() });
        }
        self.with_inode(f, true, |node, ino| {
            if size < ino.size {
                self.cut(ino, size.div_ceil(self.block_size()), u64::MAX);
                self.discard_inode_pas(node);
            }
            if size != ino.size {
                ino.size = size;
                self.note(Change::Size { ino: ino.id, size });
            }
            Ok(())
        })?;
        self.tick();
        Ok(())
    }

    /// Deallocate the whole blocks inside `[offset, offset + len)`; the size
    /// does not change.
    pub fn punch_hole(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Err(FsError::ZeroLength);
        }
        self.block_range(offset, len)?;
        let first = offset.div_ceil(self.block_size());
        let end = (offset + len) >> self.block_bits;
        self.with_inode(f, true, |node, ino| {
            if first < end {
                self.cut(ino, first, end);
            }
            self.discard_inode_pas(node);
            Ok(())
        })?;
        self.tick();
        Ok(())
    }

    /// Write back the file's dirty data and commit.
    pub fn fsync(&self, f: FileId) -> Result<()> {
        self.with_inode(f, true, |node, ino| {
            self.flush(node, ino);
            Ok(())
        })?;
        self.commit();
        Ok(())
    }

    /// Write back one file's dirty data now (no commit).
    pub fn writeback(&self, f: FileId) -> Result<()> {
        self.with_inode(f, false, |node, ino| {
            self.flush(node, ino);
            Ok(())
        })
    }

    /// Write back every file and commit.
    pub fn sync(&self) {
        for f in self.files() {
            if let Ok(node) = self.node(f) {
                let mut ino = node.inode.lock();
                if !ino.unlinked {
                    self.flush(&node, &mut ino);
                }
            }
        }
        self.commit();
    }

    /// Commit the running transaction: blocks it freed become allocatable.
    /// Returns how many. With a [`ChangeLog`] attached, a commit whose log
    /// could not be made durable releases nothing (see [`Fs::try_commit`]).
    pub fn commit(&self) -> u64 {
        self.try_commit().unwrap_or(0)
    }

    /// Commit, saying whether the attached log failed to make the
    /// transaction durable (the freed blocks then stay pending).
    pub fn try_commit(&self) -> Result<u64> {
        self.commit_when(WhenBusy::Wait)
    }

    fn commit_when(&self, when_busy: WhenBusy) -> Result<u64> {
        let mut failure = None;
        let released = self.journal.commit_durable(&self.alloc, when_busy, || match &self.log {
            None => true,
            Some(log) => match log.commit() {
                Ok(()) => true,
                Err(e) => {
                    failure = Some(e);
                    false
                }
            },
        });
        match (released, failure) {
            (Some(n), _) => Ok(n),
            (None, f) => Err(FsError::Log(f.map_or_else(|| "commit failed".into(), |f| f.0))),
        }
    }

    /// Send every metadata change from now on to `log` (see
    /// [`change_log`](crate::change_log)). Attach before sharing the engine:
    /// changes made earlier are not replayed into the log.
    pub fn attach_change_log(&mut self, log: Arc<dyn ChangeLog>) {
        self.log = Some(log);
    }

    /// Record that the mapped blocks of the byte range hold their data on
    /// the device: unwritten blocks in memory become written, and the
    /// change log hears of every mapped block in the range.
    pub fn mark_written(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        let (first, end) = self.block_range(offset, len)?;
        self.with_inode(f, false, |_, ino| {
            if first == end {
                return Ok(());
            }
            let undirtied: u64 = ino.dirty_unwritten.remove(first, end).iter().map(|(s, e)| e - s).sum();
            self.dirty.fetch_sub(undirtied, Ordering::AcqRel);
            ino.map.convert_to_written(first, end);
            if !ino.map.overlapping(first, end).is_empty() {
                self.note(Change::Written { ino: ino.id, first, end });
            }
            Ok(())
        })
    }

    /// The file's allocated extents that overlap logical blocks
    /// `[first, end)`, ascending.
    pub fn lookup(&self, f: FileId, first: u64, end: u64) -> Result<Vec<MappedExtent>> {
        self.with_inode(f, false, |_, ino| Ok(ino.map.overlapping(first, end)))
    }

    pub(super) fn note(&self, change: Change) {
        if let Some(log) = &self.log {
            log.record(change);
        }
    }

    /// Give back every unused preallocation (files' and locality groups').
    pub fn discard_preallocations(&self) -> u64 {
        let mut n = 0;
        for lg in &self.lgs {
            let runs = lg.lock().drain();
            n += self.give_back(runs.iter().map(GroupPa::run));
        }
        let nodes: Vec<Arc<FileNode>> = self.files.entries().into_iter().map(|(_, n)| n).collect();
        for node in nodes {
            n += self.discard_inode_pas(&node);
        }
        n
    }
}

/// Writeback and removal.
impl Fs {
    /// Background writeback: oldest dirty file first, down to half the limit.
    fn background_writeback(&self) {
        let target = self.cfg.dirty_limit_blocks / 2;
        while self.dirty.load(Ordering::Acquire) > target {
            let Some(id) = self.dirty_files.lock().pop_front() else { break };
            let Some(node) = self.files.get(id) else { continue };
            let mut ino = node.inode.lock();
            if !ino.unlinked {
                self.flush(&node, &mut ino);
            }
        }
    }

    /// Allocate every delayed run (one request per contiguous run) and
    /// convert dirty unwritten blocks.
    fn flush(&self, node: &FileNode, ino: &mut Inode) {
        let delayed = std::mem::take(&mut ino.delayed);
        for (s, e) in delayed.iter() {
            inc(&self.counters.local().writeback_runs, 1);
            self.map_range(node, ino, s, e, ExtentState::Written, Normalize::Yes);
        }
        let converted = std::mem::take(&mut ino.dirty_unwritten);
        for (s, e) in converted.iter() {
            ino.map.convert_to_written(s, e);
        }
        self.dirty.fetch_sub(delayed.len() + converted.len(), Ordering::AcqRel);
        ino.on_dirty_list = false;
    }

    /// Remove `[first, end)` from the file: delayed blocks are unreserved,
    /// mapped blocks go to the running transaction.
    fn cut(&self, ino: &mut Inode, first: u64, end: u64) {
        let dropped: u64 = ino.delayed.remove(first, end).iter().map(|(s, e)| e - s).sum();
        let undirtied: u64 = ino.dirty_unwritten.remove(first, end).iter().map(|(s, e)| e - s).sum();
        self.space.unclaim(dropped);
        self.dirty.fetch_sub(dropped + undirtied, Ordering::AcqRel);
        let removed = ino.map.remove(first, end);
        if !removed.is_empty() {
            // Logged before the frees, so a commit that releases them has it.
            self.note(Change::Unmap { ino: ino.id, first, end });
        }
        for piece in removed {
            self.defer_free(piece.physical, u64::from(piece.len));
            self.space.release(u64::from(piece.len));
        }
    }

    /// Send a physical range to the running transaction, split by group.
    fn defer_free(&self, mut start: u64, mut len: u64) {
        let geo = self.alloc.geometry();
        while len > 0 {
            let g = geo.group_of(start);
            let room = geo.group_first_block(g) + u64::from(geo.group_len(g)) - start;
            let n = room.min(len);
            self.journal
                .defer_free(start, n, g)
                .unwrap_or_else(|e| panic!("a file's block is already pending free: {e}"));
            start += n;
            len -= n;
        }
    }

    /// Give back a file's unused preallocated blocks. Returns how many.
    fn discard_inode_pas(&self, node: &FileNode) -> u64 {
        let runs = node.pas.lock().drain();
        self.give_back(runs)
    }

    /// Return unused preallocated runs `(start, len)` to the allocator.
    /// Returns how many blocks.
    fn give_back(&self, runs: impl IntoIterator<Item = (u64, u64)>) -> u64 {
        let mut n = 0;
        for (p, len) in runs {
            self.alloc.free(p, len).unwrap_or_else(|e| panic!("discarding preallocated [{p}, +{len}): {e}"));
            n += len;
        }
        if n > 0 {
            self.pa_free.local().fetch_sub(n as i64, Ordering::AcqRel);
            inc(&self.counters.local().discarded, n);
            self.alloc.note_preallocation(0, n);
        }
        n
    }

    pub(super) fn prealloc(&self, n: u64) {
        self.pa_free.local().fetch_add(n as i64, Ordering::AcqRel);
        inc(&self.counters.local().preallocated, n);
        self.alloc.note_preallocation(n, 0);
    }
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Fs>();
};
