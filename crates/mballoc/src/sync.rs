//! The atomics of the lock-free pieces, swapped for loom's under `--cfg loom`
//! so the model tests explore every interleaving of them.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64};
