//! Backends: what a workload runs on. The engine is mballoc-fs in this
//! process; the kernel backends are loop-mounted ext4, XFS and btrfs images
//! driven with system calls. Both answer the same questions afterwards
//! (file layouts, free space, allocator counters), so every metric is
//! computed the same way.

use crate::kernel::{KernelFs, Mount};
use crate::metrics::{FileLayout, FreeSpace, Record};
use crate::sys::{self, FallocMode};
use crate::workload::{Op, OpKind};
use mballoc::MbStats;
use mballoc_fs::{FallocateMode, FileId, Fs, FsError};
use parking_lot::RwLock;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use thiserror::Error;

/// Which backend a row ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Engine,
    Kernel(KernelFs),
}

impl BackendKind {
    /// All backends, in report order.
    pub const ALL: [BackendKind; 4] = [
        BackendKind::Engine,
        BackendKind::Kernel(KernelFs::Ext4),
        BackendKind::Kernel(KernelFs::Xfs),
        BackendKind::Kernel(KernelFs::Btrfs),
    ];

    /// The name in `--backends` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Engine => "engine",
            BackendKind::Kernel(k) => k.name(),
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
    NoSpace,
    #[error("{0}")]
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

/// The allocator's counters, from the engine or from ext4's mb_stats file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocCounters {
    pub reqs: u64,
    pub extents_scanned: u64,
    pub groups_scanned: u64,
    pub goal_hits: u64,
    pub breaks: u64,
    /// Hits per pass: p2-aligned, goal-fast, best-avail, goal-slow, any-free.
    pub cr_hits: [u64; 5],
}

impl AllocCounters {
    fn from_stats(s: &MbStats) -> Self {
        AllocCounters {
            reqs: s.reqs,
            extents_scanned: s.extents_scanned,
            groups_scanned: s.groups_scanned,
            goal_hits: s.goal_hits,
            breaks: s.breaks,
            cr_hits: s.cr_hits,
        }
    }

    /// Parse /proc/fs/ext4/DEV/mb_stats (6.5+ layouts; older kernels name
    /// the passes cr0..cr3 and have no best-avail pass).
    pub fn parse_mb_stats(text: &str) -> Option<Self> {
        let mut c = AllocCounters::default();
        let mut pass: Option<usize> = None;
        let mut seen = false;
        for line in text.lines() {
            let t = line.trim();
            if let Some(name) = t.strip_suffix("_stats:") {
                pass = match name {
                    "cr_p2_aligned" | "cr0" => Some(0),
                    "cr_goal_fast" | "cr1" => Some(1),
                    "cr_best_avail" => Some(2),
                    "cr_goal_slow" | "cr2" => Some(3),
                    "cr_any_free" | "cr3" => Some(4),
                    _ => None,
                };
                continue;
            }
            let Some((key, value)) = t.split_once(':') else { continue };
            let Ok(v) = value.trim().split('/').next().unwrap_or("").trim().parse::<u64>() else { continue };
            let indented = line.starts_with("\t\t");
            match (key, pass, indented) {
                ("hits", Some(p), true) => c.cr_hits[p] = v,
                ("reqs", ..) => {
                    c.reqs = v;
                    seen = true;
                }
                ("groups_scanned", _, false) => c.groups_scanned = v,
                ("extents_scanned", _, false) => {
                    c.extents_scanned = v;
                    pass = None;
                }
                ("goal_hits", ..) => c.goal_hits = v,
                ("breaks", ..) => c.breaks = v,
                _ => {}
            }
        }
        seen.then_some(c)
    }

