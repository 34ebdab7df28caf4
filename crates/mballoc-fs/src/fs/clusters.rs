//! ext4's bigalloc arithmetic.
//!
//! Under bigalloc ([`FsConfig::cluster_bits`](crate::FsConfig)) the
//! engine's blocks are ext4's clusters: files are mapped, reserved,
//! preallocated and freed in clusters, as ext4 allocates them, and a
//! file's block `k` lies in its cluster `k >> cluster_bits` at the same
//! offset. The kernel's request sizes fit that: writeback's 2,048-block
//! pieces, a piece that starts inside a cluster the file already holds,
//! and fallocate's 32,767-block requests all ask for the clusters
//! whole-cluster pieces would.
//!
//! What ext4 decides in blocks is decided here in blocks: whether a
//! request is a small file's (`mb_stream_req` blocks against the
//! request's end, `size == isize` against the size in blocks), how large
//! a window is and where it stops short of the file's mapped neighbours
//! (`ext4_mb_normalize_request` works in blocks and ends with
//! `fe_len = EXT4_NUM_B2C(size)`). And each file keeps which blocks of
//! its clusters it was given, which its extent tree maps and which are
//! unwritten, so that the tree (`cluster_map.rs`), FIEMAP
//! ([`Fs::ext4_extents`]) and frees follow ext4's blocks. Without
//! bigalloc each conversion is the identity and the sets stay empty.

use super::data::Removed;
use super::{Fs, Inode};
use crate::config::RequestSize;
use crate::error::Result;
use crate::ext4_tree::Merge;
use crate::extent_map::ExtentState;
use crate::extent_map::{ExtentMap, MappedExtent};
use crate::normalize::{Neighbours, RequestShape, Window, WindowGeometry};
use crate::ranges::RangeSet;
use crate::violation::Violation;
use crate::FileId;

/// A bigalloc file's blocks, in ext4 blocks: which it was given (written
/// or fallocated, not since cut), which its extent tree maps (the rest
/// wait for writeback), which of those are unwritten (a cluster may
/// hold both kinds) and which of those were written into since the last
/// writeback.
#[derive(Debug, Clone, Default)]
pub(super) struct Ext4Blocks {
    pub(super) given: RangeSet,
    pub(super) mapped: RangeSet,
    pub(super) unwritten: RangeSet,
    pub(super) dirty_unwritten: RangeSet,
}

impl Inode {
    /// The file's blocks; only an engine with clusters asks.
    pub(super) fn blocks(&self) -> &Ext4Blocks {
        self.ext4.as_deref().expect("a file of an engine with clusters keeps its blocks")
    }

    pub(super) fn blocks_mut(&mut self) -> &mut Ext4Blocks {
        self.ext4.as_deref_mut().expect("a file of an engine with clusters keeps its blocks")
    }
}

impl Fs {
    /// ext4 blocks in `n` of the engine's blocks.
    fn to_ext4_blocks(&self, n: u64) -> u64 {
        n << self.cluster_bits
    }

    /// A request of `len` blocks at logical `l` as ext4's placement and
    /// normalization see it: in ext4 blocks, the size rounded up to
    /// ext4 blocks (`isize`).
    pub(super) fn ext4_shape(&self, ino: &Inode, l: u64, len: u32) -> RequestShape {
        RequestShape {
            logical: self.to_ext4_blocks(l),
            len: self.to_ext4_blocks(u64::from(len)).min(u64::from(u32::MAX)) as u32,
            isize_blocks: ino.size.div_ceil(self.ext4_block_size()),
            open: ino.open > 0,
        }
    }

    /// The window's volume facts in ext4 blocks.
    pub(super) fn ext4_window_geometry(&self) -> WindowGeometry {
        let geo = self.alloc.geometry();
        WindowGeometry {
            block_bits: (self.block_bits - self.cluster_bits),
            blocks_per_group: self.to_ext4_blocks(u64::from(geo.blocks_per_group())).min(u64::from(u32::MAX)) as u32,
            total_blocks: self.to_ext4_blocks(geo.total_blocks()),
        }
    }

