//! Mount options, by name as ext4 takes them where they mean the same
//! (`commit=`, `ro`, `noatime`), from the command line or from `-o` as
//! `mount(8)` and /etc/fstab pass them to a mount helper.

use anyhow::{bail, Context, Result};
use std::time::Duration;

/// The allocation policy a mount runs the engine with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// The engine's own defaults.
    #[default]
    Default,
    /// ext4's decisions (docs/PROFILES.md).
    Kernel,
}

impl Profile {
    /// The name `profile=` takes.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Kernel => "kernel",
        }
    }
}

/// When reads update access times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Atime {
    /// ext4's default: when the access time is not after the last change,
    /// or is a day old.
    #[default]
    Relatime = 0,
    /// Never.
    NoAtime = 1,
    /// On every read (`strictatime`).
    Strict = 2,
}

impl Atime {
    /// The mode stored as `n` (`self as u8`); anything else is relatime.
    pub fn from_u8(n: u8) -> Atime {
        match n {
            1 => Atime::NoAtime,
            2 => Atime::Strict,
            _ => Atime::Relatime,
        }
    }
}

/// How a volume is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountConfig {
    /// Bytes per cache folio (4 KiB to 2 MiB, a power of two).
    pub folio: u32,
    /// The allocation policy.
    pub profile: Profile,
    /// Threads serving requests.
    pub threads: usize,
    /// How long one serving thread keeps polling for the next request
    /// before it sleeps (`busy_poll=` microseconds, as Linux's
    /// `net.core.busy_poll`); zero: every thread sleeps at once.
    pub busy_poll: Duration,
    /// Take requests over io_uring where the kernel offers it (`uring`;
    /// Linux 6.14 on with the fuse module's `enable_uring` on), else
    /// through `/dev/fuse` alone.
    pub uring: bool,
    /// Answer large reads through a pipe the device's pages are spliced
    /// into (`splice`, the default; `nosplice` copies them through a
    /// buffer), over `/dev/fuse` (fuse/splice.rs).
    pub splice: bool,
    /// Longest time written data stays volatile without an fsync (ext4's
    /// `commit=`, default 5 s); zero: only fsync and unmount commit.
    pub commit: Duration,
    /// Mounted read-only.
    pub read_only: bool,
    /// Access-time updates.
    pub atime: Atime,
    /// Reach a volume file through a loop device and mount it as fuseblk
    /// (root only), so `sync(2)` and `syncfs(2)` reach the server.
    pub loop_device: bool,
    /// Print per-request counters at unmount (and on SIGUSR1).
    pub stats: bool,
    /// The volume's options and the engine's settings by name
    /// (`cache_bytes=`, `mb_max_to_scan=50`), applied after the profile:
    /// any that [`mballoc_vol::MountOptions::set`] takes.
    pub settings: Vec<String>,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            folio: 2 << 20,
            profile: Profile::Default,
            threads: default_threads(),
            busy_poll: DEFAULT_BUSY_POLL,
            uring: false,
            splice: true,
            commit: Duration::from_secs(5),
            read_only: false,
            atime: Atime::Relatime,
            loop_device: false,
            stats: false,
            settings: Vec::new(),
        }
    }
}

/// Options mount(8) and fstab pass that mean nothing here, or that the
/// mount always has (nodev, nosuid are always on; the kernel checks
/// permissions).
const IGNORED: [&str; 13] = [
    "defaults", "auto", "noauto", "nofail", "user", "users", "nouser", "_netdev", "rw", "nodev", "nosuid", "dev",
    "suid",
];

