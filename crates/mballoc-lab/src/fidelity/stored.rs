//! A kernel run kept on disk, so that the engine can be held to it on any
//! machine, root or not, and any kernel.
//!
//! `lab fidelity --keep DIR` writes, per case, everything the comparison
//! needs from the kernel side:
//!
//! | file            | holds                                                      |
//! |-----------------|------------------------------------------------------------|
//! | `NAME.img`      | the pristine `mkfs.ext4` image (sparse)                    |
//! | `NAME.ops`      | the operations, as a trace (`mballoc lab trace` format)    |
//! | `NAME.trace`    | ext4's allocation tracepoints as tracefs printed them      |
//! | `NAME.layout`   | each file's FIEMAP layout: `name ino logical+len@physical…` |
//! | `NAME.free`     | the free runs after unmount: `first len` per line          |
//! | `NAME.mb_stats` | `/proc/fs/ext4/DEV/mb_stats` before unmount                |
//! | `NAME.meta`     | the recording machine: `possible_cpus N`, `kernel RELEASE`; the case's `mount OPTS` and `knob NAME VALUE` (its mkfs arguments are in the image) |
//!
//! A fresh image is almost all zeros; to keep one in a repository, store
//! `e2image -Q NAME.img NAME.qcow2` instead of `NAME.img`: [`load`]
//! expands it with `e2image -r` (e2fsprogs).
//!
//! The machine matters in two places: the kernel's release chooses the
//! engine's profile, and since 6.17 the kernel makes `min(possible CPUs,
//! groups / 4)` stream goals; the engine replays with the recording
//! machine's release and count from `NAME.meta`, not this one's.

use super::{compare, engine_side, in_turn, Agreement, Case, Run, Side};
use crate::error::{Context, LabError};
use crate::kernel_trace::KernelTrace;
use crate::loop_mount::Image;
use crate::trace::Trace;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A kernel run read back from a directory.
pub struct StoredRun {
    /// The case (its operations, volume and block size).
    pub case: Case,
    /// What the kernel ended with.
    pub kernel: Side,
    /// Possible CPUs on the recording machine.
    pub possible_cpus: u32,
    /// The recording machine's kernel (from `NAME.meta`; the running one
    /// for runs kept before it was recorded there).
    pub kernel_version: mballoc_fs::KernelVersion,
    image: StoredImage,
}

enum StoredImage {
    Raw(PathBuf),
    /// Expanded from a qcow2 into /dev/shm; removed on drop.
    Expanded(Image),
}

impl StoredImage {
    fn path(&self) -> &Path {
        match self {
            StoredImage::Raw(p) => p,
            StoredImage::Expanded(i) => i.path(),
        }
    }
}

impl StoredRun {
    /// The pristine image.
    pub fn image(&self) -> &Path {
        self.image.path()
    }

    /// Run the operations on the engine loaded from the pristine image,
    /// under the kernel profile as the recording machine would run it, and
    /// compare with the kernel's outcome.
    pub fn replay(&self) -> Result<Agreement, LabError> {
        let ops = in_turn(&self.case.trace.streams);
        let engine = {
            let version = self.kernel_version;
            engine_side::run(&self.case, self.image(), &ops, &|r| r.in_kernel(version), self.possible_cpus)?
        };
        Ok(compare::compare(&self.case.name, &self.kernel, &engine))
    }
}

fn path_for(dir: &Path, name: &str, ext: &str) -> PathBuf {
    dir.join(format!("{name}.{ext}"))
}

fn write(dir: &Path, name: &str, ext: &str, text: &str) -> Result<(), LabError> {
    let p = path_for(dir, name, ext);
    std::fs::write(&p, text).map_err(|e| LabError::io(p.display().to_string(), e))
}

fn read(dir: &Path, name: &str, ext: &str) -> Result<String, LabError> {
    let p = path_for(dir, name, ext);
    std::fs::read_to_string(&p).map_err(|e| LabError::io(p.display().to_string(), e))
}

/// Keep the pristine image and the operations (before the kernel runs, so
/// that a failed run can still be studied).
pub(super) fn keep_inputs(case: &Case, image: &Path, dir: &Path) -> Result<(), LabError> {
    std::fs::create_dir_all(dir).map_err(|e| LabError::io(dir.display().to_string(), e))?;
    let img = path_for(dir, &case.name, "img");
    crate::loop_mount::output(std::process::Command::new("cp").arg("--sparse=always").arg(image).arg(&img))?;
    let mut text = Vec::new();
    case.trace.write(&mut text).map_err(|e| LabError::io("writing the operations", e))?;
    let p = path_for(dir, &case.name, "ops");
    std::fs::write(&p, text).map_err(|e| LabError::io(p.display().to_string(), e))
}

