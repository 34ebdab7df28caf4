//! `mballoc lab workload FILE`: a user's workload (TOML or trace), parsed
//! and checked once, then run on every chosen backend.

use anyhow::Result;
use mballoc_lab::backend::Target;
use mballoc_lab::report::{col, Row, ScenarioReport};
use mballoc_lab::scenarios::{self, Env, StartImage, Stats, Variant};
use mballoc_lab::settings::Settings;
use mballoc_lab::trace::Trace;
use mballoc_lab::workload::{StreamSpec, Workload};
use mballoc_lab::LabError;

/// A user's workload (TOML or trace), parsed and checked once.
pub struct Prepared {
    pub w: Workload,
    streams: Vec<StreamSpec>,
    names: Vec<String>,
    pub settings: Settings,
    pub sweeps: Vec<(String, Vec<String>)>,
}

pub fn prepare(text: &str) -> Result<Prepared> {
    if Trace::is_trace(text) {
        let t = Trace::parse(text)?;
        let w = Workload {
            name: "trace".into(),
            volume: mballoc_lab::units::Size(t.volume),
            block_size: t.block_size,
            interleave: t.interleave,
            image: None,
            seconds: None,
            jobs: vec![],
            ..Default::default()
        };
        let streams = t.stream_specs();
        return Ok(Prepared { w, streams, names: t.files, settings: Settings::default(), sweeps: vec![] });
    }
    let mut w = Workload::from_toml(text)?;
    if let Some(path) = w.image.clone() {
        StartImage::open(&path)?.apply(&mut w);
    }
    let (settings, sweeps) = (w.settings()?, w.sweeps()?);
    let (streams, names) = (w.streams(), w.file_names());
    Ok(Prepared { w, streams, names, settings, sweeps })
}

/// A user's workload on every chosen backend.
pub fn run(env: &Env, p: &Prepared) -> ScenarioReport {
    let w = &p.w;
    let mut rep = ScenarioReport::new(
        &w.name,
        &format!("user workload, {} streams, {} volume", p.streams.len(), w.volume),
        vec![
            col("ops_per_s", "ops/s", 0),
            col("mib_per_s", "MiB/s", 1),
            col("placed_mib_per_s", "placed MiB/s (no I/O)", 1),
            col("files_per_s", "files/s", 0),
            col("avg_extents_per_file", "extents/file", 2),
            col("layout_score", "layout score", 3),
            col("free_extents", "free extents", 0),
            col("avg_free_extent_kib", "avg free KB", 0),
            col("e4defrag_score", "e4defrag", 0),
            col("ceph_score", "ceph", 3),
        ],
    );
    let limit = w.seconds.map(std::time::Duration::from_secs_f64);
    let run_on = |rep: &mut ScenarioReport, t: &dyn Target, v: &Variant| -> Result<(), LabError> {
        let backend = v.backend().name();
        let bar = env.bar(0, format!("{} on {backend}", w.name));
        let interleave = env.settings.interleave().unwrap_or(w.interleave);
        let r = mballoc_lab::runner::run(t, &p.streams, interleave, limit, &bar);
        bar.finish_and_clear();
        let r = r?;
        t.sync();
        let mut row = Row::new(backend, v.label());
        row.set("ops_per_s", r.ops_per_s().round()).set("files_per_s", r.creates_per_s().round());
        scenarios::bandwidth(&mut row, t.moves_data(), "mib_per_s", r.mib_per_s());
        scenarios::layout_metrics(&mut row, t, w.block_size, |_| true);
        scenarios::free_metrics(&mut row, t, backend);
        rep.rows.push(row);
        Ok(())
    };
    let profile = if env.settings.get(mballoc_lab::settings::Scope::Engine, "profile") == Some("kernel") {
        "kernel profile"
    } else {
        "default profile"
    };
    let mut variants = vec![Variant::engine(profile, |_| {})];
    variants.extend(scenarios::kernel_variants(env, &[("default", "")]));
    // Throughput rows: statistics off everywhere, as the kernel ships.
    scenarios::for_each_variant(env, &mut rep, Stats::Off, &variants, |v, rep| {
        let t = v.target_with_files(w, p.names.clone())?;
        run_on(rep, &*t, v)
    });
    rep.plots.push(mballoc_lab::report::Plot::bars(
        &format!("{}: operations per second", w.name),
        "ops_per_s",
        "data operations per second (fallocate, write, punch)",
    ));
    rep.plots.push(mballoc_lab::report::Plot::FreeHistograms { title: "free space after the run".into() });
    rep
}
