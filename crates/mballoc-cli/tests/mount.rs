//! `mballoc mount` with real programs: seed 000's fio job, the
//! will-it-scale fallocate2 loop, plain shell tools, and a SIGKILL of the
//! mount during writes. Needs root, /dev/fuse and fusermount3 (Debian's
//! fuse3); fio is used where installed. Each test says in one line why it
//! skipped.

use mballoc_lab::sys::{fallocate, statvfs, FallocMode};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_mballoc");

fn fuse_ready(test: &str) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false);
    let why = if !root {
        "not root"
    } else if !Path::new("/dev/fuse").exists() {
        "no /dev/fuse"
    } else if Command::new("fusermount3").arg("-V").output().is_err() {
        "no fusermount3 (install fuse3)"
    } else {
        return true;
    };
    eprintln!("{test}: skipped: {why}");
    false
}

fn have(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok()
}

/// A fresh directory with a volume file and a mount point.
/// A volume made by `mballoc mkfs` in a scratch directory, and where it
/// mounts; the directory's drop unmounts whatever a failed test left.
struct Scratch(mballoc_testkit::Scratch);

impl Scratch {
    fn new(name: &str, size: &str) -> Scratch {
        let s = mballoc_testkit::Scratch::new(name);
        s.mount_point();
        run(&["mkfs", s.join("vol").to_str().unwrap(), "--size", size]);
        Scratch(s)
    }
    fn vol(&self) -> String {
        self.0.join("vol").display().to_string()
    }
    fn mnt(&self) -> PathBuf {
        self.0.join("mnt")
    }
    fn m(&self) -> String {
        self.mnt().display().to_string()
    }
}

fn run(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "mballoc {args:?}: {}{}", text, String::from_utf8_lossy(&out.stderr));
    text
}

fn check_clean(s: &Scratch) {
    let out = run(&["check", &s.vol()]);
    assert!(out.contains(": clean,"), "{out}");
}

/// Extents per file, from `inspect --files` (filefrag's lines).
fn extents_per_file(s: &Scratch) -> Vec<(String, u64)> {
    run(&["inspect", &s.vol(), "--files"])
        .lines()
        .map(|l| {
            let (path, rest) = l.rsplit_once(": ").unwrap();
            (path.to_string(), rest.split_whitespace().next().unwrap().parse().unwrap())
        })
        .collect()
}

