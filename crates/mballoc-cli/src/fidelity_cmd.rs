//! `mballoc lab fidelity`: the kernel profile against the kernel, case by
//! case, with the report page.

use crate::plan::clean_up_on_signal;
use anyhow::{bail, Context, Result};
use mballoc_lab::report::{col, Report, Row, ScenarioReport};
use mballoc_lab::trace::Trace;
use mballoc_lab::workload::Workload;
use std::path::PathBuf;

/// `mballoc lab fidelity`: each case on ext4 and on the engine's kernel
/// profile, compared.
/// How a fidelity run runs and what it requires.
pub struct How<'a> {
    /// Smaller built-in cases.
    pub quick: bool,
    /// Histograms and mb_stats side by side.
    pub detail: bool,
    /// JSON on stdout.
    pub json: bool,
    /// Where to keep each case's material.
    pub keep: Option<&'a std::path::Path>,
    /// The least share of identical files, percent, below which the run
    /// fails.
    pub require: f64,
    /// `--set` assignments (ext4 only), over each case's own.
    pub set: &'a [String],
}

pub fn run(files: &[PathBuf], only: &[String], out: &std::path::Path, how: &How<'_>) -> Result<()> {
    let How { quick, detail, json, keep, require, set } = *how;
    anyhow::ensure!((0.0..=100.0).contains(&require), "--require {require}: a percentage from 0 to 100");
    use mballoc_lab::fidelity::{self, Case, Ext4Config};
    let over = mballoc_lab::settings::Settings::from_assignments(set)?;
    // Refused before anything runs, root or not.
    Ext4Config::from_settings(&over).check(&over)?;
    if !mballoc_lab::sys::is_root() {
        println!("fidelity: skipped (needs root for loop mounts and tracefs)");
        return Ok(());
    }
    clean_up_on_signal()?;
    eprintln!(
        "fidelity: the engine under the kernel profile of {} (this kernel: {})",
        mballoc_lab::fidelity::running_kernel(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()
    );
    // Recordings' images, expanded for the run.
    let mut expanded: Vec<mballoc_lab::loop_mount::Image> = Vec::new();
    let cases: Vec<Case> = if files.is_empty() {
        fidelity::builtin_named(quick, only)?
            .into_iter()
            .map(|mut c| {
                c.ext4.extend(&Ext4Config::from_settings(&over));
                c
            })
            .collect()
    } else {
        files
            .iter()
            .map(|f| -> Result<Case> {
                if f.join("record.toml").exists() {
                    let (case, image) = mballoc_lab::fidelity::record::case_of(f, &over)?;
                    expanded.push(image);
                    return Ok(case);
                }
                let text = std::fs::read_to_string(f).with_context(|| f.display().to_string())?;
                let name = f.file_stem().map_or("workload".into(), |s| s.to_string_lossy().into_owned());
                if Trace::is_trace(&text) {
                    let mut c = Case::from_trace(&name, Trace::parse(&text)?);
                    c.ext4.extend(&Ext4Config::from_settings(&over));
                    return Ok(c);
                }
                // A workload's own [ext4] table and image, under --set.
                let mut w = Workload::from_toml(&text)?;
                let mut settings = w.settings()?;
                settings.extend(&over);
                let ext4 = Ext4Config::from_settings(&settings);
                ext4.check(&settings).with_context(|| f.display().to_string())?;
                if let Some(img) = w.image.clone() {
                    mballoc_lab::scenarios::StartImage::open(&img)?.apply(&mut w);
                }
                let mut c = Case::from_trace(&name, Trace::from_workload(&w, 10_000_000)?);
                c.ext4 = ext4;
                c.image = w.image.clone();
                Ok(c)
            })
            .collect::<Result<_>>()?
    };
    let mut rep = ScenarioReport::new(
        "fidelity",
        "the engine's kernel profile against kernel ext4, same image, same operations",
        vec![
            col("files_identical_pct", "files identical %", 1),
            col("blocks_same_pct", "blocks in place %", 2),
            col("requests_matched_pct", "requests matched %", 1),
            col("kernel_free_extents", "free extents ext4", 0),
            col("engine_free_extents", "free extents engine", 0),
        ],
    );
    let mut results = Vec::new();
    let mut divergences = Vec::new();
    let mut failed = 0;
    for (k, case) in cases.iter().enumerate() {
        if !json {
            eprintln!("fidelity: case {} of {}: {} ...", k + 1, cases.len(), case.name);
        }
        if !case.ext4.describe().is_empty() {
            rep.notes.push(format!("{}: ext4 ran with {} (the engine following it)", case.name, case.ext4.describe()));
        }
        match fidelity::run(case, keep) {
            Ok(a) => {
                if !json {
                    println!("{}", a.text());
                    if detail {
                        println!("{}", a.side_by_side());
                    }
                }
                let mut row = Row::new("engine vs ext4", &case.name);
                row.set("files_identical_pct", (1000.0 * a.file_share()).round() / 10.0)
                    .set("blocks_same_pct", (10000.0 * a.block_share()).round() / 100.0)
                    .set("requests_matched_pct", (1000.0 * a.request_share()).round() / 10.0)
                    .set("kernel_free_extents", a.free_extents.0 as f64)
                    .set("engine_free_extents", a.free_extents.1 as f64);
                rep.rows.push(row);
                if let Some(d) = &a.first_divergence {
                    let line = format!("{}: first divergence: kernel {} / engine {}", case.name, d.kernel, d.engine);
                    rep.notes.push(line.clone());
                    divergences.push(line);
                }
                results.push(a);
            }
            Err(e) if e.is_unavailable() => {
                let why = mballoc_lab::chain(&e);
                if !json {
                    println!(
                        "== {}
skipped: {why}
",
                        case.name
                    );
                }
                rep.notes.push(format!("{}: skipped: {why}", case.name));
            }
            Err(e) => {
                failed += 1;
                let why = mballoc_lab::chain(&e);
                eprintln!("fidelity: {}: {why}", case.name);
                rep.notes.push(format!("{}: failed: {why}", case.name));
            }
        }
    }
    let sum = |f: &dyn Fn(&mballoc_lab::fidelity::Agreement) -> (u64, u64)| {
        results.iter().map(f).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let (fi, ft) = sum(&|a| (a.files_identical as u64, a.files as u64));
    let (bs, bt) = sum(&|a| (a.blocks_same, a.blocks));
    let (rm, rt) = sum(&|a| (a.requests_matched as u64, a.kernel_requests as u64));
    let pct = |a: u64, b: u64| if b == 0 { 100.0 } else { 100.0 * a as f64 / b as f64 };
    let total = format!(
        "over {} cases: files identical {fi}/{ft} ({:.1}%), blocks in place {bs}/{bt} ({:.2}%), requests matched {rm}/{rt} ({:.1}%)",
        results.len(),
        pct(fi, ft),
        pct(bs, bt),
        pct(rm, rt)
    );
    rep.notes.insert(0, total.clone());
    if json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        println!("{total}");
    }
    std::fs::create_dir_all(out).with_context(|| out.display().to_string())?;
    let page = out.join("index.html");
    let mut header = mballoc_lab::report::Header::now();
    header.commit = env!("MBALLOC_COMMIT").to_string();
    header.command = crate::plan::command_line();
    let report = Report { header, seed: 0, quick, scenarios: vec![rep] };
    std::fs::write(&page, report.html()).with_context(|| page.display().to_string())?;
    if !json {
        println!("report: {}", page.display());
    }
    if failed > 0 {
        bail!("{failed} case(s) failed");
    }
    if pct(fi, ft) < require {
        for d in &divergences {
            eprintln!("fidelity: {d}");
        }
        bail!("files identical {:.1}% is below the required {require}%", pct(fi, ft));
    }
    Ok(())
}