impl MountConfig {
    /// Apply a comma-separated option list (`commit=10,ro,noatime`).
    pub fn apply(&mut self, list: &str) -> Result<()> {
        for opt in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let need = || value.with_context(|| format!("mount option {key} needs a value ({key}=...)"));
            match key {
                "commit" => {
                    let s: u64 =
                        need()?.parse().with_context(|| format!("commit={}: seconds", need().unwrap_or("")))?;
                    if s > 86_400 {
                        bail!("commit={s}: at most 86400 seconds");
                    }
                    self.commit = Duration::from_secs(s);
                }
                "ro" => self.read_only = true,
                "noatime" => self.atime = Atime::NoAtime,
                "relatime" | "atime" => self.atime = Atime::Relatime,
                "strictatime" => self.atime = Atime::Strict,
                "loop" => self.loop_device = true,
                "stats" => self.stats = true,
                "uring" => self.uring = true,
                "splice" => self.splice = true,
                "nosplice" => self.splice = false,
                "folio" => self.folio = parse_size(need()?).context("folio=")?,
                "threads" => {
                    self.threads = need()?.parse().context("threads=: a count")?;
                    if self.threads == 0 || self.threads > 256 {
                        bail!("threads={}: 1 to 256", self.threads);
                    }
                }
                "busy_poll" => {
                    let us: u64 = need()?.parse().context("busy_poll=: microseconds")?;
                    if us > 1_000_000 {
                        bail!("busy_poll={us}: at most 1000000 microseconds");
                    }
                    self.busy_poll = Duration::from_micros(us);
                }
                "profile" => {
                    self.profile = match need()? {
                        "default" => Profile::Default,
                        "kernel" => Profile::Kernel,
                        p => bail!("profile={p}: default or kernel"),
                    }
                }
                k if IGNORED.contains(&k) || k.starts_with("x-") => {}
                k if value.is_some() && mballoc_vol::MountOptions::default().set(k, need()?).is_ok() => {
                    self.settings.push(format!("{k}={}", need()?));
                }
                k => bail!(
                    "unknown mount option {k:?}; known: commit=SECS, ro, noatime, relatime, strictatime, \
                     loop, stats, uring, nosplice, folio=SIZE, threads=N, busy_poll=MICROS, profile=default|kernel, cache_bytes=N, dirty_bytes=N, \
                     and the engine's settings (mb_max_to_scan=N, ...: `mballoc lab settings` lists them)"
                ),
            }
        }
        Ok(())
    }

    /// The same configuration as an option list [`MountConfig::apply`]
    /// takes back.
    pub fn to_options(&self) -> String {
        let mut v = vec![
            format!("commit={}", self.commit.as_secs()),
            format!("folio={}", self.folio),
            format!("threads={}", self.threads),
            format!("busy_poll={}", self.busy_poll.as_micros()),
            format!("profile={}", self.profile.name()),
        ];
        if self.read_only {
            v.push("ro".into());
        }
        match self.atime {
            Atime::NoAtime => v.push("noatime".into()),
            Atime::Strict => v.push("strictatime".into()),
            Atime::Relatime => {}
        }
        if self.loop_device {
            v.push("loop".into());
        }
        if self.stats {
            v.push("stats".into());
        }
        if self.uring {
            v.push("uring".into());
        }
        if !self.splice {
            v.push("nosplice".into());
        }
        v.extend(self.settings.iter().cloned());
        v.join(",")
    }
}

/// How long a serving thread polls for the next request unless
/// `busy_poll=` says (see `BusyPoll`).
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(200);

/// Serving threads unless `threads=` says: two per CPU, from 4 to 16 (on
/// two CPUs, 1 to 8 threads measured within the run-to-run spread on
/// sequential reads, writes and small files; 4 was at the top).
pub fn default_threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    (2 * cpus).clamp(4, 16)
}

/// A byte count with an optional K, M or G suffix.
pub fn parse_size(s: &str) -> Result<u32> {
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = num.parse().with_context(|| format!("{s:?} is not a size"))?;
    let bytes = n.checked_mul(mult).filter(|&b| b <= 2 << 20).with_context(|| format!("{s}: at most 2 MiB"))?;
    Ok(bytes as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_round_trip_and_bad_ones_are_named() {
        let mut c = MountConfig::default();
        c.apply("commit=10,ro,noatime,uring,folio=64K,threads=8,busy_poll=50,profile=kernel,loop,defaults,x-systemd.automount,mb_max_to_scan=50")
            .unwrap();
        assert_eq!(c.settings, ["mb_max_to_scan=50"]);
        assert_eq!(c.commit, Duration::from_secs(10));
        assert!(c.read_only && c.atime == Atime::NoAtime && c.folio == 64 << 10 && c.threads == 8 && c.loop_device);
        assert_eq!(c.busy_poll, Duration::from_micros(50));
        assert!(c.uring);
        let mut d = MountConfig::default();
        d.apply(&c.to_options()).unwrap();
        assert_eq!(c, d);
        for bad in [
            "commit",
            "commit=x",
            "bogus",
            "threads=0",
            "busy_poll=x",
            "busy_poll=2000000",
            "profile=xfs",
            "folio=4G",
            "mb_max_to_scan=0",
            "inodes_per_group=8",
        ] {
            assert!(MountConfig::default().apply(bad).is_err(), "{bad}");
        }
    }
}
