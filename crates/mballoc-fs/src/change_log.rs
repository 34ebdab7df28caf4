//! The metadata changes a persistent layer must log.
//!
//! The engine itself keeps everything in memory. A layer that stores the
//! volume attaches a [`ChangeLog`]; the engine then describes every change
//! to file metadata as a [`Change`], in order per file (each is recorded
//! under the file's lock), and asks the log to make them durable before a
//! commit hands freed blocks back to the allocator.
//!
//! Every change is an assignment to part of a file's state (this range
//! maps here, this range maps nowhere, the size is this), so replaying any
//! prefix of the log on top of a state that already contains some of it
//! gives the same result: replay is idempotent.
//!
//! Two rules keep a crash from exposing stale blocks (ext4's data=ordered,
//! done the way ext4 does for unbuffered I/O, with unwritten extents):
//!
//! * blocks mapped by writeback are recorded **unwritten**, and writeback's
//!   conversions of unwritten blocks are not recorded at all;
//! * the layer that owns the data records them written with
//!   [`Fs::mark_written`](crate::Fs::mark_written) once the data is on the
//!   device, so a crash in between leaves blocks that read as zeroes.
//!
//! Blocks held in preallocations are never mentioned: a crash gives them
//! back for free.

use crate::extent_map::ExtentState;

/// One change to a file's metadata.
/// Exhaustive on purpose: a log that stores changes must store every kind,
/// so a new kind must break every log until it handles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new, empty file.
    Create {
        /// The file.
        ino: u64,
    },
    /// The file is gone (its blocks were unmapped first).
    Unlink {
        /// The file.
        ino: u64,
    },
    /// The size in bytes.
    Size {
        /// The file.
        ino: u64,
        /// Bytes.
        size: u64,
    },
    /// Logical blocks `[logical, logical + len)` map to `physical...`.
    Map {
        /// The file.
        ino: u64,
        /// First logical block.
        logical: u64,
        /// First physical block.
        physical: u64,
        /// Blocks.
        len: u32,
        /// Written or unwritten.
        state: ExtentState,
    },
    /// Logical blocks `[first, end)` map to nothing.
    Unmap {
        /// The file.
        ino: u64,
        /// First logical block.
        first: u64,
        /// One past the last logical block.
        end: u64,
    },
    /// Mapped blocks in `[first, end)` now hold data.
    Written {
        /// The file.
        ino: u64,
        /// First logical block.
        first: u64,
        /// One past the last logical block.
        end: u64,
    },
}

impl Change {
    /// The file the change is about.
    pub fn ino(&self) -> u64 {
        match *self {
            Change::Create { ino }
            | Change::Unlink { ino }
            | Change::Size { ino, .. }
            | Change::Map { ino, .. }
            | Change::Unmap { ino, .. }
            | Change::Written { ino, .. } => ino,
        }
    }
}

/// Why a commit could not make the log durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFailure(pub String);

/// Where the engine sends its changes.
pub trait ChangeLog: Send + Sync {
    /// Append a change to the running transaction.
    fn record(&self, change: Change);

    /// Append changes that must reach the same transaction, in order: a
    /// commit takes all of them or none (an operation that makes several
    /// changes, such as a truncate's unmap and new size, is atomic across
    /// a crash). The default suits a log whose `record` already holds
    /// back commits until the operation ends.
    fn record_all(&self, changes: &[Change]) {
        for c in changes {
            self.record(*c);
        }
    }

    /// Make every change recorded so far durable. Called with the commit
    /// lock held and with no file locked by the commit itself (a caller may
    /// hold its own file's lock). On failure the freed blocks stay pending.
    fn commit(&self) -> Result<(), LogFailure>;
}
