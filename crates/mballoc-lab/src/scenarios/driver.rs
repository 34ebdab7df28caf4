//! The one loop every scenario runs: its variants (a backend and a
//! labelled configuration of it) in order, each building what it runs on
//! and adding its rows. A backend that was not asked for is passed over;
//! one that this machine cannot offer is reported as skipped once, with
//! the reason, and its other variants are passed over too; a variant that
//! fails leaves a note naming it and the cause.

use super::targets::{engine_with_files, kernel_with_files_mkfs, persistent_volume};
use super::Env;
use crate::backend::{BackendKind, EngineTarget, Target, VolumeFile, WriteMode};
use crate::error::{chain, LabError};
use crate::loop_mount::{KernelFs, Mount};
use crate::report::ScenarioReport;
use crate::settings::Settings;
use crate::workload::Workload;
use mballoc_fs::FsConfig;
use mballoc_vol::MountOptions;
use std::sync::Arc;

/// A change to the engine's configuration.
pub type Tweak = Arc<dyn Fn(&mut FsConfig) + Send + Sync>;

/// Whether the allocators count what they do (`mb_stats`): one setting
/// for every backend of a scenario, so no row pays for counting that
/// another row does not. ext4's counters are atomics on the allocation
/// path; the engine's are per-CPU, but the rule is the same for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stats {
    /// `mb_stats=1`: the scenario reads the counters.
    On,
    /// `mb_stats=0`: the kernel's default, for throughput rows.
    Off,
}

impl Stats {
    /// The sysfs value.
    pub fn value(self) -> &'static str {
        match self {
            Stats::On => "1",
            Stats::Off => "0",
        }
    }

    /// What the report says: the setting each backend of the run counts
    /// under, the scenario's unless the run's settings override it. xfs
    /// and btrfs have no such counters, and the engine behind `mballoc
    /// mount` does not export its own: both are named as not counting.
    pub fn describe(self, env: &Env) -> String {
        use crate::settings::Scope;
        let mut parts: Vec<(String, String)> = Vec::new();
        for b in &env.backends {
            let (name, value) = match b {
                BackendKind::Engine => {
                    ("engine", env.settings.get(Scope::Engine, "mb_stats").unwrap_or(self.value()).to_string())
                }
                BackendKind::Kernel(KernelFs::Ext4) => (
                    "ext4",
                    env.settings.get(Scope::Kernel(KernelFs::Ext4), "mb_stats").unwrap_or(self.value()).to_string(),
                ),
                BackendKind::Kernel(k) => (k.name(), "none (no such counters)".to_string()),
                BackendKind::Mounted => ("mount", "none (the server does not export them)".to_string()),
            };
            parts.push((name.to_string(), value));
        }
        let counting: Vec<&(String, String)> = parts.iter().filter(|p| !p.1.starts_with("none")).collect();
        if parts.len() == counting.len() && counting.windows(2).all(|w| w[0].1 == w[1].1) {
            return format!("mb_stats={} on every backend", counting.first().map_or(self.value(), |p| p.1.as_str()));
        }
        let list: Vec<String> = parts.iter().map(|(b, v)| format!("{b} {v}")).collect();
        format!("mb_stats: {}", list.join(", "))
    }
}

/// Where an engine variant keeps its volume.
#[derive(Clone)]
enum Storage {
    /// In this process's memory: allocation only, writes carry no data.
    Memory,
    /// On a volume file, mounted with these options: data, cache, journal.
    Device(MountOptions),
}

#[derive(Clone)]
enum Setup {
    Engine { write_mode: WriteMode, storage: Storage, tweak: Tweak },
    Kernel { fs: KernelFs, options: String, knobs: Vec<(String, String)> },
    Mounted { profile: &'static str },
}

/// One row's backend and configuration.
#[derive(Clone)]
pub struct Variant {
    label: String,
    setup: Setup,
    stats: Stats,
    settings: Arc<Settings>,
    mount_program: Option<std::path::PathBuf>,
}

impl Variant {
    /// The engine in memory with delayed allocation, configured by `tweak`.
    pub fn engine(label: impl Into<String>, tweak: impl Fn(&mut FsConfig) + Send + Sync + 'static) -> Variant {
        Variant {
            label: label.into(),
            setup: Setup::Engine { write_mode: WriteMode::Delalloc, storage: Storage::Memory, tweak: Arc::new(tweak) },
            stats: Stats::On,
            settings: Arc::default(),
            mount_program: None,
        }
    }

    /// A kernel file system mounted with `options` (as `mount -o`).
    pub fn kernel(fs: KernelFs, label: impl Into<String>, options: &str) -> Variant {
        Variant {
            label: label.into(),
            setup: Setup::Kernel { fs, options: options.into(), knobs: Vec::new() },
            stats: Stats::On,
            settings: Arc::default(),
            mount_program: None,
        }
    }

