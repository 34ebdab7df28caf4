//! Names on a mounted volume: lookup, create, mkdir, unlink, rmdir,
//! rename, attributes and free-space counts, over the tree of
//! [`crate::names`]. Each call changes the tree in memory and journals the
//! inodes it renamed or re-attributed; the engine journals creates and
//! unlinks itself.
//!
//! Lock order: the tree, then a file's cache, then the engine's own locks.
//! Writes never take the tree's lock: they leave their change time in the
//! file's cache, and fsync, close and sync journal it.

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
    pub ino: u64,
    /// Whether it is a directory.
    pub is_dir: bool,
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
    /// Access time, ns since the epoch.
    pub atime: Option<i64>,
    /// Modification time, ns since the epoch.
    pub mtime: Option<i64>,
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
    /// Permission bits (`0o644`); the type is the call's.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

impl Default for Owner {
    fn default() -> Self {
        Owner { mode: 0o644, uid: 0, gid: 0 }
    }
}

impl Volume {
    /// The root directory's inode number.
    pub fn root(&self) -> u64 {
        ROOT_INO
    }

    /// The inode `name` names in directory `dir`.
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<u64> {
        self.tree.read().lookup(dir, name)
    }

    /// An inode's attributes, with a change time a write left pending.
    pub fn attr(&self, ino: u64) -> Result<Attr> {
        let mut a = self.tree.read().attr(ino)?.clone();
        if let Some(m) = self.files.lock().get(&ino).and_then(|c| c.lock().mtime) {
            a.mtime = m;
            a.ctime = a.ctime.max(m);
        }
        Ok(a)
    }

    /// A directory's entries, by name.
    pub fn read_dir(&self, dir: u64) -> Result<Vec<DirEntry>> {
        let t = self.tree.read();
        let entries = t.dir(dir)?;
        Ok(entries.iter().map(|(n, &ino)| DirEntry { name: n.clone(), ino, is_dir: t.attrs[&ino].is_dir() }).collect())
    }

    /// Create an empty regular file `name` in `dir`, open once.
    pub fn create_at(&self, dir: u64, name: &[u8], owner: Owner) -> Result<FileId> {
        self.make(dir, Some(name), S_IFREG | (owner.mode & !S_IFMT), owner)
    }

    /// Make directory `name` in `dir`.
    pub fn mkdir(&self, dir: u64, name: &[u8], owner: Owner) -> Result<u64> {
        let f = self.make(dir, Some(name), S_IFDIR | (owner.mode & !S_IFMT), owner)?;
        self.fs.close(f)?;
        Ok(f.0)
    }

    /// A new inode of `mode` named `name` in `dir`, or, without a name, in
    /// the root under its own number.
    pub(crate) fn make(&self, dir: u64, name: Option<&[u8]>, mode: u32, owner: Owner) -> Result<FileId> {
        self.writable()?;
        if let Some(n) = name {
            check_name(n)?;
        }
        let mut t = self.tree.write();
        t.dir(dir)?;
        if let Some(n) = name {
            if t.entries[&dir].contains_key(n) {
                return Err(VolError::Exists { dir, name: String::from_utf8_lossy(n).into_owned() });
            }
        }
        let f = self.create_inode()?;
        let name = match name {
            Some(n) => n.to_vec(),
            None => {
                let mut n = f.0.to_string();
                let mut k = 0;
                while t.entries[&dir].contains_key(n.as_bytes()) {
                    k += 1;
                    n = format!("{}.{k}", f.0);
                }
                n.into_bytes()
            }
        };
        let at = now();
        let attr = Attr { parent: dir, mode, uid: owner.uid, gid: owner.gid, atime: at, mtime: at, ctime: at, name };
        // Right after the engine's create: nothing written to the file can
        // reach the journal before its name.
        self.log.record_attr(f.0, &attr);
        t.insert(f.0, attr);
        touch_dir(&mut t, dir, at, &self.log);
        Ok(f)
    }

    /// Remove the regular file `name` from `dir`.
    pub fn unlink_at(&self, dir: u64, name: &[u8]) -> Result<()> {
        self.remove_at(dir, name, Kind::File)
    }

    /// Remove the empty directory `name` from `dir`.
    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<()> {
        self.remove_at(dir, name, Kind::Directory)
    }

    fn remove_at(&self, dir: u64, name: &[u8], kind: Kind) -> Result<()> {
        self.writable()?;
        let mut t = self.tree.write();
        let ino = t.lookup(dir, name)?;
        match (kind, t.attrs[&ino].is_dir()) {
            (Kind::File, true) => Err(VolError::IsADirectory(ino)),
            (Kind::Directory, false) => Err(VolError::NotADirectory(ino)),
            _ => self.remove_locked(&mut t, ino),
        }
    }

