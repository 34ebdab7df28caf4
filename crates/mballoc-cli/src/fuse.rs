//! `mballoc mount`: a volume as a FUSE file system, so programs written
//! elsewhere (fio, will-it-scale, cp) reach the engine through ordinary
//! system calls.
//!
//! Each request maps onto one [`Volume`] call; FUSE inode numbers are the
//! volume's (the root is 1 on both sides). The kernel's page cache is left
//! out of the write path (no writeback caching), so buffered writes reach
//! the volume's folio cache as they are made and `O_DIRECT` opens go to the
//! device unbuffered. Errors become the errno POSIX gives them; requests the
//! volume has no meaning for (links, special files, extended attributes)
//! get `ENOSYS`, `EPERM` or `EOPNOTSUPP`, never a hang.
//!
//! The mount ends on `mballoc umount`, `fusermount3 -u`, SIGTERM, SIGINT or
//! SIGHUP: the session stops, then the volume syncs, checkpoints and is
//! marked clean. A killed daemon leaves the journal, which the next mount
//! replays like any crash.

use anyhow::{bail, Context, Result};
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig,
    LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, Session, TimeOrNow, WriteFlags,
};
use mballoc_fs::{FallocateMode, FileId, FsConfig, FsError};
use mballoc_vol::{Attr, FileDevice, MountOptions, OpenMode, Owner, Replace, SetAttr, VolError, Volume, NAME_MAX};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may cache names and attributes. Every change goes
/// through this process, so the cache is only as stale as a kernel-side
/// size it already tracks.
const TTL: Duration = Duration::from_secs(1);
/// The mount table names our mounts `mballoc:VOLUME` (without libfuse
/// the subtype does not reach it).
const SOURCE_PREFIX: &str = "mballoc:";
/// File handles of `O_DIRECT` opens carry this bit.
const DIRECT: u64 = 1;

/// The allocation policy a mount runs the engine with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// The engine's own defaults.
    Default,
    /// ext4's decisions (docs/PROFILES.md).
    Kernel,
}

/// What `mballoc mount` was asked for.
pub struct MountArgs {
    pub volume: PathBuf,
    pub dir: PathBuf,
    pub folio: u32,
    pub profile: Profile,
    pub threads: usize,
}

struct VolumeFs {
    vol: Arc<Volume>,
}

fn errno(e: &VolError) -> Errno {
    Errno::from_i32(match e {
        VolError::NoEntry { .. } | VolError::NoInode(_) => libc::ENOENT,
        VolError::Exists { .. } => libc::EEXIST,
        VolError::NotADirectory(_) => libc::ENOTDIR,
        VolError::IsADirectory(_) => libc::EISDIR,
        VolError::NotEmpty(_) => libc::ENOTEMPTY,
        VolError::InvalidName { name, .. } if name.len() > NAME_MAX => libc::ENAMETOOLONG,
        VolError::InvalidName { .. } | VolError::Loop(_) | VolError::InvalidArgument(_) => libc::EINVAL,
        VolError::ReadOnly => libc::EROFS,
        VolError::NoInodes(_) | VolError::MetadataFull { .. } => libc::ENOSPC,
        VolError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        VolError::Fs(f) => match f {
            FsError::UnknownFile(_) | FsError::Unlinked(_) => libc::ENOENT,
            FsError::NoSpace { .. } => libc::ENOSPC,
            FsError::FileTooLarge { .. } => libc::EFBIG,
            FsError::ZeroLength | FsError::InvalidConfig(_) => libc::EINVAL,
            _ => libc::EIO,
        },
        _ => libc::EIO,
    })
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

fn ns_of(t: TimeOrNow) -> i64 {
    match t {
        TimeOrNow::SpecificTime(t) => nanos(t),
        TimeOrNow::Now => nanos(SystemTime::now()),
    }
}

impl VolumeFs {
    fn file_attr(&self, ino: u64) -> Result<FileAttr, VolError> {
        let a: Attr = self.vol.attr(ino)?;
        let bs = u64::from(self.vol.superblock().block_size);
        let (size, blocks) = if a.is_dir() {
            (0, 0)
        } else {
            let f = FileId(ino);
            let mapped: u64 = self.vol.extents(f)?.iter().map(|e| u64::from(e.len)).sum();
            (self.vol.size(f)?, mapped * bs / 512)
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks,
            atime: time(a.atime),
            mtime: time(a.mtime),
            ctime: time(a.ctime),
            crtime: time(a.ctime),
            kind: if a.is_dir() { FileType::Directory } else { FileType::RegularFile },
            perm: (a.mode & 0o7777) as u16,
            nlink: if a.is_dir() { 2 } else { 1 },
            uid: a.uid,
            gid: a.gid,
            rdev: 0,
            blksize: bs as u32,
            flags: 0,
        })
    }

    fn entry(&self, ino: u64, reply: ReplyEntry) {
        match self.file_attr(ino) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn owner(req: &Request, mode: u32, umask: u32) -> Owner {
        Owner { mode: mode & !umask & 0o7777, uid: req.uid(), gid: req.gid() }
    }

    fn fallocate_mode(&self, f: FileId, offset: u64, len: u64, mode: i32) -> Result<(), VolError> {
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let size_mode = if keep { FallocateMode::KeepSize } else { FallocateMode::ExtendSize };
        match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => self.vol.fallocate(f, offset, len, size_mode),
            libc::FALLOC_FL_PUNCH_HOLE if keep => self.vol.punch_hole(f, offset, len),
            libc::FALLOC_FL_ZERO_RANGE => {
                // Zeroes as unwritten extents, as ext4 does: drop what the
                // range holds, then allocate it again unwritten.
                let size = self.vol.size(f)?;
                self.vol.punch_hole(f, offset, len.min(size.saturating_sub(offset)))?;
                self.vol.fallocate(f, offset, len, size_mode)
            }
            _ => Err(VolError::InvalidArgument(format!("fallocate mode {mode:#x}"))),
        }
    }
}

