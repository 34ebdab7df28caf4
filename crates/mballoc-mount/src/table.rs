//! Finding our mounts in the mount table, and unmounting one so that the
//! volume is clean when the call returns.

use anyhow::{bail, Context, Result};
use mballoc_vol::{FileDevice, OpenMode, VolError};
use std::path::Path;
use std::time::Duration;

/// The mount table names our mounts `mballoc:VOLUME` (without libfuse the
/// subtype does not reach it).
pub(crate) const SOURCE_PREFIX: &str = "mballoc:";

/// Our mounts in the mount table: (mount point, volume). A fuse mount
/// names the volume after the prefix; a fuseblk mount names its block
/// device.
fn our_mounts() -> Result<Vec<(String, String)>> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    let mut out = Vec::new();
    for line in table.lines() {
        // id parent major:minor root mount-point options... - type source super-options
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|&f| f == "-") else { continue };
        let (Some(point), Some(&fstype), Some(source)) = (fields.get(4), fields.get(dash + 1), fields.get(dash + 2))
        else {
            continue;
        };
        let source = unescape(source);
        let volume = match fstype {
            "fuseblk.mballoc" => Some(source),
            "fuse" | "fuse.mballoc" => source.strip_prefix(SOURCE_PREFIX).map(String::from),
            _ => None,
        };
        if let Some(v) = volume {
            out.push((unescape(point), v));
        }
    }
    Ok(out)
}

/// The mount table's source for `dir`, if an mballoc volume is mounted there.
pub fn mounted_source(dir: &Path) -> Result<Option<String>> {
    let dir = std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
    let dir = dir.display().to_string();
    Ok(our_mounts()?.into_iter().find(|(point, _)| *point == dir).map(|(_, v)| v))
}

/// Where `volume` (a canonical path) is mounted already, if it is.
pub(crate) fn mount_point_of(volume: &Path) -> Result<Option<std::path::PathBuf>> {
    let v = volume.display().to_string();
    Ok(our_mounts()?.into_iter().find(|(_, vol)| *vol == v).map(|(point, _)| point.into()))
}

/// mountinfo escapes space, tab, newline and backslash as octal.
pub(crate) fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether an mballoc volume is mounted on `dir`.
pub fn is_mounted(dir: &Path) -> Result<bool> {
    Ok(mounted_source(dir)?.is_some())
}

/// Unmount `dir` and wait until the server has closed the volume, so the
/// volume is clean when this returns.
pub fn umount(dir: &Path) -> Result<()> {
    let Some(source) = mounted_source(dir)? else {
        bail!("no mballoc volume is mounted on {}", dir.display());
    };
    crate::fuse::mount::unmount(dir, false)?;
    // Mounted elsewhere too: the server goes on serving that mount.
    if our_mounts()?.iter().any(|(_, v)| *v == source) {
        return Ok(());
    }
    // The server holds the volume's lock until it has written it home.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        match FileDevice::open(Path::new(&source), OpenMode::ReadOnly) {
            Err(VolError::Busy { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(VolError::Busy { .. }) => bail!("{source} is still held 120 s after the unmount"),
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(super::unescape(r"/tmp/a\040b\134c"), "/tmp/a b\\c");
        assert_eq!(super::unescape(r"\04"), r"\04");
    }
}
