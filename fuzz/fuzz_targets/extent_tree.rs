#![no_main]
//! Extent trees: the input becomes /a's tree root and the blocks it may
//! point at (see `base::extent_image`).

use libfuzzer_sys::fuzz_target;

#[path = "base.rs"]
mod base;

fuzz_target!(|data: &[u8]| {
    if let Some(img) = base::extent_image(data) {
        base::exercise(img);
    }
});
