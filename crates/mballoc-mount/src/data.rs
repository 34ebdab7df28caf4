//! Requests about a file's contents: open, create (named or `O_TMPFILE`),
//! read, write, truncate, fallocate, release and fsync, with the rules
//! ext4 applies on the way: chattr flags (immutable refuses every change,
//! append-only every change but appending), set-user-ID and set-group-ID
//! bits cleared by changes from callers who may not keep them, access
//! times, `fallocate` modes at and past the end of the file.
//!
//! The kernel's page cache is left out of the write path (no writeback
//! caching), so buffered writes reach the volume as they are made: its
//! folio cache, or straight to their blocks for whole blocks of
//! [`crate::MOUNT_WRITE_THROUGH_BYTES`] or more (the volume's
//! `write_through_bytes`); `O_DIRECT` opens go to the device unbuffered.

use crate::fuse::abi::{
    fattr, put_entry, Out, FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE, OPEN_KILL_SUIDGID, WRITE_KILL_SUIDGID,
};
use crate::fuse::splice::{is_overflow, ReplyPipe};
use crate::options::Atime;
use crate::server::{errno, Caller, Done, VolumeFs, TTL};
use crate::stat::file_attr;
use mballoc_fs::{FallocateMode, FileId};
use mballoc_vol::{Device, Edit, Owner, ReadSink, SetId, VolError, FL_APPEND, FL_IMMUTABLE, S_IFDIR, S_IFMT, S_IFREG};

/// A read's bytes queued in the serving thread's pipe: the device's by
/// reference, the rest (cached bytes, zeros) copied.
struct PipeSink<'a> {
    pipe: &'a mut ReplyPipe,
    unique: u64,
}

impl ReadSink for PipeSink<'_> {
    fn start(&mut self, len: usize) -> std::io::Result<()> {
        self.pipe.begin(self.unique, len)
    }

    fn device(&mut self, dev: &dyn Device, offset: u64, len: usize) -> std::io::Result<()> {
        match dev.fd() {
            Some(fd) => self.pipe.splice_in(fd, offset, len),
            None => {
                let mut b = vec![0u8; len];
                dev.read_at(offset, &mut b)?;
                self.pipe.write_in(&b)
            }
        }
    }

    fn bytes(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.pipe.write_in(b)
    }
}

/// File handles of `O_DIRECT` opens carry this bit.
pub(crate) const DIRECT: u64 = 1;

/// Whether an open with `flags` is allowed on an inode with chattr
/// `attr_flags`: no write access to an immutable file, and write access
/// to an append-only one only with `O_APPEND`.
pub(crate) fn open_flags_allowed(flags: i32, attr_flags: u32) -> bool {
    let truncates = flags & libc::O_TRUNC != 0;
    let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || truncates;
    if !writes {
        return true;
    }
    let appends_only = flags & libc::O_APPEND != 0 && !truncates;
    attr_flags & FL_IMMUTABLE == 0 && (attr_flags & FL_APPEND == 0 || appends_only)
}

/// `O_DIRECT` I/O the volume can take unbuffered; other sizes go through
/// the cache, as ext4 falls back to buffered I/O for unaligned direct I/O.
fn aligned(offset: u64, len: u64, bs: u64) -> bool {
    offset.is_multiple_of(bs) && len.is_multiple_of(bs)
}

fn refuse(ino: u64, why: &'static str) -> VolError {
    VolError::NotPermitted { ino, why }
}

/// `struct fuse_open_out`. A buffered open keeps the file's page cache
/// (nothing changes the file but this mount, which tells the kernel what
/// it changes itself) unless `cache` says the next read must reach the
/// server.
fn put_open(out: &mut Out, fh: u64, cache: PageCache) {
    let flags = match (fh & DIRECT != 0, cache) {
        (true, _) => FOPEN_DIRECT_IO,
        (false, PageCache::Keep) => FOPEN_KEEP_CACHE,
        (false, PageCache::Drop) => 0,
    };
    out.u64(fh).u32(flags).u32(0);
}

/// What an open does with the pages the kernel holds of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageCache {
    Keep,
    /// Dropped, so that the next read reaches the server: it is due to
    /// update the access time, which a read served from the page cache
    /// would not.
    Drop,
}

