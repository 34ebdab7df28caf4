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
//! A trace is the expanded form: one operation per line, `STREAM OP FILE
//! [OFFSET LEN]`, after a header naming the volume. Traces replay exactly
//! what a workload (or a recording) did, stream by stream.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use thiserror::Error;

/// A workload or trace that cannot be used.
#[derive(Debug, Error)]
pub enum WorkloadError {
    #[error("workload TOML: {0}")]
    Toml(String),
    #[error("workload {name:?}: {why}")]
    Invalid { name: String, why: String },
    #[error("trace line {line}: {why}")]
    Trace { line: usize, why: String },
}

/// A byte count; in TOML a number or a string like `"4K"`, `"1G"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Size(pub u64);

impl Size {
    /// Parse `123`, `4K`, `8M`, `1G`, `2T` (powers of 1024).
    pub fn parse(s: &str) -> Option<Size> {
        let s = s.trim();
        let (digits, shift) = match s.chars().last()?.to_ascii_uppercase() {
            'K' => (&s[..s.len() - 1], 10),
            'M' => (&s[..s.len() - 1], 20),
            'G' => (&s[..s.len() - 1], 30),
            'T' => (&s[..s.len() - 1], 40),
            _ => (s, 0),
        };
        let n: u64 = digits.trim().parse().ok()?;
        n.checked_mul(1 << shift).map(Size)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
            if self.0 != 0 && self.0 % (1 << shift) == 0 {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl Serialize for Size {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            N(u64),
            S(String),
        }
        match Repr::deserialize(d)? {
            Repr::N(n) => Ok(Size(n)),
            Repr::S(s) => Size::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("bad size {s:?}"))),
        }
    }
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

    fn takes_range(self) -> bool {
        matches!(self, OpKind::Fallocate | OpKind::FallocateKeepSize | OpKind::Write | OpKind::Punch | OpKind::Truncate)
    }
}

/// One operation on one file (a slot in the workload's file table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    pub file: u32,
    pub offset: u64,
    pub len: u64,
}

/// One step of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub op: OpKind,
    /// First offset (for `truncate`, the new size).
    #[serde(default)]
    pub offset: Size,
    #[serde(default)]
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
    pub name: String,
    #[serde(default = "one_u32")]
    pub clones: u32,
    /// Files per clone.
    #[serde(default = "one_u32")]
    pub files: u32,
    /// Steps run once per file before the repeated ones.
    #[serde(default)]
    pub setup: Vec<Step>,
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
    pub name: String,
    /// Volume size for backends that make one.
    #[serde(default = "default_volume")]
    pub volume: Size,
    #[serde(default = "default_block")]
    pub block_size: u32,
    #[serde(default)]
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
    pub jobs: Vec<Job>,
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

    /// Reject what no backend could run.
    pub fn validate(&self) -> Result<(), WorkloadError> {
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
    Job { job: Job, first_file: u32 },
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

/// An expanded workload: streams of listed operations.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub volume: u64,
    pub block_size: u32,
    pub interleave: Interleave,
    pub files: Vec<String>,
    pub streams: Vec<Vec<Op>>,
}

const TRACE_MAGIC: &str = "# mballoc trace 1";

impl Trace {
    /// Expand a workload; fails if a job repeats forever or the expansion
    /// exceeds `max_ops`.
    pub fn from_workload(w: &Workload, max_ops: usize) -> Result<Trace, WorkloadError> {
        let mut streams = Vec::new();
        let mut total = 0usize;
        for s in w.streams() {
            if s.endless() {
                return Err(WorkloadError::Invalid {
                    name: w.name.clone(),
                    why: "a timed job has no finite trace".into(),
                });
            }
            let ops: Vec<Op> = s.ops().take(max_ops.saturating_sub(total) + 1).collect();
            total += ops.len();
            if total > max_ops {
                return Err(WorkloadError::Invalid {
                    name: w.name.clone(),
                    why: format!("more than {max_ops} operations"),
                });
            }
            streams.push(ops);
        }
        Ok(Trace {
            volume: w.volume.0,
            block_size: w.block_size,
            interleave: w.interleave,
            files: w.file_names(),
            streams,
        })
    }

    /// The text form.
    pub fn write(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        writeln!(out, "{TRACE_MAGIC}")?;
        writeln!(out, "volume {}", self.volume)?;
        writeln!(out, "block-size {}", self.block_size)?;
        let il = match self.interleave {
            Interleave::Threads => "threads",
            Interleave::PinnedThreads => "pinned-threads",
            Interleave::InTurn => "in-turn",
        };
        writeln!(out, "interleave {il}")?;
        for (i, ops) in self.streams.iter().enumerate() {
            for op in ops {
                let name = &self.files[op.file as usize];
                if op.kind.takes_range() {
                    writeln!(out, "{i} {} {name} {} {}", op.kind.name(), op.offset, op.len)?;
                } else {
                    writeln!(out, "{i} {} {name}", op.kind.name())?;
                }
            }
        }
        Ok(())
    }

