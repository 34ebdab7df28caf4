//! A fidelity case's ext4 configuration: the mkfs arguments, mount options
//! and /sys/fs/ext4 knobs it runs the kernel with, and how the engine's
//! kernel profile follows each. What the profile follows is listed here,
//! setting by setting; anything else is refused with the reason before
//! either side runs, never compared as if it were the default.
//!
//! Followed: mkfs's group, flex-group, inode and reserve sizes and
//! `-O ^flex_bg` (the engine loads the image mkfs made, so it has them);
//! `-O bigalloc` and `-C` (the engine's blocks are the image's clusters,
//! `FsConfig::cluster_bits`);
//! `-O ^has_journal` (freed blocks reusable at once, `FreeReuse::AtOnce`);
//! `-E stride,stripe_width` and `stripe=` (`Tunables::stripe`; not on
//! 1 KiB blocks, whose block 0 is not the allocator's); `-E hash_seed=`
//! (the engine reads the directory hash seed from the image);
//! `nodelalloc` (each block of a write its own request, as
//! `Fs::write_through`), `nodioread_nolock` (`FsConfig::dioread`: blocks
//! mapped initialized, writes into unwritten extents converted at
//! writeback, `extent_max_zeroout_kb` around each write; not with
//! `nodelalloc` nor bigalloc), `mb_optimize_scan=`, and options that move no
//! block (`noatime`, `nobarrier`, ...); the allocator's knobs by their
//! names, which are the engine's. The bitmap prefetch knobs are accepted:
//! a case reads `mb_groups` first, which builds every buddy, so prefetch
//! has nothing left to decide.

use crate::backend::WriteMode;
use crate::error::LabError;
use crate::loop_mount::KernelFs;
use crate::settings::{Scope, Settings};
use mballoc_fs::FsConfig;

/// The kernel configuration of a case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ext4Config {
    /// Extra mkfs.ext4 arguments.
    pub mkfs: Vec<String>,
    /// Extra mount options (besides the case's `commit=600` when the
    /// volume has a journal).
    pub mount: Vec<String>,
    /// /sys/fs/ext4/DEV knobs, set after mounting.
    pub knobs: Vec<(String, String)>,
}

/// mkfs arguments that take a value and that the engine follows by
/// loading the image.
const MKFS_WITH_VALUE: &[(&str, &str)] = &[
    ("-g", "blocks per group"),
    ("-G", "groups per flex group"),
    ("-N", "inodes"),
    ("-i", "bytes per inode"),
    ("-I", "inode size"),
    ("-m", "reserved blocks percentage"),
    ("-C", "cluster size"),
    // The journal's size moves metadata only; the engine loads the image
    // as mkfs laid it out.
    ("-J", "journal options"),
];

/// mkfs's arguments with an option's value given attached (`-O^flex_bg`,
/// `-g8000`) split from it, as mkfs itself reads them.
fn split_attached(args: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        let takes_value = a.len() > 2
            && a.starts_with('-')
            && !a.starts_with("--")
            && (MKFS_WITH_VALUE.iter().any(|(f, _)| a.starts_with(f))
                || ["-O", "-E", "-b"].iter().any(|f| a.starts_with(f)));
        if takes_value {
            out.push(a[..2].to_string());
            out.push(a[2..].to_string());
        } else {
            out.push(a);
        }
    }
    out
}

/// Mount options that move no block.
const MOUNT_NEUTRAL: &[&str] = &[
    "noatime",
    "relatime",
    "strictatime",
    "nodiratime",
    "barrier",
    "nobarrier",
    "delalloc",
    "data=ordered",
    "dioread_nolock",
    "auto_da_alloc",
];

