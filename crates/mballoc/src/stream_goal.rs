//! Stream goals: where the last stream allocation landed, so that the next
//! stream request starts its scan there instead of at its own goal.
//!
//! The kernel before 6.17 kept one such goal (`s_mb_last_group`, plus a
//! start block) for the whole volume under the global `s_md_lock`; every
//! stream allocation on every CPU read and wrote it under that lock. The 2025
//! series made it `min(CPUs, groups / 4)` goals in plain words, each file
//! hashed to one by inode number: a goal is only a hint, every group it names
//! is re-checked under the group's lock, so a stale or torn-between-threads
//! value costs at most a longer scan, never a wrong allocation.

use crate::sync::AtomicU32;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::atomic::Ordering;

/// How the allocator's shared state is synchronised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Concurrency {
    /// The 2025 kernel: several stream goals in their own cache lines, busy
    /// groups skipped by every pass but the last.
    #[default]
    Scalable,
    /// The kernel before that series, kept to measure against: one stream
    /// goal under one lock, every group lock waited for.
    Legacy,
}

/// The stream goals of one volume.
pub(crate) enum StreamGoals {
    /// One goal per slot, each in its own cache line; no lock.
    Sharded(Box<[CachePadded<AtomicU32>]>),
    /// One goal for everyone, under one lock.
    Locked(Mutex<u32>),
}

impl StreamGoals {
    /// `n` (at least one) independent goals, all at group 0.
    pub(crate) fn sharded(n: u32) -> StreamGoals {
        assert!(n > 0, "at least one stream goal");
        StreamGoals::Sharded((0..n).map(|_| CachePadded::new(AtomicU32::new(0))).collect())
    }

    /// One goal behind one lock.
    pub(crate) fn locked() -> StreamGoals {
        StreamGoals::Locked(Mutex::new(0))
    }

    /// Number of goals.
    pub(crate) fn len(&self) -> usize {
        match self {
            StreamGoals::Sharded(g) => g.len(),
            StreamGoals::Locked(_) => 1,
        }
    }

    /// The goal slot of the stream with this key (a file's inode number).
    pub(crate) fn slot(&self, key: u64) -> usize {
        (key % self.len() as u64) as usize
    }

    /// The group the slot's last stream allocation used.
    pub(crate) fn load(&self, slot: usize) -> u32 {
        match self {
            StreamGoals::Sharded(g) => g[slot].load(Ordering::Relaxed),
            StreamGoals::Locked(m) => *m.lock(),
        }
    }

    /// Remember that the slot's stream allocation used group `g`.
    pub(crate) fn store(&self, slot: usize, g: u32) {
        match self {
            StreamGoals::Sharded(goals) => goals[slot].store(g, Ordering::Relaxed),
            StreamGoals::Locked(m) => *m.lock() = g,
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::thread;
    use std::sync::Arc;

    /// Two streams on different slots never see each other's goal, and a
    /// reader of a contended slot sees one of the values actually stored.
    #[test]
    fn goals_are_per_slot_and_never_invented() {
        loom::model(|| {
            let goals = Arc::new(StreamGoals::sharded(2));
            let a = {
                let goals = Arc::clone(&goals);
                thread::spawn(move || {
                    goals.store(0, 7);
                    goals.store(0, 9);
                })
            };
            let b = {
                let goals = Arc::clone(&goals);
                thread::spawn(move || {
                    goals.store(1, 3);
                    goals.load(0)
                })
            };
            a.join().unwrap();
            let seen = b.join().unwrap();
            assert!([0, 7, 9].contains(&seen), "slot 0 read {seen}");
            assert_eq!(goals.load(0), 9);
            assert_eq!(goals.load(1), 3);
        });
    }
}
