//! The search (`ext4_mb_regular_allocator`): the goal probe, then the
//! passes from the cheapest that can serve the request, each one sweep of
//! the groups from the start group (by index, or linearly), inside each
//! group the buddy's aligned chunk or a best-fit measure of its free runs
//! within the effort bounds `mb_min_to_scan` / `mb_max_to_scan`.

use crate::allocator::{orders, Allocator};
use crate::buddy::Buddy;
use crate::context::{Cand, Ctx, Status};
use crate::criteria::{good_group, request_bucket, Criterion};
use crate::group::{summary_of, GroupSlot};
use crate::order_index::IndexKind;
use crate::request::{Extent, FoundBy, GoalPolicy};
use crate::stream_goal::Concurrency;
use crate::tunables::{BestAvailFloor, LinearBestAvail, OrderLists, ShortRuns};

impl Allocator {
    /// Serve `ctx`: the goal first, then the passes, then the best
    /// candidate found if no pass took one outright.
    pub(crate) fn regular_allocator(&self, ctx: &mut Ctx, req: &crate::request::AllocRequest) {
        if let (Some(goal), GoalPolicy::TryFirst | GoalPolicy::Only) = (ctx.goal_block, ctx.policy) {
            self.find_by_goal(ctx, goal);
            if ctx.status == Status::Found || ctx.policy == GoalPolicy::Only {
                return;
            }
        }
        if let Some(key) = ctx.stream {
            let slot = self.stream_goals.slot(key);
            ctx.stream_slot = Some(slot);
            ctx.start_group = self.stream_goals.load(slot);
        }
        if let Some(pick) = self.policy_pick(ctx, req) {
            self.take_pick(ctx, pick);
            if ctx.status == Status::Found {
                return;
            }
            ctx.lost += 1;
        }
        ctx.cr = ctx.passes.at_or_after(Some(self.first_criterion(ctx)));
        loop {
            while let (Some(cr), Status::Continue) = (ctx.cr, ctx.status) {
                self.scan_groups(ctx, cr);
            }
            if ctx.status == Status::Found {
                return;
            }
            if ctx.best.is_some() && !ctx.hint_first {
                ctx.after_passes = ctx.cr.is_none();
                self.try_best_found(ctx);
                if ctx.status != Status::Found {
                    // Someone took our best candidate while we scanned on:
                    // take the first thing that fits.
                    ctx.lost += 1;
                    ctx.best = None;
                    ctx.status = Status::Continue;
                    ctx.hint_first = true;
                    ctx.cr = Some(Criterion::AnyFree);
                    continue;
                }
            }
            return;
        }
    }

    /// The pass a request starts at: the cheapest that can serve it, unless
    /// the volume is so full that Lustre's thresholds say the cheap passes
    /// would only fail (LU-12103).
    fn first_criterion(&self, ctx: &Ctx) -> Criterion {
        let cheapest = if ctx.two_order > 0 { Criterion::PowerOf2Aligned } else { Criterion::GoalLenFast };
        let t = &ctx.t;
        if t.mb_c1_threshold == 0 && t.mb_c2_threshold == 0 && t.mb_c3_threshold == 0 {
            return cheapest;
        }
        let free_pct = self.free_blocks() as u128 * 100;
        let total = u128::from(self.geo.total_blocks());
        let below = |pct: u32| pct > 0 && free_pct < u128::from(pct) * total;
        let floor = if below(t.mb_c3_threshold) {
            Criterion::AnyFree
        } else if below(t.mb_c2_threshold) {
            Criterion::GoalLenSlow
        } else if below(t.mb_c1_threshold) {
            Criterion::GoalLenFast
        } else {
            return cheapest;
        };
        cheapest.max(floor)
    }

