//! Open files from C: positional reads and writes, size, durability,
//! `fallocate`'s modes, stat and the extent map. A file handle holds its
//! volume's state, not the volume handle: after `mb_volume_close` it
//! fails `-EBADF` and must still be closed.

use crate::names::{stat_of, MbStat};
use crate::volume::{volume, MbVolume};
use crate::{guard, guard_int, invalid, known_flags, put, vol_err, CError};
use mballoc_vol::{FallocateMode, OpenOptions};
use std::ffi::{c_char, c_int};

/// Open for reading.
pub const MB_O_READ: c_int = 1;
/// Open for writing.
pub const MB_O_WRITE: c_int = 2;
/// Make the file if it does not exist.
pub const MB_O_CREATE: c_int = 4;
/// Cut the file to nothing on open.
pub const MB_O_TRUNC: c_int = 8;
/// Every write goes to the end of the file (implies `MB_O_WRITE`).
pub const MB_O_APPEND: c_int = 16;
/// Fail `-EEXIST` if the file exists (with `MB_O_CREATE`).
pub const MB_O_EXCL: c_int = 32;
/// `mb_file_fallocate`: leave the size alone (`FALLOC_FL_KEEP_SIZE`).
pub const MB_FALLOC_KEEP_SIZE: c_int = 1;
/// `mb_file_fallocate`: deallocate the range; it reads as zeros
/// (`FALLOC_FL_PUNCH_HOLE`; the size never changes).
pub const MB_FALLOC_PUNCH_HOLE: c_int = 2;
/// `mb_file_fallocate`: make the range read as zeros, its blocks kept or
/// allocated, all or nothing (`FALLOC_FL_ZERO_RANGE`).
pub const MB_FALLOC_ZERO_RANGE: c_int = 16;

/// An open regular file of a volume.
pub struct MbFile {
    f: mballoc_vol::File,
}

/// One extent of a file's map.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MbExtent {
    /// First logical block.
    pub logical: u64,
    /// First physical block.
    pub physical: u64,
    /// Blocks.
    pub length: u32,
    /// 1 if allocated but not written (reads as zeros).
    pub unwritten: u32,
}

unsafe fn file<'a>(f: *const MbFile) -> Result<&'a mballoc_vol::File, CError> {
    // SAFETY: a non-NULL `f` came from `mb_file_open` and has not been
    // closed (the header's contract).
    unsafe { f.as_ref() }.map(|h| &h.f).ok_or_else(|| invalid("the file is NULL"))
}

/// Open the regular file at `path` (`flags`: `MB_O_*` or'd; `mode`: the
/// permission bits of a file it makes, 0 for 0644) and store the handle
/// in `*out`. Unknown flags are `-EINVAL`.
#[no_mangle]
pub unsafe extern "C" fn mb_file_open(
    v: *const MbVolume,
    path: *const c_char,
    flags: c_int,
    mode: u32,
    out: *mut *mut MbFile,
) -> c_int {
    guard_int(|| {
        known_flags(flags, MB_O_READ | MB_O_WRITE | MB_O_CREATE | MB_O_TRUNC | MB_O_APPEND | MB_O_EXCL, "open")?;
        // SAFETY: `v` is NULL (refused) or a handle from `mb_volume_open` not yet closed (the header's contract).
        let vh = unsafe { volume(v) }?;
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let path = unsafe { crate::path(path, "path") }?;
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        let has = |f: c_int| flags & f != 0;
        let mut o = OpenOptions::new();
        o.read(has(MB_O_READ))
            .write(has(MB_O_WRITE))
            .append(has(MB_O_APPEND))
            .create(has(MB_O_CREATE))
            .create_new(has(MB_O_CREATE) && has(MB_O_EXCL))
            .truncate(has(MB_O_TRUNC))
            .mode(if mode == 0 { 0o644 } else { mode });
        let f = vh.vol.file(path, &o).map_err(vol_err)?;
        // SAFETY: `out` is non-NULL and writable (the header's contract).
        unsafe { *out = Box::into_raw(Box::new(MbFile { f })) };
        Ok(0)
    })
}

/// Close a file (NULL is ignored); an unlinked file goes away at its last
/// close.
#[no_mangle]
pub unsafe extern "C" fn mb_file_close(f: *mut MbFile) -> c_int {
    if f.is_null() {
        return 0;
    }
    guard_int(|| {
        // SAFETY: `f` came from `mb_file_open` (Box::into_raw) and is given
        // back once.
        drop(unsafe { Box::from_raw(f) });
        Ok(0)
    })
}

