//! Block maps: ext4 extent trees of any depth, and ext2/3 direct and
//! indirect pointers. Both yield the same thing: the file's data extents
//! in logical order, and the blocks the map itself occupies.
//!
//! Every node is checked before it is trusted (magic, entry counts against
//! the room in the node, depth one less than its parent's, logical order,
//! children inside their parent's logical range, blocks inside the volume)
//! and read at most once, so a corrupt tree that loops or shares nodes is
//! an error and the walk is bounded by the volume's size.

use crate::bytes::{le16, le32, lo_hi};
use crate::checksum::crc32c_raw;
use crate::error::{Ext4Error, Result};
use crate::inode::{inode_csum_seed, Inode, MappingKind};
use crate::source::BlockSource;
use crate::sparse_bits::SparseBits;
use crate::superblock::ChecksumPolicy;
use crate::volume::Ext4Volume;
use std::collections::BTreeMap;

const EXTENT_MAGIC: u16 = 0xF30A;
/// The kernel's limit on extent tree depth.
pub const MAX_EXTENT_DEPTH: u16 = 5;
/// Longest initialized extent; longer raw lengths mark unwritten extents.
const INIT_MAX_LEN: u16 = 32768;
const NO_LOGICAL_END: u64 = 1 << 32;

/// One data extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ext4Extent {
    /// First logical block.
    pub logical: u64,
    /// First physical block.
    pub physical: u64,
    /// Blocks.
    pub len: u32,
    /// Allocated but never written (reads as zeros).
    pub unwritten: bool,
}

/// A file's map: data extents in logical order, and the blocks that hold
/// the map (extent tree nodes below the inode, or indirect blocks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMap {
    /// How the blocks are mapped.
    pub kind: MappingKind,
    /// Data extents in logical order.
    pub extents: Vec<Ext4Extent>,
    /// Blocks the map itself occupies.
    pub map_blocks: Vec<u64>,
    /// Bytes of data kept in the inode itself (inline data; 0 otherwise).
    pub inline_len: u64,
}

impl FileMap {
    /// Data blocks mapped.
    pub fn data_blocks(&self) -> u64 {
        self.extents.iter().map(|e| u64::from(e.len)).sum()
    }

    /// Extents as `filefrag` counts them: inline data is one extent
    /// (FIEMAP reports it with `FIEMAP_EXTENT_DATA_INLINE`), or none when
    /// the file is empty.
    pub fn filefrag_extents(&self) -> u64 {
        if self.kind == MappingKind::Inline {
            return u64::from(self.inline_len > 0);
        }
        filefrag_count(self.extents.iter().map(|e| (e.logical, e.physical, u64::from(e.len))))
    }
}

/// Count extents as `filefrag` does from FIEMAP's records `(logical,
/// physical, len)` in logical order: a record starts a new extent unless it
/// continues the previous one physically, either at the distance its
/// logical offset says or right after it.
pub fn filefrag_count(records: impl IntoIterator<Item = (u64, u64, u64)>) -> u64 {
    let mut n = 0;
    let mut last: Option<(u64, u64, u64)> = None;
    for (logical, physical, len) in records {
        let counts = match last {
            None => true,
            Some((ll, lp, llen)) => {
                let expected = lp + (logical - ll);
                logical != 0 && physical != expected && physical != lp + llen
            }
        };
        n += u64::from(counts);
        last = Some((logical, physical, len));
    }
    n
}

/// Blocks already owned by an inode reached so far. Every map and data
/// block is claimed before it is used, so a block reached twice is an
/// error before anything behind it is read: a walk takes at most one step
/// per block of the image, whatever the maps claim.
#[derive(Debug)]
pub(crate) enum Claims {
    /// Disjoint runs with their owners (adjacent runs of one owner
    /// merged): an overlap names both inodes. Memory grows with the runs.
    Owners(BTreeMap<u64, (u64, u32)>),
    /// One bit per block of the volume, made on first use: memory
    /// bounded by the volume, not by its files; an overlap names the
    /// inode that reached the block second.
    Bits(SparseBits),
}

impl Default for Claims {
    fn default() -> Self {
        Claims::Owners(BTreeMap::new())
    }
}

impl Claims {
    /// Claims as bits, for a volume of `blocks` blocks.
    pub(crate) fn bits(blocks: u64) -> Claims {
        Claims::Bits(SparseBits::new(blocks))
    }

