//! The mballoc lab: every seed's experiment, on the engine and on kernel
//! file systems, side by side.
//!
//! The data flow is one line:
//!
//! ```text
//! Workload (TOML or trace) ──streams of Op──▶ runner ──▶ Target (engine | ext4 | xfs | btrfs)
//!                                                          │
//!            layouts (FIEMAP), free space (GETFSMAP), allocator counters (mb_stats)
//!                                                          ▼
//!                         metrics (filefrag, e4defrag, e2freefrag, Ceph) ──▶ Row
//!                                                          ▼
//!                          ScenarioReport ──▶ text tables | JSON | HTML with SVG
//! ```
//!
//! * [`workload`]: operations on files by concurrent jobs, described once in
//!   TOML, expanded lazily; [`trace`]: the same, one op per line, for replay.
//! * [`backend`]: the [`backend::Target`] trait, implemented by the engine
//!   (mballoc-fs in this process) and by loop-mounted kernel file systems
//!   driven with system calls ([`loop_mount`], [`sys`]). Both answer the same
//!   questions after a run, so every metric is computed by the same code.
//! * [`runner`]: one thread per stream (or all streams in turn), released
//!   together, until the streams end or a deadline; counters per stream,
//!   read at the deadline.
//! * `metrics`: extents per file as filefrag counts them, e4defrag's
//!   score, e2freefrag's histogram, Ceph's fragmentation score.
//! * [`scenarios`]: the seeds' experiments; [`report`]: their renderings.
//!
//! A kernel backend that cannot run (not root, no loop device, no mkfs) is
//! skipped with one line in the report, never an error.

#![deny(unsafe_code)]

mod aging;
pub mod backend;
pub mod cleanup;
pub(crate) mod core_workloads;
mod error;
pub mod fidelity;
pub(crate) mod kernel_trace;
pub mod kernels;
pub mod loop_mount;
mod metrics;
pub mod policies;
pub(crate) mod published;
pub mod report;
pub mod runner;
pub mod scenarios;
pub mod settings;
mod strace;
#[allow(unsafe_code)] // the system calls, each block with its SAFETY comment
pub mod sys;
pub mod trace;
pub mod units;
pub mod workload;

pub use error::{chain, LabError};
