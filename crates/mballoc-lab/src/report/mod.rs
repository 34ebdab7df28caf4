//! Results and their renderings: text tables on the terminal and CSV
//! (`table.rs`), JSON (`{"header", "scenarios":[{"name","rows":[{"backend",
//! "variant","metrics"}]}]}`), and an HTML page (`page.rs`) with the same
//! tables and SVG plots (`plot.rs`, drawn with plotters). Every rendering starts from the run's
//! [`Header`], so two reports can always be told apart.

mod page;
mod plot;
mod stored;
mod table;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What a report was made on, by what and how: enough to tell two
/// reports apart and to run one again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// When the run began, UTC (`2026-11-25T23:20:05Z`).
    pub date: String,
    /// The commit the `mballoc` binary was built from.
    pub commit: String,
    /// The command line, as typed (arguments quoted where needed).
    pub command: String,
    /// Every setting laid over the rows (`--set` and a workload's tables).
    pub settings: String,
}

impl Header {
    /// This machine, now; the caller fills in the commit, command and
    /// settings it knows.
    pub fn now() -> Header {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".into(), |s| s.trim().to_string());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Header { kernel, cpus, date: utc(secs), ..Header::default() }
    }

    /// The header as lines of `key: value`.
    pub fn lines(&self) -> Vec<(&'static str, String)> {
        vec![
            ("kernel", self.kernel.clone()),
            ("CPUs", self.cpus.to_string()),
            ("date", self.date.clone()),
            ("commit", self.commit.clone()),
            ("command", self.command.clone()),
            ("settings", if self.settings.is_empty() { "none".into() } else { self.settings.clone() }),
        ]
    }
}

/// Seconds since the epoch as an ISO 8601 UTC time (the civil-from-days
/// conversion of the proleptic Gregorian calendar).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// One result row: a backend, a variant of it, and named metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Backend name (`engine`, `ext4`, ...).
    pub backend: String,
    /// The configuration of the backend this row ran.
    pub variant: String,
    /// Named values (with `--repeat`, the median of the samples).
    pub metrics: Map<String, Value>,
    /// The swept settings this row ran with (`--sweep`), by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub point: BTreeMap<String, String>,
    /// No data moved: the row's bytes per second are blocks placed in
    /// memory, kept under `placed_*` keys, never in a bandwidth column.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_data: bool,
    /// The run's settings that configured this row's backend
    /// (`key=value`, its scope's and the workload's), swept ones included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<String>,
    /// With `--repeat`: every sample of each numeric metric, in run order.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub samples: BTreeMap<String, Vec<f64>>,
}

impl Row {
    /// An empty row.
    pub fn new(backend: &str, variant: &str) -> Row {
        Row {
            backend: backend.into(),
            variant: variant.into(),
            metrics: Map::new(),
            point: BTreeMap::new(),
            no_data: false,
            settings: Vec::new(),
            samples: BTreeMap::new(),
        }
    }

    /// The variant with every run setting in force on its backend: what
    /// a table or legend calls the row, so a label never hides a setting
    /// that overrode the variant's own.
    pub fn label(&self) -> String {
        let unswept = self.unswept_settings();
        let mut l = self.variant.clone();
        if self.no_data {
            l.push_str(" (in memory: no data moved)");
        }
        if !unswept.is_empty() {
            let _ = write!(l, " [{}]", unswept.join(", "));
        }
        l
    }

    /// The settings in force that were not swept (a swept one has a column
    /// of its own).
    fn unswept_settings(&self) -> Vec<&str> {
        let swept = |s: &str| {
            self.point
                .keys()
                .any(|k| k.split_once('.').is_some_and(|(_, key)| s.split_once('=').is_some_and(|(sk, _)| sk == key)))
        };
        self.settings.iter().map(String::as_str).filter(|s| !swept(s)).collect()
    }

    /// The value of `key`: a metric, or a swept setting read as a number.
    pub fn value(&self, key: &str) -> Option<f64> {
        self.num(key).or_else(|| self.point.get(key).and_then(|v| v.parse().ok()))
    }

    /// The cell of `key` with `decimals`: the median and, when repeats
    /// differ, their range.
    fn cell(&self, key: &str, decimals: usize) -> String {
        let v = cell(self.metrics.get(key), decimals);
        match self.range(key) {
            Some((lo, hi)) if lo != hi => format!("{v} ({lo:.decimals$}–{hi:.decimals$})"),
            _ => v,
        }
    }

    /// The least and greatest of `key`'s samples, when it was repeated.
    pub fn range(&self, key: &str) -> Option<(f64, f64)> {
        let s = self.samples.get(key).filter(|s| s.len() > 1)?;
        Some((s.iter().copied().fold(f64::MAX, f64::min), s.iter().copied().fold(f64::MIN, f64::max)))
    }

