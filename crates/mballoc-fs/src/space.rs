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

//!
//! Both counters are split per CPU, as the kernel's percpu counters are: a
//! CPU claims from a pool of its own, refilled from the shared count a batch
//! at a time, so a claim normally writes no cache line another CPU uses.
//! When the shared count cannot cover a refill, the claim drains every pool
//! under one lock and decides exactly: NoSpace is never a counting artefact.

use crate::error::{FsError, Result};
use crate::percpu::PerCpu;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// The two counters.
pub struct Space {
    /// Claimable blocks in no CPU's pool.
    shared: AtomicU64,
    /// Claimable blocks cached per CPU.
    pools: PerCpu<AtomicU64>,
    /// Promised blocks, per CPU (a CPU may settle what another promised).
    reserved: PerCpu<AtomicI64>,
    /// Blocks moved into a pool at a time.
    batch: u64,
    /// Held while the pools are drained for an exact decision.
    exact: Mutex<()>,
    /// Set while draining: refills wait for the exact path instead.
    draining: AtomicBool,
}

impl std::fmt::Debug for Space {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Space").field("claimable", &self.claimable()).field("reserved", &self.reserved()).finish()
    }
}

impl Space {
    /// Start with `free` claimable blocks.
    pub fn new(free: u64) -> Self {
        Space {
            shared: AtomicU64::new(free),
            pools: PerCpu::default(),
            reserved: PerCpu::default(),
            batch: (free / 1024).clamp(1, 1024),
            exact: Mutex::new(()),
            draining: AtomicBool::new(false),
        }
    }

    /// Blocks that can still be promised.
    pub fn claimable(&self) -> u64 {
        self.shared.load(Ordering::Acquire) + self.pools.iter().map(|p| p.load(Ordering::Acquire)).sum::<u64>()
    }

    /// Blocks promised and not yet mapped.
    pub fn reserved(&self) -> u64 {
        let r: i64 = self.reserved.iter().map(|r| r.load(Ordering::Acquire)).sum();
        debug_assert!(r >= 0, "reserved sums to {r}");
        r.max(0) as u64
    }

    /// Promise `n` blocks, or fail without changing anything.
    pub fn claim(&self, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let pool = self.pools.local();
        let fast = pool.fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| p.checked_sub(n)).is_ok()
            || (!self.draining.load(Ordering::Acquire) && self.refill(pool, n));
        if !fast {
            self.claim_exact(n)?;
        }
        self.reserved.local().fetch_add(n as i64, Ordering::AcqRel);
        Ok(())
    }

    /// Take `n` plus a batch for the pool from the shared count.
    fn refill(&self, pool: &AtomicU64, n: u64) -> bool {
        let take = n + self.batch;
        if self.shared.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| s.checked_sub(take)).is_err() {
            return false;
        }
        pool.fetch_add(self.batch, Ordering::AcqRel);
        true
    }

    /// Drain every pool into the shared count and claim from it exactly.
    fn claim_exact(&self, n: u64) -> Result<()> {
        let _only = self.exact.lock();
        self.draining.store(true, Ordering::Release);
        let result = loop {
            if self.shared.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| s.checked_sub(n)).is_ok() {
                break Ok(());
            }
            // A refill that started before `draining` was set may still land
            // in a pool: drain until a round finds nothing.
            let drained: u64 = self.pools.iter().map(|p| p.swap(0, Ordering::AcqRel)).sum();
            if drained == 0 {
                break Err(FsError::NoSpace { needed: n, available: self.shared.load(Ordering::Acquire) });
            }
            self.shared.fetch_add(drained, Ordering::AcqRel);
        };
        self.draining.store(false, Ordering::Release);
        result
    }

    /// `n` promised blocks are now mapped by a file.
    pub fn settle(&self, n: u64) {
        self.reserved.local().fetch_sub(n as i64, Ordering::AcqRel);
    }

    /// `n` promised blocks are no longer needed (delayed data truncated away).
    pub fn unclaim(&self, n: u64) {
        self.settle(n);
        self.release(n);
    }

    /// `n` blocks became claimable again (they left their file).
    pub fn release(&self, n: u64) {
        let pool = self.pools.local();
        let now = pool.fetch_add(n, Ordering::AcqRel) + n;
        // Keep pools small: what a CPU frees beyond two batches is for everyone.
        if now > 2 * self.batch {
            if let Ok(prev) =
                pool.fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| (p > self.batch).then_some(self.batch))
            {
                self.shared.fetch_add(prev - self.batch, Ordering::AcqRel);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_exact_at_the_edge() {
        let s = Space::new(10_000);
        s.claim(9_000).unwrap();
        assert_eq!(s.claimable(), 1_000);
        assert!(matches!(s.claim(1_001), Err(FsError::NoSpace { needed: 1_001, available: 1_000 })));
        s.claim(1_000).unwrap();
        assert_eq!((s.claimable(), s.reserved()), (0, 10_000));
        s.settle(10_000);
        s.release(5_000);
        assert_eq!(s.claimable(), 5_000);
        s.claim(5_000).unwrap();
        assert_eq!(s.claimable(), 0);
    }

    #[test]
    fn threads_never_overcommit() {
        let s = std::sync::Arc::new(Space::new(4_000));
        let got: u64 = (0..4)
            .map(|_| {
                let s = std::sync::Arc::clone(&s);
                std::thread::spawn(move || (0..3_000).filter(|_| s.claim(1).is_ok()).count() as u64)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(got, 4_000);
        assert_eq!(s.claimable(), 0);
        assert_eq!(s.reserved(), 4_000);
    }
}