/// Why the profile cannot follow a mount option, for those known.
fn mount_refusal(opt: &str) -> Option<&'static str> {
    let name = opt.split_once('=').map_or(opt, |(k, _)| k);
    Some(match name {
        "commit" => "the case mounts with commit=600 so no timer fires mid-case; another interval would let the journal timer decide",
        "stripe" => "stripe= takes a number of blocks",
        "data" => "data=journal and data=writeback change when blocks are mapped; not modelled",
        "noauto_da_alloc" => "close after truncate follows auto_da_alloc only",
        "discard" | "nodiscard" => "discard changes when freed blocks come back; not modelled",
        "journal_async_commit" | "journal_checksum" => "journal modes are not modelled",
        _ => return None,
    })
}

impl Ext4Config {
    /// The `ext4.` settings of `s` (mkfs, mount and knobs).
    pub fn from_settings(s: &Settings) -> Ext4Config {
        let fs = KernelFs::Ext4;
        Ext4Config {
            mkfs: split_attached(s.mkfs_args(fs)),
            mount: s.mount_options(fs).map_or_else(Vec::new, |m| {
                m.split(',').map(str::trim).filter(|o| !o.is_empty()).map(String::from).collect()
            }),
            knobs: s.knobs(fs),
        }
    }

    /// Refuse what the kernel profile cannot follow, naming the setting
    /// and why; also engine settings, which would compare another profile.
    pub fn check(&self, settings: &Settings) -> Result<(), LabError> {
        let no = |what: String, why: &str| {
            Err(LabError::Invalid(format!("{what}: lab fidelity cannot compare this: {why}")))
        };
        if let Some(s) = settings.iter().find(|s| s.scope != Scope::Kernel(KernelFs::Ext4)) {
            return no(
                s.to_string(),
                "fidelity compares ext4 with the engine's kernel profile; only ext4.* settings apply",
            );
        }
        let mut args = self.mkfs.iter();
        while let Some(a) = args.next() {
            if MKFS_WITH_VALUE.iter().any(|(f, _)| f == a) {
                if args.next().is_none() {
                    return no(format!("ext4.mkfs={a}"), "needs a value");
                }
                continue;
            }
            match a.as_str() {
                "-O" => match args.next() {
                    Some(list) => {
                        for f in list.split(',') {
                            match f {
                                "^flex_bg" | "^has_journal" | "^orphan_file" | "bigalloc" => {}
                                f => return no(format!("ext4.mkfs=-O {f}"), "a feature the profile does not model"),
                            }
                        }
                    }
                    None => return no("ext4.mkfs=-O".into(), "needs a feature"),
                },
                "-E" => match args.next() {
                    Some(e)
                        if e.split(',').all(|x| {
                            [
                                "lazy_itable_init",
                                "lazy_journal_init",
                                "stride=",
                                "stripe_width=",
                                "stripe-width=",
                                "hash_seed=",
                            ]
                            .iter()
                            .any(|p| x.starts_with(p))
                        }) => {}
                    Some(e) => return no(format!("ext4.mkfs=-E {e}"), "an extended option the profile does not model"),
                    None => return no("ext4.mkfs=-E".into(), "needs options"),
                },
                "-b" => return no("ext4.mkfs=-b".into(), "the block size is the workload's `block_size`"),
                other => return no(format!("ext4.mkfs={other}"), "an mkfs argument the profile does not model"),
            }
        }
        let nodioread = self.mount.iter().any(|o| o == "nodioread_nolock");
        if nodioread && self.mount.iter().any(|o| o == "nodelalloc") {
            return no(
                "ext4.mount=nodioread_nolock,nodelalloc".into(),
                "without delayed allocation nor dioread_nolock ext4 maps written blocks at write time; not modelled",
            );
        }
        if nodioread && self.bigalloc() {
            return no("ext4.mount=nodioread_nolock".into(), "its conversions are not modelled on bigalloc clusters");
        }
        for o in &self.mount {
            if MOUNT_NEUTRAL.contains(&o.as_str())
                || o == "nodelalloc"
                || o == "nodioread_nolock"
                || o.starts_with("mb_optimize_scan=")
                || o.strip_prefix("stripe=").is_some_and(|v| v.parse::<u32>().is_ok())
            {
                continue;
            }
            return no(
                format!("ext4.mount={o}"),
                mount_refusal(o).unwrap_or("a mount option the profile does not model"),
            );
        }
        for (k, v) in &self.knobs {
            if matches!(k.as_str(), "mb_stats" | "mb_prefetch" | "mb_prefetch_limit") {
                continue;
            }
            // Read by writeback's conversions without dioread_nolock
            // (`FsConfig::dioread`); with it, only when a split finds no
            // room for a tree block, which no case reaches.
            if k == "extent_max_zeroout_kb" {
                if v.parse::<u32>().is_err() {
                    return no(format!("ext4.{k}={v}"), "takes a number of KiB");
                }
                continue;
            }
            let mut scratch = FsConfig::new(mballoc::Geometry::new(4096, 1 << 20).expect("a scratch geometry"));
            if !k.starts_with("mb_") || crate::settings::engine::apply_one(&mut scratch, k, v).is_err() {
                return no(format!("ext4.{k}={v}"), "a knob the profile has no counterpart for");
            }
        }
        Ok(())
    }

