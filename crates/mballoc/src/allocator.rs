//! The [`Allocator`]: the volume's groups, their order indexes, the
//! tunables and the statistics, and the one entry point that places an
//! extent ([`Allocator::allocate`]). The search itself is in `scan`, the
//! per-request state in `context`, given-range operations (free, claim,
//! load) in `range_ops` and the invariant checks in `verify`.

use crate::buddy::{Buddy, GroupInfo};
use crate::criteria::GroupSummary;
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::group::{GroupSlot, GroupTable};
use crate::order_index::{IndexKind, OrderIndexes};
use crate::request::{AllocRequest, Allocation};
use crate::stats::{MbStats, Stats};
use crate::stream_goal::{Concurrency, StreamGoals};
use crate::tunables::{AtomicTunables, OptimizeScan, Tunables};
use parking_lot::MutexGuard;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// ext4's multiblock allocator over one volume. `Send + Sync`: share it
/// behind an `Arc` and allocate from any number of threads.
///
/// ```
/// use mballoc::{Allocator, AllocRequest, Geometry};
/// let a = Allocator::new(Geometry::new(4096, 1 << 20)?)?;
/// let got = a.allocate(&AllocRequest::new(16).try_goal(1000))?;
/// assert_eq!(got.extent.start, 1000);
/// a.free(got.extent.start, 16)?;
/// assert!(a.free(got.extent.start, 16).is_err()); // freed already: a typed error
/// # Ok::<(), mballoc::Error>(())
/// ```
pub struct Allocator {
    pub(crate) geo: Geometry,
    pub(crate) groups: GroupTable,
    pub(crate) index: OrderIndexes,
    pub(crate) reserved: Vec<(u64, u64)>,
    pub(crate) tunables: AtomicTunables,
    pub(crate) stats: Stats,
    pub(crate) stream_goals: StreamGoals,
    pub(crate) concurrency: Concurrency,
    pub(crate) flex_groups: u32,
    pub(crate) initial_free: AtomicU64,
    /// `None`: ext4's decisions, taken without asking (the common case
    /// pays no call).
    pub(crate) policy: Option<std::sync::Arc<dyn crate::policy::Policy>>,
    /// Which buddies ext4 would have built since mount; unset: all of them
    /// (`crate::buddy_load`).
    pub(crate) loads: std::sync::OnceLock<crate::buddy_load::BuddyLoads>,
    /// The order lists of kernels before 6.17, kept only while
    /// [`crate::OrderLists::Linked`] is chosen.
    pub(crate) lists: crate::order_lists::LinkedLists,
}

/// A group's lock held: its buddy, `None` while the group is untouched.
pub(crate) type Guard<'a> = MutexGuard<'a, Option<Box<Buddy>>>;

impl Allocator {
    /// The volume's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Current tunables.
    pub fn tunables(&self) -> Tunables {
        self.tunables.load()
    }

    /// Change tunables; takes effect for requests that start afterwards.
    /// Choosing [`crate::OrderLists::Linked`] builds the lists as a mount
    /// would (every built group, in group order).
    pub fn set_tunables(&self, t: Tunables) -> Result<()> {
        t.validate(self.geo.blocks_per_group())?;
        self.tunables.store(t);
        if (t.order_lists == crate::OrderLists::Linked) != self.lists.is_on() {
            self.restart_lists();
        }
        Ok(())
    }