    fn find_by_goal(&self, ctx: &mut Ctx, goal: u64) {
        let g = self.geo.group_of(goal);
        let off = self.geo.offset_in_group(goal);
        if self.groups.summary(g).free == 0 {
            return;
        }
        let slot = self.groups.slot(g);
        let mut guard = slot.lock.lock();
        let buddy = self.materialize(&mut guard, g);
        let run = buddy.find_extent(off, ctx.goal_len);
        let stripe = ctx.t.stripe;
        let take = if run >= ctx.goal_len {
            // A goal of exactly one stripe is taken only where a stripe
            // starts.
            if stripe > 0 && ctx.goal_len == stripe && !goal.is_multiple_of(u64::from(stripe)) {
                return;
            }
            ctx.goal_len
        } else if run > 0 && ctx.policy == GoalPolicy::Only && ctx.min_len > 1 && run >= ctx.min_len {
            // A goal-only request that named a minimum accepts a partial run
            // at the goal (the kernel's HINT_MERGE).
            run
        } else {
            return;
        };
        ctx.found += 1;
        let old = orders(buddy.info());
        buddy.mark_used(off, take);
        self.after_change(g, slot, old, buddy.info());
        ctx.result = Some((Extent { start: goal, len: take }, FoundBy::Goal));
        ctx.status = Status::Found;
        // As every found extent (`ext4_mb_use_best_found`), a stream's
        // goal moves to the group it was found in.
        if let Some(key) = ctx.stream {
            self.stream_goals.store(self.stream_goals.slot(key), g);
        }
    }

    /// Run the current pass once over the volume and advance to the next pass
    /// if it found nothing (`ext4_mb_scan_groups`).
    fn scan_groups(&self, ctx: &mut Ctx, cr: Criterion) {
        let n = self.geo.groups();
        let mut start = if ctx.start_group >= n { 0 } else { ctx.start_group };
        if !ctx.optimize || !cr.is_cheap() {
            self.scan_linear(ctx, cr, start, n);
        } else if ctx.t.order_lists == OrderLists::Linked {
            self.scan_listed(ctx, cr, start);
        } else {
            if ctx.t.mb_max_linear_groups > 0 {
                let count = ctx.t.mb_max_linear_groups.min(n);
                self.scan_linear(ctx, cr, start, count);
                if ctx.status != Status::Continue {
                    return;
                }
                start = (start + count) % n;
            }
            let top = self.geo.num_orders() - 1;
            match cr {
                Criterion::PowerOf2Aligned => {
                    let lo = ctx.two_order as usize;
                    self.index.walk_linear_like(IndexKind::LargestFreeOrder, lo..=top, start, n, |g| {
                        if !self.is_buddy_loaded(g) {
                            return false;
                        }
                        // ext4 counts a group its index walk visits, and
                        // again when it tests it.
                        ctx.cr_considered[cr.index()] += 1;
                        self.scan_group(ctx, cr, g);
                        ctx.status != Status::Continue
                    });
                }
                Criterion::GoalLenFast => {
                    let lo = request_bucket(ctx.goal_len, self.geo.num_orders());
                    self.index.walk_linear_like(IndexKind::AvgFragmentSize, lo..=top, start, n, |g| {
                        if !self.is_buddy_loaded(g) {
                            return false;
                        }
                        ctx.cr_considered[cr.index()] += 1;
                        self.scan_group(ctx, cr, g);
                        ctx.status != Status::Continue
                    });
                }
                Criterion::BestAvailLen => self.scan_best_avail(ctx, cr, start, n),
                Criterion::GoalLenSlow | Criterion::AnyFree => unreachable!("expensive passes scan linearly"),
            }
        }
        if ctx.status == Status::Continue {
            ctx.cr_failed[cr.index()] += 1;
            ctx.cr = match cr {
                // Only data requests carry slack worth trimming, and the
                // trimming walks the avg-fragment index. With linear scans
                // ext4's cr1.5 only repeats cr1 untrimmed, for any request;
                // the engine skips it unless told to repeat it.
                Criterion::GoalLenFast if ctx.optimize && !ctx.is_data => Some(Criterion::GoalLenSlow),
                Criterion::GoalLenFast if !ctx.optimize && ctx.t.linear_best_avail == LinearBestAvail::Skip => {
                    Some(Criterion::GoalLenSlow)
                }
                _ => cr.next(),
            };
            ctx.cr = ctx.passes.at_or_after(ctx.cr);
        }
    }

    /// Ask the policy for a run ([`crate::Policy::choose`]); what it read
    /// counts as scanned.
    fn policy_pick(&self, ctx: &mut Ctx, req: &crate::request::AllocRequest) -> Option<crate::policy::Pick> {
        let policy = self.policy.as_ref()?;
        let mut view = crate::policy::Groups::new(self);
        let pick = policy.choose(&crate::context::request_info(req), &mut view);
        ctx.found += view.extents_scanned;
        ctx.groups_scanned += view.groups_scanned;
        pick
    }