    /// Add `other`'s settings after these (a later mount option or knob of
    /// the same name wins where ext4 applies them in order).
    pub fn extend(&mut self, other: &Ext4Config) {
        self.mkfs.extend(other.mkfs.iter().cloned());
        self.mount.extend(other.mount.iter().cloned());
        for (k, v) in &other.knobs {
            self.knobs.retain(|(o, _)| o != k);
            self.knobs.push((k.clone(), v.clone()));
        }
    }

    /// The mount options of the kernel side.
    pub fn mount_options(&self) -> String {
        // No journal, no commit timer to hold off (and ext4 refuses the
        // option).
        let commit = (!self.without_journal()).then(|| "commit=600".to_string());
        commit.into_iter().chain(self.mount.iter().cloned()).collect::<Vec<_>>().join(",")
    }

    /// Make the engine's kernel profile follow the configuration (checked
    /// first); how it writes.
    pub fn apply_engine(&self, cfg: &mut FsConfig) -> WriteMode {
        for o in &self.mount {
            if let Some(v) = o.strip_prefix("mb_optimize_scan=") {
                let _ = crate::settings::engine::apply_one(cfg, "mb_optimize_scan", v);
            }
            if let Some(v) = o.strip_prefix("stripe=").and_then(|v| v.parse().ok()) {
                // Over the image's own stripe, as the mount option is.
                cfg.placement.tunables.stripe = v;
            }
        }
        for (k, v) in &self.knobs {
            if k.starts_with("mb_") && k != "mb_stats" {
                let _ = crate::settings::engine::apply_one(cfg, k, v);
            }
        }
        if self.without_journal() {
            cfg.storage.free_reuse = mballoc_fs::FreeReuse::AtOnce;
        }
        if self.mount.iter().any(|o| o == "nodioread_nolock") {
            // ext4's extent_max_zeroout_kb: 32 unless a knob sets it.
            let knob = self.knobs.iter().rev().find(|(k, _)| k == "extent_max_zeroout_kb");
            let max_zeroout_kb = knob.and_then(|(_, v)| v.parse().ok()).unwrap_or(32);
            cfg.behaviour.dioread = mballoc_fs::DioRead::Locked { max_zeroout_kb };
        }
        if self.mount.iter().any(|o| o == "nodelalloc") {
            WriteMode::NoDelalloc
        } else {
            WriteMode::Delalloc
        }
    }

    /// Whether mkfs made the volume with bigalloc.
    fn bigalloc(&self) -> bool {
        self.mkfs.windows(2).any(|w| w[0] == "-O" && w[1].split(',').any(|f| f == "bigalloc"))
    }

