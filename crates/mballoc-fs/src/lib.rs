//! # mballoc-fs — the file layer over the mballoc allocator
//!
//! Files with extent maps, buffered writes with delayed allocation,
//! `fallocate`, truncate and punch, transactions with deferred frees, and the
//! placement policy ext4 wraps around its allocator: goals, stream vs small
//! file, request normalization and preallocation. Contents are not stored
//! (yet): a write says which bytes hold data, and the layer decides where
//! they go.
//!
//! ## Ownership: who holds a block
//!
//! Every block the allocator shows as used is held by exactly one of:
//!
//! * a file's **extent map** (`extent_map`), written or unwritten;
//! * a **preallocation** (`prealloc`): a file's window set aside for its
//!   next writes, or a CPU's locality-group run for small files;
//! * the **running transaction** (`deferred_frees`): freed, not reusable until it
//!   commits, so that a crash before the commit never finds the old owner
//!   pointing at reused blocks;
//! * volume metadata.
//!
//! Delayed data holds no block, only a **reservation** (`space`): a write
//! claims one block per new hole it dirties, and the claim fails (NoSpace)
//! only when free blocks, plus preallocated and pending ones that could be
//! recovered, minus what is already reserved, cannot cover it. A claimed
//! block is then guaranteed at writeback: if the allocator comes up short,
//! every preallocation is discarded and the transaction committed, and the
//! allocation retried. [`Fs::check`] verifies all of this from scratch.
//!
//! ## One allocation, in order
//!
//! Writeback takes one contiguous dirty run at a time (so a 12 MiB write is
//! one request, not three thousand), `fallocate` one hole at a time:
//!
//! 1. **Goal**: the block after the nearest mapped extent, else the first
//!    block of the file's home group (its inode's group).
//! 2. **Placement** (`normalize::placement`): files predicted to stay at or
//!    under `mb_stream_req` blocks use their CPU's locality group; larger
//!    ones are streams with their own windows and a stream goal.
//! 3. **Preallocation**: a file's window covering the block is used first,
//!    then (small files) the locality-group run nearest the goal.
//! 4. **Normalization** (`normalize::window`): otherwise the request grows
//!    to the kernel's size class (or a Lustre-style table), cut to stay off
//!    mapped blocks and other windows, with a merge goal when it touches a
//!    mapped neighbour. Small files take `mb_group_prealloc` blocks.
//! 5. **Allocator**: one [`mballoc::AllocRequest`]; whatever the caller does
//!    not need becomes a preallocation. A preallocation is never taken out
//!    of blocks that reservations need.
//!
//! `fallocate` appends are not normalized (ext4 does not grow a one-extent
//! fallocate). Under [`StreamPlacement::PerFile`], the default, each
//! appending file continues its own last block with a window as large as
//! the file, and moves to where it has room when another file took its next
//! block; under [`StreamPlacement::Kernel`] they get ext4's placement and
//! interleave block by block.
//!
//! ## Clusters
//!
//! On an ext4 volume made with bigalloc ([`Shape::cluster_bits`](crate::Shape::cluster_bits)) the
//! allocator's blocks are clusters, and so are the file layer's: files are
//! mapped, reserved, preallocated and freed a cluster at a time, as ext4
//! does. ext4's own arithmetic in blocks (the stream threshold, window
//! sizes, the extent tree) stays in blocks (`fs/clusters.rs`), and each
//! file keeps which of its clusters' blocks it was given, so that
//! writeback maps them run by run as ext4 does (`fs/cluster_map.rs`) and
//! a cluster is freed only when no block of the file is left in it.
//!
//! ## Concurrency
//!
//! Each file has a lock for its data (ext4's `i_data_sem`) and a separate
//! one for its windows, each locality group a lock, pending frees a lock per
//! shard of groups; the allocator below has a lock per group. A thread holds
//! at most its own file's locks plus one leaf lock at a time: a locality
//! group is searched under its lock, and filled under it again after the
//! allocator call, so a preempted allocation never holds up the threads
//! sharing the group. The file table
//! is split by inode number, and the space counters, statistics and the
//! operation count per CPU (the kernel's percpu counters): a claim takes
//! from the CPU's own pool and drains every pool under one lock only when
//! the shared count runs short, so NoSpace is still exact. An `fallocate`
//! that hits its file's window writes no cache line another CPU uses.
//! [`Concurrency::Legacy`] keeps pending frees under one lock and makes the
//! allocator block on group locks with a single locked stream goal.

#![forbid(unsafe_code)]

mod alloc_log;
mod change_log;
mod config;
mod deferred_frees;
mod error;
mod ext4_tree;
mod extent_map;
mod fs;
mod id_hash;
mod inode_numbers;
mod kernel_version;
mod namespace;
mod normalize;
mod page_cache;
mod percpu;
mod prealloc;
mod ranges;
mod settings;
mod space;
mod view;
mod violation;

pub use alloc_log::{AllocEvent, Purpose, ServedBy};
pub use change_log::{Change, ChangeLog, LogFailure};
pub use config::{
    Behaviour, CloseBehaviour, DioRead, ExtentTreeBlocks, FreeReuse, FsConfig, LowSpace, Placement, PunchBehaviour,
    RequestSize, Shape, Storage, StreamPlacement, StripeUnits, SyncOrder,
};
pub use deferred_frees::DeferredFreeStats;
pub use error::{FsError, Result};
pub use extent_map::{ExtentState, MappedExtent, MAX_UNWRITTEN_LEN, MAX_WRITTEN_LEN};
pub use fs::{FallocateMode, FiemapExtent, FiemapKind, FileId, FileKind, Fs, FsStats, ImportedFile, APPEND_WINDOW_MAX};
pub use id_hash::{IdHasher, IdMap};
pub use inode_numbers::{InodeNumbers, FIRST_INO};
pub use kernel_version::{KernelRule, KernelVersion};
pub use mballoc::Concurrency;
pub use namespace::dirhash::{half_md4, HashChars};
pub use namespace::{DirFormat, DirHash, DirLayout, Ext4Namespace, LayoutError, Record, Removed};
pub use normalize::{Normalization, PreallocTable, MAX_LOGICAL_BLOCKS};
pub use page_cache::PageCache;
pub use ranges::RangeSet;
pub use settings::{setting, Part, Setting, SETTINGS};
pub use view::{AllocatorView, FsView};
pub use violation::{Counter, Owner, Violation};

// Thread safety, checked when the crate compiles: an `Fs` is shared by
// every thread that writes files (each call takes the locks it needs).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Fs>();
    send_sync::<FsConfig>();
    send_sync::<FsStats>();
    send_sync::<FsError>();
    send_sync::<MappedExtent>();
};
