//! The FUSE requests, each mapped onto [`Volume`] calls: this module
//! holds the server's state, the INIT choices and the dispatch; the
//! operations live by concept in `entries` (names), `data` (file
//! contents), `control` (attributes, extended attributes, ioctls, the
//! volume as a whole) and `dirs` (listings).
//!
//! A request that panics is a bug: the transport answers it EIO and the
//! server then does what ext4 does on `errors=remount-ro` — the volume
//! takes no more changes (every later change fails `EROFS`), reads go on,
//! and what was committed stays; the log says so, and the volume is left
//! unclean so the next mount replays its journal.

use crate::dirs::Listings;
use crate::fuse::abi::{init, Out};
use crate::fuse::channel::Channel;
use crate::fuse::request::{Header, Op};
use crate::fuse::session::{Agreed, Answer, Handler, Wanted};
use crate::options::Atime;
use crate::vfs_flags::VfsFlags;
use mballoc_vol::{Halt, VolError, Volume};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

pub(crate) use crate::kernel_cache::TTL;

/// A request's outcome: the reply's body is in the `Out`, or an errno.
pub(crate) type Done = Result<(), i32>;

/// A volume error as the errno POSIX gives it.
pub(crate) fn errno(e: &VolError) -> i32 {
    e.errno()
}

/// Who asks: the request header's process and its ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl Caller {
    fn of(h: &Header) -> Caller {
        Caller { uid: h.uid, gid: h.gid, pid: h.pid }
    }

    /// As the volume's rules need it. FUSE does not say which
    /// capabilities a process holds: root is taken to hold CAP_FSETID.
    pub fn vol(self) -> mballoc_vol::Caller {
        mballoc_vol::Caller { uid: self.uid, gid: self.gid, privileged: self.uid == 0 }
    }

    /// Whether the caller is in group `gid`: its own, or one of its
    /// supplementary groups (read from /proc only when asked).
    pub fn in_group(self, gid: u32) -> bool {
        if self.gid == gid {
            return true;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
    }
}

pub(crate) struct VolumeFs {
    pub vol: Arc<Volume>,
    pub listings: Listings,
    /// The mount's VFS flags (access times, read-only), as last seen.
    pub vfs: Arc<VfsFlags>,
    /// Writes to the kernel that it did not ask for (dropping cached
    /// attributes); set once the connection is up.
    pub notifier: OnceLock<Channel>,
    /// After a shutdown ioctl: every request fails EIO.
    pub shut_down: AtomicBool,
    /// What INIT agreed.
    pub agreed: OnceLock<Agreed>,
    /// Where the volume is mounted (for the readahead knob).
    pub mount_dir: Option<std::path::PathBuf>,
}

impl VolumeFs {
    pub fn new(vol: Arc<Volume>, atime: Atime, read_only: bool) -> VolumeFs {
        VolumeFs {
            vol,
            listings: Listings::default(),
            vfs: Arc::new(VfsFlags::new(atime, read_only)),
            notifier: OnceLock::new(),
            shut_down: AtomicBool::new(false),
            agreed: OnceLock::new(),
            mount_dir: None,
        }
    }

    /// What the server asks of the kernel at INIT.
    pub fn wanted() -> Wanted {
        Wanted {
            flags: init::ASYNC_READ
                | init::ATOMIC_O_TRUNC
                // File handles for NFS export (lookup of "." and "..").
                | init::EXPORT_SUPPORT
                | init::BIG_WRITES
                // The umask is applied here, where a default ACL may
                // replace it.
                | init::DONT_MASK
                // ioctls on directories: chattr, and shutdown on the root.
                | init::HAS_IOCTL_DIR
                | init::PARALLEL_DIROPS
                // Set-ID bits and capabilities are cleared here, with the
                // kernel saying who may keep them (no getxattr of
                // security.capability before every write).
                | init::HANDLE_KILLPRIV_V2
                | init::POSIX_ACL
                | init::MAX_PAGES
                | init::SETXATTR_EXT
                | init::DIRECT_IO_ALLOW_MMAP,
            max_write: 1 << 20,
            max_readahead: crate::kernel_cache::READAHEAD_BYTES,
            time_gran: 1,
        }
    }

    /// Tell the kernel to forget the attributes it cached for `ino` (the
    /// server changed them without a reply that carries them).
    pub fn invalidate(&self, ino: u64) {
        if let Some(ch) = self.notifier.get() {
            let mut o = Out::with_capacity(24);
            o.u64(ino).i64(-1).i64(0);
            if let Err(e) = ch.notify(crate::fuse::abi::NOTIFY_INVAL_INODE, &[&o.bytes]) {
                // ENOENT: the kernel holds no such inode, nothing to drop.
                if e.raw_os_error() != Some(libc::ENOENT) {
                    eprintln!("mballoc mount: dropping the kernel's attributes of inode {ino}: {e}");
                }
            }
        }
    }

