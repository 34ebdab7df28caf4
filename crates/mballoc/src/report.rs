//! Reports in the kernel's and e2fsprogs' own text layouts, so a user can
//! `diff` ours against theirs: `/proc/fs/ext4/<dev>/mb_stats` (6.17+),
//! `mb_groups`, `mb_structs_summary`, and `e2freefrag`.

use crate::allocator::Allocator;
use crate::criteria::Criterion;
use crate::order_index::IndexKind;
use crate::stats::MbStats;
use std::fmt::Write;

/// `mb_stats` as the kernel prints it. `enabled` is the `mb_stats` knob;
/// `groups` the group count (the denominator of `buddies_generated`).
pub fn mb_stats(s: &MbStats, enabled: bool, groups: u32) -> String {
    let mut o = String::from("mballoc:\n");
    if !enabled {
        o.push_str("\tmb stats collection turned off.\n\tTo enable, please write \"1\" to sysfs file mb_stats.\n");
        return o;
    }
    let _ = writeln!(o, "\treqs: {}", s.reqs);
    let _ = writeln!(o, "\tsuccess: {}", s.success);
    let _ = writeln!(o, "\tgroups_scanned: {}", s.groups_scanned);
    for cr in Criterion::ALL {
        let i = cr.index();
        let _ = writeln!(o, "\t{}_stats:", cr.stats_name());
        let _ = writeln!(o, "\t\thits: {}", s.cr_hits[i]);
        let _ = writeln!(o, "\t\tgroups_considered: {}", s.cr_groups_considered[i]);
        let _ = writeln!(o, "\t\textents_scanned: {}", s.cr_extents_scanned[i]);
        let _ = writeln!(o, "\t\tuseless_loops: {}", s.cr_useless_loops[i]);
    }
    let _ = writeln!(o, "\textents_scanned: {}", s.extents_scanned);
    let _ = writeln!(o, "\t\tgoal_hits: {}", s.goal_hits);
    let _ = writeln!(o, "\t\tstream_goal_hits: {}", s.stream_goal_hits);
    let _ = writeln!(o, "\t\tlen_goal_hits: {}", s.len_goal_hits);
    let _ = writeln!(o, "\t\t2^n_hits: {}", s.two_n_hits);
    let _ = writeln!(o, "\t\tbreaks: {}", s.breaks);
    let _ = writeln!(o, "\t\tlost: {}", s.lost);
    let _ = writeln!(o, "\tbuddies_generated: {}/{}", s.buddies_generated, groups);
    let _ = writeln!(o, "\tbuddies_time_used: {}", s.buddies_time_used);
    let _ = writeln!(o, "\tpreallocated: {}", s.preallocated);
    let _ = writeln!(o, "\tdiscarded: {}", s.discarded);
    o
}

/// The `mb_groups` header line (always 14 order columns, as the kernel).
pub const MB_GROUPS_HEADER: &str = "#group: free  frags first [ 2^0   2^1   2^2   2^3   2^4   2^5   2^6   2^7   2^8   2^9   2^10  2^11  2^12  2^13  ]\n";

/// One `mb_groups` line. A group with nothing free shows the group size
/// as its first free cluster, as the kernel does: it searches a bitmap of
/// the full group size, whose bits past a short last group's end are set.
pub fn mb_groups_line(group: u32, info: &crate::GroupInfo, block_size_log2: u32, clusters_per_group: u32) -> String {
    let first_free = if info.free == 0 { clusters_per_group } else { info.first_free };
    let mut o = format!("#{:<5}: {:<5} {:<5} {:<5} [", group, info.free, info.fragments, first_free);
    for i in 0..=13u32 {
        let v = if i <= block_size_log2 + 1 { info.counters[i as usize] } else { 0 };
        let _ = write!(o, " {v:<5}");
    }
    o.push_str(" ]\n");
    o
}

impl Allocator {
    /// `/proc/fs/ext4/<dev>/mb_stats`.
    pub fn mb_stats_report(&self) -> String {
        mb_stats(&self.stats(), self.tunables().mb_stats, self.geometry().groups())
    }

    /// `/proc/fs/ext4/<dev>/mb_groups`, one line per group.
    pub fn mb_groups_report(&self) -> String {
        let mut o = String::from(MB_GROUPS_HEADER);
        for g in 0..self.geometry().groups() {
            o.push_str(&mb_groups_line(
                g,
                &self.group(g, |b| *b.info()),
                self.geometry().block_size_log2(),
                self.geometry().blocks_per_group(),
            ));
        }
        o
    }

    /// `/proc/fs/ext4/<dev>/mb_structs_summary`.
    pub fn mb_structs_summary(&self) -> String {
        let mut o = format!("optimize_scan: {}\n", u8::from(self.optimize_scan_enabled()));
        for (title, kind) in [
            ("max_free_order_lists", IndexKind::LargestFreeOrder),
            ("avg_fragment_size_lists", IndexKind::AvgFragmentSize),
        ] {
            let _ = writeln!(o, "{title}:");
            for k in 0..self.geometry().num_orders() {
                let _ = writeln!(o, "\tlist_order_{k}_groups: {}", self.index_len(kind, k));
            }
        }
        o
    }

