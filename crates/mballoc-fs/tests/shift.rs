//! Collapse and insert range in the file layer: what moves, what is
//! freed, and what is refused, under both profiles.

use mballoc::Geometry;
use mballoc_fs::{FallocateMode, FileId, Fs, FsConfig, FsError, MappedExtent};

const BS: u64 = 4096;

fn fs_of(kernel: bool) -> Fs {
    let geo = Geometry::new(4096, 1 << 16).unwrap();
    Fs::new(if kernel { FsConfig::kernel(geo) } else { FsConfig::new(geo) }).unwrap()
}

/// Logical block -> physical block, for every mapped block.
fn blocks(fs: &Fs, f: FileId) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for e in fs.extents(f).unwrap() {
        let MappedExtent { logical, physical, len, .. } = e;
        v.extend((0..u64::from(len)).map(|i| (logical + i, physical + i)));
    }
    v
}

#[test]
fn collapse_moves_the_tail_down_and_frees_only_the_range() {
    for kernel in [false, true] {
        let fs = fs_of(kernel);
        let f = fs.create().unwrap();
        fs.write(f, 0, 64 * BS).unwrap();
        fs.fsync(f).unwrap();
        let before = blocks(&fs, f);
        let free = fs.available_blocks();
        fs.collapse_range(f, 8 * BS, 16 * BS).unwrap();
        fs.commit();
        assert_eq!(fs.size(f).unwrap(), 48 * BS);
        let after = blocks(&fs, f);
        let want: Vec<(u64, u64)> = before
            .iter()
            .filter(|(l, _)| *l < 8 || *l >= 24)
            .map(|&(l, p)| if l >= 24 { (l - 16, p) } else { (l, p) })
            .collect();
        assert_eq!(after, want, "kernel profile {kernel}");
        assert!(fs.available_blocks() >= free + 16, "the range's blocks are free again");
        fs.check().unwrap();
    }
}

#[test]
fn insert_opens_a_hole_and_moves_the_tail_up() {
    for kernel in [false, true] {
        let fs = fs_of(kernel);
        let f = fs.create().unwrap();
        fs.fallocate(f, 0, 32 * BS, FallocateMode::ExtendSize).unwrap();
        let before = blocks(&fs, f);
        fs.insert_range(f, 4 * BS, 8 * BS).unwrap();
        assert_eq!(fs.size(f).unwrap(), 40 * BS);
        let want: Vec<(u64, u64)> = before.iter().map(|&(l, p)| if l >= 4 { (l + 8, p) } else { (l, p) }).collect();
        assert_eq!(blocks(&fs, f), want, "kernel profile {kernel}");
        fs.check().unwrap();
    }
}

#[test]
fn what_ext4_refuses_is_refused_and_changes_nothing() {
    let fs = fs_of(false);
    let f = fs.create().unwrap();
    fs.write(f, 0, 16 * BS).unwrap();
    let delayed = fs.collapse_range(f, 0, BS);
    assert!(matches!(delayed, Err(FsError::InvalidRange(_))), "{delayed:?}");
    fs.fsync(f).unwrap();
    let before = blocks(&fs, f);
    for (offset, len) in [(1, BS), (0, BS + 1), (8 * BS, 8 * BS), (20 * BS, BS)] {
        assert!(matches!(fs.collapse_range(f, offset, len), Err(FsError::InvalidRange(_))), "{offset}+{len}");
    }
    assert!(matches!(fs.collapse_range(f, 0, 0), Err(FsError::ZeroLength)));
    assert!(matches!(fs.insert_range(f, 16 * BS, BS), Err(FsError::InvalidRange(_))), "at the end");
    assert_eq!(blocks(&fs, f), before);
    assert_eq!(fs.size(f).unwrap(), 16 * BS);
}
