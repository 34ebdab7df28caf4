//! Invariants, checked. [`Allocator::check_consistency`] regenerates every
//! touched group's buddy and summary from its bitmap and compares them
//! with what was kept incrementally, along with the lock-free summaries,
//! the order-index memberships and the free count: the oracle of the
//! property tests and of `check`. In debug builds (and so in the tests)
//! [`debug_assert_summary`] checks the cheap half of that after every
//! change to a group: the summary agrees with the buddy's own counters.

use crate::allocator::Allocator;
use crate::buddy::{fragment_size_bucket, GroupInfo};
use crate::criteria::GroupSummary;
use crate::geometry::Geometry;
use crate::group::summary_of;
use crate::order_index::IndexKind;

/// An invariant of the allocator found broken by
/// [`Allocator::check_consistency`]: a bug, named by where it lies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A group's buddy (its chunks and counters) is not the one its
    /// bitmap regenerates.
    #[error("group {group}: buddy {kept:?} != regenerated {regenerated:?}")]
    Buddy {
        /// The group.
        group: u32,
        /// The kept buddy's counters.
        kept: Box<GroupInfo>,
        /// The regenerated one's.
        regenerated: Box<GroupInfo>,
    },
    /// A group's lock-free summary is not its buddy's.
    #[error("group {group}: summary {summary:?} != info {info:?}")]
    Summary {
        /// The group.
        group: u32,
        /// The lock-free summary.
        summary: GroupSummary,
        /// The buddy's counters.
        info: Box<GroupInfo>,
    },
    /// A group is in an order set its counters do not name, or missing
    /// from one they do.
    #[error("group {group}: index membership at order {order} disagrees with {info:?}")]
    IndexMembership {
        /// The group.
        group: u32,
        /// The order whose sets disagree.
        order: u32,
        /// The group's counters.
        info: Box<GroupInfo>,
    },
    /// The free-block counter is not the sum of the groups' free blocks.
    #[error("free blocks {counter} != sum over groups {summed}")]
    FreeCount {
        /// The allocator's counter.
        counter: u64,
        /// The groups' free blocks added up.
        summed: u64,
    },
}

impl Allocator {
    /// Check every invariant: each touched group's buddy and info equal those
    /// regenerated from its bitmap, the lock-free summaries match, every
    /// group is in exactly the index sets its orders name, and the free count
    /// adds up. Takes each group lock in turn; meant for tests and `check`.
    /// The first violation found is the answer.
    pub fn check_consistency(&self) -> std::result::Result<(), Violation> {
        let mut free = 0u64;
        for g in 0..self.geo.groups() {
            let info = self.group(g, |b| {
                let regen = b.regenerated();
                if regen != *b {
                    return Err(Violation::Buddy {
                        group: g,
                        kept: Box::new(*b.info()),
                        regenerated: Box::new(*regen.info()),
                    });
                }
                Ok(*b.info())
            })?;
            free += u64::from(info.free);
            if self.groups.summary(g) != summary_of(&info) {
                return Err(Violation::Summary { group: g, summary: self.groups.summary(g), info: Box::new(info) });
            }
            for k in 0..self.geo.num_orders() {
                let in_l = self.index.set(IndexKind::LargestFreeOrder, k).contains(g);
                let in_a = self.index.set(IndexKind::AvgFragmentSize, k).contains(g);
                if in_l != (info.largest_free_order == k as i8) || in_a != (info.avg_fragment_order == k as i8) {
                    return Err(Violation::IndexMembership { group: g, order: k as u32, info: Box::new(info) });
                }
            }
        }
        if free != self.free_blocks() {
            return Err(Violation::FreeCount { counter: self.free_blocks(), summed: free });
        }
        Ok(())
    }
}

/// A group's summary agrees with itself, as it must after any change:
/// every free block lies in exactly one maximal chunk, the largest free
/// order is the highest order with a chunk, the average-fragment bucket
/// follows from the free and fragment counts, and the counts fit the
/// group. O(orders): debug builds check it after every change to a group.
pub(crate) fn debug_assert_summary(geo: &Geometry, g: u32, info: &GroupInfo) {
    if !cfg!(debug_assertions) {
        return;
    }
    let len = geo.group_len(g);
    let in_chunks: u64 = info.counters.iter().enumerate().map(|(k, &c)| u64::from(c) << k).sum();
    assert_eq!(in_chunks, u64::from(info.free), "group {g}: chunks cover {in_chunks} blocks, {info:?}");
    assert!(info.free <= len && info.fragments <= info.free, "group {g}: counts past the group: {info:?}");
    assert_eq!(info.free == 0, info.fragments == 0, "group {g}: free and fragments disagree: {info:?}");
    assert!(info.free == 0 || info.first_free < len, "group {g}: first free past the group: {info:?}");
    let largest = info.counters.iter().rposition(|&c| c > 0).map_or(-1, |k| k as i8);
    assert_eq!(info.largest_free_order, largest, "group {g}: largest free order: {info:?}");
    let avg = info.free.checked_div(info.fragments).map_or(-1, |a| fragment_size_bucket(a, geo.num_orders()) as i8);
    assert_eq!(info.avg_fragment_order, avg, "group {g}: average fragment bucket: {info:?}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_free_counter_off_by_one_is_named_with_both_counts() {
        let a = Allocator::new(Geometry::new(4096, 4 * 32768).unwrap()).unwrap();
        assert_eq!(a.check_consistency(), Ok(()));
        let free = a.free_blocks();
        a.initial_free.fetch_add(1, Ordering::Relaxed);
        assert_eq!(a.check_consistency(), Err(Violation::FreeCount { counter: free + 1, summed: free }));
    }
}
