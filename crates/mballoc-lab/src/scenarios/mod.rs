//! The lab's scenarios: each seed's experiment as workloads, run on every
//! selected backend, reported as rows of metrics.

pub mod aged;
pub mod aging;
pub mod at_scale;
pub mod core;
mod driver;
pub mod fallocate2;
pub mod fio_falloc;
pub mod folio_write;
pub mod multiblock;
pub mod small_files;
mod targets;

pub use driver::{for_each_variant, kernel_variants, Stats, Tweak, Variant, MOUNTED};
pub use targets::{
    engine, engine_with_files, kernel, kernel_with_files, open_image, persistent_engine, persistent_volume,
};

use crate::backend::{BackendKind, OpError, Target};
use crate::error::{chain, Context, LabError};
use crate::loop_mount::KernelFs;
use crate::metrics;
use crate::report::{Row, ScenarioReport};
use crate::runner::{self, RunStats};
use crate::workload::{Op, OpKind, Workload};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Set bandwidth metric `key` of `row` to `mib_per_s` when the target
/// moves data ([`Target::moves_data`]); otherwise mark the row as moving
/// none and keep the figure as `placed_KEY` (allocation speed), leaving
/// the bandwidth cell empty, so in-process placement never sits in a
/// column with device I/O.
pub fn bandwidth(row: &mut Row, moves_data: bool, key: &str, mib_per_s: f64) {
    let v = (mib_per_s * 10.0).round() / 10.0;
    if moves_data {
        row.set(key, v);
    } else {
        row.no_data = true;
        row.set(key, serde_json::Value::Null);
        row.set(&format!("placed_{key}"), v);
    }
}

/// What every scenario is given.
pub struct Env {
    /// Smaller sizes, shorter times.
    pub quick: bool,
    /// The seed every random choice comes from.
    pub seed: u64,
    /// The backends asked for.
    pub backends: Vec<BackendKind>,
    /// Where progress bars go.
    pub progress: MultiProgress,
    /// An ext4 image every volume starts from (see [`Env::start_from`]).
    pub image: Option<StartImage>,
    /// Settings laid over every variant's own (`--set`, a workload's tables).
    pub settings: std::sync::Arc<crate::settings::Settings>,
    /// When the run began (progress lines give the time since).
    pub started: std::time::Instant,
    /// Progress as plain lines on stderr (not a terminal, so no bars).
    pub plain_progress: bool,
    /// The `mballoc` executable, for the `mount` backend (set by the
    /// command line; without it that backend is unavailable).
    pub mount_program: Option<PathBuf>,
}

/// An ext4 image checked once, to start scenarios from.
#[derive(Debug, Clone)]
pub struct StartImage {
    /// The image file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its block size.
    pub block_size: u32,
}

impl StartImage {
    /// Open the image and load it into an engine once, so a bad image is
    /// one error before any scenario starts.
    pub fn open(path: &Path) -> Result<StartImage, LabError> {
        let vol = open_image(path)?;
        mballoc_ext4::engine::load(&vol, |_| {}).context(format!("loading {}", path.display()))?;
        let sb = vol.superblock();
        Ok(StartImage {
            path: path.to_path_buf(),
            bytes: sb.blocks_count * u64::from(sb.block_size),
            block_size: sb.block_size,
        })
    }

    /// Make `w` start from this image: its size and block size replace
    /// the workload's.
    pub fn apply(&self, w: &mut Workload) {
        w.image = Some(self.path.clone());
        w.volume = crate::units::Size(self.bytes);
        w.block_size = self.block_size;
    }
}

impl Env {
    /// What every scenario of a run is given.
    pub fn new(quick: bool, seed: u64, backends: Vec<BackendKind>) -> Env {
        use std::io::IsTerminal;
        Env {
            quick,
            seed,
            backends,
            progress: MultiProgress::new(),
            image: None,
            settings: Default::default(),
            started: std::time::Instant::now(),
            plain_progress: !std::io::stderr().is_terminal(),
            mount_program: None,
        }
    }

    /// Say `what` on stderr with the time since the run began: progress
    /// for a reader without a terminal (CI logs, `2> file`).
    pub fn progress_line(&self, what: &str) {
        if self.plain_progress {
            self.say(what);
        }
    }

    /// Say `what` on stderr with the time since the run began, terminal
    /// or not.
    pub fn say(&self, what: &str) {
        eprintln!("[{:>7.1} s] {what}", self.started.elapsed().as_secs_f64());
    }

