//! Settings a run lays over every scenario's own configuration: for the
//! engine its profile, any allocator tunable by its kernel name and any
//! file-layer setting (`engine.KEY=VALUE`); for a kernel file system its
//! mkfs options, mount options and, for ext4, any /sys/fs/ext4/DEV knob
//! (`ext4.mkfs=...`, `ext4.mount=...`, `ext4.KNOB=VALUE`).
//!
//! They come from a workload's `[engine]`, `[ext4]`, `[xfs]` and `[btrfs]`
//! tables and from `--set` on the command line (which wins). Every engine
//! setting is checked when it is parsed, by applying it to a scratch
//! configuration, so a typo is one error before anything runs.
//!
//! ```
//! use mballoc_lab::settings::Settings;
//! let mut s = Settings::default();
//! s.set_str("engine.mb_max_to_scan=50").unwrap();
//! s.set_str("ext4.mount=nodelalloc").unwrap();
//! assert!(s.set_str("engine.mb_max_to_scam=50").is_err());
//! let mut cfg = mballoc_fs::FsConfig::new(mballoc::Geometry::new(4096, 1 << 18).unwrap());
//! s.apply_engine(&mut cfg);
//! assert_eq!(cfg.tunables.mb_max_to_scan, 50);
//! assert_eq!(s.describe(), "engine.mb_max_to_scan=50, ext4.mount=nodelalloc");
//! ```

use crate::backend::WriteMode;
use crate::error::LabError;
use crate::mount::KernelFs;
use mballoc::{BestAvailFloor, Concurrency, Geometry, LinearBestAvail, OptimizeScan};
use mballoc_fs::{
    CloseBehaviour, ExtentTreeBlocks, FsConfig, InodeNumbers, Normalization, PreallocTable, RequestSize,
    StreamPlacement, SyncOrder,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// What a setting configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The engine (every engine row).
    Engine,
    /// A kernel file system (every row on it).
    Kernel(KernelFs),
}

impl Scope {
    /// The prefix on the command line and the table name in TOML.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Engine => "engine",
            Scope::Kernel(k) => k.name(),
        }
    }

    fn parse(s: &str) -> Option<Scope> {
        match s {
            "engine" => Some(Scope::Engine),
            "ext4" => Some(Scope::Kernel(KernelFs::Ext4)),
            "xfs" => Some(Scope::Kernel(KernelFs::Xfs)),
            "btrfs" => Some(Scope::Kernel(KernelFs::Btrfs)),
            _ => None,
        }
    }
}

/// One `scope.key=value`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// What it configures.
    pub scope: Scope,
    /// The key (a kernel tunable name, `profile`, `mount`, `mkfs`, ...).
    pub key: String,
    /// The value as written.
    pub value: String,
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}={}", self.scope.name(), self.key, self.value)
    }
}

/// A scalar in a workload's settings tables: TOML's strings, integers,
/// floats and booleans all read as the text the command line would give.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    /// `true` / `false` (read as 1 / 0).
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// Text.
    Text(String),
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{}", u8::from(*b)),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Text(s) => write!(f, "{s}"),
        }
    }
}

/// A settings table as a workload writes it (`[engine]`, `[ext4]`, ...).
pub type Table = BTreeMap<String, Scalar>;

/// The engine keys, with what each takes, for error messages and docs.
pub const ENGINE_KEYS: &[(&str, &str)] = &[
    ("profile", "default | kernel: the engine's own choices or ext4's (applied first)"),
    ("mb_stats", "0 | 1"),
    ("mb_max_to_scan", "extents measured before the best so far is taken"),
    ("mb_min_to_scan", "extents measured before a larger candidate is accepted"),
    ("mb_order2_req", "smallest order for the power-of-two pass"),
    ("mb_stream_req", "blocks from which a file uses per-file preallocation"),
    ("mb_group_prealloc", "locality-group window in blocks"),
    ("mb_max_linear_groups", "groups tried linearly before the index lookups"),
    ("mb_best_avail_max_trim_order", "orders CR_BEST_AVAIL_LEN may trim"),
    ("mb_optimize_scan", "0 | 1 | auto"),
    ("mb_c1_threshold", "percent free below which the power-of-two pass is skipped (0: off)"),
    ("mb_c2_threshold", "percent free below which CR_GOAL_LEN_FAST is skipped"),
    ("mb_c3_threshold", "percent free below which only CR_ANY_FREE runs"),
    ("mb_best_avail_floor", "request | minimum"),
    ("linear_best_avail", "skip | repeat"),
    ("prealloc_table", "kernel, or window sizes in blocks (\"4 8 16 ... 2048\", ldiskfs's table)"),
    ("mb_small_req", "with prealloc_table: requests below it use the locality group"),
    ("mb_large_req", "with prealloc_table: files from this size on stop using it"),
    ("stream_placement", "per-file | kernel"),
    ("concurrency", "scalable | legacy (the pre-2025 locks)"),
    ("stream_goals", "number of stream goals, or auto"),
    ("locality_groups", "number of locality groups"),
    ("inodes_per_group", "inodes per group (a file's home group)"),
    ("flex_groups", "groups per flex group (1: no flex_bg)"),
    ("dirty_limit_blocks", "dirty blocks that start background writeback, or off"),
    ("commit_interval_ops", "operations between journal commits (0: only on fsync)"),
    ("writeback_request", "whole | most blocks one writeback request maps"),
    ("fallocate_request", "whole | most blocks one fallocate request maps"),
    ("inode_numbers", "sequential | lowest-free"),
    ("sync_order", "by-inode | dirtied"),
    ("close", "discard | ext4"),
    ("extent_tree", "outside | in-volume"),
    ("delalloc", "1 | 0: delayed allocation of buffered writes (the in-memory engine)"),
];

