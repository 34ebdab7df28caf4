//! Kernel and engine side by side: how much of the engine's outcome is
//! the kernel's, and where the first difference arose.

use super::{Request, Run, Side};
use crate::backend::AllocCounters;
use mballoc::report::FreeSpaceHistogram;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::fmt::Write;

/// The first request whose answer differs, with what led up to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Divergence {
    /// Its position among the kernel's requests (from 0).
    pub index: usize,
    /// The kernel's request and answer.
    pub kernel: String,
    /// The engine's request with the same file, logical block and length,
    /// and its answer; or why there is none.
    pub engine: String,
    /// The requests just before it, kernel's and engine's, that agreed.
    pub before: Vec<String>,
}

/// How far the engine agreed with the kernel on one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Agreement {
    /// The case.
    pub case: String,
    /// Files on the kernel side.
    pub files: usize,
    /// Files whose layout is identical block for block.
    pub files_identical: usize,
    /// Data blocks of the kernel's files.
    pub blocks: u64,
    /// Of those, blocks the engine put in the same place.
    pub blocks_same: u64,
    /// Allocation requests the kernel made (data and metadata).
    pub kernel_requests: usize,
    /// Requests the engine made.
    pub engine_requests: usize,
    /// Kernel requests the engine made too, with the same answer.
    pub requests_matched: usize,
    /// Free extents after the case: kernel, engine.
    pub free_extents: (u64, u64),
    /// Free blocks: kernel, engine.
    pub free_blocks: (u64, u64),
    /// Hits per pass (p2-aligned, goal-fast, best-avail, goal-slow,
    /// any-free): kernel, engine.
    pub pass_hits: ([u64; 5], [u64; 5]),
    /// mb_stats requests: kernel, engine.
    pub mb_reqs: (u64, u64),
    /// The first differing request.
    pub first_divergence: Option<Divergence>,
    /// Matched requests whose pass differed (kernel's, engine's), the
    /// first few.
    pub pass_differences: Vec<String>,
    /// Files that differ, each with its first differing run.
    pub differing_files: Vec<String>,
    /// e2freefrag's histogram: kernel, engine.
    pub histograms: (String, String),
    /// mb_stats: kernel, engine.
    pub mb_stats: (String, String),
    /// Events the kernel's trace buffer dropped (then request figures are
    /// a lower bound).
    pub lost_events: u64,
}

impl Agreement {
    /// Share of files identical, 0–1 (1 with no files).
    pub fn file_share(&self) -> f64 {
        ratio(self.files_identical as u64, self.files as u64)
    }

    /// Share of data blocks in the same place.
    pub fn block_share(&self) -> f64 {
        ratio(self.blocks_same, self.blocks)
    }

    /// Share of kernel requests matched.
    pub fn request_share(&self) -> f64 {
        ratio(self.requests_matched as u64, self.kernel_requests as u64)
    }

    /// The engine's free-extent count over the kernel's.
    pub fn free_extent_ratio(&self) -> f64 {
        if self.free_extents.0 == 0 {
            if self.free_extents.1 == 0 {
                1.0
            } else {
                f64::INFINITY
            }
        } else {
            self.free_extents.1 as f64 / self.free_extents.0 as f64
        }
    }

    /// The report as text: the figures, the first divergence, the
    /// differing files, and the histograms and mb_stats side by side.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "== {}", self.case);
        let _ = writeln!(
            o,
            "files identical {}/{} ({:.1}%), blocks in place {}/{} ({:.2}%), requests matched {}/{} ({:.1}%; engine made {})",
            self.files_identical,
            self.files,
            100.0 * self.file_share(),
            self.blocks_same,
            self.blocks,
            100.0 * self.block_share(),
            self.requests_matched,
            self.kernel_requests,
            100.0 * self.request_share(),
            self.engine_requests,
        );
        let _ = writeln!(
            o,
            "free extents kernel {} engine {} ({:+.1}%), free blocks kernel {} engine {}",
            self.free_extents.0,
            self.free_extents.1,
            100.0 * (self.free_extent_ratio() - 1.0),
            self.free_blocks.0,
            self.free_blocks.1
        );
        let names = ["p2_aligned", "goal_fast", "best_avail", "goal_slow", "any_free"];
        let hits: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n} {}/{}", self.pass_hits.0[i], self.pass_hits.1[i]))
            .collect();
        let _ = writeln!(
            o,
            "pass hits kernel/engine: {}; mb_stats reqs {}/{}",
            hits.join(", "),
            self.mb_reqs.0,
            self.mb_reqs.1
        );
        if self.lost_events > 0 {
            let _ = writeln!(o, "the kernel's trace buffer dropped {} events", self.lost_events);
        }
        match &self.first_divergence {
            None => {
                let _ = writeln!(o, "first divergence: none");
            }
            Some(d) => {
                let _ = writeln!(o, "first divergence, kernel request {}:", d.index + 1);
                for b in &d.before {
                    let _ = writeln!(o, "    agreed: {b}");
                }
                let _ = writeln!(o, "  kernel: {}", d.kernel);
                let _ = writeln!(o, "  engine: {}", d.engine);
            }
        }
        for p in &self.pass_differences {
            let _ = writeln!(o, "  same answer, other pass: {p}");
        }
        for f in self.differing_files.iter().take(10) {
            let _ = writeln!(o, "  differs: {f}");
        }
        if self.differing_files.len() > 10 {
            let _ = writeln!(o, "  ... and {} more files", self.differing_files.len() - 10);
        }
        o
    }

    /// The histograms and mb_stats, two columns.
    pub fn side_by_side(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "{}", two_columns("kernel e2freefrag", &self.histograms.0, "engine", &self.histograms.1));
        let _ = writeln!(o, "{}", two_columns("kernel mb_stats", &self.mb_stats.0, "engine", &self.mb_stats.1));
        o
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

