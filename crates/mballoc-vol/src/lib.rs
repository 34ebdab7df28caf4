//! # mballoc-vol — a crash-safe volume over the mballoc engine
//!
//! [`mballoc_fs::Fs`] decides where every block goes; this crate stores
//! the result and the files' contents on a [`Device`] so that a crash at
//! any point loses nothing that was made durable, leaks no block and never
//! lets two files own one. The format is in docs/FORMAT.md.
//!
//! ## The two states
//!
//! The engine's **live** state runs ahead: delayed data without blocks,
//! preallocated windows, changes not yet committed. The **committed** state
//! (`state`) is what a mount after a crash would find: each file's size
//! and extents, and the bitmaps those extents imply. The engine describes
//! every metadata change to a [`ChangeLog`](mballoc_fs::ChangeLog) (this
//! crate's journal) under the file's lock; a commit writes the changes as
//! one journal transaction (`wal`), flushes, and applies them to the
//! committed state. Only then does the engine release the blocks the
//! transaction freed — the 2004 design's rule that freed blocks are
//! allocatable only after commit.
//!
//! ## What is durable when
//!
//! * `fsync(f)` writes `f`'s dirty folios, then commits: flush (the data),
//!   journal transaction, flush. When it returns, `f`'s data and mapping
//!   survive a crash (ext4's data=ordered).
//! * Writeback maps blocks **unwritten** in the journal and records them
//!   written only after their data was written, so a crash in between
//!   leaves zeroes, never another file's old bytes.
//! * Other changes commit on the engine's timer (every
//!   `commit_interval_ops` operations), on `sync` and at unmount.
//! * Preallocated blocks never appear in the journal or the bitmaps: a
//!   crash gives them back without a checker (ext4 needs e2fsck for that).
//! * Delayed writes reserve their blocks when they are made, so writeback
//!   never runs out of space.
//!
//! ## Checkpoints and replay
//!
//! When the journal is half full, and at unmount, a checkpoint (`home`)
//! writes the committed state to its home areas — extent trees copy-on-
//! write into the tree area, then inode records, bitmaps and descriptors,
//! then the superblock, which restarts the journal. Changes are
//! assignments (this range maps there, the size is this), so replay is
//! idempotent: mounting after a crash in the middle of a checkpoint
//! replays the same transactions over a partly updated home and reaches
//! the same state. Buddies and order indexes are never stored; the
//! allocator builds them from the bitmaps.
//!
//! ## Names and attributes
//!
//! Each inode keeps one attribute string ([`Attr`]): type and
//! permissions, owner, times, chattr flags, generation, device number,
//! every name it has (hard links), a symbolic link's target and its
//! extended attributes (POSIX ACLs among them, kept in step with the
//! mode). Any change journals the whole string, so names replay as
//! idempotently as extents; the tree of directories is rebuilt from the
//! names at mount and checked. An inode unlinked while open is an orphan
//! until its last close, or the next mount (ext4's orphan list).
//!
//! ## Reading damage
//!
//! Every structure carries a crc32c seeded from the volume's UUID and bound
//! to its location. Mounting stops at the first failed check with a typed
//! [`VolError`] and writes nothing; [`check`] lists every problem and, on
//! request, repairs: replays the journal, drops damaged inodes and trees,
//! rebuilds bitmaps and counters — or refuses, writing nothing, where a
//! repair would destroy something not proven bad.
//!
//! ## When the device fails
//!
//! Every read, write and flush error is a [`VolError::Io`] from the call
//! that met it. Calls do their reads before their first change, so a
//! failed call leaves its file as it was; a failed data write leaves the
//! data dirty. A failure inside a commit or checkpoint aborts the journal:
//! the volume turns read-only and the next mount recovers. Running out of
//! extent-tree space is refused at the write ([`VolError::MetadataFull`]).
//! [`fault`] injects such failures for tests, [`crash`] simulates power
//! loss. A [`FileDevice`] opened read-write is locked against every other
//! open ([`VolError::Busy`]); [`mkfs`] refuses to format over a signature
//! it recognizes ([`probe`]).
//!
//! ## Data
//!
//! Buffered I/O goes through a cache of folios (`cache`) of one size per
//! mount, 4 KiB to 2 MiB; writeback issues one device write per physically
//! contiguous piece of up to 2 MiB (or one folio, if larger). [`Volume::write_direct`] and [`Volume::read_direct`]
//! bypass the cache (`O_DIRECT`): aligned, allocated unwritten, written,
//! then converted.

