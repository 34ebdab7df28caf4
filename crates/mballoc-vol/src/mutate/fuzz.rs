//! The fuzz target's body: a few mutations of one of the two sample
//! volumes ([`rules::sample_volume`]), each raw or resealed, then the
//! rules. `fuzz/fuzz_targets/volume.rs` feeds it coverage-guided inputs
//! (`cargo +nightly fuzz run volume`); a seeded test feeds it random ones
//! in every `cargo test`.

use super::rules::{self, Left, Model, Tally};
use super::{mutate, structures, Seal, Structure};
use crate::MemDevice;
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// A sample volume, its structures and what must read back.
struct Base {
    image: Vec<u8>,
    structures: Vec<Structure>,
    want: Model,
}

fn base(left: Left) -> &'static Base {
    static CRASHED: OnceLock<Base> = OnceLock::new();
    static UNMOUNTED: OnceLock<Base> = OnceLock::new();
    let cell = if left == Left::Crashed { &CRASHED } else { &UNMOUNTED };
    cell.get_or_init(|| {
        let (image, want) = rules::sample_volume(left);
        let structures = structures(&MemDevice::from_bytes(image.clone())).expect("a sample volume reads");
        Base { image, structures, want }
    })
}

/// Bytes per mutation in the input: structure, position (two bytes),
/// XOR mask, seal.
const STEP: usize = 5;
/// Mutations per input at most: more rarely teaches anything new.
const MAX_STEPS: usize = 8;

/// Mutate a sample volume as `data` says and judge it: the first byte
/// picks the volume, every five after it a mutation. `Err` is a broken
/// rule (the fuzz target panics on it).
pub fn fuzz_one(data: &[u8]) -> Result<Tally, String> {
    let Some((&pick, rest)) = data.split_first() else { return Ok(Tally::default()) };
    let left = if pick & 1 == 0 { Left::Crashed } else { Left::Unmounted };
    let b = base(left);
    let dev = MemDevice::from_bytes(b.image.clone());
    let mut owners = BTreeSet::new();
    for step in rest.chunks_exact(STEP).take(MAX_STEPS) {
        let s = &b.structures[usize::from(step[0]) % b.structures.len()];
        let at = usize::from(u16::from_le_bytes([step[1], step[2]])) % s.len;
        let seal = if step[4] & 1 == 0 { Seal::Raw } else { Seal::Resealed };
        if step[3] == 0 {
            continue;
        }
        // A mutation can move what later ones find (a superblock's
        // layout): the later ones then change bytes that mean something
        // else, which is fine, but must stay on the device.
        if mutate(&dev, s, at, step[3], seal).is_err() {
            continue;
        }
        owners.extend(rules::owners_after(&dev, s));
    }
    let mut t = Tally::default();
    rules::judge(&dev.to_bytes(), &b.want, &owners, &mut t).map(|()| t)
}
