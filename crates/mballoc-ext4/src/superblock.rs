//! The superblock: 1024 bytes at byte 1024 of the volume, and the geometry
//! it implies. Every field that changes where things are is checked here,
//! so the rest of the reader can compute locations without overflow.

use crate::bytes::{le16, le32, lo_hi};
use crate::checksum::crc32c_raw;
use crate::error::{Ext4Error, Result};

/// Byte offset of the primary superblock.
pub const SUPERBLOCK_OFFSET: u64 = 1024;
/// Its size on disk.
pub const SUPERBLOCK_SIZE: usize = 1024;
const MAGIC: u16 = 0xEF53;

/// `s_feature_compat` bits the reader looks at.
#[allow(missing_docs)] // the kernel's names, one bit each
pub mod compat {
    pub const HAS_JOURNAL: u32 = 0x4;
    pub const RESIZE_INODE: u32 = 0x10;
    pub const DIR_INDEX: u32 = 0x20;
    pub const SPARSE_SUPER2: u32 = 0x200;
}

/// `s_feature_incompat` bits.
#[allow(missing_docs)] // the kernel's names, one bit each
pub mod incompat {
    pub const COMPRESSION: u32 = 0x1;
    pub const FILETYPE: u32 = 0x2;
    pub const RECOVER: u32 = 0x4;
    pub const JOURNAL_DEV: u32 = 0x8;
    pub const META_BG: u32 = 0x10;
    pub const EXTENTS: u32 = 0x40;
    pub const BIT64: u32 = 0x80;
    pub const MMP: u32 = 0x100;
    pub const FLEX_BG: u32 = 0x200;
    pub const EA_INODE: u32 = 0x400;
    pub const DIRDATA: u32 = 0x1000;
    pub const CSUM_SEED: u32 = 0x2000;
    pub const LARGEDIR: u32 = 0x4000;
    pub const INLINE_DATA: u32 = 0x8000;
    pub const ENCRYPT: u32 = 0x10000;
    pub const CASEFOLD: u32 = 0x20000;
}

/// `s_feature_ro_compat` bits.
#[allow(missing_docs)] // the kernel's names, one bit each
pub mod ro_compat {
    pub const SPARSE_SUPER: u32 = 0x1;
    pub const HUGE_FILE: u32 = 0x8;
    pub const GDT_CSUM: u32 = 0x10;
    pub const BIGALLOC: u32 = 0x200;
    pub const METADATA_CSUM: u32 = 0x400;
    pub const VERITY: u32 = 0x8000;
}

/// Incompatible features whose meaning this reader understands. Anything
/// else set in `s_feature_incompat` is refused: guessing could misread
/// the layout.
const KNOWN_INCOMPAT: u32 = incompat::FILETYPE
    | incompat::RECOVER
    | incompat::META_BG
    | incompat::EXTENTS
    | incompat::BIT64
    | incompat::MMP
    | incompat::FLEX_BG
    | incompat::EA_INODE
    | incompat::CSUM_SEED
    | incompat::LARGEDIR
    | incompat::INLINE_DATA
    | incompat::ENCRYPT
    | incompat::CASEFOLD;

