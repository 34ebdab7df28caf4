//! Seed 002's experiment: what allocating a file costs per block, one block
//! at a time vs one multiblock request per dirty run with delayed
//! allocation. Files are written 4 KiB at a time, then fsync'ed.

use super::{for_each_variant, layout_metrics, measure, Env, Stats, Variant};
use crate::backend::{BackendKind, Target, WriteMode};
use crate::error::LabError;
use crate::loop_mount::KernelFs;
use crate::report::{col, Plot, Row, ScenarioReport};
use crate::units::Size;
use crate::workload::{Interleave, Job, OpKind, Step, Workload};
use mballoc::{AllocRequest, Allocator, Geometry, Tunables};
use std::time::{Duration, Instant};

/// One line for `lab list`.
pub const ABOUT: &str =
    "seed 002: cost per block of 5 KiB, 600 KiB and 12 MiB files written 4 KiB at a time: block-at-a-time vs nodelalloc vs delalloc";

const BLOCK: u64 = 4096;
const VOLUME: u64 = 4 << 30;

/// `files` files of `size_kib` KiB, each written 4 KiB at a time, fsync'ed
/// and closed, on a 4 GiB volume.
pub fn workload(size_kib: u64, files: u32) -> Workload {
    let bytes = size_kib * 1024;
    let whole = bytes / BLOCK;
    let mut steps = vec![Step::new(OpKind::Create), Step::ranged(OpKind::Write, 0, BLOCK, whole)];
    if !bytes.is_multiple_of(BLOCK) {
        steps.push(Step::ranged(OpKind::Write, whole * BLOCK, bytes % BLOCK, 1));
    }
    steps.extend([Step::new(OpKind::Fsync), Step::new(OpKind::Close)]);
    Workload {
        name: "multiblock-cost".into(),
        volume: Size(VOLUME),
        block_size: BLOCK as u32,
        interleave: Interleave::Threads,
        image: None,
        seconds: None,
        jobs: vec![Job { steps, ..Job::new("file", 1, files) }],
        ..Default::default()
    }
}

/// Files per size, so each row writes about the same amount.
fn files_for(size_kib: u64, quick: bool) -> u32 {
    let total_kib: u64 = if quick { 24 << 10 } else { 384 << 10 };
    (total_kib / size_kib).clamp(2, 4096) as u32
}

/// The block allocator the 2004 proposal replaced: one allocator request
/// per block, the goal just past the previous block.
fn block_at_a_time(size_kib: u64, files: u32) -> (Duration, f64, f64) {
    let blocks = (size_kib * 1024).div_ceil(BLOCK);
    let a = Allocator::builder(Geometry::new(4096, VOLUME / BLOCK).expect("geometry"))
        .tunables(Tunables::with_stats())
        .build()
        .expect("allocator");
    let mut extents = 0u64;
    let t0 = Instant::now();
    for _ in 0..files {
        let mut prev: Option<u64> = None;
        for _ in 0..blocks {
            let req = match prev {
                Some(p) if p < a.geometry().total_blocks() => AllocRequest::new(1).try_goal(p),
                _ => AllocRequest::new(1),
            };
            let got = a.allocate(&req).expect("an empty volume has room").extent.start;
            extents += u64::from(prev != Some(got));
            prev = Some(got + 1);
        }
    }
    let elapsed = t0.elapsed();
    (elapsed, a.stats().reqs as f64 / f64::from(files), extents as f64 / f64::from(files))
}

fn row(variant: &str, backend: &str, size_kib: u64, blocks: u64, elapsed: Duration) -> Row {
    let mut r = Row::new(backend, variant);
    r.set("size_kib", size_kib).set("ns_per_block", (elapsed.as_nanos() as f64 / blocks as f64 * 10.0).round() / 10.0);
    r
}

