//! Per-order sets of groups, read without any group lock.
//!
//! The kernel keeps, for each order, an xarray of the groups whose largest
//! free chunk has that order, and another of the groups whose average
//! fragment size falls in that bucket; scans walk them "linear-like": every
//! qualifying group at or after the goal across all candidate orders, then
//! the ones before it. Here each set is a two-level atomic bitmap over group
//! numbers: a leaf bit per group and a summary bit per leaf word. "Next member
//! at or after g" skips 4096 groups per summary word, so a scan never visits
//! groups outside the set, and a set over 2^20 groups costs 130 KiB.
//!
//! Writers change a group's membership while holding that group's lock, so a
//! group's own bits never race; different groups share words, hence atomics.
//! Readers may see a group a moment late or early: every candidate is
//! re-checked under its lock, exactly as the kernel tolerates stale lists.

use crate::sync::{AtomicU32, AtomicU64};
use std::sync::atomic::Ordering;

/// One set of groups.
pub struct GroupSet {
    leaves: Box<[AtomicU64]>,
    summary: Box<[AtomicU64]>,
    len: AtomicU32,
    groups: u32,
}

impl GroupSet {
    /// An empty set over groups `0..groups`.
    pub fn new(groups: u32) -> GroupSet {
        let words = groups.div_ceil(64) as usize;
        GroupSet {
            leaves: (0..words).map(|_| AtomicU64::new(0)).collect(),
            summary: (0..words.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            len: AtomicU32::new(0),
            groups,
        }
    }

    /// Number of member groups.
    pub fn len(&self) -> u32 {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether the set has no members.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `g` is a member.
    pub fn contains(&self, g: u32) -> bool {
        self.leaves[(g >> 6) as usize].load(Ordering::Acquire) >> (g & 63) & 1 == 1
    }

    /// Add `g`. Returns whether it was absent.
    pub fn insert(&self, g: u32) -> bool {
        debug_assert!(g < self.groups);
        let w = (g >> 6) as usize;
        let bit = 1u64 << (g & 63);
        let prev = self.leaves[w].fetch_or(bit, Ordering::SeqCst);
        self.summary[w >> 6].fetch_or(1 << (w & 63), Ordering::SeqCst);
        if prev & bit == 0 {
            self.len.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Remove `g`. Returns whether it was present.
    pub fn remove(&self, g: u32) -> bool {
        let w = (g >> 6) as usize;
        let bit = 1u64 << (g & 63);
        let prev = self.leaves[w].fetch_and(!bit, Ordering::SeqCst);
        if prev & !bit == 0 {
            // The leaf word looks empty: drop its summary bit, then look again
            // in case another group of this word was inserted meanwhile (the
            // inserter sets the leaf before the summary, so one of us sees it).
            let sbit = 1u64 << (w & 63);
            self.summary[w >> 6].fetch_and(!sbit, Ordering::SeqCst);
            if self.leaves[w].load(Ordering::SeqCst) != 0 {
                self.summary[w >> 6].fetch_or(sbit, Ordering::SeqCst);
            }
        }
        if prev & bit != 0 {
            self.len.fetch_sub(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Add every group of `[start, end)` (used when building a volume whose
    /// untouched groups all share one shape).
    pub fn insert_range(&self, start: u32, end: u32) {
        let mut g = start;
        while g < end {
            let w = (g >> 6) as usize;
            let hi = (end - ((w as u32) << 6)).min(64);
            let lo = g & 63;
            let upper = if hi == 64 { u64::MAX } else { (1u64 << hi) - 1 };
            let m = upper & !((1u64 << lo) - 1);
            let prev = self.leaves[w].fetch_or(m, Ordering::SeqCst);
            self.len.fetch_add((m & !prev).count_ones(), Ordering::Relaxed);
            self.summary[w >> 6].fetch_or(1 << (w & 63), Ordering::SeqCst);
            g = ((w as u32) + 1) << 6;
        }
    }

    /// First member in `[from, end)`.
    pub fn next_in(&self, from: u32, end: u32) -> Option<u32> {
        let end = end.min(self.groups);
        if from >= end {
            return None;
        }
        let mut w = (from >> 6) as usize;
        let word = self.leaves[w].load(Ordering::Acquire) & (u64::MAX << (from & 63));
        if word != 0 {
            let g = ((w as u32) << 6) + word.trailing_zeros();
            return (g < end).then_some(g);
        }
        w += 1;
        let last_word = ((end - 1) >> 6) as usize;
        while w <= last_word {
            let s = w >> 6;
            let sword = self.summary[s].load(Ordering::Acquire) & (u64::MAX << (w & 63));
            if sword == 0 {
                w = (s + 1) << 6;
                continue;
            }
            w = (s << 6) + sword.trailing_zeros() as usize;
            if w > last_word {
                return None;
            }
            let word = self.leaves[w].load(Ordering::Acquire);
            if word != 0 {
                let g = ((w as u32) << 6) + word.trailing_zeros();
                return (g < end).then_some(g);
            }
            // A stale summary bit: the word emptied after we read it.
            w += 1;
        }
        None
    }
}

/// Which family of sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// Groups by the order of their largest free chunk.
    LargestFreeOrder,
    /// Groups by the bucket of their average free-fragment size.
    AvgFragmentSize,
}

/// Both families, one set per order.
pub struct OrderIndexes {
    largest: Box<[GroupSet]>,
    avg: Box<[GroupSet]>,
}

impl OrderIndexes {
    /// Empty indexes over `groups` groups with `num_orders` orders.
    pub fn new(groups: u32, num_orders: usize) -> OrderIndexes {
        OrderIndexes {
            largest: (0..num_orders).map(|_| GroupSet::new(groups)).collect(),
            avg: (0..num_orders).map(|_| GroupSet::new(groups)).collect(),
        }
    }

    /// The set of `kind` for `order`.
    pub fn set(&self, kind: IndexKind, order: usize) -> &GroupSet {
        match kind {
            IndexKind::LargestFreeOrder => &self.largest[order],
            IndexKind::AvgFragmentSize => &self.avg[order],
        }
    }

    /// Number of orders.
    pub fn num_orders(&self) -> usize {
        self.largest.len()
    }

    /// Move group `g` between sets after its orders changed (group lock held).
    /// An order of −1 (full group) means "in no set": full groups never linger.
    pub fn update(&self, g: u32, old: (i8, i8), new: (i8, i8)) {
        if old.0 != new.0 {
            if old.0 >= 0 {
                self.largest[old.0 as usize].remove(g);
            }
            if new.0 >= 0 {
                self.largest[new.0 as usize].insert(g);
            }
        }
        if old.1 != new.1 {
            if old.1 >= 0 {
                self.avg[old.1 as usize].remove(g);
            }
            if new.1 >= 0 {
                self.avg[new.1 as usize].insert(g);
            }
        }
    }

    /// First group at or after `g` (wrapping) whose order of `kind` is at
    /// least `order` (what a single-group lookup would answer; the scans
    /// walk every candidate instead).
    #[cfg(test)]
    pub fn first_at_least(&self, kind: IndexKind, order: usize, g: u32, groups: u32) -> Option<u32> {
        let sets = match kind {
            IndexKind::LargestFreeOrder => &self.largest[order.min(self.largest.len())..],
            IndexKind::AvgFragmentSize => &self.avg[order.min(self.avg.len())..],
        };
        let after = sets.iter().filter_map(|s| s.next_in(g, groups)).min();
        after.or_else(|| sets.iter().filter_map(|s| s.next_in(0, g)).min())
    }

    /// The kernel's linear-like traversal over the sets `orders` of `kind`:
    /// for each set, its members in `[start, groups)` ascending; then for each
    /// set, its members in `[0, start)`. `visit` returns `true` to stop.
    /// Returns whether a visit stopped the walk.
    pub fn walk_linear_like(
        &self,
        kind: IndexKind,
        orders: std::ops::RangeInclusive<usize>,
        start: u32,
        groups: u32,
        mut visit: impl FnMut(u32) -> bool,
    ) -> bool {
        for (lo, hi) in [(start, groups), (0, start)] {
            for order in orders.clone() {
                if order >= self.num_orders() {
                    break;
                }
                let set = self.set(kind, order);
                if set.is_empty() {
                    // Most orders are empty on a uniform volume; skipping them
                    // saves sweeping their summary words on every request.
                    continue;
                }
                let mut g = lo;
                while let Some(found) = set.next_in(g, hi) {
                    if visit(found) {
                        return true;
                    }
                    g = found + 1;
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_skips_empty_words() {
        let s = GroupSet::new(1 << 20);
        assert_eq!(s.next_in(0, 1 << 20), None);
        s.insert(5);
        s.insert(700_000);
        s.insert((1 << 20) - 1);
        assert_eq!(s.next_in(0, 1 << 20), Some(5));
        assert_eq!(s.next_in(6, 1 << 20), Some(700_000));
        assert_eq!(s.next_in(700_001, 1 << 20), Some((1 << 20) - 1));
        assert_eq!(s.next_in(6, 700_000), None);
        assert!(s.remove(700_000));
        assert!(!s.remove(700_000));
        assert_eq!(s.next_in(6, 1 << 20), Some((1 << 20) - 1));
        assert_eq!(s.len(), 2);
        s.insert_range(10, 200);
        assert_eq!(s.len(), 192);
        assert_eq!(s.next_in(6, 1 << 20), Some(10));
        assert_eq!(s.next_in(199, 1 << 20), Some(199));
        assert_eq!(s.next_in(200, 1 << 20), Some((1 << 20) - 1));
    }

    #[test]
    fn linear_like_order_matches_kernel_example() {
        // order1 = {A,B | C,D}, order2 = {E,F | G,H} with the start at '|'
        // visits C, D, G, H, A, B, E, F.
        let idx = OrderIndexes::new(100, 4);
        let (a, b, c, d) = (10, 20, 60, 70);
        let (e, f, g, h) = (15, 25, 65, 75);
        for x in [a, b, c, d] {
            idx.update(x, (-1, -1), (1, -1));
        }
        for x in [e, f, g, h] {
            idx.update(x, (-1, -1), (2, -1));
        }
        let mut seen = vec![];
        idx.walk_linear_like(IndexKind::LargestFreeOrder, 1..=3, 50, 100, |x| {
            seen.push(x);
            false
        });
        assert_eq!(seen, vec![c, d, g, h, a, b, e, f]);
        assert_eq!(idx.first_at_least(IndexKind::LargestFreeOrder, 2, 76, 100), Some(e));
        assert_eq!(idx.first_at_least(IndexKind::LargestFreeOrder, 1, 61, 100), Some(g));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::thread;
    use std::sync::Arc;

    /// The race the summary word exists for: one thread removes the last
    /// member of a leaf word while another inserts a neighbour into it. The
    /// summary bit must survive, or the new member becomes invisible.
    #[test]
    fn remove_and_insert_in_one_word_keep_the_summary() {
        loom::model(|| {
            let set = Arc::new(GroupSet::new(128));
            set.insert(3);
            let remover = {
                let set = Arc::clone(&set);
                thread::spawn(move || assert!(set.remove(3)))
            };
            let inserter = {
                let set = Arc::clone(&set);
                thread::spawn(move || assert!(set.insert(40)))
            };
            remover.join().unwrap();
            inserter.join().unwrap();
            assert_eq!(set.next_in(0, 128), Some(40));
            assert_eq!(set.len(), 1);
            assert!(!set.contains(3));
        });
    }

    /// A reader walking while a writer moves a group between words sees only
    /// real members, inside the range it asked for.
    #[test]
    fn readers_see_only_members() {
        loom::model(|| {
            let set = Arc::new(GroupSet::new(256));
            set.insert(10);
            let writer = {
                let set = Arc::clone(&set);
                thread::spawn(move || {
                    set.insert(200);
                    set.remove(10);
                })
            };
            let found = set.next_in(5, 256);
            assert!(matches!(found, Some(10) | Some(200)), "reader found {found:?}");
            writer.join().unwrap();
            assert_eq!(set.next_in(0, 256), Some(200));
            assert_eq!(set.next_in(0, 200), None);
        });
    }

    /// The member count stays exact while a range insert and single
    /// removals of other words run at once.
    #[test]
    fn member_count_is_exact() {
        loom::model(|| {
            let set = Arc::new(GroupSet::new(192));
            set.insert(130);
            let ranger = {
                let set = Arc::clone(&set);
                thread::spawn(move || set.insert_range(60, 70))
            };
            let remover = {
                let set = Arc::clone(&set);
                thread::spawn(move || assert!(set.remove(130)))
            };
            ranger.join().unwrap();
            remover.join().unwrap();
            assert_eq!(set.len(), 10);
            assert_eq!(set.next_in(0, 192), Some(60));
            assert_eq!(set.next_in(70, 192), None);
        });
    }
}
