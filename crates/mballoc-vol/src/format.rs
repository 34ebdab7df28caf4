//! The on-disk format (docs/FORMAT.md is the prose version): where each
//! area lives, and how the superblock, group descriptors, inode records and
//! extent-tree nodes are laid out, little-endian, each with a crc32c.

use crate::error::{Result, VolError};

/// `s_magic`: "MBVL".
pub const MAGIC: u32 = 0x4C56_424D;
/// Format version.
pub const VERSION: u32 = 1;
/// The unit a device writes whole or not at all.
pub const SECTOR: usize = 512;
/// Bytes of the superblock that carry fields (the rest of block 0 is zero).
pub const SUPERBLOCK_BYTES: usize = 512;
/// Bytes per group descriptor.
pub const DESC_BYTES: usize = 32;
/// Bytes per inode record.
pub const INODE_BYTES: usize = 256;
/// Extent or index entries kept in the inode itself.
pub const ROOT_ENTRIES: usize = 13;
/// Bytes per extent or index entry.
pub const ENTRY_BYTES: usize = 16;
/// Bytes of an extent-tree node's header.
pub const NODE_HEADER: usize = 16;
/// An extent-tree node's magic.
pub const NODE_MAGIC: u16 = 0xE7EE;
/// An inode record in use starts with this.
pub const INODE_MAGIC: u32 = 0x444F_4E49;
/// Deepest extent tree accepted (the root counts as level `depth`).
pub const MAX_DEPTH: u16 = 4;
/// Longest extent one entry can hold (the top bit marks unwritten).
pub const MAX_ENTRY_LEN: u64 = (1 << 31) - 1;
/// Largest logical block (entries keep 32 bits of it).
pub const MAX_LOGICAL: u64 = 0xFFFF_FFFF;

/// A run of a file: logical blocks `[logical, logical + len)` at
/// `physical...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub logical: u64,
    pub physical: u64,
    pub len: u64,
    pub unwritten: bool,
}

impl Extent {
    /// One past the last logical block.
    pub fn logical_end(&self) -> u64 {
        self.logical + self.len
    }
}

/// The superblock: the volume's shape and where the journal resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub block_size: u32,
    pub blocks_per_group: u32,
    pub total_blocks: u64,
    pub groups: u32,
    pub log_start: u64,
    pub log_blocks: u32,
    pub desc_start: u64,
    pub bitmap_start: u64,
    pub itable_start: u64,
    pub inode_count: u32,
    pub tree_start: u64,
    pub tree_blocks: u32,
    pub data_start: u64,
    pub uuid: [u8; 16],
    /// Sequence number of the first transaction to replay, at log block 0.
    pub log_seq: u64,
    /// Free data blocks as of the last checkpoint.
    pub free_blocks: u64,
    /// Files as of the last checkpoint.
    pub files: u64,
    /// Whether the volume was unmounted cleanly.
    pub state: VolumeState,
    /// Checkpoints written since mkfs.
    pub checkpoints: u64,
}

/// `s_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeState {
    /// Unmounted cleanly: the journal is empty.
    Clean,
    /// Mounted, or not unmounted: the journal may need replay.
    Mounted,
}

/// Parameters for a new volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatOptions {
    /// Bytes per block (1 KiB – 64 KiB, a power of two).
    pub block_size: u32,
    /// Blocks per group (a power of two, at most `8 × block_size`, so a
    /// group's bitmap fits one block).
    pub blocks_per_group: Option<u32>,
    /// Journal blocks (default: 1/64 of the volume, 64 – 16384).
    pub log_blocks: Option<u32>,
    /// Inode slots (default: one per 64 KiB, at least 64).
    pub inode_count: Option<u32>,
    /// Extent-tree blocks (default: 1/64 of the data, at least 16).
    pub tree_blocks: Option<u32>,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            block_size: 4096,
            blocks_per_group: None,
            log_blocks: None,
            inode_count: None,
            tree_blocks: None,
        }
    }
}

fn geometry_error(s: impl Into<String>) -> VolError {
    VolError::Geometry(s.into())
}

