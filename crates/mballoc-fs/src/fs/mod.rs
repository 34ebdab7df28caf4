//! The file system engine: the [`Fs`] itself, its files' in-memory
//! inodes, and the helpers every operation shares (locking a file,
//! checking a byte range, the commit timer). The operations live in the
//! submodules by concept: `files` (create, open, close, unlink, FIEMAP),
//! `data` (write, fallocate, truncate, punch), `commit` (writeback,
//! fsync, sync, the deferred frees), `alloc_path` (mapping a hole: preallocation,
//! locality group, normalized window), `streams` (per-file placement of
//! appends), `import` (starting from an existing volume), `check` (every
//! invariant from scratch) and `stats`.

mod alloc_path;
mod check;
mod cluster_map;
mod clusters;
mod commit;
mod data;
mod dirs;
mod ext4_counters;
pub(crate) use ext4_counters::SharedCounts;
mod files;
mod import;
mod shift;
mod stats;
mod streams;
mod tree_blocks;
mod trim;
mod verify;
mod zero;

pub use import::ImportedFile;
pub use stats::FsStats;

use crate::config::FsConfig;
use stats::{inc, Counters};
pub use streams::APPEND_WINDOW_MAX;

use crate::alloc_log::{AllocEvent, AllocLog};
use crate::change_log::ChangeLog;
use crate::deferred_frees::{DeferredFrees, WhenBusy};
use crate::error::{FsError, Result};
use crate::ext4_tree::Ext4Tree;
use crate::extent_map::ExtentMap;
use crate::inode_numbers::InodePool;
use crate::normalize::{Normalization, MAX_LOGICAL_BLOCKS};
use crate::percpu::{cpu_slot, FileTable, PerCpu};
use crate::prealloc::{InodePas, LocalityGroup};
use crate::ranges::RangeSet;
use crate::space::Space;
use mballoc::Allocator;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// A file's number (its inode number). Under
/// [`InodeNumbers::Sequential`](crate::InodeNumbers) numbers are never
/// reused; under `LowestFree` an unlinked file's number goes to the next
/// new file, as in ext4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u64);

/// What `fallocate` does to the file size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FallocateMode {
    /// Grow the size to cover the range.
    #[default]
    ExtendSize,
    /// Leave the size alone (`FALLOC_FL_KEEP_SIZE`).
    KeepSize,
}

/// What an inode is: its blocks come through different paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FileKind {
    /// A regular file: data through delayed allocation, normalization and
    /// preallocation; blocks sought from the second group of its flex
    /// group.
    #[default]
    Regular,
    /// A directory: one block at a time as it grows, as metadata (no
    /// normalization, no preallocation), sought from the first group of
    /// its flex group, which ext4 keeps for directories.
    Directory,
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

