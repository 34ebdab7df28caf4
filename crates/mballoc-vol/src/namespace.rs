//! Names on a mounted volume: lookup, create, mkdir, unlink, rmdir,
//! rename (with `RENAME_NOREPLACE` and `RENAME_EXCHANGE`), attributes and
//! free-space counts, over the tree of [`crate::names`]. Each call changes
//! the tree in memory and journals the inodes it renamed or re-attributed;
//! the engine journals creates and unlinks itself. Links, symbolic links,
//! device nodes and extended attributes are in `special`.
//!
//! An inode that loses its last name while open becomes an orphan: its
//! attributes (with no names) are journaled, it keeps working through its
//! handles, and its last close removes it. A crash first leaves the
//! nameless inode for the next read-write mount to remove.
//!
//! Lock order: the tree, then a file's cache, then the engine's own locks.
//! Writes never take the tree's lock: they leave their change time in the
//! file's cache, and fsync, close and sync journal it.

use crate::attr::{Link, FL_APPEND, FL_IMMUTABLE};
use crate::error::{Result, VolError};
use crate::format::ROOT_INO;
use crate::names::{check_name, now, Attr, Tree, S_IFDIR, S_IFMT, S_IFREG};
use crate::volume::Volume;
use mballoc_fs::FileId;
use std::sync::atomic::Ordering;

/// One entry of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Its name.
    pub name: Vec<u8>,
    /// Its inode.
    pub ino: FileId,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// Its type bits (`S_IFREG`, `S_IFDIR`, `S_IFLNK`, ...).
    pub kind: u32,
}

/// Space and inode counts, as `statfs` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes per block.
    pub block_size: u32,
    /// Blocks a file can be given: the data area.
    pub data_blocks: u64,
    /// Of them, free (blocks reserved for delayed writes count as used).
    pub free_blocks: u64,
    /// Inode slots.
    pub inodes: u64,
    /// Of them, free.
    pub free_inodes: u64,
}

/// Who makes a new inode, and with what permission bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Permission bits asked for (`0o644`); the type is the call's.
    pub mode: u32,
    /// Bits the creating process's umask takes away, unless the directory
    /// has a default ACL, which decides instead.
    pub umask: u32,
    /// Owner.
    pub uid: u32,
    /// Group (a set-group-ID directory gives its own instead).
    pub gid: u32,
}

impl Default for Owner {
    fn default() -> Self {
        Owner { mode: 0o644, umask: 0, uid: 0, gid: 0 }
    }
}

/// How a new inode is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Naming<'a> {
    /// This name in its directory.
    Named(&'a [u8]),
    /// Its own number in its directory (`13`, or `13.1` if taken).
    Numbered,
    /// No name: an open orphan (`O_TMPFILE`).
    Unnamed,
}

/// What a new inode is, beyond its type and owner.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeSpec {
    pub mode: u32,
    pub rdev: u32,
    pub target: Vec<u8>,
}

impl Volume {
    /// The root directory's inode.
    pub fn root(&self) -> FileId {
        FileId(ROOT_INO)
    }

    /// The inode `name` names in directory `dir`.
    pub fn lookup(&self, dir: FileId, name: &[u8]) -> Result<FileId> {
        self.tree.read().lookup(dir.0, name).map(FileId)
    }

    /// An inode's attributes, with a change time a write left pending.
    pub fn attr(&self, ino: FileId) -> Result<Attr> {
        let ino = ino.0;
        let mut a = self.tree.read().attr(ino)?.clone();
        // The cache table is a leaf lock: let it go before the file's
        // cache lock (an unlink holds that one, then takes the table).
        let cache = self.files.lock().get(&ino).cloned();
        if let Some(m) = cache.and_then(|c| c.lock().mtime) {
            a.mtime = m;
            a.ctime = a.ctime.max(m);
        }
        Ok(a)
    }

    /// `st_nlink`: for a directory two plus its subdirectories, for
    /// anything else its names.
    pub fn nlink(&self, ino: FileId) -> Result<u32> {
        self.tree.read().nlink(ino.0)
    }

