//! A run split with `--shard I/N` and put together by `lab merge` makes
//! the report the unsharded run makes.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn mballoc(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mballoc")).current_dir(dir).args(args).output().expect("runs")
}

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    o
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

/// The document without what differs between any two runs of the same
/// command: when it began.
fn undated(mut v: Value) -> Value {
    if let Some(h) = v.get_mut("header") {
        h["date"] = Value::Null;
    }
    v
}

/// Where `a` and `b` differ, as JSON paths, at most `max`.
fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                differences(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{path}.{k}"),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(p, q, &format!("{path}[{i}]"), out);
            }
        }
        _ if a != b => out.push(path.to_string()),
        _ => {}
    }
}

const RUN: &[&str] = &[
    "lab",
    "run",
    "aging",
    "multiblock-cost",
    "fragmented-core",
    "--quick",
    "--backends",
    "engine",
    "--sweep",
    "engine.mb_max_to_scan=50,200",
    "--json",
    "--out",
    "report",
];

#[test]
fn a_lab_run_in_three_shards_merges_to_the_unsharded_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let one = undated(json(&ok(mballoc(d, RUN))));
    let mut shards = Vec::new();
    for i in 1..=3 {
        let shard = format!("{i}/3");
        let mut args = RUN.to_vec();
        args.extend(["--shard", &shard]);
        let doc = json(&ok(mballoc(d, &args)));
        assert_eq!(doc["shard"]["index"], i, "{doc}");
        assert!(d.join(format!("report/shard-{i}-of-3.json")).exists());
        shards.push(doc);
    }
    let files: Vec<String> = (1..=3).map(|i| format!("report/shard-{i}-of-3.json")).collect();
    let mut args = vec!["lab", "merge", "--json", "--out", "merged"];
    args.extend(files.iter().map(String::as_str));
    let merged = undated(json(&ok(mballoc(d, &args))));
    assert!(d.join("merged/index.html").exists());
    // Every value is the one the shard that ran its cell measured, cell
    // after cell in the run's order: the merge adds, drops and changes
    // nothing.
    let mut cells: Vec<&Value> = shards.iter().flat_map(|s| s["run"]["cells"].as_array().unwrap()).collect();
    cells.sort_by_key(|c| c["cell"].as_u64().unwrap());
    let scenarios = merged["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 3);
    for (k, s) in scenarios.iter().enumerate() {
        let measured: Vec<&Value> = cells
            .iter()
            .filter(|c| c["job"] == k)
            .flat_map(|c| c["report"]["report"]["rows"].as_array().unwrap())
            .collect();
        let rows: Vec<&Value> = s["rows"].as_array().unwrap().iter().collect();
        assert_eq!(rows, measured, "scenario {k}: the merged rows are not the shards' rows");
    }
    // And the report is the one-machine run's: the same scenarios, rows
    // (backend, variant, sweep point, settings), notes and skips, in the
    // same order. Measured values differ between any two runs.
    let shape = |r: &Value| -> Vec<Value> {
        r["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let rows: Vec<Value> = s["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| serde_json::json!([r["backend"], r["variant"], r["point"], r["settings"]]))
                    .collect();
                serde_json::json!([s["name"], s["title"], rows, s["notes"], s["skipped"], s["failures"]])
            })
            .collect()
    };
    assert_eq!(shape(&one), shape(&merged));
    assert_eq!(
        (&one["header"], one["seed"].clone(), one["quick"].clone()),
        (&merged["header"], merged["seed"].clone(), merged["quick"].clone())
    );
}

#[test]
fn merge_refuses_a_missing_a_repeated_or_a_foreign_shard() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = ["lab", "run", "fragmented-core", "--quick", "--backends", "engine", "--json"];
    for (i, out) in [(1, "a"), (2, "a"), (1, "b")] {
        let shard = format!("{i}/2");
        let mut args = base.to_vec();
        args.extend(["--out", out, "--shard", &shard]);
        if out == "b" {
            args.extend(["--seed", "7"]);
        }
        ok(mballoc(d, &args));
    }
    let merge = |files: &[&str]| {
        let mut args = vec!["lab", "merge", "--out", "m"];
        args.extend(files);
        mballoc(d, &args)
    };
    let err = |o: Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let missing = merge(&["a/shard-1-of-2.json"]);
    assert!(!missing.status.success() && err(missing).contains("shard 2/2 is missing"));
    let twice = merge(&["a/shard-1-of-2.json", "a/shard-1-of-2.json", "a/shard-2-of-2.json"]);
    assert!(!twice.status.success() && err(twice).contains("given 2 times"));
    let foreign = merge(&["b/shard-1-of-2.json", "a/shard-2-of-2.json"]);
    assert!(!foreign.status.success() && err(foreign).contains("another run"));
    std::fs::write(d.join("junk.json"), "{\"format\": 1}").unwrap();
    let junk = merge(&["junk.json"]);
    assert!(!junk.status.success() && err(junk).contains("not a shard file"));
    assert!(ok(merge(&["a/shard-2-of-2.json", "a/shard-1-of-2.json"])).status.success());
}

#[test]
fn a_fidelity_run_in_shards_merges_to_the_unsharded_run() {
    if is_root() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let cases = [
            "--case",
            "small-files",
            "--case",
            "punched-reuse",
            "--case",
            "stripe",
            "--case",
            "near-full",
            "--case",
            "bigalloc",
        ];
        let mut args = vec!["lab", "fidelity", "--quick", "--out", "report"];
        args.extend(cases);
        let text = ok(mballoc(d, &args));
        let mut with_json = args.clone();
        with_json.push("--json");
        let one = json(&ok(mballoc(d, &with_json)));
        for i in 1..=3 {
            let shard = format!("{i}/3");
            let mut a = args.clone();
            a.extend(["--shard", &shard]);
            ok(mballoc(d, &a));
        }
        let files = ["report/shard-1-of-3.json", "report/shard-2-of-3.json", "report/shard-3-of-3.json"];
        let mut m = vec!["lab", "merge", "--out", "report"];
        m.extend(files);
        let merged_text = ok(mballoc(d, &m));
        m.push("--json");
        let merged = json(&ok(mballoc(d, &m)));
        // Layouts and counts are the kernel's and the engine's: nothing
        // may differ but the time the kernel took to build its buddies.
        let mut differ = Vec::new();
        differences(&without_kernel_time(one), &without_kernel_time(merged), "", &mut differ);
        assert!(differ.is_empty(), "the merge differs from the unsharded run at {differ:?}");
        assert_eq!(
            String::from_utf8_lossy(&text.stdout),
            String::from_utf8_lossy(&merged_text.stdout),
            "the merge prints what the run printed"
        );
    } else {
        println!("skipped: lab fidelity needs root for loop mounts and tracefs");
    }
}

/// `v` with every mb_stats `buddies_time_used` (the kernel's time,
/// which no two runs share) blanked.
fn without_kernel_time(v: Value) -> Value {
    match v {
        Value::String(s) if s.contains("buddies_time_used:") => Value::String(
            s.lines()
                .map(|l| if l.trim_start().starts_with("buddies_time_used:") { "buddies_time_used: -" } else { l })
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_kernel_time).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, without_kernel_time(v))).collect()),
        v => v,
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}