    /// A file's neighbours in ext4 blocks, a left extent taken to end
    /// with its last cluster's last block. That is ext4's `lleft` when
    /// the cluster is whole, as it is whenever writeback reaches a
    /// cluster after it; a left cluster the file holds only in part
    /// would start ext4's window inside it, which a window of clusters
    /// cannot.
    pub(super) fn ext4_neighbours(&self, nb: Neighbours) -> Neighbours {
        let last = |x: u64| self.to_ext4_blocks(x + 1) - 1;
        Neighbours {
            left: nb.left.map(|(l, p)| (last(l), last(p))),
            right: nb.right.map(|(l, p)| (self.to_ext4_blocks(l), self.to_ext4_blocks(p))),
            left_pa_end: nb.left_pa_end.map(|x| self.to_ext4_blocks(x)),
            right_pa_start: nb.right_pa_start.map(|x| self.to_ext4_blocks(x)),
        }
    }

    /// A window normalized in ext4 blocks, in the engine's: the clusters
    /// it touches, and the merge goal's cluster. Every bound the window
    /// is cut at falls on a cluster boundary here (the request, the
    /// neighbours, the preallocations, and window sizes that are powers
    /// of two aligned to themselves), so this is ext4's
    /// `EXT4_NUM_B2C(size)` clusters from the start's.
    pub(super) fn window_in_clusters(&self, w: Window) -> Window {
        let cb = self.cluster_bits;
        let start = w.logical >> cb;
        let end = (w.logical + u64::from(w.len)).div_ceil(1 << cb);
        Window { logical: start, len: (end - start) as u32, merge_goal: w.merge_goal.map(|g| g >> cb) }
    }

    /// A request size cap given in ext4 blocks, in clusters: the
    /// clusters ext4 asks for when it maps at most `n` blocks. A piece
    /// that starts inside a cluster the file holds maps that cluster's
    /// rest without a request, then asks for `ceil(n / ratio)` clusters
    /// all the same, so the cap is that whether or not a piece is
    /// aligned.
    pub(super) fn request_size_in_clusters(&self, size: RequestSize) -> RequestSize {
        match size {
            RequestSize::UpTo(n) => RequestSize::UpTo(n.div_ceil(1 << self.cluster_bits)),
            whole => whole,
        }
    }

    /// The blocks of a file loaded with `map` and `size`: its clusters'
    /// blocks, the cluster that holds its end cut there (an image's holes
    /// inside a cluster are not carried), all mapped. `None` without
    /// clusters.
    pub(super) fn ext4_blocks_of(&self, map: &ExtentMap, size: u64) -> Option<Box<Ext4Blocks>> {
        if self.cluster_bits == 0 {
            return None;
        }
        let mut b = Ext4Blocks::default();
        let end = size.div_ceil(self.ext4_block_size());
        for e in map.iter() {
            let (s, t) = (self.to_ext4_blocks(e.logical), self.to_ext4_blocks(e.logical_end()));
            b.given.insert(s, if (s..t).contains(&end) { end } else { t });
        }
        b.mapped = b.given.clone();
        let unwritten = map.iter().filter(|e| e.state == ExtentState::Unwritten);
        for e in self.block_extents(unwritten, Some(&b)) {
            b.unwritten.insert(e.logical, e.logical_end());
        }
        Some(Box::new(b))
    }

    /// The bytes `[offset, offset + len)` were written or fallocated:
    /// ext4 maps the blocks they touch.
    pub(super) fn give_ext4_blocks(&self, ino: &mut Inode, offset: u64, len: u64) {
        if self.cluster_bits > 0 && len > 0 {
            let bs = self.ext4_block_size();
            ino.blocks_mut().given.insert(offset / bs, (offset + len).div_ceil(bs));
        }
    }

