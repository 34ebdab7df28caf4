//! The page-cache folios a file's buffered writes create, kept only so far
//! as they cut ext4's writeback requests: when an allocation comes up
//! short inside a writeback piece, ext4 maps next the rest of the folio it
//! ended in, and starts a new piece at that folio's end.
//!
//! A write makes folios as the kernel's buffered-write loop does (for a
//! file system with large folios, as ext4 has since 6.16): it copies at
//! most up to the next multiple of the largest folio size at a time, and
//! for each piece a folio is made whose size is the largest power of two
//! of pages not above the piece's length, shrunk until its first page is
//! aligned to its size and it overlaps no folio already cached. A write
//! into a cached folio uses it. Truncate and punch drop the folios they
//! cover wholly.

use std::collections::BTreeMap;

/// The page size the folios are made of.
pub const PAGE: u64 = 4096;

/// How the file layer follows the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageCache {
    /// Not followed: a short allocation asks next for the rest of its
    /// writeback piece.
    Untracked,
    /// Folios as the kernel makes them, up to `largest` bytes (2 MiB, a
    /// PMD, on x86-64): a short allocation asks next for the rest of its
    /// folio (ext4's `mpage_map_and_submit_buffers`).
    Folios {
        /// The largest folio in bytes (a power of two, at least a page).
        largest: u64,
    },
}

/// One file's cached folios: first page → end page.
#[derive(Debug, Clone, Default)]
pub(crate) struct Folios {
    by_start: BTreeMap<u64, u64>,
}

impl Folios {
    /// The folio holding page `p`.
    fn holding(&self, p: u64) -> Option<(u64, u64)> {
        self.by_start.range(..=p).next_back().map(|(&s, &e)| (s, e)).filter(|&(_, e)| p < e)
    }

    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.holding(start).is_some() || self.by_start.range(start..end).next().is_some()
    }

    /// A buffered write of `len` bytes at `offset`.
    pub(crate) fn write(&mut self, offset: u64, len: u64, largest: u64) {
        let largest = largest.max(PAGE);
        let max_order = (largest / PAGE).trailing_zeros();
        let (mut pos, end) = (offset, offset.saturating_add(len));
        while pos < end {
            let page = pos / PAGE;
            if let Some((_, e)) = self.holding(page) {
                pos = end.min(e * PAGE);
                continue;
            }
            let bytes = (largest - pos % largest).min(end - pos);
            let mut order = (63 - bytes.leading_zeros()).saturating_sub(PAGE.trailing_zeros()).min(max_order);
            if page & ((1 << order) - 1) != 0 {
                order = page.trailing_zeros();
            }
            while order > 0 && self.overlaps(page, page + (1 << order)) {
                order -= 1;
            }
            let folio_end = page + (1 << order);
            self.by_start.insert(page, folio_end);
            pos = end.min(folio_end * PAGE);
        }
    }

    /// Drop the folios wholly inside bytes `[from, to)`.
    pub(crate) fn drop_within(&mut self, from: u64, to: u64) {
        let (first, end) = (from.div_ceil(PAGE), to / PAGE);
        if first >= end {
            return;
        }
        let gone: Vec<u64> = self.by_start.range(first..end).filter(|(_, &e)| e <= end).map(|(&s, _)| s).collect();
        for s in gone {
            self.by_start.remove(&s);
        }
    }

    /// Where a writeback piece goes on after an allocation ended before
    /// byte `at`: the end of the folio holding `at` when `at` is inside
    /// one (its rest is asked for first), `at` itself at a folio's first
    /// byte, `None` when no folio holds it.
    pub(crate) fn resume_after_short(&self, at: u64) -> Option<u64> {
        let (s, e) = self.holding(at / PAGE)?;
        Some(if at == s * PAGE { at } else { e * PAGE })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn folios(f: &Folios) -> Vec<(u64, u64)> {
        f.by_start.iter().map(|(&s, &e)| (s, e - s)).collect()
    }

    #[test]
    fn writes_make_folios_of_their_own_size_aligned() {
        let mut f = Folios::default();
        // 1 MiB writes: 256-page folios.
        f.write(0, MIB, 2 * MIB);
        f.write(MIB, MIB, 2 * MIB);
        assert_eq!(folios(&f), vec![(0, 256), (256, 256)]);
        // A 4 MiB write: two 2 MiB folios; a 12 KiB write: 8 KiB then 4 KiB.
        let mut g = Folios::default();
        g.write(0, 4 * MIB, 2 * MIB);
        g.write(8 * MIB, 12 << 10, 2 * MIB);
        assert_eq!(folios(&g), vec![(0, 512), (512, 512), (2048, 2), (2050, 1)]);
        // Unaligned: a 64 KiB write at 4 KiB starts with one page.
        let mut h = Folios::default();
        h.write(4096, 64 << 10, 2 * MIB);
        assert_eq!(folios(&h)[0], (1, 1));
        assert_eq!(folios(&h).iter().map(|x| x.1).sum::<u64>(), 16);
    }

    #[test]
    fn a_rewrite_uses_the_cached_folio_and_a_new_folio_avoids_them() {
        let mut f = Folios::default();
        f.write(8192, 4096, 2 * MIB);
        f.write(0, 64 << 10, 2 * MIB);
        // Pages 0-1, then page 2 cached, then 3, 4-7, 8-15.
        assert_eq!(folios(&f), vec![(0, 2), (2, 1), (3, 1), (4, 4), (8, 8)]);
    }

    #[test]
    fn a_short_allocation_resumes_at_its_folio_end() {
        let mut f = Folios::default();
        f.write(0, 8 * MIB, 2 * MIB);
        // 1,535 blocks of 4 KiB mapped: the rest of folio [1024, 1536).
        assert_eq!(f.resume_after_short(1535 * 4096), Some(1536 * 4096));
        assert_eq!(f.resume_after_short(1536 * 4096), Some(1536 * 4096));
        assert_eq!(f.resume_after_short(9 * MIB), None);
        f.drop_within(100, 4000);
        f.drop_within(0, 4 * MIB + 1);
        assert_eq!(folios(&f), vec![(1024, 512), (1536, 512)]);
    }
}