    /// The engine on a volume mounted by `mballoc mount` under `profile`
    /// (`default` or `kernel`), driven by system calls. Of the run's engine
    /// settings only `engine.profile` reaches it (the server takes no
    /// others).
    pub fn mounted(label: impl Into<String>, profile: &'static str) -> Variant {
        Variant {
            label: label.into(),
            setup: Setup::Mounted { profile },
            stats: Stats::On,
            settings: Arc::default(),
            mount_program: None,
        }
    }

    /// The engine on a persistent volume, mounted with default options.
    pub fn on_device(self) -> Variant {
        self.on_device_with(MountOptions::default())
    }

    /// The engine on a persistent volume mounted with `opts`.
    pub fn on_device_with(mut self, opts: MountOptions) -> Variant {
        if let Setup::Engine { storage, .. } = &mut self.setup {
            *storage = Storage::Device(opts);
        }
        self
    }

    /// How the in-memory engine treats buffered writes.
    pub fn write_mode(mut self, mode: WriteMode) -> Variant {
        if let Setup::Engine { write_mode, .. } = &mut self.setup {
            *write_mode = mode;
        }
        self
    }

    /// An ext4 sysfs knob (`/sys/fs/ext4/DEV/NAME`) set after mounting.
    pub fn knob(mut self, name: &str, value: impl ToString) -> Variant {
        if let Setup::Kernel { knobs, .. } = &mut self.setup {
            knobs.push((name.into(), value.to_string()));
        }
        self
    }

    /// The backend this variant runs on.
    pub fn backend(&self) -> BackendKind {
        match &self.setup {
            Setup::Engine { .. } => BackendKind::Engine,
            Setup::Kernel { fs, .. } => BackendKind::Kernel(*fs),
            Setup::Mounted { .. } => BackendKind::Mounted,
        }
    }

    /// The row's label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// This variant as a scenario runs it: with its statistics setting and
    /// the run's settings laid over its own.
    pub fn under(mut self, stats: Stats, env: &Env) -> Variant {
        self.stats = stats;
        self.settings = env.settings.clone();
        self.mount_program = env.mount_program.clone();
        self
    }

    /// Apply this variant's engine configuration to `cfg` (nothing for a
    /// kernel variant): the run's profile, the variant's own tweak, the
    /// statistics setting, then the run's other settings (which win).
    pub fn configure(&self, cfg: &mut FsConfig) {
        if let Setup::Engine { tweak, .. } = &self.setup {
            self.settings.apply_profile(cfg);
            tweak(cfg);
            cfg.placement.tunables.mb_stats = self.stats == Stats::On;
            self.settings.apply_keys(cfg);
        }
    }

    /// Mount options: the variant's, then the run's.
    fn mount_options(&self, fs: KernelFs, own: &str) -> String {
        match self.settings.mount_options(fs) {
            Some(extra) if own.is_empty() => extra.to_string(),
            Some(extra) => format!("{own},{extra}"),
            None => own.to_string(),
        }
    }

    /// sysfs knobs: statistics, the variant's, then the run's.
    fn all_knobs(&self, fs: KernelFs, own: &[(String, String)]) -> Vec<(String, String)> {
        if fs != KernelFs::Ext4 {
            return Vec::new();
        }
        let mut v = vec![("mb_stats".to_string(), self.stats.value().to_string())];
        v.extend(own.iter().cloned());
        v.extend(self.settings.knobs(fs));
        v
    }

    /// A fresh target for workload `w`.
    pub fn target(&self, w: &Workload) -> Result<Box<dyn Target>, LabError> {
        self.target_with_files(w, w.file_names())
    }

    /// A fresh target for workload `w` whose file slots are `names`.
    pub fn target_with_files(&self, w: &Workload, names: Vec<String>) -> Result<Box<dyn Target>, LabError> {
        match &self.setup {
            Setup::Engine { write_mode, storage: Storage::Memory, .. } => {
                let mode = self.settings.write_mode().unwrap_or(*write_mode);
                Ok(Box::new(engine_with_files(w, names, mode, |c| self.configure(c))?))
            }
            Setup::Engine { storage: Storage::Device(opts), .. } => {
                if w.image.is_some() {
                    return Err(LabError::Invalid("a persistent volume starts empty, not from an ext4 image".into()));
                }
                let (vol, file) = persistent_volume(w.volume.0, w.block_size, opts.clone(), |c| self.configure(c))?;
                Ok(Box::new(EngineTarget::persistent(vol, file, names)))
            }
            Setup::Kernel { fs, options, knobs } => {
                // Whatever stops the file system from being made or
                // mounted here makes the backend unavailable.
                let options = self.mount_options(*fs, options);
                let mkfs = self.settings.mkfs_args(*fs);
                let t = kernel_with_files_mkfs(*fs, w, names, &options, &mkfs).map_err(unavailable)?;
                for (name, value) in self.all_knobs(*fs, knobs) {
                    t.mount().set_ext4_knob(&name, &value)?;
                }
                Ok(Box::new(t))
            }
            Setup::Mounted { profile } => {
                if w.image.is_some() {
                    return Err(LabError::Invalid("a mounted volume starts empty, not from an ext4 image".into()));
                }
                let program = self.mount_program.clone().ok_or_else(|| {
                    LabError::Unavailable("runs only from the mballoc command (it starts `mballoc mount`)".into())
                })?;
                let profile = self.settings.get(crate::settings::Scope::Engine, "profile").unwrap_or(profile);
                let command = crate::backend::MountCommand { program, profile: profile.to_string() };
                Ok(Box::new(crate::backend::MountedTarget::new(command, w.volume.0, w.block_size, names)?))
            }
        }
    }

