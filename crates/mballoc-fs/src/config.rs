//! How an engine is set up: the geometry, the allocator's tunables and the
//! file layer's own policy knobs, each with the kernel's default.
//!
//! Two profiles: [`FsConfig::new`] is the engine's own (its improvements
//! on ext4 switched on), [`FsConfig::kernel`] makes ext4's decisions. Every
//! setting on which they differ is a named field; docs/PROFILES.md lists
//! them with the reason and ext4's behaviour beside each.

use crate::inode_numbers::InodeNumbers;
use crate::normalize::Normalization;
use crate::page_cache::PageCache;
use mballoc::{Concurrency, Geometry, Tunables};

/// How many blocks one allocation request may map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestSize {
    /// A whole contiguous run, up to a group, in one request.
    WholeRun,
    /// At most this many blocks per request (ext4's writeback maps at most
    /// `MAX_WRITEPAGES_EXTENT_LEN` = 2048 blocks, and fallocate at most
    /// `EXT_UNWRITTEN_MAX_LEN` = 32767).
    UpTo(u32),
}

impl RequestSize {
    /// The most a request for a run of `run` blocks may ask, in a volume
    /// of `blocks_per_group`-block groups.
    pub fn cap(self, run: u64, blocks_per_group: u32) -> u32 {
        let group = u64::from(blocks_per_group);
        match self {
            RequestSize::WholeRun => run.min(group) as u32,
            RequestSize::UpTo(n) => run.min(u64::from(n)).min(group) as u32,
        }
    }
}

/// The order in which `sync` writes files back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOrder {
    /// By inode number.
    ByInode,
    /// Oldest dirtied first, as the kernel's flusher walks its dirty list.
    Dirtied,
}

/// What a punched hole covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PunchBehaviour {
    /// The byte range as given; the file's preallocations are given back
    /// on every punch.
    AsGiven,
    /// ext4's `ext4_punch_hole`: nothing past the size (an offset at or
    /// past it returns at once, and an end past it is cut to the 4 KiB page
    /// boundary at or after the size), and the preallocations are given
    /// back only when whole blocks are removed.
    Ext4,
    /// As [`Self::Ext4`], but an end past the size is cut at the end of
    /// the page holding the first byte past the size, so a size on a page
    /// boundary also loses the page after it: ext4 before Zhang Yi's
    /// "ext4: refactor ext4_punch_hole()" (6.15; the 6.12 stable series
    /// has it too).
    Ext4PageAfterSize,
}

/// When blocks a file gave up may be allocated again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeReuse {
    /// When the transaction that freed them commits: until then a crash
    /// would bring back the file that owned them (ext4 with a journal).
    AtCommit,
    /// At once (ext4 without a journal, which has no transaction to wait
    /// for). The engine's own volumes always journal; only a study of
    /// ext4's no-journal placement uses this.
    AtOnce,
}

/// What closing a file does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseBehaviour {
    /// The last close gives back the file's preallocations; delayed data
    /// waits for fsync, sync or background writeback.
    DiscardAtLastClose,
    /// ext4's `ext4_release_file`: a close after a truncate to zero writes
    /// the file's delayed data back (`auto_da_alloc`, which protects the
    /// replace-by-truncate pattern), and the last close gives back the
    /// preallocations only if no delayed data remains; writeback gives
    /// them back once it has allocated the last delayed block of a file
    /// no writer has open (`ext4_da_update_reserve_space`).
    Ext4,
}

/// Whether the file layer allocates extent-tree blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtentTreeBlocks {
    /// Extent maps live outside the volume's data blocks (a persistent
    /// volume keeps them in its own tree area).
    Outside,
    /// As ext4: four extents in the inode, then leaf and index blocks
    /// allocated through the allocator as one-block metadata requests with
    /// a goal next to the data they map.
    InVolume,
}

