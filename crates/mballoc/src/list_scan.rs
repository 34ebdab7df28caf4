//! The cheap passes as ext4 ran them over linked order lists, before 6.17
//! ([`crate::OrderLists::Linked`]; the lists are `crate::order_lists`).
//!
//! `ext4_mb_regular_allocator` then looped over at most one group per
//! group of the volume, choosing each after the last had not served
//! (`ext4_mb_choose_next_group`): first the start group itself, then
//! `mb_max_linear_groups` groups after it in turn, then each time the
//! first group a lock-free `ext4_mb_good_group` accepts, reading the lists
//! from their heads: the largest-free-order lists from the request's
//! order up for CR_POWER2_ALIGNED, the average-fragment lists from the
//! request's bucket up for CR_GOAL_LEN_FAST, and for CR_BEST_AVAIL_LEN
//! (6.4 on) one average-fragment list per trimmed length, the goal
//! length staying trimmed to the one that found a group. The pass ends
//! when the lists offer no good group, or after as many groups as the
//! volume has: a group that was chosen and did not serve is chosen again
//! while it stays at its lists' head.

use crate::allocator::Allocator;
use crate::context::{Ctx, Status};
use crate::criteria::{request_bucket, Criterion};
use crate::order_index::IndexKind;
use crate::scan::{best_avail_orders, trim_goal, untrim_goal};

impl Allocator {
    /// Run cheap pass `cr` once from `start` the way kernels with linked
    /// order lists did; `ctx.status` stays `Continue` if it found nothing.
    pub(crate) fn scan_listed(&self, ctx: &mut Ctx, cr: Criterion, start: u32) {
        let n = self.geo.groups();
        let mut g = start;
        let mut linear = ctx.t.mb_max_linear_groups;
        for i in 0..n {
            if i > 0 {
                if linear > 0 {
                    linear -= 1;
                    g = if g + 1 == n { 0 } else { g + 1 };
                } else {
                    match self.choose_listed(ctx, cr) {
                        Some(next) => g = next,
                        None => break,
                    }
                }
            }
            self.scan_group(ctx, cr, g);
            if ctx.status != Status::Continue {
                return;
            }
        }
        if cr == Criterion::BestAvailLen {
            untrim_goal(ctx);
        }
    }

    /// The next group from the lists' heads (`ext4_mb_choose_next_group_*`).
    fn choose_listed(&self, ctx: &mut Ctx, cr: Criterion) -> Option<u32> {
        let top = self.geo.num_orders() - 1;
        match cr {
            Criterion::PowerOf2Aligned => {
                let lo = ctx.two_order as usize;
                self.first_listed(ctx, cr, IndexKind::LargestFreeOrder, lo..=top)
            }
            Criterion::GoalLenFast => {
                let lo = request_bucket(ctx.goal_len, self.geo.num_orders());
                self.first_listed(ctx, cr, IndexKind::AvgFragmentSize, lo..=top)
            }
            Criterion::BestAvailLen => {
                // The goal stays trimmed to the length that found a group;
                // `scan_listed` puts it back when the pass ends.
                let (order, min_order) = best_avail_orders(ctx);
                (min_order..=order).rev().find_map(|i| {
                    trim_goal(ctx, i);
                    let bucket = request_bucket(ctx.goal_len, self.geo.num_orders());
                    self.first_listed(ctx, cr, IndexKind::AvgFragmentSize, bucket..=bucket)
                })
            }
            Criterion::GoalLenSlow | Criterion::AnyFree => unreachable!("expensive passes scan linearly"),
        }
    }

    /// The first group of `kind`'s lists for `orders`, head first, that
    /// `ext4_mb_good_group` accepts without its lock; every group read
    /// counts as considered.
    fn first_listed(
        &self,
        ctx: &mut Ctx,
        cr: Criterion,
        kind: IndexKind,
        orders: std::ops::RangeInclusive<usize>,
    ) -> Option<u32> {
        let mut considered = 0;
        let found = self.lists.first(kind, orders, |g| {
            considered += 1;
            self.good_without_lock(ctx, cr, g)
        });
        ctx.cr_considered[cr.index()] += considered;
        found
    }
}

