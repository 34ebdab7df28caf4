//! Runs that outgrow one machine. A lab run is a list of cells — a
//! scenario at one point of the sweeps (every repeat of it), or one
//! fidelity case — and `--shard I/N` runs only the cells assigned to shard
//! I of N, writing them to a shard file instead of a report. `mballoc lab
//! merge` reads the N shard files of one run and makes the report the
//! unsharded run makes: the same tables, notes, plots and JSON, in the
//! same order.
//!
//! Assignment is a pure function of the cells' estimated seconds and N
//! (longest cell first, onto the least-loaded shard), so every machine
//! that is handed the same command line computes the same split without
//! talking to the others; a scheduler (a Slurm array, a Ray cluster) only
//! has to hand out the shard numbers.

use anyhow::{bail, ensure, Context, Result};
use mballoc_lab::report::Header;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Shard `index` (from 1) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// Which shard, from 1.
    pub index: u32,
    /// How many shards the run is split into.
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Shard> {
        let (i, n) = s.split_once('/').with_context(|| format!("--shard {s:?}: expected I/N, e.g. 2/3"))?;
        let index: u32 = i.trim().parse().with_context(|| format!("--shard {s:?}: {i:?} is not a number"))?;
        let count: u32 = n.trim().parse().with_context(|| format!("--shard {s:?}: {n:?} is not a number"))?;
        ensure!(count >= 1 && (1..=count).contains(&index), "--shard {s:?}: I must be from 1 to N");
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// Which of `weights.len()` cells this shard runs: every cell goes,
    /// heaviest first (ties in cell order), to the shard with the least
    /// weight so far (ties to the lowest shard).
    pub fn cells(&self, weights: &[f64]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..weights.len()).collect();
        order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
        let mut load = vec![0.0f64; self.count as usize];
        let mut mine = Vec::new();
        for cell in order {
            let lightest = (0..load.len()).min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b))).unwrap_or(0);
            load[lightest] += weights[cell].max(0.0);
            if lightest as u32 + 1 == self.index {
                mine.push(cell);
            }
        }
        mine.sort_unstable();
        mine
    }

    /// Where this shard's file goes in the report directory `out`.
    pub fn file_in(&self, out: &Path) -> PathBuf {
        out.join(format!("shard-{}-of-{}.json", self.index, self.count))
    }
}

/// `mballoc lab merge`'s arguments.
#[derive(clap::Args)]
pub struct MergeArgs {
    /// The shard files, one per shard, in any order.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Directory for index.html.
    #[arg(long, default_value = "lab-report")]
    pub out: PathBuf,
    /// Print the results as JSON on stdout (and nothing else there).
    #[arg(long)]
    pub json: bool,
    /// Also write every value as CSV (a `lab run`'s shards).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

/// `mballoc lab merge`: the report of a sharded `lab run` or `lab
/// fidelity` from its shard files.
pub fn merge(a: &MergeArgs) -> Result<()> {
    let (kind, docs) = read_documents(&a.files)?;
    match kind.as_str() {
        "lab run" => {
            let report = crate::plan::merge(ShardFile::from_documents(docs)?, a.json)?;
            crate::plan::write_report(&report, &a.out, a.csv.as_deref(), a.json)
        }
        "lab fidelity" => {
            ensure!(a.csv.is_none(), "--csv: a fidelity run's report has no CSV form");
            crate::fidelity_cmd::merge(ShardFile::from_documents(docs)?, &a.out, a.json)
        }
        other => bail!("{}: shards of {other:?}, which this version cannot merge", a.files[0].display()),
    }
}

/// The first line of every shard file's format field.
const FORMAT: &str = "mballoc lab shard 1";

/// One shard's cells of a run, with what the merge needs to make the
/// whole run's report.
#[derive(Debug, Serialize, Deserialize)]
pub struct ShardFile<P> {
    /// [`FORMAT`].
    pub format: String,
    /// The command whose cells these are (`lab run`, `lab fidelity`).
    pub kind: String,
    /// Which shard this is.
    pub shard: Shard,
    /// The run's header; its command is the run's without `--shard`, so
    /// every shard of one run carries the same line.
    pub header: Header,
    /// Every cell of the run, by name, in report order (the same in every
    /// shard of the run).
    pub cells: Vec<String>,
    /// The run's own description and this shard's results.
    pub run: P,
}

impl<P: Serialize + serde::de::DeserializeOwned> ShardFile<P> {
    /// A shard file for `run`.
    pub fn new(kind: &str, shard: Shard, header: Header, cells: Vec<String>, run: P) -> ShardFile<P> {
        ShardFile { format: FORMAT.into(), kind: kind.into(), shard, header, cells, run }
    }

    /// Write it to `path` (its directory made if need be).
    pub fn write(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        }
        std::fs::write(path, self.json()).with_context(|| path.display().to_string())
    }

    /// Write it, holding `here` of the run's cells, into the report
    /// directory `out` under its shard's name, and say so: the document
    /// itself on stdout with `json`, else a line.
    pub fn save(&self, out: &Path, here: usize, json: bool) -> Result<()> {
        let path = self.shard.file_in(out);
        self.write(&path)?;
        if json {
            println!("{}", self.json());
        } else {
            println!(
                "shard {}: {} of the run's {} cells in {}; `mballoc lab merge` with every shard's file makes the report",
                self.shard,
                here,
                self.cells.len(),
                path.display()
            );
        }
        Ok(())
    }

