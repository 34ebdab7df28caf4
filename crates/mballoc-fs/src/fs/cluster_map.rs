//! Mapping under bigalloc, run by run of ext4 blocks.
//!
//! ext4 maps a file's blocks, not its clusters. Writeback takes each run
//! of blocks that need mapping, in logical order, and maps it piece by
//! piece (`ext4_ext_map_blocks`): blocks in a cluster the file already
//! holds are mapped there without a request (`get_implied_cluster_alloc`),
//! blocks in clusters it does not hold get new clusters from mballoc.
//! Either way the blocks enter the extent tree then, unwritten until
//! their I/O completes, and only the blocks of the run: a block of the
//! same cluster written later, after a gap, comes in with a later run.
//! fallocate does the same with the range it is given.
//!
//! The engine's files are mapped in clusters ([`Fs::map_range`] decides
//! the requests, exactly as without bigalloc), so what is left here is
//! the order: the runs come from the blocks the file was given and its
//! tree does not map yet, and each is walked as ext4 walks it, so the
//! tree sees each insertion, and asks for its own blocks, when ext4's
//! does.

use super::stats::inc;
use super::{FileNode, Fs, Inode, Normalize};
use crate::error::FsError;
use crate::extent_map::ExtentState;
use std::sync::atomic::Ordering;

/// A run stopped before its end: ext4 blocks before `mapped_to` are
/// mapped.
struct RunStopped {
    mapped_to: u64,
    error: FsError,
}

impl Fs {
    /// Map the ext4 blocks `[a, b)`, which need mapping, as
    /// `ext4_ext_map_blocks` maps them: a cluster the file holds takes
    /// its blocks at once, clusters it does not hold come from the
    /// allocator, as many in a row as the run covers. Writeback's new
    /// clusters were delayed; they stop being so.
    fn map_ext4_run(
        &self,
        node: &FileNode,
        ino: &mut Inode,
        (a, b): (u64, u64),
        state: ExtentState,
        normalize: Normalize,
    ) -> std::result::Result<(), RunStopped> {
        let cb = self.cluster_bits;
        let mut x = a;
        while x < b {
            let c = x >> cb;
            if let Some(e) = ino.map.find(c) {
                let to = b.min((c + 1) << cb);
                let at = (e.physical_of(c) << cb) + (x - (c << cb));
                let (tree_state, merge) = self.tree_mapping(state);
                let freed = self.tree_map_blocks(ino, x, at, to - x, tree_state, merge);
                self.release_tree_blocks(freed);
                x = to;
                continue;
            }
            let last = (b - 1) >> cb;
            let end = ino.map.right_of(c).map_or(last + 1, |e| e.logical.min(last + 1));
            if state == ExtentState::Written {
                assert_eq!(
                    ino.delayed.count_in(c, end),
                    end - c,
                    "inode {}: clusters [{c}, {end}) hold blocks to write back but are not delayed",
                    ino.id
                );
            }
            let mapped = self.map_range(node, ino, (c, end), (x, b), state, normalize);
            let done = mapped.as_ref().map_or_else(|stop| stop.mapped_to, |()| end);
            if state == ExtentState::Written && done > c {
                ino.delayed.remove(c, done);
                self.dirty.fetch_sub(done - c, Ordering::AcqRel);
            }
            if let Err(stop) = mapped {
                return Err(RunStopped { mapped_to: b.min(done << cb).max(x), error: stop.error });
            }
            x = b.min(end << cb);
        }
        Ok(())
    }

    /// Writeback under bigalloc ([`Fs::flush`]): the runs of blocks
    /// waiting for it, in logical order, each after the splits of the
    /// unwritten extents before it and mapped as ext4 maps it; returns
    /// the runs mapped (ext4 blocks) and the error that stopped it, if
    /// one did.
    pub(super) fn write_back_clusters(
        &self,
        node: &FileNode,
        ino: &mut Inode,
        split: &mut dyn FnMut(&Fs, &mut Inode, u64),
    ) -> (Vec<(u64, u64)>, Option<FsError>) {
        let mut io = Vec::new();
        for (a, b) in self.pending_ext4_blocks(ino) {
            split(self, ino, a);
            inc(&self.counters.local().writeback_runs, 1);
            if let Err(stop) = self.map_ext4_run(node, ino, (a, b), ExtentState::Written, Normalize::Yes) {
                io.push((a, stop.mapped_to));
                return (io, Some(stop.error));
            }
            io.push((a, b));
        }
        assert!(ino.delayed.is_empty(), "inode {}: delayed clusters without blocks to write back", ino.id);
        (io, None)
    }

    /// The mapping of [`Fs::fallocate`] under bigalloc, its clusters
    /// claimed by the caller: the range's ext4 blocks the tree does not
    /// map, outside clusters still delayed, run by run. The file is
    /// given the blocks mapped, and only those.
    pub(super) fn map_unwritten_clusters(
        &self,
        node: &FileNode,
        ino: &mut Inode,
        (offset, len): (u64, u64),
        normalize: Normalize,
    ) -> std::result::Result<(), FsError> {
        let cb = self.cluster_bits;
        let bs = self.ext4_block_size();
        let (fa, fb) = (offset / bs, (offset + len).div_ceil(bs));
        let mut runs = Vec::new();
        for (s, e) in ino.blocks().mapped.gaps(fa, fb) {
            // Blocks of delayed clusters keep waiting for writeback.
            let clusters = (s >> cb, e.div_ceil(1 << cb));
            for (cs, ce) in ino.delayed.gaps(clusters.0, clusters.1) {
                runs.push(((cs << cb).max(s), (ce << cb).min(e)));
            }
        }
        for run in runs {
            let mapped = self.map_ext4_run(node, ino, run, ExtentState::Unwritten, normalize);
            let to = mapped.as_ref().map_or_else(|stop| stop.mapped_to, |()| run.1);
            ino.blocks_mut().given.insert(run.0, to.max(run.0));
            mapped.map_err(|stop| stop.error)?;
        }
        Ok(())
    }
}
