//! The namespace by path from C: directories and their listing, removal,
//! rename, links, stat, permissions, chattr flags and extended
//! attributes. Paths are absolute from the volume's root; symbolic links
//! are followed as the kernel follows them.

use crate::volume::{volume, MbVolume};
use crate::{copy_out, guard, guard_int, invalid, known_flags, put, string, vol_err, CError};
use mballoc_vol::{DirEntry, Metadata, Replace, XattrSet};
use std::ffi::{c_char, c_int};

/// `mb_rename`: fail `-EEXIST` if the new name exists (`RENAME_NOREPLACE`).
pub const MB_RENAME_NOREPLACE: c_int = 1;
/// `mb_rename`: swap the two names' files (`RENAME_EXCHANGE`).
pub const MB_RENAME_EXCHANGE: c_int = 2;
/// `mb_stat`: describe a symbolic link itself (`lstat`).
pub const MB_STAT_NOFOLLOW: c_int = 1;
/// `mb_setxattr`: fail `-EEXIST` if it exists (`XATTR_CREATE`).
pub const MB_XATTR_CREATE: c_int = 1;
/// `mb_setxattr`: fail `-ENODATA` unless it exists (`XATTR_REPLACE`).
pub const MB_XATTR_REPLACE: c_int = 2;
/// Longest name in bytes (`MbDirEntry.name` holds it and a NUL).
pub const MB_NAME_MAX: usize = 255;

/// What `stat` gives. Times are nanoseconds since the epoch.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MbStat {
    /// The inode number.
    pub ino: u64,
    /// Bytes (a symbolic link: its target's length).
    pub size: u64,
    /// 512-byte units held, as `st_blocks`.
    pub blocks: u64,
    /// Type and permission bits (`S_IFREG | 0644`, ...).
    pub mode: u32,
    /// Names (`st_nlink`).
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Bytes per block (`st_blksize`).
    pub block_size: u32,
    /// chattr flags (`MB_FL_IMMUTABLE`, ...).
    pub flags: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// Last access.
    pub atime_ns: i64,
    /// Last change of the contents.
    pub mtime_ns: i64,
    /// Last change of the inode.
    pub ctime_ns: i64,
    /// Creation (0 if unknown).
    pub btime_ns: i64,
}

/// chattr `i`: no change to contents, names or attributes.
pub const MB_FL_IMMUTABLE: u32 = 0x10;
/// chattr `a`: writes only at the end; no truncation, no unlink.
pub const MB_FL_APPEND: u32 = 0x20;
/// chattr `S`: writes are durable when they return.
pub const MB_FL_SYNC: u32 = 0x08;

pub(crate) fn stat_of(m: Metadata) -> MbStat {
    MbStat {
        ino: m.ino.0,
        size: m.size,
        blocks: m.blocks * u64::from(m.block_size / 512),
        mode: m.mode,
        nlink: m.nlink,
        uid: m.uid,
        gid: m.gid,
        block_size: m.block_size,
        flags: m.flags,
        rdev: m.rdev,
        atime_ns: m.atime,
        mtime_ns: m.mtime,
        ctime_ns: m.ctime,
        btime_ns: m.btime,
    }
}

/// One entry of a directory.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MbDirEntry {
    /// Its inode.
    pub ino: u64,
    /// Its type bits (`S_IFREG`, `S_IFDIR`, `S_IFLNK`, ...).
    pub kind: u32,
    /// Its name, NUL-terminated.
    pub name: [c_char; 256],
}

/// An open directory listing: the entries as they were at `mb_opendir`.
pub struct MbDir {
    entries: Vec<DirEntry>,
    next: usize,
}

/// Run a path-level call on volume `v` (every caller is an `extern "C"`
/// call whose contract makes `v` NULL or a live handle).
fn on<T>(v: *const MbVolume, f: impl FnOnce(&mballoc_vol::Volume) -> mballoc_vol::Result<T>) -> Result<T, CError> {
    // SAFETY: `v` is NULL or came from `mb_volume_open` and is not closed
    // (the contract of every call that passes it here).
    let v = unsafe { volume(v) }?;
    f(&v.vol).map_err(vol_err)
}

