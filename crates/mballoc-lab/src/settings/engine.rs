//! The engine's keys: every setting of [`FsConfig`] (its own table,
//! [`mballoc_fs::SETTINGS`], applied and read back by [`FsConfig::set`]
//! and [`FsConfig::get`]), and the two the lab adds: `policy`, a
//! registered [`mballoc::Policy`] by name, and `delalloc`, how the lab
//! issues buffered writes.

use mballoc::Geometry;
use mballoc_fs::{FsConfig, Part, Setting, SETTINGS};

/// The keys the lab adds to the configuration's own.
const LAB_KEYS: &[Setting] = &[
    Setting {
        key: "policy",
        unit: "name",
        range: "kernel | a registered policy",
        about: "the decisions that differ from ext4's (mballoc::Policy)",
        part: Part::Placement,
    },
    Setting {
        key: "delalloc",
        unit: "flag",
        range: "1 | 0",
        about: "delayed allocation of buffered writes (0: each block at write time)",
        part: Part::Behaviour,
    },
];

/// Every engine key: the configuration's, then the lab's.
pub fn keys() -> impl Iterator<Item = &'static Setting> {
    SETTINGS.iter().chain(LAB_KEYS)
}

/// Whether `key` is an engine key.
pub fn is_key(key: &str) -> bool {
    keys().any(|k| k.key == key)
}

/// The value `key` has in `cfg`, written as the setting would take it.
/// `delalloc` is not part of the configuration: it is the lab's, 1 unless set.
pub fn value_of(cfg: &FsConfig, key: &str) -> Option<String> {
    match key {
        "policy" => Some(cfg.placement.policy.as_ref().map_or("kernel", |p| p.name()).to_string()),
        "delalloc" => Some("1".into()),
        _ => cfg.get(key),
    }
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

/// Apply `key=value` to `cfg`, or say why it cannot be. `profile=default`
/// keeps `cfg` as it is: a scenario's own configuration is the engine's
/// default profile.
pub fn apply_one(cfg: &mut FsConfig, key: &str, value: &str) -> Result<(), String> {
    match key {
        "profile" if value == "default" => Ok(()),
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
            };
            Ok(())
        }
        "delalloc" => match value {
            "1" | "on" | "true" | "0" | "off" | "false" => Ok(()),
            _ => Err(format!("{value:?} is not 0 or 1")),
        },
        _ => cfg.set(key, value).map_err(|e| match e {
            mballoc_fs::FsError::Setting { why, .. } if why.starts_with("no setting") => {
                format!("no engine setting {key:?}")
            }
            mballoc_fs::FsError::Setting { why, .. } => why,
            e => e.to_string(),
        }),
    }
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
            ("order_lists", "linked"),
            ("short_runs", "measure"),
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
        for key in keys().map(|k| k.key).filter(|k| *k != "profile") {
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

    #[test]
    fn a_bad_value_changes_nothing() {
        let geo = Geometry::new(4096, 1 << 18).unwrap();
        let mut cfg = FsConfig::new(geo);
        let before = cfg.get("mb_max_to_scan");
        assert!(apply_one(&mut cfg, "mb_max_to_scan", "0").is_err());
        assert!(apply_one(&mut cfg, "mb_max_to_scam", "5").unwrap_err().contains("no engine setting"));
        assert_eq!(cfg.get("mb_max_to_scan"), before);
    }
}