/// The superblock fields the reader uses, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ext4Superblock {
    /// `s_inodes_count`: inodes on the volume.
    pub inodes_count: u32,
    /// `s_blocks_count`: blocks on the volume.
    pub blocks_count: u64,
    /// `s_r_blocks_count`: blocks reserved for root.
    pub reserved_blocks_count: u64,
    /// Free blocks as the superblock records them (e2freefrag prints this).
    pub free_blocks_count: u64,
    /// `s_free_inodes_count`.
    pub free_inodes_count: u32,
    /// `s_first_data_block`: 1 with 1 KiB blocks, else 0.
    pub first_data_block: u32,
    /// Block size in bytes.
    pub block_size: u32,
    /// Cluster size in bytes (= block size without bigalloc).
    pub cluster_size: u32,
    /// `s_blocks_per_group`.
    pub blocks_per_group: u32,
    /// `s_clusters_per_group` (= blocks per group without bigalloc).
    pub clusters_per_group: u32,
    /// `s_inodes_per_group`.
    pub inodes_per_group: u32,
    /// `s_state`: 1 when cleanly unmounted.
    pub state: u16,
    /// `s_rev_level`: 0 for the original format, 1 for dynamic inode sizes.
    pub rev_level: u32,
    /// `s_first_ino`: the first inode number not reserved.
    pub first_ino: u32,
    /// `s_inode_size` in bytes.
    pub inode_size: u16,
    /// `s_feature_compat` (see [`compat`]).
    pub feature_compat: u32,
    /// `s_feature_incompat` (see [`incompat`]).
    pub feature_incompat: u32,
    /// `s_feature_ro_compat` (see [`ro_compat`]).
    pub feature_ro_compat: u32,
    /// `s_uuid`.
    pub uuid: [u8; 16],
    /// `s_reserved_gdt_blocks`: room for descriptor growth after each copy.
    pub reserved_gdt_blocks: u16,
    /// `s_journal_inum`: the journal's inode (0 without one).
    pub journal_inum: u32,
    /// Group descriptor size: 32, or 64+ with the 64bit feature.
    pub desc_size: u32,
    /// `s_first_meta_bg`: the first meta_bg group.
    pub first_meta_bg: u32,
    /// `s_log_groups_per_flex`: log2 of the flex group size.
    pub log_groups_per_flex: u8,
    /// sparse_super2's two backup groups (0 = none).
    pub backup_bgs: [u32; 2],
    /// Seed of every metadata_csum checksum except the superblock's.
    pub csum_seed: u32,
    /// Number of block groups.
    pub groups: u32,
    /// `s_raid_stride`: blocks per disk of a RAID stripe (mkfs `-E stride`).
    pub raid_stride: u16,
    /// `s_raid_stripe_width`: blocks per full stripe (mkfs `-E stripe_width`).
    pub raid_stripe_width: u32,
    /// `s_hash_seed`: the directory-hash seed, as four little-endian words.
    pub hash_seed: [u32; 4],
    /// `s_def_hash_version`: the hash a directory gets when it becomes
    /// indexed (1 = half-MD4, mke2fs's default).
    pub def_hash_version: u8,
    /// `s_flags`: 1 = signed directory hash, 2 = unsigned.
    pub flags: u32,
}

/// Whether checksums are verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChecksumPolicy {
    /// A mismatch is an error.
    #[default]
    Verify,
    /// Read on regardless (for damaged images).
    Ignore,
}

