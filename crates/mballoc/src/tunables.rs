//! The allocator's knobs, with the kernel's sysfs names and defaults.
//!
//! [`Tunables`] is a plain value; the allocator keeps it in relaxed atomics so
//! a knob can be changed while allocations run (as through sysfs) without any
//! lock on the allocation path.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU32, Ordering};

/// Whether scans use the order indexes (`mb_optimize_scan` mount option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OptimizeScan {
    /// The kernel's default: on iff the volume has at least 16 groups
    /// (`MB_DEFAULT_LINEAR_SCAN_THRESHOLD`).
    #[default]
    Auto,
    /// Always use the indexes for the cheap passes.
    On,
    /// Linear scans from the goal in every pass (pre-5.13 behaviour).
    Off,
}

/// How far CR_BEST_AVAIL_LEN may trim a request, and what it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BestAvailFloor {
    /// The kernel's rule: trim only the normalization slack, never below
    /// the original request, and take exactly the trimmed length.
    #[default]
    Request,
    /// For requests that accept a partial result: trim down to the
    /// request's minimum, and take the whole free run found, up to the
    /// goal length. On a volume whose free space is all small fragments
    /// this finds a run by index instead of measuring `mb_max_to_scan`
    /// extents in CR_GOAL_LEN_SLOW (not in the kernel).
    Minimum,
}

/// Whether scans without the order indexes run CR_BEST_AVAIL_LEN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinearBestAvail {
    /// Skip it: without the indexes it cannot trim, and would only repeat
    /// CR_GOAL_LEN_FAST's sweep (the engine's choice).
    #[default]
    Skip,
    /// Run it, as ext4 does: a second CR_GOAL_LEN_FAST sweep, for data and
    /// metadata alike, counted under CR_BEST_AVAIL_LEN.
    Repeat,
}

/// How the cheap passes choose their next group with `mb_optimize_scan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OrderLists {
    /// The order sets kept by group number and walked from the start group
    /// (ext4's xarrays, Linux 6.17 on, and the 6.12 stable series).
    #[default]
    ByGroup,
    /// ext4's linked lists before that (5.13 to 6.16): a group goes to the
    /// tail of its list when its order changes, and each pass tries the
    /// start group, then `mb_max_linear_groups` more in turn, then the
    /// first good group read from the lists' heads, again after every
    /// group that did not serve (`crate::order_lists`).
    Linked,
}

/// What the cheap passes' group scans do with a free run shorter than the
/// goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShortRuns {
    /// Step over it: a group a cheap pass chose has a long enough run, so
    /// a short one is never the answer (Linux 6.4 on, the CR1.5 series'
    /// "Avoid scanning smaller extents in BG during CR1").
    #[default]
    Skip,
    /// Measure it like any other, as kernels before 6.4 did: it counts
    /// towards `mb_max_to_scan` and may become the best candidate.
    Measure,
}