    /// `backend variant, key=value...` for a plot's legend: the swept
    /// settings but `except` (the plot's x), each by its last name.
    fn series_name(&self, except: &str) -> String {
        let mut name = format!("{} {}", self.backend, self.label());
        for (k, v) in self.point.iter().filter(|(k, _)| *k != except) {
            let _ = write!(name, ", {}={v}", k.rsplit('.').next().unwrap_or(k));
        }
        name
    }

    /// Set a metric.
    pub fn set(&mut self, key: &str, v: impl Into<Value>) -> &mut Row {
        self.metrics.insert(key.into(), v.into());
        self
    }

    /// A number, if the metric is one.
    pub fn num(&self, key: &str) -> Option<f64> {
        self.metrics.get(key).and_then(Value::as_f64)
    }
}

/// A table column: a metric key, its header, its decimals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Column {
    /// The metric shown.
    pub key: Cow<'static, str>,
    /// Its column header.
    pub header: Cow<'static, str>,
    /// Decimals printed for a fractional value.
    pub decimals: usize,
}

/// Shorthand for a [`Column`].
pub const fn col(key: &'static str, header: &'static str, decimals: usize) -> Column {
    Column { key: Cow::Borrowed(key), header: Cow::Borrowed(header), decimals }
}

/// A plot of one scenario's rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Plot {
    /// `y` against `x`, one line per combination of everything else.
    Lines(LinePlot),
    /// Per row, the share of free blocks in each e2freefrag bucket (the
    /// row's `free_hist_blocks` metric), all on one x range.
    FreeHistograms {
        /// Shown above the plots.
        title: String,
    },
    /// `y` against a swept setting `x` whose values are categories (a
    /// profile, a table): a group of bars per value, a bar per series.
    Grouped {
        /// Shown above the plot.
        title: String,
        /// The swept setting (`engine.profile`).
        x: String,
        /// The metric.
        y: String,
        /// The metric in words, with its unit.
        y_label: String,
    },
    /// One horizontal bar per row: `y` of each backend and variant, with
    /// the min–max of repeats as a whisker.
    Bars {
        /// Shown above the plot.
        title: String,
        /// The metric.
        y: String,
        /// The metric in words, with its unit.
        y_label: String,
    },
}

/// A line plot: one series per backend, variant, swept setting other
/// than `x`, and each metric named in `split_by`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinePlot {
    /// Shown above the plot.
    pub title: String,
    /// The metric (or swept setting) on the x axis.
    pub x: String,
    /// The x axis in words, with its unit.
    pub x_label: String,
    /// The metric on the y axis.
    pub y: String,
    /// The y axis in words, with its unit.
    pub y_label: String,
    /// Metrics whose values split series (folio-write's `mode`).
    pub split_by: Vec<String>,
    /// Only rows whose metric `.0` is the text `.1`.
    pub only: Vec<(String, String)>,
    /// A log-2 x axis (worker counts, sizes).
    pub log_x: bool,
}

impl Plot {
    /// `y` (in words: `y_label`) against `x` (`x_label`), log-2 x axis.
    pub fn lines(title: &str, x: &str, x_label: &str, y: &str, y_label: &str) -> Plot {
        Plot::Lines(LinePlot {
            title: title.into(),
            x: x.into(),
            x_label: x_label.into(),
            y: y.into(),
            y_label: y_label.into(),
            split_by: vec![],
            only: vec![],
            log_x: true,
        })
    }

    /// One bar per row of metric `y` (in words: `y_label`).
    pub fn bars(title: &str, y: &str, y_label: &str) -> Plot {
        Plot::Bars { title: title.into(), y: y.into(), y_label: y_label.into() }
    }

    /// `y` (in words: `y_label`) against the swept category `x`.
    pub fn grouped(title: &str, x: &str, y: &str, y_label: &str) -> Plot {
        Plot::Grouped { title: title.into(), x: x.into(), y: y.into(), y_label: y_label.into() }
    }

    /// Only the rows whose metric `key` is the text `value`.
    pub fn only(mut self, key: &str, value: &str) -> Plot {
        if let Plot::Lines(l) = &mut self {
            l.only.push((key.into(), value.into()));
        }
        self
    }

    /// Separate series for each value of metric `key`.
    pub fn split_by(mut self, key: &str) -> Plot {
        if let Plot::Lines(l) = &mut self {
            l.split_by.push(key.into());
        }
        self
    }

    /// A linear x axis.
    pub fn linear_x(mut self) -> Plot {
        if let Plot::Lines(l) = &mut self {
            l.log_x = false;
        }
        self
    }
}

