//! Building an [`Allocator`]: tunables, reserved ranges, stream goals and
//! the concurrency model, checked once. A fresh allocator's groups are all
//! untouched templates; only reserved ranges materialize the groups they
//! fall in.

use crate::allocator::{orders, Allocator};
use crate::buddy::GroupInfo;
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::group::GroupTable;
use crate::order_index::{IndexKind, OrderIndexes};
use crate::policy::Policy;
use crate::stats::Stats;
use crate::stream_goal::{Concurrency, StreamGoals};
use crate::tunables::{AtomicTunables, Tunables};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
            flex_groups: 1,
            policy: None,
        }
    }
}

/// Builds an [`Allocator`].
#[derive(Debug, Clone)]
pub struct AllocatorBuilder {
    geo: Geometry,
    tunables: Tunables,
    reserved: Vec<(u64, u64)>,
    stream_goals: Option<u32>,
    concurrency: Concurrency,
    flex_groups: u32,
    policy: Option<Arc<dyn Policy>>,
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
    /// Groups per flex group (a power of two; 1, the default: none). With
    /// 4 or more, CR_POWER2_ALIGNED skips the first group of every flex
    /// group for data requests, as ext4 leaves it to metadata.
    pub fn flex_groups(mut self, n: u32) -> Self {
        self.flex_groups = n;
        self
    }
    /// Decide as `policy` does where it overrides ext4 (default:
    /// [`KernelPolicy`](crate::KernelPolicy), ext4 throughout).
    pub fn policy(mut self, policy: Arc<dyn Policy>) -> Self {
        self.policy = Some(policy);
        self
    }
    /// Build the allocator. Untouched groups cost no bitmap memory. The
    /// locality-group window (`mb_group_prealloc`) is clamped to one group.
    pub fn build(mut self) -> Result<Allocator> {
        let geo = self.geo;
        self.tunables.mb_group_prealloc = self.tunables.mb_group_prealloc.min(geo.blocks_per_group());
        self.tunables.validate(geo.blocks_per_group())?;
        if !self.flex_groups.is_power_of_two() {
            return Err(Error::InvalidGeometry(format!("flex groups {} is not a power of two", self.flex_groups)));
        }
        let mut reserved = Vec::with_capacity(self.reserved.len());
        for &(start, len) in &self.reserved {
            if len == 0 {
                return Err(Error::ZeroLength);
            }
            geo.check_range(start, len)?;
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
            flex_groups: self.flex_groups,
            initial_free: AtomicU64::new(initial_free),
            policy: self.policy,
            loads: std::sync::OnceLock::new(),
            lists: crate::order_lists::LinkedLists::new(n, geo.num_orders()),
        };
        let mut newly_reserved = 0u64;
        for &(s, e) in &a.reserved {
            for (g, off, len) in geo.pieces(s, e - s) {
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
        // Reserved ranges are there at mount: the lists start after them.
        a.restart_lists();
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
