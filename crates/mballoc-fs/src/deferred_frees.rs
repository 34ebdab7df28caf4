//! Transactions and deferred frees.
//!
//! A block freed by truncate, punch or unlink must not be handed out again
//! before the transaction that freed it commits: after a crash the old owner
//! would otherwise still point at blocks that a new owner has overwritten.
//! So a free is recorded against the running transaction and reaches the
//! allocator only when that transaction commits.
//!
//! Records are kept per group, keyed by first block, and a new record merges
//! with a neighbour of the same group and transaction *before* it is
//! inserted, so freeing the three pieces of a punched extent costs one
//! record. Groups are spread over independently locked shards, and the
//! count of pending blocks is one atomic, so frees on different groups never
//! meet on a lock. The legacy configuration keeps one shard: every free on
//! the volume takes the same lock, as `s_md_lock` did before the kernel's
//! 2025 series.

use crate::error::{FsError, Result};
use mballoc::{Allocator, Concurrency};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

const SHARDS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FreeRec {
    len: u64,
    group: u32,
    tid: u64,
    /// When it was recorded (a merge counts as a new record): a commit
    /// gives records back in this order, as ext4 walks its freed-data
    /// list, which decides where groups land in linked order lists.
    seq: u64,
}

/// What a commit does when it finds another commit running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenBusy {
    /// Wait for it, then commit: for callers that need their own changes
    /// committed (fsync, sync, unmount).
    Wait,
    /// Do nothing: for the commit timer, whose frees the running commit or
    /// the next one releases just the same. Waiting would put the writer
    /// that crossed the interval to sleep behind a committer that may have
    /// been preempted, which with many more threads than CPUs happened on
    /// nearly every timer commit of the in-memory engine.
    Skip,
}

/// Counters of the transaction machinery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeferredFreeStats {
    /// Transactions committed.
    pub commits: u64,
    /// Free records inserted (after merging).
    pub records: u64,
    /// Frees absorbed into a neighbouring record.
    pub merges: u64,
    /// Blocks returned to the allocator by commits.
    pub blocks_released: u64,
}

/// The running transaction and its pending frees.
#[derive(Debug)]
pub struct DeferredFrees {
    running: AtomicU64,
    shards: Vec<Mutex<BTreeMap<u64, FreeRec>>>,
    pending: AtomicU64,
    commit: Mutex<DeferredFreeStats>,
    records: AtomicU64,
    merges: AtomicU64,
    next_seq: AtomicU64,
}

impl Default for DeferredFrees {
    fn default() -> Self {
        DeferredFrees::new(Concurrency::Scalable)
    }
}

impl DeferredFrees {
    /// An empty journal whose pending frees are spread over shards
    /// ([`Concurrency::Scalable`]) or kept under one lock.
    pub fn new(concurrency: Concurrency) -> DeferredFrees {
        let shards = match concurrency {
            Concurrency::Scalable => SHARDS,
            Concurrency::Legacy => 1,
        };
        DeferredFrees {
            running: AtomicU64::new(1),
            shards: (0..shards).map(|_| Mutex::new(BTreeMap::new())).collect(),
            pending: AtomicU64::new(0),
            commit: Mutex::new(DeferredFreeStats::default()),
            records: AtomicU64::new(0),
            merges: AtomicU64::new(0),
            next_seq: AtomicU64::new(0),
        }
    }

    /// The running transaction's id.
    pub fn running_tid(&self) -> u64 {
        self.running.load(Ordering::Acquire)
    }

    /// Blocks freed but not yet committed (`s_mb_free_pending`).
    pub fn pending_blocks(&self) -> u64 {
        self.pending.load(Ordering::Acquire)
    }

    /// Counters so far.
    pub fn stats(&self) -> DeferredFreeStats {
        let mut s = *self.commit.lock();
        s.records = self.records.load(Ordering::Relaxed);
        s.merges = self.merges.load(Ordering::Relaxed);
        s
    }

