//! The allocator: requests, the goal probe, the five passes, frees.

use crate::buddy::{Buddy, GroupInfo};
use crate::criteria::{good_group, request_bucket, Criterion, GroupSummary, NUM_CRITERIA};
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::group::{summary_of, GroupSlot, GroupTable};
use crate::order_index::{IndexKind, OrderIndexes};
use crate::stats::{bump, MbStats, Stats};
use crate::stream_goal::{Concurrency, StreamGoals};
use crate::tunables::{AtomicTunables, BestAvailFloor, OptimizeScan, Tunables};
use parking_lot::MutexGuard;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A run of blocks: `[start, start + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Extent {
    /// First block.
    pub start: u64,
    /// Number of blocks.
    pub len: u32,
}

impl Extent {
    /// One past the last block.
    pub fn end(&self) -> u64 {
        self.start + u64::from(self.len)
    }
}

/// How the goal block is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GoalPolicy {
    /// The goal only says where scanning starts (its group).
    #[default]
    Hint,
    /// Try to allocate exactly at the goal first, then scan (`HINT_TRY_GOAL`).
    TryFirst,
    /// Allocate exactly at the goal or fail (`HINT_GOAL_ONLY`).
    Only,
}

/// Data or metadata. Only data requests may have their goal length trimmed
/// by CR_BEST_AVAIL_LEN (only normalized data requests carry slack).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocKind {
    /// File data (`HINT_DATA`).
    #[default]
    Data,
    /// Metadata.
    Metadata,
}

/// One allocation request.
///
/// `len` is the length wanted (the kernel's goal extent length); the answer
/// may be shorter, down to `min_len` (default 1), when nothing of `len`
/// exists. When `min_len` is given it is also the kernel's "original request"
/// length: CR_BEST_AVAIL_LEN may trim the goal towards it, never below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocRequest {
    /// Blocks wanted (at most one group).
    pub len: u32,
    /// Blocks required; `None` accepts any non-empty extent.
    pub min_len: Option<u32>,
    /// Preferred block.
    pub goal: Option<u64>,
    /// What the goal means.
    pub goal_policy: GoalPolicy,
    /// Data or metadata.
    pub kind: AllocKind,
    /// Stream key (e.g. an inode number): the scan starts at that stream's
    /// goal group and moves it to wherever this request lands.
    pub stream: Option<u64>,
    /// The caller's own need inside a larger (normalized) `len`: the kernel's
    /// original request length. CR_BEST_AVAIL_LEN never trims the goal below
    /// it, and the `success` statistic counts answers that cover it. Unlike
    /// `min_len` it is not a floor. Defaults to `min_len`, else `len`.
    pub original_len: Option<u32>,
}

impl AllocRequest {
    /// A data request for `len` blocks with no goal.
    pub fn new(len: u32) -> Self {
        AllocRequest {
            len,
            min_len: None,
            goal: None,
            goal_policy: GoalPolicy::Hint,
            kind: AllocKind::Data,
            stream: None,
            original_len: None,
        }
    }
    /// Start scanning at `goal`'s group.
    pub fn goal(mut self, goal: u64) -> Self {
        self.goal = Some(goal);
        self.goal_policy = GoalPolicy::Hint;
        self
    }
    /// Try exactly `goal` first.
    pub fn try_goal(mut self, goal: u64) -> Self {
        self.goal = Some(goal);
        self.goal_policy = GoalPolicy::TryFirst;
        self
    }
    /// Allocate exactly at `goal` or fail.
    pub fn goal_only(mut self, goal: u64) -> Self {
        self.goal = Some(goal);
        self.goal_policy = GoalPolicy::Only;
        self
    }
    /// Require at least `min_len` blocks.
    pub fn min_len(mut self, min_len: u32) -> Self {
        self.min_len = Some(min_len);
        self
    }
    /// Use stream goal `key`.
    pub fn stream(mut self, key: u64) -> Self {
        self.stream = Some(key);
        self
    }
    /// The caller needs only `len` of the blocks asked for (see
    /// [`AllocRequest::original_len`]).
    pub fn original_len(mut self, len: u32) -> Self {
        self.original_len = Some(len);
        self
    }
    /// Mark as a metadata request.
    pub fn metadata(mut self) -> Self {
        self.kind = AllocKind::Metadata;
        self
    }
}

/// Where a request was satisfied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    /// At the goal block, before any pass.
    Goal,
    /// By this pass.
    Pass(Criterion),
}

/// The answer to a request, with what it cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// The blocks now owned by the caller.
    pub extent: Extent,
    /// Which step found them.
    pub found_by: FoundBy,
    /// Groups scanned under their lock.
    pub groups_scanned: u32,
    /// Free extents measured.
    pub extents_scanned: u32,
}

/// Builds an [`Allocator`].
#[derive(Debug, Clone)]
pub struct AllocatorBuilder {
    geo: Geometry,
    tunables: Tunables,
    reserved: Vec<(u64, u64)>,
    stream_goals: Option<u32>,
    concurrency: Concurrency,
}

impl AllocatorBuilder {
    /// Use these tunables.
    pub fn tunables(mut self, t: Tunables) -> Self {
        self.tunables = t;
        self
    }
    /// Reserve `[start, start+len)` as metadata: never handed out, never freed.
    pub fn reserve(mut self, start: u64, len: u64) -> Self {
        self.reserved.push((start, len));
        self
    }
    /// Number of stream goals (default `min(CPUs, ceil(groups / 4))`).
    pub fn stream_goals(mut self, n: u32) -> Self {
        self.stream_goals = Some(n);
        self
    }
    /// How shared state is synchronised (default [`Concurrency::Scalable`];
    /// [`Concurrency::Legacy`] has one stream goal whatever `stream_goals` says).
    pub fn concurrency(mut self, c: Concurrency) -> Self {
        self.concurrency = c;
        self
    }
    /// Build the allocator. Untouched groups cost no bitmap memory. The
    /// locality-group window (`mb_group_prealloc`) is clamped to one group.
    pub fn build(mut self) -> Result<Allocator> {
        let geo = self.geo;
        self.tunables.mb_group_prealloc = self.tunables.mb_group_prealloc.min(geo.blocks_per_group());
        self.tunables.validate(geo.blocks_per_group())?;
        let mut reserved = Vec::with_capacity(self.reserved.len());
        for &(start, len) in &self.reserved {
            if len == 0 {
                return Err(Error::ZeroLength);
            }
            check_range(&geo, start, len)?;
            reserved.push((start, start + len));
        }
        reserved.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(reserved.len());
        for (s, e) in reserved {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }

        let n = geo.groups();
        let groups = GroupTable::new(geo);
        let index = OrderIndexes::new(n, geo.num_orders());
        let full = *groups.template(0).info();
        let last = *groups.template(n - 1).info();
        if n > 1 {
            index_range(&index, &full, 0, n - 1);
        }
        index_range(&index, &last, n - 1, n);
        let initial_free = u64::from(full.free) * u64::from(n - 1) + u64::from(last.free);

        let cpus = std::thread::available_parallelism().map_or(1, |c| c.get()) as u32;
        let nstreams = self.stream_goals.unwrap_or_else(|| cpus.min(n.div_ceil(4))).max(1);
        let a = Allocator {
            geo,
            groups,
            index,
            reserved: merged,
            tunables: AtomicTunables::new(self.tunables),
            stats: Stats::new(),
            stream_goals: match self.concurrency {
                Concurrency::Scalable => StreamGoals::sharded(nstreams),
                Concurrency::Legacy => StreamGoals::locked(),
            },
            concurrency: self.concurrency,
            initial_free: AtomicU64::new(initial_free),
        };
        let mut newly_reserved = 0u64;
        for &(s, e) in &a.reserved {
            for (g, off, len) in pieces(&geo, s, e - s) {
                let slot = a.groups.slot(g);
                let mut guard = slot.lock.lock();
                let buddy = a.materialize(&mut guard, g);
                let old = orders(buddy.info());
                let mut i = off;
                while i < off + len {
                    let f = buddy.next_free(i).min(off + len);
                    if f >= off + len {
                        break;
                    }
                    let u = buddy.next_used(f).min(off + len);
                    buddy.mark_used(f, u - f);
                    newly_reserved += u64::from(u - f);
                    i = u;
                }
                a.after_change(g, slot, old, buddy.info());
            }
        }
        a.initial_free.fetch_sub(newly_reserved, Ordering::Relaxed);
        Ok(a)
    }
}

fn index_range(index: &OrderIndexes, info: &GroupInfo, start: u32, end: u32) {
    if info.largest_free_order >= 0 {
        index.set(IndexKind::LargestFreeOrder, info.largest_free_order as usize).insert_range(start, end);
    }
    if info.avg_fragment_order >= 0 {
        index.set(IndexKind::AvgFragmentSize, info.avg_fragment_order as usize).insert_range(start, end);
    }
}

fn orders(info: &GroupInfo) -> (i8, i8) {
    (info.largest_free_order, info.avg_fragment_order)
}

fn check_range(geo: &Geometry, start: u64, len: u64) -> Result<()> {
    match start.checked_add(len) {
        Some(end) if end <= geo.total_blocks() => Ok(()),
        _ => Err(Error::OutOfRange { start, len, total_blocks: geo.total_blocks() }),
    }
}

/// Split `[start, start+len)` into per-group pieces `(group, offset, len)`.
fn pieces(geo: &Geometry, start: u64, len: u64) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
    let end = start + len;
    let mut pos = start;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let g = geo.group_of(pos);
        let off = geo.offset_in_group(pos);
        let n = (u64::from(geo.group_len(g) - off)).min(end - pos) as u32;
        pos += u64::from(n);
        Some((g, off, n))
    })
}

/// ext4's multiblock allocator over one volume. `Send + Sync`: share it
/// behind an `Arc` and allocate from any number of threads.
///
/// ```
/// use mballoc::{Allocator, AllocRequest, Geometry};
/// let a = Allocator::new(Geometry::new(4096, 1 << 20)?)?;
/// let got = a.allocate(&AllocRequest::new(16).try_goal(1000))?;
/// assert_eq!(got.extent.start, 1000);
/// a.free(got.extent.start, 16)?;
/// assert!(a.free(got.extent.start, 16).is_err()); // double free: typed error
/// # Ok::<(), mballoc::Error>(())
/// ```
pub struct Allocator {
    geo: Geometry,
    groups: GroupTable,
    index: OrderIndexes,
    reserved: Vec<(u64, u64)>,
    tunables: AtomicTunables,
    stats: Stats,
    stream_goals: StreamGoals,
    concurrency: Concurrency,
    initial_free: AtomicU64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Continue,
    Found,
    Break,
}

