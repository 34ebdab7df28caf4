//! Finding our mounts in the mount table, and unmounting one so that the
//! volume is clean when the call returns.

use anyhow::{bail, Context, Result};
use mballoc_vol::{FileDevice, OpenMode, VolError};
use std::path::Path;
use std::time::Duration;

/// The mount table names our mounts `mballoc:VOLUME` (without libfuse the
/// subtype does not reach it).
pub(crate) const SOURCE_PREFIX: &str = "mballoc:";

/// The mount table's source for `dir`, if an mballoc volume is mounted there.
pub fn mounted_source(dir: &Path) -> Result<Option<String>> {
    let dir = std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    for line in table.lines() {
        // id parent major:minor root mount-point options... - type source super-options
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|&f| f == "-") else { continue };
        let (point, fstype, source) = (fields.get(4), fields.get(dash + 1), fields.get(dash + 2));
        let ours = fstype.is_some_and(|t| *t == "fuse" || *t == "fuse.mballoc");
        if ours && point.map(|p| unescape(p)) == Some(dir.display().to_string()) {
            if let Some(volume) = source.and_then(|s| unescape(s).strip_prefix(SOURCE_PREFIX).map(String::from)) {
                return Ok(Some(volume));
            }
        }
    }
    Ok(None)
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
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
    let status = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(dir)
        .status()
        .context("running fusermount3 (install fuse3)")?;
    if !status.success() {
        bail!("fusermount3 -u {} failed ({status})", dir.display());
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
