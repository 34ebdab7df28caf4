//! The allocator's counters as the lab compares them: the engine's own
//! statistics, or ext4's parsed from `/proc/fs/ext4/DEV/mb_stats`.

use mballoc::MbStats;

/// The allocator's counters, from the engine or from ext4's mb_stats file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocCounters {
    /// Block requests as ext4's `reqs` counts them: every allocation
    /// context released, preallocation hits included.
    pub reqs: u64,
    /// Requests that reached the allocator's passes (successes per pass
    /// summed: ext4 counts no other way to tell preallocation hits apart).
    pub allocator_reqs: u64,
    /// Free extents measured.
    pub extents_scanned: u64,
    /// Groups scanned under their lock.
    pub groups_scanned: u64,
    /// Results at the goal block.
    pub goal_hits: u64,
    /// Scans stopped by `mb_max_to_scan`.
    pub breaks: u64,
    /// Hits per pass: p2-aligned, goal-fast, best-avail, goal-slow, any-free.
    pub cr_hits: [u64; 5],
}

impl AllocCounters {
    /// The allocator's statistics, as ext4's mb_stats file gives them:
    /// `reqs` counts requests served from preallocations too, because the
    /// file layer reports each to the allocator's statistics as ext4
    /// releases every allocation context through `collect_stats`.
    pub fn from_stats(s: &MbStats) -> Self {
        AllocCounters {
            reqs: s.reqs,
            allocator_reqs: s.cr_hits.iter().sum(),
            extents_scanned: s.extents_scanned,
            groups_scanned: s.groups_scanned,
            goal_hits: s.goal_hits,
            breaks: s.breaks,
            cr_hits: s.cr_hits,
        }
    }

    /// Parse /proc/fs/ext4/DEV/mb_stats (6.5+ layouts; older kernels name
    /// the passes cr0..cr3 and have no best-avail pass).
    pub fn parse_mb_stats(text: &str) -> Option<Self> {
        let mut c = AllocCounters::default();
        let mut pass: Option<usize> = None;
        let mut seen = false;
        for line in text.lines() {
            let t = line.trim();
            if let Some(name) = t.strip_suffix("_stats:") {
                pass = match name {
                    "cr_p2_aligned" | "cr0" => Some(0),
                    "cr_goal_fast" | "cr1" => Some(1),
                    "cr_best_avail" => Some(2),
                    "cr_goal_slow" | "cr2" => Some(3),
                    "cr_any_free" | "cr3" => Some(4),
                    _ => None,
                };
                continue;
            }
            let Some((key, value)) = t.split_once(':') else { continue };
            let Ok(v) = value.trim().split('/').next().unwrap_or("").trim().parse::<u64>() else { continue };
            let indented = line.starts_with("\t\t");
            match (key, pass, indented) {
                ("hits", Some(p), true) => c.cr_hits[p] = v,
                ("reqs", ..) => {
                    c.reqs = v;
                    seen = true;
                }
                ("groups_scanned", _, false) => c.groups_scanned = v,
                ("extents_scanned", _, false) => {
                    c.extents_scanned = v;
                    pass = None;
                }
                ("goal_hits", ..) => c.goal_hits = v,
                ("breaks", ..) => c.breaks = v,
                _ => {}
            }
        }
        c.allocator_reqs = c.cr_hits.iter().sum();
        seen.then_some(c)
    }

    /// What happened between `before` and `self`.
    pub fn since(&self, before: &AllocCounters) -> AllocCounters {
        let mut cr_hits = [0; 5];
        for (i, h) in cr_hits.iter_mut().enumerate() {
            *h = self.cr_hits[i].saturating_sub(before.cr_hits[i]);
        }
        AllocCounters {
            reqs: self.reqs.saturating_sub(before.reqs),
            allocator_reqs: self.allocator_reqs.saturating_sub(before.allocator_reqs),
            extents_scanned: self.extents_scanned.saturating_sub(before.extents_scanned),
            groups_scanned: self.groups_scanned.saturating_sub(before.groups_scanned),
            goal_hits: self.goal_hits.saturating_sub(before.goal_hits),
            breaks: self.breaks.saturating_sub(before.breaks),
            cr_hits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB_STATS_617: &str = "mballoc:\n\treqs: 10\n\tsuccess: 9\n\tgroups_scanned: 4\n\tcr_p2_aligned_stats:\n\t\thits: 3\n\t\tgroups_considered: 1\n\t\textents_scanned: 2\n\t\tuseless_loops: 0\n\tcr_goal_fast_stats:\n\t\thits: 1\n\t\tgroups_considered: 1\n\t\textents_scanned: 0\n\t\tuseless_loops: 0\n\tcr_best_avail_stats:\n\t\thits: 2\n\t\tgroups_considered: 1\n\t\textents_scanned: 0\n\t\tuseless_loops: 0\n\tcr_goal_slow_stats:\n\t\thits: 0\n\t\tgroups_considered: 1\n\t\textents_scanned: 0\n\t\tuseless_loops: 0\n\tcr_any_free_stats:\n\t\thits: 4\n\t\tgroups_considered: 1\n\t\textents_scanned: 0\n\t\tuseless_loops: 0\n\textents_scanned: 77\n\t\tgoal_hits: 5\n\t\tstream_goal_hits: 0\n\t\tlen_goal_hits: 0\n\t\t2^n_hits: 1\n\t\tbreaks: 6\n\t\tlost: 0\n\tbuddies_generated: 3/64\n";

    #[test]
    fn parses_the_kernels_mb_stats() {
        let c = AllocCounters::parse_mb_stats(MB_STATS_617).unwrap();
        assert_eq!((c.reqs, c.allocator_reqs), (10, 10));
        assert_eq!(c.groups_scanned, 4);
        assert_eq!(c.extents_scanned, 77);
        assert_eq!(c.cr_hits, [3, 1, 2, 0, 4]);
        assert_eq!((c.goal_hits, c.breaks), (5, 6));
        assert!(AllocCounters::parse_mb_stats("mballoc:\n\tmb stats collection turned off.\n").is_none());
    }

    #[test]
    fn parses_our_own_mb_stats() {
        let a = mballoc::Allocator::builder(mballoc::Geometry::new(4096, 1 << 16).unwrap())
            .tunables(mballoc::Tunables::with_stats())
            .build()
            .unwrap();
        for _ in 0..5 {
            a.allocate(&mballoc::AllocRequest::new(8)).unwrap();
        }
        let c = AllocCounters::parse_mb_stats(&a.mb_stats_report()).unwrap();
        assert_eq!(c, AllocCounters::from_stats(&a.stats()));
    }
}
