//! An inode's attributes as callers change them, with the rules ext4 (and
//! the VFS above it) applies: chattr's immutable and append-only flags
//! refuse owner, mode and time changes (append-only still lets the times
//! be set to now), a change of owner clears the set-user-ID bit and, where
//! it means something, the set-group-ID bit; a change of a file's
//! contents clears them for callers who may not keep them; access times
//! follow relatime or strictatime. Writes leave their modification time
//! in the file's cache; fsync, close and sync journal it.

use crate::attr::{FL_APPEND, FL_IMMUTABLE};
use crate::error::{Result, VolError};
use crate::names::{now, Attr, S_IFMT, S_IFREG};
use crate::volume::Volume;
use mballoc_fs::FileId;

/// A time to set: the present, or a given one (ns since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Time {
    /// Now (`utimes(path, NULL)`, `UTIME_NOW`): allowed on append-only
    /// inodes, as ext4 allows it.
    Now,
    /// This time.
    At(i64),
}

/// Attributes to change; `None` leaves one as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (the type bits are kept).
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Access time.
    pub atime: Option<Time>,
    /// Modification time.
    pub mtime: Option<Time>,
}

/// Who makes a change, for the rules that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The caller's user.
    pub uid: u32,
    /// The caller's group.
    pub gid: u32,
    /// Holds CAP_FSETID (may keep set-ID bits on what it changes).
    pub privileged: bool,
}

impl Caller {
    /// A program using the library: root's rights, as a process that
    /// owns the volume file has over everything in it.
    pub const LIBRARY: Caller = Caller { uid: 0, gid: 0, privileged: true };

    /// Whether a change of contents by this caller clears set-ID bits of
    /// a file whose group it is in (`in_group`) or not.
    pub fn set_id(self, in_group: bool) -> SetId {
        match (self.privileged, in_group) {
            (true, _) => SetId::Keep,
            (false, true) => SetId::Clear,
            (false, false) => SetId::ClearBoth,
        }
    }
}

/// Whether a change of a file's contents clears its set-user-ID and
/// set-group-ID bits (the VFS's `setattr_should_drop_suidgid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetId {
    /// Keep them (the caller has `CAP_FSETID`).
    Keep,
    /// Clear set-user-ID, and set-group-ID where the group may execute
    /// the file (a caller in the file's group, without `CAP_FSETID`).
    Clear,
    /// Clear both (a caller outside the file's group, without
    /// `CAP_FSETID`).
    ClearBoth,
}

/// When a read updates the access time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessTime {
    /// ext4's default: when the access time is not after the last
    /// modification or change, or is a day old.
    Relative,
    /// On every read (`strictatime`).
    Strict,
}

impl Volume {
    /// Change attributes as [`Caller::LIBRARY`]; the inode's change time
    /// becomes now.
    pub fn set_attr(&self, ino: FileId, set: SetAttr) -> Result<Attr> {
        self.set_attr_by(ino, set, Caller::LIBRARY)
    }

    /// Change attributes as `by` asks (permission to ask is the caller's
    /// to have checked, as the VFS does for ext4); the inode's change time
    /// becomes now. A new owner or group clears the set-user-ID bit of
    /// anything but a directory, and its set-group-ID bit where the group
    /// can execute it or the caller is outside the group without
    /// CAP_FSETID.
    pub fn set_attr_by(&self, ino: FileId, set: SetAttr, by: Caller) -> Result<Attr> {
        let ino = ino.0;
        self.writable()?;
        let pending = self.take_mtime(ino);
        let mut t = self.tree.write();
        let a = t.attrs.get_mut(&ino).ok_or(VolError::NoInode(ino))?;
        if let Some(m) = pending {
            a.mtime = m;
        }
        let explicit = set.mode.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || matches!(set.atime, Some(Time::At(_)))
            || matches!(set.mtime, Some(Time::At(_)));
        if a.flags & FL_IMMUTABLE != 0 && set != SetAttr::default() {
            return Err(VolError::NotPermitted { ino, why: "immutable" });
        }
        if a.flags & FL_APPEND != 0 && explicit {
            return Err(VolError::NotPermitted { ino, why: "append-only (only the times may be set, to now)" });
        }
        let at = now();
        if let Some(mode) = set.mode {
            a.mode = (a.mode & S_IFMT) | (mode & !S_IFMT);
            // The access ACL follows a chmod, as ext4 keeps it.
            if let Some(mut acl) = a.xattrs.get(crate::acl::ACL_ACCESS).and_then(|b| crate::acl::Acl::parse(b).ok()) {
                acl.apply_mode(mode);
                a.xattrs.insert(crate::acl::ACL_ACCESS.to_vec(), acl.encode());
            }
        }
        if (set.uid.is_some() || set.gid.is_some()) && !a.is_dir() {
            a.mode &= !0o4000;
            // The caller's membership of the group the file has now.
            let outside = !by.privileged && a.gid != by.gid;
            if a.mode & 0o2010 == 0o2010 || (a.mode & 0o2000 != 0 && outside) {
                a.mode &= !0o2000;
            }
        }
        a.uid = set.uid.unwrap_or(a.uid);
        a.gid = set.gid.unwrap_or(a.gid);
        let time = |t: Time| match t {
            Time::Now => at,
            Time::At(ns) => ns,
        };
        a.atime = set.atime.map_or(a.atime, time);
        a.mtime = set.mtime.map_or(a.mtime, time);
        a.ctime = at;
        self.log.record_attr(ino, a);
        Ok(a.clone())
    }

