//! Which group a new inode goes to, as ext4 decides (`find_group_orlov`
//! for directories, `find_group_other` for the rest). The inode's group
//! is where its blocks are sought, so this decides data placement as
//! much as any allocator pass.
//!
//! With flex groups the decision is made per flex group, on its summed
//! counts. A directory made in the root spreads out: the search starts at
//! the flex group its name hashes to and takes the one with the fewest
//! directories among those with at least the average of free inodes and
//! free blocks. A deeper directory stays near its parent: the first flex
//! group from the parent's last one that is not crowded with directories
//! nor short of inodes or blocks. Anything else goes to the first group of
//! its parent's flex group with a free inode. Inside the chosen flex
//! group, the first group with a free inode is taken.

use crate::fs::SharedCounts;

/// The counts the decision reads: each group's, and the volume's.
#[derive(Debug, Clone)]
pub(crate) struct GroupCounts {
    /// Free inodes per group.
    pub inodes: Vec<u32>,
    /// Free blocks per group.
    pub blocks: Vec<u64>,
    /// Directories per group.
    pub dirs: Vec<u32>,
    /// The volume's totals as the shared values of ext4's per-CPU
    /// counters say (which lag behind the groups' exact counts); `None`:
    /// the exact sums.
    pub shared: Option<SharedCounts>,
}

impl GroupCounts {
    fn free_inodes(&self, g: u32) -> u32 {
        self.inodes[g as usize]
    }
    fn used_dirs(&self, g: u32) -> u32 {
        self.dirs[g as usize]
    }
    fn free_blocks(&self, g: u32) -> u64 {
        self.blocks[g as usize]
    }
}

/// The volume's shape as the inode allocator sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InodeGeometry {
    pub groups: u32,
    pub inodes_per_group: u32,
    pub blocks_per_group: u32,
    /// Groups per flex group (1 without flex_bg); a power of two.
    pub flex: u32,
}

/// The parent directory, as the decision sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parent {
    pub ino: u64,
    pub group: u32,
    /// The group of the last inode made in it (`i_last_alloc_group`).
    pub last_alloc: Option<u32>,
    /// The root (or a directory flagged TOPDIR): its subdirectories spread.
    pub top: bool,
}

#[derive(Default)]
struct Stats {
    free_inodes: u64,
    free_blocks: u64,
    used_dirs: u64,
}

impl InodeGeometry {
    /// Units of the decision: flex groups, or groups without flex_bg.
    fn units(&self) -> u32 {
        self.groups.div_ceil(self.flex)
    }

    fn stats(&self, c: &GroupCounts, unit: u32) -> Stats {
        let mut s = Stats::default();
        for g in unit * self.flex..((unit + 1) * self.flex).min(self.groups) {
            s.free_inodes += u64::from(c.free_inodes(g));
            s.free_blocks += c.free_blocks(g);
            s.used_dirs += u64::from(c.used_dirs(g));
        }
        s
    }

    fn totals(&self, c: &GroupCounts) -> Stats {
        if let Some(s) = c.shared {
            return Stats { free_inodes: s.free_inodes, free_blocks: s.free_blocks, used_dirs: s.dirs };
        }
        let mut s = Stats::default();
        for g in 0..self.groups {
            s.free_inodes += u64::from(c.free_inodes(g));
            s.free_blocks += c.free_blocks(g);
            s.used_dirs += u64::from(c.used_dirs(g));
        }
        s
    }

    /// The first group of flex group `unit` with a free inode.
    fn first_with_inode(&self, c: &GroupCounts, unit: u32) -> Option<u32> {
        (unit * self.flex..((unit + 1) * self.flex).min(self.groups)).find(|&g| c.free_inodes(g) > 0)
    }

    /// A directory's group. `name_hash` is the half-MD4 hash of its name
    /// under the volume's seed (used only under a top directory).
    pub fn dir_group(&self, c: &GroupCounts, parent: Parent, name_hash: u32) -> Option<u32> {
        let units = self.units();
        let total = self.totals(c);
        let avg_inodes = total.free_inodes / u64::from(units);
        let avg_blocks = total.free_blocks / u64::from(units);
        let found = if parent.top {
            let start = name_hash % units;
            let mut best: Option<(u32, u64)> = None;
            for i in 0..units {
                let u = (start + i) % units;
                let s = self.stats(c, u);
                let fewer_dirs = best.is_none_or(|(_, d)| s.used_dirs < d);
                let enough = s.free_inodes > 0 && s.free_inodes >= avg_inodes && s.free_blocks >= avg_blocks;
                // The first candidate must have fewer directories than a
                // group has inodes.
                if enough && fewer_dirs && s.used_dirs < u64::from(self.inodes_per_group) {
                    best = Some((u, s.used_dirs));
                }
            }
            best.map(|(u, _)| u)
        } else {
            let per_unit = u64::from(self.inodes_per_group) * u64::from(self.flex);
            let max_dirs = total.used_dirs / u64::from(units) + per_unit / 16;
            let min_inodes = avg_inodes.saturating_sub(per_unit / 4).max(1);
            let min_blocks = avg_blocks.saturating_sub(u64::from(self.blocks_per_group) * u64::from(self.flex) / 4);
            let start = parent.last_alloc.unwrap_or(parent.group) / self.flex;
            (0..units).map(|i| (start + i) % units).find(|&u| {
                let s = self.stats(c, u);
                s.used_dirs < max_dirs && s.free_inodes >= min_inodes && s.free_blocks >= min_blocks
            })
        };
        match found {
            Some(u) if self.flex == 1 => Some(u),
            Some(u) => self.first_with_inode(c, u).or_else(|| self.fallback(c, parent)),
            None => self.fallback(c, parent),
        }
    }

