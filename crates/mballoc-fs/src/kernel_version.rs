//! The kernel profile of one kernel: ext4's allocator changed between
//! releases, and a profile is chosen by the version it models.
//!
//! What differs from the newest kernel's profile ([`FsConfig::kernel`],
//! which Linux 6.18 matches file for file), each change with the release
//! that made it:
//!
//! * **before 5.13**: no order lists. `mb_optimize_scan` (Harshad
//!   Shirwadkar, "ext4: improve cr 0 / cr 1 group scanning", 5.13) added
//!   the largest-free-order and average-fragment lists; earlier kernels
//!   scan groups linearly from the goal in every pass.
//! * **before 6.4**: no CR_BEST_AVAIL_LEN. The CR1.5 series (Ojaswin
//!   Mujoo, "ext4: Add allocation criteria 1.5 (CR1_5)", merged in 6.4)
//!   added the pass between CR_GOAL_LEN_FAST and CR_GOAL_LEN_SLOW, and
//!   ("ext4: Avoid scanning smaller extents in BG during CR1") made
//!   CR_GOAL_LEN_FAST step over free runs shorter than the goal; before,
//!   it measured them too ([`mballoc::ShortRuns::Measure`]).
//! * **before 6.5**: the RAID stripe counted in clusters. Kemeng Shi's
//!   "ext4: treat stripe in block unit" (6.5) converts the stripe, given
//!   in blocks, to clusters where mballoc compares it with lengths; before,
//!   a bigalloc volume took its block count as clusters
//!   ([`crate::StripeUnits::BlocksAsClusters`]).
//! * **before 6.15**: a punch past the size reached the end of the page
//!   holding the first byte past it, so a size on a page boundary lost
//!   one page more (Zhang Yi's "ext4: refactor ext4_punch_hole()" cuts
//!   at `round_up(i_size, PAGE_SIZE)`; Debian's 6.12.117 has it too;
//!   [`crate::PunchBehaviour::Ext4PageAfterSize`]).
//! * **before 6.16**: folios of one page for regular files ("ext4: enable
//!   large folio for regular file", 6.16): after a short allocation
//!   writeback asks for the rest of its delayed run, not of a 2 MiB folio.
//! * **before 6.17**: linked order lists. Baokun Li's "ext4: convert free
//!   groups order lists to xarrays" (6.17) keeps each order's groups by
//!   group number and walks them from the start group; before, a group
//!   went to the tail of its list whenever its order changed, each pass
//!   tried the start group first and then the first good group from the
//!   lists' heads ([`mballoc::OrderLists::Linked`]). The 6.12 stable
//!   series has the xarrays (Debian's 6.12.117 does), so a 6.12 profile
//!   keeps them.
//! * **before 6.17**: one stream goal. The scalability series (Baokun Li,
//!   "ext4: utilize multiple global goals to reduce contention", 6.17)
//!   made one per CPU, up to a quarter of the groups.
//!
//! Versions are compared as `(major, minor)`; stable kernels carry
//! backports, which a profile of the release does not follow.

use crate::FsConfig;
use mballoc::Geometry;
use std::sync::Arc;

/// A Linux release, `major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    /// The major number.
    pub major: u32,
    /// The minor number.
    pub minor: u32,
}

impl KernelVersion {
    /// The release the kernel profile was proven against (every built-in
    /// fidelity case identical).
    pub const NEWEST: KernelVersion = KernelVersion { major: 6, minor: 18 };

    /// `major.minor`.
    pub const fn new(major: u32, minor: u32) -> KernelVersion {
        KernelVersion { major, minor }
    }

    /// The release in a `uname -r` string ("6.1.0-56-cloud-amd64").
    pub fn from_release(release: &str) -> Option<KernelVersion> {
        let mut n = release.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty());
        Some(KernelVersion { major: n.next()?.parse().ok()?, minor: n.next()?.parse().ok()? })
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for KernelVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s.split_once('.').ok_or_else(|| format!("{s:?} is not MAJOR.MINOR"))?;
        let n = |x: &str| x.parse::<u32>().map_err(|_| format!("{s:?} is not MAJOR.MINOR"));
        Ok(KernelVersion { major: n(a)?, minor: n(b)? })
    }
}

