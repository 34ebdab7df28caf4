//! # mballoc-c — the volume and the allocator as a C library
//!
//! `include/mballoc.h` is generated from this file by cbindgen; build with
//! `cargo build --release -p mballoc-c` and link `libmballoc_c.so` or
//! `libmballoc_c.a` (with `-lpthread -ldl -lm`). `examples/c/example.c` is
//! the tour.
//!
//! Conventions, the same for every call:
//!
//! * Handles are opaque pointers made by a `*_open`/`*_new` call and given
//!   back to its `*_close`/`*_free` (NULL is accepted and ignored there).
//! * A call returns 0 (or a count of bytes) on success and a negative
//!   errno on failure (`-ENOENT`, `-ENOSPC`, `-EIO`, ...);
//!   [`mb_last_error`] then says what failed, in words, for the calling
//!   thread. Calls that return a string return NULL on failure.
//! * No Rust panic crosses into C: one is caught, reported as `-EIO`
//!   with its message, and the handle stays usable where it can.
//! * A volume may be shared by threads; one file handle should be used by
//!   one thread at a time (positional calls are safe from several).
//! * A volume with open files refuses to close (`-EBUSY`).

#![allow(clippy::missing_safety_doc)] // the header states each pointer's contract

use mballoc_vol::{FallocateMode, FileId, FormatOptions, Overwrite, VolError, Volume};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

mod alloc;
pub use alloc::*;

/// Open for reading.
pub const MB_O_READ: c_int = 1;
/// Open for writing.
pub const MB_O_WRITE: c_int = 2;
/// Make the file if it does not exist.
pub const MB_O_CREATE: c_int = 4;
/// Cut the file to nothing on open.
pub const MB_O_TRUNC: c_int = 8;
/// Fail if the file exists (with `MB_O_CREATE`).
pub const MB_O_EXCL: c_int = 32;
/// `mb_volume_open`: read-only (nothing is written, not even a replay).
pub const MB_VOLUME_READ_ONLY: c_int = 1;
/// `mb_volume_open`: count the allocator's statistics (`mb_stats`), off
/// by default as in ext4.
pub const MB_VOLUME_STATS: c_int = 2;
/// `mb_file_allocate`: leave the size alone (`FALLOC_FL_KEEP_SIZE`).
pub const MB_FALLOC_KEEP_SIZE: c_int = 1;

/// A mounted volume.
pub struct MbVolume {
    vol: Arc<Volume>,
    open_files: AtomicUsize,
}

/// An open regular file of a volume.
pub struct MbFile {
    vol: *const MbVolume,
    id: FileId,
    writable: bool,
    readable: bool,
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

/// A volume's shape and use.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MbVolumeStat {
    /// Bytes per block.
    pub block_size: u32,
    /// Blocks in the volume.
    pub blocks: u64,
    /// Free blocks (the allocator's count).
    pub free_blocks: u64,
    /// Inodes in use (files, directories, links), the root included.
    pub inodes: u64,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).expect("NULs replaced");
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Run `f`, turning its error or a panic into a negative errno and the
/// thread's last error.
pub(crate) fn guard(f: impl FnOnce() -> Result<i64, (i32, String)>) -> i64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n,
        Ok(Err((errno, msg))) => {
            set_error(msg);
            -i64::from(errno)
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            set_error(format!("internal error (a bug): {what}"));
            -i64::from(libc::EIO)
        }
    }
}

pub(crate) fn vol_err(e: VolError) -> (i32, String) {
    (e.errno(), e.to_string())
}

pub(crate) fn invalid(msg: &str) -> (i32, String) {
    (libc::EINVAL, msg.to_string())
}