    /// Claim `[start, start + len)` for inode `ino`; a block already
    /// claimed (by any inode, this one included) is an overlap.
    pub(crate) fn claim(&mut self, start: u64, len: u64, ino: u32) -> Result<()> {
        let runs = match self {
            Claims::Owners(runs) => runs,
            Claims::Bits(bits) => {
                return bits.insert_range(start, len).map_err(|block| Ext4Error::Reclaimed { block, ino });
            }
        };
        let end = start + len;
        if let Some((_, &(e, owner))) = runs.range(..=start).next_back() {
            if e > start {
                return Err(Ext4Error::Overlap { block: start, first: owner, second: ino });
            }
        }
        if let Some((&s, &(_, owner))) = runs.range(start..end).next() {
            return Err(Ext4Error::Overlap { block: s, first: owner, second: ino });
        }
        let (mut lo, mut hi) = (start, end);
        if let Some((&s, &(e, owner))) = runs.range(..start).next_back() {
            if e == start && owner == ino {
                runs.remove(&s);
                lo = s;
            }
        }
        if let Some(&(e, owner)) = runs.get(&end) {
            if owner == ino {
                runs.remove(&end);
                hi = e;
            }
        }
        runs.insert(lo, (hi, ino));
        Ok(())
    }
}

struct Walk<'a> {
    ino: u32,
    csum_seed: Option<u32>,
    map: &'a mut FileMap,
    claims: &'a mut Claims,
}

impl<S: BlockSource> Ext4Volume<S> {
    /// The block map of `inode`. A block the map reaches twice is an
    /// [`Ext4Error::Overlap`].
    pub fn file_map(&self, inode: &Inode) -> Result<FileMap> {
        self.file_map_claimed(inode, &mut Claims::default())
    }

    /// The block map of `inode`, claiming every block it reaches in
    /// `claims` (shared by a whole walk) before using it.
    pub(crate) fn file_map_claimed(&self, inode: &Inode, claims: &mut Claims) -> Result<FileMap> {
        let kind = inode.mapping();
        let mut map = FileMap { kind, extents: Vec::new(), map_blocks: Vec::new(), inline_len: 0 };
        match kind {
            MappingKind::Extents => {
                let csum_seed = (self.superblock().metadata_csum() && self.policy() == ChecksumPolicy::Verify)
                    .then(|| inode_csum_seed(self.superblock(), inode.ino, inode.generation));
                let mut w = Walk { ino: inode.ino, csum_seed, map: &mut map, claims };
                self.extent_node(&mut w, &inode.block, 0, None, 0, NO_LOGICAL_END)?;
            }
            MappingKind::Indirect => self.indirect_map(inode, &mut map, claims)?,
            MappingKind::Inline => map.inline_len = inline_len(inode)?,
            MappingKind::None => {}
        }
        Ok(map)
    }

    /// Check `[start, start + len)` lies inside the volume's data blocks.
    fn in_volume(&self, start: u64, len: u64) -> bool {
        start >= u64::from(self.superblock().first_data_block)
            && start.checked_add(len).is_some_and(|e| e <= self.superblock().blocks_count)
    }