    /// Parse the text form.
    pub fn parse(text: &str) -> Result<Trace, WorkloadError> {
        let err = |line: usize, why: String| WorkloadError::Trace { line, why };
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, l)) if l.trim() == TRACE_MAGIC => {}
            _ => return Err(err(1, format!("expected {TRACE_MAGIC:?}"))),
        }
        let mut t =
            Trace { volume: 0, block_size: 4096, interleave: Interleave::Threads, files: vec![], streams: vec![] };
        let mut slots: HashMap<String, u32> = HashMap::new();
        let num = |n: usize, s: Option<&str>, what: &str| -> Result<u64, WorkloadError> {
            s.and_then(|s| s.parse().ok()).ok_or_else(|| err(n, format!("expected {what}")))
        };
        for (i, line) in lines {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut w = line.split_whitespace();
            let first = w.next().expect("non-empty line has a word");
            match first {
                "volume" => t.volume = num(n, w.next(), "a byte count")?,
                "block-size" => {
                    t.block_size = u32::try_from(num(n, w.next(), "a block size")?)
                        .map_err(|_| err(n, "block size too large".into()))?
                }
                "interleave" => {
                    t.interleave = match w.next() {
                        Some("threads") => Interleave::Threads,
                        Some("pinned-threads") => Interleave::PinnedThreads,
                        Some("in-turn") => Interleave::InTurn,
                        other => return Err(err(n, format!("unknown interleave {other:?}"))),
                    }
                }
                _ => {
                    let stream = num(n, Some(first), "a stream number")? as usize;
                    if stream > 1 << 20 {
                        return Err(err(n, format!("stream {stream} is out of range")));
                    }
                    let kind_name = w.next().ok_or_else(|| err(n, "missing operation".into()))?;
                    let kind = OpKind::ALL
                        .into_iter()
                        .find(|k| k.name() == kind_name)
                        .ok_or_else(|| err(n, format!("unknown operation {kind_name:?}")))?;
                    let name = w.next().ok_or_else(|| err(n, "missing file name".into()))?;
                    let next_slot = t.files.len() as u32;
                    let file = *slots.entry(name.to_string()).or_insert_with(|| {
                        t.files.push(name.to_string());
                        next_slot
                    });
                    let (offset, len) = if kind.takes_range() {
                        (num(n, w.next(), "an offset")?, num(n, w.next(), "a length")?)
                    } else {
                        (0, 0)
                    };
                    if kind.takes_range() && kind != OpKind::Truncate && len == 0 {
                        return Err(err(n, format!("{kind_name} with zero length")));
                    }
                    if w.next().is_some() {
                        return Err(err(n, "trailing words".into()));
                    }
                    if t.streams.len() <= stream {
                        t.streams.resize_with(stream + 1, Vec::new);
                    }
                    t.streams[stream].push(Op { kind, file, offset, len });
                }
            }
        }
        if t.volume == 0 {
            return Err(err(1, "no `volume` line".into()));
        }
        Ok(t)
    }

    /// The streams, ready to run.
    pub fn stream_specs(&self) -> Vec<StreamSpec> {
        self.streams.iter().map(|s| StreamSpec::Listed(std::sync::Arc::new(s.clone()))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APPENDERS: &str = r#"
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
    fn sizes_parse_and_print() {
        assert_eq!(Size::parse("4K"), Some(Size(4096)));
        assert_eq!(Size::parse("1g"), Some(Size(1 << 30)));
        assert_eq!(Size::parse("12"), Some(Size(12)));
        assert_eq!(Size::parse("K"), None);
        assert_eq!(Size::parse("99999999999T"), None);
        assert_eq!(Size(3 << 20).to_string(), "3M");
        assert_eq!(Size(4097).to_string(), "4097");
    }

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
    fn toml_round_trips() {
        let w = Workload::from_toml(APPENDERS).unwrap();
        assert_eq!(Workload::from_toml(&w.to_toml()).unwrap(), w);
    }

    #[test]
    fn trace_round_trips() {
        let w = Workload::from_toml(APPENDERS).unwrap();
        let t = Trace::from_workload(&w, 1000).unwrap();
        let mut text = Vec::new();
        t.write(&mut text).unwrap();
        let back = Trace::parse(std::str::from_utf8(&text).unwrap()).unwrap();
        assert_eq!(back, t);
        assert!(Trace::from_workload(&w, 10).is_err());
        for il in ["threads", "pinned-threads"] {
            let w = Workload::from_toml(&APPENDERS.replace("in-turn", il)).unwrap();
            let t = Trace::from_workload(&w, 1000).unwrap();
            let mut text = Vec::new();
            t.write(&mut text).unwrap();
            let back = Trace::parse(std::str::from_utf8(&text).unwrap()).unwrap();
            assert_eq!((back.interleave, &back), (w.interleave, &t));
        }
    }

    #[test]
    fn bad_workloads_and_traces_are_typed_errors() {
        for bad in [
            "name = 'x'\njob = []",
            "name = 'x'\nblock_size = 3000\n[[job]]\nname = 'j'\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nrepeat = 0\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'write' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'teleport' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nclones = 0\nsteps = []",
        ] {
            assert!(Workload::from_toml(bad).is_err(), "{bad}");
        }
        for bad in [
            "",
            "# mballoc trace 1\n0 create f",
            "# mballoc trace 1\nvolume 1M\n0 write f 0",
            "# mballoc trace 1\nvolume 1M\n0 write f 0 0",
            "# mballoc trace 1\nvolume 1M\nx create f",
            "# mballoc trace 1\nvolume 1M\n0 fly f",
            "# mballoc trace 1\nvolume 1M\n99999999 create f",
        ] {
            assert!(Trace::parse(bad).is_err(), "{bad:?}");
        }
    }
}
