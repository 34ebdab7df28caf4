//! `mballoc lab fidelity`: the kernel profile against the kernel, case by
//! case, with the report page.

use crate::plan::clean_up_on_signal;
use crate::shard::{Shard, ShardFile};
use anyhow::{bail, Context, Result};
use mballoc_lab::fidelity::Agreement;
use mballoc_lab::report::{col, Header, Report, Row, ScenarioReport};
use mballoc_lab::trace::Trace;
use mballoc_lab::workload::Workload;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `mballoc lab fidelity`'s arguments.
#[derive(clap::Args)]
pub struct FidelityArgs {
    /// TOML workloads, traces (run single-threaded, streams in turn) or
    /// recordings (`mballoc lab record`: the program's operations).
    pub workloads: Vec<PathBuf>,
    /// Smaller built-in cases.
    #[arg(long)]
    pub quick: bool,
    /// Only these built-in cases (by name; repeatable).
    #[arg(long = "case", value_name = "NAME")]
    pub cases: Vec<String>,
    /// Also print each case's histograms and mb_stats side by side.
    #[arg(long)]
    pub detail: bool,
    /// Directory for index.html.
    #[arg(long, default_value = "lab-report")]
    pub out: PathBuf,
    /// Print the results as JSON on stdout (and nothing else there).
    #[arg(long)]
    pub json: bool,
    /// Keep each case's image, operations, kernel trace and kernel
    /// layouts in this directory.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    /// Exit 1 when fewer files than this share are identical to the
    /// kernel's (percent).
    #[arg(long, value_name = "PCT", default_value_t = 100.0)]
    pub require: f64,
    /// Run ext4 with this setting, and the engine following it:
    /// `ext4.mkfs=ARGS`, `ext4.mount=OPTS`, `ext4.KNOB=VALUE` (over a
    /// workload's own `[ext4]` table). A setting the kernel profile
    /// cannot follow is refused with the reason. Repeatable.
    #[arg(long = "set", value_name = "ext4.KEY=VALUE")]
    pub set: Vec<String>,
    /// Run only shard I of N of the cases and write them to
    /// OUT/shard-I-of-N.json, for `lab merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// Run on that kernel: `host`, or a Debian kernel booted under qemu
    /// with this `mballoc` inside (a series such as 6.1, an ABI, or
    /// SUITE:VERSION; the same as `lab kernels run KERNEL -- lab fidelity
    /// ...`, `--keep`'s directory brought back). The built-in cases only:
    /// the guest sees no file of this machine.
    #[arg(long, value_name = "KERNEL")]
    pub kernel: Option<String>,
}

/// This command line again without `--kernel`, for the guest.
fn without_kernel_flag(argv: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in argv {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        if a == "--kernel" {
            skip_value = true;
        } else if !a.starts_with("--kernel=") {
            out.push(a);
        }
    }
    out
}

/// What came of one case.
#[derive(Debug, Serialize, Deserialize)]
enum Outcome {
    /// Both sides ran; how far they agreed.
    Ran(Box<Agreement>),
    /// It cannot run here, and why.
    Skipped(String),
    /// It failed, and why.
    Failed(String),
}

/// A case as the report names it, and what came of it.
#[derive(Debug, Serialize, Deserialize)]
struct CaseResult {
    name: String,
    /// The ext4 configuration it ran with, when not the default.
    ext4: String,
    outcome: Outcome,
}

/// A fidelity run as its shard files keep it.
#[derive(Debug, Serialize, Deserialize)]
pub struct FidelityShard {
    quick: bool,
    detail: bool,
    require: f64,
    results: Vec<(usize, CaseResult)>,
}

