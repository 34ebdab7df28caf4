//! The path-level namespace: what a program calls, in `std::fs`'s words
//! (`create_dir`, `remove_file`, `rename`, `read_dir`, `metadata`, ...),
//! over the inode-level calls the mount uses (`mkdir_at`, `unlink_at`,
//! `rename_at`, ... which take a directory's [`FileId`] and a name).
//!
//! Paths are absolute from the volume's root (a leading `/` is optional:
//! there is no current directory). `.` and `..` mean what they mean in
//! POSIX, and symbolic links are followed as the kernel follows them:
//! every component but the last always, the last unless the call is about
//! the link itself (`symlink_metadata`, `read_link`, `remove_file`,
//! `rename`, `hard_link`'s new name); more than [`MAX_SYMLINK_FOLLOWS`]
//! in one resolution is [`VolError::TooManyLinks`] (`ELOOP`), as on
//! Linux.
//!
//! Every error a path-level call returns names the caller's path
//! ([`VolError::At`]), so a message reads `/logs/a: no entry "a" in
//! directory 12` rather than only inode numbers; [`VolError::cause`]
//! gives the error underneath for matching.
//!
//! ```
//! use mballoc_vol::{FormatOptions, MemDevice, MountOptions, Replace, Volume};
//! use std::sync::Arc;
//!
//! let dev = Arc::new(MemDevice::new(64 << 20));
//! Volume::format(dev.clone(), &FormatOptions::default())?;
//! let vol = Volume::open(dev, MountOptions::default())?;
//! vol.create_dir_all("/a/b")?;
//! vol.write_file("/a/b/f", b"data")?;
//! vol.rename("/a/b/f", "/a/g", Replace::Never)?;
//! vol.symlink("b", "/a/link")?;
//! assert_eq!(vol.metadata("/a/g")?.size, 4);
//! assert!(vol.metadata("/a/link")?.is_dir()); // followed
//! let names: Vec<_> = vol.read_dir("/a")?.into_iter().map(|e| e.name).collect();
//! assert_eq!(names, [b"b".to_vec(), b"g".to_vec(), b"link".to_vec()]);
//! vol.remove_file("/a/g")?;
//! vol.unmount()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::attr::{Attr, S_IFDIR, S_IFLNK, S_IFMT};
use crate::error::{Result, VolError};
use crate::namespace::{DirEntry, Owner, Replace};
use crate::special::XattrSet;
use crate::volume::Volume;
use mballoc_fs::FileId;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// Most symbolic links one resolution follows (Linux's `MAXSYMLINKS`).
pub const MAX_SYMLINK_FOLLOWS: u32 = 40;

/// Whether the last component of a path is followed if it is a symbolic
/// link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Last {
    /// Followed (open, stat, create in a linked directory).
    Follow,
    /// Not followed: the call is about the link itself.
    NoFollow,
}

/// What `stat` gives: the inode's attributes with the counts the volume
/// keeps elsewhere. Times are nanoseconds since the epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// The inode.
    pub ino: FileId,
    /// Type and permission bits (`st_mode`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Names (`st_nlink`: for a directory two plus its subdirectories).
    pub nlink: u32,
    /// Bytes (a symbolic link: its target's length; a directory: 0).
    pub size: u64,
    /// Blocks held, mapped or reserved for delayed data, in the volume's
    /// blocks (`st_blocks` counts 512-byte units: times `block_size / 512`).
    pub blocks: u64,
    /// The volume's block size (`st_blksize`).
    pub block_size: u32,
    /// Device number of a character or block device (`st_rdev`).
    pub rdev: u32,
    /// chattr flags (`FL_IMMUTABLE`, ...).
    pub flags: u32,
    /// Last access.
    pub atime: i64,
    /// Last change of the contents.
    pub mtime: i64,
    /// Last change of the inode.
    pub ctime: i64,
    /// Creation (0 for inodes made before the volume kept it).
    pub btime: i64,
}

impl Metadata {
    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.mode & S_IFMT == crate::attr::S_IFREG
    }
    /// A symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }
    /// The permission bits (`mode & 0o7777`).
    pub fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }
}

