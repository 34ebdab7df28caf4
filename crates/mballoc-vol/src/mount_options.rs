//! How a volume is mounted ([`MountOptions`]): access, the folio cache,
//! the commit interval, and the engine's settings by name. Every option
//! can be given as text (`commit=5`, `profile=kernel`), which is how the
//! mount helper, Python and C pass them: one parser, one set of names.

use crate::error::{Result, VolError};
use mballoc_fs::Part;
use std::time::Duration;

/// Read-write or read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    /// Reads and writes (the default).
    #[default]
    ReadWrite,
    /// Nothing is ever written; mutating calls fail with `ReadOnly`.
    ReadOnly,
    /// Read-only beside a writer (a backup, an inspector): no claim on
    /// the device, so a read-write mount, in this process or another
    /// (with [`crate::OpenMode::Snapshot`]), may run at the same time. The
    /// open sees the state committed when it finished reading: a
    /// checkpoint that ran meanwhile makes it read again (and, if the
    /// writer keeps checkpointing, fail with `Busy`).
    /// [`crate::Volume::snapshot_is_current`] says whether the writer has
    /// committed since; file data the writer overwrites in place shows
    /// at once, as it would to any reader of a live file system.
    Snapshot,
}

impl Access {
    /// Whether this mount writes.
    pub fn writes(self) -> bool {
        self == Access::ReadWrite
    }
}

/// How a volume is mounted.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Read-write or read-only.
    pub access: Access,
    /// Bytes per cache folio: a power of two from the block size to 2 MiB.
    pub folio_size: u32,
    /// Cached bytes (clean and dirty) before clean folios are dropped.
    pub cache_bytes: u64,
    /// Dirty bytes before a writer writes back.
    pub dirty_bytes: u64,
    /// Buffered writes of whole blocks at least this long go straight to
    /// their blocks, allocated as writeback would allocate them, without
    /// a copy through the cache; 0: every buffered write is cached. The
    /// mount streams from 256 KiB; the library caches every write unless
    /// told.
    pub write_through_bytes: u64,
    /// Engine operations between journal commits; 0 commits only on
    /// fsync, sync, unmount and the commit interval.
    pub commit_interval_ops: u64,
    /// The longest time written data and changed names stay volatile
    /// without an fsync: a thread syncs the volume every half interval
    /// (ext4's `commit=`, 5 s by default). Zero: only fsync, sync and
    /// unmount make changes durable.
    pub commit: std::time::Duration,
    /// The engine's settings, `KEY=VALUE` in order (see
    /// [`MountOptions::set`]): applied when the volume opens, before
    /// [`crate::Volume::open_with`]'s closure.
    pub settings: Vec<String>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            access: Access::ReadWrite,
            folio_size: 2 << 20,
            cache_bytes: 512 << 20,
            dirty_bytes: 128 << 20,
            write_through_bytes: 0,
            commit_interval_ops: 1000,
            commit: std::time::Duration::from_secs(5),
            settings: Vec::new(),
        }
    }
}

impl MountOptions {
    /// Set one option by name, as text: `access` (`rw`, `ro`,
    /// `snapshot`), `folio_size`, `cache_bytes`, `dirty_bytes`, `write_through_bytes` (bytes),
    /// `commit` (seconds, fractions allowed), `commit_interval_ops`, or
    /// any engine setting of [`mballoc_fs::SETTINGS`] that a mount may
    /// choose (`profile`, the allocator's tunables, placement and
    /// behaviour; the shape and storage ones are the volume's own), which
    /// is checked now and applied when the volume opens, in order. A bad
    /// name or value is [`VolError::InvalidArgument`] and changes nothing.
    ///
    /// ```
    /// let mut o = mballoc_vol::MountOptions::default();
    /// o.set("commit", "0.5")?;
    /// o.set("profile", "kernel")?;
    /// o.set("mb_max_to_scan", "50")?;
    /// assert!(o.set("inodes_per_group", "64").is_err()); // the format's
    /// assert_eq!(o.commit, std::time::Duration::from_millis(500));
    /// assert_eq!(o.settings, ["profile=kernel", "mb_max_to_scan=50"]);
    /// # Ok::<(), mballoc_vol::VolError>(())
    /// ```
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = |why: String| VolError::InvalidArgument(format!("option {key}={value}: {why}"));
        let bytes = || value.parse::<u64>().map_err(|_| bad("not a whole number of bytes".into()));
        match key {
            "access" => {
                self.access = match value {
                    "rw" => Access::ReadWrite,
                    "ro" => Access::ReadOnly,
                    "snapshot" => Access::Snapshot,
                    _ => return Err(bad("rw, ro or snapshot".into())),
                }
            }
            "folio_size" => {
                let n = bytes()?;
                if !n.is_power_of_two() || n > 2 << 20 {
                    return Err(bad("a power of two up to 2 MiB".into()));
                }
                self.folio_size = n as u32;
            }
            "cache_bytes" => self.cache_bytes = bytes()?,
            "dirty_bytes" => self.dirty_bytes = bytes()?,
            "write_through_bytes" => self.write_through_bytes = bytes()?,
            "commit_interval_ops" => self.commit_interval_ops = bytes()?,
            "commit" => {
                let secs = value.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e9);
                self.commit = Duration::from_secs_f64(secs.ok_or_else(|| bad("seconds, 0 or more".into()))?);
            }
            _ => {
                let s = mballoc_fs::setting(key).ok_or_else(|| {
                    bad("no such option (mount options: access, folio_size, cache_bytes, dirty_bytes, write_through_bytes, commit, \
                         commit_interval_ops; or an engine setting)"
                        .into())
                })?;
                if matches!(s.part, Part::Shape | Part::Storage) {
                    return Err(bad("the volume's own, fixed by its format and its storage".into()));
                }
                // Checked on a scratch configuration now, so a typo fails
                // here and not at open.
                let geo = mballoc::Geometry::new(4096, 1 << 20).expect("a valid scratch geometry");
                mballoc_fs::FsConfig::new(geo).set(key, value).map_err(|e| bad(e.to_string()))?;
                self.settings.push(format!("{key}={value}"));
            }
        }
        Ok(())
    }

    /// Set every `KEY=VALUE` of `options` (as [`MountOptions::set`]); the
    /// first that fails is the error.
    pub fn set_all<'a>(&mut self, options: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let mut next = self.clone();
        for o in options {
            let (k, v) = o
                .split_once('=')
                .ok_or_else(|| VolError::InvalidArgument(format!("option {o:?}: an option is KEY=VALUE")))?;
            next.set(k.trim(), v.trim())?;
        }
        *self = next;
        Ok(())
    }
}
