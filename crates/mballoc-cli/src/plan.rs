//! A lab run as the command line drives it: the run's settings over every
//! row, each combination of the swept settings, each repeated, the repeats
//! merged into medians with their samples, and a signal on the way
//! cleaning up everything the lab made; and where its report is written.

use crate::pace::Pace;
use crate::shard::ShardFile;
use crate::Output;
use anyhow::{bail, Context, Result};
use mballoc_lab::backend::BackendKind;
use mballoc_lab::report::{Header, Plot, Report, ScenarioReport};
use mballoc_lab::scenarios::{Env, Scale, StartImage};
use mballoc_lab::settings::sweep::{self, Point};
use mballoc_lab::settings::{Scope, Settings, SweepMode};
use serde::{Deserialize, Serialize};

/// `k=v, k=v`.
fn assignments(assign: &[(String, String)]) -> String {
    assign.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// A scenario as a run drives it: its name, how to run it once, at which
/// size, and how long one run is expected to take.
pub struct Job {
    pub name: String,
    pub run: RunScenario,
    pub scale: Scale,
    /// Seconds for one run, when known (the built-in scenarios).
    pub estimate: Option<f64>,
}
pub type RunScenario = Box<dyn Fn(&Env) -> ScenarioReport>;

/// What a lab run does: the settings over every row, each point of the
/// sweeps (scoped to the backends each key configures), each repeated.
pub struct Plan {
    settings: Settings,
    points: Vec<Point>,
    swept: Vec<String>,
    repeat: u32,
    repeat_given: bool,
    backends: Vec<BackendKind>,
}

/// The settings scope a backend is configured by.
fn scope_of(b: BackendKind) -> Scope {
    match b {
        BackendKind::Engine | BackendKind::Mounted => Scope::Engine,
        BackendKind::Kernel(k) => Scope::Kernel(k),
    }
}

impl Plan {
    /// `base` (a workload's tables) under `--set`, and `sweeps` (a
    /// workload's) under `--sweep`; all checked before anything runs.
    pub fn new(out: &Output, base: Settings, sweeps: &[(String, Vec<String>)]) -> Result<Plan> {
        let mut settings = base;
        for a in &out.set {
            settings.set_str(a)?;
        }
        let mut all: Vec<(String, Vec<String>)> = sweeps.to_vec();
        for a in &out.sweep {
            let (k, v) = mballoc_lab::settings::parse_sweep(a)?;
            all.retain(|(o, _)| *o != k);
            all.push((k, v));
        }
        let mode = SweepMode::parse(&out.sweep_mode)?;
        Ok(Plan {
            settings,
            points: sweep::points(&all, mode)?,
            swept: all.into_iter().map(|(k, _)| k).collect(),
            repeat: out.repeat.unwrap_or(1),
            repeat_given: out.repeat.is_some(),
            backends: backends(&out.backends)?,
        })
    }

    /// How many backends the run asks for (`--backends`).
    pub fn backend_count(&self) -> usize {
        self.backends.len()
    }

    /// Repeat `n` times unless `--repeat` said otherwise.
    pub fn repeat_by_default(mut self, n: u32) -> Plan {
        if !self.repeat_given {
            self.repeat = n;
        }
        self
    }

    /// Have the kernel check the kernel settings of every point on a
    /// scratch volume of `block_size` blocks, before any scenario runs.
    pub fn preflight(&self, block_size: u32) -> Result<()> {
        let mut checked = std::collections::BTreeSet::new();
        for point in &self.points {
            let s = self.settings_at(point)?;
            if checked.insert(s.describe()) {
                mballoc_lab::settings::kernel::preflight(&s, block_size)?;
            }
        }
        Ok(())
    }

    fn settings_at(&self, point: &Point) -> Result<Settings> {
        let mut settings = self.settings.clone();
        for (key, value) in &point.assign {
            settings.set_str(&format!("{key}={value}"))?;
        }
        Ok(settings)
    }

    /// The backends that run at `point`.
    fn backends_at(&self, point: &Point) -> Vec<BackendKind> {
        self.backends.iter().copied().filter(|b| point.backends.admits(scope_of(*b))).collect()
    }

    /// The run's cells: each job at each point where a backend runs, in
    /// report order, with its name and estimated seconds (1 when unknown).
    fn cells(&self, jobs: &[Job]) -> Vec<(usize, usize, String, f64)> {
        let mut cells = Vec::new();
        for (k, job) in jobs.iter().enumerate() {
            for (p, point) in self.points.iter().enumerate() {
                if self.backends_at(point).is_empty() {
                    continue;
                }
                let mut name = job.name.clone();
                if !point.assign.is_empty() {
                    name.push_str(&format!(" [{}]", assignments(&point.assign)));
                }
                cells.push((k, p, name, job.estimate.map_or(1.0, |e| e * self.repeat as f64)));
            }
        }
        cells
    }

    /// What the merge needs of the run besides its cells.
    fn meta(&self, out: &Output, jobs: &[Job]) -> RunMeta {
        RunMeta {
            seed: out.seed,
            jobs: jobs.iter().map(|j| JobMeta { name: j.name.clone(), quick: j.scale == Scale::Quick }).collect(),
            settings: self.settings.describe(),
            swept: self.swept.clone(),
            cells: Vec::new(),
        }
    }

    /// Run every job at every point, `repeat` times, printing each
    /// scenario's table as it finishes (unless `--json`). A signal on the
    /// way unmounts and removes what the lab made. With `--shard I/N`,
    /// only that shard's cells, written to its shard file: no report.
    pub fn run(&self, out: &Output, image: Option<&StartImage>, jobs: &[Job]) -> Result<Option<Report>> {
        clean_up_on_signal()?;
        let started = std::time::Instant::now();
        let mut header = Header::now();
        header.commit = env!("MBALLOC_COMMIT").to_string();
        header.command = command_line();
        header.settings = self.settings.describe();
        let cells = self.cells(jobs);
        let mut meta = self.meta(out, jobs);
        let chosen: Vec<usize> = match out.shard {
            Some(sh) => sh.cells(&cells.iter().map(|c| c.3).collect::<Vec<_>>()),
            None => (0..cells.len()).collect(),
        };
        let pace = Pace::new(self.estimates(jobs, &cells, &chosen));
        pace.announce(self.repeat);
        let mut report = Report { seed: out.seed, quick: meta.quick(), scenarios: vec![], header: header.clone() };
        for (k, job) in jobs.iter().enumerate() {
            let mut parts = Vec::new();
            for &c in chosen.iter().filter(|&&c| cells[c].0 == k) {
                let point = &self.points[cells[c].1];
                let one = self.run_cell(out, image, started, (k, jobs.len()), job, point)?;
                if out.shard.is_some() && !out.json {
                    println!("{}", one.text());
                }
                parts.push((c, point.assign.clone(), one));
            }
            pace.done(k);
            if out.shard.is_some() {
                meta.cells.extend(parts.into_iter().map(|(c, assign, r)| StoredCell {
                    cell: c,
                    job: k,
                    assign,
                    report: r.stored(),
                }));
            } else if let Some(r) = meta.assemble(k, parts.into_iter().map(|(_, a, r)| (a, r)).collect()) {
                if !out.json {
                    println!("{}", r.text());
                }
                report.scenarios.push(r);
            }
        }
        let Some(sh) = out.shard else { return Ok(Some(report)) };
        let names = cells.into_iter().map(|c| c.2).collect();
        ShardFile::new("lab run", sh, header, names, meta).save(&out.out, chosen.len(), out.json)?;
        Ok(None)
    }

    /// One job at one point, every repeat, the repeats merged; each row
    /// says the point and the settings in force.
    fn run_cell(
        &self,
        out: &Output,
        image: Option<&StartImage>,
        started: std::time::Instant,
        (k, of): (usize, usize),
        job: &Job,
        point: &Point,
    ) -> Result<ScenarioReport> {
        let backends = self.backends_at(point);
        let settings = self.settings_at(point)?;
        let mut runs = Vec::new();
        for r in 0..self.repeat {
            let mut env =
                Env::new(job.scale == Scale::Quick, out.seed, backends.clone()).with_settings(settings.clone());
            env.started = started;
            env.mount_program = std::env::current_exe().ok();
            if let Some(img) = image {
                env = env.start_from(img.clone());
            }
            let mut what = format!("scenario {} of {of}: {}", k + 1, job.name);
            if !point.assign.is_empty() {
                what.push_str(&format!(", {}", assignments(&point.assign)));
            }
            if self.repeat > 1 {
                what.push_str(&format!(", repeat {} of {}", r + 1, self.repeat));
            }
            env.say(&what);
            runs.push((job.run)(&env));
        }
        let mut one = ScenarioReport::merge_repeats(runs);
        for row in &mut one.rows {
            row.point = point.assign.iter().cloned().collect();
            row.settings = in_force(&settings, &row.backend);
        }
        Ok(one)
    }

    /// Each job's estimated seconds over the cells this run runs, where
    /// known.
    fn estimates(&self, jobs: &[Job], cells: &[(usize, usize, String, f64)], chosen: &[usize]) -> Vec<Option<f64>> {
        jobs.iter()
            .enumerate()
            .map(|(k, j)| j.estimate.map(|_| chosen.iter().filter(|&&c| cells[c].0 == k).map(|&c| cells[c].3).sum()))
            .collect()
    }
}

/// A job as the merge knows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobMeta {
    name: String,
    quick: bool,
}

