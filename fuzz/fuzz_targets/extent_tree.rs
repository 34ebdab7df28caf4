#![no_main]
//! Extent trees: the input becomes /a's tree root and the blocks it may
//! point at (see `mballoc_testkit::ext4_fuzz::extent_image`).

use libfuzzer_sys::fuzz_target;

use mballoc_testkit::ext4_fuzz as base;

fuzz_target!(|data: &[u8]| {
    if let Some(img) = base::extent_image(data) {
        base::exercise(img);
    }
});
