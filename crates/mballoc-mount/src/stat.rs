//! What `stat(2)` and `statx(2)` show of an inode: the volume's attributes
//! in FUSE's layout, with ext4's conventions for the counts (a
//! directory's link count is two plus its subdirectories, `st_blocks`
//! counts delayed data, a directory's size is one block).

use crate::fuse::abi::{Attr, Out};
use mballoc_fs::FileId;
use mballoc_vol::{VolError, Volume, FL_APPEND, FL_IMMUTABLE, FL_NODUMP, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};

/// statx's `STATX_ATTR_*` bits for chattr flags.
const STATX_ATTR_IMMUTABLE: u64 = 0x10;
const STATX_ATTR_APPEND: u64 = 0x20;
const STATX_ATTR_NODUMP: u64 = 0x40;

/// Nanoseconds since the epoch as seconds and nanoseconds.
pub(crate) fn split_ns(ns: i64) -> (i64, u32) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000) as u32)
}

/// Seconds and nanoseconds as nanoseconds since the epoch (saturating).
pub(crate) fn join_ns(s: i64, ns: u32) -> i64 {
    s.saturating_mul(1_000_000_000).saturating_add(i64::from(ns))
}

/// `ino`'s attributes as the kernel wants them, its generation, and its
/// chattr flags.
pub(crate) fn file_attr(vol: &Volume, ino: u64) -> Result<(Attr, u32, u32), VolError> {
    let a = vol.attr(FileId(ino))?;
    let bs = u64::from(vol.superblock().block_size);
    let (size, blocks) = match a.mode & S_IFMT {
        S_IFDIR => (bs, bs / 512),
        S_IFLNK => (a.target.len() as u64, 0),
        S_IFREG => {
            let f = FileId(ino);
            (vol.size(f)?, vol.blocks_held(f)? * bs / 512)
        }
        _ => (0, 0),
    };
    let attr = Attr {
        ino,
        size,
        blocks,
        atime: split_ns(a.atime),
        mtime: split_ns(a.mtime),
        ctime: split_ns(a.ctime),
        btime: (a.btime != 0).then(|| split_ns(a.btime)),
        mode: a.mode,
        nlink: vol.nlink(FileId(ino))?,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: bs as u32,
    };
    Ok((attr, a.generation, a.flags))
}

/// The statx attribute bits for chattr `flags`, and the mask of those
/// the volume keeps.
pub(crate) fn statx_attributes(flags: u32) -> (u64, u64) {
    let mut bits = 0;
    for (fl, sx) in
        [(FL_IMMUTABLE, STATX_ATTR_IMMUTABLE), (FL_APPEND, STATX_ATTR_APPEND), (FL_NODUMP, STATX_ATTR_NODUMP)]
    {
        if flags & fl != 0 {
            bits |= sx;
        }
    }
    (bits, STATX_ATTR_IMMUTABLE | STATX_ATTR_APPEND | STATX_ATTR_NODUMP)
}

/// `struct fuse_attr_out` for `ino`.
pub(crate) fn put_attr_out(out: &mut Out, vol: &Volume, ino: u64, ttl: std::time::Duration) -> Result<(), VolError> {
    let (a, _, _) = file_attr(vol, ino)?;
    let (s, ns) = crate::fuse::abi::valid(ttl);
    out.u64(s).u32(ns).u32(0);
    a.put(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_the_epoch_split_and_join() {
        for ns in [0, 1, 999_999_999, 1_000_000_000, -1, -1_000_000_001, i64::MAX / 2] {
            let (s, n) = split_ns(ns);
            assert!(n < 1_000_000_000);
            assert_eq!(join_ns(s, n), ns);
        }
    }
}