/// A cell's result as a shard keeps it.
#[derive(Debug, Serialize, Deserialize)]
pub struct StoredCell {
    cell: usize,
    job: usize,
    assign: Vec<(String, String)>,
    report: serde_json::Value,
}

/// What a report is assembled from besides the cells: the run's seed,
/// jobs, settings and swept keys; in a shard file, that shard's cells.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunMeta {
    seed: u64,
    jobs: Vec<JobMeta>,
    settings: String,
    swept: Vec<String>,
    cells: Vec<StoredCell>,
}

impl RunMeta {
    fn quick(&self) -> bool {
        self.jobs.iter().all(|j| j.quick)
    }

    /// Job `k`'s scenario report from its cells (each point's rows, in
    /// point order), annotated; none when no cell of it ran.
    fn assemble(&self, k: usize, parts: Vec<(Vec<(String, String)>, ScenarioReport)>) -> Option<ScenarioReport> {
        let mut merged: Option<ScenarioReport> = None;
        for (assign, mut one) in parts {
            merged = Some(match merged {
                None => one,
                Some(mut m) => {
                    m.rows.append(&mut one.rows);
                    m.failures += one.failures;
                    for sk in one.skipped {
                        if !m.skipped.contains(&sk) {
                            m.skipped.push(sk);
                        }
                    }
                    let p = assignments(&assign);
                    let new: Vec<String> = one.notes.into_iter().filter(|n| !m.notes.contains(n)).collect();
                    m.notes.extend(new.into_iter().map(|n| if p.is_empty() { n } else { format!("[{p}] {n}") }));
                    m
                }
            });
        }
        let mut r = merged?;
        if self.jobs[k].quick && !self.quick() {
            r.notes
                .push("ran at quick size, the default for this scenario; `--full` runs it at the seed's size".into());
        }
        self.annotate(&mut r);
        Some(r)
    }

