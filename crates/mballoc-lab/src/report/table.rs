//! A scenario's rows as a text table, and a whole run as CSV.

use super::{cell, Report, ScenarioReport};
use serde_json::Value;
use std::fmt::Write as _;

impl ScenarioReport {
    /// The table as text: one line per row, labelled by backend and
    /// variant with every run setting in force ([`super::Row::label`]), a
    /// column per swept setting, then the scenario's columns.
    pub fn table(&self) -> String {
        let mut cells: Vec<Vec<String>> = vec![];
        let swept = self.swept_keys();
        let mut head = vec!["backend".to_string(), "variant".to_string()];
        head.extend(swept.iter().cloned());
        head.extend(self.columns.iter().map(|c| c.header.to_string()));
        cells.push(head);
        for r in &self.rows {
            let mut line = vec![r.backend.clone(), r.label()];
            line.extend(swept.iter().map(|k| r.point.get(k).cloned().unwrap_or_default()));
            line.extend(self.columns.iter().map(|c| r.cell(&c.key, c.decimals)));
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
}

impl Report {
    /// Every value as CSV (`--csv`), one record per sample:
    /// `scenario,backend,variant,settings,swept,repeat,metric,value`.
    /// `settings` is every run setting in force on the row's backend and
    /// `swept` its swept ones (`key=value;...`), `repeat` counts from 1
    /// (empty when the run was not repeated), arrays are joined with
    /// spaces. (The run's header is in the JSON and on the page: a CSV
    /// stays one plain table that any reader takes.)
    pub fn csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let mut record = |fields: &[&str]| w.write_record(fields).expect("CSV to memory cannot fail");
        record(&["scenario", "backend", "variant", "settings", "swept", "repeat", "metric", "value"]);
        for s in &self.scenarios {
            for r in &s.rows {
                let swept = r.point.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";");
                let settings = r.settings.join(";");
                for (key, v) in &r.metrics {
                    let head = [s.name.as_str(), r.backend.as_str(), r.variant.as_str(), &settings, &swept];
                    match r.samples.get(key) {
                        Some(samples) => {
                            for (i, x) in samples.iter().enumerate() {
                                let (n, x) = ((i + 1).to_string(), x.to_string());
                                record(&[&head[..], &[n.as_str(), key.as_str(), x.as_str()]].concat());
                            }
                        }
                        None => {
                            let text = match v {
                                Value::String(t) => t.clone(),
                                Value::Array(a) => a.iter().map(|x| cell(Some(x), 6)).collect::<Vec<_>>().join(" "),
                                other => other.to_string(),
                            };
                            record(&[&head[..], &["", key.as_str(), text.as_str()]].concat());
                        }
                    }
                }
            }
        }
        let bytes = w.into_inner().expect("CSV to memory cannot fail");
        String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
    }
}