/// A path's bytes, without the leading and doubled slashes.
fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|c| !c.is_empty())
}

fn bytes(path: &Path) -> &[u8] {
    path.as_os_str().as_bytes()
}

impl Volume {
    /// Walk `path` from `start`, following links as `last` says; `budget`
    /// counts the links still allowed.
    fn walk(&self, start: FileId, path: &[u8], last: Last, budget: &mut u32) -> Result<FileId> {
        let parts: Vec<&[u8]> = components(path).collect();
        let mut at = if path.first() == Some(&b'/') { self.root() } else { start };
        for (i, name) in parts.iter().enumerate() {
            let dir = at;
            at = match *name {
                b"." => {
                    self.directory(dir)?;
                    dir
                }
                b".." => FileId(self.directory(dir)?.parent().unwrap_or(dir.0)),
                n => {
                    self.directory(dir)?;
                    self.lookup(dir, n)?
                }
            };
            let is_last = i + 1 == parts.len();
            if is_last && last == Last::NoFollow {
                break;
            }
            let a = self.attr(at)?;
            if a.is_symlink() {
                if *budget == 0 {
                    return Err(VolError::TooManyLinks);
                }
                *budget -= 1;
                at = self.walk(dir, &a.target, Last::Follow, budget)?;
            }
        }
        Ok(at)
    }

    /// The attributes of `dir`, or `NotADirectory`.
    fn directory(&self, dir: FileId) -> Result<Attr> {
        let a = self.attr(dir)?;
        match a.is_dir() {
            true => Ok(a),
            false => Err(VolError::NotADirectory(dir.0)),
        }
    }

    pub(crate) fn resolve_as(&self, path: &Path, last: Last) -> Result<FileId> {
        self.walk(self.root(), bytes(path), last, &mut { MAX_SYMLINK_FOLLOWS })
    }

