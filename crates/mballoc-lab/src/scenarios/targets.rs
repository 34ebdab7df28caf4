//! Building what a workload runs on: an engine in memory (empty, or loaded
//! from an ext4 image), an engine on a persistent volume, a loop-mounted
//! kernel file system. Every engine the lab builds here collects
//! statistics (the scenarios' variants then set them as their comparison
//! says, the same on every backend).

use crate::backend::{EngineTarget, KernelTarget, VolumeFile, WriteMode};
use crate::error::{Context, LabError};
use crate::loop_mount::{KernelFs, Mount};
use crate::workload::Workload;
use mballoc::Geometry;
use mballoc_ext4::{ChecksumPolicy, Ext4Volume, FileSource};
use mballoc_fs::{Fs, FsConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Open an ext4 image for reading, checksums verified.
pub fn open_image(path: &Path) -> Result<Ext4Volume<FileSource>, LabError> {
    let what = || format!("reading {}", path.display());
    let src = FileSource::open(path).map_err(|e| LabError::io(path.display().to_string(), e))?;
    Ext4Volume::open(src, ChecksumPolicy::Verify).context(what())
}

/// The lab's engine configuration: statistics on, then `tweak`.
pub(super) fn with_stats(tweak: impl FnOnce(&mut FsConfig)) -> impl FnOnce(&mut FsConfig) {
    |cfg: &mut FsConfig| {
        cfg.placement.tunables.mb_stats = true;
        tweak(cfg);
    }
}

/// An in-memory engine for workload `w`, configured by `tweak`.
pub fn engine(
    w: &Workload,
    write_mode: WriteMode,
    tweak: impl FnOnce(&mut FsConfig),
) -> Result<EngineTarget, LabError> {
    engine_with_files(w, w.file_names(), write_mode, tweak)
}

/// An in-memory engine of `w`'s shape (or loaded from its image) whose
/// file slots are `names` (a trace's).
pub fn engine_with_files(
    w: &Workload,
    names: Vec<String>,
    write_mode: WriteMode,
    tweak: impl FnOnce(&mut FsConfig),
) -> Result<EngineTarget, LabError> {
    let configure = with_stats(tweak);
    let fs = match &w.image {
        Some(path) => {
            let vol = open_image(path)?;
            mballoc_ext4::engine::load(&vol, configure).context(format!("loading {}", path.display()))?.fs
        }
        None => {
            let geo = Geometry::new(w.block_size, w.volume.0 / u64::from(w.block_size))?;
            let mut cfg = FsConfig::new(geo);
            configure(&mut cfg);
            Fs::new(cfg)?
        }
    };
    Ok(EngineTarget::new(fs, names, write_mode))
}

/// A fresh persistent volume file of `bytes` bytes in /dev/shm (or the
/// temporary directory), formatted with `block_size`, mounted with `opts`
/// and the allocation policy `policy` chooses.
pub fn persistent_volume(
    bytes: u64,
    block_size: u32,
    opts: mballoc_vol::MountOptions,
    policy: impl FnOnce(&mut FsConfig),
) -> Result<(Arc<mballoc_vol::Volume>, VolumeFile), LabError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path =
        volume_dir().join(format!("mballoc-lab-vol-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    let file = VolumeFile::new(path.clone());
    let dev = mballoc_vol::FileDevice::create_new(&path, bytes)?;
    let dev: Arc<dyn mballoc_vol::Device> = Arc::new(dev);
    let fo = mballoc_vol::FormatOptions { block_size, ..Default::default() };
    mballoc_vol::Volume::format(dev.clone(), &fo).context(format!("formatting {}", path.display()))?;
    let vol = mballoc_vol::Volume::open_with(dev, opts, policy)?;
    Ok((vol, file))
}

/// Where the lab keeps volume files: /dev/shm, or the temporary directory.
fn volume_dir() -> PathBuf {
    if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    }
}

/// A persistent engine for workload `w` (an empty volume of its shape),
/// configured by `tweak`: writes carry data, fsync commits the journal.
pub fn persistent_engine(w: &Workload, tweak: impl FnOnce(&mut FsConfig)) -> Result<EngineTarget, LabError> {
    if w.image.is_some() {
        return Err(LabError::Invalid("a persistent volume starts empty, not from an ext4 image".into()));
    }
    let (vol, file) =
        persistent_volume(w.volume.0, w.block_size, mballoc_vol::MountOptions::default(), with_stats(tweak))?;
    Ok(EngineTarget::persistent(vol, file, w.file_names()))
}

/// A kernel file system for workload `w`, mounted with `options`.
pub fn kernel(fs: KernelFs, w: &Workload, options: &str) -> Result<KernelTarget, LabError> {
    kernel_with_files(fs, w, w.file_names(), options)
}

/// A kernel file system of `w`'s shape (or a copy of its image) whose
/// file slots are `names` (a trace's), with ext4's statistics on.
pub fn kernel_with_files(
    fs: KernelFs,
    w: &Workload,
    names: Vec<String>,
    options: &str,
) -> Result<KernelTarget, LabError> {
    let t = kernel_with_files_mkfs(fs, w, names, options, &[])?;
    if fs == KernelFs::Ext4 {
        t.mount().set_ext4_knob("mb_stats", "1")?;
    }
    Ok(t)
}

/// As [`kernel_with_files`], made with `mkfs` arguments added to the
/// lab's own, and no knob set.
pub fn kernel_with_files_mkfs(
    fs: KernelFs,
    w: &Workload,
    names: Vec<String>,
    options: &str,
    mkfs: &[String],
) -> Result<KernelTarget, LabError> {
    let m = match (&w.image, fs) {
        (Some(_), _) if !mkfs.is_empty() => {
            return Err(LabError::Invalid("mkfs options cannot apply to a volume started from an image".into()))
        }
        (Some(path), KernelFs::Ext4) => Mount::from_image(path, options)?,
        (Some(_), other) => {
            return Err(LabError::Unavailable(format!(
                "starts from an ext4 image, which {} cannot mount",
                other.name()
            )))
        }
        (None, _) => Mount::with_mkfs(fs, w.volume.0, w.block_size, options, mkfs)?,
    };
    KernelTarget::new(m, names, w.block_size)
}
