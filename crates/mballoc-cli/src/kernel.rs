//! Kernel file systems as lab backends: a sparse image in /dev/shm, mkfs,
//! a loop mount, and cleanup when the mount is dropped. Without root or
//! without the tools, [`Mount::new`] says why in one line and the caller
//! skips the backend.

use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A kernel file system the lab can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelFs {
    Ext4,
}

impl KernelFs {
    fn mkfs(self, image: &Path) -> Command {
        match self {
            KernelFs::Ext4 => {
                let mut c = Command::new("mkfs.ext4");
                c.args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-O", "orphan_file"]).arg(image);
                c
            }
        }
    }
}

/// An image file in /dev/shm, deleted on drop.
pub struct Image {
    path: PathBuf,
}

impl Image {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A mounted image; unmounted and deleted on drop.
pub struct Mount {
    image: Option<Image>,
    dir: PathBuf,
}

fn run(c: &mut Command) -> Result<(), String> {
    let out = c.output().map_err(|e| format!("{:?}: {e}", c.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{:?} failed: {}",
            c.get_program(),
            String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("no message")
        ))
    }
}

impl Mount {
    /// Make and mount a `bytes`-sized file system of kind `fs`. The error is
    /// the one-line reason the backend cannot run here.
    pub fn new(fs: KernelFs, bytes: u64, tag: &str) -> Result<Mount, String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("needs root for loop mounts".into());
        }
        let base = PathBuf::from(format!("/dev/shm/mballoc-{tag}-{}", std::process::id()));
        let image = base.with_extension("img");
        let dir = base.with_extension("mnt");
        let file = std::fs::File::create(&image).map_err(|e| format!("{}: {e}", image.display()))?;
        file.set_len(bytes).map_err(|e| format!("{}: {e}", image.display()))?;
        drop(file);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let m = Mount { image: Some(Image { path: image.clone() }), dir };
        run(&mut fs.mkfs(&image))?;
        run(Command::new("mount").args(["-o", "loop"]).arg(&image).arg(&m.dir))?;
        Ok(m)
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Unmount, keeping the image for offline tools (e2freefrag).
    pub fn unmount(mut self) -> Result<Image, String> {
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

/// Run a tool and return its standard output.
pub fn output(c: &mut Command) -> Result<String, String> {
    let out = c.output().map_err(|e| format!("{:?}: {e}", c.get_program()))?;
    if !out.status.success() {
        return Err(format!("{:?} failed: {}", c.get_program(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Extents of a file as `filefrag` counts them.
pub fn filefrag_extents(path: &Path) -> Result<u64, String> {
    let text = output(Command::new("filefrag").arg(path))?;
    // "PATH: N extents found" (or "1 extent found").
    text.rsplit(':')
        .next()
        .and_then(|tail| tail.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("unexpected filefrag output: {}", text.trim()))
}

/// `fallocate(fd, 0, offset, len)`: allocate and extend the size.
pub fn fallocate(file: &std::fs::File, offset: u64, len: u64) -> std::io::Result<()> {
    // SAFETY: the descriptor is open for the lifetime of `file`; fallocate
    // only reads its integer arguments.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset as libc::off_t, len as libc::off_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
