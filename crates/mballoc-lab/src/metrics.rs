//! Metrics computed the same way for every backend, from the same inputs:
//! each file's extent records (FIEMAP's view) and the volume's free runs.
//!
//! * extents per file, counted as `filefrag` counts them;
//! * `e4defrag -c`'s fragmentation score and average extent size;
//! * e2freefrag's free-extent histogram;
//! * Ceph BlueStore's fragmentation score of the free space;
//! * the layout score of Conway et al. (FAST '17, "File Systems Fated for
//!   Senescence?"): the share of logically adjacent block pairs that are
//!   physically adjacent too.

use mballoc::report::FreeSpaceHistogram;

/// One extent record of a file, in blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// First logical block.
    pub logical: u64,
    /// First physical block.
    pub physical: u64,
    /// Blocks.
    pub len: u64,
}

/// A file's layout: its records in logical order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLayout {
    /// The file's name in the workload.
    pub name: String,
    /// Its records in logical order.
    pub records: Vec<Record>,
}

impl FileLayout {
    /// Allocated blocks.
    pub fn blocks(&self) -> u64 {
        self.records.iter().map(|r| r.len).sum()
    }

    /// Extents as `filefrag` reports them (see
    /// [`mballoc_ext4::filefrag_count`]).
    pub fn filefrag_extents(&self) -> u64 {
        mballoc_ext4::filefrag_count(self.records.iter().map(|r| (r.logical, r.physical, r.len)))
    }
}

/// `e4defrag -c` over a set of files.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct E4defrag {
    /// Σ now / Σ best extents.
    pub now: u64,
    /// Σ best extents (one per flex group's worth of blocks).
    pub best: u64,
    /// "Average size per extent" in KiB.
    pub avg_extent_kib: u64,
    /// "Fragmentation score".
    pub score: f64,
}

/// e4defrag's summary. `blocks_per_flex` is the blocks per group times the
/// groups per flex group (the best a file can do is one extent per flex
/// group). Files of at most one block are skipped, as e4defrag does.
pub fn e4defrag(files: &[FileLayout], block_size: u32, blocks_per_flex: u64) -> E4defrag {
    let (mut now, mut best, mut blocks) = (0u64, 0u64, 0u64);
    for f in files {
        let b = f.blocks();
        if b <= 1 {
            continue;
        }
        now += f.records.len() as u64;
        best += b.div_ceil(blocks_per_flex.max(1));
        blocks += b;
    }
    if blocks == 0 {
        return E4defrag { now, best, avg_extent_kib: 0, score: 0.0 };
    }
    let ratio = (now as f64 - best as f64) * 100.0 / blocks as f64;
    let score = if ratio > 10.0 { 80.0 + 20.0 * ratio / 100.0 } else { 8.0 * ratio };
    E4defrag { now, best, avg_extent_kib: blocks * u64::from(block_size / 1024) / now.max(1), score }
}

/// The layout score over `files`: of every pair of logically adjacent
/// mapped blocks of a file, the share whose second block physically
/// follows the first (1.0: every file in one run; 0.0: no two blocks
/// together). `None` when no file has two adjacent blocks.
pub fn layout_score(files: &[FileLayout]) -> Option<f64> {
    let (mut adjacent, mut pairs) = (0u64, 0u64);
    for f in files {
        let mut prev: Option<&Record> = None;
        for r in &f.records {
            // Within a record every pair is adjacent both ways.
            let inside = r.len.saturating_sub(1);
            adjacent += inside;
            pairs += inside;
            if let Some(p) = prev {
                if p.logical + p.len == r.logical {
                    pairs += 1;
                    adjacent += u64::from(p.physical + p.len == r.physical);
                }
            }
            prev = Some(r);
        }
    }
    (pairs > 0).then(|| adjacent as f64 / pairs as f64)
}

/// The free space of a volume: maximal free runs, in blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeSpace {
    /// Bytes per block.
    pub block_size: u32,
    /// Blocks on the volume.
    pub total_blocks: u64,
    /// Free blocks.
    pub free_blocks: u64,
    /// Lengths of the maximal free runs, in volume order.
    pub runs: Vec<u64>,
}

impl FreeSpace {
    /// e2freefrag's histogram.
    pub fn histogram(&self) -> FreeSpaceHistogram {
        let mut h = FreeSpaceHistogram::new(self.block_size, self.total_blocks, self.free_blocks);
        for &r in &self.runs {
            h.add(r);
        }
        h
    }

    /// Ceph BlueStore's fragmentation score, allocation unit = one block:
    /// 0 when all free space is one run, 1 when it is all single blocks.
    pub fn ceph_score(&self) -> f64 {
        ceph_score(self.runs.iter().map(|&r| r * u64::from(self.block_size)), u64::from(self.block_size))
    }
}

