//! The answers `check` gives only when told to: each gives up something
//! not proven bad, so the command line names it (`--force NAME`).

/// An answer a repair takes only when told to, because it gives up
/// something that was not proven bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Force {
    /// Blocks a valid bitmap marks in use but no file owns, with no
    /// damaged inode to explain them, are freed. Safe for every file that
    /// can be read; what is lost is whatever a vanished record pointed at.
    FreeUnowned,
    /// A damaged or impossible journal transaction is left out with every
    /// transaction after it, though they are intact: their changes are
    /// lost, the volume is consistent as of the transaction before.
    DropJournalTail,
}

impl Force {
    /// The name the command line uses.
    pub fn name(self) -> &'static str {
        match self {
            Force::FreeUnowned => "free-unowned",
            Force::DropJournalTail => "drop-journal-tail",
        }
    }
}

impl std::str::FromStr for Force {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Force, String> {
        [Force::FreeUnowned, Force::DropJournalTail]
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown answer {s:?}: free-unowned or drop-journal-tail"))
    }
}
