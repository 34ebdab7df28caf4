//! Durability: what makes a file's data and the volume's names durable
//! (fsync, sync, the commit interval), unmounting cleanly (and what
//! dropping an unmounted volume does), abandoning a volume as a crash
//! would, and the one way a volume stops
//! taking changes when something is wrong (a failed commit, a bug met by
//! a caller, a shutdown) — as ext4 does on `errors=remount-ro`: later
//! changes fail, reads go on, what was committed stays, and the state is
//! recorded in the superblock for `check` to report.

use crate::error::{Result, VolError};
use crate::format::VolumeState;
use crate::volume::Volume;
use mballoc_fs::FileId;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) use crate::commit_timer::CommitTimer;

impl Volume {
    /// Make the file's data and metadata durable: write back its dirty
    /// folios, then commit the journal (which flushes the data first).
    pub fn fsync(&self, f: FileId) -> Result<()> {
        self.writable()?;
        self.settle_times(f.0);
        {
            let cache = self.cache_of(f);
            let mut fc = cache.lock();
            self.fs.size(f)?;
            self.writeback_locked(f, &mut fc)?;
        }
        self.engine(self.fs.try_commit())?;
        Ok(())
    }

    /// Write back one file's dirty data without committing.
    pub fn writeback(&self, f: FileId) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        self.writeback_locked(f, &mut fc)
    }

    /// Write back every file and commit.
    pub fn sync(&self) -> Result<()> {
        self.writable()?;
        for (ino, c) in self.caches() {
            self.settle_times(ino);
            let mut fc = c.lock();
            match self.writeback_locked(FileId(ino), &mut fc) {
                Err(VolError::Fs(mballoc_fs::FsError::Unlinked(_))) => {}
                r => r?,
            }
        }
        self.engine(self.fs.try_commit())?;
        Ok(())
    }

    /// Sync, checkpoint and mark the volume clean. Handles that outlive
    /// this (open files) can change nothing more ([`VolError::Unmounted`]);
    /// the device is let go when the last of them is dropped.
    pub fn unmount(self: Arc<Self>) -> Result<()> {
        self.close_clean()
    }

    /// Leave the volume as a power cut would: nothing more is written, not
    /// even what is cached, and the next mount replays the journal. What
    /// tests of crashes (and programs that must not wait) call instead of
    /// [`Volume::unmount`].
    pub fn abandon(self: Arc<Self>) {
        self.closed.store(true, Ordering::Release);
        self.stop_timer();
    }

    /// The commit interval's thread stops (and is waited for, unless it is
    /// the caller: the last handle can be dropped on it).
    fn stop_timer(&self) {
        if let Some(t) = self.timer.lock().take() {
            t.stop();
        }
    }

    fn close_clean(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.stop_timer();
        if !self.opts.access.writes() {
            self.closed.store(true, Ordering::Release);
            return Ok(());
        }
        let done = (|| {
            self.sync()?;
            self.fs.discard_preallocations();
            let mut home = self.log.home.lock();
            self.log.checkpoint(&mut home, VolumeState::Clean)
        })();
        self.closed.store(true, Ordering::Release);
        done
    }

    /// Stop taking changes (see [`Halt`]): every later change fails
    /// [`VolError::ReadOnly`], reads go on, and the next mount replays the
    /// journal as after a crash. A [`Halt::Error`] is also noted in the
    /// superblock, for [`crate::check`] to report until a repair clears
    /// it. Returns false if the volume had already stopped.
    pub fn halt(&self, why: Halt) -> bool {
        if self.log.aborted.swap(true, Ordering::AcqRel) {
            return false;
        }
        if let Halt::Error(reason) = why {
            eprintln!("mballoc: the volume takes no more changes: {reason}");
            if self.opts.access.writes() {
                let mut home = self.log.home.lock();
                if let Err(e) = home.record_error(&*self.dev, &reason) {
                    eprintln!("mballoc: recording the error in the superblock: {e}");
                }
            }
        }
        true
    }

    /// Whether the volume stopped taking changes ([`Volume::halt`], or a
    /// commit the device failed).
    pub fn is_halted(&self) -> bool {
        self.log.aborted.load(Ordering::Acquire) && self.opts.access.writes()
    }
}

/// Dropping the last handle of a volume that was neither unmounted nor
/// abandoned unmounts it: what was written is kept, as a program that ends
/// without `unmount` expects. A failure is told on stderr (nothing else
/// can hear it) and leaves the volume as a crash would.
impl Drop for Volume {
    fn drop(&mut self) {
        if !self.closed.load(Ordering::Acquire) && self.opts.access.writes() && !self.is_halted() {
            if let Err(e) = self.close_clean() {
                eprintln!("mballoc: a volume dropped without unmount could not be closed cleanly ({e}); the next mount replays its journal");
            }
        }
    }
}

/// Why a volume stops taking changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Halt {
    /// Something went wrong that the volume cannot vouch for going on
    /// from (a bug a caller met): as ext4's `errors=remount-ro`.
    Error(String),
    /// Asked for (a shutdown ioctl): as ext4's `EXT4_IOC_SHUTDOWN`, nothing
    /// is recorded.
    Shutdown,
}