/// A rule of ext4's allocator that a release introduced, as the profiles
/// model it: what sets one kernel's profile apart from another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelRule {
    /// `mb_optimize_scan`'s order lists (5.13); before, linear scans.
    OrderLists,
    /// The CR_BEST_AVAIL_LEN pass (6.4).
    BestAvail,
    /// The cheap passes step over free runs shorter than the goal (6.4,
    /// the same series); before, they measured them.
    SkipShortRuns,
    /// The stripe converted from blocks to clusters (6.5); before, its
    /// block count taken as clusters.
    StripeInBlocks,
    /// A punch past the size ends at the page holding the size's last byte
    /// (6.15, and 6.12 stable); before, at the page after it when the size
    /// is on a page boundary.
    PunchToSizePage,
    /// Large folios for regular files (6.16): after a short allocation
    /// writeback asks for the rest of a folio of up to 2 MiB; before, of a
    /// page.
    LargeFolios,
    /// A stream goal per CPU (6.17); before, one.
    StreamGoalPerCpu,
    /// The order lists kept by group number (6.17, and 6.12 stable);
    /// before, linked lists.
    OrderXarrays,
}

impl KernelRule {
    /// Every rule, oldest first.
    pub const ALL: [KernelRule; 8] = [
        KernelRule::OrderLists,
        KernelRule::BestAvail,
        KernelRule::SkipShortRuns,
        KernelRule::StripeInBlocks,
        KernelRule::PunchToSizePage,
        KernelRule::LargeFolios,
        KernelRule::StreamGoalPerCpu,
        KernelRule::OrderXarrays,
    ];

    /// The release that introduced it.
    pub fn since(self) -> KernelVersion {
        match self {
            KernelRule::OrderLists => KernelVersion::new(5, 13),
            KernelRule::BestAvail | KernelRule::SkipShortRuns => KernelVersion::new(6, 4),
            KernelRule::StripeInBlocks => KernelVersion::new(6, 5),
            KernelRule::PunchToSizePage => KernelVersion::new(6, 15),
            KernelRule::LargeFolios => KernelVersion::new(6, 16),
            KernelRule::StreamGoalPerCpu | KernelRule::OrderXarrays => KernelVersion::new(6, 17),
        }
    }

    /// Whether kernel `version` follows it.
    pub fn in_kernel(self, version: KernelVersion) -> bool {
        // The 6.12 stable series took the xarrays and the punch (read in the
        // source of Debian's 6.12.117, and proven on it by `lab fidelity`).
        let in_6_12_stable = matches!(self, KernelRule::OrderXarrays | KernelRule::PunchToSizePage);
        version >= self.since() || (in_6_12_stable && version == KernelVersion::new(6, 12))
    }

    /// The change, as its series named it.
    pub fn change(self) -> &'static str {
        match self {
            KernelRule::OrderLists => {
                "mb_optimize_scan's order lists (\"ext4: improve cr 0 / cr 1 group scanning\", 5.13)"
            }
            KernelRule::BestAvail => "CR_BEST_AVAIL_LEN (\"ext4: Add allocation criteria 1.5 (CR1_5)\", 6.4)",
            KernelRule::SkipShortRuns => {
                "short free runs stepped over in the cheap passes (\"ext4: Avoid scanning smaller extents in BG during CR1\", 6.4)"
            }
            KernelRule::StreamGoalPerCpu => {
                "a stream goal per CPU (\"ext4: utilize multiple global goals to reduce contention\", 6.17)"
            }
            KernelRule::PunchToSizePage => "a punch past the size cut at the size's page (\"ext4: refactor ext4_punch_hole()\", 6.15, and 6.12 stable)",
            KernelRule::LargeFolios => "large folios for regular files (\"ext4: enable large folio for regular file\", 6.16)",
            KernelRule::StripeInBlocks => "the stripe in clusters (\"ext4: treat stripe in block unit\", 6.5)",
            KernelRule::OrderXarrays => {
                "order lists by group number (\"ext4: convert free groups order lists to xarrays\", 6.17, and 6.12 stable)"
            }
        }
    }
}

impl FsConfig {
    /// ext4's decisions as kernel `version` makes them (the module's list
    /// of differences). Stream goals per CPU depend on the machine: for
    /// 6.17 and later the caller sets them as it sets them for the newest.
    pub fn kernel_of(geometry: Geometry, version: KernelVersion) -> FsConfig {
        FsConfig::kernel_with(geometry, |r| r.in_kernel(version))
    }