/// Allocator tunables. Field names are the kernel's sysfs attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunables {
    /// `mb_stats`: collect per-request statistics (kernel default 0).
    pub mb_stats: bool,
    /// `mb_max_to_scan`: extents measured before the scan gives up and takes
    /// the best so far (200).
    pub mb_max_to_scan: u32,
    /// `mb_min_to_scan`: extents measured before a larger-than-needed
    /// candidate is accepted (10).
    pub mb_min_to_scan: u32,
    /// `mb_order2_req`: power-of-two requests of at least `2^(n-1)` blocks use
    /// the buddy search of CR_POWER2_ALIGNED (2).
    pub mb_order2_req: u32,
    /// `mb_stream_req`: files larger than this many blocks use per-file
    /// preallocation and stream goals (16). Used by the file layer.
    pub mb_stream_req: u32,
    /// `mb_group_prealloc`: locality-group window in blocks (512). Used by the
    /// file layer; at most one group.
    pub mb_group_prealloc: u32,
    /// `mb_max_linear_groups`: groups tried linearly before the index lookups
    /// (0 on non-rotational devices, 4 on rotational ones).
    pub mb_max_linear_groups: u32,
    /// `mb_best_avail_max_trim_order`: how many orders CR_BEST_AVAIL_LEN may
    /// trim the goal length by (3).
    pub mb_best_avail_max_trim_order: u32,
    /// How low CR_BEST_AVAIL_LEN may trim (not a kernel knob).
    pub mb_best_avail_floor: BestAvailFloor,
    /// `mb_optimize_scan` mount option.
    pub mb_optimize_scan: OptimizeScan,
    /// `mb_c1_threshold` (Lustre's LU-12103, percent of the volume; 0 = off,
    /// Lustre's default is 25): with less free space than this, a request
    /// skips CR_POWER2_ALIGNED and starts at CR_GOAL_LEN_FAST.
    pub mb_c1_threshold: u32,
    /// `mb_c2_threshold` (percent; Lustre 15): below it, start at
    /// CR_GOAL_LEN_SLOW.
    pub mb_c2_threshold: u32,
    /// `mb_c3_threshold` (percent; Lustre 5): below it, start at CR_ANY_FREE.
    pub mb_c3_threshold: u32,
    /// CR_BEST_AVAIL_LEN when `mb_optimize_scan` is off (not a kernel knob).
    pub linear_best_avail: LinearBestAvail,
    /// `s_stripe`: the RAID stripe in blocks (the `stripe=` mount option, or
    /// mkfs's `-E stripe_width`/`stride`), 0 for none. A goal of exactly
    /// one stripe is taken only at a stripe-aligned block, the fast passes
    /// try stripe-aligned runs first when the goal is a multiple of it, and
    /// CR_BEST_AVAIL_LEN trims to multiples of it. Alignment counts from
    /// the allocator's block 0.
    pub stripe: u32,
    /// How the cheap passes choose groups (not a kernel knob: which one a
    /// kernel uses depends on its version).
    pub order_lists: OrderLists,
    /// Free runs shorter than the goal in the cheap passes (not a kernel
    /// knob: which one a kernel uses depends on its version).
    pub short_runs: ShortRuns,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            mb_stats: false,
            mb_max_to_scan: 200,
            mb_min_to_scan: 10,
            mb_order2_req: 2,
            mb_stream_req: 16,
            mb_group_prealloc: 512,
            mb_max_linear_groups: 0,
            mb_best_avail_max_trim_order: 3,
            mb_best_avail_floor: BestAvailFloor::Request,
            mb_optimize_scan: OptimizeScan::Auto,
            mb_c1_threshold: 0,
            mb_c2_threshold: 0,
            mb_c3_threshold: 0,
            linear_best_avail: LinearBestAvail::Skip,
            stripe: 0,
            order_lists: OrderLists::ByGroup,
            short_runs: ShortRuns::Skip,
        }
    }
}

impl Tunables {
    /// Defaults with statistics on (what the lab and the benchmarks use).
    pub fn with_stats() -> Self {
        Tunables { mb_stats: true, ..Tunables::default() }
    }

    /// ext4's own behaviour wherever the engine's defaults differ (the
    /// kernel profile's tunables).
    pub fn kernel() -> Self {
        Tunables { linear_best_avail: LinearBestAvail::Repeat, ..Tunables::default() }
    }

    /// These tunables with Lustre's pass-skipping thresholds (25%, 15%, 5%).
    pub fn with_lustre_thresholds(self) -> Self {
        Tunables { mb_c1_threshold: 25, mb_c2_threshold: 15, mb_c3_threshold: 5, ..self }
    }

    /// Check every knob against the bounds the kernel enforces.
    pub fn validate(&self, blocks_per_group: u32) -> Result<()> {
        if self.mb_group_prealloc > blocks_per_group {
            return Err(Error::InvalidTunable {
                name: "mb_group_prealloc",
                value: self.mb_group_prealloc.into(),
                reason: "larger than a group",
            });
        }
        if self.mb_best_avail_max_trim_order > i32::MAX as u32 {
            return Err(Error::InvalidTunable {
                name: "mb_best_avail_max_trim_order",
                value: self.mb_best_avail_max_trim_order.into(),
                reason: "must fit a positive int",
            });
        }
        for (name, v) in [
            ("mb_c1_threshold", self.mb_c1_threshold),
            ("mb_c2_threshold", self.mb_c2_threshold),
            ("mb_c3_threshold", self.mb_c3_threshold),
        ] {
            if v > 100 {
                return Err(Error::InvalidTunable { name, value: v.into(), reason: "a percentage" });
            }
        }
        if self.stripe > blocks_per_group {
            return Err(Error::InvalidTunable {
                name: "stripe",
                value: self.stripe.into(),
                reason: "larger than a group",
            });
        }
        if self.mb_max_to_scan == 0 {
            return Err(Error::InvalidTunable { name: "mb_max_to_scan", value: 0, reason: "must be at least 1" });
        }
        Ok(())
    }
}

