//! Which groups' buddies ext4 has built since it mounted the volume.
//!
//! The engine keeps every group's buddy ready. ext4 builds a group's buddy
//! the first time something needs it (`NEED_INIT` until then), and a group
//! whose buddy is not built is in none of the order indexes. The cheap
//! passes, which are meant to find good runs without I/O, skip such a group
//! rather than read its bitmap, unless it is the first group of a flex
//! group (metadata goes there) or `BLOCK_UNINIT` (its bitmap is computed,
//! not read). So right after a mount ext4 chooses among fewer groups than
//! the engine would, and replaying a kernel trace from a fresh mount needs
//! the same state.
//!
//! [`Allocator::unload_buddies`] switches this bookkeeping on. From then
//! on a group counts as built once the allocator looks inside it for any
//! reason (the goal probe, a pass that initialises it, a free or claim), or
//! when [`Allocator::load_buddy`] says the kernel built it (its background
//! bitmap prefetch, or reading `mb_groups`). Building one group builds
//! every group whose bitmap and buddy share its 4 KiB page of ext4's buddy
//! cache: two groups with 1 KiB blocks, one otherwise.

use crate::allocator::Allocator;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU8, Ordering};

/// The page size of ext4's buddy cache (the host's page).
const PAGE_SIZE: u32 = 4096;

const LOADED: u8 = 1;
const BLOCK_UNINIT: u8 = 2;

/// Per group: built, and `BLOCK_UNINIT` (bitmap never written).
pub(crate) struct BuddyLoads {
    state: Box<[AtomicU8]>,
    groups_per_page: u32,
}

impl BuddyLoads {
    fn new(groups: u32, block_size: u32) -> BuddyLoads {
        // A page holds each group's bitmap block and buddy block.
        let groups_per_page = (PAGE_SIZE / block_size / 2).max(1);
        BuddyLoads { state: (0..groups).map(|_| AtomicU8::new(0)).collect(), groups_per_page }
    }

    pub(crate) fn is_loaded(&self, g: u32) -> bool {
        self.state[g as usize].load(Ordering::Relaxed) & LOADED != 0
    }

    pub(crate) fn is_block_uninit(&self, g: u32) -> bool {
        self.state[g as usize].load(Ordering::Relaxed) & BLOCK_UNINIT != 0
    }

    /// Build `g`'s buddy and every buddy in its page; `newly` hears of
    /// each one not built before.
    pub(crate) fn load(&self, g: u32, mut newly: impl FnMut(u32)) {
        let first = g - g % self.groups_per_page;
        let end = (first + self.groups_per_page).min(self.state.len() as u32);
        for x in first..end {
            if self.state[x as usize].fetch_or(LOADED, Ordering::Relaxed) & LOADED == 0 {
                newly(x);
            }
        }
    }

    /// A block of `g` was allocated: its bitmap is real from now on.
    pub(crate) fn written(&self, g: u32) {
        self.state[g as usize].fetch_and(!BLOCK_UNINIT, Ordering::Relaxed);
    }
}

impl Allocator {
    /// Model a freshly mounted ext4: from now on no group's buddy counts as
    /// built until the allocator looks inside it or [`Allocator::load_buddy`]
    /// says so, and the cheap passes skip unbuilt groups as ext4's do.
    /// `block_uninit` names the groups whose descriptors carry
    /// `BLOCK_UNINIT` (with group-descriptor checksums on). Calling it again
    /// does nothing: the state stays as it has become.
    ///
    /// ```
    /// use mballoc::{Allocator, AllocRequest, Geometry};
    /// let a = Allocator::new(Geometry::new(4096, 8 * 32768)?)?;
    /// a.unload_buddies(&[]);
    /// assert!(!a.is_buddy_loaded(5));
    /// // The goal's group is built to probe it.
    /// a.allocate(&AllocRequest::new(8).try_goal(5 * 32768 + 100))?;
    /// assert!(a.is_buddy_loaded(5));
    /// # Ok::<(), mballoc::Error>(())
    /// ```
    pub fn unload_buddies(&self, block_uninit: &[u32]) {
        let n = self.geo.groups();
        let loads = self.loads.get_or_init(|| BuddyLoads::new(n, self.geo.block_size()));
        for &g in block_uninit.iter().filter(|&&g| g < n) {
            loads.state[g as usize].fetch_or(BLOCK_UNINIT, Ordering::Relaxed);
        }
        self.restart_lists();
    }

