//! # mballoc — ext4's multiblock block allocator as a library
//!
//! This crate is the allocator core: it hands out and takes back extents of
//! blocks on one volume, placing them the way ext4's `mballoc` does. It knows
//! nothing of files; a file layer builds goals, normalization and
//! preallocation on top of it.
//!
//! ## The big picture
//!
//! A volume is cut into **groups** of at most `8 × block_size` blocks
//! ([`Geometry`]). Every group keeps three things ([`Buddy`]):
//!
//! * a **bitmap**, one bit per block, set when the block is in use;
//! * a **buddy**: the group's free space as maximal aligned power-of-two
//!   chunks, orders `0 ..= block_size_log2 + 1`, so "is there a free aligned
//!   chunk of 2^k blocks" is a counter lookup and "where" is a find-first-set;
//! * a **summary** ([`GroupInfo`]): free blocks, free fragments, first free
//!   block, chunks per order, the largest free order, and the bucket of the
//!   average fragment size.
//!
//! Every operation keeps the buddy and the summary exact *incrementally*:
//! marking an extent used splits only the chunks it touches, freeing merges
//! only along the freed range's borders. The invariant that the tests check
//! after every operation is that this state equals the one regenerated from the
//! bitmap alone ([`Allocator::check_consistency`]).
//!
//! Two families of **order indexes** ([`IndexKind`]) list, per order, the
//! groups whose largest free chunk has that order and the groups whose average
//! free fragment falls in that bucket. A full group is in no set. They answer
//! "the next group at or after g that could satisfy this" without visiting
//! unrelated groups, which is what lets a request on an aged 2^20-group volume
//! look at one or two groups instead of scanning hundreds of thousands.
//!
//! ## One request
//!
//! An [`AllocRequest`] names a length, an optional minimum, an optional goal
//! block with a [`GoalPolicy`], data or metadata, and an optional stream key.
//!
//! 1. **Goal.** With `TryFirst` or `Only`, measure the free run at the goal; if
//!    it is long enough, take it. `Only` stops here.
//! 2. **Start group.** The goal's group, or for a stream request that
//!    stream's goal group (`min(CPUs, groups/4)` stream goals, relaxed atomics,
//!    moved to wherever the stream's last request landed).
//! 3. **Passes** ([`Criterion`]), each one full sweep from the start group,
//!    stopping at the first success:
//!    * `CR_POWER2_ALIGNED` for power-of-two lengths: a group whose largest
//!      free chunk is big enough; the buddy hands out an aligned chunk.
//!    * `CR_GOAL_LEN_FAST`: a group whose average fragment is big enough.
//!    * `CR_BEST_AVAIL_LEN`: the same with the length trimmed by up to
//!      `mb_best_avail_max_trim_order` orders, never below the minimum.
//!    * `CR_GOAL_LEN_SLOW`: any group with enough free blocks.
//!    * `CR_ANY_FREE`: any group with a free block; may return less.
//!
//!    With `mb_optimize_scan` the first three walk the order indexes
//!    ("linear-like": every candidate after the start across all useful
//!    orders, then those before it); otherwise, and always for the last two,
//!    they scan groups linearly. Kernels before 6.17 kept linked lists
//!    instead, read from their heads ([`OrderLists::Linked`]).
//! 4. **Inside a group** the power-of-two pass takes the first big-enough buddy
//!    chunk; the others measure free runs best-fit (the cheap ones step over
//!    runs shorter than the goal, [`ShortRuns`]): an exact fit wins at once,
//!    a larger one is taken at the end of the group or after `mb_min_to_scan`
//!    extents, and after `mb_max_to_scan` extents the best so far is taken.
//!
//! ## Concurrency
//!
//! [`Allocator`] is `Send + Sync`. Each group has its own lock; every pass but
//! `CR_ANY_FREE` only *tries* it and skips a busy group ("any good group will
//! do"), while the last pass waits so no free space is ever missed. Summaries
//! and indexes are read without any lock and re-checked under it. Statistics
//! live in per-thread shards. Frees and claims that span groups lock them in
//! ascending order, check everything, then change everything: an operation
//! either happens whole or returns an [`Error`] and changes nothing.
//!
//! [`Concurrency::Legacy`] reproduces the kernel before its 2025 series, to
//! measure against on the same machine: one stream goal under one lock and
//! every group lock waited for. The lock-free pieces (order index sets,
//! stream goals) have loom models (`RUSTFLAGS="--cfg loom" cargo test -p
//! mballoc --lib loom_tests`).
//!
//! ## New streams
//!
//! Beyond the kernel, [`Allocator::stream_start`] says where a new stream
//! has the most room (an unused group, else the middle of the largest free
//! run among the roomiest groups) and [`Allocator::room_in_group`] does the
//! same inside one group. The file layer uses them to keep files appended at
//! the same time apart; the allocator itself never places by them.
//!
//! ## Memory
//!
//! A group that was never touched has no bitmap: its state is a shared
//! template (the kernel's `BLOCK_UNINIT`). Group slots come in lazily
//! allocated chunks of 1024. A 128 TiB volume (2^20 groups at 4 KiB) is built
//! in milliseconds and costs its order indexes (about 3.6 MiB) until used.
//!
//! ## Reports
//!
//! [`report`] prints `mb_stats` (6.17+ layout), `mb_groups`,
//! `mb_structs_summary` and e2freefrag's histogram exactly as the kernel and
//! e2fsprogs do, so outputs can be diffed against a real system.
//!
//! ## Deliberate differences from the kernel
//!
//! * The order indexes are always maintained (so toggling
//!   `mb_optimize_scan` can never leave them stale); the option only decides
//!   whether scans use them.
//! * With linear scans `CR_BEST_AVAIL_LEN` is skipped: the kernel runs it as
//!   an untrimmed repeat of `CR_GOAL_LEN_FAST` there.
//! * `min_len` is a hard floor; a scan stops at `mb_max_to_scan` only once it
//!   holds a candidate, so a volume with space never answers `NoSpace`.
//! * One lock per group instead of a hashed array, so a busy neighbour never
//!   makes a pass skip an idle group.
//!
//! ```
//! use mballoc::{Allocator, AllocRequest, Criterion, FoundBy, Geometry};
//! let a = Allocator::new(Geometry::new(4096, 1 << 24)?)?; // 64 GiB, 512 groups
//! let x = a.allocate(&AllocRequest::new(256).goal(1 << 20))?;
//! assert_eq!(x.found_by, FoundBy::Pass(Criterion::PowerOf2Aligned));
//! assert_eq!(x.extent.start % 256, 0); // buddy chunks are aligned
//! a.free(x.extent.start, 256)?;
//! a.check_consistency().unwrap();
//! # Ok::<(), mballoc::Error>(())
//! ```

