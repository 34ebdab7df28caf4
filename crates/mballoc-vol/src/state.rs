//! The committed state: every file's size and extents, and the block
//! bitmaps, exactly as the journal and the home areas say together. It is
//! what a mount would find, so a checkpoint writes it home and a replay
//! rebuilds it. The engine's live state runs ahead of it (delayed data,
//! preallocations, uncommitted changes); the two meet at each commit.

use crate::format::{Extent, MAX_ENTRY_LEN, MAX_LOGICAL};
use crate::names::Attr;
use crate::wal::Record;
use mballoc_fs::IdMap;
use mballoc_fs::{Change, ExtentState};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A file as committed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileState {
    pub size: u64,
    /// By first logical block: `(physical, len, unwritten)`.
    pub extents: BTreeMap<u64, (u64, u64, bool)>,
    /// Its inode slot, once a checkpoint gave it one.
    pub slot: Option<u32>,
    /// The tree blocks its on-disk inode points at.
    pub tree: Vec<u64>,
    /// Its name and attributes; `None` between the engine's create and
    /// the name's record.
    pub attr: Option<Attr>,
}

impl FileState {
    /// Entries its extent tree holds (extents longer than one entry can
    /// hold count for several).
    pub fn entries(&self) -> u64 {
        self.extents.values().map(|&(_, len, _)| len.div_ceil(MAX_ENTRY_LEN)).sum()
    }

    /// What a change does to this file's extents (not to any bitmap):
    /// the part of [`State::apply`] a prediction needs.
    fn apply_extents(&mut self, c: &Change) {
        match *c {
            Change::Create { .. } => {
                *self = FileState { slot: self.slot, tree: std::mem::take(&mut self.tree), ..FileState::default() }
            }
            Change::Unlink { .. } | Change::Size { .. } => {}
            Change::Map { logical, physical, len, state, .. } => {
                let len = u64::from(len);
                self.remove(logical, logical + len);
                self.insert(Extent { logical, physical, len, unwritten: state == ExtentState::Unwritten });
            }
            Change::Unmap { first, end, .. } => {
                self.remove(first, end);
            }
            Change::Written { first, end, .. } => {
                for mut p in self.remove(first, end) {
                    p.unwritten = false;
                    self.insert(p);
                }
            }
        }
    }

    /// Extents in logical order.
    pub fn extent_list(&self) -> Vec<Extent> {
        self.extents
            .iter()
            .map(|(&logical, &(physical, len, unwritten))| Extent { logical, physical, len, unwritten })
            .collect()
    }

    /// The parts of extents inside `[first, end)`.
    fn overlapping(&self, first: u64, end: u64) -> Vec<Extent> {
        let start_key = self.extents.range(..first).next_back().map_or(first, |(&l, _)| l);
        self.extents
            .range(start_key..end)
            .filter(|(&l, &(_, len, _))| l + len > first)
            .map(|(&l, &(p, len, unwritten))| {
                let (a, b) = (l.max(first), (l + len).min(end));
                Extent { logical: a, physical: p + (a - l), len: b - a, unwritten }
            })
            .collect()
    }

    /// Cut `[first, end)` out; returns the pieces removed.
    fn remove(&mut self, first: u64, end: u64) -> Vec<Extent> {
        let mut out = Vec::new();
        let start_key = self.extents.range(..first).next_back().map_or(first, |(&l, _)| l);
        let keys: Vec<u64> = self.extents.range(start_key..end).map(|(&l, _)| l).collect();
        for l in keys {
            let (p, len, u) = self.extents[&l];
            let e_end = l + len;
            if e_end <= first || l >= end {
                continue;
            }
            self.extents.remove(&l);
            if l < first {
                self.extents.insert(l, (p, first - l, u));
            }
            if e_end > end {
                self.extents.insert(end, (p + (end - l), e_end - end, u));
            }
            let (a, b) = (l.max(first), e_end.min(end));
            out.push(Extent { logical: a, physical: p + (a - l), len: b - a, unwritten: u });
        }
        out
    }