    /// A directory's entries, by name.
    pub fn dir_entries(&self, dir: FileId) -> Result<Vec<DirEntry>> {
        let t = self.tree.read();
        let entries = t.dir(dir.0)?;
        Ok(entries
            .iter()
            .map(|(n, &ino)| {
                let kind = t.attrs[&ino].kind();
                DirEntry { name: n.clone(), ino: FileId(ino), is_dir: kind == S_IFDIR, kind }
            })
            .collect())
    }

    /// Create an empty regular file `name` in `dir`, open once.
    pub fn create_at(&self, dir: FileId, name: &[u8], owner: Owner) -> Result<FileId> {
        let dir = dir.0;
        let spec = NodeSpec { mode: S_IFREG | (owner.mode & !S_IFMT), ..NodeSpec::default() };
        self.make(dir, Naming::Named(name), spec, owner)
    }

    /// Make directory `name` in `dir`.
    pub fn mkdir_at(&self, dir: FileId, name: &[u8], owner: Owner) -> Result<FileId> {
        let dir = dir.0;
        let spec = NodeSpec { mode: S_IFDIR | (owner.mode & !S_IFMT), ..NodeSpec::default() };
        let f = self.make(dir, Naming::Named(name), spec, owner)?;
        self.fs.close(f)?;
        Ok(f)
    }

    /// An empty regular file with no name, open once, made as if in
    /// `dir` (its group and default ACL apply): `O_TMPFILE`. It goes at its
    /// last close unless [`Volume::link_at`] names it first; a crash before
    /// either leaves an orphan the next mount removes.
    pub fn create_unnamed(&self, dir: FileId, owner: Owner) -> Result<FileId> {
        let spec = NodeSpec { mode: S_IFREG | (owner.mode & !S_IFMT), ..NodeSpec::default() };
        self.make(dir.0, Naming::Unnamed, spec, owner)
    }

    /// A new inode in `dir`, named as `naming` says; open once.
    pub(crate) fn make(&self, dir: u64, naming: Naming<'_>, spec: NodeSpec, owner: Owner) -> Result<FileId> {
        self.writable()?;
        if let Naming::Named(n) = naming {
            check_name(n)?;
        }
        let mut t = self.tree.write();
        let parent = t.attr(dir)?.clone();
        t.dir(dir)?;
        if naming != Naming::Unnamed {
            guard_dir(&parent, dir, Change::Add)?;
        }
        if let Naming::Named(n) = naming {
            if t.entries[&dir].contains_key(n) {
                return Err(VolError::Exists { dir, name: String::from_utf8_lossy(n).into_owned() });
            }
        }
        let f = self.create_inode()?;
        let links = match naming {
            Naming::Named(n) => vec![Link { parent: dir, name: n.to_vec() }],
            Naming::Numbered => {
                let mut n = f.0.to_string();
                let mut k = 0;
                while t.entries[&dir].contains_key(n.as_bytes()) {
                    k += 1;
                    n = format!("{}.{k}", f.0);
                }
                vec![Link { parent: dir, name: n.into_bytes() }]
            }
            Naming::Unnamed => Vec::new(),
        };
        let at = now();
        let mut mode = spec.mode;
        let mut gid = owner.gid;
        // A set-group-ID directory hands its group down, and its bit to
        // new directories (ext4's and POSIX's rule).
        if parent.mode & 0o2000 != 0 {
            gid = parent.gid;
            if mode & S_IFMT == S_IFDIR {
                mode |= 0o2000;
            }
        }
        let mut attr = Attr {
            mode,
            uid: owner.uid,
            gid,
            generation: self.next_generation(),
            rdev: spec.rdev,
            atime: at,
            mtime: at,
            ctime: at,
            btime: at,
            links,
            target: spec.target,
            ..Attr::default()
        };
        crate::acl::inherit(&parent, &mut attr, owner.umask);
        if let Err(e) = attr.check_room(self.sb.max_attr_bytes()) {
            // Inherited ACLs too large to keep: the inode goes again.
            self.drop_inode(f)?;
            return Err(e);
        }
        // Right after the engine's create: nothing written to the file can
        // reach the journal before its name.
        self.log.record_attr(f.0, &attr);
        t.insert(f.0, attr);
        if naming != Naming::Unnamed {
            touch_dir(&mut t, dir, at, &self.log);
        }
        Ok(f)
    }

