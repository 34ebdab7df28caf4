//! A lab run as the command line drives it: the run's settings over every
//! row, each combination of the swept settings, each repeated, the repeats
//! merged into medians with their samples, and a signal on the way
//! cleaning up everything the lab made; and where its report is written.

use crate::pace::Pace;
use crate::Output;
use anyhow::{bail, Context, Result};
use mballoc_lab::backend::BackendKind;
use mballoc_lab::report::{Header, Plot, Report, ScenarioReport};
use mballoc_lab::scenarios::{Env, Scale, StartImage};
use mballoc_lab::settings::sweep::{self, Point};
use mballoc_lab::settings::{Scope, Settings, SweepMode};

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

    /// Run every job at every point, `repeat` times, printing each
    /// scenario's table as it finishes (unless `--json`). A signal on the
    /// way unmounts and removes what the lab made.
    pub fn run(&self, out: &Output, image: Option<&StartImage>, jobs: &[Job]) -> Result<Report> {
        clean_up_on_signal()?;
        let started = std::time::Instant::now();
        let mut header = Header::now();
        header.commit = env!("MBALLOC_COMMIT").to_string();
        header.command = command_line();
        header.settings = self.settings.describe();
        let quick = jobs.iter().all(|j| j.scale == Scale::Quick);
        let mut report = Report { seed: out.seed, quick, scenarios: vec![], header };
        let pace = Pace::new(self.estimates(jobs));
        pace.announce(self.repeat);
        for (k, Job { name, run: job, scale, .. }) in jobs.iter().enumerate() {
            let mut merged: Option<ScenarioReport> = None;
            for point in &self.points {
                let backends = self.backends_at(point);
                if backends.is_empty() {
                    continue;
                }
                let settings = self.settings_at(point)?;
                let mut runs = Vec::new();
                for r in 0..self.repeat {
                    let mut env =
                        Env::new(*scale == Scale::Quick, out.seed, backends.clone()).with_settings(settings.clone());
                    env.started = started;
                    env.mount_program = std::env::current_exe().ok();
                    if let Some(img) = image {
                        env = env.start_from(img.clone());
                    }
                    let mut what = format!("scenario {} of {}: {name}", k + 1, jobs.len());
                    if !point.assign.is_empty() {
                        let p: Vec<String> = point.assign.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        what.push_str(&format!(", {}", p.join(", ")));
                    }
                    if self.repeat > 1 {
                        what.push_str(&format!(", repeat {} of {}", r + 1, self.repeat));
                    }
                    env.say(&what);
                    runs.push(job(&env));
                }
                let mut one = ScenarioReport::merge_repeats(runs);
                for row in &mut one.rows {
                    row.point = point.assign.iter().cloned().collect();
                    row.settings = in_force(&settings, &row.backend);
                }
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
                        let p: Vec<String> = point.assign.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        let new: Vec<String> = one.notes.into_iter().filter(|n| !m.notes.contains(n)).collect();
                        m.notes.extend(new.into_iter().map(|n| {
                            if p.is_empty() {
                                n
                            } else {
                                format!("[{}] {n}", p.join(", "))
                            }
                        }));
                        m
                    }
                });
            }
            pace.done(k);
            let Some(mut r) = merged else { continue };
            if *scale == Scale::Quick && !quick {
                r.notes.push(
                    "ran at quick size, the default for this scenario; `--full` runs it at the seed's size".into(),
                );
            }
            self.annotate(&mut r);
            if !out.json {
                println!("{}", r.text());
            }
            report.scenarios.push(r);
        }
        Ok(report)
    }

    /// Each job's estimated seconds over every point and repeat, where
    /// known.
    fn estimates(&self, jobs: &[Job]) -> Vec<Option<f64>> {
        let points = self.points.iter().filter(|p| !self.backends_at(p).is_empty()).count();
        let runs = (points as u32 * self.repeat) as f64;
        jobs.iter().map(|j| j.estimate.map(|one| one * runs)).collect()
    }

    /// Say what the run's settings were, and plot each column against
    /// each swept setting: lines for numbers, grouped bars for categories.
    fn annotate(&self, r: &mut ScenarioReport) {
        let varied = !self.settings.is_empty() || !self.swept.is_empty();
        if !self.settings.is_empty() {
            r.notes.insert(
                0,
                format!("settings over every row (they win over each variant's own): {}", self.settings.describe()),
            );
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
                let v = by_value(c.key);
                let same_everywhere = v.windows(2).all(|w| w[0] == w[1]);
                if same_everywhere && v[0].iter().collect::<std::collections::BTreeSet<_>>().len() > 1 {
                    split.push(c.key);
                } else if !same_everywhere && rows.iter().any(|row| row.num(c.key).is_some()) {
                    columns.push(c.clone());
                }
            }
            for c in columns {
                let title = format!("{}: {} by {x}", r.name, c.header);
                let p = match &numeric {
                    Some(nums) => {
                        let lo = nums.iter().copied().fold(f64::MAX, f64::min);
                        let hi = nums.iter().copied().fold(f64::MIN, f64::max);
                        let mut p = Plot::lines(&title, x, &format!("{x} (swept)"), c.key, c.header);
                        if !(lo > 0.0 && hi / lo >= 8.0) {
                            p = p.linear_x();
                        }
                        split.iter().fold(p, |p, k| p.split_by(k))
                    }
                    None => Plot::grouped(&title, x, c.key, c.header),
                };
                r.plots.push(p);
            }
        }
    }
}

/// This process's command line, each argument quoted for a POSIX shell
/// where it needs it, so the line runs again as printed.
pub fn command_line() -> String {
    std::env::args()
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
    std::fs::create_dir_all(&out.out).with_context(|| out.out.display().to_string())?;
    let page = out.out.join("index.html");
    std::fs::write(&page, report.html()).with_context(|| page.display().to_string())?;
    if let Some(csv) = &out.csv {
        std::fs::write(csv, report.csv()).with_context(|| csv.display().to_string())?;
    }
    if out.json {
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
