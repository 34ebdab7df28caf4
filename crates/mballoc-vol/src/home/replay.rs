//! Replaying the journal over the home files, and deciding what a replay
//! may not do.
//!
//! Each transaction applies whole or not at all. The home files may be
//! ahead of the journal (a checkpoint cut short), so a change may move
//! blocks from one file to another; the state remembers each such move
//! ([`crate::state::Stolen`]) until a later change settles the file it
//! took from. A move still unsettled when the journal ends took blocks
//! from a file whose own records say it has them: no crash does that. The
//! transaction that made it, or the record it took from, is wrong, and
//! which cannot be told: the volume is refused, and a repair leaves the
//! transaction out (with everything after it) only when told to.

use super::{Force, Home, ReadMode, Refuse};
use crate::error::{Result, VolError};
use crate::state::State;
use crate::wal::Journal;

impl Home {
    /// Replay `journal`'s transactions over the files read from home, and
    /// return how many stand. `note` takes each problem with whether a
    /// repair must refuse because of it; reading strictly it fails at the
    /// first.
    pub(super) fn replay(
        &mut self,
        journal: &Journal,
        mode: ReadMode,
        note: &mut impl FnMut(VolError, Refuse) -> Result<()>,
    ) -> Result<(usize, Option<State>)> {
        let sb = self.sb.clone();
        let total = journal.found.len();
        let before = (mode == ReadMode::Salvage && total > 0).then(|| self.state.clone());
        let damaged_after = journal.damage.is_some();
        let mut kept = total;
        for (k, tx) in journal.found.iter().enumerate() {
            self.state.replaying = Some(k);
            let applied = tx.changes.iter().try_for_each(|c| self.state.replay_record(c, sb.max_file_size()));
            // Only the end of the journal must fit the inode slots: while
            // a checkpoint cut short leaves the home state ahead, files it
            // already holds are made again by the transactions before it.
            let files = self.state.files.len();
            let applied = applied.and_then(|()| match k + 1 == total && files > sb.inode_count as usize {
                true => Err(format!("replay ends with {files} files for {} inode slots", sb.inode_count)),
                false => Ok(()),
            });
            if let Err(d) = applied {
                // Passes its checksums but cannot apply: proven bad.
                let e =
                    VolError::corrupt("journal transaction", sb.log_start + tx.at, format!("sequence {}: {d}", tx.seq));
                note(e, tail_refusal(k + 1 < total || damaged_after))?;
                kept = k;
                break;
            }
        }
        if kept < total {
            self.replay_prefix(journal, kept, before.as_ref());
        }
        // Moves the journal never settled: blame the earliest transaction
        // that made one and leave it out with what follows, until none is
        // left or the home records themselves disagree.
        loop {
            let unsettled = self.state.unresolved().to_vec();
            let Some(first) = unsettled.first() else { break };
            let blamed = unsettled.iter().filter_map(|s| s.by).min();
            let victims: Vec<String> = unsettled
                .iter()
                .filter(|s| s.by == blamed)
                .take(3)
                .map(|s| format!("inode {} blocks {}..{}", s.victim, s.first, s.end))
                .collect();
            match blamed {
                Some(k) => {
                    let tx = &journal.found[k];
                    let e = VolError::corrupt(
                        "journal transaction",
                        sb.log_start + tx.at,
                        format!(
                            "sequence {}: maps blocks that intact files own ({}), and no later change gives them back",
                            tx.seq,
                            victims.join(", ")
                        ),
                    );
                    // Unlike a change impossible on any state, this one
                    // may be innocent: a home record crafted to claim the
                    // blocks makes the same picture. Leaving the
                    // transaction out is an answer, not a proven one.
                    note(e, Refuse::Unless(Force::DropJournalTail))?;
                    kept = k;
                    self.replay_prefix(journal, kept, before.as_ref());
                }
                None => {
                    // Two valid home records claim the same blocks and the
                    // journal does not say which is right.
                    let e = VolError::corrupt(
                        "inode",
                        sb.itable_start,
                        format!(
                            "inode {} and another valid inode claim the same blocks {}..{}",
                            first.victim, first.first, first.end
                        ),
                    );
                    note(e, Refuse::Yes)?;
                    break;
                }
            }
        }
        self.state.replaying = None;
        self.set_head(journal, kept);
        Ok((kept, before))
    }

    /// The journal continues after the first `kept` transactions.
    pub(super) fn set_head(&mut self, journal: &Journal, kept: usize) {
        match kept.checked_sub(1).map(|k| &journal.found[k]) {
            Some(last) => {
                self.head = last.at + last.blocks;
                self.next_seq = last.seq + 1;
            }
            None => {
                self.head = 0;
                self.next_seq = self.sb.log_seq;
            }
        }
    }

    /// The home files with only the first `n` transactions replayed over
    /// them (salvaging: `before` is the state as read from home).
    pub(super) fn replay_prefix(&mut self, journal: &Journal, n: usize, before: Option<&State>) {
        let Some(state) = before else { return };
        self.state = state.clone();
        for (k, t) in journal.found[..n].iter().enumerate() {
            self.state.replaying = Some(k);
            t.changes
                .iter()
                .try_for_each(|c| self.state.replay_record(c, self.sb.max_file_size()))
                .expect("a transaction that applied once applies again");
        }
        self.state.replaying = None;
    }
}

/// Leaving out a transaction with intact ones after it loses them: only
/// when the caller chose that.
pub(super) fn tail_refusal(intact_after: bool) -> Refuse {
    match intact_after {
        true => Refuse::Unless(Force::DropJournalTail),
        false => Refuse::No,
    }
}
