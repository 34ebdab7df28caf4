//! Workloads: operations on files by concurrent jobs, written once and run
//! on every backend.
//!
//! A workload is TOML (docs/WORKLOADS.md has every field and operation,
//! each with an example). Each `[[job]]` is cloned `clones` times; each
//! clone owns `files` files named `DIR/JOB.CLONE.FILE` (fio's naming, under
//! the job's `dir`; `names` changes it). A clone runs its `setup` steps once
//! for each of its files, then its `steps` for each file, `repeat` times
//! (0: until the workload's `seconds` run out), after the job named by
//! `after` if there is one. A step issues `count` operations of one kind
//! at `offset`, `offset + stride`, … (stride defaults to `len`; `advance`
//! moves each round on). Sizes are bytes, or strings with a K, M or G
//! suffix. `expand.rs` turns a workload into slots and streams.
//!
//! ```
//! let w = mballoc_lab::workload::Workload::from_toml(r#"
//!     name = "appenders"
//!     volume = "1G"
//!     [[job]]
//!     name = "job1"
//!     clones = 4
//!     setup = [{ op = "create" }]
//!     steps = [{ op = "fallocate", len = "4K", count = 256 }]
//! "#).unwrap();
//! assert_eq!(w.streams().len(), 4);
//! assert_eq!(w.streams()[0].ops().count(), 257);
//! ```
//!
//! A trace ([`crate::trace`]) is the expanded form of a workload.

mod expand;
pub(crate) mod ops;

pub use expand::StreamSpec;
pub use ops::{Interleave, Op, OpKind, Step};

use crate::settings::{Scalar, Scope, Settings, Table};
use crate::units::Size;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// A workload or trace that cannot be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// TOML that does not parse into a workload.
    #[error("workload TOML: {0}")]
    Toml(String),
    /// A workload no backend could run.
    #[error("workload {name:?}: {why}")]
    Invalid {
        /// The workload's name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// A trace line that does not parse.
    #[error("trace line {line}: {why}")]
    Trace {
        /// The line (from 1).
        line: usize,
        /// What is wrong.
        why: String,
    },
}

/// A job: `clones` concurrent copies of the same steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// Name (one word): files are `NAME.CLONE.FILE`.
    pub name: String,
    #[serde(default = "one_u32")]
    /// Concurrent copies.
    pub clones: u32,
    /// Files per clone.
    #[serde(default = "one_u32")]
    pub files: u32,
    /// Steps run once per file before the repeated ones.
    #[serde(default)]
    pub setup: Vec<Step>,
    /// Steps run `repeat` times over the clone's files.
    pub steps: Vec<Step>,
    /// Times to run `steps` over the clone's files; 0: until time runs out.
    #[serde(default = "one")]
    pub repeat: u64,
    /// The directory the job's files are in, under the workload's root
    /// (made as needed): `a/b` gives `a/b/JOB.CLONE.FILE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// The path of each file under `dir`, where `{job}`, `{clone}` and
    /// `{file}` stand for the job's name and the clone's and file's numbers
    /// (default `{job}.{clone}.{file}`). Jobs whose paths meet share those
    /// files: a reader can open what a writer renamed into place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<String>,
    /// Start only after another job: `"A"` once every clone of job `A` has
    /// ended, `"A:N"` once every clone of `A` has finished its step `N`
    /// (from 1) in the first round, for every one of its files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

fn one() -> u64 {
    1
}

impl Job {
    /// A job of `clones` clones with `files` files each, no steps yet.
    pub fn new(name: &str, clones: u32, files: u32) -> Job {
        Job {
            name: name.into(),
            clones,
            files,
            setup: vec![],
            steps: vec![],
            repeat: 1,
            dir: None,
            names: None,
            after: None,
        }
    }