    /// What happened between `before` and `self`.
    pub fn since(&self, before: &AllocCounters) -> AllocCounters {
        let mut cr_hits = [0; 5];
        for (i, h) in cr_hits.iter_mut().enumerate() {
            *h = self.cr_hits[i].saturating_sub(before.cr_hits[i]);
        }
        AllocCounters {
            reqs: self.reqs.saturating_sub(before.reqs),
            extents_scanned: self.extents_scanned.saturating_sub(before.extents_scanned),
            groups_scanned: self.groups_scanned.saturating_sub(before.groups_scanned),
            goal_hits: self.goal_hits.saturating_sub(before.goal_hits),
            breaks: self.breaks.saturating_sub(before.breaks),
            cr_hits,
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
    fn layouts(&self) -> Result<Vec<FileLayout>, String>;
    /// Free space, or why it cannot be known.
    fn free_space(&self) -> Result<FreeSpace, String>;
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
}

/// How the engine treats buffered writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Delayed allocation (ext4's default).
    Delalloc,
    /// Every write allocated at once (`-o nodelalloc`).
    NoDelalloc,
}

/// The engine as a backend: in memory, or a persistent volume whose
/// writes carry data and whose fsyncs go through the journal.
pub struct EngineTarget {
    engine: Engine,
    files: Vec<AtomicU64>,
    names: Vec<String>,
    write_mode: WriteMode,
}

enum Engine {
    Memory(Arc<Fs>),
    Persistent { vol: Box<mballoc_vol::Volume>, _file: VolumeFile },
}

/// A volume file removed when the target goes.
pub struct VolumeFile(pub PathBuf);

impl Drop for VolumeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The file operations a workload needs, on the in-memory engine or on a
/// persistent volume.
trait FileOps {
    fn create(&self) -> Result<u64, OpError>;
    /// Open an existing file again and empty it (`creat` on an existing name).
    fn reopen_empty(&self, f: FileId) -> Result<(), OpError>;
    fn fallocate(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<(), OpError>;
    fn write(&self, f: FileId, offset: u64, len: u64, mode: WriteMode) -> Result<(), OpError>;
    fn truncate(&self, f: FileId, size: u64) -> Result<(), OpError>;
    fn punch_hole(&self, f: FileId, offset: u64, len: u64) -> Result<(), OpError>;
    fn fsync(&self, f: FileId) -> Result<(), OpError>;
    fn close(&self, f: FileId) -> Result<(), OpError>;
    fn unlink(&self, f: FileId) -> Result<(), OpError>;
}

impl FileOps for Fs {
    fn create(&self) -> Result<u64, OpError> {
        Ok(Fs::create(self)?.0)
    }
    fn reopen_empty(&self, f: FileId) -> Result<(), OpError> {
        self.open(f)?;
        Ok(Fs::truncate(self, f, 0)?)
    }
    fn fallocate(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<(), OpError> {
        Ok(Fs::fallocate(self, f, offset, len, mode)?)
    }
    /// Writes carry no data: the engine only places blocks.
    fn write(&self, f: FileId, offset: u64, len: u64, mode: WriteMode) -> Result<(), OpError> {
        Fs::write(self, f, offset, len)?;
        if mode == WriteMode::NoDelalloc {
            self.writeback(f)?;
        }
        Ok(())
    }
    fn truncate(&self, f: FileId, size: u64) -> Result<(), OpError> {
        Ok(Fs::truncate(self, f, size)?)
    }
    fn punch_hole(&self, f: FileId, offset: u64, len: u64) -> Result<(), OpError> {
        Ok(Fs::punch_hole(self, f, offset, len)?)
    }
    fn fsync(&self, f: FileId) -> Result<(), OpError> {
        Ok(Fs::fsync(self, f)?)
    }
    fn close(&self, f: FileId) -> Result<(), OpError> {
        Ok(Fs::close(self, f)?)
    }
    fn unlink(&self, f: FileId) -> Result<(), OpError> {
        Ok(Fs::unlink(self, f)?)
    }
}

impl FileOps for mballoc_vol::Volume {
    fn create(&self) -> Result<u64, OpError> {
        Ok(mballoc_vol::Volume::create(self)?.0)
    }
    fn reopen_empty(&self, f: FileId) -> Result<(), OpError> {
        self.open_file(f)?;
        Ok(mballoc_vol::Volume::truncate(self, f, 0)?)
    }
    fn fallocate(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<(), OpError> {
        Ok(mballoc_vol::Volume::fallocate(self, f, offset, len, mode)?)
    }
    /// Writes carry a fixed pattern through the cache (always delayed).
    fn write(&self, f: FileId, offset: u64, len: u64, _: WriteMode) -> Result<(), OpError> {
        let mut at = 0;
        while at < len {
            let n = (len - at).min(PATTERN.len() as u64);
            mballoc_vol::Volume::write(self, f, offset + at, &PATTERN[..n as usize])?;
            at += n;
        }
        Ok(())
    }
    fn truncate(&self, f: FileId, size: u64) -> Result<(), OpError> {
        Ok(mballoc_vol::Volume::truncate(self, f, size)?)
    }
    fn punch_hole(&self, f: FileId, offset: u64, len: u64) -> Result<(), OpError> {
        Ok(mballoc_vol::Volume::punch_hole(self, f, offset, len)?)
    }
    fn fsync(&self, f: FileId) -> Result<(), OpError> {
        Ok(mballoc_vol::Volume::fsync(self, f)?)
    }
    fn close(&self, f: FileId) -> Result<(), OpError> {
        Ok(mballoc_vol::Volume::close(self, f)?)
    }
    fn unlink(&self, f: FileId) -> Result<(), OpError> {
        Ok(mballoc_vol::Volume::unlink(self, f)?)
    }
}

/// What persistent writes carry.
static PATTERN: [u8; 1 << 16] = [0xA5; 1 << 16];

impl EngineTarget {
    /// `names` are the workload's files, by slot.
    pub fn new(fs: Fs, names: Vec<String>, write_mode: WriteMode) -> Self {
        EngineTarget {
            engine: Engine::Memory(Arc::new(fs)),
            files: names.iter().map(|_| AtomicU64::new(0)).collect(),
            names,
            write_mode,
        }
    }

