//! A scenario's report as data and back, whole: the JSON document leaves
//! out the columns, sections and plots a table and page need, and a shard
//! of a run keeps them for the merge (`mballoc lab merge`).

use super::{Column, Plot, ScenarioReport};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// [`ScenarioReport::stored`]'s form, read back.
#[derive(Deserialize)]
struct Stored {
    report: ScenarioReport,
    columns: Vec<Column>,
    sections: Vec<(String, String)>,
    plots: Vec<Plot>,
}

/// The same form, written from a borrowed report.
#[derive(Serialize)]
struct StoredRef<'a> {
    report: &'a ScenarioReport,
    columns: &'a [Column],
    sections: &'a [(String, String)],
    plots: &'a [Plot],
}

impl ScenarioReport {
    /// The whole report as data, the columns, sections and plots that
    /// the JSON document leaves out included: what a shard of a run
    /// keeps for the merge.
    pub fn stored(&self) -> Value {
        serde_json::to_value(StoredRef {
            report: self,
            columns: &self.columns,
            sections: &self.sections,
            plots: &self.plots,
        })
        .expect("reports serialize")
    }

    /// A report from [`ScenarioReport::stored`]'s data; the seed's
    /// published tables come again from the scenario's name.
    pub fn from_stored(v: Value) -> serde_json::Result<ScenarioReport> {
        let Stored { mut report, columns, sections, plots } = serde_json::from_value(v)?;
        report.published = crate::published::for_scenario(&report.name);
        report.columns = columns;
        report.sections = sections;
        report.plots = plots;
        Ok(report)
    }
}
