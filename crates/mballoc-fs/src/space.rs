//! Space accounting: what can still be promised.
//!
//! ext4 checks free space *before* it allocates (`ext4_claim_free_clusters`)
//! so that writeback of delayed data can never fail. The same model here:
//!
//! * `claimable` is the kernel's free-clusters counter minus its dirty
//!   counter: blocks owned by no file and not yet promised to anyone. Blocks
//!   held unused in preallocations and blocks waiting for a commit count as
//!   claimable, because both can be recovered (discard, commit) when an
//!   allocation needs them.
//! * `reserved` is what has been promised but not yet mapped: delayed blocks
//!   and the holes of an `fallocate` in progress.
//!
//! At rest, `claimable + reserved = allocator free + preallocated unused +
//! pending frees`, an identity the checker verifies. A claim fails only when
//! `claimable` cannot cover it, which is the only honest reason for NoSpace.

use crate::error::{FsError, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// The two counters.
#[derive(Debug, Default)]
pub struct Space {
    claimable: AtomicU64,
    reserved: AtomicU64,
}

impl Space {
    /// Start with `free` claimable blocks.
    pub fn new(free: u64) -> Self {
        Space { claimable: AtomicU64::new(free), reserved: AtomicU64::new(0) }
    }

    /// Blocks that can still be promised.
    pub fn claimable(&self) -> u64 {
        self.claimable.load(Ordering::Acquire)
    }

    /// Blocks promised and not yet mapped.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// Promise `n` blocks, or fail without changing anything.
    pub fn claim(&self, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.claimable
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| c.checked_sub(n))
            .map_err(|available| FsError::NoSpace { needed: n, available })?;
        self.reserved.fetch_add(n, Ordering::AcqRel);
        Ok(())
    }

    /// `n` promised blocks are now mapped by a file.
    pub fn settle(&self, n: u64) {
        let before = self.reserved.fetch_sub(n, Ordering::AcqRel);
        assert!(before >= n, "settling {n} blocks with only {before} reserved");
    }

    /// `n` promised blocks are no longer needed (delayed data truncated away).
    pub fn unclaim(&self, n: u64) {
        self.settle(n);
        self.claimable.fetch_add(n, Ordering::AcqRel);
    }

    /// `n` mapped blocks left their file.
    pub fn release(&self, n: u64) {
        self.claimable.fetch_add(n, Ordering::AcqRel);
    }
}
