//! Replaying the journal over the home files, and deciding what a replay
//! may not do.
//!
//! Each transaction applies whole or not at all. The home files may be
//! ahead of the journal (a checkpoint cut short), so a change may move
//! blocks from one file to another; the state remembers each such move
//! ([`crate::state::Stolen`]) until a later change settles the file it
//! took from. A move still unsettled when the journal ends took blocks
//! from a file whose own records say it has them: no crash does that, so
//! the transaction that made it is blamed and, with everything after it,
//! left out. Left out last, it is dropped the way a torn tail is;
//! left out before intact transactions, a repair would lose them and is
//! refused.

use super::{Home, ReadMode};
use crate::error::{Result, VolError};
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
        note: &mut impl FnMut(VolError, bool) -> Result<()>,
    ) -> Result<usize> {
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
                note(e, k + 1 < total || damaged_after)?;
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
                    note(e, k + 1 < total || damaged_after)?;
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
                    note(e, true)?;
                    break;
                }
            }
        }
        self.state.replaying = None;
        if let Some(last) = kept.checked_sub(1).map(|k| &journal.found[k]) {
            self.head = last.at + last.blocks;
            self.next_seq = last.seq + 1;
        }
        Ok(kept)
    }

    /// The home files with only the first `n` transactions replayed over
    /// them (salvaging: `before` is the state as read from home).
    fn replay_prefix(&mut self, journal: &Journal, n: usize, before: Option<&crate::state::State>) {
        let Some(state) = before else { return };
        self.state = state.clone();
        for (k, t) in journal.found[..n].iter().enumerate() {
            self.state.replaying = Some(k);
            t.changes
                .iter()
                .try_for_each(|c| self.state.replay_record(c, self.sb.max_file_size()))
                .expect("a transaction that applied once applies again");
        }
    }
}
