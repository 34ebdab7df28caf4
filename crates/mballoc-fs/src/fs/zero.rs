//! Zeroing a range without moving blocks (`FALLOC_FL_ZERO_RANGE`, as ext4
//! does it): the written blocks of the range become unwritten in place, so
//! they read as zeros, and nothing is allocated or freed. The caller
//! allocates the range's holes first (an `fallocate`, which fails whole
//! on NoSpace), so that the conversion, which cannot fail, comes last.

use super::{FileId, Fs};
use crate::change_log::Change;
use crate::error::{FsError, Result};
use crate::ext4_tree::Merge;
use crate::extent_map::{ExtentState, MAX_UNWRITTEN_LEN};

impl Fs {
    /// Make the written blocks wholly inside the byte range unwritten:
    /// their data stays on the device and reads as zeros. Partial blocks
    /// at the edges are the caller's to zero. Not under bigalloc (a
    /// cluster's blocks cannot be told apart here).
    pub fn mark_unwritten(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        let _op = self.op();
        if len == 0 {
            return Err(FsError::ZeroLength);
        }
        self.block_range(offset, len)?;
        if self.cluster_bits > 0 {
            return Err(FsError::InvalidConfig("zeroing a range in place under bigalloc".into()));
        }
        let bs = self.ext4_block_size();
        let (first, end) = (offset.div_ceil(bs), (offset + len) / bs);
        if first >= end {
            return Ok(());
        }
        self.with_inode(f, true, |_, ino| {
            let mut changes = Vec::new();
            for piece in ino.map.overlapping(first, end) {
                if piece.state != ExtentState::Written {
                    continue;
                }
                let (a, b) = (piece.logical.max(first), piece.logical_end().min(end));
                let p = piece.physical_of(a);
                ino.map.remove(a, b);
                let mut at = a;
                while at < b {
                    let n = (b - at).min(u64::from(MAX_UNWRITTEN_LEN)) as u32;
                    let phys = p + (at - a);
                    ino.map.insert(at, phys, n, ExtentState::Unwritten);
                    changes.push(Change::Map {
                        ino: ino.id,
                        logical: at,
                        physical: phys,
                        len: n,
                        state: ExtentState::Unwritten,
                    });
                    at += u64::from(n);
                }
                let freed = self.with_tree(ino, |t, sp| {
                    t.remove(a, b, sp);
                    t.map(a, p, (b - a) as u32, ExtentState::Unwritten, Merge::Yes, sp);
                });
                self.release_tree_blocks(freed);
            }
            if !changes.is_empty() {
                self.note_all(&changes);
            }
            Ok(())
        })?;
        self.tick();
        Ok(())
    }
}
