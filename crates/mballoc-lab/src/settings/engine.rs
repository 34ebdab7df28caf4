//! The engine's keys: what each takes, its unit and range, how it is
//! applied to a configuration and how it is read back from one (so the
//! defaults `lab settings` prints are the configuration's own, never a
//! second copy that could drift).

use mballoc::{BestAvailFloor, Concurrency, Geometry, LinearBestAvail, OptimizeScan};
use mballoc_fs::{
    CloseBehaviour, ExtentTreeBlocks, FsConfig, InodeNumbers, Normalization, PreallocTable, PunchBehaviour,
    RequestSize, StreamPlacement, SyncOrder,
};

/// One engine key as `lab settings` describes it.
#[derive(Debug, Clone, Copy)]
pub struct EngineKey {
    /// The key after `engine.`.
    pub key: &'static str,
    /// Its unit (blocks, extents, percent, ...) or `choice`.
    pub unit: &'static str,
    /// The values it takes.
    pub range: &'static str,
    /// What it changes.
    pub about: &'static str,
}

const fn k(key: &'static str, unit: &'static str, range: &'static str, about: &'static str) -> EngineKey {
    EngineKey { key, unit, range, about }
}

/// Every engine key.
pub const ENGINE_KEYS: &[EngineKey] = &[
    k("profile", "choice", "default | kernel", "the engine's own choices or ext4's (applied first)"),
    k("policy", "name", "kernel | a registered policy", "the decisions that differ from ext4's (mballoc::Policy)"),
    k("mb_stats", "flag", "0 | 1", "count what the allocator does"),
    k("mb_max_to_scan", "extents", "1 ..", "extents measured before the best so far is taken"),
    k("mb_min_to_scan", "extents", "0 ..", "extents measured before a larger candidate is accepted"),
    k("mb_order2_req", "order", "0 ..", "smallest order for the power-of-two pass"),
    k("mb_stream_req", "blocks", "0 ..", "file size from which a file uses its own preallocation"),
    k("mb_group_prealloc", "blocks", "0 .. (0: none)", "locality-group window"),
    k("mb_max_linear_groups", "groups", "0 ..", "groups tried linearly before the index lookups"),
    k("stripe", "blocks", "0 .. a group (0: none)", "RAID stripe: aligned goals, scans and trims (ext4's s_stripe)"),
    k("mb_best_avail_max_trim_order", "orders", "0 ..", "orders CR_BEST_AVAIL_LEN may trim"),
    k("mb_optimize_scan", "choice", "0 | 1 | auto", "index lookups instead of linear group scans"),
    k("mb_c1_threshold", "percent", "0 .. 100 (0: off)", "free space below which the power-of-two pass is skipped"),
    k("mb_c2_threshold", "percent", "0 .. 100", "free space below which CR_GOAL_LEN_FAST is skipped"),
    k("mb_c3_threshold", "percent", "0 .. 100", "free space below which only CR_ANY_FREE runs"),
    k("mb_best_avail_floor", "choice", "request | minimum", "how far CR_BEST_AVAIL_LEN may trim"),
    k("linear_best_avail", "choice", "skip | repeat", "whether the linear groups are scanned again at best-avail"),
    k("prealloc_table", "blocks", "kernel | sizes \"4 8 ... 2048\"", "window sizes (ldiskfs's table)"),
    k("mb_small_req", "blocks", "0 ..", "with prealloc_table: requests below it use the locality group"),
    k("mb_large_req", "blocks", "0 ..", "with prealloc_table: files from this size on stop using it"),
    k("stream_placement", "choice", "per-file | kernel", "where appends of a stream go"),
    k("concurrency", "choice", "scalable | legacy", "the 2025 sharded state or the locks before it"),
    k("stream_goals", "goals", "1 .. | auto", "number of stream goals"),
    k("locality_groups", "groups", "1 ..", "number of locality groups"),
    k("inodes_per_group", "inodes", "1 ..", "inodes per group (a file's home group)"),
    k("flex_groups", "groups", "1 ..", "groups per flex group (1: no flex_bg)"),
    k("dirty_limit_blocks", "blocks", "0 .. | off", "dirty blocks that start background writeback"),
    k("commit_interval_ops", "operations", "0 .. (0: fsync/sync only)", "operations between journal commits"),
    k("writeback_request", "blocks", "1 .. | whole", "most blocks one writeback request maps"),
    k("fallocate_request", "blocks", "1 .. | whole", "most blocks one fallocate request maps"),
    k("inode_numbers", "choice", "sequential | lowest-free", "how new files are numbered"),
    k("sync_order", "choice", "by-inode | dirtied", "the order sync writes files back in"),
    k("close", "choice", "discard | ext4", "what the last close does"),
    k("punch", "choice", "as-given | ext4", "what a punched hole covers and gives back"),
    k("extent_tree", "choice", "outside | in-volume", "whether extent-tree blocks come from the allocator"),
    k("delalloc", "flag", "1 | 0", "delayed allocation of buffered writes (0: each block at write time)"),
];

/// The names a choice setting takes, each with its value: the one table
/// that reads a setting and prints it back.
const OPTIMIZE_SCAN: &[(&str, OptimizeScan)] =
    &[("0", OptimizeScan::Off), ("1", OptimizeScan::On), ("auto", OptimizeScan::Auto)];
const BEST_AVAIL_FLOOR: &[(&str, BestAvailFloor)] =
    &[("request", BestAvailFloor::Request), ("minimum", BestAvailFloor::Minimum)];
const LINEAR_BEST_AVAIL: &[(&str, LinearBestAvail)] =
    &[("skip", LinearBestAvail::Skip), ("repeat", LinearBestAvail::Repeat)];
