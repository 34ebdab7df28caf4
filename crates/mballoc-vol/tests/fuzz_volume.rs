//! The volume fuzz target's body on random inputs (a few hundred in every
//! `cargo test`; `MBALLOC_FUZZ_CASES` for more, `MBALLOC_FUZZ_SEED` for
//! another stream), and on every saved input under
//! `fuzz/regressions/volume`. Coverage-guided: `cargo +nightly fuzz run
//! volume` from the repository root.

use mballoc_vol::mutate::fuzz::fuzz_one;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

#[test]
fn random_mutations_keep_every_rule() {
    let cases = mballoc_testkit::knob("MBALLOC_FUZZ_CASES", 300);
    let seed = mballoc_testkit::knob("MBALLOC_FUZZ_SEED", 0xF022);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut mounted, mut repaired) = (0, 0);
    for case in 0..cases {
        let len = 1 + 5 * rng.gen_range(1..=4);
        let input: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        match fuzz_one(&input) {
            Ok(t) => {
                mounted += t.mounted;
                repaired += t.repaired;
            }
            Err(e) => panic!("case {case} (MBALLOC_FUZZ_SEED={seed}), input {input:02x?}: {e}"),
        }
    }
    eprintln!("{cases} inputs: {mounted} mounted, {repaired} repaired, every rule held");
}

#[test]
fn saved_inputs_keep_every_rule() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/volume");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("skipped: no saved inputs in {}", dir.display());
        return;
    };
    for e in entries {
        let path = e.unwrap().path();
        let input = std::fs::read(&path).unwrap();
        if let Err(err) = fuzz_one(&input) {
            panic!("{}: {err}", path.display());
        }
    }
}