#![forbid(unsafe_code)]

mod allocator;
mod bits;
mod buddy;
mod buddy_load;
mod builder;
mod context;
mod criteria;
mod error;
mod geometry;
mod group;
mod list_scan;
mod order_index;
mod order_lists;
mod policy;
mod range_ops;
pub mod report;
mod request;
mod scan;
mod spread;
mod stats;
mod stream_goal;
mod sync;
mod tunables;
mod verify;

pub use allocator::Allocator;
pub use buddy::{fragment_size_bucket, Buddy, GroupInfo, MAX_ORDERS};
pub use builder::AllocatorBuilder;
pub use criteria::{Criterion, GroupSummary, NUM_CRITERIA};
pub use error::{Error, Result};
pub use geometry::{Geometry, MAX_GROUPS};
pub use order_index::IndexKind;
pub use policy::{
    GoalInfo, Groups, KernelPolicy, KernelPolicyBeforeBestAvail, Passes, Pick, Policy, RequestInfo, WindowInfo,
};
pub use request::{AllocKind, AllocRequest, Allocation, Extent, FoundBy, GoalPolicy};
pub use stats::MbStats;
pub use stream_goal::Concurrency;
pub use tunables::{BestAvailFloor, LinearBestAvail, OptimizeScan, OrderLists, ShortRuns, Tunables};
pub use verify::Violation;

// Thread safety, checked when the crate compiles: an `Allocator` is shared
// by every allocating thread (`&Allocator` is all a request needs), and
// everything it hands out or is built from moves between threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Allocator>();
    send_sync::<AllocatorBuilder>();
    send_sync::<Geometry>();
    send_sync::<Tunables>();
    send_sync::<AllocRequest>();
    send_sync::<Allocation>();
    send_sync::<MbStats>();
    send_sync::<Error>();
};
