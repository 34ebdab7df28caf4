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
}
