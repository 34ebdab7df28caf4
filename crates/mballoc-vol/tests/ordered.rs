//! data=ordered for sizes: a write that grows a file makes the new size
//! durable only with the data under it. A commit that another file's
//! fsync (or the commit interval) sets off while the data still sits in
//! the cache leaves the old size in the journal; after a crash the file is
//! as long as its data, never padded with zeros where bytes were written.
//! Checked at every device event of a run, whole and torn.

use mballoc_vol::crash::RecordingDevice;
use mballoc_vol::{FileId, FormatOptions, MemDevice, MountOptions, Owner, Volume};
use std::sync::Arc;

fn format_opts() -> FormatOptions {
    FormatOptions {
        block_size: 1024,
        blocks_per_group: Some(1024),
        log_blocks: Some(32),
        inode_count: Some(64),
        tree_blocks: Some(48),
    }
}

fn mount_opts() -> MountOptions {
    MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() }
}

/// What file `name` holds after mounting `dev`: (size, bytes).
fn contents(vol: &Volume, name: &[u8]) -> Option<Vec<u8>> {
    let f = vol.lookup(vol.root(), name).ok()?;
    let size = vol.size(f).unwrap() as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(vol.read(f, 0, &mut buf).unwrap(), size);
    Some(buf)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
}

#[test]
fn another_files_fsync_does_not_make_a_grown_size_durable_without_its_data() {
    let dev = Arc::new(MemDevice::new(8 << 20));
    Volume::format(dev.clone(), &format_opts()).unwrap();
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let f = vol.create_at(vol.root(), b"grown", Owner::default()).unwrap();
    vol.fsync(f).unwrap();
    let data = pattern(64 << 10, 7);
    vol.write(f, 0, &data).unwrap();
    let g = vol.create_at(vol.root(), b"synced", Owner::default()).unwrap();
    vol.write(g, 0, &pattern(4096, 9)).unwrap();
    vol.fsync(g).unwrap(); // commits the running transaction
    vol.abandon(); // a crash: f's data never left the cache

    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    assert_eq!(contents(&vol, b"grown").unwrap(), Vec::<u8>::new(), "the old size, not 64 KiB of zeros");
    assert_eq!(contents(&vol, b"synced").unwrap(), pattern(4096, 9));
    // Once written back, the next commit carries the size with the data.
    let f = vol.lookup(vol.root(), b"grown").unwrap();
    vol.open_file(f).unwrap();
    vol.write(f, 0, &data).unwrap();
    vol.writeback(f).unwrap();
    vol.fsync(g_of(&vol)).unwrap();
    vol.abandon();
    let vol = Volume::open(dev, mount_opts()).unwrap();
    assert_eq!(contents(&vol, b"grown").unwrap(), data);
}

fn g_of(vol: &Volume) -> FileId {
    let g = vol.lookup(vol.root(), b"synced").unwrap();
    vol.open_file(g).unwrap();
    g
}

/// Appends to one file while another is fsynced over and over; a crash
/// at any device event (and each write torn in half) must show the
/// appended file as a prefix of what was written: as long as its data,
/// every byte the one written there.
#[test]
fn at_every_crash_point_a_file_is_a_prefix_of_what_was_written() {
    let base = {
        let dev = Arc::new(MemDevice::new(4 << 20));
        Volume::format(dev.clone(), &format_opts()).unwrap();
        dev.to_bytes()
    };
    let rec = Arc::new(RecordingDevice::new(base.clone()));
    let mut written = Vec::new();
    {
        let vol = Volume::open(rec.clone(), mount_opts()).unwrap();
        let f = vol.create_at(vol.root(), b"log", Owner::default()).unwrap();
        let g = vol.create_at(vol.root(), b"other", Owner::default()).unwrap();
        for round in 0..12u8 {
            let piece = pattern(3000 + 700 * round as usize, round);
            vol.write(f, written.len() as u64, &piece).unwrap();
            written.extend_from_slice(&piece);
            vol.write(g, 0, &[round | 1; 512]).unwrap();
            vol.fsync(g).unwrap();
            if round % 4 == 3 {
                vol.writeback(f).unwrap();
            }
        }
        vol.fsync(f).unwrap();
    }
    let events = rec.events();
    assert!(events > 40, "only {events} device events");
    let mut checked = 0;
    for at in 0..=events {
        let mut whole = base.clone();
        rec.apply(&mut whole, 0, at);
        let mut images = vec![whole.clone()];
        if at < events && rec.sectors(at) > 1 {
            let mut torn = whole;
            let n = rec.sectors(at);
            rec.tear(&mut torn, at, n / 2);
            images.push(torn);
        }
        for image in images {
            let dev = Arc::new(MemDevice::from_bytes(image));
            let vol = Volume::open(dev, mount_opts()).unwrap_or_else(|e| panic!("event {at}: mount: {e}"));
            if let Some(got) = contents(&vol, b"log") {
                assert!(got.len() <= written.len(), "event {at}: longer than written");
                assert!(
                    got == written[..got.len()],
                    "event {at}: {} bytes, not a prefix of what was written",
                    got.len()
                );
            }
            checked += 1;
        }
    }
    eprintln!("{checked} crash states after {events} device events");
}
