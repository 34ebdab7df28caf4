//! The buffered-write cache: each file's data in folios of one size
//! (4 KiB to 2 MiB), indexed by folio number. A folio is created whole
//! (read from the device where the file has written blocks, zeroes
//! elsewhere), carries a dirty bit per block, and is dropped only when
//! clean. Larger folios mean fewer lookups, allocations and device writes
//! per byte, which is what the 2024 large-folio work measured in ext4.

use std::collections::BTreeMap;

/// One folio. Its bytes are kept only up to the last block ever touched
/// (the rest reads as zeroes), so a small file costs a block of memory,
/// not a whole 2 MiB folio to allocate and zero.
#[derive(Debug)]
pub struct Folio {
    data: Vec<u8>,
    /// The folio's size in bytes, and its block size.
    size: usize,
    block: usize,
    /// Bit per block: written into since the last writeback.
    pub dirty: Vec<u64>,
}

impl Folio {
    /// A folio of `bytes` zeroes with `blocks` clean blocks.
    pub fn zeroed(bytes: usize, blocks: usize) -> Folio {
        Folio { data: Vec::new(), size: bytes, block: bytes / blocks, dirty: vec![0; blocks.div_ceil(64)] }
    }

    /// Bytes the folio keeps in memory.
    pub fn kept(&self) -> u64 {
        self.data.len() as u64
    }

    /// Bytes `r` of the folio to write into, kept from now on.
    pub fn slice_mut(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        assert!(r.end <= self.size, "{r:?} inside a folio of {} bytes", self.size);
        let want = r.end.div_ceil(self.block) * self.block;
        if self.data.len() < want {
            self.reserve_for(want);
            self.data.resize(want, 0);
        }
        &mut self.data[r]
    }

    /// Copy `src` in at byte `at`, kept from now on. Bytes appended at the
    /// end are copied once, not zeroed first.
    pub fn write(&mut self, at: usize, src: &[u8]) {
        let end = at + src.len();
        assert!(end <= self.size, "{at}+{} inside a folio of {} bytes", src.len(), self.size);
        let len = self.data.len();
        if at < len {
            let n = (len - at).min(src.len());
            self.data[at..at + n].copy_from_slice(&src[..n]);
        }
        if end > len {
            let want = end.div_ceil(self.block) * self.block;
            self.reserve_for(want);
            if at > len {
                self.data.resize(at, 0);
            }
            let from = src.len() - (end - self.data.len().max(at).min(end));
            self.data.extend_from_slice(&src[from..]);
            self.data.resize(want, 0);
        }
    }

    /// Room for `want` bytes: small folios grow as they fill, but one
    /// that passes a sixteenth of its size is given the whole size at
    /// once, so a large sequential write is not copied along by doubling.
    fn reserve_for(&mut self, want: usize) {
        let target = if want > self.size / 16 { self.size } else { want };
        if self.data.capacity() >= target {
            return;
        }
        if target == self.size {
            // The whole folio: a buffer already faulted in, if one waits.
            let mut whole = crate::folio_pool::take(self.size);
            whole.extend_from_slice(&self.data);
            self.data = whole;
        } else {
            self.data.reserve_exact(target - self.data.len());
        }
    }

    /// Bytes `r`, which must have been written through
    /// [`Folio::slice_mut`] (every dirty block has).
    pub fn slice(&self, r: std::ops::Range<usize>) -> &[u8] {
        assert!(r.end <= self.data.len(), "{r:?} of a folio holding {} bytes", self.data.len());
        &self.data[r]
    }

    /// Copy bytes `r` into `dst` (zeroes where nothing was kept); reads
    /// take [`Folio::slice`] and [`Folio::kept`] instead.
    #[cfg(test)]
    pub fn read(&self, r: std::ops::Range<usize>, dst: &mut [u8]) {
        assert!(r.start <= r.end && r.end <= self.size, "{r:?} inside a folio of {} bytes", self.size);
        assert_eq!(dst.len(), r.len(), "a destination as long as the range");
        // What is kept of the range; a range that starts past what is kept
        // (a read beyond the last block written) is all zeroes.
        let start = r.start.min(self.data.len());
        let end = r.end.min(self.data.len());
        let n = end - start;
        dst[..n].copy_from_slice(&self.data[start..end]);
        dst[n..].fill(0);
    }

    /// Zero bytes `r` (nothing to do past what is kept).
    pub fn zero(&mut self, r: std::ops::Range<usize>) {
        let end = r.end.min(self.data.len());
        if r.start < end {
            self.data[r.start..end].fill(0);
        }
    }

    pub fn is_dirty(&self, b: usize) -> bool {
        self.dirty[b / 64] & (1 << (b % 64)) != 0
    }

    /// Mark block `b` dirty; true if it was clean.
    pub fn set_dirty(&mut self, b: usize) -> bool {
        let was = self.is_dirty(b);
        self.dirty[b / 64] |= 1 << (b % 64);
        !was
    }