unsafe fn string<'a>(p: *const c_char, what: &str) -> Result<&'a str, (i32, String)> {
    if p.is_null() {
        return Err(invalid(&format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string that lives for the
    // call (the header's contract); it was checked for NULL above.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| invalid(&format!("{what} is not UTF-8")))
}

unsafe fn volume<'a>(v: *const MbVolume) -> Result<&'a MbVolume, (i32, String)> {
    // SAFETY: a non-NULL `v` came from `mb_volume_open` and has not been
    // closed (the header's contract).
    unsafe { v.as_ref() }.ok_or_else(|| invalid("the volume is NULL"))
}

unsafe fn file<'a>(f: *const MbFile) -> Result<(&'a MbFile, &'a Volume), (i32, String)> {
    // SAFETY: a non-NULL `f` came from `mb_file_open` and has not been
    // closed; its volume outlives it (a volume with open files refuses to
    // close).
    let f = unsafe { f.as_ref() }.ok_or_else(|| invalid("the file is NULL"))?;
    let v = unsafe { &*f.vol };
    Ok((f, &v.vol))
}

pub(crate) fn c_int_of(n: i64) -> c_int {
    n.clamp(i64::from(c_int::MIN), i64::from(c_int::MAX)) as c_int
}

/// The message of the calling thread's last failure ("" if none). Valid
/// until the thread's next mballoc call.
#[no_mangle]
pub extern "C" fn mb_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The library's version ("0.1.0"), the same as the crates' and the
/// Python package's.
#[no_mangle]
pub extern "C" fn mb_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Format a new volume file of `size` bytes (blocks of `block_size`; 0 for
/// 4096) at `path`. A path that holds anything is refused (`-EEXIST`
/// or `-EBUSY`): nothing is overwritten.
#[no_mangle]
pub unsafe extern "C" fn mb_format(path: *const c_char, size: u64, block_size: u32) -> c_int {
    c_int_of(guard(|| {
        let path = unsafe { string(path, "path") }?;
        let mut opts = FormatOptions::default();
        if block_size != 0 {
            opts.block_size = block_size;
        }
        mballoc_vol::mkfs(Path::new(path), Some(size), &opts, Overwrite::Refuse).map_err(vol_err)?;
        Ok(0)
    }))
}

/// Mount the volume at `path` (`flags`: 0, or `MB_VOLUME_READ_ONLY` and
/// `MB_VOLUME_STATS` or'd) and store the handle in `*out`.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_open(path: *const c_char, flags: c_int, out: *mut *mut MbVolume) -> c_int {
    c_int_of(guard(|| {
        let path = unsafe { string(path, "path") }?;
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        if flags & !(MB_VOLUME_READ_ONLY | MB_VOLUME_STATS) != 0 {
            return Err(invalid("unknown volume flags"));
        }
        let (mode, access) = match flags & MB_VOLUME_READ_ONLY {
            0 => (mballoc_vol::OpenMode::ReadWrite, mballoc_vol::Access::ReadWrite),
            _ => (mballoc_vol::OpenMode::ReadOnly, mballoc_vol::Access::ReadOnly),
        };
        let dev = mballoc_vol::FileDevice::open(Path::new(path), mode).map_err(vol_err)?;
        let opts = mballoc_vol::MountOptions { access, ..Default::default() };
        let stats = flags & MB_VOLUME_STATS != 0;
        let vol = Volume::open_with(Arc::new(dev), opts, |c| c.placement.tunables.mb_stats = stats).map_err(vol_err)?;
        let h = Box::new(MbVolume { vol, open_files: AtomicUsize::new(0) });
        // SAFETY: `out` is non-NULL and points at writable storage for a
        // pointer (the header's contract).
        unsafe { *out = Box::into_raw(h) };
        Ok(0)
    }))
}

/// Unmount: everything written reaches the disk and the volume is left
/// clean. Refused (`-EBUSY`, the handle still valid) while files are
/// open; on any other failure the handle is gone all the same (the next
/// mount recovers).
#[no_mangle]
pub unsafe extern "C" fn mb_volume_close(v: *mut MbVolume) -> c_int {
    if v.is_null() {
        return 0;
    }
    c_int_of(guard(|| {
        let open = unsafe { volume(v) }?.open_files.load(Ordering::Acquire);
        if open > 0 {
            return Err((libc::EBUSY, format!("{open} file(s) still open")));
        }
        // SAFETY: `v` came from `mb_volume_open` (Box::into_raw) and is
        // given back once; no file refers to it.
        let h = unsafe { Box::from_raw(v) };
        h.vol.unmount().map_err(vol_err)?;
        Ok(0)
    }))
}

/// Fill `*out` with the volume's shape and use.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_stat(v: *const MbVolume, out: *mut MbVolumeStat) -> c_int {
    c_int_of(guard(|| {
        let v = unsafe { volume(v) }?;
        let sb = v.vol.superblock();
        let stat = MbVolumeStat {
            block_size: sb.block_size,
            blocks: sb.total_blocks,
            free_blocks: v.vol.fs().allocator().free_blocks(),
            inodes: v.vol.usage().inodes - v.vol.usage().free_inodes,
        };
        // SAFETY: `out` points at writable storage for the struct (the
        // header's contract); checked for NULL.
        unsafe { out.as_mut() }.map(|o| *o = stat).ok_or_else(|| invalid("out is NULL"))?;
        Ok(0)
    }))
}

/// The volume allocator's counters as `/proc/fs/ext4/DEV/mb_stats` prints
/// them; free with [`mb_string_free`]. NULL on failure.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_mb_stats(v: *const MbVolume) -> *mut c_char {
    let mut s = None;
    guard(|| {
        s = Some(unsafe { volume(v) }?.vol.fs().allocator().mb_stats_report());
        Ok(0)
    });
    s.map_or(std::ptr::null_mut(), |s| CString::new(s).expect("no NUL in a report").into_raw())
}

