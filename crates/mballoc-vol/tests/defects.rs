//! One test per defect found by killing real writers and by crafted
//! volumes, each failing before its fix: stale bytes past a truncated end,
//! an unlink torn across a commit, a tree area that a checkpoint could
//! not fit, and `check` calling a volume that only awaits replay unclean.

use mballoc_fs::FileId;
use mballoc_vol::crash::RecordingDevice;
use mballoc_vol::{check, FallocateMode, FormatOptions, MemDevice, MountOptions, Repair, VolError, Volume};
use std::sync::Arc;

fn mount_opts() -> MountOptions {
    MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() }
}

fn fresh(opts: &FormatOptions, bytes: u64) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(bytes));
    Volume::format(dev.clone(), opts).unwrap();
    dev
}

fn read_all(vol: &Volume, f: FileId) -> Vec<u8> {
    let mut b = vec![0u8; vol.size(f).unwrap() as usize];
    assert_eq!(vol.read(f, 0, &mut b).unwrap(), b.len());
    b
}

/// Write 10,000 bytes of 0xAA, fsync, truncate to 5,000, let another
/// file's fsync commit the truncate, crash, remount, then grow the file
/// by `grow`: the bytes from 5,000 on read as zeros, before and after
/// another crash.
fn truncated_tail_stays_zero(grow: impl Fn(&Volume, FileId)) {
    let dev = fresh(&FormatOptions::default(), 64 << 20);
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let (a, b) = (vol.create().unwrap(), vol.create().unwrap());
    vol.write(a, 0, &[0xAA; 10_000]).unwrap();
    vol.fsync(a).unwrap();
    vol.truncate(a, 5000).unwrap();
    vol.write(b, 0, b"other").unwrap();
    vol.fsync(b).unwrap();
    vol.abandon();
    for round in 0..2 {
        let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
        if round == 0 {
            vol.open_file(a).unwrap();
            grow(&vol, a);
            vol.fsync(a).unwrap();
        }
        let data = read_all(&vol, a);
        assert!(data.len() >= 12_288, "round {round}: size {}", data.len());
        assert!(data[..5000].iter().all(|&x| x == 0xAA), "round {round}: the kept bytes");
        let stale = data[5000..12_288].iter().position(|&x| x != 0);
        assert_eq!(stale, None, "round {round}: byte {:?} past the old end is not zero", stale.map(|p| p + 5000));
        assert!(check(&*dev, Repair::No).unwrap().is_clean());
    }
}

#[test]
fn a_truncated_tail_reads_as_zeros_after_extending_truncate() {
    truncated_tail_stays_zero(|vol, a| vol.truncate(a, 20_000).unwrap());
}

#[test]
fn a_truncated_tail_reads_as_zeros_after_an_extending_write() {
    truncated_tail_stays_zero(|vol, a| vol.write(a, 20_000, b"z").unwrap());
}

#[test]
fn a_truncated_tail_reads_as_zeros_after_a_direct_write_and_writeback() {
    truncated_tail_stays_zero(|vol, a| {
        vol.write_direct(a, 16_384, &[0x55; 4096]).unwrap();
        vol.writeback(a).unwrap();
    });
}

#[test]
fn an_unlinked_file_is_whole_or_gone_at_every_crash_point() {
    // A running transaction larger than the journal commits as several
    // journal transactions. Padding it by 9-byte records moves the split
    // over every byte of the unlink, so one of the runs puts the split
    // where an unlink of two records would tear.
    let opts =
        FormatOptions { block_size: 1024, log_blocks: Some(8), inode_count: Some(64), ..FormatOptions::default() };
    let base = fresh(&opts, 8 << 20);
    let data: Vec<u8> = (0..9000u32).map(|i| (i % 253) as u8).collect();
    let (mut whole, mut gone) = (0, 0);
    for pad in 0..17 {
        let dev = Arc::new(RecordingDevice::new(base.to_bytes()));
        let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
        let a = vol.create().unwrap();
        vol.write(a, 0, &data).unwrap();
        vol.fsync(a).unwrap();
        let from = dev.events();
        for _ in 0..pad {
            vol.create().unwrap();
        }
        let b = vol.create().unwrap();
        for size in 1..=410 {
            vol.truncate(b, size).unwrap();
        }
        vol.unlink(a).unwrap();
        vol.fsync(b).unwrap();
        vol.abandon();
        let mut image = dev.base().to_vec();
        dev.apply(&mut image, 0, from);
        for point in from..=dev.events() {
            if point > from {
                dev.apply(&mut image, point - 1, point);
            }
            let vol = Volume::open(Arc::new(MemDevice::from_bytes(image.clone())), mount_opts()).unwrap();
            match vol.size(a) {
                Ok(_) => {
                    assert_eq!(
                        read_all(&vol, a),
                        data,
                        "padding {pad}, crash after event {point}: a comes back changed"
                    );
                    whole += 1;
                }
                Err(_) => gone += 1,
            }
        }
    }
    assert!(whole > 0 && gone > 0, "both sides of the commit were tried ({whole} whole, {gone} gone)");
}

#[test]
fn running_out_of_tree_space_is_refused_at_the_write() {
    // 1 KiB blocks and a small tree area: a fallocated file written one
    // byte in every other block needs a record per block.
    let opts =
        FormatOptions { block_size: 1024, tree_blocks: Some(24), inode_count: Some(64), ..FormatOptions::default() };
    let dev = fresh(&opts, 16 << 20);
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let f = vol.create().unwrap();
    let other = vol.create().unwrap();
    vol.fallocate(other, 0, 2 << 20, FallocateMode::ExtendSize).unwrap();
    vol.fsync(other).unwrap();
    vol.fallocate(f, 0, 8 << 20, FallocateMode::ExtendSize).unwrap();
    let mut written = 0u64;
    let refused = loop {
        match vol.write(f, written * 2048, b"x") {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        if written.is_multiple_of(64) {
            vol.fsync(f).unwrap_or_else(|e| panic!("fsync after {written} writes: {e}"));
        }
        assert!(written < 4096, "never refused");
    };
    assert!(matches!(refused, VolError::MetadataFull { .. }), "{refused}");
    assert!(written > 100, "refused early, after {written} writes");
    // Everything accepted becomes durable; the volume stays writable.
    vol.fsync(f).unwrap();
    vol.unlink(other).unwrap();
    vol.fsync(f).unwrap();
    vol.abandon();
    let vol = Volume::open(dev.clone(), mount_opts()).expect("every fsync succeeded, so it mounts");
    let data = read_all(&vol, f);
    for i in 0..written {
        assert_eq!(data[(i * 2048) as usize], b'x', "write {i}");
    }
    vol.abandon();
    let r = check(&*dev, Repair::Yes).unwrap();
    assert!(r.is_clean() && r.refused.is_empty(), "{:?} {:?}", r.problems, r.refused);
    Volume::open(dev.clone(), mount_opts()).unwrap().unmount().unwrap();
}

#[test]
fn check_of_a_volume_awaiting_replay_is_clean() {
    let dev = fresh(&FormatOptions::default(), 32 << 20);
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let f = vol.create().unwrap();
    vol.write(f, 0, b"synced").unwrap();
    vol.fsync(f).unwrap();
    vol.abandon();
    let r = check(&*dev, Repair::No).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert!(r.pending_transactions > 0);
    assert!(!r.repaired);
    // A repair replays them and nothing else.
    let r = check(&*dev, Repair::Yes).unwrap();
    assert!(r.repaired && r.is_clean());
    assert_eq!(check(&*dev, Repair::No).unwrap().pending_transactions, 0);
}
