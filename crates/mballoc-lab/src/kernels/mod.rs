//! Other kernels: a Debian kernel booted under qemu with this `mballoc`
//! inside, so that any lab command (a fidelity run, a scenario, a
//! workload) runs against that kernel's ext4 exactly as it runs against
//! the host's.
//!
//! [`fetch()`] downloads and unpacks the kernel without installing it;
//! [`initramfs`] packs a root file system around this very binary; [`run`]
//! boots it with software emulation (TCG with one host thread: layouts
//! and counts are the kernel's, timings are not) and reads back what the
//! command printed from a raw disk. The host's own kernel stays one of
//! the choices: `host` runs the command here, unchanged.

pub mod fetch;
pub mod initramfs;

use crate::error::LabError;
pub use fetch::{cache_dir, fetch, KernelSpec, Unpacked};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a guest is booted.
#[derive(Debug, Clone)]
pub struct GuestOptions {
    /// CPUs the guest sees: since 6.17 ext4's stream goals are per CPU, so
    /// a layout depends on it (the host's count reproduces the host).
    pub cpus: u32,
    /// Guest memory, MiB (its /dev/shm images live in it).
    pub memory_mib: u32,
    /// Longest a run may take before the guest is stopped.
    pub timeout: Duration,
    /// A directory the command writes in the guest (relative to its
    /// working directory), brought back as [`GuestRun::brought`]: a
    /// fidelity run's `--keep` (images, operations, the kernel's trace)
    /// or a report's `--out`.
    pub bring: Option<String>,
}

impl Default for GuestOptions {
    fn default() -> Self {
        GuestOptions {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            memory_mib: 3072,
            timeout: Duration::from_secs(1800),
            bring: None,
        }
    }
}

/// What a command run in a guest left.
#[derive(Debug, Clone)]
pub struct GuestRun {
    /// `uname -r` in the guest.
    pub uname: String,
    /// The command's exit status.
    pub status: i32,
    /// What it printed on stdout.
    pub stdout: Vec<u8>,
    /// What it printed on stderr.
    pub stderr: Vec<u8>,
    /// [`GuestOptions::bring`]'s directory as a gzipped tar archive (empty when
    /// none was asked for or the command left none).
    pub brought: Vec<u8>,
    /// Wall time from qemu's start to its exit.
    pub elapsed: Duration,
}

/// Boot `kernel` with `mballoc ARGS` as the guest's whole workload and
/// return what it printed. The work directory (`$TMPDIR`) holds the
/// archive, the results disk and the console log while it runs.
pub fn run(kernel: &Unpacked, args: &[String], opts: &GuestOptions) -> Result<GuestRun, LabError> {
    let qemu = "qemu-system-x86_64";
    let work = std::env::temp_dir().join(format!("mballoc-guest-{}-{}", std::process::id(), kernel.abi));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| LabError::io(work.display().to_string(), e))?;
    let result = boot(qemu, kernel, args, opts, &work);
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&work);
    }
    result
}

fn boot(
    qemu: &str,
    kernel: &Unpacked,
    args: &[String],
    opts: &GuestOptions,
    work: &Path,
) -> Result<GuestRun, LabError> {
    let io = |what: &Path| {
        let what = what.display().to_string();
        move |e| LabError::io(what, e)
    };
    let archive = work.join("initramfs.cpio");
    std::fs::write(&archive, initramfs::build(kernel, args, opts.bring.as_deref())?).map_err(io(&archive))?;
    let results = work.join("results.img");
    let f = std::fs::File::create(&results).map_err(io(&results))?;
    // Sparse: only what the guest writes takes room.
    f.set_len(4 << 30).map_err(io(&results))?;
    drop(f);
    let console = work.join("console.log");
    let started = Instant::now();
    let mut child = Command::new(qemu)
        .args(["-machine", "q35", "-accel", "tcg,thread=single", "-cpu", "max", "-nodefaults", "-no-reboot"])
        .args(["-display", "none", "-smp", &opts.cpus.to_string(), "-m", &opts.memory_mib.to_string()])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-kernel")
        .arg(kernel.vmlinuz())
        .arg("-initrd")
        .arg(&archive)
        .args(["-append", "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init"])
        .arg("-drive")
        .arg(format!("file={},format=raw,if=virtio,cache=unsafe", results.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LabError::Unavailable(format!("{qemu}: {e} (apt-get install qemu-system-x86)")))?;
    loop {
        if child.try_wait().map_err(|e| LabError::io(qemu, e))?.is_some() {
            break;
        }
        if started.elapsed() > opts.timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LabError::Invalid(format!(
                "the {} guest ran past {:?} (console: {})",
                kernel.abi,
                opts.timeout,
                console.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let elapsed = started.elapsed();
    let raw = std::fs::read(&results).map_err(io(&results))?;
    parse_results(&raw)
        .ok_or_else(|| {
            let tail = std::fs::read_to_string(&console).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(15).collect();
            LabError::Invalid(format!(
                "the {} guest left no results; its console ended:\n{}",
                kernel.abi,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ))
        })
        .map(|r| GuestRun { uname: r.uname, status: r.status, stdout: r.out, stderr: r.err, brought: r.tar, elapsed })
}

/// What the guest wrote on the results disk.
#[derive(Debug, PartialEq)]
struct Results {
    uname: String,
    status: i32,
    out: Vec<u8>,
    err: Vec<u8>,
    tar: Vec<u8>,
}

/// The results disk: a header line `MBALLOC-GUEST rc=N out=BYTES
/// err=BYTES tar=BYTES uname=ABI`, then the two outputs and the archive
/// of the directory brought back.
fn parse_results(raw: &[u8]) -> Option<Results> {
    let end = raw.iter().position(|&b| b == b'\n')?;
    let header = std::str::from_utf8(&raw[..end]).ok()?;
    let mut fields = std::collections::HashMap::new();
    for f in header.strip_prefix("MBALLOC-GUEST ")?.split_whitespace() {
        let (k, v) = f.split_once('=')?;
        fields.insert(k, v);
    }
    let status: i32 = fields.get("rc")?.parse().ok()?;
    let out: usize = fields.get("out")?.parse().ok()?;
    let err: usize = fields.get("err")?.parse().ok()?;
    let tar: usize = fields.get("tar").map_or(Some(0), |t| t.parse().ok())?;
    let body = raw.get(end + 1..end + 1 + out.checked_add(err)?.checked_add(tar)?)?;
    Some(Results {
        uname: fields.get("uname")?.to_string(),
        status,
        out: body[..out].to_vec(),
        err: body[out..out + err].to_vec(),
        tar: body[out + err..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_read_back_whole_or_not_at_all() {
        let mut raw = b"MBALLOC-GUEST rc=1 out=3 err=2 tar=4 uname=6.1.0-56-cloud-amd64\nabcdetar!".to_vec();
        raw.extend_from_slice(&[0; 64]);
        let r = parse_results(&raw).unwrap();
        assert_eq!((r.uname.as_str(), r.status), ("6.1.0-56-cloud-amd64", 1));
        assert_eq!((&r.out[..], &r.err[..], &r.tar[..]), (&b"abc"[..], &b"de"[..], &b"tar!"[..]));
        let old = parse_results(b"MBALLOC-GUEST rc=0 out=1 err=0 uname=x\na").unwrap();
        assert!(old.tar.is_empty(), "no archive field: nothing brought");
        assert!(parse_results(&[0; 128]).is_none(), "an untouched disk");
        assert!(parse_results(b"MBALLOC-GUEST rc=0 out=99 err=0 uname=x\nshort").is_none());
    }
}