    /// Any group from the parent's on with at least the average of free
    /// inodes, then any with one.
    fn fallback(&self, c: &GroupCounts, parent: Parent) -> Option<u32> {
        let avg = self.totals(c).free_inodes / u64::from(self.groups);
        let from = |min: u64| {
            (0..self.groups).map(|i| (parent.group + i) % self.groups).find(|&g| {
                let free = u64::from(c.free_inodes(g));
                free > 0 && free >= min
            })
        };
        from(avg).or_else(|| from(0))
    }

    /// A file's (or any non-directory's) group.
    pub fn other_group(&self, c: &GroupCounts, parent: Parent) -> Option<u32> {
        if self.flex > 1 {
            let first_of = |g: u32| (g / self.flex) * self.flex;
            let within =
                |g: u32| (first_of(g)..(first_of(g) + self.flex).min(self.groups)).find(|&g| c.free_inodes(g) > 0);
            if let Some(g) = within(parent.group) {
                return Some(g);
            }
            if let Some(g) = parent.last_alloc.and_then(within) {
                return Some(g);
            }
            // No inode near the parent: a new flex group, by the rule for
            // directories that do not spread.
            return self.dir_group(c, Parent { top: false, ..parent }, 0);
        }
        let usable = |g: u32| c.free_inodes(g) > 0 && c.free_blocks(g) > 0;
        if usable(parent.group) {
            return Some(parent.group);
        }
        // Files of one directory stay together, apart from those of
        // another directory in the same group: a quadratic probe from a
        // start that mixes in the parent's inode number.
        let n = u64::from(self.groups);
        let mut g = (u64::from(parent.group) + parent.ino) % n;
        let mut step = 1;
        while step < n {
            g = (g + step) % n;
            if usable(g as u32) {
                return Some(g as u32);
            }
            step <<= 1;
        }
        (1..=self.groups).map(|i| (parent.group + i) % self.groups).find(|&g| c.free_inodes(g) > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume() -> (InodeGeometry, GroupCounts) {
        let geo = InodeGeometry { groups: 64, inodes_per_group: 2048, blocks_per_group: 8192, flex: 16 };
        let c = GroupCounts { inodes: vec![2048; 64], dirs: vec![0; 64], blocks: vec![8000; 64], shared: None };
        (geo, c)
    }

    fn root() -> Parent {
        Parent { ino: 2, group: 0, last_alloc: None, top: true }
    }

    #[test]
    fn top_directories_start_at_their_hash_and_take_the_emptiest_flex_group() {
        let (geo, mut c) = volume();
        c.dirs[0] = 2;
        // Hash 5 starts at flex group 1; every flex group qualifies, the
        // first with the fewest directories (flex 1) wins.
        assert_eq!(geo.dir_group(&c, root(), 5), Some(16));
        c.dirs[16] = 1;
        c.dirs[32] = 1;
        assert_eq!(geo.dir_group(&c, root(), 5), Some(48));
        // A flex group short of free blocks is passed over.
        c.blocks[48] = 0;
        assert_eq!(geo.dir_group(&c, root(), 5), Some(16));
    }

    #[test]
    fn deeper_directories_and_files_stay_near_their_parent() {
        let (geo, mut c) = volume();
        let parent = Parent { ino: 40_000, group: 19, last_alloc: None, top: false };
        assert_eq!(geo.dir_group(&c, parent, 0), Some(16));
        assert_eq!(geo.other_group(&c, parent), Some(16));
        c.inodes[16] = 0;
        assert_eq!(geo.other_group(&c, parent), Some(17));
        for g in 16..32 {
            c.inodes[g] = 0;
        }
        assert_eq!(geo.other_group(&c, Parent { last_alloc: Some(40), ..parent }), Some(32));
    }

    #[test]
    fn without_flex_groups_files_probe_quadratically() {
        let (mut geo, mut c) = volume();
        geo.flex = 1;
        let parent = Parent { ino: 5, group: 3, last_alloc: None, top: false };
        assert_eq!(geo.other_group(&c, parent), Some(3));
        c.blocks[3] = 0;
        // Start (3 + 5) % 64 = 8, then +1.
        assert_eq!(geo.other_group(&c, parent), Some(9));
    }
}
