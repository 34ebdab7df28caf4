//! The bare allocator: a volume's free space and nothing else, for
//! studying placement from C. The whole request (length, minimum, goal
//! and how it is used, metadata, stream) and which step served it.

use crate::{c_string, guard, guard_int, invalid, known_flags, put, CError};
use mballoc::{AllocRequest, Allocator, Criterion, FoundBy, Geometry};
use std::ffi::{c_char, c_int};

/// An allocator over a number of blocks.
pub struct MbAllocator {
    alloc: Allocator,
}

/// `MbAllocRequest.goal_policy`: no goal (`goal` is ignored).
pub const MB_GOAL_NONE: c_int = 0;
/// Scanning starts at the goal's group.
pub const MB_GOAL_HINT: c_int = 1;
/// Exactly the goal first, then a scan (`HINT_TRY_GOAL`).
pub const MB_GOAL_TRY: c_int = 2;
/// Exactly the goal or `-ENOSPC` (`HINT_GOAL_ONLY`).
pub const MB_GOAL_ONLY: c_int = 3;
/// `MbAllocRequest.flags`: a metadata request (never trimmed by
/// CR_BEST_AVAIL_LEN).
pub const MB_ALLOC_METADATA: c_int = 1;
/// `MbAllocRequest.flags`: use stream goal `stream`.
pub const MB_ALLOC_STREAM: c_int = 2;
/// `MbAllocation.found_by`: at the goal block, before any pass.
pub const MB_FOUND_GOAL: c_int = 0;
/// `MbAllocation.found_by`: by the allocator's policy.
pub const MB_FOUND_POLICY: c_int = 6;
/// `MbAllocation.found_by`: by a pass, `MB_FOUND_PASS + n` for pass n
/// (0 CR_POWER2_ALIGNED … 4 CR_ANY_FREE); `mb_found_by_name` names it.
pub const MB_FOUND_PASS: c_int = 1;

/// One allocation request.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MbAllocRequest {
    /// Blocks wanted.
    pub len: u32,
    /// Fewest blocks accepted (0: 1).
    pub min_len: u32,
    /// Where to look (see `goal_policy`).
    pub goal: u64,
    /// `MB_GOAL_NONE`, `MB_GOAL_HINT`, `MB_GOAL_TRY` or `MB_GOAL_ONLY`.
    pub goal_policy: c_int,
    /// `MB_ALLOC_METADATA`, `MB_ALLOC_STREAM` or'd.
    pub flags: c_int,
    /// The stream key, with `MB_ALLOC_STREAM`.
    pub stream: u64,
}

/// What an allocation got.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MbAllocation {
    /// First block.
    pub start: u64,
    /// Blocks (from `min_len` to `len`).
    pub len: u32,
    /// Which step found them (`MB_FOUND_*`).
    pub found_by: c_int,
    /// Groups scanned under their lock.
    pub groups_scanned: u32,
    /// Free extents measured.
    pub extents_scanned: u32,
}

fn alloc_err(e: mballoc::Error) -> CError {
    let errno = match e {
        mballoc::Error::NoSpace { .. } => libc::ENOSPC,
        _ => libc::EINVAL,
    };
    (errno, e.to_string())
}

/// Make an allocator over `blocks` blocks of `block_size` bytes and store
/// the handle in `*out`. `options` (NULL for none) is a comma-separated
/// list of `KEY=VALUE` settings that act on the allocator:
/// `profile=kernel|default`, `mb_stats=1` (statistics, off by default as
/// in ext4) and the tunables by ext4's names (`mb_max_to_scan=50`, ...).
/// Any other is `-EINVAL`. Destroy with `mb_allocator_destroy`.
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_new(
    blocks: u64,
    block_size: u32,
    options: *const c_char,
    out: *mut *mut MbAllocator,
) -> c_int {
    guard_int(|| {
        let options = match options.is_null() {
            true => "",
            // SAFETY: `options` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
            false => unsafe { crate::string(options, "options") }?,
        };
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        let geo = Geometry::new(block_size, blocks).map_err(alloc_err)?;
        let mut cfg = mballoc_fs::FsConfig::new(geo);
        for o in options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (k, v) = o.split_once('=').ok_or_else(|| invalid(&format!("option {o:?}: KEY=VALUE")))?;
            match mballoc_fs::setting(k.trim()) {
                Some(s) if s.acts_on_allocator() => {
                    cfg.set(k.trim(), v.trim()).map_err(|e| (libc::EINVAL, e.to_string()))?
                }
                Some(_) => return Err(invalid(&format!("setting {k}: the file layer's, not the allocator's"))),
                None => return Err(invalid(&format!("no setting {k:?}"))),
            }
        }
        let alloc = cfg.allocator_builder().build().map_err(alloc_err)?;
        // SAFETY: `out` is non-NULL and writable (the header's contract).
        unsafe { *out = Box::into_raw(Box::new(MbAllocator { alloc })) };
        Ok(0)
    })
}

/// Destroy an allocator (NULL is ignored). Its blocks are not "freed":
/// they are simply forgotten with it.
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_destroy(a: *mut MbAllocator) {
    if !a.is_null() {
        // SAFETY: `a` came from `mb_allocator_new` and is destroyed once.
        drop(unsafe { Box::from_raw(a) });
    }
}