impl Superblock {
    /// Lay out a volume of `bytes` bytes.
    pub fn layout(bytes: u64, o: &FormatOptions, uuid: [u8; 16]) -> Result<Superblock> {
        let bs = o.block_size;
        if !bs.is_power_of_two() || !(1024..=65536).contains(&bs) {
            return Err(geometry_error(format!("block size {bs} is not a power of two in 1024..=65536")));
        }
        let total = bytes / u64::from(bs);
        let bpg = o.blocks_per_group.unwrap_or(8 * bs);
        let geo =
            mballoc::Geometry::with_group_size(bs, bpg, total.max(1)).map_err(|e| geometry_error(e.to_string()))?;
        let groups = geo.groups();
        let log_blocks = o.log_blocks.unwrap_or((total / 64).clamp(64, 16384) as u32);
        if log_blocks < 8 {
            return Err(geometry_error("the journal needs at least 8 blocks"));
        }
        let inode_count =
            o.inode_count.unwrap_or(((bytes >> 16).clamp(64, u64::from(u32::MAX) / 2) as u32).next_multiple_of(64));
        if inode_count == 0 {
            return Err(geometry_error("at least one inode is needed"));
        }
        let per_desc_block = (bs as usize / DESC_BYTES) as u64;
        let per_inode_block = (bs as usize / INODE_BYTES) as u64;
        let log_start = 1;
        let desc_start = log_start + u64::from(log_blocks);
        let bitmap_start = desc_start + u64::from(groups).div_ceil(per_desc_block);
        let itable_start = bitmap_start + u64::from(groups);
        let tree_start = itable_start + u64::from(inode_count).div_ceil(per_inode_block);
        let rest = total.saturating_sub(tree_start);
        let tree_blocks = o.tree_blocks.unwrap_or(((rest / 64).max(16)).min(u64::from(u32::MAX)) as u32);
        let data_start = tree_start + u64::from(tree_blocks);
        if data_start + 8 > total {
            return Err(geometry_error(format!(
                "{total} blocks leave no room for data after {data_start} blocks of metadata"
            )));
        }
        Ok(Superblock {
            block_size: bs,
            blocks_per_group: bpg,
            total_blocks: total,
            groups,
            log_start,
            log_blocks,
            desc_start,
            bitmap_start,
            itable_start,
            inode_count,
            tree_start,
            tree_blocks,
            data_start,
            uuid,
            log_seq: 1,
            free_blocks: total - data_start,
            files: 0,
            state: VolumeState::Clean,
            checkpoints: 0,
        })
    }

    /// The checksum seed every other structure uses.
    pub fn seed(&self) -> u32 {
        crc32c::crc32c(&self.uuid)
    }

    /// The allocator's view of the volume.
    pub fn geometry(&self) -> mballoc::Geometry {
        mballoc::Geometry::with_group_size(self.block_size, self.blocks_per_group, self.total_blocks)
            .expect("a decoded superblock has a valid geometry")
    }

    /// Inode records per block.
    pub fn inodes_per_block(&self) -> u32 {
        self.block_size / INODE_BYTES as u32
    }

    /// Extent or index entries per tree node.
    pub fn node_entries(&self) -> usize {
        (self.block_size as usize - NODE_HEADER) / ENTRY_BYTES
    }

    /// Blocks of the descriptor table.
    pub fn desc_blocks(&self) -> u64 {
        self.bitmap_start - self.desc_start
    }

    /// Blocks of the inode table.
    pub fn itable_blocks(&self) -> u64 {
        self.tree_start - self.itable_start
    }

    /// Byte offset of a block.
    pub fn offset(&self, block: u64) -> u64 {
        block * u64::from(self.block_size)
    }

