//! Writes into unwritten extents, as ext4 converts them.
//!
//! With `dioread_nolock` (ext4's default) the write's blocks are split
//! out of their unwritten extent before the I/O is submitted, nothing
//! merging (`PRE_IO`), and converted and merged when it completes
//! ([`Ext4Tree::split_for_write`], [`Ext4Tree::written`]). Without it,
//! writeback converts them itself (`ext4_ext_convert_to_initialized`,
//! [`Ext4Tree::convert_initialized`]): written blocks at an end of
//! the extent move into an initialized neighbour that continues them,
//! and a split that would leave a few unwritten blocks beside the write
//! zeroes them instead (`extent_max_zeroout_kb`), so fewer extents
//! result.

use super::{merge_right, Ext, Ext4Tree, Merge, TreeBlocks};
use crate::extent_map::MAX_WRITTEN_LEN;

impl Ext4Tree {
    /// A write into the unwritten blocks of `[first, end)`, before the
    /// I/O is submitted: each unwritten entry is split around the written
    /// part, and nothing merges (ext4's `PRE_IO`).
    pub(crate) fn split_for_write(&mut self, first: u64, end: u64, blocks: &mut dyn TreeBlocks) {
        self.each_entry((first, end), |t, _, x, (l, piece_end)| {
            if x.unwritten {
                t.split_at(piece_end, blocks);
                t.split_at(l, blocks);
            }
        });
    }

    /// The write split by [`Ext4Tree::split_for_write`] completed: its
    /// pieces are written now and merge with their neighbours.
    pub(crate) fn written(&mut self, first: u64, end: u64, blocks: &mut dyn TreeBlocks) {
        self.each_entry((first, end), |t, path, x, (l, piece_end)| {
            if x.unwritten && x.logical == l && x.end() == piece_end {
                t.mark_initialized(&path, blocks);
            }
        });
    }

    /// Visit, in logical order, each entry holding part of `[first,
    /// end)` with the part it holds; `f` may reshape the tree, as each
    /// entry is looked up after the previous visit.
    fn each_entry(&mut self, (first, end): (u64, u64), mut f: impl FnMut(&mut Self, super::Path, Ext, (u64, u64))) {
        let mut l = first;
        while l < end {
            let Some((path, x)) = self.entry_at(l) else {
                l += 1;
                continue;
            };
            let piece_end = x.end().min(end);
            f(self, path, x, (l, piece_end));
            l = piece_end;
        }
    }

    /// The entry `path` ends at is initialized now; it merges with its
    /// neighbours (`ext4_ext_try_to_merge`).
    fn mark_initialized(&mut self, path: &super::Path, blocks: &mut dyn TreeBlocks) {
        let (leaf, pos) = *path.last().expect("leaf");
        self.leaf(leaf)[pos].unwritten = false;
        let v = self.leaf(leaf);
        let merged = pos > 0 && merge_right(v, pos - 1);
        if !merged {
            merge_right(v, pos);
        }
        self.correct_keys(path);
        self.merge_up(blocks);
    }

    /// Writeback of the written blocks `[first, end)` of unwritten
    /// extents without `dioread_nolock` (`ext4_ext_convert_to_initialized`),
    /// one extent at a time. Blocks at an end of an extent, and short of
    /// its whole, move into an initialized neighbour in the same leaf that
    /// continues them, if it has room. Otherwise, when the extent lies
    /// within `eof` blocks (the on-disk size, or the write's end), up to
    /// `max_zeroout` blocks are zeroed rather than left unwritten: the
    /// rest of the extent after the write if that is all, and then the
    /// part before it if that and the write stay under the limit. What is
    /// written is then split out (the tail first, both halves unwritten
    /// and unmerged, then the head) and merges with its neighbours.
    pub(crate) fn convert_initialized(
        &mut self,
        (first, end): (u64, u64),
        max_zeroout: u64,
        eof: u64,
        blocks: &mut dyn TreeBlocks,
    ) {
        self.each_entry((first, end), |t, path, x, (l, piece_end)| {
            if x.unwritten {
                t.convert_piece(&path, x, (l, piece_end - l), max_zeroout, eof.max(piece_end), blocks);
            }
        });
    }

    fn convert_piece(
        &mut self,
        path: &super::Path,
        x: Ext,
        (m, n): (u64, u64),
        max_zeroout: u64,
        eof: u64,
        blocks: &mut dyn TreeBlocks,
    ) {
        let (leaf, pos) = *path.last().expect("leaf");
        let ee_len = u64::from(x.len);
        let room = |y: &Ext| u64::from(y.len) < u64::from(MAX_WRITTEN_LEN) - n;
        let v = self.leaf(leaf);
        if m == x.logical && n < ee_len && pos > 0 {
            let p = v[pos - 1];
            if !p.unwritten && p.end() == x.logical && p.physical + u64::from(p.len) == x.physical && room(&p) {
                v[pos - 1].len += n as u32;
                v[pos].logical += n;
                v[pos].physical += n;
                v[pos].len -= n as u32;
                return;
            }
        } else if m + n == x.end() && n < ee_len && pos + 1 < v.len() {
            let q = v[pos + 1];
            if !q.unwritten && x.end() == q.logical && x.physical + ee_len == q.physical && room(&q) {
                v[pos].len -= n as u32;
                v[pos + 1].logical -= n;
                v[pos + 1].physical -= n;
                v[pos + 1].len += n as u32;
                self.correct_keys(path);
                return;
            }
        }
        let allocated = x.end() - m;
        let (mut sm, mut sn) = (m, n);
        if max_zeroout > 0 && x.end() <= eof && allocated > sn {
            if allocated <= max_zeroout {
                sn = allocated;
            }
            if sm - x.logical + sn < max_zeroout {
                sn += sm - x.logical;
                sm = x.logical;
            }
        }
        if sm + sn < x.end() {
            self.split_at(sm + sn, blocks);
        }
        if sm > x.logical {
            let (path, y) = self.entry_at(x.logical).expect("the head is still there");
            let (leaf, pos) = *path.last().expect("leaf");
            let left = (sm - y.logical) as u32;
            self.leaf(leaf)[pos].len = left;
            let written =
                Ext { logical: sm, physical: y.physical + u64::from(left), len: y.len - left, unwritten: false };
            self.insert(written, Merge::Yes, blocks);
        } else {
            let (path, _) = self.entry_at(sm).expect("the extent is still there");
            self.mark_initialized(&path, blocks);
        }
    }
}
