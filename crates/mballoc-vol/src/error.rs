//! Typed errors. A failed mount or check writes nothing; a failed
//! operation on a mounted volume changes nothing, except that an I/O
//! failure while committing stops all further writes (the volume turns
//! read-only, as ext4 does when its journal aborts).

use mballoc_fs::FsError;
use thiserror::Error;

/// What went wrong.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum VolError {
    /// The device failed.
    #[error("I/O error {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The device's error.
        #[source]
        source: std::io::Error,
    },

    /// Not a volume of this format.
    #[error("not an mballoc volume (bad magic)")]
    BadMagic,

    /// A device too short to hold a superblock.
    #[error("{bytes} bytes: too small to be an mballoc volume")]
    TooSmall {
        /// The device's length.
        bytes: u64,
    },

    /// A structure failed its checksum.
    #[error("{structure} at block {block}: checksum mismatch")]
    Checksum {
        /// The structure.
        structure: &'static str,
        /// Its block.
        block: u64,
    },

    /// A structure that is internally inconsistent or points outside its
    /// area.
    #[error("{structure} at block {block}: {detail}")]
    Corrupt {
        /// The structure.
        structure: &'static str,
        /// Its block.
        block: u64,
        /// What is wrong.
        detail: String,
    },

    /// Parameters that cannot make a volume.
    #[error("invalid geometry: {0}")]
    Geometry(String),

    /// Every inode slot is taken.
    #[error("no free inode: all {0} slots are in use")]
    NoInodes(u32),

    /// The extent-tree area cannot hold the files' trees.
    #[error("extent-tree area full: {needed} blocks needed, {free} free")]
    MetadataFull {
        /// Tree blocks the files need.
        needed: u64,
        /// Tree blocks free.
        free: u64,
    },

    /// Another open holds the volume (read-write opens are exclusive).
    #[error("{} is in use{}", path.display(), holder.as_ref().map_or(String::new(), |h| format!(" by {h}")))]
    Busy {
        /// The file or device.
        path: std::path::PathBuf,
        /// Who holds it, where the system says.
        holder: Option<String>,
    },

    /// mkfs found something on the device that it would destroy.
    #[error("{} already holds {what}; mkfs --force overwrites it", path.display())]
    InUse {
        /// The file or device.
        path: std::path::PathBuf,
        /// What it holds (an mballoc volume, an ext4 file system, ...).
        what: &'static str,
    },

    /// A volume of another format version.
    #[error("{}", version_text(*found, *supported))]
    Version {
        /// The volume's format version.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },

    /// A name the directory does not hold.
    #[error("no entry {name:?} in directory {dir}")]
    NoEntry {
        /// The directory's inode number.
        dir: u64,
        /// The name looked up.
        name: String,
    },

    /// A name the directory already holds.
    #[error("directory {dir} already holds {name:?}")]
    Exists {
        /// The directory's inode number.
        dir: u64,
        /// The name.
        name: String,
    },

    /// An inode number no live file or directory has.
    #[error("no inode {0}")]
    NoInode(u64),

    /// A directory operation on something that is not one.
    #[error("inode {0} is not a directory")]
    NotADirectory(u64),

    /// A file operation on a directory.
    #[error("inode {0} is a directory")]
    IsADirectory(u64),

    /// `rmdir`, or a rename over a directory, that still holds entries.
    #[error("directory {0} is not empty")]
    NotEmpty(u64),

    /// A name that is empty, `.`, `..`, holds `/` or NUL, or is too long.
    #[error("invalid name {name:?}: {why}")]
    InvalidName {
        /// The name, lossily.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },

    /// A link, symbolic link or extended attribute that would make an
    /// inode's attributes larger than an inode keeps.
    #[error("attributes of {bytes} bytes pass the {max} an inode keeps")]
    NoRoom {
        /// Bytes the attributes would take.
        bytes: usize,
        /// Bytes an inode keeps.
        max: usize,
    },

    /// An extended attribute the inode does not have.
    #[error("inode {ino} has no extended attribute {name:?}")]
    NoAttribute {
        /// The inode.
        ino: u64,
        /// The attribute's name, lossily.
        name: String,
    },

    /// A change its flags forbid (immutable, append-only).
    #[error("inode {ino}: {why}")]
    NotPermitted {
        /// The inode.
        ino: u64,
        /// Which flag forbids what.
        why: &'static str,
    },

    /// `readlink` of something that is not a symbolic link.
    #[error("inode {0} is not a symbolic link")]
    NotASymlink(u64),

    /// A rename that would move a directory under itself.
    #[error("cannot move directory {0} inside itself")]
    Loop(u64),

    /// The volume is mounted read-only (by request, or after a failed
    /// commit).
    #[error("volume is read-only")]
    ReadOnly,

    /// The volume was unmounted (or abandoned): a handle that outlived it
    /// can change nothing.
    #[error("the volume was unmounted")]
    Unmounted,

    /// An argument the operation cannot take (alignment for unbuffered
    /// I/O, a folio size out of range).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// More symbolic links in one path than [`crate::MAX_SYMLINK_FOLLOWS`].
    #[error("too many levels of symbolic links")]
    TooManyLinks,

    /// The file layer refused the operation.
    #[error(transparent)]
    Fs(#[from] FsError),

    /// An error of a path-level call, with the caller's path.
    #[error("{}: {source}", path.display())]
    At {
        /// The path the caller gave.
        path: std::path::PathBuf,
        /// What went wrong.
        source: Box<VolError>,
    },
}

impl VolError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> VolError {
        VolError::Io { what: what.into(), source }
    }

    pub(crate) fn corrupt(structure: &'static str, block: u64, detail: impl Into<String>) -> VolError {
        VolError::Corrupt { structure, block, detail: detail.into() }
    }

    /// This error with the caller's `path` (once: an error that has a path
    /// keeps it).
    pub(crate) fn at(self, path: &std::path::Path) -> VolError {
        match self {
            VolError::At { .. } => self,
            e => VolError::At { path: path.to_path_buf(), source: Box::new(e) },
        }
    }

    /// The error underneath any path ([`VolError::At`]): what to match on.
    pub fn cause(&self) -> &VolError {
        match self {
            VolError::At { source, .. } => source.cause(),
            e => e,
        }
    }

    /// The errno POSIX gives for this error (`EIO` where none fits
    /// better): what the mount answers, what [`std::io::Error`]s made from
    /// it carry, and what the Python and C bindings report.
    pub fn errno(&self) -> i32 {
        use mballoc_fs::FsError;
        match self {
            VolError::NoEntry { .. } | VolError::NoInode(_) => libc::ENOENT,
            VolError::Exists { .. } => libc::EEXIST,
            VolError::NotADirectory(_) => libc::ENOTDIR,
            VolError::IsADirectory(_) => libc::EISDIR,
            VolError::NotEmpty(_) => libc::ENOTEMPTY,
            VolError::InvalidName { name, .. } if name.len() > crate::limits::NAME_MAX => libc::ENAMETOOLONG,
            VolError::InvalidName { .. } | VolError::Loop(_) | VolError::InvalidArgument(_) => libc::EINVAL,
            VolError::NotASymlink(_) | VolError::BadMagic | VolError::TooSmall { .. } | VolError::Geometry(_) => {
                libc::EINVAL
            }
            VolError::TooManyLinks => libc::ELOOP,
            VolError::At { source, .. } => source.errno(),
            VolError::NoAttribute { .. } => libc::ENODATA,
            VolError::NotPermitted { .. } => libc::EPERM,
            VolError::ReadOnly => libc::EROFS,
            VolError::Unmounted => libc::EBADF,
            VolError::Busy { .. } | VolError::InUse { .. } => libc::EBUSY,
            VolError::NoInodes(_) | VolError::MetadataFull { .. } | VolError::NoRoom { .. } => libc::ENOSPC,
            VolError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            VolError::Fs(f) => match f {
                FsError::UnknownFile(_) | FsError::Unlinked(_) => libc::ENOENT,
                FsError::NoSpace { .. } => libc::ENOSPC,
                FsError::FileTooLarge { .. } => libc::EFBIG,
                FsError::ZeroLength
                | FsError::InvalidConfig(_)
                | FsError::InvalidRange(_)
                | FsError::Setting { .. } => libc::EINVAL,
                _ => libc::EIO,
            },
            _ => libc::EIO,
        }
    }
}

impl From<VolError> for std::io::Error {
    /// An [`std::io::Error`] with the errno ([`VolError::errno`]) and the
    /// whole message.
    fn from(e: VolError) -> std::io::Error {
        let kind = std::io::Error::from_raw_os_error(e.errno()).kind();
        std::io::Error::new(kind, e)
    }
}

/// Shorthand used across the crate.
pub type Result<T> = std::result::Result<T, VolError>;

fn version_text(found: u32, supported: u32) -> String {
    if found == 2 && supported == 3 {
        "volume format version 2 keeps one name per inode and no links or extended attributes; \
         this build reads version 3: `mballoc upgrade VOLUME` converts it in place"
            .to_string()
    } else if found < supported {
        format!(
            "volume format version {found} has no directory tree; this build reads version {supported} \
             (copy the files out with an older build and make a new volume with `mballoc mkfs`)"
        )
    } else {
        format!("volume format version {found} is newer than this build's {supported}")
    }
}