    /// `after` as the job it waits for and the step (from 1), if any.
    fn after_parts(&self) -> Option<(&str, Option<usize>)> {
        let a = self.after.as_deref()?;
        Some(match a.split_once(':') {
            Some((job, step)) => (job, Some(step.trim().parse().unwrap_or(0))),
            None => (a, None),
        })
    }
}

/// Whether `p` is a relative path that stays under the root: no empty,
/// `.` or `..` component and no leading `/`.
fn is_inside(p: &str) -> bool {
    !p.is_empty() && !p.starts_with('/') && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

fn one_u32() -> u32 {
    1
}

/// A whole workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Name, shown in reports.
    pub name: String,
    /// Volume size for backends that make one.
    #[serde(default = "default_volume")]
    pub volume: Size,
    #[serde(default = "default_block")]
    /// Block size in bytes.
    pub block_size: u32,
    #[serde(default)]
    /// How the clones' operations are issued.
    pub interleave: Interleave,
    /// Start every volume from this ext4 image instead of an empty one
    /// (the engine loads it; ext4 mounts a copy). `volume` and
    /// `block_size` then come from the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<std::path::PathBuf>,
    /// Time limit; jobs with `repeat = 0` run until it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    #[serde(rename = "job")]
    /// The jobs.
    pub jobs: Vec<Job>,
    /// Engine settings (`[engine]`: profile, tunables by their kernel
    /// names, file-layer settings; see [`crate::settings`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub engine: Table,
    /// ext4 settings (`[ext4]`: `mkfs`, `mount`, /sys/fs/ext4 knobs).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ext4: Table,
    /// XFS settings (`[xfs]`: `mkfs`, `mount`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub xfs: Table,
    /// btrfs settings (`[btrfs]`: `mkfs`, `mount`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub btrfs: Table,
    /// Settings to sweep (`[sweep]`: `"engine.mb_max_to_scan" = [50, 200]`):
    /// the workload runs once per combination of values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sweep: BTreeMap<String, Vec<Scalar>>,
}

impl Default for Workload {
    /// No jobs yet, the default volume and block size.
    fn default() -> Self {
        Workload {
            name: "workload".into(),
            volume: default_volume(),
            block_size: default_block(),
            interleave: Interleave::default(),
            image: None,
            seconds: None,
            jobs: Vec::new(),
            engine: Table::new(),
            ext4: Table::new(),
            xfs: Table::new(),
            btrfs: Table::new(),
            sweep: BTreeMap::new(),
        }
    }
}

fn default_volume() -> Size {
    Size(8 << 30)
}

fn default_block() -> u32 {
    4096
}

impl Workload {
    /// Parse and validate a TOML workload.
    pub fn from_toml(text: &str) -> Result<Workload, WorkloadError> {
        let w: Workload = toml::from_str(text).map_err(|e| WorkloadError::Toml(e.to_string()))?;
        w.validate()?;
        Ok(w)
    }

