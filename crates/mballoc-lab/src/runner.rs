//! Running streams of operations on a target: one thread per stream, or
//! one thread taking the streams in turn; until they end or a deadline.
//! Counting is per stream in its own cache line, read by the timer thread
//! at the deadline the way will-it-scale reads its tasks' counters.

use crate::backend::{OpError, Target};
use crate::workload::{Interleave, Op, StreamSpec};
use crossbeam_utils::CachePadded;
use indicatif::ProgressBar;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunStats {
    pub elapsed: Duration,
    /// Data operations (fallocate, write, punch) per stream.
    pub data_ops: Vec<u64>,
    /// Bytes those operations covered.
    pub bytes: u64,
    /// Files created.
    pub creates: u64,
}

impl RunStats {
    pub fn total_data_ops(&self) -> u64 {
        self.data_ops.iter().sum()
    }

    pub fn ops_per_s(&self) -> f64 {
        self.total_data_ops() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / (1u64 << 20) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn creates_per_s(&self) -> f64 {
        self.creates as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Slowest stream's data ops over the fastest's (1 is perfectly fair).
    pub fn fairness(&self) -> f64 {
        let min = self.data_ops.iter().copied().min().unwrap_or(0);
        let max = self.data_ops.iter().copied().max().unwrap_or(0);
        if max == 0 {
            0.0
        } else {
            min as f64 / max as f64
        }
    }
}

/// A failed run: which operation, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    pub stream: usize,
    pub op: Op,
    pub error: OpError,
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stream {}: {} of file slot {} at {}+{}: {}",
            self.stream,
            self.op.kind.name(),
            self.op.file,
            self.op.offset,
            self.op.len,
            self.error
        )
    }
}

#[derive(Default)]
struct Counter {
    data: AtomicU64,
    bytes: AtomicU64,
    creates: AtomicU64,
}

impl Counter {
    fn count(&self, op: &Op) {
        if op.kind.is_data() {
            // Only this stream's thread writes its counter.
            self.data.store(self.data.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            self.bytes.store(self.bytes.load(Ordering::Relaxed) + op.len, Ordering::Relaxed);
        } else if op.kind == crate::workload::OpKind::Create {
            self.creates.store(self.creates.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }
}

/// Run `streams` on `target`. With a `limit`, endless streams stop there
/// and the counts are read at that moment; without one, the run lasts until
/// every stream ends. `progress` advances by data operations.
pub fn run(
    target: &dyn Target,
    streams: &[StreamSpec],
    interleave: Interleave,
    limit: Option<Duration>,
    progress: &ProgressBar,
) -> Result<RunStats, RunError> {
    if streams.iter().any(StreamSpec::endless) {
        assert!(limit.is_some(), "endless streams need a time limit (Workload::validate says so)");
    }
    let counters: Vec<CachePadded<Counter>> = streams.iter().map(|_| CachePadded::new(Counter::default())).collect();
    let stop = AtomicBool::new(false);
    let failed: Mutex<Option<RunError>> = Mutex::new(None);
    let fail = |e: RunError| {
        let mut slot = failed.lock().expect("error slot");
        slot.get_or_insert(e);
        stop.store(true, Ordering::Relaxed);
    };
    let workers = match interleave {
        Interleave::Threads => streams.len(),
        Interleave::InTurn => 1,
    };
    let ready = Barrier::new(workers + 1);
    // The run's start, set just before the threads are released, and the
    // latest moment a thread ran out of operations.
    let start_at: OnceLock<Instant> = OnceLock::new();
    let ended = AtomicU64::new(0);
    let end = || {
        let t = start_at.get().expect("set before release").elapsed().as_nanos() as u64;
        ended.fetch_max(t, Ordering::Relaxed);
    };
    let (elapsed, snapshot) = std::thread::scope(|s| {
        let mut handles = Vec::new();
        match interleave {
            Interleave::Threads => {
                for (i, spec) in streams.iter().enumerate() {
                    let (counters, stop, ready, fail, end) = (&counters, &stop, &ready, &fail, &end);
                    handles.push(s.spawn(move || {
                        ready.wait();
                        for op in spec.ops() {
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            if let Err(error) = target.apply(&op) {
                                fail(RunError { stream: i, op, error });
                                break;
                            }
                            counters[i].count(&op);
                        }
                        end();
                    }));
                }
            }
            Interleave::InTurn => {
                let (counters, stop, ready, fail, end) = (&counters, &stop, &ready, &fail, &end);
                handles.push(s.spawn(move || {
                    let mut its: Vec<_> = streams.iter().map(|s| Some(s.ops())).collect();
                    ready.wait();
                    let mut live = its.len();
                    while live > 0 && !stop.load(Ordering::Relaxed) {
                        for (i, it) in its.iter_mut().enumerate() {
                            let Some(ops) = it else { continue };
                            match ops.next() {
                                None => {
                                    *it = None;
                                    live -= 1;
                                }
                                Some(op) => {
                                    if let Err(error) = target.apply(&op) {
                                        fail(RunError { stream: i, op, error });
                                        return;
                                    }
                                    counters[i].count(&op);
                                }
                            }
                        }
                    }
                    end();
                }));
            }
        }
        let start = *start_at.get_or_init(Instant::now);
        ready.wait();
        let deadline = limit.map(|l| start + l);
        let read = || counters.iter().map(|c| c.data.load(Ordering::Relaxed)).collect::<Vec<u64>>();
        let mut snapshot = None;
        loop {
            std::thread::sleep(Duration::from_millis(5));
            progress.set_position(read().iter().sum());
            if handles.iter().all(|h| h.is_finished()) {
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                snapshot = Some((start.elapsed(), read()));
                stop.store(true, Ordering::Relaxed);
                break;
            }
        }
        for h in handles {
            h.join().expect("a workload thread panicked");
        }
        (Duration::from_nanos(ended.load(Ordering::Relaxed)), snapshot)
    });
    if let Some(e) = failed.into_inner().expect("error slot") {
        return Err(e);
    }
    let (elapsed, data_ops) =
        snapshot.unwrap_or_else(|| (elapsed, counters.iter().map(|c| c.data.load(Ordering::Relaxed)).collect()));
    Ok(RunStats {
        elapsed,
        data_ops,
        bytes: counters.iter().map(|c| c.bytes.load(Ordering::Relaxed)).sum(),
        creates: counters.iter().map(|c| c.creates.load(Ordering::Relaxed)).sum(),
    })
}

/// Apply operations one by one from this thread (set-up phases).
pub fn apply_all(target: &dyn Target, ops: impl IntoIterator<Item = Op>) -> Result<(), RunError> {
    for op in ops {
        target.apply(&op).map_err(|error| RunError { stream: 0, op, error })?;
    }
    Ok(())
}
