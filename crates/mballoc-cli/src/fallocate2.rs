//! Seed 000's will-it-scale fallocate2 loop on the whole engine (file layer
//! and allocator) and on a kernel file system: each worker owns a file,
//! appends 8 KiB with `fallocate` up to 1 MiB, truncates it to 0, repeats.
//! One op is one fallocate call; the truncates are inside the time.

use crate::kernel::{self, Mount};
use crossbeam_utils::CachePadded;
use mballoc::{Concurrency, Geometry};
use mballoc_fs::{FallocateMode, Fs, FsConfig, StreamPlacement};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const STEP: u64 = 8192;
const FILE: u64 = 1 << 20;

/// Ops per worker over one timed run.
pub struct Rates {
    pub workers: usize,
    pub elapsed: Duration,
    pub per_worker: Vec<u64>,
}

impl Rates {
    pub fn total_ops_per_s(&self) -> f64 {
        self.per_worker.iter().sum::<u64>() as f64 / self.elapsed.as_secs_f64()
    }
    pub fn per_worker_ops_per_s(&self) -> f64 {
        self.total_ops_per_s() / self.workers as f64
    }
    /// Slowest worker's ops over the fastest's (1 is perfectly fair).
    pub fn fairness(&self) -> f64 {
        let min = self.per_worker.iter().copied().min().unwrap_or(0);
        let max = self.per_worker.iter().copied().max().unwrap_or(0);
        if max == 0 {
            0.0
        } else {
            min as f64 / max as f64
        }
    }
}

/// Run `body(worker, stop, counter)` on `workers` threads for `duration`
/// after they are all ready; counters are read at the stop.
fn timed<F>(workers: usize, duration: Duration, body: F) -> Rates
where
    F: Fn(usize, &AtomicBool, &AtomicU64) + Send + Sync + 'static,
{
    let body = Arc::new(body);
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<Vec<CachePadded<AtomicU64>>> =
        Arc::new((0..workers).map(|_| CachePadded::new(AtomicU64::new(0))).collect());
    let ready = Arc::new(Barrier::new(workers + 1));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (body, stop, counts, ready) =
                (Arc::clone(&body), Arc::clone(&stop), Arc::clone(&counts), Arc::clone(&ready));
            std::thread::spawn(move || {
                ready.wait();
                body(w, &stop, &counts[w]);
            })
        })
        .collect();
    ready.wait();
    let start = Instant::now();
    std::thread::sleep(duration);
    let per_worker: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("fallocate2 worker");
    }
    Rates { workers, elapsed, per_worker }
}

/// The engine on an empty 8 GiB volume of 4 KiB blocks (as the kernel
/// anchors), with the given synchronisation and placement.
pub fn engine(workers: usize, duration: Duration, concurrency: Concurrency, placement: StreamPlacement) -> Rates {
    let mut cfg = FsConfig::new(Geometry::new(4096, 1 << 21).expect("geometry"));
    cfg.concurrency = concurrency;
    cfg.stream_placement = placement;
    let fs = Arc::new(Fs::new(cfg).expect("engine"));
    timed(workers, duration, move |_, stop, count| {
        let f = fs.create().expect("create");
        let mut ops = 0;
        while !stop.load(Ordering::Relaxed) {
            let mut at = 0;
            while at < FILE && !stop.load(Ordering::Relaxed) {
                fs.fallocate(f, at, STEP, FallocateMode::ExtendSize).expect("an 8 GiB volume never fills");
                at += STEP;
                ops += 1;
                count.store(ops, Ordering::Relaxed);
            }
            fs.truncate(f, 0).expect("truncate own file");
        }
    })
}

/// The same loop with system calls on a mounted kernel file system.
pub fn kernel(mount: &Mount, workers: usize, duration: Duration) -> std::io::Result<Rates> {
    let files: Vec<std::fs::File> = (0..workers)
        .map(|w| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(mount.dir().join(format!("fallocate2.{w}")))
        })
        .collect::<std::io::Result<_>>()?;
    let files = Arc::new(files);
    let failed = Arc::new(std::sync::Mutex::new(None));
    let errors = Arc::clone(&failed);
    let rates = timed(workers, duration, move |w, stop, count| {
        let file = &files[w];
        let mut ops = 0;
        let result = (|| {
            while !stop.load(Ordering::Relaxed) {
                let mut at = 0;
                while at < FILE && !stop.load(Ordering::Relaxed) {
                    kernel::fallocate(file, at, STEP)?;
                    at += STEP;
                    ops += 1;
                    count.store(ops, Ordering::Relaxed);
                }
                file.set_len(0)?;
            }
            Ok::<(), std::io::Error>(())
        })();
        if let Err(e) = result {
            *errors.lock().expect("error slot") = Some(e);
        }
    });
    let error = failed.lock().expect("error slot").take();
    match error {
        Some(e) => Err(e),
        None => Ok(rates),
    }
}