/// How writeback puts blocks into ext4's extent tree: ext4's
/// `dioread_nolock` mount option (the default since Linux 5.6) or
/// `nodioread_nolock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DioRead {
    /// `dioread_nolock`: new blocks go in unwritten and are converted when
    /// their I/O completes; a write into unwritten blocks splits them out
    /// first, nothing merging until the I/O completes.
    NoLock,
    /// `nodioread_nolock`: new blocks go in initialized, and writeback
    /// converts the written blocks of unwritten extents itself, moving
    /// them into an initialized neighbour or zeroing up to
    /// `max_zeroout_kb` around them rather than splitting
    /// (`extent_max_zeroout_kb`, 32 by default).
    Locked {
        /// ext4's `extent_max_zeroout_kb`.
        max_zeroout_kb: u32,
    },
}

/// How the engine is set up, in four parts by who decides them: the
/// volume's [`Shape`] (fixed by the format or the image), [`Placement`]
/// (where blocks go: the allocator's knobs and this layer's), ext4's other
/// decisions ([`Behaviour`]), and what the layer that stores the engine
/// decides ([`Storage`]). A profile ([`FsConfig::new`], [`FsConfig::kernel`])
/// sets placement and behaviour; a layer that stores the engine (a
/// volume) takes those two whole and keeps its own shape and storage.
#[derive(Debug, Clone)]
pub struct FsConfig {
    /// The volume's shape.
    pub shape: Shape,
    /// Where blocks go.
    pub placement: Placement,
    /// ext4's decisions beyond placement.
    pub behaviour: Behaviour,
    /// What the storing layer decides.
    pub storage: Storage,
}

/// The volume's shape: what its format or image fixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// Blocks, groups and their sizes. Under bigalloc its blocks are
    /// clusters.
    pub geometry: Geometry,
    /// ext4's bigalloc: each of the geometry's blocks is a cluster of
    /// `2^cluster_bits` ext4 blocks (0: no clusters). The file layer then
    /// counts files in clusters, as ext4 allocates, reserves and frees
    /// them, while the decisions ext4 makes in blocks (the stream
    /// threshold, the window sizes, a directory's growth, the extent
    /// tree's capacity) are made in blocks. Set it with
    /// [`FsConfig::with_cluster_bits`], which also scales the
    /// locality-group window as ext4 does.
    pub cluster_bits: u32,
    /// Inodes per group: a file's home group is its inode's group, as in
    /// ext4 (default: one inode per 16 KiB, mke2fs's default ratio).
    pub inodes_per_group: u32,
    /// Groups per flex group (1: no flex_bg). With 4 or more, a new file's
    /// first goal is the second group of its inode's flex group and
    /// CR_POWER2_ALIGNED skips the first group of each flex group for data,
    /// as ext4 keeps those for directories and metadata.
    pub flex_groups: u32,
    /// Extra metadata ranges `(start, len)` never allocated.
    pub reserved: Vec<(u64, u64)>,
}

/// Where blocks go: the allocator's knobs and this layer's placement.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Allocator knobs; `mb_stream_req` and `mb_group_prealloc` steer this layer.
    pub tunables: Tunables,
    /// Window sizes for stream requests.
    pub normalization: Normalization,
    /// Locality groups (one per CPU in the kernel).
    pub locality_groups: usize,
    /// Stream goals (default `min(CPUs, groups / 4)`).
    pub stream_goals: Option<u32>,
    /// Lock-free, sharded shared state, or the pre-2025 kernel's locks.
    pub concurrency: Concurrency,
    /// Placement of fallocate appends: per-file streams or ext4's.
    pub stream_placement: StreamPlacement,
    /// Blocks one writeback request may map.
    pub writeback_request: RequestSize,
    /// Blocks one fallocate request may map.
    pub fallocate_request: RequestSize,
    /// The decisions that differ from ext4's (goal, window, passes, when
    /// to stop, group choice); `None` is ext4's ([`mballoc::KernelPolicy`]).
    pub policy: Option<std::sync::Arc<dyn mballoc::Policy>>,
}

