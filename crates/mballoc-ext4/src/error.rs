//! Typed errors: each names the structure and the block where the image
//! went wrong.

use std::io;

/// Result of reading an ext4 image.
pub type Result<T> = std::result::Result<T, Ext4Error>;

/// Why an image could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Ext4Error {
    /// The source failed underneath.
    #[error("reading {what} at byte {offset}: {source}")]
    Io {
        /// What was being read.
        what: &'static str,
        /// Byte offset in the source.
        offset: u64,
        /// The source's error.
        #[source]
        source: io::Error,
    },
    /// A structure lies past the end of the image.
    #[error("image truncated: {what} at block {block} ends past the image's {len} bytes")]
    Truncated {
        /// The structure.
        what: &'static str,
        /// Its block.
        block: u64,
        /// The image's length in bytes.
        len: u64,
    },
    /// No ext2/3/4 superblock at byte 1024.
    #[error("superblock: bad magic {found:#06x} (expected 0xef53)")]
    BadMagic {
        /// The magic found.
        found: u16,
    },
    /// Superblock fields that cannot describe a volume.
    #[error("superblock: impossible geometry: {0}")]
    Geometry(String),
    /// A feature this reader cannot interpret.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A stored checksum differs from the computed one.
    #[error("{structure} at block {block}: checksum mismatch (stored {stored:#x}, computed {computed:#x})")]
    Checksum {
        /// The structure.
        structure: String,
        /// Its block.
        block: u64,
        /// The checksum on disk.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// A group descriptor points somewhere impossible.
    #[error("group {group} descriptor at block {block}: {reason}")]
    Descriptor {
        /// The group.
        group: u32,
        /// The descriptor's block.
        block: u64,
        /// What is wrong.
        reason: String,
    },
    /// An inode that cannot be read as it claims to be.
    #[error("inode {ino} at block {block}: {reason}")]
    Inode {
        /// The inode.
        ino: u32,
        /// Its inode-table block.
        block: u64,
        /// What is wrong.
        reason: String,
    },
    /// A bad extent header, entry or tree shape. Block 0 means the root in
    /// the inode itself.
    #[error("inode {ino}: extent tree node at block {block}: {reason}")]
    ExtentTree {
        /// The inode.
        ino: u32,
        /// The node's block (0: the root in the inode).
        block: u64,
        /// What is wrong.
        reason: String,
    },
    /// A bad ext2/3 indirect block map.
    #[error("inode {ino}: indirect map block {block}: {reason}")]
    Indirect {
        /// The inode.
        ino: u32,
        /// The indirect block (0: the inode itself).
        block: u64,
        /// What is wrong.
        reason: String,
    },
    /// A directory block that does not parse.
    #[error("directory inode {ino}, block {block}: {reason}")]
    Directory {
        /// The directory's inode.
        ino: u32,
        /// The directory block.
        block: u64,
        /// What is wrong.
        reason: String,
    },
    /// One block claimed by two inodes (or twice by one).
    #[error("block {block} is owned by inode {first} and by inode {second}")]
    Overlap {
        /// The first shared block.
        block: u64,
        /// One owner.
        first: u32,
        /// The other.
        second: u32,
    },
    /// A block reached a second time, in a walk that keeps one bit per
    /// block rather than each block's owner.
    #[error("block {block}, reached from inode {ino}, is already owned by a file reached before or by this one")]
    Reclaimed {
        /// The block.
        block: u64,
        /// The inode that reached it second.
        ino: u32,
    },
}

impl Ext4Error {
    pub(crate) fn io(what: &'static str, offset: u64, source: io::Error) -> Self {
        Ext4Error::Io { what, offset, source }
    }
}