    /// A read of `ino` happened now: update its access time as ext4's
    /// `relatime` does (when it is not after the last modification or
    /// change, or is a day old), unless the inode is flagged noatime.
    /// Returns whether it changed.
    pub fn note_access(&self, ino: FileId) -> Result<bool> {
        self.note_access_as(ino, AccessTime::Relative)
    }

    /// A read of `ino` happened now: update its access time as `rule`
    /// says, unless the inode is flagged noatime. Returns whether it
    /// changed.
    pub fn note_access_as(&self, ino: FileId, rule: AccessTime) -> Result<bool> {
        let ino = ino.0;
        let at = now();
        if !access_due(self.tree.read().attr(ino)?, rule, at) || !self.opts.access.writes() {
            return Ok(false);
        }
        self.writable()?;
        let mut t = self.tree.write();
        let a = t.attrs.get_mut(&ino).ok_or(VolError::NoInode(ino))?;
        if !access_due(a, rule, at) {
            return Ok(false);
        }
        a.atime = at;
        self.log.record_attr(ino, a);
        Ok(true)
    }

    /// Whether a read of `ino` now would change its access time under
    /// `rule` (a front end that caches file data uses it to decide
    /// whether the next read must reach the volume).
    pub fn access_due(&self, ino: FileId, rule: AccessTime) -> Result<bool> {
        Ok(self.opts.access.writes() && access_due(self.tree.read().attr(ino.0)?, rule, now()))
    }

    /// A write, truncation or allocation: the file's capabilities
    /// (`security.capability`) go, and the set-ID bits `set_id` says, as
    /// the kernel does for ext4. Returns whether anything changed.
    pub fn drop_privileges(&self, ino: FileId, set_id: SetId) -> Result<bool> {
        let ino = ino.0;
        const CAPS: &[u8] = b"security.capability";
        let cleared = |mode: u32| match set_id {
            SetId::Keep => mode,
            SetId::Clear if mode & 0o010 == 0 => mode & !0o4000,
            SetId::Clear | SetId::ClearBoth => mode & !0o6000,
        };
        let kill = |a: &Attr| a.mode & S_IFMT == S_IFREG && (cleared(a.mode) != a.mode || a.xattrs.contains_key(CAPS));
        if !kill(self.tree.read().attr(ino)?) {
            return Ok(false);
        }
        self.writable()?;
        let mut t = self.tree.write();
        let a = t.attrs.get_mut(&ino).ok_or(VolError::NoInode(ino))?;
        if !kill(a) {
            return Ok(false);
        }
        a.xattrs.remove(CAPS);
        a.mode = cleared(a.mode);
        a.ctime = now();
        self.log.record_attr(ino, a);
        Ok(true)
    }

    /// Note that file `f`'s contents changed now. Journaled by the next
    /// fsync, close or sync.
    pub fn touch(&self, f: FileId) {
        // The table guard ends with the statement: a leaf, never held
        // across the file's cache lock.
        let cache = self.files.lock().get(&f.0).cloned();
        if let Some(c) = cache {
            c.lock().mtime = Some(now());
        }
    }

    /// Journal the change time a write left pending, if any.
    pub(crate) fn settle_times(&self, ino: u64) {
        if let Some(m) = self.take_mtime(ino) {
            let mut t = self.tree.write();
            if let Some(a) = t.attrs.get_mut(&ino) {
                a.mtime = m;
                a.ctime = a.ctime.max(m);
                self.log.record_attr(ino, a);
            }
        }
    }

    fn take_mtime(&self, ino: u64) -> Option<i64> {
        let c = self.files.lock().get(&ino).cloned()?;
        let m = c.lock().mtime.take();
        m
    }
}

/// Whether a read at `at` changes `a`'s access time under `rule`.
fn access_due(a: &Attr, rule: AccessTime, at: i64) -> bool {
    const DAY: i64 = 24 * 3600 * 1_000_000_000;
    let due = match rule {
        AccessTime::Relative => a.atime <= a.mtime || a.atime <= a.ctime || at - a.atime >= DAY,
        AccessTime::Strict => a.atime != at,
    };
    a.flags & crate::attr::FL_NOATIME == 0 && due
}