    /// One extent tree node: `raw` is the node (60 bytes in the inode, or a
    /// block), `block` its block (0 for the root), `depth` what the parent
    /// expects (None at the root), and `[lo, hi)` the logical range the
    /// parent gave it.
    fn extent_node(&self, w: &mut Walk, raw: &[u8], block: u64, depth: Option<u16>, lo: u64, hi: u64) -> Result<()> {
        let ino = w.ino;
        let bad = |reason: String| Ext4Error::ExtentTree { ino, block, reason };
        let magic = le16(raw, 0);
        if magic != EXTENT_MAGIC {
            return Err(bad(format!("header magic {magic:#06x} (expected 0xf30a)")));
        }
        let (entries, max, node_depth) = (le16(raw, 2), le16(raw, 4), le16(raw, 6));
        let room = ((raw.len() - 12) / 12) as u16;
        if max == 0 || max > room {
            return Err(bad(format!("header max {max} (room for {room} entries)")));
        }
        if entries > max {
            return Err(bad(format!("header has {entries} entries, max {max}")));
        }
        match depth {
            None if node_depth > MAX_EXTENT_DEPTH => {
                return Err(bad(format!("depth {node_depth} exceeds {MAX_EXTENT_DEPTH}")));
            }
            Some(d) if d != node_depth => return Err(bad(format!("depth {node_depth}, parent expects {d}"))),
            _ => {}
        }
        if let (Some(seed), true) = (w.csum_seed, block != 0) {
            let tail = 12 + 12 * usize::from(max);
            if tail + 4 > raw.len() {
                return Err(bad("no room for the checksum tail".into()));
            }
            let stored = le32(raw, tail);
            let computed = crc32c_raw(seed, &raw[..tail]);
            if stored != computed {
                return Err(Ext4Error::Checksum {
                    structure: format!("inode {} extent tree node", w.ino),
                    block,
                    stored,
                    computed,
                });
            }
        }
        let entry = |i: usize| &raw[12 + 12 * i..24 + 12 * i];
        let mut next_lo = lo;
        if node_depth == 0 {
            for i in 0..usize::from(entries) {
                let e = entry(i);
                let logical = u64::from(le32(e, 0));
                let raw_len = le16(e, 4);
                let (len, unwritten) =
                    if raw_len > INIT_MAX_LEN { (raw_len - INIT_MAX_LEN, true) } else { (raw_len, false) };
                let physical = lo_hi(le32(e, 8), u32::from(le16(e, 6)));
                if len == 0 {
                    return Err(bad(format!("entry {i} has length 0")));
                }
                if logical < next_lo || logical + u64::from(len) > hi {
                    return Err(bad(format!(
                        "entry {i} covers logical {logical}+{len}, outside {next_lo}..{hi} or overlapping"
                    )));
                }
                if !self.in_volume(physical, u64::from(len)) {
                    return Err(bad(format!("entry {i} points at blocks {physical}+{len}, outside the volume")));
                }
                if let Some(b) = self.zone_block_for(physical, u64::from(len), ino) {
                    return Err(bad(format!(
                        "entry {i} maps logical {logical} onto block {b}, which holds the file system's metadata or the journal"
                    )));
                }
                next_lo = logical + u64::from(len);
                w.claims.claim(physical, u64::from(len), ino)?;
                w.map.extents.push(Ext4Extent { logical, physical, len: u32::from(len), unwritten });
            }
            return Ok(());
        }
        for i in 0..usize::from(entries) {
            let e = entry(i);
            let logical = u64::from(le32(e, 0));
            let child = lo_hi(le32(e, 4), u32::from(le16(e, 8)));
            let child_hi = if i + 1 < usize::from(entries) { u64::from(le32(entry(i + 1), 0)) } else { hi };
            if logical < next_lo || logical >= child_hi || child_hi > hi {
                return Err(bad(format!("index {i} at logical {logical} out of order (range {next_lo}..{hi})")));
            }
            if !self.in_volume(child, 1) {
                return Err(bad(format!("index {i} points at block {child}, outside the volume")));
            }
            if self.zone_block_for(child, 1, ino).is_some() {
                return Err(bad(format!(
                    "index {i} points at block {child}, which holds the file system's metadata or the journal"
                )));
            }
            w.claims.claim(child, 1, ino).map_err(|e| match e {
                Ext4Error::Overlap { first, .. } if first == ino => {
                    bad(format!("index {i} points at block {child}, already in the tree (loop)"))
                }
                e => e,
            })?;
            w.map.map_blocks.push(child);
            let node = self.read_block("extent tree node", child)?;
            self.extent_node(w, &node, child, Some(node_depth - 1), logical, child_hi)?;
            next_lo = child_hi;
        }
        Ok(())
    }

    /// ext2/3 maps: 12 direct pointers, then single, double and triple
    /// indirect blocks of `block_size / 4` pointers each.
    fn indirect_map(&self, inode: &Inode, map: &mut FileMap, claims: &mut Claims) -> Result<()> {
        let per = u64::from(self.superblock().block_size / 4);
        let mut runs = Runs { ino: inode.ino, extents: &mut map.extents, claims };
        for i in 0..12 {
            let p = u64::from(le32(&inode.block, 4 * i));
            if p != 0 {
                self.check_pointer(inode.ino, 0, p)?;
                runs.push(i as u64, p)?;
            }
        }
        let mut base = 12u64;
        let mut span = per;
        for level in 1..=3u32 {
            let p = u64::from(le32(&inode.block, 4 * (11 + level as usize)));
            if p != 0 {
                self.indirect_block(inode.ino, 0, p, level, base, &mut map.map_blocks, &mut runs)?;
            }
            base += span;
            span = span.saturating_mul(per);
        }
        Ok(())
    }