#[test]
fn shell_tools_see_a_file_system() {
    if !fuse_ready("shell_tools_see_a_file_system") {
        return;
    }
    let s = Scratch::new("shell", "256M");
    run(&["mount", &s.vol(), &s.m()]);
    let m = s.mnt();
    std::fs::create_dir(m.join("d")).unwrap();
    std::fs::write(m.join("d/a"), b"hello, volume").unwrap();
    std::fs::rename(m.join("d/a"), m.join("b")).unwrap();
    assert_eq!(std::fs::read(m.join("b")).unwrap(), b"hello, volume");
    let names: Vec<String> =
        std::fs::read_dir(&m).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(std::fs::remove_dir(&m).map_err(|e| e.raw_os_error()), Err(Some(libc::EBUSY)));
    std::fs::write(m.join("d/x"), b"x").unwrap();
    assert_eq!(std::fs::remove_dir(m.join("d")).map_err(|e| e.raw_os_error()), Err(Some(libc::ENOTEMPTY)));
    // fallocate modes, through the kernel.
    let f = std::fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(m.join("f")).unwrap();
    for (mode, off, len) in [
        (FallocMode::ExtendSize, 0, 1 << 20),
        (FallocMode::KeepSize, 1 << 20, 1 << 20),
        (FallocMode::PunchHole, 4096, 8192),
        (FallocMode::ZeroRange, 0, 4096),
    ] {
        fallocate(&f, mode, off, len).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    f.write_all_at(b"data", 100).unwrap();
    f.sync_all().unwrap();
    let mut buf = [0u8; 4];
    f.read_exact_at(&mut buf, 100).unwrap();
    assert_eq!(&buf, b"data");
    drop(f);
    // inspect reads the committed state beside the mount that writes it.
    let beside = run(&["inspect", &s.vol(), "--files"]);
    assert!(beside.contains("/f: ") && beside.contains("/b: "), "{beside}");
    let (free, total) = statvfs(&std::fs::File::open(&m).unwrap()).unwrap();
    assert!(total > 0 && free > 0 && free <= total, "{free} of {total}");
    run(&["umount", &s.m()]);
    check_clean(&s);
    // Mounted again, everything is where it was.
    run(&["mount", &s.vol(), &s.m()]);
    assert_eq!(std::fs::read(m.join("b")).unwrap(), b"hello, volume");
    assert_eq!(std::fs::metadata(m.join("f")).unwrap().len(), 1 << 20);
    run(&["umount", &s.m()]);
    check_clean(&s);
}

#[test]
fn seed_000_fio_job_keeps_files_in_few_extents() {
    if !fuse_ready("seed_000_fio_job_keeps_files_in_few_extents") {
        return;
    }
    if !have("fio") {
        eprintln!("seed_000_fio_job_keeps_files_in_few_extents: skipped: no fio");
        return;
    }
    let s = Scratch::new("fio", "1G");
    run(&["mount", &s.vol(), &s.m()]);
    let out = Command::new("fio")
        .args([
            "--name=seed000",
            "--ioengine=falloc",
            "--rw=write",
            "--bs=4k",
            "--fallocate=none",
            "--file_append=1",
            "--thread",
            "--numjobs=8",
            "--size=64M",
            "--output-format=terse",
        ])
        .arg(format!("--directory={}", s.m()))
        .output()
        .unwrap();
    assert!(out.status.success(), "fio: {}", String::from_utf8_lossy(&out.stderr));
    run(&["umount", &s.m()]);
    check_clean(&s);
    let files = extents_per_file(&s);
    assert_eq!(files.len(), 8, "{files:?}");
    assert!(files.iter().all(|(_, n)| *n <= 8), "more than 8 extents: {files:?}");
}

#[test]
fn fallocate2_runs_on_a_mount() {
    if !fuse_ready("fallocate2_runs_on_a_mount") {
        return;
    }
    let s = Scratch::new("fallocate2", "512M");
    run(&["mount", &s.vol(), &s.m()]);
    // The anchors' C program where the checkout has it; the same loop in
    // Rust here either way.
    let anchors = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/anchors/fallocate2.c");
    if anchors.exists() && have("gcc") {
        let exe = s.0.join("fallocate2");
        let built = Command::new("gcc").args(["-O2", "-o"]).arg(&exe).arg(&anchors).status().unwrap();
        assert!(built.success());
        let out = Command::new(&exe).arg(s.mnt()).args(["2", "2"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("total_ops_per_s="), "{text}");
        eprintln!("fallocate2.c on the mount: {}", text.trim());
    }
    let stop = Instant::now() + Duration::from_secs(2);
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let path = s.mnt().join(format!("w{i}"));
            std::thread::spawn(move || {
                let f = std::fs::OpenOptions::new().create(true).truncate(true).write(true).open(path).unwrap();
                let mut ops = 0u64;
                while Instant::now() < stop {
                    for off in (0..1 << 20).step_by(8192) {
                        fallocate(&f, FallocMode::ExtendSize, off, 8192).unwrap();
                        ops += 1;
                    }
                    f.set_len(0).unwrap();
                }
                ops
            })
        })
        .collect();
    let ops: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(ops > 0);
    run(&["umount", &s.m()]);
    check_clean(&s);
}

