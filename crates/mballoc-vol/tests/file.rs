//! The `std::io` file handle: what code written for `std::fs::File` needs.

use mballoc_vol::{FallocateMode, File, FormatOptions, MemDevice, MountOptions, OpenOptions, VolError, Volume};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::sync::Arc;

fn volume() -> Arc<Volume> {
    let dev = Arc::new(MemDevice::new(64 << 20));
    Volume::format(dev.clone(), &FormatOptions::default()).unwrap();
    Volume::open(dev, MountOptions::default()).unwrap()
}

fn rw() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(true);
    o
}

#[test]
fn io_copy_and_a_buffered_reader_work_through_it() {
    let vol = volume();
    let text: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    let mut f = vol.file("/log", &rw()).unwrap();
    std::io::copy(&mut text.as_bytes(), &mut f).unwrap();
    f.sync_all().unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let lines: Vec<String> = BufReader::new(&mut f).lines().map(Result::unwrap).collect();
    assert_eq!(lines.len(), 5000);
    assert_eq!(lines[4321], "line 4321");
    assert_eq!(f.len().unwrap(), text.len() as u64);
}

#[test]
fn seek_append_truncate_and_positional_io() {
    let vol = volume();
    vol.create_dir("/d").unwrap();
    let f = vol.file("/d/f", &rw()).unwrap();
    f.write_at(b"0123456789", 0).unwrap();
    let mut b = [0u8; 4];
    assert_eq!(f.read_at(&mut b, 3).unwrap(), 4);
    assert_eq!(&b, b"3456");
    drop(f);
    let mut a = vol.file("/d/f", OpenOptions::new().append(true).read(true)).unwrap();
    a.write_all(b"ab").unwrap();
    assert_eq!(a.seek(SeekFrom::End(-3)).unwrap(), 9);
    let mut s = String::new();
    a.read_to_string(&mut s).unwrap();
    assert_eq!(s, "9ab");
    assert!(a.seek(SeekFrom::Current(-100)).is_err());
    drop(a);
    let t = vol.file("/d/f", OpenOptions::new().write(true).truncate(true)).unwrap();
    assert!(t.is_empty().unwrap());
    assert_eq!(vol.read_dir("/d").unwrap().into_iter().map(|e| e.name).collect::<Vec<_>>(), vec![b"f".to_vec()]);
}

#[test]
fn open_flags_are_checked() {
    let vol = volume();
    vol.file("/x", &rw()).unwrap();
    let e = vol.file("/x", OpenOptions::new().write(true).create_new(true)).unwrap_err();
    assert!(matches!(e.cause(), VolError::Exists { .. }), "{e}");
    assert_eq!(e.to_string(), "/x: directory 1 already holds \"x\"", "the message names the caller's path");
    let cause = |r: Result<File, VolError>| r.map(drop).map_err(|e| e.cause().errno());
    assert_eq!(cause(vol.file("/nope", OpenOptions::new().read(true))), Err(libc::ENOENT));
    assert_eq!(cause(vol.file("/x", &OpenOptions::new())), Err(libc::EINVAL));
    vol.create_dir("/dir").unwrap();
    assert_eq!(cause(vol.file("/dir", OpenOptions::new().read(true))), Err(libc::EISDIR));
    let ro = vol.file("/x", OpenOptions::new().read(true)).unwrap();
    let e = std::io::Error::from(ro.write_at(b"no", 0).unwrap_err());
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn space_calls_and_the_extent_map() {
    let vol = volume();
    let f = vol.file("/big", &rw()).unwrap();
    f.allocate(0, 1 << 20, FallocateMode::ExtendSize).unwrap();
    assert_eq!(f.len().unwrap(), 1 << 20);
    f.punch(4096, 8192).unwrap();
    let ext = f.extents().unwrap();
    assert!(ext.len() >= 2, "{ext:?}");
    assert!(ext.iter().all(|e| e.logical * 4096 + u64::from(e.len) * 4096 <= 4096 || e.logical * 4096 >= 12288));
    f.set_len(100).unwrap();
    assert_eq!(f.len().unwrap(), 100);
}

#[test]
fn an_unlinked_file_lives_until_its_handle_drops() {
    let vol = volume();
    let mut f = vol.file("/tmp", &rw()).unwrap();
    f.write_all(&[7; 10_000]).unwrap();
    vol.unlink_at(vol.root(), b"tmp").unwrap();
    let mut back = vec![0u8; 10_000];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), 10_000);
    assert!(back.iter().all(|&x| x == 7));
    let id = f.id();
    drop(f);
    assert!(vol.size(id).is_err(), "closed and unlinked: gone");
}

