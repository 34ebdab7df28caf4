//! Where a directory's entries sit in its blocks, kept only so far as it
//! decides when the directory grows: the allocator is asked for a block
//! exactly when ext4 appends one.
//!
//! A block is a chain of records, each with a length (`rec_len`) that
//! covers its entry and any slack after it. A new name goes into the
//! first record with room: the slack of a live entry (split off) or a
//! whole dead record. An unlinked entry is merged into the record before
//! it, or marked dead when it is first in its block. A linear directory
//! tries every block, then appends one; a one-block directory that fills
//! becomes indexed instead (block 0 turns into the index root, its entries
//! move to a new block 1, which is split at once into block 2). An
//! indexed directory puts a name in the leaf its hash selects and, when
//! that leaf is full, splits it by hash into a new block, the upper half
//! (by record length, slack included) moving there.

use super::dirhash::{half_md4, HashChars};
use std::collections::HashMap;

/// Bytes a directory entry needs for a name of `len` bytes.
fn entry_len(len: usize) -> u32 {
    ((len as u32) + 8 + 3) & !3
}

/// How names are hashed for the index: the volume's seed and character
/// signedness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirHash {
    /// `s_hash_seed`.
    pub seed: [u32; 4],
    /// Signed or unsigned bytes.
    pub chars: HashChars,
}

impl DirHash {
    fn of(&self, name: &[u8]) -> u32 {
        half_md4(name, self.seed, self.chars)
    }
}

/// The directory-block format of a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirFormat {
    /// Block size in bytes.
    pub block_size: u32,
    /// Whether blocks end in a checksum tail (metadata_csum): 12 bytes in
    /// an entry block, 8 in an index block.
    pub checksums: bool,
    /// Whether a full one-block directory becomes indexed (dir_index).
    pub indexed: bool,
    /// The hash of the index.
    pub hash: DirHash,
}

impl DirFormat {
    /// Bytes of a block that records may cover.
    fn region(&self) -> u32 {
        self.block_size - if self.checksums { 12 } else { 0 }
    }

    /// Entries the index root holds: the block less `.`, `..`, the root
    /// header and the checksum tail, in 8-byte entries.
    fn root_limit(&self) -> usize {
        ((self.block_size - 32 - if self.checksums { 8 } else { 0 }) / 8) as usize
    }
}

/// One record in a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The name (empty for a dead record).
    pub name: Box<[u8]>,
    /// Bytes the record covers.
    pub rec_len: u32,
}

impl Record {
    fn live(&self) -> bool {
        !self.name.is_empty()
    }

    /// Room left for another entry inside this record.
    fn room(&self) -> u32 {
        if self.live() {
            self.rec_len.saturating_sub(entry_len(self.name.len()))
        } else {
            self.rec_len
        }
    }
}

/// Why a name cannot be placed as ext4 would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// The index root is full: ext4 would add an index level, which is
    /// not modelled.
    IndexFull,
    /// The directory's shape on the image is not one the model follows.
    Unsupported(String),
}

#[derive(Debug, Clone)]
enum Shape {
    Linear,
    /// The root's entries: (lowest hash, leaf block); entry 0's hash is 0.
    Indexed(Vec<(u32, u32)>),
}

/// One directory's blocks and entries.
#[derive(Debug, Clone)]
pub struct DirLayout {
    format: DirFormat,
    /// Each block's records; `None` for the index root.
    blocks: Vec<Option<Vec<Record>>>,
    shape: Shape,
    /// Which block holds each name.
    names: HashMap<Box<[u8]>, u32>,
}

impl DirLayout {
    /// A new directory: one block holding `.` and `..`.
    pub fn new(format: DirFormat) -> DirLayout {
        let dot = Record { name: Box::from(&b"."[..]), rec_len: 12 };
        let dotdot = Record { name: Box::from(&b".."[..]), rec_len: format.region() - 12 };
        DirLayout::linear(format, vec![vec![dot, dotdot]]).expect("a new directory's block is well formed")
    }

    /// A linear directory read from a volume, its records block by block.
    pub fn linear(format: DirFormat, blocks: Vec<Vec<Record>>) -> Result<DirLayout, LayoutError> {
        let mut names = HashMap::new();
        for (b, recs) in blocks.iter().enumerate() {
            let covered: u32 = recs.iter().map(|r| r.rec_len).sum();
            if covered != format.region() || recs.is_empty() {
                return Err(LayoutError::Unsupported(format!(
                    "block {b}: records cover {covered} of {} bytes",
                    format.region()
                )));
            }
            for r in recs.iter().filter(|r| r.live()) {
                names.insert(r.name.clone(), b as u32);
            }
        }
        Ok(DirLayout { format, blocks: blocks.into_iter().map(Some).collect(), shape: Shape::Linear, names })
    }