/// Make the directory `path` with permission bits `mode` (0 for 0755);
/// its parent must exist.
#[no_mangle]
pub unsafe extern "C" fn mb_mkdir(v: *const MbVolume, path: *const c_char, mode: u32) -> c_int {
    guard_int(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let p = unsafe { crate::path(path, "path") }?;
        on(v, |vol| vol.create_dir_mode(p, if mode == 0 { 0o755 } else { mode }))?;
        Ok(0)
    })
}

/// Remove the empty directory `path`.
#[no_mangle]
pub unsafe extern "C" fn mb_rmdir(v: *const MbVolume, path: *const c_char) -> c_int {
    guard_int(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let p = unsafe { crate::path(path, "path") }?;
        on(v, |vol| vol.remove_dir(p))?;
        Ok(0)
    })
}

/// Remove the name `path` (not a directory); the file goes when its last
/// name and last open handle are gone.
#[no_mangle]
pub unsafe extern "C" fn mb_unlink(v: *const MbVolume, path: *const c_char) -> c_int {
    guard_int(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let p = unsafe { crate::path(path, "path") }?;
        on(v, |vol| vol.remove_file(p))?;
        Ok(0)
    })
}

/// Move `from` to `to`, replacing what `to` names (`rename(2)`); `flags`:
/// 0, `MB_RENAME_NOREPLACE` or `MB_RENAME_EXCHANGE`.
#[no_mangle]
pub unsafe extern "C" fn mb_rename(v: *const MbVolume, from: *const c_char, to: *const c_char, flags: c_int) -> c_int {
    guard_int(|| {
        known_flags(flags, MB_RENAME_NOREPLACE | MB_RENAME_EXCHANGE, "rename")?;
        let how = match flags {
            0 => Replace::Allowed,
            MB_RENAME_NOREPLACE => Replace::Never,
            MB_RENAME_EXCHANGE => Replace::Exchange,
            _ => return Err(invalid("MB_RENAME_NOREPLACE and MB_RENAME_EXCHANGE exclude each other")),
        };
        // SAFETY: `from` and `to` are NULL (refused) or NUL-terminated strings live for the call (the header's contract).
        let (a, b) = unsafe { (crate::path(from, "from")?, crate::path(to, "to")?) };
        on(v, |vol| vol.rename(a, b, how))?;
        Ok(0)
    })
}

/// Give the file `from` the further name `to` (`link(2)`).
#[no_mangle]
pub unsafe extern "C" fn mb_link(v: *const MbVolume, from: *const c_char, to: *const c_char) -> c_int {
    guard_int(|| {
        // SAFETY: `from` and `to` are NULL (refused) or NUL-terminated strings live for the call (the header's contract).
        let (a, b) = unsafe { (crate::path(from, "from")?, crate::path(to, "to")?) };
        on(v, |vol| vol.hard_link(a, b))?;
        Ok(0)
    })
}

/// Make `link` a symbolic link to `target`.
#[no_mangle]
pub unsafe extern "C" fn mb_symlink(v: *const MbVolume, target: *const c_char, link: *const c_char) -> c_int {
    guard_int(|| {
        // SAFETY: `target` and `link` are NULL (refused) or NUL-terminated strings live for the call (the header's contract).
        let (t, l) = unsafe { (crate::path(target, "target")?, crate::path(link, "link")?) };
        on(v, |vol| vol.symlink(t, l))?;
        Ok(0)
    })
}

