//! Results and their three renderings: text tables on the terminal, JSON
//! (`{"scenarios":[{"name","rows":[{"backend","variant","metrics"}]}]}`),
//! and an HTML page with the same tables and SVG plots.

use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One result row: a backend, a variant of it, and named metrics.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Backend name (`engine`, `ext4`, ...).
    pub backend: String,
    /// The configuration of the backend this row ran.
    pub variant: String,
    /// Named values (with `--repeat`, the median of the samples).
    pub metrics: Map<String, Value>,
    /// The swept settings this row ran with (`--sweep`), by key.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub point: BTreeMap<String, String>,
    /// With `--repeat`: every sample of each numeric metric, in run order.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
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
            samples: BTreeMap::new(),
        }
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
        let mut name = format!("{} {}", self.backend, self.variant);
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
#[derive(Debug, Clone)]
pub struct Column {
    /// The metric shown.
    pub key: &'static str,
    /// Its column header.
    pub header: &'static str,
    /// Decimals printed for a fractional value.
    pub decimals: usize,
}

/// Shorthand for a [`Column`].
pub const fn col(key: &'static str, header: &'static str, decimals: usize) -> Column {
    Column { key, header, decimals }
}

/// A plot of one scenario's rows.
#[derive(Debug, Clone)]
pub enum Plot {
    /// `y` against `x`, one line per combination of everything else.
    Lines(LinePlot),
    /// Per row, the share of free blocks in each e2freefrag bucket (the
    /// row's `free_hist_blocks` metric), all on one x range.
    FreeHistograms {
        /// Shown above the plots.
        title: String,
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
#[derive(Debug, Clone)]
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
#[derive(Debug, Clone, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statistics: Option<String>,
    /// Rows that failed (each also a note).
    pub failures: usize,
    /// The seed's own tables this scenario reproduces.
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

    /// The table as text.
    pub fn table(&self) -> String {
        let mut cells: Vec<Vec<String>> = vec![];
        let swept = self.swept_keys();
        let mut head = vec!["backend".to_string(), "variant".to_string()];
        head.extend(swept.iter().cloned());
        head.extend(self.columns.iter().map(|c| c.header.to_string()));
        cells.push(head);
        for r in &self.rows {
            let mut line = vec![r.backend.clone(), r.variant.clone()];
            line.extend(swept.iter().map(|k| r.point.get(k).cloned().unwrap_or_default()));
            line.extend(self.columns.iter().map(|c| r.cell(c.key, c.decimals)));
            cells.push(line);
        }
        let fixed = 2 + swept.len();
        let widths: Vec<usize> =
            (0..cells[0].len()).map(|i| cells.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
        let mut o = String::new();
        for line in &cells {
            for (i, c) in line.iter().enumerate() {
                if i < fixed {
                    let _ = write!(o, "{c:<w$}  ", w = widths[i]);
                } else {
                    let _ = write!(o, "{c:>w$}  ", w = widths[i]);
                }
            }
            o.truncate(o.trim_end().len());
            o.push('\n');
        }
        o
    }

    /// The swept settings of any row, in order.
    pub fn swept_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for r in &self.rows {
            for k in r.point.keys() {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
        }
        keys
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

    /// Every value as CSV (`--csv`), one line per sample:
    /// `scenario,backend,variant,setting,repeat,metric,value`. `setting`
    /// is the row's swept settings (`key=value;...`), `repeat` counts from
    /// 1 (empty when the run was not repeated), arrays are joined with
    /// spaces.
    pub fn csv(&self) -> String {
        let mut o = String::from("scenario,backend,variant,setting,repeat,metric,value\n");
        for s in &self.scenarios {
            for r in &s.rows {
                let point = r.point.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";");
                let head =
                    [s.name.as_str(), r.backend.as_str(), r.variant.as_str(), point.as_str()].map(csv_field).join(",");
                for (key, v) in &r.metrics {
                    match r.samples.get(key) {
                        Some(samples) => {
                            for (i, x) in samples.iter().enumerate() {
                                let _ = writeln!(o, "{head},{},{},{x}", i + 1, csv_field(key));
                            }
                        }
                        None => {
                            let text = match v {
                                Value::String(t) => t.clone(),
                                Value::Array(a) => a.iter().map(|x| cell(Some(x), 6)).collect::<Vec<_>>().join(" "),
                                other => other.to_string(),
                            };
                            let _ = writeln!(o, "{head},,{},{}", csv_field(key), csv_field(&text));
                        }
                    }
                }
            }
        }
        o
    }

    /// The HTML page (`DIR/index.html`).
    pub fn html(&self) -> String {
        let mut o = String::from(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>mballoc lab</title>\n<style>\
             body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}\
             table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px}\
             td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}\
             caption{text-align:left;font-weight:bold;padding:4px 0}\
             table.pub{background:#fbf8ef}\
             pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px}\
             .skip{color:#a60}.stats{color:#555}svg{margin:0.5em 1em 0.5em 0}</style></head><body>\n",
        );
        let _ = writeln!(
            o,
            "<h1>mballoc lab</h1><p>seed {}{}</p>",
            self.seed,
            if self.quick { ", quick sizes" } else { "" }
        );
        for s in &self.scenarios {
            let _ = writeln!(o, "<h2 id=\"{0}\">{0}</h2><p>{1}</p>", esc(&s.name), esc(&s.title));
            if let Some(st) = &s.statistics {
                let _ = writeln!(o, "<p class=\"stats\">{}</p>", esc(st));
            }
            for k in &s.skipped {
                let _ = writeln!(o, "<p class=\"skip\">skipped: {}</p>", esc(k));
            }
            let swept = s.swept_keys();
            o.push_str("<table><caption>this run</caption><tr><th>backend</th><th>variant</th>");
            for k in &swept {
                let _ = write!(o, "<th>{}</th>", esc(k));
            }
            for c in &s.columns {
                let _ = write!(o, "<th>{}</th>", esc(c.header));
            }
            o.push_str("</tr>\n");
            for r in &s.rows {
                let _ = write!(o, "<tr><td>{}</td><td>{}</td>", esc(&r.backend), esc(&r.variant));
                for k in &swept {
                    let _ = write!(o, "<td class=\"n\">{}</td>", esc(r.point.get(k).map_or("", String::as_str)));
                }
                for c in &s.columns {
                    let _ = write!(o, "<td class=\"n\">{}</td>", esc(&r.cell(c.key, c.decimals)));
                }
                o.push_str("</tr>\n");
            }
            o.push_str("</table>\n");
            for p in &s.published {
                o.push_str(&p.html());
            }
            for n in &s.notes {
                let _ = writeln!(o, "<p>{}</p>", esc(n));
            }
            for p in &s.plots {
                match p {
                    Plot::Lines(l) => o.push_str(&svg_lines(l, &s.rows)),
                    Plot::FreeHistograms { title } => o.push_str(&svg_histograms(title, &s.rows)),
                    Plot::Bars { title, y, y_label } => o.push_str(&svg_bars(title, &s.rows, y, y_label)),
                }
            }
            for (title, body) in &s.sections {
                let _ = writeln!(o, "<h4>{}</h4><pre>{}</pre>", esc(title), esc(body));
            }
        }
        o.push_str("</body></html>\n");
        o
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const COLOURS: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];

/// Dash patterns, so that more series than colours stay apart.
const DASHES: [&str; 3] = ["", "6,3", "2,3"];

/// Series of a line plot: one per backend, variant, swept setting but
/// `x`, and value of each `split_by` metric.
fn series(plot: &LinePlot, rows: &[Row]) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = vec![];
    let wanted = |r: &Row| plot.only.iter().all(|(k, v)| r.metrics.get(k).and_then(Value::as_str) == Some(v.as_str()));
    for r in rows.iter().filter(|r| wanted(r)) {
        let (Some(xv), Some(yv)) = (r.value(&plot.x), r.num(&plot.y)) else { continue };
        let mut name = r.series_name(&plot.x);
        for k in &plot.split_by {
            if let Some(v) = r.metrics.get(k) {
                let _ = write!(name, ", {k}={}", cell(Some(v), 0));
            }
        }
        match out.iter_mut().find(|s| s.0 == name) {
            Some(s) => s.1.push((xv, yv)),
            None => out.push((name, vec![(xv, yv)])),
        }
    }
    for s in &mut out {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

fn svg_lines(plot: &LinePlot, rows: &[Row]) -> String {
    let series = series(plot, rows);
    if series.is_empty() {
        return String::new();
    }
    let legend_h = 14.0 * series.len() as f64;
    let (w, l, b, t, rgt) = (760.0, 78.0, 46.0, 30.0, 300.0);
    let h = (340.0f64).max(t + legend_h + b);
    let lx = |v: f64| if plot.log_x { v.max(1e-9).log2() } else { v };
    let xs: Vec<f64> = series.iter().flat_map(|s| s.1.iter().map(|p| lx(p.0))).collect();
    let (x0, x1) = (xs.iter().cloned().fold(f64::MAX, f64::min), xs.iter().cloned().fold(f64::MIN, f64::max));
    let ys = || series.iter().flat_map(|s| s.1.iter().map(|p| p.1));
    let ymax = nice_top(ys().fold(0.0, f64::max));
    // A log y axis when the series span more than two decades.
    let ymin_pos = ys().filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
    let log_y = ymin_pos < f64::MAX && ymax / ymin_pos > 100.0;
    let py = |v: f64| {
        let f = if log_y {
            ((v.max(ymin_pos)).log10() - ymin_pos.log10()) / (ymax.log10() - ymin_pos.log10())
        } else {
            v / ymax
        };
        t + (h - t - b) * (1.0 - f)
    };
    let px = |v: f64| l + (w - l - rgt) * if x1 > x0 { (lx(v) - x0) / (x1 - x0) } else { 0.5 };
    let mut o = format!(
        "<svg width=\"{w}\" height=\"{h}\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"11\">\
         <text x=\"{l}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{}</text>\
         <line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/>\
         <line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{}\" stroke=\"#444\"/>",
        esc(&plot.title),
        h - b,
        w - rgt,
        h - b,
        h - b
    );
    let mut ticks: Vec<f64> = series.iter().flat_map(|s| s.1.iter().map(|p| p.0)).collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    for tv in ticks {
        let _ = write!(
            o,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" stroke=\"#444\"/>\
             <text x=\"{0:.1}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>",
            px(tv),
            h - b,
            h - b + 4.0,
            h - b + 16.0,
            short(tv)
        );
    }
    let _ = write!(
        o,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}{}</text>",
        (l + w - rgt) / 2.0,
        h - 10.0,
        esc(&plot.x_label),
        if plot.log_x { " (log scale)" } else { "" }
    );
    for i in 0..=4 {
        let v = if log_y {
            10f64.powf(ymin_pos.log10() + (ymax.log10() - ymin_pos.log10()) * i as f64 / 4.0)
        } else {
            ymax * i as f64 / 4.0
        };
        let _ = write!(
            o,
            "<line x1=\"{l}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#eee\"/>\
             <text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\">{4}</text>",
            py(v),
            w - rgt,
            l - 4.0,
            py(v) + 4.0,
            short(v)
        );
    }
    let _ = write!(
        o,
        "<text x=\"14\" y=\"{0:.1}\" transform=\"rotate(-90 14 {0:.1})\" text-anchor=\"middle\">{1}{2}</text>",
        (t + h - b) / 2.0,
        esc(&plot.y_label),
        if log_y { " (log scale)" } else { "" }
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let dash = DASHES[(i / COLOURS.len()) % DASHES.len()];
        let path: Vec<String> = pts.iter().map(|p| format!("{:.1},{:.1}", px(p.0), py(p.1))).collect();
        let _ = write!(
            o,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\" points=\"{}\"/>",
            path.join(" ")
        );
        for p in pts {
            let _ = write!(
                o,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{c}\"><title>{}: {} = {}</title></circle>",
                px(p.0),
                py(p.1),
                esc(name),
                short(p.0),
                short(p.1)
            );
        }
        let ly = t + 14.0 * i as f64;
        let _ = write!(
            o,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{c}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            w - rgt + 10.0,
            ly + 5.0,
            w - rgt + 30.0,
            ly + 5.0,
            w - rgt + 36.0,
            ly + 9.0,
            esc(name)
        );
    }
    o.push_str("</svg>\n");
    o
}

fn svg_bars(title: &str, rows: &[Row], y: &str, y_label: &str) -> String {
    // (label, median, min–max of the repeats)
    type Bar = (String, f64, Option<(f64, f64)>);
    let bars: Vec<Bar> = rows
        .iter()
        .filter_map(|r| {
            let v = r.num(y)?;
            Some((r.series_name(""), v, r.range(y)))
        })
        .collect();
    if bars.is_empty() {
        return String::new();
    }
    let (l, w, t, bh, b) = (330.0, 820.0, 28.0, 18.0, 40.0);
    let h = t + bh * bars.len() as f64 + b;
    let top = nice_top(bars.iter().map(|b| b.2.map_or(b.1, |r| r.1.max(b.1))).fold(0.0, f64::max));
    let px = |v: f64| l + (w - l - 60.0) * v.max(0.0) / top;
    let mut o = format!(
        "<svg width=\"{w}\" height=\"{h}\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"11\">\
         <text x=\"4\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{}</text>\
         <line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{}\" stroke=\"#444\"/>\
         <text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
        esc(title),
        h - b,
        (l + w - 60.0) / 2.0,
        h - 6.0,
        esc(y_label)
    );
    for k in 0..=4 {
        let v = top * f64::from(k) / 4.0;
        let _ = write!(
            o,
            "<line x1=\"{0:.1}\" y1=\"{t}\" x2=\"{0:.1}\" y2=\"{1}\" stroke=\"#eee\"/>\
             <text x=\"{0:.1}\" y=\"{2}\" text-anchor=\"middle\">{3}</text>",
            px(v),
            h - b,
            h - b + 14.0,
            short(v)
        );
    }
    for (i, (name, v, range)) in bars.iter().enumerate() {
        let y0 = t + bh * i as f64;
        let c = COLOURS[i % COLOURS.len()];
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{l}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{c}\"><title>{}: {}</title></rect>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            l - 6.0,
            y0 + bh * 0.7,
            esc(name),
            y0 + 2.0,
            px(*v) - l,
            bh - 4.0,
            esc(name),
            short(*v),
            px(range.map_or(*v, |r| r.1.max(*v))) + 4.0,
            y0 + bh * 0.7,
            short(*v)
        );
        if let Some((lo, hi)) = range {
            let _ = write!(
                o,
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#222\" stroke-width=\"1.5\"/>",
                px(*lo),
                y0 + bh / 2.0,
                px(*hi),
                y0 + bh / 2.0
            );
        }
    }
    o.push_str("</svg>\n");
    o
}