/// The kernel keys besides ext4's sysfs knobs.
pub const KERNEL_KEYS: &[(&str, &str)] = &[
    ("mkfs", "extra mkfs arguments, split at spaces (\"-O ^flex_bg\")"),
    ("mount", "extra mount options, as `mount -o` takes them (\"nodelalloc,commit=60\")"),
];

/// Settings laid over every scenario's own, in the order given (a later
/// setting of the same key replaces the earlier one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    list: Vec<Setting>,
}

impl Settings {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Every setting, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Setting> {
        self.list.iter()
    }

    /// Check and add `scope.key=value`.
    pub fn set_str(&mut self, assignment: &str) -> Result<(), LabError> {
        let s = parse_assignment(assignment)?;
        self.set(s);
        Ok(())
    }

    /// Check and add one setting.
    pub fn set_checked(&mut self, scope: Scope, key: &str, value: &str) -> Result<(), LabError> {
        let s = Setting { scope, key: key.trim().into(), value: value.trim().into() };
        check(&s)?;
        self.set(s);
        Ok(())
    }

    fn set(&mut self, s: Setting) {
        self.list.retain(|o| !(o.scope == s.scope && o.key == s.key));
        self.list.push(s);
    }

    /// Add every setting of `other`, replacing the same keys here.
    pub fn extend(&mut self, other: &Settings) {
        for s in &other.list {
            self.set(s.clone());
        }
    }

    /// Settings from a workload's tables.
    pub fn from_tables(tables: &[(Scope, &Table)]) -> Result<Settings, LabError> {
        let mut s = Settings::default();
        for (scope, table) in tables {
            for (k, v) in *table {
                s.set_checked(*scope, k, &v.to_string())?;
            }
        }
        Ok(s)
    }

    /// `engine.a=1, ext4.mount=x`: for report notes and labels.
    pub fn describe(&self) -> String {
        self.list.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    }

    /// The value set for `scope.key`.
    pub fn get(&self, scope: Scope, key: &str) -> Option<&str> {
        self.list.iter().find(|s| s.scope == scope && s.key == key).map(|s| s.value.as_str())
    }

    /// Apply every engine setting to `cfg`, the profile first. Settings
    /// were checked when added; one that the volume's geometry makes
    /// wrong (a window larger than a group) is refused later by the
    /// engine's own validation, as a typed error.
    pub fn apply_engine(&self, cfg: &mut FsConfig) {
        self.apply_profile(cfg);
        self.apply_keys(cfg);
    }

    /// The `engine.profile` setting alone: it replaces the whole
    /// configuration (but the reserved ranges), so it comes before
    /// anything else is changed.
    pub fn apply_profile(&self, cfg: &mut FsConfig) {
        if let Some(v) = self.get(Scope::Engine, "profile") {
            // Checked at parse time: cannot fail.
            let _ = apply_one(cfg, "profile", v);
        }
    }

    /// Every engine setting but the profile, in order.
    pub fn apply_keys(&self, cfg: &mut FsConfig) {
        for s in self.list.iter().filter(|s| s.scope == Scope::Engine && s.key != "profile") {
            // Checked at parse time against the same code: cannot fail on
            // the key or the value's form.
            let _ = apply_one(cfg, &s.key, &s.value);
        }
    }