//! ## Threads
//!
//! [`Volume`] is `Send` and `Sync`: share it (`&Volume`, or an `Arc`)
//! between any number of threads; calls on different files run in
//! parallel, calls on one file are serialized by its cache lock, and
//! commits by the journal. A [`File`] borrows its volume and is `Send` and
//! `Sync` too; [`MemDevice`], [`FileDevice`] and every report and error
//! type move freely. The locks, what they guard and the order they nest
//! in are on one page: ARCHITECTURE.md, *Locking rules*. All of this is
//! checked when the crate compiles.

#![forbid(unsafe_code)]

mod acl;
mod attr;
mod attributes;
mod buffered;
mod cache;
mod check;
mod codec;
mod commit_timer;
#[cfg(feature = "testing")]
pub mod crash;
mod device;
mod direct;
mod durability;
mod edits;
mod error;
#[cfg(feature = "testing")]
pub mod fault;
mod file;
mod folio_pool;
mod force;
mod format;
mod home;
mod limits;
mod log;
mod maintenance;
mod mkfs;
mod mount_options;
#[cfg(feature = "testing")]
pub mod mutate;
mod names;
mod namespace;
mod paths;
mod probe;
mod read_sink;
mod records;
mod special;
mod state;
mod upgrade;
mod volume;
mod wal;

pub use acl::{ACL_ACCESS, ACL_DEFAULT};
pub use attr::{
    Attr, Link, FL_APPEND, FL_IMMUTABLE, FL_NOATIME, FL_NODUMP, FL_SYNC, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK,
    S_IFMT, S_IFREG, S_IFSOCK, XATTR_VALUE_MAX,
};
pub use attributes::{AccessTime, Caller, SetAttr, SetId, Time};
pub use check::{check, check_with, CheckReport, Repair};
pub use device::{Device, FileDevice, Holders, MemDevice, OpenMode};
pub use durability::Halt;
pub use edits::Edit;
pub use error::{Result, VolError};
pub use file::{File, OpenOptions};
pub use force::Force;
pub use format::{FormatOptions, Superblock, VolumeState, ROOT_INO};
pub use limits::{LABEL_MAX, MAX_ATTR_BYTES, NAME_MAX, SYMLINK_MAX};
pub use mballoc_fs::{
    Concurrency, ExtentState, FallocateMode, FileId, FsConfig, FsError, MappedExtent, Normalization, PreallocTable,
    StreamPlacement,
};
pub use mkfs::{mkfs, Overwrite};
pub use mount_options::{Access, MountOptions};
pub use namespace::{DirEntry, Owner, Replace, Usage};
pub use paths::{Metadata, MAX_SYMLINK_FOLLOWS};
pub use probe::probe;
pub use read_sink::ReadSink;
pub use special::XattrSet;
pub use upgrade::{upgrade, Upgraded};
pub use volume::{Volume, VolumeStats};

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Volume>();
    send_sync::<File>();
    send_sync::<MemDevice>();
    send_sync::<FileDevice>();
    send_sync::<Superblock>();
    send_sync::<CheckReport>();
    send_sync::<VolError>();
    send_sync::<MountOptions>();
    send_sync::<FormatOptions>();
    send_sync::<OpenOptions>();
};

/// README.md's Rust examples, compiled and run as doctests so they stay
/// true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

/// docs/LIBRARY.md's Rust examples, likewise.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/LIBRARY.md")]
struct LibraryExamples;