    /// Insert a piece whose logical range is free, merging with neighbours
    /// that continue it both ways in the same state.
    fn insert(&mut self, mut e: Extent) {
        if let Some((&l, &(p, len, u))) = self.extents.range(..e.logical).next_back() {
            if l + len == e.logical && p + len == e.physical && u == e.unwritten {
                self.extents.remove(&l);
                e = Extent { logical: l, physical: p, len: len + e.len, unwritten: u };
            }
        }
        if let Some(&(p, len, u)) = self.extents.get(&e.logical_end()) {
            if e.physical + e.len == p && u == e.unwritten {
                self.extents.remove(&e.logical_end());
                e.len += len;
            }
        }
        self.extents.insert(e.logical, (e.physical, e.len, e.unwritten));
    }
}

/// The committed state of a volume.
#[derive(Debug, Clone)]
pub struct State {
    pub files: IdMap<FileState>,
    /// Per group, bit set = in use (metadata or a file's extent).
    pub bitmaps: Vec<Vec<u64>>,
    pub blocks_per_group: u64,
    pub data_start: u64,
    pub total_blocks: u64,
    pub free: u64,
    /// Files changed since the last checkpoint.
    pub dirty_files: BTreeSet<u64>,
    /// Groups whose bitmap changed since the last checkpoint.
    pub dirty_groups: BTreeSet<u32>,
    /// Unlinked since the last checkpoint: `(slot, tree blocks)`.
    pub dropped: Vec<(u32, Vec<u64>)>,
    /// Pieces a replay moved from one file to another (see
    /// [`State::unresolved`]); empty outside a replay.
    pub stolen: Vec<Stolen>,
    /// The journal transaction being replayed, for [`Stolen::by`].
    pub replaying: Option<usize>,
}

/// Logical blocks `[first, end)` of `victim` whose physical blocks a
/// replay gave to another file. A checkpoint cut short explains that only
/// if a later change of the journal settles the victim's range again (a
/// map, unmap, create or unlink of it): the home record was then ahead of
/// the journal, and the change that made it so is still to come.
/// Unsettled at the end of the replay, the move took blocks from a file
/// whose own records say it has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stolen {
    pub victim: u64,
    pub first: u64,
    pub end: u64,
    /// The transaction whose change took them; `None` when two home
    /// records claim the same blocks.
    pub by: Option<usize>,
}

impl State {
    /// An empty volume: only `[0, data_start)` in use.
    pub fn new(total_blocks: u64, blocks_per_group: u32, data_start: u64) -> State {
        let groups = total_blocks.div_ceil(u64::from(blocks_per_group)) as usize;
        let words = (blocks_per_group as usize).div_ceil(64);
        let mut s = State {
            files: IdMap::default(),
            bitmaps: vec![vec![0; words]; groups],
            blocks_per_group: u64::from(blocks_per_group),
            data_start,
            total_blocks,
            free: total_blocks,
            dirty_files: BTreeSet::new(),
            dirty_groups: BTreeSet::new(),
            dropped: Vec::new(),
            stolen: Vec::new(),
            replaying: None,
        };
        s.set(0, data_start).expect("metadata on an empty volume");
        s.dirty_groups.clear();
        s
    }

    /// Tree entries each file `changes` touches would have after them
    /// (`None`: unlinked), computed on copies: the state is unchanged.
    /// The changes must follow this state (a live transaction).
    pub fn entries_after(&self, changes: &[Change]) -> HashMap<u64, Option<u64>> {
        // Runs of changes to one file are the rule: look the file up once
        // per run, not once per change.
        let mut scratch: Vec<(u64, Option<FileState>)> = Vec::new();
        let mut index: IdMap<usize> = IdMap::default();
        let mut at = usize::MAX;
        for c in changes {
            let ino = c.ino();
            if scratch.get(at).is_none_or(|(i, _)| *i != ino) {
                at = *index.entry(ino).or_insert_with(|| {
                    scratch.push((ino, self.files.get(&ino).cloned()));
                    scratch.len() - 1
                });
            }
            let f = &mut scratch[at].1;
            match c {
                Change::Unlink { .. } => *f = None,
                Change::Create { .. } if f.is_none() => *f = Some(FileState::default()),
                _ => {
                    if let Some(f) = f {
                        f.apply_extents(c);
                    }
                }
            }
        }
        scratch.into_iter().map(|(ino, f)| (ino, f.map(|f| f.entries()))).collect()
    }

