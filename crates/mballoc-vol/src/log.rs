//! The journal as the engine sees it: the engine's [`ChangeLog`]. Changes
//! are encoded as they are recorded; a commit writes them as one journal
//! transaction (data first: data=ordered), flushes, applies them to the
//! committed state, and checkpoints when the journal is half full. A
//! failed commit aborts the journal: the volume turns read-only.

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
    pub(crate) running: Mutex<Vec<u8>>,
    pub(crate) home: Mutex<Home>,
    pub(crate) data_written: AtomicBool,
    pub(crate) aborted: AtomicBool,
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
        home.checkpoint(&*self.dev, state)
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
        for chunk in wal::chunks(&payload, bs, log_blocks) {
            let blocks = wal::blocks_for(chunk.len(), bs);
            if home.head + blocks > log_blocks {
                self.checkpoint(&mut home, VolumeState::Mounted)?;
            }
            let tx = wal::frame(chunk, home.next_seq, home.sb.checkpoints, sb.seed(), bs);
            let at = sb.log_start + home.head;
            self.dev.write_at(sb.offset(at), &tx).map_err(|e| VolError::io("writing the journal", e))?;
            self.flush()?;
            for c in wal::decode(chunk).expect("an encoded transaction decodes") {
                if let Err(e) = home.state.apply(&c) {
                    panic!("committed change {c:?} does not follow the committed state: {e}");
                }
            }
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
}

impl ChangeLog for Log {
    fn record(&self, change: Change) {
        wal::encode(&change, &mut self.running.lock());
    }

    fn commit(&self) -> std::result::Result<(), LogFailure> {
        self.commit_inner().map_err(|e| {
            self.aborted.store(true, Ordering::Release);
            LogFailure(e.to_string())
        })
    }
}
