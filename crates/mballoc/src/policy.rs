//! Allocation policies: the decisions a researcher changes, as one trait
//! that lives outside the search code.
//!
//! ext4's allocator is a fixed sequence of decisions. A [`Policy`] may
//! replace any of them; each method's default is the kernel's, so the
//! built-in [`KernelPolicy`] is the trait with nothing overridden, and a new
//! policy overrides only what it studies:
//!
//! | decision | method | who asks |
//! |---|---|---|
//! | the goal block of a file's request | [`Policy::goal`] | the file layer |
//! | how far a request grows into a preallocation window | [`Policy::window`] | the file layer |
//! | which passes run | [`Policy::passes`] | the allocator |
//! | when measuring stops and the best so far is taken | [`Policy::max_to_scan`] | the allocator |
//! | which group and run serve the request | [`Policy::choose`] | the allocator |
//!
//! [`Policy::choose`] runs after the goal probe and before the passes. It
//! sees the volume through [`Groups`]: every group's summary (free blocks,
//! fragments, largest free order) without a lock, and a group's free runs
//! under its lock. What it reads is counted as the passes' reading is
//! (extents and groups scanned), so `mb_stats` compares policies fairly. Its
//! pick is checked under the group's lock and taken whole, or, if another
//! thread took part of it meanwhile, the passes serve the request.
//!
//! ```
//! use mballoc::{Allocator, AllocRequest, FoundBy, Geometry, Groups, Pick, Policy, RequestInfo};
//! use std::ops::ControlFlow;
//!
//! /// First fit: the first free run long enough, from group 0 on.
//! #[derive(Debug)]
//! struct FirstFit;
//!
//! impl Policy for FirstFit {
//!     fn name(&self) -> &str {
//!         "first-fit"
//!     }
//!     fn choose(&self, req: &RequestInfo, groups: &mut Groups<'_>) -> Option<Pick> {
//!         for g in 0..groups.count() {
//!             if groups.summary(g).free < req.len {
//!                 continue;
//!             }
//!             let mut pick = None;
//!             groups.free_runs(g, |start, len| {
//!                 if len >= req.len {
//!                     pick = Some(Pick { group: g, start, len: req.len });
//!                     return ControlFlow::Break(());
//!                 }
//!                 ControlFlow::Continue(())
//!             });
//!             if pick.is_some() {
//!                 return pick;
//!             }
//!         }
//!         None
//!     }
//! }
//!
//! let a = Allocator::builder(Geometry::new(4096, 1 << 18)?).policy(std::sync::Arc::new(FirstFit)).build()?;
//! let got = a.allocate(&AllocRequest::new(100))?;
//! assert_eq!(got.found_by, FoundBy::Policy);
//! assert_eq!(a.policy().name(), "first-fit");
//! # Ok::<(), mballoc::Error>(())
//! ```

use crate::allocator::Allocator;
use crate::criteria::{Criterion, GroupSummary};
use crate::geometry::Geometry;
use std::ops::ControlFlow;

/// What a policy is told about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestInfo {
    /// Blocks wanted (after the file layer's normalization).
    pub len: u32,
    /// The fewest blocks the caller accepts.
    pub min_len: u32,
    /// The goal block, if any.
    pub goal: Option<u64>,
    /// File data (not metadata: extent-tree blocks, directories).
    pub data: bool,
    /// One of a stream of appends (it has a stream key).
    pub stream: bool,
}

/// What the file layer knows when it picks a goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoalInfo {
    /// The logical block the request starts at.
    pub logical: u64,
    /// The first block of the file's home group (its inode's group).
    pub home: u64,
    /// Whether the default goal continues an extent of the file.
    pub continues: bool,
}

/// What the file layer knows when it sizes a preallocation window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowInfo {
    /// The logical block the request starts at.
    pub logical: u64,
    /// Blocks the caller asked for.
    pub len: u32,
    /// The file's size in blocks.
    pub file_blocks: u64,
}

/// A set of passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passes(u8);

impl Passes {
    /// Every pass (the kernel's).
    pub const ALL: Passes = Passes(0b1_1111);
    /// No pass: only the goal probe and [`Policy::choose`] serve requests.
    pub const NONE: Passes = Passes(0);

    /// With `c`.
    pub const fn with(self, c: Criterion) -> Passes {
        Passes(self.0 | 1 << c as u8)
    }

    /// Without `c`.
    pub const fn without(self, c: Criterion) -> Passes {
        Passes(self.0 & !(1 << c as u8))
    }

    /// Whether `c` runs.
    pub fn contains(self, c: Criterion) -> bool {
        self.0 & (1 << c as u8) != 0
    }