struct Inode {
    id: u64,
    size: u64,
    map: ExtentMap,
    delayed: RangeSet,
    dirty_unwritten: RangeSet,
    open: u32,
    home_group: u32,
    kind: FileKind,
    on_dirty_list: bool,
    unlinked: bool,
    /// Truncated to zero since the last close (ext4's
    /// `EXT4_STATE_DA_ALLOC_CLOSE`).
    truncated_to_zero: bool,
    /// ext4's extent-tree shape, when its blocks come from the volume.
    tree: Option<Ext4Tree>,
    /// The page-cache folios its writes made (`PageCache::Folios`).
    folios: crate::page_cache::Folios,
    /// ext4's `i_disksize`: the size its on-disk inode has, which
    /// delayed data reaches only as writeback maps it.
    disk_size: u64,
    /// The size the change log was last told. A write that extends the
    /// file does not tell it: the layer that owns the data does, with
    /// [`Fs::log_size`], once the data is on its device, so that after a
    /// crash a file is never longer than what reached the disk
    /// (data=ordered's promise: the old size, not a tail of zeros).
    logged_size: u64,
    /// Under bigalloc, which blocks of its clusters the file holds, as
    /// ext4's extents map them (`fs/clusters.rs`); `None` without.
    ext4: Option<Box<clusters::Ext4Blocks>>,
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
    /// log2 of the unit files are counted in: a block, or a cluster
    /// under bigalloc.
    block_bits: u32,
    /// log2 of ext4 blocks per unit (0 without bigalloc).
    cluster_bits: u32,
    files: FileTable<Arc<FileNode>>,
    inodes: InodePool,
    lgs: Vec<Mutex<LocalityGroup>>,
    /// ext4's per-CPU counts, when a namespace reads them.
    ext4_counts: ext4_counters::Ext4Counters,
    /// One writer at a time per locality group for writes allocated at
    /// once ([`Fs::write_through`]).
    lg_writers: Vec<Mutex<()>>,
    deferred_frees: DeferredFrees,
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
    quiesce: verify::Quiesce,
    alloc_log: AllocLog,
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
        if cfg.placement.locality_groups == 0 {
            return Err(FsError::InvalidConfig("at least one locality group is needed".into()));
        }
        if cfg.shape.inodes_per_group == 0 {
            return Err(FsError::InvalidConfig("inodes_per_group must be positive".into()));
        }
        if cfg.shape.cluster_bits > 0 && cfg.behaviour.dioread != crate::config::DioRead::NoLock {
            return Err(FsError::InvalidConfig("writeback without dioread_nolock is not modelled on clusters".into()));
        }
        // ext4's largest cluster is 1 GiB (`EXT4_MAX_CLUSTER_LOG_SIZE`).
        if cfg.shape.geometry.block_size().trailing_zeros() + cfg.shape.cluster_bits > 30 {
            return Err(FsError::InvalidConfig(format!(
                "clusters of 2^{} blocks of {} bytes exceed ext4's largest cluster, 1 GiB",
                cfg.shape.cluster_bits,
                cfg.shape.geometry.block_size()
            )));
        }
        if let Normalization::Table(t) = &cfg.placement.normalization {
            if t.largest() > cfg.shape.geometry.blocks_per_group() {
                return Err(FsError::InvalidConfig(format!(
                    "prealloc_table entry {} exceeds the group size {}",
                    t.largest(),
                    cfg.shape.geometry.blocks_per_group()
                )));
            }
        }
        let alloc = cfg.allocator_builder().build()?;
        let free = alloc.free_blocks();
        let concurrency = cfg.placement.concurrency;
        Ok(Fs {
            block_bits: cfg.shape.geometry.block_size().trailing_zeros() + cfg.shape.cluster_bits,
            cluster_bits: cfg.shape.cluster_bits,
            metadata_blocks: cfg.shape.geometry.total_blocks() - free,
            log: None,
            lgs: (0..cfg.placement.locality_groups).map(|_| Mutex::new(LocalityGroup::default())).collect(),
            ext4_counts: ext4_counters::Ext4Counters::default(),
            lg_writers: (0..cfg.placement.locality_groups).map(|_| Mutex::new(())).collect(),
            alloc,
            inodes: InodePool::new(cfg.behaviour.inode_numbers),
            cfg,
            files: FileTable::new(),
            deferred_frees: DeferredFrees::new(concurrency),
            space: Space::new(free),
            pa_free: PerCpu::default(),
            dirty: AtomicU64::new(0),
            dirty_files: Mutex::new(VecDeque::new()),
            ops: AtomicU64::new(0),
            local_ops: PerCpu::default(),
            counters: PerCpu::default(),
            windows_in_flight: PerCpu::default(),
            quiesce: verify::Quiesce::new(),
            alloc_log: AllocLog::default(),
        })
    }

    /// The allocator underneath, for its statistics, reports and free
    /// space: a view that cannot allocate or free behind the engine.
    pub fn allocator(&self) -> crate::AllocatorView<'_> {
        crate::AllocatorView(&self.alloc)
    }

    /// This engine as a volume shows it to its callers: read-only.
    pub fn view(&self) -> crate::FsView<'_> {
        crate::FsView(self)
    }

    /// The configuration.
    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    /// Size in bytes of the blocks files are counted in: ext4's block, or
    /// under bigalloc ([`Shape::cluster_bits`](crate::Shape::cluster_bits)) its cluster. Every
    /// logical and physical number, length and count of the engine is
    /// in these.
    pub fn block_size(&self) -> u64 {
        1 << self.block_bits
    }

    /// log2 of the ext4 blocks in one of the engine's blocks (0 without
    /// bigalloc).
    pub fn cluster_bits(&self) -> u32 {
        self.cluster_bits
    }

    /// ext4's block size in bytes (the cluster's, without bigalloc).
    pub fn ext4_block_size(&self) -> u64 {
        1 << (self.block_bits - self.cluster_bits)
    }

    /// Largest file size in bytes (ext4's: `EXT_MAX_BLOCKS` of its blocks).
    pub fn max_file_size(&self) -> u64 {
        MAX_LOGICAL_BLOCKS << (self.block_bits - self.cluster_bits)
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
        self.deferred_frees.pending_blocks()
    }

    /// Numbers already held by something other than a file the engine
    /// knows (a directory of an imported volume): new files never get them.
    pub fn reserve_inode_numbers(&self, inos: impl IntoIterator<Item = u64>) {
        for ino in inos {
            self.inodes.mark_used(ino);
        }
    }

    /// Record every allocation request from now on (see [`AllocEvent`]),
    /// dropping anything recorded before.
    pub fn record_allocations(&self) {
        self.alloc_log.start();
    }

    /// The requests recorded since the last call, in order.
    pub fn take_allocations(&self) -> Vec<AllocEvent> {
        self.alloc_log.take()
    }

    /// Dirty blocks waiting for writeback.
    pub fn dirty_blocks(&self) -> u64 {
        self.dirty.load(Ordering::Acquire)
    }

    fn node(&self, f: FileId) -> Result<Arc<FileNode>> {
        if let Some(n) = self.files.get(f.0) {
            return Ok(n);
        }
        if self.inodes.was_issued(f.0) {
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
        let interval = self.cfg.storage.commit_interval_ops;
        if interval == 0 {
            return;
        }
        // Operations are counted per CPU and added to the shared count in
        // batches, so the count costs no shared write per operation; a
        // commit comes when the shared count crosses a multiple of the
        // interval, within a batch per CPU of it.
        let batch = (interval / 16).clamp(1, 64);
        let local = self.local_ops.local().fetch_add(1, Ordering::Relaxed) + 1;
        if !local.is_multiple_of(batch) {
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

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Fs>();
};
