//! Hash maps keyed by file number. Numbers are handed out in sequence and
//! nobody outside chooses them, so the default hasher's protection
//! against crafted keys buys nothing and costs a SipHash round per lookup
//! on every operation; a multiplicative hash spreads sequential numbers
//! over the table's high bits, which the table probes by.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for one `u64` key: Fibonacci hashing.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not the path `u64` keys take; kept correct for any key.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(26);
    }
}

/// A `HashMap` keyed by file number.
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_numbers_spread_over_the_high_bits() {
        let tops: std::collections::HashSet<u64> = (12..12 + 128u64)
            .map(|x| {
                let mut h = IdHasher::default();
                h.write_u64(x);
                h.finish() >> 57
            })
            .collect();
        assert!(tops.len() > 64, "{} distinct top-7-bit values of 128", tops.len());
        let mut m: IdMap<u64> = IdMap::default();
        m.insert(5, 1);
        assert_eq!(m.get(&5), Some(&1));
    }
}