    /// The first `SUPERBLOCK_BYTES` of block 0.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SUPERBLOCK_BYTES];
        put32(&mut b, 0, MAGIC);
        put32(&mut b, 4, VERSION);
        put32(&mut b, 8, self.block_size);
        put32(&mut b, 12, self.blocks_per_group);
        put64(&mut b, 16, self.total_blocks);
        put64(&mut b, 24, self.log_start);
        put32(&mut b, 32, self.log_blocks);
        put32(&mut b, 36, self.groups);
        put64(&mut b, 40, self.desc_start);
        put64(&mut b, 48, self.bitmap_start);
        put64(&mut b, 56, self.itable_start);
        put32(&mut b, 64, self.inode_count);
        put32(&mut b, 68, self.tree_blocks);
        put64(&mut b, 72, self.tree_start);
        put64(&mut b, 80, self.data_start);
        b[88..104].copy_from_slice(&self.uuid);
        put64(&mut b, 104, self.log_seq);
        put64(&mut b, 112, self.free_blocks);
        put64(&mut b, 120, self.files);
        put32(&mut b, 128, if self.state == VolumeState::Clean { 1 } else { 0 });
        put64(&mut b, 136, self.checkpoints);
        let crc = crc32c::crc32c(&b[..SUPERBLOCK_BYTES - 4]);
        put32(&mut b, SUPERBLOCK_BYTES - 4, crc);
        b
    }

    /// Parse and validate block 0 against a device of `device_len` bytes.
    pub fn decode(b: &[u8], device_len: u64) -> Result<Superblock> {
        if b.len() < SUPERBLOCK_BYTES {
            return Err(VolError::corrupt("superblock", 0, "truncated"));
        }
        if get32(b, 0) != MAGIC {
            return Err(VolError::BadMagic);
        }
        if get32(b, SUPERBLOCK_BYTES - 4) != crc32c::crc32c(&b[..SUPERBLOCK_BYTES - 4]) {
            return Err(VolError::Checksum { structure: "superblock", block: 0 });
        }
        if get32(b, 4) != VERSION {
            return Err(VolError::corrupt("superblock", 0, format!("unknown version {}", get32(b, 4))));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[88..104]);
        let state = match get32(b, 128) {
            1 => VolumeState::Clean,
            0 => VolumeState::Mounted,
            s => return Err(VolError::corrupt("superblock", 0, format!("unknown state {s}"))),
        };
        let sb = Superblock {
            block_size: get32(b, 8),
            blocks_per_group: get32(b, 12),
            total_blocks: get64(b, 16),
            log_start: get64(b, 24),
            log_blocks: get32(b, 32),
            groups: get32(b, 36),
            desc_start: get64(b, 40),
            bitmap_start: get64(b, 48),
            itable_start: get64(b, 56),
            inode_count: get32(b, 64),
            tree_blocks: get32(b, 68),
            tree_start: get64(b, 72),
            data_start: get64(b, 80),
            uuid,
            log_seq: get64(b, 104),
            free_blocks: get64(b, 112),
            files: get64(b, 120),
            state,
            checkpoints: get64(b, 136),
        };
        sb.validate(device_len)?;
        Ok(sb)
    }

    /// Every area where the layout puts it, inside the device.
    fn validate(&self, device_len: u64) -> Result<()> {
        let bad = |d: String| Err(VolError::corrupt("superblock", 0, d));
        let bs = self.block_size;
        if !bs.is_power_of_two() || !(1024..=65536).contains(&bs) {
            return bad(format!("block size {bs}"));
        }
        let geo = match mballoc::Geometry::with_group_size(bs, self.blocks_per_group, self.total_blocks) {
            Ok(g) => g,
            Err(e) => return bad(e.to_string()),
        };
        if geo.groups() != self.groups {
            return bad(format!("{} groups recorded, {} computed", self.groups, geo.groups()));
        }
        if self.total_blocks.checked_mul(u64::from(bs)).map_or(true, |n| n > device_len) {
            return bad(format!("{} blocks of {bs} bytes pass the device's {device_len} bytes", self.total_blocks));
        }
        let per_desc_block = (bs as usize / DESC_BYTES) as u64;
        let per_inode_block = u64::from(self.inodes_per_block());
        let expect = [
            ("journal", self.log_start, 1),
            ("descriptor table", self.desc_start, self.log_start + u64::from(self.log_blocks)),
            ("bitmaps", self.bitmap_start, self.desc_start + u64::from(self.groups).div_ceil(per_desc_block)),
            ("inode table", self.itable_start, self.bitmap_start + u64::from(self.groups)),
            ("tree area", self.tree_start, self.itable_start + u64::from(self.inode_count).div_ceil(per_inode_block)),
            ("data", self.data_start, self.tree_start + u64::from(self.tree_blocks)),
        ];
        for (name, at, want) in expect {
            if at != want {
                return bad(format!("{name} starts at {at}, expected {want}"));
            }
        }
        if self.log_blocks < 8 || self.inode_count == 0 || self.data_start >= self.total_blocks {
            return bad("journal, inode table or data area too small".into());
        }
        if self.free_blocks > self.total_blocks - self.data_start {
            return bad(format!("free count {} exceeds the data area", self.free_blocks));
        }
        Ok(())
    }
}

/// One group's descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupDesc {
    /// Free blocks in the group.
    pub free: u32,
    /// crc32c of the group's bitmap block.
    pub bitmap_crc: u32,
}

impl GroupDesc {
    /// Write descriptor `g` into `out` (`DESC_BYTES`).
    pub fn encode(&self, seed: u32, g: u32, out: &mut [u8]) {
        out.fill(0);
        put32(out, 0, self.free);
        put32(out, 4, self.bitmap_crc);
        let crc = desc_crc(seed, g, out);
        put32(out, DESC_BYTES - 4, crc);
    }

