//! Writeback and commits: dirty runs become allocations (one request per
//! contiguous run), and a commit makes the running transaction durable
//! through the attached change log before its frees reach the allocator.

use super::{inc, FileId, FileNode, Fs, Inode, Normalize};
use crate::change_log::{Change, ChangeLog};
use crate::error::{FsError, Result};
use crate::extent_map::ExtentState;
use crate::journal::WhenBusy;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Fs {
    /// Write back the file's dirty data and commit.
    pub fn fsync(&self, f: FileId) -> Result<()> {
        let _op = self.op();
        self.with_inode(f, true, |node, ino| {
            self.flush(node, ino);
            Ok(())
        })?;
        self.commit();
        Ok(())
    }

    /// Write back one file's dirty data now (no commit).
    pub fn writeback(&self, f: FileId) -> Result<()> {
        let _op = self.op();
        self.with_inode(f, false, |node, ino| {
            self.flush(node, ino);
            Ok(())
        })
    }

    /// Write back every file and commit.
    pub fn sync(&self) {
        let _op = self.op();
        for f in self.files() {
            if let Ok(node) = self.node(f) {
                let mut ino = node.inode.lock();
                if !ino.unlinked {
                    self.flush(&node, &mut ino);
                }
            }
        }
        self.commit();
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
        let released = self.journal.commit_durable(&self.alloc, when_busy, || match &self.log {
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
    /// [`change_log`](crate::change_log)). Attach before sharing the engine:
    /// changes made earlier are not replayed into the log.
    pub fn attach_change_log(&mut self, log: Arc<dyn ChangeLog>) {
        self.log = Some(log);
    }

    pub(super) fn note(&self, change: Change) {
        if let Some(log) = &self.log {
            log.record(change);
        }
    }

    /// Background writeback: oldest dirty file first, down to half the limit.
    pub(super) fn background_writeback(&self) {
        let target = self.cfg.dirty_limit_blocks / 2;
        while self.dirty.load(Ordering::Acquire) > target {
            let Some(id) = self.dirty_files.lock().pop_front() else { break };
            let Some(node) = self.files.get(id) else { continue };
            let mut ino = node.inode.lock();
            if !ino.unlinked {
                self.flush(&node, &mut ino);
            }
        }
    }

    /// Allocate every delayed run (one request per contiguous run) and
    /// convert dirty unwritten blocks.
    pub(super) fn flush(&self, node: &FileNode, ino: &mut Inode) {
        let delayed = std::mem::take(&mut ino.delayed);
        for (s, e) in delayed.iter() {
            inc(&self.counters.local().writeback_runs, 1);
            self.map_range(node, ino, s, e, ExtentState::Written, Normalize::Yes);
        }
        let converted = std::mem::take(&mut ino.dirty_unwritten);
        for (s, e) in converted.iter() {
            ino.map.convert_to_written(s, e);
        }
        self.dirty.fetch_sub(delayed.len() + converted.len(), Ordering::AcqRel);
        ino.on_dirty_list = false;
    }
}
