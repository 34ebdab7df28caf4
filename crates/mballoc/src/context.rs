//! One request's working state (`ext4_allocation_context`): the goal, the
//! pass under way, the best candidate so far, and what the search cost.
//! Built from an [`AllocRequest`] and the tunables of the moment; when the
//! search ends, its counters go into the statistics.

use crate::allocator::Allocator;
use crate::criteria::{Criterion, NUM_CRITERIA};
use crate::policy::{Passes, RequestInfo};
use crate::request::{AllocKind, AllocRequest, Extent, FoundBy, GoalPolicy};
use crate::stats::bump;
use crate::tunables::Tunables;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Continue,
    Found,
    Break,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Cand {
    pub(crate) group: u32,
    pub(crate) start: u32,
    pub(crate) len: u32,
}

/// The allocation context (`ext4_allocation_context`).
pub(crate) struct Ctx {
    pub(crate) t: Tunables,
    pub(crate) optimize: bool,
    pub(crate) is_data: bool,
    pub(crate) goal_len: u32,
    pub(crate) orig_goal_len: u32,
    pub(crate) min_len: u32,
    pub(crate) orig_len: u32,
    pub(crate) goal_block: Option<u64>,
    pub(crate) policy: GoalPolicy,
    pub(crate) stream: Option<u64>,
    pub(crate) start_group: u32,
    pub(crate) stream_slot: Option<usize>,
    pub(crate) two_order: u32,
    pub(crate) cr: Option<Criterion>,
    pub(crate) status: Status,
    pub(crate) best: Option<Cand>,
    pub(crate) result: Option<(Extent, FoundBy)>,
    pub(crate) hint_first: bool,
    pub(crate) found: u32,
    pub(crate) cr_found: [u32; NUM_CRITERIA],
    pub(crate) cr_considered: [u32; NUM_CRITERIA],
    pub(crate) cr_failed: [u32; NUM_CRITERIA],
    pub(crate) groups_scanned: u32,
    pub(crate) lost: u32,
    pub(crate) two_n_hit: bool,
    /// CR_BEST_AVAIL_LEN under `BestAvailFloor::Minimum`: a run at least
    /// the trimmed length is taken whole, up to the original goal length.
    pub(crate) whole_run: bool,
    /// Every pass ran without taking a candidate; the best one found was
    /// taken after them (the kernel counts no pass's hit for it).
    pub(crate) after_passes: bool,
    /// The passes the policy lets run.
    pub(crate) passes: Passes,
    /// Extents measured before the best so far is taken.
    pub(crate) max_to_scan: u32,
}

impl Ctx {
    /// The most a found run may give: the goal length, or under
    /// `whole_run` the original goal length.
    pub(crate) fn take_limit(&self) -> u32 {
        if self.whole_run {
            self.orig_goal_len
        } else {
            self.goal_len
        }
    }
}

/// What a policy is told about `req`.
pub(crate) fn request_info(req: &AllocRequest) -> RequestInfo {
    RequestInfo {
        len: req.len,
        min_len: req.min_len.unwrap_or(1),
        goal: req.goal,
        data: req.kind == AllocKind::Data,
        stream: req.stream.is_some(),
    }
}

impl Allocator {
    /// The context of `req` under tunables `t`.
    pub(crate) fn context(&self, req: &AllocRequest, t: Tunables) -> Ctx {
        let k = 32 - req.len.leading_zeros(); // floor(log2(len)) + 1
        let two_order = if req.len.is_power_of_two() && k >= t.mb_order2_req && k as usize <= self.geo.num_orders() {
            k - 1
        } else {
            0
        };
        // ext4's own decisions cost no call.
        let (passes, max_to_scan) = match &self.policy {
            None => (Passes::ALL, t.mb_max_to_scan),
            Some(p) => {
                let info = request_info(req);
                (p.passes(&info), p.max_to_scan(t.mb_max_to_scan, &info))
            }
        };
        Ctx {
            passes,
            max_to_scan,
            optimize: self.optimize_scan(&t),
            t,
            is_data: req.kind == AllocKind::Data,
            goal_len: req.len,
            orig_goal_len: req.orig_goal_len.unwrap_or(req.len),
            min_len: req.min_len.unwrap_or(1),
            orig_len: req.original_len.or(req.min_len).unwrap_or(req.len),
            goal_block: req.goal,
            policy: req.goal_policy,
            stream: req.stream,
            start_group: req.goal.map_or(0, |b| self.geo.group_of(b)),
            stream_slot: None,
            two_order,
            cr: None,
            status: Status::Continue,
            best: None,
            result: None,
            hint_first: false,
            whole_run: false,
            after_passes: false,
            found: 0,
            cr_found: [0; NUM_CRITERIA],
            cr_considered: [0; NUM_CRITERIA],
            cr_failed: [0; NUM_CRITERIA],
            groups_scanned: 0,
            lost: 0,
            two_n_hit: false,
        }
    }

    /// Add what one request did to the statistics (`ext4_mb_collect_stats`).
    pub(crate) fn collect_stats(&self, ctx: &Ctx, req: &AllocRequest) {
        let sh = self.stats.shard();
        bump(&sh.lost, ctx.lost.into());
        if !ctx.t.mb_stats {
            return;
        }
        let got = ctx.result.map_or(0, |(e, _)| e.len);
        bump(&sh.reqs, 1);
        // What the caller keeps: the rest of a window is its preallocation.
        bump(&sh.allocated, got.min(ctx.orig_len).into());
        bump(&sh.success, u64::from(got >= ctx.orig_len));
        bump(&sh.extents_scanned, ctx.found.into());
        bump(&sh.groups_scanned, ctx.groups_scanned.into());
        for i in 0..NUM_CRITERIA {
            bump(&sh.cr_extents_scanned[i], ctx.cr_found[i].into());
            bump(&sh.cr_groups_considered[i], ctx.cr_considered[i].into());
            bump(&sh.cr_useless_loops[i], ctx.cr_failed[i].into());
        }
        // ext4 counts a request whose best candidate was taken after every
        // pass ran (its criterion one past the last) as a failed loop of
        // the first pass; mb_stats here reads as ext4's would.
        bump(&sh.cr_useless_loops[0], u64::from(ctx.after_passes));
        bump(&sh.breaks, u64::from(ctx.found > ctx.max_to_scan));
        if let Some((e, by)) = ctx.result {
            bump(&sh.len_goal_hits, u64::from(e.len == ctx.orig_goal_len));
            // A stream request's goal is its stream's group once the
            // probe at the goal block failed: only the probe can hit it.
            let at_goal = by == FoundBy::Goal || (req.stream.is_none() && req.goal == Some(e.start));
            bump(&sh.goal_hits, u64::from(at_goal));
            bump(&sh.policy_hits, u64::from(by == FoundBy::Policy));
            if let FoundBy::Pass(cr) = by {
                bump(&sh.cr_hits[cr.index()], u64::from(!ctx.after_passes));
                bump(&sh.two_n_hits, u64::from(ctx.two_n_hit));
                if req.stream.is_some() && self.geo.group_of(e.start) == ctx.start_group {
                    bump(&sh.stream_goal_hits, 1);
                }
            }
        }
    }
}
