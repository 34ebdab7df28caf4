//! Kernel file systems as lab backends: a sparse image in /dev/shm, mkfs,
//! a loop mount, and cleanup when the mount is dropped. Without root or
//! without the tools, [`Mount::new`] says why in one line and the caller
//! skips the backend.

use crate::error::LabError;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A kernel file system the lab can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelFs {
    /// ext4.
    Ext4,
    /// XFS.
    Xfs,
    /// btrfs.
    Btrfs,
}

impl KernelFs {
    /// The name in `--backends` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            KernelFs::Ext4 => "ext4",
            KernelFs::Xfs => "xfs",
            KernelFs::Btrfs => "btrfs",
        }
    }

    /// The smallest image mkfs accepts, rounded up.
    pub fn min_bytes(self) -> u64 {
        match self {
            KernelFs::Ext4 => 16 << 20,
            KernelFs::Xfs => 320 << 20,
            KernelFs::Btrfs => 256 << 20,
        }
    }

    fn mkfs(self, image: &Path, block_size: u32, extra: &[String]) -> Command {
        let mut c;
        match self {
            KernelFs::Ext4 => {
                // Seed 000's mkfs line: everything initialised now, not by
                // lazy background threads during the run.
                c = Command::new("mkfs.ext4");
                c.args(["-q", "-F", "-b", &block_size.to_string()]);
                c.args(["-E", "lazy_itable_init=0,lazy_journal_init=0", "-O", "orphan_file"]);
            }
            KernelFs::Xfs => {
                c = Command::new("mkfs.xfs");
                c.args(["-q", "-f", "-b", &format!("size={block_size}")]);
            }
            KernelFs::Btrfs => {
                c = Command::new("mkfs.btrfs");
                c.args(["-q", "-f", "-s", &block_size.to_string()]);
            }
        }
        c.args(extra);
        c.arg(image);
        c
    }
}

/// An image file in /dev/shm, deleted on drop.
pub struct Image {
    path: PathBuf,
    /// Removes the file on drop (and made it: exclusively, under a name no
    /// other run holds).
    _file: tempfile::TempPath,
    _guard: crate::cleanup::Guard,
}

impl Image {
    /// A new image in /dev/shm: a sparse file of `bytes` (at least what
    /// mkfs accepts) made into a `fs` file system by its mkfs.
    pub fn make(fs: KernelFs, bytes: u64, block_size: u32) -> Result<Image, LabError> {
        Self::make_with(fs, bytes, block_size, &[])
    }

    /// As [`Image::make`], with `extra` arguments after the lab's own
    /// (a later `-O` or `-E` adds to or overrides an earlier one).
    pub fn make_with(fs: KernelFs, bytes: u64, block_size: u32, extra: &[String]) -> Result<Image, LabError> {
        let bytes = bytes.max(fs.min_bytes());
        let image = Mount::new_image(fs)?;
        let io = |e| LabError::io(image.path.display().to_string(), e);
        let file = std::fs::File::create(&image.path).map_err(io)?;
        file.set_len(bytes).map_err(io)?;
        drop(file);
        run(&mut fs.mkfs(&image.path, block_size, extra))?;
        Ok(image)
    }

    /// A sparse copy of the image at `source` in /dev/shm (the original is
    /// never written).
    pub fn copy_of(source: &Path) -> Result<Image, LabError> {
        let image = Mount::new_image(KernelFs::Ext4)?;
        run(Command::new("cp").arg("--sparse=always").arg(source).arg(&image.path))?;
        Ok(image)
    }

    /// An image expanded from an `e2image -Q` (QCOW2) file, by
    /// `e2image -r`.
    pub fn from_qcow2(source: &Path) -> Result<Image, LabError> {
        let image = Mount::new_image(KernelFs::Ext4)?;
        run(Command::new("e2image").arg("-r").arg(source).arg(&image.path))?;
        Ok(image)
    }

