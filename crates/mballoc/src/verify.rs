//! Invariants, checked. [`Allocator::check_consistency`] regenerates every
//! touched group's buddy and summary from its bitmap and compares them
//! with what was kept incrementally, along with the lock-free summaries,
//! the order-index memberships and the free count: the oracle of the
//! property tests and of `check`. In debug builds (and so in the tests)
//! [`debug_assert_summary`] checks the cheap half of that after every
//! change to a group: the summary agrees with the buddy's own counters.

use crate::allocator::Allocator;
use crate::buddy::{fragment_size_bucket, GroupInfo};
use crate::geometry::Geometry;
use crate::group::summary_of;
use crate::order_index::IndexKind;

impl Allocator {
    /// Check every invariant: each touched group's buddy and info equal those
    /// regenerated from its bitmap, the lock-free summaries match, every
    /// group is in exactly the index sets its orders name, and the free count
    /// adds up. Takes each group lock in turn; meant for tests and `check`.
    pub fn check_consistency(&self) -> std::result::Result<(), String> {
        let mut free = 0u64;
        for g in 0..self.geo.groups() {
            let info = self.group(g, |b| {
                let regen = b.regenerated();
                if regen != *b {
                    return Err(format!("group {g}: buddy {:?} != regenerated {:?}", b.info(), regen.info()));
                }
                Ok(*b.info())
            })?;
            free += u64::from(info.free);
            if self.groups.summary(g) != summary_of(&info) {
                return Err(format!("group {g}: summary {:?} != info {:?}", self.groups.summary(g), info));
            }
            for k in 0..self.geo.num_orders() {
                let in_l = self.index.set(IndexKind::LargestFreeOrder, k).contains(g);
                let in_a = self.index.set(IndexKind::AvgFragmentSize, k).contains(g);
                if in_l != (info.largest_free_order == k as i8) || in_a != (info.avg_fragment_order == k as i8) {
                    return Err(format!("group {g}: index membership at order {k} disagrees with {info:?}"));
                }
            }
        }
        if free != self.free_blocks() {
            return Err(format!("free blocks {} != sum over groups {free}", self.free_blocks()));
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
