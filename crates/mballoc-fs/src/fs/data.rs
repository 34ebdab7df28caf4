//! Data operations: buffered writes (delayed allocation), fallocate,
//! truncate and punch, and recording data as written. Blocks that leave a
//! file go to the running transaction, never straight back to the
//! allocator.

use super::{FallocateMode, FileId, Fs, Inode, Normalize};
use crate::change_log::Change;
use crate::error::{FsError, Result};
use crate::extent_map::{ExtentState, MappedExtent, MAX_UNWRITTEN_LEN};
use std::sync::atomic::Ordering;

/// What a cut took from a file.
#[derive(Default)]
pub(super) struct Removed {
    /// The data it unmapped.
    pub(super) extents: Vec<MappedExtent>,
    /// Extent-tree blocks the removal freed.
    pub(super) tree_blocks: Vec<u64>,
}

impl Fs {
    /// A buffered write of `len` bytes at `offset`. Blocks are not allocated
    /// now: every hole the write covers is reserved (so writeback cannot run
    /// out of space) and marked delayed. Writes into unwritten extents are
    /// converted at writeback. Fails with NoSpace, changing nothing, when the
    /// new delayed blocks cannot be reserved.
    ///
    /// Under [`crate::config::LowSpace::Ext4`] a write near a full volume
    /// may first write back every dirty file, or be allocated at once.
    pub fn write(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        if let crate::config::LowSpace::Ext4 { watermark_blocks } = self.cfg.storage.low_space {
            if len > 0 && self.nonda_switch(watermark_blocks) {
                return self.write_through(f, offset, len);
            }
        }
        self.write_delayed(f, offset, len)
    }

    /// `ext4_nonda_switch`: push the dirty files out when free space is
    /// below twice the delayed blocks, and say whether this write is to be
    /// allocated at once (both from the counts read first).
    fn nonda_switch(&self, watermark_blocks: u64) -> bool {
        let free = self.ext4_shared_counts().map_or_else(|| self.alloc.free_blocks(), |c| c.free_blocks);
        let dirty = self.space.reserved();
        if dirty > 0 && free < 2 * dirty {
            // The kernel ignores what this writeback meets; the data stays
            // dirty for an fsync to report.
            let _ = self.write_back_all();
        }
        2 * free < 3 * dirty || free < dirty + watermark_blocks
    }

    /// [`Fs::write`] without the low-space switch: the delayed write.
    pub(super) fn write_delayed(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        let _op = self.op();
        let (first, end) = self.block_range(offset, len)?;
        self.with_inode(f, true, |_, ino| {
            if len == 0 {
                return Ok(());
            }
            let mut holes = Vec::new();
            let mut unwritten = Vec::new();
            let mut at = first;
            for e in ino.map.overlapping(first, end) {
                if e.logical > at {
                    holes.push((at, e.logical));
                }
                if e.state == ExtentState::Unwritten {
                    unwritten.push((e.logical, e.logical_end()));
                }
                at = e.logical_end();
            }
            if at < end {
                holes.push((at, end));
            }
            let new: u64 = holes.iter().map(|&(s, e)| e - s - ino.delayed.count_in(s, e)).sum();
            self.space.claim(new)?;
            self.give_ext4_blocks(ino, offset, len);
            let mut dirtied = new;
            for (s, e) in holes {
                ino.delayed.insert(s, e);
            }
            for (s, e) in unwritten {
                dirtied += ino.dirty_unwritten.insert(s, e);
            }
            // Under bigalloc a cluster the engine sees written may hold
            // unwritten blocks: the file is dirty all the same.
            let listed = self.dirty_ext4_unwritten(ino, offset, len) > 0;
            if let crate::page_cache::PageCache::Folios { largest } = self.cfg.behaviour.page_cache {
                ino.folios.write(offset, len, largest);
            }
            if offset + len > ino.size {
                ino.size = offset + len;
                // ext4_da_should_update_i_disksize: a write that extends
                // the file inside a written block moves the on-disk size
                // now; delayed and unwritten blocks wait for writeback.
                // Only writeback without dioread_nolock reads it.
                if self.cfg.behaviour.dioread != crate::config::DioRead::NoLock {
                    let last = (offset + len - 1) >> self.block_bits;
                    if ino.map.find(last).is_some_and(|e| e.state == ExtentState::Written) {
                        ino.disk_size = ino.size;
                    }
                }
                // Not logged here: see `log_size`.
            }
            if dirtied > 0 || listed {
                self.dirty.fetch_add(dirtied, Ordering::AcqRel);
                if !ino.on_dirty_list {
                    ino.on_dirty_list = true;
                    self.dirty_files.lock().push_back(ino.id);
                }
            }
            Ok(())
        })?;
        if self.dirty.load(Ordering::Acquire) > self.cfg.storage.dirty_limit_blocks {
            self.background_writeback();
        }
        self.tick();
        Ok(())
    }

