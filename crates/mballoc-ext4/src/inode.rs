//! Inodes: the fields that say what a file is and how its blocks are
//! mapped, with the metadata_csum inode checksum.

use crate::bytes::{le16, le32, lo_hi};
use crate::checksum::crc32c_raw;
use crate::superblock::{ro_compat, Ext4Superblock};

/// `i_flags` bits the reader looks at.
#[allow(missing_docs)] // the kernel's names, one bit each
pub mod iflags {
    pub const ENCRYPT: u32 = 0x800;
    pub const INDEX: u32 = 0x1000;
    pub const HUGE_FILE: u32 = 0x40000;
    pub const EXTENTS: u32 = 0x80000;
    pub const VERITY: u32 = 0x100000;
    pub const EA_INODE: u32 = 0x200000;
    pub const INLINE_DATA: u32 = 0x1000_0000;
    pub const CASEFOLD: u32 = 0x4000_0000;
}

/// Root directory inode number.
pub const ROOT_INO: u32 = 2;
const GOOD_OLD_INODE_SIZE: usize = 128;
const CHECKSUM_LO: usize = 0x7C;
const CHECKSUM_HI: usize = 0x82;

/// What kind of object an inode is (from the top bits of `i_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A device, fifo or socket.
    Other,
}

/// An inode's fields, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inode {
    /// The inode number.
    pub ino: u32,
    /// `i_mode`: type and permissions.
    pub mode: u16,
    /// `i_size` in bytes.
    pub size: u64,
    /// `i_links_count`.
    pub links_count: u16,
    /// `i_flags` (see [`iflags`]).
    pub flags: u32,
    /// `i_generation` (part of the checksum seed).
    pub generation: u32,
    /// `i_blocks` in 512-byte sectors (or blocks with huge_file's flag),
    /// normalised to 512-byte sectors.
    pub sectors: u64,
    /// The 60 bytes of `i_block`: an extent tree root, an indirect map,
    /// inline data or a short symlink target.
    pub block: [u8; 60],
    /// `i_extra_isize`: bytes used past the original 128.
    pub extra_isize: u16,
    /// The inode's bytes after `i_extra_isize`: its in-inode extended
    /// attributes (inline data continues there).
    pub ibody: Vec<u8>,
    /// The inode-table block that holds this inode.
    pub table_block: u64,
}

/// How a file's blocks are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MappingKind {
    /// An ext4 extent tree.
    Extents,
    /// ext2/3 direct and indirect block pointers.
    Indirect,
    /// Data inside the inode; no blocks.
    Inline,
    /// No mapping at all (devices, fifos, sockets, short symlinks).
    None,
}

impl Inode {
    /// Decode `raw` (the on-disk inode, `inode_size` bytes) read from
    /// inode-table block `table_block`. An `i_extra_isize` that runs past
    /// the inode leaves no attribute area (the caller refuses it).
    pub fn parse(sb: &Ext4Superblock, ino: u32, raw: &[u8], table_block: u64) -> Inode {
        let big = raw.len() > GOOD_OLD_INODE_SIZE;
        let extra_isize = if big { le16(raw, 0x80) } else { 0 };
        let ibody = raw.get(GOOD_OLD_INODE_SIZE + usize::from(extra_isize)..).unwrap_or(&[]).to_vec();
        let flags = le32(raw, 0x20);
        let blocks_lo = u64::from(le32(raw, 0x1C));
        let blocks_hi = u64::from(le16(raw, 0x74));
        let mut sectors =
            if sb.has_ro_compat(ro_compat::HUGE_FILE) { blocks_lo | (blocks_hi << 32) } else { blocks_lo };
        if sb.has_ro_compat(ro_compat::HUGE_FILE) && flags & iflags::HUGE_FILE != 0 {
            sectors = sectors.saturating_mul(u64::from(sb.block_size / 512));
        }
        let mut block = [0u8; 60];
        block.copy_from_slice(&raw[0x28..0x64]);
        Inode {
            ino,
            mode: le16(raw, 0x0),
            size: lo_hi(le32(raw, 0x4), le32(raw, 0x6C)),
            links_count: le16(raw, 0x1A),
            flags,
            generation: le32(raw, 0x64),
            sectors,
            block,
            extra_isize,
            ibody,
            table_block,
        }
    }

    /// What kind of object this is.
    pub fn file_type(&self) -> FileType {
        match self.mode & 0xF000 {
            0x8000 => FileType::Regular,
            0x4000 => FileType::Directory,
            0xA000 => FileType::Symlink,
            _ => FileType::Other,
        }
    }

    /// How the blocks are mapped. Short symlinks keep their target in
    /// `i_block` and own no blocks.
    pub fn mapping(&self) -> MappingKind {
        if self.flags & iflags::INLINE_DATA != 0 {
            MappingKind::Inline
        } else if self.flags & iflags::EXTENTS != 0 {
            MappingKind::Extents
        } else if self.file_type() == FileType::Other
            || (self.file_type() == FileType::Symlink && self.sectors == 0 && self.size < 60)
        {
            MappingKind::None
        } else {
            MappingKind::Indirect
        }
    }

    /// An htree-indexed directory.
    pub fn is_indexed(&self) -> bool {
        self.flags & iflags::INDEX != 0
    }
}

/// The per-inode checksum seed: volume seed, inode number, generation.
pub fn inode_csum_seed(sb: &Ext4Superblock, ino: u32, generation: u32) -> u32 {
    let c = crc32c_raw(sb.csum_seed, &ino.to_le_bytes());
    crc32c_raw(c, &generation.to_le_bytes())
}

/// `(stored, computed)` inode checksums, compared at the width stored
/// (16 bits when the inode has no room for the high half).
pub fn inode_checksum(sb: &Ext4Superblock, ino: u32, raw: &[u8]) -> (u32, u32) {
    let generation = le32(raw, 0x64);
    let seed = inode_csum_seed(sb, ino, generation);
    let size = raw.len();
    let mut c = crc32c_raw(seed, &raw[..CHECKSUM_LO]);
    c = crc32c_raw(c, &[0, 0]);
    c = crc32c_raw(c, &raw[CHECKSUM_LO + 2..GOOD_OLD_INODE_SIZE]);
    let mut has_hi = false;
    if size > GOOD_OLD_INODE_SIZE {
        let extra = usize::from(le16(raw, 0x80));
        c = crc32c_raw(c, &raw[GOOD_OLD_INODE_SIZE..CHECKSUM_HI]);
        has_hi = GOOD_OLD_INODE_SIZE + extra >= CHECKSUM_HI + 2;
        let rest = if has_hi {
            c = crc32c_raw(c, &[0, 0]);
            CHECKSUM_HI + 2
        } else {
            CHECKSUM_HI
        };
        c = crc32c_raw(c, &raw[rest..size]);
    }
    let lo = u32::from(le16(raw, CHECKSUM_LO));
    if has_hi {
        (lo | (u32::from(le16(raw, CHECKSUM_HI)) << 16), c)
    } else {
        (lo, c & 0xFFFF)
    }
}
