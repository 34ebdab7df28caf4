//! The journal as the engine sees it: the engine's [`ChangeLog`]. Changes
//! are encoded as they are recorded; a commit writes them as one journal
//! transaction (data first: data=ordered), flushes, applies them to the
//! committed state, and checkpoints when the journal is half full. A
//! commit the device fails aborts the journal: the volume turns read-only.
//! A commit that would outgrow the extent-tree area is refused instead,
//! and its changes wait in the running transaction.

use crate::device::Device;
use crate::error::{Result, VolError};
use crate::format::VolumeState;
use crate::home::Home;
use crate::wal;
use mballoc_fs::{Change, ChangeLog, LogFailure};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The journal as the engine sees it: changes are encoded as they come and
/// written at commit.
pub(crate) struct Log {
    pub(crate) dev: Arc<dyn Device>,
    pub(crate) running: Mutex<wal::Running>,
    pub(crate) home: Mutex<Home>,
    pub(crate) data_written: AtomicBool,
    pub(crate) aborted: AtomicBool,
    /// Why the last commit failed, until a caller is told.
    pub(crate) failure: Mutex<Option<VolError>>,
    /// [`Home::headroom`] as of the last commit or checkpoint.
    pub(crate) headroom: AtomicU64,
    pub(crate) transactions: AtomicU64,
    pub(crate) journal_blocks: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
    pub(crate) flushes: AtomicU64,
}

impl Log {
    pub(crate) fn flush(&self) -> Result<()> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.dev.flush().map_err(|e| VolError::io("flushing", e))
    }

    pub(crate) fn checkpoint(&self, home: &mut Home, state: VolumeState) -> Result<()> {
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.flushes.fetch_add(3, Ordering::Relaxed);
        let done = home.checkpoint(&*self.dev, state);
        self.publish(home);
        done
    }

    /// Tell writers how much the tree area can still grow without a look
    /// at the home state (which a commit holds while it does I/O).
    pub(crate) fn publish(&self, home: &Home) {
        self.headroom.store(home.headroom(), Ordering::Release);
    }

    pub(crate) fn commit_inner(&self) -> Result<()> {
        if self.aborted.load(Ordering::Acquire) {
            return Err(VolError::ReadOnly);
        }
        let mut home = self.home.lock();
        let payload = std::mem::take(&mut *self.running.lock());
        let data = self.data_written.swap(false, Ordering::AcqRel);
        if payload.is_empty() {
            return if data { self.flush() } else { Ok(()) };
        }
        // data=ordered: data the changes describe reaches the device first.
        self.flush()?;
        let sb = home.sb.clone();
        let (bs, log_blocks) = (sb.block_size as usize, u64::from(sb.log_blocks));
        for range in payload.chunks(bs, log_blocks) {
            let chunk = &payload.bytes()[range.clone()];
            let records = wal::decode(chunk).expect("an encoded transaction decodes");
            let blocks = crate::format::tx_blocks(chunk.len(), bs);
            if home.head + blocks > log_blocks {
                self.checkpoint(&mut home, VolumeState::Mounted)?;
            }
            // Never make durable a state no checkpoint could write home: a
            // checkpoint first may free trees the files have outgrown. If
            // it still does not fit, nothing from here on becomes durable;
            // it goes back to the running transaction, where later
            // unlinks and truncates can make it fit.
            if home.admit(&records).is_err() {
                self.checkpoint(&mut home, VolumeState::Mounted)?;
                if let Err((needed, have)) = home.admit(&records) {
                    payload.restore_before(range.start, &mut self.running.lock());
                    return Err(VolError::MetadataFull { needed, free: have });
                }
            }
            let tx = wal::frame(chunk, home.next_seq, home.sb.checkpoints, sb.seed(), bs);
            let at = sb.log_start + home.head;
            self.dev.write_at(sb.offset(at), &tx).map_err(|e| VolError::io("writing the journal", e))?;
            self.flush()?;
            for r in &records {
                if let Err(e) = home.state.apply_record(r) {
                    panic!("committed record {r:?} does not follow the committed state: {e}");
                }
            }
            let mut inos: Vec<u64> = records.iter().map(wal::Record::ino).collect();
            inos.sort_unstable();
            inos.dedup();
            home.refresh_budget(inos);
            self.publish(&home);
            home.head += blocks;
            home.next_seq += 1;
            self.transactions.fetch_add(1, Ordering::Relaxed);
            self.journal_blocks.fetch_add(blocks, Ordering::Relaxed);
        }
        if home.head > log_blocks / 2 {
            self.checkpoint(&mut home, VolumeState::Mounted)?;
        }
        Ok(())
    }

    /// The error behind a failed commit, for the caller that met it:
    /// the cause itself for the first caller told, then `ReadOnly` if the
    /// journal aborted.
    pub(crate) fn failure(&self) -> VolError {
        self.failure.lock().take().unwrap_or(VolError::ReadOnly)
    }
}

impl Log {
    /// Journal an inode's names and attributes.
    pub(crate) fn record_attr(&self, ino: u64, attr: &crate::names::Attr) {
        self.running.lock().push_attrs(&[(ino, attr)]);
    }

    /// Journal several inodes' attributes in one transaction (both sides
    /// of a rename that exchanges them).
    pub(crate) fn record_attrs(&self, attrs: &[(u64, &crate::names::Attr)]) {
        self.running.lock().push_attrs(attrs);
    }
}

impl ChangeLog for Log {
    fn record(&self, change: Change) {
        self.running.lock().push(&[change]);
    }

    fn record_all(&self, changes: &[Change]) {
        // One lock for all: a commit takes the running transaction under
        // the same lock, so it gets every one of them or none; and no
        // journal transaction boundary falls between them.
        self.running.lock().push(changes);
    }

    fn commit(&self) -> std::result::Result<(), LogFailure> {
        self.commit_inner().map_err(|e| {
            let text = e.to_string();
            // A full tree area refuses this commit and keeps the volume
            // writable; anything else (the device failed) aborts the
            // journal: nothing is written again until the next mount.
            let abort = !matches!(e, VolError::MetadataFull { .. });
            if !abort || !self.aborted.swap(true, Ordering::AcqRel) {
                *self.failure.lock() = Some(e);
            }
            LogFailure(text)
        })
    }
}