#[derive(Clone, Copy, Debug)]
struct Cand {
    group: u32,
    start: u32,
    len: u32,
}

/// The allocation context (`ext4_allocation_context`).
struct Ctx {
    t: Tunables,
    optimize: bool,
    is_data: bool,
    goal_len: u32,
    orig_goal_len: u32,
    min_len: u32,
    orig_len: u32,
    goal_block: Option<u64>,
    policy: GoalPolicy,
    stream: Option<u64>,
    start_group: u32,
    stream_slot: Option<usize>,
    two_order: u32,
    cr: Option<Criterion>,
    status: Status,
    best: Option<Cand>,
    result: Option<(Extent, FoundBy)>,
    hint_first: bool,
    found: u32,
    cr_found: [u32; NUM_CRITERIA],
    cr_considered: [u32; NUM_CRITERIA],
    cr_failed: [u32; NUM_CRITERIA],
    groups_scanned: u32,
    lost: u32,
    two_n_hit: bool,
    /// CR_BEST_AVAIL_LEN under `BestAvailFloor::Minimum`: a run at least
    /// the trimmed length is taken whole, up to the original goal length.
    whole_run: bool,
}

impl Ctx {
    /// The most a found run may give: the goal length, or under
    /// `whole_run` the original goal length.
    fn take_limit(&self) -> u32 {
        if self.whole_run {
            self.orig_goal_len
        } else {
            self.goal_len
        }
    }
}

