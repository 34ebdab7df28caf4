//! How new files are numbered. A file's number picks its home group (and
//! so its first goal) and its stream-goal slot, so a profile that makes
//! ext4's decisions must number files as ext4 does: the lowest free inode
//! number, reused as soon as a file is gone. The engine's own profile
//! never reuses a number, so a stale [`FileId`](crate::FileId) can never
//! name a newer file.

use parking_lot::Mutex;
use std::collections::BTreeSet;

/// First number handed to a file by default: ext4's first non-reserved
/// inode after `lost+found` (11).
pub const FIRST_INO: u64 = 12;

/// How new files are numbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InodeNumbers {
    /// `first`, `first + 1`, ...; never reused.
    Sequential {
        /// The first number.
        first: u64,
    },
    /// The lowest number from `first` on that no file holds (ext4 with a
    /// journal: an unlinked file's number is free again at once). `mke2fs`
    /// gives the orphan file inode 12, so a fresh volume's first file is 13.
    LowestFree {
        /// The lowest number a file may get.
        first: u64,
    },
}

impl InodeNumbers {
    /// The lowest number this policy hands out.
    pub fn first(self) -> u64 {
        match self {
            InodeNumbers::Sequential { first } | InodeNumbers::LowestFree { first } => first,
        }
    }
}

/// The numbers in use and the next to give.
#[derive(Debug)]
pub(crate) struct InodePool {
    policy: InodeNumbers,
    inner: Mutex<Numbers>,
}

#[derive(Debug)]
struct Numbers {
    /// Every number below it has been handed out or skipped.
    next: u64,
    /// Numbers below `next` free again (LowestFree only).
    freed: BTreeSet<u64>,
}

impl InodePool {
    pub(crate) fn new(policy: InodeNumbers) -> InodePool {
        InodePool { policy, inner: Mutex::new(Numbers { next: policy.first(), freed: BTreeSet::new() }) }
    }

    /// A number for a new file.
    pub(crate) fn take(&self) -> u64 {
        let mut n = self.inner.lock();
        if let Some(x) = n.freed.pop_first() {
            return x;
        }
        n.next += 1;
        n.next - 1
    }

    /// The lowest free number in `[lo, hi)`, taken (ext4's search of one
    /// group's inode bitmap).
    pub(crate) fn take_in(&self, lo: u64, hi: u64) -> Option<u64> {
        let lo = lo.max(self.policy.first());
        let mut n = self.inner.lock();
        if let Some(&x) = n.freed.range(lo..hi).next() {
            n.freed.remove(&x);
            return Some(x);
        }
        if n.next >= hi {
            return None;
        }
        let x = n.next.max(lo);
        if let InodeNumbers::LowestFree { .. } = self.policy {
            let from = n.next;
            n.freed.extend(from..x);
        }
        n.next = x + 1;
        Some(x)
    }

    /// Numbers in `[lo, hi)` in use: handed out and not given back, or
    /// below the first (reserved).
    pub(crate) fn used_in(&self, lo: u64, hi: u64) -> u64 {
        let first = self.policy.first();
        let n = self.inner.lock();
        let reserved = first.min(hi).saturating_sub(lo);
        let (a, b) = (lo.max(first), hi.min(n.next));
        let issued = if a < b { b - a - n.freed.range(a..b).count() as u64 } else { 0 };
        reserved + issued
    }

    /// `ino` belongs to an existing file (one carried over from a volume).
    pub(crate) fn mark_used(&self, ino: u64) {
        let mut n = self.inner.lock();
        if ino >= n.next {
            if let InodeNumbers::LowestFree { .. } = self.policy {
                let from = n.next;
                n.freed.extend(from..ino);
            }
            n.next = ino + 1;
        } else {
            n.freed.remove(&ino);
        }
    }

    /// `ino`'s file is gone.
    pub(crate) fn give_back(&self, ino: u64) {
        if let InodeNumbers::LowestFree { first } = self.policy {
            if ino >= first {
                self.inner.lock().freed.insert(ino);
            }
        }
    }

    /// Whether `ino` was ever handed out (to tell an unlinked file from one
    /// that never existed).
    pub(crate) fn was_issued(&self, ino: u64) -> bool {
        ino >= self.policy.first() && ino < self.inner.lock().next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_reuses_and_sequential_never_does() {
        let p = InodePool::new(InodeNumbers::LowestFree { first: 13 });
        assert_eq!((p.take(), p.take(), p.take()), (13, 14, 15));
        p.give_back(14);
        p.give_back(13);
        assert_eq!(p.take(), 13);
        p.mark_used(20);
        assert_eq!((p.take(), p.take()), (14, 16));
        let s = InodePool::new(InodeNumbers::Sequential { first: 12 });
        assert_eq!(s.take(), 12);
        s.give_back(12);
        assert_eq!(s.take(), 13);
        assert!(s.was_issued(12) && !s.was_issued(14));
    }

    #[test]
    fn numbers_are_taken_and_counted_per_range() {
        let p = InodePool::new(InodeNumbers::LowestFree { first: 11 });
        // Group 0 holds 1..=8, group 1 9..=16 (8 per group).
        assert_eq!(p.used_in(1, 9), 8);
        assert_eq!(p.take_in(1, 9), None);
        assert_eq!(p.used_in(9, 17), 2);
        assert_eq!(p.take_in(9, 17), Some(11));
        assert_eq!(p.take_in(17, 25), Some(17));
        // 12..=16 were skipped and stay free, lowest first.
        assert_eq!(p.used_in(9, 17), 3);
        assert_eq!(p.take(), 12);
        p.give_back(11);
        assert_eq!(p.take_in(9, 17), Some(11));
        assert_eq!(p.used_in(17, 25), 1);
    }
}
