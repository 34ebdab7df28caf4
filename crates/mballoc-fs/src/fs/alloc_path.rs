//! The allocation path (`ext4_mb_new_blocks` and its callers): map a hole
//! through the file's preallocation, the CPU's locality group, or a
//! normalized window from the allocator.

use super::{cpu_slot, inc, FileNode, Fs, Inode, Normalize};
use crate::alloc_log::{AllocEvent, Purpose, ServedBy};
use crate::change_log::Change;
use crate::config::RequestSize;
use crate::config::StreamPlacement;
use crate::ext4_tree::Merge;
use crate::extent_map::ExtentState;
use crate::normalize::{placement, window_under, Cover, Neighbours, Placement, RequestShape};
use crate::prealloc::GroupPa;
use mballoc::{AllocRequest, Extent};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Mapping a range stopped before its end: blocks `[start, mapped_to)`
/// are mapped, the rest still promised.
pub(super) struct MapStopped {
    pub(super) mapped_to: u64,
    pub(super) error: crate::error::FsError,
}

/// The allocation path (`ext4_mb_new_blocks` and its callers).
impl Fs {
    /// Map the hole `[start, end)`, whose blocks were promised (by a delayed
    /// write or by the caller's claim), in as many extents as it takes. The
    /// promised blocks exist: in the allocator, in preallocations, in a
    /// window another thread is about to file, or in the running
    /// transaction's pending frees. Only when a commit that would release
    /// the pending frees cannot be made durable (the attached log failed)
    /// does mapping stop early, saying how far it got.
    ///
    /// `run` is the ext4 blocks being mapped, which go into the file's
    /// extent tree: the same range without bigalloc, and under it the
    /// kernel's run of blocks that these clusters hold
    /// (`fs/cluster_map.rs`).
    pub(super) fn map_range(
        &self,
        node: &FileNode,
        ino: &mut Inode,
        (start, end): (u64, u64),
        run: (u64, u64),
        state: ExtentState,
        normalize: Normalize,
    ) -> std::result::Result<(), MapStopped> {
        let bpg = self.alloc.geometry().blocks_per_group();
        let size = self.request_size_in_clusters(match state {
            ExtentState::Written => self.cfg.placement.writeback_request,
            ExtentState::Unwritten => self.cfg.placement.fallocate_request,
        });
        let mut l = start;
        // ext4's writeback maps a bounded piece at a time and asks again for
        // whatever of the piece the allocator did not give, before the next
        // piece; fallocate asks for as much of the rest as one request may.
        let mut piece_end = start;
        while l < end {
            if l >= piece_end || size == RequestSize::WholeRun || state == ExtentState::Unwritten {
                piece_end = l + u64::from(size.cap(end - l, bpg));
            }
            let len = (piece_end - l) as u32;
            // What ext4's caller asks for before mballoc cuts a request to
            // one group: the allocation log records that, as the kernel's
            // `ext4_request_blocks` does.
            let asked = if state == ExtentState::Unwritten { size.cap(end - l, u32::MAX) } else { len };
            let mut attempts = 0;
            let (physical, got) = loop {
                match self.allocate_one(node, ino, l, (len, asked), normalize) {
                    Some(x) => break x,
                    None => {
                        inc(&self.counters.local().reclaims, 1);
                        self.discard_preallocations();
                        if let Err(error) = self.try_commit() {
                            return Err(MapStopped { mapped_to: l, error });
                        }
                        if self.windows_in_flight() > 0 {
                            std::thread::yield_now();
                        } else {
                            attempts += 1;
                            assert!(
                                attempts <= 16,
                                "no blocks for a promised range at logical {l} of inode {}",
                                ino.id
                            );
                        }
                    }
                }
            };
            ino.map.insert(l, physical, got, state);
            // The run's blocks these clusters hold go into the tree.
            let cb = self.cluster_bits;
            let (first, last) = ((l << cb).max(run.0), ((l + u64::from(got)) << cb).min(run.1));
            let freed = if first < last {
                let at = (physical << cb) + (first - (l << cb));
                let (tree_state, merge) = self.tree_mapping(state);
                self.tree_map_blocks(ino, first, at, last - first, tree_state, merge)
            } else {
                Vec::new()
            };
            // Writeback's blocks hold no data on the device yet: the layer
            // that writes it records them written (`Fs::mark_written`).
            self.note(Change::Map { ino: ino.id, logical: l, physical, len: got, state: ExtentState::Unwritten });
            self.space.settle(u64::from(got));
            self.release_tree_blocks(freed);
            let short = u64::from(got) < u64::from(len) && size != RequestSize::WholeRun;
            l += u64::from(got);
            if short && state == ExtentState::Written {
                // ext4 maps next the rest of the folio the allocation
                // ended in, then starts a new piece at its end.
                let bs = self.block_size();
                if let Some(resume) = ino.folios.resume_after_short(l * bs) {
                    piece_end = piece_end.min(resume.div_ceil(bs).max(l));
                }
            }
        }
        Ok(())
    }