type Guard<'a> = MutexGuard<'a, Option<Box<Buddy>>>;

impl Allocator {
    /// An allocator with default tunables and no reserved blocks beyond the
    /// geometry's per-group prefix.
    pub fn new(geo: Geometry) -> Result<Allocator> {
        Allocator::builder(geo).build()
    }

    /// A builder for tunables, reserved ranges and stream goals.
    pub fn builder(geo: Geometry) -> AllocatorBuilder {
        AllocatorBuilder {
            geo,
            tunables: Tunables::default(),
            reserved: Vec::new(),
            stream_goals: None,
            concurrency: Concurrency::default(),
        }
    }

    /// The volume's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Current tunables.
    pub fn tunables(&self) -> Tunables {
        self.tunables.load()
    }

    /// Change tunables; takes effect for requests that start afterwards.
    pub fn set_tunables(&self, t: Tunables) -> Result<()> {
        t.validate(self.geo.blocks_per_group())?;
        self.tunables.store(t);
        Ok(())
    }

    /// Free blocks in the volume (exact when no operation is in flight).
    pub fn free_blocks(&self) -> u64 {
        (self.initial_free.load(Ordering::Relaxed) as i64 + self.stats.free_delta()) as u64
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> MbStats {
        self.stats.snapshot()
    }

    /// Zero the statistics (as writing to the kernel's `mb_stats` does not,
    /// but the lab wants between runs).
    pub fn reset_stats(&self) {
        self.stats.reset();
    }

    /// Number of stream goals.
    pub fn concurrency(&self) -> Concurrency {
        self.concurrency
    }

    /// Number of stream goals.
    pub fn stream_goal_count(&self) -> usize {
        self.stream_goals.len()
    }

    /// The order indexes (for reports and inspection).
    pub fn order_indexes(&self) -> &OrderIndexes {
        &self.index
    }

    /// Whether scans use the order indexes under the current tunables.
    pub fn optimize_scan_enabled(&self) -> bool {
        self.optimize_scan(&self.tunables.load())
    }

    fn optimize_scan(&self, t: &Tunables) -> bool {
        match t.mb_optimize_scan {
            OptimizeScan::On => true,
            OptimizeScan::Off => false,
            OptimizeScan::Auto => self.geo.groups() >= 16,
        }
    }

    /// The full info of group `g` (its template if never touched).
    pub fn group_info(&self, g: u32) -> GroupInfo {
        assert!(g < self.geo.groups(), "group {g} out of range");
        if self.groups.is_materialized_chunk(g) {
            if let Some(b) = self.groups.slot(g).lock.lock().as_ref() {
                return *b.info();
            }
        }
        *self.groups.template(g).info()
    }

    /// The lock-free summary of group `g`.
    pub fn group_summary(&self, g: u32) -> GroupSummary {
        self.groups.summary(g)
    }

    /// Whether `block` is in use (allocated or reserved).
    pub fn is_used(&self, block: u64) -> bool {
        assert!(block < self.geo.total_blocks(), "block out of range");
        let g = self.geo.group_of(block);
        let off = self.geo.offset_in_group(block);
        self.with_group(g, |b| b.is_used(off))
    }

    /// Run `f` on group `g`'s buddy (template if untouched), under its lock.
    pub fn with_group<R>(&self, g: u32, f: impl FnOnce(&Buddy) -> R) -> R {
        if self.groups.is_materialized_chunk(g) {
            let guard = self.groups.slot(g).lock.lock();
            if let Some(b) = guard.as_ref() {
                return f(b);
            }
        }
        f(self.groups.template(g))
    }

    /// Call `f(start, len)` for every maximal free run of the volume in
    /// ascending order; runs that cross a group boundary are reported whole
    /// (as e2freefrag reads an unmounted image).
    pub fn for_each_free_extent(&self, mut f: impl FnMut(u64, u64)) {
        let mut cur: Option<(u64, u64)> = None;
        for g in 0..self.geo.groups() {
            let base = self.geo.group_first_block(g);
            let runs: Vec<(u32, u32)> = self.with_group(g, |b| b.free_runs().collect());
            for (s, l) in runs {
                let s = base + u64::from(s);
                match cur.as_mut() {
                    Some(c) if c.0 + c.1 == s => c.1 += u64::from(l),
                    _ => {
                        if let Some(c) = cur.take() {
                            f(c.0, c.1);
                        }
                        cur = Some((s, u64::from(l)));
                    }
                }
            }
        }
        if let Some(c) = cur {
            f(c.0, c.1);
        }
    }

    /// The locked group's buddy, or its template while it is untouched.
    fn current<'g>(&'g self, guard: &'g Guard<'_>, g: u32) -> &'g Buddy {
        guard.as_deref().unwrap_or_else(|| self.groups.template(g))
    }

    fn materialize<'g>(&self, guard: &'g mut Guard<'_>, g: u32) -> &'g mut Buddy {
        if guard.is_none() {
            let t0 = Instant::now();
            **guard = Some(Box::new(self.groups.template(g).clone()));
            let sh = self.stats.shard();
            sh.buddies_generated.fetch_add(1, Ordering::Relaxed);
            sh.buddies_time_used.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        guard.as_mut().expect("just materialized")
    }

    /// Publish a group's new summary and move it between index sets.
    fn after_change(&self, g: u32, slot: &GroupSlot, old: (i8, i8), info: &GroupInfo) {
        slot.publish(info);
        self.index.update(g, old, orders(info));
    }

    /// Allocate one extent.
    pub fn allocate(&self, req: &AllocRequest) -> Result<Allocation> {
        self.validate(req)?;
        let t = self.tunables.load();
        let mut ctx = self.context(req, t);
        self.regular_allocator(&mut ctx);
        self.collect_stats(&ctx, req);
        match ctx.result {
            Some((extent, found_by)) => {
                self.stats.shard().free_delta.fetch_sub(i64::from(extent.len), Ordering::Relaxed);
                Ok(Allocation { extent, found_by, groups_scanned: ctx.groups_scanned, extents_scanned: ctx.found })
            }
            None => Err(Error::NoSpace { len: req.len, min_len: ctx.min_len }),
        }
    }

    fn validate(&self, req: &AllocRequest) -> Result<()> {
        if req.len == 0 || req.min_len == Some(0) || req.original_len == Some(0) {
            return Err(Error::ZeroLength);
        }
        for m in [req.min_len, req.original_len].into_iter().flatten() {
            if m > req.len {
                return Err(Error::MinExceedsLen { min_len: m, len: req.len });
            }
        }
        if req.len > self.geo.blocks_per_group() {
            return Err(Error::RequestTooLarge { len: req.len.into(), blocks_per_group: self.geo.blocks_per_group() });
        }
        match req.goal {
            Some(goal) if goal >= self.geo.total_blocks() => {
                Err(Error::GoalOutOfRange { goal, total_blocks: self.geo.total_blocks() })
            }
            None if req.goal_policy != GoalPolicy::Hint => Err(Error::InvalidRequest("goal policy needs a goal block")),
            _ => Ok(()),
        }
    }

    fn context(&self, req: &AllocRequest, t: Tunables) -> Ctx {
        let k = 32 - req.len.leading_zeros(); // floor(log2(len)) + 1
        let two_order = if req.len.is_power_of_two() && k >= t.mb_order2_req && k as usize <= self.geo.num_orders() {
            k - 1
        } else {
            0
        };
        Ctx {
            optimize: self.optimize_scan(&t),
            t,
            is_data: req.kind == AllocKind::Data,
            goal_len: req.len,
            orig_goal_len: req.len,
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
            found: 0,
            cr_found: [0; NUM_CRITERIA],
            cr_considered: [0; NUM_CRITERIA],
            cr_failed: [0; NUM_CRITERIA],
            groups_scanned: 0,
            lost: 0,
            two_n_hit: false,
        }
    }

    fn regular_allocator(&self, ctx: &mut Ctx) {
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
        ctx.cr = Some(self.first_criterion(ctx));
        loop {
            while ctx.cr.is_some() && ctx.status == Status::Continue {
                self.scan_groups(ctx);
            }
            if ctx.status == Status::Found {
                return;
            }
            if ctx.best.is_some() && !ctx.hint_first {
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
}

/// The scan: goal probe, passes, per-group scans, best-fit measuring.
impl Allocator {
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
        let take = if run >= ctx.goal_len {
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
    }

    /// Run the current pass once over the volume and advance to the next pass
    /// if it found nothing (`ext4_mb_scan_groups`).
    fn scan_groups(&self, ctx: &mut Ctx) {
        let cr = ctx.cr.expect("scan with no pass left");
        let n = self.geo.groups();
        let mut start = if ctx.start_group >= n { 0 } else { ctx.start_group };
        if !ctx.optimize || !cr.is_cheap() {
            self.scan_linear(ctx, start, n);
        } else {
            if ctx.t.mb_max_linear_groups > 0 {
                let count = ctx.t.mb_max_linear_groups.min(n);
                self.scan_linear(ctx, start, count);
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
                        self.scan_group(ctx, g);
                        ctx.status != Status::Continue
                    });
                }
                Criterion::GoalLenFast => {
                    let lo = request_bucket(ctx.goal_len, self.geo.num_orders());
                    self.index.walk_linear_like(IndexKind::AvgFragmentSize, lo..=top, start, n, |g| {
                        self.scan_group(ctx, g);
                        ctx.status != Status::Continue
                    });
                }
                Criterion::BestAvailLen => self.scan_best_avail(ctx, start, n),
                Criterion::GoalLenSlow | Criterion::AnyFree => unreachable!("expensive passes scan linearly"),
            }
        }
        if ctx.status == Status::Continue {
            ctx.cr_failed[cr.index()] += 1;
            ctx.cr = match cr {
                // Only data requests carry slack worth trimming, and the
                // trimming walks the avg-fragment index: with linear scans the
                // kernel's cr1.5 would only repeat cr1 untrimmed, so skip it.
                Criterion::GoalLenFast if !(ctx.is_data && ctx.optimize) => Some(Criterion::GoalLenSlow),
                _ => cr.next(),
            };
        }
    }

    fn scan_linear(&self, ctx: &mut Ctx, start: u32, count: u32) {
        let n = self.geo.groups();
        let mut g = start;
        for _ in 0..count {
            self.scan_group(ctx, g);
            if ctx.status != Status::Continue {
                return;
            }
            g = if g + 1 == n { 0 } else { g + 1 };
        }
    }

    /// CR_BEST_AVAIL_LEN: retry the avg-fragment lookup with the goal length
    /// trimmed one order at a time, never below the original request.
    fn scan_best_avail(&self, ctx: &mut Ctx, start: u32, n: u32) {
        let order = 31 - ctx.goal_len.leading_zeros();
        let mut min_order = order.saturating_sub(ctx.t.mb_best_avail_max_trim_order.min(31));
        let floor = match ctx.t.mb_best_avail_floor {
            BestAvailFloor::Minimum if ctx.min_len < ctx.orig_len => {
                ctx.whole_run = true;
                ctx.min_len
            }
            _ => ctx.orig_len,
        };
        if (1u32 << min_order) < floor {
            min_order = 32 - floor.leading_zeros();
        }
        'halves: for (lo, hi) in [(start, n), (0, start)] {
            for i in (min_order..=order).rev() {
                ctx.goal_len = 1 << i;
                let set =
                    self.index.set(IndexKind::AvgFragmentSize, request_bucket(ctx.goal_len, self.geo.num_orders()));
                if set.is_empty() {
                    continue;
                }
                let mut g = lo;
                while let Some(found) = set.next_in(g, hi) {
                    self.scan_group(ctx, found);
                    if ctx.status != Status::Continue {
                        break 'halves;
                    }
                    g = found + 1;
                }
            }
        }
        if ctx.status == Status::Continue {
            ctx.goal_len = ctx.orig_goal_len;
            ctx.whole_run = false;
        }
    }

    /// Look at one group under the current pass (`ext4_mb_scan_group`).
    fn scan_group(&self, ctx: &mut Ctx, g: u32) {
        let cr = ctx.cr.expect("scan with no pass");
        ctx.cr_considered[cr.index()] += 1;
        let summary = self.groups.summary(g);
        if !good_group(cr, &summary, ctx.goal_len, ctx.two_order, ctx.min_len) {
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
                self.use_best_found(ctx, g, slot, buddy);
            }
            return;
        }
        self.complex_scan(ctx, g, slot, buddy);
    }

    /// Measure the group's free runs (`ext4_mb_complex_scan_group`).
    fn complex_scan(&self, ctx: &mut Ctx, g: u32, slot: &GroupSlot, buddy: &mut Buddy) {
        let cr = ctx.cr.expect("scan with no pass");
        let mut free = buddy.info().free;
        let mut i = buddy.info().first_free;
        while free > 0 && ctx.status == Status::Continue {
            i = buddy.next_free(i);
            assert!(i < buddy.len(), "group {g}: info counts free blocks the bitmap lacks");
            if cr.is_cheap() {
                let j = buddy.next_used(i);
                if j - i < ctx.goal_len {
                    free -= j - i;
                    i = j;
                    continue;
                }
            }
            let len = buddy.find_extent(i, ctx.take_limit());
            assert!(len > 0 && len <= free, "group {g}: buddy disagrees with info");
            self.measure_extent(ctx, Cand { group: g, start: i, len }, slot, buddy);
            i += len;
            free -= len;
        }
        self.check_limits(ctx, g, slot, buddy, true);
    }

    /// Best fit with effort bounds (`ext4_mb_measure_extent`).
    fn measure_extent(&self, ctx: &mut Ctx, ex: Cand, slot: &GroupSlot, buddy: &mut Buddy) {
        let cr = ctx.cr.expect("scan with no pass");
        ctx.found += 1;
        ctx.cr_found[cr.index()] += 1;
        if ex.len >= ctx.min_len {
            if ctx.hint_first || ex.len == ctx.goal_len || (ctx.whole_run && ex.len >= ctx.goal_len) {
                ctx.best = Some(ex);
                self.use_best_found(ctx, ex.group, slot, buddy);
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
        self.check_limits(ctx, ex.group, slot, buddy, false);
    }

    fn check_limits(&self, ctx: &mut Ctx, g: u32, slot: &GroupSlot, buddy: &mut Buddy, finish_group: bool) {
        if ctx.status == Status::Found {
            return;
        }
        // Stop measuring after mb_max_to_scan extents, but only with a
        // candidate to fall back on: breaking with none would turn a volume
        // that has space into a false NoSpace.
        let Some(b) = ctx.best else { return };
        if ctx.found > ctx.t.mb_max_to_scan && !ctx.hint_first {
            ctx.status = Status::Break;
            return;
        }
        if b.len < ctx.goal_len {
            return;
        }
        if (finish_group || ctx.found > ctx.t.mb_min_to_scan) && b.group == g {
            // Re-measure: the candidate may have been found before a split.
            if buddy.find_extent(b.start, ctx.goal_len) >= ctx.goal_len {
                self.use_best_found(ctx, g, slot, buddy);
            }
        }
    }

    /// Take the best candidate: trim to the goal length and mark it used.
    fn use_best_found(&self, ctx: &mut Ctx, g: u32, slot: &GroupSlot, buddy: &mut Buddy) {
        let b = ctx.best.expect("use_best_found without a candidate");
        debug_assert_eq!(b.group, g);
        let len = b.len.min(ctx.take_limit());
        let old = orders(buddy.info());
        buddy.mark_used(b.start, len);
        self.after_change(g, slot, old, buddy.info());
        let start = self.geo.group_first_block(g) + u64::from(b.start);
        let cr = ctx.cr.unwrap_or(Criterion::AnyFree);
        ctx.result = Some((Extent { start, len }, FoundBy::Pass(cr)));
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
            self.use_best_found(ctx, b.group, slot, buddy);
        }
    }

    fn collect_stats(&self, ctx: &Ctx, req: &AllocRequest) {
        let sh = self.stats.shard();
        bump(&sh.lost, ctx.lost.into());
        if !ctx.t.mb_stats {
            return;
        }
        let got = ctx.result.map_or(0, |(e, _)| e.len);
        bump(&sh.reqs, 1);
        bump(&sh.allocated, got.into());
        bump(&sh.success, u64::from(got >= ctx.orig_len));
        bump(&sh.extents_scanned, ctx.found.into());
        bump(&sh.groups_scanned, ctx.groups_scanned.into());
        for i in 0..NUM_CRITERIA {
            bump(&sh.cr_extents_scanned[i], ctx.cr_found[i].into());
            bump(&sh.cr_groups_considered[i], ctx.cr_considered[i].into());
            bump(&sh.cr_useless_loops[i], ctx.cr_failed[i].into());
        }
        bump(&sh.breaks, u64::from(ctx.found > ctx.t.mb_max_to_scan));
        if let Some((e, by)) = ctx.result {
            bump(&sh.len_goal_hits, u64::from(e.len == ctx.orig_goal_len));
            if req.stream.is_none() {
                bump(&sh.goal_hits, u64::from(req.goal == Some(e.start)));
            }
            if let FoundBy::Pass(cr) = by {
                bump(&sh.cr_hits[cr.index()], 1);
                bump(&sh.two_n_hits, u64::from(ctx.two_n_hit));
                if req.stream.is_some() && self.geo.group_of(e.start) == ctx.start_group {
                    bump(&sh.stream_goal_hits, 1);
                }
            }
        }
    }
}