/// Keep what the kernel ended with.
pub(super) fn keep_kernel_run(case: &Case, kernel: &Side, dir: &Path) -> Result<(), LabError> {
    let name = &case.name;
    write(dir, name, "trace", &kernel.trace_text)?;
    let mut layout = String::new();
    for (file, ino, runs) in &kernel.files {
        let runs: Vec<String> = runs.iter().map(|r| format!("{}+{}@{}", r.logical, r.len, r.physical)).collect();
        let _ = writeln!(layout, "{file} {ino} {}", runs.join(" "));
    }
    write(dir, name, "layout", &layout)?;
    let mut free = String::new();
    for (first, len) in &kernel.free {
        let _ = writeln!(free, "{first} {len}");
    }
    write(dir, name, "free", &free)?;
    write(dir, name, "mb_stats", &kernel.mb_stats)?;
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut meta = format!("possible_cpus {}\nkernel {}\n", engine_side::possible_cpus(), release.trim());
    if !case.ext4.mount.is_empty() {
        let _ = writeln!(meta, "mount {}", case.ext4.mount.join(","));
    }
    for (k, v) in &case.ext4.knobs {
        let _ = writeln!(meta, "knob {k} {v}");
    }
    write(dir, name, "meta", &meta)
}

/// Read back the run `name` kept in `dir`.
pub fn load(dir: &Path, name: &str) -> Result<StoredRun, LabError> {
    let invalid = |what: &str, line: usize, why: &str| {
        LabError::Invalid(format!("{}:{line}: {why}", path_for(dir, name, what).display()))
    };
    let ops = read(dir, name, "ops")?;
    let trace = Trace::parse(&ops).map_err(LabError::from).context(format!("reading {name}.ops"))?;
    let mut case = Case {
        name: name.to_string(),
        about: "a kept kernel run".into(),
        trace,
        ext4: Default::default(),
        image: None,
    };

    let mut files = Vec::new();
    for (i, line) in read(dir, name, "layout")?.lines().enumerate() {
        let mut w = line.split_whitespace();
        let (Some(file), Some(ino)) = (w.next(), w.next().and_then(|s| s.parse().ok())) else {
            return Err(invalid("layout", i + 1, "expected a name and an inode number"));
        };
        let runs = w
            .map(|r| {
                let (logical, rest) = r.split_once('+')?;
                let (len, physical) = rest.split_once('@')?;
                Some(Run { logical: logical.parse().ok()?, len: len.parse().ok()?, physical: physical.parse().ok()? })
            })
            .collect::<Option<Vec<Run>>>()
            .ok_or_else(|| invalid("layout", i + 1, "expected runs as logical+len@physical"))?;
        files.push((file.to_string(), ino, runs));
    }
    let mut free = Vec::new();
    for (i, line) in read(dir, name, "free")?.lines().enumerate() {
        let mut w = line.split_whitespace().map(str::parse::<u64>);
        match (w.next(), w.next()) {
            (Some(Ok(first)), Some(Ok(len))) => free.push((first, len)),
            _ => return Err(invalid("free", i + 1, "expected a first block and a length")),
        }
    }
    let mut possible_cpus = None;
    let mut kernel_version = engine_side::running_kernel();
    for (i, line) in read(dir, name, "meta")?.lines().enumerate() {
        if let Some(release) = line.strip_prefix("kernel ") {
            kernel_version = mballoc_fs::KernelVersion::from_release(release.trim())
                .ok_or_else(|| invalid("meta", i + 1, "expected a kernel release"))?;
        } else if let Some(n) = line.strip_prefix("possible_cpus ") {
            possible_cpus = Some(n.trim().parse().map_err(|_| invalid("meta", i + 1, "expected a CPU count"))?);
        } else if let Some(m) = line.strip_prefix("mount ") {
            case.ext4.mount = m.split(',').map(|o| o.trim().to_string()).filter(|o| !o.is_empty()).collect();
        } else if let Some(k) = line.strip_prefix("knob ") {
            let (k, v) = k.split_once(' ').ok_or_else(|| invalid("meta", i + 1, "expected `knob NAME VALUE`"))?;
            case.ext4.knobs.push((k.to_string(), v.trim().to_string()));
        }
    }
    let possible_cpus = possible_cpus.ok_or_else(|| invalid("meta", 1, "no possible_cpus line"))?;
    let trace_text = read(dir, name, "trace")?;
    let trace = KernelTrace::parse(&trace_text, None)?;
    let requests = trace.requests_of((kernel_version.major, kernel_version.minor));

    let raw = path_for(dir, name, "img");
    let image = if raw.exists() {
        StoredImage::Raw(raw)
    } else {
        StoredImage::Expanded(Image::from_qcow2(&path_for(dir, name, "qcow2"))?)
    };
    let total_blocks = {
        let p = image.path();
        let src = mballoc_ext4::FileSource::open(p).map_err(|e| LabError::io(p.display().to_string(), e))?;
        mballoc_ext4::Ext4Volume::open(src, mballoc_ext4::ChecksumPolicy::Verify)?.superblock().blocks_count
    };
    let kernel = Side {
        files,
        free,
        total_blocks,
        block_size: case.trace.block_size,
        mb_stats: read(dir, name, "mb_stats")?,
        requests,
        lost_events: trace.lost,
        trace_text,
    };
    Ok(StoredRun { case, kernel, possible_cpus, kernel_version, image })
}
