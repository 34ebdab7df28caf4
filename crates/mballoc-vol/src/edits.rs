//! Changes of a file's contents, with the rules every front end gets
//! alike (the library, the mount, Python, C): chattr's immutable flag
//! refuses every change and append-only every change but writing at the
//! end and allocating; a change drops the file's capabilities and, as the
//! caller's [`SetId`] says, its set-ID bits; it moves the modification
//! time; and on a file flagged sync (`chattr +S`) it is durable before it
//! returns. [`Volume::edit`] is the one way in; `write`, `truncate` and
//! the rest are it for a caller with every right (the library's).

use crate::attr::{FL_APPEND, FL_IMMUTABLE, FL_SYNC};
use crate::attributes::SetId;
use crate::error::{Result, VolError};
use crate::volume::Volume;
use mballoc_fs::{FallocateMode, FileId};

/// A change of a file's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit<'a> {
    /// Write `data` at `offset` through the cache.
    Write {
        /// Byte offset.
        offset: u64,
        /// The bytes.
        data: &'a [u8],
    },
    /// Write `data` at `offset` straight to the device (`O_DIRECT`:
    /// block-aligned).
    WriteDirect {
        /// Byte offset.
        offset: u64,
        /// The bytes.
        data: &'a [u8],
    },
    /// Set the size (`truncate`).
    Truncate {
        /// Bytes.
        size: u64,
    },
    /// Allocate the range's holes unwritten (`fallocate`).
    Allocate {
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: u64,
        /// Whether the size grows to cover the range.
        mode: FallocateMode,
    },
    /// Deallocate the range's whole blocks and zero its partial ones
    /// (`FALLOC_FL_PUNCH_HOLE`); the size stays.
    PunchHole {
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// Make the range read as zeros, allocated (`FALLOC_FL_ZERO_RANGE`).
    ZeroRange {
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: u64,
        /// Whether the size grows to cover the range.
        mode: FallocateMode,
    },
    /// Take whole blocks out and move what follows down
    /// (`FALLOC_FL_COLLAPSE_RANGE`).
    CollapseRange {
        /// Byte offset (block-aligned).
        offset: u64,
        /// Bytes (whole blocks).
        len: u64,
    },
    /// Move everything from `offset` up by whole blocks, leaving a hole
    /// (`FALLOC_FL_INSERT_RANGE`).
    InsertRange {
        /// Byte offset (block-aligned).
        offset: u64,
        /// Bytes (whole blocks).
        len: u64,
    },
}

impl Edit<'_> {
    /// Whether an append-only file takes it at `size`: writing at the end,
    /// and allocating (ext4 refuses every other `fallocate` mode).
    fn appends(&self, size: u64) -> bool {
        match *self {
            Edit::Write { offset, .. } | Edit::WriteDirect { offset, .. } => offset >= size,
            Edit::Allocate { .. } => true,
            _ => false,
        }
    }
}

impl Volume {
    /// Change file `f`'s contents as a caller whose right to keep set-ID
    /// bits is `set_id`, under chattr's flags (`NotPermitted` when they
    /// refuse it, nothing changed). Returns whether the inode's attributes
    /// changed beyond its times (set-ID bits or capabilities dropped), for
    /// a front end that caches them.
    pub fn edit(&self, f: FileId, edit: Edit<'_>, set_id: SetId) -> Result<bool> {
        let flags = self.tree.read().attr(f.0)?.flags;
        if flags & FL_IMMUTABLE != 0 {
            return Err(VolError::NotPermitted { ino: f.0, why: "immutable" });
        }
        if flags & FL_APPEND != 0 && !edit.appends(self.fs.size(f)?) {
            return Err(VolError::NotPermitted { ino: f.0, why: "append-only: only writes at the end and fallocate" });
        }
        // As the VFS does before the change: privileges go first.
        let dropped = self.drop_privileges(f, set_id)?;
        match edit {
            Edit::Write { offset, data } if self.streams(offset, data.len()) => self.write_streamed(f, offset, data)?,
            Edit::Write { offset, data } => self.write_cached(f, offset, data)?,
            Edit::WriteDirect { offset, data } => self.write_uncached(f, offset, data)?,
            Edit::Truncate { size } => self.resize(f, size)?,
            Edit::Allocate { offset, len, mode } => self.allocate(f, offset, len, mode)?,
            Edit::PunchHole { offset, len } => self.punch(f, offset, len)?,
            Edit::ZeroRange { offset, len, mode } => self.zero(f, offset, len, mode)?,
            Edit::CollapseRange { offset, len } => self.collapse(f, offset, len)?,
            Edit::InsertRange { offset, len } => self.insert(f, offset, len)?,
        }
        self.touch(f);
        if flags & FL_SYNC != 0 {
            self.fsync(f)?;
        }
        Ok(dropped)
    }

    /// A buffered write: the data goes to the cache, blocks are reserved
    /// now and allocated at writeback. Every read and device write the
    /// call needs happens before anything changes, so an error (NoSpace,
    /// MetadataFull, a device error) leaves the file as it was. Writeback
    /// the write sets off afterwards reports its failure to the next
    /// write, fsync or sync; the data stays dirty and is written again.
    pub fn write(&self, f: FileId, offset: u64, data: &[u8]) -> Result<()> {
        self.edit(f, Edit::Write { offset, data }, SetId::Keep).map(drop)
    }

    /// Unbuffered write (`O_DIRECT`): block-aligned; holes are allocated
    /// unwritten, the data written, then the blocks recorded written and
    /// the size grown.
    pub fn write_direct(&self, f: FileId, offset: u64, data: &[u8]) -> Result<()> {
        self.edit(f, Edit::WriteDirect { offset, data }, SetId::Keep).map(drop)
    }

    /// Set the size; shrinking frees the blocks past the end (after the
    /// next commit) and zeroes the rest of the last block; growing zeroes
    /// the old last block past the old end first.
    pub fn truncate(&self, f: FileId, size: u64) -> Result<()> {
        self.edit(f, Edit::Truncate { size }, SetId::Keep).map(drop)
    }

    /// Allocate unwritten blocks for the range's holes.
    pub fn fallocate(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<()> {
        self.edit(f, Edit::Allocate { offset, len, mode }, SetId::Keep).map(drop)
    }

    /// Deallocate the whole blocks in the range and zero its partial ones;
    /// the size does not change.
    pub fn punch_hole(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        self.edit(f, Edit::PunchHole { offset, len }, SetId::Keep).map(drop)
    }

    /// `FALLOC_FL_ZERO_RANGE`, all or nothing: see [`Edit::ZeroRange`].
    pub fn zero_range(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<()> {
        self.edit(f, Edit::ZeroRange { offset, len, mode }, SetId::Keep).map(drop)
    }

    /// `FALLOC_FL_COLLAPSE_RANGE`: take the whole blocks
    /// `[offset, offset + len)` out of the file and move what follows
    /// down; the size shrinks by `len`. The file is written back and its
    /// cache dropped first, as ext4 does.
    pub fn collapse_range(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        self.edit(f, Edit::CollapseRange { offset, len }, SetId::Keep).map(drop)
    }

    /// `FALLOC_FL_INSERT_RANGE`: move everything from `offset` up by
    /// `len` whole blocks, leaving a hole; the size grows by `len`.
    pub fn insert_range(&self, f: FileId, offset: u64, len: u64) -> Result<()> {
        self.edit(f, Edit::InsertRange { offset, len }, SetId::Keep).map(drop)
    }
}