    /// Remove the name `name` from `dir` (not a directory). The inode goes
    /// with its last name, or, if open, at its last close.
    pub fn unlink_at(&self, dir: FileId, name: &[u8]) -> Result<()> {
        let dir = dir.0;
        self.remove_at(dir, name, Kind::File)
    }

    /// Remove the empty directory `name` from `dir`.
    pub fn rmdir_at(&self, dir: FileId, name: &[u8]) -> Result<()> {
        let dir = dir.0;
        self.remove_at(dir, name, Kind::Directory)
    }

    fn remove_at(&self, dir: u64, name: &[u8], kind: Kind) -> Result<()> {
        self.writable()?;
        let mut t = self.tree.write();
        let ino = t.lookup(dir, name)?;
        guard_dir(t.attr(dir)?, dir, Change::Remove)?;
        guard_inode(&t.attrs[&ino], ino)?;
        match (kind, t.attrs[&ino].is_dir()) {
            (Kind::File, true) => return Err(VolError::IsADirectory(ino)),
            (Kind::Directory, false) => return Err(VolError::NotADirectory(ino)),
            (Kind::Directory, true) if !t.entries[&ino].is_empty() => return Err(VolError::NotEmpty(ino)),
            _ => {}
        }
        let at = now();
        self.drop_name(&mut t, ino, &Link { parent: dir, name: name.to_vec() }, at)?;
        touch_dir(&mut t, dir, at, &self.log);
        Ok(())
    }

    /// Remove file or empty directory `ino` under every name it has.
    pub(crate) fn remove_inode(&self, ino: u64) -> Result<()> {
        self.writable()?;
        let mut t = self.tree.write();
        let a = t.attr(ino)?.clone();
        if ino == ROOT_INO {
            return Err(VolError::InvalidArgument("the root directory cannot be removed".into()));
        }
        if a.is_dir() && !t.entries[&ino].is_empty() {
            return Err(VolError::NotEmpty(ino));
        }
        self.drop_inode(FileId(ino))?;
        t.remove(ino);
        let at = now();
        for l in &a.links {
            touch_dir(&mut t, l.parent, at, &self.log);
        }
        Ok(())
    }

    /// Take name `l` from `ino`: journal what remains, or remove the inode
    /// with its last name unless a handle holds it open (an orphan).
    fn drop_name(&self, t: &mut Tree, ino: u64, l: &Link, at: i64) -> Result<()> {
        let a = &t.attrs[&ino];
        let last = a.links.len() == 1;
        // A directory or file still open stays, nameless, until its last
        // close (`fstat` on it gives a link count of 0, as on ext4).
        if last && self.fs.open_handles(FileId(ino))? == 0 {
            self.drop_inode(FileId(ino))?;
            t.remove(ino);
            return Ok(());
        }
        t.unlink(ino, l);
        let a = t.attrs.get_mut(&ino).expect("still here");
        a.ctime = at;
        self.log.record_attr(ino, a);
        Ok(())
    }

    /// Close a handle; the last close gives back the file's
    /// preallocations, and removes an orphan.
    pub fn close(&self, f: FileId) -> Result<()> {
        self.settle_times(f.0);
        self.fs.close(f)?;
        let orphan = self.tree.read().attrs.get(&f.0).is_some_and(|a| f.0 != ROOT_INO && a.links.is_empty());
        if orphan && self.opts.access.writes() {
            let mut t = self.tree.write();
            let still = t.attrs.get(&f.0).is_some_and(|a| a.links.is_empty());
            if still && self.fs.open_handles(f)? == 0 {
                self.drop_inode(f)?;
                t.remove(f.0);
            }
        }
        Ok(())
    }

