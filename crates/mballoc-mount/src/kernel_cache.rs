//! What the kernel keeps for the mount, and for how long: names and
//! attributes (the TTL of every entry and attribute reply), each file's
//! page cache across opens (`FOPEN_KEEP_CACHE`), and the readahead
//! window of the mount's backing device info.
//!
//! The server is the only writer of the volume while it is mounted (the
//! device is claimed exclusively), and every change the server makes
//! behind the kernel's back (set-ID bits a write clears, access times,
//! chattr's change time) is followed by an invalidation of what the kernel
//! cached. So what the kernel caches stays true for as long as it keeps
//! it, as on a local file system: the TTL is long.
//!
//! Readahead: the kernel offers the FUSE connection its default window
//! (128 KiB) at INIT and lets the server only lower it; the window a
//! sequential reader needs to keep the server busy is larger. A root
//! server raises it in sysfs after INIT, as an administrator would with
//! `blockdev --setra` on a block device.

use std::path::Path;
use std::time::Duration;

/// How long the kernel may cache names and attributes.
pub(crate) const TTL: Duration = Duration::from_secs(3600);

/// The readahead window the server asks for: the largest request it
/// takes (`max_write`, 1 MiB), so one READ is one readahead batch.
pub(crate) const READAHEAD_BYTES: u32 = 1 << 20;

/// The `major:minor` of the file system mounted at `dir`, from
/// /proc/self/mountinfo (the last mount there: the one on top).
fn device_of(dir: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let point = f.get(4)?.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\");
        (Path::new(&point) == dir).then(|| f.get(2).map(|d| d.to_string()))?
    })
}

/// Raise the readahead of the mount at `dir` to `bytes` (root only: the
/// sysfs file is root's). Returns the window now in force, in bytes, or
/// why it could not be read or changed.
pub(crate) fn raise_readahead(dir: &Path, bytes: u32) -> Result<u32, String> {
    let dev = device_of(dir).ok_or_else(|| format!("{} is not in the mount table", dir.display()))?;
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    let now: u32 = std::fs::read_to_string(&knob)
        .map_err(|e| format!("{knob}: {e}"))?
        .trim()
        .parse()
        .map_err(|_| format!("{knob}: not a number"))?;
    if now * 1024 >= bytes {
        return Ok(now * 1024);
    }
    std::fs::write(&knob, format!("{}\n", bytes / 1024)).map_err(|e| format!("{knob}: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_root_file_system_has_a_device() {
        let dev = super::device_of(std::path::Path::new("/")).expect("/ is mounted");
        let (maj, min) = dev.split_once(':').expect("major:minor");
        assert!(maj.parse::<u32>().is_ok() && min.parse::<u32>().is_ok(), "{dev}");
    }
}
