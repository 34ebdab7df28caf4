//! Recording a real program on ext4: `mballoc lab record -- COMMAND`.
//!
//! A fresh ext4 image is made (mkfs's defaults, or the arguments given),
//! kept as it was before anything ran (`image.qcow2`, by `e2image -Q`),
//! and loop-mounted with the allocation tracepoints on, buddy builds
//! included. The program runs inside the mount point (also in `$MNT`),
//! under `strace -f -y` when strace is installed, so its file operations
//! are kept beside the trace. The volume is then synced and unmounted
//! (writeback at unmount is part of the recording), and the directory
//! holds everything [`super::replay`] needs:
//!
//! ```text
//! DIR/image.qcow2   the image before the program ran
//! DIR/trace         the kernel's allocation trace, as tracefs printed it
//! DIR/ops.strace    the program's system calls (when strace is installed)
//! DIR/ops.trace     those calls as the lab's operations (`crate::strace`),
//!                   for `mballoc lab fidelity DIR`
//! DIR/output        what the program printed (standard output and error)
//! DIR/record.toml   the command, the kernel, mkfs arguments, mount options, knobs
//! ```
//!
//! Nothing here reads `mb_groups` or waits: the recording starts before
//! the mount, with no buddy built, as a user's program meets ext4, and
//! the trace's `ext4_mb_buddy_bitmap_load` events say what ext4 built when.

use super::config::Ext4Config;
use crate::error::{Context, LabError};
use crate::kernel_trace::{device_numbers, Recorder};
use crate::loop_mount::{output, Image, KernelFs, Mount};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to record.
#[derive(Debug, Clone)]
pub struct RecordSpec {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The volume's size in bytes.
    pub bytes: u64,
    /// Its block size.
    pub block_size: u32,
    /// mkfs arguments, mount options and knobs.
    pub ext4: Ext4Config,
    /// Where the recording goes (made if missing; its files replaced).
    pub out: PathBuf,
}

/// A recording's description, `record.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordMeta {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The kernel's release.
    pub kernel: String,
    /// Bytes.
    pub bytes: u64,
    /// Block size.
    pub block_size: u32,
    /// Extra mkfs arguments.
    pub mkfs: Vec<String>,
    /// Extra mount options.
    pub mount: Vec<String>,
    /// Knobs set after mounting, `NAME=VALUE`.
    pub knobs: Vec<String>,
    /// Allocation requests the trace holds.
    pub requests: usize,
    /// Events the ring buffer dropped.
    pub lost_events: u64,
    /// Whether `ops.strace` was written.
    pub strace: bool,
    /// Where the volume was mounted while the program ran.
    #[serde(default)]
    pub mount_point: String,
    /// Operations in `ops.trace` (0 without strace).
    #[serde(default)]
    pub operations: usize,
    /// Calls on the volume the operations could not express, `NAME×COUNT`.
    #[serde(default)]
    pub not_modelled: Vec<String>,
}

impl RecordMeta {
    /// Read `DIR/record.toml`.
    pub fn read(dir: &Path) -> Result<RecordMeta, LabError> {
        let p = dir.join("record.toml");
        let text = std::fs::read_to_string(&p).map_err(|e| LabError::io(p.display().to_string(), e))?;
        toml::from_str(&text).map_err(|e| LabError::Invalid(format!("{}: {e}", p.display())))
    }

    /// The configuration the kernel ran with.
    pub fn ext4(&self) -> Ext4Config {
        Ext4Config {
            mkfs: self.mkfs.clone(),
            mount: self.mount.clone(),
            knobs: self
                .knobs
                .iter()
                .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
                .collect(),
        }
    }
}

