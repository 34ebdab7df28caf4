//! Group descriptors (32 or 64 bytes) and each group's fixed metadata:
//! where the descriptor table and its backups sit (classic or meta_bg
//! layout), and the bitmaps and inode table a descriptor points to.

use crate::bytes::{le16, le32, lo_hi};
use crate::checksum::{crc16, crc32c_raw};
use crate::error::{Ext4Error, Result};
use crate::superblock::{incompat, ChecksumPolicy, Ext4Superblock};

/// `bg_flags` bits.
#[allow(missing_docs)] // the kernel's names, one bit each
pub mod flags {
    pub const INODE_UNINIT: u16 = 0x1;
    pub const BLOCK_UNINIT: u16 = 0x2;
}

/// One group descriptor, validated against the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupDesc {
    /// `bg_block_bitmap`: the bitmap's block.
    pub block_bitmap: u64,
    /// `bg_inode_bitmap`.
    pub inode_bitmap: u64,
    /// `bg_inode_table`: first block of the inode table.
    pub inode_table: u64,
    /// `bg_free_blocks_count`.
    pub free_blocks: u32,
    /// `bg_free_inodes_count`.
    pub free_inodes: u32,
    /// `bg_used_dirs_count`.
    pub used_dirs: u32,
    /// `bg_flags` (`INODE_UNINIT` 0x1, `BLOCK_UNINIT` 0x2).
    pub flags: u16,
    /// `bg_itable_unused`: inodes at the end of the table never used.
    pub itable_unused: u32,
    /// `bg_block_bitmap_csum` (low and high halves).
    pub block_bitmap_csum: u32,
    /// `bg_checksum`.
    pub checksum: u16,
}

impl GroupDesc {
    /// Whether the group's block bitmap was never written (computed instead).
    pub fn block_uninit(&self) -> bool {
        self.flags & flags::BLOCK_UNINIT != 0
    }

    /// Whether the group's inode table was never initialised.
    pub fn inode_uninit(&self) -> bool {
        self.flags & flags::INODE_UNINIT != 0
    }
}

/// The block where group `g`'s backup superblock (or, for group 0, the
/// primary) starts. With 1 KiB blocks and bigalloc, group 0 begins at
/// block 0, which holds the boot sector; the superblock is block 1.
fn group_super_block(sb: &Ext4Superblock, g: u32) -> u64 {
    let first = sb.group_first_block(g);
    if first == 0 && sb.block_size == 1024 {
        1
    } else {
        first
    }
}

fn meta_bg_layout(sb: &Ext4Superblock, g: u32) -> bool {
    sb.has_incompat(incompat::META_BG) && g / sb.descs_per_block() >= sb.first_meta_bg
}

/// Where group `g`'s descriptor lives: (block, byte offset in it).
pub fn desc_location(sb: &Ext4Superblock, g: u32) -> (u64, usize) {
    let per_block = sb.descs_per_block();
    let index = g / per_block;
    let offset = (g % per_block * sb.desc_size) as usize;
    if meta_bg_layout(sb, g) {
        // meta_bg: each run of `per_block` groups keeps its one descriptor
        // block in its first group, after the superblock backup if any.
        let first = index * per_block;
        (group_super_block(sb, first) + u64::from(sb.has_super(first)), offset)
    } else {
        (group_super_block(sb, 0) + 1 + u64::from(index), offset)
    }
}

/// The blocks at the start of group `g` that hold the superblock backup
/// and descriptor blocks (plus reserved GDT blocks): `(start, len)`.
pub fn base_metadata(sb: &Ext4Superblock, g: u32) -> Option<(u64, u64)> {
    let start = group_super_block(sb, g);
    let has_super = u64::from(sb.has_super(g));
    let descs = if !meta_bg_layout(sb, g) {
        if has_super == 0 {
            0
        } else if sb.has_incompat(incompat::META_BG) {
            u64::from(sb.first_meta_bg)
        } else {
            u64::from(sb.desc_blocks()) + u64::from(sb.reserved_gdt_blocks)
        }
    } else {
        let pos = g % sb.descs_per_block();
        u64::from(pos == 0 || pos == 1 || pos == sb.descs_per_block() - 1)
    };
    let len = has_super + descs;
    (len > 0).then_some((start, len))
}

