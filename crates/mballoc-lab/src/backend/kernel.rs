//! A loop-mounted kernel file system as a backend, driven with system
//! calls: files in a directory of their own, FIEMAP for layouts, GETFSMAP
//! for free space, ext4's mb_stats for the allocator's counters.

use super::{AllocCounters, OpError, Target};
use crate::error::LabError;
use crate::metrics::{FileLayout, FreeSpace, Record};
use crate::mount::{KernelFs, Mount};
use crate::sys::{self, FallocMode};
use crate::workload::{Op, OpKind};
use parking_lot::RwLock;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

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
    pub fn new(mount: Mount, names: Vec<String>, block_size: u32) -> Result<Self, LabError> {
        let root = mount.dir().join("lab");
        std::fs::create_dir_all(&root).map_err(|e| LabError::io(root.display().to_string(), e))?;
        Ok(KernelTarget {
            mount,
            root,
            files: names.iter().map(|_| RwLock::new(None)).collect(),
            names,
            block_size,
            zeros: vec![0; 1 << 20],
        })
    }

    /// The mounted file system.
    pub fn mount(&self) -> &Mount {
        &self.mount
    }

    /// Unmount, keeping the image.
    pub fn unmount(self) -> Result<crate::mount::Image, LabError> {
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

    fn root_dir(&self) -> Result<File, LabError> {
        File::open(&self.root).map_err(|e| LabError::io(self.root.display().to_string(), e))
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
            // Every file of this file system, and its journal.
            let _ = sys::syncfs(&d);
        }
    }

    fn available_bytes(&self) -> u64 {
        self.root_dir().ok().and_then(|d| sys::statvfs(&d).ok()).map_or(0, |(free, _)| free)
    }

    fn layouts(&self) -> Result<Vec<FileLayout>, LabError> {
        let bs = u64::from(self.block_size);
        let mut out = Vec::new();
        for name in &self.names {
            let path = self.root.join(name);
            let f = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(LabError::io(path.display().to_string(), e)),
            };
            let records = sys::fiemap(&f)
                .map_err(|e| LabError::io(format!("FIEMAP {}", path.display()), e))?
                .into_iter()
                .map(|r| Record { logical: r.logical / bs, physical: r.physical / bs, len: r.len.div_ceil(bs) })
                .collect();
            out.push(FileLayout { name: name.clone(), records });
        }
        Ok(out)
    }

    fn free_space(&self) -> Result<FreeSpace, LabError> {
        let bs = u64::from(self.block_size);
        let recs = sys::getfsmap(&self.root_dir()?)
            .map_err(|e| LabError::io(format!("{} gives no free-space map (GETFSMAP)", self.mount.fs().name()), e))?;
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
