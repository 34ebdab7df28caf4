//! The commit interval: a thread that syncs the volume so that nothing
//! written stays volatile for longer than [`crate::MountOptions::commit`],
//! as ext4's `commit=` (jbd2's timer) does for every program, whatever
//! front end it writes through.
//!
//! It starts a sync every half interval: a write made at time t is in a
//! sync that starts before t + interval/2 and, while a sync takes less
//! than half the interval, is durable by t + interval. The thread holds the
//! volume only while it syncs (a weak reference otherwise), so dropping
//! the last handle ends it.

use crate::error::VolError;
use crate::volume::Volume;
use parking_lot::{Condvar, Mutex};
use std::sync::{Arc, Weak};
use std::thread::{JoinHandle, ThreadId};

/// The running timer.
pub(crate) struct CommitTimer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: JoinHandle<()>,
}

impl CommitTimer {
    /// Sync `vol` every half of its commit interval; `None` for an interval
    /// of zero.
    pub fn start(vol: &Arc<Volume>) -> Option<CommitTimer> {
        let interval = vol.opts.commit;
        if interval.is_zero() {
            return None;
        }
        let weak: Weak<Volume> = Arc::downgrade(vol);
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mballoc-commit".into())
            .spawn(move || {
                let (lock, cv) = &*s;
                let mut stopped = lock.lock();
                loop {
                    // A stop asked for before this thread first waits is
                    // seen here, not half an interval later.
                    if !*stopped {
                        cv.wait_for(&mut stopped, interval / 2);
                    }
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    let Some(vol) = weak.upgrade() else { return };
                    match vol.sync() {
                        Ok(()) => {}
                        // Halted, unmounted: nothing more becomes durable.
                        Err(VolError::ReadOnly | VolError::Unmounted) => return,
                        Err(e) => eprintln!("mballoc: periodic commit: {e}"),
                    }
                    drop(vol);
                    stopped = lock.lock();
                }
            })
            .ok()?;
        Some(CommitTimer { stop, thread })
    }

    /// Stop the thread and wait for it, unless this is that thread.
    pub fn stop(self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if std::thread::current().id() != self.thread_id() {
            let _ = self.thread.join();
        }
    }

    fn thread_id(&self) -> ThreadId {
        self.thread.thread().id()
    }
}
