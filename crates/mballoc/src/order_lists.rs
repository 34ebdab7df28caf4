//! The order lists as ext4 kept them before 6.17: linked lists, in the
//! order groups joined them.
//!
//! From 5.13 to 6.16 (and in the 6.12 stable series until the xarrays were
//! backported) each largest-free-order list and each average-fragment list
//! was a `list_head`. A group joins the tail of a list when its buddy is
//! built (`ext4_mb_generate_buddy`, the first time a group is used after
//! mount or when the mount's prefetch reaches it) and moves to the tail of
//! its new list whenever its order changes (`mb_set_largest_free_order`,
//! `mb_update_avg_fragment_size`); a scan reads a list from its head. So
//! where [`crate::order_index`]'s sets answer "the first candidate at or
//! after the goal", these answer "the candidate whose order changed least
//! recently", and the two part on any volume whose groups filled out of
//! group order.
//!
//! Here a list is a map from a join stamp to its group: joining takes the
//! next stamp, so iterating a map in key order is reading the list from its
//! head. One mutex guards them all, as cheap a lock as the per-order
//! rwlocks it stands for when one thread allocates; the allocator keeps
//! them only while [`crate::OrderLists::Linked`] is chosen, so the default
//! path never takes it.

use crate::order_index::IndexKind;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where a group stands in one kind's lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    order: usize,
    stamp: u64,
}

#[derive(Debug, Default)]
struct Lists {
    /// The stamp the next group to join a tail takes.
    next: u64,
    /// Whether a group's buddy is built (it is in its lists, or in none
    /// because it is full).
    joined: Vec<bool>,
    /// Per kind, per group: its list and stamp.
    place: [Vec<Option<Place>>; 2],
    /// Per kind, per order: stamp → group, head first.
    lists: [Vec<BTreeMap<u64, u32>>; 2],
}

impl Lists {
    fn remove(&mut self, kind: usize, g: u32) {
        if let Some(p) = self.place[kind][g as usize].take() {
            let was = self.lists[kind][p.order].remove(&p.stamp);
            assert_eq!(was, Some(g), "group {g} was not where its place said");
        }
    }

    fn append(&mut self, kind: usize, g: u32, order: i8) {
        debug_assert!(self.place[kind][g as usize].is_none());
        if order < 0 {
            return;
        }
        let order = order as usize;
        let stamp = self.next;
        self.next += 1;
        self.lists[kind][order].insert(stamp, g);
        self.place[kind][g as usize] = Some(Place { order, stamp });
    }
}

/// Every kind's lists, kept while `on`.
pub(crate) struct LinkedLists {
    on: AtomicBool,
    inner: Mutex<Lists>,
    groups: u32,
    num_orders: usize,
}

fn kinds(orders: (i8, i8)) -> [(usize, i8); 2] {
    [(kind_index(IndexKind::LargestFreeOrder), orders.0), (kind_index(IndexKind::AvgFragmentSize), orders.1)]
}

fn kind_index(kind: IndexKind) -> usize {
    match kind {
        IndexKind::LargestFreeOrder => 0,
        IndexKind::AvgFragmentSize => 1,
    }
}

impl LinkedLists {
    /// Lists over `groups` groups, off.
    pub(crate) fn new(groups: u32, num_orders: usize) -> LinkedLists {
        LinkedLists { on: AtomicBool::new(false), inner: Mutex::new(Lists::default()), groups, num_orders }
    }

    /// Whether the lists are kept (one relaxed load: the default path's
    /// whole cost).
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Start keeping the lists, as a mount builds them: every group for
    /// which `built` says so joins, in group order, with its `orders`.
    pub(crate) fn start(&self, built: impl Fn(u32) -> bool, orders: impl Fn(u32) -> (i8, i8)) {
        let mut l = self.inner.lock();
        let n = self.groups as usize;
        *l = Lists {
            next: 0,
            joined: vec![false; n],
            place: [vec![None; n], vec![None; n]],
            lists: [vec![BTreeMap::new(); self.num_orders], vec![BTreeMap::new(); self.num_orders]],
        };
        for g in (0..self.groups).filter(|&g| built(g)) {
            l.joined[g as usize] = true;
            for (kind, order) in kinds(orders(g)) {
                l.append(kind, g, order);
            }
        }
        self.on.store(true, Ordering::Relaxed);
    }