/// BlueStore's worth of a free chunk of `len` bytes: doubling a chunk up to
/// 1 MiB makes it worth 1.2× two halves, the bonus tapering to 1.0 at 128 MiB.
fn worth(len: u64, scales: &[f64; 66]) -> f64 {
    if len == 0 {
        return 0.0;
    }
    let k = 63 - len.leading_zeros() as usize;
    let base = (1u128 << k) as f64;
    let x = (len as f64 - base) / base;
    base * scales[k] * (1.0 - x) + 2.0 * base * scales[k + 1] * x
}

fn scales() -> [f64; 66] {
    let mut s = [1.0f64; 66];
    for k in 1..66 {
        let f = match k {
            0..=20 => 1.2,
            21..=26 => ((k as f64 - 20.0) + 1.2 * (27.0 - k as f64)) / 7.0,
            _ => 1.0,
        };
        s[k] = s[k - 1] * f;
    }
    s
}

/// Ceph's `get_fragmentation_score` over free chunks of the given byte
/// lengths with allocation unit `unit`.
pub fn ceph_score(chunks: impl IntoIterator<Item = u64>, unit: u64) -> f64 {
    let s = scales();
    let (mut score_sum, mut sum) = (0.0, 0u64);
    for c in chunks {
        score_sum += worth(c, &s);
        sum += c;
    }
    let ideal = worth(sum, &s);
    let terrible = (sum / unit.max(1)) as f64 * worth(unit, &s);
    if ideal <= terrible {
        return 0.0;
    }
    ((ideal - score_sum) / (ideal - terrible)).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4defrag_matches_seed_000s_figures() {
        // 64 files of 262,144 blocks: base 16,760,234 records in all, patched
        // 47,629 (the seed's e4defrag output): scores 100 and 2.
        let score = |now_total: u64| {
            let per = now_total / 64;
            let extra = now_total % 64;
            let files: Vec<FileLayout> = (0..64u64)
                .map(|i| {
                    let n = per + u64::from(i < extra);
                    let mut recs = Vec::new();
                    let len = 262_144 / n;
                    for k in 0..n {
                        let l = if k == n - 1 { 262_144 - len * (n - 1) } else { len };
                        recs.push(Record { logical: k * len, physical: 10 * k * len, len: l });
                    }
                    FileLayout { name: i.to_string(), records: recs }
                })
                .collect();
            e4defrag(&files, 4096, 32768 * 16)
        };
        let base = score(16_760_234);
        assert_eq!((base.now, base.best, base.score.round()), (16_760_234, 64, 100.0));
        let patched = score(47_629);
        assert_eq!(patched.score.round(), 2.0);
    }

    #[test]
    fn layout_score_counts_physically_adjacent_pairs() {
        let rec = |logical, physical, len| Record { logical, physical, len };
        let one = FileLayout { name: "a".into(), records: vec![rec(0, 100, 8)] };
        assert_eq!(layout_score(std::slice::from_ref(&one)), Some(1.0));
        // Two records that do not follow each other: 6 of 7 pairs.
        let split = FileLayout { name: "b".into(), records: vec![rec(0, 100, 4), rec(4, 500, 4)] };
        assert_eq!(layout_score(&[split]), Some(6.0 / 7.0));
        // A hole between them is no pair; records that meet are adjacent.
        let holey = FileLayout { name: "c".into(), records: vec![rec(0, 100, 2), rec(10, 102, 2), rec(12, 104, 1)] };
        assert_eq!(layout_score(&[holey]), Some(1.0));
        let scattered = FileLayout { name: "d".into(), records: (0..4).map(|i| rec(i, 10 * i, 1)).collect() };
        assert_eq!(layout_score(&[scattered]), Some(0.0));
        assert_eq!(layout_score(&[]), None);
    }

    #[test]
    fn ceph_score_follows_bluestores_tests() {
        let au = 4096u64;
        let gib = 1u64 << 30;
        assert_eq!(ceph_score([16 * gib], au), 0.0);
        // Every second AU taken: all free space in single AUs.
        assert!(ceph_score(std::iter::repeat_n(au, 10_000), au) > 0.99);
        // 1 AU taken every 100 MiB of 16 GiB.
        let chunk = (100 << 20) - au;
        assert!(ceph_score(std::iter::repeat_n(chunk, 163), au) < 0.0001);
        // One AU of every five taken: runs of 4 AUs.
        assert!(ceph_score(std::iter::repeat_n(4 * au, 10_000), au) > 0.9);
    }
}
