//! What the mount's tests share: whether this machine can mount, and a
//! server started on a volume, waited for until the kernel lists it.

use mballoc_mount::{MountArgs, MountConfig};
use std::path::Path;
use std::time::{Duration, Instant};

/// Root and /dev/fuse, or why not.
pub fn can_mount() -> Result<(), String> {
    let root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")));
    if !root {
        return Err("needs root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse".into());
    }
    Ok(())
}

/// Serve `vol` at `mnt` with `config` on a thread; returns once mounted.
pub fn serve(vol: &Path, mnt: &Path, config: MountConfig) -> std::thread::JoinHandle<anyhow::Result<()>> {
    let args = MountArgs { volume: vol.to_path_buf(), dir: mnt.to_path_buf(), config };
    let server = std::thread::spawn(move || mballoc_mount::serve(&args));
    let t0 = Instant::now();
    while !mballoc_mount::is_mounted(mnt).unwrap_or(false) {
        assert!(!server.is_finished(), "the server ended before mounting");
        assert!(t0.elapsed() < Duration::from_secs(20), "not mounted after 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}
