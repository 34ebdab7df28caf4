//! # mballoc-ext4: reading real ext4 volumes
//!
//! This crate reads ext2, ext3 and ext4 images so that the allocator can
//! be studied on real, aged free space, and so that our reports can be
//! checked against e2fsprogs' on the same image.
//!
//! ## What is read, and in what order
//!
//! ```text
//!  BlockSource (file, memory)
//!     │ bytes
//!     ▼
//!  Ext4Superblock ── geometry: block/cluster size, groups, features,
//!     │           checksum seed; impossible values refused here
//!     ▼
//!  GroupDesc × groups ── 32- or 64-byte, classic or meta_bg placement,
//!     │                   crc16 / crc32c checked
//!     ├──▶ block bitmaps (read, or computed for BLOCK_UNINIT groups)
//!     │       └──▶ free runs (e2freefrag), mb_groups (via the allocator)
//!     └──▶ inode table ──▶ Inode ──▶ FileMap (extent tree of any depth,
//!                                    or ext2/3 indirect blocks)
//!                                      └──▶ directories ──▶ Tree (paths)
//! ```
//!
//! Everything is validated before it is used to compute another location:
//! a corrupt image gives an [`Ext4Error`] naming the structure and block,
//! never a panic. The rules are the kernel's own (`__ext4_iget`'s checks
//! on an inode, block_validity's system zone with the journal in it, the
//! inode numbers a name may point at, the largest file size): what the
//! kernel refuses to mount or read is refused here, and nothing else.
//!
//! Two walks name the files. [`Ext4Volume::walk`] keeps the whole tree (what
//! building an engine needs) and reads every block at most once.
//! [`Ext4Volume::walk_each`] streams: it hands each path to a visitor as it
//! is reached, reports damage and goes on, and keeps only the current
//! path, a small frame per directory on it and one directory block of
//! entries, so memory follows the depth, not the number of files or the
//! names of one directory.
//!
//! Checksums (metadata_csum's crc32c on the superblock, descriptors,
//! bitmaps, inodes, extent blocks and directory blocks; gdt_csum's crc16 on
//! descriptors) are verified under [`ChecksumPolicy::Verify`]; a damaged
//! image can still be read with [`ChecksumPolicy::Ignore`].
//!
//! ## Into the engine
//!
//! [`engine::allocator`] loads the bitmaps into an mballoc allocator (which
//! then prints the kernel's `mb_groups` for the image), and
//! [`engine::load`] builds a whole engine: the image's free space becomes
//! the allocator's state, its files become engine files with their
//! extents, and everything else in use (directories, the journal, the
//! inode tables) becomes metadata the engine never touches.

#![forbid(unsafe_code)]

mod bytes;
mod checksum;
mod directory;
pub mod engine;
mod error;
mod group;
mod htree;
mod inode;
mod mapping;
mod source;
mod sparse_bits;
mod superblock;
mod volume;
mod walk;
mod xattr;

pub use directory::{Entry, Ext4DirEntry, Tree};
pub use error::{Ext4Error, Result};
pub use group::GroupDesc;
pub use inode::{iflags, FileType, Inode, MappingKind, ROOT_INO};
pub use mapping::{filefrag_count, Ext4Extent, FileMap, MAX_EXTENT_DEPTH};
pub use source::{BlockSource, FileSource, MemSource};
pub use superblock::{compat, incompat, ro_compat, ChecksumPolicy, Ext4Superblock};
pub use volume::Ext4Volume;
pub use walk::{Claiming, Found, Visit};

/// What the tests need to damage an image on purpose: where a group's
/// descriptor lies and the raw crc32c a checksum is computed with.
#[cfg(feature = "testing")]
pub mod testing {
    pub use crate::checksum::crc32c_raw;
    pub use crate::group::desc_location;
}
