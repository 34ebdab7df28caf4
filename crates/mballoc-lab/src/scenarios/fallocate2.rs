//! Seed 000's will-it-scale `fallocate2`: each worker appends 8 KiB with
//! `fallocate` up to 1 MiB, truncates to 0, repeats; one op is one
//! fallocate call, the truncates inside the time. The engine with the
//! 2025 series' locks and its own placement, with the older locks alone,
//! with ext4's placement alone, with both (the seed's base), and the kernel
//! file systems, by worker count; statistics off on every backend.

use super::{for_each_variant, kernel_variants, measure, Env, Stats, Variant};
use crate::report::{col, Plot, Row, ScenarioReport};
use crate::units::Size;
use crate::workload::{Interleave, Job, OpKind, Step, Workload};
use mballoc::Concurrency;
use mballoc_fs::StreamPlacement;

/// One line for `lab list`.
pub const ABOUT: &str =
    "seed 000's will-it-scale loop (8 KiB fallocate appends to 1 MiB, truncate, repeat) by workers: engine scalable vs legacy, kernel file systems";

const SCALABLE: &str = "scalable locks, per-file placement";
const LEGACY_LOCKING: &str = "legacy locks, per-file placement";
const EXT4_PLACEMENT: &str = "scalable locks, ext4 placement";
const LEGACY_BOTH: &str = "legacy locks, ext4 placement (seed's base)";
const ON_DEVICE: &str = "scalable locks, per-file placement, journal";

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
            setup: vec![Step::new(OpKind::Create)],
            steps: vec![Step::ranged(OpKind::Fallocate, 0, 8192, 128), Step::new(OpKind::Truncate)],
            repeat: 0,
            ..Job::new("fallocate2", workers, 1)
        }],
        ..Default::default()
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
        // Locking and placement apart, then together: the pre-2025
        // kernel's locks with the engine's placement, the engine's locks
        // with ext4's placement, and both as the seed's base had them.
        let mut variants: Vec<Variant> = [
            (SCALABLE, Concurrency::Scalable, StreamPlacement::PerFile),
            (LEGACY_LOCKING, Concurrency::Legacy, StreamPlacement::PerFile),
            (EXT4_PLACEMENT, Concurrency::Scalable, StreamPlacement::Kernel),
            (LEGACY_BOTH, Concurrency::Legacy, StreamPlacement::Kernel),
        ]
        .into_iter()
        .map(|(label, locks, place)| {
            Variant::engine(label, move |cfg| {
                cfg.placement.concurrency = locks;
                cfg.placement.stream_placement = place;
            })
        })
        .collect();
        // The same with the volume on a device: every truncate's frees
        // and every fallocate's extents go through the journal.
        variants.push(Variant::engine(ON_DEVICE, |_| {}).on_device());
        variants.extend(kernel_variants(env, &[("default", "")]));
        for_each_variant(env, &mut rep, Stats::Off, &variants, |v, rep| {
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
    for (b, v) in [
        ("engine", SCALABLE),
        ("engine", LEGACY_LOCKING),
        ("engine", EXT4_PLACEMENT),
        ("engine", LEGACY_BOTH),
        ("engine", ON_DEVICE),
        ("ext4", "default"),
        ("mount", super::MOUNTED),
    ] {
        if let (Some(one), Some(many)) = (total(b, v, 1), total(b, v, top)) {
            rep.notes.push(format!("{b} {v}: {top} workers give {:.2}x the 1-worker total", many / one));
        }
    }
    if let (Some(e), Some(k)) = (total("engine", SCALABLE, 1), total("ext4", "default", 1)) {
        rep.notes.push(format!(
            "1 worker: engine {:.1}x kernel ext4 (in-process calls vs system calls on a loop-mounted image)",
            e / k
        ));
    }
    if let (Some(e), Some(k)) = (total("engine", ON_DEVICE, 1), total("ext4", "default", 1)) {
        rep.notes.push(format!("1 worker, journal in the path: engine {:.1}x kernel ext4", e / k));
    }
    for n in [1, top] {
        if let (Some(m), Some(k)) = (total("mount", super::MOUNTED, n), total("ext4", "default", n)) {
            rep.notes.push(format!(
                "{n} worker(s), both by system calls: engine through FUSE {:.2}x kernel ext4 (a FUSE round trip per call)",
                m / k
            ));
        }
    }
    rep.plots.push(Plot::lines(
        "fallocate2: total ops/s by workers",
        "workers",
        "workers (threads)",
        "ops_per_s",
        "fallocate calls per second, all workers",
    ));
    rep.plots.push(Plot::lines(
        "fallocate2: fairness by workers",
        "workers",
        "workers (threads)",
        "cpu_min_max",
        "slowest / fastest worker, per CPU-second",
    ));
    rep
}