    /// A persistent volume kept in `file` (removed when the target goes).
    pub fn persistent(vol: mballoc_vol::Volume, file: VolumeFile, names: Vec<String>) -> Self {
        EngineTarget {
            engine: Engine::Persistent { vol: Box::new(vol), _file: file },
            files: names.iter().map(|_| AtomicU64::new(0)).collect(),
            names,
            write_mode: WriteMode::Delalloc,
        }
    }

    pub fn fs(&self) -> &Fs {
        match &self.engine {
            Engine::Memory(fs) => fs,
            Engine::Persistent { vol, .. } => vol.fs(),
        }
    }

    /// One operation on whichever engine this target holds.
    fn apply_to(&self, files: &impl FileOps, op: &Op) -> Result<(), OpError> {
        match op.kind {
            OpKind::Create => {
                let slot = self.files.get(op.file as usize).ok_or_else(|| OpError::Failed("no such slot".into()))?;
                match slot.load(Ordering::Acquire) {
                    0 => slot.store(files.create()?, Ordering::Release),
                    id => files.reopen_empty(FileId(id))?,
                }
            }
            OpKind::Fallocate => files.fallocate(self.id(op.file)?, op.offset, op.len, FallocateMode::ExtendSize)?,
            OpKind::FallocateKeepSize => {
                files.fallocate(self.id(op.file)?, op.offset, op.len, FallocateMode::KeepSize)?
            }
            OpKind::Write => files.write(self.id(op.file)?, op.offset, op.len, self.write_mode)?,
            OpKind::Truncate => files.truncate(self.id(op.file)?, op.offset)?,
            OpKind::Punch => files.punch_hole(self.id(op.file)?, op.offset, op.len)?,
            OpKind::Fsync => files.fsync(self.id(op.file)?)?,
            OpKind::Close => files.close(self.id(op.file)?)?,
            OpKind::Unlink => {
                files.unlink(self.id(op.file)?)?;
                self.files[op.file as usize].store(0, Ordering::Release);
            }
        }
        Ok(())
    }

    fn id(&self, slot: u32) -> Result<FileId, OpError> {
        match self.files.get(slot as usize).map(|a| a.load(Ordering::Acquire)) {
            Some(0) | None => Err(OpError::Failed(format!("file slot {slot} is not open"))),
            Some(id) => Ok(FileId(id)),
        }
    }
}

impl Target for EngineTarget {
    fn apply(&self, op: &Op) -> Result<(), OpError> {
        match &self.engine {
            Engine::Memory(fs) => self.apply_to(&**fs, op),
            Engine::Persistent { vol, .. } => self.apply_to(&**vol, op),
        }
    }

    fn sync(&self) {
        match &self.engine {
            Engine::Memory(fs) => fs.sync(),
            // A failed sync turns the volume read-only; the next operation
            // reports it.
            Engine::Persistent { vol, .. } => vol.sync().unwrap_or(()),
        }
    }

    fn available_bytes(&self) -> u64 {
        self.fs().available_blocks() * self.fs().block_size()
    }

    fn layouts(&self) -> Result<Vec<FileLayout>, String> {
        let mut out = Vec::new();
        for (slot, id) in self.files.iter().enumerate() {
            let id = id.load(Ordering::Acquire);
            if id == 0 {
                continue;
            }
            let records = self
                .fs()
                .extents(FileId(id))
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|e| Record { logical: e.logical, physical: e.physical, len: e.len.into() })
                .collect();
            out.push(FileLayout { name: self.names[slot].clone(), records });
        }
        Ok(out)
    }

    fn free_space(&self) -> Result<FreeSpace, String> {
        let a = self.fs().allocator();
        let g = a.geometry();
        let mut runs = Vec::new();
        a.for_each_free_extent(|_, len| runs.push(len));
        Ok(FreeSpace { block_size: g.block_size(), total_blocks: g.total_blocks(), free_blocks: a.free_blocks(), runs })
    }

