//! `FALLOC_FL_COLLAPSE_RANGE` and `FALLOC_FL_INSERT_RANGE`: a whole-block
//! range taken out of a file, or a hole put into it, with every extent
//! past it moving by the range's length. No block changes owner: the
//! extents past the range keep their physical blocks, so nothing is
//! allocated; a collapse frees only the blocks of the range itself.
//!
//! Both are one journal unit: unmap from the range's start to the end of
//! the file, map every moved extent at its new place, set the new size.
//! Each record is an assignment, so a crash shows the file before or
//! after, and replay gives the same result however often it runs. As ext4
//! does, both refuse a file with data not yet written back (the caller
//! writes it back first) and ranges that are not whole blocks.

use super::{Fs, Inode};
use crate::change_log::Change;
use crate::error::{FsError, Result};
use crate::ext4_tree::Merge;
use crate::extent_map::MappedExtent;
use crate::FileId;

/// Which way the extents move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shift {
    /// Down by the range: `[offset, offset + len)` goes.
    Collapse,
    /// Up by the range: a hole appears at `offset`.
    Insert,
}

impl Fs {
    /// Remove `[offset, offset + len)` from the file and move everything
    /// after it down; the size shrinks by `len`. Both must be whole
    /// blocks, and the range must end before the end of the file.
    pub fn collapse_range(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        self.shift(f, offset, len, Shift::Collapse)
    }

    /// Move everything from `offset` up by `len` and leave a hole there;
    /// the size grows by `len`. Both must be whole blocks, and `offset`
    /// must lie before the end of the file.
    pub fn insert_range(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        self.shift(f, offset, len, Shift::Insert)
    }

    fn shift(&self, f: FileId, offset: u64, len: u64, how: Shift) -> Result<()> {
        let _op = self.op();
        if len == 0 {
            return Err(FsError::ZeroLength);
        }
        let bs = self.block_size();
        if !offset.is_multiple_of(bs) || !len.is_multiple_of(bs) {
            return Err(FsError::InvalidRange(format!("{offset}+{len}: not whole blocks of {bs} bytes")));
        }
        self.block_range(offset, len)?;
        self.with_inode(f, true, |node, ino| {
            let size = ino.size;
            let new_size = match how {
                Shift::Collapse if offset.checked_add(len).is_some_and(|end| end < size) => size - len,
                Shift::Insert if offset < size => size
                    .checked_add(len)
                    .filter(|&s| s <= self.max_file_size())
                    .ok_or(FsError::FileTooLarge { offset: size, len, max: self.max_file_size() })?,
                _ => return Err(FsError::InvalidRange(format!("{offset}+{len} against a size of {size} bytes"))),
            };
            if !ino.delayed.is_empty() || !ino.dirty_unwritten.is_empty() || !self.pending_ext4_blocks(ino).is_empty() {
                return Err(FsError::InvalidRange("data not yet written back".into()));
            }
            let (first, n) = (offset / bs, len / bs);
            let removed = match how {
                Shift::Collapse => {
                    let cb = self.cluster_bits();
                    self.cut_blocks(ino, first << cb, (first + n) << cb).2
                }
                Shift::Insert => super::data::Removed::default(),
            };
            let from = if how == Shift::Collapse { first + n } else { first };
            let by = if how == Shift::Collapse { -(n as i64) } else { n as i64 };
            self.shift_ext4_blocks(ino, from, by);
            let moved = take_from(self, ino, from);
            let place = |e: &MappedExtent| match how {
                Shift::Collapse => e.logical - n,
                Shift::Insert => e.logical + n,
            };
            let mut changes = vec![Change::Unmap { ino: ino.id, first, end: u64::MAX }];
            for e in &moved {
                let logical = place(e);
                ino.map.insert(logical, e.physical, e.len, e.state);
                let placed = MappedExtent { logical, ..*e };
                for b in self.block_extents(std::iter::once(placed), ino.ext4.as_deref()) {
                    let freed = self.tree_map_blocks(ino, b.logical, b.physical, b.len.into(), b.state, Merge::Yes);
                    self.release_tree_blocks(freed);
                }
                changes.push(Change::Map { ino: ino.id, logical, physical: e.physical, len: e.len, state: e.state });
            }
            ino.size = new_size;
            ino.logged_size = new_size;
            changes.push(Change::Size { ino: ino.id, size: new_size });
            self.note_all(&changes);
            self.release(removed);
            // Windows planned for the old layout point at the wrong place.
            self.discard_inode_pas(node);
            Ok(())
        })?;
        self.tick();
        Ok(())
    }
}

/// Every extent from logical block `from` on, taken out of the map (and
/// the tree); the caller puts them back at their new places.
fn take_from(fs: &Fs, ino: &mut Inode, from: u64) -> Vec<MappedExtent> {
    let moved = ino.map.remove(from, u64::MAX);
    if !moved.is_empty() {
        let from = from << fs.cluster_bits;
        let freed = fs.with_tree(ino, |t, s| t.remove(from, u64::MAX, s));
        fs.release_tree_blocks(freed);
    }
    moved
}