    /// Take the policy's pick if it is still free and fits the request;
    /// otherwise leave the request to the passes.
    fn take_pick(&self, ctx: &mut Ctx, p: crate::policy::Pick) {
        if p.group >= self.geo.groups() || p.len == 0 || p.len > ctx.goal_len || p.len < ctx.min_len {
            return;
        }
        let slot = self.groups.slot(p.group);
        let mut guard = slot.lock.lock();
        let buddy = self.materialize(&mut guard, p.group);
        if p.start >= buddy.len() || buddy.find_extent(p.start, p.len) < p.len {
            return;
        }
        let old = orders(buddy.info());
        buddy.mark_used(p.start, p.len);
        self.after_change(p.group, slot, old, buddy.info());
        let start = self.geo.group_first_block(p.group) + u64::from(p.start);
        ctx.result = Some((Extent { start, len: p.len }, FoundBy::Policy));
        ctx.status = Status::Found;
        if let Some(key) = ctx.stream {
            self.stream_goals.store(self.stream_goals.slot(key), p.group);
        }
    }

    pub(crate) fn scan_linear(&self, ctx: &mut Ctx, cr: Criterion, start: u32, count: u32) {
        let n = self.geo.groups();
        let mut g = start;
        for _ in 0..count {
            self.scan_group(ctx, cr, g);
            if ctx.status != Status::Continue {
                return;
            }
            g = if g + 1 == n { 0 } else { g + 1 };
        }
    }