impl VolumeFs {
    /// Change `ino`'s contents as `c` asks under the volume's rules
    /// (chattr flags, set-ID bits, times); `kill`: the kernel says `c` may
    /// not keep set-ID bits. The kernel forgets attributes the change
    /// dropped.
    fn edit(&self, c: Caller, ino: u64, e: Edit<'_>, kill: bool) -> Result<(), VolError> {
        let set_id = if !kill && c.vol().privileged {
            SetId::Keep
        } else {
            // Group membership matters only to a set-group-ID bit the
            // group cannot execute (the supplementary groups are read
            // only then).
            let a = self.vol.attr(FileId(ino))?;
            let in_group = a.mode & 0o2010 != 0o2000 || c.in_group(a.gid);
            mballoc_vol::Caller { privileged: false, ..c.vol() }.set_id(in_group)
        };
        if self.vol.edit(FileId(ino), e, set_id)? {
            self.invalidate(ino);
        }
        Ok(())
    }

    pub(crate) fn open(&self, c: Caller, ino: u64, flags: i32, open_flags: u32, out: &mut Out) -> Done {
        let fh = self.open_file(c, ino, flags, open_flags & OPEN_KILL_SUIDGID != 0).map_err(|e| errno(&e))?;
        put_open(out, fh, self.page_cache(ino));
        Ok(())
    }

    /// Open `ino`; the file handle's bits say how it was opened.
    fn open_file(&self, c: Caller, ino: u64, flags: i32, kill: bool) -> Result<u64, VolError> {
        let a = self.vol.attr(FileId(ino))?;
        match a.mode & S_IFMT {
            S_IFDIR => return Err(VolError::IsADirectory(ino)),
            S_IFREG => {}
            // Devices, FIFOs and sockets are opened by the kernel, never
            // here; anything else has no data to open.
            _ => return Err(VolError::InvalidArgument(format!("inode {ino} holds no data"))),
        }
        if !open_flags_allowed(flags, a.flags) {
            return Err(refuse(ino, "immutable, or append-only without O_APPEND"));
        }
        let f = FileId(ino);
        self.vol.open_file(f)?;
        if flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY {
            if let Err(e) = self.edit(c, ino, Edit::Truncate { size: 0 }, kill) {
                let _ = self.vol.close(f);
                return Err(e);
            }
        }
        Ok(if flags & libc::O_DIRECT != 0 { DIRECT } else { 0 })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        &self,
        c: Caller,
        parent: u64,
        name: &[u8],
        flags: i32,
        mode: u32,
        umask: u32,
        out: &mut Out,
    ) -> Done {
        if name.len() > mballoc_vol::NAME_MAX {
            return Err(libc::ENAMETOOLONG);
        }
        let o = Owner { mode: mode & 0o7777, umask, uid: c.uid, gid: c.gid };
        let f = self.vol.create_at(FileId(parent), name, o).map_err(|e| errno(&e))?;
        self.created(f.0, flags, out)
    }

    /// `O_TMPFILE`: a file with no name, open once, that `linkat` may
    /// name later and that goes at its last close otherwise.
    pub(crate) fn tmpfile(&self, c: Caller, dir: u64, flags: i32, mode: u32, umask: u32, out: &mut Out) -> Done {
        let o = Owner { mode: mode & 0o7777, umask, uid: c.uid, gid: c.gid };
        let f = self.vol.create_unnamed(FileId(dir), o).map_err(|e| errno(&e))?;
        self.created(f.0, flags, out)
    }

    /// The reply to a create: the entry and the open handle.
    fn created(&self, ino: u64, flags: i32, out: &mut Out) -> Done {
        let (a, generation, _) = file_attr(&self.vol, ino).map_err(|e| errno(&e))?;
        put_entry(out, &a, u64::from(generation), TTL, TTL);
        put_open(out, if flags & libc::O_DIRECT != 0 { DIRECT } else { 0 }, self.page_cache(ino));
        Ok(())
    }