/// `mballoc lab fidelity`: each case on ext4 and on the engine's kernel
/// profile, compared.
pub fn run(args: &FidelityArgs) -> Result<()> {
    let (quick, json, require, out, keep) = (args.quick, args.json, args.require, &args.out, args.keep.as_deref());
    anyhow::ensure!((0.0..=100.0).contains(&require), "--require {require}: a percentage from 0 to 100");
    if let Some(kernel) = args.kernel.clone().filter(|k| k != "host") {
        anyhow::ensure!(
            args.workloads.is_empty(),
            "--kernel runs the built-in cases only (the guest sees no file here)"
        );
        // argv: mballoc lab fidelity ...; the guest runs `mballoc` with the rest.
        let argv = without_kernel_flag(std::env::args().skip(1));
        return crate::kernels_cmd::run(crate::kernels_cmd::KernelsCmd::Run {
            kernel,
            cpus: None,
            memory: 3072,
            timeout: 1800,
            bring: keep.map(|k| k.display().to_string()),
            args: argv,
        });
    }
    use mballoc_lab::fidelity::{self, Ext4Config};
    let over = mballoc_lab::settings::Settings::from_assignments(&args.set)?;
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
    let (cases, _expanded) = cases_of(&args.workloads, &args.cases, quick, &over)?;
    let weights: Vec<f64> =
        cases.iter().map(|c| 1.0 + c.trace.streams.iter().map(Vec::len).sum::<usize>() as f64).collect();
    let chosen: Vec<usize> = match args.shard {
        Some(sh) => sh.cells(&weights),
        None => (0..cases.len()).collect(),
    };
    let mut results = Vec::new();
    for (n, &k) in chosen.iter().enumerate() {
        let case = &cases[k];
        if !json {
            eprintln!("fidelity: case {} of {}: {} ...", n + 1, chosen.len(), case.name);
        }
        let outcome = match fidelity::run(case, keep) {
            Ok(a) => Outcome::Ran(Box::new(a)),
            Err(e) if e.is_unavailable() => Outcome::Skipped(mballoc_lab::chain(&e)),
            Err(e) => Outcome::Failed(mballoc_lab::chain(&e)),
        };
        let r = CaseResult { name: case.name.clone(), ext4: case.ext4.describe(), outcome };
        if args.shard.is_none() {
            show(&r, args.detail, json);
        }
        results.push((k, r));
    }
    let mut header = Header::now();
    header.commit = env!("MBALLOC_COMMIT").to_string();
    header.command = crate::plan::command_line();
    let run = FidelityShard { quick, detail: args.detail, require, results };
    match args.shard {
        Some(sh) => {
            let names = cases.iter().map(|c| c.name.clone()).collect();
            ShardFile::new("lab fidelity", sh, header, names, run).save(out, chosen.len(), json)
        }
        None => {
            let how = Concluding { quick, json, require };
            conclude(run.results.into_iter().map(|(_, r)| r).collect(), &how, out, header)
        }
    }
}

/// What [`conclude`] needs of the run.
struct Concluding {
    quick: bool,
    json: bool,
    require: f64,
}

/// `mballoc lab merge` of a fidelity run's shard files: every case shown
/// as the run on one machine shows it, then its report and verdict.
pub fn merge(files: Vec<ShardFile<FidelityShard>>, out: &std::path::Path, json: bool) -> Result<()> {
    let header = crate::shard::merged_header(&files);
    let (quick, detail, require) = (files[0].run.quick, files[0].run.detail, files[0].run.require);
    let results = crate::shard::in_cell_order(files, |run| run.results)?;
    for r in &results {
        show(r, detail, json);
    }
    conclude(results, &Concluding { quick, json, require }, out, header)
}

/// Print one case's outcome as it comes (unless `json`).
fn show(r: &CaseResult, detail: bool, json: bool) {
    if json {
        return;
    }
    match &r.outcome {
        Outcome::Ran(a) => {
            println!("{}", a.text());
            if detail {
                println!("{}", a.side_by_side());
            }
        }
        Outcome::Skipped(why) => println!("== {}\nskipped: {why}\n", r.name),
        Outcome::Failed(why) => eprintln!("fidelity: {}: {why}", r.name),
    }
}

