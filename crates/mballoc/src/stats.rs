//! Allocation statistics (`mb_stats`), kept in per-thread shards so that
//! counting never bounces one cache line between cores; a snapshot sums them.

use crate::criteria::NUM_CRITERIA;
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

/// A point-in-time copy of every counter, named as in the kernel's `mb_stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MbStats {
    /// Requests, the kernel's way: every request, those the file layer
    /// served from a preallocation included.
    pub reqs: u64,
    /// Of `reqs`, those served from a preallocation; `reqs` minus this is
    /// what reached the allocator's search.
    pub preallocation_reqs: u64,
    /// Requests that got at least their minimum (or full) length.
    pub success: u64,
    /// Blocks handed out.
    pub allocated: u64,
    /// Groups scanned under their lock.
    pub groups_scanned: u64,
    /// Successes per pass.
    pub cr_hits: [u64; NUM_CRITERIA],
    /// Groups looked at per pass.
    pub cr_groups_considered: [u64; NUM_CRITERIA],
    /// Extents measured per pass.
    pub cr_extents_scanned: [u64; NUM_CRITERIA],
    /// Passes that found nothing ("useless loops").
    pub cr_useless_loops: [u64; NUM_CRITERIA],
    /// Extents measured in all.
    pub extents_scanned: u64,
    /// Results that start exactly at the goal block.
    pub goal_hits: u64,
    /// Stream requests served in their stream-goal group.
    pub stream_goal_hits: u64,
    /// Results of the full goal length.
    pub len_goal_hits: u64,
    /// Results from the buddy (power-of-two) search.
    pub two_n_hits: u64,
    /// Results a [`crate::Policy::choose`] picked (the engine's own count:
    /// the kernel has no policies; `mb_stats` does not print it).
    pub policy_hits: u64,
    /// Scans stopped by `mb_max_to_scan`.
    pub breaks: u64,
    /// Best candidates taken by another thread before they could be used.
    pub lost: u64,
    /// Group buddies built (always counted).
    pub buddies_generated: u64,
    /// Time spent building them, in nanoseconds (the kernel counts cycles).
    pub buddies_time_used: u64,
    /// Blocks put into preallocations (reported by the file layer).
    pub preallocated: u64,
    /// Blocks returned from discarded preallocations.
    pub discarded: u64,
}

macro_rules! shard_fields {
    ($($name:ident),*) => {
        #[derive(Default)]
        pub(crate) struct Shard {
            $(pub(crate) $name: AtomicU64,)*
            pub(crate) cr_hits: [AtomicU64; NUM_CRITERIA],
            pub(crate) cr_groups_considered: [AtomicU64; NUM_CRITERIA],
            pub(crate) cr_extents_scanned: [AtomicU64; NUM_CRITERIA],
            pub(crate) cr_useless_loops: [AtomicU64; NUM_CRITERIA],
            pub(crate) free_delta: AtomicI64,
        }
        impl Shard {
            fn add_into(&self, s: &mut MbStats) {
                $(s.$name += self.$name.load(Ordering::Relaxed);)*
                for i in 0..NUM_CRITERIA {
                    s.cr_hits[i] += self.cr_hits[i].load(Ordering::Relaxed);
                    s.cr_groups_considered[i] += self.cr_groups_considered[i].load(Ordering::Relaxed);
                    s.cr_extents_scanned[i] += self.cr_extents_scanned[i].load(Ordering::Relaxed);
                    s.cr_useless_loops[i] += self.cr_useless_loops[i].load(Ordering::Relaxed);
                }
            }
            fn reset(&self) {
                $(self.$name.store(0, Ordering::Relaxed);)*
                for i in 0..NUM_CRITERIA {
                    self.cr_hits[i].store(0, Ordering::Relaxed);
                    self.cr_groups_considered[i].store(0, Ordering::Relaxed);
                    self.cr_extents_scanned[i].store(0, Ordering::Relaxed);
                    self.cr_useless_loops[i].store(0, Ordering::Relaxed);
                }
            }
        }
    };
}

shard_fields!(
    reqs,
    preallocation_reqs,
    success,
    allocated,
    groups_scanned,
    extents_scanned,
    goal_hits,
    stream_goal_hits,
    len_goal_hits,
    two_n_hits,
    policy_hits,
    breaks,
    lost,
    buddies_generated,
    buddies_time_used,
    preallocated,
    discarded
);

/// Add `v` to a counter unless it is zero (most per-request values are).
#[inline]
pub(crate) fn bump(c: &AtomicU64, v: u64) {
    if v != 0 {
        c.fetch_add(v, Ordering::Relaxed);
    }
}

/// Shards, a power of two. Threads are numbered, not pinned to CPUs, so the
/// count follows the threads a benchmark runs (64), not the CPUs: two
/// threads on different CPUs sharing a shard would bounce its line.
const SHARDS: usize = 64;

pub(crate) struct Stats {
    shards: Box<[CachePadded<Shard>]>,
}

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static THREAD_SLOT: Cell<usize> = Cell::new(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
}

impl Stats {
    pub(crate) fn new() -> Stats {
        Stats { shards: (0..SHARDS).map(|_| CachePadded::new(Shard::default())).collect() }
    }

    /// The calling thread's shard.
    #[inline]
    pub(crate) fn shard(&self) -> &Shard {
        let i = THREAD_SLOT.with(|s| s.get());
        &self.shards[i & (self.shards.len() - 1)]
    }

    pub(crate) fn snapshot(&self) -> MbStats {
        let mut s = MbStats::default();
        for sh in self.shards.iter() {
            sh.add_into(&mut s);
        }
        s
    }

    pub(crate) fn free_delta(&self) -> i64 {
        self.shards.iter().map(|s| s.free_delta.load(Ordering::Relaxed)).sum()
    }

    pub(crate) fn reset(&self) {
        for sh in self.shards.iter() {
            sh.reset();
        }
    }
}