/// The target of the symbolic link `path`: up to `cap` bytes into `buf`
/// (no NUL added, as `readlink(2)`), and its whole length as the answer.
#[no_mangle]
pub unsafe extern "C" fn mb_readlink(v: *const MbVolume, path: *const c_char, buf: *mut c_char, cap: usize) -> i64 {
    guard(|| {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let p = unsafe { crate::path(path, "path") }?;
        let t = on(v, |vol| vol.read_link(p))?;
        // SAFETY: `buf` is NULL or points at `cap` writable bytes (the header's contract).
        unsafe { copy_out(t.as_os_str().as_bytes(), buf.cast(), cap) }
    })
}

/// Fill `*out` with what `path` is (`flags`: 0, or `MB_STAT_NOFOLLOW` to
/// describe a symbolic link itself).
#[no_mangle]
pub unsafe extern "C" fn mb_stat(v: *const MbVolume, path: *const c_char, flags: c_int, out: *mut MbStat) -> c_int {
    guard_int(|| {
        known_flags(flags, MB_STAT_NOFOLLOW, "stat")?;
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let p = unsafe { crate::path(path, "path") }?;
        let m = on(v, |vol| match flags {
            0 => vol.metadata(p),
            _ => vol.symlink_metadata(p),
        })?;
        // SAFETY: `out` is NULL (refused) or valid for one write (the header's contract).
        unsafe { put(out, stat_of(m), "out") }?;
        Ok(0)
    })
}

/// Cut or extend the file `path` to `size` bytes (`truncate(2)`).
#[no_mangle]
pub unsafe extern "C" fn mb_truncate(v: *const MbVolume, path: *const c_char, size: u64) -> c_int {
    guard_int(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let p = unsafe { crate::path(path, "path") }?;
        on(v, |vol| vol.set_len(p, size))?;
        Ok(0)
    })
}

/// Set the permission bits of `path` (`chmod(2)`).
#[no_mangle]
pub unsafe extern "C" fn mb_chmod(v: *const MbVolume, path: *const c_char, mode: u32) -> c_int {
    guard_int(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let p = unsafe { crate::path(path, "path") }?;
        on(v, |vol| vol.set_permissions(p, mode))?;
        Ok(0)
    })
}

/// Set the chattr flags of `path` (`MB_FL_IMMUTABLE`, `MB_FL_APPEND`,
/// `MB_FL_SYNC`; 0 clears them).
#[no_mangle]
pub unsafe extern "C" fn mb_set_flags(v: *const MbVolume, path: *const c_char, flags: u32) -> c_int {
    guard_int(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let p = unsafe { crate::path(path, "path") }?;
        on(v, |vol| {
            let f = vol.resolve(p)?;
            vol.set_flags(f, flags)
        })?;
        Ok(0)
    })
}

/// List the directory `path`: store a listing in `*out` for `mb_readdir`,
/// to close with `mb_closedir`. The listing is the directory as it was
/// now; later changes do not show in it.
#[no_mangle]
pub unsafe extern "C" fn mb_opendir(v: *const MbVolume, path: *const c_char, out: *mut *mut MbDir) -> c_int {
    guard_int(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let p = unsafe { crate::path(path, "path") }?;
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        let entries = on(v, |vol| vol.read_dir(p))?;
        // SAFETY: `out` is non-NULL and writable (the header's contract).
        unsafe { *out = Box::into_raw(Box::new(MbDir { entries, next: 0 })) };
        Ok(0)
    })
}

/// The listing's next entry into `*out`: 1, or 0 after the last (by name;
/// `.` and `..` are not listed).
#[no_mangle]
pub unsafe extern "C" fn mb_readdir(d: *mut MbDir, out: *mut MbDirEntry) -> c_int {
    guard_int(|| {
        // SAFETY: a non-NULL `d` came from `mb_opendir` and is not closed.
        let d = unsafe { d.as_mut() }.ok_or_else(|| invalid("the listing is NULL"))?;
        let Some(e) = d.entries.get(d.next) else { return Ok(0) };
        let mut name = [0 as c_char; MB_NAME_MAX + 1];
        for (dst, &b) in name.iter_mut().zip(e.name.iter().take(MB_NAME_MAX)) {
            *dst = b as c_char;
        }
        // SAFETY: `out` is NULL (refused) or valid for one write (the header's contract).
        unsafe { put(out, MbDirEntry { ino: e.ino.0, kind: e.kind, name }, "out") }?;
        d.next += 1;
        Ok(1)
    })
}

