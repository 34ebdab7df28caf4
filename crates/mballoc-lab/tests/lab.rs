//! Every scenario end to end at quick size on the engine, the JSON shape,
//! and, as root, the kernel ext4 backend: a scenario on it, and our
//! e2freefrag rendering of its GETFSMAP map against e2freefrag's own
//! output on the unmounted image.

use mballoc_lab::backend::{BackendKind, Target};
use mballoc_lab::loop_mount::KernelFs;
use mballoc_lab::report::Report;
use mballoc_lab::runner;
use mballoc_lab::scenarios::{self, Env};
use mballoc_lab::workload::{Op, OpKind, Workload};
use serde_json::Value;

/// The metric keys each scenario must report.
const REQUIRED: &[(&str, &[&str])] = &[
    ("fallocate2", &["workers", "ops_per_s"]),
    ("fio-falloc", &["avg_extents_per_file", "free_extents", "avg_free_extent_kib", "e4defrag_score", "ops_per_s"]),
    ("aged", &["aged_vs_fresh", "extents", "extents_scanned_per_request"]),
    ("small-files-fragmented", &["files_per_s", "extents_scanned", "cr_hits"]),
    ("multiblock-cost", &["size_kib", "ns_per_block"]),
    ("fallocate2-core", &["workers", "ops_per_s"]),
    ("fragmented-core", &["requests", "ns_per_request"]),
    ("aged-at-scale", &["write_s", "extents_scanned_per_request", "groups_built", "used_pct"]),
    ("aging", &["layout_score", "avg_extents_per_file", "files"]),
    ("folio-write", &["bs_kib", "iops", "mib_per_s"]),
];

fn engine_env() -> Env {
    Env::new(true, 7, vec![BackendKind::Engine])
}

#[test]
fn every_scenario_runs_on_the_engine_and_the_json_has_its_keys() {
    let env = engine_env();
    let mut report = Report { header: mballoc_lab::report::Header::now(), seed: 7, quick: true, scenarios: vec![] };
    for s in scenarios::ALL {
        let r = (s.run)(&env);
        assert!(!r.rows.is_empty(), "{} produced no rows: {:?}", s.name, r.notes);
        assert!(!r.plots.is_empty(), "{} has no plot", s.name);
        assert!(r.rows.iter().all(|row| row.backend == "engine"));
        report.scenarios.push(r);
    }
    let doc: Value = serde_json::from_str(&report.json()).expect("valid JSON");
    let list = doc["scenarios"].as_array().expect("scenarios array");
    assert_eq!(list.len(), scenarios::ALL.len());
    for sc in list {
        let name = sc["name"].as_str().expect("name");
        let keys = REQUIRED.iter().find(|r| r.0 == name).expect("known scenario").1;
        for row in sc["rows"].as_array().expect("rows") {
            assert!(row["backend"].is_string() && row["variant"].is_string(), "{row}");
            for k in keys {
                let v = &row["metrics"][k];
                assert!(v.is_number() || v.is_array(), "{name}: metric {k} missing in {row}");
            }
        }
        if name == "small-files-fragmented" {
            assert_eq!(sc["rows"][0]["metrics"]["cr_hits"].as_array().map(Vec::len), Some(5));
        }
    }
    let html = report.html();
    assert!(html.contains("<svg") && html.contains("fio-falloc"));
}

#[test]
fn engine_targets_hold_their_marks() {
    let env = engine_env();
    // Seed 002: the 12 MiB file is one allocation with delayed allocation.
    let mb = scenarios::multiblock::run(&env);
    let big = mb.rows.iter().find(|r| r.variant == "delalloc" && r.num("size_kib") == Some(12288.0)).unwrap();
    assert_eq!(big.num("alloc_calls_per_file"), Some(1.0));
    // Seed 003: trimming to the minimum finds a fragment by index.
    let aged = scenarios::aged::run(&env);
    let row = aged.rows.iter().find(|r| r.variant.contains("trim to minimum")).unwrap();
    let scanned = row.num("extents_scanned_per_request").unwrap();
    assert!(scanned <= 4.0, "{scanned} extents scanned per request");
    let used = row.num("used_pct_before").unwrap();
    assert!((76.0..=81.0).contains(&used), "aged to {used}%");
}

