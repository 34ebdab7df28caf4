//! Aging as researchers age file systems, on every backend: Geriatrix's
//! profile-driven creates and deletes, and the git-pull ager, each a
//! seeded single-stream trace (the `aging` module) run unchanged on the
//! engine, ext4, XFS, btrfs and the mount. The layouts that result are
//! compared by the layout score (Conway et al.), extents per file and the
//! free space's histogram.

use super::{for_each_variant, free_metrics, kernel_variants, layout_metrics, Env, Stats, Variant};
use crate::aging::{geriatrix, git_pulls, Profile};
use crate::report::{col, Plot, Row, ScenarioReport};
use crate::runner;
use crate::trace::Trace;
use crate::units::Size;
use crate::workload::Workload;

/// One line for `lab list`.
pub const ABOUT: &str =
    "Geriatrix's profile ager and the git-pull ager, seeded traces on every backend: layout score, extents/file, free space";

fn run_trace(env: &Env, rep: &mut ScenarioReport, ager: &str, t: &Trace) {
    let w = Workload { volume: Size(t.volume), block_size: t.block_size, ..Default::default() };
    let mut variants = vec![Variant::engine("kernel profile", |c| {
        *c = mballoc_fs::FsConfig::kernel(c.shape.geometry);
    })];
    variants.extend(kernel_variants(env, &[("default", "")]));
    let specs = t.stream_specs();
    for_each_variant(env, rep, Stats::Off, &variants, |v, rep| {
        let backend = v.backend().name();
        let target = v.target_with_files(&w, t.files.clone())?;
        let bar = env.bar(0, format!("aging {ager} on {backend}"));
        let r = runner::run(&*target, &specs, t.interleave, None, &bar);
        bar.finish_and_clear();
        let r = r?;
        target.sync();
        let mut row = Row::new(backend, v.label());
        row.set("ager", ager).set("seconds", (r.elapsed.as_secs_f64() * 100.0).round() / 100.0);
        layout_metrics(&mut row, &*target, t.block_size, |_| true);
        free_metrics(&mut row, &*target, backend);
        rep.rows.push(row);
        Ok(())
    });
}

/// Run the scenario.
pub fn run(env: &Env) -> ScenarioReport {
    let volume: u64 = if env.quick { 512 << 20 } else { 4 << 30 };
    let mut rep = ScenarioReport::new(
        "aging",
        &format!(
            "Geriatrix (Agrawal profile, 75% full, churn {}x the volume) and git pulls on a {} MiB volume, seed {}",
            if env.quick { 1 } else { 3 },
            volume >> 20,
            env.seed
        ),
        vec![
            col("ager", "ager", 0),
            col("files", "files", 0),
            col("layout_score", "layout score", 3),
            col("avg_extents_per_file", "extents/file", 2),
            col("free_extents", "free extents", 0),
            col("avg_free_extent_kib", "avg free KB", 0),
            col("ceph_score", "ceph", 3),
            col("seconds", "seconds", 2),
        ],
    );
    let profile = Profile { churn: if env.quick { 1.0 } else { 3.0 }, ..Profile::agrawal() };
    match geriatrix(&profile, volume, 4096, env.seed) {
        Ok((t, c)) => {
            rep.notes.push(format!(
                "geriatrix converged to: size distribution {:.3}, depth distribution {:.3} from the profile (total variation), {:.1}% full; {} files made, {} deleted, {} operations",
                c.size_distance,
                c.depth_distance,
                c.fullness * 100.0,
                c.creates,
                c.deletes,
                t.streams[0].len()
            ));
            run_trace(env, &mut rep, "geriatrix", &t);
        }
        Err(e) => rep.notes.push(format!("geriatrix: {e}")),
    }
    let (files, pulls) = if env.quick { (200, 50) } else { (1000, 300) };
    match git_pulls(&profile, files, pulls, volume, 4096, env.seed) {
        Ok(t) => {
            rep.notes.push(format!("git pulls: {files} files, {pulls} pulls, {} operations", t.streams[0].len()));
            run_trace(env, &mut rep, "git-pull", &t);
        }
        Err(e) => rep.notes.push(format!("git pulls: {e}")),
    }
    rep.notes.push(
        "layout score: the share of logically adjacent block pairs that are physically adjacent (1 is perfect)".into(),
    );
    rep.plots.push(Plot::bars("aging: layout score", "layout_score", "layout score (1 = every file contiguous)"));
    rep.plots.push(Plot::FreeHistograms { title: "free space after aging".into() });
    rep
}
