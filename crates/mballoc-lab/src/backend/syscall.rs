//! Files driven by system calls in a directory of their own: what the
//! kernel backends and the mounted engine share. Each workload file slot
//! holds its open file between operations, as a program would.

use super::OpError;
use crate::error::LabError;
use crate::sys::{self, FallocMode};
use crate::workload::{Op, OpKind};
use parking_lot::RwLock;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A workload's files under `root`, by slot.
pub(crate) struct SyscallFiles {
    files: Vec<RwLock<Option<Arc<File>>>>,
    root: PathBuf,
    names: Vec<String>,
    data: Vec<u8>,
}

impl SyscallFiles {
    /// The files of `names` in `root` (made if missing).
    pub(crate) fn new(root: PathBuf, names: Vec<String>) -> Result<Self, LabError> {
        let f = Self::at(root, names);
        f.make_root()?;
        Ok(f)
    }

    /// The files of `names` in `root`, which [`SyscallFiles::make_root`]
    /// makes later.
    pub(crate) fn at(root: PathBuf, names: Vec<String>) -> Self {
        SyscallFiles {
            files: names.iter().map(|_| RwLock::new(None)).collect(),
            root,
            names,
            data: super::write_buffer(),
        }
    }

    /// Make the directory if it is missing.
    pub(crate) fn make_root(&self) -> Result<(), LabError> {
        std::fs::create_dir_all(&self.root).map_err(|e| LabError::io(self.root.display().to_string(), e))
    }

    /// The directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The slots' names.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
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

    pub(crate) fn root_dir(&self) -> Result<File, LabError> {
        File::open(&self.root).map_err(|e| LabError::io(self.root.display().to_string(), e))
    }

    /// Close every open file; returns the slots that were open.
    pub(crate) fn close_all(&self) -> Vec<usize> {
        let mut open = Vec::new();
        for (i, f) in self.files.iter().enumerate() {
            if f.write().take().is_some() {
                open.push(i);
            }
        }
        open
    }

    /// Open `slots` again, as they were (no truncation).
    pub(crate) fn reopen(&self, slots: &[usize]) -> Result<(), LabError> {
        for &i in slots {
            let path = self.path(i as u32);
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| LabError::io(path.display().to_string(), e))?;
            *self.files[i].write() = Some(Arc::new(f));
        }
        Ok(())
    }

    fn path(&self, slot: u32) -> PathBuf {
        self.root.join(self.name(slot))
    }

    /// Make the directories above `slot`'s path (a job's `dir`, a rename's
    /// target), one level at a time below the root and never the root
    /// itself: a root that is gone (a volume unmounted by an interrupt)
    /// must fail the operation, not be made again on the bare mount point.
    fn parent_of(&self, slot: u32) -> Result<(), OpError> {
        self.make_dirs(Path::new(self.name(slot)).parent())
    }

    fn make_dirs(&self, rel: Option<&Path>) -> Result<(), OpError> {
        let mut at = self.root.clone();
        for part in rel.into_iter().flat_map(Path::components) {
            at.push(part);
            match std::fs::create_dir(&at) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }

    fn handle(&self, slot: u32) -> Result<&RwLock<Option<Arc<File>>>, OpError> {
        self.files.get(slot as usize).ok_or_else(|| OpError::Failed(format!("no file slot {slot}")))
    }

    pub(crate) fn apply(&self, op: &Op) -> Result<(), OpError> {
        match op.kind {
            OpKind::Create => {
                self.parent_of(op.file)?;
                let f =
                    OpenOptions::new().read(true).write(true).create(true).truncate(true).open(self.path(op.file))?;
                *self.handle(op.file)?.write() = Some(Arc::new(f));
            }
            OpKind::Open => {
                let f = OpenOptions::new().read(true).write(true).open(self.path(op.file))?;
                *self.handle(op.file)?.write() = Some(Arc::new(f));
            }
            OpKind::Fallocate => sys::fallocate(&*self.file(op.file)?, FallocMode::ExtendSize, op.offset, op.len)?,
            OpKind::FallocateKeepSize => {
                sys::fallocate(&*self.file(op.file)?, FallocMode::KeepSize, op.offset, op.len)?
            }
            OpKind::Punch => sys::fallocate(&*self.file(op.file)?, FallocMode::PunchHole, op.offset, op.len)?,
            OpKind::Write => {
                let f = self.file(op.file)?;
                let data = &self.data;
                super::write_calls(op.offset, op.len, |at, n| f.write_all_at(&data[..n as usize], at))?;
            }
            OpKind::Read => {
                let f = self.file(op.file)?;
                super::read_range(op.offset, op.len, |buf, at| f.read_at(buf, at))?;
            }
            OpKind::Truncate => self.file(op.file)?.set_len(op.offset)?,
            OpKind::Fsync => self.file(op.file)?.sync_all()?,
            OpKind::Close => {
                if let Some(slot) = self.files.get(op.file as usize) {
                    *slot.write() = None;
                }
            }
            OpKind::Unlink => std::fs::remove_file(self.path(op.file))?,
            OpKind::Mkdir => self.make_dirs(Some(Path::new(self.name(op.file))))?,
            OpKind::Rename => {
                self.parent_of(op.to)?;
                std::fs::rename(self.path(op.file), self.path(op.to))?;
                // The source keeps its handle (a descriptor outlives a
                // rename); one the target held on the file it replaced is
                // closed, as the slot now names another file.
                if op.to != op.file {
                    *self.handle(op.to)?.write() = None;
                }
            }
            OpKind::Link => {
                self.parent_of(op.to)?;
                std::fs::hard_link(self.path(op.file), self.path(op.to))?;
            }
            OpKind::Wait | OpKind::Signal => {
                return Err(OpError::Failed(format!("{} is the runner's, not a backend's", op.kind.name())))
            }
        }
        Ok(())
    }

    pub(crate) fn sync(&self) {
        if let Ok(d) = self.root_dir() {
            // Every file of this file system, and its journal.
            let _ = sys::syncfs(&d);
        }
    }

    pub(crate) fn available_bytes(&self) -> u64 {
        self.root_dir().ok().and_then(|d| sys::statvfs(&d).ok()).map_or(0, |(free, _)| free)
    }
}