    /// The image file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A mounted image; unmounted and deleted on drop.
pub struct Mount {
    fs: KernelFs,
    image: Option<Image>,
    bytes: u64,
    dir: PathBuf,
    device: String,
    _guard: crate::cleanup::Guard,
}

fn run(c: &mut Command) -> Result<(), LabError> {
    output(c).map(drop)
}

/// Run a tool and return its standard output. A tool that is not
/// installed makes its backend unavailable; one that fails is an error
/// with the first line it printed.
pub fn output(c: &mut Command) -> Result<String, LabError> {
    let program = c.get_program().to_string_lossy().into_owned();
    let out = c.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => LabError::Unavailable(format!("{program} is not installed")),
        _ => LabError::io(format!("running {program}"), e),
    })?;
    if !out.status.success() {
        let message = String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("no message").trim().to_string();
        return Err(LabError::Tool { program, message });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Mount {
    /// Make and mount a `bytes`-sized file system of kind `fs` with
    /// `options` (as `mount -o`). The error is the one-line reason the
    /// backend cannot run here.
    pub fn new(fs: KernelFs, bytes: u64, block_size: u32, options: &str) -> Result<Mount, LabError> {
        Self::with_mkfs(fs, bytes, block_size, options, &[])
    }

    /// As [`Mount::new`], with `mkfs` arguments added to the lab's own.
    pub fn with_mkfs(
        fs: KernelFs,
        bytes: u64,
        block_size: u32,
        options: &str,
        mkfs: &[String],
    ) -> Result<Mount, LabError> {
        if !crate::sys::is_root() {
            return Err(LabError::Unavailable("needs root for loop mounts".into()));
        }
        let image = Image::make_with(fs, bytes, block_size, mkfs)?;
        let bytes = bytes.max(fs.min_bytes());
        Self::attach(fs, image, bytes, options)
    }

    /// Mount a copy of an existing ext4 image (the original is never
    /// written), made sparse in /dev/shm.
    pub fn from_image(source: &Path, options: &str) -> Result<Mount, LabError> {
        if !crate::sys::is_root() {
            return Err(LabError::Unavailable("needs root for loop mounts".into()));
        }
        let image = Self::new_image(KernelFs::Ext4)?;
        run(Command::new("cp").arg("--sparse=always").arg(source).arg(&image.path))?;
        let bytes =
            std::fs::metadata(&image.path).map_err(|e| LabError::io(image.path.display().to_string(), e))?.len();
        Self::attach(KernelFs::Ext4, image, bytes, options)
    }

    /// A fresh, empty image file in /dev/shm. Registered for clean-up
    /// too: a signal ends the process without running drops.
    fn new_image(fs: KernelFs) -> Result<Image, LabError> {
        let file = tempfile::Builder::new()
            // The process id in the name tells whose a leftover is.
            .prefix(&format!("mballoc-lab-{}-{}-", fs.name(), std::process::id()))
            .suffix(".img")
            .tempfile_in("/dev/shm")
            .map_err(|e| LabError::io("/dev/shm", e))?
            .into_temp_path();
        let path = file.to_path_buf();
        let guard = crate::cleanup::register(crate::cleanup::Resource::File(path.clone()));
        Ok(Image { path, _file: file, _guard: guard })
    }

    fn attach(fs: KernelFs, image: Image, bytes: u64, options: &str) -> Result<Mount, LabError> {
        let dir = image.path.with_extension("mnt");
        std::fs::create_dir_all(&dir).map_err(|e| LabError::io(dir.display().to_string(), e))?;
        let opts = if options.is_empty() { "loop".to_string() } else { format!("loop,{options}") };
        // Mounted under the cleanup registry's lock: an interrupt waits for
        // the mount, then finds it.
        let (guard, mounted) = crate::cleanup::register_while(crate::cleanup::Resource::Mount(dir.clone()), || {
            run(Command::new("mount").args(["-o", &opts]).arg(&image.path).arg(&dir))
        });
        if let Err(e) = mounted {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        let device = mounted_device(&dir).unwrap_or_default();
        Ok(Mount { fs, image: Some(image), bytes, dir, device, _guard: guard })
    }

    /// Which file system this is.
    pub fn fs(&self) -> KernelFs {
        self.fs
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The image's size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The image file.
    pub fn image_path(&self) -> &Path {
        self.image.as_ref().expect("image present until unmounted").path()
    }

    /// The loop device's name (`loop3`), as /proc/fs/ext4 and
    /// /sys/fs/ext4 name it.
    pub fn device_name(&self) -> &str {
        self.device.rsplit('/').next().unwrap_or("")
    }

    /// Write an ext4 sysfs knob (`/sys/fs/ext4/DEV/NAME`).
    pub fn set_ext4_knob(&self, name: &str, value: &str) -> Result<(), LabError> {
        let p = PathBuf::from("/sys/fs/ext4").join(self.device_name()).join(name);
        if !p.exists() {
            return Err(LabError::Invalid(format!(
                "this kernel's ext4 has no knob {name:?} ({} is missing)",
                p.display()
            )));
        }
        std::fs::write(&p, value).map_err(|e| LabError::io(format!("writing {value:?} to {}", p.display()), e))
    }

    /// Read an ext4 proc file (`/proc/fs/ext4/DEV/NAME`).
    pub fn ext4_proc(&self, name: &str) -> Result<String, LabError> {
        let p = PathBuf::from("/proc/fs/ext4").join(self.device_name()).join(name);
        std::fs::read_to_string(&p).map_err(|e| LabError::io(p.display().to_string(), e))
    }

    /// Unmount, keeping the image for offline tools (e2freefrag).
    pub fn unmount(mut self) -> Result<Image, LabError> {
        run(Command::new("umount").arg(&self.dir))?;
        let _ = std::fs::remove_dir(&self.dir);
        Ok(self.image.take().expect("image present until unmounted"))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.image.is_some() {
            let _ = Command::new("umount").arg(&self.dir).status();
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

fn mounted_device(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let (dev, at) = (w.next()?, w.next()?);
        (Path::new(at) == dir).then(|| dev.to_string())
    })
}