    /// Lay `settings` over every variant's own configuration.
    pub fn with_settings(mut self, settings: crate::settings::Settings) -> Env {
        self.settings = std::sync::Arc::new(settings);
        self
    }

    /// Start every scenario's volumes from `image` instead of empty ones:
    /// its size and block size replace the scenario's, and scenarios that
    /// age a volume themselves take the image as the aged volume.
    pub fn start_from(mut self, image: StartImage) -> Env {
        self.image = Some(image);
        self
    }

    /// `w` as this run starts it: on the image, if there is one, its
    /// streams issued as `workload.interleave` says, if set.
    pub fn workload(&self, mut w: Workload) -> Workload {
        if let Some(img) = &self.image {
            img.apply(&mut w);
        }
        if let Some(i) = self.settings.interleave() {
            w.interleave = i;
        }
        w
    }

    /// Whether `b` was asked for.
    pub fn wants(&self, b: BackendKind) -> bool {
        self.backends.contains(&b)
    }

    /// The kernel file systems asked for.
    pub fn kernels(&self) -> Vec<KernelFs> {
        self.backends
            .iter()
            .filter_map(|b| match b {
                BackendKind::Kernel(k) => Some(*k),
                BackendKind::Engine | BackendKind::Mounted => None,
            })
            .collect()
    }

    /// A progress bar of `len` steps (a spinner when 0).
    pub fn bar(&self, len: u64, msg: String) -> ProgressBar {
        let b = self.progress.add(ProgressBar::new(len));
        let style = if len == 0 {
            ProgressStyle::with_template("{spinner} {msg} {pos} ops [{elapsed}]")
        } else {
            ProgressStyle::with_template("{bar:30} {percent:>3}% {msg} [{elapsed}/{duration}]")
        };
        b.set_style(style.expect("valid template"));
        self.progress_line(&msg);
        b.set_message(msg);
        b
    }
}

/// How big a scenario runs: its sizes scaled down, or the seed's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Scaled down (`--quick`): the same tables, smaller volumes and runs.
    Quick,
    /// The sizes the seed's figures were measured at.
    Full,
}

/// A scenario of the lab.
pub struct Scenario {
    /// Name on the command line.
    pub name: &'static str,
    /// One line for `lab list`.
    pub about: &'static str,
    /// Runs it.
    pub run: fn(&Env) -> ScenarioReport,
    /// The size `lab run` gives it when neither `--quick` nor `--full` is
    /// asked for: full wherever the whole default run still fits in ten
    /// minutes on two cores.
    pub default_scale: Scale,
    /// Seconds one run took on a 2-core machine with the default backends
    /// (engine, ext4, XFS, btrfs), at quick size and at full size: what a
    /// run's plan estimates from.
    pub seconds: Seconds,
}

/// A scenario's measured run time at each size.
#[derive(Debug, Clone, Copy)]
pub struct Seconds {
    /// At [`Scale::Quick`].
    pub quick: f64,
    /// At [`Scale::Full`].
    pub full: f64,
}

impl Scenario {
    /// Estimated seconds for one run at `scale` on `backends` backends: the
    /// measured time, scaled by the share of the four default backends
    /// that run (an estimate, corrected by the run's own pace as it goes).
    pub fn estimate(&self, scale: Scale, backends: usize) -> f64 {
        let at = match scale {
            Scale::Quick => self.seconds.quick,
            Scale::Full => self.seconds.full,
        };
        at * backends.clamp(1, 4) as f64 / 4.0
    }
}

