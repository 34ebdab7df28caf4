//! Recording ext4's allocation tracepoints from tracefs: one recording at
//! a time (tracefs has one ring buffer and one filter per event), turned
//! off again however the recording ends.

use super::{KernelTrace, EVENTS};
use crate::error::LabError;
use std::path::{Path, PathBuf};

/// Where tracefs lives.
const TRACEFS: &str = "/sys/kernel/tracing";

/// A recording in progress; dropping it turns the events off again.
pub struct Recorder {
    root: PathBuf,
    /// The device kept; `None` until [`Recorder::for_device`] names it.
    dev: Option<(u32, u32)>,
    _guard: crate::cleanup::Guard,
    /// tracefs has one ring buffer and one filter per event: a second
    /// recording would empty the first's buffer and filter out its
    /// device. Held until the recording ends, across processes.
    _exclusive: std::fs::File,
}

/// The lock file that makes recordings take turns.
const RECORDING_LOCK: &str = "/tmp/mballoc-lab-tracefs.lock";

fn write(p: &Path, v: &str) -> Result<(), LabError> {
    std::fs::write(p, v).map_err(|e| LabError::io(format!("writing {v:?} to {}", p.display()), e))
}

impl Recorder {
    /// Start recording device `dev`'s allocation events, or every
    /// device's (`None`: for a device not mounted yet, whose first events
    /// would be lost if recording waited for its number; name it with
    /// [`Recorder::for_device`] before finishing). Needs root and a kernel
    /// with tracefs; otherwise [`LabError::Unavailable`].
    pub fn start(dev: Option<(u32, u32)>) -> Result<Recorder, LabError> {
        if !crate::sys::is_root() {
            return Err(LabError::Unavailable("recording tracepoints needs root".into()));
        }
        let root = PathBuf::from(TRACEFS);
        if !root.join("events").exists() {
            let _ = std::process::Command::new("mount").args(["-t", "tracefs", "nodev", TRACEFS]).status();
        }
        if !root.join("events/ext4/ext4_request_blocks").exists() {
            return Err(LabError::Unavailable(format!("no ext4 tracepoints under {TRACEFS}")));
        }
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(RECORDING_LOCK)
            .map_err(|e| LabError::io(RECORDING_LOCK, e))?;
        lock.lock().map_err(|e| LabError::io(format!("waiting for {RECORDING_LOCK}"), e))?;
        // Enabled under the cleanup registry's lock, so an interrupt turns
        // off everything this enables.
        let (guard, enabled) = crate::cleanup::register_while(
            crate::cleanup::Resource::Tracepoints(root.clone()),
            || -> Result<(), LabError> {
                write(&root.join("tracing_on"), "0")?;
                write(&root.join("trace"), "")?;
                write(&root.join("buffer_size_kb"), "65536")?;
                // The kernel's dev_t: major << 20 | minor; "0" clears a filter.
                let filter = dev.map_or_else(|| "0".to_string(), |d| format!("dev == {}", (d.0 << 20) | d.1));
                for e in EVENTS {
                    let dir = root.join("events").join(e);
                    write(&dir.join("filter"), &filter)?;
                    write(&dir.join("enable"), "1")?;
                }
                write(&root.join("tracing_on"), "1")
            },
        );
        let r = Recorder { root, dev, _guard: guard, _exclusive: lock };
        enabled?;
        Ok(r)
    }

    /// Keep only device `dev`'s events (of a recording started with none).
    pub fn for_device(&mut self, dev: (u32, u32)) {
        self.dev = Some(dev);
    }

    /// Stop; the recording as tracefs printed it, and parsed (the device
    /// named, else the first one seen).
    pub fn finish(self) -> Result<(String, KernelTrace), LabError> {
        write(&self.root.join("tracing_on"), "0")?;
        let p = self.root.join("trace");
        let mut text = std::fs::read_to_string(&p).map_err(|e| LabError::io(p.display().to_string(), e))?;
        if let Some(dev) = self.dev {
            // A recording started before its device existed holds other
            // devices' first events: the text kept is the device's alone,
            // so whoever reads it later finds no other.
            text = super::only_device(&text, dev);
        }
        let parsed = KernelTrace::parse(&text, self.dev)?;
        Ok((text, parsed))
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        disable(&self.root);
    }
}

/// Turn the lab's tracepoints under tracefs `root` off and clear their
/// filters (when a recording ends, or the run is interrupted).
pub(crate) fn disable(root: &Path) {
    for e in EVENTS {
        let dir = root.join("events").join(e);
        let _ = std::fs::write(dir.join("enable"), "0");
        let _ = std::fs::write(dir.join("filter"), "0");
    }
    let _ = std::fs::write(root.join("tracing_on"), "1");
}

/// A block device's `(major, minor)`.
pub fn device_numbers(dev: &Path) -> Result<(u32, u32), LabError> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dev).map_err(|e| LabError::io(dev.display().to_string(), e))?;
    let rdev = m.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
}
