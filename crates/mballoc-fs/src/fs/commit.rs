//! Writeback and commits: dirty runs become allocations (one request per
//! contiguous run), and a commit makes the running transaction durable
//! through the attached change log before its frees reach the allocator.

use super::{inc, FileId, FileNode, Fs, Inode, Normalize};
use crate::change_log::{Change, ChangeLog};
use crate::config::{CloseBehaviour, DioRead, SyncOrder};
use crate::deferred_frees::WhenBusy;
use crate::error::{FsError, Result};
use crate::extent_map::ExtentState;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Fs {
    /// Write back the file's dirty data and commit.
    pub fn fsync(&self, f: FileId) -> Result<()> {
        let _op = self.op();
        self.with_inode(f, true, |node, ino| self.flush(node, ino))?;
        self.try_commit().map(drop)
    }

    /// Write back one file's dirty data now (no commit).
    pub fn writeback(&self, f: FileId) -> Result<()> {
        let _op = self.op();
        self.with_inode(f, false, |node, ino| self.flush(node, ino))
    }

    /// A buffered write allocated at once, as ext4 mounted `nodelalloc`
    /// does it: every block of the range is its own allocation request, in
    /// order (`write_begin` maps one buffer at a time, normalized, with the
    /// size the file had before the write), mapped unwritten and mergeable
    /// (`dioread_nolock`: the data is not on disk yet) and converted by
    /// writeback as any write into unwritten blocks is. The kernel runs a
    /// write's blocks on one CPU without yielding it, so its locality group
    /// serves them in a row; here the writes of one locality group take
    /// turns for the same reason, or threads would interleave their blocks
    /// where ext4's do not.
    ///
    /// Like a short `write(2)`, a failure part way (no space) keeps the
    /// blocks written before it; the range is checked before any is.
    pub fn write_through(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        self.block_range(offset, len)?;
        let _turn = self.lg_writers[super::cpu_slot() % self.lg_writers.len()].lock();
        let bs = self.block_size();
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let n = ((at / bs + 1) * bs).min(end) - at;
            {
                let _op = self.op();
                self.map_unwritten(f, at, n, Normalize::Yes, crate::FallocateMode::KeepSize)?;
            }
            self.write_delayed(f, at, n)?;
            at += n;
        }
        Ok(())
    }

    /// Write back every file and commit. The first failure stops it.
    pub fn sync(&self) -> Result<()> {
        let _op = self.op();
        self.write_back_all()?;
        self.try_commit().map(drop)
    }

    /// Write back every file, in the configured order, without a commit.
    pub(super) fn write_back_all(&self) -> Result<()> {
        let order = match self.cfg.behaviour.sync_order {
            SyncOrder::ByInode => self.files(),
            SyncOrder::Dirtied => {
                // Oldest dirtied first (a file dirtied again after a
                // writeback counts from its last dirtying), then any file
                // not on the list.
                let mut seen = std::collections::HashSet::new();
                let listed: Vec<FileId> = self.dirty_files.lock().iter().rev().map(|&i| FileId(i)).collect();
                let mut v: Vec<FileId> = listed.into_iter().filter(|f| seen.insert(*f)).collect();
                v.reverse();
                v.extend(self.files().into_iter().filter(|f| seen.insert(*f)));
                v
            }
        };
        for f in order {
            if let Ok(node) = self.node(f) {
                let mut ino = node.inode.lock();
                if !ino.unlinked {
                    self.flush(&node, &mut ino)?;
                }
            }
        }
        Ok(())
    }

    /// Commit the running transaction: blocks it freed become allocatable.
    /// Returns how many. With a [`ChangeLog`] attached, a commit whose log
    /// could not be made durable releases nothing (see [`Fs::try_commit`]).
    pub fn commit(&self) -> u64 {
        self.try_commit().unwrap_or(0)
    }

    /// Commit, saying whether the attached log failed to make the
    /// transaction durable (the freed blocks then stay pending).
    pub fn try_commit(&self) -> Result<u64> {
        let _op = self.op();
        self.commit_when(WhenBusy::Wait)
    }

    pub(super) fn commit_when(&self, when_busy: WhenBusy) -> Result<u64> {
        let mut failure = None;
        let released = self.deferred_frees.commit_durable(&self.alloc, when_busy, || match &self.log {
            None => true,
            Some(log) => match log.commit() {
                Ok(()) => true,
                Err(e) => {
                    failure = Some(e);
                    false
                }
            },
        });
        match (released, failure) {
            (Some(n), _) => {
                self.quiesce.commit_done();
                Ok(n)
            }
            (None, f) => Err(FsError::Log(f.map_or_else(|| "commit failed".into(), |f| f.0))),
        }
    }

    /// Send every metadata change from now on to `log` (see
    /// `change_log`). Attach before sharing the engine:
    /// changes made earlier are not replayed into the log.
    pub fn attach_change_log(&mut self, log: Arc<dyn ChangeLog>) {
        self.log = Some(log);
    }

    pub(super) fn note(&self, change: Change) {
        if let Some(log) = &self.log {
            log.record(change);
        }
    }

    /// Log changes that must commit together.
    pub(super) fn note_all(&self, changes: &[Change]) {
        if let Some(log) = &self.log {
            log.record_all(changes);
        }
    }

    /// Background writeback: oldest dirty file first, down to half the limit.
    pub(super) fn background_writeback(&self) {
        let target = self.cfg.storage.dirty_limit_blocks / 2;
        while self.dirty.load(Ordering::Acquire) > target {
            let Some(id) = self.dirty_files.lock().pop_front() else { break };
            let Some(node) = self.files.get(id) else { continue };
            let mut ino = node.inode.lock();
            if !ino.unlinked && self.flush(&node, &mut ino).is_err() {
                // The data stays dirty for the caller's own fsync to
                // report; the file stays queued.
                self.dirty_files.lock().push_front(id);
                break;
            }
        }
    }

    /// Allocate every delayed run (one request per contiguous run) and
    /// convert dirty unwritten blocks.
    /// A failure (the log could not commit the frees that would cover a
    /// promised run) leaves what was not mapped delayed, still promised.
    pub(super) fn flush(&self, node: &FileNode, ino: &mut Inode) -> Result<()> {
        // ext4 writes back in logical order: delayed runs are allocated,
        // writes into unwritten extents split them first (the split needs
        // the extent tree as it is at that point). The tree counts ext4
        // blocks, the engine's clusters under bigalloc.
        let clustered = self.cluster_bits > 0;
        let dirty_unwritten = ino.ext4.as_deref().map_or(&ino.dirty_unwritten, |b| &b.dirty_unwritten);
        let unwritten: Vec<(u64, u64)> = dirty_unwritten.iter().collect();
        let mut next_unwritten = 0;
        // With dioread_nolock a write into unwritten blocks splits them
        // out before the I/O; without it writeback converts them here.
        let dioread = self.cfg.behaviour.dioread;
        let mut split = |fs: &Fs, ino: &mut Inode, upto: u64| {
            while let Some(&(s, e)) = unwritten.get(next_unwritten).filter(|r| r.0 < upto) {
                let freed = match dioread {
                    DioRead::NoLock => fs.with_tree(ino, |t, sp| t.split_for_write(s, e, sp)),
                    DioRead::Locked { max_zeroout_kb } => {
                        let bs = fs.ext4_block_size();
                        let zeroout = u64::from(max_zeroout_kb) * 1024 / bs;
                        let eof = ino.disk_size.div_ceil(bs);
                        fs.with_tree(ino, |t, sp| t.convert_initialized((s, e), zeroout, eof, sp))
                    }
                };
                fs.release_tree_blocks(freed);
                fs.grow_disk_size(ino, e);
                next_unwritten += 1;
            }
        };
        let allocating = !ino.delayed.is_empty();
        let (mut io, failed) = if clustered {
            self.write_back_clusters(node, ino, &mut split)
        } else {
            self.write_back_delayed(node, ino, &mut split)
        };
        if failed.is_none() {
            if allocating {
                self.delayed_all_allocated(node, ino);
            }
            split(self, ino, u64::MAX);
        }
        // The writes complete: ext4 converts what they covered and merges.
        let (converted, converted_blocks) = if failed.is_none() {
            let blocks = ino.ext4.as_deref_mut().map(|b| std::mem::take(&mut b.dirty_unwritten)).unwrap_or_default();
            (std::mem::take(&mut ino.dirty_unwritten), blocks)
        } else {
            Default::default()
        };
        for (s, e) in converted.iter() {
            ino.map.convert_to_written(s, e);
        }
        if let Some(b) = ino.ext4.as_deref_mut() {
            for (s, e) in converted_blocks.iter() {
                b.unwritten.remove(s, e);
            }
        }
        if dioread == DioRead::NoLock {
            io.extend(if clustered { converted_blocks.iter() } else { converted.iter() });
            io.sort_unstable();
            for (s, e) in io {
                let freed = self.with_tree(ino, |t, sp| t.written(s, e, sp));
                self.release_tree_blocks(freed);
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        self.dirty.fetch_sub(converted.len(), Ordering::AcqRel);
        ino.on_dirty_list = false;
        Ok(())
    }

    /// Map each delayed run, in logical order, each after the splits of
    /// the unwritten extents before it; returns the runs mapped and the
    /// error that stopped it, if one did.
    fn write_back_delayed(
        &self,
        node: &FileNode,
        ino: &mut Inode,
        split: &mut dyn FnMut(&Fs, &mut Inode, u64),
    ) -> (Vec<(u64, u64)>, Option<FsError>) {
        let mut io = Vec::new();
        loop {
            let Some((s, e)) = ino.delayed.iter().next() else { break };
            split(self, ino, s);
            inc(&self.counters.local().writeback_runs, 1);
            let mapped = self.map_range(node, ino, (s, e), (s, e), ExtentState::Written, Normalize::Yes);
            let done = mapped.as_ref().map_or_else(|stop| stop.mapped_to, |()| e);
            if done > s {
                ino.delayed.remove(s, done);
                self.dirty.fetch_sub(done - s, Ordering::AcqRel);
                self.grow_disk_size(ino, done);
                io.push((s, done));
            }
            if let Err(stop) = mapped {
                return (io, Some(stop.error));
            }
        }
        (io, None)
    }

    /// Writeback allocated the last of a file's delayed blocks: ext4
    /// (`ext4_da_update_reserve_space`) gives back the preallocations of
    /// a file no writer has open, as its last close would have had no
    /// delayed data waited for them.
    pub(super) fn delayed_all_allocated(&self, node: &FileNode, ino: &Inode) {
        if self.cfg.behaviour.close == CloseBehaviour::Ext4 && ino.open == 0 && ino.delayed.is_empty() {
            self.discard_inode_pas(node);
        }
    }

    /// Writeback submitted a file's blocks up to logical block `end`:
    /// ext4's on-disk size follows, to the end of that page, at most the
    /// size (`mpage_map_and_submit_extent`).
    pub(super) fn grow_disk_size(&self, ino: &mut Inode, end: u64) {
        const PAGE: u64 = 4096;
        let reached = (end << self.block_bits).next_multiple_of(PAGE).min(ino.size);
        ino.disk_size = ino.disk_size.max(reached);
    }
}
