//! Operations on given ranges rather than searches: frees, claims (replay
//! and import mark known extents used), loading a group's bitmap, and the
//! one-block allocator of fast-commit replay. A range may span groups; its
//! groups are locked in ascending order, everything is checked, then
//! everything changes, so an error leaves the allocator as it was.

use crate::allocator::{orders, Allocator, Guard};
use crate::buddy::{Buddy, GroupInfo};
use crate::error::{Error, Result};
use crate::request::Extent;
use crate::stats::bump;
use std::sync::atomic::Ordering;
use std::time::Instant;

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
        self.geo.check_range(start, len)?;
        let end = start + len;
        let prefix = self.geo.reserved_per_group();
        if prefix > 0 {
            for (g, off, _) in self.geo.pieces(start, len) {
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
        let parts: Vec<(u32, u32, u32)> = self.geo.pieces(start, len).collect();
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
                        return Err(Error::AlreadyFree { block: base + u64::from(f) });
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
        self.rebuilt(g, &info);
        self.stats.shard().free_delta.fetch_add(i64::from(info.free) - i64::from(current.free), Ordering::Relaxed);
        let sh = self.stats.shard();
        sh.buddies_generated.fetch_add(1, Ordering::Relaxed);
        sh.buddies_time_used.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Load the same bitmap `used` into groups `first .. first + count`,
    /// as [`Allocator::load_group_bitmap`] would one by one, without building
    /// a buddy for each: the untouched ones share one template until a
    /// request changes them, so an aged volume of 753,000 groups costs the
    /// groups its requests touch. A group already built gets its own copy.
    /// Every group of the range must have the same length; at most 15
    /// ranges may be loaded this way (then [`Error::BadBitmap`]); a bad
    /// bitmap is refused before any group changes.
    pub fn load_groups_alike(&self, first: u32, count: u32, used: &[u64]) -> Result<()> {
        static REGISTER: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
        let end = first.checked_add(count).filter(|&e| e <= self.geo.groups() && count > 0);
        let Some(end) = end else {
            return Err(Error::BadBitmap { group: first, reason: format!("no groups {first}+{count}") });
        };
        let len = self.geo.group_len(first);
        if self.geo.group_len(end - 1) != len {
            return Err(Error::BadBitmap { group: end - 1, reason: "groups of different lengths".into() });
        }
        if (used.len() as u64) * 64 < u64::from(len) {
            return Err(Error::BadBitmap {
                group: first,
                reason: format!("bitmap has {} bits, group {len}", used.len() * 64),
            });
        }
        let fresh = Buddy::from_bitmap(len, self.geo.max_order(), self.geo.num_orders(), used);
        if !fresh.all_used(0, self.geo.reserved_per_group()) {
            return Err(Error::BadBitmap { group: first, reason: "reserved prefix shown free".into() });
        }
        // A reserved range inside the run of groups must show as used in
        // every group it touches.
        for &(s, e) in &self.reserved {
            for (g, off, l) in self.geo.pieces(s, e - s) {
                if (first..end).contains(&g) && !fresh.all_used(off, off + l) {
                    return Err(Error::BadBitmap { group: g, reason: format!("reserved block {s} shown free") });
                }
            }
        }
        let info = *fresh.info();
        let k = {
            let _one = REGISTER.lock();
            self.groups.add_template(fresh.clone()).ok_or_else(|| Error::BadBitmap {
                group: first,
                reason: format!("more than {} runs of groups loaded alike", crate::group::SHARED_TEMPLATES),
            })?
        };
        let mut delta = 0i64;
        for g in first..end {
            let slot = self.groups.slot(g);
            let mut guard = slot.lock.lock();
            let current = *self.current(&guard, g).info();
            if guard.is_some() {
                *guard = Some(Box::new(fresh.clone()));
            } else {
                self.groups.use_template(g, k);
            }
            self.after_change(g, slot, orders(&current), &info);
            self.rebuilt(g, &info);
            delta += i64::from(info.free) - i64::from(current.free);
        }
        self.stats.shard().free_delta.fetch_add(delta, Ordering::Relaxed);
        Ok(())
    }

    /// A built group's buddy was made again from its bitmap: in the order
    /// lists it rejoins their tails, as a buddy built at mount joins them.
    fn rebuilt(&self, g: u32, info: &GroupInfo) {
        if self.is_buddy_loaded(g) {
            self.lists.built(g, orders(info));
        }
    }

    /// Record blocks put into (or returned from) preallocations, for the
    /// `preallocated` / `discarded` statistics the file layer owns.
    pub fn note_preallocation(&self, preallocated: u64, discarded: u64) {
        let sh = self.stats.shard();
        bump(&sh.preallocated, preallocated);
        bump(&sh.discarded, discarded);
    }

    /// Count a request the caller served from its own preallocation, as
    /// ext4 counts every request in `mb_stats`: `reqs`, `allocated`,
    /// `success` (it got `wanted` blocks) and `goal_hits` (it starts at
    /// `goal`, which is asked for only when statistics are on);
    /// `preallocation_reqs` tells them apart.
    #[inline(always)]
    pub fn note_preallocated_request(&self, goal: impl FnOnce() -> Option<u64>, got: Extent, wanted: u32) {
        if !self.tunables.stats_on() {
            return;
        }
        let goal = goal();
        let sh = self.stats.shard();
        bump(&sh.reqs, 1);
        bump(&sh.preallocation_reqs, 1);
        bump(&sh.allocated, got.len.into());
        bump(&sh.success, u64::from(got.len >= wanted));
        bump(&sh.goal_hits, u64::from(goal == Some(got.start)));
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeOp {
    Free,
    Claim,
}