    /// CR_BEST_AVAIL_LEN: retry the avg-fragment lookup with the goal length
    /// trimmed one order at a time, never below the original request.
    fn scan_best_avail(&self, ctx: &mut Ctx, cr: Criterion, start: u32, n: u32) {
        let (order, min_order) = best_avail_orders(ctx);
        'halves: for (lo, hi) in [(start, n), (0, start)] {
            for i in (min_order..=order).rev() {
                trim_goal(ctx, i);
                let set =
                    self.index.set(IndexKind::AvgFragmentSize, request_bucket(ctx.goal_len, self.geo.num_orders()));
                if set.is_empty() {
                    continue;
                }
                let mut g = lo;
                while let Some(found) = set.next_in(g, hi) {
                    if !self.is_buddy_loaded(found) {
                        g = found + 1;
                        continue;
                    }
                    ctx.cr_considered[cr.index()] += 1;
                    self.scan_group(ctx, cr, found);
                    if ctx.status != Status::Continue {
                        break 'halves;
                    }
                    g = found + 1;
                }
            }
        }
        if ctx.status == Status::Continue {
            untrim_goal(ctx);
        }
    }

    /// `ext4_mb_good_group` from the group's lock-free summary: whether
    /// pass `cr` may take group `g` for this request. Data never starts a
    /// flex group's first group at CR_POWER2_ALIGNED.
    pub(crate) fn good_without_lock(&self, ctx: &Ctx, cr: Criterion, g: u32) -> bool {
        if cr == Criterion::PowerOf2Aligned
            && ctx.is_data
            && self.flex_groups >= 4
            && g.is_multiple_of(self.flex_groups)
        {
            return false;
        }
        good_group(cr, &self.groups.summary(g), ctx.goal_len, ctx.two_order, ctx.min_len)
    }

    /// Look at one group under pass `cr` (`ext4_mb_scan_group`).
    pub(crate) fn scan_group(&self, ctx: &mut Ctx, cr: Criterion, g: u32) {
        debug_assert_eq!(ctx.cr, Some(cr), "a group is scanned under the current pass");
        ctx.cr_considered[cr.index()] += 1;
        if !self.is_buddy_loaded(g) {
            // Only a linear sweep reaches a group ext4 has not built.
            let free = self.groups.summary(g).free;
            if free == 0 || (cr != Criterion::AnyFree && free < ctx.goal_len) || !self.may_build(g, cr.is_cheap()) {
                return;
            }
        }
        if !self.good_without_lock(ctx, cr, g) {
            return;
        }
        let slot = self.groups.slot(g);
        let mut guard = if cr == Criterion::AnyFree || self.concurrency == Concurrency::Legacy {
            slot.lock.lock()
        } else {
            // With many groups "any good group will do": never wait for a busy one.
            match slot.lock.try_lock() {
                Some(guard) => guard,
                None => return,
            }
        };
        let buddy = self.materialize(&mut guard, g);
        if !good_group(cr, &summary_of(buddy.info()), ctx.goal_len, ctx.two_order, ctx.min_len) {
            return;
        }
        ctx.groups_scanned += 1;
        if cr == Criterion::PowerOf2Aligned {
            if let Some((start, len)) = buddy.first_chunk_at_least(ctx.two_order) {
                ctx.found += 1;
                ctx.cr_found[cr.index()] += 1;
                ctx.two_n_hit = true;
                ctx.best = Some(Cand { group: g, start, len });
                self.use_best_found(ctx, FoundBy::Pass(cr), g, slot, buddy);
            }
            return;
        }
        let stripe = ctx.t.stripe;
        if matches!(cr, Criterion::GoalLenFast | Criterion::BestAvailLen)
            && stripe > 0
            && ctx.goal_len.is_multiple_of(stripe)
        {
            self.aligned_scan(ctx, cr, g, slot, buddy);
            if ctx.status != Status::Continue {
                return;
            }
        }
        self.complex_scan(ctx, cr, g, slot, buddy);
    }

    /// The first free run of at least a stripe that starts on a stripe
    /// boundary (`ext4_mb_scan_aligned`).
    fn aligned_scan(&self, ctx: &mut Ctx, cr: Criterion, g: u32, slot: &GroupSlot, buddy: &mut Buddy) {
        let stripe = ctx.t.stripe;
        let first = self.geo.group_first_block(g);
        let mut i = first.div_ceil(u64::from(stripe)) * u64::from(stripe) - first;
        while i < u64::from(buddy.len()) {
            let off = i as u32;
            if !buddy.is_used(off) {
                let len = buddy.find_extent(off, stripe);
                if len >= stripe {
                    ctx.found += 1;
                    ctx.cr_found[cr.index()] += 1;
                    ctx.best = Some(Cand { group: g, start: off, len });
                    self.use_best_found(ctx, FoundBy::Pass(cr), g, slot, buddy);
                    return;
                }
            }
            i += u64::from(stripe);
        }
    }

    /// Measure the group's free runs (`ext4_mb_complex_scan_group`).
    fn complex_scan(&self, ctx: &mut Ctx, cr: Criterion, g: u32, slot: &GroupSlot, buddy: &mut Buddy) {
        let mut free = buddy.info().free;
        let mut i = buddy.info().first_free;
        while free > 0 && ctx.status == Status::Continue {
            i = buddy.next_free(i);
            assert!(i < buddy.len(), "group {g}: info counts free blocks the bitmap lacks");
            if cr.is_cheap() && ctx.t.short_runs == ShortRuns::Skip {
                let j = buddy.next_used(i);
                if j - i < ctx.goal_len {
                    free -= j - i;
                    i = j;
                    continue;
                }
            }
            let len = buddy.find_extent(i, ctx.take_limit());
            assert!(len > 0 && len <= free, "group {g}: buddy disagrees with info");
            self.measure_extent(ctx, cr, Cand { group: g, start: i, len }, slot, buddy);
            i += len;
            free -= len;
        }
        self.check_limits(ctx, cr, g, slot, buddy, true);
    }

    /// Best fit with effort bounds (`ext4_mb_measure_extent`).
    fn measure_extent(&self, ctx: &mut Ctx, cr: Criterion, ex: Cand, slot: &GroupSlot, buddy: &mut Buddy) {
        ctx.found += 1;
        ctx.cr_found[cr.index()] += 1;
        if ex.len >= ctx.min_len {
            if ctx.hint_first || ex.len == ctx.goal_len || (ctx.whole_run && ex.len >= ctx.goal_len) {
                ctx.best = Some(ex);
                self.use_best_found(ctx, FoundBy::Pass(cr), ex.group, slot, buddy);
                return;
            }
            match ctx.best {
                None => {
                    ctx.best = Some(ex);
                    return;
                }
                Some(b) if b.len < ctx.goal_len => {
                    if ex.len > b.len {
                        ctx.best = Some(ex);
                    }
                }
                Some(b) => {
                    if ex.len > ctx.goal_len && ex.len < b.len {
                        ctx.best = Some(ex);
                    }
                }
            }
        }
        self.check_limits(ctx, cr, ex.group, slot, buddy, false);
    }

    fn check_limits(
        &self,
        ctx: &mut Ctx,
        cr: Criterion,
        g: u32,
        slot: &GroupSlot,
        buddy: &mut Buddy,
        finish_group: bool,
    ) {
        if ctx.status == Status::Found {
            return;
        }
        // Stop measuring after mb_max_to_scan extents, but only with a
        // candidate to fall back on: breaking with none would turn a volume
        // that has space into a false NoSpace.
        let Some(b) = ctx.best else { return };
        if ctx.found > ctx.max_to_scan && !ctx.hint_first {
            ctx.status = Status::Break;
            return;
        }
        if b.len < ctx.goal_len {
            return;
        }
        if (finish_group || ctx.found > ctx.t.mb_min_to_scan) && b.group == g {
            // Re-measure: the candidate may have been found before a split.
            if buddy.find_extent(b.start, ctx.goal_len) >= ctx.goal_len {
                self.use_best_found(ctx, FoundBy::Pass(cr), g, slot, buddy);
            }
        }
    }

    /// Take the best candidate, found `by`: trim to the goal length and
    /// mark it used.
    fn use_best_found(&self, ctx: &mut Ctx, by: FoundBy, g: u32, slot: &GroupSlot, buddy: &mut Buddy) {
        let b = ctx.best.expect("use_best_found without a candidate");
        debug_assert_eq!(b.group, g);
        let len = b.len.min(ctx.take_limit());
        let old = orders(buddy.info());
        buddy.mark_used(b.start, len);
        self.after_change(g, slot, old, buddy.info());
        let start = self.geo.group_first_block(g) + u64::from(b.start);
        ctx.result = Some((Extent { start, len }, by));
        ctx.status = Status::Found;
        if let Some(slot) = ctx.stream_slot {
            self.stream_goals.store(slot, g);
        }
    }

    /// Re-validate the best candidate after the scan stopped (`ext4_mb_try_best_found`).
    fn try_best_found(&self, ctx: &mut Ctx) {
        let b = ctx.best.expect("try_best_found without a candidate");
        let slot = self.groups.slot(b.group);
        let mut guard = slot.lock.lock();
        let buddy = self.materialize(&mut guard, b.group);
        let len = buddy.find_extent(b.start, ctx.goal_len);
        if len > 0 && len >= ctx.min_len {
            ctx.best = Some(Cand { len, ..b });
            // After the passes ran out, the candidate counts as any-free's.
            let by = FoundBy::Pass(ctx.cr.unwrap_or(Criterion::AnyFree));
            self.use_best_found(ctx, by, b.group, slot, buddy);
        }
    }
}