/// Every scenario, in run order. The seconds are one run of each with
/// `mballoc lab run --quick` and `mballoc lab run --full --repeat 1` on a
/// 2-core machine, as root (every backend); the default run (full size
/// but for `aged-at-scale` and `aging`) comes to about 8 minutes there.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "fallocate2",
        about: fallocate2::ABOUT,
        run: fallocate2::run,
        default_scale: Scale::Full,
        seconds: Seconds { quick: 11.2, full: 72.0 },
    },
    Scenario {
        name: "fio-falloc",
        about: fio_falloc::ABOUT,
        run: fio_falloc::run,
        default_scale: Scale::Full,
        seconds: Seconds { quick: 3.2, full: 40.0 },
    },
    Scenario {
        name: "small-files-fragmented",
        about: small_files::ABOUT,
        run: small_files::run,
        default_scale: Scale::Full,
        seconds: Seconds { quick: 1.0, full: 16.0 },
    },
    Scenario {
        name: "multiblock-cost",
        about: multiblock::ABOUT,
        run: multiblock::run,
        default_scale: Scale::Full,
        seconds: Seconds { quick: 1.9, full: 8.0 },
    },
    Scenario {
        name: "aged",
        about: aged::ABOUT,
        run: aged::run,
        default_scale: Scale::Full,
        seconds: Seconds { quick: 5.9, full: 72.0 },
    },
    Scenario {
        name: "aged-at-scale",
        about: at_scale::ABOUT,
        run: at_scale::run,
        default_scale: Scale::Quick,
        seconds: Seconds { quick: 1.7, full: 195.0 },
    },
    Scenario {
        name: "aging",
        about: aging::ABOUT,
        run: aging::run,
        default_scale: Scale::Quick,
        seconds: Seconds { quick: 7.6, full: 263.0 },
    },
    Scenario {
        name: "folio-write",
        about: folio_write::ABOUT,
        run: folio_write::run,
        default_scale: Scale::Full,
        seconds: Seconds { quick: 1.6, full: 209.0 },
    },
    Scenario {
        name: "fallocate2-core",
        about: core::FALLOCATE2_ABOUT,
        run: core::run_fallocate2,
        default_scale: Scale::Full,
        seconds: Seconds { quick: 2.6, full: 16.0 },
    },
    Scenario {
        name: "fragmented-core",
        about: core::FRAGMENTED_ABOUT,
        run: core::run_fragmented,
        default_scale: Scale::Full,
        seconds: Seconds { quick: 0.3, full: 21.0 },
    },
];

/// Find a scenario by name.
pub fn find(name: &str) -> Option<&'static Scenario> {
    ALL.iter().find(|s| s.name == name)
}

/// Run the streams of `w` (all jobs, or those named in `only`) with a bar.
pub fn measure(
    env: &Env,
    target: &dyn Target,
    w: &Workload,
    only: Option<&str>,
    label: &str,
) -> Result<RunStats, LabError> {
    let streams: Vec<_> = w
        .streams()
        .into_iter()
        .filter(|s| match (only, s) {
            (Some(name), crate::workload::StreamSpec::Job { job, .. }) => job.name == name,
            _ => true,
        })
        .collect();
    let limit = w.seconds.map(Duration::from_secs_f64);
    let total: u64 = if limit.is_some() {
        0
    } else {
        streams.iter().map(|s| s.ops().filter(|o| o.kind.is_data()).count() as u64).sum()
    };
    let msg = match limit {
        Some(l) => format!("{label} ({:.1} s)", l.as_secs_f64()),
        None => label.to_string(),
    };
    let bar = env.bar(total, msg);
    let r = runner::run(target, &streams, w.interleave, limit, &bar).context(label);
    bar.finish_and_clear();
    r
}

/// Fill the volume through file slot `slot` (created here): fallocate in
/// large steps until the volume is full, then smaller ones, down to one
/// block. Returns the bytes allocated.
pub fn fill(target: &dyn Target, slot: u32, block: u64) -> Result<u64, LabError> {
    fill_in(target, slot, block, &[64 << 20, 1 << 20, 64 * block, block])
}