const STREAM_PLACEMENT: &[(&str, StreamPlacement)] =
    &[("per-file", StreamPlacement::PerFile), ("kernel", StreamPlacement::Kernel)];
const CONCURRENCY: &[(&str, Concurrency)] = &[("scalable", Concurrency::Scalable), ("legacy", Concurrency::Legacy)];
const SYNC_ORDER: &[(&str, SyncOrder)] = &[("by-inode", SyncOrder::ByInode), ("dirtied", SyncOrder::Dirtied)];
const CLOSE: &[(&str, CloseBehaviour)] =
    &[("discard", CloseBehaviour::DiscardAtLastClose), ("ext4", CloseBehaviour::Ext4)];
const PUNCH: &[(&str, PunchBehaviour)] = &[("as-given", PunchBehaviour::AsGiven), ("ext4", PunchBehaviour::Ext4)];
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

/// The value `key` has in `cfg`, written as the setting would take it.
/// `delalloc` is not part of the configuration: it is the lab's, 1 unless set.
pub fn value_of(cfg: &FsConfig, key: &str) -> Option<String> {
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
        "policy" => cfg.placement.policy.as_ref().map_or("kernel", |p| p.name()).to_string(),
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
        "prealloc_table" => {
            table().map_or("kernel".into(), |t| t.sizes().iter().map(ToString::to_string).collect::<Vec<_>>().join(" "))
        }
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
        "delalloc" => "1".into(),
        _ => return None,
    })
}

/// The defaults of `key` under the engine's own profile and under the
/// kernel profile, on a 4 GiB volume of 4 KiB blocks (the geometry only
/// moves `inodes_per_group` and `dirty_limit_blocks`).
pub fn defaults(key: &str) -> (String, String) {
    let geo = Geometry::new(4096, 1 << 20).expect("a valid geometry");
    let own = value_of(&FsConfig::new(geo), key).unwrap_or_else(|| "default".into());
    let kernel = value_of(&FsConfig::kernel(geo), key).unwrap_or_else(|| "kernel".into());
    (own, kernel)
}

/// Apply `key=value` to `cfg`, or say why it cannot be.
pub fn apply_one(cfg: &mut FsConfig, key: &str, value: &str) -> Result<(), String> {
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
            if pick(&["default", "kernel"])? == 1 {
                let (geo, reserved) = (cfg.shape.geometry, std::mem::take(&mut cfg.shape.reserved));
                *cfg = FsConfig::kernel(geo);
                cfg.shape.reserved = reserved;
            }
        }
        "policy" => {
            cfg.placement.policy = match crate::policies::find(value) {
                // ext4's own: no override at all.
                Some(_) if value == "kernel" => None,
                Some(p) => Some(p),
                None => {
                    return Err(format!(
                        "no policy {value:?}; registered: {} (a program registers its own)",
                        crate::policies::names().join(", ")
                    ))
                }
            }
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
            let first = mballoc_fs::FIRST_INO;
            cfg.behaviour.inode_numbers = match pick(&["sequential", "lowest-free"])? {
                0 => InodeNumbers::Sequential { first },
                _ => InodeNumbers::LowestFree { first: first + 1 },
            }
        }
        "sync_order" => cfg.behaviour.sync_order = named(SYNC_ORDER, value)?,
        "close" => cfg.behaviour.close = named(CLOSE, value)?,
        "punch" => cfg.behaviour.punch = named(PUNCH, value)?,
        "extent_tree" => cfg.storage.extent_tree = named(EXTENT_TREE, value)?,
        "delalloc" => {
            flag()?;
        }
        other => return Err(format!("no engine setting {other:?}")),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_reads_back_what_was_applied() {
        let samples = [
            ("mb_stats", "1"),
            ("mb_optimize_scan", "auto"),
            ("mb_best_avail_floor", "minimum"),
            ("linear_best_avail", "repeat"),
            ("prealloc_table", "4 8 16 32"),
            ("stream_placement", "kernel"),
            ("concurrency", "legacy"),
            ("stream_goals", "auto"),
            ("dirty_limit_blocks", "off"),
            ("writeback_request", "whole"),
            ("fallocate_request", "2048"),
            ("inode_numbers", "lowest-free"),
            ("sync_order", "dirtied"),
            ("close", "ext4"),
            ("punch", "ext4"),
            ("extent_tree", "in-volume"),
            ("delalloc", "1"),
            ("policy", "kernel"),
        ];
        let geo = Geometry::new(4096, 1 << 18).unwrap();
        for key in ENGINE_KEYS.iter().map(|k| k.key).filter(|k| *k != "profile") {
            let v = samples.iter().find(|s| s.0 == key).map_or("7", |s| s.1);
            let mut cfg = FsConfig::new(geo);
            apply_one(&mut cfg, key, v).unwrap_or_else(|e| panic!("{key}={v}: {e}"));
            assert_eq!(value_of(&cfg, key).as_deref(), Some(v), "{key}");
            let (own, kernel) = defaults(key);
            apply_one(&mut FsConfig::new(geo), key, &own).unwrap_or_else(|e| panic!("{key} default {own}: {e}"));
            apply_one(&mut FsConfig::new(geo), key, &kernel).unwrap_or_else(|e| panic!("{key} kernel {kernel}: {e}"));
        }
    }

    #[test]
    fn the_kernel_profile_differs_where_ext4_does() {
        assert_eq!(defaults("locality_groups").1, "1");
        assert_eq!(defaults("punch"), ("as-given".into(), "ext4".into()));
        assert_eq!(defaults("mb_max_to_scan").1, "200");
    }
}
