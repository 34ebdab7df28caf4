//! The path-level namespace: what `std::fs` would do, on a volume.

use mballoc_vol::{FormatOptions, MemDevice, MountOptions, OpenOptions, Replace, VolError, Volume, XattrSet};
use std::io::{Read, Write};
use std::sync::Arc;

fn volume() -> (Arc<MemDevice>, Arc<Volume>) {
    let dev = Arc::new(MemDevice::new(64 << 20));
    Volume::format(dev.clone(), &FormatOptions::default()).unwrap();
    let vol = Volume::open(dev.clone(), MountOptions::default()).unwrap();
    (dev, vol)
}

fn names(vol: &Volume, path: &str) -> Vec<String> {
    vol.read_dir(path).unwrap().into_iter().map(|e| String::from_utf8(e.name).unwrap()).collect()
}

fn errno<T>(r: Result<T, VolError>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.errno(),
    }
}

#[test]
fn directories_files_and_links_by_path() {
    let (dev, vol) = volume();
    vol.create_dir_all("/a/b/c").unwrap();
    vol.create_dir_all("/a/b").unwrap();
    vol.write_file("/a/b/c/f", b"hello").unwrap();
    vol.hard_link("/a/b/c/f", "/a/g").unwrap();
    assert_eq!(vol.metadata("/a/g").unwrap().nlink, 2);
    vol.symlink("b/c", "/a/link").unwrap();
    vol.symlink("/a/link/f", "/abs").unwrap();
    assert_eq!(vol.read_file("/a/link/f").unwrap(), b"hello");
    assert_eq!(vol.read_file("/abs").unwrap(), b"hello");
    assert_eq!(vol.read_file("/a/b/c/../../g").unwrap(), b"hello");
    assert_eq!(vol.read_link("/a/link").unwrap(), std::path::PathBuf::from("b/c"));
    assert!(vol.symlink_metadata("/a/link").unwrap().is_symlink());
    assert!(vol.metadata("/a/link").unwrap().is_dir());
    assert_eq!(names(&vol, "/a"), ["b", "g", "link"]);
    assert_eq!(names(&vol, "/a/link"), ["f"]);

    vol.rename("/a/g", "/a/b/h", Replace::Never).unwrap();
    assert_eq!(errno(vol.rename("/a/b/h", "/a/b/c/f", Replace::Never)), libc::EEXIST);
    vol.rename("/a/b/h", "/a/b/c/f", Replace::Allowed).unwrap();
    assert_eq!(names(&vol, "/a/b/c"), ["f"], "two names of one inode: POSIX leaves both");
    vol.remove_file("/a/b/c/f").unwrap();
    assert_eq!(vol.metadata("/a/b/h").unwrap().nlink, 1);
    vol.write_file("/a/b/c/f", b"other").unwrap();
    vol.rename("/a/b/c/f", "/a/b/h", Replace::Allowed).unwrap();
    assert_eq!(vol.read_file("/a/b/h").unwrap(), b"other");
    vol.write_file("/x", b"x").unwrap();
    vol.rename("/x", "/a/b/h", Replace::Exchange).unwrap();
    assert_eq!((vol.read_file("/x").unwrap(), vol.read_file("/a/b/h").unwrap()), (b"other".to_vec(), b"x".to_vec()));

    vol.set_len("/x", 2).unwrap();
    assert_eq!(vol.read_file("/x").unwrap(), b"ot");
    vol.set_permissions("/x", 0o600).unwrap();
    assert_eq!(vol.metadata("/x").unwrap().permissions(), 0o600);
    vol.set_xattr("/x", "user.k", b"v", XattrSet::Create).unwrap();
    assert_eq!(errno(vol.set_xattr("/x", "user.k", b"w", XattrSet::Create)), libc::EEXIST);
    assert_eq!(vol.get_xattr("/x", "user.k").unwrap(), b"v");
    assert_eq!(vol.list_xattrs("/x").unwrap(), ["user.k"]);
    vol.remove_xattr("/x", "user.k").unwrap();
    assert_eq!(errno(vol.get_xattr("/x", "user.k")), libc::ENODATA);

    assert_eq!(errno(vol.remove_dir("/a/b")), libc::ENOTEMPTY);
    assert_eq!(errno(vol.remove_file("/a/b")), libc::EISDIR);
    vol.remove_file("/a/link").unwrap();
    assert!(vol.metadata("/a/b/c").unwrap().is_dir(), "removing a link leaves its target");
    vol.remove_dir("/a/b/c").unwrap();
    assert_eq!(names(&vol, "/a/b"), ["h"]);
    vol.unmount().unwrap();

    let vol = Volume::open(dev, MountOptions::default()).unwrap();
    assert_eq!(vol.read_file("/a/b/h").unwrap(), b"x", "every change by path is on the volume after a remount");
    assert_eq!(vol.read_file("/abs").map_err(|e| e.errno()), Err(libc::ENOENT), "a dangling link");
}

#[test]
fn errors_name_the_path_and_keep_their_errno() {
    let (_dev, vol) = volume();
    let e = vol.metadata("/no/such").unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT);
    assert!(e.to_string().starts_with("/no/such: "), "{e}");
    assert!(matches!(e.cause(), VolError::NoEntry { .. }));
    vol.write_file("/f", b"").unwrap();
    assert_eq!(errno(vol.create_dir("/f/d")), libc::ENOTDIR);
    assert_eq!(errno(vol.read_dir("/f")), libc::ENOTDIR);
    assert_eq!(errno(vol.create_dir("/")), libc::EINVAL);
    assert_eq!(errno(vol.remove_dir("/d/..")), libc::EINVAL);
    assert_eq!(errno(vol.write_file("/", b"")), libc::EINVAL);
    assert_eq!(errno(vol.read_file("/")), libc::EISDIR);
    vol.symlink("loop2", "/loop1").unwrap();
    vol.symlink("loop1", "/loop2").unwrap();
    assert_eq!(errno(vol.metadata("/loop1")), libc::ELOOP);
    assert_eq!(errno(vol.file("/loop1", OpenOptions::new().read(true))), libc::ELOOP);
    assert!(vol.symlink_metadata("/loop1").unwrap().is_symlink());
    let long = format!("/{}", "n".repeat(300));
    assert_eq!(errno(vol.create_dir(&long)), libc::ENAMETOOLONG);
}

#[test]
fn files_hold_their_volume_and_outlive_an_unmount_as_errors() {
    let (dev, vol) = volume();
    let mut f = vol.file("/kept", OpenOptions::new().write(true).create(true)).unwrap();
    f.write_all(b"written before the unmount").unwrap();
    // The file owns its handle: the volume's own Arc may go first.
    let again = vol.clone();
    again.unmount().unwrap();
    let e = f.write_all(b"after").unwrap_err();
    assert_eq!(e.raw_os_error(), None, "an io::Error made from a VolError");
    assert_eq!(e.kind(), std::io::Error::from_raw_os_error(libc::EBADF).kind());
    drop(f);
    drop(vol);
    let vol = Volume::open(dev, MountOptions::default()).unwrap();
    let mut s = String::new();
    vol.file("/kept", OpenOptions::new().read(true)).unwrap().read_to_string(&mut s).unwrap();
    assert_eq!(s, "written before the unmount");
}
