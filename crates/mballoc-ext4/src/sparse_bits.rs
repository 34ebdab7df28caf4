//! A set of numbers below a bound (inode or block numbers), kept as
//! bitmap pages made on first use: a walk remembers what it has seen in
//! at most one bit per number, and in nothing for the ranges it never
//! touches.

/// Bits per page: 32 Ki numbers in 4 KiB.
const PAGE_BITS: u64 = 1 << 15;
const PAGE_WORDS: usize = (PAGE_BITS / 64) as usize;

/// Numbers `0..bound`, each in the set or not.
#[derive(Debug)]
pub(crate) struct SparseBits {
    pages: Vec<Option<Box<[u64; PAGE_WORDS]>>>,
    bound: u64,
}

impl SparseBits {
    /// An empty set of numbers below `bound`.
    pub(crate) fn new(bound: u64) -> SparseBits {
        SparseBits { pages: Vec::new(), bound }
    }

    /// Add `n`; whether it was absent.
    pub(crate) fn insert(&mut self, n: u64) -> bool {
        self.insert_range(n, 1).is_ok()
    }

    /// Add `[start, start + len)`, all of it or (when one of the numbers
    /// is already there) none: `Err` holds the first one found.
    pub(crate) fn insert_range(&mut self, start: u64, len: u64) -> Result<(), u64> {
        let end = start.saturating_add(len);
        assert!(end <= self.bound, "numbers {start}+{len} past the set's bound {}", self.bound);
        if let Some(n) = (start..end).find(|&n| self.contains(n)) {
            return Err(n);
        }
        let last_page = if len == 0 { 0 } else { ((end - 1) / PAGE_BITS) as usize + 1 };
        if self.pages.len() < last_page {
            self.pages.resize_with(last_page, || None);
        }
        for n in start..end {
            let page = self.pages[(n / PAGE_BITS) as usize].get_or_insert_with(|| Box::new([0; PAGE_WORDS]));
            let bit = n % PAGE_BITS;
            page[(bit / 64) as usize] |= 1 << (bit % 64);
        }
        Ok(())
    }

    /// Whether `n` is in the set.
    pub(crate) fn contains(&self, n: u64) -> bool {
        let Some(Some(page)) = self.pages.get((n / PAGE_BITS) as usize) else {
            return false;
        };
        let bit = n % PAGE_BITS;
        page[(bit / 64) as usize] & (1 << (bit % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_go_in_whole_or_not_at_all() {
        let mut s = SparseBits::new(1 << 20);
        assert!(s.insert(5));
        assert!(!s.insert(5));
        assert_eq!(s.insert_range(PAGE_BITS - 2, 4), Ok(()));
        assert!(s.contains(PAGE_BITS + 1) && !s.contains(PAGE_BITS + 2));
        assert_eq!(s.insert_range(0, 10), Err(5));
        assert!(!s.contains(0), "a refused range adds nothing");
        assert_eq!(s.pages.iter().filter(|p| p.is_some()).count(), 2);
    }
}