/// Read up to `len` bytes at `offset` into `buf`: the count read (short
/// only at the end of the file), or a negative errno.
#[no_mangle]
pub unsafe extern "C" fn mb_file_read_at(f: *const MbFile, buf: *mut u8, len: usize, offset: u64) -> i64 {
    guard(|| {
        // SAFETY: `f` is NULL (refused) or a handle from `mb_file_open` not yet closed (the header's contract).
        let f = unsafe { file(f) }?;
        if buf.is_null() && len > 0 {
            return Err(invalid("buf is NULL"));
        }
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` points at `len` writable bytes (the header's
        // contract); checked for NULL.
        let b = unsafe { std::slice::from_raw_parts_mut(buf, len) };
        Ok(f.read_at(b, offset).map_err(read_err)? as i64)
    })
}

/// A read or write the open mode forbids is `EBADF`, as in POSIX.
fn read_err(e: mballoc_vol::VolError) -> CError {
    match e {
        mballoc_vol::VolError::InvalidArgument(m) if m.contains("not opened for") => (libc::EBADF, m),
        e => vol_err(e),
    }
}

/// Write the `len` bytes at `buf` at `offset` (at the end, for a file
/// opened with `MB_O_APPEND`): `len`, or a negative errno (then nothing
/// was written).
#[no_mangle]
pub unsafe extern "C" fn mb_file_write_at(f: *const MbFile, buf: *const u8, len: usize, offset: u64) -> i64 {
    guard(|| {
        // SAFETY: `f` is NULL (refused) or a handle from `mb_file_open` not yet closed (the header's contract).
        let f = unsafe { file(f) }?;
        if buf.is_null() && len > 0 {
            return Err(invalid("buf is NULL"));
        }
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` points at `len` readable bytes (the header's
        // contract); checked for NULL.
        let b = unsafe { std::slice::from_raw_parts(buf, len) };
        f.write_at(b, offset).map_err(read_err)?;
        Ok(len as i64)
    })
}

/// Store the file's size in bytes in `*out`.
#[no_mangle]
pub unsafe extern "C" fn mb_file_size(f: *const MbFile, out: *mut u64) -> c_int {
    guard_int(|| {
        // SAFETY: `f` is NULL (refused) or a handle from `mb_file_open` not yet closed (the header's contract).
        let size = unsafe { file(f) }?.len().map_err(vol_err)?;
        // SAFETY: `out` is NULL (refused) or valid for one write (the header's contract).
        unsafe { put(out, size, "out") }?;
        Ok(0)
    })
}

/// Fill `*out` with what the file is (`fstat`).
#[no_mangle]
pub unsafe extern "C" fn mb_file_stat(f: *const MbFile, out: *mut MbStat) -> c_int {
    guard_int(|| {
        // SAFETY: `f` is NULL (refused) or a handle from `mb_file_open` not yet closed (the header's contract).
        let m = unsafe { file(f) }?.metadata().map_err(vol_err)?;
        // SAFETY: `out` is NULL (refused) or valid for one write (the header's contract).
        unsafe { put(out, stat_of(m), "out") }?;
        Ok(0)
    })
}

/// Make the file's data and metadata durable (`fsync`).
#[no_mangle]
pub unsafe extern "C" fn mb_file_sync(f: *const MbFile) -> c_int {
    guard_int(|| {
        // SAFETY: `f` is NULL (refused) or a handle from `mb_file_open` not yet closed (the header's contract).
        unsafe { file(f) }?.sync_all().map_err(vol_err)?;
        Ok(0)
    })
}

/// Cut or extend the file to `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mb_file_set_len(f: *const MbFile, size: u64) -> c_int {
    guard_int(|| {
        // SAFETY: `f` is NULL (refused) or a handle from `mb_file_open` not yet closed (the header's contract).
        unsafe { file(f) }?.set_len(size).map_err(read_err)?;
        Ok(0)
    })
}

/// `fallocate(2)` on `[offset, offset + len)`: with `flags` 0 reserve
/// blocks and grow the size to cover them; `MB_FALLOC_KEEP_SIZE` reserve
/// only; `MB_FALLOC_PUNCH_HOLE` deallocate; `MB_FALLOC_ZERO_RANGE` (with
/// or without `MB_FALLOC_KEEP_SIZE`) zero. Every mode is all or nothing.
#[no_mangle]
pub unsafe extern "C" fn mb_file_fallocate(f: *const MbFile, flags: c_int, offset: u64, len: u64) -> c_int {
    guard_int(|| {
        known_flags(flags, MB_FALLOC_KEEP_SIZE | MB_FALLOC_PUNCH_HOLE | MB_FALLOC_ZERO_RANGE, "fallocate")?;
        // SAFETY: `f` is NULL (refused) or a handle from `mb_file_open` not yet closed (the header's contract).
        let f = unsafe { file(f) }?;
        let keep = if flags & MB_FALLOC_KEEP_SIZE != 0 { FallocateMode::KeepSize } else { FallocateMode::ExtendSize };
        let r = match flags & !MB_FALLOC_KEEP_SIZE {
            0 => f.allocate(offset, len, keep),
            MB_FALLOC_PUNCH_HOLE => f.punch(offset, len),
            MB_FALLOC_ZERO_RANGE => f.zero_range(offset, len, keep),
            _ => return Err(invalid("MB_FALLOC_PUNCH_HOLE and MB_FALLOC_ZERO_RANGE exclude each other")),
        };
        r.map_err(read_err)?;
        Ok(0)
    })
}

/// The file's extent map: up to `cap` extents into `out` (which may be
/// NULL when `cap` is 0), and the total number in `*count`.
#[no_mangle]
pub unsafe extern "C" fn mb_file_extents(f: *const MbFile, out: *mut MbExtent, cap: usize, count: *mut usize) -> c_int {
    guard_int(|| {
        // SAFETY: `f` is NULL (refused) or a handle from `mb_file_open` not yet closed (the header's contract).
        let ext = unsafe { file(f) }?.extents().map_err(vol_err)?;
        if cap > 0 && out.is_null() {
            return Err(invalid("out is NULL"));
        }
        for (i, e) in ext.iter().take(cap).enumerate() {
            let unwritten = u32::from(e.state == mballoc_vol::ExtentState::Unwritten);
            // SAFETY: `out` has room for `cap` extents (the header's
            // contract) and `i < cap`.
            unsafe { *out.add(i) = MbExtent { logical: e.logical, physical: e.physical, length: e.len, unwritten } };
        }
        // SAFETY: `count` is NULL (refused) or valid for one write (the header's contract).
        unsafe { put(count, ext.len(), "count") }?;
        Ok(0)
    })
}
