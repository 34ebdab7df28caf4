//! Every setting of a configuration by name, as text: what each takes,
//! its unit and range, which part of [`FsConfig`] it sets, how it is
//! applied ([`FsConfig::set`]) and read back ([`FsConfig::get`]). One
//! table serves every front end: the lab's `engine.KEY=VALUE`, the
//! volume's open from Python and C, and `lab settings`, which prints the
//! defaults by reading a configuration (never a second copy that could
//! drift).
//!
//! ```
//! use mballoc_fs::FsConfig;
//! let mut cfg = FsConfig::new(mballoc::Geometry::new(4096, 1 << 18).unwrap());
//! cfg.set("profile", "kernel").unwrap();
//! cfg.set("mb_max_to_scan", "50").unwrap();
//! assert_eq!(cfg.get("mb_max_to_scan").as_deref(), Some("50"));
//! assert_eq!(cfg.get("locality_groups").as_deref(), Some("1")); // the kernel's
//! assert!(cfg.set("mb_max_to_scam", "50").is_err());
//! ```

use crate::{
    CloseBehaviour, ExtentTreeBlocks, FsConfig, FsError, InodeNumbers, Normalization, PreallocTable, PunchBehaviour,
    RequestSize, StreamPlacement, SyncOrder,
};
use mballoc::{BestAvailFloor, Concurrency, LinearBestAvail, OptimizeScan, OrderLists, ShortRuns};

/// Which part of [`FsConfig`] a setting changes: what a mounted volume
/// can take ([`Part::Placement`], [`Part::Behaviour`], and the profile,
/// which sets both) and what it cannot ([`Part::Shape`] is the volume's
/// format, [`Part::Storage`] the volume's own machinery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// `profile`: every placement and behaviour choice at once.
    Profile,
    /// Where blocks go: the allocator's tunables and the file layer's
    /// placement.
    Placement,
    /// What ext4 does that a file system may do otherwise.
    Behaviour,
    /// How the layer keeps its state (writeback, commits, tree blocks).
    Storage,
    /// The volume's layout.
    Shape,
}

/// One setting as `lab settings` describes it.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Its name.
    pub key: &'static str,
    /// Its unit (blocks, extents, percent, ...) or `choice`.
    pub unit: &'static str,
    /// The values it takes.
    pub range: &'static str,
    /// What it changes.
    pub about: &'static str,
    /// The part of the configuration it sets.
    pub part: Part,
}

impl Setting {
    /// Whether the bare allocator ([`mballoc::Allocator`]) acts on it: its
    /// tunables, concurrency and stream goals, and the profile. The rest
    /// are the file layer's.
    pub fn acts_on_allocator(&self) -> bool {
        self.part == Part::Profile
            || matches!(
                self.key,
                "mb_stats"
                    | "mb_max_to_scan"
                    | "mb_min_to_scan"
                    | "mb_order2_req"
                    | "mb_max_linear_groups"
                    | "stripe"
                    | "mb_best_avail_max_trim_order"
                    | "mb_optimize_scan"
                    | "mb_c1_threshold"
                    | "mb_c2_threshold"
                    | "mb_c3_threshold"
                    | "mb_best_avail_floor"
                    | "linear_best_avail"
                    | "order_lists"
                    | "short_runs"
                    | "concurrency"
                    | "stream_goals"
                    | "flex_groups"
            )
    }
}

impl FsConfig {
    /// A builder for the allocator this configuration describes: its
    /// tunables, concurrency, flex groups, reserved ranges, stream goals
    /// and policy (what the file layer builds its own from).
    pub fn allocator_builder(&self) -> mballoc::AllocatorBuilder {
        let mut b = mballoc::Allocator::builder(self.shape.geometry)
            .tunables(self.placement.tunables)
            .concurrency(self.placement.concurrency)
            .flex_groups(self.shape.flex_groups);
        for &(s, l) in &self.shape.reserved {
            b = b.reserve(s, l);
        }
        if let Some(n) = self.placement.stream_goals {
            b = b.stream_goals(n);
        }
        if let Some(p) = &self.placement.policy {
            b = b.policy(p.clone());
        }
        b
    }
}

const fn k(key: &'static str, unit: &'static str, range: &'static str, about: &'static str, part: Part) -> Setting {
    Setting { key, unit, range, about, part }
}

use Part::{Behaviour as B, Placement as P, Shape as SH, Storage as ST};

