//! Allocator-level workloads: the fallocate2 pattern and a fragmented volume,
//! on the allocator alone.

use mballoc::{AllocRequest, Allocator, Geometry, MbStats, OptimizeScan, Tunables};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Result of a fallocate2 run.
pub struct Fallocate2 {
    /// Worker threads.
    pub threads: usize,
    /// Allocations made, all workers.
    pub ops: u64,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// Allocations per worker.
    pub per_thread: Vec<u64>,
}

impl Fallocate2 {
    /// Allocations per second, all workers.
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
    /// Nanoseconds of one worker's time per allocation.
    pub fn ns_per_op(&self) -> f64 {
        self.elapsed.as_nanos() as f64 * self.threads as f64 / self.ops as f64
    }
}

/// will-it-scale's fallocate2 loop on the allocator alone: each worker owns a
/// "file"; it allocates 2 blocks 128 times, the goal just past the previous
/// extent, then frees the whole file (its extents, merged) and repeats. One
/// op is one allocation; the frees are included in the time.
pub fn fallocate2(threads: usize, duration: Duration, stats: bool) -> Fallocate2 {
    // 8 GiB at 4 KiB blocks, as the anchor measurements.
    let geo = Geometry::new(4096, 1 << 21).expect("geometry");
    let t = Tunables { mb_stats: stats, ..Tunables::default() };
    let a = Arc::new(Allocator::builder(geo).tunables(t).build().expect("allocator"));
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<Vec<AtomicU64>> = Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|w| {
            let (a, stop, counts) = (Arc::clone(&a), Arc::clone(&stop), Arc::clone(&counts));
            std::thread::spawn(move || {
                let home = (w as u64 * 7919 * 32768) % a.geometry().total_blocks();
                let mut extents: Vec<(u64, u64)> = Vec::with_capacity(128);
                let mut ops = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut goal = home;
                    for _ in 0..128 {
                        let got = a.allocate(&AllocRequest::new(2).try_goal(goal)).expect("volume never fills");
                        let e = got.extent;
                        match extents.last_mut() {
                            Some(last) if last.0 + last.1 == e.start => last.1 += u64::from(e.len),
                            _ => extents.push((e.start, u64::from(e.len))),
                        }
                        goal = e.end() % a.geometry().total_blocks();
                        ops += 1;
                    }
                    for (s, l) in extents.drain(..) {
                        a.free(s, l).expect("free of own extent");
                    }
                    counts[w].store(ops, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("worker");
    }
    let elapsed = start.elapsed();
    let per_thread: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    Fallocate2 { threads, ops: per_thread.iter().sum(), elapsed, per_thread }
}

/// Result of a fragmented-volume run.
pub struct Fragmented {
    /// Requests made.
    pub requests: u64,
    /// Wall-clock time of the requests.
    pub elapsed: Duration,
    /// Most groups one request scanned.
    pub max_groups_scanned: u32,
    /// The allocator's statistics over the run.
    pub stats: MbStats,
    /// The same as `mb_stats` text.
    pub mb_stats: String,
}

impl Fragmented {
    /// Nanoseconds per request.
    pub fn ns_per_request(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.requests as f64
    }
    /// Groups scanned under their lock, per request.
    pub fn groups_scanned_per_request(&self) -> f64 {
        self.stats.groups_scanned as f64 / self.requests as f64
    }
    /// Free extents measured, per request.
    pub fn extents_scanned_per_request(&self) -> f64 {
        self.stats.extents_scanned as f64 / self.requests as f64
    }
    /// Groups looked at (summary read), per request.
    pub fn groups_considered_per_request(&self) -> f64 {
        self.stats.cr_groups_considered.iter().sum::<u64>() as f64 / self.requests as f64
    }
}

/// Build a volume of `groups` groups (1 KiB blocks, 8192 blocks per group)
/// that is 80% full with 50% fragmentation: every group has 20% free; in half
/// of the groups (chosen at random) that free space is 4-block holes, one
/// every 20 blocks; in the other half it is one run at the group's end.
pub fn fragmented_volume(groups: u32, seed: u64) -> Allocator {
    let geo = Geometry::new(1024, u64::from(groups) * 8192).expect("geometry");
    let a = Allocator::builder(geo).tunables(Tunables::with_stats()).build().expect("allocator");
    let words = 8192 / 64;
    let mut holes = vec![u64::MAX; words];
    for i in (16..8192).step_by(20) {
        for b in i..(i + 4).min(8192) {
            holes[b / 64] &= !(1 << (b % 64));
        }
    }
    let mut tail = vec![u64::MAX; words];
    let free_tail = 8192 / 5;
    for b in 8192 - free_tail..8192 {
        tail[b / 64] &= !(1 << (b % 64));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for g in 0..groups {
        let bitmap = if rng.gen_bool(0.5) { &holes } else { &tail };
        a.load_group_bitmap(g, bitmap).expect("group bitmap");
    }
    a
}

/// Allocate `requests` extents of `len` blocks at random goals on `a`.
pub fn fragmented_run(a: &Allocator, optimize: bool, requests: u64, len: u32, seed: u64) -> Fragmented {
    a.set_tunables(Tunables {
        mb_optimize_scan: if optimize { OptimizeScan::On } else { OptimizeScan::Off },
        ..a.tunables()
    })
    .expect("tunables");
    a.reset_stats();
    let total = a.geometry().total_blocks();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let goals: Vec<u64> = (0..requests).map(|_| rng.gen_range(0..total)).collect();
    let mut got = Vec::with_capacity(requests as usize);
    let mut max_groups_scanned = 0;
    let start = Instant::now();
    for &goal in &goals {
        let x = a.allocate(&AllocRequest::new(len).goal(goal)).expect("space");
        max_groups_scanned = max_groups_scanned.max(x.groups_scanned);
        got.push(x.extent);
    }
    let elapsed = start.elapsed();
    let stats = a.stats();
    let mb_stats = a.mb_stats_report();
    for e in got {
        a.free(e.start, e.len.into()).expect("free own extent");
    }
    Fragmented { requests, elapsed, max_groups_scanned, stats, mb_stats }
}