/// Free a string this library returned.
#[no_mangle]
pub unsafe extern "C" fn mb_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: `s` came from CString::into_raw in this library and is
        // freed once (the header's contract).
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Make the directory `path` (its parent must exist).
#[no_mangle]
pub unsafe extern "C" fn mb_mkdir(v: *const MbVolume, path: *const c_char) -> c_int {
    c_int_of(guard(|| {
        let v = unsafe { volume(v) }?;
        v.vol.mkdir_path(unsafe { string(path, "path") }?).map_err(vol_err)?;
        Ok(0)
    }))
}

/// Open the regular file at `path` (`flags`: `MB_O_*`) and store the
/// handle in `*out`.
#[no_mangle]
pub unsafe extern "C" fn mb_file_open(
    v: *const MbVolume,
    path: *const c_char,
    flags: c_int,
    out: *mut *mut MbFile,
) -> c_int {
    c_int_of(guard(|| {
        let vh = unsafe { volume(v) }?;
        let path = unsafe { string(path, "path") }?;
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        let has = |f: c_int| flags & f != 0;
        let mut o = mballoc_vol::OpenOptions::new();
        o.read(has(MB_O_READ))
            .write(has(MB_O_WRITE))
            .create(has(MB_O_CREATE))
            .create_new(has(MB_O_CREATE) && has(MB_O_EXCL))
            .truncate(has(MB_O_TRUNC));
        let f = vh.vol.file(path, &o).map_err(vol_err)?;
        let id = f.id();
        // The handle keeps the file open; the File's own close is skipped.
        std::mem::forget(f);
        vh.open_files.fetch_add(1, Ordering::AcqRel);
        let writable = has(MB_O_WRITE);
        let h = Box::new(MbFile { vol: v, id, writable, readable: has(MB_O_READ) });
        // SAFETY: `out` is non-NULL and writable (the header's contract).
        unsafe { *out = Box::into_raw(h) };
        Ok(0)
    }))
}

/// Close a file (an unlinked file goes away at its last close).
#[no_mangle]
pub unsafe extern "C" fn mb_file_close(f: *mut MbFile) -> c_int {
    if f.is_null() {
        return 0;
    }
    c_int_of(guard(|| {
        // SAFETY: `f` came from `mb_file_open` (Box::into_raw) and is given
        // back once.
        let h = unsafe { Box::from_raw(f) };
        let v = unsafe { &*h.vol };
        v.open_files.fetch_sub(1, Ordering::AcqRel);
        v.vol.close(h.id).map_err(vol_err)?;
        Ok(0)
    }))
}