    /// Stop keeping them (and free them).
    pub(crate) fn stop(&self) {
        self.on.store(false, Ordering::Relaxed);
        *self.inner.lock() = Lists::default();
    }

    /// Group `g`'s buddy was built (again) with `orders`: it leaves
    /// whatever lists it was in and joins the tails of its own.
    pub(crate) fn built(&self, g: u32, orders: (i8, i8)) {
        if !self.is_on() {
            return;
        }
        let mut l = self.inner.lock();
        l.joined[g as usize] = true;
        for (kind, order) in kinds(orders) {
            l.remove(kind, g);
            l.append(kind, g, order);
        }
    }

    /// Group `g`'s orders went from `old` to `new`: a built group moves to
    /// the tail of each list whose order changed.
    pub(crate) fn update(&self, g: u32, old: (i8, i8), new: (i8, i8)) {
        if !self.is_on() || old == new {
            return;
        }
        let mut l = self.inner.lock();
        if !l.joined[g as usize] {
            return;
        }
        for ((kind, o), (_, n)) in kinds(old).into_iter().zip(kinds(new)) {
            if o != n {
                l.remove(kind, g);
                l.append(kind, g, n);
            }
        }
    }

    /// The first group, reading the lists of `kind` for `orders` in turn,
    /// each from its head, that `good` accepts. `good` runs under the lists'
    /// lock and must take no group lock.
    pub(crate) fn first(
        &self,
        kind: IndexKind,
        orders: std::ops::RangeInclusive<usize>,
        mut good: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        let l = self.inner.lock();
        let k = kind_index(kind);
        for order in orders {
            let Some(list) = l.lists[k].get(order) else { break };
            if let Some(&g) = list.values().find(|&&g| good(g)) {
                return Some(g);
            }
        }
        None
    }

    /// The groups of one list, head first (for tests and reports).
    #[cfg(test)]
    pub(crate) fn list(&self, kind: IndexKind, order: usize) -> Vec<u32> {
        self.inner.lock().lists[kind_index(kind)][order].values().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_whose_order_changes_goes_to_the_tail_and_one_whose_order_stays_keeps_its_place() {
        let l = LinkedLists::new(4, 15);
        l.start(|_| true, |_| (13, 13));
        assert_eq!(l.list(IndexKind::LargestFreeOrder, 13), [0, 1, 2, 3]);
        l.update(1, (13, 13), (12, 13));
        assert_eq!(l.list(IndexKind::LargestFreeOrder, 13), [0, 2, 3]);
        assert_eq!(l.list(IndexKind::AvgFragmentSize, 13), [0, 1, 2, 3], "its other order did not change");
        l.update(1, (12, 13), (13, 13));
        assert_eq!(l.list(IndexKind::LargestFreeOrder, 13), [0, 2, 3, 1], "back, at the tail");
        l.update(0, (13, 13), (-1, -1));
        assert_eq!(l.list(IndexKind::LargestFreeOrder, 13), [2, 3, 1], "a full group is in no list");
        assert_eq!(l.first(IndexKind::LargestFreeOrder, 10..=14, |g| g != 2), Some(3));
        assert_eq!(l.first(IndexKind::LargestFreeOrder, 14..=20, |_| true), None, "past the last order");
    }

    #[test]
    fn groups_join_when_built_and_not_before() {
        let l = LinkedLists::new(4, 15);
        l.update(2, (13, 13), (12, 12));
        l.start(|_| true, |_| (13, 13));
        l.start(|_| false, |_| (-1, -1));
        assert_eq!(l.list(IndexKind::AvgFragmentSize, 13), Vec::<u32>::new());
        l.update(2, (13, 13), (12, 12));
        assert_eq!(l.list(IndexKind::AvgFragmentSize, 12), Vec::<u32>::new(), "unbuilt: in no list");
        l.built(3, (13, 13));
        l.built(1, (13, 12));
        l.built(3, (13, 13));
        assert_eq!(l.list(IndexKind::LargestFreeOrder, 13), [1, 3], "building again rejoins at the tail");
        assert_eq!(l.list(IndexKind::AvgFragmentSize, 12), [1]);
        l.stop();
        assert!(!l.is_on());
        l.built(0, (13, 13));
    }
}
