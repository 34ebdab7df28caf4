//! Backends: what a workload runs on. The engine is mballoc-fs in this
//! process; the kernel backends are loop-mounted ext4, XFS and btrfs images
//! driven with system calls. Both answer the same questions afterwards
//! (file layouts, free space, allocator counters), so every metric is
//! computed the same way.

mod engine;
mod kernel;
mod mb_stats;
mod mounted;
mod slots;
mod syscall;

pub use engine::{EngineTarget, VolumeFile};
pub use kernel::KernelTarget;
pub use mb_stats::AllocCounters;
pub use mounted::{start_mount_server, MountCommand, MountedTarget};

use crate::error::LabError;
use crate::loop_mount::KernelFs;
use crate::metrics::{FileLayout, FreeSpace};
use crate::workload::Op;
use mballoc_fs::FsError;
use thiserror::Error;

/// Which backend a row ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// The engine, in process.
    Engine,
    /// A kernel file system on a loop device.
    Kernel(KernelFs),
    /// The engine on a volume mounted by `mballoc mount`, by system calls.
    Mounted,
}

impl BackendKind {
    /// All backends, in report order.
    pub const ALL: [BackendKind; 5] = [
        BackendKind::Engine,
        BackendKind::Kernel(KernelFs::Ext4),
        BackendKind::Kernel(KernelFs::Xfs),
        BackendKind::Kernel(KernelFs::Btrfs),
        BackendKind::Mounted,
    ];

    /// The name in `--backends` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Engine => "engine",
            BackendKind::Kernel(k) => k.name(),
            BackendKind::Mounted => "mount",
        }
    }

    /// Parse a `--backends` name.
    pub fn parse(s: &str) -> Option<BackendKind> {
        BackendKind::ALL.into_iter().find(|b| b.name() == s)
    }
}

/// An operation that failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum OpError {
    #[error("no space left")]
    /// The file system is full.
    NoSpace,
    #[error("{0}")]
    /// Anything else, with its message.
    Failed(String),
}

impl From<FsError> for OpError {
    fn from(e: FsError) -> Self {
        match e {
            FsError::NoSpace { .. } => OpError::NoSpace,
            e => OpError::Failed(e.to_string()),
        }
    }
}

impl From<mballoc_vol::VolError> for OpError {
    fn from(e: mballoc_vol::VolError) -> Self {
        match e {
            mballoc_vol::VolError::Fs(e) => e.into(),
            e => OpError::Failed(e.to_string()),
        }
    }
}

impl From<std::io::Error> for OpError {
    fn from(e: std::io::Error) -> Self {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            OpError::NoSpace
        } else {
            OpError::Failed(e.to_string())
        }
    }
}

/// A volume a workload runs on.
pub trait Target: Sync {
    /// Apply one operation.
    fn apply(&self, op: &Op) -> Result<(), OpError>;
    /// Make everything durable and allocated (sync, commit).
    fn sync(&self);
    /// Free bytes a file could still get.
    fn available_bytes(&self) -> u64;
    /// The layout of every file that exists.
    fn layouts(&self) -> Result<Vec<FileLayout>, LabError>;
    /// Free space, or why it cannot be known.
    fn free_space(&self) -> Result<FreeSpace, LabError>;
    /// Allocator counters, where the backend has them.
    fn counters(&self) -> Option<AllocCounters>;
    /// The allocator's own mb_stats text, where it has one.
    fn mb_stats_text(&self) -> Option<String>;
    /// Blocks per group × groups per flex group (e4defrag's "best").
    fn blocks_per_flex(&self) -> u64;
    /// The file layer's own counters (the engine only).
    fn engine_stats(&self) -> Option<mballoc_fs::FsStats> {
        None
    }
    /// Whether a write moves data to a device. The in-memory engine only
    /// places blocks: its bytes per second are allocation speed, never
    /// bandwidth, and are reported apart ([`crate::scenarios::bandwidth`]).
    fn moves_data(&self) -> bool {
        true
    }
}

thread_local! {
    /// Where reads land: one buffer per thread, grown once.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The bytes a kernel backend writes: 1 MiB with every page already
/// present. A page of the source that is not yet faulted in makes the
/// kernel's copy come up short; without delayed allocation ext4 then gives
/// back the blocks it mapped for the write and maps them again (the
/// failed-write truncate), which is the lab's doing, not the workload's.
/// A buffer of zeros straight from the allocator is such memory; this one
/// is written through.
pub(crate) fn write_buffer() -> Vec<u8> {
    vec![0xA5; WRITE_CALL_BYTES as usize]
}

/// Bytes a kernel backend writes per system call: its write buffer.
pub(crate) const WRITE_CALL_BYTES: u64 = 1 << 20;

/// A write of `len` bytes at `offset` as the kernel backends issue it:
/// `call(position, bytes)` once per system call of at most
/// [`WRITE_CALL_BYTES`] (once, with no bytes, for an empty write). The
/// engine's writes follow the same calls, since each makes its own
/// page-cache folios, which the kernel profile follows.
pub(crate) fn write_calls<E>(offset: u64, len: u64, mut call: impl FnMut(u64, u64) -> Result<(), E>) -> Result<(), E> {
    let mut at = 0;
    loop {
        let n = (len - at).min(WRITE_CALL_BYTES);
        call(offset + at, n)?;
        at += n;
        if at >= len {
            return Ok(());
        }
    }
}

/// Read `len` bytes from `offset` through `read_at` (a `pread`: bytes read
/// into the buffer at an offset, 0 at the end of the file), in pieces of
/// at most 1 MiB into this thread's buffer, until `len` or the end. Every
/// backend's `read` operation, and fidelity's.
pub(crate) fn read_range<E>(
    offset: u64,
    len: u64,
    mut read_at: impl FnMut(&mut [u8], u64) -> Result<usize, E>,
) -> Result<(), E> {
    READ_BUF.with(|b| {
        let mut buf = b.borrow_mut();
        buf.resize(1 << 20, 0);
        let mut at = 0;
        while at < len {
            let n = (len - at).min(buf.len() as u64) as usize;
            match read_at(&mut buf[..n], offset + at)? {
                0 => break,
                got => at += got as u64,
            }
        }
        Ok(())
    })
}

/// How the engine treats buffered writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Delayed allocation (ext4's default).
    Delalloc,
    /// Every write allocated at once (`-o nodelalloc`).
    NoDelalloc,
}

impl WriteMode {
    /// A buffered write to the engine in this mode, in the kernel
    /// backends' system calls ([`write_calls`]).
    pub(crate) fn write(
        self,
        fs: &mballoc_fs::Fs,
        f: mballoc_fs::FileId,
        offset: u64,
        len: u64,
    ) -> mballoc_fs::Result<()> {
        write_calls(offset, len, |at, n| match self {
            WriteMode::Delalloc => fs.write(f, at, n),
            WriteMode::NoDelalloc => fs.write_through(f, at, n),
        })
    }
}