/// CR_BEST_AVAIL_LEN's trimming range for the current goal length: the
/// goal's order, and the lowest it may be trimmed to (by
/// `mb_best_avail_max_trim_order`, not below a stripe, not below the
/// floor [`BestAvailFloor`] names, which may ask to take whole runs).
pub(crate) fn best_avail_orders(ctx: &mut Ctx) -> (u32, u32) {
    let order = 31 - ctx.goal_len.leading_zeros();
    let mut min_order = order.saturating_sub(ctx.t.mb_best_avail_max_trim_order.min(31));
    let floor = match ctx.t.mb_best_avail_floor {
        BestAvailFloor::Minimum if ctx.min_len < ctx.orig_len => {
            ctx.whole_run = true;
            ctx.min_len
        }
        _ => ctx.orig_len,
    };
    let stripe = ctx.t.stripe;
    if stripe > 0 && (1u32 << min_order) < stripe {
        min_order = 31 - stripe.leading_zeros();
    }
    if (1u32 << min_order) < floor {
        min_order = 32 - floor.leading_zeros();
    }
    (order, min_order)
}

/// CR_BEST_AVAIL_LEN's goal trimmed to `2^order` blocks, rounded up to a
/// whole stripe.
pub(crate) fn trim_goal(ctx: &mut Ctx, order: u32) {
    ctx.goal_len = 1 << order;
    let stripe = ctx.t.stripe;
    if stripe > 0 {
        ctx.goal_len = ctx.goal_len.div_ceil(stripe) * stripe;
    }
}

/// The goal as it was before CR_BEST_AVAIL_LEN trimmed it.
pub(crate) fn untrim_goal(ctx: &mut Ctx) {
    ctx.goal_len = ctx.orig_goal_len;
    ctx.whole_run = false;
}
