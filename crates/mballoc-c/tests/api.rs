//! The C API from Rust: the same scenario as examples/c/example.c, and the
//! failures a C caller can cause (bad pointers, unknown flags and options,
//! a volume closed under its files, a block given back twice). The C
//! programs in tests/c run as C89 and C11 in scripts/c-tests.sh.

use mballoc_c::*;
use std::ffi::{CStr, CString};
use std::ptr;

fn last_error() -> String {
    // SAFETY: mb_last_error returns a NUL-terminated string the library keeps until the next call.
    unsafe { CStr::from_ptr(mb_last_error()) }.to_string_lossy().into_owned()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

#[test]
fn format_write_read_extents_and_stats() {
    let dir = mballoc_testkit::Scratch::new("capi");
    let path = c(dir.join("v").to_str().unwrap());
    // SAFETY: every pointer passed is a live CString, an out-variable on this stack, or a handle the API returned and the block has not closed.
    unsafe {
        assert_eq!(mb_format(path.as_ptr(), 64 << 20, 4096, 0), 0, "{}", last_error());
        assert_eq!(
            mb_format(path.as_ptr(), 64 << 20, 4096, 0),
            -libc::EBUSY,
            "a volume is there: nothing is overwritten"
        );
        assert_eq!(mb_format(path.as_ptr(), 64 << 20, 4096, 8), -libc::EINVAL, "unknown format flags");
        assert_eq!(mb_format(path.as_ptr(), 4096, 4096, MB_FORMAT_FORCE), -libc::EINVAL, "no volume fits");
        let mut vol = ptr::null_mut();
        assert_eq!(mb_volume_open(path.as_ptr(), c("stats").as_ptr(), &mut vol), 0, "{}", last_error());
        let mut f = ptr::null_mut();
        assert_eq!(mb_file_open(vol, c("/f").as_ptr(), MB_O_READ | MB_O_WRITE | MB_O_CREATE, 0, &mut f), 0);
        let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i * 7 + 3) as u8).collect();
        assert_eq!(mb_file_write_at(f, data.as_ptr(), data.len(), 0), data.len() as i64);
        assert_eq!(mb_file_sync(f), 0);
        let mut back = vec![0u8; 4096];
        assert_eq!(mb_file_read_at(f, back.as_mut_ptr(), back.len(), 1 << 20), 4096);
        assert_eq!(back[..], data[1 << 20..(1 << 20) + 4096]);
        let mut n = 0;
        assert_eq!(mb_file_extents(f, ptr::null_mut(), 0, &mut n), 0);
        let mut ext = vec![MbExtent::default(); n];
        assert_eq!(mb_file_extents(f, ext.as_mut_ptr(), n, &mut n), 0);
        assert_eq!(ext.iter().map(|e| u64::from(e.length)).sum::<u64>(), 768);
        let mut st = MbStat::default();
        assert_eq!(mb_file_stat(f, &mut st), 0);
        assert_eq!((st.size, st.blocks), (3 << 20, (3 << 20) / 512));
        let s = mb_volume_mb_stats(vol);
        assert!(CStr::from_ptr(s).to_str().unwrap().contains("reqs: "));
        mb_string_free(s);
        // Closing the volume under an open file: the volume is unmounted,
        // the file fails EBADF until it is closed.
        assert_eq!(mb_volume_close(vol), 0, "{}", last_error());
        assert_eq!(mb_file_write_at(f, data.as_ptr(), 1, 0), -i64::from(libc::EBADF));
        assert_eq!(mb_file_close(f), 0);
        let mut check = MbCheck::default();
        let mut lines = ptr::null_mut();
        assert_eq!(mb_check(path.as_ptr(), 0, &mut check, &mut lines), 0, "{}", last_error());
        assert_eq!((check.clean, check.regular_files), (1, 1));
        assert_eq!(CStr::from_ptr(lines).to_str().unwrap(), "");
        mb_string_free(lines);
    }
}

#[test]
fn settings_by_name_reach_the_volume() {
    let dir = mballoc_testkit::Scratch::new("capi-settings");
    let path = c(dir.join("v").to_str().unwrap());
    // SAFETY: as above: live CStrings, stack out-variables, and handles not yet closed.
    unsafe {
        assert_eq!(mb_format(path.as_ptr(), 64 << 20, 4096, 0), 0);
        let mut vol = ptr::null_mut();
        let opts = c("profile=kernel, mb_max_to_scan=77,commit=1");
        assert_eq!(mb_volume_open(path.as_ptr(), opts.as_ptr(), &mut vol), 0, "{}", last_error());
        for (key, want) in [("mb_max_to_scan", "77"), ("locality_groups", "1"), ("punch", "ext4")] {
            let v = mb_volume_setting(vol, c(key).as_ptr());
            assert_eq!(CStr::from_ptr(v).to_str().unwrap(), want, "{key}");
            mb_string_free(v);
        }
        assert!(mb_volume_setting(vol, c("nosuch").as_ptr()).is_null());
        assert_eq!(mb_volume_close(vol), 0);
        for bad in ["nosuch=1", "inodes_per_group=64", "mb_max_to_scan=0", "commit=x", "bogus"] {
            assert_eq!(mb_volume_open(path.as_ptr(), c(bad).as_ptr(), &mut vol), -libc::EINVAL, "{bad}");
        }
    }
}

