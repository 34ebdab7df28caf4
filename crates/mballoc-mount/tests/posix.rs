//! The mount against the kernel's ext4, check by check: `posix_checks.py`
//! observes the same POSIX promises (unlinked-open files, truncate by
//! path, fallocate past the end, 255-byte names, link counts, st_blocks of
//! unsynced data, renameat2 flags, hard and symbolic links, device nodes,
//! extended attributes, set-group-ID directories, set-user-ID clearing,
//! permissions for another user, chattr flags, listings while deleting and
//! creating, times, file handles) on a loop-mounted ext4 image and on an
//! mballoc mount, and every line must agree.
//!
//! Needs root, loop devices, mkfs.ext4, /dev/fuse, fusermount3 and
//! python3; skipped with one line otherwise.

mod common;

use mballoc_mount::MountConfig;
use mballoc_testkit::Scratch;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn ready() -> Result<(), String> {
    common::can_mount()?;
    for tool in [["fusermount3", "-V"], ["mkfs.ext4", "-V"], ["python3", "--version"], ["getfacl", "--version"]] {
        if Command::new(tool[0]).arg(tool[1]).stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
            return Err(format!("no {}", tool[0]));
        }
    }
    Ok(())
}

fn run_checks(dir: &Path) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/posix_checks.py");
    let out = Command::new("python3").arg(script).arg(dir).output().expect("python3 runs");
    assert!(out.status.success(), "posix_checks.py: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8").lines().map(String::from).collect()
}

fn on_ext4() -> Vec<String> {
    let s = Scratch::in_memory("ext4");
    let img = s.join("ext4.img");
    std::fs::File::create(&img).unwrap().set_len(512 << 20).unwrap();
    let ok = Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img).status().unwrap().success();
    assert!(ok, "mkfs.ext4");
    let mnt = s.mount_point();
    // ext4's defaults: device nodes open, set-user-ID bits count, as on a
    // mount root makes.
    let ok = Command::new("mount").args(["-o", "loop"]).arg(&img).arg(&mnt).status().unwrap().success();
    assert!(ok, "loop-mounting ext4");
    let lines = run_checks(&mnt);
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    lines
}

/// The observations on an mballoc mount served as `config` says; and
/// whether requests came over io_uring (a serving thread per CPU exists
/// only once the kernel agreed to it).
fn on_mballoc(config: MountConfig) -> (Vec<String>, bool) {
    let s = Scratch::in_memory("mballoc");
    let vol = s.join("vol");
    let opts = mballoc_vol::FormatOptions::default();
    mballoc_vol::mkfs(&vol, Some(512 << 20), &opts, mballoc_vol::Overwrite::Refuse).unwrap();
    let mnt = s.mount_point();
    let server = common::serve(&vol, &mnt, config);
    let lines = run_checks(&mnt);
    let over_uring = std::fs::read_dir("/proc/self/task").unwrap().any(|t| {
        let comm = std::fs::read_to_string(t.unwrap().path().join("comm")).unwrap_or_default();
        comm.starts_with("mballoc-uring-")
    });
    mballoc_mount::umount(&mnt).unwrap();
    server.join().unwrap().unwrap();
    let dev = mballoc_vol::FileDevice::open(&vol, mballoc_vol::OpenMode::ReadOnly).unwrap();
    let report = mballoc_vol::check(&dev, mballoc_vol::Repair::No).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    (lines, over_uring)
}

/// Every line of `ours` that differs from ext4's.
fn differences(kernel: &[String], ours: &[String]) -> Vec<String> {
    let mut differ = Vec::new();
    for (k, o) in kernel.iter().zip(ours) {
        if k != o {
            differ.push(format!("  ext4:    {k}\n  mballoc: {o}"));
        }
    }
    if kernel.len() != ours.len() {
        differ.push(format!("  {} lines on ext4, {} on mballoc", kernel.len(), ours.len()));
    }
    differ
}

#[test]
fn the_mount_keeps_the_promises_ext4_keeps() {
    if let Err(why) = ready() {
        eprintln!("skipped the_mount_keeps_the_promises_ext4_keeps: {why}");
        return;
    }
    let kernel = on_ext4();
    let (ours, _) = on_mballoc(MountConfig::default());
    let differ = differences(&kernel, &ours);
    eprintln!("{} observations compared with ext4", kernel.len());
    assert!(differ.is_empty(), "the mount differs from ext4:\n{}", differ.join("\n"));
    assert!(kernel.len() > 80, "only {} observations", kernel.len());
}

/// The same promises with requests over io_uring (`-o uring`), where the
/// kernel serves FUSE that way (Linux 6.14 on, the fuse module's
/// `enable_uring` on); and without busy polling, the other way threads
/// wait.
#[test]
fn over_io_uring_and_without_busy_polling_the_mount_keeps_them_too() {
    if let Err(why) = ready() {
        eprintln!("skipped over_io_uring_and_without_busy_polling_the_mount_keeps_them_too: {why}");
        return;
    }
    let kernel = on_ext4();
    let sleeping = MountConfig { busy_poll: Duration::ZERO, ..MountConfig::default() };
    let (ours, over_uring) = on_mballoc(sleeping);
    assert!(!over_uring, "io_uring was not asked for");
    let differ = differences(&kernel, &ours);
    assert!(differ.is_empty(), "without busy polling the mount differs from ext4:\n{}", differ.join("\n"));
    let enabled = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|s| s.trim() == "Y");
    if !enabled {
        eprintln!(
            "skipped the io_uring half of over_io_uring_and_without_busy_polling_the_mount_keeps_them_too: \
             the fuse module's enable_uring is not on"
        );
        return;
    }
    let (ours, over_uring) = on_mballoc(MountConfig { uring: true, ..MountConfig::default() });
    assert!(over_uring, "the kernel offers FUSE over io_uring but no queue was served");
    let differ = differences(&kernel, &ours);
    assert!(differ.is_empty(), "over io_uring the mount differs from ext4:\n{}", differ.join("\n"));
}