    fn check_pointer(&self, ino: u32, from: u64, p: u64) -> Result<()> {
        let reason = if !self.in_volume(p, 1) {
            format!("pointer to block {p}, outside the volume")
        } else if self.zone_block_for(p, 1, ino).is_some() {
            format!("pointer to block {p}, which holds the file system's metadata or the journal")
        } else {
            return Ok(());
        };
        Err(Ext4Error::Indirect { ino, block: from, reason })
    }

    /// Indirect block `block` of level `level` (1: it holds data
    /// pointers), named by the map block `from` (0: the inode itself),
    /// mapping logical blocks from `base`.
    #[allow(clippy::too_many_arguments)]
    fn indirect_block(
        &self,
        ino: u32,
        from: u64,
        block: u64,
        level: u32,
        base: u64,
        map_blocks: &mut Vec<u64>,
        runs: &mut Runs,
    ) -> Result<()> {
        self.check_pointer(ino, from, block)?;
        runs.claims.claim(block, 1, ino).map_err(|e| match e {
            Ext4Error::Overlap { first, .. } if first == ino => {
                Ext4Error::Indirect { ino, block: from, reason: format!("points at block {block} again (a loop)") }
            }
            e => e,
        })?;
        map_blocks.push(block);
        let raw = self.read_block("indirect block", block)?;
        let per = u64::from(self.superblock().block_size / 4);
        let child_span = per.pow(level - 1);
        for i in 0..per {
            let p = u64::from(le32(&raw, 4 * i as usize));
            if p == 0 {
                continue;
            }
            self.check_pointer(ino, block, p)?;
            let logical = base + i * child_span;
            if level == 1 {
                runs.push(logical, p)?;
            } else {
                self.indirect_block(ino, block, p, level - 1, logical, map_blocks, runs)?;
            }
        }
        Ok(())
    }
}

/// Collects single blocks into extents, claiming each.
struct Runs<'a> {
    ino: u32,
    extents: &'a mut Vec<Ext4Extent>,
    claims: &'a mut Claims,
}

impl Runs<'_> {
    fn push(&mut self, logical: u64, physical: u64) -> Result<()> {
        self.claims.claim(physical, 1, self.ino)?;
        if let Some(last) = self.extents.last_mut() {
            if last.logical + u64::from(last.len) == logical
                && last.physical + u64::from(last.len) == physical
                && last.len < u32::from(INIT_MAX_LEN)
            {
                last.len += 1;
                return Ok(());
            }
        }
        self.extents.push(Ext4Extent { logical, physical, len: 1, unwritten: false });
        Ok(())
    }
}

/// Bytes of an inline-data file: `i_size`, at most what `i_block` and the
/// `system.data` attribute hold.
fn inline_len(inode: &Inode) -> Result<u64> {
    let more = crate::xattr::ibody_value(&inode.ibody, crate::xattr::INDEX_SYSTEM, b"data")
        .map_err(|reason| Ext4Error::Inode { ino: inode.ino, block: inode.table_block, reason })?
        .map_or(0, |v| v.len() as u64);
    Ok(inode.size.min(INLINE_ROOT_BYTES + more))
}

/// Bytes of inline data `i_block` holds.
pub(crate) const INLINE_ROOT_BYTES: u64 = 60;

#[cfg(test)]
mod tests {
    use super::filefrag_count;

    #[test]
    fn filefrag_merges_physically_continuous_records() {
        // Two records split by the extent-length limit count once.
        assert_eq!(filefrag_count([(0, 100, 32768), (32768, 32868, 10)]), 1);
        // A jump counts; a hole that keeps the physical distance does not.
        assert_eq!(filefrag_count([(0, 100, 4), (4, 500, 4)]), 2);
        assert_eq!(filefrag_count([(0, 100, 4), (8, 108, 4)]), 1);
        assert_eq!(filefrag_count([]), 0);
    }
}