    /// Whether block `b` is in use.
    pub fn is_used(&self, b: u64) -> bool {
        let (g, bit) = ((b / self.blocks_per_group) as usize, b % self.blocks_per_group);
        self.bitmaps[g][(bit / 64) as usize] & (1 << (bit % 64)) != 0
    }

    fn flip(&mut self, b: u64) {
        let (g, bit) = ((b / self.blocks_per_group) as usize, b % self.blocks_per_group);
        self.bitmaps[g][(bit / 64) as usize] ^= 1 << (bit % 64);
        self.dirty_groups.insert(g as u32);
    }

    /// Mark `[start, start + len)` used; every block must be free.
    pub fn set(&mut self, start: u64, len: u64) -> Result<(), String> {
        if let Some(b) = (start..start + len).find(|&b| self.is_used(b)) {
            return Err(format!("block {b} is already in use"));
        }
        (start..start + len).for_each(|b| self.flip(b));
        self.free -= len;
        Ok(())
    }

    /// Mark `[start, start + len)` free; every block is in use.
    fn clear(&mut self, start: u64, len: u64) {
        for b in start..start + len {
            assert!(self.is_used(b), "freeing block {b}, which is not in use");
            self.flip(b);
        }
        self.free += len;
    }

    /// Add a file read from its home slot. With `Apply::Replay` (the
    /// journal holds transactions, so a checkpoint may have been cut short
    /// and files may be from two checkpoints) a block another file holds
    /// moves to this one; replaying the journal then settles who owns it.
    pub fn load_file(&mut self, ino: u64, f: FileState, how: Apply) -> Result<(), String> {
        if self.files.contains_key(&ino) {
            return Err(format!("inode {ino} appears twice"));
        }
        let extents = f.extent_list();
        for e in &extents {
            self.check_physical(e)?;
            if how == Apply::Live && (e.physical..e.physical + e.len).any(|b| self.is_used(b)) {
                return Err(format!("inode {ino}: extent {}+{} overlaps another owner", e.physical, e.len));
            }
        }
        if how == Apply::Replay {
            for e in &extents {
                let owners = self.owners(Some(ino), e.physical, e.len);
                let owned: u64 = owners.iter().map(|o| o.3).sum();
                let used = (e.physical..e.physical + e.len).filter(|&b| self.is_used(b)).count() as u64;
                if owned != used {
                    return Err(format!("inode {ino}: extent {}+{} overlaps metadata", e.physical, e.len));
                }
                for (other, first, _, n) in owners {
                    self.unmap(other, first, first + n)?;
                    self.stolen.push(Stolen { victim: other, first, end: first + n, by: None });
                }
            }
        }
        for e in &extents {
            self.set(e.physical, e.len).map_err(|m| format!("inode {ino}: {m}"))?;
        }
        self.files.insert(ino, f);
        Ok(())
    }

    fn check_physical(&self, e: &Extent) -> Result<(), String> {
        let end = e.physical.checked_add(e.len);
        if e.len == 0 || e.physical < self.data_start || end.is_none_or(|x| x > self.total_blocks) {
            return Err(format!("extent {}+{} outside the data area", e.physical, e.len));
        }
        if e.logical.checked_add(e.len).is_none_or(|x| x > MAX_LOGICAL + 1) {
            return Err(format!("extent at logical {} past the largest file", e.logical));
        }
        Ok(())
    }

    fn file(&mut self, ino: u64) -> Result<&mut FileState, String> {
        self.files.get_mut(&ino).ok_or_else(|| format!("change to inode {ino}, which does not exist"))
    }

    fn unmap(&mut self, ino: u64, first: u64, end: u64) -> Result<(), String> {
        for e in self.file(ino)?.remove(first, end) {
            self.clear(e.physical, e.len);
        }
        Ok(())
    }

    /// Apply one change made live: it must follow this state exactly. An
    /// error means a bug, and nothing changed.
    pub fn apply(&mut self, c: &Change) -> Result<(), String> {
        self.apply_as(c, Apply::Live)
    }

    /// Apply one journal record made live ([`State::apply`] for an engine
    /// change; an inode's attributes replace its old ones).
    pub fn apply_record(&mut self, r: &Record) -> Result<(), String> {
        match r {
            Record::File(c) => self.apply(c),
            Record::Attr { ino, attr } => {
                self.file(*ino)?.attr = Some(attr.clone());
                self.dirty_files.insert(*ino);
                Ok(())
            }
        }
    }

