//! Typed errors: each names the structure and the block where the image
//! went wrong.

use std::io;

/// Result of reading an ext4 image.
pub type Result<T> = std::result::Result<T, Ext4Error>;

/// Why an image could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Ext4Error {
    /// The source failed underneath.
    #[error("reading {what} at byte {offset}: {source}")]
    Io {
        what: &'static str,
        offset: u64,
        #[source]
        source: io::Error,
    },
    /// A structure lies past the end of the image.
    #[error("image truncated: {what} at block {block} ends past the image's {len} bytes")]
    Truncated { what: &'static str, block: u64, len: u64 },
    /// No ext2/3/4 superblock at byte 1024.
    #[error("superblock: bad magic {found:#06x} (expected 0xef53)")]
    BadMagic { found: u16 },
    /// Superblock fields that cannot describe a volume.
    #[error("superblock: impossible geometry: {0}")]
    Geometry(String),
    /// A feature this reader cannot interpret.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A stored checksum differs from the computed one.
    #[error("{structure} at block {block}: checksum mismatch (stored {stored:#x}, computed {computed:#x})")]
    Checksum { structure: String, block: u64, stored: u32, computed: u32 },
    /// A group descriptor points somewhere impossible.
    #[error("group {group} descriptor at block {block}: {reason}")]
    Descriptor { group: u32, block: u64, reason: String },
    /// An inode that cannot be read as it claims to be.
    #[error("inode {ino} at block {block}: {reason}")]
    Inode { ino: u32, block: u64, reason: String },
    /// A bad extent header, entry or tree shape. Block 0 means the root in
    /// the inode itself.
    #[error("inode {ino}: extent tree node at block {block}: {reason}")]
    ExtentTree { ino: u32, block: u64, reason: String },
    /// A bad ext2/3 indirect block map.
    #[error("inode {ino}: indirect map block {block}: {reason}")]
    Indirect { ino: u32, block: u64, reason: String },
    /// A directory block that does not parse.
    #[error("directory inode {ino}, block {block}: {reason}")]
    Directory { ino: u32, block: u64, reason: String },
    /// One block claimed by two inodes (or twice by one).
    #[error("block {block} is owned by inode {first} and by inode {second}")]
    Overlap { block: u64, first: u32, second: u32 },
}

impl Ext4Error {
    pub(crate) fn io(what: &'static str, offset: u64, source: io::Error) -> Self {
        Ext4Error::Io { what, offset, source }
    }
}
