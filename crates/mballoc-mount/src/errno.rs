//! Volume errors as the errno POSIX gives them.

use fuser::Errno;
use mballoc_vol::VolError;

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
    e.errno()
}