/// Every setting.
pub const SETTINGS: &[Setting] = &[
    k(
        "profile",
        "choice",
        "default | kernel | kernel-MAJOR.MINOR",
        "the engine's own choices or ext4's (as the newest kernel, or one release, makes them), whole (applied first)",
        Part::Profile,
    ),
    k("mb_stats", "flag", "0 | 1", "count what the allocator does", P),
    k("mb_max_to_scan", "extents", "1 ..", "extents measured before the best so far is taken", P),
    k("mb_min_to_scan", "extents", "0 ..", "extents measured before a larger candidate is accepted", P),
    k("mb_order2_req", "order", "0 ..", "smallest order for the power-of-two pass", P),
    k("mb_stream_req", "blocks", "0 ..", "file size from which a file uses its own preallocation", P),
    k("mb_group_prealloc", "blocks", "0 .. (0: none)", "locality-group window", P),
    k("mb_max_linear_groups", "groups", "0 ..", "groups tried linearly before the index lookups", P),
    k("stripe", "blocks", "0 .. a group (0: none)", "RAID stripe: aligned goals, scans and trims (ext4's s_stripe)", P),
    k("mb_best_avail_max_trim_order", "orders", "0 ..", "orders CR_BEST_AVAIL_LEN may trim", P),
    k("mb_optimize_scan", "choice", "0 | 1 | auto", "index lookups instead of linear group scans", P),
    k("mb_c1_threshold", "percent", "0 .. 100 (0: off)", "free space below which the power-of-two pass is skipped", P),
    k("mb_c2_threshold", "percent", "0 .. 100", "free space below which CR_GOAL_LEN_FAST is skipped", P),
    k("mb_c3_threshold", "percent", "0 .. 100", "free space below which only CR_ANY_FREE runs", P),
    k("mb_best_avail_floor", "choice", "request | minimum", "how far CR_BEST_AVAIL_LEN may trim", P),
    k("linear_best_avail", "choice", "skip | repeat", "whether the linear groups are scanned again at best-avail", P),
    k("order_lists", "choice", "by-group | linked", "how the cheap passes choose groups: sets walked from the start group (6.17 on), or linked lists read from their heads (before)", P),
    k("short_runs", "choice", "skip | measure", "free runs shorter than the goal in the cheap passes: stepped over (6.4 on), or measured like any other (before)", P),
    k("prealloc_table", "blocks", "kernel | sizes \"4 8 ... 2048\"", "window sizes (ldiskfs's table)", P),
    k("mb_small_req", "blocks", "0 ..", "with prealloc_table: requests below it use the locality group", P),
    k("mb_large_req", "blocks", "0 ..", "with prealloc_table: files from this size on stop using it", P),
    k("stream_placement", "choice", "per-file | kernel", "where appends of a stream go", P),
    k("concurrency", "choice", "scalable | legacy", "the 2025 sharded state or the locks before it", P),
    k("stream_goals", "goals", "1 .. | auto", "number of stream goals", P),
    k("locality_groups", "groups", "1 ..", "number of locality groups", P),
    k("inodes_per_group", "inodes", "1 ..", "inodes per group (a file's home group)", SH),
    k("flex_groups", "groups", "1 ..", "groups per flex group (1: no flex_bg)", SH),
    k("dirty_limit_blocks", "blocks", "0 .. | off", "dirty blocks that start background writeback", ST),
    k("commit_interval_ops", "operations", "0 .. (0: fsync/sync only)", "operations between journal commits", ST),
    k("writeback_request", "blocks", "1 .. | whole", "most blocks one writeback request maps", P),
    k("fallocate_request", "blocks", "1 .. | whole", "most blocks one fallocate request maps", P),
    k("inode_numbers", "choice", "sequential | lowest-free", "how new files are numbered", B),
    k("sync_order", "choice", "by-inode | dirtied", "the order sync writes files back in", B),
    k("close", "choice", "discard | ext4", "what the last close does", B),
    k("punch", "choice", "as-given | ext4", "what a punched hole covers and gives back", B),
    k("extent_tree", "choice", "outside | in-volume", "whether extent-tree blocks come from the allocator", ST),
];

/// The names a choice setting takes, each with its value: the one table
/// that reads a setting and prints it back.
const OPTIMIZE_SCAN: &[(&str, OptimizeScan)] =
    &[("0", OptimizeScan::Off), ("1", OptimizeScan::On), ("auto", OptimizeScan::Auto)];
const BEST_AVAIL_FLOOR: &[(&str, BestAvailFloor)] =
    &[("request", BestAvailFloor::Request), ("minimum", BestAvailFloor::Minimum)];