/// A scenario's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioReport {
    /// Short name (`fio-falloc`).
    pub name: String,
    /// One line on what was run.
    pub title: String,
    /// The rows, in run order.
    pub rows: Vec<Row>,
    /// Backends that could not run here, with the reason.
    pub skipped: Vec<String>,
    /// Remarks printed under the table.
    pub notes: Vec<String>,
    /// The statistics setting every backend ran with (`mb_stats=0 on
    /// every backend`), where the scenario compares backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistics: Option<String>,
    /// Rows that failed (each also a note).
    pub failures: usize,
    /// The seed's own tables this scenario reproduces (found again by
    /// the scenario's name when a report is read back).
    #[serde(skip_deserializing)]
    pub published: Vec<crate::published::Published>,
    #[serde(skip)]
    /// The table's columns.
    pub columns: Vec<Column>,
    /// Preformatted blocks (mb_stats, e2freefrag output), titled.
    #[serde(skip)]
    pub sections: Vec<(String, String)>,
    #[serde(skip)]
    /// Plots of the rows.
    pub plots: Vec<Plot>,
}

impl ScenarioReport {
    /// An empty report with these columns.
    pub fn new(name: &str, title: &str, columns: Vec<Column>) -> Self {
        ScenarioReport {
            name: name.into(),
            title: title.into(),
            rows: vec![],
            skipped: vec![],
            notes: vec![],
            statistics: None,
            failures: 0,
            published: crate::published::for_scenario(name),
            columns,
            sections: vec![],
            plots: vec![],
        }
    }

    /// Record, once, that `backend` cannot run here and why.
    pub fn skip(&mut self, backend: &str, why: &str) {
        if !self.is_skipped(backend) {
            self.skipped.push(format!("{backend}: {why}"));
        }
    }

    /// Whether `backend` was found unable to run here.
    pub fn is_skipped(&self, backend: &str) -> bool {
        self.skipped.iter().any(|s| s.strip_prefix(backend).is_some_and(|r| r.starts_with(':')))
    }

    /// One report from `runs` of the same scenario (`--repeat`): each row
    /// matched with the same row of every run (by backend, variant, swept
    /// settings and order among its like), each numeric metric the median
    /// of its samples, the samples kept. Notes and sections are the first
    /// run's; a row or a skip that only a later run has is added.
    pub fn merge_repeats(mut runs: Vec<ScenarioReport>) -> ScenarioReport {
        if runs.len() <= 1 {
            return runs.pop().unwrap_or_else(|| ScenarioReport::new("", "", vec![]));
        }
        let n = runs.len();
        let keyed = |rep: &ScenarioReport| {
            let mut seen: BTreeMap<(String, String, String), usize> = BTreeMap::new();
            rep.rows
                .iter()
                .map(|r| {
                    let id = (r.backend.clone(), r.variant.clone(), format!("{:?}", r.point));
                    let k = seen.entry(id.clone()).or_insert(0);
                    *k += 1;
                    (id, *k)
                })
                .collect::<Vec<_>>()
        };
        let keys: Vec<_> = runs.iter().map(keyed).collect();
        let mut base = runs[0].clone();
        for (i, row) in base.rows.iter_mut().enumerate() {
            let matched: Vec<&Row> = (0..n)
                .filter_map(|j| keys[j].iter().position(|k| *k == keys[0][i]).map(|p| &runs[j].rows[p]))
                .collect();
            for (key, v) in row.metrics.iter_mut() {
                if !v.is_number() {
                    continue;
                }
                let samples: Vec<f64> = matched.iter().filter_map(|r| r.num(key)).collect();
                *v = Value::from(median(&samples));
                row.samples.insert(key.clone(), samples);
            }
        }
        for j in 1..n {
            for (p, k) in keys[j].iter().enumerate() {
                if !keys[0].contains(k) && !base.rows.iter().any(|r| r.backend == k.0 .0 && r.variant == k.0 .1) {
                    base.rows.push(runs[j].rows[p].clone());
                }
            }
            for sk in std::mem::take(&mut runs[j].skipped) {
                if !base.skipped.contains(&sk) {
                    base.skipped.push(sk);
                }
            }
            base.failures += runs[j].failures;
        }
        base.notes.push(format!(
            "{n} repeats: cells are the median (min–max when the repeats differ); notes and sections are from the first"
        ));
        base
    }