/// Parse descriptor `g` from `raw` (its `desc_size` bytes) and check it.
pub fn parse_desc(sb: &Ext4Superblock, g: u32, raw: &[u8], block: u64, policy: ChecksumPolicy) -> Result<GroupDesc> {
    let wide = sb.desc_size >= 64;
    let hi32 = |off: usize| if wide { le32(raw, off) } else { 0 };
    let hi16 = |off: usize| if wide { u32::from(le16(raw, off)) } else { 0 };
    let d = GroupDesc {
        block_bitmap: lo_hi(le32(raw, 0x0), hi32(0x20)),
        inode_bitmap: lo_hi(le32(raw, 0x4), hi32(0x24)),
        inode_table: lo_hi(le32(raw, 0x8), hi32(0x28)),
        free_blocks: u32::from(le16(raw, 0xC)) | (hi16(0x2C) << 16),
        free_inodes: u32::from(le16(raw, 0xE)) | (hi16(0x2E) << 16),
        used_dirs: u32::from(le16(raw, 0x10)) | (hi16(0x30) << 16),
        flags: le16(raw, 0x12),
        itable_unused: u32::from(le16(raw, 0x1C)) | (hi16(0x32) << 16),
        block_bitmap_csum: u32::from(le16(raw, 0x18)) | (if sb.desc_size >= 0x3A { hi16(0x38) << 16 } else { 0 }),
        checksum: le16(raw, 0x1E),
    };
    if sb.group_csum() && policy == ChecksumPolicy::Verify {
        let computed = desc_checksum(sb, g, raw);
        if computed != d.checksum {
            return Err(Ext4Error::Checksum {
                structure: format!("group {g} descriptor"),
                block,
                stored: d.checksum.into(),
                computed: computed.into(),
            });
        }
    }
    let bad = |reason: String| Ext4Error::Descriptor { group: g, block, reason };
    // Nothing of a group's may sit in the primary superblock or the
    // descriptor table that follows it.
    let lo = base_metadata(sb, 0).map_or(u64::from(sb.first_data_block), |(s, len)| s + len);
    let end = sb.blocks_count;
    for (what, at, len) in [
        ("block bitmap", d.block_bitmap, 1u64),
        ("inode bitmap", d.inode_bitmap, 1),
        ("inode table", d.inode_table, u64::from(sb.inode_table_blocks())),
    ] {
        if at < lo || at.checked_add(len).is_none_or(|e| e > end) {
            return Err(bad(format!(
                "{what} at block {at} (+{len}) is outside blocks {lo}..{end} (past the superblock and descriptors)"
            )));
        }
    }
    // Counters the kernel tolerates (it mounts and reads such a volume:
    // they guide allocation, not reading) are tolerated: `itable_unused`
    // clamped to what a group holds; the free count kept as stored, for
    // the kernel's own comparison with the bitmap (`mb_groups`).
    Ok(GroupDesc { itable_unused: d.itable_unused.min(sb.inodes_per_group), ..d })
}

/// The 16-bit descriptor checksum: crc32c-based with metadata_csum, crc16
/// with gdt_csum; either way over the group number and the descriptor with
/// its checksum field skipped.
pub fn desc_checksum(sb: &Ext4Superblock, g: u32, raw: &[u8]) -> u16 {
    let group = g.to_le_bytes();
    let size = sb.desc_size as usize;
    if sb.metadata_csum() {
        let mut c = crc32c_raw(sb.csum_seed, &group);
        c = crc32c_raw(c, &raw[..0x1E]);
        c = crc32c_raw(c, &[0, 0]);
        if size > 0x20 {
            c = crc32c_raw(c, &raw[0x20..size]);
        }
        (c & 0xFFFF) as u16
    } else {
        let mut c = crc16(!0, &sb.uuid);
        c = crc16(c, &group);
        c = crc16(c, &raw[..0x1E]);
        if sb.has_incompat(incompat::BIT64) && size > 0x20 {
            c = crc16(c, &raw[0x20..size]);
        }
        c
    }
}