    /// A fresh persistent volume of `bytes` bytes for an engine variant
    /// kept on a device, for scenarios that drive the volume itself.
    pub fn engine_volume(
        &self,
        bytes: u64,
        block_size: u32,
    ) -> Result<(std::sync::Arc<mballoc_vol::Volume>, VolumeFile), LabError> {
        match &self.setup {
            Setup::Engine { storage: Storage::Device(opts), .. } => {
                persistent_volume(bytes, block_size, opts.clone(), |c| self.configure(c))
            }
            _ => Err(LabError::Invalid(format!("variant {:?} is not an engine on a device", self.label))),
        }
    }

    /// A fresh kernel file system of `bytes` bytes for a kernel variant,
    /// for scenarios that drive the mount themselves.
    pub fn kernel_mount(&self, bytes: u64, block_size: u32) -> Result<Mount, LabError> {
        match &self.setup {
            Setup::Kernel { fs, options, knobs } => {
                let options = self.mount_options(*fs, options);
                let mkfs = self.settings.mkfs_args(*fs);
                let m = Mount::with_mkfs(*fs, bytes, block_size, &options, &mkfs).map_err(unavailable)?;
                for (name, value) in self.all_knobs(*fs, knobs) {
                    m.set_ext4_knob(&name, &value)?;
                }
                Ok(m)
            }
            Setup::Engine { .. } | Setup::Mounted { .. } => {
                Err(LabError::Invalid(format!("variant {:?} is not a kernel file system", self.label)))
            }
        }
    }
}

/// Whatever stops a kernel file system from being made or mounted here
/// makes its backend unavailable.
fn unavailable(e: LabError) -> LabError {
    if e.is_unavailable() {
        e
    } else {
        LabError::Unavailable(chain(&e))
    }
}

/// The label of the engine mounted through FUSE.
pub const MOUNTED: &str = "engine, default profile, through FUSE";

/// The system-call variants of a run: for ext4 one per `(label, mount
/// options)` of `ext4`, for the other kernel file systems their defaults,
/// and the engine mounted through FUSE when `mount` was asked for.
pub fn kernel_variants(env: &Env, ext4: &[(&str, &str)]) -> Vec<Variant> {
    let mut v: Vec<Variant> = env
        .kernels()
        .into_iter()
        .flat_map(|k| match k {
            KernelFs::Ext4 => ext4.iter().map(|(label, opts)| Variant::kernel(k, *label, opts)).collect(),
            _ => vec![Variant::kernel(k, "default", "")],
        })
        .collect();
    if env.wants(BackendKind::Mounted) {
        v.push(Variant::mounted(MOUNTED, "default"));
    }
    v
}

/// Run `each` for every variant whose backend was asked for, in order,
/// with statistics set to `stats` on every backend and the run's settings
/// laid over each variant's own. A variant whose backend cannot run here
/// marks the backend skipped (its later variants are passed over); any
/// other failure becomes a note and is counted in the report.
pub fn for_each_variant(
    env: &Env,
    rep: &mut ScenarioReport,
    stats: Stats,
    variants: &[Variant],
    mut each: impl FnMut(&Variant, &mut ScenarioReport) -> Result<(), LabError>,
) {
    rep.statistics = Some(stats.describe(env));
    for v in variants {
        let v = &v.clone().under(stats, env);
        let backend = v.backend().name();
        if !env.wants(v.backend()) || rep.is_skipped(backend) {
            continue;
        }
        match each(v, rep) {
            Ok(()) => {}
            Err(e) if e.is_unavailable() => rep.skip(backend, &e.to_string()),
            Err(e) => {
                rep.failures += 1;
                rep.notes.push(format!("{backend} {}: {}", v.label(), chain(&e)));
            }
        }
    }
}
