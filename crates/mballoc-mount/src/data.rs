//! Data requests: open, read, write, truncate and fallocate, with the
//! rules ext4 applies on the way: chattr flags (immutable refuses every
//! change, append-only every change but appending), the set-user-ID and
//! set-group-ID bits cleared by a write from anyone but root, access
//! times, `fallocate` modes at and past the end of the file.
//!
//! The kernel's page cache is left out of the write path (no writeback
//! caching), so buffered writes reach the volume's folio cache as they
//! are made, and `O_DIRECT` opens go to the device unbuffered.

use crate::options::Atime;
use crate::server::VolumeFs;
use fuser::Request;
use mballoc_fs::{FallocateMode, FileId};
use mballoc_vol::{SetId, VolError, FL_APPEND, FL_IMMUTABLE, S_IFDIR, S_IFMT, S_IFREG};

/// File handles of `O_DIRECT` opens carry this bit.
pub(crate) const DIRECT: u64 = 1;

/// Whether an open with `flags` is allowed on an inode with chattr
/// `attr_flags`: no write access to an immutable file, and write access
/// to an append-only one only with `O_APPEND`.
pub(crate) fn open_flags_allowed(flags: i32, attr_flags: u32) -> bool {
    let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
    if !writes {
        return true;
    }
    attr_flags & FL_IMMUTABLE == 0 && (attr_flags & FL_APPEND == 0 || flags & libc::O_APPEND != 0)
}

/// `O_DIRECT` I/O the volume can take unbuffered; other sizes go through
/// the cache, as ext4 falls back to buffered I/O for unaligned direct I/O.
fn aligned(offset: u64, len: u64, bs: u64) -> bool {
    offset.is_multiple_of(bs) && len.is_multiple_of(bs)
}

impl VolumeFs {
    fn refuse(ino: u64, why: &'static str) -> VolError {
        VolError::NotPermitted { ino, why }
    }

    /// Open `ino`; the file handle's bits say how it was opened.
    pub(crate) fn open_file(&self, req: &Request, ino: u64, flags: i32) -> Result<u64, VolError> {
        let a = self.vol.attr(FileId(ino))?;
        match a.mode & S_IFMT {
            S_IFDIR => return Err(VolError::IsADirectory(ino)),
            S_IFREG => {}
            // Devices, FIFOs and sockets are opened by the kernel, never
            // here; anything else has no data to open.
            _ => return Err(VolError::InvalidArgument(format!("inode {ino} holds no data"))),
        }
        if !open_flags_allowed(flags, a.flags) {
            return Err(Self::refuse(ino, "immutable, or append-only without O_APPEND"));
        }
        let f = FileId(ino);
        self.vol.open_file(f)?;
        if flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY {
            let r = self.vol.truncate(f, 0).map(|()| self.vol.touch(f));
            if let Err(e) = r {
                let _ = self.vol.close(f);
                return Err(e);
            }
            self.vol.drop_privileges(FileId(ino), Self::set_id(req, false))?;
        }
        Ok(if flags & libc::O_DIRECT != 0 { DIRECT } else { 0 })
    }

