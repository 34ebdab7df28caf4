//! The file layer's counters, kept per CPU and summed when read.

use super::Fs;
use crate::deferred_frees::DeferredFreeStats;
use std::sync::atomic::{AtomicU64, Ordering};

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
    pub deferred_frees: DeferredFreeStats,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) alloc_requests: AtomicU64,
    pub(super) inode_pa_hits: AtomicU64,
    pub(super) group_pa_hits: AtomicU64,
    pub(super) inode_pas_created: AtomicU64,
    pub(super) group_pas_created: AtomicU64,
    pub(super) preallocated: AtomicU64,
    pub(super) discarded: AtomicU64,
    pub(super) writeback_runs: AtomicU64,
    pub(super) reclaims: AtomicU64,
}

pub(super) fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Fs {
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
            deferred_frees: self.deferred_frees.stats(),
        }
    }
}
