//! A record of every allocation request the file layer makes and what it
//! got, in order: what ext4's `ext4_request_blocks` and
//! `ext4_allocate_blocks` tracepoints report, so a run of the engine can
//! be set beside a kernel trace request by request. Off unless asked for
//! ([`Fs::record_allocations`](crate::Fs::record_allocations)).

use mballoc::FoundBy;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// How a request was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedBy {
    /// From the file's own preallocation.
    InodePreallocation,
    /// From the locality group's preallocation.
    GroupPreallocation,
    /// By the allocator: at the goal, or by a pass.
    Allocator(FoundBy),
    /// Not at all (no space).
    Failed,
}

/// What a request was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// File data (`HINT_DATA`).
    Data,
    /// An extent-tree block.
    ExtentTree,
    /// A directory block.
    Directory,
}

/// One request and its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocEvent {
    /// The file.
    pub ino: u64,
    /// First logical block asked for (0 for a tree block).
    pub logical: u64,
    /// Blocks asked for, before normalization.
    pub len: u32,
    /// The goal block.
    pub goal: u64,
    /// Data or a tree block.
    pub purpose: Purpose,
    /// `(first block, blocks)` the caller got.
    pub result: Option<(u64, u32)>,
    /// How.
    pub served_by: ServedBy,
}

/// The log; pushing costs one relaxed load while it is off.
#[derive(Debug, Default)]
pub(crate) struct AllocLog {
    on: AtomicBool,
    events: Mutex<Vec<AllocEvent>>,
}

impl AllocLog {
    pub(crate) fn start(&self) {
        self.events.lock().clear();
        self.on.store(true, Ordering::Release);
    }

    pub(crate) fn take(&self) -> Vec<AllocEvent> {
        std::mem::take(&mut *self.events.lock())
    }

    #[inline(always)]
    pub(crate) fn push(&self, e: impl FnOnce() -> AllocEvent) {
        if self.on.load(Ordering::Relaxed) {
            self.events.lock().push(e());
        }
    }
}