impl Ext4Superblock {
    /// Parse and validate the 1024 superblock bytes.
    pub fn parse(b: &[u8], policy: ChecksumPolicy) -> Result<Self> {
        if b.len() < SUPERBLOCK_SIZE {
            return Err(Ext4Error::Truncated { what: "superblock", block: 0, len: b.len() as u64 });
        }
        let magic = le16(b, 0x38);
        if magic != MAGIC {
            return Err(Ext4Error::BadMagic { found: magic });
        }
        let feature_compat = le32(b, 0x5C);
        let feature_incompat = le32(b, 0x60);
        let feature_ro_compat = le32(b, 0x64);
        let geo = |msg: String| Ext4Error::Geometry(msg);

        if feature_ro_compat & ro_compat::METADATA_CSUM != 0 {
            if b[0x175] != 1 {
                return Err(geo(format!("checksum type {} (only 1, crc32c, exists)", b[0x175])));
            }
            let stored = le32(b, 0x3FC);
            let computed = crc32c_raw(!0, &b[..0x3FC]);
            if stored != computed && policy == ChecksumPolicy::Verify {
                return Err(Ext4Error::Checksum { structure: "superblock".into(), block: 0, stored, computed });
            }
        }
        let unknown = feature_incompat & !KNOWN_INCOMPAT;
        if unknown != 0 {
            let what = match unknown {
                x if x & incompat::COMPRESSION != 0 => "compression".to_string(),
                x if x & incompat::JOURNAL_DEV != 0 => "an external journal device, not a file system".to_string(),
                x if x & incompat::DIRDATA != 0 => "dirdata".to_string(),
                x => format!("incompatible feature bits {x:#x}"),
            };
            return Err(Ext4Error::Unsupported(what));
        }

        let log_block = le32(b, 0x18);
        if log_block > 6 {
            return Err(geo(format!("block size 2^(10+{log_block}) exceeds 64 KiB")));
        }
        let block_size = 1024u32 << log_block;
        let bigalloc = feature_ro_compat & ro_compat::BIGALLOC != 0;
        let log_cluster = le32(b, 0x1C);
        let cluster_size = if bigalloc {
            if log_cluster < log_block || log_cluster > log_block + 16 || log_cluster > 29 {
                return Err(geo(format!("cluster size 2^(10+{log_cluster}) with block size {block_size}")));
            }
            1024u32 << log_cluster
        } else {
            block_size
        };
        let ratio = cluster_size / block_size;
        if !bigalloc && log_cluster != log_block {
            return Err(geo(format!("cluster size 2^(10+{log_cluster}) differs from the block size without bigalloc")));
        }
        let blocks_per_group = le32(b, 0x20);
        // Without bigalloc the field must still equal the blocks per group
        // (the kernel and e2fsprogs both refuse the volume otherwise).
        let clusters_per_group = le32(b, 0x24);
        if !bigalloc && clusters_per_group != blocks_per_group {
            return Err(geo(format!(
                "{clusters_per_group} clusters per group with {blocks_per_group} blocks per group and no bigalloc"
            )));
        }
        let max_per_group = 8 * block_size;
        if clusters_per_group < 8 || clusters_per_group > max_per_group || !clusters_per_group.is_multiple_of(8) {
            return Err(geo(format!(
                "{clusters_per_group} clusters per group (must be a multiple of 8 in 8..={max_per_group})"
            )));
        }
        if u64::from(clusters_per_group) * u64::from(ratio) != u64::from(blocks_per_group) {
            return Err(geo(format!(
                "{blocks_per_group} blocks per group is not {clusters_per_group} clusters of {ratio} blocks"
            )));
        }
        let desc_size = if feature_incompat & incompat::BIT64 != 0 {
            let d = u32::from(le16(b, 0xFE));
            if d < 64 || d > block_size || !d.is_power_of_two() {
                return Err(geo(format!("descriptor size {d} (64bit needs a power of two in 64..={block_size})")));
            }
            d
        } else {
            32
        };
        let blocks_count = lo_hi(le32(b, 0x4), if desc_size >= 64 { le32(b, 0x150) } else { 0 });
        let first_data_block = le32(b, 0x14);
        let expected_first = u32::from(block_size == 1024 && !bigalloc);
        if first_data_block != expected_first {
            return Err(geo(format!(
                "first data block {first_data_block} (must be {expected_first} with {block_size}-byte blocks)"
            )));
        }
        if blocks_count <= u64::from(first_data_block) {
            return Err(geo(format!("{blocks_count} blocks leave no group")));
        }
        if blocks_count.checked_mul(u64::from(block_size)).is_none_or(|bytes| bytes > 1 << 60) {
            return Err(geo(format!("{blocks_count} blocks of {block_size} bytes")));
        }
        let groups = (blocks_count - u64::from(first_data_block)).div_ceil(u64::from(blocks_per_group));
        let groups = u32::try_from(groups).map_err(|_| geo(format!("{groups} groups")))?;
        let inodes_per_group = le32(b, 0x28);
        if inodes_per_group == 0 || inodes_per_group > max_per_group {
            return Err(geo(format!("{inodes_per_group} inodes per group (must be in 1..={max_per_group})")));
        }
        let inodes_count = le32(b, 0x0);
        if u64::from(inodes_count) != u64::from(inodes_per_group) * u64::from(groups) {
            return Err(geo(format!("{inodes_count} inodes is not {groups} groups × {inodes_per_group}")));
        }
        let rev_level = le32(b, 0x4C);
        let (inode_size, first_ino) = if rev_level == 0 { (128, 11) } else { (le16(b, 0x58), le32(b, 0x54)) };
        if !inode_size.is_power_of_two() || inode_size < 128 || u32::from(inode_size) > block_size {
            return Err(geo(format!("inode size {inode_size}")));
        }
        // The kernel refuses to mount below the reserved inodes, and reads
        // the field as a signed number.
        if first_ino < 11 {
            return Err(geo(format!("first inode {first_ino}: inodes 1-10 are reserved")));
        }
        if first_ino > i32::MAX as u32 {
            return Err(geo(format!("first inode {first_ino}: negative as the kernel reads it")));
        }
        let log_groups_per_flex = b[0x174];
        if feature_incompat & incompat::FLEX_BG != 0 && log_groups_per_flex > 31 {
            return Err(geo(format!("2^{log_groups_per_flex} groups per flex group")));
        }
        let first_meta_bg = le32(b, 0x104);
        if feature_incompat & incompat::META_BG != 0 {
            let desc_blocks = groups.div_ceil(block_size / desc_size);
            if first_meta_bg > desc_blocks {
                return Err(geo(format!("first meta_bg {first_meta_bg} beyond {desc_blocks} descriptor blocks")));
            }
        }
        let reserved_gdt_blocks = le16(b, 0xCE);
        if u32::from(reserved_gdt_blocks) > block_size / 4 {
            return Err(geo(format!("{reserved_gdt_blocks} reserved GDT blocks")));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[0x68..0x78]);
        let csum_seed =
            if feature_incompat & incompat::CSUM_SEED != 0 { le32(b, 0x270) } else { crc32c_raw(!0, &uuid) };
        let sb = Ext4Superblock {
            inodes_count,
            blocks_count,
            reserved_blocks_count: lo_hi(le32(b, 0x8), if desc_size >= 64 { le32(b, 0x154) } else { 0 }),
            free_blocks_count: lo_hi(le32(b, 0xC), if desc_size >= 64 { le32(b, 0x158) } else { 0 }),
            free_inodes_count: le32(b, 0x10),
            first_data_block,
            block_size,
            cluster_size,
            blocks_per_group,
            clusters_per_group,
            inodes_per_group,
            state: le16(b, 0x3A),
            rev_level,
            first_ino,
            inode_size,
            feature_compat,
            feature_incompat,
            feature_ro_compat,
            uuid,
            reserved_gdt_blocks,
            journal_inum: le32(b, 0xE0),
            desc_size,
            first_meta_bg,
            log_groups_per_flex,
            backup_bgs: [le32(b, 0x24C), le32(b, 0x250)],
            csum_seed,
            groups,
            raid_stride: le16(b, 0x164),
            hash_seed: [le32(b, 0xEC), le32(b, 0xF0), le32(b, 0xF4), le32(b, 0xF8)],
            def_hash_version: b[0xFC],
            flags: le32(b, 0x160),
            raid_stripe_width: le32(b, 0x170),
        };
        let itable_blocks = sb.inode_table_blocks();
        if u64::from(itable_blocks) >= u64::from(blocks_per_group) {
            return Err(geo(format!("an inode table of {itable_blocks} blocks fills a group")));
        }
        Ok(sb)
    }

