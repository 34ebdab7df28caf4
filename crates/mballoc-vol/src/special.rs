//! Hard links, symbolic links, device nodes, FIFOs and sockets, extended
//! attributes and chattr flags on a mounted volume. Each is a change of
//! one inode's attribute string ([`crate::attr`]), journaled whole.
//!
//! Device nodes, FIFOs and sockets are stored, never opened: the volume
//! keeps their type and device number and the kernel does the rest. POSIX
//! ACLs are the extended attributes `system.posix_acl_access` and
//! `system.posix_acl_default`, kept as the kernel hands them over; the
//! kernel enforces them.

use crate::acl::{Acl, ACL_ACCESS, ACL_DEFAULT};
use crate::attr::{check_xattr_name, Link, FL_APPEND, FL_IMMUTABLE, FL_KNOWN, S_IFLNK};
use crate::error::{Result, VolError};
use crate::limits::SYMLINK_MAX;
use crate::names::{check_name, now, S_IFDIR, S_IFMT, S_IFREG};
use crate::namespace::{guard_dir, guard_inode, touch_dir, Change, Naming, NodeSpec, Owner};
use crate::volume::Volume;
use mballoc_fs::FileId;

/// How `set_xattr` treats an attribute that exists, or does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrSet {
    /// Create or replace.
    #[default]
    Any,
    /// Fail with `Exists` if it exists (`XATTR_CREATE`).
    Create,
    /// Fail with `NoAttribute` if it does not (`XATTR_REPLACE`).
    Replace,
}

impl Volume {
    /// Give inode `ino` the name `name` in `dir` (`link(2)`). Directories
    /// take no second name.
    pub fn link_at(&self, ino: FileId, dir: FileId, name: &[u8]) -> Result<()> {
        let (ino, dir) = (ino.0, dir.0);
        self.writable()?;
        check_name(name)?;
        let mut t = self.tree.write();
        let a = t.attr(ino)?;
        if a.is_dir() {
            return Err(VolError::IsADirectory(ino));
        }
        // An orphan comes back only while open: an O_TMPFILE file, or one
        // linked again through /proc/self/fd (the kernel decides which).
        if a.links.is_empty() && (ino == crate::format::ROOT_INO || self.fs.open_handles(FileId(ino))? == 0) {
            return Err(VolError::NoInode(ino));
        }
        guard_inode(a, ino)?;
        t.dir(dir)?;
        guard_dir(t.attr(dir)?, dir, Change::Add)?;
        if t.entries[&dir].contains_key(name) {
            return Err(VolError::Exists { dir, name: String::from_utf8_lossy(name).into_owned() });
        }
        let l = Link { parent: dir, name: name.to_vec() };
        let mut next = t.attrs[&ino].clone();
        next.links.push(l.clone());
        next.check_room(self.sb.max_attr_bytes())?;
        let at = now();
        t.link(ino, l);
        let a = t.attrs.get_mut(&ino).expect("live");
        a.ctime = at;
        self.log.record_attr(ino, a);
        touch_dir(&mut t, dir, at, &self.log);
        Ok(())
    }

    /// Make a symbolic link `name` in `dir` pointing at `target`.
    pub fn symlink_at(&self, dir: FileId, name: &[u8], target: &[u8], owner: Owner) -> Result<FileId> {
        let dir = dir.0;
        if target.is_empty() || target.len() > SYMLINK_MAX || target.contains(&0) {
            return Err(VolError::InvalidName {
                name: String::from_utf8_lossy(target).into_owned(),
                why: "not a link target (empty, holding NUL, or longer than 4095 bytes)",
            });
        }
        let spec = NodeSpec { mode: S_IFLNK | 0o777, target: target.to_vec(), ..NodeSpec::default() };
        let f = self.make(dir, Naming::Named(name), spec, owner)?;
        self.fs.close(f)?;
        Ok(f)
    }

    /// A symbolic link's target.
    pub fn link_target(&self, ino: FileId) -> Result<Vec<u8>> {
        let ino = ino.0;
        let t = self.tree.read();
        let a = t.attr(ino)?;
        if a.kind() != S_IFLNK {
            return Err(VolError::NotASymlink(ino));
        }
        Ok(a.target.clone())
    }

    /// Make `name` in `dir` of type `kind` (`S_IFREG`, `S_IFIFO`,
    /// `S_IFSOCK`, `S_IFCHR` or `S_IFBLK`; 0 is a regular file), a device
    /// numbered `rdev` (`mknod(2)`); permissions are the owner's.
    pub fn mknod_at(&self, dir: FileId, name: &[u8], kind: u32, rdev: u32, owner: Owner) -> Result<FileId> {
        let dir = dir.0;
        let kind = if kind & S_IFMT == 0 { S_IFREG } else { kind & S_IFMT };
        let special = [0o010_000, 0o140_000, 0o020_000, 0o060_000];
        if kind != S_IFREG && !special.contains(&kind) {
            return Err(VolError::InvalidArgument(format!("mknod of type {kind:o}")));
        }
        let device = kind == 0o020_000 || kind == 0o060_000;
        let spec = NodeSpec {
            mode: kind | (owner.mode & !S_IFMT),
            rdev: if device { rdev } else { 0 },
            ..NodeSpec::default()
        };
        let f = self.make(dir, Naming::Named(name), spec, owner)?;
        self.fs.close(f)?;
        Ok(f)
    }

