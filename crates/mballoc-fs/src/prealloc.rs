//! Preallocations: blocks taken from the allocator ahead of need.
//!
//! Accounting follows mballoc's model: a preallocated block is *used* in the
//! allocator (nobody else can get it) but belongs to no file yet. Every
//! block the allocator shows as used is therefore either mapped by a file,
//! unused inside a preallocation, or waiting in a transaction to be freed.
//!
//! * An **inode preallocation** belongs to one file and covers a logical
//!   range: logical block `l` inside it may only ever be backed by
//!   `pstart + (l - lstart)`. Its unused blocks are kept as a set, so a file
//!   written out of order consumes it out of order and a discard returns
//!   exactly the blocks no file maps.
//! * A **locality-group preallocation** is a run shared by the small files a
//!   CPU writes; it is consumed strictly front to back. Each locality group
//!   keeps its runs in ten buckets by `floor(log2(free))`, ascending by free
//!   within a bucket; a bucket that grows past eight runs is trimmed to five
//!   (smallest first), so the pools never hoard.

use crate::ranges::RangeSet;
use std::collections::BTreeMap;

/// Number of locality-group buckets (`PREALLOC_TB_SIZE`).
pub const LG_BUCKETS: usize = 10;
/// A bucket longer than this is trimmed.
const LG_BUCKET_MAX: usize = 8;
/// ... down to this many runs.
const LG_BUCKET_KEEP: usize = 5;

/// One file's preallocation over `[lstart, lstart + len)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodePa {
    /// First logical block covered.
    pub lstart: u64,
    /// Physical block backing `lstart`.
    pub pstart: u64,
    /// Blocks covered.
    pub len: u32,
    /// Logical blocks not yet handed to the file.
    pub unused: RangeSet,
}

impl InodePa {
    /// One past the last logical block covered.
    pub fn lend(&self) -> u64 {
        self.lstart + u64::from(self.len)
    }
    /// Physical block behind logical block `l`.
    pub fn physical_of(&self, l: u64) -> u64 {
        self.pstart + (l - self.lstart)
    }
}

/// The preallocations of one file, keyed by logical start; they never overlap.
#[derive(Debug, Clone, Default)]
pub struct InodePas {
    pas: BTreeMap<u64, InodePa>,
}

impl InodePas {
    /// True when the file holds no preallocation.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pas.is_empty()
    }

    /// The preallocations, ascending.
    pub fn iter(&self) -> impl Iterator<Item = &InodePa> {
        self.pas.values()
    }

    /// Unused blocks over all preallocations.
    #[cfg(test)]
    pub fn unused_blocks(&self) -> u64 {
        self.pas.values().map(|p| p.unused.len()).sum()
    }

    /// End of the nearest preallocation starting at or before `l`, and the
    /// start of the nearest one after it: the bounds a new window must keep.
    pub fn bounds_around(&self, l: u64) -> (Option<u64>, Option<u64>) {
        let left = self.pas.range(..=l).next_back().map(|(_, p)| p.lend());
        let right = self.pas.range(l + 1..).next().map(|(&s, _)| s);
        (left, right)
    }

    /// Take up to `len` blocks for logical block `l` from the preallocation
    /// covering it: `(physical, got)`. The blocks handed out are the unused
    /// run starting at `l`, which always exists when `l` is a hole of the
    /// file (nothing else ever consumes a file's preallocation). A drained
    /// preallocation is removed.
    pub fn take(&mut self, l: u64, len: u32) -> Option<(u64, u32)> {
        let (&key, pa) = self.pas.range_mut(..=l).next_back()?;
        if l >= pa.lend() {
            return None;
        }
        let (_, run_end) =
            pa.unused.run_containing(l).unwrap_or_else(|| panic!("hole at logical {l} inside a used preallocation"));
        let got = (run_end - l).min(u64::from(len)) as u32;
        pa.unused.remove(l, l + u64::from(got));
        let physical = pa.physical_of(l);
        if pa.unused.is_empty() {
            self.pas.remove(&key);
        }
        Some((physical, got))
    }

    /// Add a new preallocation, all of it unused.
    pub fn insert(&mut self, lstart: u64, pstart: u64, len: u32) {
        debug_assert!(self.bounds_around(lstart).0.is_none_or(|e| e <= lstart));
        let mut unused = RangeSet::new();
        unused.insert(lstart, lstart + u64::from(len));
        self.pas.insert(lstart, InodePa { lstart, pstart, len, unused });
    }

    /// Remove every preallocation; returns the physical runs nobody uses.
    pub fn drain(&mut self) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        for pa in std::mem::take(&mut self.pas).into_values() {
            for (s, e) in pa.unused.iter() {
                runs.push((pa.physical_of(s), e - s));
            }
        }
        runs
    }
}

