//! Damaged volumes: random bytes flipped in the metadata areas of a
//! crashed volume (journal still to replay) and of a clean one, and
//! truncated devices. Mounting gives a typed error and writes nothing, or
//! mounts a volume that then checks clean; `check` never panics, and
//! `check --repair` always leaves a volume that mounts and checks clean.
//!
//! Size knob: `MBALLOC_CORRUPT_CASES` (default 300 per image).

use mballoc_vol::crash::RecordingDevice;
use mballoc_vol::{check, FormatOptions, MemDevice, MountOptions, Repair, VolError, Volume};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

fn opts() -> FormatOptions {
    FormatOptions {
        block_size: 1024,
        blocks_per_group: Some(1024),
        log_blocks: Some(64),
        inode_count: Some(64),
        tree_blocks: Some(32),
    }
}

/// A volume with fragmented files (so trees have nodes); `clean` unmounts,
/// otherwise the journal keeps its last transactions.
fn image(clean: bool) -> (Vec<u8>, u64) {
    let dev = Arc::new(MemDevice::new(4 << 20));
    let sb = Volume::format(dev.clone(), &opts()).unwrap();
    let mo = MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() };
    let vol = Volume::open(dev.clone(), mo).unwrap();
    let a = vol.create().unwrap();
    let b = vol.create().unwrap();
    for i in 0..40u64 {
        vol.write_direct(a, i * 2048, &[i as u8; 1024]).unwrap();
        vol.write(b, i * 3000, &[i as u8 ^ 0x5a; 700]).unwrap();
        if i % 10 == 9 {
            vol.fsync(b).unwrap();
        }
    }
    vol.fsync(a).unwrap();
    if clean {
        vol.unmount().unwrap();
    } else {
        let c = vol.create().unwrap();
        vol.write(c, 0, &[1; 5000]).unwrap();
        vol.fsync(c).unwrap();
        vol.abandon();
    }
    (dev.to_bytes(), sb.data_start * 1024)
}

fn mount_checks_clean(bytes: Vec<u8>, what: &str) {
    let dev = Arc::new(RecordingDevice::new(bytes));
    match Volume::open(dev.clone(), MountOptions::default()) {
        Err(e) => {
            assert_eq!(dev.events(), 0, "{what}: a failed mount ({e}) wrote or flushed");
            // Check reports without panicking; repair leaves a volume
            // that mounts and checks clean, or refuses and writes nothing,
            // or fails with an error.
            let _ = check(&*dev, Repair::No);
            match check(&*dev, Repair::Yes) {
                Ok(r) if r.repaired => {
                    let vol = Volume::open(dev.clone(), MountOptions::default())
                        .unwrap_or_else(|e| panic!("{what}: mount after repair: {e}"));
                    vol.abandon();
                    let r = check(&*dev, Repair::No).unwrap();
                    assert!(r.is_clean(), "{what}: after repair: {:?}", r.problems);
                }
                Ok(r) => {
                    assert!(!r.refused.is_empty(), "{what}: neither repaired nor refused: {:?}", r.problems);
                    assert_eq!(dev.events(), 0, "{what}: a refused repair wrote");
                }
                Err(_) => assert_eq!(dev.events(), 0, "{what}: a failed repair wrote"),
            }
        }
        Ok(vol) => {
            for f in vol.files() {
                let mut buf = vec![0u8; 4096];
                vol.read(f, 0, &mut buf).unwrap_or_else(|e| panic!("{what}: read after mount: {e}"));
            }
            vol.fs().check().unwrap_or_else(|e| panic!("{what}: engine check: {e}"));
            vol.abandon();
            let r = check(&*dev, Repair::No).unwrap();
            assert!(r.is_clean(), "{what}: mounted, then check found {:?}", r.problems);
        }
    }
}

#[test]
fn flipped_metadata_never_panics_or_writes() {
    let cases = mballoc_testkit::knob("MBALLOC_CORRUPT_CASES", 300);
    for clean in [false, true] {
        let (base, meta_bytes) = image(clean);
        let seed = 0xBAD + u64::from(clean);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for case in 0..cases {
            let mut bytes = base.clone();
            for _ in 0..rng.gen_range(1..=4) {
                let at = rng.gen_range(0..meta_bytes as usize);
                bytes[at] ^= 1 << rng.gen_range(0..8);
            }
            mount_checks_clean(bytes, &format!("seed {seed} case {case} (clean: {clean})"));
        }
    }
}

#[test]
fn typed_errors_for_bad_superblocks_and_short_devices() {
    let (base, _) = image(true);
    let mut bad = base.clone();
    bad[0] ^= 1;
    assert!(matches!(
        Volume::open(Arc::new(MemDevice::from_bytes(bad)), MountOptions::default()),
        Err(VolError::BadMagic)
    ));
    let mut bad = base.clone();
    bad[200] ^= 1;
    assert!(matches!(
        Volume::open(Arc::new(MemDevice::from_bytes(bad)), MountOptions::default()),
        Err(VolError::Checksum { structure: "superblock", .. })
    ));
    for len in [0usize, 300, 4096, base.len() / 2] {
        let short = base[..len].to_vec();
        let r = Volume::open(Arc::new(MemDevice::from_bytes(short)), MountOptions::default());
        assert!(r.is_err(), "a device cut to {len} bytes mounted");
    }
    // The volume as written is clean, and a bitmap that disagrees with the
    // files is refused, then repaired.
    assert!(check(&MemDevice::from_bytes(base.clone()), Repair::No).unwrap().is_clean());
    let sb = mballoc_vol::Superblock::decode(&base[..512], base.len() as u64).unwrap();
    let mut bad = base.clone();
    bad[(sb.bitmap_start * 1024 + 100) as usize] ^= 0xff;
    let dev = Arc::new(MemDevice::from_bytes(bad));
    assert!(matches!(Volume::open(dev.clone(), MountOptions::default()), Err(VolError::Corrupt { .. })));
    let r = check(&*dev, Repair::Yes).unwrap();
    assert!(r.repaired && !r.problems.is_empty());
    assert!(check(&*dev, Repair::No).unwrap().is_clean());
}
