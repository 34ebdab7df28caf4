//! The commit interval: a thread that syncs the volume so nothing written
//! stays volatile for longer than the interval, as ext4's `commit=`.
//!
//! The kernel passes `sync(2)` and `syncfs(2)` to a FUSE server only on
//! fuseblk and virtiofs connections, and not to this server at all; so
//! without an fsync, this thread is what bounds the loss at a crash. It
//! starts a sync every half interval: a write made at time t is in a sync
//! that starts before t + interval/2 and, while a sync takes less than
//! half the interval, is durable by t + interval.

use mballoc_vol::{VolError, Volume};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The running flusher; dropping it stops the thread.
pub(crate) struct Flusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// Sync `vol` every `interval / 2`; `None` for an interval of zero
    /// (durability only at fsync and unmount).
    pub fn start(vol: Arc<Volume>, interval: Duration) -> Option<Flusher> {
        if interval.is_zero() {
            return None;
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mballoc-commit".into())
            .spawn(move || {
                let (lock, cv) = &*s;
                let mut stopped = lock.lock();
                loop {
                    cv.wait_for(&mut stopped, interval / 2);
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    match vol.sync() {
                        Ok(()) => {}
                        // The journal aborted: nothing more can be made
                        // durable; the error went to whoever wrote.
                        Err(VolError::ReadOnly) => return,
                        Err(e) => eprintln!("mballoc mount: periodic commit: {e}"),
                    }
                    stopped = lock.lock();
                }
            })
            .expect("spawning the commit thread");
        Some(Flusher { stop, thread: Some(thread) })
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
