//! Settings a run lays over every scenario's own configuration: for the
//! engine its profile, any allocator tunable by its kernel name and any
//! file-layer setting (`engine.KEY=VALUE`, [`engine`]); for a kernel file
//! system its mkfs options, mount options and, for ext4, the
//! /sys/fs/ext4/DEV knobs ([`kernel`]); for every backend, how the
//! workload's streams are issued (`workload.interleave=...`).
//!
//! They come from a workload's `[engine]`, `[ext4]`, `[xfs]` and `[btrfs]`
//! tables and from `--set` on the command line (which wins). Every
//! setting is checked when it is parsed (an engine key by applying it to a
//! scratch configuration, an ext4 knob against its range), so a typo is
//! one error before anything runs; [`kernel::preflight`] then has the
//! kernel check the kernel settings once, before any scenario's mkfs.
//! Sweeps ([`sweep`]) run a key at several values, scoped to the backends
//! the key configures.
//!
//! ```
//! use mballoc_lab::settings::Settings;
//! let mut s = Settings::default();
//! s.set_str("engine.mb_max_to_scan=50").unwrap();
//! s.set_str("ext4.mount=nodelalloc").unwrap();
//! assert!(s.set_str("engine.mb_max_to_scam=50").is_err());
//! let mut cfg = mballoc_fs::FsConfig::new(mballoc::Geometry::new(4096, 1 << 18).unwrap());
//! s.apply_engine(&mut cfg);
//! assert_eq!(cfg.placement.tunables.mb_max_to_scan, 50);
//! assert_eq!(s.describe(), "engine.mb_max_to_scan=50, ext4.mount=nodelalloc");
//! ```

pub mod engine;
pub mod kernel;
pub mod sweep;

pub use kernel::KERNEL_KEYS;
pub use sweep::{combinations, parse_sweep, SweepMode};

use crate::backend::WriteMode;
use crate::error::LabError;
use crate::loop_mount::KernelFs;
use crate::workload::ops::Interleave;
use mballoc::Geometry;
use mballoc_fs::FsConfig;
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
    /// What every backend runs (`workload.interleave`).
    Workload,
}

impl Scope {
    /// The prefix on the command line and the table name in TOML.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Engine => "engine",
            Scope::Kernel(k) => k.name(),
            Scope::Workload => "workload",
        }
    }

    fn parse(s: &str) -> Option<Scope> {
        match s {
            "engine" => Some(Scope::Engine),
            "ext4" => Some(Scope::Kernel(KernelFs::Ext4)),
            "xfs" => Some(Scope::Kernel(KernelFs::Xfs)),
            "btrfs" => Some(Scope::Kernel(KernelFs::Btrfs)),
            "workload" => Some(Scope::Workload),
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

/// The keys of the `workload.` scope.
pub const WORKLOAD_KEYS: &[(&str, &str, &str)] = &[(
    "interleave",
    "threads | pinned-threads | in-turn",
    "how the streams are issued: a thread each, a thread each bound to a CPU, or one op of each in turn on one thread (deterministic)",
)];

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

    /// Settings from `--set` assignments, each checked, later ones over
    /// earlier ones.
    pub fn from_assignments(assignments: &[String]) -> Result<Settings, LabError> {
        let mut s = Settings::default();
        for a in assignments {
            s.set_str(a)?;
        }
        Ok(s)
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
            let _ = engine::apply_one(cfg, "profile", v);
        }
    }

    /// Every engine setting but the profile, in order.
    pub fn apply_keys(&self, cfg: &mut FsConfig) {
        for s in self.list.iter().filter(|s| s.scope == Scope::Engine && s.key != "profile") {
            // Checked at parse time against the same code: cannot fail on
            // the key or the value's form.
            let _ = engine::apply_one(cfg, &s.key, &s.value);
        }
    }

    /// How the in-memory engine treats buffered writes, if set.
    pub fn write_mode(&self) -> Option<WriteMode> {
        self.get(Scope::Engine, "delalloc").map(|v| if v == "0" { WriteMode::NoDelalloc } else { WriteMode::Delalloc })
    }

    /// How the workload's streams are issued, if set.
    pub fn interleave(&self) -> Option<Interleave> {
        self.get(Scope::Workload, "interleave").and_then(parse_interleave)
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

/// Parse and check `scope.key=value`.
pub fn parse_assignment(assignment: &str) -> Result<Setting, LabError> {
    let bad = |why: String| LabError::Invalid(format!("setting {assignment:?}: {why}"));
    let (lhs, value) = assignment.split_once('=').ok_or_else(|| bad("not of the form scope.key=value".into()))?;
    let (scope, key) = lhs
        .trim()
        .split_once('.')
        .ok_or_else(|| bad("the key needs a scope: engine., ext4., xfs., btrfs. or workload.".into()))?;
    let scope = Scope::parse(scope)
        .ok_or_else(|| bad(format!("unknown scope {scope:?}; choose engine, ext4, xfs, btrfs or workload")))?;
    let s = Setting { scope, key: key.trim().into(), value: value.trim().into() };
    check(&s)?;
    Ok(s)
}

fn check(s: &Setting) -> Result<(), LabError> {
    let bad = |why: String| Err(LabError::Invalid(format!("setting {s}: {why}")));
    match s.scope {
        Scope::Engine => {
            if !engine::is_key(&s.key) {
                let keys: Vec<&str> = engine::keys().map(|k| k.key).collect();
                return bad(format!("no engine setting {:?}; the engine's are {}", s.key, keys.join(", ")));
            }
            let geo = Geometry::new(4096, 1 << 20).expect("a valid scratch geometry");
            let mut cfg = FsConfig::new(geo);
            match engine::apply_one(&mut cfg, &s.key, &s.value) {
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
            match kernel::check_ext4_knob(&s.key, &s.value) {
                Ok(()) => Ok(()),
                Err(why) => bad(why),
            }
        }
        Scope::Workload => match s.key.as_str() {
            "interleave" => match parse_interleave(&s.value) {
                Some(_) => Ok(()),
                None => bad(format!("{:?} is not one of threads, pinned-threads, in-turn", s.value)),
            },
            k => bad(format!("no workload setting {k:?}; the only one is interleave")),
        },
    }
}

fn parse_interleave(v: &str) -> Option<Interleave> {
    match v {
        "threads" => Some(Interleave::Threads),
        "pinned-threads" => Some(Interleave::PinnedThreads),
        "in-turn" => Some(Interleave::InTurn),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mballoc::OptimizeScan;
    use mballoc_fs::{Normalization, StreamPlacement, SyncOrder};

    fn cfg() -> FsConfig {
        FsConfig::new(Geometry::new(4096, 1 << 18).unwrap())
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
        assert_eq!(c.placement.tunables.mb_optimize_scan, OptimizeScan::Off);
        assert_eq!(c.placement.stream_placement, StreamPlacement::PerFile);
        assert_eq!(c.behaviour.sync_order, SyncOrder::Dirtied);
        let Normalization::Table(t) = &c.placement.normalization else { panic!("no table") };
        assert_eq!((t.sizes(), t.small_req()), (&[8, 16, 32][..], 64));
        assert_eq!(s.write_mode(), None);
        s.set_str("workload.interleave=in-turn").unwrap();
        assert_eq!(s.interleave(), Some(Interleave::InTurn));
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
            "ext4.mb_max_to_scam=50",
            "ext4.mb_stats=2",
            "workload.interleave=sideways",
            "workload.jobs=3",
        ] {
            let e = Settings::default().set_str(bad).unwrap_err().to_string();
            assert!(e.contains("setting"), "{bad}: {e}");
        }
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