    /// Whether an incompatible feature bit is set.
    pub fn has_incompat(&self, bit: u32) -> bool {
        self.feature_incompat & bit != 0
    }

    /// The largest `i_size` the kernel accepts for an extent-mapped file
    /// (its `s_maxbytes`): 2^32 − 1 blocks, or less where `i_blocks`
    /// counts 512-byte sectors in 32 bits (no huge_file).
    pub fn max_extent_file_size(&self) -> u64 {
        let bits = self.block_size.trailing_zeros();
        let by_extents = ((1u64 << 32) - 1) << bits;
        if self.has_ro_compat(ro_compat::HUGE_FILE) {
            by_extents
        } else {
            by_extents.min((((1u64 << 32) - 1) >> (bits - 9)) << bits)
        }
    }

    /// The largest `i_size` the kernel accepts for a file mapped by
    /// indirect blocks (its `s_bitmap_maxbytes`): what 12 direct pointers
    /// and single, double and triple indirect blocks address, unless the
    /// sectors `i_blocks` can count (data and map blocks together) run
    /// out first.
    pub fn max_indirect_file_size(&self) -> u64 {
        let bits = self.block_size.trailing_zeros();
        let per = 1u64 << (bits - 2);
        let limit =
            if self.has_ro_compat(ro_compat::HUGE_FILE) { (1u64 << 48) - 1 } else { ((1u64 << 32) - 1) >> (bits - 9) };
        let tree = 12 + per + per * per + per * per * per;
        let tree_map = 1 + (1 + per) + (1 + per + per * per);
        let blocks = if tree + tree_map <= limit {
            tree
        } else {
            // Every block `limit` can count, less the map blocks that
            // addressing that many takes.
            let mut rest = limit - 12 - per;
            let mut map = 1;
            if rest < per * per {
                map += 1 + rest.div_ceil(per);
            } else {
                map += 1 + per;
                rest -= per * per;
                map += 1 + rest.div_ceil(per) + rest.div_ceil(per * per);
            }
            limit - map
        };
        (blocks << bits).min(i64::MAX as u64)
    }

