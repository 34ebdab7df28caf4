//! The tree area's budget: what the worst checkpoint from here needs,
//! and the admission of commits and writes that keep it within the area.

use super::Home;
use crate::format::MAX_ENTRY_LEN;
use crate::state::FileState;
use crate::wal;
use mballoc_fs::Change;

/// The tree area's budget: for every file, the larger of its tree on disk
/// and the tree its committed extents need. A checkpoint writes each new
/// tree while the old one still stands, one batch at a time, so it always
/// succeeds while the sum of these plus the largest of them once more fits
/// the tree area; commits and writes that would break that are refused.
#[derive(Debug, Clone, Default)]
pub(super) struct TreeBudget {
    need: mballoc_fs::IdMap<u64>,
    sum: u64,
    counts: std::collections::BTreeMap<u64, u32>,
}

impl TreeBudget {
    pub(super) fn set(&mut self, ino: u64, need: Option<u64>) {
        if let Some(old) = self.need.remove(&ino) {
            self.sum -= old;
            let c = self.counts.get_mut(&old).expect("counted");
            *c -= 1;
            if *c == 0 {
                self.counts.remove(&old);
            }
        }
        if let Some(n) = need {
            self.need.insert(ino, n);
            self.sum += n;
            *self.counts.entry(n).or_default() += 1;
        }
    }

    /// Blocks the worst checkpoint from here needs.
    pub(super) fn total(&self) -> u64 {
        self.sum + self.counts.keys().next_back().copied().unwrap_or(0)
    }

    /// [`TreeBudget::total`] as it would be with `trial`'s needs set,
    /// leaving the budget as it was.
    pub(super) fn total_with(&mut self, trial: &[(u64, Option<u64>)]) -> u64 {
        let old: Vec<(u64, Option<u64>)> = trial.iter().map(|&(ino, _)| (ino, self.need.get(&ino).copied())).collect();
        for &(ino, need) in trial {
            self.set(ino, need);
        }
        let total = self.total();
        for &(ino, need) in old.iter().rev() {
            self.set(ino, need);
        }
        total
    }
}

impl Home {
    /// Tree nodes a file needs beyond its inode.
    pub(super) fn nodes_needed(&self, entries: usize) -> u64 {
        self.sb.tree_nodes(entries as u64)
    }

    /// A file's budget: the larger of its tree on disk and the tree its
    /// committed extents need.
    pub(super) fn need_of(&self, f: &FileState) -> u64 {
        (f.tree.len() as u64).max(self.nodes_needed(f.entries() as usize) + self.attr_blocks(f))
    }

    /// Overflow blocks a file's attributes take.
    pub(super) fn attr_blocks(&self, f: &FileState) -> u64 {
        f.attr.as_ref().map_or(0, |a| self.sb.overflow_blocks(a.encoded_len()))
    }

    /// Recompute the budget of `inos` from the state (files that are gone
    /// leave it; unlinked files' trees count as dropped until a
    /// checkpoint frees them).
    pub fn refresh_budget(&mut self, inos: impl IntoIterator<Item = u64>) {
        for ino in inos {
            let need = self.state.files.get(&ino).map(|f| self.need_of(f));
            self.budget.set(ino, need);
        }
    }

    pub(super) fn dropped_nodes(&self) -> u64 {
        self.state.dropped.iter().map(|(_, t)| t.len() as u64).sum()
    }

    /// Whether committing `records` keeps every checkpoint possible:
    /// `Err((needed, tree blocks))` when it would not.
    pub fn admit(&mut self, records: &[wal::Record]) -> std::result::Result<(), (u64, u64)> {
        let changes: Vec<Change> = records.iter().filter_map(|r| r.change().copied()).collect();
        // The latest attributes each record gives, by the overflow
        // blocks they take.
        let mut attr_blocks: mballoc_fs::IdMap<u64> = Default::default();
        for r in records {
            if let wal::Record::Attr { ino, attr } = r {
                attr_blocks.insert(*ino, self.sb.overflow_blocks(attr.encoded_len()));
            }
        }
        // Cheaply first: a change adds at most two entries to its file, a
        // file's entries are at most its extents plus one per longest
        // entry the volume could hold, and a file's need enters the worst
        // checkpoint at most twice. While that fits the headroom, so does
        // the exact figure.
        let mut per_file: mballoc_fs::IdMap<u64> = Default::default();
        let mut run = (0u64, 0u64);
        for c in &changes {
            if c.ino() != run.0 && run.1 > 0 {
                *per_file.entry(run.0).or_default() += run.1;
                run.1 = 0;
            }
            run = (c.ino(), run.1 + 1);
        }
        *per_file.entry(run.0).or_default() += run.1;
        let long = self.sb.total_blocks / MAX_ENTRY_LEN + 1;
        let bound: u64 = per_file
            .iter()
            .map(|(ino, n)| {
                let now = self.state.files.get(ino).map_or(0, |f| f.extents.len() as u64);
                self.sb.tree_nodes(now + long + 2 * n)
            })
            .sum::<u64>()
            + attr_blocks.values().sum::<u64>();
        if 2 * bound <= self.headroom() {
            return Ok(());
        }
        let mut after = self.state.entries_after(&changes);
        for &ino in attr_blocks.keys() {
            if let Some(f) = self.state.files.get(&ino) {
                after.entry(ino).or_insert(Some(f.entries()));
            }
        }
        let mut dropped = self.dropped_nodes();
        let mut trial = Vec::with_capacity(after.len());
        for (&ino, entries) in &after {
            let f = self.state.files.get(&ino);
            let disk = f.map_or(0, |f| f.tree.len() as u64);
            match entries {
                Some(e) => {
                    let attr = attr_blocks.get(&ino).copied().unwrap_or_else(|| f.map_or(0, |f| self.attr_blocks(f)));
                    trial.push((ino, Some(disk.max(self.nodes_needed(*e as usize) + attr))))
                }
                None => {
                    trial.push((ino, None));
                    dropped += disk;
                }
            }
        }
        let needed = self.budget.total_with(&trial) + dropped;
        self.fits(needed)
    }

    /// Whether file `ino` may grow to `entries` tree entries (counting
    /// everything it may still gain from data not yet written back).
    pub fn admit_growth(&mut self, ino: u64, entries: u64) -> std::result::Result<(), (u64, u64)> {
        let f = self.state.files.get(&ino);
        let disk = f.map_or(0, |f| f.tree.len() as u64);
        let attr = f.map_or(0, |f| self.attr_blocks(f));
        let old = self.budget.need.get(&ino).copied().unwrap_or(0);
        let need = old.max(disk).max(self.nodes_needed(entries as usize) + attr);
        let needed = self.budget.total_with(&[(ino, Some(need))]) + self.dropped_nodes();
        self.fits(needed)
    }

    pub(super) fn fits(&self, needed: u64) -> std::result::Result<(), (u64, u64)> {
        let have = u64::from(self.sb.tree_blocks);
        if needed <= have {
            Ok(())
        } else {
            Err((needed, have))
        }
    }

    /// Tree blocks no checkpoint from here can need: while a file's
    /// tree grows by less than half of this, it fits (its need enters the
    /// sum once and the largest term at most once more).
    pub fn headroom(&self) -> u64 {
        u64::from(self.sb.tree_blocks).saturating_sub(self.budget.total() + self.dropped_nodes())
    }
}