/// Frees, claims, and the one-block allocator of fast-commit replay.
impl Allocator {
    /// Return `[start, start+len)` to free space. Any extent inside allocated
    /// space may be freed, across group boundaries. A block that is already
    /// free, reserved or out of range is an error and nothing changes.
    pub fn free(&self, start: u64, len: u64) -> Result<()> {
        self.validate_range(start, len)?;
        self.apply(start, len, RangeOp::Free)
    }

    /// Mark the specific extent `[start, start+len)` used (what replaying a
    /// journal or loading an image does). Fails, changing nothing, if any
    /// block is in use or reserved.
    pub fn claim(&self, start: u64, len: u64) -> Result<()> {
        self.validate_range(start, len)?;
        self.apply(start, len, RangeOp::Claim)
    }

    /// One block, first free at or after `goal`, wrapping around the volume
    /// (`ext4_mb_new_blocks_simple`, the fast-commit replay allocator).
    pub fn allocate_simple(&self, goal: u64) -> Result<u64> {
        if goal >= self.geo.total_blocks() {
            return Err(Error::GoalOutOfRange { goal, total_blocks: self.geo.total_blocks() });
        }
        let n = self.geo.groups();
        let g0 = self.geo.group_of(goal);
        let off0 = self.geo.offset_in_group(goal);
        for i in 0..=n {
            let g = (g0 + i) % n;
            let (from, end) = match i {
                0 => (off0, self.geo.group_len(g)),
                _ if i == n => (0, off0),
                _ => (0, self.geo.group_len(g)),
            };
            if from >= end || self.groups.summary(g).free == 0 {
                continue;
            }
            let slot = self.groups.slot(g);
            let mut guard = slot.lock.lock();
            let buddy = self.materialize(&mut guard, g);
            let f = buddy.next_free(from);
            if f < end {
                let old = orders(buddy.info());
                buddy.mark_used(f, 1);
                self.after_change(g, slot, old, buddy.info());
                self.stats.shard().free_delta.fetch_sub(1, Ordering::Relaxed);
                return Ok(self.geo.group_first_block(g) + u64::from(f));
            }
        }
        Err(Error::NoSpace { len: 1, min_len: 1 })
    }