    /// Parse descriptor `g`.
    pub fn decode(seed: u32, g: u32, b: &[u8], block: u64) -> Result<GroupDesc> {
        if get32(b, DESC_BYTES - 4) != desc_crc(seed, g, b) {
            return Err(VolError::Checksum { structure: "group descriptor", block });
        }
        Ok(GroupDesc { free: get32(b, 0), bitmap_crc: get32(b, 4) })
    }
}

fn desc_crc(seed: u32, g: u32, b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(seed, &g.to_le_bytes()), &b[..DESC_BYTES - 4])
}

/// A bitmap block's checksum.
pub fn bitmap_crc(seed: u32, g: u32, block: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(seed, &g.to_le_bytes()), block)
}

/// One entry of an extent tree: an extent in a leaf, a child in an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Leaf(Extent),
    Index { logical: u64, child: u64 },
}

impl Entry {
    fn logical(&self) -> u64 {
        match *self {
            Entry::Leaf(e) => e.logical,
            Entry::Index { logical, .. } => logical,
        }
    }

    fn encode(&self, out: &mut [u8]) {
        match *self {
            Entry::Leaf(e) => {
                debug_assert!(e.len > 0 && e.len <= MAX_ENTRY_LEN && e.logical_end() - 1 <= MAX_LOGICAL);
                put32(out, 0, e.logical as u32);
                put32(out, 4, e.len as u32 | if e.unwritten { 1 << 31 } else { 0 });
                put64(out, 8, e.physical);
            }
            Entry::Index { logical, child } => {
                put32(out, 0, logical as u32);
                put32(out, 4, 0);
                put64(out, 8, child);
            }
        }
    }

    fn decode(b: &[u8], leaf: bool) -> Entry {
        let logical = u64::from(get32(b, 0));
        if leaf {
            let lf = get32(b, 4);
            Entry::Leaf(Extent {
                logical,
                len: u64::from(lf & !(1 << 31)),
                unwritten: lf & (1 << 31) != 0,
                physical: get64(b, 8),
            })
        } else {
            Entry::Index { logical, child: get64(b, 8) }
        }
    }
}

/// An inode record: a file's number, size and the root of its extent tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeRecord {
    pub ino: u64,
    pub size: u64,
    /// 0: `root` holds extents; otherwise index entries to nodes of
    /// depth `depth - 1`.
    pub depth: u16,
    pub root: Vec<Entry>,
}

impl InodeRecord {
    /// Write the record for inode slot `slot` into `out` (`INODE_BYTES`).
    pub fn encode(&self, seed: u32, slot: u32, out: &mut [u8]) {
        assert!(self.root.len() <= ROOT_ENTRIES, "an inode holds at most {ROOT_ENTRIES} root entries");
        out.fill(0);
        put32(out, 0, INODE_MAGIC);
        put16(out, 4, self.depth);
        put16(out, 6, self.root.len() as u16);
        put64(out, 8, self.ino);
        put64(out, 16, self.size);
        for (i, e) in self.root.iter().enumerate() {
            e.encode(&mut out[32 + i * ENTRY_BYTES..32 + (i + 1) * ENTRY_BYTES]);
        }
        let crc = slot_crc(seed, slot, out);
        put32(out, INODE_BYTES - 4, crc);
    }

    /// Parse slot `slot`: `None` for a free (all-zero) slot.
    pub fn decode(seed: u32, slot: u32, b: &[u8], block: u64) -> Result<Option<InodeRecord>> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if get32(b, INODE_BYTES - 4) != slot_crc(seed, slot, b) {
            return Err(VolError::Checksum { structure: "inode", block });
        }
        let bad = |d: String| Err(VolError::corrupt("inode", block, format!("slot {slot}: {d}")));
        if get32(b, 0) != INODE_MAGIC {
            return bad("bad magic".into());
        }
        let depth = get16(b, 4);
        let n = get16(b, 6) as usize;
        if depth > MAX_DEPTH || n > ROOT_ENTRIES {
            return bad(format!("depth {depth}, {n} root entries"));
        }
        let ino = get64(b, 8);
        if ino == 0 || ino > u64::from(u32::MAX) {
            return bad(format!("inode number {ino}"));
        }
        let root = (0..n).map(|i| Entry::decode(&b[32 + i * ENTRY_BYTES..], depth == 0)).collect();
        Ok(Some(InodeRecord { ino, size: get64(b, 16), depth, root }))
    }
}

fn slot_crc(seed: u32, slot: u32, b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(seed, &slot.to_le_bytes()), &b[..INODE_BYTES - 4])
}

/// An extent-tree node block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub depth: u16,
    pub owner: u32,
    pub entries: Vec<Entry>,
}