    /// Mark block `b` clean; true if it was dirty.
    pub fn set_clean(&mut self, b: usize) -> bool {
        let was = self.is_dirty(b);
        self.dirty[b / 64] &= !(1 << (b % 64));
        was
    }

    /// Mark every block clean; returns how many were dirty.
    pub fn clean_all(&mut self) -> u64 {
        let n = self.dirty_count();
        self.dirty.fill(0);
        n
    }

    pub fn dirty_count(&self) -> u64 {
        self.dirty.iter().map(|w| u64::from(w.count_ones())).sum()
    }
}

impl Drop for Folio {
    fn drop(&mut self) {
        if self.data.capacity() == self.size {
            crate::folio_pool::give(std::mem::take(&mut self.data));
        }
    }
}

/// One file's folios.
#[derive(Debug, Default)]
pub struct FileCache {
    pub folios: BTreeMap<u64, Folio>,
    /// Dirty blocks across the folios.
    pub dirty_blocks: u64,
    /// A content change time not yet in the tree (writes do not journal
    /// their times; fsync, close and sync do).
    pub mtime: Option<i64>,
}

impl FileCache {
    /// Contiguous runs of dirty logical blocks `(first, count)`, ascending.
    pub fn dirty_runs(&self, blocks_per_folio: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (&idx, folio) in &self.folios {
            if folio.dirty_count() == 0 {
                continue;
            }
            for b in 0..blocks_per_folio {
                if !folio.is_dirty(b as usize) {
                    continue;
                }
                let l = idx * blocks_per_folio + b;
                match runs.last_mut() {
                    Some((s, n)) if *s + *n == l => *n += 1,
                    _ => runs.push((l, 1)),
                }
            }
        }
        runs
    }

    /// The cached bytes of logical blocks `[first, end)`, which lie in one
    /// folio of `blocks_per_folio` blocks of `block_size` bytes.
    pub fn blocks(&self, first: u64, end: u64, blocks_per_folio: u64, block_size: u64) -> &[u8] {
        let idx = first / blocks_per_folio;
        assert!(first < end && (end - 1) / blocks_per_folio == idx, "blocks [{first}, {end}) span folios");
        let base = idx * blocks_per_folio;
        self.folios[&idx].slice(((first - base) * block_size) as usize..((end - base) * block_size) as usize)
    }

    /// Bytes every folio keeps.
    pub fn kept(&self) -> u64 {
        self.folios.values().map(Folio::kept).sum()
    }

    /// Drop every clean folio; returns the bytes they kept.
    pub fn drop_clean(&mut self) -> u64 {
        let before = self.folios.len();
        let mut bytes = 0;
        self.folios.retain(|_, f| {
            let keep = f.dirty_count() > 0;
            if !keep {
                bytes += f.kept();
            }
            keep
        });
        debug_assert!(self.folios.len() <= before);
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Writes, zeroing and reads against a plain buffer of the whole folio.
    /// The server's panic: a write of 8 KiB, then a read that starts past
    /// what the folio keeps.
    #[test]
    fn a_read_past_what_is_kept_is_zeroes() {
        let mut f = Folio::zeroed(2 << 20, 512);
        f.write(0, &[9u8; 8192]);
        let mut out = vec![1u8; 4096];
        f.read(847_872..847_872 + 4096, &mut out);
        assert!(out.iter().all(|&b| b == 0));
    }

    #[test]
    fn a_folio_reads_as_if_it_held_every_byte() {
        for seed in 0..50u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let (size, block) = (64 * 1024, 4096);
            let mut f = Folio::zeroed(size, size / block);
            let mut model = vec![0u8; size];
            for step in 0..40 {
                let at = rng.gen_range(0..size);
                let n = rng.gen_range(0..=(size - at).min(20_000));
                match rng.gen_range(0..3) {
                    0 => {
                        let src: Vec<u8> = (0..n).map(|i| (i + step) as u8 | 1).collect();
                        f.write(at, &src);
                        model[at..at + n].copy_from_slice(&src);
                    }
                    1 => {
                        f.zero(at..at + n);
                        model[at..at + n].fill(0);
                    }
                    _ => {
                        f.slice_mut(at..at + n).fill(7);
                        model[at..at + n].fill(7);
                    }
                }
                assert_eq!(f.kept() as usize % block, 0, "seed {seed}: kept whole blocks");
                let mut out = vec![1u8; size];
                f.read(0..size, &mut out);
                assert!(out == model, "seed {seed}, step {step}");
                // A part of it, anywhere: past what is kept too.
                let a = rng.gen_range(0..=size);
                let b = rng.gen_range(a..=size);
                let mut part = vec![1u8; b - a];
                f.read(a..b, &mut part);
                assert!(part == model[a..b], "seed {seed}, step {step}: bytes {a}..{b}");
            }
        }
    }
}
