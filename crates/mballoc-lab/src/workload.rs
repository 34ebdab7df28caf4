//! Workloads: operations on files by concurrent jobs, written once and run
//! on every backend.
//!
//! A workload is TOML. Each `[[job]]` is cloned `clones` times; each clone
//! owns `files` files named `JOB.CLONE.FILE` (fio's naming). A clone runs its
//! `setup` steps once for each of its files, then its `steps` for each file,
//! `repeat` times (0: until the workload's `seconds` run out). A step issues
//! `count` operations of one kind at `offset`, `offset + stride`, … (stride
//! defaults to `len`). Sizes are bytes, or strings with a K, M or G suffix.
//!
//! ```
//! let w = mballoc_lab::workload::Workload::from_toml(r#"
//!     name = "appenders"
//!     volume = "1G"
//!     [[job]]
//!     name = "job1"
//!     clones = 4
//!     setup = [{ op = "create" }]
//!     steps = [{ op = "fallocate", len = "4K", count = 256 }]
//! "#).unwrap();
//! assert_eq!(w.streams().len(), 4);
//! assert_eq!(w.streams()[0].ops().count(), 257);
//! ```
//!
//! A trace ([`crate::trace`]) is the expanded form of a workload.

use crate::settings::{Scalar, Scope, Settings, Table};
pub use crate::units::Size;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// A workload or trace that cannot be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// TOML that does not parse into a workload.
    #[error("workload TOML: {0}")]
    Toml(String),
    /// A workload no backend could run.
    #[error("workload {name:?}: {why}")]
    Invalid {
        /// The workload's name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// A trace line that does not parse.
    #[error("trace line {line}: {why}")]
    Trace {
        /// The line (from 1).
        line: usize,
        /// What is wrong.
        why: String,
    },
}

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// Create the file, or truncate it to 0 if it exists (`O_CREAT|O_TRUNC`).
    Create,
    /// `fallocate(fd, 0, offset, len)`.
    Fallocate,
    /// `fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, len)`.
    FallocateKeepSize,
    /// A buffered write of `len` bytes at `offset`.
    Write,
    /// `ftruncate(fd, offset)`.
    Truncate,
    /// `fallocate(fd, PUNCH_HOLE | KEEP_SIZE, offset, len)`.
    Punch,
    /// `fsync(fd)`.
    Fsync,
    /// Close the file.
    Close,
    /// Remove the file.
    Unlink,
}

impl OpKind {
    /// Every kind, in trace-name order.
    pub const ALL: [OpKind; 9] = [
        OpKind::Create,
        OpKind::Fallocate,
        OpKind::FallocateKeepSize,
        OpKind::Write,
        OpKind::Truncate,
        OpKind::Punch,
        OpKind::Fsync,
        OpKind::Close,
        OpKind::Unlink,
    ];

    /// The name in TOML and traces.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Create => "create",
            OpKind::Fallocate => "fallocate",
            OpKind::FallocateKeepSize => "fallocate-keep-size",
            OpKind::Write => "write",
            OpKind::Truncate => "truncate",
            OpKind::Punch => "punch",
            OpKind::Fsync => "fsync",
            OpKind::Close => "close",
            OpKind::Unlink => "unlink",
        }
    }

    /// Operations that move data or space: what "ops/s" counts
    /// (will-it-scale counts fallocate calls, fio counts I/Os).
    pub fn is_data(self) -> bool {
        matches!(self, OpKind::Fallocate | OpKind::FallocateKeepSize | OpKind::Write | OpKind::Punch)
    }

    pub(crate) fn takes_range(self) -> bool {
        matches!(self, OpKind::Fallocate | OpKind::FallocateKeepSize | OpKind::Write | OpKind::Punch | OpKind::Truncate)
    }
}

/// One operation on one file (a slot in the workload's file table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// What it does.
    pub kind: OpKind,
    /// The file slot.
    pub file: u32,
    /// Byte offset (for `truncate`, the new size).
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// One step of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// The operation.
    pub op: OpKind,
    /// First offset (for `truncate`, the new size).
    #[serde(default)]
    pub offset: Size,
    #[serde(default)]
    /// Bytes per operation.
    pub len: Size,
    /// Operations in this step.
    #[serde(default = "one")]
    pub count: u64,
    /// Distance between successive offsets (default `len`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stride: Option<Size>,
}