impl Node {
    /// The node as stored at `block`.
    pub fn encode(&self, seed: u32, block: u64, block_size: usize) -> Vec<u8> {
        let max = (block_size - NODE_HEADER) / ENTRY_BYTES;
        assert!(self.entries.len() <= max, "a node holds at most {max} entries");
        let mut b = vec![0u8; block_size];
        put16(&mut b, 0, NODE_MAGIC);
        put16(&mut b, 2, self.entries.len() as u16);
        put16(&mut b, 4, max as u16);
        put16(&mut b, 6, self.depth);
        put32(&mut b, 8, self.owner);
        for (i, e) in self.entries.iter().enumerate() {
            e.encode(&mut b[NODE_HEADER + i * ENTRY_BYTES..]);
        }
        let crc = node_crc(seed, block, &b);
        put32(&mut b, 12, crc);
        b
    }

    /// Parse the node at `block`, expected at `depth` and owned by `owner`.
    pub fn decode(seed: u32, block: u64, b: &[u8], depth: u16, owner: u32) -> Result<Node> {
        let bad = |d: String| Err(VolError::corrupt("extent node", block, d));
        if get16(b, 0) != NODE_MAGIC {
            return bad("bad magic".into());
        }
        if get32(b, 12) != node_crc(seed, block, b) {
            return Err(VolError::Checksum { structure: "extent node", block });
        }
        let (n, max) = (get16(b, 2) as usize, get16(b, 4) as usize);
        if max != (b.len() - NODE_HEADER) / ENTRY_BYTES || n > max || n == 0 {
            return bad(format!("{n} entries of {max}"));
        }
        if get16(b, 6) != depth || get32(b, 8) != owner {
            return bad(format!("depth {} owner {}, expected {depth} and {owner}", get16(b, 6), get32(b, 8)));
        }
        let entries = (0..n).map(|i| Entry::decode(&b[NODE_HEADER + i * ENTRY_BYTES..], depth == 0)).collect();
        Ok(Node { depth, owner, entries })
    }
}

fn node_crc(seed: u32, block: u64, b: &[u8]) -> u32 {
    let c = crc32c::crc32c_append(seed, &block.to_le_bytes());
    let c = crc32c::crc32c_append(c, &b[..12]);
    crc32c::crc32c_append(c, &b[16..])
}

/// Check that entries are in ascending logical order, each inside
/// `[lo, hi)`, and (for leaves) do not overlap.
pub fn check_order(entries: &[Entry], lo: u64, hi: u64, block: u64) -> Result<()> {
    let mut at = lo;
    for (i, e) in entries.iter().enumerate() {
        let l = e.logical();
        let end = match e {
            Entry::Leaf(x) => {
                if x.len == 0 {
                    return Err(VolError::corrupt("extent tree", block, format!("zero-length extent at {l}")));
                }
                x.logical_end()
            }
            Entry::Index { .. } => l + 1,
        };
        let ordered = if i == 0 { l >= lo } else { l >= at };
        if !ordered || end > hi {
            return Err(VolError::corrupt("extent tree", block, format!("entry at logical {l} out of order")));
        }
        at = match e {
            Entry::Leaf(_) => end,
            Entry::Index { .. } => l + 1,
        };
    }
    Ok(())
}

pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
pub(crate) fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn get64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_round_trips_and_rejects_flips() {
        let sb = Superblock::layout(64 << 20, &FormatOptions::default(), [7; 16]).unwrap();
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, 64 << 20).unwrap(), sb);
        for i in [0, 9, 20, 100, 300] {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(Superblock::decode(&c, 64 << 20).is_err(), "flip at {i}");
        }
        assert!(Superblock::decode(&b, 1 << 20).is_err(), "device too small");
    }

    #[test]
    fn inode_and_node_round_trip() {
        let e = Extent { logical: 5, physical: 900, len: 3, unwritten: true };
        let rec = InodeRecord { ino: 12, size: 4096 * 8, depth: 0, root: vec![Entry::Leaf(e)] };
        let mut b = vec![0u8; INODE_BYTES];
        rec.encode(1, 3, &mut b);
        assert_eq!(InodeRecord::decode(1, 3, &b, 9).unwrap(), Some(rec));
        assert!(InodeRecord::decode(1, 4, &b, 9).is_err(), "bound to its slot");
        let node = Node { depth: 0, owner: 12, entries: vec![Entry::Leaf(e)] };
        let nb = node.encode(1, 77, 1024);
        assert_eq!(Node::decode(1, 77, &nb, 0, 12).unwrap(), node);
        assert!(Node::decode(1, 78, &nb, 0, 12).is_err(), "bound to its block");
    }
}
