//! Requests about names: lookup, making files, directories, links,
//! symbolic links, device nodes and unnamed files (`O_TMPFILE`), removing
//! and renaming them. Each answers with the new entry's attributes where
//! the kernel wants them.

use crate::fuse::abi::{put_entry, Attr, Out};
use crate::server::{errno, Caller, Done, VolumeFs, TTL};
use crate::stat::file_attr;
use mballoc_fs::FileId;
use mballoc_vol::{Owner, Replace, VolError, NAME_MAX, S_IFMT, S_IFREG};

/// renameat2's flags.
const RENAME_NOREPLACE: u32 = 1;
const RENAME_EXCHANGE: u32 = 2;
const RENAME_WHITEOUT: u32 = 4;

/// A name from the kernel: longer than a directory holds is
/// ENAMETOOLONG before anything else, as ext4 answers.
fn name(n: &[u8]) -> Result<&[u8], i32> {
    if n.len() > NAME_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(n)
}

/// The creator of a new inode. The kernel leaves the umask to this
/// server (FUSE_DONT_MASK), which applies it unless the directory's
/// default ACL decides.
fn owner(c: Caller, mode: u32, umask: u32) -> Owner {
    Owner { mode: mode & 0o7777, umask, uid: c.uid, gid: c.gid }
}

impl VolumeFs {
    /// `struct fuse_entry_out` for `ino`.
    pub(crate) fn entry(&self, ino: u64, out: &mut Out) -> Done {
        let (a, generation, _) = file_attr(&self.vol, ino).map_err(|e| errno(&e))?;
        put_entry(out, &a, u64::from(generation), TTL, TTL);
        Ok(())
    }

    pub(crate) fn lookup(&self, parent: u64, n: &[u8], out: &mut Out) -> Done {
        let n = name(n)?;
        let found = match n {
            // An exported handle is resolved by looking up "." in the
            // inode it names, and a directory's parent by "..".
            b"." => self.vol.attr(FileId(parent)).map(|_| parent),
            b".." => self.vol.attr(FileId(parent)).map(|a| a.parent().unwrap_or(parent)),
            n => self.vol.lookup(FileId(parent), n).map(|f| f.0),
        };
        match found {
            Ok(ino) => self.entry(ino, out),
            // A name that is not there: the kernel may remember that for
            // TTL (every create comes through it and forgets it), which
            // saves the lookup a create makes first.
            Err(VolError::NoEntry { .. }) => {
                put_entry(out, &Attr::default(), 0, TTL, TTL);
                Ok(())
            }
            Err(e) => Err(errno(&e)),
        }
    }

    pub(crate) fn readlink(&self, ino: u64, out: &mut Out) -> Done {
        let t = self.vol.link_target(FileId(ino)).map_err(|e| errno(&e))?;
        out.raw(&t);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mknod(
        &self,
        c: Caller,
        parent: u64,
        n: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
        out: &mut Out,
    ) -> Done {
        let n = name(n)?;
        let kind = mode & S_IFMT;
        let o = owner(c, mode, umask);
        let made = if kind == S_IFREG || kind == 0 {
            // A regular file made by mknod is closed at once.
            self.vol.create_at(FileId(parent), n, o).and_then(|f| self.vol.close(f).map(|()| f.0))
        } else {
            self.vol.mknod_at(FileId(parent), n, kind, rdev, o).map(|f| f.0)
        };
        let ino = made.map_err(|e| errno(&e))?;
        self.entry(ino, out)
    }

    pub(crate) fn mkdir(&self, c: Caller, parent: u64, n: &[u8], mode: u32, umask: u32, out: &mut Out) -> Done {
        let n = name(n)?;
        let f = self.vol.mkdir_at(FileId(parent), n, owner(c, mode, umask)).map_err(|e| errno(&e))?;
        self.entry(f.0, out)
    }

    pub(crate) fn symlink(&self, c: Caller, parent: u64, n: &[u8], target: &[u8], out: &mut Out) -> Done {
        let n = name(n)?;
        let o = Owner { mode: 0o777, umask: 0, uid: c.uid, gid: c.gid };
        match self.vol.symlink_at(FileId(parent), n, target, o) {
            Ok(f) => self.entry(f.0, out),
            Err(VolError::InvalidName { .. }) => Err(libc::ENAMETOOLONG),
            Err(e) => Err(errno(&e)),
        }
    }

    pub(crate) fn unlink(&self, parent: u64, n: &[u8]) -> Done {
        self.vol.unlink_at(FileId(parent), n).map_err(|e| errno(&e))
    }

    pub(crate) fn rmdir(&self, parent: u64, n: &[u8]) -> Done {
        self.vol.rmdir_at(FileId(parent), n).map_err(|e| errno(&e))
    }

    pub(crate) fn rename(&self, c: Caller, parent: u64, n: &[u8], newparent: u64, newname: &[u8], flags: u32) -> Done {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0 {
            return Err(libc::EINVAL);
        }
        let newname = name(newname)?;
        let how = if flags & RENAME_EXCHANGE != 0 {
            Replace::Exchange
        } else if flags & RENAME_NOREPLACE != 0 {
            Replace::Never
        } else {
            Replace::Allowed
        };
        let r = if flags & RENAME_WHITEOUT != 0 {
            let o = Owner { mode: 0, umask: 0, uid: c.uid, gid: c.gid };
            self.vol.rename_whiteout(FileId(parent), n, FileId(newparent), newname, how, o)
        } else {
            self.vol.rename_at(FileId(parent), n, FileId(newparent), newname, how)
        };
        r.map_err(|e| errno(&e))
    }

    pub(crate) fn link(&self, ino: u64, newparent: u64, newname: &[u8], out: &mut Out) -> Done {
        let newname = name(newname)?;
        match self.vol.link_at(FileId(ino), FileId(newparent), newname) {
            Ok(()) => self.entry(ino, out),
            Err(VolError::IsADirectory(_)) => Err(libc::EPERM),
            // A full attribute string means too many links.
            Err(VolError::NoRoom { .. }) => Err(libc::EMLINK),
            Err(e) => Err(errno(&e)),
        }
    }
}