    /// Apply one record read back from the journal ([`State::replay`]).
    pub fn replay_record(&mut self, r: &Record, max_size: u64) -> Result<(), String> {
        match r {
            Record::File(c) => self.replay(c, max_size),
            Record::Attr { ino, .. } => {
                self.files.entry(*ino).or_default();
                self.apply_record(r)
            }
        }
    }

    /// Apply one change read back from the journal. The home state may be
    /// ahead of the change (a checkpoint was cut short after writing some
    /// files), so a change about a file that is gone recreates it, and
    /// blocks another file holds move to this one: in both cases a later
    /// change in the journal brings the other file back to where the home
    /// state had it. For the same reason the file count may pass the inode
    /// slots in the middle of a replay: only its end is checked. An error
    /// means the change is impossible on any state (outside the data
    /// area, a size past the largest file), and nothing changed.
    pub fn replay(&mut self, c: &Change, max_size: u64) -> Result<(), String> {
        if let Change::Size { size, .. } = *c {
            if size > max_size {
                return Err(format!("size {size} passes the largest file of {max_size} bytes"));
            }
        }
        self.apply_as(c, Apply::Replay)
    }

    fn apply_as(&mut self, c: &Change, how: Apply) -> Result<(), String> {
        let ino = c.ino();
        if how == Apply::Replay && !self.stolen.is_empty() {
            self.settle(c);
        }
        if how == Apply::Replay && !self.files.contains_key(&ino) && !matches!(c, Change::Unlink { .. }) {
            if let Change::Map { logical, physical, len, .. } = *c {
                self.check_physical(&Extent { logical, physical, len: u64::from(len), unwritten: true })?;
            }
            self.files.insert(ino, FileState::default());
        }
        match *c {
            Change::Create { .. } => {
                if self.files.contains_key(&ino) {
                    self.unmap(ino, 0, u64::MAX)?;
                    let f = self.file(ino)?;
                    f.size = 0;
                    f.attr = None;
                } else {
                    self.files.entry(ino).or_default();
                }
            }
            Change::Unlink { .. } => {
                if how == Apply::Replay && !self.files.contains_key(&ino) {
                    return Ok(());
                }
                self.unmap(ino, 0, u64::MAX)?;
                let f = self.files.remove(&ino).expect("checked by unmap");
                if let Some(slot) = f.slot {
                    self.dropped.push((slot, f.tree));
                }
            }
            Change::Size { size, .. } => self.file(ino)?.size = size,
            Change::Map { logical, physical, len, state, .. } => {
                let e = Extent { logical, physical, len: u64::from(len), unwritten: state == ExtentState::Unwritten };
                self.check_physical(&e)?;
                // Check before changing anything: each new block must be
                // free, or held by the part of this file the change replaces
                // (or, replaying, by another file).
                let replaced = self.file(ino)?.overlapping(logical, e.logical_end());
                let freed = |b: u64| replaced.iter().any(|x| b >= x.physical && b < x.physical + x.len);
                let taken: Vec<u64> = (physical..physical + e.len).filter(|&b| self.is_used(b) && !freed(b)).collect();
                if !taken.is_empty() {
                    // Replaying, the blocks may be held by any file, this
                    // one too at another offset; never by metadata.
                    let owners = self.owners(None, physical, e.len);
                    let owned: u64 = owners.iter().map(|o| o.3).sum();
                    let used = (physical..physical + e.len).filter(|&b| self.is_used(b)).count() as u64;
                    if how == Apply::Live || owned != used {
                        return Err(format!("inode {ino}: block {} is already in use", taken[0]));
                    }
                    for (other, first, _, n) in owners {
                        self.unmap(other, first, first + n)?;
                        // The part of this file the change replaces is not
                        // taken from anyone.
                        let replaced = other == ino && first >= logical && first + n <= e.logical_end();
                        if !replaced {
                            self.stolen.push(Stolen { victim: other, first, end: first + n, by: self.replaying });
                        }
                    }
                }
                self.unmap(ino, logical, e.logical_end())?;
                self.set(physical, e.len).expect("checked above");
                self.file(ino)?.insert(e);
            }
            Change::Unmap { first, end, .. } | Change::Written { first, end, .. } if first > end => {
                return Err(format!("inode {ino}: range {first}..{end} runs backwards"));
            }
            Change::Unmap { first, end, .. } => self.unmap(ino, first, end)?,
            Change::Written { first, end, .. } => {
                let f = self.file(ino)?;
                let pieces = f.remove(first, end);
                for mut p in pieces {
                    p.unwritten = false;
                    f.insert(p);
                }
            }
        }
        self.dirty_files.insert(ino);
        Ok(())
    }

