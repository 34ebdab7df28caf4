//! The kernel side of a fidelity case: the operations through ext4 on a
//! loop-mounted copy of the pristine image, from one thread bound to one
//! CPU, with the allocation tracepoints recorded.

use super::{merge_runs, Case, Run, Side};
use crate::error::{Context, LabError};
use crate::kernel_trace::{device_numbers, Recorder};
use crate::loop_mount::{Image, KernelFs, Mount};
use crate::sys::{self, FallocMode};
use crate::workload::{Op, OpKind};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The pristine image of a case.
pub(super) fn make_image(case: &Case) -> Result<Image, LabError> {
    if !sys::is_root() {
        return Err(LabError::Unavailable("fidelity runs need root for loop mounts and tracefs".into()));
    }
    match &case.image {
        Some(source) => Image::copy_of(source).context(format!("copying {}'s image", case.name)),
        None => Image::make_with(KernelFs::Ext4, case.trace.volume, case.trace.block_size, &case.ext4.mkfs)
            .context(format!("making {}'s image", case.name)),
    }
}

/// Which files are dirty, oldest first: what the final flush writes back,
/// in the same order on both sides.
#[derive(Default)]
pub(super) struct DirtyOrder(Vec<u32>);

impl DirtyOrder {
    pub(super) fn note(&mut self, op: &Op) {
        match op.kind {
            OpKind::Write if !self.0.contains(&op.file) => self.0.push(op.file),
            OpKind::Fsync | OpKind::Unlink => self.0.retain(|&f| f != op.file),
            // The file keeps its place under its new name; the file it
            // replaced is gone.
            OpKind::Rename => {
                self.0.retain(|&f| f != op.to);
                if let Some(f) = self.0.iter_mut().find(|f| **f == op.file) {
                    *f = op.to;
                }
            }
            _ => {}
        }
    }

    pub(super) fn files(&self) -> &[u32] {
        &self.0
    }
}

pub(super) fn run(case: &Case, image: &Image, ops: &[Op]) -> Result<Side, LabError> {
    let mount = match Mount::from_image(image.path(), &case.ext4.mount_options()) {
        Ok(m) => m,
        // Kernels before 6.19 mount no block larger than a page.
        Err(e) if u64::from(case.trace.block_size) > sys::page_size() => {
            return Err(LabError::Unavailable(format!(
                "this kernel does not mount {} KiB blocks on {} KiB pages ({})",
                case.trace.block_size / 1024,
                sys::page_size() / 1024,
                crate::chain(&e)
            )))
        }
        // Kernels before 5.13 have no mb_optimize_scan: they always scan
        // linearly, so their default cases are the linear-scan ones.
        Err(e)
            if case.ext4.mount.iter().any(|o| o.starts_with("mb_optimize_scan"))
                && !mballoc_fs::KernelRule::OrderLists.in_kernel(super::engine_side::running_kernel()) =>
        {
            return Err(LabError::Unavailable(format!(
                "this kernel has no mb_optimize_scan: it scans linearly in every case ({})",
                crate::chain(&e)
            )))
        }
        Err(e) => return Err(e.context("mounting a copy of the image")),
    };
    // Every buddy built now, not by the background prefetch mid-case.
    mount.ext4_proc("mb_groups")?;
    mount.set_ext4_knob("mb_stats", "1")?;
    for (k, v) in &case.ext4.knobs {
        if k != "mb_stats" {
            mount.set_ext4_knob(k, v)?;
        }
    }
    let dev = device_numbers(&PathBuf::from("/dev").join(mount.device_name()))?;
    let root = mount.dir().to_path_buf();
    let names = &case.trace.files;
    let cpu = sys::allowed_cpus().ok().and_then(|c| c.first().copied()).unwrap_or(0);
    let recorder = Recorder::start(Some(dev))?;
    // One thread bound to one CPU: ext4's locality group is the CPU's.
    let applied = std::thread::scope(|s| {
        s.spawn(|| -> Result<(), LabError> {
            sys::bind_current_thread(cpu).map_err(|e| LabError::io(format!("binding to CPU {cpu}"), e))?;
            let mut k = Kernel { root: &root, names, open: HashMap::new(), data: crate::backend::write_buffer() };
            let mut dirty = DirtyOrder::default();
            for (i, op) in ops.iter().enumerate() {
                dirty.note(op);
                k.apply(op).map_err(|e| e.context(format!("operation {} ({})", i + 1, op.kind.name())))?;
            }
            // The files still dirty, oldest first, from this thread.
            for &slot in dirty.files() {
                let path = root.join(&names[slot as usize]);
                if let Ok(f) = File::open(&path) {
                    f.sync_all().map_err(|e| LabError::io(format!("fsync {}", path.display()), e))?;
                }
            }
            Ok(())
        })
        .join()
        .unwrap_or_else(|_| Err(LabError::Invalid("the kernel-side thread panicked".into())))
    });
    let recorded = recorder.finish();
    applied?;
    let (trace_text, trace) = recorded?;
    let bs = u64::from(case.trace.block_size);
    let mut files = Vec::new();
    for name in names {
        let path = root.join(name);
        let Ok(f) = File::open(&path) else { continue };
        let meta = f.metadata().map_err(|e| LabError::io(path.display().to_string(), e))?;
        if !meta.is_file() {
            // Directories are compared through their requests.
            continue;
        }
        let ino = meta.ino();
        let runs = sys::fiemap(&f)
            .map_err(|e| LabError::io(format!("FIEMAP {}", path.display()), e))?
            .into_iter()
            .map(|r| Run { logical: r.logical / bs, physical: r.physical / bs, len: r.len.div_ceil(bs) })
            .collect();
        files.push((name.clone(), ino, merge_runs(runs)));
    }
    let mb_stats = mount.ext4_proc("mb_stats")?;
    let after = mount.unmount()?;
    let (free, total_blocks) = free_runs(after.path())?;
    let requests = trace.requests();
    Ok(Side {
        files,
        free,
        total_blocks,
        block_size: case.trace.block_size,
        mb_stats,
        requests,
        lost_events: trace.lost,
        trace_text,
    })
}