fn two_columns(a_title: &str, a: &str, b_title: &str, b: &str) -> String {
    let left: Vec<&str> = a.lines().collect();
    let right: Vec<&str> = b.lines().collect();
    let width = left.iter().map(|l| l.replace('\t', "    ").len()).max().unwrap_or(0).max(a_title.len()) + 2;
    let mut o = format!("{a_title:width$}{b_title}\n");
    for i in 0..left.len().max(right.len()) {
        let l = left.get(i).map_or(String::new(), |l| l.replace('\t', "    "));
        let r = right.get(i).map_or(String::new(), |r| r.replace('\t', "    "));
        let _ = writeln!(o, "{l:width$}{r}");
    }
    o
}

fn describe(r: &Request) -> String {
    let what = if r.data { "data" } else { "metadata" };
    let got = match r.result {
        Some((p, n)) => format!("{n} at {p}"),
        None => "nothing".into(),
    };
    let how = if r.how.is_empty() { String::new() } else { format!(" by {}", r.how) };
    format!("inode {} {what} logical {} len {} goal {} -> {got}{how}", r.ino, r.logical, r.len, r.goal)
}

type Key = (u64, u64, u32, bool);

fn key(r: &Request) -> Key {
    (r.ino, r.logical, r.len, r.data)
}

/// Blocks of `a` that `b` maps to the same physical block.
fn same_blocks(a: &[Run], b: &[Run]) -> u64 {
    let mut same = 0;
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        let lo = x.logical.max(y.logical);
        let hi = (x.logical + x.len).min(y.logical + y.len);
        if lo < hi && x.physical as i128 - x.logical as i128 == y.physical as i128 - y.logical as i128 {
            same += hi - lo;
        }
        if x.logical + x.len <= y.logical + y.len {
            i += 1;
        } else {
            j += 1;
        }
    }
    same
}

fn histogram(side: &Side, who: &str) -> (String, u64, u64) {
    let free: u64 = side.free.iter().map(|r| r.1).sum();
    let mut h = FreeSpaceHistogram::new(side.block_size, side.total_blocks, free);
    for r in &side.free {
        h.add(r.1);
    }
    (h.render(who), side.free.len() as u64, free)
}

