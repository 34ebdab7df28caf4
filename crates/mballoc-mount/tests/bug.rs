//! What a bug met in one request does to the mount: that request fails
//! EIO, the mount stays up, reads go on, every change after it is refused
//! (`EROFS`, as ext4's `errors=remount-ro`), and what was committed
//! before it is all there at the next mount, which finds the volume
//! consistent with a note of why it stopped.
//!
//! The bug is injected (the `fault-injection` feature: a setxattr of
//! `user.mballoc.inject-bug` panics inside the server). Needs root and
//! /dev/fuse; skipped with one line otherwise.

mod common;

use mballoc_mount::MountConfig;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn setxattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let p = CString::new(path.as_os_str().as_bytes()).expect("no NUL in the path");
    let n = CString::new(name).expect("no NUL in the name");
    // SAFETY: both strings are NUL-terminated and outlive the call; the
    // value pointer and length describe a live slice.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn a_bug_in_one_request_stops_changes_and_keeps_the_mount_and_what_was_committed() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped a_bug_in_one_request_stops_changes_and_keeps_the_mount_and_what_was_committed: {why}");
        return;
    }
    let s = mballoc_testkit::Scratch::in_memory("bug");
    let (vol, mnt) = (s.join("vol"), s.mount_point());
    mballoc_vol::mkfs(&vol, Some(256 << 20), &Default::default(), mballoc_vol::Overwrite::Refuse).unwrap();

    let server = common::serve(&vol, &mnt, MountConfig::default());
    let kept = mnt.join("kept");
    std::fs::write(&kept, b"committed before the bug").unwrap();
    std::fs::File::open(&kept).unwrap().sync_all().unwrap();

    let e = setxattr(&kept, "user.mballoc.inject-bug", b"1").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "the request that met the bug: {e}");
    // Still mounted, reads work, changes are refused.
    assert!(mballoc_mount::is_mounted(&mnt).unwrap());
    assert_eq!(std::fs::read(&kept).unwrap(), b"committed before the bug");
    assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 1);
    let refused = std::fs::write(mnt.join("after"), b"x").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS), "a change after the bug: {refused}");
    assert_eq!(std::fs::create_dir(mnt.join("d")).unwrap_err().raw_os_error(), Some(libc::EROFS));

    mballoc_mount::umount(&mnt).unwrap();
    server.join().unwrap().unwrap();
    let dev = mballoc_vol::FileDevice::open(&vol, mballoc_vol::OpenMode::ReadOnly).unwrap();
    let report = mballoc_vol::check(&dev, mballoc_vol::Repair::No).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    let why = report.stopped.expect("the volume notes why it stopped");
    assert!(why.contains("bug"), "{why}");
    drop(dev);

    // The next mount has everything committed before the bug.
    let server = common::serve(&vol, &mnt, MountConfig::default());
    assert_eq!(std::fs::read(&kept).unwrap(), b"committed before the bug");
    assert!(!mnt.join("after").exists());
    std::fs::write(mnt.join("again"), b"changes work again").unwrap();
    mballoc_mount::umount(&mnt).unwrap();
    server.join().unwrap().unwrap();
}