    /// Keep the order lists if the tunables ask for them, rebuilt as a
    /// mount builds them; drop them otherwise.
    pub(crate) fn restart_lists(&self) {
        if self.tunables.load().order_lists == crate::OrderLists::Linked {
            self.lists.start(|g| self.is_buddy_loaded(g), |g| orders_of(&self.groups.summary(g)));
        } else {
            self.lists.stop();
        }
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

    /// The policy deciding where it overrides ext4 (the file layer asks it
    /// for goals and windows).
    pub fn policy(&self) -> &dyn crate::policy::Policy {
        match &self.policy {
            Some(p) => &**p,
            None => &crate::policy::KernelPolicy,
        }
    }

    /// How shared state is synchronised.
    pub fn concurrency(&self) -> Concurrency {
        self.concurrency
    }

    /// Number of stream goals.
    pub fn stream_goal_count(&self) -> usize {
        self.stream_goals.len()
    }

    /// Groups in the order-index set of `kind` for `order` (what
    /// `mb_structs_summary` lists). The sets themselves stay inside: they
    /// change only under their group's lock.
    pub fn index_len(&self, kind: IndexKind, order: usize) -> u32 {
        if order < self.index.num_orders() {
            self.index.set(kind, order).len()
        } else {
            0
        }
    }

    /// Whether scans use the order indexes under the current tunables.
    pub fn optimize_scan_enabled(&self) -> bool {
        self.optimize_scan(&self.tunables.load())
    }

    pub(crate) fn optimize_scan(&self, t: &Tunables) -> bool {
        match t.mb_optimize_scan {
            OptimizeScan::On => true,
            OptimizeScan::Off => false,
            OptimizeScan::Auto => self.geo.groups() >= 16,
        }
    }

    /// The full info of group `g` (its template if never touched).
    pub fn group_info(&self, g: u32) -> Result<GroupInfo> {
        self.with_group(g, |b| *b.info())
    }

    /// The lock-free summary of group `g`.
    pub fn group_summary(&self, g: u32) -> Result<GroupSummary> {
        self.check_group(g)?;
        Ok(self.groups.summary(g))
    }

    /// Whether `block` is in use (allocated or reserved).
    pub fn is_used(&self, block: u64) -> Result<bool> {
        self.geo.check_range(block, 1)?;
        let off = self.geo.offset_in_group(block);
        Ok(self.group(self.geo.group_of(block), |b| b.is_used(off)))
    }

    /// Run `f` on group `g`'s buddy (template if untouched), under its lock.
    pub fn with_group<R>(&self, g: u32, f: impl FnOnce(&Buddy) -> R) -> Result<R> {
        self.check_group(g)?;
        Ok(self.group(g, f))
    }

    fn check_group(&self, g: u32) -> Result<()> {
        if g < self.geo.groups() {
            Ok(())
        } else {
            Err(Error::GroupOutOfRange { group: g, groups: self.geo.groups() })
        }
    }

    /// [`Allocator::with_group`] for a group known to exist.
    pub(crate) fn group<R>(&self, g: u32, f: impl FnOnce(&Buddy) -> R) -> R {
        debug_assert!(g < self.geo.groups());
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
            let runs: Vec<(u32, u32)> = self.group(g, |b| b.free_runs().collect());
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
    pub(crate) fn current<'g>(&'g self, guard: &'g Guard<'_>, g: u32) -> &'g Buddy {
        guard.as_deref().unwrap_or_else(|| self.groups.template(g))
    }

    pub(crate) fn materialize<'g>(&self, guard: &'g mut Guard<'_>, g: u32) -> &'g mut Buddy {
        if guard.is_none() {
            let t0 = Instant::now();
            **guard = Some(Box::new(self.groups.template(g).clone()));
            let sh = self.stats.shard();
            sh.buddies_generated.fetch_add(1, Ordering::Relaxed);
            sh.buddies_time_used.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        if let Some(l) = self.loads.get() {
            l.load(g, |x| self.joined(x));
        }
        guard.as_mut().expect("just materialized")
    }

    /// Publish a group's new summary and move it between index sets.
    pub(crate) fn after_change(&self, g: u32, slot: &GroupSlot, old: (i8, i8), info: &GroupInfo) {
        crate::verify::debug_assert_summary(&self.geo, g, info);
        slot.publish(info);
        self.index.update(g, old, orders(info));
        self.lists.update(g, old, orders(info));
        if let Some(l) = self.loads.get() {
            l.written(g);
        }
    }

    /// Allocate one extent.
    pub fn allocate(&self, req: &AllocRequest) -> Result<Allocation> {
        req.validate(&self.geo)?;
        let t = self.tunables.load();
        let mut ctx = self.context(req, t);
        self.regular_allocator(&mut ctx, req);
        self.collect_stats(&ctx, req);
        match ctx.result {
            Some((extent, found_by)) => {
                self.stats.shard().free_delta.fetch_sub(i64::from(extent.len), Ordering::Relaxed);
                Ok(Allocation { extent, found_by, groups_scanned: ctx.groups_scanned, extents_scanned: ctx.found })
            }
            None => Err(Error::NoSpace { len: req.len, min_len: ctx.min_len }),
        }
    }
}

/// A group's two index orders: largest free chunk, average fragment bucket.
pub(crate) fn orders(info: &GroupInfo) -> (i8, i8) {
    (info.largest_free_order, info.avg_fragment_order)
}

/// The same, from a group's lock-free summary.
pub(crate) fn orders_of(s: &GroupSummary) -> (i8, i8) {
    (s.largest_free_order, s.avg_fragment_order)
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Allocator>();
};
