//! A workload expanded: its name table (every slot a backend keeps a file
//! or a directory in) and one lazy stream of operations per clone, with
//! the gates that order jobs.
//!
//! Slots come in a fixed order, one per distinct path: each job's files
//! (`DIR/NAMES`, by default `DIR/JOB.CLONE.FILE`), job by job, clone by
//! clone; then every other path a step names (`to`), in the order the
//! steps name them. Jobs whose paths meet share those slots. Job ordering: a job with `after =
//! "A:N"` waits, before its first operation, until every clone of job
//! `A` has finished step `N` (from 1) of its steps in their first round,
//! for every file; `after = "A"` waits until job `A` has ended. The wait
//! is a gate: the clones of `A` signal it, the runner holds the waiting
//! streams (and reports a cycle rather than hanging).

use super::ops::{Op, OpKind, Step};
use super::{Job, Workload};
use std::collections::HashMap;
use std::sync::Arc;

/// Where a stream's operations come from.
#[derive(Debug, Clone)]
pub enum StreamSpec {
    /// Generated from a job's steps.
    Job {
        /// The job.
        job: Box<Job>,
        /// The clone's number.
        clone: u32,
        /// The slots of the clone's files, and of each step's `to` path
        /// per file (`to[k][f]` for the k-th step of setup then steps),
        /// resolved once: the operations are generated per file and step.
        slots: Arc<CloneSlots>,
        /// The gate to wait at before anything, and the signals awaited.
        wait: Option<(u32, u64)>,
        /// Gates to signal: after this step (from 1) of the first round,
        /// or at the end.
        signals: Vec<(Option<usize>, u32)>,
    },
    /// Listed (a trace).
    Listed(Arc<Vec<Op>>),
}

impl StreamSpec {
    /// The operations, generated lazily.
    pub fn ops(&self) -> Box<dyn Iterator<Item = Op> + Send + '_> {
        match self {
            StreamSpec::Job { job, slots, wait, signals, .. } => {
                let first = wait.map(|(gate, n)| Op { kind: OpKind::Wait, file: gate, offset: n, len: 0, to: 0 });
                let at_end: Vec<Op> =
                    signals.iter().filter(|s| s.0.is_none()).map(|s| Op::on(OpKind::Signal, s.1)).collect();
                let body = job_ops(job, slots, signals);
                Box::new(first.into_iter().chain(body).chain(at_end))
            }
            StreamSpec::Listed(v) => Box::new(v.iter().copied()),
        }
    }

    /// Gates this stream waits at or signals, as one more than the
    /// highest gate number (0: none).
    pub fn gates(&self) -> usize {
        match self {
            StreamSpec::Job { wait, signals, .. } => {
                let w = wait.map_or(0, |(g, _)| g as usize + 1);
                signals.iter().map(|s| s.1 as usize + 1).max().unwrap_or(0).max(w)
            }
            StreamSpec::Listed(v) => {
                v.iter().filter(|o| o.kind.is_gate()).map(|o| o.file as usize + 1).max().unwrap_or(0)
            }
        }
    }

    /// Whether the stream runs until told to stop.
    pub fn endless(&self) -> bool {
        matches!(self, StreamSpec::Job { job, .. } if job.repeat == 0)
    }
}

/// The slot path of file `file` of clone `clone` of `job`.
pub(super) fn file_path(job: &Job, clone: u32, file: u32) -> String {
    let name = to_path(job.names.as_deref().unwrap_or("{job}.{clone}.{file}"), job, clone, file);
    match job.dir.as_deref().map(|d| d.trim_matches('/')).filter(|d| !d.is_empty()) {
        Some(d) => format!("{d}/{name}"),
        None => name,
    }
}

/// A step's `to` path for one file.
pub(super) fn to_path(template: &str, job: &Job, clone: u32, file: u32) -> String {
    template.replace("{job}", &job.name).replace("{clone}", &clone.to_string()).replace("{file}", &file.to_string())
}

