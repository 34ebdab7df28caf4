//! The FUSE requests, each mapped onto [`Volume`] calls. Data requests
//! (open, read, write, truncate, fallocate) are in `data`.

use crate::data::DIRECT;
use crate::dirs::{Entry, Listings};
use crate::errno::{errno, link_errno};
use crate::options::Atime;
use crate::stat::{file_attr, kind, nanos};
use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use mballoc_fs::FileId;
use mballoc_vol::{Owner, Replace, SetAttr, VolError, Volume, XattrSet, NAME_MAX};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long the kernel may cache names and attributes. Every change goes
/// through this process, so the cache is only as stale as a kernel-side
/// size it already tracks.
const TTL: Duration = Duration::from_secs(1);

/// `FS_IOC_GETFLAGS` and `FS_IOC_SETFLAGS` (64- and 32-bit encodings).
const GETFLAGS: [u32; 2] = [0x8008_6601, 0x8004_6601];
const SETFLAGS: [u32; 2] = [0x4008_6602, 0x4004_6602];
/// `FS_IOC_FSGETXATTR` and `FS_IOC_FSSETXATTR`: the same flags in
/// `struct fsxattr` (28 bytes), which the kernel reads before it sets any.
const FSGETXATTR: u32 = 0x801C_581F;
const FSSETXATTR: u32 = 0x401C_5820;
/// chattr flags and their `fsx_xflags` bits.
const XFLAGS: [(u32, u32); 4] = [(0x10, 0x08), (0x20, 0x10), (0x40, 0x80), (0x80, 0x40)];

pub(crate) struct VolumeFs {
    pub vol: Arc<Volume>,
    pub listings: Listings,
    pub atime: Atime,
}