    /// Remove ext4 blocks `[first, end)` from the file
    /// (`ext4_ext_remove_space`): they leave its extent tree, and the
    /// engine's blocks go that no block of the file is left in (ext4's
    /// partial cluster: a cluster is freed once nothing of the file is
    /// in it). Returns the engine's blocks cut and what was removed, for
    /// the caller to log and release. Without bigalloc, [`Fs::cut`].
    pub(super) fn cut_blocks(&self, ino: &mut Inode, first: u64, end: u64) -> (u64, u64, Removed) {
        let cb = self.cluster_bits;
        if cb == 0 || first >= end {
            let end = end.max(first);
            return (first, end, self.cut(ino, first, end));
        }
        let b = ino.blocks_mut();
        b.given.remove(first, end);
        b.unwritten.remove(first, end);
        b.dirty_unwritten.remove(first, end);
        let in_tree = !b.mapped.remove(first, end).is_empty();
        let tree_blocks = if in_tree { self.with_tree(ino, |t, s| t.remove(first, end, s)) } else { Vec::new() };
        let given = &ino.blocks().given;
        let holds = |c: u64| given.count_in(c << cb, (c + 1) << cb) > 0;
        let (mut cfirst, mut cend) = (first >> cb, end.div_ceil(1 << cb));
        if holds(cfirst) {
            cfirst += 1;
        }
        // A range to the end of the file has no right edge.
        if end != u64::MAX && cend > cfirst && holds(cend - 1) {
            cend -= 1;
        }
        let cend = cend.max(cfirst);
        let mut removed = self.cut(ino, cfirst, cend);
        removed.tree_blocks.extend(tree_blocks);
        (cfirst, cend, removed)
    }

    /// Map ext4 blocks `[logical, +n)` at ext4 block `physical` in the
    /// file's extent tree, as `state` says (writeback's go in unwritten,
    /// unmerged, until their I/O completes). Returns the tree blocks
    /// freed, for the caller to release once its change is logged.
    pub(super) fn tree_map_blocks(
        &self,
        ino: &mut Inode,
        logical: u64,
        physical: u64,
        n: u64,
        state: ExtentState,
        merge: Merge,
    ) -> Vec<u64> {
        if let Some(b) = ino.ext4.as_deref_mut() {
            b.mapped.insert(logical, logical + n);
            // fallocate's blocks (unwritten, merged at once) stay
            // unwritten until written into; writeback's are converted
            // when their I/O completes.
            if state == ExtentState::Unwritten && merge == Merge::Yes {
                b.unwritten.insert(logical, logical + n);
            }
        }
        let mut freed = Vec::new();
        let mut at = 0;
        while ino.tree.is_some() && at < n {
            // One call maps at most a u32's worth; the tree splits it
            // into extents of at most EXT_INIT_MAX_LEN anyway.
            let k = (n - at).min(u64::from(u32::MAX)) as u32;
            freed.extend(self.with_tree(ino, |t, s| t.map(logical + at, physical + at, k, state, merge, s)));
            at += u64::from(k);
        }
        freed
    }

    /// A write of `[offset, +len)`: under bigalloc, its ext4 blocks the
    /// tree maps unwritten wait for their conversion at writeback (a
    /// cluster the engine sees written may still hold some). Returns
    /// how many were not waiting yet.
    pub(super) fn dirty_ext4_unwritten(&self, ino: &mut Inode, offset: u64, len: u64) -> u64 {
        if self.cluster_bits == 0 || len == 0 {
            return 0;
        }
        let bs = self.ext4_block_size();
        let (first, end) = (offset / bs, (offset + len).div_ceil(bs));
        let b = ino.blocks_mut();
        let mut added = 0;
        for (s, e) in b.unwritten.overlapping(first, end) {
            added += b.dirty_unwritten.insert(s, e);
        }
        added
    }

    /// The file's ext4 blocks that wait for writeback: given, not mapped.
    pub(super) fn pending_ext4_blocks(&self, ino: &Inode) -> Vec<(u64, u64)> {
        let Some(b) = ino.ext4.as_deref() else { return Vec::new() };
        b.given.iter().flat_map(|(s, e)| b.mapped.gaps(s, e)).collect()
    }

    /// Move the file's ext4 blocks from block `from` on by `by` blocks
    /// (collapse and insert range, which ext4 allows in whole clusters).
    pub(super) fn shift_ext4_blocks(&self, ino: &mut Inode, from: u64, by: i64) {
        if self.cluster_bits == 0 {
            return;
        }
        let from = self.to_ext4_blocks(from);
        let at = |x: u64| x.checked_add_signed(by << self.cluster_bits).expect("a shift within the file");
        let b = ino.blocks_mut();
        for set in [&mut b.given, &mut b.mapped, &mut b.unwritten] {
            for (s, e) in set.split_off_from(from) {
                set.insert(at(s), at(e));
            }
        }
    }