    fn validate_range(&self, start: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        check_range(&self.geo, start, len)?;
        let end = start + len;
        let prefix = self.geo.reserved_per_group();
        if prefix > 0 {
            for (g, off, _) in pieces(&self.geo, start, len) {
                if off < prefix {
                    return Err(Error::ReservedBlock { block: self.geo.group_first_block(g) + u64::from(off) });
                }
            }
        }
        // First explicit reserved range ending after `start`.
        let i = self.reserved.partition_point(|&(_, e)| e <= start);
        if let Some(&(s, _)) = self.reserved.get(i) {
            if s < end {
                return Err(Error::ReservedBlock { block: s.max(start) });
            }
        }
        Ok(())
    }

    fn apply(&self, start: u64, len: u64, op: RangeOp) -> Result<()> {
        let parts: Vec<(u32, u32, u32)> = pieces(&self.geo, start, len).collect();
        // Lock every group involved, in ascending order, check, then change:
        // either the whole range changes or nothing does.
        let mut guards: Vec<Guard<'_>> = parts.iter().map(|&(g, _, _)| self.groups.slot(g).lock.lock()).collect();
        for (guard, &(g, off, n)) in guards.iter().zip(&parts) {
            let buddy = self.current(guard, g);
            let base = self.geo.group_first_block(g);
            match op {
                RangeOp::Free => {
                    let f = buddy.next_free(off);
                    if f < off + n {
                        return Err(Error::DoubleFree { block: base + u64::from(f) });
                    }
                }
                RangeOp::Claim => {
                    let u = buddy.next_used(off);
                    if u < off + n {
                        return Err(Error::AlreadyInUse { block: base + u64::from(u) });
                    }
                }
            }
        }
        for (guard, &(g, off, n)) in guards.iter_mut().zip(&parts) {
            let slot = self.groups.slot(g);
            let buddy = self.materialize(guard, g);
            let old = orders(buddy.info());
            match op {
                RangeOp::Free => buddy.free(off, n),
                RangeOp::Claim => buddy.mark_used(off, n),
            }
            self.after_change(g, slot, old, buddy.info());
        }
        let delta = len as i64;
        let delta = if op == RangeOp::Free { delta } else { -delta };
        self.stats.shard().free_delta.fetch_add(delta, Ordering::Relaxed);
        Ok(())
    }

