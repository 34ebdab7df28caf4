//! Starting the engine from an existing volume's state instead of an
//! empty one.

use super::{Fs, FsConfig};
use crate::error::{FsError, Result};
use crate::extent_map::{ExtentMap, MappedExtent};
use crate::normalize::MAX_LOGICAL_BLOCKS;
use crate::space::Space;

/// A file carried into the engine: its inode number (which becomes its
/// [`FileId`](crate::FileId) and picks its home group), size and extents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedFile {
    /// Inode number (at least 1, at most 2^32 − 1, unique).
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Extents in logical order, in the engine's blocks (clusters under
    /// bigalloc: the file is taken to hold each cluster's blocks up to
    /// its size).
    pub extents: Vec<MappedExtent>,
    /// Regular file or directory.
    pub kind: super::FileKind,
}

impl Fs {
    /// Build an engine holding an existing volume: `bitmaps[g]` is group
    /// `g`'s block bitmap (bit set = in use), and `files` the files to
    /// carry over, closed. Every file block must be in use in the bitmaps
    /// and owned once; every other block in use becomes metadata the
    /// engine never allocates or frees.
    pub fn import(cfg: FsConfig, bitmaps: &[Vec<u64>], files: Vec<ImportedFile>) -> Result<Fs> {
        let geo = cfg.shape.geometry;
        if bitmaps.len() != geo.groups() as usize {
            return Err(FsError::InvalidImport(format!(
                "{} bitmaps for a volume of {} groups",
                bitmaps.len(),
                geo.groups()
            )));
        }
        let used = |b: u64| {
            let (g, bit) = (geo.group_of(b) as usize, u64::from(geo.offset_in_group(b)));
            bitmaps[g].get((bit / 64) as usize).is_some_and(|w| w & (1 << (bit % 64)) != 0)
        };
        let mut owned: Vec<(u64, u64, u64)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for f in &files {
            if f.ino == 0 || f.ino > u64::from(u32::MAX) || !seen.insert(f.ino) {
                return Err(FsError::InvalidImport(format!("inode number {} is zero, too large or repeated", f.ino)));
            }
            let mut logical_end = 0;
            for e in &f.extents {
                let bad = |why: String| {
                    FsError::InvalidImport(format!("inode {}: extent at logical {}: {why}", f.ino, e.logical))
                };
                if e.len == 0 || e.len > e.state.max_len() {
                    return Err(bad(format!("length {}", e.len)));
                }
                if e.logical < logical_end || e.logical_end() > MAX_LOGICAL_BLOCKS {
                    return Err(bad("out of logical order or past the largest file".into()));
                }
                logical_end = e.logical_end();
                if e.physical.checked_add(u64::from(e.len)).is_none_or(|end| end > geo.total_blocks()) {
                    return Err(bad(format!("physical {}+{} outside the volume", e.physical, e.len)));
                }
                if let Some(b) = (e.physical..e.physical + u64::from(e.len)).find(|&b| !used(b)) {
                    return Err(bad(format!("block {b} is free in the bitmap")));
                }
                owned.push((e.physical, u64::from(e.len), f.ino));
            }
        }
        owned.sort_unstable();
        for w in owned.windows(2) {
            if w[1].0 < w[0].0 + w[0].1 {
                return Err(FsError::InvalidImport(format!(
                    "block {} belongs to inode {} and inode {}",
                    w[1].0, w[0].2, w[1].2
                )));
            }
        }
        let mut fs = Fs::new(cfg)?;
        for (g, bitmap) in bitmaps.iter().enumerate() {
            fs.alloc.load_group_bitmap(g as u32, bitmap)?;
        }
        let free = fs.alloc.free_blocks();
        let file_blocks: u64 = owned.iter().map(|o| o.1).sum();
        fs.metadata_blocks = geo.total_blocks() - free - file_blocks;
        fs.space = Space::new(free);
        for f in files {
            let mut map = ExtentMap::new();
            for e in &f.extents {
                map.insert(e.logical, e.physical, e.len, e.state);
            }
            fs.insert_file(f.ino, f.kind, f.size, map, 0);
            fs.inodes.mark_used(f.ino);
        }
        debug_assert_eq!(fs.check(), Ok(()));
        Ok(fs)
    }

    /// Build an engine whose every group holds the same block bitmap
    /// `used` (bit set = in use) and no files: an aged volume of any size
    /// at the cost of one group's bitmap, since the groups share it until a
    /// request changes one ([`mballoc::Allocator::load_groups_alike`]). A
    /// shorter last group takes the bitmap's first bits. Every block in
    /// use is metadata the engine never frees.
    pub fn import_alike(cfg: FsConfig, used: &[u64]) -> Result<Fs> {
        let geo = cfg.shape.geometry;
        let mut fs = Fs::new(cfg)?;
        let n = geo.groups();
        let alike = if geo.group_len(n - 1) == geo.blocks_per_group() { n } else { n - 1 };
        if alike > 0 {
            fs.alloc.load_groups_alike(0, alike, used)?;
        }
        if alike < n {
            fs.alloc.load_group_bitmap(n - 1, used)?;
        }
        let free = fs.alloc.free_blocks();
        fs.metadata_blocks = geo.total_blocks() - free;
        fs.space = Space::new(free);
        Ok(fs)
    }
}