/// Set the two sides of case `name` side by side.
pub fn compare(name: &str, kernel: &Side, engine: &Side) -> Agreement {
    let engine_files: HashMap<&str, &Vec<Run>> = engine.files.iter().map(|(n, _, r)| (n.as_str(), r)).collect();
    let (mut identical, mut blocks, mut same) = (0, 0, 0);
    let mut differing = Vec::new();
    for (n, ino, runs) in &kernel.files {
        blocks += runs.iter().map(|r| r.len).sum::<u64>();
        match engine_files.get(n.as_str()) {
            Some(e) if *e == runs => {
                identical += 1;
                same += runs.iter().map(|r| r.len).sum::<u64>();
            }
            Some(e) => {
                same += same_blocks(runs, e);
                let first = runs.iter().zip(e.iter()).position(|(a, b)| a != b).unwrap_or(runs.len().min(e.len()));
                let show = |v: &Vec<Run>| {
                    v.get(first).map_or("none".to_string(), |r| format!("{}+{}@{}", r.logical, r.len, r.physical))
                };
                differing.push(format!(
                    "{n} (inode {ino}): run {first}: kernel {} engine {} ({} vs {} runs)",
                    show(runs),
                    show(e),
                    runs.len(),
                    e.len()
                ));
            }
            None => differing.push(format!("{n} (inode {ino}): missing on the engine")),
        }
    }
    // Requests: each kernel request against the engine's first unused
    // request with the same file, logical block, length and kind.
    let mut pending: HashMap<Key, VecDeque<usize>> = HashMap::new();
    for (i, r) in engine.requests.iter().enumerate() {
        pending.entry(key(r)).or_default().push_back(i);
    }
    // A file is the same file by name, whatever number each side gave its
    // inode (they agree while the engine places inodes as ext4 does), so
    // a misplaced inode still lets its requests be compared.
    let engine_ino: HashMap<&str, u64> = engine.files.iter().map(|(n, i, _)| (n.as_str(), *i)).collect();
    let ino_of: HashMap<u64, u64> =
        kernel.files.iter().filter_map(|(n, k, _)| engine_ino.get(n.as_str()).map(|e| (*k, *e))).collect();
    let kernel_key = |r: &Request| (ino_of.get(&r.ino).copied().unwrap_or(r.ino), r.logical, r.len, r.data);
    let mut matched = 0;
    let mut first: Option<Divergence> = None;
    let mut agreed: VecDeque<String> = VecDeque::new();
    let mut pass_differences = Vec::new();
    for (i, k) in kernel.requests.iter().enumerate() {
        let e = pending.get_mut(&kernel_key(k)).and_then(VecDeque::pop_front).map(|j| &engine.requests[j]);
        let ok = e.is_some_and(|e| e.result == k.result);
        if let Some(e) = e.filter(|e| ok && e.how != k.how && !k.how.is_empty()) {
            if pass_differences.len() < 5 {
                pass_differences.push(format!("{} / engine by {}", describe(k), e.how));
            }
        }
        if ok {
            matched += 1;
            if first.is_none() {
                agreed.push_back(describe(k));
                if agreed.len() > 3 {
                    agreed.pop_front();
                }
            }
        } else if first.is_none() {
            first = Some(Divergence {
                index: i,
                kernel: describe(k),
                engine: e.map_or("no request for the same blocks".into(), describe),
                before: agreed.iter().cloned().collect(),
            });
        }
    }
    let (kh, kx, kf) = histogram(kernel, "kernel");
    let (eh, ex, ef) = histogram(engine, "engine");
    let kc = AllocCounters::parse_mb_stats(&kernel.mb_stats).unwrap_or_default();
    let ec = AllocCounters::parse_mb_stats(&engine.mb_stats).unwrap_or_default();
    Agreement {
        case: name.to_string(),
        files: kernel.files.len(),
        files_identical: identical,
        blocks,
        blocks_same: same,
        kernel_requests: kernel.requests.len(),
        engine_requests: engine.requests.len(),
        requests_matched: matched,
        free_extents: (kx, ex),
        free_blocks: (kf, ef),
        pass_hits: (kc.cr_hits, ec.cr_hits),
        mb_reqs: (kc.reqs, ec.reqs),
        first_divergence: first,
        pass_differences,
        differing_files: differing,
        histograms: (kh, eh),
        mb_stats: (kernel.mb_stats.clone(), engine.mb_stats.clone()),
        lost_events: kernel.lost_events,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(logical: u64, physical: u64, len: u64) -> Run {
        Run { logical, physical, len }
    }

    #[test]
    fn blocks_in_place_count_overlaps_at_the_same_offset() {
        let a = vec![run(0, 100, 10), run(10, 500, 10)];
        let b = vec![run(0, 100, 5), run(5, 900, 10), run(15, 505, 5)];
        assert_eq!(same_blocks(&a, &b), 5 + 5);
        assert_eq!(same_blocks(&a, &a), 20);
    }

    #[test]
    fn the_first_differing_request_is_found() {
        let req = |ino, logical, result| Request {
            ino,
            logical,
            len: 4,
            goal: 0,
            data: true,
            result: Some((result, 4)),
            how: String::new(),
        };
        let kernel = Side { requests: vec![req(13, 0, 100), req(14, 0, 200), req(13, 4, 104)], ..Side::default() };
        let engine = Side { requests: vec![req(13, 0, 100), req(13, 4, 104), req(14, 0, 300)], ..Side::default() };
        let a = compare("t", &kernel, &engine);
        assert_eq!(a.requests_matched, 2);
        let d = a.first_divergence.unwrap();
        assert_eq!(d.index, 1);
        assert!(d.engine.contains("at 300"), "{}", d.engine);
    }
}