    pub(crate) fn read_file(&self, ino: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, VolError> {
        let f = FileId(ino);
        let mut buf = vec![0u8; size as usize];
        let bs = u64::from(self.vol.superblock().block_size);
        let direct = fh & DIRECT != 0 && aligned(offset, u64::from(size), bs);
        let n = if direct { self.vol.read_direct(f, offset, &mut buf)? } else { self.vol.read(f, offset, &mut buf)? };
        buf.truncate(n);
        if self.atime == Atime::Relatime {
            self.vol.note_access(FileId(ino))?;
        }
        Ok(buf)
    }

    /// A write; `kill` when the kernel says the writer may not keep the
    /// set-ID bits (FUSE_WRITE_KILL_SUIDGID).
    pub(crate) fn write_file(
        &self,
        req: &Request,
        ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        kill: bool,
    ) -> Result<(), VolError> {
        let f = FileId(ino);
        let bs = u64::from(self.vol.superblock().block_size);
        self.vol.drop_privileges(FileId(ino), Self::set_id(req, kill))?;
        let direct = fh & DIRECT != 0 && aligned(offset, data.len() as u64, bs);
        if direct {
            self.vol.write_direct(f, offset, data)?;
        } else {
            self.vol.write(f, offset, data)?;
        }
        self.vol.touch(f);
        Ok(())
    }

    /// `truncate(2)` or `ftruncate(2)`: with or without a handle open.
    pub(crate) fn truncate(&self, req: &Request, ino: u64, size: u64) -> Result<(), VolError> {
        let a = self.vol.attr(FileId(ino))?;
        if a.is_dir() {
            return Err(VolError::IsADirectory(ino));
        }
        if !a.is_file() {
            return Err(VolError::InvalidArgument(format!("inode {ino} holds no data")));
        }
        if a.flags & (FL_IMMUTABLE | FL_APPEND) != 0 {
            return Err(Self::refuse(ino, "immutable or append-only"));
        }
        // The engine truncates open files: `ftruncate` has one, a path
        // truncate of a file nobody holds opens it for the call.
        let f = FileId(ino);
        if self.vol.open_handles(f)? > 0 {
            self.vol.truncate(f, size)?;
        } else {
            self.vol.open_file(f)?;
            let r = self.vol.truncate(f, size);
            let closed = self.vol.close(f);
            r?;
            closed?;
        }
        self.vol.touch(f);
        self.vol.drop_privileges(FileId(ino), Self::set_id(req, false))?;
        Ok(())
    }

    /// Whether a change by `req` clears the set-ID bits: the kernel's word
    /// for writes, else anyone but root (who has CAP_FSETID).
    fn set_id(req: &Request, kill: bool) -> SetId {
        if kill || req.uid() != 0 {
            SetId::Clear
        } else {
            SetId::Keep
        }
    }

    /// `fallocate(2)` as ext4 answers it: allocate (extending the size
    /// unless KEEP_SIZE), PUNCH_HOLE (with KEEP_SIZE; nothing past the
    /// end), ZERO_RANGE (unwritten extents over the range, at or past the
    /// end too), COLLAPSE_RANGE and INSERT_RANGE (whole blocks, inside
    /// the file; Linux's FUSE answers those two EOPNOTSUPP itself and
    /// never sends them, up to 6.18 at least).
    pub(crate) fn fallocate_file(
        &self,
        req: &Request,
        ino: u64,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> Result<(), VolError> {
        let supported = libc::FALLOC_FL_KEEP_SIZE
            | libc::FALLOC_FL_PUNCH_HOLE
            | libc::FALLOC_FL_ZERO_RANGE
            | libc::FALLOC_FL_COLLAPSE_RANGE
            | libc::FALLOC_FL_INSERT_RANGE;
        if mode & !supported != 0 {
            return Err(VolError::InvalidArgument(format!("fallocate mode {mode:#x}")));
        }
        if len == 0 {
            return Err(VolError::Fs(mballoc_fs::FsError::ZeroLength));
        }
        let flags = self.vol.flags(FileId(ino))?;
        if flags & FL_IMMUTABLE != 0 || (flags & FL_APPEND != 0 && mode & !libc::FALLOC_FL_KEEP_SIZE != 0) {
            return Err(Self::refuse(ino, "immutable, or append-only"));
        }
        let f = FileId(ino);
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let size_mode = if keep { FallocateMode::KeepSize } else { FallocateMode::ExtendSize };
        let size = self.vol.size(f)?;
        let inside = len.min(size.saturating_sub(offset));
        match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => self.vol.fallocate(f, offset, len, size_mode)?,
            libc::FALLOC_FL_PUNCH_HOLE if keep => {
                if inside > 0 {
                    self.vol.punch_hole(f, offset, inside)?;
                }
            }
            libc::FALLOC_FL_COLLAPSE_RANGE if !keep => self.vol.collapse_range(f, offset, len)?,
            libc::FALLOC_FL_INSERT_RANGE if !keep => self.vol.insert_range(f, offset, len)?,
            libc::FALLOC_FL_ZERO_RANGE => {
                // Zeroes as unwritten extents, as ext4 does: drop what the
                // range holds inside the file, then allocate it unwritten.
                if inside > 0 {
                    self.vol.punch_hole(f, offset, inside)?;
                }
                self.vol.fallocate(f, offset, len, size_mode)?;
            }
            _ => return Err(VolError::InvalidArgument(format!("fallocate mode {mode:#x}"))),
        }
        self.vol.touch(f);
        self.vol.drop_privileges(FileId(ino), Self::set_id(req, false))?;
        Ok(())
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
        assert!(open_flags_allowed(libc::O_RDWR, 0));
    }
}
