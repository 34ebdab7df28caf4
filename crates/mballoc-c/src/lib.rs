//! # mballoc-c — the volume and the allocator as a C library
//!
//! `include/mballoc.h` is generated from this crate by cbindgen; its
//! opening comment (in `cbindgen.toml`) states the rules a C caller needs
//! — errors, ownership, lifetimes, threads — and each call's comment its
//! contract. `make -C crates/mballoc-c install PREFIX=...` installs the
//! shared library (SONAME `libmballoc_c.so.0`), the static one, the
//! header and `mballoc.pc` for pkg-config. `examples/c/` is the tour.
//!
//! The modules: `volume` (format, open with options, close, sync, statvfs,
//! check and repair, fault injection), `names` (the namespace by path:
//! directories and their listing, rename, links, stat, xattrs), `file`
//! (open files), `alloc` (the bare allocator). This file holds what
//! every call shares: the error rule and the checks of C's arguments.

#![allow(clippy::missing_safety_doc)] // the header states each pointer's contract

use mballoc_vol::VolError;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

mod alloc;
mod file;
mod names;
mod volume;
pub use alloc::*;
pub use file::*;
pub use names::*;
pub use volume::*;

/// The library's major version (`MB_VERSION_MAJOR.MINOR.PATCH` is
/// [`mb_version`]'s string; a test keeps these equal to it).
pub const MB_VERSION_MAJOR: c_int = 0;
/// The library's minor version.
pub const MB_VERSION_MINOR: c_int = 1;
/// The library's patch version.
pub const MB_VERSION_PATCH: c_int = 0;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).expect("NULs replaced");
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// An error as C sees it: the errno and the message.
pub(crate) type CError = (i32, String);

/// Run `f`, turning its error or a panic into a negative errno and the
/// thread's last error.
pub(crate) fn guard(f: impl FnOnce() -> Result<i64, CError>) -> i64 {
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

/// [`guard`] for calls that return an `int`.
pub(crate) fn guard_int(f: impl FnOnce() -> Result<i64, CError>) -> c_int {
    guard(f).clamp(i64::from(c_int::MIN), i64::from(c_int::MAX)) as c_int
}

pub(crate) fn vol_err(e: VolError) -> CError {
    (e.errno(), e.to_string())
}

pub(crate) fn invalid(msg: &str) -> CError {
    (libc::EINVAL, msg.to_string())
}

/// Refuse flags outside `known`.
pub(crate) fn known_flags(flags: c_int, known: c_int, what: &str) -> Result<(), CError> {
    match flags & !known {
        0 => Ok(()),
        bad => Err(invalid(&format!("unknown {what} flags {bad:#x}"))),
    }
}

/// A NUL-terminated string argument.
pub(crate) unsafe fn string<'a>(p: *const c_char, what: &str) -> Result<&'a str, CError> {
    if p.is_null() {
        return Err(invalid(&format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string that lives for the
    // call (the header's contract); it was checked for NULL above.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| invalid(&format!("{what} is not UTF-8")))
}

/// A path argument: bytes, as POSIX paths are.
pub(crate) unsafe fn path<'a>(p: *const c_char, what: &str) -> Result<&'a Path, CError> {
    use std::os::unix::ffi::OsStrExt;
    if p.is_null() {
        return Err(invalid(&format!("{what} is NULL")));
    }
    // SAFETY: as for `string`.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    Ok(Path::new(std::ffi::OsStr::from_bytes(bytes)))
}

/// Store `value` through the out-pointer `out`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), CError> {
    // SAFETY: a non-NULL `out` points at writable storage for a `T` (the
    // header's contract).
    unsafe { out.as_mut() }.map(|o| *o = value).ok_or_else(|| invalid(&format!("{what} is NULL")))
}

/// Copy `src` into the caller's buffer `buf` of `cap` bytes, as much as
/// fits; the full length is the answer (as `getxattr`, `readlink` and
/// `snprintf` answer), so a caller can size the buffer and call again.
pub(crate) unsafe fn copy_out(src: &[u8], buf: *mut u8, cap: usize) -> Result<i64, CError> {
    if cap > 0 {
        if buf.is_null() {
            return Err(invalid("buf is NULL"));
        }
        let n = src.len().min(cap);
        // SAFETY: `buf` has room for `cap` bytes (the header's contract)
        // and `n <= cap`; the regions are distinct (ours is a fresh Vec).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buf, n) };
    }
    Ok(src.len() as i64)
}

/// A string for C, freed by [`mb_string_free`]; NULL for none.
pub(crate) fn c_string(s: Option<String>) -> *mut c_char {
    s.map_or(std::ptr::null_mut(), |s| CString::new(s.replace('\0', " ")).expect("NULs replaced").into_raw())
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

/// Free a string this library returned (NULL is ignored).
#[no_mangle]
pub unsafe extern "C" fn mb_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: `s` came from CString::into_raw in this library and is
        // freed once (the header's contract).
        drop(unsafe { CString::from_raw(s) });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_version_macros_match_the_crate() {
        let v = format!("{}.{}.{}", super::MB_VERSION_MAJOR, super::MB_VERSION_MINOR, super::MB_VERSION_PATCH);
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
        let config = include_str!("../cbindgen.toml");
        assert!(config.contains(&format!("#define MB_VERSION \"{v}\"")), "cbindgen.toml's MB_VERSION is {v}");
    }
}