    /// The goal block for logical block `l`: continue the nearest mapped
    /// extent, else the start of the file's home group.
    pub(super) fn goal(&self, ino: &Inode, l: u64) -> u64 {
        let (default, continuation) = self.ext4_goal(ino, l);
        self.policy_goal(ino, l, continuation.map(|_| default))
    }

    /// ext4's goal for `l`, and whether it continues an extent.
    fn ext4_goal(&self, ino: &Inode, l: u64) -> (u64, Option<()>) {
        let total = self.alloc.geometry().total_blocks();
        let from_neighbour = if let Some(e) = ino.map.left_of(l) {
            e.physical.checked_add(l - e.logical)
        } else if let Some(e) = ino.map.right_of(l) {
            e.physical.checked_sub(e.logical - l)
        } else {
            None
        };
        match from_neighbour {
            Some(g) if g < total => (g, Some(())),
            _ => (self.alloc.geometry().group_first_block(ino.home_group), None),
        }
    }

    /// The policy's goal for logical block `l` given the block that
    /// continues the file there, if any (else the home group's first).
    pub(super) fn policy_goal(&self, ino: &Inode, l: u64, continuation: Option<u64>) -> u64 {
        let geo = self.alloc.geometry();
        let home = geo.group_first_block(ino.home_group);
        let default = continuation.unwrap_or(home);
        let info = mballoc::GoalInfo { logical: l, home, continues: continuation.is_some() };
        let chosen = self.alloc.policy().goal(default, &info);
        // A goal past the volume is no goal: ext4's own then.
        if chosen < geo.total_blocks() {
            chosen
        } else {
            default
        }
    }

    /// One allocation for logical block `l`, up to `len` blocks: from the
    /// file's preallocation, from the CPU's locality group, or from the
    /// allocator with a normalized window. `None` means the allocator had
    /// nothing. Requests served from a preallocation count in the
    /// allocator's statistics as ext4 counts them; every request goes to
    /// the allocation log when it records.
    pub(super) fn allocate_one(
        &self,
        node: &FileNode,
        ino: &Inode,
        l: u64,
        (len, asked): (u32, u32),
        normalize: Normalize,
    ) -> Option<(u64, u32)> {
        let got = self.allocate_inner(node, ino, l, len, normalize);
        if let Some((_, n, _)) = got {
            self.ext4_counts.blocks(-i64::from(n));
        }
        let goal = || self.goal(ino, l);
        if let Some((p, n, ServedBy::InodePreallocation | ServedBy::GroupPreallocation)) = got {
            self.alloc.note_preallocated_request(|| Some(goal()), Extent { start: p, len: n }, len);
        }
        self.alloc_log.push(|| AllocEvent {
            ino: ino.id,
            logical: l,
            len: asked,
            goal: goal(),
            purpose: Purpose::Data,
            result: got.map(|(p, n, _)| (p, n)),
            served_by: got.map_or(ServedBy::Failed, |g| g.2),
        });
        got.map(|(p, n, _)| (p, n))
    }