    /// The directory holding `path`'s last component (links followed) and
    /// that component's name. A path with no last name (`/`, `a/..`) is
    /// [`VolError::InvalidName`].
    pub(crate) fn parent_of<'p>(&self, path: &'p Path) -> Result<(FileId, &'p [u8])> {
        let b = bytes(path);
        let name = components(b).last().unwrap_or_default();
        if name.is_empty() || name == b"." || name == b".." {
            return Err(VolError::InvalidName {
                name: path.display().to_string(),
                why: "names no entry (it ends in `/`, `.` or `..`)",
            });
        }
        // The directory part: everything before the last component.
        let end = b.len() - b.iter().rev().position(|&c| c != b'/').unwrap_or(0);
        let dir_part = &b[..end - name.len()];
        let dir = self.walk(self.root(), dir_part, Last::Follow, &mut { MAX_SYMLINK_FOLLOWS })?;
        self.directory(dir)?;
        Ok((dir, name))
    }

    /// The inode `path` names, symbolic links followed ("/" is the root).
    pub fn resolve(&self, path: impl AsRef<Path>) -> Result<FileId> {
        let path = path.as_ref();
        self.resolve_as(path, Last::Follow).map_err(|e| e.at(path))
    }

    /// The metadata of what `path` names, symbolic links followed.
    pub fn metadata(&self, path: impl AsRef<Path>) -> Result<Metadata> {
        let path = path.as_ref();
        self.resolve_as(path, Last::Follow).and_then(|f| self.metadata_of(f)).map_err(|e| e.at(path))
    }

    /// The metadata of `path` itself: a symbolic link is not followed.
    pub fn symlink_metadata(&self, path: impl AsRef<Path>) -> Result<Metadata> {
        let path = path.as_ref();
        self.resolve_as(path, Last::NoFollow).and_then(|f| self.metadata_of(f)).map_err(|e| e.at(path))
    }

    /// An inode's [`Metadata`].
    pub fn metadata_of(&self, f: FileId) -> Result<Metadata> {
        let a = self.attr(f)?;
        let (size, blocks) = match a.kind() {
            S_IFDIR => (0, 0),
            S_IFLNK => (a.target.len() as u64, 0),
            _ if a.is_file() => (self.size(f)?, self.blocks_held(f)?),
            _ => (0, 0),
        };
        Ok(Metadata {
            ino: f,
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
            nlink: self.nlink(f)?,
            size,
            blocks,
            block_size: self.sb.block_size,
            rdev: a.rdev,
            flags: a.flags,
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
            btime: a.btime,
        })
    }

    /// Make directory `path` (mode 0o755); its parent must exist.
    pub fn create_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.create_dir_mode(path, 0o755)
    }

    /// Make directory `path` with permission bits `mode`.
    pub fn create_dir_mode(&self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        let path = path.as_ref();
        (|| {
            let (dir, name) = self.parent_of(path)?;
            self.mkdir_at(dir, name, Owner { mode, ..Owner::default() }).map(drop)
        })()
        .map_err(|e| e.at(path))
    }

    /// Make directory `path` and every missing parent; a directory already
    /// there is fine.
    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let mut at = self.root();
        for name in components(bytes(path)) {
            at = match self.walk(at, name, Last::Follow, &mut { MAX_SYMLINK_FOLLOWS }) {
                Ok(f) => f,
                Err(VolError::NoEntry { .. }) => {
                    self.mkdir_at(at, name, Owner { mode: 0o755, ..Owner::default() }).map_err(|e| e.at(path))?
                }
                Err(e) => return Err(e.at(path)),
            };
            self.directory(at).map_err(|e| e.at(path))?;
        }
        Ok(())
    }

    /// Remove the empty directory `path`.
    pub fn remove_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        self.parent_of(path).and_then(|(dir, name)| self.rmdir_at(dir, name)).map_err(|e| e.at(path))
    }

    /// Remove the name `path` (a file, link, device, not a directory); the
    /// file goes when its last name and last handle are gone.
    pub fn remove_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        self.parent_of(path).and_then(|(dir, name)| self.unlink_at(dir, name)).map_err(|e| e.at(path))
    }

    /// Move `from` to `to` (`rename(2)`; `replace` says whether an
    /// existing `to` is replaced, kept, or swapped with `from`).
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>, replace: Replace) -> Result<()> {
        let (from, to) = (from.as_ref(), to.as_ref());
        let (a, an) = self.parent_of(from).map_err(|e| e.at(from))?;
        let (b, bn) = self.parent_of(to).map_err(|e| e.at(to))?;
        self.rename_at(a, an, b, bn, replace).map_err(|e| e.at(from))
    }

    /// Give the file `original` the further name `link` (`link(2)`;
    /// `original` is not followed if it is a symbolic link).
    pub fn hard_link(&self, original: impl AsRef<Path>, link: impl AsRef<Path>) -> Result<()> {
        let (original, link) = (original.as_ref(), link.as_ref());
        let ino = self.resolve_as(original, Last::NoFollow).map_err(|e| e.at(original))?;
        self.parent_of(link).and_then(|(dir, name)| self.link_at(ino, dir, name)).map_err(|e| e.at(link))
    }

    /// Make `link` a symbolic link to `target` (kept as given; a relative
    /// target is read from the link's directory).
    pub fn symlink(&self, target: impl AsRef<Path>, link: impl AsRef<Path>) -> Result<()> {
        let link = link.as_ref();
        let target = bytes(target.as_ref());
        self.parent_of(link)
            .and_then(|(dir, name)| self.symlink_at(dir, name, target, Owner::default()))
            .map(drop)
            .map_err(|e| e.at(link))
    }

    /// The target of the symbolic link `path`.
    pub fn read_link(&self, path: impl AsRef<Path>) -> Result<std::path::PathBuf> {
        let path = path.as_ref();
        let target = self.resolve_as(path, Last::NoFollow).and_then(|f| self.link_target(f)).map_err(|e| e.at(path))?;
        Ok(std::ffi::OsString::from_vec(target).into())
    }

    /// The entries of directory `path`, by name (without `.` and `..`).
    pub fn read_dir(&self, path: impl AsRef<Path>) -> Result<Vec<DirEntry>> {
        let path = path.as_ref();
        self.resolve_as(path, Last::Follow).and_then(|d| self.dir_entries(d)).map_err(|e| e.at(path))
    }

    /// Cut or extend the file `path` to `size` bytes (`truncate(2)`).
    pub fn set_len(&self, path: impl AsRef<Path>, size: u64) -> Result<()> {
        let path = path.as_ref();
        (|| {
            let f = self.resolve_as(path, Last::Follow)?;
            if self.attr(f)?.is_dir() {
                return Err(VolError::IsADirectory(f.0));
            }
            self.open_file(f)?;
            let done = self.truncate(f, size);
            done.and(self.close(f))
        })()
        .map_err(|e| e.at(path))
    }

    /// Set the permission bits of `path` (`chmod(2)`).
    pub fn set_permissions(&self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        let path = path.as_ref();
        let set = crate::attributes::SetAttr { mode: Some(mode & 0o7777), ..Default::default() };
        self.resolve_as(path, Last::Follow).and_then(|f| self.set_attr(f, set)).map(drop).map_err(|e| e.at(path))
    }

    /// The value of extended attribute `name` (`user.x`) of `path`.
    pub fn get_xattr(&self, path: impl AsRef<Path>, name: &str) -> Result<Vec<u8>> {
        let path = path.as_ref();
        self.resolve_as(path, Last::Follow).and_then(|f| self.get_xattr_at(f, name.as_bytes())).map_err(|e| e.at(path))
    }

    /// The names of `path`'s extended attributes, in order.
    pub fn list_xattrs(&self, path: impl AsRef<Path>) -> Result<Vec<String>> {
        let path = path.as_ref();
        let names = self.resolve_as(path, Last::Follow).and_then(|f| self.list_xattrs_at(f)).map_err(|e| e.at(path))?;
        Ok(names.into_iter().map(|n| String::from_utf8_lossy(&n).into_owned()).collect())
    }

    /// Set extended attribute `name` of `path` to `value`.
    pub fn set_xattr(&self, path: impl AsRef<Path>, name: &str, value: &[u8], how: XattrSet) -> Result<()> {
        let path = path.as_ref();
        self.resolve_as(path, Last::Follow)
            .and_then(|f| self.set_xattr_at(f, name.as_bytes(), value, how))
            .map_err(|e| e.at(path))
    }

    /// Remove extended attribute `name` of `path`.
    pub fn remove_xattr(&self, path: impl AsRef<Path>, name: &str) -> Result<()> {
        let path = path.as_ref();
        self.resolve_as(path, Last::Follow)
            .and_then(|f| self.remove_xattr_at(f, name.as_bytes()))
            .map_err(|e| e.at(path))
    }

    /// The whole of the file `path`.
    pub fn read_file(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let path = path.as_ref();
        (|| {
            let f = self.resolve_as(path, Last::Follow)?;
            if self.attr(f)?.is_dir() {
                return Err(VolError::IsADirectory(f.0));
            }
            let mut out = vec![0; usize::try_from(self.size(f)?).unwrap_or(usize::MAX)];
            let n = self.read(f, 0, &mut out)?;
            out.truncate(n);
            Ok(out)
        })()
        .map_err(|e| e.at(path))
    }

    /// Make `path` a file holding exactly `data` (created with mode 0o644,
    /// or cut and rewritten).
    pub fn write_file(&self, path: impl AsRef<Path>, data: &[u8]) -> Result<()> {
        let path = path.as_ref();
        (|| {
            let (dir, name) = self.parent_of(path)?;
            let f = match self.lookup(dir, name) {
                Ok(_) => {
                    let f = self.resolve_as(path, Last::Follow)?;
                    if self.attr(f)?.is_dir() {
                        return Err(VolError::IsADirectory(f.0));
                    }
                    self.open_file(f)?;
                    f
                }
                Err(VolError::NoEntry { .. }) => self.create_at(dir, name, Owner::default())?,
                Err(e) => return Err(e),
            };
            let done = self.truncate(f, 0).and_then(|()| match data.is_empty() {
                true => Ok(()),
                false => self.write(f, 0, data),
            });
            done.and(self.close(f))
        })()
        .map_err(|e| e.at(path))
    }
}
