//! The on-disk format (docs/FORMAT.md is the prose version): where each
//! area lives, and how the superblock, group descriptors, inode records and
//! extent-tree nodes are laid out, little-endian, each with a crc32c.

use crate::codec::{get32, get64, put32, put64};
use crate::error::{Result, VolError};
use crate::limits::{LABEL_MAX, MAX_ATTR_BYTES};

/// `s_magic`: "MBVL".
pub const MAGIC: u32 = 0x4C56_424D;
/// Format version: 2 added the directory tree (names and attributes in
/// the second half of each inode record); 3 keeps every name of an inode
/// (hard links), symbolic links, device nodes, extended attributes and
/// orphans in one attribute string per inode, overflowing into the tree
/// area.
pub const VERSION: u32 = 3;
/// The unit a device writes whole or not at all.
#[cfg(feature = "testing")]
pub const SECTOR: usize = 512;
/// Bytes of the superblock that carry fields (the rest of block 0 is zero).
pub const SUPERBLOCK_BYTES: usize = 512;
/// Bytes per group descriptor.
pub const DESC_BYTES: usize = 32;
/// Bytes per inode record: the extent root in the first half, the name
/// and attributes in the second. One sector, so a torn write of an
/// inode-table block leaves every record whole.
pub const INODE_BYTES: usize = 512;
/// The root directory's inode number (the engine numbers files from 12).
pub const ROOT_INO: u64 = 1;
/// Fewest inode slots a volume is made with: the root and room to use it.
pub const MIN_INODES: u32 = 16;
/// Most inode slots a volume is made with.
pub const MAX_INODES: u32 = u32::MAX / 2;
/// An attribute overflow block's magic.
pub const OVERFLOW_MAGIC: u16 = 0xA77B;
/// Bytes of an overflow block's header.
pub const OVERFLOW_HEADER: usize = 24;
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
    /// Bytes per block.
    pub block_size: u32,
    /// Blocks per group (a group's bitmap is one block).
    pub blocks_per_group: u32,
    /// Blocks on the volume.
    pub total_blocks: u64,
    /// Groups (the last may be short).
    pub groups: u32,
    /// First journal block.
    pub log_start: u64,
    /// Journal blocks.
    pub log_blocks: u32,
    /// First group-descriptor block.
    pub desc_start: u64,
    /// First block-bitmap block (one per group).
    pub bitmap_start: u64,
    /// First inode-table block.
    pub itable_start: u64,
    /// Inode slots.
    pub inode_count: u32,
    /// First block of the extent-tree area.
    pub tree_start: u64,
    /// Blocks of the extent-tree area.
    pub tree_blocks: u32,
    /// First data block: everything before it is metadata.
    pub data_start: u64,
    /// The volume's identity; seeds every checksum.
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
    /// The volume's label (`FS_IOC_SETFSLABEL`), at most [`LABEL_MAX`]
    /// bytes, no NUL.
    pub label: Vec<u8>,
    /// Why the volume stopped taking changes, if it did (a bug met, a
    /// shutdown): kept until a repair clears it, as ext4 keeps its error
    /// state for fsck.
    pub error: Option<String>,
}

