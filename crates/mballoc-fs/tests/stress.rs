//! Many threads, random file operations, and the full ownership check at
//! quiescent points: every thread runs a seeded batch of operations, all
//! meet at a barrier, one checks `Fs::check` (no block owned twice, every
//! counter balanced), and the next round starts. Both placements and both
//! lock configurations. `MBALLOC_SEED` replays, `MBALLOC_TEST_SCALE` grows it.

use mballoc_testkit as common;

use mballoc::Geometry;
use mballoc_fs::{Concurrency, FallocateMode, FileId, Fs, FsConfig, FsError, StreamPlacement};
use rand::Rng;
use std::sync::{Arc, Barrier};

const BLOCK: u64 = 4096;

/// One random operation on one of the thread's files (or a shared one).
fn step(fs: &Fs, rng: &mut impl Rng, mine: &mut Vec<FileId>, shared: &[FileId]) {
    if mine.is_empty() || rng.gen_ratio(1, 40) {
        mine.push(fs.create().expect("create"));
        return;
    }
    let f =
        if rng.gen_ratio(1, 5) { shared[rng.gen_range(0..shared.len())] } else { mine[rng.gen_range(0..mine.len())] };
    let size = fs.size(f).expect("live file");
    let off =
        rng.gen_range(0..=size / BLOCK + 8) * BLOCK + if rng.gen_ratio(1, 4) { rng.gen_range(0..BLOCK) } else { 0 };
    let len = rng.gen_range(1..=64) * BLOCK;
    let r = match rng.gen_range(0..100) {
        0..=29 => fs.fallocate(f, size, rng.gen_range(1..=4) * BLOCK, FallocateMode::ExtendSize),
        30..=49 => fs.write(f, off, len),
        50..=59 => fs.fallocate(f, off, len, FallocateMode::KeepSize),
        60..=67 => fs.punch_hole(f, off, len),
        68..=74 => fs.truncate(f, off),
        75..=79 => fs.fsync(f),
        80..=84 => fs.writeback(f),
        85..=87 => {
            fs.commit();
            Ok(())
        }
        88..=90 if mine.contains(&f) && mine.len() > 1 => {
            mine.retain(|&x| x != f);
            fs.close(f).and_then(|_| fs.unlink(f))
        }
        _ => fs.open(f).and_then(|_| fs.close(f)),
    };
    match r {
        Ok(()) | Err(FsError::NoSpace { .. }) => {}
        Err(e) => panic!("{e}"),
    }
}

fn stress(name: &str, concurrency: Concurrency, placement: StreamPlacement) {
    let seed = common::seed(name);
    let threads = 8;
    let rounds = 6 * common::scale();
    let ops = 400;
    let mut cfg = FsConfig::new(Geometry::with_group_size(4096, 1024, 24 * 1024).unwrap());
    cfg.placement.concurrency = concurrency;
    cfg.placement.stream_placement = placement;
    cfg.storage.commit_interval_ops = 200;
    cfg.shape.inodes_per_group = 8;
    cfg.storage.dirty_limit_blocks = 2_000;
    let fs = Arc::new(Fs::new(cfg).unwrap());
    let shared: Arc<Vec<FileId>> = Arc::new((0..4).map(|_| fs.create().unwrap()).collect());
    let start = Arc::new(Barrier::new(threads + 1));
    let done = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (fs, shared, start, done) =
                (Arc::clone(&fs), Arc::clone(&shared), Arc::clone(&start), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut rng = common::rng(seed.wrapping_add(t as u64));
                let mut mine = Vec::new();
                for _ in 0..rounds {
                    start.wait();
                    for _ in 0..ops {
                        step(&fs, &mut rng, &mut mine, &shared);
                    }
                    done.wait();
                }
            })
        })
        .collect();
    for round in 0..rounds {
        start.wait();
        done.wait();
        if let Err(e) = fs.check() {
            panic!("{name}: MBALLOC_SEED={seed}, round {round}: {e}");
        }
    }
    for w in workers {
        if let Err(e) = w.join() {
            eprintln!("{name}: MBALLOC_SEED={seed}: a worker panicked");
            std::panic::resume_unwind(e);
        }
    }
    fs.sync().unwrap();
    fs.discard_preallocations();
    fs.check().unwrap_or_else(|e| panic!("{name}: MBALLOC_SEED={seed}, at the end: {e}"));
    eprintln!("{name}: MBALLOC_SEED={seed}: {:?}", fs.stats());
}

#[test]
fn eight_threads_per_file_streams() {
    stress("eight_threads_per_file_streams", Concurrency::Scalable, StreamPlacement::PerFile);
}

#[test]
fn eight_threads_kernel_placement() {
    stress("eight_threads_kernel_placement", Concurrency::Scalable, StreamPlacement::Kernel);
}

#[test]
fn eight_threads_legacy_locks() {
    stress("eight_threads_legacy_locks", Concurrency::Legacy, StreamPlacement::Kernel);
}
