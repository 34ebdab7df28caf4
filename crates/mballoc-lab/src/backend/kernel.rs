//! A loop-mounted kernel file system as a backend, driven with system
//! calls: files in a directory of their own, FIEMAP for layouts, GETFSMAP
//! for free space, ext4's mb_stats for the allocator's counters.

use super::syscall::SyscallFiles;
use super::{AllocCounters, OpError, Target};
use crate::error::LabError;
use crate::loop_mount::{KernelFs, Mount};
use crate::metrics::{FileLayout, FreeSpace, Record};
use crate::sys;
use crate::workload::Op;
use std::fs::File;

/// A loop-mounted kernel file system as a backend.
pub struct KernelTarget {
    // Fields drop in order: the open files before the mount.
    files: SyscallFiles,
    block_size: u32,
    mount: Mount,
}

impl KernelTarget {
    /// Files live in a directory of their own under the mount.
    pub fn new(mount: Mount, names: Vec<String>, block_size: u32) -> Result<Self, LabError> {
        let files = SyscallFiles::new(mount.dir().join("lab"), names)?;
        Ok(KernelTarget { mount, files, block_size })
    }

    /// The mounted file system.
    pub fn mount(&self) -> &Mount {
        &self.mount
    }

    /// Unmount, keeping the image.
    pub fn unmount(self) -> Result<crate::loop_mount::Image, LabError> {
        drop(self.files);
        self.mount.unmount()
    }
}

impl Target for KernelTarget {
    fn apply(&self, op: &Op) -> Result<(), OpError> {
        self.files.apply(op)
    }

    fn sync(&self) {
        self.files.sync()
    }

    fn available_bytes(&self) -> u64 {
        self.files.available_bytes()
    }

    fn layouts(&self) -> Result<Vec<FileLayout>, LabError> {
        let bs = u64::from(self.block_size);
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for name in self.files.names() {
            let path = self.files.root().join(name);
            let f = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(LabError::io(path.display().to_string(), e)),
            };
            // Directories are not files; a file with several names once.
            let meta = f.metadata().map_err(|e| LabError::io(path.display().to_string(), e))?;
            if !meta.is_file() || !seen.insert(std::os::unix::fs::MetadataExt::ino(&meta)) {
                continue;
            }
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
        let recs = sys::getfsmap(&self.files.root_dir()?)
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