unsafe fn allocator<'a>(a: *const MbAllocator) -> Result<&'a Allocator, CError> {
    // SAFETY: a non-NULL `a` came from `mb_allocator_new` and was not
    // destroyed (the header's contract).
    unsafe { a.as_ref() }.map(|a| &a.alloc).ok_or_else(|| invalid("the allocator is NULL"))
}

/// Serve `*req` and fill `*out`: `-ENOSPC` when no extent of at least
/// `min_len` blocks is free (or, with `MB_GOAL_ONLY`, not at the goal);
/// `-EINVAL` for a request no volume could serve.
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_allocate(
    a: *const MbAllocator,
    req: *const MbAllocRequest,
    out: *mut MbAllocation,
) -> c_int {
    guard_int(|| {
        // SAFETY: `a` is NULL (refused) or a handle from `mb_allocator_new` not yet freed (the header's contract).
        let a = unsafe { allocator(a) }?;
        // SAFETY: a non-NULL `req` points at a request (the header's contract).
        let q = unsafe { req.as_ref() }.ok_or_else(|| invalid("req is NULL"))?;
        known_flags(q.flags, MB_ALLOC_METADATA | MB_ALLOC_STREAM, "allocation")?;
        let mut r = AllocRequest::new(q.len);
        r = match q.goal_policy {
            MB_GOAL_NONE => r,
            MB_GOAL_HINT => r.goal(q.goal),
            MB_GOAL_TRY => r.try_goal(q.goal),
            MB_GOAL_ONLY => r.goal_only(q.goal),
            p => return Err(invalid(&format!("unknown goal_policy {p}"))),
        };
        if q.min_len > 0 {
            r = r.min_len(q.min_len);
        }
        if q.flags & MB_ALLOC_METADATA != 0 {
            r = r.metadata();
        }
        if q.flags & MB_ALLOC_STREAM != 0 {
            r = r.stream(q.stream);
        }
        let got = a.allocate(&r).map_err(alloc_err)?;
        let found_by = match got.found_by {
            FoundBy::Goal => MB_FOUND_GOAL,
            FoundBy::Pass(c) => MB_FOUND_PASS + c.index() as c_int,
            FoundBy::Policy => MB_FOUND_POLICY,
        };
        let g = MbAllocation {
            start: got.extent.start,
            len: got.extent.len,
            found_by,
            groups_scanned: got.groups_scanned,
            extents_scanned: got.extents_scanned,
        };
        // SAFETY: `out` is NULL (refused) or valid for one write (the header's contract).
        unsafe { put(out, g, "out") }?;
        Ok(0)
    })
}

/// The name of an `MbAllocation.found_by` (`"goal"`, `"CR_ANY_FREE"`,
/// ..., `"policy"`), or NULL for no such value. A static string.
#[no_mangle]
pub extern "C" fn mb_found_by_name(found_by: c_int) -> *const c_char {
    let pass = usize::try_from(found_by - MB_FOUND_PASS).ok().and_then(|i| Criterion::ALL.get(i));
    match (found_by, pass) {
        (MB_FOUND_GOAL, _) => c"goal".as_ptr(),
        (MB_FOUND_POLICY, _) => c"policy".as_ptr(),
        (_, Some(Criterion::PowerOf2Aligned)) => c"CR_POWER2_ALIGNED".as_ptr(),
        (_, Some(Criterion::GoalLenFast)) => c"CR_GOAL_LEN_FAST".as_ptr(),
        (_, Some(Criterion::BestAvailLen)) => c"CR_BEST_AVAIL_LEN".as_ptr(),
        (_, Some(Criterion::GoalLenSlow)) => c"CR_GOAL_LEN_SLOW".as_ptr(),
        (_, Some(Criterion::AnyFree)) => c"CR_ANY_FREE".as_ptr(),
        _ => std::ptr::null(),
    }
}

/// Give `len` blocks from `start` back. A block in the range that is free
/// already (freed before, or never allocated) is `-EINVAL`, and nothing
/// is given back.
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_release(a: *const MbAllocator, start: u64, len: u64) -> c_int {
    guard_int(|| {
        // SAFETY: `a` is NULL (refused) or a handle from `mb_allocator_new` not yet freed (the header's contract).
        unsafe { allocator(a) }?.free(start, len).map_err(alloc_err)?;
        Ok(0)
    })
}

/// Store the number of free blocks in `*out`.
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_free_blocks(a: *const MbAllocator, out: *mut u64) -> c_int {
    guard_int(|| {
        // SAFETY: `a` is NULL (refused) or a handle from `mb_allocator_new` not yet freed (the header's contract).
        let n = unsafe { allocator(a) }?.free_blocks();
        // SAFETY: `out` is NULL (refused) or valid for one write (the header's contract).
        unsafe { put(out, n, "out") }?;
        Ok(0)
    })
}

/// The counters as `mb_stats` prints them; free with `mb_string_free`.
#[no_mangle]
pub unsafe extern "C" fn mb_allocator_mb_stats(a: *const MbAllocator) -> *mut c_char {
    let mut s = None;
    guard(|| {
        // SAFETY: `a` is NULL (refused) or a handle from `mb_allocator_new` not yet freed (the header's contract).
        s = Some(unsafe { allocator(a) }?.mb_stats_report());
        Ok(0)
    });
    c_string(s)
}