/// Free a listing (NULL is ignored).
#[no_mangle]
pub unsafe extern "C" fn mb_closedir(d: *mut MbDir) {
    if !d.is_null() {
        // SAFETY: `d` came from `mb_opendir` (Box::into_raw), freed once.
        drop(unsafe { Box::from_raw(d) });
    }
}

/// The value of extended attribute `name` (`user.x`) of `path`: up to
/// `cap` bytes into `buf`, and its whole length as the answer (`cap` 0
/// asks only the length), as `getxattr(2)`.
#[no_mangle]
pub unsafe extern "C" fn mb_getxattr(
    v: *const MbVolume,
    path: *const c_char,
    name: *const c_char,
    buf: *mut u8,
    cap: usize,
) -> i64 {
    guard(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let (p, n) = unsafe { (crate::path(path, "path")?, string(name, "name")?) };
        let value = on(v, |vol| vol.get_xattr(p, n))?;
        // SAFETY: `buf` is NULL or points at `cap` writable bytes (the header's contract).
        unsafe { copy_out(&value, buf, cap) }
    })
}

/// Set extended attribute `name` of `path` to the `len` bytes at `value`
/// (`flags`: 0, `MB_XATTR_CREATE` or `MB_XATTR_REPLACE`).
#[no_mangle]
pub unsafe extern "C" fn mb_setxattr(
    v: *const MbVolume,
    path: *const c_char,
    name: *const c_char,
    value: *const u8,
    len: usize,
    flags: c_int,
) -> c_int {
    guard_int(|| {
        known_flags(flags, MB_XATTR_CREATE | MB_XATTR_REPLACE, "setxattr")?;
        let how = match flags {
            0 => XattrSet::Any,
            MB_XATTR_CREATE => XattrSet::Create,
            MB_XATTR_REPLACE => XattrSet::Replace,
            _ => return Err(invalid("MB_XATTR_CREATE and MB_XATTR_REPLACE exclude each other")),
        };
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let (p, n) = unsafe { (crate::path(path, "path")?, string(name, "name")?) };
        if value.is_null() && len > 0 {
            return Err(invalid("value is NULL"));
        }
        let bytes: &[u8] = match len {
            0 => &[],
            // SAFETY: `value` points at `len` readable bytes (the header's
            // contract); checked for NULL.
            _ => unsafe { std::slice::from_raw_parts(value, len) },
        };
        on(v, |vol| vol.set_xattr(p, n, bytes, how))?;
        Ok(0)
    })
}

/// The names of `path`'s extended attributes, each NUL-terminated, one
/// after another: up to `cap` bytes into `buf`, and the whole length as
/// the answer, as `listxattr(2)`.
#[no_mangle]
pub unsafe extern "C" fn mb_listxattr(v: *const MbVolume, path: *const c_char, buf: *mut c_char, cap: usize) -> i64 {
    guard(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let p = unsafe { crate::path(path, "path") }?;
        let names = on(v, |vol| vol.list_xattrs(p))?;
        let mut all = Vec::new();
        for n in names {
            all.extend_from_slice(n.as_bytes());
            all.push(0);
        }
        // SAFETY: `buf` is NULL or points at `cap` writable bytes (the header's contract).
        unsafe { copy_out(&all, buf.cast(), cap) }
    })
}

/// Remove extended attribute `name` of `path`.
#[no_mangle]
pub unsafe extern "C" fn mb_removexattr(v: *const MbVolume, path: *const c_char, name: *const c_char) -> c_int {
    guard_int(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let (p, n) = unsafe { (crate::path(path, "path")?, string(name, "name")?) };
        on(v, |vol| vol.remove_xattr(p, n))?;
        Ok(0)
    })
}