    fn allocate_inner(
        &self,
        node: &FileNode,
        ino: &Inode,
        l: u64,
        len: u32,
        normalize: Normalize,
    ) -> Option<(u64, u32, ServedBy)> {
        let (pa_bounds, len) = {
            let mut pas = node.pas.lock();
            if let Some((p, got)) = pas.take(l, len) {
                self.pa_free.local().fetch_sub(i64::from(got), Ordering::AcqRel);
                inc(&self.counters.local().inode_pa_hits, 1);
                return Some((p, got, ServedBy::InodePreallocation));
            }
            // Stop where the next window of the file begins: those blocks
            // must come from it.
            let bounds = pas.bounds_around(l);
            (bounds, bounds.1.map_or(len, |next| len.min((next - l) as u32)))
        };
        // Placement and the window are ext4's decisions, made in its blocks.
        let t = self.alloc.tunables();
        let ext4_shape = self.ext4_shape(ino, l, len);
        let place = placement(&self.cfg.placement.normalization, t.mb_stream_req, t.mb_group_prealloc, &ext4_shape);
        if normalize == Normalize::No
            && place != Placement::NoPrealloc
            && self.cfg.placement.stream_placement == StreamPlacement::PerFile
        {
            return self.allocate_appending(node, ino, l, len, place, pa_bounds.1);
        }
        let (ext4_goal, continuation) = self.ext4_goal(ino, l);
        let goal = self.policy_goal(ino, l, continuation.map(|_| ext4_goal));
        if place == Placement::LocalityGroup {
            return self.allocate_from_group(len, goal, t.mb_group_prealloc, normalize);
        }
        // A goal the policy moved is where the request goes: not the
        // stream's group, which would otherwise start the search.
        let moved = goal != ext4_goal;
        let stream = (place == Placement::Stream && !moved).then_some(ino.id);
        if place == Placement::Stream && normalize == Normalize::Yes {
            return self.allocate_window(node, ino, (l, len, &ext4_shape), pa_bounds, goal, stream);
        }
        let mut req = AllocRequest::new(len).goal(goal);
        if let Some(k) = stream {
            req = req.stream(k);
        }
        inc(&self.counters.local().alloc_requests, 1);
        self.alloc.allocate(&req).ok().map(|a| (a.extent.start, a.extent.len, ServedBy::Allocator(a.found_by)))
    }