/// Whether anything is mounted on `dir` (a canonical path).
fn mounted(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table.lines().any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

/// `mballoc mount --foreground` as a child of this test, once mounted.
fn mount_foreground(s: &Scratch, dir: &Path, extra: &[&str]) -> Child {
    let mut child = Command::new(BIN)
        .args(["mount", &s.vol(), dir.to_str().unwrap(), "--foreground"])
        .args(extra)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mounted(dir) {
        assert!(child.try_wait().unwrap().is_none(), "the mount exited");
        assert!(Instant::now() < deadline, "not mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// What every round of the kill loop promised to keep: its fsynced file
/// (with a hard link, a symbolic link and an extended attribute made
/// before the fsync), a file written and left idle for longer than the
/// commit interval, and one written as long ago and still open at the
/// kill.
fn assert_round_kept(mnt: &Path, r: u8) {
    let same = |path: &Path, byte: u8, len: usize, what: &str| {
        let got = std::fs::read(path).unwrap();
        let wrong = got.iter().filter(|&&b| b != byte).count();
        assert!(got.len() == len && wrong == 0, "round {r}: {what}: {} bytes, {wrong} wrong", got.len());
    };
    let synced = mnt.join(format!("synced{r}"));
    same(&synced, r, 300_000, "the fsynced file");
    let link = std::fs::metadata(mnt.join(format!("synced{r}.link"))).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::nlink(&link), 2, "round {r}: the hard link");
    assert_eq!(std::fs::read_link(mnt.join(format!("sym{r}"))).unwrap(), Path::new(&format!("synced{r}")));
    let x = Command::new("getfattr").args(["--only-values", "-n", "user.round"]).arg(&synced).output();
    if let Some(x) = x.ok().filter(|o| o.status.success()) {
        assert_eq!(x.stdout, vec![b'0' + r], "round {r}: the extended attribute");
    }
    same(&mnt.join(format!("idle{r}")), r + 100, 50_000, "data idle past the commit interval");
    same(&mnt.join(format!("open{r}")), r + 50, 40_000, "data of a file still open, written past the interval");
}

/// The durability line, tried: every byte written before an fsync, or
/// more than the commit interval before the kill, reads back exactly
/// after a kill -9 of the server. Rounds: `MBALLOC_KILL_ROUNDS` (3).
#[test]
fn a_killed_mount_keeps_what_its_durability_line_promises() {
    if !fuse_ready("a_killed_mount_keeps_what_its_durability_line_promises") {
        return;
    }
    let rounds: u8 = std::env::var("MBALLOC_KILL_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let s = Scratch::new("kill", "256M");
    let mnt = std::fs::canonicalize(s.mnt()).unwrap();
    let interval = Duration::from_secs(1);
    for round in 0..rounds {
        let mut daemon = mount_foreground(&s, &mnt, &["--commit", "1"]);
        for r in 0..round {
            assert_round_kept(&mnt, r);
        }
        let synced = mnt.join(format!("synced{round}"));
        let mut f = std::fs::File::create(&synced).unwrap();
        std::fs::hard_link(&synced, mnt.join(format!("synced{round}.link"))).unwrap();
        std::os::unix::fs::symlink(format!("synced{round}"), mnt.join(format!("sym{round}"))).unwrap();
        let _ = Command::new("setfattr").args(["-n", "user.round", "-v", &round.to_string()]).arg(&synced).status();
        f.write_all(&vec![round; 300_000]).unwrap();
        f.sync_all().unwrap();
        drop(f);
        // Written, closed, never fsynced; older than the interval at the kill.
        std::fs::write(mnt.join(format!("idle{round}")), vec![round + 100; 50_000]).unwrap();
        // Written as long ago, never fsynced, and open until the kill.
        let mut open = std::fs::File::create(mnt.join(format!("open{round}"))).unwrap();
        open.write_all(&vec![round + 50; 40_000]).unwrap();
        std::thread::sleep(interval * 2 + Duration::from_millis(300));
        // Writes in flight when the server dies: no promise either way.
        let writer = {
            let dir = mnt.clone();
            std::thread::spawn(move || {
                for i in 0.. {
                    let p = dir.join(format!("busy{round}-{i}"));
                    if std::fs::write(p, vec![7u8; 100_000]).is_err() {
                        break;
                    }
                }
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        daemon.kill().unwrap(); // SIGKILL
        daemon.wait().unwrap();
        writer.join().unwrap();
        drop(open);
        let _ = Command::new("fusermount3").args(["-u", "-z"]).arg(&mnt).status();
        // What the next mount will replay is no problem for check.
        let out = Command::new(BIN).args(["check", &s.vol()]).output().unwrap();
        assert!(out.status.success(), "check after a kill: {}", String::from_utf8_lossy(&out.stdout));
    }
    run(&["mount", &s.vol(), mnt.to_str().unwrap()]);
    for r in 0..rounds {
        assert_round_kept(&mnt, r);
    }
    run(&["umount", mnt.to_str().unwrap()]);
    check_clean(&s);
}

/// On a fuseblk mount (`-o loop`: the volume file behind a loop device)
/// the kernel passes `sync(2)` and `syncfs(2)` on to the server: data
/// written and then synced survives a kill -9 of the server, with the
/// commit interval off so that nothing else could have made it durable.
#[test]
fn sync_is_durable_on_a_fuseblk_mount() {
    if !fuse_ready("sync_is_durable_on_a_fuseblk_mount") {
        return;
    }
    if !Path::new("/dev/loop-control").exists() {
        eprintln!("sync_is_durable_on_a_fuseblk_mount: skipped: no loop devices");
        return;
    }
    let s = Scratch::new("fuseblk", "256M");
    let mnt = std::fs::canonicalize(s.mnt()).unwrap();
    for (round, how) in [["sync", "-f"], ["sync", ""]].iter().enumerate() {
        let mut daemon = mount_foreground(&s, &mnt, &["-o", "loop,commit=0"]);
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let line = table.lines().find(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap())).unwrap();
        assert!(line.contains(" - fuseblk.mballoc /dev/loop"), "{line}");
        for r in 0..round {
            assert_eq!(std::fs::read(mnt.join(format!("synced{r}"))).unwrap(), vec![r as u8 + 1; 300_000]);
        }
        std::fs::write(mnt.join(format!("synced{round}")), vec![round as u8 + 1; 300_000]).unwrap();
        // syncfs(2) on the mount (`sync -f DIR`), then sync(2) of everything.
        let mut cmd = Command::new(how[0]);
        if !how[1].is_empty() {
            cmd.arg(how[1]).arg(&mnt);
        }
        assert!(cmd.status().unwrap().success(), "{how:?}");
        daemon.kill().unwrap(); // SIGKILL
        daemon.wait().unwrap();
        let _ = Command::new("umount").arg("-l").arg(&mnt).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while mounted(&mnt) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    run(&["mount", &s.vol(), mnt.to_str().unwrap()]);
    for r in 0..2 {
        assert_eq!(std::fs::read(mnt.join(format!("synced{r}"))).unwrap(), vec![r as u8 + 1; 300_000]);
    }
    run(&["umount", mnt.to_str().unwrap()]);
    check_clean(&s);
}

/// Debian's stress-ng file-system stressors with `--verify`, a bounded
/// time each, on the mount: no error, and a clean volume afterwards.
#[test]
fn stress_ng_file_system_stressors_verify_on_the_mount() {
    if !fuse_ready("stress_ng_file_system_stressors_verify_on_the_mount") {
        return;
    }
    if !have("stress-ng") {
        eprintln!("stress_ng_file_system_stressors_verify_on_the_mount: skipped: no stress-ng");
        return;
    }
    let s = Scratch::new("stress", "1G");
    let mnt = std::fs::canonicalize(s.mnt()).unwrap();
    run(&["mount", &s.vol(), mnt.to_str().unwrap()]);
    let secs = std::env::var("MBALLOC_STRESS_SECS").unwrap_or_else(|_| "3".into());
    let stressors = ["dir", "dentry", "link", "symlink", "rename", "fallocate", "hdd", "xattr", "getdent", "filename"];
    let mut args: Vec<String> = Vec::new();
    for st in stressors {
        args.extend([format!("--{st}"), "1".into()]);
    }
    args.extend(["--verify".into(), "-t".into(), format!("{secs}s"), "--temp-path".into(), mnt.display().to_string()]);
    let out = Command::new("stress-ng").args(&args).current_dir(&mnt).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    run(&["umount", mnt.to_str().unwrap()]);
    assert!(out.status.success(), "stress-ng failed:\n{text}");
    assert!(text.contains("successful run completed"), "{text}");
    assert!(!text.contains("fail"), "{text}");
    check_clean(&s);
}

#[test]
fn sigterm_unmounts_and_closes_the_volume() {
    if !fuse_ready("sigterm_unmounts_and_closes_the_volume") {
        return;
    }
    let s = Scratch::new("sigterm", "128M");
    let mnt = std::fs::canonicalize(s.mnt()).unwrap();
    let mut daemon = mount_foreground(&s, &mnt, &[]);
    std::fs::write(mnt.join("kept"), vec![5u8; 70_000]).unwrap(); // no fsync
    let sent = Command::new("kill").args(["-TERM", &daemon.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let status = daemon.wait().unwrap();
    assert!(status.success(), "the mount exited with {status}");
    assert!(!mounted(&mnt), "still mounted");
    // Closed cleanly: nothing awaits replay, and the unsynced write is home.
    let out = run(&["check", &s.vol()]);
    assert!(out.contains(": clean,") && !out.contains("await replay"), "{out}");
    run(&["mount", &s.vol(), mnt.to_str().unwrap()]);
    assert_eq!(std::fs::read(mnt.join("kept")).unwrap(), vec![5u8; 70_000]);
    run(&["umount", mnt.to_str().unwrap()]);
}

#[test]
fn the_lab_runs_scenarios_through_a_mount() {
    if !fuse_ready("the_lab_runs_scenarios_through_a_mount") {
        return;
    }
    let out = std::env::temp_dir().join(format!("mballoc-lab-mount-{}", std::process::id()));
    let o = Command::new(BIN)
        .args(["lab", "run", "fio-falloc", "--quick", "--backends", "engine,mount", "--json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["scenarios"][0]["rows"].as_array().unwrap();
    let row = rows.iter().find(|r| r["backend"] == "mount").unwrap_or_else(|| panic!("no mount row: {doc}"));
    let m = &row["metrics"];
    // The layouts and free space come from the volume after an unmount:
    // 64 files, each in a few extents, and the free space measured.
    assert_eq!(m["files"], 64, "{row}");
    assert!(m["max_extents"].as_u64().is_some_and(|n| n <= 8), "{row}");
    assert!(m["free_extents"].as_u64().is_some_and(|n| n > 0), "{row}");
    assert!(m["mib_per_s"].as_f64().is_some_and(|x| x > 0.0), "{row}");
    // Nothing is left mounted or on /dev/shm.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains("mballoc-lab-mount-"), "{mounts}");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("mballoc-lab-mount-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn an_interrupted_lab_run_unmounts_its_volumes() {
    if !fuse_ready("an_interrupted_lab_run_unmounts_its_volumes") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("mballoc-lab-mount-sigint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wl = dir.join("w.toml");
    std::fs::write(
        &wl,
        "name = 'long'\nvolume = '256M'\nseconds = 60\n[[job]]\nname = 'j'\nsetup = [{ op = 'create' }]\n\
         steps = [{ op = 'fallocate', len = '4K', count = 64 }, { op = 'truncate' }]\nrepeat = 0\n",
    )
    .unwrap();
    let child = Command::new(BIN)
        .args(["lab", "workload", wl.to_str().unwrap(), "--backends", "mount", "--out", dir.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let tag = format!("mballoc-lab-mount-{}-", child.id());
    let ours = |tag: &str| {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let files = std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(tag))
            .count();
        (mounts.contains(tag), files)
    };
    let t0 = std::time::Instant::now();
    while !ours(&tag).0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "never mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let t0 = std::time::Instant::now();
    while ours(&tag) != (false, 0) {
        assert!(t0.elapsed() < Duration::from_secs(10), "left behind: {:?}\n{err}", ours(&tag));
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