fn one() -> u64 {
    1
}

impl Step {
    /// A single operation of `op` with no range.
    pub fn new(op: OpKind) -> Step {
        Step { op, offset: Size(0), len: Size(0), count: 1, stride: None }
    }

    /// `count` operations of `len` bytes from `offset` on.
    pub fn ranged(op: OpKind, offset: u64, len: u64, count: u64) -> Step {
        Step { op, offset: Size(offset), len: Size(len), count, stride: None }
    }

    /// With a stride other than `len`.
    pub fn stride(mut self, stride: u64) -> Step {
        self.stride = Some(Size(stride));
        self
    }
}

/// A job: `clones` concurrent copies of the same steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// Name (one word): files are `NAME.CLONE.FILE`.
    pub name: String,
    #[serde(default = "one_u32")]
    /// Concurrent copies.
    pub clones: u32,
    /// Files per clone.
    #[serde(default = "one_u32")]
    pub files: u32,
    /// Steps run once per file before the repeated ones.
    #[serde(default)]
    pub setup: Vec<Step>,
    /// Steps run `repeat` times over the clone's files.
    pub steps: Vec<Step>,
    /// Times to run `steps` over the clone's files; 0: until time runs out.
    #[serde(default = "one")]
    pub repeat: u64,
}

fn one_u32() -> u32 {
    1
}

/// How the clones' operations are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interleave {
    /// One thread per clone (fio's `-thread`), placed by the scheduler.
    #[default]
    Threads,
    /// One thread per clone, thread `i` bound to the `i mod n`-th of the
    /// `n` CPUs the process may use: will-it-scale's default binding, which
    /// gives every CPU the same number of workers. Unbound, the scheduler's
    /// run queues can stay unequal for seconds, and per-worker rates then
    /// measure the queue a worker landed on.
    PinnedThreads,
    /// One thread, one operation of each clone in turn: the strictest
    /// interleaving, and deterministic.
    InTurn,
}

/// A whole workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Name, shown in reports.
    pub name: String,
    /// Volume size for backends that make one.
    #[serde(default = "default_volume")]
    pub volume: Size,
    #[serde(default = "default_block")]
    /// Block size in bytes.
    pub block_size: u32,
    #[serde(default)]
    /// How the clones' operations are issued.
    pub interleave: Interleave,
    /// Start every volume from this ext4 image instead of an empty one
    /// (the engine loads it; ext4 mounts a copy). `volume` and
    /// `block_size` then come from the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<std::path::PathBuf>,
    /// Time limit; jobs with `repeat = 0` run until it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    #[serde(rename = "job")]
    /// The jobs.
    pub jobs: Vec<Job>,
    /// Engine settings (`[engine]`: profile, tunables by their kernel
    /// names, file-layer settings; see [`crate::settings`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub engine: Table,
    /// ext4 settings (`[ext4]`: `mkfs`, `mount`, /sys/fs/ext4 knobs).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ext4: Table,
    /// XFS settings (`[xfs]`: `mkfs`, `mount`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub xfs: Table,
    /// btrfs settings (`[btrfs]`: `mkfs`, `mount`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub btrfs: Table,
    /// Settings to sweep (`[sweep]`: `"engine.mb_max_to_scan" = [50, 200]`):
    /// the workload runs once per combination of values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sweep: BTreeMap<String, Vec<Scalar>>,
}

impl Default for Workload {
    /// No jobs yet, the default volume and block size.
    fn default() -> Self {
        Workload {
            name: "workload".into(),
            volume: default_volume(),
            block_size: default_block(),
            interleave: Interleave::default(),
            image: None,
            seconds: None,
            jobs: Vec::new(),
            engine: Table::new(),
            ext4: Table::new(),
            xfs: Table::new(),
            btrfs: Table::new(),
            sweep: BTreeMap::new(),
        }
    }
}

fn default_volume() -> Size {
    Size(8 << 30)
}

fn default_block() -> u32 {
    4096
}

impl Workload {
    /// Parse and validate a TOML workload.
    pub fn from_toml(text: &str) -> Result<Workload, WorkloadError> {
        let w: Workload = toml::from_str(text).map_err(|e| WorkloadError::Toml(e.to_string()))?;
        w.validate()?;
        Ok(w)
    }