    /// Allocate unwritten blocks for every hole of the range (`fallocate`).
    /// Delayed blocks in the range keep their reservation. NoSpace, when
    /// the holes cannot all be covered, changes nothing; a change log that
    /// fails while space is being reclaimed ([`FsError::Log`]) stops the
    /// mapping where it is, with the size unchanged.
    pub fn fallocate(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<()> {
        let _op = self.op();
        if len == 0 {
            return Err(FsError::ZeroLength);
        }
        self.block_range(offset, len)?;
        // ext4 does not grow an fallocate that fits one extent (of its
        // blocks) into a preallocation window.
        let bs = self.ext4_block_size();
        let blocks = (offset + len).div_ceil(bs) - offset / bs;
        let normalize = if blocks <= u64::from(MAX_UNWRITTEN_LEN) { Normalize::No } else { Normalize::Yes };
        self.map_unwritten(f, offset, len, normalize, mode)?;
        self.tick();
        Ok(())
    }

    /// Map every hole of the range unwritten (for [`Fs::fallocate`], and
    /// for a write allocated at once: `write_begin`'s blocks, normalized).
    pub(super) fn map_unwritten(
        &self,
        f: FileId,
        offset: u64,
        len: u64,
        normalize: Normalize,
        mode: FallocateMode,
    ) -> Result<()> {
        let (first, end) = self.block_range(offset, len)?;
        self.with_inode(f, true, |node, ino| {
            // The holes: neither mapped nor delayed (delayed blocks keep
            // their reservation).
            let holes = |ino: &Inode| -> Vec<(u64, u64)> {
                ino.map.holes(first, end).into_iter().flat_map(|(s, e)| ino.delayed.gaps(s, e)).collect()
            };
            let count = |runs: &[(u64, u64)]| runs.iter().map(|(s, e)| e - s).sum::<u64>();
            let todo = holes(ino);
            self.space.claim(count(&todo))?;
            let mapped = if self.cluster_bits > 0 {
                self.map_unwritten_clusters(node, ino, (offset, len), normalize)
            } else {
                todo.into_iter().try_for_each(|(s, e)| {
                    self.map_range(node, ino, (s, e), (s, e), ExtentState::Unwritten, normalize)
                        .map_err(|stop| stop.error)
                })
            };
            if let Err(error) = mapped {
                // Only a log that cannot commit stops a mapping: what is
                // mapped stays, the holes left are no longer promised.
                self.space.unclaim(count(&holes(ino)));
                return Err(error);
            }
            if mode == FallocateMode::ExtendSize && offset + len > ino.size {
                ino.size = offset + len;
                ino.disk_size = ino.size;
                ino.logged_size = ino.size;
                self.note(Change::Size { ino: ino.id, size: ino.size });
            }
            Ok(())
        })
    }

    /// Set the size. Shrinking drops delayed data past the end, sends the
    /// blocks past the end to the running transaction and gives back the
    /// file's preallocations.
    pub fn truncate(&self, f: FileId, size: u64) -> Result<()> {
        let _op = self.op();
        if size > self.max_file_size() {
            return Err(FsError::FileTooLarge { offset: size, len: 0, max: self.max_file_size() });
        }
        self.with_inode(f, true, |node, ino| {
            if size == 0 {
                ino.truncated_to_zero = true;
            }
            if size == ino.size {
                // As ext4, a truncate to the same size still gives back
                // the file's preallocations.
                self.discard_inode_pas(node);
                return Ok(());
            }
            let shrink = size < ino.size;
            if shrink {
                ino.folios.drop_within(size, u64::MAX);
            }
            ino.disk_size = size;
            let first_block = size.div_ceil(self.ext4_block_size());
            let (first, removed) = if shrink {
                let (first, _, removed) = self.cut_blocks(ino, first_block, u64::MAX);
                (first, removed)
            } else {
                (first_block.div_ceil(1 << self.cluster_bits), Removed::default())
            };
            ino.size = size;
            ino.logged_size = size;
            // One unit: a crash shows the file before or after, never its
            // blocks gone at the old size.
            let unmap = Change::Unmap { ino: ino.id, first, end: u64::MAX };
            let resize = Change::Size { ino: ino.id, size };
            if removed.extents.is_empty() {
                self.note(resize);
            } else {
                self.note_all(&[unmap, resize]);
            }
            self.release(removed);
            if shrink {
                self.discard_inode_pas(node);
            }
            Ok(())
        })?;
        self.tick();
        Ok(())
    }

    /// Deallocate the whole blocks inside `[offset, offset + len)`; the size
    /// does not change.
    pub fn punch_hole(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        let _op = self.op();
        if len == 0 {
            return Err(FsError::ZeroLength);
        }
        self.block_range(offset, len)?;
        let punch = self.config().behaviour.punch;
        let ext4 = punch != crate::config::PunchBehaviour::AsGiven;
        self.with_inode(f, true, |node, ino| {
            let mut len = len;
            if ext4 {
                // ext4_punch_hole: nothing at or past the size, and an end
                // past it cut to the page boundary at or after the size
                // (`round_up(i_size, PAGE_SIZE)`; a size on a page boundary
                // keeps the block after it), or before 6.15 at the end of
                // the page holding the first byte past the size.
                const PAGE: u64 = 4096;
                if offset >= ino.size {
                    return Ok(());
                }
                if offset + len > ino.size {
                    let end = match punch {
                        crate::config::PunchBehaviour::Ext4PageAfterSize => ino.size / PAGE * PAGE + PAGE,
                        _ => ino.size.div_ceil(PAGE) * PAGE,
                    };
                    len = end - offset;
                }
            }
            let bs = self.ext4_block_size();
            let whole_blocks = (offset.div_ceil(bs), (offset + len) / bs);
            ino.folios.drop_within(offset, offset + len);
            if whole_blocks.0 < whole_blocks.1 {
                let (first, end, removed) = self.cut_blocks(ino, whole_blocks.0, whole_blocks.1);
                if !removed.extents.is_empty() {
                    self.note(Change::Unmap { ino: ino.id, first, end });
                }
                self.release(removed);
            }
            if whole_blocks.0 < whole_blocks.1 || !ext4 {
                self.discard_inode_pas(node);
            }
            Ok(())
        })?;
        self.tick();
        Ok(())
    }

    /// Tell the change log the file's size, if a write grew it since the
    /// log last heard: the caller has put every byte written so far on
    /// its device (a crash then shows the file no longer than its data).
    pub fn log_size(&self, f: FileId) -> Result<()> {
        self.with_inode(f, false, |_, ino| {
            if ino.logged_size != ino.size {
                ino.logged_size = ino.size;
                self.note(Change::Size { ino: ino.id, size: ino.size });
            }
            Ok(())
        })
    }

    /// Record that the mapped blocks of the byte range hold their data on
    /// the device: unwritten blocks in memory become written, and the
    /// change log hears of every mapped block in the range.
    pub fn mark_written(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        let _op = self.op();
        let (first, end) = self.block_range(offset, len)?;
        self.with_inode(f, false, |_, ino| {
            if first == end {
                return Ok(());
            }
            let undirtied: u64 = ino.dirty_unwritten.remove(first, end).iter().map(|(s, e)| e - s).sum();
            self.dirty.fetch_sub(undirtied, Ordering::AcqRel);
            let cb = self.cluster_bits;
            if let Some(b) = ino.ext4.as_deref_mut() {
                b.unwritten.remove(first << cb, end << cb);
                b.dirty_unwritten.remove(first << cb, end << cb);
            }
            if ino.map.convert_to_written(first, end) > 0 {
                let freed = self.with_tree(ino, |t, s| {
                    t.split_for_write(first << cb, end << cb, s);
                    t.written(first << cb, end << cb, s);
                });
                self.release_tree_blocks(freed);
            }
            if !ino.map.overlapping(first, end).is_empty() {
                self.note(Change::Written { ino: ino.id, first, end });
            }
            Ok(())
        })
    }

    /// The file's allocated extents that overlap logical blocks
    /// `[first, end)`, ascending.
    pub fn lookup(&self, f: FileId, first: u64, end: u64) -> Result<Vec<MappedExtent>> {
        self.with_inode(f, false, |_, ino| Ok(ino.map.overlapping(first, end)))
    }

    /// Remove `[first, end)` from the file: delayed blocks are unreserved,
    /// mapped blocks are unmapped and returned (with the extent-tree
    /// blocks the removal frees), for the caller to log the operation and
    /// then [`Fs::release`] them.
    pub(super) fn cut(&self, ino: &mut Inode, first: u64, end: u64) -> Removed {
        let dropped: u64 = ino.delayed.remove(first, end).iter().map(|(s, e)| e - s).sum();
        let undirtied: u64 = ino.dirty_unwritten.remove(first, end).iter().map(|(s, e)| e - s).sum();
        self.space.unclaim(dropped);
        self.dirty.fetch_sub(dropped + undirtied, Ordering::AcqRel);
        let extents = ino.map.remove(first, end);
        // Under bigalloc the tree counts ext4 blocks: `cut_blocks` has
        // taken them out.
        let tree_blocks = if extents.is_empty() || self.cluster_bits > 0 {
            Vec::new()
        } else {
            self.with_tree(ino, |t, s| t.remove(first, end, s))
        };
        Removed { extents, tree_blocks }
    }

    /// Send blocks a file no longer maps to the running transaction. The
    /// change that unmapped them must be logged first, so that a commit
    /// that releases them has it.
    pub(super) fn release(&self, removed: Removed) {
        for piece in removed.extents {
            self.defer_free(piece.physical, u64::from(piece.len));
            self.space.release(u64::from(piece.len));
        }
        self.release_tree_blocks(removed.tree_blocks);
    }

    /// Send a physical range to the running transaction, split by group
    /// (or, without transactions to wait for, back to the allocator).
    pub(super) fn defer_free(&self, mut start: u64, mut len: u64) {
        self.ext4_counts.blocks(len as i64);
        if self.config().storage.free_reuse == crate::config::FreeReuse::AtOnce {
            self.alloc.free(start, len).unwrap_or_else(|e| panic!("a file's block is already free: {e}"));
            return;
        }
        let geo = self.alloc.geometry();
        while len > 0 {
            let g = geo.group_of(start);
            let room = geo.group_first_block(g) + u64::from(geo.group_len(g)) - start;
            let n = room.min(len);
            self.deferred_frees
                .defer_free(start, n, g)
                .unwrap_or_else(|e| panic!("a file's block is already pending free: {e}"));
            start += n;
            len -= n;
        }
    }
}