    fn counters(&self) -> Option<AllocCounters> {
        Some(AllocCounters::from_stats(&self.fs().allocator().stats()))
    }

    fn mb_stats_text(&self) -> Option<String> {
        Some(self.fs().allocator().mb_stats_report())
    }

    fn engine_stats(&self) -> Option<mballoc_fs::FsStats> {
        Some(self.fs().stats())
    }

    fn blocks_per_flex(&self) -> u64 {
        // mke2fs's default flex_bg of 16 groups.
        u64::from(self.fs().allocator().geometry().blocks_per_group()) * 16
    }
}

/// A loop-mounted kernel file system as a backend.
pub struct KernelTarget {
    // Fields drop in order: the open files before the mount.
    files: Vec<RwLock<Option<Arc<File>>>>,
    root: PathBuf,
    names: Vec<String>,
    block_size: u32,
    zeros: Vec<u8>,
    mount: Mount,
}

impl KernelTarget {
    /// Files live in a directory of their own under the mount.
    pub fn new(mount: Mount, names: Vec<String>, block_size: u32) -> Result<Self, String> {
        let root = mount.dir().join("lab");
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        if mount.fs() == KernelFs::Ext4 {
            // Statistics are off by default; the lab reads them.
            mount.set_ext4_knob("mb_stats", "1")?;
        }
        Ok(KernelTarget {
            mount,
            root,
            files: names.iter().map(|_| RwLock::new(None)).collect(),
            names,
            block_size,
            zeros: vec![0; 1 << 20],
        })
    }

    pub fn mount(&self) -> &Mount {
        &self.mount
    }

    /// Unmount, keeping the image.
    pub fn unmount(self) -> Result<crate::kernel::Image, String> {
        drop(self.files);
        self.mount.unmount()
    }

    fn file(&self, slot: u32) -> Result<Arc<File>, OpError> {
        self.files
            .get(slot as usize)
            .and_then(|f| f.read().clone())
            .ok_or_else(|| OpError::Failed(format!("file {} is not open", self.name(slot))))
    }

    fn name(&self, slot: u32) -> &str {
        self.names.get(slot as usize).map_or("?", String::as_str)
    }

    fn root_dir(&self) -> Result<File, String> {
        File::open(&self.root).map_err(|e| format!("{}: {e}", self.root.display()))
    }
}

impl Target for KernelTarget {
    fn apply(&self, op: &Op) -> Result<(), OpError> {
        match op.kind {
            OpKind::Create => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(self.root.join(self.name(op.file)))?;
                let slot = self.files.get(op.file as usize).ok_or_else(|| OpError::Failed("no such slot".into()))?;
                *slot.write() = Some(Arc::new(f));
            }
            OpKind::Fallocate => sys::fallocate(&*self.file(op.file)?, FallocMode::ExtendSize, op.offset, op.len)?,
            OpKind::FallocateKeepSize => {
                sys::fallocate(&*self.file(op.file)?, FallocMode::KeepSize, op.offset, op.len)?
            }
            OpKind::Punch => sys::fallocate(&*self.file(op.file)?, FallocMode::PunchHole, op.offset, op.len)?,
            OpKind::Write => {
                let f = self.file(op.file)?;
                let mut at = 0;
                while at < op.len {
                    let n = (op.len - at).min(self.zeros.len() as u64) as usize;
                    f.write_all_at(&self.zeros[..n], op.offset + at)?;
                    at += n as u64;
                }
            }
            OpKind::Truncate => self.file(op.file)?.set_len(op.offset)?,
            OpKind::Fsync => self.file(op.file)?.sync_all()?,
            OpKind::Close => {
                if let Some(slot) = self.files.get(op.file as usize) {
                    *slot.write() = None;
                }
            }
            OpKind::Unlink => std::fs::remove_file(self.root.join(self.name(op.file)))?,
        }
        Ok(())
    }

    fn sync(&self) {
        if let Ok(d) = self.root_dir() {
            // syncfs: every file of this file system, and its journal.
            // SAFETY: the descriptor is open for the duration of the call.
            unsafe { libc::syncfs(std::os::unix::io::AsRawFd::as_raw_fd(&d)) };
        }
    }

    fn available_bytes(&self) -> u64 {
        self.root_dir().ok().and_then(|d| sys::statvfs(&d).ok()).map_or(0, |(free, _)| free)
    }