    /// How the in-memory engine treats buffered writes, if set.
    pub fn write_mode(&self) -> Option<WriteMode> {
        self.get(Scope::Engine, "delalloc").map(|v| if v == "0" { WriteMode::NoDelalloc } else { WriteMode::Delalloc })
    }

    /// Extra mount options for `fs`.
    pub fn mount_options(&self, fs: KernelFs) -> Option<&str> {
        self.get(Scope::Kernel(fs), "mount")
    }

    /// Extra mkfs arguments for `fs`.
    pub fn mkfs_args(&self, fs: KernelFs) -> Vec<String> {
        self.get(Scope::Kernel(fs), "mkfs").map_or_else(Vec::new, |v| v.split_whitespace().map(String::from).collect())
    }

    /// ext4 sysfs knobs (`/sys/fs/ext4/DEV/NAME`), in order.
    pub fn knobs(&self, fs: KernelFs) -> Vec<(String, String)> {
        self.list
            .iter()
            .filter(|s| s.scope == Scope::Kernel(fs) && s.key != "mount" && s.key != "mkfs")
            .map(|s| (s.key.clone(), s.value.clone()))
            .collect()
    }
}

/// Check a sweep: `key` (`scope.name`) with each of `values`.
pub fn check_sweep(key: &str, values: &[String]) -> Result<(), LabError> {
    if values.is_empty() {
        return Err(LabError::Invalid(format!("sweep {key:?}: no values")));
    }
    for v in values {
        parse_assignment(&format!("{key}={v}"))?;
    }
    Ok(())
}

/// Parse `--sweep scope.key=v1,v2,...` into the key and its values, each
/// checked.
pub fn parse_sweep(arg: &str) -> Result<(String, Vec<String>), LabError> {
    let (key, values) = arg
        .split_once('=')
        .ok_or_else(|| LabError::Invalid(format!("sweep {arg:?}: not of the form scope.key=v1,v2,...")))?;
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
    check_sweep(key.trim(), &values)?;
    Ok((key.trim().to_string(), values))
}

