//! The engine on a volume mounted by `mballoc mount`, as any program
//! meets it: a separate server process behind FUSE, driven with the same
//! system calls as the kernel backends. Its rows set engine-by-syscall
//! beside ext4-by-syscall, where the in-process rows compare function
//! calls with system calls.
//!
//! FUSE carries no FIEMAP or GETFSMAP, so layouts and free space are read
//! from the volume itself: the files are closed, the volume unmounted (the
//! server syncs, checkpoints and marks it clean), opened read-only, and
//! mounted again with the files reopened. Allocator counters live in the
//! server process and are not reported.

use super::syscall::SyscallFiles;
use super::{AllocCounters, OpError, Target, VolumeFile};
use crate::cleanup::{self, Guard, Resource};
use crate::error::LabError;
use crate::metrics::{FileLayout, FreeSpace, Record};
use crate::workload::Op;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the server is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountCommand {
    /// The `mballoc` executable.
    pub program: PathBuf,
    /// `--profile`: `default` or `kernel`.
    pub profile: String,
}

/// A volume file mounted by `mballoc mount`.
pub struct MountedTarget {
    // Fields drop in order: the files, then the server, then the volume.
    files: SyscallFiles,
    /// The server while mounted, and the registration that lets an
    /// interrupt unmount it.
    server: Mutex<Option<(Child, Guard)>>,
    dir: PathBuf,
    command: MountCommand,
    block_size: u32,
    volume: VolumeFile,
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl MountedTarget {
    /// A fresh `bytes`-byte volume in /dev/shm, formatted with
    /// `block_size`, mounted by `command`; files `names` in a directory of
    /// their own. The error is the one-line reason the backend cannot run
    /// here (no root, no /dev/fuse, no fusermount3).
    pub fn new(command: MountCommand, bytes: u64, block_size: u32, names: Vec<String>) -> Result<Self, LabError> {
        if !crate::sys::is_root() {
            return Err(LabError::Unavailable("needs root for FUSE mounts".into()));
        }
        if !Path::new("/dev/fuse").exists() {
            return Err(LabError::Unavailable("no /dev/fuse".into()));
        }
        if Command::new("fusermount3").arg("-V").output().is_err() {
            return Err(LabError::Unavailable("fusermount3 is not installed (Debian: fuse3)".into()));
        }
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = format!("/dev/shm/mballoc-lab-mount-{}-{n}", std::process::id());
        let path = PathBuf::from(format!("{base}.vol"));
        let volume = VolumeFile::new(path.clone());
        let fo = mballoc_vol::FormatOptions { block_size, ..Default::default() };
        mballoc_vol::mkfs(&path, Some(bytes), &fo, mballoc_vol::Overwrite::Refuse)?;
        let dir = PathBuf::from(format!("{base}.mnt"));
        std::fs::create_dir_all(&dir).map_err(|e| LabError::io(dir.display().to_string(), e))?;
        let t = MountedTarget {
            files: SyscallFiles::at(dir.join("lab"), names),
            server: Mutex::new(None),
            dir,
            command,
            block_size,
            volume,
        };
        // The directory of files is made on the mounted volume, not on the
        // bare mount point: mount first, then make it.
        t.mount()?;
        t.files.make_root()?;
        Ok(t)
    }

    fn mount(&self) -> Result<(), LabError> {
        let mut server = self.server.lock();
        // Started and waited for under the cleanup registry's lock: an
        // interrupt finds the mount made, never half made.
        let (guard, started) = cleanup::register_while(Resource::Mount(self.dir.clone()), || self.start_server());
        *server = Some((started?, guard));
        Ok(())
    }

    /// Start `mballoc mount` and wait until the directory is mounted.
    fn start_server(&self) -> Result<Child, LabError> {
        let mut server = Command::new(&self.command.program);
        server.arg("mount").arg(self.volume.path()).arg(&self.dir).args([
            "--profile",
            &self.command.profile,
            "--foreground",
        ]);
        let log = PathBuf::from(format!("{}.log", self.dir.display()));
        start_mount_server(server, &self.dir, &log, || is_mounted(&self.dir))
    }

    /// Unmount and wait for the server: the volume is then clean.
    fn unmount(&self) -> Result<(), LabError> {
        let mut server = self.server.lock();
        let Some((mut child, _guard)) = server.take() else { return Ok(()) };
        let out = Command::new("fusermount3").arg("-u").arg(&self.dir).output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            // Something still holds the mount: detach it; the server ends
            // when the last file closes.
            let _ = Command::new("fusermount3").arg("-uz").arg(&self.dir).status();
        }
        let status = child.wait().map_err(|e| LabError::io("waiting for mballoc mount", e))?;
        if !status.success() {
            return Err(LabError::Invalid(format!("mballoc mount ended with {status}")));
        }
        Ok(())
    }

