//! A lab run as the command line drives it: the run's settings over every
//! row, each combination of the swept settings, each repeated, the repeats
//! merged into medians with their samples, and a signal on the way
//! cleaning up everything the lab made.

use crate::Output;
use anyhow::{Context, Result};
use mballoc_lab::backend::BackendKind;
use mballoc_lab::report::{Report, ScenarioReport};
use mballoc_lab::scenarios::{Env, StartImage};
use mballoc_lab::settings::Settings;

/// A scenario as a run drives it: its name and how to run it once.
pub type Job = (String, RunScenario);
pub type RunScenario = Box<dyn Fn(&Env) -> ScenarioReport>;

/// What a lab run does: the settings over every row, each combination of
/// the swept settings, each repeated.
pub struct Plan {
    settings: Settings,
    combinations: Vec<Vec<(String, String)>>,
    swept: Vec<String>,
    repeat: u32,
    backends: Vec<BackendKind>,
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
        Ok(Plan {
            settings,
            combinations: mballoc_lab::settings::combinations(&all),
            swept: all.into_iter().map(|(k, _)| k).collect(),
            repeat: out.repeat,
            backends: backends(&out.backends)?,
        })
    }

    /// Run every job under every combination, `repeat` times, printing each
    /// scenario's table as it finishes (unless `--json`). A signal on the
    /// way unmounts and removes what the lab made.
    pub fn run(&self, out: &Output, quick: bool, image: Option<&StartImage>, jobs: &[Job]) -> Result<Report> {
        clean_up_on_signal()?;
        let started = std::time::Instant::now();
        let mut report = Report { seed: out.seed, quick, scenarios: vec![] };
        for (k, (name, job)) in jobs.iter().enumerate() {
            let mut merged: Option<ScenarioReport> = None;
            for point in &self.combinations {
                let mut settings = self.settings.clone();
                for (key, value) in point {
                    settings.set_str(&format!("{key}={value}"))?;
                }
                let mut runs = Vec::new();
                for r in 0..self.repeat {
                    let mut env = Env::new(quick, out.seed, self.backends.clone()).with_settings(settings.clone());
                    env.started = started;
                    env.mount_program = std::env::current_exe().ok();
                    if let Some(img) = image {
                        env = env.start_from(img.clone());
                    }
                    let mut what = format!("scenario {} of {}: {name}", k + 1, jobs.len());
                    if !point.is_empty() {
                        let p: Vec<String> = point.iter().map(|(k, v)| format!("{k}={v}")).collect();
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
                    row.point = point.iter().cloned().collect();
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
                        let p: Vec<String> = point.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        let new: Vec<String> = one.notes.into_iter().filter(|n| !m.notes.contains(n)).collect();
                        m.notes.extend(new.into_iter().map(|n| format!("[{}] {n}", p.join(", "))));
                        m
                    }
                });
            }
            let mut r = merged.expect("at least one combination");
            self.annotate(&mut r);
            if !out.json {
                println!("{}", r.text());
            }
            report.scenarios.push(r);
        }
        Ok(report)
    }

    /// Say what the run's settings were, and plot each column against the
    /// first swept setting.
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
        let Some(x) = self.swept.first() else { return };
        let values: Vec<f64> = self.combinations.iter().filter_map(|c| c.first()?.1.parse().ok()).collect();
        if values.len() != self.combinations.len() {
            return;
        }
        let lo = values.iter().copied().fold(f64::MAX, f64::min);
        let hi = values.iter().copied().fold(f64::MIN, f64::max);
        let log = lo > 0.0 && hi / lo >= 8.0;
        // Columns whose values repeat the same way under every point
        // (workers, write size, mode) say which row is which: they split
        // series instead of being plotted.
        let by_point = |key: &str| -> Vec<Vec<String>> {
            self.combinations
                .iter()
                .map(|c| {
                    let point: std::collections::BTreeMap<String, String> = c.iter().cloned().collect();
                    r.rows
                        .iter()
                        .filter(|row| row.point == point)
                        .map(|row| format!("{:?}", row.metrics.get(key)))
                        .collect()
                })
                .collect()
        };
        let mut split = Vec::new();
        let mut columns = Vec::new();
        for c in &r.columns {
            let v = by_point(c.key);
            let same_everywhere = v.windows(2).all(|w| w[0] == w[1]);
            if same_everywhere && v[0].iter().collect::<std::collections::BTreeSet<_>>().len() > 1 {
                split.push(c.key);
            } else if !same_everywhere && r.rows.iter().any(|row| row.num(c.key).is_some()) {
                columns.push(c.clone());
            }
        }
        for c in columns {
            let mut p = mballoc_lab::report::Plot::lines(
                &format!("{}: {} by {x}", r.name, c.header),
                x,
                &format!("{x} (swept)"),
                c.key,
                c.header,
            );
            if !log {
                p = p.linear_x();
            }
            for k in &split {
                p = p.split_by(k);
            }
            r.plots.push(p);
        }
    }
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