    /// Remove file or empty directory `ino` wherever it is named.
    pub(crate) fn remove_inode(&self, ino: u64) -> Result<()> {
        self.writable()?;
        let mut t = self.tree.write();
        t.attr(ino)?;
        self.remove_locked(&mut t, ino)
    }

    fn remove_locked(&self, t: &mut Tree, ino: u64) -> Result<()> {
        if ino == ROOT_INO {
            return Err(VolError::InvalidArgument("the root directory cannot be removed".into()));
        }
        if t.attrs[&ino].is_dir() && !t.entries[&ino].is_empty() {
            return Err(VolError::NotEmpty(ino));
        }
        self.drop_inode(FileId(ino))?;
        let parent = t.remove(ino).parent;
        touch_dir(t, parent, now(), &self.log);
        Ok(())
    }

    /// Move `name` in `dir` to `new_name` in `new_dir`, replacing what
    /// that names if it may be (a file by a file, an empty directory by a
    /// directory). With [`Replace::Never`], an existing target is an error.
    pub fn rename(&self, dir: u64, name: &[u8], new_dir: u64, new_name: &[u8], replace: Replace) -> Result<()> {
        self.writable()?;
        check_name(new_name)?;
        let mut t = self.tree.write();
        let src = t.lookup(dir, name)?;
        t.dir(new_dir)?;
        let src_dir = t.attrs[&src].is_dir();
        if src_dir && t.is_within(new_dir, src) {
            return Err(VolError::Loop(src));
        }
        if let Some(&target) = t.entries[&new_dir].get(new_name) {
            if target == src {
                return Ok(());
            }
            if replace == Replace::Never {
                return Err(VolError::Exists { dir: new_dir, name: String::from_utf8_lossy(new_name).into_owned() });
            }
            match (src_dir, t.attrs[&target].is_dir()) {
                (false, true) => return Err(VolError::IsADirectory(target)),
                (true, false) => return Err(VolError::NotADirectory(target)),
                (true, true) if !t.entries[&target].is_empty() => return Err(VolError::NotEmpty(target)),
                _ => {}
            }
            // The target goes first: a crash between the two records
            // leaves the source under its old name, never two alike.
            self.drop_inode(FileId(target))?;
            t.remove(target);
        }
        let children = if src_dir { self.take_entries(&mut t, src) } else { Default::default() };
        let mut a = t.remove(src);
        let at = now();
        a.parent = new_dir;
        a.name = new_name.to_vec();
        a.ctime = at;
        self.log.record_attr(src, &a);
        t.insert(src, a);
        if src_dir {
            t.entries.insert(src, children);
        }
        touch_dir(&mut t, dir, at, &self.log);
        if new_dir != dir {
            touch_dir(&mut t, new_dir, at, &self.log);
        }
        Ok(())
    }

    /// A directory's entries, taken out so that [`Tree::remove`] sees it
    /// empty while it moves.
    fn take_entries(&self, t: &mut Tree, dir: u64) -> std::collections::BTreeMap<Vec<u8>, u64> {
        std::mem::take(t.entries.get_mut(&dir).expect("a directory has entries"))
    }

    /// Change attributes; the inode's change time becomes now.
    pub fn set_attr(&self, ino: u64, set: SetAttr) -> Result<Attr> {
        self.writable()?;
        let pending = self.take_mtime(ino);
        let mut t = self.tree.write();
        let a = t.attrs.get_mut(&ino).ok_or(VolError::NoInode(ino))?;
        if let Some(m) = pending {
            a.mtime = m;
        }
        if let Some(mode) = set.mode {
            a.mode = (a.mode & S_IFMT) | (mode & !S_IFMT);
        }
        a.uid = set.uid.unwrap_or(a.uid);
        a.gid = set.gid.unwrap_or(a.gid);
        a.atime = set.atime.unwrap_or(a.atime);
        a.mtime = set.mtime.unwrap_or(a.mtime);
        a.ctime = now();
        self.log.record_attr(ino, a);
        Ok(a.clone())
    }

    /// Note that file `f`'s contents changed now. Journaled by the next
    /// fsync, close or sync.
    pub fn touch(&self, f: FileId) {
        if let Some(c) = self.files.lock().get(&f.0) {
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
}

/// A directory's contents changed at `at`: its times follow.
fn touch_dir(t: &mut Tree, dir: u64, at: i64, log: &crate::log::Log) {
    let a = t.attrs.get_mut(&dir).expect("a live directory");
    a.mtime = at;
    a.ctime = at;
    log.record_attr(dir, a);
}
