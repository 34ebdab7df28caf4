//! Seed 001's benchmark: a volume whose free space is fragmented to 4 MiB
//! average free extents (fill it, punch 4 MiB of every 8 MiB), then 64
//! writers each creating 64 KiB files (16 KiB writes, fsync, close: fs_mark
//! with nodelalloc). Files/s, extents scanned and hits per pass, with and
//! without CR_BEST_AVAIL_LEN (`mb_best_avail_max_trim_order` 3 vs 0).

use super::{fill_and_punch, for_each_variant, layout_metrics, measure, Env, Stats, Variant};
use crate::backend::{AllocCounters, Target, WriteMode};
use crate::error::LabError;
use crate::loop_mount::KernelFs;
use crate::report::{col, Plot, Row, ScenarioReport};
use crate::units::Size;
use crate::workload::{Interleave, Job, OpKind, Step, Workload};

/// One line for `lab list`.
pub const ABOUT: &str =
    "seed 001: 64 writers creating 64 KiB files on a volume fragmented to 4 MiB free extents; files/s, extents scanned, hits per pass, with and without CR_BEST_AVAIL_LEN";

/// The fragmenting file and `writers` × `files` small files.
pub fn workload(writers: u32, files: u32, volume: u64) -> Workload {
    Workload {
        name: "small-files-fragmented".into(),
        volume: Size(volume),
        block_size: 4096,
        interleave: Interleave::Threads,
        image: None,
        seconds: None,
        jobs: vec![
            Job::new("fill", 1, 1),
            Job {
                steps: vec![
                    Step::new(OpKind::Create),
                    Step::ranged(OpKind::Write, 0, 16 << 10, 4),
                    Step::new(OpKind::Fsync),
                    Step::new(OpKind::Close),
                ],
                ..Job::new("fsmark", writers, files)
            },
        ],
        ..Default::default()
    }
}

/// Fragment the volume of workload `w`: fill it through slot 0, then punch
/// 4 MiB of every 8. A volume started from an image is as fragmented as
/// the image.
pub fn fragment(t: &dyn Target, w: &Workload) -> Result<(), LabError> {
    fill_and_punch(t, w, 8 << 20, 0, 4 << 20, |_| true)
}

fn observe(env: &Env, t: &dyn Target, w: &Workload, v: &Variant, rep: &mut ScenarioReport) -> Result<(), LabError> {
    fragment(t, w)?;
    let mut row = Row::new(v.backend().name(), v.label());
    if let Ok(fs) = t.free_space() {
        row.set("avg_free_extent_kib_before", fs.histogram().avg_free_extent_kib());
    }
    let before = t.counters();
    let r = measure(env, t, w, Some("fsmark"), &format!("small files {} {}", v.backend().name(), v.label()))?;
    row.set("files_per_s", r.creates_per_s().round());
    match (before, t.counters()) {
        (Some(b), Some(a)) => {
            let d: AllocCounters = a.since(&b);
            row.set("reqs", d.reqs)
                .set("allocator_reqs", d.allocator_reqs)
                .set("extents_scanned", d.extents_scanned)
                .set("groups_scanned", d.groups_scanned)
                .set("cr_hits", d.cr_hits.to_vec());
        }
        _ => {
            for k in ["reqs", "allocator_reqs", "extents_scanned", "groups_scanned", "cr_hits"] {
                row.set(k, "n/a");
            }
        }
    }
    t.sync();
    layout_metrics(&mut row, t, w.block_size, |name| name.starts_with("fsmark."));
    rep.rows.push(row);
    Ok(())
}

/// Run the scenario.
pub fn run(env: &Env) -> ScenarioReport {
    let (files, volume) = if env.quick { (16u32, 1u64 << 30) } else { (256, 8 << 30) };
    let w = env.workload(workload(64, files, volume));
    let mut rep = ScenarioReport::new(
        "small-files-fragmented",
        &format!(
            "seed 001: {}; 64 writers x {files} files of 64 KiB (16 KiB writes, fsync), nodelalloc",
            match &env.image {
                Some(img) => format!("the free space of {}", img.path.display()),
                None => format!("{} GiB volume, free space in 4 MiB holes every 8 MiB", volume >> 30),
            }
        ),
        vec![
            col("avg_free_extent_kib_before", "avg free KB", 0),
            col("files_per_s", "files/s", 0),
            col("reqs", "requests", 0),
            col("allocator_reqs", "allocator reqs", 0),
            col("extents_scanned", "extents scanned", 0),
            col("groups_scanned", "groups scanned", 0),
            col("cr_hits", "hits p2/fast/best/slow/any", 0),
            col("avg_extents_per_file", "extents/file", 2),
            col("layout_score", "layout score", 3),
        ],
    );
    let trims = [("with CR_BEST_AVAIL_LEN", 3u32), ("without CR_BEST_AVAIL_LEN", 0)];
    let mut variants: Vec<Variant> = trims
        .iter()
        .map(|&(label, trim)| {
            Variant::engine(label, move |cfg| cfg.placement.tunables.mb_best_avail_max_trim_order = trim)
                .write_mode(WriteMode::NoDelalloc)
        })
        .collect();
    for k in env.kernels() {
        match k {
            // Before 6.4 ext4 has no CR_BEST_AVAIL_LEN and no knob for it:
            // the seed's "unpatched" side, as it shipped.
            KernelFs::Ext4 if !mballoc_fs::KernelRule::BestAvail.in_kernel(crate::fidelity::running_kernel()) => {
                variants.push(Variant::kernel(k, "without CR_BEST_AVAIL_LEN (before 6.4)", "nodelalloc"))
            }
            KernelFs::Ext4 => variants.extend(trims.iter().map(|&(label, trim)| {
                Variant::kernel(k, label, "nodelalloc").knob("mb_best_avail_max_trim_order", trim)
            })),
            _ => variants.push(Variant::kernel(k, "default", "")),
        }
    }
    for_each_variant(env, &mut rep, Stats::On, &variants, |v, rep| observe(env, &*v.target(&w)?, &w, v, rep));
    rep.notes.push("hits: requests served by CR_POWER2_ALIGNED / CR_GOAL_LEN_FAST / CR_BEST_AVAIL_LEN / CR_GOAL_LEN_SLOW / CR_ANY_FREE; ext4's come from /proc/fs/ext4/DEV/mb_stats".into());
    rep.plots.push(Plot::bars(
        "small files on a fragmented volume: files per second",
        "files_per_s",
        "files written per second",
    ));
    rep.plots.push(Plot::bars(
        "small files on a fragmented volume: extents scanned",
        "extents_scanned",
        "free extents measured by the allocator, whole run",
    ));
    rep
}