const LINEAR_BEST_AVAIL: &[(&str, LinearBestAvail)] =
    &[("skip", LinearBestAvail::Skip), ("repeat", LinearBestAvail::Repeat)];
const ORDER_LISTS: &[(&str, OrderLists)] = &[("by-group", OrderLists::ByGroup), ("linked", OrderLists::Linked)];
const SHORT_RUNS: &[(&str, ShortRuns)] = &[("skip", ShortRuns::Skip), ("measure", ShortRuns::Measure)];
const STREAM_PLACEMENT: &[(&str, StreamPlacement)] =
    &[("per-file", StreamPlacement::PerFile), ("kernel", StreamPlacement::Kernel)];
const CONCURRENCY: &[(&str, Concurrency)] = &[("scalable", Concurrency::Scalable), ("legacy", Concurrency::Legacy)];
const SYNC_ORDER: &[(&str, SyncOrder)] = &[("by-inode", SyncOrder::ByInode), ("dirtied", SyncOrder::Dirtied)];
const CLOSE: &[(&str, CloseBehaviour)] =
    &[("discard", CloseBehaviour::DiscardAtLastClose), ("ext4", CloseBehaviour::Ext4)];
const PUNCH: &[(&str, PunchBehaviour)] = &[
    ("as-given", PunchBehaviour::AsGiven),
    ("ext4", PunchBehaviour::Ext4),
    ("ext4-page-after-size", PunchBehaviour::Ext4PageAfterSize),
];
const EXTENT_TREE: &[(&str, ExtentTreeBlocks)] =
    &[("outside", ExtentTreeBlocks::Outside), ("in-volume", ExtentTreeBlocks::InVolume)];