#[test]
fn bad_calls_are_errors_not_crashes() {
    // SAFETY: the pointers are NULL or live CStrings and stack variables: each call must refuse the NULL ones without reading through them.
    unsafe {
        let mut vol = ptr::null_mut();
        assert_eq!(mb_volume_open(ptr::null(), ptr::null(), &mut vol), -libc::EINVAL);
        assert!(last_error().contains("NULL"));
        let missing = c("/nonexistent/volume");
        assert_eq!(mb_volume_open(missing.as_ptr(), ptr::null(), &mut vol), -libc::ENOENT);
        assert!(last_error().contains("/nonexistent/volume"), "{}", last_error());
        assert_eq!(mb_file_read_at(ptr::null(), ptr::null_mut(), 0, 0), -i64::from(libc::EINVAL));
        assert_eq!(mb_volume_close(ptr::null_mut()), 0);
        assert!(mb_volume_mb_stats(ptr::null()).is_null());
        assert_eq!(mb_mkdir(ptr::null(), c("/d").as_ptr(), 0), -libc::EINVAL);
        mb_closedir(ptr::null_mut());
        let mut check = MbCheck::default();
        assert_eq!(mb_check(missing.as_ptr(), 2, &mut check, ptr::null_mut()), -libc::EINVAL, "unknown check flags");
    }
}

#[test]
fn the_bare_allocator_takes_the_whole_request() {
    // SAFETY: `opts` is a live CString, `a` and the request live on this stack, and `a` is freed once at the end.
    unsafe {
        let mut a = ptr::null_mut();
        let opts = c("profile=kernel,mb_stats=1");
        assert_eq!(mb_allocator_new(1 << 20, 4096, opts.as_ptr(), &mut a), 0, "{}", last_error());
        let req = MbAllocRequest { len: 64, goal: 5000, goal_policy: MB_GOAL_TRY, ..Default::default() };
        let mut got = MbAllocation::default();
        assert_eq!(mb_allocator_allocate(a, &req, &mut got), 0);
        assert_eq!((got.start, got.len, got.found_by), (5000, 64, MB_FOUND_GOAL));
        assert_eq!(CStr::from_ptr(mb_found_by_name(got.found_by)).to_str().unwrap(), "goal");
        let only = MbAllocRequest { len: 8, goal: 5000, goal_policy: MB_GOAL_ONLY, ..Default::default() };
        assert_eq!(mb_allocator_allocate(a, &only, &mut got), -libc::ENOSPC, "the goal is taken");
        let meta = MbAllocRequest { len: 4, min_len: 4, flags: MB_ALLOC_METADATA, ..Default::default() };
        assert_eq!(mb_allocator_allocate(a, &meta, &mut got), 0);
        assert!(got.found_by >= MB_FOUND_PASS, "a pass found it");
        assert!(!mb_found_by_name(got.found_by).is_null());
        assert!(mb_found_by_name(99).is_null());
        let bad = MbAllocRequest { len: 4, flags: 64, ..Default::default() };
        assert_eq!(mb_allocator_allocate(a, &bad, &mut got), -libc::EINVAL, "unknown flags");
        let mut free = 0;
        assert_eq!(mb_allocator_free_blocks(a, &mut free), 0);
        assert_eq!(free, (1 << 20) - 68);
        assert_eq!(mb_allocator_release(a, 5000, 64), 0);
        assert_eq!(mb_allocator_release(a, 5000, 64), -libc::EINVAL, "given back twice");
        assert!(last_error().contains("free already"), "{}", last_error());
        let mut b = ptr::null_mut();
        assert_eq!(mb_allocator_new(1 << 20, 4096, c("profile=fastest").as_ptr(), &mut b), -libc::EINVAL);
        assert_eq!(mb_allocator_new(1 << 20, 4096, c("close=ext4").as_ptr(), &mut b), -libc::EINVAL);
        assert!(last_error().contains("file layer"), "{}", last_error());
        mb_allocator_destroy(a);
    }
}