/// Free runs of an unmounted image, as e2freefrag reads them.
pub(super) fn free_runs(image: &Path) -> Result<(Vec<(u64, u64)>, u64), LabError> {
    let src = mballoc_ext4::FileSource::open(image).map_err(|e| LabError::io(image.display().to_string(), e))?;
    let vol = mballoc_ext4::Ext4Volume::open(src, mballoc_ext4::ChecksumPolicy::Verify)?;
    let mut runs = Vec::new();
    vol.for_each_free_run(|s, l| runs.push((s, l)))?;
    Ok((runs, vol.superblock().blocks_count))
}

/// The operations by system call.
struct Kernel<'a> {
    root: &'a Path,
    names: &'a [String],
    open: HashMap<u32, File>,
    data: Vec<u8>,
}

impl Kernel<'_> {
    fn path(&self, slot: u32) -> PathBuf {
        self.root.join(&self.names[slot as usize])
    }

    fn file(&self, slot: u32) -> Result<&File, LabError> {
        self.open.get(&slot).ok_or_else(|| LabError::Invalid(format!("{} is not open", self.names[slot as usize])))
    }

    fn apply(&mut self, op: &Op) -> Result<(), LabError> {
        let path = self.path(op.file);
        let io = |e| LabError::io(path.display().to_string(), e);
        match op.kind {
            OpKind::Create => {
                // A file open under this name is closed first, as the engine
                // side does.
                self.open.remove(&op.file);
                let f =
                    OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).map_err(io)?;
                self.open.insert(op.file, f);
            }
            OpKind::Write => {
                let f = self.file(op.file)?;
                let data = &self.data;
                crate::backend::write_calls(op.offset, op.len, |at, n| f.write_all_at(&data[..n as usize], at))
                    .map_err(io)?;
            }
            OpKind::Fallocate => {
                sys::fallocate(self.file(op.file)?, FallocMode::ExtendSize, op.offset, op.len).map_err(io)?
            }
            OpKind::FallocateKeepSize => {
                sys::fallocate(self.file(op.file)?, FallocMode::KeepSize, op.offset, op.len).map_err(io)?
            }
            OpKind::Punch => {
                sys::fallocate(self.file(op.file)?, FallocMode::PunchHole, op.offset, op.len).map_err(io)?
            }
            OpKind::Truncate => self.file(op.file)?.set_len(op.offset).map_err(io)?,
            OpKind::Fsync => self.file(op.file)?.sync_all().map_err(io)?,
            OpKind::Close => {
                self.open.remove(&op.file);
            }
            OpKind::Unlink => {
                self.open.remove(&op.file);
                std::fs::remove_file(&path).map_err(io)?;
            }
            OpKind::Open => {
                if let std::collections::hash_map::Entry::Vacant(e) = self.open.entry(op.file) {
                    e.insert(OpenOptions::new().read(true).write(true).open(&path).map_err(io)?);
                }
            }
            OpKind::Read => {
                let f = self.file(op.file)?;
                crate::backend::read_range(op.offset, op.len, |buf, at| f.read_at(buf, at)).map_err(io)?;
            }
            OpKind::Mkdir => std::fs::create_dir_all(&path).map_err(io)?,
            OpKind::Rename => {
                std::fs::rename(&path, self.path(op.to)).map_err(io)?;
                // The replaced file's handle closes, as the engine side's
                // does; the moved file's handle moves with its name.
                self.open.remove(&op.to);
                if let Some(f) = self.open.remove(&op.file) {
                    self.open.insert(op.to, f);
                }
            }
            OpKind::Link => std::fs::hard_link(&path, self.path(op.to)).map_err(io)?,
            OpKind::Wait | OpKind::Signal => {
                unreachable!("refused by Case::check_ops: {}", op.kind.name())
            }
        }
        Ok(())
    }
}
