//! The lock order under contention: an unlink takes a file's cache lock and
//! then the cache table; a `stat` (and `touch`) of the same file must not
//! hold the table while it waits for that cache lock. xfstests' generic/011
//! (dirstress: five processes creating, renaming and removing in shared
//! directories) deadlocked the mount that way. A watchdog turns a deadlock
//! into a failure instead of a hung test.

use mballoc_vol::{FileId, FormatOptions, MemDevice, MountOptions, Owner, Volume};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn stat_and_touch_racing_unlink_never_deadlock() {
    let rounds = mballoc_testkit::knob("MBALLOC_LOCK_ORDER_ROUNDS", 2000) as usize;
    let dev = Arc::new(MemDevice::new(256 << 20));
    Volume::format(
        dev.clone(),
        &FormatOptions { block_size: 4096, inode_count: Some(rounds as u32 + 64), ..Default::default() },
    )
    .unwrap();
    let vol = Volume::open(dev, MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() })
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    // The file being unlinked now, which two threads stat and touch
    // without pause.
    let current = Arc::new(AtomicU64::new(vol.root().0));
    let stats: Vec<_> = (0..2)
        .map(|_| {
            let (vol, done, current) = (vol.clone(), done.clone(), current.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Acquire) {
                    let f = FileId(current.load(Ordering::Acquire));
                    let _ = vol.attr(f);
                    vol.touch(f);
                }
            })
        })
        .collect();
    let worker = {
        let (vol, done) = (vol.clone(), done.clone());
        std::thread::spawn(move || {
            // Enough cached folios that the unlink holds the file's cache
            // lock a while (dropping them), as a real file's would.
            let data = vec![7u8; 256 << 10];
            for i in 0..rounds {
                let name = format!("f{i}");
                let f = vol.create_at(vol.root(), name.as_bytes(), Owner::default()).unwrap();
                // Cached data, so the unlink has a cache to drop under its lock.
                vol.write(f, 0, &data).unwrap_or_else(|e| panic!("round {i}: {e}: {:?}", vol.usage()));
                // Closed before its name goes, as dirstress closes: the
                // unlink then frees it.
                vol.close(f).unwrap();
                current.store(f.0, Ordering::Release);
                vol.unlink_at(vol.root(), name.as_bytes()).unwrap();
                if i % 16 == 15 {
                    // Frees come back at a commit; the sync also takes the
                    // cache table, as the commit timer does.
                    vol.sync().unwrap();
                }
            }
            done.store(true, Ordering::Release);
        })
    };
    let t0 = Instant::now();
    // A worker that failed ends the wait; its join below says why.
    while !done.load(Ordering::Acquire) && !worker.is_finished() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no progress in 120 s: stat or touch and unlink deadlocked (the cache table held across a file's cache lock)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let failed = worker.join().is_err();
    done.store(true, Ordering::Release);
    for t in stats {
        t.join().unwrap();
    }
    assert!(!failed, "the create, write and unlink loop failed (its panic is above)");
    assert!(vol.attr(vol.root()).is_ok());
}
