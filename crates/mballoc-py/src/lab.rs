//! The lab from Python: one scenario run as `mballoc lab run SCENARIO
//! --json` runs it, and the scenarios' names.

use crate::value_err;
use pyo3::prelude::*;

/// One lab scenario run as `mballoc lab run SCENARIO --json` runs it: the
/// report's JSON.
#[pyfunction]
#[pyo3(signature = (scenario, quick, backends, settings, seed = 1))]
pub fn lab_run(
    py: Python<'_>,
    scenario: &str,
    quick: bool,
    backends: Vec<String>,
    settings: Vec<String>,
    seed: u64,
) -> PyResult<String> {
    use mballoc_lab::backend::BackendKind;
    let s = mballoc_lab::scenarios::find(scenario)
        .ok_or_else(|| value_err(format!("unknown scenario {scenario:?}; mballoc.lab.scenarios() names them")))?;
    let kinds = backends
        .iter()
        .map(|b| BackendKind::parse(b).ok_or_else(|| value_err(format!("unknown backend {b:?}"))))
        .collect::<PyResult<Vec<_>>>()?;
    let mut set = mballoc_lab::settings::Settings::default();
    for a in &settings {
        set.set_str(a).map_err(value_err)?;
    }
    let report = py.detach(|| {
        let env = mballoc_lab::scenarios::Env::new(quick, seed, kinds).with_settings(set.clone());
        let mut r = (s.run)(&env);
        if !set.is_empty() {
            r.notes
                .insert(0, format!("settings over every row (they win over each variant's own): {}", set.describe()));
        }
        mballoc_lab::report::Report { header: mballoc_lab::report::Header::now(), seed, quick, scenarios: vec![r] }
    });
    Ok(report.json())
}

/// Every scenario's name and one line about it.
#[pyfunction]
pub fn lab_scenarios() -> Vec<(String, String)> {
    mballoc_lab::scenarios::ALL.iter().map(|s| (s.name.to_string(), s.about.to_string())).collect()
}