    /// A replayed change settles whatever of its file's range was stolen:
    /// a create or unlink the whole file, a map or unmap its range.
    fn settle(&mut self, c: &Change) {
        let (victim, first, end) = match *c {
            Change::Create { ino } | Change::Unlink { ino } => (ino, 0, u64::MAX),
            Change::Map { ino, logical, len, .. } => (ino, logical, logical + u64::from(len)),
            Change::Unmap { ino, first, end } => (ino, first, end),
            Change::Size { .. } | Change::Written { .. } => return,
        };
        let mut kept = Vec::with_capacity(self.stolen.len());
        for s in self.stolen.drain(..) {
            if s.victim != victim || s.end <= first || s.first >= end {
                kept.push(s);
                continue;
            }
            if s.first < first {
                kept.push(Stolen { end: first, ..s.clone() });
            }
            if s.end > end {
                kept.push(Stolen { first: end, ..s });
            }
        }
        self.stolen = kept;
    }

    /// What the replay moved and never settled, once the journal is
    /// done: each a block with two owners whose records are both intact,
    /// which no crash explains.
    pub fn unresolved(&self) -> &[Stolen] {
        &self.stolen
    }

    /// Pieces of files (other than `except`) inside physical
    /// `[start, start + len)`: `(ino, first logical, physical, len)`.
    fn owners(&self, except: Option<u64>, start: u64, len: u64) -> Vec<(u64, u64, u64, u64)> {
        let end = start + len;
        let mut out = Vec::new();
        for (&other, f) in &self.files {
            if Some(other) == except {
                continue;
            }
            for (&l, &(p, n, _)) in &f.extents {
                let (a, b) = (p.max(start), (p + n).min(end));
                if a < b {
                    out.push((other, l + (a - p), a, b - a));
                }
            }
        }
        out
    }
}

/// Whether a change must follow the state exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    /// Made live, or a home state with nothing to replay: exact.
    Live,
    /// Read back from the journal: the home state may be ahead.
    Replay,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_apply_and_replay_is_idempotent() {
        let mut s = State::new(4096, 1024, 100);
        let changes = [
            Change::Create { ino: 12 },
            Change::Map { ino: 12, logical: 0, physical: 200, len: 10, state: ExtentState::Unwritten },
            Change::Written { ino: 12, first: 0, end: 4 },
            Change::Size { ino: 12, size: 40960 },
            Change::Unmap { ino: 12, first: 2, end: 3 },
            Change::Create { ino: 13 },
            Change::Map { ino: 13, logical: 0, physical: 202, len: 1, state: ExtentState::Unwritten },
        ];
        for c in &changes {
            s.apply(c).unwrap();
        }
        let once = (s.files.clone(), s.bitmaps.clone(), s.free);
        // Replaying the whole journal over the state it produced (a home
        // written by a checkpoint that was then cut short) changes nothing,
        // though block 202 moves from 13 to 12 and back on the way.
        for c in &changes {
            s.replay(c, u64::MAX).unwrap();
        }
        assert_eq!((s.files.clone(), s.bitmaps.clone(), s.free), once);
        assert_eq!(s.files[&12].extents.len(), 3);
        assert_eq!(s.free, 4096 - 100 - 10);
        // Block 203 belongs to inode 12: a change giving it to 13 is refused.
        let taken = Change::Map { ino: 13, logical: 5, physical: 203, len: 1, state: ExtentState::Unwritten };
        assert!(s.apply(&taken).is_err());
        assert_eq!((s.files.clone(), s.bitmaps.clone(), s.free), once);
        assert!(s.apply(&Change::Size { ino: 99, size: 1 }).is_err());
        // Metadata is never handed to a file, replaying or not.
        let meta = Change::Map { ino: 13, logical: 9, physical: 50, len: 1, state: ExtentState::Unwritten };
        assert!(s.replay(&meta, u64::MAX).is_err());
    }
}
