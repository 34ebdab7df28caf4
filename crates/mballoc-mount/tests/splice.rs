//! Large reads spliced from the device through a pipe (`fuse/splice.rs`)
//! return the bytes a read through a buffer returns: whole extents,
//! holes, unwritten extents, a tail past the last written byte, pieces
//! that start inside a page, data
//! still in the server's cache, and a file in more pieces than a pipe
//! holds (answered from a buffer instead). Each file is written, the
//! volume remounted (so the kernel's page cache holds none of it and every
//! read reaches the server), and read back both with splicing on and off.
//! Needs root and /dev/fuse; skipped with one line otherwise.

mod common;

use mballoc_mount::MountConfig;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// A byte pattern no two nearby offsets share.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed * 97) >> 7) as u8).collect()
}

/// What each file should read as.
fn write_files(mnt: &Path) -> Vec<(&'static str, Vec<u8>)> {
    let mut files = Vec::new();
    // Whole extents: 3 MiB in 1 MiB writes.
    let big = pattern(1, 3 << 20);
    std::fs::write(mnt.join("big"), &big).unwrap();
    files.push(("big", big));
    // Holes, an unwritten extent, and a tail past the last byte written.
    let mut sparse = vec![0u8; 2 << 20];
    let mut f = std::fs::File::create(mnt.join("sparse")).unwrap();
    for (at, len) in [(4096usize, 100_000usize), (700_000, 300_000), (1_500_000, 5)] {
        let p = pattern(at as u64, len);
        f.seek(SeekFrom::Start(at as u64)).unwrap();
        f.write_all(&p).unwrap();
        sparse[at..at + len].copy_from_slice(&p);
    }
    nix::fcntl::fallocate(&f, nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE, 1 << 20, 256 << 10).unwrap();
    f.set_len(2 << 20).unwrap();
    f.sync_all().unwrap();
    files.push(("sparse", sparse));
    // Many small pieces: a block written in every other block, so a
    // read of 512 KiB meets 256 device pieces and 256 holes, each a pipe
    // slot of its own: more than a pipe of 1 MiB has, so it is answered
    // from a buffer.
    let mut frag = vec![0u8; 2 << 20];
    let mut a = std::fs::File::create(mnt.join("frag")).unwrap();
    for i in 0..1024usize {
        let p = pattern(1000 + i as u64, 1024);
        a.seek(SeekFrom::Start((i * 2048) as u64)).unwrap();
        a.write_all(&p).unwrap();
        frag[i * 2048..i * 2048 + 1024].copy_from_slice(&p);
    }
    a.set_len(2 << 20).unwrap();
    a.sync_all().unwrap();
    files.push(("frag", frag));
    files
}

fn read_back(vol: &Path, mnt: &Path, splice: bool, files: &[(&str, Vec<u8>)]) {
    let server = common::serve(vol, mnt, MountConfig { splice, ..MountConfig::default() });
    for (name, want) in files {
        let got = std::fs::read(mnt.join(name)).unwrap();
        assert_eq!(got.len(), want.len(), "{name} (splice {splice}): length");
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        assert_eq!(first, None, "{name} (splice {splice}): first differing byte");
    }
    // Data the server still caches (a short write, not yet written back)
    // is read from the cache, and the rest of the range from the device.
    let p = mnt.join("big");
    let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.seek(SeekFrom::Start(70_000)).unwrap();
    f.write_all(b"cached").unwrap();
    drop(f);
    let mut want = files[0].1.clone();
    want[70_000..70_006].copy_from_slice(b"cached");
    let got = std::fs::read(&p).unwrap();
    assert!(got == want, "big after a cached write (splice {splice})");
    // Put it back for the next mount.
    let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.seek(SeekFrom::Start(70_000)).unwrap();
    f.write_all(&files[0].1[70_000..70_006]).unwrap();
    drop(f);
    mballoc_mount::umount(mnt).unwrap();
    server.join().unwrap().unwrap();
}

#[test]
fn spliced_reads_return_what_buffered_reads_return() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped spliced_reads_return_what_buffered_reads_return: {why}");
        return;
    }
    let s = mballoc_testkit::Scratch::in_memory("splice");
    let (vol, mnt) = (s.join("vol"), s.mount_point());
    // 1 KiB blocks: device pieces that start inside a page.
    let opts = mballoc_vol::FormatOptions { block_size: 1024, ..Default::default() };
    mballoc_vol::mkfs(&vol, Some(256 << 20), &opts, mballoc_vol::Overwrite::Refuse).unwrap();
    let server = common::serve(&vol, &mnt, MountConfig::default());
    let files = write_files(&mnt);
    mballoc_mount::umount(&mnt).unwrap();
    server.join().unwrap().unwrap();
    for splice in [true, false] {
        read_back(&vol, &mnt, splice, &files);
    }
}
