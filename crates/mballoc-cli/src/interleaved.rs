//! Seed 000's fio job: 64 files each appended 4 KiB at a time with
//! `fallocate`, interleaved, then the files' extents and the volume's free
//! space (e2freefrag's numbers). Run in turn from one thread (the strictest
//! interleaving, and deterministic) or with one thread per file, as fio does.

use crate::kernel::{self, Mount};
use mballoc::report::FreeSpaceHistogram;
use mballoc::Geometry;
use mballoc_fs::{FallocateMode, FileId, Fs, FsConfig, StreamPlacement};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BLOCK: u64 = 4096;

/// How the appends of different files interleave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interleave {
    /// One thread, one append per file in turn.
    InTurn,
    /// One thread per file.
    Threads,
}

impl Interleave {
    pub fn name(self) -> &'static str {
        match self {
            Interleave::InTurn => "in turn",
            Interleave::Threads => "threads",
        }
    }
}

/// The job's size.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    pub files: usize,
    pub blocks_per_file: u64,
    pub volume_bytes: u64,
}

/// What one run left behind.
pub struct Outcome {
    pub elapsed: Duration,
    pub extents: Vec<u64>,
    pub free_extents: u64,
    pub avg_free_extent_kib: u64,
    /// e2freefrag's report of the volume after the run.
    pub freefrag: String,
}

impl Outcome {
    pub fn avg_extents(&self) -> f64 {
        self.extents.iter().sum::<u64>() as f64 / self.extents.len().max(1) as f64
    }
    pub fn max_extents(&self) -> u64 {
        self.extents.iter().copied().max().unwrap_or(0)
    }
    pub fn mib_per_s(&self, job: &Job) -> f64 {
        (job.files as u64 * job.blocks_per_file * BLOCK) as f64 / (1 << 20) as f64 / self.elapsed.as_secs_f64()
    }
}

fn drive<F: Fn(usize, u64) + Send + Sync + 'static>(job: &Job, how: Interleave, append: F) -> Duration {
    let start = Instant::now();
    match how {
        Interleave::InTurn => {
            for b in 0..job.blocks_per_file {
                for f in 0..job.files {
                    append(f, b);
                }
            }
        }
        Interleave::Threads => {
            let append = Arc::new(append);
            let blocks = job.blocks_per_file;
            let hs: Vec<_> = (0..job.files)
                .map(|f| {
                    let append = Arc::clone(&append);
                    std::thread::spawn(move || (0..blocks).for_each(|b| append(f, b)))
                })
                .collect();
            hs.into_iter().for_each(|h| h.join().expect("appender"));
        }
    }
    start.elapsed()
}

/// The engine with the given placement.
pub fn engine(job: &Job, how: Interleave, placement: StreamPlacement) -> Outcome {
    let mut cfg = FsConfig::new(Geometry::new(4096, job.volume_bytes / BLOCK).expect("geometry"));
    cfg.stream_placement = placement;
    let fs = Arc::new(Fs::new(cfg).expect("engine"));
    let ids: Arc<Vec<FileId>> = Arc::new((0..job.files).map(|_| fs.create().expect("create")).collect());
    let elapsed = {
        let (fs, ids) = (Arc::clone(&fs), Arc::clone(&ids));
        drive(job, how, move |f, b| {
            fs.fallocate(ids[f], b * BLOCK, BLOCK, FallocateMode::ExtendSize).expect("the volume holds the job")
        })
    };
    for &f in ids.iter() {
        fs.close(f).expect("close");
    }
    fs.sync();
    let h: FreeSpaceHistogram = fs.allocator().free_space_histogram();
    Outcome {
        elapsed,
        extents: ids.iter().map(|&f| fs.fragments(f).expect("live file")).collect(),
        free_extents: h.free_extents(),
        avg_free_extent_kib: h.avg_free_extent_kib(),
        freefrag: h.render("engine"),
    }
}

/// Kernel ext4 on a loop-mounted image of the job's size.
pub fn kernel_ext4(job: &Job, how: Interleave) -> Result<Outcome, String> {
    let m = Mount::new(kernel::KernelFs::Ext4, job.volume_bytes, "interleaved")?;
    let dir = m.dir().join("t");
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    let paths: Vec<_> = (0..job.files).map(|f| dir.join(format!("job.{f}"))).collect();
    let files: Vec<std::fs::File> = paths
        .iter()
        .map(|p| std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(p))
        .collect::<std::io::Result<_>>()
        .map_err(|e| e.to_string())?;
    let files = Arc::new(files);
    let elapsed = {
        let files = Arc::clone(&files);
        drive(job, how, move |f, b| {
            kernel::fallocate(&files[f], b * BLOCK, BLOCK).unwrap_or_else(|e| panic!("fallocate on ext4: {e}"))
        })
    };
    drop(files);
    let extents = paths.iter().map(|p| kernel::filefrag_extents(p)).collect::<Result<Vec<_>, _>>()?;
    let image = m.unmount()?;
    let freefrag = kernel::output(std::process::Command::new("e2freefrag").arg(image.path()))?;
    let field = |name: &str| -> Result<u64, String> {
        freefrag
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("e2freefrag printed no {name:?}"))
    };
    Ok(Outcome {
        elapsed,
        extents,
        free_extents: field("Num. free extent:")?,
        avg_free_extent_kib: field("Avg. free extent:")?,
        freefrag,
    })
}
