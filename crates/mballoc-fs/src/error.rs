//! Typed errors. A call that returns an error has changed nothing.

use crate::FileId;
use thiserror::Error;

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FsError {
    /// No file with this id was ever created.
    #[error("file {0:?} does not exist")]
    UnknownFile(FileId),

    /// The file was unlinked.
    #[error("file {0:?} was unlinked")]
    Unlinked(FileId),

    /// The operation needs an open handle and the file has none.
    #[error("file {0:?} is not open")]
    NotOpen(FileId),

    /// A byte range that ends past the largest file size, or overflows.
    #[error("range at byte {offset} of {len} bytes passes the maximum file size of {max} bytes")]
    FileTooLarge {
        /// First byte of the range.
        offset: u64,
        /// Its length in bytes.
        len: u64,
        /// The largest file size in bytes.
        max: u64,
    },

    /// A range an operation cannot take: not whole blocks, past the end of
    /// the file, or over data not yet written back (collapse and insert).
    #[error("invalid range: {0}")]
    InvalidRange(String),

    /// A zero-length range where one is not allowed (`fallocate`, `punch`).
    #[error("zero-length range")]
    ZeroLength,

    /// Not enough free space, counting preallocations that could be
    /// discarded and blocks that are already reserved for dirty data.
    #[error("no space: {needed} blocks needed, {available} available")]
    NoSpace {
        /// Blocks the operation needed.
        needed: u64,
        /// Blocks that could still be promised.
        available: u64,
    },

    /// A block freed twice within pending transactions.
    #[error("block {block} is already waiting to be freed")]
    AlreadyPendingFree {
        /// The first such block.
        block: u64,
    },

    /// A setting by name ([`crate::FsConfig::set`]) that is no setting, or
    /// a value it does not take.
    #[error("setting {key}: {why}")]
    Setting {
        /// The setting's name (or the whole text, if it was not KEY=VALUE).
        key: String,
        /// What is wrong.
        why: String,
    },

    /// A configuration the file layer cannot use.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// A volume's state that cannot be imported (file blocks free in the
    /// bitmap, owned twice, or outside the volume).
    #[error("cannot import: {0}")]
    InvalidImport(String),

    /// A directory operation the layer refuses: a name that exists or is
    /// missing, a file where a directory is needed, or a directory shape
    /// ext4 reaches that the model does not follow.
    #[error("directory: {0}")]
    Directory(String),

    /// The attached change log could not make a commit durable.
    #[error("change log: {0}")]
    Log(String),

    /// The allocator rejected something.
    #[error(transparent)]
    Alloc(#[from] mballoc::Error),
}

/// Shorthand used across the crate.
pub type Result<T> = std::result::Result<T, FsError>;
