//! Mounting a FUSE connection and taking it down again.
//!
//! As root the server mounts itself with mount(2): `fuse.mballoc` for a
//! volume file, `fuseblk.mballoc` for a volume on a block device (then the
//! kernel sends `sync(2)` and `syncfs(2)` through, and waits for the
//! server at unmount). Without root it asks Debian's set-user-ID
//! `fusermount3`, which mounts and hands the connection back over a
//! socket; such mounts are always `nosuid,nodev` and never fuseblk.

use super::channel::Channel;
use crate::options::Atime;
use anyhow::{bail, Context, Result};
use nix::mount::{MntFlags, MsFlags};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;

/// What to mount.
#[derive(Debug, Clone)]
pub struct MountSpec<'a> {
    /// The mount table's source: `mballoc:VOLUME`, or the block device.
    pub source: &'a str,
    /// The mount point.
    pub dir: &'a Path,
    /// Shown after `fuseblk.` in the mount table (a `fuse` mount is known
    /// by its source).
    pub subtype: &'a str,
    /// The block device's block size when mounting as fuseblk.
    pub block: Option<u32>,
    /// Mounted read-only.
    pub read_only: bool,
    /// Device nodes open their devices and set-user-ID bits take effect,
    /// as on ext4 (root only; `nodev,nosuid` otherwise).
    pub devices: bool,
    /// The access-time flag the VFS shows (the server follows it).
    pub atime: crate::options::Atime,
    /// The largest READ the kernel may send, where the server needs it
    /// smaller than `max_write` (replies spliced through a pipe).
    pub max_read: Option<u32>,
}

fn max_read_option(spec: &MountSpec<'_>) -> String {
    spec.max_read.map_or(String::new(), |n| format!(",max_read={n}"))
}

/// Mount `spec` and return the connection the kernel will send its
/// requests on.
pub fn mount(spec: &MountSpec<'_>) -> Result<Channel> {
    if nix::unistd::geteuid().is_root() {
        mount_directly(spec)
    } else {
        if spec.block.is_some() {
            bail!("mounting a block device as fuseblk needs root");
        }
        mount_with_fusermount(spec)
    }
}

fn mount_directly(spec: &MountSpec<'_>) -> Result<Channel> {
    let ch = Channel::open().context("opening /dev/fuse (is the fuse module loaded?)")?;
    let (kind, extra) = match spec.block {
        Some(bs) => ("fuseblk", format!(",blksize={bs}")),
        None => ("fuse", String::new()),
    };
    let data = format!(
        "fd={},rootmode=40000,user_id={},group_id={},default_permissions,allow_other{max_read}{extra}",
        ch.file().as_raw_fd(),
        nix::unistd::getuid(),
        nix::unistd::getgid(),
        max_read = max_read_option(spec),
    );
    let mut flags = MsFlags::empty();
    if !spec.devices {
        flags |= MsFlags::MS_NODEV | MsFlags::MS_NOSUID;
    }
    if spec.read_only {
        flags |= MsFlags::MS_RDONLY;
    }
    flags |= match spec.atime {
        Atime::Relatime => MsFlags::MS_RELATIME,
        Atime::NoAtime => MsFlags::MS_NOATIME,
        Atime::Strict => MsFlags::MS_STRICTATIME,
    };
    // A volume file's mount is plain `fuse`, as libfuse servers started
    // without a subtype show (what xfstests' FSTYP=fuse expects); the
    // source `mballoc:VOLUME` names it. A fuseblk mount names a block
    // device, so its type carries the subtype.
    let fstype = if spec.block.is_some() { format!("{kind}.{}", spec.subtype) } else { kind.to_string() };
    nix::mount::mount(Some(spec.source), spec.dir, Some(fstype.as_str()), flags, Some(data.as_str()))
        .with_context(|| format!("mount -t {fstype} {} {}", spec.source, spec.dir.display()))?;
    Ok(ch)
}

fn mount_with_fusermount(spec: &MountSpec<'_>) -> Result<Channel> {
    use nix::sys::socket::{recvmsg, socketpair, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType};
    // The child's end must survive exec: no CLOEXEC on it.
    let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC)
        .context("making a socket pair for fusermount3")?;
    let flags = nix::fcntl::fcntl(&theirs, nix::fcntl::FcntlArg::F_GETFD).context("fcntl")?;
    let flags = nix::fcntl::FdFlag::from_bits_truncate(flags) - nix::fcntl::FdFlag::FD_CLOEXEC;
    nix::fcntl::fcntl(&theirs, nix::fcntl::FcntlArg::F_SETFD(flags)).context("fcntl")?;
    let mut opts = format!("default_permissions,fsname={},subtype={}", spec.source, spec.subtype);
    // Other users reach a user's mount only where the administrator allows it.
    if std::fs::read_to_string("/etc/fuse.conf").is_ok_and(|c| c.lines().any(|l| l.trim() == "user_allow_other")) {
        opts.push_str(",allow_other");
    }
    if spec.read_only {
        opts.push_str(",ro");
    }
    opts.push_str(&max_read_option(spec));
    // relatime is what a new mount gets anyway; fusermount3 before 3.15
    // refuses the word ("unknown option").
    opts.push_str(match spec.atime {
        Atime::Relatime => "",
        Atime::NoAtime => ",noatime",
        Atime::Strict => ",strictatime",
    });
    let status = Command::new("fusermount3")
        .arg("-o")
        .arg(&opts)
        .arg("--")
        .arg(spec.dir)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .status()
        .context("running fusermount3 (install fuse3)")?;
    drop(theirs);
    if !status.success() {
        bail!("fusermount3 could not mount {} ({status})", spec.dir.display());
    }
    let mut space = nix::cmsg_space!(std::os::fd::RawFd);
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let msg = recvmsg::<()>(ours.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::empty())
        .context("receiving the connection from fusermount3")?;
    for c in msg.cmsgs().context("reading fusermount3's message")? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            if let Some(&fd) = fds.first() {
                return Ok(Channel::from_file(std::fs::File::from(super::sys::own_received(fd))));
            }
        }
    }
    bail!("fusermount3 mounted {} but sent no connection", spec.dir.display())
}

/// Unmount `dir`; `lazy` detaches it even while it is busy. A mount still
/// busy is tried again for up to two seconds before the error is given:
/// a file its last user closed a moment ago can still hold it while the
/// kernel finishes releasing it (seen under load right after a read).
pub fn unmount(dir: &Path, lazy: bool) -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        let flags = if lazy { MntFlags::MNT_DETACH } else { MntFlags::empty() };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            match nix::mount::umount2(dir, flags) {
                Err(nix::errno::Errno::EBUSY) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                r => return r.with_context(|| format!("umount {}", dir.display())),
            }
        }
    }
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let status = cmd.arg(dir).status().context("running fusermount3 (install fuse3)")?;
    if !status.success() {
        bail!("fusermount3 -u {} failed ({status})", dir.display());
    }
    Ok(())
}

/// Mount what is mounted on `from` on `to` as well (root only).
pub fn bind(from: &Path, to: &Path, read_only: bool) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("{} is mounted already; mounting it again needs root", from.display());
    }
    nix::mount::mount(Some(from), to, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .with_context(|| format!("mount --bind {} {}", from.display(), to.display()))?;
    if read_only {
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        nix::mount::mount(None::<&str>, to, None::<&str>, flags, None::<&str>)
            .with_context(|| format!("making {} read-only", to.display()))?;
    }
    Ok(())
}