    /// Whether an open may keep the file's cached pages: not when the
    /// next read is due to update the access time.
    fn page_cache(&self, ino: u64) -> PageCache {
        let rule = match if self.vfs.read_only() { Atime::NoAtime } else { self.vfs.atime() } {
            Atime::NoAtime => return PageCache::Keep,
            Atime::Relatime => mballoc_vol::AccessTime::Relative,
            Atime::Strict => mballoc_vol::AccessTime::Strict,
        };
        match self.vol.access_due(FileId(ino), rule) {
            Ok(false) => PageCache::Keep,
            Ok(true) | Err(_) => PageCache::Drop,
        }
    }

    pub(crate) fn read(&self, ino: u64, fh: u64, offset: u64, size: u32, out: &mut Out) -> Done {
        let f = FileId(ino);
        let bs = u64::from(self.vol.superblock().block_size);
        let direct = fh & DIRECT != 0 && aligned(offset, u64::from(size), bs);
        let pipe = if direct { None } else { out.pipe_for(size as usize) };
        let spliced = match pipe {
            Some((pipe, unique)) => match self.vol.read_to(f, offset, size as usize, &mut PipeSink { pipe, unique }) {
                Ok(_) => true,
                Err(e) => {
                    out.unpipe();
                    if !is_overflow(&e) {
                        return Err(errno(&e));
                    }
                    // Too many pieces for the pipe: from a buffer, below.
                    false
                }
            },
            None => false,
        };
        if !spliced {
            // The data buffer is reused from request to request, never
            // zeroed again: the read fills what is sent.
            let buf = out.data_mut(size as usize);
            let r = if direct { self.vol.read_direct(f, offset, buf) } else { self.vol.read(f, offset, buf) };
            let n = r.map_err(|e| errno(&e))?;
            out.keep_data(n);
        }
        let noted = match if self.vfs.read_only() { Atime::NoAtime } else { self.vfs.atime() } {
            Atime::Relatime => self.vol.note_access(f),
            Atime::Strict => self.vol.note_access_as(f, mballoc_vol::AccessTime::Strict),
            Atime::NoAtime => Ok(false),
        };
        // A read that cannot record its access time still read: the
        // volume refuses changes only when it is read-only or broken.
        match noted {
            Ok(true) => self.invalidate(ino),
            Ok(false) | Err(VolError::ReadOnly) => {}
            Err(e) => return Err(errno(&e)),
        }
        Ok(())
    }