    /// Count a window in flight until the guard drops.
    pub(super) fn track_window(&self) -> super::WindowInFlight<'_> {
        let slot = self.windows_in_flight.local();
        slot.fetch_add(1, Ordering::AcqRel);
        super::WindowInFlight(slot)
    }

    /// Windows in flight over every slot (a snapshot).
    pub(super) fn windows_in_flight(&self) -> u64 {
        self.windows_in_flight.iter().map(|c| c.load(Ordering::Acquire)).sum()
    }

    /// Whether a window of `len` blocks may be taken now: only where it
    /// eats into no block promised to others, unless under
    /// [`crate::config::LowSpace::Ext4`], where always, as ext4 checks
    /// nothing here (an allocation that then finds none gives every
    /// preallocation back and tries again).
    pub(super) fn may_preallocate(&self, len: u32) -> bool {
        matches!(self.cfg.storage.low_space, crate::config::LowSpace::Ext4 { .. })
            || self.alloc.free_blocks() >= self.space.reserved() + u64::from(len)
    }

    /// Small files: the CPU's locality group. Its lock covers the search
    /// and the insertion, never the allocator call between them: a thread
    /// preempted while holding it would put every other thread of its slot
    /// to sleep behind it. Two threads that miss at once may both allocate a
    /// window, as in the kernel; the trim returns the surplus.
    pub(super) fn allocate_from_group(
        &self,
        len: u32,
        goal: u64,
        group_prealloc: u32,
        normalize: Normalize,
    ) -> Option<(u64, u32, ServedBy)> {
        let lg = &self.lgs[cpu_slot() % self.lgs.len()];
        let hit = lg.lock().take(len, goal);
        if let Some((start, trimmed)) = hit {
            self.pa_free.local().fetch_sub(i64::from(len), Ordering::AcqRel);
            inc(&self.counters.local().group_pa_hits, 1);
            self.give_back(trimmed.iter().map(GroupPa::run));
            return Some((start, len, ServedBy::GroupPreallocation));
        }
        let window = group_prealloc.max(len);
        let want = if normalize == Normalize::Yes && self.may_preallocate(window) { window } else { len };
        let _flight = (want > len).then(|| self.track_window());
        inc(&self.counters.local().alloc_requests, 1);
        // ext4 leaves a group request's `ac_orig_goal_len` at the original
        // length (its normalization returns before setting it).
        let req = AllocRequest::new(want).original_len(len).orig_goal_len(len).goal(goal);
        let a = self.alloc.allocate(&req).ok()?;
        let how = ServedBy::Allocator(a.found_by);
        let got = a.extent.len.min(len);
        let surplus = a.extent.len - got;
        if surplus > 0 {
            self.prealloc(surplus.into(), a.extent.len.into());
            inc(&self.counters.local().group_pas_created, 1);
            let trimmed = lg.lock().add_and_trim(GroupPa { pstart: a.extent.start + u64::from(got), free: surplus });
            self.give_back(trimmed.iter().map(GroupPa::run));
        }
        Some((a.extent.start, got, how))
    }

    /// Streams: a normalized window, the surplus kept as the file's
    /// preallocation (`ext4_mb_new_inode_pa`). The request is `len`
    /// blocks at `l`, `ext4_shape` the same in ext4's blocks.
    pub(super) fn allocate_window(
        &self,
        node: &FileNode,
        ino: &Inode,
        (l, len, ext4_shape): (u64, u32, &RequestShape),
        (left_pa_end, right_pa_start): (Option<u64>, Option<u64>),
        goal: u64,
        stream: Option<u64>,
    ) -> Option<(u64, u32, ServedBy)> {
        let nb = Neighbours {
            left: ino.map.left_of(l).map(|e| (e.logical_end() - 1, e.physical + u64::from(e.len) - 1)),
            right: ino.map.right_of(l).map(|e| (e.logical, e.physical)),
            left_pa_end,
            right_pa_start,
        };
        // A whole dirty run in one request needs a window that covers it.
        let cover = if self.cfg.placement.writeback_request == RequestSize::WholeRun {
            Cover::Request
        } else {
            Cover::WindowOnly
        };
        // ext4 normalizes in blocks, and asks for the clusters they cover.
        let w = self.window_in_clusters(window_under(
            self.alloc.policy(),
            &self.cfg.placement.normalization,
            self.ext4_window_geometry(),
            ext4_shape,
            &self.ext4_neighbours(nb),
            cover,
        ));
        let own = len.min((w.logical + u64::from(w.len) - l) as u32);
        let (wl, wlen) = if self.may_preallocate(w.len) { (w.logical, w.len) } else { (l, own) };
        let _flight = (wlen > own).then(|| self.track_window());
        let mut req = AllocRequest::new(wlen).original_len(len);
        req = match w.merge_goal.filter(|_| wlen == w.len) {
            Some(m) => req.try_goal(m),
            None => req.goal(goal),
        };
        if let Some(k) = stream {
            req = req.stream(k);
        }
        inc(&self.counters.local().alloc_requests, 1);
        let a = self.alloc.allocate(&req).ok()?;
        let how = ServedBy::Allocator(a.found_by);
        let got = a.extent.len;
        // ext4_mb_use_best_found: a preallocation only when the extent
        // found is longer than the original request (`ac_o_ex.fe_len <
        // ac_b_ex.fe_len`); otherwise all of it is mapped at the request's
        // block, even past a window shorter than the request.
        if got <= len {
            return Some((a.extent.start, got, how));
        }
        // Place the preallocation inside the window so it covers `l`.
        let wend = wl + u64::from(wlen);
        let lstart = if got == wlen {
            wl
        } else if l >= wend - u64::from(got) {
            wend - u64::from(got)
        } else if l + u64::from(own) <= wl + u64::from(got) {
            wl
        } else {
            l
        };
        let mut pas = node.pas.lock();
        pas.insert(lstart, a.extent.start, got);
        self.prealloc(u64::from(got), u64::from(got));
        inc(&self.counters.local().inode_pas_created, 1);
        let (p, n) = pas.take(l, own).expect("a new preallocation covers its request");
        self.pa_free.local().fetch_sub(i64::from(n), Ordering::AcqRel);
        Some((p, n, how))
    }
}

