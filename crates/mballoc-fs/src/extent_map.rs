//! A file's extent map: logical block → physical block, length, state.
//!
//! Records follow ext4's extent rules: neighbours that are contiguous both
//! logically and physically and share a state merge into one record, up to
//! 32,768 blocks for a written extent and 32,767 for an unwritten one (the
//! on-disk length field reserves its top bit for the unwritten flag).

use std::collections::BTreeMap;

/// Longest written extent one record can hold (`EXT_INIT_MAX_LEN`).
pub const MAX_WRITTEN_LEN: u32 = 1 << 15;
/// Longest unwritten extent one record can hold (`EXT_UNWRITTEN_MAX_LEN`).
pub const MAX_UNWRITTEN_LEN: u32 = (1 << 15) - 1;

/// Whether an extent's blocks hold data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtentState {
    /// Allocated and written: reads return the data.
    Written,
    /// Allocated by `fallocate` and never written: reads return zeroes.
    Unwritten,
}

impl ExtentState {
    /// The longest record of this state.
    pub fn max_len(self) -> u32 {
        match self {
            ExtentState::Written => MAX_WRITTEN_LEN,
            ExtentState::Unwritten => MAX_UNWRITTEN_LEN,
        }
    }
}

/// One record of a file's mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MappedExtent {
    /// First logical block.
    pub logical: u64,
    /// First physical block.
    pub physical: u64,
    /// Number of blocks.
    pub len: u32,
    /// Written or unwritten.
    pub state: ExtentState,
}