    /// Blocks the directory has.
    pub fn blocks(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Whether the directory is indexed.
    pub fn is_indexed(&self) -> bool {
        matches!(self.shape, Shape::Indexed(_))
    }

    /// Whether `name` is in the directory.
    pub fn contains(&self, name: &[u8]) -> bool {
        self.names.contains_key(name)
    }

    /// Whether `name` fits without a new block.
    pub fn fits(&self, name: &[u8]) -> bool {
        let need = entry_len(name.len());
        match &self.shape {
            Shape::Linear => self.blocks.iter().flatten().any(|recs| recs.iter().any(|r| r.room() >= need)),
            Shape::Indexed(index) => {
                let leaf = index[self.leaf_of(index, name)].1;
                self.records(leaf).iter().any(|r| r.room() >= need)
            }
        }
    }

    /// Add `name`; returns how many blocks were appended to the
    /// directory (the caller allocates them, in order).
    pub fn add(&mut self, name: &[u8]) -> Result<u32, LayoutError> {
        assert!(!name.is_empty() && !self.contains(name), "a new, non-empty name");
        let need = entry_len(name.len());
        match &self.shape {
            Shape::Linear => {
                for b in 0..self.blocks() {
                    if self.records(b).iter().any(|r| r.room() >= need) {
                        self.insert(b, name);
                        return Ok(0);
                    }
                }
                if self.blocks() == 1 && self.format.indexed {
                    return self.make_indexed(name);
                }
                let region = self.format.region();
                self.blocks.push(Some(vec![Record { name: Box::default(), rec_len: region }]));
                self.insert(self.blocks() - 1, name);
                Ok(1)
            }
            Shape::Indexed(index) => {
                let at = self.leaf_of(index, name);
                let leaf = index[at].1;
                if self.records(leaf).iter().any(|r| r.room() >= need) {
                    self.insert(leaf, name);
                    return Ok(0);
                }
                if index.len() >= self.format.root_limit() {
                    return Err(LayoutError::IndexFull);
                }
                let target = self.split(at, leaf, self.format.hash.of(name))?;
                self.insert(target, name);
                Ok(1)
            }
        }
    }

    /// Remove `name`; false when it is not there.
    pub fn remove(&mut self, name: &[u8]) -> bool {
        let Some(b) = self.names.remove(name) else { return false };
        let recs = self.blocks[b as usize].as_mut().expect("names point at entry blocks");
        let i = recs.iter().position(|r| &*r.name == name).expect("the name is in its block");
        if i == 0 {
            recs[0].name = Box::default();
        } else {
            let gone = recs.remove(i);
            recs[i - 1].rec_len += gone.rec_len;
        }
        true
    }

    fn records(&self, b: u32) -> &[Record] {
        self.blocks[b as usize].as_deref().expect("an entry block")
    }

    /// The index entry whose range holds `name`'s hash.
    fn leaf_of(&self, index: &[(u32, u32)], name: &[u8]) -> usize {
        let hash = self.format.hash.of(name);
        index[1..].partition_point(|&(h, _)| h <= hash)
    }

    /// Put `name` in the first record of block `b` with room for it.
    fn insert(&mut self, b: u32, name: &[u8]) {
        let need = entry_len(name.len());
        let recs = self.blocks[b as usize].as_mut().expect("an entry block");
        let i = recs.iter().position(|r| r.room() >= need).expect("the block has room");
        let name: Box<[u8]> = Box::from(name);
        if recs[i].live() {
            let used = entry_len(recs[i].name.len());
            let rest = recs[i].rec_len - used;
            recs[i].rec_len = used;
            recs.insert(i + 1, Record { name: name.clone(), rec_len: rest });
        } else {
            recs[i].name = name.clone();
        }
        self.names.insert(name, b);
    }

    /// The one-block directory is full: block 0 becomes the index root,
    /// its entries after `..` move to block 1, which is split by hash
    /// into block 2, and `name` goes where its hash says.
    fn make_indexed(&mut self, name: &[u8]) -> Result<u32, LayoutError> {
        let mut recs = self.blocks[0].take().expect("block 0 holds entries");
        if recs.len() < 2 || &*recs[0].name != b"." || &*recs[1].name != b".." {
            return Err(LayoutError::Unsupported("block 0 does not start with . and ..".into()));
        }
        let head: u32 = recs[0].rec_len + recs[1].rec_len;
        let mut moved = recs.split_off(2);
        if moved.is_empty() {
            return Err(LayoutError::Unsupported("a full first block with no entries".into()));
        }
        moved.last_mut().expect("not empty").rec_len += head;
        self.names.remove(&b"."[..]);
        self.names.remove(&b".."[..]);
        for r in moved.iter().filter(|r| r.live()) {
            self.names.insert(r.name.clone(), 1);
        }
        self.blocks.push(Some(moved));
        self.shape = Shape::Indexed(vec![(0, 1)]);
        let target = self.split(0, 1, self.format.hash.of(name))?;
        self.insert(target, name);
        Ok(2)
    }

    /// Split leaf `leaf` (index entry `at`) by hash into a new block: the
    /// entries with the highest hashes, up to half a block of their
    /// records' lengths, move;
    /// returns the block a name of hash `hash` now belongs in.
    fn split(&mut self, at: usize, leaf: u32, hash: u32) -> Result<u32, LayoutError> {
        let bs = self.format.block_size;
        let region = self.format.region();
        let recs = self.blocks[leaf as usize].take().expect("an entry block");
        let mut map: Vec<(u32, usize)> =
            recs.iter().enumerate().filter(|(_, r)| r.live()).map(|(i, r)| (self.format.hash.of(&r.name), i)).collect();
        map.sort_by_key(|&(h, _)| h);
        let count = map.len();
        // ext4 weighs each entry by its record's length, slack included
        // (`dx_make_map`), not by the bytes its name needs.
        let size = |i: usize| recs[map[i].1].rec_len;
        let (mut took, mut moving) = (0u32, 0usize);
        let mut stopped_at = None;
        for i in (0..count).rev() {
            if took + size(i) / 2 > bs / 2 {
                stopped_at = Some(i);
                break;
            }
            took += size(i);
            moving += 1;
        }
        let split = match stopped_at {
            Some(i) if i > 0 => count - moving,
            _ => count / 2,
        };
        if split == 0 || split >= count {
            return Err(LayoutError::Unsupported(format!("a leaf of {count} entries cannot be split")));
        }
        let hash2 = map[split].0;
        let continued = u32::from(hash2 == map[split - 1].0);
        let packed = |mut v: Vec<Record>| {
            for r in &mut v {
                r.rec_len = entry_len(r.name.len());
            }
            let used: u32 = v.iter().map(|r| r.rec_len).sum();
            v.last_mut().expect("each half keeps an entry").rec_len += region - used;
            v
        };
        let moving_idx: std::collections::HashSet<usize> = map[split..].iter().map(|&(_, i)| i).collect();
        let upper = packed(map[split..].iter().map(|&(_, i)| recs[i].clone()).collect());
        let lower = packed(
            recs.iter()
                .enumerate()
                .filter(|(i, r)| r.live() && !moving_idx.contains(i))
                .map(|(_, r)| r.clone())
                .collect(),
        );
        let new_block = self.blocks();
        for r in &upper {
            self.names.insert(r.name.clone(), new_block);
        }
        self.blocks[leaf as usize] = Some(lower);
        self.blocks.push(Some(upper));
        let Shape::Indexed(index) = &mut self.shape else { unreachable!("only indexed leaves split") };
        index.insert(at + 1, (hash2 + continued, new_block));
        Ok(if hash >= hash2 { new_block } else { leaf })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(block_size: u32) -> DirFormat {
        DirFormat {
            block_size,
            checksums: true,
            indexed: true,
            hash: DirHash { seed: [1, 2, 3, 4], chars: HashChars::Signed },
        }
    }

    #[test]
    fn a_new_directory_fills_its_block_then_becomes_indexed_with_three() {
        let mut d = DirLayout::new(format(1024));
        // 1024 - 12 (tail) - 12 (.) - 12 (..) = 988 bytes: 61 entries of 16.
        for i in 0..61 {
            assert_eq!(d.add(format!("f{i:05}").as_bytes()), Ok(0), "entry {i}");
        }
        assert!(!d.fits(b"f99999"));
        assert_eq!(d.add(b"f99999"), Ok(2));
        assert!(d.is_indexed() && d.blocks() == 3);
        for i in 0..61 {
            assert!(d.contains(format!("f{i:05}").as_bytes()));
        }
        assert!(d.remove(b"f00000") && !d.remove(b"f00000"));
    }

    #[test]
    fn a_freed_entry_is_reused_in_place() {
        let mut d = DirLayout::new(format(1024));
        for i in 0..61 {
            d.add(format!("f{i:05}").as_bytes()).unwrap();
        }
        assert!(d.remove(b"f00030"));
        assert_eq!(d.add(b"g00030"), Ok(0));
        assert!(!d.fits(b"longer-than-the-hole"));
    }

    #[test]
    fn a_linear_directory_of_several_blocks_appends_one() {
        let f = DirFormat { indexed: true, ..format(1024) };
        let empty = || vec![Record { name: Box::default(), rec_len: 1012 }];
        let mut d = DirLayout::linear(f, vec![empty(), empty()]).unwrap();
        let mut appended = 0;
        for i in 0..200 {
            appended += d.add(format!("name{i:04}").as_bytes()).unwrap();
        }
        // 63 entries of 16 bytes per 1012-byte region: 200 need 4 blocks.
        assert_eq!((appended, d.blocks(), d.is_indexed()), (2, 4, false));
    }

    #[test]
    fn an_indexed_directory_grows_one_leaf_at_a_time() {
        let mut d = DirLayout::new(format(1024));
        let mut appended = 0;
        for i in 0..2000 {
            appended += d.add(format!("file-{i}").as_bytes()).unwrap();
        }
        assert_eq!(appended + 1, d.blocks());
        // Leaves are at least half full after a split.
        assert!(d.blocks() < 2000 * 20 / 500 + 3, "{} blocks", d.blocks());
        assert!((0..2000).all(|i| d.contains(format!("file-{i}").as_bytes())));
    }
}
