//! Where a new stream should begin.
//!
//! The kernel starts every stream where the last one of its goal slot
//! landed, and takes the first free chunk there. With more streams than
//! slots, streams that append in turn then take blocks in turn: 64 files
//! appended 4 KiB at a time end up interleaved block by block, thousands of
//! extents each. [`Allocator::stream_start`] instead gives a new stream room
//! to grow: the first block of a group nobody uses, or, when every group is
//! in use, the middle of the largest free run among the roomiest groups, so
//! the stream and the one below it each get half. A start is only a goal:
//! the caller asks for it with [`GoalPolicy::Only`](crate::GoalPolicy) and
//! picks again if another thread got there first.

use crate::allocator::Allocator;
use crate::order_index::IndexKind;

/// Groups whose summaries are read in search of an unused group.
const EMPTY_CANDIDATES: u32 = 64;
/// Partly used groups compared for their free space.
const PARTIAL_CANDIDATES: u32 = 8;

impl Allocator {
    /// A block where a new stream of at least `len` blocks has the most room,
    /// searching from group `from` onwards (wrapping), or `None` when no group
    /// has a free run of `len` blocks. Reads summaries without locks and
    /// locks at most one group; nothing is allocated.
    ///
    /// ```
    /// use mballoc::{Allocator, AllocRequest, Geometry};
    /// let a = Allocator::new(Geometry::with_group_size(4096, 1024, 4096)?)?;
    /// a.allocate(&AllocRequest::new(8).goal_only(0))?; // a stream in group 0
    /// assert_eq!(a.stream_start(0, 8), Some(1024));  // the next one gets group 1
    /// # Ok::<(), mballoc::Error>(())
    /// ```
    pub fn stream_start(&self, from: u32, len: u32) -> Option<u64> {
        let geo = *self.geometry();
        let n = geo.groups();
        let from = from % n;
        let top = geo.num_orders() - 1;
        let lowest = (31 - len.max(1).leading_zeros()) as usize;
        let prefix = geo.reserved_per_group();

        // One walk over the groups with the largest chunks looks for an
        // unused group (its whole length is room) and meanwhile remembers the
        // roomiest of the first few; only when no group has a chunk of the
        // top order do lower orders name the candidates.
        let mut best: Option<(u32, u32)> = None;
        for order in (lowest.min(top)..=top).rev() {
            let (mut seen, mut empty) = (0, None);
            let limit = if order == top { EMPTY_CANDIDATES } else { PARTIAL_CANDIDATES };
            self.index.walk_linear_like(IndexKind::LargestFreeOrder, order..=order, from, n, |g| {
                seen += 1;
                let free = self.groups.summary(g).free;
                if order == top && free == geo.group_len(g) - prefix && free >= len {
                    empty = Some(g);
                }
                if seen <= PARTIAL_CANDIDATES && best.is_none_or(|(_, f)| free > f) {
                    best = Some((g, free));
                }
                empty.is_some() || seen >= limit
            });
            if let Some(g) = empty {
                return Some(geo.group_first_block(g) + u64::from(prefix));
            }
            if best.is_some() {
                break;
            }
        }
        self.room_in_group(best?.0, len)
    }

    /// Where in group `g` a run of at least `len` blocks has the most room:
    /// the group's first largest aligned free chunk (the buddy knows it at
    /// once), or its middle when the chunk directly follows used blocks, so
    /// their owner keeps room to grow. `None` when no chunk of `len` blocks
    /// is left. Locks the group briefly.
    ///
    /// ```
    /// use mballoc::{Allocator, AllocRequest, Geometry};
    /// let a = Allocator::new(Geometry::with_group_size(4096, 1024, 1024)?)?;
    /// a.allocate(&AllocRequest::new(4).goal_only(0))?;
    /// assert_eq!(a.room_in_group(0, 4), Some(512)); // the upper half is free
    /// a.allocate(&AllocRequest::new(4).goal_only(512))?;
    /// assert_eq!(a.room_in_group(0, 4), Some(256)); // [256, 512) follows free blocks
    /// # Ok::<(), mballoc::Error>(())
    /// ```
    pub fn room_in_group(&self, g: u32, len: u32) -> Option<u64> {
        let geo = *self.geometry();
        if g >= geo.groups() {
            return None;
        }
        let prefix = geo.reserved_per_group();
        let offset = self.group(g, |b| {
            let order = u32::try_from(b.info().largest_free_order).ok()?;
            let (start, chunk) = b.first_chunk_at_least(order)?;
            if chunk < len {
                return None;
            }
            let follows_data = start > prefix && b.is_used(start - 1);
            Some(if follows_data && chunk / 2 >= len { start + chunk / 2 } else { start })
        })?;
        Some(geo.group_first_block(g) + u64::from(offset))
    }
}

#[cfg(test)]
mod tests {
    use crate::{AllocRequest, Allocator, Geometry};

    #[test]
    fn unused_groups_first_then_halves() {
        let a = Allocator::new(Geometry::with_group_size(4096, 1024, 2048).unwrap()).unwrap();
        assert_eq!(a.stream_start(0, 4), Some(0));
        a.allocate(&AllocRequest::new(4).goal_only(0)).unwrap();
        assert_eq!(a.stream_start(0, 4), Some(1024));
        a.allocate(&AllocRequest::new(4).goal_only(1024)).unwrap();
        // Both groups used: group 0's largest chunk, [512, 1024), follows
        // free blocks, so its start.
        assert_eq!(a.stream_start(0, 4), Some(512));
        a.allocate(&AllocRequest::new(4).goal_only(512)).unwrap();
        // The largest chunk left, [768, 1024), follows free blocks: its start.
        a.allocate(&AllocRequest::new(260).goal_only(4)).unwrap();
        assert_eq!(a.room_in_group(0, 4), Some(768));
        // Nothing of 600 blocks is left anywhere.
        assert_eq!(a.stream_start(0, 600), None);
    }
}