/// The totals, the report page and the verdict over every case.
fn conclude(results: Vec<CaseResult>, how: &Concluding, out: &std::path::Path, header: Header) -> Result<()> {
    let Concluding { quick, json, require } = *how;
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
    let mut agreed = Vec::new();
    let mut divergences = Vec::new();
    let mut failed = 0;
    for r in results {
        if !r.ext4.is_empty() {
            rep.notes.push(format!("{}: ext4 ran with {} (the engine following it)", r.name, r.ext4));
        }
        match r.outcome {
            Outcome::Ran(a) => {
                let mut row = Row::new("engine vs ext4", &r.name);
                row.set("files_identical_pct", (1000.0 * a.file_share()).round() / 10.0)
                    .set("blocks_same_pct", (10000.0 * a.block_share()).round() / 100.0)
                    .set("requests_matched_pct", (1000.0 * a.request_share()).round() / 10.0)
                    .set("kernel_free_extents", a.free_extents.0 as f64)
                    .set("engine_free_extents", a.free_extents.1 as f64);
                rep.rows.push(row);
                if let Some(d) = &a.first_divergence {
                    let line = format!("{}: first divergence: kernel {} / engine {}", r.name, d.kernel, d.engine);
                    rep.notes.push(line.clone());
                    divergences.push(line);
                }
                agreed.push(*a);
            }
            Outcome::Skipped(why) => rep.notes.push(format!("{}: skipped: {why}", r.name)),
            Outcome::Failed(why) => {
                failed += 1;
                rep.notes.push(format!("{}: failed: {why}", r.name));
            }
        }
    }
    let sum = |f: &dyn Fn(&Agreement) -> (u64, u64)| agreed.iter().map(f).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let (fi, ft) = sum(&|a| (a.files_identical as u64, a.files as u64));
    let (bs, bt) = sum(&|a| (a.blocks_same, a.blocks));
    let (rm, rt) = sum(&|a| (a.requests_matched as u64, a.kernel_requests as u64));
    let pct = |a: u64, b: u64| if b == 0 { 100.0 } else { 100.0 * a as f64 / b as f64 };
    let total = format!(
        "over {} cases: files identical {fi}/{ft} ({:.1}%), blocks in place {bs}/{bt} ({:.2}%), requests matched {rm}/{rt} ({:.1}%)",
        agreed.len(),
        pct(fi, ft),
        pct(bs, bt),
        pct(rm, rt)
    );
    rep.notes.insert(0, total.clone());
    if json {
        println!("{}", serde_json::to_string_pretty(&agreed)?);
    } else {
        println!("{total}");
    }
    std::fs::create_dir_all(out).with_context(|| out.display().to_string())?;
    let page = out.join("index.html");
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

/// The cases a run compares: the built-in set (only the `only` named, when
/// any), or the given TOML workloads, traces and recordings, each under
/// the `over` settings. Recordings' images are expanded for the run and
/// live as long as the returned images.
pub(crate) fn cases_of(
    files: &[PathBuf],
    only: &[String],
    quick: bool,
    over: &mballoc_lab::settings::Settings,
) -> Result<(Vec<mballoc_lab::fidelity::Case>, Vec<mballoc_lab::loop_mount::Image>)> {
    use mballoc_lab::fidelity::{self, Case, Ext4Config};
    anyhow::ensure!(
        files.is_empty() || only.is_empty(),
        "--case names built-in cases: give workloads or --case, not both"
    );
    let mut expanded: Vec<mballoc_lab::loop_mount::Image> = Vec::new();
    let cases: Vec<Case> = if files.is_empty() {
        fidelity::builtin_named(quick, only)?
            .into_iter()
            .map(|mut c| {
                c.ext4.extend(&Ext4Config::from_settings(over));
                c
            })
            .collect()
    } else {
        files
            .iter()
            .map(|f| -> Result<Case> {
                if f.join("record.toml").exists() {
                    let (case, image) = mballoc_lab::fidelity::record::case_of(f, over)?;
                    expanded.push(image);
                    return Ok(case);
                }
                let text = std::fs::read_to_string(f).with_context(|| f.display().to_string())?;
                let name = f.file_stem().map_or("workload".into(), |s| s.to_string_lossy().into_owned());
                if Trace::is_trace(&text) {
                    let mut c = Case::from_trace(&name, Trace::parse(&text)?);
                    c.ext4.extend(&Ext4Config::from_settings(over));
                    return Ok(c);
                }
                // A workload's own [ext4] table and image, under --set.
                let mut w = Workload::from_toml(&text)?;
                let mut settings = w.settings()?;
                settings.extend(over);
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
    Ok((cases, expanded))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_guest_gets_the_command_line_without_the_kernel() {
        let argv = ["lab", "fidelity", "--kernel", "6.1", "--quick", "--kernel=7.3", "--require", "0"];
        assert_eq!(
            super::without_kernel_flag(argv.iter().map(|s| s.to_string())),
            ["lab", "fidelity", "--quick", "--require", "0"]
        );
    }
}