    /// The TOML form.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a workload always serializes")
    }

    /// The settings of the `[engine]`, `[ext4]`, `[xfs]` and `[btrfs]` tables.
    pub fn settings(&self) -> Result<Settings, WorkloadError> {
        use crate::mount::KernelFs;
        Settings::from_tables(&[
            (Scope::Engine, &self.engine),
            (Scope::Kernel(KernelFs::Ext4), &self.ext4),
            (Scope::Kernel(KernelFs::Xfs), &self.xfs),
            (Scope::Kernel(KernelFs::Btrfs), &self.btrfs),
        ])
        .map_err(|e| WorkloadError::Invalid { name: self.name.clone(), why: e.to_string() })
    }

    /// The `[sweep]` table as `(key, values)`, each value checked.
    pub fn sweeps(&self) -> Result<Vec<(String, Vec<String>)>, WorkloadError> {
        self.sweep
            .iter()
            .map(|(k, vs)| {
                let values: Vec<String> = vs.iter().map(ToString::to_string).collect();
                crate::settings::sweep::check_sweep(k, &values)
                    .map_err(|e| WorkloadError::Invalid { name: self.name.clone(), why: e.to_string() })?;
                Ok((k.clone(), values))
            })
            .collect()
    }

    /// Reject what no backend could run.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        self.settings()?;
        self.sweeps()?;
        let bad = |why: String| Err(WorkloadError::Invalid { name: self.name.clone(), why });
        if !self.block_size.is_power_of_two() || !(1024..=65536).contains(&self.block_size) {
            return bad(format!("block_size {} is not a power of two from 1024 to 65536", self.block_size));
        }
        if self.volume.0 < 16 * u64::from(self.block_size) {
            return bad(format!("volume {} is too small", self.volume));
        }
        if self.jobs.is_empty() {
            return bad("no jobs".into());
        }
        let mut files = 0u64;
        for j in &self.jobs {
            if j.clones == 0 || j.files == 0 {
                return bad(format!("job {:?} has no clones or no files", j.name));
            }
            if j.repeat == 0 && self.seconds.is_none() {
                return bad(format!("job {:?} repeats until time runs out, but `seconds` is not set", j.name));
            }
            if j.repeat == 0 && j.steps.is_empty() {
                // Nothing to repeat would spin until the time limit without
                // ever issuing an operation.
                return bad(format!("job {:?} repeats until time runs out, but has no steps", j.name));
            }
            if j.name.contains(char::is_whitespace) || j.name.is_empty() {
                return bad(format!("job name {:?} must be one word", j.name));
            }
            for s in j.setup.iter().chain(&j.steps) {
                if s.op.takes_range() && s.op != OpKind::Truncate && s.len.0 == 0 {
                    return bad(format!("job {:?}: {} with zero length", j.name, s.op.name()));
                }
            }
            files += u64::from(j.clones) * u64::from(j.files);
        }
        if files > 1 << 24 {
            return bad(format!("{files} files is more than 2^24"));
        }
        if let Some(s) = self.seconds {
            if !(s.is_finite() && s > 0.0) {
                return bad(format!("seconds = {s} is not a positive time"));
            }
        }
        Ok(())
    }

    /// File names, indexed by slot.
    pub fn file_names(&self) -> Vec<String> {
        let mut v = Vec::new();
        for j in &self.jobs {
            for c in 0..j.clones {
                for f in 0..j.files {
                    v.push(format!("{}.{c}.{f}", j.name));
                }
            }
        }
        v
    }

    /// One stream of operations per clone.
    pub fn streams(&self) -> Vec<StreamSpec> {
        let mut v = Vec::new();
        let mut base = 0u32;
        for j in &self.jobs {
            for _ in 0..j.clones {
                v.push(StreamSpec::Job { job: j.clone(), first_file: base });
                base += j.files;
            }
        }
        v
    }
}

/// Where a stream's operations come from.
#[derive(Debug, Clone)]
pub enum StreamSpec {
    /// Generated from a job's steps.
    Job {
        /// The job.
        job: Job,
        /// The clone's first file slot.
        first_file: u32,
    },
    /// Listed (a trace).
    Listed(std::sync::Arc<Vec<Op>>),
}