    /// The document.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("shard files serialize")
    }

    /// The shard files of one run from their documents (`(path, document)`,
    /// as [`read_documents`] gives them), each shard exactly once, in
    /// shard order; refused when they are of different runs or one is
    /// missing.
    pub fn from_documents(docs: Vec<(&PathBuf, serde_json::Value)>) -> Result<Vec<ShardFile<P>>> {
        ensure!(!docs.is_empty(), "no shard files given");
        let mut files: Vec<(ShardFile<P>, &PathBuf)> = Vec::new();
        for (p, v) in docs {
            let f: ShardFile<P> =
                serde_json::from_value(v).with_context(|| format!("{}: a damaged shard file", p.display()))?;
            files.push((f, p));
        }
        files.sort_by_key(|(f, _)| f.shard.index);
        let first = &files[0].0;
        for (f, p) in &files {
            // Layouts depend on the kernel and, since 6.17, on the CPU
            // count: shards from unlike machines are not one run.
            ensure!(
                f.header.kernel == first.header.kernel && f.header.cpus == first.header.cpus,
                "{}: ran on kernel {} with {} CPUs, shard {} on {} with {}: shards of one run need like machines",
                p.display(),
                f.header.kernel,
                f.header.cpus,
                first.shard,
                first.header.kernel,
                first.header.cpus
            );
            ensure!(
                f.kind == first.kind
                    && f.header.command == first.header.command
                    && f.header.commit == first.header.commit
                    && f.cells == first.cells
                    && f.shard.count == first.shard.count,
                "{}: a shard of another run (its command, commit, cells or shard count differ from shard {}'s: {:?})",
                p.display(),
                first.shard,
                f.header.command
            );
        }
        let count = first.shard.count;
        for i in 1..=count {
            match files.iter().filter(|(f, _)| f.shard.index == i).count() {
                1 => {}
                0 => bail!("shard {i}/{count} is missing"),
                n => bail!("shard {i}/{count} given {n} times"),
            }
        }
        Ok(files.into_iter().map(|(f, _)| f).collect())
    }
}

/// Each shard file's document, checked to be a shard file of this
/// version, and the command their cells are of (`lab run`, `lab
/// fidelity`; the first file's, which [`ShardFile::from_documents`] holds
/// every other to).
pub fn read_documents(paths: &[PathBuf]) -> Result<(String, Vec<(&PathBuf, serde_json::Value)>)> {
    let mut docs = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
        let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))?;
        ensure!(
            v.get("format").and_then(|f| f.as_str()) == Some(FORMAT),
            "{}: not a shard file of this version (its format field is not {FORMAT:?})",
            p.display()
        );
        docs.push((p, v));
    }
    let (first, doc) = docs.first().context("no shard files given")?;
    let kind = doc
        .get("kind")
        .and_then(|k| k.as_str())
        .map(str::to_string)
        .with_context(|| format!("{}: not a shard file (no kind field)", first.display()))?;
    Ok((kind, docs))
}

/// The merged run's header: the first shard's, begun when the earliest
/// shard began.
pub fn merged_header<P>(files: &[ShardFile<P>]) -> Header {
    let mut h = files[0].header.clone();
    if let Some(d) = files.iter().map(|f| &f.header.date).min() {
        h.date = d.clone();
    }
    h
}

/// Each cell's result from `files` in cell order; refused when a cell is
/// missing or two shards ran it.
pub fn in_cell_order<P, T>(files: Vec<ShardFile<P>>, take: impl Fn(P) -> Vec<(usize, T)>) -> Result<Vec<T>> {
    let total = files[0].cells.len();
    let names = files[0].cells.clone();
    let mut slots: Vec<Option<T>> = (0..total).map(|_| None).collect();
    for f in files {
        let shard = f.shard;
        for (i, t) in take(f.run) {
            ensure!(i < total, "shard {shard}: cell {i} is not one of the run's {total}");
            ensure!(slots[i].is_none(), "cell {:?} is in two shards (the second: {shard})", names[i]);
            slots[i] = Some(t);
        }
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.with_context(|| format!("cell {:?} is in no shard", names[i])))
        .collect()
}

/// `args` (a command line's arguments) without `--shard I/N` or
/// `--shard=I/N`: the command that runs the whole on one machine.
pub fn without_shard(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for a in args {
        if skip_next {
            skip_next = false;
        } else if a == "--shard" {
            skip_next = true;
        } else if !a.starts_with("--shard=") {
            out.push(a.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_in_exactly_one_shard_and_loads_balance() {
        let weights: Vec<f64> = (0..23).map(|i| ((i * 37) % 11) as f64 + 0.5).collect();
        let total: f64 = weights.iter().sum();
        let n = 4;
        let mut seen = vec![0; weights.len()];
        let mut heaviest: f64 = 0.0;
        for index in 1..=n {
            let cells = Shard { index, count: n }.cells(&weights);
            let load: f64 = cells.iter().map(|&c| weights[c]).sum();
            heaviest = heaviest.max(load);
            for c in cells {
                seen[c] += 1;
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "{seen:?}");
        // Longest-first onto the least loaded: within the heaviest cell
        // of a perfect split.
        let max_cell = weights.iter().copied().fold(0.0, f64::max);
        assert!(heaviest <= total / n as f64 + max_cell, "{heaviest} of {total}");
    }

    #[test]
    fn shard_numbers_are_checked() {
        assert_eq!("2/3".parse::<Shard>().unwrap(), Shard { index: 2, count: 3 });
        for bad in ["0/3", "4/3", "1", "a/2", "1/0", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_unsharded_command_drops_only_the_shard() {
        let a: Vec<String> = ["mballoc", "lab", "run", "--shard", "1/3", "--quick", "--shard=2/3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(without_shard(&a), ["mballoc", "lab", "run", "--quick"]);
    }
}
