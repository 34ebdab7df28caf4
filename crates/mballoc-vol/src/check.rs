//! `mballoc check`: read every structure with its checksum, replay the
//! journal in memory, and compare the stored bitmaps, descriptors and
//! counters with what the files' extents say. Repair writes the result
//! back: the journal replayed, damaged inodes and trees cleared (their
//! blocks become free), bitmaps and counters rebuilt.

use crate::device::Device;
use crate::error::Result;
use crate::force::Force;
use crate::format::{Superblock, VolumeState};
use crate::home::{Home, ReadMode, Scope};

/// Whether `check` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repair {
    /// Report only; nothing is written.
    No,
    /// Write back what the check rebuilt.
    Yes,
}

/// What a check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// Each problem, one line.
    pub problems: Vec<String>,
    /// Committed journal transactions not yet written home: the next
    /// mount replays them. Not a problem.
    pub pending_transactions: usize,
    /// Inodes unlinked while open, or made by a create a crash cut short
    /// before their name: the next read-write mount (or a repair) removes
    /// them, as ext4 does with its orphan list. Not a problem.
    pub orphans: u64,
    /// Inodes after replay, every kind, the root included (damaged ones
    /// left out): what the superblock's count and `statfs` count.
    pub inodes: u64,
    /// Of them, regular files: what `inspect` and `find -type f` count.
    pub regular_files: u64,
    /// Free data blocks after replay.
    pub free_blocks: u64,
    /// Whether a repair (or, with nothing wrong, a replay) was written.
    pub repaired: bool,
    /// Why a repair was refused: writing it would destroy something not
    /// proven bad. Nothing was written. Each names the [`Force`] that
    /// would let it proceed, if one would.
    pub refused: Vec<String>,
    /// Inodes a repair moves (or, checking, would move) to lost+found:
    /// kept with what could be read, not dropped.
    pub quarantined: Vec<String>,
    /// The forced answers a repair took, each with what it gave up.
    pub forced: Vec<String>,
    /// Why the volume stopped taking changes when it was last mounted (a
    /// bug met, as ext4 records its errors): what was committed is
    /// checked like the rest, so this alone is not a problem; a repair
    /// clears the note (and still reports what it cleared).
    pub stopped: Option<String>,
}

impl CheckReport {
    /// Nothing wrong (transactions awaiting replay are not wrong).
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Check the volume on `dev`; with [`Repair::Yes`], fix what can be fixed
/// without destroying anything not proven bad: replay the journal (up to a
/// damaged last transaction), drop inodes and trees that fail their
/// checksums, rebuild bitmaps, descriptors and counters. When that is not
/// enough (descriptors that fail their checksums, valid structures that
/// contradict each other, a journal damaged before intact transactions)
/// the repair is refused with the reasons and nothing is written. A
/// superblock that fails its checks is an error: nothing else can be
/// located without it.
pub fn check(dev: &dyn Device, repair: Repair) -> Result<CheckReport> {
    check_with(dev, repair, &[])
}

/// [`check`], with leave to take the answers in `force` where a repair
/// would otherwise refuse. The report says which it took.
pub fn check_with(dev: &dyn Device, repair: Repair, force: &[Force]) -> Result<CheckReport> {
    let head = crate::format::read_superblock(dev)?;
    let sb = Superblock::decode(&head, dev.len())?;
    let stopped = sb.error.clone();
    let scan = Home::read(dev, sb, ReadMode::Salvage)?;
    let mut problems = scan.problems;
    if scan.replayed == 0 {
        for &g in &scan.stale_groups {
            problems.push(format!("group {g}: stored bitmap or descriptor disagrees with the files' extents"));
        }
        if scan.stale_counters {
            problems.push("superblock: free block or file count disagrees with the files".into());
        }
    }
    let mut home = scan.home;
    let mut orphans: Vec<u64> = scan.tree.orphans();
    if !scan.tree.attrs.is_empty() {
        orphans.extend(home.state.files.keys().filter(|i| !scan.tree.attrs.contains_key(i)));
    }
    orphans.sort_unstable();
    orphans.dedup();
    let mut report = CheckReport {
        problems,
        orphans: orphans.len() as u64,
        pending_transactions: scan.replayed,
        inodes: home.state.files.len() as u64,
        regular_files: regular_files(&home),
        free_blocks: home.state.free,
        repaired: false,
        refused: Vec::new(),
        quarantined: scan.quarantined,
        forced: Vec::new(),
        stopped,
    };
    let work = !report.is_clean() || report.pending_transactions > 0 || report.orphans > 0 || report.stopped.is_some();
    if repair == Repair::Yes && work {
        let (allowed, refused): (Vec<_>, Vec<_>) =
            scan.unrepairable.into_iter().partition(|r| r.unless.is_some_and(|f| force.contains(&f)));
        if !report.is_clean() && !refused.is_empty() {
            report.refused = refused
                .into_iter()
                .map(|r| match r.unless {
                    Some(f) => format!("{} (--force {} would proceed)", r.why, f.name()),
                    None => r.why,
                })
                .collect();
            return Ok(report);
        }
        report.forced = allowed
            .into_iter()
            .map(|r| format!("{}: {}", r.unless.expect("partitioned on it").name(), r.why))
            .collect();
        for &ino in &orphans {
            home.state
                .apply(&mballoc_fs::Change::Unlink { ino })
                .unwrap_or_else(|e| panic!("an orphan of the state unlinks from it: {e}"));
        }
        home.sb.error = None;
        home.checkpoint_scope(dev, VolumeState::Clean, Scope::Everything)?;
        report.inodes = home.state.files.len() as u64;
        report.regular_files = regular_files(&home);
        report.free_blocks = home.state.free;
        report.orphans = 0;
        report.repaired = true;
    }
    Ok(report)
}

fn regular_files(home: &crate::home::Home) -> u64 {
    home.state.files.values().filter(|f| f.attr.as_ref().is_some_and(crate::attr::Attr::is_file)).count() as u64
}

#[cfg(test)]
#[path = "check_crafted.rs"]
mod crafted;
