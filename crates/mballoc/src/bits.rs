//! Word-level bit operations on `[u64]` bitmaps (bit `i` is bit `i % 64` of
//! word `i / 64`). The hot paths of the buddy and the order indexes are built
//! on these; they never look at a bit at a time when a word will do.

#[inline]
pub(crate) fn test(bits: &[u64], i: u32) -> bool {
    bits[(i >> 6) as usize] >> (i & 63) & 1 == 1
}

#[inline]
pub(crate) fn set(bits: &mut [u64], i: u32) {
    bits[(i >> 6) as usize] |= 1 << (i & 63);
}

#[inline]
pub(crate) fn clear(bits: &mut [u64], i: u32) {
    bits[(i >> 6) as usize] &= !(1 << (i & 63));
}

/// Mask of bits `[lo, hi)` inside one word, `0 <= lo < hi <= 64`.
#[inline]
fn mask(lo: u32, hi: u32) -> u64 {
    let upper = if hi == 64 { u64::MAX } else { (1u64 << hi) - 1 };
    upper & !((1u64 << lo) - 1)
}

/// Apply `f(word_index, mask)` to every word overlapping `[start, end)`.
#[inline]
fn for_each_word(start: u32, end: u32, mut f: impl FnMut(usize, u64)) {
    let mut i = start;
    while i < end {
        let w = i >> 6;
        let lo = i & 63;
        let hi = (end - (w << 6)).min(64);
        f(w as usize, mask(lo, hi));
        i = (w + 1) << 6;
    }
}

pub(crate) fn set_range(bits: &mut [u64], start: u32, end: u32) {
    for_each_word(start, end, |w, m| bits[w] |= m);
}

pub(crate) fn clear_range(bits: &mut [u64], start: u32, end: u32) {
    for_each_word(start, end, |w, m| bits[w] &= !m);
}

/// Number of set bits in `[start, end)`.
#[cfg(test)]
pub(crate) fn count_ones(bits: &[u64], start: u32, end: u32) -> u32 {
    let mut n = 0;
    for_each_word(start, end, |w, m| n += (bits[w] & m).count_ones());
    n
}

/// First set bit in `[from, end)`, or `end`.
pub(crate) fn next_one(bits: &[u64], from: u32, end: u32) -> u32 {
    next_matching(bits, from, end, 0)
}

/// First clear bit in `[from, end)`, or `end`.
pub(crate) fn next_zero(bits: &[u64], from: u32, end: u32) -> u32 {
    next_matching(bits, from, end, u64::MAX)
}

#[inline]
fn next_matching(bits: &[u64], from: u32, end: u32, invert: u64) -> u32 {
    if from >= end {
        return end;
    }
    let mut w = (from >> 6) as usize;
    let mut word = (bits[w] ^ invert) & !((1u64 << (from & 63)) - 1);
    loop {
        if word != 0 {
            let i = ((w as u32) << 6) + word.trailing_zeros();
            return i.min(end);
        }
        w += 1;
        if (w as u32) << 6 >= end {
            return end;
        }
        word = bits[w] ^ invert;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_searches() {
        let mut b = vec![0u64; 4];
        set_range(&mut b, 3, 130);
        assert_eq!(count_ones(&b, 0, 256), 127);
        assert_eq!(next_one(&b, 0, 256), 3);
        assert_eq!(next_zero(&b, 3, 256), 130);
        clear_range(&mut b, 64, 128);
        assert_eq!(next_zero(&b, 3, 256), 64);
        assert_eq!(next_one(&b, 64, 256), 128);
        assert_eq!(next_one(&b, 130, 200), 200);
        assert!(test(&b, 129) && !test(&b, 130));
        set(&mut b, 255);
        assert_eq!(next_one(&b, 130, 256), 255);
        clear(&mut b, 255);
        assert_eq!(next_one(&b, 130, 256), 256);
    }
}