    /// Say what the run's settings were, and plot each column against
    /// each swept setting: lines for numbers, grouped bars for categories.
    fn annotate(&self, r: &mut ScenarioReport) {
        let varied = !self.settings.is_empty() || !self.swept.is_empty();
        if !self.settings.is_empty() {
            r.notes.insert(0, format!("settings over every row (they win over each variant's own): {}", self.settings));
        }
        if varied && r.statistics.is_none() {
            r.notes.insert(0, "the run's settings do not apply here: this scenario builds the allocator itself".into());
        }
        for x in &self.swept {
            let rows: Vec<&mballoc_lab::report::Row> = r.rows.iter().filter(|row| row.point.contains_key(x)).collect();
            let mut values: Vec<&String> = rows.iter().filter_map(|row| row.point.get(x)).collect();
            values.sort();
            values.dedup();
            if values.len() < 2 {
                continue;
            }
            let numeric: Option<Vec<f64>> = values.iter().map(|v| v.parse::<f64>().ok()).collect();
            // Columns whose values repeat the same way under every value of
            // x (workers, write size, mode) say which row is which: they
            // split series instead of being plotted.
            let by_value = |key: &str| -> Vec<Vec<String>> {
                values
                    .iter()
                    .map(|v| {
                        rows.iter()
                            .filter(|row| row.point.get(x) == Some(v))
                            .map(|row| format!("{:?}", row.metrics.get(key)))
                            .collect()
                    })
                    .collect()
            };
            let mut split = Vec::new();
            let mut columns = Vec::new();
            for c in &r.columns {
                let v = by_value(&c.key);
                let same_everywhere = v.windows(2).all(|w| w[0] == w[1]);
                if same_everywhere && v[0].iter().collect::<std::collections::BTreeSet<_>>().len() > 1 {
                    split.push(c.key.clone());
                } else if !same_everywhere && rows.iter().any(|row| row.num(&c.key).is_some()) {
                    columns.push(c.clone());
                }
            }
            for c in columns {
                let title = format!("{}: {} by {x}", r.name, c.header);
                let p = match &numeric {
                    Some(nums) => {
                        let lo = nums.iter().copied().fold(f64::MAX, f64::min);
                        let hi = nums.iter().copied().fold(f64::MIN, f64::max);
                        let mut p = Plot::lines(&title, x, &format!("{x} (swept)"), &c.key, &c.header);
                        if !(lo > 0.0 && hi / lo >= 8.0) {
                            p = p.linear_x();
                        }
                        split.iter().fold(p, |p, k| p.split_by(k))
                    }
                    None => Plot::grouped(&title, x, &c.key, &c.header),
                };
                r.plots.push(p);
            }
        }
    }
}

