//! Read-only views: what a caller may see of the allocator under an
//! [`Fs`], and of an `Fs` under a volume, without a way to allocate,
//! free or map blocks behind the owner's back (which would break the
//! invariants the owner keeps: every block owned once, the deferred frees
//! before the allocator).

use crate::{FileId, Fs, FsConfig, FsStats, MappedExtent, Result};
use mballoc::{Allocator, Geometry, GroupInfo, MbStats};

/// The allocator's statistics, reports and free space, and nothing that
/// changes which blocks are free.
#[derive(Clone, Copy)]
pub struct AllocatorView<'a>(pub(crate) &'a Allocator);

impl AllocatorView<'_> {
    /// The volume's shape.
    pub fn geometry(&self) -> &Geometry {
        self.0.geometry()
    }

    /// Free blocks.
    pub fn free_blocks(&self) -> u64 {
        self.0.free_blocks()
    }

    /// The counters `/proc/fs/ext4/DEV/mb_stats` shows.
    pub fn stats(&self) -> MbStats {
        self.0.stats()
    }

    /// Zero the counters (a measurement's start).
    pub fn reset_stats(&self) {
        self.0.reset_stats()
    }

    /// `mb_stats` as the kernel prints it.
    pub fn mb_stats_report(&self) -> String {
        self.0.mb_stats_report()
    }

    /// `mb_groups` as the kernel prints it.
    pub fn mb_groups_report(&self) -> String {
        self.0.mb_groups_report()
    }

    /// One group's free-space summary.
    pub fn group_info(&self, g: u32) -> mballoc::Result<GroupInfo> {
        self.0.group_info(g)
    }

    /// Every free extent, `(start, len)`, ascending.
    pub fn for_each_free_extent(&self, f: impl FnMut(u64, u64)) {
        self.0.for_each_free_extent(f)
    }
}

/// What a volume lets its callers see of the engine underneath: layouts,
/// statistics, configuration and checks, and no call that changes a file
/// (those go through the volume, which journals and caches them).
#[derive(Clone, Copy)]
pub struct FsView<'a>(pub(crate) &'a Fs);

impl<'a> FsView<'a> {
    /// The allocator's read-only view.
    pub fn allocator(&self) -> AllocatorView<'a> {
        self.0.allocator()
    }

    /// The file layer's counters.
    pub fn stats(&self) -> FsStats {
        self.0.stats()
    }

    /// The configuration the engine runs with.
    pub fn config(&self) -> &'a FsConfig {
        self.0.config()
    }

    /// Bytes per block.
    pub fn block_size(&self) -> u64 {
        self.0.block_size()
    }

    /// Blocks that can still be promised to writes.
    pub fn available_blocks(&self) -> u64 {
        self.0.available_blocks()
    }

    /// Blocks held in preallocations.
    pub fn preallocated_blocks(&self) -> u64 {
        self.0.preallocated_blocks()
    }

    /// A file's allocated extents.
    pub fn extents(&self, f: FileId) -> Result<Vec<MappedExtent>> {
        self.0.extents(f)
    }

    /// Every invariant of the engine, checked.
    pub fn check(&self) -> std::result::Result<(), crate::Violation> {
        self.0.check()
    }
}
