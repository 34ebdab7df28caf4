//! ext4's free-block, free-inode and directory counts as its inode
//! allocator reads them: per-CPU counters, whose shared value takes a
//! CPU's changes only once they add up to the batch (32 on a machine of up
//! to 16 CPUs). Orlov compares a flex group's exact count with the
//! average of the shared value, so on a volume of one flex group a top
//! directory stays in it only while that value is exact; the lab runs
//! ext4 on one CPU, so one CPU's share is modelled.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// One per-CPU counter seen from one CPU.
#[derive(Debug, Clone, Copy, Default)]
struct Counter {
    shared: i64,
    local: i64,
}

impl Counter {
    fn add(&mut self, amount: i64, batch: i64) {
        let local = self.local + amount;
        if local.abs() >= batch {
            self.shared += local;
            self.local = 0;
        } else {
            self.local = local;
        }
    }

    fn read_positive(&self) -> u64 {
        self.shared.max(0) as u64
    }
}

#[derive(Debug, Clone, Copy)]
struct Counters {
    batch: i64,
    free_blocks: Counter,
    free_inodes: Counter,
    dirs: Counter,
}

/// The shared values, as `percpu_counter_read_positive` returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SharedCounts {
    pub free_blocks: u64,
    pub free_inodes: u64,
    pub dirs: u64,
}

/// Off until [`Ext4Counters::start`]: until then an event costs one
/// relaxed load, and no thread shares a cache line it writes.
#[derive(Debug, Default)]
pub(crate) struct Ext4Counters {
    on: AtomicBool,
    counters: Mutex<Option<Counters>>,
}

impl Ext4Counters {
    /// Start counting from exact values (ext4 sets them at mount).
    pub(crate) fn start(&self, batch: u32, exact: SharedCounts) {
        let c = |v: u64| Counter { shared: v as i64, local: 0 };
        *self.counters.lock() = Some(Counters {
            batch: i64::from(batch.max(1)),
            free_blocks: c(exact.free_blocks),
            free_inodes: c(exact.free_inodes),
            dirs: c(exact.dirs),
        });
        self.on.store(true, Ordering::Release);
    }

    pub(crate) fn read(&self) -> Option<SharedCounts> {
        self.counters.lock().map(|c| SharedCounts {
            free_blocks: c.free_blocks.read_positive(),
            free_inodes: c.free_inodes.read_positive(),
            dirs: c.dirs.read_positive(),
        })
    }

    /// Blocks taken (negative) or freed (positive) by one call.
    pub(crate) fn blocks(&self, amount: i64) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        if let Some(c) = self.counters.lock().as_mut() {
            let b = c.batch;
            c.free_blocks.add(amount, b);
        }
    }

    /// An inode taken (`-1`) or freed (`+1`), a directory or not.
    pub(crate) fn inode(&self, amount: i64, directory: bool) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        if let Some(c) = self.counters.lock().as_mut() {
            let b = c.batch;
            c.free_inodes.add(amount, b);
            if directory {
                c.dirs.add(-amount, b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_value_lags_until_a_batch_adds_up() {
        let c = Ext4Counters::default();
        c.blocks(-1);
        assert_eq!(c.read(), None, "off until started");
        c.start(32, SharedCounts { free_blocks: 10_000, free_inodes: 100, dirs: 2 });
        for _ in 0..31 {
            c.blocks(-1);
        }
        assert_eq!(c.read().unwrap().free_blocks, 10_000);
        c.blocks(-1);
        assert_eq!(c.read().unwrap().free_blocks, 9_968);
        c.blocks(-2048);
        assert_eq!(c.read().unwrap().free_blocks, 7_920);
        c.inode(-1, true);
        assert_eq!((c.read().unwrap().free_inodes, c.read().unwrap().dirs), (100, 2));
    }
}