    /// Run `f` on the volume with the server stopped, then mount again and
    /// reopen the files that were open.
    fn with_volume<T>(&self, f: impl FnOnce(&mballoc_vol::Volume) -> Result<T, LabError>) -> Result<T, LabError> {
        let open = self.files.close_all();
        self.unmount()?;
        let result = (|| {
            use mballoc_vol::{Access, FileDevice, MountOptions, OpenMode};
            let dev = FileDevice::open(self.volume.path(), OpenMode::ReadOnly)?;
            let vol = mballoc_vol::Volume::open(
                Arc::new(dev),
                MountOptions { access: Access::ReadOnly, ..MountOptions::default() },
            )?;
            f(&vol)
        })();
        self.mount()?;
        self.files.reopen(&open)?;
        result
    }
}

impl Drop for MountedTarget {
    fn drop(&mut self) {
        self.files.close_all();
        let _ = self.unmount();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Start `server` (an `mballoc mount ... --foreground` command line) with
/// its standard error in `log`, and wait until `mounted` says `dir` is
/// mounted: the running server, or why it is not running (its exit status
/// and message, or the 30 s it was given). The log is removed either way.
pub fn start_mount_server(
    mut server: Command,
    dir: &Path,
    log: &Path,
    mounted: impl Fn() -> bool,
) -> Result<Child, LabError> {
    let err = std::fs::File::create(log).map_err(|e| LabError::io(log.display().to_string(), e))?;
    let mut child = server
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .map_err(|e| LabError::io(format!("starting {}", server.get_program().to_string_lossy()), e))?;
    let t0 = Instant::now();
    let result = loop {
        if mounted() {
            break Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            // A volume mounted already is bound at the new place and its
            // process exits at once: the mount may have appeared between
            // the check above and the exit. A read of the mount table is
            // not atomic while other mounts change (it takes several
            // reads), so a mount that exists can be missed once: asked
            // again for a while before the exit counts as a failure.
            if status.success() && seen_within(&mounted, Duration::from_secs(1)) {
                break Ok(());
            }
            let msg = std::fs::read_to_string(log).unwrap_or_default();
            break Err(LabError::Unavailable(format!("mballoc mount exited ({status}): {}", msg.trim())));
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            break Err(LabError::Unavailable(format!("{} was not mounted within 30 s", dir.display())));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = std::fs::remove_file(log);
    result.map(|()| child)
}

/// Whether `mounted` says yes, asked every 20 ms until `limit`.
fn seen_within(mounted: &impl Fn() -> bool, limit: Duration) -> bool {
    let t0 = Instant::now();
    loop {
        if mounted() {
            return true;
        }
        if t0.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_mounted(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts.lines().any(|l| {
        let mut w = l.split_whitespace();
        let (_, at, kind) = (w.next(), w.next(), w.next());
        at == dir.to_str() && kind.is_some_and(|k| k.starts_with("fuse"))
    })
}

impl Target for MountedTarget {
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
        let names = self.files.names().to_vec();
        self.with_volume(|vol| {
            let mut out = Vec::new();
            let mut seen = std::collections::HashSet::new();
            for name in names {
                let ino = match vol.resolve(format!("lab/{name}")) {
                    Ok(ino) => ino,
                    Err(e) if matches!(e.cause(), mballoc_vol::VolError::NoEntry { .. }) => continue,
                    Err(e) => return Err(e.into()),
                };
                // Directories are not files; a file with several names once.
                if vol.attr(ino)?.is_dir() || !seen.insert(ino) {
                    continue;
                }
                let records = vol
                    .extents(ino)?
                    .into_iter()
                    .map(|e| Record { logical: e.logical, physical: e.physical, len: e.len.into() })
                    .collect();
                out.push(FileLayout { name, records });
            }
            Ok(out)
        })
    }

    fn free_space(&self) -> Result<FreeSpace, LabError> {
        self.with_volume(|vol| Ok(super::engine::free_space_of(vol.fs().allocator())))
    }

    fn counters(&self) -> Option<AllocCounters> {
        None
    }

    fn mb_stats_text(&self) -> Option<String> {
        None
    }

    fn blocks_per_flex(&self) -> u64 {
        // The same yardstick as every other backend: mke2fs's groups of
        // 8 × block size blocks, flex_bg of 16.
        u64::from(self.block_size) * 8 * 16
    }
}
