//! Durability: what makes a file's data and the volume's names durable
//! (fsync, sync), unmounting cleanly, and the one way a volume stops
//! taking changes when something is wrong (a failed commit, a bug met by
//! a caller, a shutdown) — as ext4 does on `errors=remount-ro`: later
//! changes fail, reads go on, what was committed stays, and the state is
//! recorded in the superblock for `check` to report.

use crate::error::{Result, VolError};
use crate::format::VolumeState;
use crate::volume::Volume;
use mballoc_fs::FileId;
use std::sync::atomic::Ordering;

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

    /// Sync, checkpoint and mark the volume clean.
    pub fn unmount(self) -> Result<()> {
        if !self.opts.access.writes() {
            return Ok(());
        }
        self.sync()?;
        self.fs.discard_preallocations();
        let mut home = self.log.home.lock();
        self.log.checkpoint(&mut home, VolumeState::Clean)
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

    /// The volume's label.
    pub fn label(&self) -> Vec<u8> {
        self.log.home.lock().sb.label.clone()
    }

    /// Set the volume's label (at most [`crate::LABEL_MAX`] bytes, no NUL);
    /// durable when this returns.
    pub fn set_label(&self, label: &[u8]) -> Result<()> {
        self.writable()?;
        if label.len() > crate::format::LABEL_MAX || label.contains(&0) {
            return Err(VolError::InvalidArgument(format!(
                "a label is at most {} bytes without NUL ({} given)",
                crate::format::LABEL_MAX,
                label.len()
            )));
        }
        let mut home = self.log.home.lock();
        let old = std::mem::replace(&mut home.sb.label, label.to_vec());
        home.write_superblock(&*self.dev).inspect_err(|_| home.sb.label = old)
    }
}

impl Volume {
    /// `FITRIM`: tell the device that the free runs of at least `min_len`
    /// bytes inside `len` bytes at `start` hold nothing (a volume file
    /// gives the space back to its file system). Returns the bytes
    /// trimmed. A device that cannot discard gives `Io` with EOPNOTSUPP.
    pub fn trim(&self, start: u64, len: u64, min_len: u64) -> Result<u64> {
        self.writable()?;
        let bs = self.block_size();
        let sb = &self.sb;
        // ext4's limits: a range of at least a block, starting inside the
        // volume; runs no longer than a group.
        if len < bs || start >= sb.total_blocks * bs || min_len > u64::from(sb.blocks_per_group) * bs {
            return Err(VolError::InvalidArgument(format!(
                "trim {len} bytes from byte {start} (the volume has {}, blocks of {bs}), runs of at least \
                 {min_len} bytes",
                sb.total_blocks * bs
            )));
        }
        let first = start.div_ceil(bs).max(sb.data_start);
        let end = (start.saturating_add(len) / bs).min(sb.total_blocks);
        let blocks = self
            .fs
            .trim(first, end, min_len.div_ceil(bs), |s, n| match self.dev.discard(s * bs, n * bs) {
                Ok(true) => Ok(()),
                Ok(false) => Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
                Err(e) => Err(e),
            })
            .map_err(|e| VolError::io("discarding free space", e))?;
        Ok(blocks * bs)
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