/// Read up to `len` bytes at `offset` into `buf`: the count read (short
/// only at the end of the file), or a negative errno.
#[no_mangle]
pub unsafe extern "C" fn mb_file_read_at(f: *const MbFile, buf: *mut u8, len: usize, offset: u64) -> i64 {
    guard(|| {
        let (h, vol) = unsafe { file(f) }?;
        if !h.readable {
            return Err((libc::EBADF, "the file was not opened for reading".into()));
        }
        if buf.is_null() && len > 0 {
            return Err(invalid("buf is NULL"));
        }
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` points at `len` writable bytes (the header's
        // contract); checked for NULL.
        let b = unsafe { std::slice::from_raw_parts_mut(buf, len) };
        Ok(vol.read(h.id, offset, b).map_err(vol_err)? as i64)
    })
}

/// Write the `len` bytes at `buf` at `offset`: `len`, or a negative errno
/// (then nothing was written).
#[no_mangle]
pub unsafe extern "C" fn mb_file_write_at(f: *const MbFile, buf: *const u8, len: usize, offset: u64) -> i64 {
    guard(|| {
        let (h, vol) = unsafe { file(f) }?;
        if !h.writable {
            return Err((libc::EBADF, "the file was not opened for writing".into()));
        }
        if buf.is_null() && len > 0 {
            return Err(invalid("buf is NULL"));
        }
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` points at `len` readable bytes (the header's
        // contract); checked for NULL.
        let b = unsafe { std::slice::from_raw_parts(buf, len) };
        vol.write(h.id, offset, b).map_err(vol_err)?;
        Ok(len as i64)
    })
}

/// Store the file's size in bytes in `*out`.
#[no_mangle]
pub unsafe extern "C" fn mb_file_size(f: *const MbFile, out: *mut u64) -> c_int {
    c_int_of(guard(|| {
        let (h, vol) = unsafe { file(f) }?;
        let size = vol.size(h.id).map_err(vol_err)?;
        // SAFETY: `out` is writable (the header's contract); NULL checked.
        unsafe { out.as_mut() }.map(|o| *o = size).ok_or_else(|| invalid("out is NULL"))?;
        Ok(0)
    }))
}

/// Make the file's data and metadata durable (`fsync`).
#[no_mangle]
pub unsafe extern "C" fn mb_file_sync(f: *const MbFile) -> c_int {
    c_int_of(guard(|| {
        let (h, vol) = unsafe { file(f) }?;
        vol.fsync(h.id).map_err(vol_err)?;
        Ok(0)
    }))
}

/// Cut or extend the file to `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mb_file_set_len(f: *const MbFile, size: u64) -> c_int {
    c_int_of(guard(|| {
        let (h, vol) = unsafe { file(f) }?;
        vol.truncate(h.id, size).map_err(vol_err)?;
        Ok(0)
    }))
}

/// Reserve blocks for `[offset, offset + len)`; the size grows to cover
/// them unless `flags` has `MB_FALLOC_KEEP_SIZE`.
#[no_mangle]
pub unsafe extern "C" fn mb_file_allocate(f: *const MbFile, offset: u64, len: u64, flags: c_int) -> c_int {
    c_int_of(guard(|| {
        let (h, vol) = unsafe { file(f) }?;
        let mode = if flags & MB_FALLOC_KEEP_SIZE != 0 { FallocateMode::KeepSize } else { FallocateMode::ExtendSize };
        vol.fallocate(h.id, offset, len, mode).map_err(vol_err)?;
        Ok(0)
    }))
}

/// Deallocate `[offset, offset + len)`; it reads as zeros after.
#[no_mangle]
pub unsafe extern "C" fn mb_file_punch(f: *const MbFile, offset: u64, len: u64) -> c_int {
    c_int_of(guard(|| {
        let (h, vol) = unsafe { file(f) }?;
        vol.punch_hole(h.id, offset, len).map_err(vol_err)?;
        Ok(0)
    }))
}

/// The file's extent map: up to `cap` extents into `out` (which may be
/// NULL when `cap` is 0), and the total number in `*count`.
#[no_mangle]
pub unsafe extern "C" fn mb_file_extents(f: *const MbFile, out: *mut MbExtent, cap: usize, count: *mut usize) -> c_int {
    c_int_of(guard(|| {
        let (h, vol) = unsafe { file(f) }?;
        let ext = vol.extents(h.id).map_err(vol_err)?;
        if cap > 0 && out.is_null() {
            return Err(invalid("out is NULL"));
        }
        for (i, e) in ext.iter().take(cap).enumerate() {
            let unwritten = u32::from(e.state == mballoc_vol::ExtentState::Unwritten);
            // SAFETY: `out` has room for `cap` extents (the header's
            // contract) and `i < cap`.
            unsafe { *out.add(i) = MbExtent { logical: e.logical, physical: e.physical, length: e.len, unwritten } };
        }
        // SAFETY: `count` is writable (the header's contract); NULL checked.
        unsafe { count.as_mut() }.map(|c| *c = ext.len()).ok_or_else(|| invalid("count is NULL"))?;
        Ok(0)
    }))
}
