//! The mutation sweep: every metadata structure of a small volume (home
//! files, extent-tree nodes, attribute overflow, directories, links, and
//! fsynced transactions awaiting replay), changed a byte at a time, raw
//! and with every checksum made valid again. For each, the rules:
//!
//! * `check` writes nothing; a volume it calls clean mounts.
//! * A volume that mounts serves every file the change could not speak
//!   for (not the owner of the changed record, not named by a changed
//!   transaction) exactly as last fsynced, names and all; unmounted, it
//!   checks clean and mounts again.
//! * A repair either refuses and writes nothing, or converges: afterwards
//!   the volume checks clean with nothing pending, mounts, and every file
//!   the change could not speak for is intact.
//!
//! Size knobs: `MBALLOC_MUTATE_BYTES` (byte positions per structure
//! besides each header's first 32, default 6) and `MBALLOC_MUTATE_SEED`.
//! The whole space: `MBALLOC_MUTATE_BYTES=100000`.

use mballoc_vol::mutate::rules::{judge, owners_after, sample_volume, Left, Tally};
use mballoc_vol::mutate::{mutate, structures, Kind, Seal, Structure};
use mballoc_vol::MemDevice;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

/// Byte positions of `s` to change: the first 32, and `extra` more.
fn positions(s: &Structure, extra: u64, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let mut at: BTreeSet<usize> = (0..s.len.min(32)).collect();
    if extra as usize >= s.len {
        at.extend(0..s.len);
    } else {
        for _ in 0..extra {
            at.insert(rng.gen_range(0..s.len));
        }
    }
    at.into_iter().collect()
}

#[test]
fn every_metadata_mutation_is_refused_repaired_or_harmless() {
    let extra = mballoc_testkit::knob("MBALLOC_MUTATE_BYTES", 6);
    let seed = mballoc_testkit::knob("MBALLOC_MUTATE_SEED", 0x3D7);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut tallies: BTreeMap<(Left, Kind, &str), Tally> = BTreeMap::new();
    let mut broken = Vec::new();
    for left in [Left::Crashed, Left::Unmounted] {
        let (image, want) = sample_volume(left);
        let base = MemDevice::from_bytes(image.clone());
        let all = structures(&base).unwrap();
        let kinds: BTreeSet<Kind> = all.iter().map(|s| s.kind).collect();
        for k in [Kind::Superblock, Kind::Descriptor, Kind::Bitmap, Kind::Inode, Kind::TreeNode, Kind::Attributes] {
            assert!(kinds.contains(&k), "the volume has no {k:?}");
        }
        assert_eq!(kinds.contains(&Kind::Transaction), left == Left::Crashed);
        for s in &all {
            for at in positions(s, extra, &mut rng) {
                for seal in [Seal::Raw, Seal::Resealed] {
                    let xor = rng.gen_range(1..=255u8);
                    let dev = MemDevice::from_bytes(image.clone());
                    mutate(&dev, s, at, xor, seal).unwrap();
                    if std::env::var_os("MBALLOC_MUTATE_TRACE").is_some() {
                        eprintln!("{left:?} {:?} at byte {} (+{at}) ^{xor:#04x} {seal:?}", s.kind, s.offset);
                    }
                    let owners = owners_after(&dev, s);
                    let label = if seal == Seal::Raw { "raw" } else { "resealed" };
                    let t = tallies.entry((left, s.kind, label)).or_default();
                    if let Err(e) = judge(&dev.to_bytes(), &want, &owners, t) {
                        broken.push(format!(
                            "{left:?}: {:?} at byte {} (+{at}) ^{xor:#04x} {label}: {e}",
                            s.kind, s.offset
                        ));
                    }
                }
            }
        }
    }
    let mut total = Tally::default();
    eprintln!("volume     kind         seal      cases  check-err  unclean  mounted  repaired  repair-refused");
    for ((left, k, label), t) in &tallies {
        eprintln!(
            "{:<10} {:<12} {label:<9} {:>5} {:>10} {:>8} {:>8} {:>9} {:>15}",
            format!("{left:?}"),
            format!("{k:?}"),
            t.cases,
            t.check_refused,
            t.unclean,
            t.mounted,
            t.repaired,
            t.repair_refused
        );
        total.cases += t.cases;
    }
    eprintln!("{} mutated volumes (MBALLOC_MUTATE_SEED={seed}, MBALLOC_MUTATE_BYTES={extra})", total.cases);
    assert!(
        broken.is_empty(),
        "{} of {} cases broke a rule (MBALLOC_MUTATE_SEED={seed}):\n{}",
        broken.len(),
        total.cases,
        broken.join("\n")
    );
}