    /// A write; `write_flags` says whether the writer may keep set-ID bits.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        &self,
        c: Caller,
        ino: u64,
        fh: u64,
        offset: u64,
        write_flags: u32,
        data: &[u8],
        out: &mut Out,
    ) -> Done {
        let bs = u64::from(self.vol.superblock().block_size);
        let e = if fh & DIRECT != 0 && aligned(offset, data.len() as u64, bs) {
            Edit::WriteDirect { offset, data }
        } else {
            Edit::Write { offset, data }
        };
        let r = self.edit(c, ino, e, write_flags & WRITE_KILL_SUIDGID != 0);
        r.map_err(|e| errno(&e))?;
        out.u32(data.len() as u32).u32(0);
        Ok(())
    }

    /// `truncate(2)` or `ftruncate(2)`: with or without a handle open.
    pub(crate) fn truncate(&self, c: Caller, ino: u64, size: u64, valid: u32) -> Result<(), VolError> {
        let a = self.vol.attr(FileId(ino))?;
        if a.is_dir() {
            return Err(VolError::IsADirectory(ino));
        }
        if !a.is_file() {
            return Err(VolError::InvalidArgument(format!("inode {ino} holds no data")));
        }
        // The engine truncates open files: `ftruncate` has one, a path
        // truncate of a file nobody holds opens it for the call.
        let f = FileId(ino);
        let kill = valid & fattr::KILL_SUIDGID != 0;
        if self.vol.open_handles(f)? > 0 {
            return self.edit(c, ino, Edit::Truncate { size }, kill);
        }
        self.vol.open_file(f)?;
        let r = self.edit(c, ino, Edit::Truncate { size }, kill);
        let closed = self.vol.close(f);
        r.and(closed)
    }

    pub(crate) fn release(&self, ino: u64) -> Done {
        match self.vol.close(FileId(ino)) {
            Ok(()) | Err(VolError::Fs(mballoc_fs::FsError::Unlinked(_) | mballoc_fs::FsError::UnknownFile(_))) => {
                Ok(())
            }
            Err(e) => Err(errno(&e)),
        }
    }

    pub(crate) fn fsync(&self, ino: u64) -> Done {
        // A regular file's fsync writes its data and commits; anything
        // else has only names and attributes, which the commit carries.
        let r = match self.vol.attr(FileId(ino)) {
            Ok(a) if a.is_file() => self.vol.fsync(FileId(ino)),
            Ok(_) => self.vol.sync(),
            Err(e) => Err(e),
        };
        r.map_err(|e| errno(&e))
    }

    /// `fallocate(2)` as ext4 answers it: allocate (extending the size
    /// unless KEEP_SIZE), PUNCH_HOLE (with KEEP_SIZE; nothing past the
    /// end), ZERO_RANGE (unwritten extents over the range, at or past the
    /// end too). Linux's FUSE answers COLLAPSE_RANGE and INSERT_RANGE
    /// EOPNOTSUPP itself and never sends them.
    pub(crate) fn fallocate(&self, c: Caller, ino: u64, offset: u64, len: u64, mode: i32) -> Done {
        self.fallocate_file(c, ino, offset, len, mode).map_err(|e| match e {
            VolError::InvalidArgument(_) => libc::EOPNOTSUPP,
            e => errno(&e),
        })
    }

    fn fallocate_file(&self, c: Caller, ino: u64, offset: u64, len: u64, mode: i32) -> Result<(), VolError> {
        let supported = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !supported != 0 {
            return Err(VolError::InvalidArgument(format!("fallocate mode {mode:#x}")));
        }
        if len == 0 {
            return Err(VolError::Fs(mballoc_fs::FsError::ZeroLength));
        }
        let f = FileId(ino);
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let size_mode = if keep { FallocateMode::KeepSize } else { FallocateMode::ExtendSize };
        let e = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => Edit::Allocate { offset, len, mode: size_mode },
            libc::FALLOC_FL_PUNCH_HOLE if keep => {
                // Nothing past the end, as ext4.
                let inside = len.min(self.vol.size(f)?.saturating_sub(offset));
                if inside == 0 {
                    return Ok(());
                }
                Edit::PunchHole { offset, len: inside }
            }
            libc::FALLOC_FL_ZERO_RANGE => Edit::ZeroRange { offset, len, mode: size_mode },
            _ => return Err(VolError::InvalidArgument(format!("fallocate mode {mode:#x}"))),
        };
        self.edit(c, ino, e, false)
    }

    /// `lseek` with SEEK_DATA or SEEK_HOLE: the kernel's own answer (the
    /// whole file is data) is what ENOSYS gives.
    pub(crate) fn lseek(&self, _ino: u64, _offset: u64, _whence: u32, _out: &mut Out) -> Done {
        Err(libc::ENOSYS)
    }

    /// `copy_file_range`: the kernel copies through reads and writes
    /// itself when the server declines (ENOSYS), and those writes meet
    /// every rule above.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy_file_range(
        &self,
        _c: Caller,
        _ino: u64,
        _off_in: u64,
        _nodeid_out: u64,
        _off_out: u64,
        _len: u64,
        _out: &mut Out,
    ) -> Done {
        Err(libc::ENOSYS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_decide_which_opens_write() {
        assert!(open_flags_allowed(libc::O_RDONLY, FL_IMMUTABLE));
        assert!(!open_flags_allowed(libc::O_WRONLY, FL_IMMUTABLE));
        assert!(!open_flags_allowed(libc::O_RDONLY | libc::O_TRUNC, FL_IMMUTABLE));
        assert!(!open_flags_allowed(libc::O_WRONLY, FL_APPEND));
        assert!(open_flags_allowed(libc::O_WRONLY | libc::O_APPEND, FL_APPEND));
        assert!(!open_flags_allowed(libc::O_RDWR | libc::O_APPEND | libc::O_TRUNC, FL_APPEND));
        assert!(open_flags_allowed(libc::O_RDWR, 0));
    }
}