    /// Whether a read-only-compatible feature bit is set.
    pub fn has_ro_compat(&self, bit: u32) -> bool {
        self.feature_ro_compat & bit != 0
    }

    /// Whether a compatible feature bit is set.
    pub fn has_compat(&self, bit: u32) -> bool {
        self.feature_compat & bit != 0
    }

    /// metadata_csum: crc32c on every metadata structure.
    pub fn metadata_csum(&self) -> bool {
        self.has_ro_compat(ro_compat::METADATA_CSUM)
    }

    /// Descriptor checksums exist (crc16 or crc32c-based).
    pub fn group_csum(&self) -> bool {
        self.metadata_csum() || self.has_ro_compat(ro_compat::GDT_CSUM)
    }

    /// The RAID stripe ext4 aligns allocations to when mounted without
    /// `stripe=` (`ext4_get_stripe_size`): the stripe width, else the
    /// stride, whichever fits a group; 0 for none.
    pub fn stripe(&self) -> u32 {
        let fits = |v: u32| v > 0 && v <= self.blocks_per_group;
        if fits(self.raid_stripe_width) {
            self.raid_stripe_width
        } else if fits(u32::from(self.raid_stride)) {
            u32::from(self.raid_stride)
        } else {
            0
        }
    }

    /// bigalloc: allocation in clusters of several blocks.
    pub fn bigalloc(&self) -> bool {
        self.has_ro_compat(ro_compat::BIGALLOC)
    }

    /// Whether the journal must be replayed before the image is consistent.
    pub fn needs_recovery(&self) -> bool {
        self.has_incompat(incompat::RECOVER)
    }

    /// Blocks per cluster.
    pub fn cluster_ratio(&self) -> u32 {
        self.cluster_size / self.block_size
    }

    /// Group descriptors per block.
    pub fn descs_per_block(&self) -> u32 {
        self.block_size / self.desc_size
    }

    /// Blocks holding the descriptor table when it is contiguous.
    pub fn desc_blocks(&self) -> u32 {
        self.groups.div_ceil(self.descs_per_block())
    }

    /// Blocks of one group's inode table.
    pub fn inode_table_blocks(&self) -> u32 {
        (u64::from(self.inodes_per_group) * u64::from(self.inode_size)).div_ceil(u64::from(self.block_size)) as u32
    }

    /// First block of group `g`.
    pub fn group_first_block(&self, g: u32) -> u64 {
        u64::from(self.first_data_block) + u64::from(g) * u64::from(self.blocks_per_group)
    }

    /// Blocks in group `g` (the last group may be short).
    pub fn group_blocks(&self, g: u32) -> u32 {
        let first = self.group_first_block(g);
        (self.blocks_count - first).min(u64::from(self.blocks_per_group)) as u32
    }

    /// Whether group `g` holds a superblock backup (and with it, outside
    /// meta_bg, a copy of the descriptor table).
    pub fn has_super(&self, g: u32) -> bool {
        if g == 0 {
            return true;
        }
        if self.has_compat(compat::SPARSE_SUPER2) {
            return g == self.backup_bgs[0] || g == self.backup_bgs[1];
        }
        if g <= 1 || !self.has_ro_compat(ro_compat::SPARSE_SUPER) {
            return true;
        }
        if g.is_multiple_of(2) {
            return false;
        }
        [3u32, 5, 7].iter().any(|&base| is_power_of(g, base))
    }
}

fn is_power_of(mut n: u32, base: u32) -> bool {
    while n.is_multiple_of(base) {
        n /= base;
    }
    n == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_super_groups_are_powers_of_3_5_7() {
        let found: Vec<u32> =
            (0..50).filter(|&g| g == 0 || g == 1 || [3, 5, 7].iter().any(|&b| is_power_of(g, b))).collect();
        assert_eq!(found, vec![0, 1, 3, 5, 7, 9, 25, 27, 49]);
    }
}