    /// Whether mkfs made the volume without a journal: freed blocks are
    /// reusable at once.
    fn without_journal(&self) -> bool {
        self.mkfs.windows(2).any(|w| w[0] == "-O" && w[1].split(',').any(|f| f == "^has_journal"))
    }

    /// One line for reports: what ran besides the defaults.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.mkfs.is_empty() {
            parts.push(format!("mkfs {}", self.mkfs.join(" ")));
        }
        if !self.mount.is_empty() {
            parts.push(format!("-o {}", self.mount.join(",")));
        }
        for (k, v) in &self.knobs {
            parts.push(format!("{k}={v}"));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(sets: &[&str]) -> (Ext4Config, Settings) {
        let mut s = Settings::default();
        for a in sets {
            s.set_str(a).unwrap();
        }
        (Ext4Config::from_settings(&s), s)
    }

    #[test]
    fn followed_settings_pass_and_others_are_refused_with_the_reason() {
        for ok in [
            &["ext4.mkfs=-O ^flex_bg -g 16384"][..],
            &["ext4.mkfs=-O ^has_journal,^flex_bg"],
            &["ext4.mkfs=-E stride=16,stripe_width=64", "ext4.mount=stripe=32"],
            &["ext4.mount=nodelalloc,noatime"],
            &["ext4.mb_max_to_scan=50", "ext4.mount=mb_optimize_scan=0"],
            &["ext4.mkfs=-O bigalloc -C 16384 -E stride=16,stripe_width=64"],
            &["ext4.mkfs=-E hash_seed=daf3bc57-6a09-4cc5-b947-bf69b5f8d293"],
            &["ext4.mkfs=-O^flex_bg -g8000"],
            &["ext4.mkfs=-J size=16"],
        ] {
            let (c, s) = config(ok);
            c.check(&s).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        for (bad, why) in [
            (&["ext4.mkfs=-O ^flex_bg,quota"][..], "feature"),
            (&["ext4.mkfs=-C"], "needs a value"),
            (&["ext4.mkfs=-E discard"], "extended option"),
            (&["ext4.mount=stripe=wide"], "number of blocks"),
            (&["ext4.mount=commit=5"], "timer"),
            (&["ext4.mount=nodioread_nolock,nodelalloc"], "write time"),
            (&["ext4.mkfs=-O bigalloc", "ext4.mount=nodioread_nolock"], "clusters"),
            (&["ext4.max_writeback_mb_bump=64"], "counterpart"),
            (&["engine.mb_max_to_scan=50"], "only ext4"),
        ] {
            let (c, s) = config(bad);
            let e = c.check(&s).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_engine_follows_what_is_followed() {
        let (c, _) = config(&["ext4.mount=nodelalloc,mb_optimize_scan=0", "ext4.mb_max_to_scan=50"]);
        let mut cfg = FsConfig::kernel(mballoc::Geometry::new(4096, 1 << 18).unwrap());
        assert_eq!(c.apply_engine(&mut cfg), WriteMode::NoDelalloc);
        assert_eq!(cfg.placement.tunables.mb_max_to_scan, 50);
        assert_eq!(cfg.placement.tunables.mb_optimize_scan, mballoc::OptimizeScan::Off);
        assert_eq!(c.mount_options(), "commit=600,nodelalloc,mb_optimize_scan=0");
        assert_eq!(cfg.storage.free_reuse, mballoc_fs::FreeReuse::AtCommit);
        let (c, _) = config(&["ext4.mkfs=-O ^has_journal"]);
        c.apply_engine(&mut cfg);
        assert_eq!(cfg.storage.free_reuse, mballoc_fs::FreeReuse::AtOnce);
        let (c, s) = config(&["ext4.mount=nodioread_nolock", "ext4.extent_max_zeroout_kb=64"]);
        c.check(&s).unwrap();
        c.apply_engine(&mut cfg);
        assert_eq!(cfg.behaviour.dioread, mballoc_fs::DioRead::Locked { max_zeroout_kb: 64 });
    }
}
