//! Typed errors. Every error is returned before any state changes: an
//! operation that fails leaves the allocator exactly as it found it.

use thiserror::Error;

/// What went wrong, with enough context to name the block or the knob.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// A request, free or claim of zero blocks.
    #[error("zero-length extent")]
    ZeroLength,

    /// An extent that runs past the end of the volume (or overflows).
    #[error("extent [{start}, +{len}) lies outside the volume of {total_blocks} blocks")]
    OutOfRange {
        /// First block of the extent.
        start: u64,
        /// Its length in blocks.
        len: u64,
        /// Blocks in the volume.
        total_blocks: u64,
    },

    /// A goal block past the end of the volume.
    #[error("goal block {goal} lies outside the volume of {total_blocks} blocks")]
    GoalOutOfRange {
        /// The goal block.
        goal: u64,
        /// Blocks in the volume.
        total_blocks: u64,
    },

    /// A group number past the last group.
    #[error("group {group} does not exist (the volume has {groups})")]
    GroupOutOfRange {
        /// The group asked for.
        group: u32,
        /// Groups in the volume.
        groups: u32,
    },

    /// A request longer than one group: a single extent never crosses a group.
    #[error("request of {len} blocks is larger than a group ({blocks_per_group} blocks)")]
    RequestTooLarge {
        /// Blocks asked for.
        len: u64,
        /// Blocks in a group.
        blocks_per_group: u32,
    },

    /// `min_len` or `original_len` larger than `len`.
    #[error("minimum length {min_len} exceeds requested length {len}")]
    MinExceedsLen {
        /// The minimum (or original) length.
        min_len: u32,
        /// The requested length.
        len: u32,
    },

    /// A goal-only request whose goal has no `stream` key or similar misuse.
    #[error("invalid request: {0}")]
    InvalidRequest(&'static str),

    /// Freeing a block that is free: freed before, or never allocated.
    #[error("block {block} is free already (freed before, or never allocated): nothing was freed")]
    AlreadyFree {
        /// The first such block.
        block: u64,
    },

    /// Freeing or claiming a block that is reserved for metadata.
    #[error("block {block} is reserved (metadata) and is never allocated or freed")]
    ReservedBlock {
        /// The first such block.
        block: u64,
    },

    /// Claiming a block that is already in use.
    #[error("block {block} is already in use")]
    AlreadyInUse {
        /// The first such block.
        block: u64,
    },

    /// No extent satisfying the request exists.
    #[error("no space: no free extent of at least {min_len} blocks (asked for {len})")]
    NoSpace {
        /// Blocks asked for.
        len: u32,
        /// Blocks required.
        min_len: u32,
    },

    /// A geometry the allocator cannot represent.
    #[error("invalid geometry: {0}")]
    InvalidGeometry(String),

    /// A tunable set outside its valid range.
    #[error("invalid tunable {name} = {value}: {reason}")]
    InvalidTunable {
        /// The knob's sysfs name.
        name: &'static str,
        /// The value refused.
        value: u64,
        /// Why.
        reason: &'static str,
    },

    /// A group bitmap handed to [`crate::Allocator::load_group_bitmap`] that
    /// disagrees with the group (wrong size, reserved blocks shown free, or a
    /// group already in use).
    #[error("group {group}: {reason}")]
    BadBitmap {
        /// The group.
        group: u32,
        /// What is wrong with the bitmap.
        reason: String,
    },
}

/// Shorthand used across the crate.
pub type Result<T> = std::result::Result<T, Error>;