    /// Record `[start, start + len)`, inside group `group`, as freed by the
    /// running transaction. A range already pending is an error and changes
    /// nothing.
    pub fn defer_free(&self, start: u64, len: u64, group: u32) -> Result<()> {
        assert!(len > 0, "deferring an empty free");
        let tid = self.running_tid();
        let mut tree = self.shards[group as usize % self.shards.len()].lock();
        let end = start + len;
        if let Some((&s, r)) = tree.range(..end).next_back() {
            if s + r.len > start {
                return Err(FsError::AlreadyPendingFree { block: start.max(s) });
            }
        }
        self.pending.fetch_add(len, Ordering::AcqRel);
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let same = |r: &FreeRec| r.tid == tid && r.group == group;
        // Merge into the left neighbour, then pull the right one in too.
        if let Some((&ls, l)) = tree.range(..start).next_back() {
            if ls + l.len == start && same(l) {
                let mut merged = l.len + len;
                if let Some(r) = tree.get(&end).copied().filter(same) {
                    tree.remove(&end);
                    merged += r.len;
                    self.merges.fetch_add(1, Ordering::Relaxed);
                }
                let left = tree.get_mut(&ls).expect("left record");
                left.len = merged;
                left.seq = seq;
                self.merges.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        if let Some(r) = tree.get(&end).copied().filter(same) {
            tree.remove(&end);
            tree.insert(start, FreeRec { len: len + r.len, group, tid, seq });
            self.merges.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        tree.insert(start, FreeRec { len, group, tid, seq });
        self.records.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Commit the running transaction: every free it (or an earlier one)
    /// recorded goes back to the allocator. Returns the blocks released.
    #[cfg(test)]
    pub fn commit(&self, alloc: &Allocator) -> u64 {
        self.commit_durable(alloc, WhenBusy::Wait, || true).unwrap_or(0)
    }

    /// Commit once `make_durable` has made the transaction's metadata
    /// durable: the frees are taken first, so any change recorded before a
    /// free that this commit releases is covered by `make_durable`. When it
    /// fails, the frees stay pending and `None` is returned. Commits are
    /// serialized; with [`WhenBusy::Skip`] a commit that finds another
    /// running does nothing and returns `Some(0)`.
    pub fn commit_durable(
        &self,
        alloc: &Allocator,
        when_busy: WhenBusy,
        make_durable: impl FnOnce() -> bool,
    ) -> Option<u64> {
        let mut stats = match when_busy {
            WhenBusy::Wait => self.commit.lock(),
            WhenBusy::Skip => match self.commit.try_lock() {
                Some(stats) => stats,
                None => return Some(0),
            },
        };
        let tid = self.running.fetch_add(1, Ordering::AcqRel);
        // A free recorded after this load carries a tid this commit covers,
        // but a later commit releases it just the same.
        let mut ready: Vec<(u64, FreeRec)> = Vec::new();
        if self.pending.load(Ordering::Acquire) > 0 {
            for shard in &self.shards {
                // The shard's lock is held only for the swap: a free on the
                // same shard never waits for this commit to walk the records.
                let tree = std::mem::take(&mut *shard.lock());
                let (now, later): (Vec<_>, Vec<_>) = tree.into_iter().partition(|(_, r)| r.tid <= tid);
                ready.extend(now);
                self.restore(later);
            }
        }
        if !make_durable() {
            self.restore(ready);
            return None;
        }
        stats.commits += 1;
        ready.sort_unstable_by_key(|(_, r)| r.seq);
        let mut released = 0;
        for (s, r) in ready {
            alloc.free(s, r.len).unwrap_or_else(|e| panic!("committing free of [{s}, +{}): {e}", r.len));
            self.pending.fetch_sub(r.len, Ordering::AcqRel);
            released += r.len;
        }
        stats.blocks_released += released;
        Some(released)
    }

    /// Put records taken out of their shards back, unmerged. They were
    /// pending all along, so no free recorded meanwhile can overlap them.
    fn restore(&self, records: Vec<(u64, FreeRec)>) {
        for (s, r) in records {
            let old = self.shards[r.group as usize % self.shards.len()].lock().insert(s, r);
            assert!(old.is_none(), "pending free at {s} recorded twice");
        }
    }

    /// Every pending range, for invariant checks.
    pub fn pending_ranges(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> =
            self.shards.iter().flat_map(|s| s.lock().iter().map(|(&a, r)| (a, r.len)).collect::<Vec<_>>()).collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mballoc::Geometry;

    #[test]
    fn a_skipping_commit_leaves_a_running_one_alone() {
        let alloc = Allocator::new(Geometry::with_group_size(4096, 1024, 4096).unwrap()).unwrap();
        alloc.claim(100, 10).unwrap();
        let j = DeferredFrees::default();
        j.defer_free(100, 10, 0).unwrap();
        {
            let _running = j.commit.lock();
            assert_eq!(j.commit_durable(&alloc, WhenBusy::Skip, || panic!("a skipped commit logs nothing")), Some(0));
            assert_eq!(j.pending_blocks(), 10);
            assert!(alloc.is_used(100).unwrap());
        }
        assert_eq!(j.commit_durable(&alloc, WhenBusy::Skip, || true), Some(10));
        assert!(!alloc.is_used(100).unwrap());
    }

    #[test]
    fn neighbours_merge_and_commit_releases() {
        let alloc = Allocator::new(Geometry::with_group_size(4096, 1024, 4096).unwrap()).unwrap();
        alloc.claim(100, 30).unwrap();
        let j = DeferredFrees::default();
        j.defer_free(100, 10, 0).unwrap();
        j.defer_free(120, 10, 0).unwrap();
        j.defer_free(110, 10, 0).unwrap();
        assert_eq!(j.pending_ranges(), vec![(100, 30)]);
        assert_eq!(j.pending_blocks(), 30);
        assert!(matches!(j.defer_free(105, 1, 0), Err(FsError::AlreadyPendingFree { block: 105 })));
        assert!(alloc.is_used(100).unwrap());
        assert_eq!(j.commit(&alloc), 30);
        assert!(!alloc.is_used(100).unwrap());
        assert_eq!(j.pending_blocks(), 0);
        let s = j.stats();
        assert_eq!((s.commits, s.records, s.merges), (1, 2, 2));
    }

    #[test]
    fn a_commit_that_cannot_be_made_durable_keeps_every_free_pending() {
        let alloc = Allocator::new(Geometry::with_group_size(4096, 1024, 4096).unwrap()).unwrap();
        alloc.claim(100, 10).unwrap();
        alloc.claim(1100, 10).unwrap();
        let j = DeferredFrees::default();
        j.defer_free(100, 10, 0).unwrap();
        j.defer_free(1100, 10, 1).unwrap();
        assert_eq!(j.commit_durable(&alloc, WhenBusy::Wait, || false), None);
        assert_eq!(j.pending_ranges(), vec![(100, 10), (1100, 10)]);
        assert!(alloc.is_used(100).unwrap() && alloc.is_used(1100).unwrap());
        // Still pending, so still guarded against a second free.
        assert!(matches!(j.defer_free(105, 1, 0), Err(FsError::AlreadyPendingFree { block: 105 })));
        // A free recorded while the next commit makes itself durable belongs
        // to the transaction after it and stays pending.
        alloc.claim(200, 5).unwrap();
        let released = j.commit_durable(&alloc, WhenBusy::Wait, || {
            j.defer_free(200, 5, 0).unwrap();
            true
        });
        assert_eq!(released, Some(20));
        assert_eq!(j.pending_ranges(), vec![(200, 5)]);
        assert!(!alloc.is_used(100).unwrap() && !alloc.is_used(1100).unwrap() && alloc.is_used(200).unwrap());
        assert_eq!(j.commit(&alloc), 5);
        assert_eq!(j.pending_blocks(), 0);
    }
}
