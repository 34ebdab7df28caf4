//! Seed 000's will-it-scale `fallocate2`: each worker appends 8 KiB with
//! `fallocate` up to 1 MiB, truncates to 0, repeats; one op is one
//! fallocate call, the truncates inside the time. Engine scalable vs legacy
//! (the seed's base) and the kernel file systems, by worker count.

use super::{for_each_variant, kernel_variants, measure, Env, Variant};
use crate::report::{col, Plot, Row, ScenarioReport};
use crate::workload::{Interleave, Job, OpKind, Size, Step, Workload};
use mballoc::Concurrency;
use mballoc_fs::StreamPlacement;

/// One line for `lab list`.
pub const ABOUT: &str =
    "seed 000's will-it-scale loop (8 KiB fallocate appends to 1 MiB, truncate, repeat) by workers: engine scalable vs legacy, kernel file systems";

/// The workload for `workers` tasks over `seconds`.
pub fn workload(workers: u32, seconds: f64, volume: u64) -> Workload {
    Workload {
        name: "fallocate2".into(),
        volume: Size(volume),
        block_size: 4096,
        interleave: Interleave::Threads,
        image: None,
        seconds: Some(seconds),
        jobs: vec![Job {
            name: "fallocate2".into(),
            clones: workers,
            files: 1,
            setup: vec![Step::new(OpKind::Create)],
            steps: vec![Step::ranged(OpKind::Fallocate, 0, 8192, 128), Step::new(OpKind::Truncate)],
            repeat: 0,
        }],
    }
}

fn row(backend: &str, variant: &str, workers: u32, r: &crate::runner::RunStats) -> Row {
    let mut row = Row::new(backend, variant);
    row.set("workers", workers)
        .set("ops_per_s", r.ops_per_s().round())
        .set("per_worker_ops_per_s", (r.ops_per_s() / f64::from(workers)).round())
        .set("min_max", (r.fairness() * 100.0).round() / 100.0);
    if let Some(f) = r.cpu_fairness() {
        row.set("cpu_min_max", (f * 100.0).round() / 100.0);
    }
    row
}

/// Run the scenario.
pub fn run(env: &Env) -> ScenarioReport {
    let (secs, volume) = if env.quick { (0.3, 1 << 30) } else { (2.0, 8 << 30) };
    run_with(env, &[1, 2, 8, 64], secs, volume)
}

/// The scenario at chosen worker counts, seconds per row and volume size.
pub fn run_with(env: &Env, workers: &[u32], secs: f64, volume: u64) -> ScenarioReport {
    let mut rep = ScenarioReport::new(
        "fallocate2",
        &format!("seed 000: each worker appends 8 KiB with fallocate to 1 MiB, truncates, repeats; {} GiB volume, {secs} s per row; one op = one fallocate", volume >> 30),
        vec![
            col("workers", "workers", 0),
            col("ops_per_s", "total ops/s", 0),
            col("per_worker_ops_per_s", "per worker", 0),
            col("min_max", "min/max", 2),
            col("cpu_min_max", "min/max per CPU-s", 2),
        ],
    );
    for &n in workers {
        let w = env.workload(workload(n, secs, volume));
        // What the scheduler alone gives: identical busy threads bound the
        // same way, for as long. Their min/max is the most any target's
        // per-worker rates can show here.
        if n > 1 {
            let r = crate::runner::spin_control(n as usize, w.interleave, std::time::Duration::from_secs_f64(secs));
            rep.notes.push(format!(
                "scheduler control, {n} spinning threads for {secs} s: min/max {:.2}, per CPU-s {}",
                r.fairness(),
                r.cpu_fairness().map_or("n/a".into(), |f| format!("{f:.2}"))
            ));
        }
        let mut variants = vec![
            Variant::engine("scalable", |cfg| {
                cfg.concurrency = Concurrency::Scalable;
                cfg.stream_placement = StreamPlacement::PerFile;
                cfg.tunables.mb_stats = false;
            }),
            Variant::engine("legacy", |cfg| {
                cfg.concurrency = Concurrency::Legacy;
                cfg.stream_placement = StreamPlacement::Kernel;
                cfg.tunables.mb_stats = false;
            }),
            // The same with the volume on a device: every truncate's frees
            // and every fallocate's extents go through the journal.
            Variant::engine("scalable+journal", |cfg| cfg.tunables.mb_stats = false).on_device(),
        ];
        variants.extend(kernel_variants(env, &[("default", "")]));
        for_each_variant(env, &mut rep, &variants, |v, rep| {
            let t = v.target(&w)?;
            let r = measure(env, &*t, &w, None, &format!("fallocate2 {} {} x{n}", v.backend().name(), v.label()))?;
            rep.rows.push(row(v.backend().name(), v.label(), n, &r));
            Ok(())
        });
    }
    let total = |b: &str, v: &str, n: u32| {
        rep.rows
            .iter()
            .find(|r| r.backend == b && r.variant == v && r.num("workers") == Some(f64::from(n)))
            .and_then(|r| r.num("ops_per_s"))
    };
    let top = *workers.last().expect("worker counts");
    for (b, v) in [("engine", "scalable"), ("engine", "legacy"), ("engine", "scalable+journal"), ("ext4", "default")] {
        if let (Some(one), Some(many)) = (total(b, v, 1), total(b, v, top)) {
            rep.notes.push(format!("{b} {v}: {top} workers give {:.2}x the 1-worker total", many / one));
        }
    }
    if let (Some(e), Some(k)) = (total("engine", "scalable", 1), total("ext4", "default", 1)) {
        rep.notes.push(format!(
            "1 worker: engine {:.1}x kernel ext4 (in-process calls vs system calls on a loop-mounted image)",
            e / k
        ));
    }
    if let (Some(e), Some(k)) = (total("engine", "scalable+journal", 1), total("ext4", "default", 1)) {
        rep.notes.push(format!("1 worker, journal in the path: engine {:.1}x kernel ext4", e / k));
    }
    rep.plots.push(Plot::Lines { title: "fallocate2: total ops/s by workers".into(), x: "workers", y: "ops_per_s" });
    rep
}
