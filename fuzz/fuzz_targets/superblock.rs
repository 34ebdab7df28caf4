#![no_main]
//! Superblock and group descriptors: the input overwrites the start of a
//! pristine image (see `mballoc_testkit::ext4_fuzz::superblock_image`).

use libfuzzer_sys::fuzz_target;

use mballoc_testkit::ext4_fuzz as base;

fuzz_target!(|data: &[u8]| {
    if let Some(img) = base::superblock_image(data) {
        base::exercise(img);
    }
});
