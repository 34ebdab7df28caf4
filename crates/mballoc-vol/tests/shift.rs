//! Collapse and insert range on a volume: the data moves with its
//! extents, the cache holds nothing stale, and a crash at any device
//! event shows the file before or after, never between.

use mballoc_vol::crash::RecordingDevice;
use mballoc_vol::FileId;
use mballoc_vol::{check, FormatOptions, MemDevice, MountOptions, Owner, Repair, Volume, ROOT_INO};
use std::sync::Arc;

const BS: usize = 1024;

fn opts() -> MountOptions {
    MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() }
}

fn contents(vol: &Volume, f: mballoc_vol::FileId) -> Vec<u8> {
    let mut b = vec![0u8; vol.size(f).unwrap() as usize];
    vol.read(f, 0, &mut b).unwrap();
    b
}

/// 64 blocks, block i holding byte i + 1.
fn pattern() -> Vec<u8> {
    (0..64 * BS).map(|i| (i / BS) as u8 + 1).collect()
}

#[test]
fn collapse_and_insert_move_the_data_and_survive_a_crash_anywhere() {
    let base = Arc::new(MemDevice::new(8 << 20));
    Volume::format(base.clone(), &FormatOptions { block_size: BS as u32, ..FormatOptions::default() }).unwrap();
    let dev = Arc::new(RecordingDevice::new(base.to_bytes()));
    let vol = Volume::open(dev.clone(), opts()).unwrap();
    let f = vol.create_at(FileId(ROOT_INO), b"f", Owner::default()).unwrap();
    let data = pattern();
    vol.write(f, 0, &data).unwrap();
    vol.fsync(f).unwrap();
    let before = dev.events();
    // Partly cached, partly not: the collapse writes back and drops it.
    vol.write(f, 30 * BS as u64, &vec![0xEE; BS]).unwrap();
    let mut old = data.clone();
    old[30 * BS..31 * BS].fill(0xEE);
    vol.collapse_range(f, 8 * BS as u64, 16 * BS as u64).unwrap();
    let mut collapsed = old.clone();
    collapsed.drain(8 * BS..24 * BS);
    assert_eq!(contents(&vol, f), collapsed);
    vol.insert_range(f, 4 * BS as u64, 2 * BS as u64).unwrap();
    let mut inserted = collapsed.clone();
    inserted.splice(4 * BS..4 * BS, std::iter::repeat_n(0, 2 * BS));
    assert_eq!(contents(&vol, f), inserted);
    assert!(vol.collapse_range(f, 0, 100).is_err(), "not whole blocks");
    assert!(vol.insert_range(f, vol.size(f).unwrap(), BS as u64).is_err(), "at the end");
    vol.fsync(f).unwrap();
    let after = dev.events();
    vol.unmount().unwrap();
    // Every crash point from the first fsync on: one of the three states
    // the file had at an fsync or a shift, never a mix.
    let states = [data, old, collapsed, inserted];
    let mut image = dev.base().to_vec();
    dev.apply(&mut image, 0, before);
    for point in before..=after {
        if point > before {
            dev.apply(&mut image, point - 1, point);
        }
        let d = Arc::new(MemDevice::from_bytes(image.clone()));
        let v = Volume::open(d.clone(), opts()).unwrap_or_else(|e| panic!("crash after event {point}: {e}"));
        let got = contents(&v, mballoc_vol::FileId(f.0));
        assert!(states.contains(&got), "crash after event {point}: {} bytes in no state the file had", got.len());
        drop(v);
        assert!(check(&*d, Repair::No).unwrap().is_clean(), "crash after event {point}");
    }
}
