//! The mount's VFS flags, followed as the kernel holds them.
//!
//! FUSE marks every inode `S_NOATIME`, so the kernel never updates access
//! times itself: the server does, and it must do so as the mount's
//! `noatime`, `relatime` or `strictatime` flag says, including after a
//! `mount -o remount,noatime` that never reaches the server. Likewise a
//! remount read-only is the moment ext4 writes everything back. A thread
//! watches `/proc/self/mountinfo` (the kernel wakes pollers when the
//! mount table changes) and applies the mount's flags.

use crate::options::Atime;
use mballoc_vol::Volume;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The flags as last seen, shared with the server.
#[derive(Debug, Default)]
pub(crate) struct VfsFlags {
    atime: AtomicU8,
    read_only: AtomicBool,
}

impl VfsFlags {
    pub fn new(atime: Atime, read_only: bool) -> VfsFlags {
        VfsFlags { atime: AtomicU8::new(atime as u8), read_only: AtomicBool::new(read_only) }
    }

    /// How reads update access times.
    pub fn atime(&self) -> Atime {
        Atime::from_u8(self.atime.load(Ordering::Relaxed))
    }

    /// Whether the VFS holds the mount read-only (`mount -o remount,ro`):
    /// the ioctls that change something (chattr, the label, FITRIM) reach
    /// the server without the VFS's own check, so it refuses them.
    pub fn read_only(&self) -> bool {
        self.read_only.load(Ordering::Relaxed)
    }
}

/// The running watcher; dropping it stops the thread.
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The flags of the mount on `dir` in a mountinfo table: its access-time
/// mode and whether it is read-only. `None` if nothing is mounted there.
pub(crate) fn flags_of(table: &str, dir: &Path) -> Option<(Atime, bool)> {
    let want = dir.to_string_lossy();
    // The last line for the mount point is the mount on top.
    table.lines().rev().find_map(|line| {
        // id parent major:minor root mount-point options ...
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.get(4).map(|p| crate::table::unescape(p)) != Some(want.to_string()) {
            return None;
        }
        let opts: Vec<&str> = fields.get(5)?.split(',').collect();
        let atime = if opts.contains(&"noatime") {
            Atime::NoAtime
        } else if opts.contains(&"relatime") {
            Atime::Relatime
        } else {
            Atime::Strict
        };
        Some((atime, opts.contains(&"ro")))
    })
}

impl Watcher {
    /// Follow the flags of the mount on `dir` into `flags` (and sync `vol`
    /// when the mount turns read-only).
    pub fn start(dir: &Path, flags: Arc<VfsFlags>, vol: Arc<Volume>) -> Option<Watcher> {
        let dir: PathBuf = std::fs::canonicalize(dir).ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mballoc-vfs-flags".into())
            .spawn(move || {
                let Ok(file) = std::fs::File::open("/proc/self/mountinfo") else { return };
                let mut was_ro = false;
                let mut changed = true;
                while !s.load(Ordering::Acquire) {
                    if changed {
                        if let Some((a, ro)) =
                            std::fs::read_to_string("/proc/self/mountinfo").ok().and_then(|t| flags_of(&t, &dir))
                        {
                            flags.atime.store(a as u8, Ordering::Relaxed);
                            flags.read_only.store(ro, Ordering::Relaxed);
                            if ro && !was_ro {
                                if let Err(e) = vol.sync() {
                                    eprintln!("mballoc mount: remounted read-only: the sync failed: {e}");
                                }
                            }
                            was_ro = ro;
                        }
                    }
                    // The table changed: POLLPRI (or POLLERR), once per
                    // change. A timeout lets a stop be seen.
                    let mut fds = [nix::poll::PollFd::new(file.as_fd(), nix::poll::PollFlags::POLLPRI)];
                    changed = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(200u16)).is_ok_and(|n| n > 0);
                }
            })
            .ok()?;
        Some(Watcher { stop, thread: Some(thread) })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_mount_on_the_directory_decides() {
        let t = "36 25 0:32 / /mnt/a rw,nosuid,nodev,relatime shared:1 - fuse.mballoc mballoc:/v rw\n\
                 37 25 0:33 / /mnt/b rw,noatime - fuse.mballoc mballoc:/w rw\n\
                 38 36 0:32 / /mnt/a ro - fuse.mballoc mballoc:/v rw\n";
        assert_eq!(flags_of(t, Path::new("/mnt/a")), Some((Atime::Strict, true)));
        assert_eq!(flags_of(t, Path::new("/mnt/b")), Some((Atime::NoAtime, false)));
        assert_eq!(flags_of(t, Path::new("/mnt/c")), None);
    }
}