fn root() -> bool {
    mballoc_testkit::can_loop_mount()
}

#[test]
fn a_scenario_runs_on_kernel_ext4() {
    if !root() {
        eprintln!("skipped: needs root and loop devices");
        return;
    }
    let env = Env::new(true, 1, vec![BackendKind::Engine, BackendKind::Kernel(KernelFs::Ext4)]);
    let r = scenarios::fallocate2::run_with(&env, &[1, 2], 0.1, 256 << 20);
    let ext4: Vec<_> = r.rows.iter().filter(|r| r.backend == "ext4").collect();
    assert_eq!(ext4.len(), 2, "{:?} {:?}", r.skipped, r.notes);
    assert!(ext4.iter().all(|r| r.num("ops_per_s").unwrap() > 0.0));
}

#[test]
fn freefrag_layout_matches_e2freefrag_on_a_kernel_ext4_image() {
    if !root() {
        eprintln!("skipped: needs root and loop devices");
        return;
    }
    let w = Workload::from_toml(
        "name = 'holes'\nvolume = '256M'\n[[job]]\nname = 'f'\nfiles = 3\nsteps = [{ op = 'create' }]",
    )
    .unwrap();
    let t = scenarios::kernel(KernelFs::Ext4, &w, "").expect("ext4 mounts as root");
    // Files with holes of several sizes, some crossing group boundaries.
    let mut ops = vec![];
    for f in 0..3u32 {
        ops.push(Op { kind: OpKind::Create, file: f, offset: 0, len: 0, to: 0 });
        ops.push(Op { kind: OpKind::Fallocate, file: f, offset: 0, len: 48 << 20, to: 0 });
    }
    for (i, len) in [4096u64, 8192, 12288, 65536, 1 << 20, 5 << 20].iter().enumerate() {
        ops.push(Op {
            kind: OpKind::Punch,
            file: (i % 3) as u32,
            offset: (i as u64 + 1) * (6 << 20),
            len: *len,
            to: 0,
        });
    }
    runner::apply_all(&t, ops).unwrap();
    for f in 0..3 {
        runner::apply_all(&t, [Op { kind: OpKind::Close, file: f, offset: 0, len: 0, to: 0 }]).unwrap();
    }
    t.sync();
    let ours = t.free_space().unwrap().histogram();
    let image = t.unmount().unwrap();
    let device = image.path().display().to_string();
    let theirs = mballoc_lab::loop_mount::output(std::process::Command::new("e2freefrag").arg(image.path())).unwrap();
    assert_eq!(ours.render(&device), theirs);
}

