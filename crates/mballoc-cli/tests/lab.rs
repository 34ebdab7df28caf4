//! `mballoc lab` from the command line: settings from a workload's tables
//! and `--set`, sweeps, repeats, CSV, the exit status when a workload
//! fails everywhere, and (as root) the cleanup after an interrupt.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn mballoc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mballoc")).args(args).output().expect("runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mballoc-lab-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const APPENDERS: &str = r#"
name = "appenders"
volume = "256M"
interleave = "in-turn"
[[job]]
name = "a"
clones = 8
setup = [{ op = "create" }]
steps = [{ op = "fallocate", len = "4K", count = 256 }]
[engine]
mb_optimize_scan = 1
"#;

#[test]
fn a_workload_runs_with_settings_sweeps_repeats_and_csv() {
    let dir = scratch("sweep");
    let wl = dir.join("w.toml");
    std::fs::write(&wl, APPENDERS).unwrap();
    let csv = dir.join("out.csv");
    let out = dir.join("report");
    let o = mballoc(&[
        "lab",
        "workload",
        wl.to_str().unwrap(),
        "--backends",
        "engine",
        "--set",
        "engine.mb_max_to_scan=50",
        "--sweep",
        "engine.stream_placement=per-file,kernel",
        "--repeat",
        "2",
        "--csv",
        csv.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("engine.mb_optimize_scan=1, engine.mb_max_to_scan=50"), "{t}");
    assert!(t.contains("engine.stream_placement"), "the swept setting is a column: {t}");
    // Progress without a terminal: one line per scenario run.
    assert!(t.contains("scenario 1 of 1: appenders, engine.stream_placement=kernel, repeat 2 of 2"), "{t}");
    let c = std::fs::read_to_string(&csv).unwrap();
    assert!(c.starts_with("scenario,backend,variant,settings,swept,repeat,metric,value\n"), "{c}");
    // Each row names every setting in force on its backend, then the swept one.
    assert!(
        c.contains("mb_optimize_scan=1;mb_max_to_scan=50;stream_placement=kernel,engine.stream_placement=kernel,"),
        "{c}"
    );
    for want in
        ["engine.stream_placement=per-file,1,ops_per_s", "engine.stream_placement=kernel,2,avg_extents_per_file"]
    {
        assert!(c.contains(want), "{want} not in {c}");
    }
    // Per-file placement keeps the interleaved appenders in few extents;
    // ext4's placement does not.
    let extents = |placement: &str| -> f64 {
        c.lines()
            .filter(|l| l.contains(&format!("stream_placement={placement},")) && l.contains(",avg_extents_per_file,"))
            .map(|l| l.rsplit(',').next().unwrap().parse::<f64>().unwrap())
            .fold(0.0, f64::max)
    };
    assert!(extents("per-file") < extents("kernel"), "{c}");
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("by engine.stream_placement") || html.contains("<svg"), "plots");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_settings_are_refused_before_anything_runs() {
    let dir = scratch("bad");
    let wl = dir.join("w.toml");
    std::fs::write(&wl, APPENDERS).unwrap();
    let w = wl.to_str().unwrap();
    for (args, want) in [
        (vec!["--set", "engine.mb_max_to_scam=5"], "no engine setting \"mb_max_to_scam\""),
        (vec!["--set", "nodelalloc"], "not of the form scope.key=value"),
        (vec!["--sweep", "engine.mb_max_to_scan=50,lots"], "\"lots\" is not a whole number"),
        (vec!["--repeat", "0"], "0 is not in 1..=1000"),
    ] {
        let mut a = vec!["lab", "workload", w, "--backends", "engine"];
        a.extend(args);
        let o = mballoc(&a);
        let t = text(&o);
        assert!(!o.status.success(), "{a:?}: {t}");
        assert!(t.contains(want), "{a:?}: {t}");
        assert!(!t.contains("scenario 1 of"), "nothing ran: {t}");
    }
    let bad_table = APPENDERS.replace("mb_optimize_scan = 1", "mb_optimize_scan = 7");
    std::fs::write(&wl, bad_table).unwrap();
    let o = mballoc(&["lab", "workload", w, "--backends", "engine"]);
    assert!(!o.status.success() && text(&o).contains("mb_optimize_scan"), "{}", text(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_workload_that_fails_on_every_backend_exits_nonzero() {
    let dir = scratch("fail");
    let wl = dir.join("w.toml");
    // Writes to a file that was never created.
    std::fs::write(
        &wl,
        "name = 'broken'\nvolume = '64M'\n[[job]]\nname = 'j'\nsteps = [{ op = 'write', len = '4K' }]\n",
    )
    .unwrap();
    let o = mballoc(&["lab", "workload", wl.to_str().unwrap(), "--backends", "engine", "--out", dir.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("broken failed on every backend"), "{t}");
    // Each error once, not repeated down its chain.
    let line = t.lines().find(|l| l.contains("engine default profile:")).expect("the failure note");
    assert_eq!(line.matches("not open").count(), 1, "{line}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lab_settings_lists_every_key() {
    let o = mballoc(&["lab", "settings"]);
    assert!(o.status.success());
    let t = text(&o);
    for key in ["engine.KEY", "ext4.KNOB", "workload.KEY", "mb_max_to_scan", "prealloc_table", "mount", "interleave"] {
        assert!(t.contains(key), "{key}: {t}");
    }
    // Defaults, kernel-profile values, units and ranges.
    let line = t.lines().find(|l| l.trim_start().starts_with("locality_groups")).expect("locality_groups");
    assert!(line.contains("groups") && line.contains("1 .."), "{line}");
    let line = t.lines().find(|l| l.trim_start().starts_with("mb_max_to_scan")).expect("mb_max_to_scan");
    assert!(line.contains("200") && line.contains("extents"), "{line}");
}

fn lab_leftovers(pid: u32) -> Vec<String> {
    let tag = format!("-{pid}-");
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.retain(|n| n.starts_with("mballoc-lab-") && n.contains(&tag));
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    v.extend(mounts.lines().filter(|l| l.contains("/dev/shm/mballoc-lab-") && l.contains(&tag)).map(String::from));
    v
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_interrupted_run_leaves_no_mount_image_or_volume() {
    let root = mballoc_lab::sys::is_root();
    if !root || !Path::new("/sbin/mkfs.ext4").exists() && !Path::new("/usr/sbin/mkfs.ext4").exists() {
        eprintln!("skipped: needs root and mkfs.ext4 for a loop-mounted ext4");
        return;
    }
    let dir = scratch("sigint");
    let wl = dir.join("w.toml");
    std::fs::write(
        &wl,
        "name = 'long'\nvolume = '64M'\nseconds = 60\n[[job]]\nname = 'j'\nsetup = [{ op = 'create' }]\n\
         steps = [{ op = 'fallocate', len = '4K', count = 64 }, { op = 'truncate' }]\nrepeat = 0\n",
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_mballoc"))
        .args(["lab", "workload", wl.to_str().unwrap(), "--backends", "ext4", "--out", dir.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mounted = |pid| {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("/dev/shm/mballoc-lab-ext4-") && l.contains(&format!("-{pid}-")))
    };
    wait_for("the ext4 loop mount", Duration::from_secs(60), || mounted(pid));
    let st = Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
    assert!(st.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("cleaning up") && err.contains("unmounted"), "{err}");
    // The lazy unmount lets go of the loop device once the process's
    // descriptors close, which they now have.
    wait_for("the mount to go", Duration::from_secs(10), || lab_leftovers(pid).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_interrupted_fidelity_run_turns_its_tracepoints_off() {
    use std::io::BufRead;
    let enable = Path::new("/sys/kernel/tracing/events/ext4/ext4_request_blocks/enable");
    if !mballoc_lab::sys::is_root() || !enable.exists() {
        eprintln!("skipped: needs root and ext4's tracepoints");
        return;
    }
    let dir = scratch("fidelity-sigint");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mballoc"))
        .args(["lab", "fidelity", "--quick", "--out", dir.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while err.read_line(&mut line).unwrap() > 0 && !line.contains("case 2 of") {
        line.clear();
    }
    // The second case is under way: its image mounted, its events traced.
    std::thread::sleep(Duration::from_millis(30));
    assert!(Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap().success());
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut rest);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    // Recordings take turns on tracefs through this lock; holding it, no
    // other test's recording has the events on.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/mballoc-lab-tracefs.lock")
        .unwrap();
    lock.lock().unwrap();
    assert_eq!(std::fs::read_to_string(enable).unwrap().trim(), "0", "{rest}");
    drop(lock);
    wait_for("the mount to go", Duration::from_secs(10), || lab_leftovers(pid).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sweeps_run_only_the_backends_their_keys_configure() {
    let dir = scratch("scoped");
    let wl = dir.join("w.toml");
    std::fs::write(&wl, APPENDERS).unwrap();
    let root = mballoc_testkit::can_loop_mount();
    let backends = if root { "engine,ext4" } else { "engine" };
    let o = mballoc(&[
        "lab",
        "workload",
        wl.to_str().unwrap(),
        "--backends",
        backends,
        "--sweep",
        "engine.mb_max_to_scan=50,200",
        "--sweep",
        "ext4.mb_max_to_scan=50,200",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["scenarios"][0]["rows"].as_array().unwrap();
    let count = |b: &str| rows.iter().filter(|r| r["backend"] == b).count();
    // The sum of the sweeps, not their product.
    assert_eq!(count("engine"), 2, "{rows:?}");
    if root {
        assert_eq!(count("ext4"), 2, "{rows:?}");
        assert!(rows.iter().all(|r| r["point"].as_object().unwrap().len() == 1), "{rows:?}");
    } else {
        eprintln!("ext4 half skipped: needs root and loop devices");
    }
    assert!(doc["header"]["command"].as_str().unwrap().contains("--sweep engine.mb_max_to_scan=50,200"), "{doc}");
    // Zipped keys of one scope need as many values each.
    let o = mballoc(&[
        "lab",
        "workload",
        wl.to_str().unwrap(),
        "--backends",
        "engine",
        "--sweep",
        "engine.mb_max_to_scan=50,200",
        "--sweep",
        "engine.mb_min_to_scan=5",
        "--sweep-mode",
        "zip",
    ]);
    assert!(!o.status.success() && text(&o).contains("as many"), "{}", text(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kernel_settings_are_checked_before_anything_runs() {
    let dir = scratch("kernel-bad");
    let wl = dir.join("w.toml");
    std::fs::write(&wl, APPENDERS).unwrap();
    let w = wl.to_str().unwrap();
    let o = mballoc(&["lab", "workload", w, "--backends", "engine,ext4", "--set", "ext4.mb_max_to_scam=5"]);
    assert!(!o.status.success() && text(&o).contains("no ext4 knob"), "{}", text(&o));
    if !mballoc_testkit::can_loop_mount() {
        eprintln!("skipped the kernel's own check: needs root and loop devices");
        return;
    }
    for (arg, want) in [("ext4.mkfs=-O no_such_feature", "ext4.mkfs"), ("ext4.mount=no_such_option", "ext4.mount")] {
        let o = mballoc(&["lab", "workload", w, "--backends", "engine,ext4", "--set", arg]);
        let t = text(&o);
        assert!(!o.status.success() && t.contains(want), "{arg}: {t}");
        assert!(!t.contains("scenario 1 of"), "nothing ran: {t}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_workload_op_runs_on_every_backend() {
    let dir = scratch("ops");
    let wl = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/workloads/publish.toml");
    let root = mballoc_testkit::can_loop_mount();
    let fuse = root && std::path::Path::new("/dev/fuse").exists();
    let mut backends = vec!["engine"];
    if root {
        backends.extend(["ext4", "xfs", "btrfs"]);
    } else {
        eprintln!("kernel backends skipped: needs root and loop devices");
    }
    if fuse {
        backends.push("mount");
    } else {
        eprintln!("mount backend skipped: needs root and /dev/fuse");
    }
    let list = backends.join(",");
    let o = mballoc(&["lab", "workload", wl, "--backends", &list, "--json", "--out", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sc = &doc["scenarios"][0];
    let skipped: Vec<String> =
        sc["skipped"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
    assert_eq!(sc["failures"], 0, "{}", text(&o));
    for b in &backends {
        if skipped.iter().any(|s| s.starts_with(&format!("{b}:"))) {
            eprintln!("{b} skipped here: {skipped:?}");
            continue;
        }
        let row = sc["rows"].as_array().unwrap().iter().find(|r| r["backend"] == *b).unwrap_or_else(|| panic!("{b}"));
        // What is left: the four archive links (the readers unlinked the
        // published names), each 768 KiB written in three advancing rounds.
        assert_eq!(row["metrics"]["files"], 4, "{b}: {row}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fidelity_refuses_what_the_profile_cannot_follow_before_running() {
    for (arg, want) in [
        ("ext4.mkfs=-O quota", "feature"),
        ("ext4.mkfs=-E discard", "extended option"),
        ("engine.mb_max_to_scan=5", "only ext4"),
        ("ext4.mount=commit=5", "timer"),
    ] {
        let o = mballoc(&["lab", "fidelity", "--quick", "--set", arg]);
        let t = text(&o);
        assert!(!o.status.success() && t.contains(want), "{arg}: {t}");
        assert!(!t.contains("case 1 of"), "nothing ran: {t}");
    }
    // A workload's own table is checked the same way.
    let dir = scratch("fidelity-table");
    let wl = dir.join("w.toml");
    let plain = APPENDERS.replace("[engine]\nmb_optimize_scan = 1", "[ext4]\nmount = 'data=journal'");
    std::fs::write(&wl, plain).unwrap();
    let o = mballoc(&["lab", "fidelity", wl.to_str().unwrap()]);
    let t = text(&o);
    // Without root the run is skipped before the workload is read.
    if mballoc_testkit::can_loop_mount() {
        assert!(!o.status.success() && t.contains("data=journal"), "{t}");
    } else {
        eprintln!("skipped the workload half: needs root and loop devices");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `lab record` then `lab replay --require 100` on what it recorded: a
/// program's writes on a fresh 1 KiB-block volume (root; skipped
/// otherwise).
#[test]
fn a_recorded_program_replays_on_the_engine() {
    if !mballoc_testkit::can_loop_mount() || !std::path::Path::new("/sys/kernel/tracing").exists() {
        eprintln!("skipped: needs root, loop devices and tracefs");
        return;
    }
    let dir = mballoc_testkit::Scratch::new("record");
    let out = dir.path().join("rec");
    let o = mballoc(&[
        "lab",
        "record",
        "--out",
        out.to_str().unwrap(),
        "--size",
        "128M",
        "--block-size",
        "1024",
        "--",
        "sh",
        "-c",
        "for i in 1 2 3 4 5 6 7 8; do head -c $((i * 40000)) /dev/zero > f$i; done; sync; rm f3 f5; \
         for i in 1 2 3 4; do head -c 300000 /dev/zero > g$i; done; mv g1 g2; ln g3 h3",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("recorded"), "{}", text(&o));
    for f in ["image.qcow2", "trace", "record.toml", "output"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let o = mballoc(&["lab", "replay", out.to_str().unwrap(), "--require", "100"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("first divergence: none"), "{}", text(&o));
    // With strace, the program's operations run again through ext4 and
    // the engine's file layer: every file identical.
    if out.join("ops.strace").exists() {
        let report = dir.path().join("report");
        let o = mballoc(&["lab", "fidelity", out.to_str().unwrap(), "--out", report.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(text(&o).contains("files identical 10/10"), "{}", text(&o));
    } else {
        eprintln!("strace is not installed: the file-layer half skipped");
    }
    // Nothing to run, and a refused setting, are errors before anything runs.
    let o = mballoc(&["lab", "record", "--set", "engine.mb_max_to_scan=5", "--", "true"]);
    assert!(!o.status.success() && text(&o).contains("only ext4"), "{}", text(&o));
}

#[test]
fn every_scenario_listed_can_be_shown() {
    let list = mballoc(&["lab", "list"]);
    assert!(list.status.success(), "{}", text(&list));
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert!(names.len() >= 10 && names.iter().any(|n| n == "aging"), "{names:?}");
    for name in &names {
        let shown = mballoc(&["lab", "show", name]);
        assert!(shown.status.success() && !shown.stdout.is_empty(), "lab show {name}: {}", text(&shown));
    }
}

#[test]
fn kernel_diff_takes_a_workload_of_ones_own() {
    let dir = scratch("kernel-diff");
    let w = dir.join("appenders.toml");
    // The appenders without their [engine] table: fidelity cases take
    // only ext4 settings.
    std::fs::write(&w, APPENDERS.split("[engine]").next().unwrap()).unwrap();
    let w = w.to_str().unwrap();
    // --case names built-in cases: refused beside a workload, root or not.
    let both = mballoc(&["lab", "kernel-diff", "6.1", "6.18", w, "--case", "small-files"]);
    if !mballoc_lab::sys::is_root() {
        println!("skipped kernel_diff_takes_a_workload_of_ones_own: needs root for the case's image");
        return;
    }
    assert!(!both.status.success() && text(&both).contains("not both"), "{}", text(&both));
    let o = mballoc(&["lab", "kernel-diff", "6.1", "6.18", w, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let diffs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let diffs = diffs.as_array().unwrap();
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0]["case"], "appenders");
    // 6.1 and 6.18 differ in seven rules (CR_BEST_AVAIL_LEN, short runs,
    // the stripe's units, the punch, large folios, stream goals per CPU,
    // the order lists); each is named with its verdict.
    assert_eq!(diffs[0]["rules"].as_array().unwrap().len(), 7, "{}", diffs[0]["rules"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader that closes the pipe early (`mballoc lab settings | head`)
/// ends the command as SIGPIPE ends any tool: no panic message.
#[test]
fn a_closed_pipe_ends_a_command_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let mut child = Command::new(env!("CARGO_BIN_EXE_mballoc"))
        .args(["lab", "settings"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    // Closed before the command writes its first line.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("waits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success() || out.status.signal() == Some(libc::SIGPIPE), "{:?}: {stderr}", out.status);
}
