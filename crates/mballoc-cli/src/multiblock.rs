//! Seed 002's experiment: what allocating a file costs per block, one block
//! at a time vs one multiblock request per dirty run with delayed allocation.

use mballoc::{AllocRequest, Allocator, Geometry, Tunables};
use mballoc_fs::{FileId, Fs, FsConfig};
use std::time::{Duration, Instant};

/// How the blocks of a file are allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// One allocator request per block, goal just past the previous block
    /// (the block allocator the 2004 proposal replaced).
    BlockAtATime,
    /// The file layer with every 4 KiB write written back at once (ext4
    /// mounted `nodelalloc`): one request per block, served mostly by the
    /// file's preallocation window.
    NoDelalloc,
    /// Buffered writes, allocated at fsync: one request per dirty run.
    Delalloc,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::BlockAtATime => "block-at-a-time",
            Variant::NoDelalloc => "nodelalloc",
            Variant::Delalloc => "delalloc",
        }
    }
}

/// One row of the table.
pub struct Cost {
    pub size_kib: u64,
    pub variant: Variant,
    pub files: u64,
    pub blocks: u64,
    pub elapsed: Duration,
    pub requests_per_file: f64,
    pub extents_per_file: f64,
}

impl Cost {
    pub fn ns_per_block(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.blocks as f64
    }
}

const BLOCK: u64 = 4096;

fn geometry() -> Geometry {
    // 4 GiB of 4 KiB blocks.
    Geometry::new(4096, 1 << 20).expect("geometry")
}

/// Allocate files of `size_kib` for about `budget`, written 4 KiB at a time.
pub fn run(size_kib: u64, variant: Variant, budget: Duration) -> Cost {
    let bytes = size_kib * 1024;
    let blocks = bytes.div_ceil(BLOCK);
    match variant {
        Variant::BlockAtATime => block_at_a_time(size_kib, blocks, budget),
        Variant::NoDelalloc | Variant::Delalloc => file_layer(size_kib, bytes, variant, budget),
    }
}

fn block_at_a_time(size_kib: u64, blocks: u64, budget: Duration) -> Cost {
    let a = Allocator::builder(geometry()).tunables(Tunables::with_stats()).build().expect("allocator");
    let (mut files, mut elapsed, mut extents) = (0u64, Duration::ZERO, 0u64);
    while elapsed < budget {
        // A batch of files, then give their blocks back outside the timer.
        let mut owned: Vec<(u64, u64)> = Vec::new();
        let t0 = Instant::now();
        for _ in 0..64 {
            let mut prev: Option<u64> = None;
            for _ in 0..blocks {
                let req = match prev {
                    Some(p) if p < a.geometry().total_blocks() => AllocRequest::new(1).try_goal(p),
                    _ => AllocRequest::new(1),
                };
                let got = a.allocate(&req).expect("an empty volume has room").extent.start;
                if prev != Some(got) {
                    extents += 1;
                }
                match owned.last_mut() {
                    Some(last) if last.0 + last.1 == got => last.1 += 1,
                    _ => owned.push((got, 1)),
                }
                prev = Some(got + 1);
            }
        }
        elapsed += t0.elapsed();
        files += 64;
        for (s, l) in owned {
            a.free(s, l).expect("freeing what was allocated");
        }
    }
    let reqs = a.stats().reqs;
    Cost {
        size_kib,
        variant: Variant::BlockAtATime,
        files,
        blocks: files * blocks,
        elapsed,
        requests_per_file: reqs as f64 / files as f64,
        extents_per_file: extents as f64 / files as f64,
    }
}

fn file_layer(size_kib: u64, bytes: u64, variant: Variant, budget: Duration) -> Cost {
    let mut cfg = FsConfig::new(geometry());
    cfg.tunables = Tunables::with_stats();
    cfg.dirty_limit_blocks = u64::MAX;
    cfg.commit_interval_ops = 0;
    let fs = Fs::new(cfg).expect("engine");
    let (mut files, mut elapsed, mut extents) = (0u64, Duration::ZERO, 0u64);
    while elapsed < budget {
        let mut batch: Vec<FileId> = Vec::with_capacity(64);
        let t0 = Instant::now();
        for _ in 0..64 {
            let f = fs.create().expect("create");
            let mut off = 0;
            while off < bytes {
                let n = BLOCK.min(bytes - off);
                fs.write(f, off, n).expect("write");
                if variant == Variant::NoDelalloc {
                    fs.writeback(f).expect("writeback");
                }
                off += n;
            }
            fs.fsync(f).expect("fsync");
            fs.close(f).expect("close");
            batch.push(f);
        }
        elapsed += t0.elapsed();
        files += 64;
        for f in batch {
            extents += fs.extents(f).expect("extents").len() as u64;
            fs.unlink(f).expect("unlink");
        }
        fs.commit();
    }
    let blocks = bytes.div_ceil(BLOCK);
    let s = fs.stats();
    Cost {
        size_kib,
        variant,
        files,
        blocks: files * blocks,
        elapsed,
        requests_per_file: (s.alloc_requests + s.inode_pa_hits + s.group_pa_hits) as f64 / files as f64,
        extents_per_file: extents as f64 / files as f64,
    }
}