/// Four times the smallest round step (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8
/// times a power of ten) whose four ticks reach
/// `v`: an axis whose ticks are round numbers.
fn nice_top(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let raw = v / 4.0;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p);
    step * 4.0
}

fn short(v: f64) -> String {
    match v.abs() {
        a if a >= 1e9 => format!("{:.1}G", v / 1e9),
        a if a >= 1e6 => format!("{:.1}M", v / 1e6),
        a if a >= 1e4 => format!("{:.0}k", v / 1e3),
        a if a >= 1e3 && v.fract() != 0.0 => format!("{:.1}k", v / 1e3),
        a if a >= 10.0 || v.fract() == 0.0 => format!("{v:.0}"),
        _ => format!("{v:.2}"),
    }
}

/// e2freefrag's bucket labels for 4 KiB blocks start at 4K; the label of
/// bucket `i` is its lower bound.
fn bucket_label(i: usize, block_size: u64) -> String {
    if i == 0 {
        return "0".into();
    }
    let bytes = block_size << (i - 1);
    match bytes {
        b if b >= 1 << 30 => format!("{}G", b >> 30),
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b => format!("{}K", b >> 10),
    }
}

/// One histogram per row, all on the same buckets (the union of every
/// row's non-empty ones) and the same y scale, so bars compare across
/// rows.
fn svg_histograms(title: &str, rows: &[Row]) -> String {
    let hists: Vec<(&Row, Vec<f64>)> = rows
        .iter()
        .filter_map(|r| match r.metrics.get("free_hist_blocks") {
            Some(Value::Array(h)) => {
                let blocks: Vec<f64> = h.iter().map(|v| v.as_f64().unwrap_or(0.0)).collect();
                let total: f64 = blocks.iter().sum();
                Some((r, blocks.iter().map(|b| if total > 0.0 { 100.0 * b / total } else { 0.0 }).collect()))
            }
            _ => None,
        })
        .collect();
    if hists.is_empty() {
        return String::new();
    }
    let nz = |i: usize| hists.iter().any(|(_, h)| h.get(i).is_some_and(|v| *v > 0.0));
    let len = hists.iter().map(|(_, h)| h.len()).max().unwrap_or(0);
    let lo = (0..len).find(|&i| nz(i)).unwrap_or(0);
    let hi = (0..len).rev().find(|&i| nz(i)).unwrap_or(lo);
    let top = hists.iter().flat_map(|(_, h)| h.iter().copied()).fold(0.0, f64::max).max(1.0);
    let top = (top / 25.0).ceil() * 25.0;
    let mut o = format!("<h4>{}</h4><div>", esc(title));
    for (r, pct) in &hists {
        let bs = r.num("block_size").unwrap_or(4096.0) as u64;
        let (w, h, l, b, t) = (340.0, 210.0, 40.0, 52.0, 24.0);
        let n = (hi - lo + 1) as f64;
        let bw = (w - l - 8.0) / n;
        let py = |v: f64| t + (h - t - b) * (1.0 - v / top);
        let _ = write!(
            o,
            "<svg width=\"{w}\" height=\"{h}\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"10\">\
             <text x=\"4\" y=\"12\" font-size=\"11\" font-weight=\"bold\">{} {}</text>\
             <line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{}\" stroke=\"#444\"/>\
             <line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/>\
             <text x=\"10\" y=\"{:.1}\" transform=\"rotate(-90 10 {:.1})\" text-anchor=\"middle\">% of free blocks</text>\
             <text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">free extent size (at least)</text>",
            esc(&r.backend),
            esc(&r.variant),
            h - b,
            h - b,
            w - 8.0,
            h - b,
            (t + h - b) / 2.0,
            (t + h - b) / 2.0,
            (l + w) / 2.0,
            h - 4.0
        );
        for k in 0..=4 {
            let v = top * f64::from(k) / 4.0;
            let _ = write!(o, "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}</text>", l - 3.0, py(v) + 3.0);
        }
        for i in lo..=hi {
            let f = pct.get(i).copied().unwrap_or(0.0);
            let x = l + 2.0 + (i - lo) as f64 * bw;
            let _ = write!(
                o,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#1f77b4\"><title>{}: {f:.2}%</title></rect>\
                 <text x=\"{:.1}\" y=\"{}\" text-anchor=\"end\" transform=\"rotate(-60 {:.1} {})\">{}</text>",
                py(f),
                (bw - 2.0).max(1.0),
                h - b - py(f),
                bucket_label(i, bs),
                x + bw / 2.0,
                h - b + 10.0,
                x + bw / 2.0,
                h - b + 10.0,
                bucket_label(i, bs)
            );
        }
        o.push_str("</svg>");
    }
    o.push_str("</div>\n");
    o
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
        let html = Report { seed: 1, quick: true, scenarios: vec![s] }.html();
        assert!(html.contains("<table>") && html.contains("<polyline"), "{html}");
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
        let csv = Report { seed: 1, quick: true, scenarios: vec![m] }.csv();
        assert!(csv.contains("f,engine,a,,3,ops_per_s,160"), "{csv}");
        assert!(csv.contains("f,engine,a,,,note,text"), "{csv}");
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn a_row_only_a_later_repeat_has_is_kept() {
        let mut second = sample(10.0, "a");
        second.rows.push(Row::new("ext4", "default"));
        let m = ScenarioReport::merge_repeats(vec![sample(10.0, "a"), second]);
        assert!(m.rows.iter().any(|r| r.backend == "ext4"));
    }

    #[test]
    fn histograms_share_one_range_and_have_a_y_axis() {
        let mut s = ScenarioReport::new("h", "t", vec![]);
        for (b, h) in [("engine", vec![0u64, 0, 5, 5]), ("ext4", vec![0, 1, 0, 0, 0, 0, 9])] {
            let mut r = Row::new(b, "v");
            r.set("free_hist_blocks", h).set("block_size", 4096);
            s.rows.push(r);
        }
        let svg = svg_histograms("t", &s.rows);
        // Both plots run from the 4K bucket to the 128K one (6 bars each).
        assert_eq!(svg.matches("<rect").count(), 12, "{svg}");
        assert_eq!(svg.matches("% of free blocks").count(), 2);
        assert_eq!(svg.matches(">128K<").count(), 2);
    }

    #[test]
    fn series_split_by_everything_but_x() {
        let mut rows = vec![];
        for (mode, bs, v) in [("cache", 4, 1.0), ("cache", 64, 2.0), ("sync", 4, 3.0), ("sync", 64, 4.0)] {
            let mut r = Row::new("engine", "4 KiB folios");
            r.set("mode", mode).set("bs_kib", bs).set("mib_per_s", v);
            rows.push(r);
        }
        let Plot::Lines(p) = Plot::lines("t", "bs_kib", "KiB", "mib_per_s", "MiB/s").split_by("mode") else {
            unreachable!()
        };
        let s = series(&p, &rows);
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].1, [(4.0, 3.0), (64.0, 4.0)]);
        let Plot::Lines(only) = Plot::lines("t", "bs_kib", "KiB", "mib_per_s", "MiB/s").only("mode", "sync") else {
            unreachable!()
        };
        assert_eq!(series(&only, &rows).len(), 1);
        assert!(svg_lines(&p, &rows).contains("MiB/s"));
    }
}