fn file_layer(
    env: &Env,
    t: &dyn Target,
    w: &Workload,
    size_kib: u64,
    backend: &str,
    variant: &str,
) -> Result<Row, LabError> {
    let before = t.counters();
    let r = measure(env, t, w, None, &format!("multiblock {backend} {variant} {size_kib} KiB"))?;
    let files = u64::from(w.jobs[0].files);
    let blocks = files * (size_kib * 1024).div_ceil(BLOCK);
    let mut row = row(variant, backend, size_kib, blocks, r.elapsed);
    let d = before.zip(t.counters()).map(|(b, a)| a.since(&b));
    let per_file = |c: u64| serde_json::Value::from((c as f64 / files as f64 * 100.0).round() / 100.0);
    row.set("alloc_calls_per_file", d.map_or("n/a".into(), |d| per_file(d.reqs)));
    row.set("allocator_calls_per_file", d.map_or("n/a".into(), |d| per_file(d.allocator_reqs)));
    layout_metrics(&mut row, t, w.block_size, |_| true);
    let e = row.metrics.get("avg_extents_per_file").cloned().unwrap_or_default();
    row.set("extents_per_file", e);
    Ok(row)
}

/// Run the scenario.
pub fn run(env: &Env) -> ScenarioReport {
    let mut rep = ScenarioReport::new(
        "multiblock-cost",
        "seed 002: files written 4 KiB at a time on an empty 4 GiB volume, then fsync'ed; cost per block",
        vec![
            col("size_kib", "size KiB", 0),
            col("ns_per_block", "ns/block", 1),
            col("alloc_calls_per_file", "reqs/file", 2),
            col("allocator_calls_per_file", "allocator reqs/file", 2),
            col("extents_per_file", "extents/file", 2),
        ],
    );
    for size_kib in [5u64, 600, 12 << 10] {
        let files = files_for(size_kib, env.quick);
        // The cost per block is measured in 4 KiB blocks; an image of
        // another block size cannot host it.
        let w = match &env.image {
            Some(img) if img.block_size == BLOCK as u32 => env.workload(workload(size_kib, files)),
            _ => workload(size_kib, files),
        };
        if env.wants(BackendKind::Engine) {
            let (elapsed, calls, extents) = block_at_a_time(size_kib, files);
            let blocks = u64::from(files) * (size_kib * 1024).div_ceil(BLOCK);
            let mut r = row("block-at-a-time", "engine", size_kib, blocks, elapsed);
            r.set("alloc_calls_per_file", calls)
                .set("allocator_calls_per_file", calls)
                .set("extents_per_file", extents);
            rep.rows.push(r);
        }
        let mut variants: Vec<Variant> = [("nodelalloc", WriteMode::NoDelalloc), ("delalloc", WriteMode::Delalloc)]
            .into_iter()
            .map(|(label, mode)| {
                Variant::engine(label, |cfg| {
                    cfg.storage.dirty_limit_blocks = u64::MAX;
                    cfg.storage.commit_interval_ops = 0;
                })
                .write_mode(mode)
            })
            .collect();
        // The seed's comparison is ext4's own: other kernel file systems
        // have no delayed-allocation switch.
        variants.extend(
            [("nodelalloc", "nodelalloc"), ("delalloc", "")].map(|(l, o)| Variant::kernel(KernelFs::Ext4, l, o)),
        );
        for_each_variant(env, &mut rep, Stats::On, &variants, |v, rep| {
            let t = v.target(&w)?;
            rep.rows.push(file_layer(env, &*t, &w, size_kib, v.backend().name(), v.label())?);
            Ok(())
        });
    }
    let one = rep
        .rows
        .iter()
        .find(|r| r.backend == "engine" && r.variant == "delalloc" && r.num("size_kib") == Some(12288.0));
    if let Some(r) = one.and_then(|r| r.num("alloc_calls_per_file")) {
        rep.notes.push(format!("engine delalloc, 12 MiB file: {r} allocation call(s) per file"));
    }
    rep.notes.push(
        "reqs: every block request, preallocation hits included (ext4's mb_stats `reqs`, the engine counted the same way); \
         allocator reqs: those that reached the allocator's passes (the sum of mb_stats' per-pass hits on both)"
            .into(),
    );
    rep.notes
        .push("kernel ns/block include the page cache copy, loop-device I/O and a journal commit per fsync".into());
    rep.plots.push(Plot::lines(
        "multiblock cost: time per block by file size",
        "size_kib",
        "file size (KiB)",
        "ns_per_block",
        "nanoseconds per 4 KiB block",
    ));
    rep
}
