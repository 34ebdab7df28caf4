//! Extent-tree blocks in the volume (`ExtentTreeBlocks::InVolume`): the
//! file's [`Ext4Tree`] says when ext4 would allocate or free one, and
//! this module does it, as ext4 does, through the allocator: a one-block
//! metadata request with the file's home goal, no normalization, no
//! preallocation. A tree block is promised like data (a claim), so it
//! never takes a block promised to delayed data; with nothing claimable
//! the node keeps no block (ext4 would dip into its reserved pool).

use super::{Fs, Inode};
use crate::alloc_log::{AllocEvent, Purpose, ServedBy};
use crate::ext4_tree::{TreeBlocks, TreeGoal};
use mballoc::AllocRequest;

/// The allocator and the file, seen from the tree.
pub(super) struct TreeSpace<'a> {
    fs: &'a Fs,
    ino: u64,
    goal: u64,
    /// Blocks freed, for the caller to release after logging its change.
    pub(super) freed: Vec<u64>,
}

impl<'a> TreeSpace<'a> {
    pub(super) fn new(fs: &'a Fs, ino: &Inode) -> TreeSpace<'a> {
        TreeSpace { fs, ino: ino.id, goal: fs.alloc.geometry().group_first_block(ino.home_group), freed: Vec::new() }
    }
}

/// The tree counts in ext4 blocks (its extents and its own blocks, a
/// cluster's first under bigalloc); the allocator in the engine's.
impl TreeBlocks for TreeSpace<'_> {
    fn alloc(&mut self, goal: TreeGoal) -> Option<u64> {
        let total = self.fs.alloc.geometry().total_blocks();
        let cb = self.fs.cluster_bits;
        let req = match goal {
            TreeGoal::Near(b) if b >> cb < total => AllocRequest::new(1).goal(b >> cb),
            TreeGoal::TryFirst(b) if b >> cb < total => AllocRequest::new(1).try_goal(b >> cb),
            _ => AllocRequest::new(1).goal(self.goal),
        };
        let goal = req.goal.unwrap_or(self.goal);
        let got = self.fs.allocate_metadata_block(self.ino, 0, req, goal, Purpose::ExtentTree).ok()?;
        Some(got << cb)
    }

    fn free(&mut self, block: u64) {
        self.freed.push(block >> self.fs.cluster_bits);
    }
}

impl Fs {
    /// One metadata block for inode `ino` (a tree block, or directory
    /// block `logical`), as ext4 asks for one: a one-block request
    /// without `HINT_DATA` (no normalization, no preallocation), promised
    /// like data (a claim), logged with `goal` and its purpose.
    pub(super) fn allocate_metadata_block(
        &self,
        ino: u64,
        logical: u64,
        req: AllocRequest,
        goal: u64,
        purpose: Purpose,
    ) -> crate::error::Result<u64> {
        self.space.claim(1)?;
        let got = self.alloc.allocate(&req.metadata());
        match &got {
            Ok(_) => {
                self.space.settle(1);
                self.ext4_counts.blocks(-1);
            }
            Err(_) => self.space.unclaim(1),
        }
        self.alloc_log.push(|| AllocEvent {
            ino,
            logical,
            len: 1,
            goal,
            purpose,
            result: got.as_ref().ok().map(|a| (a.extent.start, a.extent.len)),
            served_by: got.as_ref().map_or(ServedBy::Failed, |a| ServedBy::Allocator(a.found_by)),
        });
        Ok(got?.extent.start)
    }

    /// Run `f` on the file's tree, if it has one, with its blocks coming
    /// from and going back to the volume; returns the blocks freed, which
    /// the caller releases once the change that freed them is logged.
    #[inline]
    pub(super) fn with_tree(
        &self,
        ino: &mut Inode,
        f: impl FnOnce(&mut crate::ext4_tree::Ext4Tree, &mut TreeSpace<'_>),
    ) -> Vec<u64> {
        let Some(mut tree) = ino.tree.take() else { return Vec::new() };
        let mut space = TreeSpace::new(self, ino);
        f(&mut tree, &mut space);
        ino.tree = Some(tree);
        space.freed
    }

    /// Release freed tree blocks to the running transaction.
    #[inline(always)]
    pub(super) fn release_tree_blocks(&self, blocks: Vec<u64>) {
        for b in blocks {
            self.defer_free(b, 1);
            self.space.release(1);
        }
    }
}
