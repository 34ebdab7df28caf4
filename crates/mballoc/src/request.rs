//! What a caller asks for and what it gets back: [`AllocRequest`] (length,
//! minimum, goal and its [`GoalPolicy`], data or metadata, stream key) and
//! [`Allocation`] (the [`Extent`], the step that found it, what it cost).
//!
//! A request is checked once, before any state is touched
//! ([`AllocRequest::validate`]); everything after that may assume a sane
//! request.

use crate::criteria::Criterion;
use crate::error::{Error, Result};
use crate::geometry::Geometry;

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
#[non_exhaustive]
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
#[non_exhaustive]
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
    /// `min_len` it is not a floor, and it may exceed `len`: a normalization
    /// window shorter than the request asks for the window, and the rest
    /// comes in another request. Defaults to `min_len`, else `len`.
    pub original_len: Option<u32>,
    /// The kernel's `ac_orig_goal_len`: the length CR_BEST_AVAIL_LEN
    /// restores the goal to when it gives up, and the length
    /// `len_goal_hits` counts results of. For a normalized stream request
    /// it is the window (`len`); for a locality-group request ext4 leaves
    /// it at the original request, so a group request that falls past
    /// CR_BEST_AVAIL_LEN looks for its own length only. Default `len`.
    pub orig_goal_len: Option<u32>,
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
            orig_goal_len: None,
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
    /// Set the kernel's `ac_orig_goal_len` (see
    /// [`AllocRequest::orig_goal_len`]).
    pub fn orig_goal_len(mut self, len: u32) -> Self {
        self.orig_goal_len = Some(len);
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
    /// By the allocator's [`crate::Policy::choose`].
    Policy,
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

impl AllocRequest {
    /// Refuse a request no volume of this geometry could serve, before
    /// any state is touched.
    pub(crate) fn validate(&self, geo: &Geometry) -> Result<()> {
        if self.len == 0 || self.min_len == Some(0) || self.original_len == Some(0) {
            return Err(Error::ZeroLength);
        }
        if self.orig_goal_len == Some(0) {
            return Err(Error::ZeroLength);
        }
        for m in [self.min_len, self.orig_goal_len].into_iter().flatten() {
            if m > self.len {
                return Err(Error::MinExceedsLen { min_len: m, len: self.len });
            }
        }
        if self.len > geo.blocks_per_group() {
            return Err(Error::RequestTooLarge { len: self.len.into(), blocks_per_group: geo.blocks_per_group() });
        }
        match self.goal {
            Some(goal) if goal >= geo.total_blocks() => {
                Err(Error::GoalOutOfRange { goal, total_blocks: geo.total_blocks() })
            }
            None if self.goal_policy != GoalPolicy::Hint => {
                Err(Error::InvalidRequest("goal policy needs a goal block"))
            }
            _ => Ok(()),
        }
    }
}
