//! The limits a volume holds names, links, attributes and labels to:
//! what its records have room for, and what every front end refuses past
//! (with ENAMETOOLONG, E2BIG or EINVAL, as the error says).

/// Longest name a directory entry holds, in bytes (as ext4).
pub const NAME_MAX: usize = 255;
/// Longest attribute string of one inode (names, link target, extended
/// attributes) on any volume: 96 KiB, room for one value of Linux's
/// largest (64 KiB) beside names and smaller attributes. A volume keeps
/// less where its journal could not hold one record of it
/// ([`Superblock::max_attr_bytes`](crate::Superblock::max_attr_bytes)).
pub const MAX_ATTR_BYTES: usize = 96 << 10;
/// Longest symbolic-link target, in bytes (ext4's at 4 KiB blocks).
pub const SYMLINK_MAX: usize = 4095;

/// Longest label, in bytes.
pub const LABEL_MAX: usize = 63;
