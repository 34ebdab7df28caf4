#![no_main]
//! The volume's replay, check and repair on mutated sample volumes (see
//! `mballoc_vol::mutate::fuzz`): any broken rule is a crash.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = mballoc_vol::mutate::fuzz::fuzz_one(data) {
        panic!("{e}");
    }
});
