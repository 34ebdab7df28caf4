//! How an engine is set up: the geometry, the allocator's tunables and the
//! file layer's own policy knobs, each with the kernel's default.

use crate::fs::StreamPlacement;
use crate::normalize::Normalization;
use mballoc::{Concurrency, Geometry, Tunables};

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
