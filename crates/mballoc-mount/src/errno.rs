//! Volume errors as the errno POSIX gives them.

use fuser::Errno;
use mballoc_fs::FsError;
use mballoc_vol::{VolError, NAME_MAX};

/// The errno for `e`.
pub(crate) fn errno(e: &VolError) -> Errno {
    Errno::from_i32(raw(e))
}

/// The errno for `e` from `link(2)`, where a full attribute string means
/// too many links.
pub(crate) fn link_errno(e: &VolError) -> Errno {
    match e {
        VolError::NoRoom { .. } => Errno::from_i32(libc::EMLINK),
        e => errno(e),
    }
}

fn raw(e: &VolError) -> i32 {
    match e {
        VolError::NoEntry { .. } | VolError::NoInode(_) => libc::ENOENT,
        VolError::Exists { .. } => libc::EEXIST,
        VolError::NotADirectory(_) => libc::ENOTDIR,
        VolError::IsADirectory(_) => libc::EISDIR,
        VolError::NotEmpty(_) => libc::ENOTEMPTY,
        VolError::InvalidName { name, .. } if name.len() > NAME_MAX => libc::ENAMETOOLONG,
        VolError::InvalidName { .. } | VolError::Loop(_) | VolError::InvalidArgument(_) => libc::EINVAL,
        VolError::NotASymlink(_) => libc::EINVAL,
        VolError::NoAttribute { .. } => libc::ENODATA,
        VolError::NotPermitted { .. } => libc::EPERM,
        VolError::ReadOnly => libc::EROFS,
        VolError::NoInodes(_) | VolError::MetadataFull { .. } | VolError::NoRoom { .. } => libc::ENOSPC,
        VolError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        VolError::Fs(f) => match f {
            FsError::UnknownFile(_) | FsError::Unlinked(_) => libc::ENOENT,
            FsError::NoSpace { .. } => libc::ENOSPC,
            FsError::FileTooLarge { .. } => libc::EFBIG,
            FsError::ZeroLength | FsError::InvalidConfig(_) | FsError::InvalidRange(_) => libc::EINVAL,
            _ => libc::EIO,
        },
        _ => libc::EIO,
    }
}