    /// The TOML form.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a workload always serializes")
    }

    /// The settings of the `[engine]`, `[ext4]`, `[xfs]` and `[btrfs]` tables.
    pub fn settings(&self) -> Result<Settings, WorkloadError> {
        use crate::loop_mount::KernelFs;
        Settings::from_tables(&[
            (Scope::Engine, &self.engine),
            (Scope::Kernel(KernelFs::Ext4), &self.ext4),
            (Scope::Kernel(KernelFs::Xfs), &self.xfs),
            (Scope::Kernel(KernelFs::Btrfs), &self.btrfs),
        ])
        .map_err(|e| WorkloadError::Invalid { name: self.name.clone(), why: e.to_string() })
    }

    /// The `[sweep]` table as `(key, values)`, each value checked.
    pub fn sweeps(&self) -> Result<Vec<(String, Vec<String>)>, WorkloadError> {
        self.sweep
            .iter()
            .map(|(k, vs)| {
                let values: Vec<String> = vs.iter().map(ToString::to_string).collect();
                crate::settings::sweep::check_sweep(k, &values)
                    .map_err(|e| WorkloadError::Invalid { name: self.name.clone(), why: e.to_string() })?;
                Ok((k.clone(), values))
            })
            .collect()
    }

    /// Reject what no backend could run.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        self.settings()?;
        self.sweeps()?;
        let bad = |why: String| Err(WorkloadError::Invalid { name: self.name.clone(), why });
        if !self.block_size.is_power_of_two() || !(1024..=65536).contains(&self.block_size) {
            return bad(format!("block_size {} is not a power of two from 1024 to 65536", self.block_size));
        }
        if self.volume.0 < 16 * u64::from(self.block_size) {
            return bad(format!("volume {} is too small", self.volume));
        }
        if self.jobs.is_empty() {
            return bad("no jobs".into());
        }
        let mut files = 0u64;
        for j in &self.jobs {
            if j.clones == 0 || j.files == 0 {
                return bad(format!("job {:?} has no clones or no files", j.name));
            }
            if j.repeat == 0 && self.seconds.is_none() {
                return bad(format!("job {:?} repeats until time runs out, but `seconds` is not set", j.name));
            }
            if j.repeat == 0 && j.steps.is_empty() {
                // Nothing to repeat would spin until the time limit without
                // ever issuing an operation.
                return bad(format!("job {:?} repeats until time runs out, but has no steps", j.name));
            }
            if j.name.contains(char::is_whitespace) || j.name.is_empty() {
                return bad(format!("job name {:?} must be one word", j.name));
            }
            for s in j.setup.iter().chain(&j.steps) {
                if s.op.takes_range() && s.op != OpKind::Truncate && s.len.0 == 0 {
                    return bad(format!("job {:?}: {} with zero length", j.name, s.op.name()));
                }
                let wants_to = s.op.takes_target() || s.op == OpKind::Mkdir;
                match &s.to {
                    None if wants_to => return bad(format!("job {:?}: {} needs `to`", j.name, s.op.name())),
                    Some(_) if !wants_to => return bad(format!("job {:?}: {} takes no `to`", j.name, s.op.name())),
                    Some(t) if t.contains("{round}") || !is_inside(t) => {
                        return bad(format!("job {:?}: `to = {t:?}` is not a path under the root", j.name))
                    }
                    _ => {}
                }
                if s.op.is_gate() {
                    return bad(format!("job {:?}: {} is written as the job's `after`", j.name, s.op.name()));
                }
            }
            if let Some(d) = &j.dir {
                if !is_inside(d.trim_end_matches('/')) {
                    return bad(format!("job {:?}: dir {d:?} is not a path under the root", j.name));
                }
            }
            if let Some(n) = &j.names {
                if n.contains("{round}") || !is_inside(n) {
                    return bad(format!("job {:?}: names {n:?} is not a path under the root", j.name));
                }
            }
            if let Some((target, step)) = j.after_parts() {
                let Some(t) = self.jobs.iter().find(|o| o.name == target) else {
                    return bad(format!("job {:?}: after {target:?}, which is no job here", j.name));
                };
                match step {
                    Some(n) if n == 0 || n > t.steps.len() => {
                        return bad(format!("job {:?}: job {target:?} has no step {n} (steps count from 1)", j.name))
                    }
                    None if t.repeat == 0 => {
                        return bad(format!("job {:?}: job {target:?} never ends (repeat = 0)", j.name))
                    }
                    _ => {}
                }
            }
            files += u64::from(j.clones) * u64::from(j.files);
        }
        // Each job waits for at most one other: a cycle is a walk back to
        // where it started.
        for j in &self.jobs {
            let mut at = j;
            for _ in 0..self.jobs.len() {
                let Some((next, _)) = at.after_parts() else { break };
                if next == j.name {
                    return bad(format!("job {:?} waits for itself through `after`", j.name));
                }
                match self.jobs.iter().find(|o| o.name == next) {
                    Some(o) => at = o,
                    None => break,
                }
            }
        }
        let mut names = std::collections::HashSet::new();
        for j in &self.jobs {
            if !names.insert(&j.name) {
                return bad(format!("two jobs are called {:?}", j.name));
            }
        }
        if files > 1 << 24 {
            return bad(format!("{files} files is more than 2^24"));
        }
        if let Some(s) = self.seconds {
            if !(s.is_finite() && s > 0.0) {
                return bad(format!("seconds = {s} is not a positive time"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two clones of two appenders each, in turn (the trace tests use it too).
    pub(crate) const APPENDERS: &str = r#"
        name = "appenders"
        volume = "64M"
        interleave = "in-turn"
        [[job]]
        name = "a"
        clones = 2
        files = 2
        setup = [{ op = "create" }]
        steps = [{ op = "fallocate", len = "4K", count = 3 }, { op = "truncate", offset = 0 }]
        repeat = 2
    "#;

    #[test]
    fn streams_expand_setup_then_rounds() {
        let w = Workload::from_toml(APPENDERS).unwrap();
        assert_eq!(w.file_names(), ["a.0.0", "a.0.1", "a.1.0", "a.1.1"]);
        let s = w.streams();
        let ops: Vec<Op> = s[1].ops().collect();
        // 2 creates, then 2 rounds x 2 files x (3 fallocates + truncate).
        assert_eq!(ops.len(), 2 + 2 * 2 * 4);
        assert_eq!(ops[0], Op::on(OpKind::Create, 2));
        assert_eq!(ops[3], Op::ranged(OpKind::Fallocate, 2, 4096, 4096));
        assert_eq!(ops[5].kind, OpKind::Truncate);
        assert_eq!(ops[6].file, 3);
    }

    #[test]
    fn settings_tables_and_sweeps_parse() {
        let w = Workload::from_toml(&format!(
            "{APPENDERS}\n[engine]\nmb_optimize_scan = 0\nprofile = 'kernel'\n[ext4]\nmount = 'nodelalloc'\nmb_max_to_scan = 50\n\
             [sweep]\n'engine.mb_max_to_scan' = [50, 200]"
        ))
        .unwrap();
        let s = w.settings().unwrap();
        assert_eq!(
            s.describe(),
            "engine.mb_optimize_scan=0, engine.profile=kernel, ext4.mb_max_to_scan=50, ext4.mount=nodelalloc"
        );
        assert_eq!(w.sweeps().unwrap(), [("engine.mb_max_to_scan".to_string(), vec!["50".to_string(), "200".into()])]);
        assert_eq!(Workload::from_toml(&w.to_toml()).unwrap(), w);
    }

    const PUBLISH: &str = include_str!("../../../../examples/workloads/publish.toml");

    #[test]
    fn names_dirs_and_targets_become_slots() {
        let w = Workload::from_toml(PUBLISH).unwrap();
        let names = w.file_names();
        // The writers' files, then the paths the steps name; the publish
        // job's files are the writers' (same paths), the readers' are the
        // rename targets.
        assert_eq!(&names[..4], ["tmp/writer.0.0", "tmp/writer.0.1", "tmp/writer.1.0", "tmp/writer.1.1"]);
        assert_eq!(names.len(), 4 + 2 + 4 + 4, "{names:?}");
        assert!(names.contains(&"done".to_string()) && names.contains(&"archive/1.0".to_string()));
        let s = w.streams();
        assert_eq!(s.len(), 6);
        let slot = |p: &str| names.iter().position(|n| n == p).unwrap() as u32;
        let writer: Vec<Op> = s[1].ops().collect();
        // Set-up per file (mkdir twice, create), then per round and file.
        assert_eq!(writer[0], Op::on(OpKind::Mkdir, slot("done")));
        assert_eq!(writer[2], Op::on(OpKind::Create, slot("tmp/writer.1.0")));
        let writes: Vec<u64> = writer
            .iter()
            .filter(|o| o.kind == OpKind::Write && o.file == slot("tmp/writer.1.0"))
            .map(|o| o.offset)
            .collect();
        assert_eq!(writes, (0..12).map(|i| i * 65536).collect::<Vec<_>>(), "rounds advance");
        // The writers signal gate 0 at their end; publishers wait for both.
        assert_eq!(*writer.last().unwrap(), Op::on(OpKind::Signal, 0));
        let publish: Vec<Op> = s[2].ops().collect();
        assert_eq!(publish[0], Op { kind: OpKind::Wait, file: 0, offset: 2, len: 0, to: 0 });
        let rename = publish.iter().find(|o| o.kind == OpKind::Rename).unwrap();
        assert_eq!((rename.file, rename.to), (slot("tmp/writer.0.0"), slot("done/0.0")));
        let reader: Vec<Op> = s[4].ops().collect();
        assert_eq!(reader[0], Op { kind: OpKind::Wait, file: 1, offset: 2, len: 0, to: 0 });
        assert_eq!(reader[1], Op::on(OpKind::Open, slot("done/0.0")));
    }

    #[test]
    fn a_gate_after_a_step_opens_in_the_first_round() {
        let w = Workload::from_toml(
            "name = 'x'\n[[job]]\nname = 'a'\nfiles = 2\nsetup = [{ op = 'create' }]\n\
             steps = [{ op = 'write', len = '4K' }, { op = 'fsync' }]\nrepeat = 2\n\
             [[job]]\nname = 'b'\nafter = 'a:1'\nsteps = [{ op = 'create' }]",
        )
        .unwrap();
        let a: Vec<Op> = w.streams()[0].ops().collect();
        let at = a.iter().position(|o| o.kind == OpKind::Signal).unwrap();
        // After step 1 of the second (last) file, in round 1 only.
        assert_eq!(a[at - 1], Op::ranged(OpKind::Write, 1, 0, 4096));
        assert_eq!(a.iter().filter(|o| o.kind == OpKind::Signal).count(), 1);
    }

    #[test]
    fn toml_round_trips() {
        let w = Workload::from_toml(APPENDERS).unwrap();
        assert_eq!(Workload::from_toml(&w.to_toml()).unwrap(), w);
    }

    #[test]
    fn bad_workloads_are_typed_errors() {
        for bad in [
            "name = 'x'\njob = []",
            "name = 'x'\nblock_size = 3000\n[[job]]\nname = 'j'\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nrepeat = 0\nsteps = []",
            "name = 'x'\nseconds = 1\n[[job]]\nname = 'j'\nrepeat = 0\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'write' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'teleport' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nclones = 0\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = []\n[engine]\nmb_max_to_scam = 5",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = []\n[sweep]\n'engine.mb_max_to_scan' = [50, 0]",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = []\n[sweep]\n'engine.mb_max_to_scan' = []",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'rename' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'write', len = '4K', to = 'y' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'link', to = '../etc/passwd' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'mkdir', to = '/abs' }]",
            "name = 'x'\n[[job]]\nname = 'j'\ndir = 'a/../b'\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = [{ op = 'wait' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nafter = 'k'\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nafter = 'j'\nsteps = []",
            "name = 'x'\n[[job]]\nname = 'j'\nafter = 'k:1'\nsteps = []\n[[job]]\nname = 'k'\nafter = 'j'\nsteps = [{ op = 'create' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nafter = 'k:2'\nsteps = []\n[[job]]\nname = 'k'\nsteps = [{ op = 'create' }]",
            "name = 'x'\nseconds = 1\n[[job]]\nname = 'j'\nafter = 'k'\nsteps = []\n[[job]]\nname = 'k'\nrepeat = 0\nsteps = [{ op = 'create' }]",
            "name = 'x'\n[[job]]\nname = 'j'\nsteps = []\n[[job]]\nname = 'j'\nsteps = []",
        ] {
            assert!(Workload::from_toml(bad).is_err(), "{bad}");
        }
    }
}