    /// Move `name` in `dir` to `new_name` in `new_dir`. [`Replace::Allowed`]
    /// replaces what the new name names if it may be (a non-directory by a
    /// non-directory, an empty directory by a directory); with
    /// [`Replace::Never`] an existing target is an error; with
    /// [`Replace::Exchange`] both names must exist and swap inodes, in one
    /// journal transaction.
    pub fn rename_at(
        &self,
        dir: FileId,
        name: &[u8],
        new_dir: FileId,
        new_name: &[u8],
        replace: Replace,
    ) -> Result<()> {
        let (dir, new_dir) = (dir.0, new_dir.0);
        self.writable()?;
        check_name(new_name)?;
        let mut t = self.tree.write();
        let src = t.lookup(dir, name)?;
        t.dir(new_dir)?;
        guard_dir(t.attr(dir)?, dir, Change::Remove)?;
        guard_dir(t.attr(new_dir)?, new_dir, Change::Add)?;
        guard_inode(&t.attrs[&src], src)?;
        let src_dir = t.attrs[&src].is_dir();
        if src_dir && t.is_within(new_dir, src) {
            return Err(VolError::Loop(src));
        }
        let old_link = Link { parent: dir, name: name.to_vec() };
        let new_link = Link { parent: new_dir, name: new_name.to_vec() };
        let target = t.entries[&new_dir].get(new_name).copied();
        if replace == Replace::Exchange {
            let Some(target) = target else {
                return Err(VolError::NoEntry { dir: new_dir, name: String::from_utf8_lossy(new_name).into_owned() });
            };
            return self.exchange(&mut t, (src, old_link), (target, new_link));
        }
        // A longer name must fit the inode's attributes (with many hard
        // links they may be nearly full): refused before anything moves.
        renamed(&t.attrs[&src], &old_link, &new_link).check_room(self.sb.max_attr_bytes())?;
        let at = now();
        if let Some(target) = target {
            // RENAME_NOREPLACE refuses any existing name, even another name
            // of the same inode (as Linux checks before anything else).
            if replace == Replace::Never {
                return Err(VolError::Exists { dir: new_dir, name: String::from_utf8_lossy(new_name).into_owned() });
            }
            if target == src {
                // Two names of one inode: POSIX leaves both.
                return Ok(());
            }
            guard_inode(&t.attrs[&target], target)?;
            match (src_dir, t.attrs[&target].is_dir()) {
                (false, true) => return Err(VolError::IsADirectory(target)),
                (true, false) => return Err(VolError::NotADirectory(target)),
                (true, true) if !t.entries[&target].is_empty() => return Err(VolError::NotEmpty(target)),
                _ => {}
            }
            // The target goes first: a crash between the two records
            // leaves the source under its old name, never two alike.
            self.drop_name(&mut t, target, &new_link, at)?;
        }
        t.unlink(src, &old_link);
        t.link(src, new_link);
        let a = t.attrs.get_mut(&src).expect("live");
        a.ctime = at;
        self.log.record_attr(src, a);
        touch_dir(&mut t, dir, at, &self.log);
        if new_dir != dir {
            touch_dir(&mut t, new_dir, at, &self.log);
        }
        Ok(())
    }

    /// `RENAME_WHITEOUT`: [`Volume::rename_at`], leaving at the old name a
    /// whiteout (a character device numbered 0:0, owned by `owner`), as
    /// overlayfs asks of the file system under it. The whiteout is made
    /// before the rename, so a rename that fails leaves nothing behind.
    pub fn rename_whiteout(
        &self,
        dir: FileId,
        name: &[u8],
        new_dir: FileId,
        new_name: &[u8],
        replace: Replace,
        owner: Owner,
    ) -> Result<()> {
        if replace == Replace::Exchange {
            return Err(VolError::InvalidArgument("a whiteout cannot go with an exchange".into()));
        }
        let spec = NodeSpec { mode: crate::attr::S_IFCHR, rdev: 0, ..NodeSpec::default() };
        let w = self.make(dir.0, Naming::Unnamed, spec, Owner { mode: 0, umask: 0, ..owner })?;
        let done = self.rename_at(dir, name, new_dir, new_name, replace).and_then(|()| self.link_at(w, dir, name));
        // The whiteout is named now, or goes with this close.
        let closed = self.close(w);
        done.and(closed)
    }

