//! Shared helpers for the integration tests.
#![allow(dead_code)]

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The seed for a randomized test: `MBALLOC_SEED` or a fresh one, printed so
/// any failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let s = std::env::var("MBALLOC_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("{test}: MBALLOC_SEED={s}");
    s
}

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Size knob for heavy randomized runs: `MBALLOC_TEST_SCALE` (default 1).
pub fn scale() -> usize {
    std::env::var("MBALLOC_TEST_SCALE").ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}