/// A locality-group run `[pstart, pstart + free)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupPa {
    /// Next block to hand out.
    pub pstart: u64,
    /// Blocks left.
    pub free: u32,
}

impl GroupPa {
    /// The run as `(first block, blocks)`.
    pub fn run(&self) -> (u64, u64) {
        (self.pstart, u64::from(self.free))
    }
}

/// One CPU's pool of small-file runs.
#[derive(Debug, Clone, Default)]
pub struct LocalityGroup {
    buckets: [Vec<GroupPa>; LG_BUCKETS],
}

fn bucket_of(free: u32) -> usize {
    ((31 - free.leading_zeros()) as usize).min(LG_BUCKETS - 1)
}

impl LocalityGroup {
    /// Unused blocks in the pool.
    #[cfg(test)]
    pub fn free_blocks(&self) -> u64 {
        self.buckets.iter().flatten().map(|p| u64::from(p.free)).sum()
    }

    /// The runs, by bucket.
    pub fn iter(&self) -> impl Iterator<Item = &GroupPa> {
        self.buckets.iter().flatten()
    }

    /// Take `len` blocks from the run closest to `goal` among those with at
    /// least `len` free (earlier candidates win ties). Returns the first
    /// block, plus the runs trimmed away (to be returned to the allocator).
    pub fn take(&mut self, len: u32, goal: u64) -> Option<(u64, Vec<GroupPa>)> {
        let mut best: Option<(usize, usize, u64)> = None;
        for b in bucket_of(len)..LG_BUCKETS {
            for (i, pa) in self.buckets[b].iter().enumerate() {
                if pa.free < len {
                    continue;
                }
                let d = pa.pstart.abs_diff(goal);
                if best.is_none_or(|(_, _, bd)| d < bd) {
                    best = Some((b, i, d));
                }
            }
        }
        let (b, i, _) = best?;
        let mut pa = self.buckets[b].remove(i);
        let start = pa.pstart;
        pa.pstart += u64::from(len);
        pa.free -= len;
        let trimmed = if pa.free > 0 { self.add_and_trim(pa) } else { Vec::new() };
        Some((start, trimmed))
    }

    /// Insert a run into its bucket in ascending-free order; if the bucket
    /// now holds more than eight runs, remove the smallest until five remain
    /// and return them.
    pub fn add_and_trim(&mut self, pa: GroupPa) -> Vec<GroupPa> {
        assert!(pa.free > 0, "empty locality-group run");
        let bucket = &mut self.buckets[bucket_of(pa.free)];
        let at = bucket.iter().position(|p| p.free > pa.free).unwrap_or(bucket.len());
        bucket.insert(at, pa);
        if bucket.len() > LG_BUCKET_MAX {
            let n = bucket.len() - LG_BUCKET_KEEP;
            return bucket.drain(..n).collect();
        }
        Vec::new()
    }

    /// Remove every run.
    pub fn drain(&mut self) -> Vec<GroupPa> {
        self.buckets.iter_mut().flat_map(std::mem::take).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_pa_is_consumed_out_of_order() {
        let mut pas = InodePas::default();
        pas.insert(0, 1000, 16);
        assert_eq!(pas.take(4, 2), Some((1004, 2)));
        assert_eq!(pas.take(0, 10), Some((1000, 4)));
        assert_eq!(pas.take(16, 1), None);
        assert_eq!(pas.unused_blocks(), 10);
        assert_eq!(pas.bounds_around(20), (Some(16), None));
        assert_eq!(pas.drain(), vec![(1006, 10)]);
        assert!(pas.is_empty());
    }

    #[test]
    fn lg_picks_the_closest_run_and_trims_buckets() {
        let mut lg = LocalityGroup::default();
        assert!(lg.add_and_trim(GroupPa { pstart: 100, free: 20 }).is_empty());
        assert!(lg.add_and_trim(GroupPa { pstart: 5000, free: 30 }).is_empty());
        let (start, trimmed) = lg.take(4, 4900).expect("a run");
        assert_eq!(start, 5000);
        assert!(trimmed.is_empty());
        assert_eq!(lg.free_blocks(), 46);
        let mut trimmed = Vec::new();
        for i in 0..7 {
            trimmed.extend(lg.add_and_trim(GroupPa { pstart: 10_000 + 100 * i, free: 17 + i as u32 }));
        }
        assert_eq!(trimmed.iter().map(|p| p.free).collect::<Vec<_>>(), vec![17, 18, 19, 20]);
        // Bucket 4 (16..31 free) now holds 9 runs: trimmed to 5, smallest first.
        let frees: Vec<u32> = lg.iter().map(|p| p.free).collect();
        assert_eq!(frees.len(), 5, "{frees:?}");
        assert!(frees.windows(2).all(|w| w[0] <= w[1]));
    }
}
