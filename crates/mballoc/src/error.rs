//! Typed errors. Every error is returned before any state changes: an
//! operation that fails leaves the allocator exactly as it found it.

use thiserror::Error;

/// What went wrong, with enough context to name the block or the knob.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// A request, free or claim of zero blocks.
    #[error("zero-length extent")]
    ZeroLength,

    /// An extent that runs past the end of the volume (or overflows).
    #[error("extent [{start}, +{len}) lies outside the volume of {total_blocks} blocks")]
    OutOfRange { start: u64, len: u64, total_blocks: u64 },

    /// A goal block past the end of the volume.
    #[error("goal block {goal} lies outside the volume of {total_blocks} blocks")]
    GoalOutOfRange { goal: u64, total_blocks: u64 },

    /// A request longer than one group: a single extent never crosses a group.
    #[error("request of {len} blocks is larger than a group ({blocks_per_group} blocks)")]
    RequestTooLarge { len: u64, blocks_per_group: u32 },

    /// `min_len` or `original_len` larger than `len`.
    #[error("minimum length {min_len} exceeds requested length {len}")]
    MinExceedsLen { min_len: u32, len: u32 },

    /// A goal-only request whose goal has no `stream` key or similar misuse.
    #[error("invalid request: {0}")]
    InvalidRequest(&'static str),

    /// Freeing a block that is already free.
    #[error("double free: block {block} is already free")]
    DoubleFree { block: u64 },

    /// Freeing or claiming a block that is reserved for metadata.
    #[error("block {block} is reserved (metadata) and is never allocated or freed")]
    ReservedBlock { block: u64 },

    /// Claiming a block that is already in use.
    #[error("block {block} is already in use")]
    AlreadyInUse { block: u64 },

    /// No extent satisfying the request exists.
    #[error("no space: no free extent of at least {min_len} blocks (asked for {len})")]
    NoSpace { len: u32, min_len: u32 },

    /// A geometry the allocator cannot represent.
    #[error("invalid geometry: {0}")]
    InvalidGeometry(String),

    /// A tunable set outside its valid range.
    #[error("invalid tunable {name} = {value}: {reason}")]
    InvalidTunable { name: &'static str, value: u64, reason: &'static str },

    /// A group bitmap handed to [`crate::Allocator::load_group_bitmap`] that
    /// disagrees with the group (wrong size, reserved blocks shown free, or a
    /// group already in use).
    #[error("group {group}: {reason}")]
    BadBitmap { group: u32, reason: String },
}

/// Shorthand used across the crate.
pub type Result<T> = std::result::Result<T, Error>;