    /// Everything the terminal shows for this scenario.
    pub fn text(&self) -> String {
        let mut o = format!("== {}: {}\n", self.name, self.title);
        if let Some(st) = &self.statistics {
            let _ = writeln!(o, "   {st}");
        }
        for s in &self.skipped {
            let _ = writeln!(o, "   skipped: {s}");
        }
        o.push_str(&self.table());
        for p in &self.published {
            o.push_str(&p.text());
        }
        for n in &self.notes {
            let _ = writeln!(o, "   {n}");
        }
        for (title, body) in &self.sections {
            let _ = writeln!(o, "\n   {title}:");
            for l in body.lines() {
                let _ = writeln!(o, "     {l}");
            }
        }
        o
    }
}

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn cell(v: Option<&Value>, decimals: usize) -> String {
    match v {
        None | Some(Value::Null) => "n/a".into(),
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => n.to_string(),
        Some(Value::Number(n)) => format!("{:.*}", decimals, n.as_f64().unwrap_or(f64::NAN)),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a.iter().map(|x| cell(Some(x), decimals)).collect::<Vec<_>>().join("/"),
        Some(v) => v.to_string(),
    }
}

/// A whole lab run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The machine, time, commit, command line and settings of the run.
    pub header: Header,
    /// The seed every random choice came from.
    pub seed: u64,
    /// Whether sizes were scaled down (`--quick`).
    pub quick: bool,
    /// Each scenario's results, in run order.
    pub scenarios: Vec<ScenarioReport>,
}

impl Report {
    /// The JSON document (`--json`).
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_prints_numbers_and_na() {
        let mut s = ScenarioReport::new("x", "t", vec![col("a", "A", 1), col("b", "B", 0)]);
        let mut r = Row::new("engine", "v");
        r.set("a", 1.25).set("b", Value::Null);
        s.rows.push(r);
        let t = s.table();
        assert!(t.contains("engine"), "{t}");
        assert!(t.contains("1.2") || t.contains("1.3"), "{t}");
        assert!(t.contains("n/a"), "{t}");
    }

    #[test]
    fn html_has_tables_and_plots() {
        let mut s = ScenarioReport::new("f", "t", vec![col("workers", "workers", 0), col("ops_per_s", "ops/s", 0)]);
        for w in [1u64, 2, 8] {
            let mut r = Row::new("engine", "scalable");
            r.set("workers", w).set("ops_per_s", 1000.0 * w as f64);
            s.rows.push(r);
        }
        s.plots.push(Plot::lines("ops", "workers", "workers", "ops_per_s", "operations per second"));
        let html = Report { header: Header::now(), seed: 1, quick: true, scenarios: vec![s] }.html();
        assert!(html.contains("<table>") && html.contains("<polyline"), "{html}");
        assert!(html.contains("kernel</td>") && html.contains("commit</td>"), "{html}");
    }

    fn sample(ops: f64, label: &str) -> ScenarioReport {
        let mut s = ScenarioReport::new("f", "t", vec![col("workers", "workers", 0), col("ops_per_s", "ops/s", 0)]);
        for w in [1u64, 8] {
            let mut r = Row::new("engine", label);
            r.set("workers", w).set("ops_per_s", ops * w as f64).set("note", "text");
            s.rows.push(r);
        }
        s
    }

    #[test]
    fn repeats_merge_into_medians_with_their_samples() {
        let runs = vec![sample(10.0, "a"), sample(30.0, "a"), sample(20.0, "a")];
        let m = ScenarioReport::merge_repeats(runs);
        assert_eq!(m.rows.len(), 2);
        assert_eq!(m.rows[1].num("ops_per_s"), Some(160.0));
        assert_eq!(m.rows[1].samples["ops_per_s"], [80.0, 240.0, 160.0]);
        // Equal samples print once; differing ones with their range.
        let t = m.table();
        assert!(t.contains("160 (80–240)") && !t.contains("8 (8–8)"), "{t}");
        let csv = Report { header: Header::now(), seed: 1, quick: true, scenarios: vec![m] }.csv();
        assert!(csv.contains("f,engine,a,,,3,ops_per_s,160"), "{csv}");
        assert!(csv.contains("f,engine,a,,,,note,text"), "{csv}");
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn dates_are_utc_iso() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_795_734_005), "2026-11-26T23:00:05Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn labels_state_the_settings_in_force() {
        let mut r = Row::new("ext4", "with CR_BEST_AVAIL_LEN");
        assert_eq!(r.label(), "with CR_BEST_AVAIL_LEN");
        r.settings = vec!["mb_best_avail_max_trim_order=0".into()];
        assert_eq!(r.label(), "with CR_BEST_AVAIL_LEN [mb_best_avail_max_trim_order=0]");
    }

    #[test]
    fn a_row_only_a_later_repeat_has_is_kept() {
        let mut second = sample(10.0, "a");
        second.rows.push(Row::new("ext4", "default"));
        let m = ScenarioReport::merge_repeats(vec![sample(10.0, "a"), second]);
        assert!(m.rows.iter().any(|r| r.backend == "ext4"));
    }
}
