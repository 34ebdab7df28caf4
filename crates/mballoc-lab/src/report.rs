//! Results and their three renderings: text tables on the terminal, JSON
//! (`{"scenarios":[{"name","rows":[{"backend","variant","metrics"}]}]}`),
//! and an HTML page with the same tables and SVG plots.

use serde::Serialize;
use serde_json::{Map, Value};
use std::fmt::Write as _;

/// One result row: a backend, a variant of it, and named metrics.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Backend name (`engine`, `ext4`, ...).
    pub backend: String,
    /// The configuration of the backend this row ran.
    pub variant: String,
    /// Named values.
    pub metrics: Map<String, Value>,
}

impl Row {
    /// An empty row.
    pub fn new(backend: &str, variant: &str) -> Row {
        Row { backend: backend.into(), variant: variant.into(), metrics: Map::new() }
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
    /// `y` against `x`, one line per backend/variant; log-2 x axis.
    Lines {
        /// Shown above the plot.
        title: String,
        /// The metric on the x axis.
        x: &'static str,
        /// The metric on the y axis.
        y: &'static str,
    },
    /// Per row, the share of free blocks in each e2freefrag bucket (the
    /// row's `free_hist_blocks` metric).
    FreeHistograms {
        /// Shown above the plots.
        title: String,
    },
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
        let mut head = vec!["backend".to_string(), "variant".to_string()];
        head.extend(self.columns.iter().map(|c| c.header.to_string()));
        cells.push(head);
        for r in &self.rows {
            let mut line = vec![r.backend.clone(), r.variant.clone()];
            line.extend(self.columns.iter().map(|c| cell(r.metrics.get(c.key), c.decimals)));
            cells.push(line);
        }
        let widths: Vec<usize> =
            (0..cells[0].len()).map(|i| cells.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
        let mut o = String::new();
        for line in &cells {
            for (i, c) in line.iter().enumerate() {
                if i < 2 {
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

    /// Everything the terminal shows for this scenario.
    pub fn text(&self) -> String {
        let mut o = format!("== {}: {}\n", self.name, self.title);
        for s in &self.skipped {
            let _ = writeln!(o, "   skipped: {s}");
        }
        o.push_str(&self.table());
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

    /// The HTML page (`DIR/index.html`).
    pub fn html(&self) -> String {
        let mut o = String::from(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>mballoc lab</title>\n<style>\
             body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}\
             table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px}\
             td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}\
             pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px}\
             .skip{color:#a60}svg{margin:0.5em 1em 0.5em 0}</style></head><body>\n",
        );
        let _ = writeln!(
            o,
            "<h1>mballoc lab</h1><p>seed {}{}</p>",
            self.seed,
            if self.quick { ", quick sizes" } else { "" }
        );
        for s in &self.scenarios {
            let _ = writeln!(o, "<h2 id=\"{0}\">{0}</h2><p>{1}</p>", esc(&s.name), esc(&s.title));
            for k in &s.skipped {
                let _ = writeln!(o, "<p class=\"skip\">skipped: {}</p>", esc(k));
            }
            o.push_str("<table><tr><th>backend</th><th>variant</th>");
            for c in &s.columns {
                let _ = write!(o, "<th>{}</th>", esc(c.header));
            }
            o.push_str("</tr>\n");
            for r in &s.rows {
                let _ = write!(o, "<tr><td>{}</td><td>{}</td>", esc(&r.backend), esc(&r.variant));
                for c in &s.columns {
                    let _ = write!(o, "<td class=\"n\">{}</td>", esc(&cell(r.metrics.get(c.key), c.decimals)));
                }
                o.push_str("</tr>\n");
            }
            o.push_str("</table>\n");
            for n in &s.notes {
                let _ = writeln!(o, "<p>{}</p>", esc(n));
            }
            for p in &s.plots {
                match p {
                    Plot::Lines { title, x, y } => o.push_str(&svg_lines(title, &s.rows, x, y)),
                    Plot::FreeHistograms { title } => o.push_str(&svg_histograms(title, &s.rows)),
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

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const COLOURS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

fn svg_lines(title: &str, rows: &[Row], x: &str, y: &str) -> String {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = vec![];
    for r in rows {
        let (Some(xv), Some(yv)) = (r.num(x), r.num(y)) else { continue };
        let name = format!("{} {}", r.backend, r.variant);
        match series.iter_mut().find(|s| s.0 == name) {
            Some(s) => s.1.push((xv, yv)),
            None => series.push((name, vec![(xv, yv)])),
        }
    }
    if series.is_empty() {
        return String::new();
    }
    let (w, h, l, b, t, rgt) = (640.0, 320.0, 70.0, 40.0, 30.0, 190.0);
    let lx = |v: f64| v.max(1.0).log2();
    let xs: Vec<f64> = series.iter().flat_map(|s| s.1.iter().map(|p| lx(p.0))).collect();
    let (x0, x1) = (xs.iter().cloned().fold(f64::MAX, f64::min), xs.iter().cloned().fold(f64::MIN, f64::max));
    let ymax = series.iter().flat_map(|s| s.1.iter().map(|p| p.1)).fold(0.0, f64::max).max(1e-9) * 1.1;
    // A log y axis when the series span more than two decades.
    let ymin_pos = series.iter().flat_map(|s| s.1.iter().map(|p| p.1)).filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
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
         <text x=\"{l}\" y=\"16\" font-size=\"13\">{}</text>\
         <line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/>\
         <line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{}\" stroke=\"#444\"/>",
        esc(title),
        h - b,
        w - rgt,
        h - b,
        h - b
    );
    let mut ticks: Vec<f64> = series.iter().flat_map(|s| s.1.iter().map(|p| p.0)).collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    for tv in ticks {
        let _ = write!(o, "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", px(tv), h - b + 14.0, tv);
    }
    let _ =
        write!(o, "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", (l + w - rgt) / 2.0, h - 6.0, esc(x));
    for i in 0..=4 {
        let v = if log_y {
            10f64.powf(ymin_pos.log10() + (ymax.log10() - ymin_pos.log10()) * i as f64 / 4.0)
        } else {
            ymax * i as f64 / 4.0
        };
        let _ = write!(o, "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>", l - 4.0, py(v) + 4.0, short(v));
    }
    let _ = write!(
        o,
        "<text x=\"12\" y=\"{:.1}\" transform=\"rotate(-90 12 {:.1})\" text-anchor=\"middle\">{}{}</text>",
        (t + h - b) / 2.0,
        (t + h - b) / 2.0,
        esc(y),
        if log_y { " (log)" } else { "" }
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let path: Vec<String> = pts.iter().map(|p| format!("{:.1},{:.1}", px(p.0), py(p.1))).collect();
        let _ = write!(o, "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>", path.join(" "));
        for p in pts {
            let _ = write!(o, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{c}\"/>", px(p.0), py(p.1));
        }
        let ly = t + 14.0 * i as f64;
        let _ = write!(
            o,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{c}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            w - rgt + 10.0,
            ly,
            w - rgt + 24.0,
            ly + 9.0,
            esc(name)
        );
    }
    o.push_str("</svg>\n");
    o
}

fn short(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.1}G", v / 1e9),
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v if v >= 10.0 => format!("{v:.0}"),
        v => format!("{v:.2}"),
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

fn svg_histograms(title: &str, rows: &[Row]) -> String {
    let mut o = format!("<h4>{}</h4><div>", esc(title));
    for r in rows {
        let Some(Value::Array(hist)) = r.metrics.get("free_hist_blocks") else { continue };
        let bs = r.num("block_size").unwrap_or(4096.0) as u64;
        let blocks: Vec<f64> = hist.iter().map(|v| v.as_f64().unwrap_or(0.0)).collect();
        let total: f64 = blocks.iter().sum();
        let (w, h, b) = (300.0, 170.0, 34.0);
        let nz: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i] > 0.0).collect();
        let (lo, hi) = match (nz.first(), nz.last()) {
            (Some(&a), Some(&z)) => (a, z),
            _ => (1, 1),
        };
        let n = (hi - lo + 1) as f64;
        let bw = (w - 20.0) / n;
        let _ = write!(
            o,
            "<svg width=\"{w}\" height=\"{h}\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"10\">\
             <text x=\"4\" y=\"12\" font-size=\"11\">{} {}: % of free blocks by free-extent size</text>",
            esc(&r.backend),
            esc(&r.variant)
        );
        for (i, &blk) in blocks.iter().enumerate().take(hi + 1).skip(lo) {
            let f = if total > 0.0 { blk / total } else { 0.0 };
            let bh = (h - b - 20.0) * f;
            let x = 10.0 + (i - lo) as f64 * bw;
            let _ = write!(
                o,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"#1f77b4\"><title>{}: {:.2}%</title></rect>",
                h - b - bh,
                (bw - 2.0).max(1.0),
                bucket_label(i, bs),
                f * 100.0
            );
            let _ = write!(
                o,
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"end\" transform=\"rotate(-60 {:.1} {})\">{}</text>",
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
        s.plots.push(Plot::Lines { title: "ops".into(), x: "workers", y: "ops_per_s" });
        let html = Report { seed: 1, quick: true, scenarios: vec![s] }.html();
        assert!(html.contains("<table>") && html.contains("<polyline"), "{html}");
    }
}