    /// `RENAME_EXCHANGE`: `a` takes `b`'s name and `b` takes `a`'s.
    fn exchange(&self, t: &mut Tree, (a, la): (u64, Link), (b, lb): (u64, Link)) -> Result<()> {
        if a == b {
            return Ok(());
        }
        guard_inode(&t.attrs[&b], b)?;
        // Neither directory may end up inside itself.
        if t.attrs[&a].is_dir() && t.is_within(lb.parent, a) {
            return Err(VolError::Loop(a));
        }
        if t.attrs[&b].is_dir() && t.is_within(la.parent, b) {
            return Err(VolError::Loop(b));
        }
        renamed(&t.attrs[&a], &la, &lb).check_room(self.sb.max_attr_bytes())?;
        renamed(&t.attrs[&b], &lb, &la).check_room(self.sb.max_attr_bytes())?;
        t.unlink(a, &la);
        t.unlink(b, &lb);
        t.link(a, lb.clone());
        t.link(b, la.clone());
        let at = now();
        for ino in [a, b] {
            t.attrs.get_mut(&ino).expect("live").ctime = at;
        }
        self.log.record_attrs(&[(a, &t.attrs[&a]), (b, &t.attrs[&b])]);
        touch_dir(t, la.parent, at, &self.log);
        if lb.parent != la.parent {
            touch_dir(t, lb.parent, at, &self.log);
        }
        Ok(())
    }

    /// Space and inodes, used and free.
    pub fn usage(&self) -> Usage {
        let sb = &self.sb;
        let inodes = u64::from(sb.inode_count);
        Usage {
            block_size: sb.block_size,
            data_blocks: sb.total_blocks - sb.data_start,
            free_blocks: self.fs.available_blocks(),
            inodes,
            free_inodes: inodes.saturating_sub(self.live_files.load(Ordering::Acquire)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Directory,
}

/// Whether a rename may replace an existing target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replace {
    /// Replace it (POSIX `rename`).
    #[default]
    Allowed,
    /// Fail with [`VolError::Exists`] (`RENAME_NOREPLACE`).
    Never,
    /// Swap the two names' inodes; both must exist (`RENAME_EXCHANGE`).
    Exchange,
}

/// What a call does to a directory's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Add,
    Remove,
}

/// Refuse a change to the entries of a directory its flags protect: an
/// immutable one takes none, an append-only one only additions.
pub(crate) fn guard_dir(a: &Attr, dir: u64, change: Change) -> Result<()> {
    // A directory removed while open takes no new names.
    if a.links.is_empty() && dir != ROOT_INO && change == Change::Add {
        return Err(VolError::NoInode(dir));
    }
    if a.flags & FL_IMMUTABLE != 0 || (a.flags & FL_APPEND != 0 && change == Change::Remove) {
        return Err(VolError::NotPermitted { ino: dir, why: "the directory is immutable or append-only" });
    }
    Ok(())
}

/// Refuse renaming, linking or unlinking an immutable or append-only
/// inode.
pub(crate) fn guard_inode(a: &Attr, ino: u64) -> Result<()> {
    if a.flags & (FL_IMMUTABLE | FL_APPEND) != 0 {
        return Err(VolError::NotPermitted { ino, why: "immutable or append-only" });
    }
    Ok(())
}

/// `a` with its name `from` changed to `to` (for a size check).
fn renamed(a: &Attr, from: &Link, to: &Link) -> Attr {
    let mut next = a.clone();
    next.links.retain(|l| l != from);
    next.links.push(to.clone());
    next
}

/// A directory's contents changed at `at`: its times follow.
pub(crate) fn touch_dir(t: &mut Tree, dir: u64, at: i64, log: &crate::log::Log) {
    let a = t.attrs.get_mut(&dir).expect("a live directory");
    a.mtime = at;
    a.ctime = at;
    log.record_attr(dir, a);
}