#[test]
fn handles_move_between_threads() {
    let vol = volume();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let vol = &vol;
            s.spawn(move || {
                let mut f = vol.file(format!("/t{t}"), &rw()).unwrap();
                for _ in 0..64 {
                    f.write_all(&[t; 4096]).unwrap();
                }
                f.sync_data().unwrap();
            });
        }
    });
    for t in 0..4u8 {
        assert_eq!(vol.file(format!("/t{t}"), OpenOptions::new().read(true)).unwrap().len().unwrap(), 64 * 4096);
    }
}

/// The scenario the Python, C and Rust tests share: format a volume file,
/// write 3 MiB, fsync, read back at an offset, extents, statistics.
#[test]
fn the_shared_scenario() {
    let dir = mballoc_testkit::Scratch::new("file-scenario");
    let path = dir.join("vol");
    mballoc_vol::mkfs(&path, Some(256 << 20), &FormatOptions::default(), mballoc_vol::Overwrite::Refuse).unwrap();
    let dev = mballoc_vol::FileDevice::open(&path, mballoc_vol::OpenMode::ReadWrite).unwrap();
    let vol =
        Volume::open_with(Arc::new(dev), MountOptions::default(), |c| c.placement.tunables.mb_stats = true).unwrap();
    vol.create_dir("/data").unwrap();
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
    let mut f = vol.file("/data/blob", &rw()).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    let mut back = [0u8; 4096];
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.read_exact(&mut back).unwrap();
    assert_eq!(back[..], data[1 << 20..(1 << 20) + 4096]);
    let blocks: u64 = f.extents().unwrap().iter().map(|e| u64::from(e.len)).sum();
    assert_eq!(blocks * 4096, data.len() as u64);
    assert!(vol.fs().allocator().stats().reqs >= 1);
    drop(f);
    vol.unmount().unwrap();
}

/// A volume whose groups are not a power of two (1,000 blocks): files
/// across every group survive an unmount and a crash, and check is clean.
#[test]
fn groups_of_any_length() {
    let dev = Arc::new(MemDevice::new(24 << 20));
    let opts = FormatOptions { block_size: 4096, blocks_per_group: Some(1000), ..FormatOptions::default() };
    Volume::format(dev.clone(), &opts).unwrap();
    let vol = Volume::open(dev.clone(), MountOptions::default()).unwrap();
    for i in 0..6u8 {
        let f = vol.file(format!("/f{i}"), &rw()).unwrap();
        f.write_at(&vec![i + 1; 700 * 4096], 0).unwrap();
        f.sync_all().unwrap();
    }
    let groups: std::collections::BTreeSet<u64> = (0..6u8)
        .flat_map(|i| vol.file(format!("/f{i}"), OpenOptions::new().read(true)).unwrap().extents().unwrap())
        .map(|e| e.physical / 1000)
        .collect();
    assert!(groups.len() >= 4, "files spread over the groups: {groups:?}");
    vol.abandon(); // a crash
    let vol = Volume::open(dev.clone(), MountOptions::default()).unwrap();
    for i in 0..6u8 {
        let f = vol.file(format!("/f{i}"), OpenOptions::new().read(true)).unwrap();
        let mut b = vec![0u8; 700 * 4096];
        assert_eq!(f.read_at(&mut b, 0).unwrap(), b.len());
        assert!(b.iter().all(|&x| x == i + 1));
    }
    vol.unmount().unwrap();
    assert!(mballoc_vol::check(&*dev, mballoc_vol::Repair::No).unwrap().is_clean());
}