#[cfg(test)]
mod tests {
    use crate::{AllocRequest, Allocator, Criterion, FoundBy, Geometry, OptimizeScan, OrderLists};

    const G: u64 = 32768;

    fn volume(lists: OrderLists) -> Allocator {
        let a = Allocator::new(Geometry::new(4096, 16 * G).unwrap()).unwrap();
        let t = a.tunables();
        a.set_tunables(crate::Tunables { order_lists: lists, mb_optimize_scan: OptimizeScan::On, ..t }).unwrap();
        a
    }

    fn group(a: &Allocator, block: u64) -> u32 {
        a.geometry().group_of(block)
    }

    #[test]
    fn linked_lists_serve_the_least_recently_changed_group_where_sets_serve_the_next_after_the_start() {
        let by_group = volume(OrderLists::ByGroup);
        let linked = volume(OrderLists::Linked);
        for a in [&by_group, &linked] {
            // Group 2 fills and empties again (its order changes twice, so
            // it goes to the tail of its list); group 1 fills.
            a.claim(2 * G, G).unwrap();
            a.free(2 * G, G).unwrap();
            a.claim(G, G).unwrap();
        }
        let req = AllocRequest::new(8192).goal(G);
        let s = by_group.allocate(&req).unwrap();
        let l = linked.allocate(&req).unwrap();
        assert_eq!((s.found_by, l.found_by), (FoundBy::Pass(Criterion::PowerOf2Aligned), s.found_by));
        assert_eq!(group(&by_group, s.extent.start), 2, "the first candidate after the start group");
        assert_eq!(group(&linked, l.extent.start), 0, "the head of the order-13 list");
        // With group 0 full too, the head is group 3: group 2 went behind
        // every group that kept its order.
        linked.claim(8192, G - 8192).unwrap();
        assert_eq!(group(&linked, linked.allocate(&req).unwrap().extent.start), 3);
        assert_eq!(group(&by_group, by_group.allocate(&req).unwrap().extent.start), 2);
        linked.check_consistency().unwrap();
    }

    #[test]
    fn linked_lists_try_the_start_group_and_the_linear_groups_first() {
        let a = volume(OrderLists::Linked);
        let mut t = a.tunables();
        t.mb_max_linear_groups = 2;
        a.set_tunables(t).unwrap();
        for g in [4, 5, 6] {
            a.claim(g * G, G).unwrap();
        }
        // From group 4: group 4 itself, then 5 and 6 in turn (all full),
        // then the lists' head.
        assert_eq!(group(&a, a.allocate(&AllocRequest::new(8192).goal(4 * G)).unwrap().extent.start), 0);
        // From group 6: group 7 is the first linear step.
        assert_eq!(group(&a, a.allocate(&AllocRequest::new(8192).goal(6 * G)).unwrap().extent.start), 7);
    }

    #[test]
    fn switching_to_linked_lists_builds_them_in_group_order_and_back_drops_them() {
        let a = volume(OrderLists::ByGroup);
        a.claim(0, G).unwrap();
        a.free(0, G).unwrap();
        let mut t = a.tunables();
        t.order_lists = OrderLists::Linked;
        a.set_tunables(t).unwrap();
        assert!(a.lists.is_on());
        a.claim(G, G).unwrap();
        let got = a.allocate(&AllocRequest::new(8192).goal(G)).unwrap();
        assert_eq!(group(&a, got.extent.start), 0, "built as a mount builds them: group order");
        t.order_lists = OrderLists::ByGroup;
        a.set_tunables(t).unwrap();
        assert!(!a.lists.is_on());
    }
}