impl StreamSpec {
    /// The operations, generated lazily.
    pub fn ops(&self) -> Box<dyn Iterator<Item = Op> + Send + '_> {
        match self {
            StreamSpec::Job { job, first_file } => Box::new(job_ops(job, *first_file)),
            StreamSpec::Listed(v) => Box::new(v.iter().copied()),
        }
    }

    /// Whether the stream runs until told to stop.
    pub fn endless(&self) -> bool {
        matches!(self, StreamSpec::Job { job, .. } if job.repeat == 0)
    }
}

fn step_ops(s: &Step, file: u32) -> impl Iterator<Item = Op> + Send + '_ {
    let stride = s.stride.unwrap_or(s.len).0;
    (0..s.count).map(move |i| Op { kind: s.op, file, offset: s.offset.0 + i * stride, len: s.len.0 })
}

fn job_ops(job: &Job, first_file: u32) -> impl Iterator<Item = Op> + Send + '_ {
    let files = first_file..first_file + job.files;
    let setup = files.clone().flat_map(move |f| job.setup.iter().flat_map(move |s| step_ops(s, f)));
    let rounds: Box<dyn Iterator<Item = u64> + Send> =
        if job.repeat == 0 { Box::new(0..) } else { Box::new(0..job.repeat) };
    let body =
        rounds.flat_map(move |_| files.clone().flat_map(move |f| job.steps.iter().flat_map(move |s| step_ops(s, f))));
    setup.chain(body)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two clones of two appenders each, in turn (the trace tests use it too).
    pub(crate) const APPENDERS: &str = r#"
        name = "appenders"
        volume = "64M"
        interleave = "in-turn"
        [[job]]
        name = "a"
        clones = 2
        files = 2
        setup = [{ op = "create" }]
        steps = [{ op = "fallocate", len = "4K", count = 3 }, { op = "truncate", offset = 0 }]
        repeat = 2
    "#;

    #[test]
    fn streams_expand_setup_then_rounds() {
        let w = Workload::from_toml(APPENDERS).unwrap();
        assert_eq!(w.file_names(), ["a.0.0", "a.0.1", "a.1.0", "a.1.1"]);
        let s = w.streams();
        let ops: Vec<Op> = s[1].ops().collect();
        // 2 creates, then 2 rounds x 2 files x (3 fallocates + truncate).
        assert_eq!(ops.len(), 2 + 2 * 2 * 4);
        assert_eq!(ops[0], Op { kind: OpKind::Create, file: 2, offset: 0, len: 0 });
        assert_eq!(ops[3], Op { kind: OpKind::Fallocate, file: 2, offset: 4096, len: 4096 });
        assert_eq!(ops[5].kind, OpKind::Truncate);
        assert_eq!(ops[6].file, 3);
    }

    #[test]
    fn settings_tables_and_sweeps_parse() {
        let w = Workload::from_toml(&format!(
            "{APPENDERS}\n[engine]\nmb_optimize_scan = 0\nprofile = 'kernel'\n[ext4]\nmount = 'nodelalloc'\nmb_max_to_scan = 50\n\
             [sweep]\n'engine.mb_max_to_scan' = [50, 200]"
        ))
        .unwrap();
        let s = w.settings().unwrap();
        assert_eq!(
            s.describe(),
            "engine.mb_optimize_scan=0, engine.profile=kernel, ext4.mb_max_to_scan=50, ext4.mount=nodelalloc"
        );
        assert_eq!(w.sweeps().unwrap(), [("engine.mb_max_to_scan".to_string(), vec!["50".to_string(), "200".into()])]);
        assert_eq!(Workload::from_toml(&w.to_toml()).unwrap(), w);
    }

    #[test]
    fn toml_round_trips() {
        let w = Workload::from_toml(APPENDERS).unwrap();
        assert_eq!(Workload::from_toml(&w.to_toml()).unwrap(), w);
    }

    #[test]
    fn bad_workloads_are_typed_errors() {
        for bad in [
            "name = 'x'\njob = []",
            "name = 'x'\nblock_size = 3000\n[[job]]\nname = 'j'\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nrepeat = 0\nsteps = []",
            "name = 'x'\nseconds = 1\n[[job]]\nname = 'j'\nrepeat = 0\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'write' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'teleport' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nclones = 0\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = []\n[engine]\nmb_max_to_scam = 5",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = []\n[sweep]\n'engine.mb_max_to_scan' = [50, 0]",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = []\n[sweep]\n'engine.mb_max_to_scan' = []",
        ] {
            assert!(Workload::from_toml(bad).is_err(), "{bad}");
        }
    }
}
