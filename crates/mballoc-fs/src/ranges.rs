//! A set of block numbers kept as disjoint, non-adjacent half-open runs.
//!
//! Used for a file's delayed-allocation blocks, its dirty unwritten blocks and
//! the unused part of an inode preallocation: all of them are "which logical
//! blocks are in this state", mostly long runs, edited by ranges.

use std::collections::BTreeMap;

/// Disjoint runs `[start, end)`, never two that touch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// start -> end.
    runs: BTreeMap<u64, u64>,
    total: u64,
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        RangeSet::default()
    }

    /// Number of blocks in the set.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Number of runs.
    pub fn runs(&self) -> u64 {
        self.runs.len() as u64
    }

    /// True when the set holds no block.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The runs, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.runs.iter().map(|(&s, &e)| (s, e))
    }

    /// First block of the set, if any.
    pub fn first(&self) -> Option<u64> {
        self.runs.keys().next().copied()
    }

    /// The run containing `x`.
    pub fn run_containing(&self, x: u64) -> Option<(u64, u64)> {
        self.runs.range(..=x).next_back().filter(|(_, &e)| e > x).map(|(&s, &e)| (s, e))
    }

    /// True when `x` is in the set.
    pub fn contains(&self, x: u64) -> bool {
        self.run_containing(x).is_some()
    }

    /// Add `[start, end)`; returns how many blocks were new.
    pub fn insert(&mut self, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        let before = self.total;
        let (mut s, mut e) = (start, end);
        // Absorb every run that overlaps or touches [s, e).
        let touching: Vec<(u64, u64)> =
            self.runs.range(..=e).rev().take_while(|(_, &re)| re >= s).map(|(&a, &b)| (a, b)).collect();
        for (rs, re) in touching {
            self.runs.remove(&rs);
            self.total -= re - rs;
            s = s.min(rs);
            e = e.max(re);
        }
        self.runs.insert(s, e);
        self.total += e - s;
        self.total - before
    }

    /// Remove `[start, end)`; returns the runs that were removed, ascending.
    pub fn remove(&mut self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut removed = Vec::new();
        if start >= end {
            return removed;
        }
        let overlapping: Vec<(u64, u64)> =
            self.runs.range(..end).rev().take_while(|(_, &re)| re > start).map(|(&a, &b)| (a, b)).collect();
        for &(rs, re) in overlapping.iter().rev() {
            self.runs.remove(&rs);
            self.total -= re - rs;
            if rs < start {
                self.runs.insert(rs, start);
                self.total += start - rs;
            }
            if re > end {
                self.runs.insert(end, re);
                self.total += re - end;
            }
            removed.push((rs.max(start), re.min(end)));
        }
        removed
    }

    /// The runs inside `[start, end)`, clipped to it, ascending.
    pub fn overlapping(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        if start >= end {
            return Vec::new();
        }
        let mut v: Vec<(u64, u64)> = self
            .runs
            .range(..end)
            .rev()
            .take_while(|(_, &re)| re > start)
            .map(|(&rs, &re)| (rs.max(start), re.min(end)))
            .collect();
        v.reverse();
        v
    }

    /// The parts of `[start, end)` not in the set, ascending.
    pub fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        gaps_between(start, end, self.overlapping(start, end))
    }

    /// Number of blocks of `[start, end)` in the set.
    pub fn count_in(&self, start: u64, end: u64) -> u64 {
        self.overlapping(start, end).iter().map(|(s, e)| e - s).sum()
    }

    /// Remove and return everything at or after `from`.
    pub fn split_off_from(&mut self, from: u64) -> Vec<(u64, u64)> {
        self.remove(from, u64::MAX)
    }
}

/// The parts of `[start, end)` that none of `runs` (ascending, disjoint,
/// inside the range) covers.
pub(crate) fn gaps_between(start: u64, end: u64, runs: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut gaps = Vec::new();
    let mut at = start;
    for (s, e) in runs {
        if s > at {
            gaps.push((at, s));
        }
        at = e;
    }
    if at < end {
        gaps.push((at, end));
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_merges_touching_and_overlapping_runs() {
        let mut r = RangeSet::new();
        assert_eq!(r.insert(10, 20), 10);
        assert_eq!(r.insert(20, 30), 10);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(10, 30)]);
        assert_eq!(r.insert(5, 12), 5);
        assert_eq!(r.insert(40, 50), 10);
        assert_eq!(r.insert(0, 100), 100 - 35);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 100)]);
        assert_eq!(r.len(), 100);
    }

    #[test]
    fn remove_splits_runs() {
        let mut r = RangeSet::new();
        r.insert(0, 10);
        r.insert(20, 30);
        assert_eq!(r.remove(5, 25), vec![(5, 10), (20, 25)]);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 5), (25, 30)]);
        assert_eq!(r.len(), 10);
        assert!(r.contains(4) && !r.contains(5) && r.contains(25));
        assert_eq!(r.count_in(0, 100), 10);
        assert_eq!(r.gaps(3, 40), vec![(5, 25), (30, 40)]);
        assert_eq!(r.split_off_from(2), vec![(2, 5), (25, 30)]);
        assert_eq!(r.len(), 2);
    }
}