/// Tunables in atomics: snapshot per request, store from any thread.
pub(crate) struct AtomicTunables {
    fields: [AtomicU32; 17],
}

impl AtomicTunables {
    pub(crate) fn new(t: Tunables) -> Self {
        let a = AtomicTunables { fields: Default::default() };
        a.store(t);
        a
    }

    pub(crate) fn store(&self, t: Tunables) {
        let scan = match t.mb_optimize_scan {
            OptimizeScan::Auto => 0,
            OptimizeScan::On => 1,
            OptimizeScan::Off => 2,
        };
        let v = [
            t.mb_stats as u32,
            t.mb_max_to_scan,
            t.mb_min_to_scan,
            t.mb_order2_req,
            t.mb_stream_req,
            t.mb_group_prealloc,
            t.mb_max_linear_groups,
            t.mb_best_avail_max_trim_order,
            scan,
            t.mb_c1_threshold,
            t.mb_c2_threshold,
            t.mb_c3_threshold,
            match t.mb_best_avail_floor {
                BestAvailFloor::Request => 0,
                BestAvailFloor::Minimum => 1,
            },
            match t.linear_best_avail {
                LinearBestAvail::Skip => 0,
                LinearBestAvail::Repeat => 1,
            },
            t.stripe,
            match t.order_lists {
                OrderLists::ByGroup => 0,
                OrderLists::Linked => 1,
            },
            match t.short_runs {
                ShortRuns::Skip => 0,
                ShortRuns::Measure => 1,
            },
        ];
        for (f, v) in self.fields.iter().zip(v) {
            f.store(v, Ordering::Relaxed);
        }
    }

    /// `mb_stats` alone: one load, for paths too hot for [`Self::load`].
    pub(crate) fn stats_on(&self) -> bool {
        self.fields[0].load(Ordering::Relaxed) != 0
    }

    pub(crate) fn load(&self) -> Tunables {
        let f = |i: usize| self.fields[i].load(Ordering::Relaxed);
        Tunables {
            mb_stats: f(0) != 0,
            mb_max_to_scan: f(1),
            mb_min_to_scan: f(2),
            mb_order2_req: f(3),
            mb_stream_req: f(4),
            mb_group_prealloc: f(5),
            mb_max_linear_groups: f(6),
            mb_best_avail_max_trim_order: f(7),
            mb_optimize_scan: match f(8) {
                1 => OptimizeScan::On,
                2 => OptimizeScan::Off,
                _ => OptimizeScan::Auto,
            },
            mb_c1_threshold: f(9),
            mb_c2_threshold: f(10),
            mb_c3_threshold: f(11),
            mb_best_avail_floor: if f(12) == 1 { BestAvailFloor::Minimum } else { BestAvailFloor::Request },
            linear_best_avail: if f(13) == 1 { LinearBestAvail::Repeat } else { LinearBestAvail::Skip },
            stripe: f(14),
            order_lists: if f(15) == 1 { OrderLists::Linked } else { OrderLists::ByGroup },
            short_runs: if f(16) == 1 { ShortRuns::Measure } else { ShortRuns::Skip },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_validates() {
        let t = Tunables { mb_optimize_scan: OptimizeScan::Off, mb_max_to_scan: 7, ..Tunables::with_stats() };
        assert_eq!(AtomicTunables::new(t).load(), t);
        assert!(Tunables { mb_group_prealloc: 40000, ..t }.validate(32768).is_err());
        assert!(Tunables { mb_max_to_scan: 0, ..t }.validate(32768).is_err());
        assert!(Tunables { mb_c2_threshold: 101, ..t }.validate(32768).is_err());
        assert!(Tunables { stripe: 40000, ..t }.validate(32768).is_err());
        let striped = Tunables { stripe: 64, order_lists: OrderLists::Linked, short_runs: ShortRuns::Measure, ..t };
        assert_eq!(AtomicTunables::new(striped).load(), striped);
        let l = Tunables { mb_best_avail_floor: BestAvailFloor::Minimum, ..t.with_lustre_thresholds() };
        assert_eq!(AtomicTunables::new(l).load(), l);
        assert!(t.validate(32768).is_ok());
    }
}