    /// The kernel profile with the rules `has` names and without the
    /// others: a release's profile, or one rule of another release laid
    /// over it (what tells which rule a difference between two kernels
    /// comes from). With [`KernelRule::StreamGoalPerCpu`], `stream_goals`
    /// is left for the caller to size by CPU count.
    pub fn kernel_with(geometry: Geometry, has: impl Fn(KernelRule) -> bool) -> FsConfig {
        let mut cfg = FsConfig::kernel(geometry);
        if !has(KernelRule::BestAvail) {
            cfg.placement.policy = Some(Arc::new(mballoc::KernelPolicyBeforeBestAvail));
        }
        if !has(KernelRule::SkipShortRuns) {
            cfg.placement.tunables.short_runs = mballoc::ShortRuns::Measure;
        }
        if !has(KernelRule::StreamGoalPerCpu) {
            cfg.placement.stream_goals = Some(1);
        }
        if !has(KernelRule::OrderLists) {
            cfg.placement.tunables.mb_optimize_scan = mballoc::OptimizeScan::Off;
        }
        if !has(KernelRule::StripeInBlocks) {
            cfg.behaviour.stripe_units = crate::StripeUnits::BlocksAsClusters;
        }
        if !has(KernelRule::PunchToSizePage) {
            cfg.behaviour.punch = crate::PunchBehaviour::Ext4PageAfterSize;
        }
        if !has(KernelRule::LargeFolios) {
            cfg.behaviour.page_cache = crate::PageCache::Folios { largest: crate::page_cache::PAGE };
        }
        if !has(KernelRule::OrderXarrays) {
            cfg.placement.tunables.order_lists = mballoc::OrderLists::Linked;
        }
        cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_compare_and_choose_the_differences() {
        let v = KernelVersion::from_release("6.12.117+deb12-cloud-amd64").unwrap();
        assert_eq!(v, KernelVersion::new(6, 12));
        assert!(KernelVersion::new(6, 1) < v && v < KernelVersion::NEWEST);
        assert_eq!("7.3".parse::<KernelVersion>(), Ok(KernelVersion::new(7, 3)));
        assert!("7".parse::<KernelVersion>().is_err());
        let geo = Geometry::new(4096, 1 << 20).unwrap();
        let old = FsConfig::kernel_of(geo, KernelVersion::new(6, 1));
        assert_eq!(old.placement.stream_goals, Some(1));
        assert_eq!(old.placement.policy.as_ref().map(|p| p.name().to_string()).as_deref(), Some("kernel-before-6.4"));
        assert_eq!(old.placement.tunables.mb_optimize_scan, mballoc::OptimizeScan::Auto);
        let oldest = FsConfig::kernel_of(geo, KernelVersion::new(5, 10));
        assert_eq!(oldest.placement.tunables.mb_optimize_scan, mballoc::OptimizeScan::Off);
        assert_eq!(old.placement.tunables.order_lists, mballoc::OrderLists::Linked);
        assert_eq!(old.placement.tunables.short_runs, mballoc::ShortRuns::Measure);
        assert_eq!(old.behaviour.page_cache, crate::PageCache::Folios { largest: 4096 });
        assert_eq!(old.behaviour.punch, crate::PunchBehaviour::Ext4PageAfterSize);
        let mid = FsConfig::kernel_of(geo, KernelVersion::new(6, 12));
        assert!(mid.placement.policy.is_none() && mid.placement.stream_goals == Some(1));
        assert_eq!(mid.placement.tunables.order_lists, mballoc::OrderLists::ByGroup, "6.12 stable has the xarrays");
        assert_eq!(mid.behaviour.punch, crate::PunchBehaviour::Ext4, "and the punch");
        let between = FsConfig::kernel_of(geo, KernelVersion::new(6, 16));
        assert_eq!(between.placement.tunables.order_lists, mballoc::OrderLists::Linked);
        let new = FsConfig::kernel_of(geo, KernelVersion::NEWEST);
        assert!(new.placement.policy.is_none() && new.placement.stream_goals.is_none());
        let mut by_name = FsConfig::new(geo);
        by_name.set("profile", "kernel-6.1").unwrap();
        assert_eq!(by_name.placement.stream_goals, Some(1));
        assert!(by_name.set("profile", "kernel-6").is_err() && by_name.set("profile", "kernel-six.1").is_err());
    }
}