/// Every combination of the sweeps' values (the first sweep varies
/// slowest), each as `(key, value)` pairs; one empty combination when
/// there are no sweeps.
pub fn combinations(sweeps: &[(String, Vec<String>)]) -> Vec<Vec<(String, String)>> {
    let mut out = vec![vec![]];
    for (key, values) in sweeps {
        out = out
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((key.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    out
}

/// Parse and check `scope.key=value`.
pub fn parse_assignment(assignment: &str) -> Result<Setting, LabError> {
    let bad = |why: String| LabError::Invalid(format!("setting {assignment:?}: {why}"));
    let (lhs, value) = assignment.split_once('=').ok_or_else(|| bad("not of the form scope.key=value".into()))?;
    let (scope, key) = lhs
        .trim()
        .split_once('.')
        .ok_or_else(|| bad("the key needs a scope: engine., ext4., xfs. or btrfs.".into()))?;
    let scope = Scope::parse(scope)
        .ok_or_else(|| bad(format!("unknown scope {scope:?}; choose engine, ext4, xfs or btrfs")))?;
    let s = Setting { scope, key: key.trim().into(), value: value.trim().into() };
    check(&s)?;
    Ok(s)
}

fn check(s: &Setting) -> Result<(), LabError> {
    let bad = |why: String| Err(LabError::Invalid(format!("setting {s}: {why}")));
    match s.scope {
        Scope::Engine => {
            if !ENGINE_KEYS.iter().any(|(k, _)| *k == s.key) {
                let keys: Vec<&str> = ENGINE_KEYS.iter().map(|(k, _)| *k).collect();
                return bad(format!("no engine setting {:?}; the engine's are {}", s.key, keys.join(", ")));
            }
            let geo = Geometry::new(4096, 1 << 20).expect("a valid scratch geometry");
            let mut cfg = FsConfig::new(geo);
            match apply_one(&mut cfg, &s.key, &s.value) {
                Ok(()) => Ok(()),
                Err(why) => bad(why),
            }
        }
        Scope::Kernel(fs) => {
            if s.key == "mount" || s.key == "mkfs" {
                return Ok(());
            }
            if fs != KernelFs::Ext4 {
                return bad(format!("{} takes only mkfs and mount", fs.name()));
            }
            // A sysfs file name: anything else could walk out of the
            // device's directory.
            if s.key.is_empty() || !s.key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
                return bad("not an ext4 knob name (lower case, digits and _)".into());
            }
            if s.value.contains('\n') {
                return bad("a knob value is one line".into());
            }
            Ok(())
        }
    }
}

fn apply_one(cfg: &mut FsConfig, key: &str, value: &str) -> Result<(), String> {
    let num = || value.parse::<u32>().map_err(|_| format!("{value:?} is not a whole number"));
    let num64 = || value.parse::<u64>().map_err(|_| format!("{value:?} is not a whole number"));
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
        match num()? {
            0 => Err("a request maps at least one block".into()),
            n => Ok(RequestSize::UpTo(n)),
        }
    };
    let t = &mut cfg.tunables;
    match key {
        "profile" => {
            if pick(&["default", "kernel"])? == 1 {
                let (geo, reserved) = (cfg.geometry, std::mem::take(&mut cfg.reserved));
                *cfg = FsConfig::kernel(geo);
                cfg.reserved = reserved;
            }
        }
        "mb_stats" => t.mb_stats = flag()?,
        "mb_max_to_scan" => {
            t.mb_max_to_scan = num()?;
            if t.mb_max_to_scan == 0 {
                return Err("must be at least 1".into());
            }
        }
        "mb_min_to_scan" => t.mb_min_to_scan = num()?,
        "mb_order2_req" => t.mb_order2_req = num()?,
        "mb_stream_req" => t.mb_stream_req = num()?,
        "mb_group_prealloc" => t.mb_group_prealloc = num()?,
        "mb_max_linear_groups" => t.mb_max_linear_groups = num()?,
        "mb_best_avail_max_trim_order" => t.mb_best_avail_max_trim_order = num()?,
        "mb_optimize_scan" => {
            t.mb_optimize_scan = [OptimizeScan::Off, OptimizeScan::On, OptimizeScan::Auto][pick(&["0", "1", "auto"])?]
        }
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
        "mb_best_avail_floor" => {
            t.mb_best_avail_floor = [BestAvailFloor::Request, BestAvailFloor::Minimum][pick(&["request", "minimum"])?]
        }
        "linear_best_avail" => {
            t.linear_best_avail = [LinearBestAvail::Skip, LinearBestAvail::Repeat][pick(&["skip", "repeat"])?]
        }
        "prealloc_table" => {
            cfg.normalization = if value == "kernel" {
                Normalization::KernelWindows
            } else {
                let sizes = value
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|w| !w.is_empty())
                    .map(|w| w.parse::<u32>().map_err(|_| format!("{w:?} is not a size in blocks")))
                    .collect::<Result<Vec<u32>, String>>()?;
                let (small, large) = table_reqs(&cfg.normalization);
                Normalization::Table(PreallocTable::new(sizes, small, large).map_err(|e| e.to_string())?)
            }
        }
        "mb_small_req" | "mb_large_req" => {
            let v = num()?;
            let Normalization::Table(table) = &cfg.normalization else {
                // Without a table these do nothing; say so rather than
                // silently measuring the kernel's windows.
                return set_table_req(cfg, key, v);
            };
            let (mut small, mut large) = table_reqs(&cfg.normalization);
            if key == "mb_small_req" {
                small = v
            } else {
                large = v
            }
            cfg.normalization = Normalization::Table(
                PreallocTable::new(table.sizes().to_vec(), small, large).map_err(|e| e.to_string())?,
            );
        }
        "stream_placement" => {
            cfg.stream_placement = [StreamPlacement::PerFile, StreamPlacement::Kernel][pick(&["per-file", "kernel"])?]
        }
        "concurrency" => cfg.concurrency = [Concurrency::Scalable, Concurrency::Legacy][pick(&["scalable", "legacy"])?],
        "stream_goals" => cfg.stream_goals = if value == "auto" { None } else { Some(num()?.max(1)) },
        "locality_groups" => cfg.locality_groups = (num()? as usize).max(1),
        "inodes_per_group" => cfg.inodes_per_group = num()?.max(1),
        "flex_groups" => cfg.flex_groups = num()?.max(1),
        "dirty_limit_blocks" => cfg.dirty_limit_blocks = if value == "off" { u64::MAX } else { num64()? },
        "commit_interval_ops" => cfg.commit_interval_ops = num64()?,
        "writeback_request" => cfg.writeback_request = request()?,
        "fallocate_request" => cfg.fallocate_request = request()?,
        "inode_numbers" => {
            let first = mballoc_fs::FIRST_INO;
            cfg.inode_numbers = match pick(&["sequential", "lowest-free"])? {
                0 => InodeNumbers::Sequential { first },
                _ => InodeNumbers::LowestFree { first: first + 1 },
            }
        }
        "sync_order" => cfg.sync_order = [SyncOrder::ByInode, SyncOrder::Dirtied][pick(&["by-inode", "dirtied"])?],
        "close" => cfg.close = [CloseBehaviour::DiscardAtLastClose, CloseBehaviour::Ext4][pick(&["discard", "ext4"])?],
        "extent_tree" => {
            cfg.extent_tree = [ExtentTreeBlocks::Outside, ExtentTreeBlocks::InVolume][pick(&["outside", "in-volume"])?]
        }
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

fn set_table_req(cfg: &mut FsConfig, key: &str, v: u32) -> Result<(), String> {
    // mb_small_req and mb_large_req belong to ldiskfs's table: setting one
    // switches to the table with its default sizes.
    let d = PreallocTable::lustre_default();
    let (small, large) = if key == "mb_small_req" { (v, d.large_req()) } else { (d.small_req(), v) };
    cfg.normalization =
        Normalization::Table(PreallocTable::new(d.sizes().to_vec(), small, large).map_err(|e| e.to_string())?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> FsConfig {
        FsConfig::new(Geometry::new(4096, 1 << 18).unwrap())
    }

    #[test]
    fn every_engine_key_takes_a_sample_value() {
        let samples = [
            ("profile", "kernel"),
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
            ("extent_tree", "in-volume"),
            ("delalloc", "0"),
        ];
        for (k, _) in ENGINE_KEYS {
            let v = samples.iter().find(|s| s.0 == *k).map_or("7", |s| s.1);
            let mut s = Settings::default();
            s.set_checked(Scope::Engine, k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
            s.apply_engine(&mut cfg());
        }
    }

    #[test]
    fn settings_change_the_configuration() {
        let mut s = Settings::default();
        for a in [
            "engine.mb_optimize_scan=0",
            "engine.profile=kernel",
            "engine.prealloc_table=8,16,32",
            "engine.mb_small_req=64",
            "engine.stream_placement=per-file",
        ] {
            s.set_str(a).unwrap();
        }
        let mut c = cfg();
        s.apply_engine(&mut c);
        // The profile comes first, whatever the order given.
        assert_eq!(c.tunables.mb_optimize_scan, OptimizeScan::Off);
        assert_eq!(c.stream_placement, StreamPlacement::PerFile);
        assert_eq!(c.sync_order, SyncOrder::Dirtied);
        let Normalization::Table(t) = &c.normalization else { panic!("no table") };
        assert_eq!((t.sizes(), t.small_req()), (&[8, 16, 32][..], 64));
        assert_eq!(s.write_mode(), None);
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        for bad in [
            "mb_max_to_scan=5",
            "engine.mb_max_to_scan",
            "zfs.recordsize=1M",
            "engine.nonsense=1",
            "engine.mb_max_to_scan=many",
            "engine.mb_max_to_scan=0",
            "engine.mb_optimize_scan=2",
            "engine.prealloc_table=8 4",
            "engine.mb_c1_threshold=101",
            "xfs.mb_stats=1",
            "ext4.../../etc=1",
        ] {
            let e = Settings::default().set_str(bad).unwrap_err().to_string();
            assert!(e.contains("setting"), "{bad}: {e}");
        }
    }

    #[test]
    fn sweeps_parse_and_combine() {
        let a = parse_sweep("engine.mb_max_to_scan=50,200").unwrap();
        let b = parse_sweep("ext4.mount=delalloc, nodelalloc").unwrap();
        assert!(parse_sweep("engine.mb_max_to_scan=50,zero").is_err());
        assert!(parse_sweep("engine.mb_max_to_scan=").is_err());
        let c = combinations(&[a, b]);
        assert_eq!(c.len(), 4);
        assert_eq!(c[1], [("engine.mb_max_to_scan".into(), "50".into()), ("ext4.mount".into(), "nodelalloc".into())]);
        assert_eq!(combinations(&[]), [Vec::<(String, String)>::new()]);
    }

    #[test]
    fn kernel_settings_split_into_mkfs_mount_and_knobs() {
        let mut s = Settings::default();
        s.set_str("ext4.mkfs=-O ^flex_bg -E stride=4").unwrap();
        s.set_str("ext4.mount=nodelalloc").unwrap();
        s.set_str("ext4.mb_max_to_scan=50").unwrap();
        s.set_str("ext4.mount=noatime").unwrap();
        assert_eq!(s.mkfs_args(KernelFs::Ext4), ["-O", "^flex_bg", "-E", "stride=4"]);
        assert_eq!(s.mount_options(KernelFs::Ext4), Some("noatime"));
        assert_eq!(s.knobs(KernelFs::Ext4), [("mb_max_to_scan".to_string(), "50".to_string())]);
        assert!(s.mkfs_args(KernelFs::Xfs).is_empty());
    }
}
