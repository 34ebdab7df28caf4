//! The table of groups: one lock and one lock-free summary per group, built
//! lazily so that a volume of 2^20 groups costs almost nothing until used.
//!
//! Groups live in chunks of [`CHUNK`] slots, allocated the first time any of
//! their groups is touched. A group that was never touched has no bitmap at
//! all (the kernel's BLOCK_UNINIT): its state is one of two shared templates
//! (a full group, and the possibly shorter last group) with the reserved
//! prefix in use. Its buddy is copied from the template the first time a pass
//! needs to look inside it.
//!
//! Loading the same bitmap into many groups ([`crate::Allocator::load_groups_alike`])
//! gives them one more shared template instead of a buddy each, so an aged
//! volume of hundreds of thousands of groups costs the groups a run
//! touches, not all of them.

use crate::buddy::{Buddy, GroupInfo};
use crate::criteria::GroupSummary;
use crate::geometry::Geometry;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicI8, AtomicU32, AtomicU8, Ordering};
use std::sync::OnceLock;

/// Shared templates a volume may hold besides its two built-in ones.
pub const SHARED_TEMPLATES: usize = 15;

/// Groups per lazily allocated chunk.
pub const CHUNK: u32 = 1024;

/// One group: its lock (guarding its buddy, `None` while untouched) and the
/// summary copied out of the buddy on every change, for lock-free readers.
pub(crate) struct GroupSlot {
    pub(crate) lock: Mutex<Option<Box<Buddy>>>,
    free: AtomicU32,
    fragments: AtomicU32,
    largest: AtomicI8,
    avg: AtomicI8,
}

impl GroupSlot {
    fn new(info: &GroupInfo) -> GroupSlot {
        let s = GroupSlot {
            lock: Mutex::new(None),
            free: AtomicU32::new(0),
            fragments: AtomicU32::new(0),
            largest: AtomicI8::new(-1),
            avg: AtomicI8::new(-1),
        };
        s.publish(info);
        s
    }

    /// Copy a changed buddy's summary out (called with the group lock held).
    pub(crate) fn publish(&self, info: &GroupInfo) {
        self.free.store(info.free, Ordering::Relaxed);
        self.fragments.store(info.fragments, Ordering::Relaxed);
        self.largest.store(info.largest_free_order, Ordering::Relaxed);
        self.avg.store(info.avg_fragment_order, Ordering::Relaxed);
    }

    pub(crate) fn summary(&self) -> GroupSummary {
        GroupSummary {
            free: self.free.load(Ordering::Relaxed),
            fragments: self.fragments.load(Ordering::Relaxed),
            largest_free_order: self.largest.load(Ordering::Relaxed),
            avg_fragment_order: self.avg.load(Ordering::Relaxed),
        }
    }
}

pub(crate) fn summary_of(info: &GroupInfo) -> GroupSummary {
    GroupSummary {
        free: info.free,
        fragments: info.fragments,
        largest_free_order: info.largest_free_order,
        avg_fragment_order: info.avg_fragment_order,
    }
}

pub(crate) struct GroupTable {
    geo: Geometry,
    chunks: Box<[OnceLock<Box<[GroupSlot]>>]>,
    full: Buddy,
    last: Buddy,
    /// Templates loaded alike into many groups, in the order registered.
    shared: [OnceLock<Box<Buddy>>; SHARED_TEMPLATES],
    /// Per group: 0 for the built-in template, k for `shared[k - 1]`;
    /// made when the first shared template is.
    template_of: OnceLock<Box<[AtomicU8]>>,
}

impl GroupTable {
    pub(crate) fn new(geo: Geometry) -> GroupTable {
        let template = |len: u32| {
            let mut b = Buddy::new_free(len, geo.max_order(), geo.num_orders());
            if geo.reserved_per_group() > 0 {
                b.mark_used(0, geo.reserved_per_group());
            }
            b
        };
        let nchunks = geo.groups().div_ceil(CHUNK) as usize;
        GroupTable {
            geo,
            chunks: (0..nchunks).map(|_| OnceLock::new()).collect(),
            full: template(geo.blocks_per_group()),
            last: template(geo.group_len(geo.groups() - 1)),
            shared: Default::default(),
            template_of: OnceLock::new(),
        }
    }

    /// The template state of a never-touched group `g`.
    pub(crate) fn template(&self, g: u32) -> &Buddy {
        if let Some(ids) = self.template_of.get() {
            let k = ids[g as usize].load(Ordering::Acquire) as usize;
            if k > 0 {
                return self.shared[k - 1].get().expect("a registered template");
            }
        }
        if g + 1 == self.geo.groups() {
            &self.last
        } else {
            &self.full
        }
    }

    /// Register `b` as a shared template; its number, or `None` when every
    /// slot is taken. Callers register under one lock (`Allocator::load_groups_alike`).
    pub(crate) fn add_template(&self, b: Buddy) -> Option<u8> {
        let k = self.shared.iter().position(|s| s.get().is_none())?;
        self.shared[k].set(Box::new(b)).ok()?;
        self.template_of.get_or_init(|| (0..self.geo.groups()).map(|_| AtomicU8::new(0)).collect());
        Some(k as u8 + 1)
    }

    /// Make template `k` group `g`'s (called with `g`'s lock held and its
    /// buddy not built).
    pub(crate) fn use_template(&self, g: u32, k: u8) {
        self.template_of.get().expect("registered first")[g as usize].store(k, Ordering::Release);
    }

    /// The slot of group `g`, allocating its chunk on first use.
    pub(crate) fn slot(&self, g: u32) -> &GroupSlot {
        let c = g / CHUNK;
        let chunk = self.chunks[c as usize].get_or_init(|| {
            let first = c * CHUNK;
            let end = (first + CHUNK).min(self.geo.groups());
            (first..end).map(|g| GroupSlot::new(self.template(g).info())).collect()
        });
        &chunk[(g % CHUNK) as usize]
    }

    /// The summary of `g`, without its lock and without allocating.
    pub(crate) fn summary(&self, g: u32) -> GroupSummary {
        match self.chunks[(g / CHUNK) as usize].get() {
            Some(chunk) => chunk[(g % CHUNK) as usize].summary(),
            None => summary_of(self.template(g).info()),
        }
    }

    /// Whether `g`'s chunk exists (otherwise `g` is untouched).
    pub(crate) fn is_materialized_chunk(&self, g: u32) -> bool {
        self.chunks[(g / CHUNK) as usize].get().is_some()
    }
}