/// `O_DIRECT` I/O the volume can take unbuffered; other sizes go through
/// the cache, as ext4 falls back to buffered I/O for unaligned direct I/O.
fn aligned(offset: u64, len: u64, bs: u64) -> bool {
    offset.is_multiple_of(bs) && len.is_multiple_of(bs)
}

fn done(reply: ReplyEmpty, r: Result<(), VolError>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

impl Filesystem for VolumeFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Large writes reach the volume whole: fewer, larger folio writes.
        let _ = config.set_max_write(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.vol.lookup(parent.0, name.as_bytes()) {
            Ok(ino) => self.entry(ino, reply),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.file_attr(ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = (|| {
            if let Some(size) = size {
                if self.vol.attr(ino.0)?.is_dir() {
                    return Err(VolError::IsADirectory(ino.0));
                }
                self.vol.truncate(FileId(ino.0), size)?;
                self.vol.touch(FileId(ino.0));
            }
            let set = SetAttr { mode, uid, gid, atime: atime.map(ns_of), mtime: mtime.map(ns_of) };
            if set != SetAttr::default() || size.is_some() {
                self.vol.set_attr(ino.0, set)?;
            }
            self.file_attr(ino.0)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        match self.vol.mkdir(parent.0, name.as_bytes(), Self::owner(req, mode, umask)) {
            Ok(ino) => self.entry(ino, reply),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        done(reply, self.vol.unlink_at(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        done(reply, self.vol.rmdir(parent.0, name.as_bytes()));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.contains(RenameFlags::RENAME_WHITEOUT) {
            reply.error(Errno::EINVAL);
            return;
        }
        let replace = if flags.contains(RenameFlags::RENAME_NOREPLACE) { Replace::Never } else { Replace::Allowed };
        done(reply, self.vol.rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes(), replace));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let f = FileId(ino.0);
        let r = (|| {
            if self.vol.attr(ino.0)?.is_dir() {
                return Err(VolError::IsADirectory(ino.0));
            }
            self.vol.open_file(f)?;
            if flags.0 & libc::O_TRUNC != 0 && flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                self.vol.truncate(f, 0)?;
                self.vol.touch(f);
            }
            Ok(())
        })();
        match r {
            Ok(()) if flags.0 & libc::O_DIRECT != 0 => reply.opened(FileHandle(DIRECT), FopenFlags::FOPEN_DIRECT_IO),
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let made = self.vol.create_at(parent.0, name.as_bytes(), Self::owner(req, mode, umask));
        match made.and_then(|f| self.file_attr(f.0)) {
            Ok(a) if flags & libc::O_DIRECT != 0 => {
                reply.created(&TTL, &a, Generation(0), FileHandle(DIRECT), FopenFlags::FOPEN_DIRECT_IO)
            }
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let f = FileId(ino.0);
        let mut buf = vec![0u8; size as usize];
        let bs = u64::from(self.vol.superblock().block_size);
        let direct = fh.0 & DIRECT != 0 && aligned(offset, u64::from(size), bs);
        let r = if direct { self.vol.read_direct(f, offset, &mut buf) } else { self.vol.read(f, offset, &mut buf) };
        match r {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let f = FileId(ino.0);
        let bs = u64::from(self.vol.superblock().block_size);
        let direct = fh.0 & DIRECT != 0 && aligned(offset, data.len() as u64, bs);
        let r = if direct { self.vol.write_direct(f, offset, data) } else { self.vol.write(f, offset, data) };
        match r {
            Ok(()) => {
                self.vol.touch(f);
                reply.written(data.len() as u32)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // close(2) does not promise durability; fsync does.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        match self.vol.close(FileId(ino.0)) {
            // Unlinked while open: nothing is left to close.
            Ok(()) | Err(VolError::Fs(FsError::Unlinked(_) | FsError::UnknownFile(_))) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        done(reply, self.vol.fsync(FileId(ino.0)));
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let entries = match self.vol.read_dir(ino.0) {
            Ok(e) => e,
            Err(e) => return reply.error(errno(&e)),
        };
        let parent = self.vol.attr(ino.0).map_or(ino.0, |a| a.parent);
        let dots = [(ino.0, FileType::Directory, b".".to_vec()), (parent, FileType::Directory, b"..".to_vec())];
        let all = dots.into_iter().chain(entries.into_iter().map(|e| {
            let kind = if e.is_dir { FileType::Directory } else { FileType::RegularFile };
            (e.ino, kind, e.name)
        }));
        // Offsets are positions in the sorted listing: a directory changed
        // between calls may skip or repeat a name, never loop.
        for (i, (ino, kind, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, OsStr::from_bytes(&name)) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        done(reply, self.vol.sync());
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let u = self.vol.usage();
        reply.statfs(
            u.data_blocks,
            u.free_blocks,
            u.free_blocks,
            u.inodes,
            u.free_inodes,
            u.block_size,
            NAME_MAX as u32,
            u.block_size,
        );
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let f = FileId(ino.0);
        let supported = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !supported != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let r = self.fallocate_mode(f, offset, length, mode);
        if r.is_ok() {
            self.vol.touch(f);
        }
        match r {
            Err(VolError::InvalidArgument(_)) => reply.error(Errno::EOPNOTSUPP),
            r => done(reply, r),
        }
    }
}

/// Mount and serve until unmounted or signalled; then sync and close the
/// volume cleanly. Returns once the volume is closed.
pub fn serve(args: &MountArgs) -> Result<()> {
    let dev = FileDevice::open(&args.volume, OpenMode::ReadWrite)
        .with_context(|| format!("opening {}", args.volume.display()))?;
    let opts = MountOptions { folio_size: args.folio, ..MountOptions::default() };
    let profile = args.profile;
    let vol = Volume::open_with(Arc::new(dev), opts, |c| {
        if profile == Profile::Kernel {
            *c = FsConfig::kernel(c.geometry);
        }
    })
    .with_context(|| format!("mounting {}", args.volume.display()))?;
    let vol = Arc::new(vol);
    let source = std::fs::canonicalize(&args.volume).unwrap_or_else(|_| args.volume.clone());
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::FSName(format!("{SOURCE_PREFIX}{}", source.display())),
        MountOption::Subtype("mballoc".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    cfg.acl = fuser::SessionACL::All;
    cfg.n_threads = Some(args.threads.max(1));
    let mut session = Session::new(VolumeFs { vol: vol.clone() }, &args.dir, &cfg)
        .with_context(|| format!("mounting on {}", args.dir.display()))?;
    let mut unmounter = session.unmount_callable();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .context("installing signal handlers")?;
    let handle = signals.handle();
    let dir = args.dir.clone();
    let watcher = std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            eprintln!("mballoc mount: signal {sig}: unmounting {}", dir.display());
            if let Err(e) = unmounter.unmount() {
                eprintln!("mballoc mount: unmounting {}: {e}", dir.display());
            }
        }
    });
    let served = session.run();
    handle.close();
    let _ = watcher.join();
    served.with_context(|| format!("serving {}", args.dir.display()))?;
    let vol =
        Arc::try_unwrap(vol).map_err(|_| anyhow::anyhow!("the volume is still in use after the session ended"))?;
    vol.unmount().with_context(|| format!("closing {}", args.volume.display()))?;
    Ok(())
}

/// Start `mballoc mount --foreground` in the background and return once
/// `dir` is mounted (or the daemon failed, with its message).
pub fn spawn_daemon(args: &MountArgs) -> Result<()> {
    let exe = std::env::current_exe().context("finding the mballoc executable")?;
    let log = std::env::temp_dir().join(format!("mballoc-mount-{}.log", std::process::id()));
    let profile = match args.profile {
        Profile::Default => "default",
        Profile::Kernel => "kernel",
    };
    let mut daemon = std::process::Command::new(exe);
    daemon
        .arg("mount")
        .arg(&args.volume)
        .arg(&args.dir)
        .args(["--folio", &args.folio.to_string(), "--profile", profile, "--threads", &args.threads.to_string()])
        .arg("--foreground")
        // Its own process group: a Ctrl-C meant for the shell that ran
        // `mballoc mount` does not reach the daemon.
        .process_group(0);
    // The daemon runs on after this returns; its handle is not needed.
    mballoc_lab::backend::start_mount_server(daemon, &args.dir, &log, || is_mounted(&args.dir).unwrap_or(false))
        .context("starting the mount daemon")?;
    Ok(())
}

/// The mount table's source for `dir`, if an mballoc volume is mounted there.
fn mounted_source(dir: &Path) -> Result<Option<String>> {
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

fn is_mounted(dir: &Path) -> Result<bool> {
    Ok(mounted_source(dir)?.is_some())
}

/// Unmount `dir` and wait until the daemon has closed the volume, so the
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
    // The daemon holds the volume's lock until it has written it home.
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