/// ext4's decisions beyond placement, each a named choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behaviour {
    /// How new files are numbered.
    pub inode_numbers: InodeNumbers,
    /// The order `sync` writes files back in.
    pub sync_order: SyncOrder,
    /// What closing a file does.
    pub close: CloseBehaviour,
    /// What a punched hole covers, and whether it gives back
    /// preallocations.
    pub punch: PunchBehaviour,
    /// How writeback maps blocks in the extent tree (`InVolume` only).
    pub dioread: DioRead,
    /// Whether writeback follows the page cache's folios (see
    /// [`PageCache`]).
    pub page_cache: PageCache,
    /// How an image's RAID stripe, counted in blocks, reaches the
    /// allocator, which counts clusters.
    pub stripe_units: StripeUnits,
}

/// How a RAID stripe given in blocks becomes the allocator's stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StripeUnits {
    /// Converted to clusters; a stripe that is not a whole number of
    /// clusters is turned off (ext4 since 6.5, Kemeng Shi's "ext4: treat
    /// stripe in block unit").
    #[default]
    Converted,
    /// The block count taken as a cluster count, as ext4 did before 6.5
    /// (the same thing without bigalloc).
    BlocksAsClusters,
}

/// What the layer that stores the engine decides: when data is written
/// back and commits happen, where extent-tree blocks live, and when freed
/// blocks come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storage {
    /// Dirty blocks (delayed or written-into-unwritten) that start background
    /// writeback, oldest file first, down to half of it. `u64::MAX` turns it off.
    pub dirty_limit_blocks: u64,
    /// Operations between automatic commits (the journal timer); 0 = only
    /// on fsync, sync or explicit commit.
    pub commit_interval_ops: u64,
    /// Whether extent-tree blocks come from the allocator.
    pub extent_tree: ExtentTreeBlocks,
    /// When freed blocks may be allocated again.
    pub free_reuse: FreeReuse,
    /// What a buffered write does when free space runs low against the
    /// delayed data waiting for it.
    pub low_space: LowSpace,
}

/// A buffered write's behaviour near a full volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LowSpace {
    /// Delayed allocation whatever the free space (reservations keep
    /// writeback from running out).
    Delay,
    /// ext4's `ext4_nonda_switch`, read before each buffered write: when
    /// fewer blocks are free than twice the delayed ones, every dirty file
    /// is written back first (oldest dirtied first, as the flusher does,
    /// and the writer waits for it); and when fewer are free than 1.5
    /// times the delayed ones, or than the delayed ones plus
    /// `watermark_blocks` (4 × the per-CPU counter batch × CPUs), the
    /// write allocates at once, block by block, as `nodelalloc` does
    /// ([`crate::Fs::write_through`]). Both tests use the counts read
    /// before the writeback. And a normalization window is taken even
    /// where it eats into blocks promised to delayed data: an allocation
    /// that then finds nothing gives every preallocation back and tries
    /// again (`ext4_mb_discard_preallocations_should_retry`).
    Ext4 {
        /// `EXT4_FREECLUSTERS_WATERMARK`.
        watermark_blocks: u64,
    },
}