/// `mballoc lab merge` of a `lab run`'s shard files: the report the run
/// makes on one machine, its tables printed unless `json`.
pub fn merge(files: Vec<ShardFile<RunMeta>>, json: bool) -> Result<Report> {
    let header = crate::shard::merged_header(&files);
    let run = &files[0].run;
    let meta = RunMeta {
        seed: run.seed,
        jobs: run.jobs.clone(),
        settings: run.settings.clone(),
        swept: run.swept.clone(),
        cells: Vec::new(),
    };
    let cells = crate::shard::in_cell_order(files, |run| run.cells.into_iter().map(|c| (c.cell, c)).collect())?;
    let mut parts: Vec<Vec<_>> = meta.jobs.iter().map(|_| Vec::new()).collect();
    for c in cells {
        let r = ScenarioReport::from_stored(c.report).context("a damaged cell in a shard file")?;
        parts.get_mut(c.job).context("a shard file's cell names a job the run does not have")?.push((c.assign, r));
    }
    let mut report = Report { seed: meta.seed, quick: meta.quick(), scenarios: vec![], header };
    for (k, parts) in parts.into_iter().enumerate() {
        if let Some(r) = meta.assemble(k, parts) {
            if !json {
                println!("{}", r.text());
            }
            report.scenarios.push(r);
        }
    }
    Ok(report)
}

/// This process's command line, each argument quoted for a POSIX shell
/// where it needs it, so the line runs again as printed. A sharded run's
/// line is the whole run's: without `--shard`.
pub fn command_line() -> String {
    crate::shard::without_shard(&std::env::args().collect::<Vec<_>>())
        .into_iter()
        .map(|a| {
            if !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=.,/:@+%".contains(&b)) {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The run's settings that configure `backend`'s rows (its scope's and
/// the workload's), as `key=value` without the scope.
fn in_force(settings: &Settings, backend: &str) -> Vec<String> {
    let scope = BackendKind::parse(backend).map(scope_of);
    settings
        .iter()
        .filter(|s| Some(s.scope) == scope || s.scope == Scope::Workload)
        .map(|s| format!("{}={}", s.key, s.value))
        .collect()
}

/// On SIGINT, SIGTERM or SIGHUP: unmount and remove the loop mounts,
/// images and volume files the lab made, turn off its tracepoints, say
/// so, and exit.
pub fn clean_up_on_signal() -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            mballoc_lab::cleanup::clean_up_and_exit(&format!("\nmballoc lab: signal {sig}: cleaning up"), 128 + sig);
        }
    });
    Ok(())
}

/// The backends `--backends` names, checked.
pub fn backends(names: &[String]) -> Result<Vec<BackendKind>> {
    names
        .iter()
        .map(|n| {
            BackendKind::parse(n.trim())
                .with_context(|| format!("unknown backend {n:?}; choose from engine, ext4, xfs, btrfs, mount"))
        })
        .collect()
}

/// Write the HTML page and, with `--json`, the JSON document; with
/// `--csv`, the CSV file. A scenario that failed on every backend it
/// tried makes the exit status nonzero, after everything is written.
pub fn finish(report: &Report, out: &Output) -> Result<()> {
    write_report(report, &out.out, out.csv.as_deref(), out.json)
}

/// [`finish`] with its parts named: the page in `dir`, the CSV file,
/// JSON or the page's path on stdout.
pub fn write_report(report: &Report, dir: &std::path::Path, csv: Option<&std::path::Path>, json: bool) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let page = dir.join("index.html");
    std::fs::write(&page, report.html()).with_context(|| page.display().to_string())?;
    if let Some(csv) = csv {
        std::fs::write(csv, report.csv()).with_context(|| csv.display().to_string())?;
    }
    if json {
        println!("{}", report.json());
    } else {
        println!("report: {}", page.display());
    }
    let failed: Vec<&str> =
        report.scenarios.iter().filter(|s| s.rows.is_empty() && s.failures > 0).map(|s| s.name.as_str()).collect();
    if !failed.is_empty() {
        bail!("{} failed on every backend it ran on (the notes say why)", failed.join(", "));
    }
    Ok(())
}
