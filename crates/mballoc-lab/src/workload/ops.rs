//! The operations a workload issues, and the steps that issue them.

use crate::units::Size;
use serde::{Deserialize, Serialize};

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// Create the file, or truncate it to 0 if it exists (`O_CREAT|O_TRUNC`).
    Create,
    /// Open the existing file as it is (`O_RDWR`, no truncation).
    Open,
    /// `fallocate(fd, 0, offset, len)`.
    Fallocate,
    /// `fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, len)`.
    FallocateKeepSize,
    /// A buffered write of `len` bytes at `offset`.
    Write,
    /// A read of `len` bytes at `offset` (`pread`).
    Read,
    /// `ftruncate(fd, offset)`.
    Truncate,
    /// `fallocate(fd, PUNCH_HOLE | KEEP_SIZE, offset, len)`.
    Punch,
    /// `fsync(fd)`.
    Fsync,
    /// Close the file.
    Close,
    /// Remove the file's name (an open file lives on until closed).
    Unlink,
    /// Make the directory the slot names, and its parents (`mkdir -p`).
    Mkdir,
    /// `rename(2)` the file to the name of slot `to`, replacing what is
    /// there; the file (and its open handle) then belongs to slot `to`.
    Rename,
    /// `link(2)`: give the file the name of slot `to` as well (open it
    /// there to use it through that name).
    Link,
    /// Wait until gate `file` has been signalled `offset` times (job
    /// ordering; the runner does it, no backend sees it).
    Wait,
    /// Signal gate `file` once.
    Signal,
}

impl OpKind {
    /// Every kind, in trace-name order.
    pub const ALL: [OpKind; 16] = [
        OpKind::Create,
        OpKind::Open,
        OpKind::Fallocate,
        OpKind::FallocateKeepSize,
        OpKind::Write,
        OpKind::Read,
        OpKind::Truncate,
        OpKind::Punch,
        OpKind::Fsync,
        OpKind::Close,
        OpKind::Unlink,
        OpKind::Mkdir,
        OpKind::Rename,
        OpKind::Link,
        OpKind::Wait,
        OpKind::Signal,
    ];

    /// The name in TOML and traces.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Create => "create",
            OpKind::Open => "open",
            OpKind::Fallocate => "fallocate",
            OpKind::FallocateKeepSize => "fallocate-keep-size",
            OpKind::Write => "write",
            OpKind::Read => "read",
            OpKind::Truncate => "truncate",
            OpKind::Punch => "punch",
            OpKind::Fsync => "fsync",
            OpKind::Close => "close",
            OpKind::Unlink => "unlink",
            OpKind::Mkdir => "mkdir",
            OpKind::Rename => "rename",
            OpKind::Link => "link",
            OpKind::Wait => "wait",
            OpKind::Signal => "signal",
        }
    }

    /// Operations that move data or space: what "ops/s" counts
    /// (will-it-scale counts fallocate calls, fio counts I/Os, reads
    /// included).
    pub fn is_data(self) -> bool {
        matches!(self, OpKind::Fallocate | OpKind::FallocateKeepSize | OpKind::Write | OpKind::Read | OpKind::Punch)
    }

    /// Operations with an offset and a length (for `truncate`, the size).
    pub(crate) fn takes_range(self) -> bool {
        matches!(
            self,
            OpKind::Fallocate
                | OpKind::FallocateKeepSize
                | OpKind::Write
                | OpKind::Read
                | OpKind::Punch
                | OpKind::Truncate
        )
    }

    /// Operations that name a second slot (`to`).
    pub(crate) fn takes_target(self) -> bool {
        matches!(self, OpKind::Rename | OpKind::Link)
    }

    /// Operations on job-ordering gates, which the runner handles itself.
    pub fn is_gate(self) -> bool {
        matches!(self, OpKind::Wait | OpKind::Signal)
    }
}

/// One operation on one file (a slot in the workload's name table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// What it does.
    pub kind: OpKind,
    /// The file slot (for `mkdir`, the directory's slot; for `wait` and
    /// `signal`, the gate).
    pub file: u32,
    /// Byte offset (for `truncate`, the new size; for `wait`, the signals
    /// awaited).
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// The second slot of `rename` and `link`.
    pub to: u32,
}

impl Op {
    /// An operation on `file` with no range and no second slot.
    pub fn on(kind: OpKind, file: u32) -> Op {
        Op { kind, file, offset: 0, len: 0, to: 0 }
    }

    /// An operation on `len` bytes of `file` at `offset`.
    pub fn ranged(kind: OpKind, file: u32, offset: u64, len: u64) -> Op {
        Op { kind, file, offset, len, to: 0 }
    }
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
    /// Each round of `repeat` starts where the previous one's step ended
    /// (`offset + count × stride` further on) instead of at `offset`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub advance: bool,
    /// For `rename`, `link` and `mkdir`: a path under the workload's root,
    /// where `{job}`, `{clone}` and `{file}` stand for the job's name, the
    /// clone's and the file's numbers (`done/{job}.{clone}.{file}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

fn one() -> u64 {
    1
}

impl Step {
    /// A single operation of `op` with no range.
    pub fn new(op: OpKind) -> Step {
        Step { op, offset: Size(0), len: Size(0), count: 1, stride: None, advance: false, to: None }
    }

    /// `count` operations of `len` bytes from `offset` on.
    pub fn ranged(op: OpKind, offset: u64, len: u64, count: u64) -> Step {
        Step { op, offset: Size(offset), len: Size(len), count, stride: None, advance: false, to: None }
    }

    /// With a stride other than `len`.
    pub fn stride(mut self, stride: u64) -> Step {
        self.stride = Some(Size(stride));
        self
    }

    /// With a path (`rename`, `link`, `mkdir`).
    pub fn to(mut self, path: &str) -> Step {
        self.to = Some(path.into());
        self
    }

    /// The `i`-th operation of round `round` on `file`; `to` is the slot
    /// of this step's path for that file.
    pub(crate) fn op(&self, round: u64, i: u64, file: u32, to: u32) -> Op {
        let stride = self.stride.unwrap_or(self.len).0;
        let base = if self.advance { self.offset.0 + round * self.count * stride } else { self.offset.0 };
        match self.op {
            // A directory is made by name: its slot is the one `to` names.
            OpKind::Mkdir => Op::on(OpKind::Mkdir, to),
            kind => Op { kind, file, offset: base + i * stride, len: self.len.0, to },
        }
    }
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