impl FsConfig {
    /// Defaults for a volume of this shape.
    pub fn new(geometry: Geometry) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ipg = (u64::from(geometry.blocks_per_group()) * u64::from(geometry.block_size()) / 16384).max(1);
        FsConfig {
            shape: Shape {
                geometry,
                cluster_bits: 0,
                inodes_per_group: ipg.min(u64::from(u32::MAX)) as u32,
                flex_groups: 16,
                reserved: Vec::new(),
            },
            placement: Placement {
                tunables: Tunables::default(),
                normalization: Normalization::KernelWindows,
                locality_groups: cpus,
                stream_goals: None,
                concurrency: Concurrency::Scalable,
                stream_placement: StreamPlacement::PerFile,
                writeback_request: RequestSize::WholeRun,
                fallocate_request: RequestSize::WholeRun,
                policy: None,
            },
            behaviour: Behaviour {
                inode_numbers: InodeNumbers::Sequential { first: crate::inode_numbers::FIRST_INO },
                sync_order: SyncOrder::ByInode,
                close: CloseBehaviour::DiscardAtLastClose,
                punch: PunchBehaviour::AsGiven,
                dioread: DioRead::NoLock,
                page_cache: PageCache::Untracked,
                stripe_units: StripeUnits::Converted,
            },
            storage: Storage {
                dirty_limit_blocks: (geometry.total_blocks() / 10).clamp(256, 1 << 18),
                commit_interval_ops: 1000,
                extent_tree: ExtentTreeBlocks::Outside,
                free_reuse: FreeReuse::AtCommit,
                low_space: LowSpace::Delay,
            },
        }
    }

    /// ext4's behaviour, decision for decision, on a volume of this shape
    /// made by `mke2fs` with its defaults (flex_bg of 16, the orphan file
    /// in inode 12): writeback requests of at most 2048 blocks, fallocate
    /// requests of at most 32767, ext4's placement of appends, goals in
    /// the second group of a file's flex group, lowest free inode numbers,
    /// one locality group (the lab runs single-threaded on one CPU),
    /// sync oldest-dirtied first, `auto_da_alloc`, extent-tree blocks
    /// allocated in the volume, and commits only at fsync and sync (the
    /// kernel commits every 5 s, which a run shorter than that never
    /// reaches). [`FsConfig::new`] keeps the engine's own choices.
    pub fn kernel(geometry: Geometry) -> Self {
        let base = FsConfig::new(geometry);
        FsConfig {
            placement: Placement {
                tunables: Tunables::kernel(),
                locality_groups: 1,
                stream_placement: StreamPlacement::Kernel,
                writeback_request: RequestSize::UpTo(2048),
                fallocate_request: RequestSize::UpTo(crate::extent_map::MAX_UNWRITTEN_LEN),
                ..base.placement
            },
            behaviour: Behaviour {
                inode_numbers: InodeNumbers::LowestFree { first: crate::inode_numbers::FIRST_INO + 1 },
                sync_order: SyncOrder::Dirtied,
                close: CloseBehaviour::Ext4,
                punch: PunchBehaviour::Ext4,
                page_cache: PageCache::Folios { largest: 2 << 20 },
                ..base.behaviour
            },
            storage: Storage {
                commit_interval_ops: 0,
                dirty_limit_blocks: u64::MAX,
                free_reuse: FreeReuse::AtCommit,
                extent_tree: ExtentTreeBlocks::InVolume,
                // Two CPUs, batch 32; the lab sets the machine's.
                low_space: LowSpace::Ext4 { watermark_blocks: 4 * 32 * 2 },
            },
            shape: Shape { flex_groups: 16, ..base.shape },
        }
    }

    /// The same configuration on a bigalloc volume of `2^cluster_bits`
    /// blocks per cluster: the locality-group window (in clusters) is
    /// scaled as `ext4_mb_init` scales it, to `max(window >> bits, 32)`,
    /// so it stays about 2 MiB for clusters up to 64 KiB.
    pub fn with_cluster_bits(mut self, cluster_bits: u32) -> Self {
        if cluster_bits > self.shape.cluster_bits {
            let scaled = self.placement.tunables.mb_group_prealloc >> (cluster_bits - self.shape.cluster_bits);
            self.placement.tunables.mb_group_prealloc = scaled.max(32);
        }
        self.shape.cluster_bits = cluster_bits;
        self
    }
}

/// How appends that are not normalized (fallocate of at most one extent)
/// are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamPlacement {
    /// Each file continues its own last block, with a window that grows with
    /// the file; a blocked large file restarts where it has room.
    #[default]
    PerFile,
    /// ext4: exactly the request, from the stream goal or the goal group.
    Kernel,
}
