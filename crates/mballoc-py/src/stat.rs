//! A file's metadata as Python's `os.stat_result` is built from it.

use mballoc_vol::Metadata;

/// `((ino, mode, nlink, uid, gid, size, blocks, block_size, rdev,
/// flags), (atime, mtime, ctime, btime))`: two tuples, as Python takes
/// at most twelve items from Rust in one.
pub type StatTuple = ((u64, u32, u32, u32, u32, u64, u64, u32, u32, u32), (i64, i64, i64, i64));

/// `m` as a [`StatTuple`].
pub fn stat_tuple(m: Metadata) -> StatTuple {
    (
        (m.ino.0, m.mode, m.nlink, m.uid, m.gid, m.size, m.blocks, m.block_size, m.rdev, m.flags),
        (m.atime, m.mtime, m.ctime, m.btime),
    )
}
