//! The C API from Rust: the same scenario as examples/c/example.c, and the
//! failures a C caller can cause (bad pointers, bad flags, closing a
//! volume with open files, a double free in the allocator).

use mballoc_c::*;
use std::ffi::{CStr, CString};
use std::ptr;

fn last_error() -> String {
    unsafe { CStr::from_ptr(mb_last_error()) }.to_string_lossy().into_owned()
}

#[test]
fn format_write_read_extents_and_stats() {
    let dir = mballoc_testkit::Scratch::new("capi");
    let path = CString::new(dir.join("v").to_str().unwrap()).unwrap();
    unsafe {
        assert_eq!(mb_format(path.as_ptr(), 64 << 20, 4096), 0, "{}", last_error());
        assert_eq!(mb_format(path.as_ptr(), 64 << 20, 4096), -libc::EBUSY, "a volume is there: nothing is overwritten");
        let mut vol = ptr::null_mut();
        assert_eq!(mb_volume_open(path.as_ptr(), MB_VOLUME_STATS, &mut vol), 0, "{}", last_error());
        let mut f = ptr::null_mut();
        let name = CString::new("/f").unwrap();
        assert_eq!(mb_file_open(vol, name.as_ptr(), MB_O_READ | MB_O_WRITE | MB_O_CREATE, &mut f), 0);
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
        let s = mb_volume_mb_stats(vol);
        assert!(CStr::from_ptr(s).to_str().unwrap().contains("reqs: "));
        mb_string_free(s);
        assert_eq!(mb_volume_close(vol), -libc::EBUSY, "a file is open");
        assert_eq!(mb_file_close(f), 0);
        assert_eq!(mb_volume_close(vol), 0);
    }
}

#[test]
fn bad_calls_are_errors_not_crashes() {
    unsafe {
        let mut vol = ptr::null_mut();
        assert_eq!(mb_volume_open(ptr::null(), 0, &mut vol), -libc::EINVAL);
        assert!(last_error().contains("NULL"));
        let missing = CString::new("/nonexistent/volume").unwrap();
        assert_eq!(mb_volume_open(missing.as_ptr(), 0, &mut vol), -libc::ENOENT);
        assert_eq!(mb_volume_open(missing.as_ptr(), 99, &mut vol), -libc::EINVAL);
        assert_eq!(mb_file_read_at(ptr::null(), ptr::null_mut(), 0, 0), -i64::from(libc::EINVAL));
        assert_eq!(mb_volume_close(ptr::null_mut()), 0);
        assert!(mb_volume_mb_stats(ptr::null()).is_null());
    }
}

#[test]
fn the_bare_allocator() {
    unsafe {
        let mut a = ptr::null_mut();
        let kernel = CString::new("kernel").unwrap();
        assert_eq!(mb_allocator_new(1 << 20, 4096, kernel.as_ptr(), &mut a), 0, "{}", last_error());
        let (mut start, mut got) = (0u64, 0u32);
        assert_eq!(mb_allocator_allocate(a, 5000, 64, &mut start, &mut got), 0);
        assert_eq!(got, 64);
        assert_eq!(mb_allocator_free_blocks(a), (1 << 20) - 64);
        assert_eq!(mb_allocator_release(a, start, 64), 0);
        assert_eq!(mb_allocator_release(a, start, 64), -libc::EINVAL, "a double free");
        assert!(last_error().to_lowercase().contains("free"), "{}", last_error());
        let bogus = CString::new("fastest").unwrap();
        let mut b = ptr::null_mut();
        assert_eq!(mb_allocator_new(1 << 20, 4096, bogus.as_ptr(), &mut b), -libc::EINVAL);
        mb_allocator_free(a);
    }
}