/// Bytes the superblock keeps of an error's text.
const ERROR_TEXT: usize = 60;

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
    /// Blocks per group: a multiple of 8 up to `8 × block_size` (so a
    /// group's bitmap fits one block); the default is the largest.
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
    /// The volume's UUID as blkid and mkfs print it (`8-4-4-4-12` hex).
    pub fn uuid_text(&self) -> String {
        uuid::Uuid::from_bytes(self.uuid).hyphenated().to_string()
    }

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
        if !(MIN_INODES..=MAX_INODES).contains(&inode_count) {
            return Err(geometry_error(format!(
                "{inode_count} inodes: a volume takes {MIN_INODES} to {MAX_INODES} (the root is one)"
            )));
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
            label: Vec::new(),
            error: None,
        })
    }

    /// The largest file size in bytes: the last logical block an extent
    /// entry can name, whole.
    pub fn max_file_size(&self) -> u64 {
        (MAX_LOGICAL + 1) * u64::from(self.block_size)
    }

    /// The longest attribute string this volume keeps: [`MAX_ATTR_BYTES`],
    /// or less where one journal transaction could not hold its record
    /// (never under 7 KiB: the smallest journal is 8 blocks of 1 KiB).
    pub fn max_attr_bytes(&self) -> usize {
        let record_room = tx_capacity(self.block_size as usize, u64::from(self.log_blocks));
        MAX_ATTR_BYTES.min(record_room - 1 - crate::attr::ATTR_FIXED)
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

    /// Tree-area blocks an inode's attribute string of `len` bytes takes
    /// beyond its record.
    pub fn overflow_blocks(&self, len: usize) -> u64 {
        let per = self.block_size as usize - OVERFLOW_HEADER;
        len.saturating_sub(crate::attr::ATTR_INLINE).div_ceil(per) as u64
    }

    /// Tree-area blocks a file whose tree holds `entries` extent entries
    /// needs (none while they fit the inode).
    pub fn tree_nodes(&self, entries: u64) -> u64 {
        let per = self.node_entries() as u64;
        let (mut n, mut level) = (0, entries);
        while level > ROOT_ENTRIES as u64 {
            level = level.div_ceil(per);
            n += level;
        }
        n
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
        if let Some(e) = &self.error {
            put32(&mut b, 144, 1);
            let t = e.as_bytes();
            let n = t.len().min(ERROR_TEXT);
            b[148..148 + n].copy_from_slice(&t[..n]);
        }
        let n = self.label.len().min(LABEL_MAX);
        b[208..208 + n].copy_from_slice(&self.label[..n]);
        let crc = crc32c::crc32c(&b[..SUPERBLOCK_BYTES - 4]);
        put32(&mut b, SUPERBLOCK_BYTES - 4, crc);
        b
    }

    /// Parse and validate block 0 against a device of `device_len` bytes.
    pub fn decode(b: &[u8], device_len: u64) -> Result<Superblock> {
        Superblock::decode_version(b, device_len, VERSION)
    }

    /// [`Superblock::decode`] for a volume of format `version` (the
    /// upgrade reads version 2; its superblock has the same fields).
    pub(crate) fn decode_version(b: &[u8], device_len: u64, version: u32) -> Result<Superblock> {
        if b.len() < SUPERBLOCK_BYTES {
            return Err(VolError::corrupt("superblock", 0, "truncated"));
        }
        if get32(b, 0) != MAGIC {
            return Err(VolError::BadMagic);
        }
        if get32(b, SUPERBLOCK_BYTES - 4) != crc32c::crc32c(&b[..SUPERBLOCK_BYTES - 4]) {
            return Err(VolError::Checksum { structure: "superblock", block: 0 });
        }
        if get32(b, 4) != version {
            return Err(VolError::Version { found: get32(b, 4), supported: VERSION });
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
            label: until_nul(&b[208..208 + LABEL_MAX + 1]).to_vec(),
            error: match get32(b, 144) {
                0 => None,
                1 => Some(String::from_utf8_lossy(until_nul(&b[148..148 + ERROR_TEXT])).into_owned()),
                n => return Err(VolError::corrupt("superblock", 0, format!("error state {n}"))),
            },
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
        if self.total_blocks.checked_mul(u64::from(bs)).is_none_or(|n| n > device_len) {
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

/// The bytes before the first NUL.
fn until_nul(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

/// A fresh volume identity for [`Superblock::layout`]: a random (version
/// 4) UUID from the operating system's random source, as mkfs tools make
/// them.
pub(crate) fn new_uuid() -> [u8; 16] {
    uuid::Uuid::new_v4().into_bytes()
}

/// The superblock's bytes from `dev`; a device too short to hold one is
/// [`VolError::TooSmall`], not an I/O error.
pub(crate) fn read_superblock(dev: &dyn crate::device::Device) -> Result<Vec<u8>> {
    if dev.len() < SUPERBLOCK_BYTES as u64 {
        return Err(VolError::TooSmall { bytes: dev.len() });
    }
    let mut head = vec![0u8; SUPERBLOCK_BYTES];
    dev.read_at(0, &mut head).map_err(|e| VolError::io("reading the superblock", e))?;
    Ok(head)
}

/// Bytes of a journal transaction's header block before its payload.
pub(crate) const TX_HEADER: usize = 48;

/// Payload bytes one journal transaction holds in a journal of
/// `log_blocks` (the header block's room, the body; the commit block
/// holds none).
pub(crate) fn tx_capacity(block_size: usize, log_blocks: u64) -> usize {
    (block_size - TX_HEADER) + (log_blocks as usize - 2) * block_size
}

/// Blocks a journal transaction with `payload` bytes takes.
pub(crate) fn tx_blocks(payload: usize, block_size: usize) -> u64 {
    let first = block_size - TX_HEADER;
    1 + payload.saturating_sub(first).div_ceil(block_size) as u64 + 1
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
        let mut labelled = sb.clone();
        labelled.label = b"scratch".to_vec();
        labelled.error = Some("a bug met in a write".into());
        assert_eq!(Superblock::decode(&labelled.encode(), 64 << 20).unwrap(), labelled);
    }
}