    /// Replace group `g`'s state with `used` (bit set = in use), as when
    /// loading a volume's bitmaps. Reserved blocks must be shown in use.
    pub fn load_group_bitmap(&self, g: u32, used: &[u64]) -> Result<()> {
        if g >= self.geo.groups() {
            return Err(Error::BadBitmap { group: g, reason: "no such group".into() });
        }
        let len = self.geo.group_len(g);
        if (used.len() as u64) * 64 < u64::from(len) {
            return Err(Error::BadBitmap {
                group: g,
                reason: format!("bitmap has {} bits, group {len}", used.len() * 64),
            });
        }
        let t0 = Instant::now();
        let fresh = Buddy::from_bitmap(len, self.geo.max_order(), self.geo.num_orders(), used);
        let base = self.geo.group_first_block(g);
        let prefix = self.geo.reserved_per_group();
        if !fresh.all_used(0, prefix) {
            return Err(Error::BadBitmap { group: g, reason: "reserved prefix shown free".into() });
        }
        let lo = self.reserved.partition_point(|&(_, e)| e <= base);
        for &(s, e) in self.reserved[lo..].iter().take_while(|&&(s, _)| s < base + u64::from(len)) {
            let a = s.max(base) - base;
            let b = e.min(base + u64::from(len)) - base;
            if !fresh.all_used(a as u32, b as u32) {
                return Err(Error::BadBitmap {
                    group: g,
                    reason: format!("reserved block {} shown free", s.max(base)),
                });
            }
        }
        let slot = self.groups.slot(g);
        let mut guard = slot.lock.lock();
        let current = *self.current(&guard, g).info();
        let info = *fresh.info();
        *guard = Some(Box::new(fresh));
        self.after_change(g, slot, orders(&current), &info);
        self.stats.shard().free_delta.fetch_add(i64::from(info.free) - i64::from(current.free), Ordering::Relaxed);
        let sh = self.stats.shard();
        sh.buddies_generated.fetch_add(1, Ordering::Relaxed);
        sh.buddies_time_used.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Record blocks put into (or returned from) preallocations, for the
    /// `preallocated` / `discarded` statistics the file layer owns.
    pub fn note_preallocation(&self, preallocated: u64, discarded: u64) {
        let sh = self.stats.shard();
        bump(&sh.preallocated, preallocated);
        bump(&sh.discarded, discarded);
    }

    /// Check every invariant: each touched group's buddy and info equal those
    /// regenerated from its bitmap, the lock-free summaries match, every
    /// group is in exactly the index sets its orders name, and the free count
    /// adds up. Takes each group lock in turn; meant for tests and `check`.
    pub fn check_consistency(&self) -> std::result::Result<(), String> {
        let mut free = 0u64;
        for g in 0..self.geo.groups() {
            let info = self.with_group(g, |b| {
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeOp {
    Free,
    Claim,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Allocator>();
};