    fn dispatch(&self, h: &Header, op: Op<'_>, out: &mut Out) -> Answer {
        if self.shut_down.load(Ordering::Acquire) && !matches!(op, Op::Destroy | Op::Forget { .. } | Op::BatchForget) {
            return Answer::Error(libc::EIO);
        }
        #[cfg(feature = "fault-injection")]
        if matches!(op, Op::Setxattr { name: b"user.mballoc.inject-bug", .. }) {
            panic!("a bug injected into request {}", h.unique);
        }
        let c = Caller::of(h);
        let n = h.nodeid;
        let done: Done = match op {
            Op::Forget { .. } | Op::BatchForget => return Answer::Silent,
            // No interruption: every request runs to its end (ENOSYS stops
            // the kernel from sending more).
            Op::Interrupt => Err(libc::ENOSYS),
            Op::Init { .. } => Err(libc::EIO),
            Op::Destroy => self.destroy(),
            Op::Lookup { name } => self.lookup(n, name, out),
            Op::Getattr { .. } => self.getattr(n, out),
            Op::Statx { .. } => self.statx(n, out),
            Op::Setattr(s) => self.setattr(c, n, &s, out),
            Op::Readlink => self.readlink(n, out),
            Op::Symlink { name, target } => self.symlink(c, n, name, target, out),
            Op::Mknod { mode, rdev, umask, name } => self.mknod(c, n, name, mode, umask, rdev, out),
            Op::Mkdir { mode, umask, name } => self.mkdir(c, n, name, mode, umask, out),
            Op::Unlink { name } => self.unlink(n, name),
            Op::Rmdir { name } => self.rmdir(n, name),
            Op::Rename { newdir, flags, name, newname } => self.rename(c, n, name, newdir, newname, flags),
            Op::Link { oldnodeid, name } => self.link(oldnodeid, n, name, out),
            Op::Open { flags, open_flags } => self.open(c, n, flags, open_flags, out),
            Op::Create { flags, mode, umask, open_flags: _, name } => self.create(c, n, name, flags, mode, umask, out),
            Op::Tmpfile { flags, mode, umask } => self.tmpfile(c, n, flags, mode, umask, out),
            Op::Read { fh, offset, size } => self.read(n, fh, offset, size, out),
            Op::Write { fh, offset, write_flags, data } => self.write(c, n, fh, offset, write_flags, data, out),
            Op::Flush => Err(libc::ENOSYS),
            Op::Release { .. } => self.release(n),
            Op::Fsync { .. } => self.fsync(n),
            Op::Fallocate { offset, length, mode, .. } => self.fallocate(c, n, offset, length, mode),
            Op::Lseek { offset, whence, .. } => self.lseek(n, offset, whence, out),
            Op::CopyFileRange { off_in, nodeid_out, off_out, len, .. } => {
                self.copy_file_range(c, n, off_in, nodeid_out, off_out, len, out)
            }
            Op::Opendir => self.opendir(n, out),
            Op::Readdir { fh, offset, size, plus } => self.readdir(n, fh, offset, size, plus, out),
            Op::Releasedir { fh } => self.releasedir(n, fh),
            Op::Fsyncdir | Op::Syncfs => self.vol.sync().map_err(|e| errno(&e)),
            Op::Statfs => self.statfs(out),
            Op::Access { .. } => Err(libc::ENOSYS),
            Op::Setxattr { name, value, flags, setxattr_flags } => {
                self.setxattr(c, n, name, value, flags, setxattr_flags)
            }
            Op::Getxattr { name, size } => self.getxattr(n, name, size, out),
            Op::Listxattr { size } => self.listxattr(n, size, out),
            Op::Removexattr { name } => self.removexattr(n, name),
            Op::Ioctl { cmd, in_data, out_size, .. } => self.ioctl(n, cmd, in_data, out_size, out),
            Op::Unsupported(_) | Op::Unknown(_) => Err(libc::ENOSYS),
        };
        match done {
            Ok(()) => Answer::Reply,
            Err(e) => Answer::Error(e),
        }
    }

    /// The kernel's last word on a fuseblk mount: the volume is made clean
    /// before the answer, so `umount` returns with it clean.
    fn destroy(&self) -> Done {
        if !self.shut_down.load(Ordering::Acquire) {
            self.vol.sync().map_err(|e| errno(&e))?;
        }
        Ok(())
    }
}

impl Handler for VolumeFs {
    fn init(&self, agreed: &Agreed) {
        let _ = self.agreed.set(*agreed);
        // The kernel has taken INIT's window (it can only have lowered
        // its default); root raises it where the kernel reads it.
        if let Some(dir) = &self.mount_dir {
            if nix::unistd::geteuid().is_root() {
                if let Err(e) = crate::kernel_cache::raise_readahead(dir, crate::kernel_cache::READAHEAD_BYTES) {
                    eprintln!("mballoc mount: readahead stays the kernel's default: {e}");
                }
            }
        }
    }

    fn handle(&self, h: &Header, op: Op<'_>, out: &mut Out) -> Answer {
        self.dispatch(h, op, out)
    }

    fn on_panic(&self, h: &Header) {
        let first = self.vol.halt(Halt::Error(format!(
            "a bug met in FUSE request {} (opcode {}, inode {})",
            h.unique, h.opcode, h.nodeid
        )));
        if first {
            eprintln!(
                "mballoc mount: the volume takes no more changes (as ext4's errors=remount-ro): \
                 reads go on, what was committed is kept, and the next mount replays the journal"
            );
        }
    }
}