/// [`fill`] with fallocate calls of each of `steps` bytes in turn, each
/// until the volume is full.
fn fill_in(target: &dyn Target, slot: u32, block: u64, steps: &[u64]) -> Result<u64, LabError> {
    let create = Op { kind: OpKind::Create, file: slot, offset: 0, len: 0, to: 0 };
    runner::apply_all(target, [create])?;
    let mut at = 0u64;
    for &step in steps.iter().chain([block].iter()) {
        loop {
            let op = Op { kind: OpKind::Fallocate, file: slot, offset: at, len: step, to: 0 };
            match target.apply(&op) {
                Ok(()) => at += step,
                Err(OpError::NoSpace) => break,
                Err(error) => {
                    return Err(LabError::from(runner::RunError { stream: 0, op, error }).context("filling the volume"))
                }
            }
        }
    }
    Ok(at)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Age the volume of workload `w` through file slot 0: fill it, punch
/// `len` bytes every `period` bytes from `phase` where `keep(i)` says so
/// (see [`punch_pattern`]), and sync. A volume started from an image is
/// left as the image made it.
pub fn fill_and_punch(
    target: &dyn Target,
    w: &Workload,
    period: u64,
    phase: u64,
    len: u64,
    keep: impl Fn(u64) -> bool,
) -> Result<(), LabError> {
    if w.image.is_some() {
        return Ok(());
    }
    // Filled in pieces the pattern punches whole: a copy-on-write file
    // system (btrfs) frees an extent only when every block of it is
    // unreferenced, so holes punched across larger extents would free
    // nothing. ext4 and the engine merge the pieces into the same extents.
    let block = u64::from(w.block_size);
    let piece = gcd(gcd(period, phase), len);
    let size = fill_in(target, 0, block, &[piece.max(block)])?;
    punch_pattern(target, 0, size, period, phase, len, keep)?;
    target.sync();
    Ok(())
}

/// Punch `len` bytes every `period` bytes of `[0, size)` of file `slot`,
/// starting `phase` bytes into each period; `keep(i)` says whether period
/// `i` is punched.
pub fn punch_pattern(
    target: &dyn Target,
    slot: u32,
    size: u64,
    period: u64,
    phase: u64,
    len: u64,
    keep: impl Fn(u64) -> bool,
) -> Result<u64, LabError> {
    let mut punched = 0;
    let mut i = 0;
    while i * period + phase + len <= size {
        if keep(i) {
            let op = Op::ranged(OpKind::Punch, slot, i * period + phase, len);
            runner::apply_all(target, [op]).context("punching the pattern")?;
            punched += len;
        }
        i += 1;
    }
    Ok(punched)
}

/// Metrics of the files' layouts (all files but those `skip` names).
pub fn layout_metrics(row: &mut Row, target: &dyn Target, block_size: u32, keep: impl Fn(&str) -> bool) {
    match target.layouts() {
        Ok(files) => {
            let files: Vec<_> = files.into_iter().filter(|f| keep(&f.name)).collect();
            let n = files.len().max(1) as f64;
            let ext: Vec<u64> = files.iter().map(|f| f.filefrag_extents()).collect();
            row.set("files", files.len() as u64);
            row.set("avg_extents_per_file", ext.iter().sum::<u64>() as f64 / n);
            row.set("max_extents", ext.iter().copied().max().unwrap_or(0));
            let d = metrics::e4defrag(&files, block_size, target.blocks_per_flex());
            row.set("avg_size_per_extent_kib", d.avg_extent_kib);
            row.set("e4defrag_score", d.score.round());
            let score = metrics::layout_score(&files)
                .map_or(serde_json::Value::from("n/a"), |s| serde_json::Value::from((s * 1000.0).round() / 1000.0));
            row.set("layout_score", score);
        }
        Err(e) => {
            row.set("layout_error", chain(&e));
        }
    }
}

/// Metrics of the free space; returns e2freefrag's text.
pub fn free_metrics(row: &mut Row, target: &dyn Target, device: &str) -> Option<String> {
    match target.free_space() {
        Ok(fs) => {
            let h = fs.histogram();
            row.set("free_extents", h.free_extents());
            row.set("avg_free_extent_kib", h.avg_free_extent_kib());
            row.set("ceph_score", (fs.ceph_score() * 1000.0).round() / 1000.0);
            let big: u64 = fs.runs.iter().filter(|&&r| r * u64::from(fs.block_size) >= 64 << 20).sum();
            let share = if fs.free_blocks == 0 { 0.0 } else { 100.0 * big as f64 / fs.free_blocks as f64 };
            row.set("free_in_64mib_runs_pct", (share * 100.0).round() / 100.0);
            row.set("free_hist_blocks", h.buckets().iter().map(|b| b.1).collect::<Vec<u64>>());
            row.set("block_size", fs.block_size);
            Some(h.render(device))
        }
        Err(why) => {
            for k in ["free_extents", "avg_free_extent_kib", "ceph_score", "free_in_64mib_runs_pct"] {
                row.set(k, "n/a");
            }
            row.set("free_space_note", chain(&why));
            None
        }
    }
}

/// The histogram part of e2freefrag's text.
pub fn histogram_lines(freefrag: &str) -> String {
    freefrag.lines().skip_while(|l| !l.starts_with("HISTOGRAM")).skip(1).collect::<Vec<_>>().join("\n")
}
