//! The engine as a backend: mballoc-fs in this process, in memory, or a
//! persistent volume (mballoc-vol) whose writes carry data and whose
//! fsyncs go through the journal.

use super::slots::Slots;
use super::{AllocCounters, OpError, Target, WriteMode};
use crate::error::LabError;
use crate::metrics::{FileLayout, FreeSpace, Record};
use crate::workload::{Op, OpKind};
use mballoc_fs::{FallocateMode, FileId, Fs};
use std::path::PathBuf;
use std::sync::Arc;

/// The engine as a backend: in memory, or a persistent volume whose
/// writes carry data and whose fsyncs go through the journal.
pub struct EngineTarget {
    engine: Engine,
    files: Slots,
    names: Vec<String>,
    write_mode: WriteMode,
}

enum Engine {
    Memory(Arc<Fs>),
    Persistent { vol: std::sync::Arc<mballoc_vol::Volume>, _file: VolumeFile },
}

/// A volume file removed when the target goes.
pub struct VolumeFile {
    path: PathBuf,
    _guard: crate::cleanup::Guard,
}

impl VolumeFile {
    /// The volume file at `path`, removed on drop (or when the run is
    /// interrupted).
    pub fn new(path: PathBuf) -> VolumeFile {
        let guard = crate::cleanup::register(crate::cleanup::Resource::File(path.clone()));
        VolumeFile { path, _guard: guard }
    }