    /// The free-space histogram of this volume.
    pub fn free_space_histogram(&self) -> FreeSpaceHistogram {
        let g = self.geometry();
        let mut h = FreeSpaceHistogram::new(g.block_size(), g.total_blocks(), self.free_blocks());
        self.for_each_free_extent(|_, len| h.add(len));
        h
    }
}

/// e2freefrag's histogram bucket count.
pub const MAX_HIST: usize = 32;

/// A free-space histogram that prints exactly as `e2freefrag DEVICE` does.
///
/// ```
/// use mballoc::report::FreeSpaceHistogram;
/// let mut h = FreeSpaceHistogram::new(4096, 16384, 14319);
/// h.add(14319);
/// assert!(h.render("t.img").contains("   32M...   64M-  :             1         14319  100.00%\n"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeSpaceHistogram {
    block_size: u32,
    total_blocks: u64,
    free_blocks: u64,
    count: u64,
    min: u64,
    max: u64,
    sum: u64,
    buckets: [(u64, u64); MAX_HIST],
}

impl FreeSpaceHistogram {
    /// An empty histogram. `free_blocks` is the volume's free count (e2freefrag
    /// takes it from the superblock and uses it for every percentage).
    pub fn new(block_size: u32, total_blocks: u64, free_blocks: u64) -> Self {
        FreeSpaceHistogram {
            block_size,
            total_blocks,
            free_blocks,
            count: 0,
            min: 0,
            max: 0,
            sum: 0,
            buckets: [(0, 0); MAX_HIST],
        }
    }

    /// Count one maximal free extent of `len` blocks.
    pub fn add(&mut self, len: u64) {
        debug_assert!(len > 0);
        let idx = ((63 - len.leading_zeros()) as usize + 1).min(MAX_HIST - 1);
        self.buckets[idx].0 += 1;
        self.buckets[idx].1 += len;
        self.min = if self.count == 0 { len } else { self.min.min(len) };
        self.max = self.max.max(len);
        self.sum += len;
        self.count += 1;
    }

    /// Number of free extents.
    pub fn free_extents(&self) -> u64 {
        self.count
    }

    /// Average free extent in KiB, computed as e2freefrag does (integer).
    pub fn avg_free_extent_kib(&self) -> u64 {
        self.sum.checked_div(self.count).map_or(0, |avg| avg * u64::from(self.block_size >> 10))
    }

    /// `(extents, blocks)` per bucket; bucket `i` holds runs of
    /// `2^(i-1) ..= 2^i - 1` blocks.
    pub fn buckets(&self) -> &[(u64, u64); MAX_HIST] {
        &self.buckets
    }

    /// The text e2freefrag prints for `device`.
    pub fn render(&self, device: &str) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "Device: {device}");
        let _ = writeln!(o, "Blocksize: {} bytes", self.block_size);
        let pct = if self.total_blocks == 0 { 0.0 } else { self.free_blocks as f64 * 100.0 / self.total_blocks as f64 };
        let _ = writeln!(o, "Total blocks: {}\nFree blocks: {} ({:.1}%)", self.total_blocks, self.free_blocks, pct);
        let scale = u64::from(self.block_size >> 10);
        let (min, max) = if self.count == 0 { (0, 0) } else { (self.min * scale, self.max * scale) };
        let _ = write!(
            o,
            "\nMin. free extent: {min} KB \nMax. free extent: {max} KB\nAvg. free extent: {} KB\n",
            self.avg_free_extent_kib()
        );
        let _ = writeln!(o, "Num. free extent: {}", self.count);
        let _ = writeln!(o, "\nHISTOGRAM OF FREE EXTENT SIZES:");
        let _ = writeln!(o, "Extent Size Range :  {:>12}  {:>12}  {:>7}", "Free extents", "Free Blocks", "Percent");
        let bits = self.block_size.trailing_zeros();
        let units = b"KMGTPEZY";
        let (mut unit, mut shift) = (0usize, 10u32);
        let mut start: u64 = 0;
        for (i, &(n, blocks)) in self.buckets.iter().enumerate() {
            let end: u64 = 1 << (i as u32 + bits - shift);
            if n != 0 {
                let u = units[unit] as char;
                let end_str = if i == MAX_HIST - 1 { "max ".to_string() } else { format!("{end:>5}{u}-") };
                let pct = if self.free_blocks == 0 { 0.0 } else { blocks as f64 * 100.0 / self.free_blocks as f64 };
                let _ = writeln!(o, "{start:>5}{u}...{end_str:>7}  :  {n:>12}  {blocks:>12}  {pct:>6.2}%");
            }
            start = end;
            if start == 1 << 10 {
                start = 1;
                shift += 10;
                unit += 1;
            }
        }
        o
    }
}