#[test]
fn scenarios_start_from_an_ext4_image() {
    if std::process::Command::new("mke2fs").arg("-V").output().is_err() {
        eprintln!("skipped: mke2fs not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("mballoc-lab-image-{}", std::process::id()));
    let tree = dir.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    for i in 0..8u8 {
        std::fs::write(tree.join(format!("f{i}")), vec![i + 1; 3 << 20]).unwrap();
    }
    let img = dir.join("img");
    let ok = std::process::Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-b", "4096", "-d"])
        .arg(&tree)
        .arg(&img)
        .arg("1G")
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let start = scenarios::StartImage::open(&img).expect("a fresh mke2fs image loads");
    assert_eq!((start.bytes, start.block_size), (1 << 30, 4096));
    let env = engine_env().start_from(start);
    let rep = (scenarios::find("aged").unwrap().run)(&env);
    // The aged volume is the image (24 MiB of files plus metadata), the
    // fresh one an empty volume of its size.
    let row = rep.rows.iter().find(|r| r.variant == "optimize_scan").expect("an optimize_scan row");
    let used = row.num("used_pct_before").unwrap();
    assert!(used > 2.0 && used < 10.0, "image used {used}%");
    assert!(row.no_data && row.num("placed_aged_mib_per_s").unwrap() > 0.0);
    let rep = (scenarios::find("small-files-fragmented").unwrap().run)(&env);
    assert!(!rep.rows.is_empty(), "{:?}", rep.notes);
    let _ = std::fs::remove_dir_all(&dir);
    // A file that is not an ext4 image is refused up front.
    assert!(scenarios::StartImage::open(std::path::Path::new("/dev/null")).is_err());
}

#[test]
fn threads_report_their_cpu_time_and_pinned_threads_run() {
    use mballoc_lab::workload::Interleave;
    for interleave in [Interleave::Threads, Interleave::PinnedThreads] {
        let mut w = scenarios::fallocate2::workload(4, 0.05, 64 << 20);
        w.interleave = interleave;
        let t = scenarios::engine(&w, mballoc_lab::backend::WriteMode::Delalloc, |_| {}).unwrap();
        let r = runner::run(
            &t,
            &w.streams(),
            w.interleave,
            Some(std::time::Duration::from_millis(50)),
            &indicatif::ProgressBar::hidden(),
        )
        .unwrap();
        assert_eq!(r.data_ops.len(), 4);
        assert!(r.total_data_ops() > 0, "{interleave:?}");
        if runner::thread_cpu_ns().is_some() {
            assert_eq!(r.cpu_ns.len(), 4);
            let f = r.cpu_fairness().expect("every thread ran");
            assert!(f > 0.0 && f <= 1.0, "{interleave:?}: {f}");
        }
    }
    // The scheduler control counts work in every thread it starts.
    let c = runner::spin_control(3, Interleave::PinnedThreads, std::time::Duration::from_millis(30));
    assert_eq!(c.data_ops.len(), 3);
    assert!(c.total_data_ops() > 0);
}

#[test]
fn cpu_fairness_compares_rates_per_cpu_second() {
    let r = runner::RunStats {
        elapsed: std::time::Duration::from_secs(1),
        data_ops: vec![100, 400],
        bytes: 0,
        creates: 0,
        cpu_ns: vec![1_000, 2_000],
    };
    assert_eq!(r.fairness(), 0.25);
    assert_eq!(r.cpu_fairness(), Some(0.5));
    assert_eq!(runner::RunStats { cpu_ns: vec![], ..r.clone() }.cpu_fairness(), None);
    assert_eq!(runner::RunStats { cpu_ns: vec![0, 5], ..r }.cpu_fairness(), None);
}

#[test]
fn settings_reach_every_engine_row() {
    let per_file = |env: &Env| {
        let r = scenarios::fio_falloc::run(env);
        assert_eq!(r.statistics.as_deref(), Some("mb_stats=0 on every backend"));
        r.rows
            .iter()
            .find(|row| row.variant == "per-file placement, optimize_scan=1")
            .and_then(|row| row.num("avg_extents_per_file"))
            .expect("the per-file row")
    };
    let mut s = mballoc_lab::settings::Settings::default();
    s.set_str("engine.stream_placement=kernel").unwrap();
    // ext4's placement of interleaved appends splits every file into many
    // extents; the engine's own keeps each in a few. The appenders are
    // threads: on a loaded machine the scheduler may run them one after
    // another, and then nothing interleaves and both keep files whole. So
    // the forced placement must show in one of three runs.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let own = per_file(&engine_env());
        let forced = per_file(&engine_env().with_settings(s.clone()));
        assert!(own <= 8.0, "own placement: {own} extents per file");
        seen.push((own, forced));
        if forced > 2.0 * own {
            return;
        }
    }
    panic!("ext4 placement forced never split files: (own, forced) extents per file {seen:?}");
}

#[test]
fn the_profile_comes_first_and_the_variant_and_statistics_after() {
    let mut s = mballoc_lab::settings::Settings::default();
    s.set_str("engine.profile=kernel").unwrap();
    s.set_str("engine.mb_max_to_scan=50").unwrap();
    let env = engine_env().with_settings(s);
    let v =
        scenarios::Variant::engine("linear", |c| c.placement.tunables.mb_optimize_scan = mballoc::OptimizeScan::Off)
            .under(scenarios::Stats::On, &env);
    let mut cfg = mballoc_fs::FsConfig::new(mballoc::Geometry::new(4096, 1 << 18).unwrap());
    v.configure(&mut cfg);
    assert_eq!(cfg.behaviour.sync_order, mballoc_fs::SyncOrder::Dirtied, "the kernel profile");
    assert_eq!(cfg.placement.tunables.mb_optimize_scan, mballoc::OptimizeScan::Off, "the variant's own setting");
    assert!(cfg.placement.tunables.mb_stats, "the scenario's statistics setting");
    assert_eq!(cfg.placement.tunables.mb_max_to_scan, 50, "the run's setting");
}