    /// Record that ext4 built group `g`'s buddy (and its page's).
    /// Without [`Allocator::unload_buddies`] every buddy is built and this
    /// does nothing.
    pub fn load_buddy(&self, g: u32) -> Result<()> {
        if g >= self.geo.groups() {
            return Err(Error::GroupOutOfRange { group: g, groups: self.geo.groups() });
        }
        if let Some(l) = self.loads.get() {
            l.load(g, |x| self.joined(x));
        }
        Ok(())
    }

    /// Whether group `g`'s buddy counts as built (always, unless
    /// [`Allocator::unload_buddies`] was called).
    /// ext4 indexes only built groups, so the passes' index walks pass
    /// over the others.
    pub fn is_buddy_loaded(&self, g: u32) -> bool {
        self.loads.get().is_none_or(|l| g < self.geo.groups() && l.is_loaded(g))
    }

    /// `ext4_mb_good_group_nolock`'s rule for a group not built yet: at
    /// the cheap passes skip it unless it is the first group of a flex
    /// group or `BLOCK_UNINIT`; otherwise build it now. True to go on.
    pub(crate) fn may_build(&self, g: u32, cheap: bool) -> bool {
        let Some(l) = self.loads.get() else { return true };
        if l.is_loaded(g) {
            return true;
        }
        let flex_first = self.flex_groups > 1 && g.is_multiple_of(self.flex_groups);
        if cheap && !flex_first && !l.is_block_uninit(g) {
            return false;
        }
        l.load(g, |x| self.joined(x));
        true
    }

    /// Group `g`'s buddy was just built: it joins the order lists' tails
    /// (when they are kept).
    pub(crate) fn joined(&self, g: u32) {
        if self.lists.is_on() {
            self.lists.built(g, crate::allocator::orders_of(&self.groups.summary(g)));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{AllocRequest, Allocator, Criterion, FoundBy, Geometry, OptimizeScan};

    fn volume(block_size: u32, groups: u64) -> Allocator {
        let bpg = u64::from(block_size) * 8;
        Allocator::new(Geometry::new(block_size, groups * bpg).unwrap()).unwrap()
    }

    #[test]
    fn cheap_passes_skip_unbuilt_groups_and_slow_ones_build_them() {
        let a = volume(4096, 64);
        a.unload_buddies(&[]);
        let got = a.allocate(&AllocRequest::new(8).goal(20 * 32768)).unwrap();
        // Nothing is indexed: the first linear pass builds the start group.
        assert_eq!(a.geometry().group_of(got.extent.start), 20);
        assert_eq!(got.found_by, FoundBy::Pass(Criterion::GoalLenSlow));
        assert!(a.is_buddy_loaded(20));
        assert!(!a.is_buddy_loaded(21));
        // Now group 20 is indexed and the cheap pass finds it.
        let again = a.allocate(&AllocRequest::new(8).goal(3 * 32768)).unwrap();
        assert_eq!(a.geometry().group_of(again.extent.start), 20);
        assert_eq!(again.found_by, FoundBy::Pass(Criterion::PowerOf2Aligned));
    }

    #[test]
    fn linear_cheap_passes_build_block_uninit_groups() {
        let a = volume(4096, 64);
        let mut t = a.tunables();
        t.mb_optimize_scan = OptimizeScan::Off;
        a.set_tunables(t).unwrap();
        a.unload_buddies(&[7]);
        let got = a.allocate(&AllocRequest::new(8).goal(5 * 32768)).unwrap();
        assert_eq!(a.geometry().group_of(got.extent.start), 7);
        assert_eq!(got.found_by, FoundBy::Pass(Criterion::PowerOf2Aligned));
        assert!(!a.is_buddy_loaded(5) && !a.is_buddy_loaded(6));
    }

    #[test]
    fn a_page_of_1k_block_groups_builds_together() {
        let a = volume(1024, 16);
        assert!(a.is_buddy_loaded(4), "every buddy is built until told otherwise");
        a.unload_buddies(&[]);
        a.load_buddy(4).unwrap();
        assert!(a.is_buddy_loaded(4) && a.is_buddy_loaded(5) && !a.is_buddy_loaded(6));
        assert!(a.load_buddy(16).is_err());
        // Freeing inside a group builds it, as ext4 loads the buddy to free.
        a.claim(9 * 8192 + 10, 4).unwrap();
        assert!(a.is_buddy_loaded(8) && a.is_buddy_loaded(9));
    }
}