    /// The file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for VolumeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The free runs of an engine's allocator, as GETFSMAP would list them.
pub(crate) fn free_space_of(a: mballoc_fs::AllocatorView<'_>) -> FreeSpace {
    let g = a.geometry();
    let mut runs = Vec::new();
    a.for_each_free_extent(|_, len| runs.push(len));
    FreeSpace { block_size: g.block_size(), total_blocks: g.total_blocks(), free_blocks: a.free_blocks(), runs }
}

/// The file operations a workload needs, on the in-memory engine or on a
/// persistent volume.
trait FileOps {
    fn create(&self) -> Result<u64, OpError>;
    /// Open an existing file again and empty it (`creat` on an existing name).
    fn reopen_empty(&self, f: FileId) -> Result<(), OpError>;
    /// Open an existing file as it is.
    fn open(&self, f: FileId) -> Result<(), OpError>;
    /// Read `len` bytes at `offset` (the engine in memory looks up the
    /// mapping: it holds no data).
    fn read(&self, f: FileId, offset: u64, len: u64) -> Result<(), OpError>;
    fn fallocate(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<(), OpError>;
    fn write(&self, f: FileId, offset: u64, len: u64, mode: WriteMode) -> Result<(), OpError>;
    fn truncate(&self, f: FileId, size: u64) -> Result<(), OpError>;
    fn punch_hole(&self, f: FileId, offset: u64, len: u64) -> Result<(), OpError>;
    fn fsync(&self, f: FileId) -> Result<(), OpError>;
    /// Write one file's delayed data back now (no commit).
    fn writeback(&self, f: FileId) -> Result<(), OpError>;
    fn close(&self, f: FileId) -> Result<(), OpError>;
    fn unlink(&self, f: FileId) -> Result<(), OpError>;
}

impl FileOps for Fs {
    fn create(&self) -> Result<u64, OpError> {
        Ok(Fs::create(self)?.0)
    }
    fn reopen_empty(&self, f: FileId) -> Result<(), OpError> {
        Fs::open(self, f)?;
        Ok(Fs::truncate(self, f, 0)?)
    }
    fn open(&self, f: FileId) -> Result<(), OpError> {
        Ok(Fs::open(self, f)?)
    }
    fn read(&self, f: FileId, offset: u64, len: u64) -> Result<(), OpError> {
        let bs = self.block_size();
        Fs::lookup(self, f, offset / bs, (offset + len).div_ceil(bs))?;
        Ok(())
    }
    fn fallocate(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<(), OpError> {
        Ok(Fs::fallocate(self, f, offset, len, mode)?)
    }
    /// Writes carry no data: the engine only places blocks. Without
    /// delayed allocation each block is its own request, as in ext4.
    fn write(&self, f: FileId, offset: u64, len: u64, mode: WriteMode) -> Result<(), OpError> {
        Ok(mode.write(self, f, offset, len)?)
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
    fn writeback(&self, f: FileId) -> Result<(), OpError> {
        Ok(Fs::writeback(self, f)?)
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
    fn open(&self, f: FileId) -> Result<(), OpError> {
        Ok(self.open_file(f)?)
    }
    fn read(&self, f: FileId, offset: u64, len: u64) -> Result<(), OpError> {
        super::read_range(offset, len, |buf, at| mballoc_vol::Volume::read(self, f, at, buf))?;
        Ok(())
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
    fn writeback(&self, f: FileId) -> Result<(), OpError> {
        Ok(mballoc_vol::Volume::writeback(self, f)?)
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
        EngineTarget { engine: Engine::Memory(Arc::new(fs)), files: Slots::new(names.len()), names, write_mode }
    }

    /// A persistent volume kept in `file` (removed when the target goes).
    pub fn persistent(vol: std::sync::Arc<mballoc_vol::Volume>, file: VolumeFile, names: Vec<String>) -> Self {
        EngineTarget {
            engine: Engine::Persistent { vol, _file: file },
            files: Slots::new(names.len()),
            names,
            write_mode: WriteMode::Delalloc,
        }
    }

    /// The engine underneath (in memory, or the persistent volume's),
    /// read-only.
    pub fn fs(&self) -> mballoc_fs::FsView<'_> {
        match &self.engine {
            Engine::Memory(fs) => fs.view(),
            Engine::Persistent { vol, .. } => vol.fs(),
        }
    }

    /// One operation on whichever engine this target holds.
    fn apply_to(&self, files: &impl FileOps, op: &Op) -> Result<(), OpError> {
        let id = || self.files.open_id(op.file);
        match op.kind {
            OpKind::Create => match self.files.named(op.file) {
                None => {
                    let id = files.create()?;
                    let d = self.files.created(op.file, id)?;
                    self.dropped(files, d)?
                }
                Some(f) => {
                    if self.files.open(op.file)? {
                        files.reopen_empty(f)?;
                    } else {
                        files.truncate(f, 0)?;
                    }
                }
            },
            OpKind::Open => {
                let f = self
                    .files
                    .named(op.file)
                    .ok_or_else(|| OpError::Failed(format!("{} does not exist", self.name(op.file))))?;
                if self.files.open(op.file)? {
                    files.open(f)?;
                }
            }
            OpKind::Fallocate => files.fallocate(id()?, op.offset, op.len, FallocateMode::ExtendSize)?,
            OpKind::FallocateKeepSize => files.fallocate(id()?, op.offset, op.len, FallocateMode::KeepSize)?,
            OpKind::Write => files.write(id()?, op.offset, op.len, self.write_mode)?,
            OpKind::Read => files.read(id()?, op.offset, op.len)?,
            OpKind::Truncate => files.truncate(id()?, op.offset)?,
            OpKind::Punch => files.punch_hole(id()?, op.offset, op.len)?,
            OpKind::Fsync => files.fsync(id()?)?,
            OpKind::Close => self.dropped(files, self.files.close(op.file)?)?,
            OpKind::Unlink => self.dropped(files, self.files.unlink(op.file)?)?,
            OpKind::Rename => {
                // ext4_rename over an existing file allocates the renamed
                // file's delayed blocks first (auto_da_alloc); the kernel
                // profile does too.
                let replaces = self.files.named(op.to).is_some_and(|old| Some(old) != self.files.named(op.file));
                if replaces && self.fs().config().behaviour.close == mballoc_fs::CloseBehaviour::Ext4 {
                    files.writeback(id()?)?;
                }
                self.dropped(files, self.files.rename(op.file, op.to)?)?
            }
            OpKind::Link => self.files.link(op.file, op.to)?,
            // The engine keeps no directories: the names are the slots'.
            OpKind::Mkdir => {}
            OpKind::Wait | OpKind::Signal => {
                return Err(OpError::Failed(format!("{} is the runner's, not a backend's", op.kind.name())))
            }
        }
        Ok(())
    }

    /// Close the handles and remove the files a change let go of.
    fn dropped(&self, files: &impl FileOps, d: super::slots::Dropped) -> Result<(), OpError> {
        for f in d.close {
            files.close(f)?;
        }
        for f in d.unlink {
            files.unlink(f)?;
        }
        Ok(())
    }

    fn name(&self, slot: u32) -> &str {
        self.names.get(slot as usize).map_or("?", String::as_str)
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
        // Without a log an in-memory sync cannot fail; a failed sync of a
        // persistent volume turns it read-only, and the next operation
        // reports it.
        let _ = match &self.engine {
            Engine::Memory(fs) => fs.sync().map_err(OpError::from),
            Engine::Persistent { vol, .. } => vol.sync().map_err(OpError::from),
        };
    }

    fn available_bytes(&self) -> u64 {
        self.fs().available_blocks() * self.fs().block_size()
    }

    fn layouts(&self) -> Result<Vec<FileLayout>, LabError> {
        let mut out = Vec::new();
        for (slot, id) in self.files.files() {
            let records = self
                .fs()
                .extents(id)?
                .into_iter()
                .map(|e| Record { logical: e.logical, physical: e.physical, len: e.len.into() })
                .collect();
            out.push(FileLayout { name: self.names[slot].clone(), records });
        }
        Ok(out)
    }

    fn free_space(&self) -> Result<FreeSpace, LabError> {
        Ok(free_space_of(self.fs().allocator()))
    }

    /// The allocator's own statistics already count every request the
    /// file layer served from a preallocation (as ext4's `collect_stats`
    /// does on releasing the context), so nothing is added here.
    fn counters(&self) -> Option<AllocCounters> {
        Some(AllocCounters::from_stats(&self.fs().allocator().stats()))
    }

    fn mb_stats_text(&self) -> Option<String> {
        Some(self.fs().allocator().mb_stats_report())
    }

    fn moves_data(&self) -> bool {
        !matches!(self.engine, Engine::Memory(_))
    }

    fn engine_stats(&self) -> Option<mballoc_fs::FsStats> {
        Some(self.fs().stats())
    }

    fn blocks_per_flex(&self) -> u64 {
        // mke2fs's default flex_bg of 16 groups.
        u64::from(self.fs().allocator().geometry().blocks_per_group()) * 16
    }
}