/// The name of `v` in `table`.
fn name_of<T: PartialEq>(table: &[(&'static str, T)], v: &T) -> String {
    table.iter().find(|(_, x)| x == v).map(|(n, _)| (*n).to_string()).expect("every value has a name")
}

/// The value `value` names in `table`, or why it names none.
fn named<T: Copy>(table: &[(&str, T)], value: &str) -> Result<T, String> {
    table.iter().find(|(n, _)| *n == value).map(|(_, v)| *v).ok_or_else(|| {
        format!("{value:?} is not one of {}", table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "))
    })
}

/// The setting named `key`.
pub fn setting(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.key == key)
}

impl FsConfig {
    /// The value of setting `key`, written as [`FsConfig::set`] takes it
    /// (`None` for `profile`, which is not a value the configuration keeps,
    /// and for a name that is no setting).
    pub fn get(&self, key: &str) -> Option<String> {
        let cfg = self;
        let t = &cfg.placement.tunables;
        let request = |r: RequestSize| match r {
            RequestSize::WholeRun => "whole".to_string(),
            RequestSize::UpTo(n) => n.to_string(),
        };
        let table = || match &cfg.placement.normalization {
            Normalization::Table(t) => Some(t.clone()),
            Normalization::KernelWindows => None,
        };
        Some(match key {
            "profile" => return None,
            "mb_stats" => u8::from(t.mb_stats).to_string(),
            "mb_max_to_scan" => t.mb_max_to_scan.to_string(),
            "mb_min_to_scan" => t.mb_min_to_scan.to_string(),
            "mb_order2_req" => t.mb_order2_req.to_string(),
            "mb_stream_req" => t.mb_stream_req.to_string(),
            "mb_group_prealloc" => t.mb_group_prealloc.to_string(),
            "mb_max_linear_groups" => t.mb_max_linear_groups.to_string(),
            "stripe" => t.stripe.to_string(),
            "mb_best_avail_max_trim_order" => t.mb_best_avail_max_trim_order.to_string(),
            "mb_optimize_scan" => name_of(OPTIMIZE_SCAN, &t.mb_optimize_scan),
            "mb_c1_threshold" => t.mb_c1_threshold.to_string(),
            "mb_c2_threshold" => t.mb_c2_threshold.to_string(),
            "mb_c3_threshold" => t.mb_c3_threshold.to_string(),
            "mb_best_avail_floor" => name_of(BEST_AVAIL_FLOOR, &t.mb_best_avail_floor),
            "linear_best_avail" => name_of(LINEAR_BEST_AVAIL, &t.linear_best_avail),
            "order_lists" => name_of(ORDER_LISTS, &t.order_lists),
            "short_runs" => name_of(SHORT_RUNS, &t.short_runs),
            "prealloc_table" => table()
                .map_or("kernel".into(), |t| t.sizes().iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")),
            "mb_small_req" => table_reqs(&cfg.placement.normalization).0.to_string(),
            "mb_large_req" => table_reqs(&cfg.placement.normalization).1.to_string(),
            "stream_placement" => name_of(STREAM_PLACEMENT, &cfg.placement.stream_placement),
            "concurrency" => name_of(CONCURRENCY, &cfg.placement.concurrency),
            "stream_goals" => cfg.placement.stream_goals.map_or("auto".into(), |n| n.to_string()),
            "locality_groups" => cfg.placement.locality_groups.to_string(),
            "inodes_per_group" => cfg.shape.inodes_per_group.to_string(),
            "flex_groups" => cfg.shape.flex_groups.to_string(),
            "dirty_limit_blocks" => {
                if cfg.storage.dirty_limit_blocks == u64::MAX {
                    "off".into()
                } else {
                    cfg.storage.dirty_limit_blocks.to_string()
                }
            }
            "commit_interval_ops" => cfg.storage.commit_interval_ops.to_string(),
            "writeback_request" => request(cfg.placement.writeback_request),
            "fallocate_request" => request(cfg.placement.fallocate_request),
            "inode_numbers" => match cfg.behaviour.inode_numbers {
                InodeNumbers::Sequential { .. } => "sequential",
                InodeNumbers::LowestFree { .. } => "lowest-free",
            }
            .into(),
            "sync_order" => name_of(SYNC_ORDER, &cfg.behaviour.sync_order),
            "close" => name_of(CLOSE, &cfg.behaviour.close),
            "punch" => name_of(PUNCH, &cfg.behaviour.punch),
            "extent_tree" => name_of(EXTENT_TREE, &cfg.storage.extent_tree),
            _ => return None,
        })
    }

    /// Set `key` to `value` (`profile` = `default` | `kernel` |
    /// `kernel-MAJOR.MINOR` replaces
    /// every placement and behaviour choice with that profile's, keeping
    /// the shape). A name that is no setting, or a value out of its range,
    /// is [`FsError::Setting`] and changes nothing.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), FsError> {
        let mut next = self.clone();
        apply(&mut next, key, value).map_err(|why| FsError::Setting { key: key.to_string(), why })?;
        *self = next;
        Ok(())
    }

    /// Apply every `KEY=VALUE` of `settings` in order; the first that
    /// fails is the error, and nothing is changed.
    pub fn set_all<'a>(&mut self, settings: impl IntoIterator<Item = &'a str>) -> Result<(), FsError> {
        let mut next = self.clone();
        for s in settings {
            let (key, value) = s
                .split_once('=')
                .ok_or_else(|| FsError::Setting { key: s.to_string(), why: "a setting is KEY=VALUE".into() })?;
            next.set(key.trim(), value.trim())?;
        }
        *self = next;
        Ok(())
    }
}

fn apply(cfg: &mut FsConfig, key: &str, value: &str) -> Result<(), String> {
    let num = || value.parse::<u32>().map_err(|_| format!("{value:?} is not a whole number"));
    let num64 = || value.parse::<u64>().map_err(|_| format!("{value:?} is not a whole number"));
    let positive = || match num()? {
        0 => Err("must be at least 1".to_string()),
        n => Ok(n),
    };
    let flag = || match value {
        "1" | "on" | "true" => Ok(true),
        "0" | "off" | "false" => Ok(false),
        _ => Err(format!("{value:?} is not 0 or 1")),
    };
    let pick = |choices: &[&str]| {
        choices
            .iter()
            .position(|c| *c == value)
            .ok_or_else(|| format!("{value:?} is not one of {}", choices.join(", ")))
    };
    let request = || -> Result<RequestSize, String> {
        if value == "whole" {
            return Ok(RequestSize::WholeRun);
        }
        positive().map(RequestSize::UpTo)
    };
    let t = &mut cfg.placement.tunables;
    match key {
        "profile" => {
            let (geo, reserved) = (cfg.shape.geometry, std::mem::take(&mut cfg.shape.reserved));
            *cfg = match value.strip_prefix("kernel-") {
                Some(v) => FsConfig::kernel_of(geo, v.parse::<crate::KernelVersion>()?),
                None => match pick(&["default", "kernel"])? {
                    0 => FsConfig::new(geo),
                    _ => FsConfig::kernel(geo),
                },
            };
            cfg.shape.reserved = reserved;
        }
        "mb_stats" => t.mb_stats = flag()?,
        "mb_max_to_scan" => t.mb_max_to_scan = positive()?,
        "mb_min_to_scan" => t.mb_min_to_scan = num()?,
        "mb_order2_req" => t.mb_order2_req = num()?,
        "mb_stream_req" => t.mb_stream_req = num()?,
        "mb_group_prealloc" => t.mb_group_prealloc = num()?,
        "mb_max_linear_groups" => t.mb_max_linear_groups = num()?,
        "stripe" => t.stripe = num()?,
        "mb_best_avail_max_trim_order" => t.mb_best_avail_max_trim_order = num()?,
        "mb_optimize_scan" => t.mb_optimize_scan = named(OPTIMIZE_SCAN, value)?,
        "mb_c1_threshold" | "mb_c2_threshold" | "mb_c3_threshold" => {
            let v = num()?;
            if v > 100 {
                return Err("a percentage".into());
            }
            match key {
                "mb_c1_threshold" => t.mb_c1_threshold = v,
                "mb_c2_threshold" => t.mb_c2_threshold = v,
                _ => t.mb_c3_threshold = v,
            }
        }
        "mb_best_avail_floor" => t.mb_best_avail_floor = named(BEST_AVAIL_FLOOR, value)?,
        "linear_best_avail" => t.linear_best_avail = named(LINEAR_BEST_AVAIL, value)?,
        "order_lists" => t.order_lists = named(ORDER_LISTS, value)?,
        "short_runs" => t.short_runs = named(SHORT_RUNS, value)?,
        "prealloc_table" => {
            cfg.placement.normalization = if value == "kernel" {
                Normalization::KernelWindows
            } else {
                let sizes = value
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|w| !w.is_empty())
                    .map(|w| w.parse::<u32>().map_err(|_| format!("{w:?} is not a size in blocks")))
                    .collect::<Result<Vec<u32>, String>>()?;
                let (small, large) = table_reqs(&cfg.placement.normalization);
                Normalization::Table(PreallocTable::new(sizes, small, large).map_err(|e| e.to_string())?)
            }
        }
        "mb_small_req" | "mb_large_req" => {
            let v = num()?;
            // Without a table these would do nothing: setting one switches
            // to ldiskfs's table rather than silently measuring the
            // kernel's windows.
            let sizes = match &cfg.placement.normalization {
                Normalization::Table(t) => t.sizes().to_vec(),
                Normalization::KernelWindows => PreallocTable::lustre_default().sizes().to_vec(),
            };
            let (mut small, mut large) = table_reqs(&cfg.placement.normalization);
            if key == "mb_small_req" {
                small = v
            } else {
                large = v
            }
            cfg.placement.normalization =
                Normalization::Table(PreallocTable::new(sizes, small, large).map_err(|e| e.to_string())?);
        }
        "stream_placement" => cfg.placement.stream_placement = named(STREAM_PLACEMENT, value)?,
        "concurrency" => cfg.placement.concurrency = named(CONCURRENCY, value)?,
        "stream_goals" => cfg.placement.stream_goals = if value == "auto" { None } else { Some(positive()?) },
        "locality_groups" => cfg.placement.locality_groups = positive()? as usize,
        "inodes_per_group" => cfg.shape.inodes_per_group = positive()?,
        "flex_groups" => cfg.shape.flex_groups = positive()?,
        "dirty_limit_blocks" => cfg.storage.dirty_limit_blocks = if value == "off" { u64::MAX } else { num64()? },
        "commit_interval_ops" => cfg.storage.commit_interval_ops = num64()?,
        "writeback_request" => cfg.placement.writeback_request = request()?,
        "fallocate_request" => cfg.placement.fallocate_request = request()?,
        "inode_numbers" => {
            let first = crate::FIRST_INO;
            cfg.behaviour.inode_numbers = match pick(&["sequential", "lowest-free"])? {
                0 => InodeNumbers::Sequential { first },
                _ => InodeNumbers::LowestFree { first: first + 1 },
            }
        }
        "sync_order" => cfg.behaviour.sync_order = named(SYNC_ORDER, value)?,
        "close" => cfg.behaviour.close = named(CLOSE, value)?,
        "punch" => cfg.behaviour.punch = named(PUNCH, value)?,
        "extent_tree" => cfg.storage.extent_tree = named(EXTENT_TREE, value)?,
        other => return Err(format!("no setting {other:?}")),
    }
    Ok(())
}

/// The table's small and large request sizes (ldiskfs's defaults when
/// there is no table yet).
fn table_reqs(n: &Normalization) -> (u32, u32) {
    let t = match n {
        Normalization::Table(t) => t.clone(),
        Normalization::KernelWindows => PreallocTable::lustre_default(),
    };
    (t.small_req(), t.large_req())
}
