//! What `stat(2)` shows of an inode: the volume's attributes as FUSE's
//! `FileAttr`, with ext4's conventions for the counts (a directory's link
//! count is two plus its subdirectories, `st_blocks` counts delayed data,
//! a directory's size is one block).

use fuser::{FileAttr, FileType, INodeNo};
use mballoc_fs::FileId;
use mballoc_vol::{Attr, VolError, Volume, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFSOCK};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The FUSE file type of a mode.
pub(crate) fn kind(mode: u32) -> FileType {
    match mode & S_IFMT {
        S_IFDIR => FileType::Directory,
        S_IFLNK => FileType::Symlink,
        S_IFCHR => FileType::CharDevice,
        S_IFBLK => FileType::BlockDevice,
        S_IFIFO => FileType::NamedPipe,
        S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub(crate) fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

pub(crate) fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

/// `ino`'s attributes as `stat` reports them.
pub(crate) fn file_attr(vol: &Volume, ino: u64) -> Result<(FileAttr, Attr), VolError> {
    let a = vol.attr(FileId(ino))?;
    let bs = u64::from(vol.superblock().block_size);
    let (size, blocks) = match a.mode & S_IFMT {
        S_IFDIR => (bs, bs / 512),
        S_IFLNK => (a.target.len() as u64, 0),
        S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK => (0, 0),
        _ => {
            let f = FileId(ino);
            (vol.size(f)?, vol.blocks_held(f)? * bs / 512)
        }
    };
    let fa = FileAttr {
        ino: INodeNo(ino),
        size,
        blocks,
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: vol.nlink(FileId(ino))?,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: bs as u32,
        flags: 0,
    };
    Ok((fa, a))
}

/// The attributes of a negative entry: inode 0, which FUSE reads as "no
/// such name".
pub(crate) fn negative() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}