    /// `f`'s extents in ext4 blocks, as ext4's extent tree (and FIEMAP)
    /// shows them: its clusters' blocks that it was given, unwritten
    /// where ext4's are. Blocks written into a cluster the file already
    /// holds show at once; ext4 maps them at writeback. Without
    /// bigalloc, [`Fs::extents`].
    pub fn ext4_extents(&self, f: FileId) -> Result<Vec<MappedExtent>> {
        let node = self.node(f)?;
        let ino = node.inode.lock();
        let extents = self.block_extents(ino.map.iter(), ino.ext4.as_deref());
        let Some(blocks) = ino.ext4.as_deref() else { return Ok(extents) };
        // A cluster the engine holds written may keep unwritten blocks.
        let mut out: Vec<MappedExtent> = Vec::with_capacity(extents.len());
        for e in extents {
            let (start, end) = (e.logical, e.logical_end());
            let unwritten = blocks.unwritten.overlapping(start, end);
            let written = crate::ranges::gaps_between(start, end, unwritten.iter().copied());
            let mut pieces: Vec<(u64, u64, ExtentState)> = unwritten
                .into_iter()
                .map(|(s, t)| (s, t, ExtentState::Unwritten))
                .chain(written.into_iter().map(|(s, t)| (s, t, ExtentState::Written)))
                .collect();
            pieces.sort_unstable_by_key(|p| p.0);
            for (s, t, state) in pieces {
                push_extent(&mut out, (s, e.physical + (s - start), t - s), state);
            }
        }
        Ok(out)
    }

    /// Extents in ext4 blocks, cut to the blocks given (all of them
    /// without clusters).
    pub(super) fn block_extents(
        &self,
        map: impl IntoIterator<Item = MappedExtent>,
        blocks: Option<&Ext4Blocks>,
    ) -> Vec<MappedExtent> {
        let cb = self.cluster_bits;
        let Some(Ext4Blocks { given, .. }) = blocks else { return map.into_iter().collect() };
        let mut out = Vec::new();
        for e in map {
            let start = e.logical << cb;
            for (s, t) in given.overlapping(start, e.logical_end() << cb) {
                push_extent(&mut out, (s, (e.physical << cb) + (s - start), t - s), e.state);
            }
        }
        out
    }

    /// Under bigalloc, the blocks a file keeps agree with its clusters:
    /// the tree maps only blocks the file was given, unwritten ones among
    /// them, and every block given lies in a cluster the file holds or
    /// has delayed (for [`Fs::check`]).
    pub(super) fn check_ext4_blocks(&self, id: u64, ino: &Inode) -> std::result::Result<(), Violation> {
        let cb = self.cluster_bits;
        let Some(b) = ino.ext4.as_deref() else { return Ok(()) };
        let within = |inner: &RangeSet, outer: &RangeSet, what: &str| match inner
            .iter()
            .find(|&(s, e)| outer.count_in(s, e) != e - s)
        {
            Some((s, e)) => Err(Violation::Clusters { file: id, what: format!("{what} [{s}, {e}) outside their set") }),
            None => Ok(()),
        };
        within(&b.mapped, &b.given, "mapped blocks")?;
        within(&b.unwritten, &b.mapped, "unwritten blocks")?;
        within(&b.dirty_unwritten, &b.unwritten, "dirty unwritten blocks")?;
        for (s, e) in b.given.iter() {
            for c in (s >> cb)..e.div_ceil(1 << cb) {
                if ino.map.find(c).is_none() && !ino.delayed.contains(c) {
                    return Err(Violation::Clusters {
                        file: id,
                        what: format!("cluster {c} holds given blocks but is neither mapped nor delayed"),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Append `n` blocks from logical `s` at `physical` to `out` as ext4's
/// extents would hold them: continuing the last extent where it is
/// contiguous and of the same state, none longer than the state allows.
fn push_extent(out: &mut Vec<MappedExtent>, (mut s, mut physical, mut n): (u64, u64, u64), state: ExtentState) {
    let max = u64::from(state.max_len());
    if let Some(p) = out.last_mut() {
        if p.logical_end() == s && p.physical + u64::from(p.len) == physical && p.state == state {
            let k = n.min(max - u64::from(p.len));
            p.len += k as u32;
            (s, physical, n) = (s + k, physical + k, n - k);
        }
    }
    while n > 0 {
        let k = n.min(max);
        out.push(MappedExtent { logical: s, physical, len: k as u32, state });
        (s, physical, n) = (s + k, physical + k, n - k);
    }
}