/// Record `spec.command` on a fresh ext4 volume; the recording's
/// description. Needs root ([`LabError::Unavailable`] otherwise); a
/// program that fails is an error and nothing is kept but what it left.
pub fn record(spec: &RecordSpec) -> Result<RecordMeta, LabError> {
    if spec.command.is_empty() {
        return Err(LabError::Invalid("lab record: no command to run (give it after --)".into()));
    }
    if !crate::sys::is_root() {
        return Err(LabError::Unavailable("recording needs root for loop mounts and tracefs".into()));
    }
    let out = &spec.out;
    std::fs::create_dir_all(out).map_err(|e| LabError::io(out.display().to_string(), e))?;
    // The program runs elsewhere: strace needs the full path.
    let out = &out.canonicalize().map_err(|e| LabError::io(out.display().to_string(), e))?;
    for f in ["image.qcow2", "trace", "ops.strace", "ops.trace", "output", "record.toml"] {
        let _ = std::fs::remove_file(out.join(f));
    }
    let image =
        Image::make_with(KernelFs::Ext4, spec.bytes, spec.block_size, &spec.ext4.mkfs).context("making the image")?;
    output(Command::new("e2image").arg("-Q").arg(image.path()).arg(out.join("image.qcow2")))
        .context("keeping the image (e2image -Q)")?;
    // Recording from before the mount: ext4's background thread may build
    // buddies at once, and a build the trace missed would leave the replay
    // believing a built group unbuilt.
    let mut recorder = Recorder::start(None)?;
    let mount = Mount::from_image(image.path(), &spec.ext4.mount.join(",")).context("mounting the image")?;
    drop(image);
    for (k, v) in &spec.ext4.knobs {
        mount.set_ext4_knob(k, v)?;
    }
    recorder.for_device(device_numbers(&PathBuf::from("/dev").join(mount.device_name()))?);
    let strace = which("strace");
    let mut c = if strace {
        let mut c = Command::new("strace");
        c.args(["-f", "-y", "-qq", "-o"]).arg(out.join("ops.strace")).arg("--").args(&spec.command);
        c
    } else {
        let mut c = Command::new(&spec.command[0]);
        c.args(&spec.command[1..]);
        c
    };
    let log = out.join("output");
    let printed = std::fs::File::create(&log).map_err(|e| LabError::io(log.display().to_string(), e))?;
    let also = printed.try_clone().map_err(|e| LabError::io(log.display().to_string(), e))?;
    let status = c
        .current_dir(mount.dir())
        .env("MNT", mount.dir())
        .stdout(printed)
        .stderr(also)
        .status()
        .map_err(|e| LabError::io(format!("running {}", spec.command[0]), e))?;
    if !status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        return Err(LabError::Tool {
            program: spec.command.join(" "),
            message: format!("exited with {status}; last line: {last} (all of it in {})", log.display()),
        });
    }
    output(Command::new("sync").arg("-f").arg(mount.dir()))?;
    let mount_point = mount.dir().display().to_string();
    drop(mount.unmount().context("unmounting")?);
    let (text, parsed) = recorder.finish()?;
    let p = out.join("trace");
    std::fs::write(&p, &text).map_err(|e| LabError::io(p.display().to_string(), e))?;
    let (mut operations, mut not_modelled) = (0, Vec::new());
    if strace {
        let p = out.join("ops.strace");
        let calls = std::fs::read_to_string(&p).map_err(|e| LabError::io(p.display().to_string(), e))?;
        let c = crate::strace::convert(&calls, &mount_point, spec.bytes, spec.block_size);
        operations = c.trace.streams.iter().map(Vec::len).sum();
        not_modelled = c.not_modelled.iter().map(|(k, v)| format!("{k}×{v}")).collect();
        let p = out.join("ops.trace");
        let mut f = std::fs::File::create(&p).map_err(|e| LabError::io(p.display().to_string(), e))?;
        c.trace.write(&mut f).map_err(|e| LabError::io(p.display().to_string(), e))?;
    }
    let meta = RecordMeta {
        command: spec.command.clone(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
        bytes: spec.bytes,
        block_size: spec.block_size,
        mkfs: spec.ext4.mkfs.clone(),
        mount: spec.ext4.mount.clone(),
        knobs: spec.ext4.knobs.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        requests: parsed.requests().len(),
        lost_events: parsed.lost,
        strace,
        mount_point,
        operations,
        not_modelled,
    };
    let p = out.join("record.toml");
    let text = toml::to_string(&meta).map_err(|e| LabError::Invalid(format!("record.toml: {e}")))?;
    std::fs::write(&p, text).map_err(|e| LabError::io(p.display().to_string(), e))?;
    Ok(meta)
}

/// A recording as a fidelity case: its program's operations (`ops.trace`)
/// from its image, ext4 configured as it was and as `over` adds. The image
/// is expanded for the case and removed when the returned [`Image`] drops.
pub fn case_of(dir: &Path, over: &crate::settings::Settings) -> Result<(super::Case, Image), LabError> {
    let meta = RecordMeta::read(dir)?;
    let ops = dir.join("ops.trace");
    if !ops.exists() {
        return Err(LabError::Invalid(format!("{}: no ops.trace (recorded without strace)", dir.display())));
    }
    let text = std::fs::read_to_string(&ops).map_err(|e| LabError::io(ops.display().to_string(), e))?;
    let name = dir.file_name().map_or("recording".into(), |s| s.to_string_lossy().into_owned());
    let trace = crate::trace::Trace::parse(&text).map_err(|e| LabError::Invalid(format!("{}: {e}", ops.display())))?;
    let mut case = super::Case::from_trace(&name, trace);
    case.about = format!("`{}`, recorded", meta.command.join(" "));
    case.ext4 = meta.ext4();
    case.ext4.extend(&Ext4Config::from_settings(over));
    case.ext4.check(over)?;
    let image = Image::from_qcow2(&dir.join("image.qcow2"))?;
    case.image = Some(image.path().to_path_buf());
    Ok((case, image))
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}
