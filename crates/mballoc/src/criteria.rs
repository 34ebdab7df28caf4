//! The five allocation passes ("criteria") and their per-group acceptance
//! tests, in decreasing strictness.

use crate::buddy::fragment_size_bucket;

/// One pass of the regular allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Criterion {
    /// cr0: a group whose largest free chunk is at least the (power-of-two)
    /// goal length; the buddy hands out an aligned chunk directly.
    PowerOf2Aligned = 0,
    /// cr1: a group whose average free fragment is at least the goal length.
    GoalLenFast = 1,
    /// cr1.5: like cr1 with the goal trimmed by up to
    /// `mb_best_avail_max_trim_order` orders (never below the minimum).
    BestAvailLen = 2,
    /// cr2: any group with at least the goal length free, scanned linearly.
    GoalLenSlow = 3,
    /// cr3: any group with any free block; waits for busy groups.
    AnyFree = 4,
}

/// Number of passes.
pub const NUM_CRITERIA: usize = 5;

impl Criterion {
    /// All passes in order.
    pub const ALL: [Criterion; NUM_CRITERIA] = [
        Criterion::PowerOf2Aligned,
        Criterion::GoalLenFast,
        Criterion::BestAvailLen,
        Criterion::GoalLenSlow,
        Criterion::AnyFree,
    ];

    /// Position in [`Criterion::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The kernel's symbolic name (`CR_POWER2_ALIGNED`, …).
    pub fn kernel_name(self) -> &'static str {
        match self {
            Criterion::PowerOf2Aligned => "CR_POWER2_ALIGNED",
            Criterion::GoalLenFast => "CR_GOAL_LEN_FAST",
            Criterion::BestAvailLen => "CR_BEST_AVAIL_LEN",
            Criterion::GoalLenSlow => "CR_GOAL_LEN_SLOW",
            Criterion::AnyFree => "CR_ANY_FREE",
        }
    }

    /// The section name in `mb_stats` (`cr_p2_aligned_stats` without `_stats`).
    pub fn stats_name(self) -> &'static str {
        match self {
            Criterion::PowerOf2Aligned => "cr_p2_aligned",
            Criterion::GoalLenFast => "cr_goal_fast",
            Criterion::BestAvailLen => "cr_best_avail",
            Criterion::GoalLenSlow => "cr_goal_slow",
            Criterion::AnyFree => "cr_any_free",
        }
    }

    /// The next pass, if any.
    pub fn next(self) -> Option<Criterion> {
        Criterion::ALL.get(self.index() + 1).copied()
    }

    /// The cheap passes skip busy groups and fragments that cannot satisfy
    /// the goal; the expensive ones (cr2, cr3) look at everything.
    pub fn is_cheap(self) -> bool {
        self < Criterion::GoalLenSlow
    }
}

/// What a pass needs to know about a group, readable without its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSummary {
    /// Free blocks.
    pub free: u32,
    /// Free runs.
    pub fragments: u32,
    /// Order of the largest free chunk, −1 when full.
    pub largest_free_order: i8,
    /// Average-fragment bucket, −1 when full.
    pub avg_fragment_order: i8,
}

/// The acceptance test of `cr` for a group (`ext4_mb_good_group`), given the
/// goal length, the power-of-two order of the goal (0 when not a power of two
/// handled by the buddy search) and the minimum acceptable length.
pub fn good_group(cr: Criterion, s: &GroupSummary, goal_len: u32, two_order: u32, min_len: u32) -> bool {
    if s.free == 0 || s.fragments == 0 {
        return false;
    }
    match cr {
        Criterion::PowerOf2Aligned => {
            s.free >= goal_len && s.largest_free_order >= 0 && s.largest_free_order as u32 >= two_order
        }
        Criterion::GoalLenFast | Criterion::BestAvailLen => s.free >= goal_len && s.free / s.fragments >= goal_len,
        Criterion::GoalLenSlow => s.free >= goal_len,
        Criterion::AnyFree => s.free >= min_len,
    }
}

/// The avg-fragment bucket a request of `len` blocks looks in.
pub fn request_bucket(len: u32, num_orders: usize) -> usize {
    fragment_size_bucket(len, num_orders) as usize
}