    /// The first pass at or after `c` that runs.
    pub(crate) fn at_or_after(self, c: Option<Criterion>) -> Option<Criterion> {
        let mut c = c?;
        loop {
            if self.contains(c) {
                return Some(c);
            }
            c = c.next()?;
        }
    }
}

/// A free run a policy chose: `len` blocks from offset `start` of group
/// `group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// The group.
    pub group: u32,
    /// The first block, as an offset in the group.
    pub start: u32,
    /// Blocks to take (at most the request's length, at least its minimum).
    pub len: u32,
}

/// The decisions of an allocation policy (see the module's doc). Every
/// method has the kernel's answer as its default.
pub trait Policy: Send + Sync + std::fmt::Debug {
    /// A short name for reports and settings (`engine.policy=NAME`).
    fn name(&self) -> &str;

    /// The goal block of a file's request; `default` is ext4's (continue
    /// the nearest extent of the file, else its home group's first block).
    fn goal(&self, default: u64, _info: &GoalInfo) -> u64 {
        default
    }

    /// The blocks a request grows into (its preallocation window);
    /// `default` is ext4's normalization. The file layer keeps the result
    /// within the room the file's neighbours leave.
    fn window(&self, default: u32, _info: &WindowInfo) -> u32 {
        default
    }

    /// The passes this request may run, in their fixed order.
    fn passes(&self, _req: &RequestInfo) -> Passes {
        Passes::ALL
    }

    /// Extents measured before the best so far is taken; `default` is
    /// `mb_max_to_scan`.
    fn max_to_scan(&self, default: u32, _req: &RequestInfo) -> u32 {
        default
    }

    /// Serve the request from a run of the policy's choosing before the
    /// passes run, or `None` to leave it to them.
    fn choose(&self, _req: &RequestInfo, _groups: &mut Groups<'_>) -> Option<Pick> {
        None
    }
}

/// ext4's decisions: [`Policy`] with every default.
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelPolicy;

impl Policy for KernelPolicy {
    fn name(&self) -> &str {
        "kernel"
    }
}

/// ext4's decisions as kernels before 6.4 made them: every default, and
/// no CR_BEST_AVAIL_LEN (the CR1.5 series, merged in 6.4, added it).
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelPolicyBeforeBestAvail;

impl Policy for KernelPolicyBeforeBestAvail {
    fn name(&self) -> &str {
        "kernel-before-6.4"
    }

    fn passes(&self, _req: &RequestInfo) -> Passes {
        Passes::ALL.without(Criterion::BestAvailLen)
    }
}

/// The volume as [`Policy::choose`] sees it; what it reads is counted in
/// the request's statistics.
pub struct Groups<'a> {
    alloc: &'a Allocator,
    pub(crate) extents_scanned: u32,
    pub(crate) groups_scanned: u32,
}

impl<'a> Groups<'a> {
    pub(crate) fn new(alloc: &'a Allocator) -> Groups<'a> {
        Groups { alloc, extents_scanned: 0, groups_scanned: 0 }
    }

    /// The volume's shape.
    pub fn geometry(&self) -> &Geometry {
        self.alloc.geometry()
    }

    /// Groups on the volume.
    pub fn count(&self) -> u32 {
        self.alloc.geo.groups()
    }

    /// Group `g`'s summary, read without its lock (it may change before a
    /// pick is taken; the pick is checked then).
    pub fn summary(&self, g: u32) -> GroupSummary {
        self.alloc.groups.summary(g)
    }

    /// Each free run of group `g` in order, as `(offset, len)`, under the
    /// group's lock, until `f` breaks. Each run counts as an extent scanned
    /// and the call as a group scanned.
    pub fn free_runs(&mut self, g: u32, mut f: impl FnMut(u32, u32) -> ControlFlow<()>) {
        if g >= self.count() {
            return;
        }
        self.groups_scanned += 1;
        let slot = self.alloc.groups.slot(g);
        let mut guard = slot.lock.lock();
        let buddy = self.alloc.materialize(&mut guard, g);
        let mut free = buddy.info().free;
        let mut i = buddy.info().first_free;
        while free > 0 {
            i = buddy.next_free(i);
            let j = buddy.next_used(i);
            self.extents_scanned += 1;
            free -= j - i;
            if f(i, j - i).is_break() {
                return;
            }
            i = j;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_sets_skip_what_they_leave_out() {
        let p = Passes::ALL.without(Criterion::BestAvailLen).without(Criterion::GoalLenFast);
        assert_eq!(p.at_or_after(Some(Criterion::GoalLenFast)), Some(Criterion::GoalLenSlow));
        assert_eq!(Passes::NONE.at_or_after(Some(Criterion::PowerOf2Aligned)), None);
        assert_eq!(
            Passes::NONE.with(Criterion::AnyFree).at_or_after(Some(Criterion::PowerOf2Aligned)),
            Some(Criterion::AnyFree)
        );
    }
}
