//! What a lab run leaves behind if it is stopped half-way: loop mounts of
//! kernel file systems, their images and the engine's volume files, all
//! in /dev/shm, where they hold memory until removed.
//!
//! Each is registered for as long as it exists (a [`Guard`] unregisters
//! it when dropped, after its owner has cleaned up in the ordinary way).
//! On SIGINT or SIGTERM the command line calls [`clean_up`], which
//! unmounts every registered mount — lazily, since worker threads may
//! still hold files open on it; the loop device is released when the
//! process exits and its last descriptor closes — removes every
//! registered file and mount point, and turns off tracepoints a fidelity
//! run enabled.

use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Something to remove if the run is interrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A mount point: unmounted, then removed.
    Mount(PathBuf),
    /// A file: removed.
    File(PathBuf),
    /// A tracefs root with the lab's tracepoints enabled: turned off.
    Tracepoints(PathBuf),
}

static LIVE: Mutex<Vec<(u64, Resource)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Keeps a resource registered; dropping it unregisters (the owner has
/// cleaned up itself).
#[derive(Debug)]
pub struct Guard(u64);

impl Drop for Guard {
    fn drop(&mut self) {
        LIVE.lock().retain(|(id, _)| *id != self.0);
    }
}

/// Register `r` until the guard is dropped.
pub fn register(r: Resource) -> Guard {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    LIVE.lock().push((id, r));
    Guard(id)
}

/// Register `r` and make it with `make` in one step: an interrupt's
/// [`clean_up_and_exit`] waits until `make` returns, so it never finds a
/// mount half made or misses tracepoints being enabled. `make` must not
/// register anything itself.
pub fn register_while<T>(r: Resource, make: impl FnOnce() -> T) -> (Guard, T) {
    let mut live = LIVE.lock();
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    live.push((id, r));
    let made = make();
    (Guard(id), made)
}

/// What is registered now, oldest first.
pub fn live() -> Vec<Resource> {
    LIVE.lock().iter().map(|(_, r)| r.clone()).collect()
}

/// Unmount and remove everything registered: tracepoints off first,
/// then mounts, newest first, then files. Returns one line per resource,
/// saying what was done.
pub fn clean_up() -> Vec<String> {
    let all: Vec<Resource> = std::mem::take(&mut *LIVE.lock()).into_iter().map(|(_, r)| r).collect();
    undo(&all)
}

/// [`clean_up`], print what was done under `header` on stderr, and exit
/// with `code`, holding the registry all the while: another thread about
/// to make a mount, an image or a recording registers it first, so it
/// waits here instead of making something nobody will remove.
pub fn clean_up_and_exit(header: &str, code: i32) -> ! {
    let mut live = LIVE.lock();
    let all: Vec<Resource> = std::mem::take(&mut *live).into_iter().map(|(_, r)| r).collect();
    eprintln!("{header}");
    for line in undo(&all) {
        eprintln!("  {line}");
    }
    std::process::exit(code)
}

fn undo(all: &[Resource]) -> Vec<String> {
    let mut said = Vec::new();
    for r in all {
        if let Resource::Tracepoints(root) = r {
            crate::kernel_trace::disable(root);
            said.push(format!("turned off the tracepoints under {}", root.display()));
        }
    }
    for r in all.iter().rev() {
        if let Resource::Mount(dir) = r {
            let ok = Command::new("umount").arg("-l").arg(dir).status().is_ok_and(|s| s.success());
            let _ = std::fs::remove_dir(dir);
            said.push(format!("{} {}", if ok { "unmounted" } else { "could not unmount" }, dir.display()));
        }
    }
    for r in all {
        if let Resource::File(path) = r {
            if remove(path) {
                said.push(format!("removed {}", path.display()));
            }
        }
    }
    said
}

fn remove(path: &Path) -> bool {
    std::fs::remove_file(path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_unregister_and_clean_up_removes_files() {
        let dir = std::env::temp_dir();
        let kept = dir.join(format!("mballoc-cleanup-test-{}", std::process::id()));
        std::fs::write(&kept, b"x").unwrap();
        let g = register(Resource::File(kept.clone()));
        assert!(live().contains(&Resource::File(kept.clone())));
        let said = clean_up();
        assert!(said.iter().any(|l| l.contains("removed")), "{said:?}");
        assert!(!kept.exists());
        drop(g);
        let other = register(Resource::File(dir.join("never-made")));
        drop(other);
        assert!(!live().iter().any(|r| matches!(r, Resource::File(p) if p.ends_with("never-made"))));
    }
}