pub(crate) fn done(reply: ReplyEmpty, r: Result<(), VolError>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

fn ns_of(t: TimeOrNow) -> i64 {
    match t {
        TimeOrNow::SpecificTime(t) => nanos(t),
        TimeOrNow::Now => nanos(SystemTime::now()),
    }
}

impl VolumeFs {
    pub(crate) fn entry(&self, ino: u64, reply: ReplyEntry) {
        match file_attr(&self.vol, ino) {
            Ok((fa, a)) => reply.entry(&TTL, &fa, Generation(u64::from(a.generation))),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// The creator of a new inode. The kernel leaves the umask to this
    /// server (FUSE_DONT_MASK), which applies it unless the directory's
    /// default ACL decides.
    fn owner(req: &Request, mode: u32, umask: u32) -> Owner {
        Owner { mode: mode & 0o7777, umask, uid: req.uid(), gid: req.gid() }
    }

    /// A name from the kernel: longer than a directory holds is
    /// ENAMETOOLONG before anything else, as ext4 answers.
    fn name(name: &OsStr) -> Result<&[u8], Errno> {
        let n = name.as_bytes();
        if n.len() > NAME_MAX {
            return Err(Errno::from_i32(libc::ENAMETOOLONG));
        }
        Ok(n)
    }

    fn listing(&self, dir: u64) -> Result<Vec<Entry>, VolError> {
        let entries = self.vol.read_dir(FileId(dir))?;
        let parent = self.vol.attr(FileId(dir))?.parent().unwrap_or(dir);
        let mut out = Vec::with_capacity(entries.len() + 2);
        out.push(Entry { ino: dir, kind: FileType::Directory, name: b".".to_vec() });
        out.push(Entry { ino: parent, kind: FileType::Directory, name: b"..".to_vec() });
        out.extend(entries.into_iter().map(|e| Entry { ino: e.ino.0, kind: kind(e.kind), name: e.name }));
        Ok(out)
    }
}

impl Filesystem for VolumeFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Large writes reach the volume whole: fewer, larger folio writes.
        let _ = config.set_max_write(1 << 20);
        // Sequential reads in requests as large as the writes.
        let _ = config.set_max_readahead(1 << 20);
        // File handles for NFS export (lookup of "." and ".." below), mmap
        // of files opened O_DIRECT, lookups in one directory in parallel,
        // and POSIX ACLs enforced by the kernel from the system.posix_acl_*
        // attributes, with the umask left to this server, which knows
        // whether a default ACL replaces it. A kernel without one of these
        // just goes without it.
        for cap in [
            InitFlags::FUSE_EXPORT_SUPPORT,
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_POSIX_ACL,
            InitFlags::FUSE_DONT_MASK,
            // This server clears set-ID bits and file capabilities on
            // writes itself: without it the kernel asks for
            // security.capability before every write and fallocate, a
            // round trip each (half the fallocate rate).
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
        ] {
            let _ = config.add_capabilities(cap);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = match Self::name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let found = match name {
            // An exported handle is resolved by looking up "." in the
            // inode it names, and a directory's parent by "..".
            b"." => self.vol.attr(FileId(parent.0)).map(|_| parent.0),
            b".." => self.vol.attr(FileId(parent.0)).map(|a| a.parent().unwrap_or(parent.0)),
            n => self.vol.lookup(FileId(parent.0), n).map(|f| f.0),
        };
        match found {
            Ok(ino) => self.entry(ino, reply),
            // A name that is not there: the kernel may remember that for
            // TTL (every create comes through it and forgets it), which
            // saves the lookup a create makes first.
            Err(VolError::NoEntry { .. }) => reply.entry(&TTL, &crate::stat::negative(), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match file_attr(&self.vol, ino.0) {
            Ok((fa, _)) => reply.attr(&TTL, &fa),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
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
                self.truncate(req, ino.0, size)?;
            }
            let set = SetAttr { mode, uid, gid, atime: atime.map(ns_of), mtime: mtime.map(ns_of) };
            if set != SetAttr::default() {
                self.vol.set_attr(FileId(ino.0), set)?;
            }
            file_attr(&self.vol, ino.0)
        })();
        match r {
            Ok((fa, _)) => reply.attr(&TTL, &fa),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.vol.readlink(FileId(ino.0)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let r = Self::name(name).and_then(|n| {
            let kind = mode & mballoc_vol::S_IFMT;
            let owner = Self::owner(req, mode, umask);
            let made = if kind == mballoc_vol::S_IFREG || kind == 0 {
                // A regular file made by mknod is closed at once.
                self.vol.create_at(FileId(parent.0), n, owner).and_then(|f| self.vol.close(f).map(|()| f.0))
            } else {
                self.vol.mknod(FileId(parent.0), n, kind, rdev, owner).map(|f| f.0)
            };
            made.map_err(|e| errno(&e))
        });
        match r {
            Ok(ino) => self.entry(ino, reply),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let n = match Self::name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.vol.mkdir(FileId(parent.0), n, Self::owner(req, mode, umask)) {
            Ok(ino) => self.entry(ino.0, reply),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        done(reply, self.vol.unlink_at(FileId(parent.0), name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        done(reply, self.vol.rmdir(FileId(parent.0), name.as_bytes()));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let n = match Self::name(link_name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let owner = Owner { mode: 0o777, umask: 0, uid: req.uid(), gid: req.gid() };
        match self.vol.symlink(FileId(parent.0), n, target.as_os_str().as_bytes(), owner) {
            Ok(ino) => self.entry(ino.0, reply),
            Err(VolError::InvalidName { .. }) => reply.error(Errno::from_i32(libc::ENAMETOOLONG)),
            Err(e) => reply.error(errno(&e)),
        }
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
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        let how = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            Replace::Exchange
        } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            Replace::Never
        } else {
            Replace::Allowed
        };
        match Self::name(newname) {
            Ok(n) => done(reply, self.vol.rename(FileId(parent.0), name.as_bytes(), FileId(newparent.0), n, how)),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let n = match Self::name(newname) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.vol.link(FileId(ino.0), FileId(newparent.0), n) {
            Ok(()) => self.entry(ino.0, reply),
            Err(VolError::IsADirectory(_)) => reply.error(Errno::EPERM),
            Err(e) => reply.error(link_errno(&e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.open_file(req, ino.0, flags.0) {
            Ok(fh) if fh & DIRECT != 0 => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
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
        let n = match Self::name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let made = self.vol.create_at(FileId(parent.0), n, Self::owner(req, mode, umask));
        match made.and_then(|f| file_attr(&self.vol, f.0)) {
            Ok((fa, a)) => {
                let generation = Generation(u64::from(a.generation));
                if flags & libc::O_DIRECT != 0 {
                    reply.created(&TTL, &fa, generation, FileHandle(DIRECT), FopenFlags::FOPEN_DIRECT_IO)
                } else {
                    reply.created(&TTL, &fa, generation, FileHandle(0), FopenFlags::empty())
                }
            }
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
        match self.read_file(ino.0, fh.0, offset, size) {
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match self.write_file(req, ino.0, fh.0, offset, data, kill) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // close(2) promises no durability (fsync does) and locks are the
        // kernel's: ENOSYS tells the kernel to send no more flushes, one
        // round trip less per close.
        reply.error(Errno::ENOSYS);
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
            Ok(()) | Err(VolError::Fs(mballoc_fs::FsError::Unlinked(_) | mballoc_fs::FsError::UnknownFile(_))) => {
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // A regular file's fsync writes its data and commits; anything
        // else has only names and attributes, which the commit carries.
        let r = match self.vol.attr(FileId(ino.0)) {
            Ok(a) if a.is_file() => self.vol.fsync(FileId(ino.0)),
            Ok(_) => self.vol.sync(),
            Err(e) => Err(e),
        };
        done(reply, r);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.listing(ino.0) {
            Ok(l) => reply.opened(FileHandle(self.listings.open(l)), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let mut failed = None;
        let listing = self.listings.get(fh.0, offset, || {
            self.listing(ino.0).unwrap_or_else(|e| {
                failed = Some(e);
                Vec::new()
            })
        });
        if let Some(e) = failed {
            return reply.error(errno(&e));
        }
        // A cookie is the position after an entry in the handle's listing.
        for (i, e) in listing.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(e.ino), i as u64 + 1, e.kind, OsStr::from_bytes(&e.name)) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.listings.release(fh.0);
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

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let how = match flags {
            0 => XattrSet::Any,
            libc::XATTR_CREATE => XattrSet::Create,
            libc::XATTR_REPLACE => XattrSet::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        match self.vol.set_xattr(FileId(ino.0), name.as_bytes(), value, how) {
            // A name in no namespace the volume keeps: ext4 answers EOPNOTSUPP.
            Err(VolError::InvalidName { .. }) => reply.error(Errno::from_i32(libc::EOPNOTSUPP)),
            r => done(reply, r),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.vol.get_xattr(FileId(ino.0), name.as_bytes()) {
            Ok(v) => sized(reply, size, &v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.vol.list_xattrs(FileId(ino.0)) {
            Ok(names) => {
                let mut all = Vec::new();
                for n in names {
                    all.extend_from_slice(&n);
                    all.push(0);
                }
                sized(reply, size, &all)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        done(reply, self.vol.remove_xattr(FileId(ino.0), name.as_bytes()));
    }

    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let set = |flags: u32, reply: ReplyIoctl| match self.vol.set_flags(FileId(ino.0), flags) {
            Ok(()) => reply.ioctl(0, &[]),
            Err(VolError::InvalidArgument(_)) => reply.error(Errno::from_i32(libc::EOPNOTSUPP)),
            Err(e) => reply.error(errno(&e)),
        };
        let word = |b: &[u8]| u32::from_le_bytes(b[..4].try_into().expect("four bytes"));
        match cmd {
            c if GETFLAGS.contains(&c) || c == FSGETXATTR => match self.vol.flags(FileId(ino.0)) {
                Ok(f) => {
                    let value = if c == FSGETXATTR {
                        XFLAGS.iter().filter(|(fl, _)| f & fl != 0).map(|(_, x)| x).sum()
                    } else {
                        f
                    };
                    let mut out = vec![0u8; out_size as usize];
                    let n = out.len().min(4);
                    out[..n].copy_from_slice(&value.to_le_bytes()[..n]);
                    reply.ioctl(0, &out)
                }
                Err(e) => reply.error(errno(&e)),
            },
            c if SETFLAGS.contains(&c) && in_data.len() >= 4 => set(word(in_data), reply),
            FSSETXATTR if in_data.len() >= 4 => {
                let x = word(in_data);
                let known: u32 = XFLAGS.iter().map(|(_, x)| x).sum();
                if x & !known != 0 {
                    return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
                }
                set(XFLAGS.iter().filter(|(_, xf)| x & xf != 0).map(|(fl, _)| fl).sum(), reply)
            }
            _ => reply.error(Errno::from_i32(libc::ENOTTY)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.fallocate_file(req, ino.0, offset, length, mode) {
            Err(VolError::InvalidArgument(_)) => reply.error(Errno::from_i32(libc::EOPNOTSUPP)),
            r => done(reply, r),
        }
    }
}

/// An extended attribute's value or list as `getxattr(2)` wants it: its
/// size when asked with 0, ERANGE when it does not fit.
fn sized(reply: ReplyXattr, size: u32, v: &[u8]) {
    if size == 0 {
        reply.size(v.len() as u32);
    } else if v.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE));
    } else {
        reply.data(v);
    }
}
