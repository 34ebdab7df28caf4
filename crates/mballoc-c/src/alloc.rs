//! The bare allocator: a volume's free space and nothing else, for
//! studying placement from C.

use crate::{c_int_of, guard, invalid};
use mballoc::{AllocRequest, Allocator, Geometry, Tunables};
use std::ffi::{c_char, c_int, CStr, CString};

/// An allocator over `blocks` blocks.
pub struct MbAllocator {
    alloc: Allocator,
}

fn alloc_err(e: mballoc::Error) -> (i32, String) {
    let errno = match e {
        mballoc::Error::NoSpace { .. } => libc::ENOSPC,
        _ => libc::EINVAL,
    };
    (errno, e.to_string())
}

/// Make an allocator over `blocks` blocks of `block_size` bytes, with
/// `profile` "kernel" (ext4's behaviour wherever the engine's defaults
/// differ) or "default" (NULL is "default"); statistics on. Stores the
/// handle in `*out`.
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_new(
    blocks: u64,
    block_size: u32,
    profile: *const c_char,
    out: *mut *mut MbAllocator,
) -> c_int {
    c_int_of(guard(|| {
        let profile = match profile.is_null() {
            true => "default",
            // SAFETY: a non-NULL `profile` is a NUL-terminated string (the
            // header's contract).
            false => unsafe { CStr::from_ptr(profile) }.to_str().map_err(|_| invalid("profile is not UTF-8"))?,
        };
        let tunables = match profile {
            "default" => Tunables::default(),
            "kernel" => Tunables::kernel(),
            p => return Err(invalid(&format!("unknown profile {p:?}: kernel or default"))),
        };
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        let geo = Geometry::new(block_size, blocks).map_err(alloc_err)?;
        let alloc =
            Allocator::builder(geo).tunables(Tunables { mb_stats: true, ..tunables }).build().map_err(alloc_err)?;
        // SAFETY: `out` is non-NULL and writable (the header's contract).
        unsafe { *out = Box::into_raw(Box::new(MbAllocator { alloc })) };
        Ok(0)
    }))
}

/// Free an allocator.
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_free(a: *mut MbAllocator) {
    if !a.is_null() {
        // SAFETY: `a` came from `mb_allocator_new` and is freed once.
        drop(unsafe { Box::from_raw(a) });
    }
}

unsafe fn allocator<'a>(a: *const MbAllocator) -> Result<&'a Allocator, (i32, String)> {
    // SAFETY: a non-NULL `a` came from `mb_allocator_new` and was not freed.
    unsafe { a.as_ref() }.map(|a| &a.alloc).ok_or_else(|| invalid("the allocator is NULL"))
}

/// Allocate up to `len` blocks near `goal`: the extent in `*start` and
/// `*got` (possibly shorter than asked, as mballoc's best effort is).
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_allocate(
    a: *const MbAllocator,
    goal: u64,
    len: u32,
    start: *mut u64,
    got: *mut u32,
) -> c_int {
    c_int_of(guard(|| {
        let a = unsafe { allocator(a) }?;
        if start.is_null() || got.is_null() {
            return Err(invalid("start or got is NULL"));
        }
        let r = a.allocate(&AllocRequest::new(len).try_goal(goal)).map_err(alloc_err)?;
        // SAFETY: both are non-NULL and writable (the header's contract).
        unsafe {
            *start = r.extent.start;
            *got = r.extent.len;
        }
        Ok(0)
    }))
}

/// Give `len` blocks from `start` back (a double free is `-EINVAL`).
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_release(a: *const MbAllocator, start: u64, len: u64) -> c_int {
    c_int_of(guard(|| {
        unsafe { allocator(a) }?.free(start, len).map_err(alloc_err)?;
        Ok(0)
    }))
}

/// Free blocks.
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_free_blocks(a: *const MbAllocator) -> u64 {
    // SAFETY: as for every call: a live handle or NULL.
    unsafe { allocator(a) }.map_or(0, |a| a.free_blocks())
}

/// The counters as `mb_stats` prints them; free with `mb_string_free`.
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_mb_stats(a: *const MbAllocator) -> *mut c_char {
    let mut s = None;
    guard(|| {
        s = Some(unsafe { allocator(a) }?.mb_stats_report());
        Ok(0)
    });
    s.map_or(std::ptr::null_mut(), |s| CString::new(s).expect("no NUL in a report").into_raw())
}