impl Workload {
    /// Every slot's path: the jobs' files, then the other paths the steps
    /// name (see the module's doc).
    pub fn file_names(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for j in &self.jobs {
            for c in 0..j.clones {
                for f in 0..j.files {
                    let p = file_path(j, c, f);
                    if seen.insert(p.clone()) {
                        v.push(p);
                    }
                }
            }
        }
        for j in &self.jobs {
            for s in j.setup.iter().chain(&j.steps) {
                let Some(t) = &s.to else { continue };
                for c in 0..j.clones {
                    for f in 0..j.files {
                        let p = to_path(t, j, c, f);
                        if seen.insert(p.clone()) {
                            v.push(p);
                        }
                    }
                }
            }
        }
        v
    }

    /// One stream of operations per clone.
    pub fn streams(&self) -> Vec<StreamSpec> {
        let by_path: HashMap<String, u32> =
            self.file_names().into_iter().enumerate().map(|(i, n)| (n, i as u32)).collect();
        // Gate g belongs to the g-th job with `after`.
        let mut waits: HashMap<&str, (u32, u64)> = HashMap::new();
        let mut signals: HashMap<&str, Vec<(Option<usize>, u32)>> = HashMap::new();
        for j in &self.jobs {
            let Some((target, step)) = j.after_parts() else { continue };
            let gate = waits.len() as u32;
            let clones = self.jobs.iter().find(|o| o.name == target).map_or(0, |o| u64::from(o.clones));
            waits.insert(&j.name, (gate, clones));
            signals.entry(target).or_default().push((step, gate));
        }
        let mut v = Vec::new();
        for j in &self.jobs {
            for clone in 0..j.clones {
                v.push(StreamSpec::Job {
                    job: Box::new(j.clone()),
                    clone,
                    slots: Arc::new(CloneSlots::new(j, clone, &by_path)),
                    wait: waits.get(j.name.as_str()).copied(),
                    signals: signals.get(j.name.as_str()).cloned().unwrap_or_default(),
                });
            }
        }
        v
    }
}

/// One clone's slots, resolved from paths once.
#[derive(Debug)]
pub struct CloneSlots {
    files: Vec<u32>,
    to: Vec<Option<Vec<u32>>>,
}

impl CloneSlots {
    fn new(job: &Job, clone: u32, by_path: &HashMap<String, u32>) -> CloneSlots {
        // Every path the workload names is a slot (`file_names`).
        let files = (0..job.files).map(|f| by_path[&file_path(job, clone, f)]).collect();
        let to = job
            .setup
            .iter()
            .chain(&job.steps)
            .map(|s| s.to.as_ref().map(|t| (0..job.files).map(|f| by_path[&to_path(t, job, clone, f)]).collect()))
            .collect();
        CloneSlots { files, to }
    }
}

fn step_ops<'a>(
    s: &'a Step,
    k: usize,
    file: u32,
    round: u64,
    slots: &'a CloneSlots,
) -> impl Iterator<Item = Op> + Send + 'a {
    let slot = slots.files[file as usize];
    let to = slots.to[k].as_ref().map_or(0, |t| t[file as usize]);
    (0..s.count).map(move |i| s.op(round, i, slot, to))
}

fn job_ops<'a>(
    job: &'a Job,
    slots: &'a CloneSlots,
    signals: &'a [(Option<usize>, u32)],
) -> impl Iterator<Item = Op> + Send + 'a {
    let last = job.files - 1;
    let n_setup = job.setup.len();
    let setup = (0..job.files)
        .flat_map(move |f| job.setup.iter().enumerate().flat_map(move |(k, s)| step_ops(s, k, f, 0, slots)));
    let rounds: Box<dyn Iterator<Item = u64> + Send> =
        if job.repeat == 0 { Box::new(0..) } else { Box::new(0..job.repeat) };
    let body = rounds.flat_map(move |round| {
        (0..job.files).flat_map(move |f| {
            job.steps.iter().enumerate().flat_map(move |(k, s)| {
                // The clone's last file finishing step k+1 of the first
                // round signals the gates that wait for it.
                let marks = signals
                    .iter()
                    .filter(move |g| round == 0 && f == last && g.0 == Some(k + 1))
                    .map(|g| Op::on(OpKind::Signal, g.1));
                step_ops(s, n_setup + k, f, round, slots).chain(marks)
            })
        })
    });
    setup.chain(body)
}