    /// An extended attribute's value.
    pub fn get_xattr_at(&self, ino: FileId, name: &[u8]) -> Result<Vec<u8>> {
        let ino = ino.0;
        let t = self.tree.read();
        t.attr(ino)?.xattrs.get(name).cloned().ok_or_else(|| no_attr(ino, name))
    }

    /// The names of an inode's extended attributes.
    pub fn list_xattrs_at(&self, ino: FileId) -> Result<Vec<Vec<u8>>> {
        let ino = ino.0;
        Ok(self.tree.read().attr(ino)?.xattrs.keys().cloned().collect())
    }

    /// Set an extended attribute. The inode's attributes together may take
    /// [`crate::Superblock::max_attr_bytes`] (`NoRoom` past that, as ext4
    /// gives `ENOSPC` when an inode's attribute space is full).
    pub fn set_xattr_at(&self, ino: FileId, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        let ino = ino.0;
        self.writable()?;
        check_xattr_name(name)?;
        if value.len() > crate::attr::XATTR_VALUE_MAX {
            return Err(VolError::InvalidArgument(format!(
                "an extended attribute value of {} bytes (at most {})",
                value.len(),
                crate::attr::XATTR_VALUE_MAX
            )));
        }
        let mut t = self.tree.write();
        let a = t.attrs.get_mut(&ino).ok_or(VolError::NoInode(ino))?;
        if a.flags & (FL_IMMUTABLE | FL_APPEND) != 0 {
            return Err(VolError::NotPermitted { ino, why: "immutable or append-only" });
        }
        match (how, a.xattrs.contains_key(name)) {
            (XattrSet::Create, true) => {
                return Err(VolError::Exists { dir: ino, name: String::from_utf8_lossy(name).into_owned() })
            }
            (XattrSet::Replace, false) => return Err(no_attr(ino, name)),
            _ => {}
        }
        let mut next = a.clone();
        match name {
            ACL_ACCESS => {
                let acl = Acl::parse(value).map_err(VolError::InvalidArgument)?;
                // The mode says what the ACL's base entries say; an ACL
                // with nothing more is kept as the mode alone.
                next.mode = (next.mode & !0o777) | acl.mode_bits();
                if acl.is_minimal() {
                    next.xattrs.remove(name);
                } else {
                    next.xattrs.insert(name.to_vec(), acl.encode());
                }
            }
            ACL_DEFAULT => {
                if !next.is_dir() {
                    return Err(VolError::NotPermitted { ino, why: "a default ACL on anything but a directory" });
                }
                let acl = Acl::parse(value).map_err(VolError::InvalidArgument)?;
                next.xattrs.insert(name.to_vec(), acl.encode());
            }
            _ => {
                next.xattrs.insert(name.to_vec(), value.to_vec());
            }
        }
        next.check_room(self.sb.max_attr_bytes())?;
        next.ctime = now();
        *a = next;
        self.log.record_attr(ino, a);
        Ok(())
    }

    /// Remove an extended attribute.
    pub fn remove_xattr_at(&self, ino: FileId, name: &[u8]) -> Result<()> {
        let ino = ino.0;
        self.writable()?;
        let mut t = self.tree.write();
        let a = t.attrs.get_mut(&ino).ok_or(VolError::NoInode(ino))?;
        if a.flags & (FL_IMMUTABLE | FL_APPEND) != 0 {
            return Err(VolError::NotPermitted { ino, why: "immutable or append-only" });
        }
        if a.xattrs.remove(name).is_none() {
            return Err(no_attr(ino, name));
        }
        a.ctime = now();
        self.log.record_attr(ino, a);
        Ok(())
    }

    /// The inode's chattr flags (`FS_IOC_GETFLAGS`).
    pub fn flags(&self, ino: FileId) -> Result<u32> {
        let ino = ino.0;
        Ok(self.tree.read().attr(ino)?.flags)
    }

    /// Set chattr flags (`FS_IOC_SETFLAGS`): immutable, append-only,
    /// nodump and noatime; any other bit is refused.
    pub fn set_flags(&self, ino: FileId, flags: u32) -> Result<()> {
        let ino = ino.0;
        self.writable()?;
        if flags & !FL_KNOWN != 0 {
            return Err(VolError::InvalidArgument(format!("flags {:#x} beyond {FL_KNOWN:#x}", flags & !FL_KNOWN)));
        }
        let mut t = self.tree.write();
        let a = t.attrs.get_mut(&ino).ok_or(VolError::NoInode(ino))?;
        if a.kind() != S_IFREG && a.kind() != S_IFDIR && flags & (FL_IMMUTABLE | FL_APPEND) != 0 {
            return Err(VolError::InvalidArgument("immutable and append-only are for files and directories".into()));
        }
        a.flags = flags;
        a.ctime = now();
        self.log.record_attr(ino, a);
        Ok(())
    }
}

fn no_attr(ino: u64, name: &[u8]) -> VolError {
    VolError::NoAttribute { ino, name: String::from_utf8_lossy(name).into_owned() }
}