impl MappedExtent {
    /// One past the last logical block.
    pub fn logical_end(&self) -> u64 {
        self.logical + u64::from(self.len)
    }
    /// The physical block that backs logical block `l` (which must be inside).
    pub fn physical_of(&self, l: u64) -> u64 {
        debug_assert!(l >= self.logical && l < self.logical_end());
        self.physical + (l - self.logical)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rec {
    physical: u64,
    len: u32,
    state: ExtentState,
}

/// The extent map of one file.
#[derive(Debug, Clone, Default)]
pub struct ExtentMap {
    recs: BTreeMap<u64, Rec>,
    blocks: u64,
}

impl ExtentMap {
    /// An empty map.
    pub fn new() -> Self {
        ExtentMap::default()
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    /// Number of mapped blocks.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// All records, ascending.
    pub fn iter(&self) -> impl Iterator<Item = MappedExtent> + '_ {
        self.recs.iter().map(|(&l, r)| MappedExtent { logical: l, physical: r.physical, len: r.len, state: r.state })
    }

    fn at(&self, l: u64, r: &Rec) -> MappedExtent {
        let _ = self;
        MappedExtent { logical: l, physical: r.physical, len: r.len, state: r.state }
    }

    /// The record containing logical block `l`.
    pub fn find(&self, l: u64) -> Option<MappedExtent> {
        self.recs.range(..=l).next_back().map(|(&k, r)| self.at(k, r)).filter(|e| e.logical_end() > l)
    }

    /// The record that starts at or before `l` and is nearest to it.
    pub fn left_of(&self, l: u64) -> Option<MappedExtent> {
        self.recs.range(..=l).next_back().map(|(&k, r)| self.at(k, r))
    }

    /// The first record that starts after `l`.
    pub fn right_of(&self, l: u64) -> Option<MappedExtent> {
        self.recs.range(l.saturating_add(1)..).next().map(|(&k, r)| self.at(k, r))
    }

    /// The records overlapping `[start, end)`, clipped to it.
    pub fn overlapping(&self, start: u64, end: u64) -> Vec<MappedExtent> {
        let mut v: Vec<MappedExtent> = self
            .recs
            .range(..end)
            .rev()
            .map(|(&k, r)| self.at(k, r))
            .take_while(|e| e.logical_end() > start)
            .map(|e| clip(e, start, end))
            .collect();
        v.reverse();
        v
    }

    /// The holes of `[start, end)`, ascending.
    pub fn holes(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        crate::ranges::gaps_between(
            start,
            end,
            self.overlapping(start, end).iter().map(|e| (e.logical, e.logical_end())),
        )
    }

    /// Map `[logical, +len)` to `[physical, +len)`. The logical range must be
    /// a hole (the file layer only maps holes).
    pub fn insert(&mut self, logical: u64, physical: u64, len: u32, state: ExtentState) {
        assert!(len > 0, "mapping an empty extent");
        assert!(
            self.overlapping(logical, logical + u64::from(len)).is_empty(),
            "mapping [{logical}, +{len}) over mapped blocks"
        );
        let mut left = len;
        let (mut l, mut p) = (logical, physical);
        while left > 0 {
            let take = left.min(state.max_len());
            self.recs.insert(l, Rec { physical: p, len: take, state });
            self.merge_around(l);
            l += u64::from(take);
            p += u64::from(take);
            left -= take;
        }
        self.blocks += u64::from(len);
    }

    /// Unmap `[start, end)`; returns the pieces removed (clipped), ascending.
    pub fn remove(&mut self, start: u64, end: u64) -> Vec<MappedExtent> {
        let pieces = self.overlapping(start, end);
        for piece in &pieces {
            let whole = self.find(piece.logical).expect("piece of a record");
            self.recs.remove(&whole.logical);
            if whole.logical < piece.logical {
                let n = (piece.logical - whole.logical) as u32;
                self.recs.insert(whole.logical, Rec { physical: whole.physical, len: n, state: whole.state });
            }
            if whole.logical_end() > piece.logical_end() {
                let n = (whole.logical_end() - piece.logical_end()) as u32;
                let l = piece.logical_end();
                self.recs.insert(l, Rec { physical: whole.physical_of(l), len: n, state: whole.state });
            }
            self.blocks -= u64::from(piece.len);
        }
        pieces
    }

    /// Mark the unwritten blocks of `[start, end)` written (a write into
    /// preallocated space); returns how many blocks changed state.
    pub fn convert_to_written(&mut self, start: u64, end: u64) -> u64 {
        let mut changed = 0;
        for piece in self.overlapping(start, end) {
            if piece.state != ExtentState::Unwritten {
                continue;
            }
            self.remove(piece.logical, piece.logical_end());
            self.insert(piece.logical, piece.physical, piece.len, ExtentState::Written);
            changed += u64::from(piece.len);
        }
        changed
    }

    /// Merge the record at `l` with its neighbours where the extent rules
    /// allow.
    fn merge_around(&mut self, l: u64) {
        let mut key = l;
        if let Some((&pk, &p)) = self.recs.range(..key).next_back() {
            let cur = self.recs[&key];
            if mergeable(pk, &p, key, &cur) {
                self.recs.remove(&key);
                self.recs.get_mut(&pk).expect("left record").len += cur.len;
                key = pk;
            }
        }
        let cur = self.recs[&key];
        let next_key = key + u64::from(cur.len);
        if let Some(&n) = self.recs.get(&next_key) {
            if mergeable(key, &cur, next_key, &n) {
                self.recs.remove(&next_key);
                self.recs.get_mut(&key).expect("record").len += n.len;
            }
        }
    }
}

fn mergeable(lk: u64, l: &Rec, rk: u64, r: &Rec) -> bool {
    l.state == r.state
        && lk + u64::from(l.len) == rk
        && l.physical + u64::from(l.len) == r.physical
        && l.len + r.len <= l.state.max_len()
}

fn clip(e: MappedExtent, start: u64, end: u64) -> MappedExtent {
    let s = e.logical.max(start);
    let t = e.logical_end().min(end);
    MappedExtent { logical: s, physical: e.physical_of(s), len: (t - s) as u32, state: e.state }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ExtentState::*;

    #[test]
    fn adjacent_records_merge_and_split() {
        let mut m = ExtentMap::new();
        m.insert(0, 100, 10, Written);
        m.insert(10, 110, 5, Written);
        m.insert(15, 200, 5, Written);
        assert_eq!(m.len(), 2);
        assert_eq!(m.blocks(), 20);
        let removed = m.remove(5, 17);
        assert_eq!(
            removed.iter().map(|e| (e.logical, e.physical, e.len)).collect::<Vec<_>>(),
            vec![(5, 105, 10), (15, 200, 2)]
        );
        assert_eq!(
            m.iter().map(|e| (e.logical, e.physical, e.len)).collect::<Vec<_>>(),
            vec![(0, 100, 5), (17, 202, 3)]
        );
        assert_eq!(m.holes(0, 25), vec![(5, 17), (20, 25)]);
    }

    #[test]
    fn states_do_not_merge_until_converted() {
        let mut m = ExtentMap::new();
        m.insert(0, 50, 4, Unwritten);
        m.insert(4, 54, 4, Written);
        assert_eq!(m.len(), 2);
        assert_eq!(m.convert_to_written(0, 2), 2);
        assert_eq!(m.len(), 3);
        assert_eq!(m.convert_to_written(2, 4), 2);
        assert_eq!(m.len(), 1);
        assert_eq!(m.find(7).map(|e| (e.logical, e.len, e.state)), Some((0, 8, Written)));
    }

    #[test]
    fn records_respect_the_length_limits() {
        let mut m = ExtentMap::new();
        m.insert(0, 0, MAX_WRITTEN_LEN, Written);
        m.insert(u64::from(MAX_WRITTEN_LEN), u64::from(MAX_WRITTEN_LEN), 10, Written);
        assert_eq!(m.len(), 2);
        let mut u = ExtentMap::new();
        u.insert(0, 0, 40_000, Unwritten);
        assert_eq!(u.iter().map(|e| e.len).collect::<Vec<_>>(), vec![MAX_UNWRITTEN_LEN, 40_000 - MAX_UNWRITTEN_LEN]);
    }
}
