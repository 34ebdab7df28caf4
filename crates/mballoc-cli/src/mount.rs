//! `mballoc mount` and `mballoc umount` from the command line, and the
//! mount helper that `mount -t fuse.mballoc` and /etc/fstab run
//! (`mount.fuse.mballoc VOLUME DIR -o OPTIONS`). The server itself is the
//! `mballoc-mount` crate.

use anyhow::{bail, Context, Result};
use mballoc_mount::{MountArgs, MountConfig};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// Start `mballoc mount --foreground` in the background and return once
/// the directory is mounted (or the server failed, with its message).
pub fn spawn_daemon(args: &MountArgs) -> Result<()> {
    let exe = std::env::current_exe().context("finding the mballoc executable")?;
    let log = std::env::temp_dir().join(format!("mballoc-mount-{}.log", std::process::id()));
    let mut daemon = std::process::Command::new(exe);
    daemon
        .arg("mount")
        .arg(&args.volume)
        .arg(&args.dir)
        .args(["-o", &args.config.to_options()])
        .arg("--foreground")
        // Its own process group: a Ctrl-C meant for the shell that ran
        // `mballoc mount` does not reach the server.
        .process_group(0);
    // The server runs on after this returns; its handle is not needed.
    let dir = args.dir.clone();
    mballoc_lab::backend::start_mount_server(daemon, &args.dir, &log, || {
        mballoc_mount::is_mounted(&dir).unwrap_or(false)
    })
    .context("starting the mount server")?;
    Ok(())
}

/// Whether this binary was started as a mount helper.
pub fn is_helper(argv0: &std::ffi::OsStr) -> bool {
    let name = std::path::Path::new(argv0).file_name().map(|n| n.to_string_lossy().into_owned());
    matches!(name.as_deref(), Some("mount.fuse.mballoc" | "mount.mballoc"))
}

/// Run as a mount helper: `VOLUME DIR [-o OPTIONS] [-n] [-s] [-f] [-v]`,
/// as mount(8) calls it (`-n`, `-s`, `-f`, `-v` are mount(8)'s own and
/// change nothing here). Mounts in the background like `mballoc mount`.
pub fn helper(args: Vec<OsString>) -> Result<()> {
    let mut positional = Vec::new();
    let mut config = MountConfig::default();
    let mut it = args.into_iter().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-o") => {
                let opts = it.next().context("-o needs an option list")?;
                config.apply(&opts.to_string_lossy())?;
            }
            Some(o) if o.starts_with("-o") => config.apply(&o[2..])?,
            Some("-n" | "-s" | "-f" | "-v") => {}
            Some(o) if o.starts_with('-') => bail!("unknown flag {o}; usage: VOLUME DIR [-o OPTIONS]"),
            _ => positional.push(PathBuf::from(a)),
        }
    }
    let [volume, dir]: [PathBuf; 2] =
        positional.try_into().map_err(|_| anyhow::anyhow!("usage: mount.fuse.mballoc VOLUME DIR [-o OPTIONS]"))?;
    // mount.fuse3 hands over the source as `mballoc#VOLUME`.
    let volume = match volume.to_str().and_then(|v| v.strip_prefix("mballoc#")) {
        Some(v) => PathBuf::from(v),
        None => volume,
    };
    spawn_daemon(&MountArgs { volume, dir, config })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_names_are_recognised() {
        assert!(is_helper(std::ffi::OsStr::new("/sbin/mount.fuse.mballoc")));
        assert!(is_helper(std::ffi::OsStr::new("mount.mballoc")));
        assert!(!is_helper(std::ffi::OsStr::new("mballoc")));
    }
}
