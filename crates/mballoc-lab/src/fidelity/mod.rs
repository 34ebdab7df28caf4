//! Fidelity: does the engine, under its kernel profile
//! ([`FsConfig::kernel`](mballoc_fs::FsConfig::kernel)), make ext4's
//! decisions?
//!
//! For each case, one `mkfs.ext4` image is made and kept pristine. The
//! case's operations run through the kernel on a loop-mounted copy, single
//! threaded and bound to one CPU, with `mb_stats` on and ext4's allocation
//! tracepoints recorded (the crate's `kernel_trace` module). The same operations then
//! run on the engine loaded from the pristine image
//! ([`mballoc_ext4::engine::load`]) with the engine recording its own
//! requests. [`compare`] sets the two side by side: files whose layout is
//! identical block for block, data blocks placed identically, requests
//! whose answer matches the kernel's, free extents and e2freefrag's
//! histogram, mb_stats, and the first request where the two part.
//!
//! Both sides commit only at fsync and at the end (the kernel is mounted
//! with `commit=600`, so its 5-second journal timer never fires inside a
//! case, and the engine's timer is off), and the kernel's background
//! bitmap prefetch is completed before the first operation by reading
//! `mb_groups`, so that no timing decides anything. A case may run ext4
//! with other mkfs arguments, mount options or knobs ([`config`]); the
//! engine follows each, and a setting it cannot follow is refused.
//!
//! [`replay`] runs a kernel allocation trace recorded anywhere against
//! the image it started from; [`record`] records a real program for it.

mod bigalloc_cases;
pub mod cases;
pub mod compare;
pub mod config;
mod configured;
mod engine_side;
mod kernel_diff;
mod kernel_side;
pub mod record;
pub mod replay;
pub mod stored;

pub use cases::{builtin, builtin_named, Case};
pub use compare::{Agreement, Divergence};
pub use config::Ext4Config;
pub use engine_side::{possible_cpus, running_kernel};
pub use kernel_diff::{kernel_diff, CaseDiff};

use crate::error::LabError;
use crate::workload::Op;

/// A layout run: `[logical, logical + len)` at `physical`, in blocks of
/// ext4's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Run {
    /// First logical block.
    pub logical: u64,
    /// First physical block.
    pub physical: u64,
    /// Blocks.
    pub len: u64,
}

/// Runs merged where they continue each other logically and physically,
/// whatever the state (written, unwritten) that split them.
pub fn merge_runs(mut runs: Vec<Run>) -> Vec<Run> {
    runs.sort_unstable();
    let mut out: Vec<Run> = Vec::with_capacity(runs.len());
    for r in runs {
        match out.last_mut() {
            Some(l) if l.logical + l.len == r.logical && l.physical + l.len == r.physical => l.len += r.len,
            _ => out.push(r),
        }
    }
    out
}

/// One request and its answer, from either side (the engine's log
/// speaks the trace's terms).
pub use crate::kernel_trace::KernelRequest as Request;

/// What one side (kernel or engine) ended with.
#[derive(Debug, Clone, Default)]
pub struct Side {
    /// Each file by name: its inode number and merged runs.
    pub files: Vec<(String, u64, Vec<Run>)>,
    /// Free runs `(first block, blocks)`, ext4 numbering.
    pub free: Vec<(u64, u64)>,
    /// Blocks on the volume, and its block size, for the histogram.
    pub total_blocks: u64,
    /// Block size.
    pub block_size: u32,
    /// mb_stats as the side prints it.
    pub mb_stats: String,
    /// The allocation requests, in order.
    pub requests: Vec<Request>,
    /// Events the kernel's ring buffer dropped (0 for the engine).
    pub lost_events: u64,
    /// The kernel's allocation trace as tracefs printed it (empty for the
    /// engine).
    pub trace_text: String,
}

/// The order a single-threaded run issues a case's streams in: one
/// operation of each stream in turn.
pub fn in_turn(streams: &[Vec<Op>]) -> Vec<Op> {
    let longest = streams.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(streams.iter().map(Vec::len).sum());
    for i in 0..longest {
        for s in streams {
            if let Some(op) = s.get(i) {
                out.push(*op);
            }
        }
    }
    out
}

/// Run one case on both sides and compare. Needs root and loop devices
/// (else [`LabError::Unavailable`]). With `keep`, the case's kernel run is
/// kept in that directory for [`stored::load`] (the files are listed
/// there).
pub fn run(case: &Case, keep: Option<&std::path::Path>) -> Result<Agreement, LabError> {
    case.check_ops()?;
    case.ext4.check(&crate::settings::Settings::default())?;
    let image = kernel_side::make_image(case)?;
    let ops = in_turn(&case.trace.streams);
    if let Some(dir) = keep {
        stored::keep_inputs(case, image.path(), dir)?;
    }
    let kernel = kernel_side::run(case, &image, &ops)?;
    if let Some(dir) = keep {
        stored::keep_kernel_run(case, &kernel, dir)?;
    }
    let version = running_kernel();
    let engine = engine_side::run(case, image.path(), &ops, &|r| r.in_kernel(version), engine_side::possible_cpus())?;
    Ok(compare::compare(&case.name, &kernel, &engine))
}