    fn layouts(&self) -> Result<Vec<FileLayout>, String> {
        let bs = u64::from(self.block_size);
        let mut out = Vec::new();
        for name in &self.names {
            let path = self.root.join(name);
            let f = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("{}: {e}", path.display())),
            };
            let records = sys::fiemap(&f)
                .map_err(|e| format!("FIEMAP {}: {e}", path.display()))?
                .into_iter()
                .map(|r| Record { logical: r.logical / bs, physical: r.physical / bs, len: r.len.div_ceil(bs) })
                .collect();
            out.push(FileLayout { name: name.clone(), records });
        }
        Ok(out)
    }

    fn free_space(&self) -> Result<FreeSpace, String> {
        let bs = u64::from(self.block_size);
        let recs = sys::getfsmap(&self.root_dir()?)
            .map_err(|e| format!("{} gives no free-space map (GETFSMAP: {e})", self.mount.fs().name()))?;
        let mut runs: Vec<u64> = Vec::new();
        let mut end: Option<u64> = None;
        for r in recs.iter().filter(|r| r.is_free()) {
            let (start, len) = (r.physical / bs, r.len / bs);
            match (end, runs.last_mut()) {
                // e2freefrag counts maximal runs: records that touch merge.
                (Some(e), Some(last)) if e == start => *last += len,
                _ => runs.push(len),
            }
            end = Some(start + len);
        }
        let free_blocks = runs.iter().sum();
        Ok(FreeSpace { block_size: self.block_size, total_blocks: self.mount.bytes() / bs, free_blocks, runs })
    }

    fn counters(&self) -> Option<AllocCounters> {
        (self.mount.fs() == KernelFs::Ext4)
            .then(|| self.mount.ext4_proc("mb_stats").ok())
            .flatten()
            .and_then(|t| AllocCounters::parse_mb_stats(&t))
    }

    fn mb_stats_text(&self) -> Option<String> {
        (self.mount.fs() == KernelFs::Ext4).then(|| self.mount.ext4_proc("mb_stats").ok()).flatten()
    }

    fn blocks_per_flex(&self) -> u64 {
        // mke2fs's defaults: 8 × block size blocks per group, flex_bg 16;
        // the same yardstick for XFS and btrfs.
        u64::from(self.block_size) * 8 * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB_STATS_617: &str = "mballoc:\n\treqs: 10\n\tsuccess: 9\n\tgroups_scanned: 4\n\tcr_p2_aligned_stats:\n\t\thits: 3\n\t\tgroups_considered: 1\n\t\textents_scanned: 2\n\t\tuseless_loops: 0\n\tcr_goal_fast_stats:\n\t\thits: 1\n\t\tgroups_considered: 1\n\t\textents_scanned: 0\n\t\tuseless_loops: 0\n\tcr_best_avail_stats:\n\t\thits: 2\n\t\tgroups_considered: 1\n\t\textents_scanned: 0\n\t\tuseless_loops: 0\n\tcr_goal_slow_stats:\n\t\thits: 0\n\t\tgroups_considered: 1\n\t\textents_scanned: 0\n\t\tuseless_loops: 0\n\tcr_any_free_stats:\n\t\thits: 4\n\t\tgroups_considered: 1\n\t\textents_scanned: 0\n\t\tuseless_loops: 0\n\textents_scanned: 77\n\t\tgoal_hits: 5\n\t\tstream_goal_hits: 0\n\t\tlen_goal_hits: 0\n\t\t2^n_hits: 1\n\t\tbreaks: 6\n\t\tlost: 0\n\tbuddies_generated: 3/64\n";

    #[test]
    fn parses_the_kernels_mb_stats() {
        let c = AllocCounters::parse_mb_stats(MB_STATS_617).unwrap();
        assert_eq!(c.reqs, 10);
        assert_eq!(c.groups_scanned, 4);
        assert_eq!(c.extents_scanned, 77);
        assert_eq!(c.cr_hits, [3, 1, 2, 0, 4]);
        assert_eq!((c.goal_hits, c.breaks), (5, 6));
        assert!(AllocCounters::parse_mb_stats("mballoc:\n\tmb stats collection turned off.\n").is_none());
    }

    #[test]
    fn parses_our_own_mb_stats() {
        let a = mballoc::Allocator::builder(mballoc::Geometry::new(4096, 1 << 16).unwrap())
            .tunables(mballoc::Tunables::with_stats())
            .build()
            .unwrap();
        for _ in 0..5 {
            a.allocate(&mballoc::AllocRequest::new(8)).unwrap();
        }
        let c = AllocCounters::parse_mb_stats(&a.mb_stats_report()).unwrap();
        assert_eq!(c, AllocCounters::from_stats(&a.stats()));
    }
}
