//! Seed 000's fio job: 64 threads each appending 4 KiB at a time to their
//! own file with `fallocate`, interleaved, and closing it; then the seed's fragmentation
//! table (bandwidth, free extents, extents per file, e4defrag's score) for
//! optimize_scan on and off.

use super::{
    for_each_variant, free_metrics, histogram_lines, kernel_variants, layout_metrics, measure, Env, Stats, Variant,
};
use crate::backend::Target;
use crate::error::LabError;
use crate::report::{col, Plot, Row, ScenarioReport};
use crate::units::Size;
use crate::workload::{Interleave, Job, OpKind, Step, Workload};
use mballoc::OptimizeScan;
use mballoc_fs::StreamPlacement;

/// One line for `lab list`.
pub const ABOUT: &str =
    "seed 000's fio job (64 threads appending 4 KiB with fallocate): bandwidth, free extents, extents per file, e4defrag and Ceph scores";

/// 64 jobs of `file_bytes` each on a `volume`-byte volume.
pub fn workload(jobs: u32, file_bytes: u64, volume: u64) -> Workload {
    Workload {
        name: "fio-falloc".into(),
        volume: Size(volume),
        block_size: 4096,
        interleave: Interleave::Threads,
        image: None,
        seconds: None,
        jobs: vec![Job {
            setup: vec![Step::new(OpKind::Create)],
            // fio closes each file when its job ends, before e2freefrag
            // and filefrag run: preallocations are given back then.
            steps: vec![Step::ranged(OpKind::Fallocate, 0, 4096, file_bytes / 4096), Step::new(OpKind::Close)],
            ..Job::new("job1", jobs, 1)
        }],
        ..Default::default()
    }
}

fn observe(env: &Env, t: &dyn Target, w: &Workload, v: &Variant, rep: &mut ScenarioReport) -> Result<(), LabError> {
    let backend = v.backend().name();
    let r = measure(env, t, w, None, &format!("fio-falloc {backend} {}", v.label()))?;
    t.sync();
    let mut row = Row::new(backend, v.label());
    row.set("ops_per_s", r.ops_per_s().round()).set("mib_per_s", (r.mib_per_s() * 10.0).round() / 10.0);
    layout_metrics(&mut row, t, w.block_size, |_| true);
    if let Some(text) = free_metrics(&mut row, t, backend) {
        rep.sections.push((format!("{backend} {}: e2freefrag histogram", v.label()), histogram_lines(&text)));
    }
    rep.rows.push(row);
    Ok(())
}

/// Run the scenario.
pub fn run(env: &Env) -> ScenarioReport {
    let (file, volume) = if env.quick { (4u64 << 20, 1u64 << 30) } else { (64 << 20, 8 << 30) };
    let w = env.workload(workload(64, file, volume));
    let mut rep = ScenarioReport::new(
        "fio-falloc",
        &format!(
            "seed 000's fio job: 64 threads x {} MiB, fallocate 4 KiB appends, {} GiB volume",
            file >> 20,
            volume >> 30
        ),
        vec![
            col("mib_per_s", "bw MiB/s", 1),
            col("avg_free_extent_kib", "avg free ext KB", 0),
            col("free_extents", "free extents", 0),
            col("avg_extents_per_file", "extents/file", 1),
            col("layout_score", "layout score", 3),
            col("max_extents", "max", 0),
            col("avg_size_per_extent_kib", "KB/extent", 0),
            col("e4defrag_score", "e4defrag score", 0),
            col("ceph_score", "ceph score", 3),
            col("free_in_64mib_runs_pct", "free in ≥64M runs %", 1),
        ],
    );
    let mut variants = Vec::new();
    for (label, scan, place) in [
        ("per-file placement, optimize_scan=1", OptimizeScan::On, StreamPlacement::PerFile),
        ("per-file placement, optimize_scan=0", OptimizeScan::Off, StreamPlacement::PerFile),
        ("ext4 placement, optimize_scan=1", OptimizeScan::On, StreamPlacement::Kernel),
        ("ext4 placement, optimize_scan=0", OptimizeScan::Off, StreamPlacement::Kernel),
    ] {
        variants.push(Variant::engine(label, move |cfg| {
            cfg.placement.tunables.mb_optimize_scan = scan;
            cfg.placement.stream_placement = place;
        }));
    }
    // Every appended file a stream from its first block, not only past
    // mb_stream_req: no small first extents in a shared group.
    variants.push(Variant::engine("per-file placement, streams from the first block (mb_stream_req=0)", |cfg| {
        cfg.placement.tunables.mb_stream_req = 0;
    }));
    variants.push(Variant::engine("per-file placement, optimize_scan=1, journal", |_| {}).on_device());
    variants.extend(kernel_variants(
        env,
        &[("optimize_scan=1", "mb_optimize_scan=1"), ("optimize_scan=0", "mb_optimize_scan=0")],
    ));
    for_each_variant(env, &mut rep, Stats::Off, &variants, |v, rep| observe(env, &*v.target(&w)?, &w, v, rep));
    let ext = |b: &str| {
        rep.rows
            .iter()
            .filter(|r| r.backend == b)
            .filter_map(|r| r.num("avg_extents_per_file"))
            .fold(f64::NAN, f64::min)
    };
    let bw = |b: &str| {
        rep.rows.iter().filter(|r| r.backend == b).filter_map(|r| r.num("mib_per_s")).fold(f64::NAN, f64::max)
    };
    let (m, k) = (bw("mount"), bw("ext4"));
    if m.is_finite() && k.is_finite() && k > 0.0 {
        rep.notes.push(format!(
            "by system calls on both: engine through FUSE {:.2}x kernel ext4's bandwidth, {:.1} extents per file against {:.1}",
            m / k,
            ext("mount"),
            ext("ext4")
        ));
    }
    for r in rep.rows.iter().filter(|r| r.backend == "engine") {
        if let (Some(x), Some(f), Some(p)) =
            (r.num("max_extents"), r.num("free_extents"), r.num("free_in_64mib_runs_pct"))
        {
            let ok = x <= 8.0 && f <= 64.0 && p >= 99.0;
            rep.notes.push(format!(
                "targets (≤ 8 extents per file, ≤ 1 free extent per stream, ≥ 99% of free space in runs ≥ 64 MiB): {} for {}",
                if ok { "met" } else { "not met" },
                r.variant
            ));
        }
    }
    let (e, k) = (ext("engine"), ext("ext4"));
    if e.is_finite() && k.is_finite() && k > 0.0 {
        rep.notes.push(format!("engine extents per file: {:.4} of ext4's (target: at most 1/10)", e / k));
    }
    rep.plots.push(Plot::FreeHistograms { title: "free space after the run".into() });
    rep
}