/// Preallocated blocks: counted in, given back.
impl Fs {
    /// Give back every unused preallocation (files' and locality groups').
    pub fn discard_preallocations(&self) -> u64 {
        let _op = self.op();
        let mut n = 0;
        for lg in &self.lgs {
            let runs = lg.lock().drain();
            n += self.give_back(runs.iter().map(GroupPa::run));
        }
        let nodes: Vec<Arc<FileNode>> = self.files.entries().into_iter().map(|(_, n)| n).collect();
        for node in nodes {
            n += self.discard_inode_pas(&node);
        }
        n
    }

    /// Give back a file's unused preallocated blocks. Returns how many.
    pub(super) fn discard_inode_pas(&self, node: &FileNode) -> u64 {
        let runs = node.pas.lock().drain();
        self.give_back(runs)
    }

    /// Return unused preallocated runs `(start, len)` to the allocator.
    /// Returns how many blocks.
    pub(super) fn give_back(&self, runs: impl IntoIterator<Item = (u64, u64)>) -> u64 {
        let mut n = 0;
        for (p, len) in runs {
            self.alloc.free(p, len).unwrap_or_else(|e| panic!("discarding preallocated [{p}, +{len}): {e}"));
            n += len;
        }
        if n > 0 {
            self.pa_free.local().fetch_sub(n as i64, Ordering::AcqRel);
            inc(&self.counters.local().discarded, n);
            self.alloc.note_preallocation(0, n);
        }
        n
    }

    /// `held` blocks kept unused in a new preallocation of `size` blocks
    /// (mb_stats' `preallocated` counts the whole of it, as ext4 does, the
    /// part the request took at once included).
    pub(super) fn prealloc(&self, held: u64, size: u64) {
        self.pa_free.local().fetch_add(held as i64, Ordering::AcqRel);
        inc(&self.counters.local().preallocated, held);
        self.alloc.note_preallocation(size, 0);
    }
}

impl Fs {
    /// How newly mapped blocks go into ext4's tree: writeback's unwritten
    /// and unmerged until their I/O completes with dioread_nolock (the
    /// flush converts them after), initialized and merged without it;
    /// fallocate's unwritten and merged at once.
    pub(super) fn tree_mapping(&self, state: ExtentState) -> (ExtentState, Merge) {
        match (state, self.cfg.behaviour.dioread) {
            (ExtentState::Written, crate::config::DioRead::NoLock) => (ExtentState::Unwritten, Merge::BeforeIo),
            (ExtentState::Written, crate::config::DioRead::Locked { .. }) => (ExtentState::Written, Merge::Yes),
            (ExtentState::Unwritten, _) => (ExtentState::Unwritten, Merge::Yes),
        }
    }
}
