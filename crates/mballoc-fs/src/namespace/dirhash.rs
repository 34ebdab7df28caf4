//! ext4's directory hash, half-MD4: the order of an indexed directory's
//! leaves, and the start of the Orlov search for a top-level directory.
//! It is three rounds of eight MD4 steps over the name, 32 bytes at a
//! time, each chunk packed into eight words behind a padding word made
//! of the remaining length.

/// How name bytes become the hash's words: mke2fs records which one the
/// volume uses (x86 volumes say signed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashChars {
    /// Bytes read as `signed char` (`EXT2_FLAGS_SIGNED_HASH`).
    Signed,
    /// Bytes read as `unsigned char` (`EXT2_FLAGS_UNSIGNED_HASH`).
    Unsigned,
}

/// MD4's initial state, used when the volume's seed is all zero.
const DEFAULT_SEED: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
const K2: u32 = 0o13240474631;
const K3: u32 = 0o15666365641;

/// The hash of `name` (its low bit clear, as the index stores it).
pub fn half_md4(name: &[u8], seed: [u32; 4], chars: HashChars) -> u32 {
    let mut state = if seed.iter().any(|&w| w != 0) { seed } else { DEFAULT_SEED };
    let mut rest = name;
    while !rest.is_empty() {
        let words = pack(rest, chars);
        transform(&mut state, &words);
        rest = &rest[rest.len().min(32)..];
    }
    let hash = state[1] & !1;
    // The largest value marks the end of a 32-bit readdir; ext4 moves a
    // name that hashes to it one step down.
    if hash == 0x7fff_ffff << 1 {
        (0x7fff_ffff - 1) << 1
    } else {
        hash
    }
}

/// Eight words from up to 32 bytes of `msg`, each byte shifted in after
/// a pad of the remaining length repeated in all four bytes.
fn pack(msg: &[u8], chars: HashChars) -> [u32; 8] {
    let len = msg.len() as u32;
    let pad = (len & 0xff) * 0x0101_0101;
    let mut out = [pad; 8];
    let mut val = pad;
    let mut filled = 0;
    for (i, &byte) in msg.iter().take(32).enumerate() {
        let c = match chars {
            HashChars::Signed => byte as i8 as i32 as u32,
            HashChars::Unsigned => u32::from(byte),
        };
        val = c.wrapping_add(val << 8);
        if i % 4 == 3 {
            out[filled] = val;
            filled += 1;
            val = pad;
        }
    }
    if filled < 8 {
        out[filled] = val;
    }
    out
}

fn transform(state: &mut [u32; 4], x: &[u32; 8]) {
    let f = |x: u32, y: u32, z: u32| z ^ (x & (y ^ z));
    let g = |x: u32, y: u32, z: u32| (x & y).wrapping_add((x ^ y) & z);
    let h = |x: u32, y: u32, z: u32| x ^ y ^ z;
    let [mut a, mut b, mut c, mut d] = *state;
    let step = |fun: &dyn Fn(u32, u32, u32) -> u32, a: u32, b: u32, c: u32, d: u32, w: u32, s: u32| {
        a.wrapping_add(fun(b, c, d)).wrapping_add(w).rotate_left(s)
    };
    // Round 1: words in order, shifts 3 7 11 19.
    for i in [0, 4] {
        a = step(&f, a, b, c, d, x[i], 3);
        d = step(&f, d, a, b, c, x[i + 1], 7);
        c = step(&f, c, d, a, b, x[i + 2], 11);
        b = step(&f, b, c, d, a, x[i + 3], 19);
    }
    // Round 2: odd words then even, shifts 3 5 9 13.
    for i in [1, 0] {
        a = step(&g, a, b, c, d, x[i].wrapping_add(K2), 3);
        d = step(&g, d, a, b, c, x[i + 2].wrapping_add(K2), 5);
        c = step(&g, c, d, a, b, x[i + 4].wrapping_add(K2), 9);
        b = step(&g, b, c, d, a, x[i + 6].wrapping_add(K2), 13);
    }
    // Round 3: 3 7 2 6, then 1 5 0 4; shifts 3 9 11 15.
    for [p, q, r, t] in [[3, 7, 2, 6], [1, 5, 0, 4]] {
        a = step(&h, a, b, c, d, x[p].wrapping_add(K3), 3);
        d = step(&h, d, a, b, c, x[q].wrapping_add(K3), 9);
        c = step(&h, c, d, a, b, x[r].wrapping_add(K3), 11);
        b = step(&h, b, c, d, a, x[t].wrapping_add(K3), 15);
    }
    state[0] = state[0].wrapping_add(a);
    state[1] = state[1].wrapping_add(b);
    state[2] = state[2].wrapping_add(c);
    state[3] = state[3].wrapping_add(d);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed `c2159da8-8390-4db4-a929-ee5ce8755466` as ext4 stores it.
    fn seed() -> [u32; 4] {
        let b: [u8; 16] =
            [0xc2, 0x15, 0x9d, 0xa8, 0x83, 0x90, 0x4d, 0xb4, 0xa9, 0x29, 0xee, 0x5c, 0xe8, 0x75, 0x54, 0x66];
        std::array::from_fn(|i| u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]))
    }

    /// Values printed by e2fsprogs' `debugfs -R "dx_hash -h half_md4 -s SEED NAME"`.
    #[test]
    fn matches_e2fsprogs() {
        let s = seed();
        assert_eq!(half_md4(b"a", s, HashChars::Signed), 0x95a8_5c08);
        assert_eq!(half_md4(b"hello", s, HashChars::Signed), 0x4080_6080);
        assert_eq!(half_md4(b"lost+found", s, HashChars::Signed), 0xe24b_b0ca);
        let long = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ";
        assert_eq!(half_md4(long, s, HashChars::Signed), 0x9090_45ac);
        assert_eq!(half_md4("été".as_bytes(), s, HashChars::Signed), 0xd499_92aa);
        assert_eq!(half_md4(b"hello", [0; 4], HashChars::Signed), 0x1746_da32);
    }

    #[test]
    fn signedness_matters_only_past_ascii() {
        let s = seed();
        assert_eq!(half_md4(b"hello", s, HashChars::Unsigned), half_md4(b"hello", s, HashChars::Signed));
        let e = "été".as_bytes();
        assert_ne!(half_md4(e, s, HashChars::Unsigned), half_md4(e, s, HashChars::Signed));
    }
}
