//! What [`Fs::check`](crate::Fs::check) finds broken: each invariant of
//! the file layer by name, with the blocks, file and counters that break
//! it. A violation is a bug in the engine, never a condition of the input:
//! the tests and the `verify` feature turn one into a panic with this
//! text, and `check` reports it.

use mballoc::Violation as AllocatorViolation;

/// Who holds a block, as the checker met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// A file's extent, by its first logical block.
    Extent {
        /// The file (its inode number).
        file: u64,
        /// The extent's first logical block.
        logical: u64,
    },
    /// A block of a file's extent tree.
    TreeBlock {
        /// The file.
        file: u64,
    },
    /// A file's preallocation.
    Preallocation {
        /// The file.
        file: u64,
    },
    /// A locality group's preallocated run.
    LocalityGroupRun,
    /// A block freed but not yet returned (its commit is pending).
    PendingFree,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Extent { file, logical } => write!(f, "inode {file} extent at logical {logical}"),
            Owner::TreeBlock { file } => write!(f, "inode {file} extent-tree block"),
            Owner::Preallocation { file } => write!(f, "inode {file} preallocation"),
            Owner::LocalityGroupRun => f.write_str("locality-group run"),
            Owner::PendingFree => f.write_str("pending free"),
        }
    }
}

/// A space counter the checker recounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// The allocator's used blocks against owned blocks plus metadata.
    Used,
    /// Blocks preallocated to files and locality groups.
    Preallocated,
    /// Blocks freed, waiting for their commit.
    PendingFree,
    /// Blocks reserved for delayed allocation.
    Reserved,
    /// Blocks dirty in the cache (delayed or unwritten-and-written).
    Dirty,
    /// Claimable plus reserved against free plus preallocated plus pending.
    Claimable,
}

/// An invariant of the file layer found broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// The allocator's own invariants.
    #[error(transparent)]
    Allocator(#[from] AllocatorViolation),
    /// Preallocation windows still reserved with no thread inside.
    #[error("{0} preallocation windows in flight with no thread inside the engine")]
    WindowsInFlight(u64),
    /// An owner's range reaches past the volume.
    #[error("{owner} [{start}, +{len}) outside the volume")]
    OutsideVolume {
        /// Who holds it.
        owner: Owner,
        /// First block.
        start: u64,
        /// Blocks.
        len: u64,
    },
    /// A block with two owners.
    #[error("block {block} owned twice (second owner: {second})")]
    OwnedTwice {
        /// The block.
        block: u64,
        /// The owner met second.
        second: Owner,
    },
    /// A file's delayed or preallocated logical range is also mapped.
    #[error("inode {file}: {what} [{start}, {end}) is mapped")]
    Mapped {
        /// The file.
        file: u64,
        /// "delayed run" or "preallocated logical".
        what: &'static str,
        /// First logical block.
        start: u64,
        /// End, exclusive.
        end: u64,
    },
    /// Under bigalloc, a file's block sets disagree with its clusters.
    #[error("inode {file}: {what}")]
    Clusters {
        /// The file.
        file: u64,
        /// Which set, and the blocks.
        what: String,
    },
    /// A block with an owner that the allocator has free.
    #[error("block {0} has an owner but is free in the allocator")]
    OwnedButFree(u64),
    /// A counter that does not match its recount.
    #[error("{counter:?} counter {kept} != recounted {counted}")]
    Count {
        /// Which counter.
        counter: Counter,
        /// Its value.
        kept: u64,
        /// What the checker counted.
        counted: u64,
    },
}
