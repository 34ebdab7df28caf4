//! Running streams of operations on a target: one thread per stream, or
//! one thread taking the streams in turn; until they end or a deadline.
//! Counting is per stream in its own cache line, read by the timer thread
//! at the deadline the way will-it-scale reads its tasks' counters.

use crate::backend::{OpError, Target};
use crate::workload::{Interleave, Op, OpKind, StreamSpec};
use crossbeam_utils::CachePadded;
use indicatif::ProgressBar;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunStats {
    /// From the release of the streams to the last one's end (or the deadline).
    pub elapsed: Duration,
    /// Data operations (fallocate, write, punch) per stream.
    pub data_ops: Vec<u64>,
    /// Bytes those operations covered.
    pub bytes: u64,
    /// Files created.
    pub creates: u64,
    /// CPU time each stream's thread ran, in nanoseconds (empty when the
    /// streams share a thread or the system does not say).
    pub cpu_ns: Vec<u64>,
}

impl RunStats {
    /// Data operations of all streams.
    pub fn total_data_ops(&self) -> u64 {
        self.data_ops.iter().sum()
    }

    /// Data operations per second.
    pub fn ops_per_s(&self) -> f64 {
        self.total_data_ops() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// MiB per second that data operations covered.
    pub fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / (1u64 << 20) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Files created per second.
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

    /// Slowest stream's data ops per CPU-second over the fastest's: how
    /// evenly the target serves its callers, apart from how evenly the
    /// scheduler shares the CPUs among them (which [`RunStats::fairness`]
    /// includes). `None` without per-thread CPU times.
    pub fn cpu_fairness(&self) -> Option<f64> {
        if self.cpu_ns.len() != self.data_ops.len() || self.cpu_ns.contains(&0) {
            return None;
        }
        let rates: Vec<f64> = self.data_ops.iter().zip(&self.cpu_ns).map(|(&n, &c)| n as f64 / c as f64).collect();
        let max = rates.iter().copied().fold(0.0, f64::max);
        let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
        (max > 0.0).then(|| min / max)
    }
}

/// CPU time the calling thread has run, in nanoseconds (Linux's
/// schedstat); `None` where the system does not say.
pub fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// A failed run: which operation, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stream {stream}: {} of file slot {} at {}+{}: {error}", op.kind.name(), op.file, op.offset, op.len)]
pub struct RunError {
    /// The stream whose operation failed.
    pub stream: usize,
    /// The operation.
    pub op: Op,
    /// Why.
    pub error: OpError,
}

#[derive(Default)]
struct Counter {
    data: AtomicU64,
    bytes: AtomicU64,
    creates: AtomicU64,
    /// The thread's CPU time when it stopped (0: not known).
    cpu_ns: AtomicU64,
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
    let cpus = binding(interleave);
    let ready = StartGate::default();
    let gates = Gates::new(streams);
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
            Interleave::Threads | Interleave::PinnedThreads => {
                for (i, spec) in streams.iter().enumerate() {
                    let (counters, stop, ready, fail, end, gates) = (&counters, &stop, &ready, &fail, &end, &gates);
                    let cpus = &cpus;
                    handles.push(s.spawn(move || {
                        bind_worker(cpus, i);
                        ready.wait();
                        for op in spec.ops() {
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            if op.kind.is_gate() {
                                if let Err(error) = gates.pass(i, &op, stop) {
                                    fail(RunError { stream: i, op, error });
                                    break;
                                }
                                continue;
                            }
                            if let Err(error) = target.apply(&op) {
                                fail(RunError { stream: i, op, error });
                                break;
                            }
                            counters[i].count(&op);
                        }
                        gates.leave();
                        // Read as the thread stops: after the deadline a
                        // thread sees `stop` at its next operation, so the
                        // CPU time past the count is at most one operation.
                        counters[i].cpu_ns.store(thread_cpu_ns().unwrap_or(0), Ordering::Relaxed);
                        end();
                    }));
                }
            }
            Interleave::InTurn => {
                let (counters, stop, ready, fail, end, gates) = (&counters, &stop, &ready, &fail, &end, &gates);
                handles.push(s.spawn(move || {
                    let mut its: Vec<_> = streams.iter().map(|s| Some(s.ops())).collect();
                    // An operation a stream could not issue yet (a wait
                    // whose gate is not open): tried again on its next turn.
                    let mut held: Vec<Option<Op>> = vec![None; its.len()];
                    ready.wait();
                    let mut live = its.len();
                    while live > 0 && !stop.load(Ordering::Relaxed) {
                        let mut moved = false;
                        for (i, it) in its.iter_mut().enumerate() {
                            let Some(ops) = it else { continue };
                            let Some(op) = held[i].take().or_else(|| ops.next()) else {
                                *it = None;
                                live -= 1;
                                moved = true;
                                continue;
                            };
                            if op.kind.is_gate() {
                                if !gates.try_pass(&op) {
                                    held[i] = Some(op);
                                    continue;
                                }
                                moved = true;
                                continue;
                            }
                            moved = true;
                            if let Err(error) = target.apply(&op) {
                                fail(RunError { stream: i, op, error });
                                return;
                            }
                            counters[i].count(&op);
                        }
                        if !moved {
                            let (i, op) =
                                held.iter().enumerate().find_map(|(i, o)| o.map(|o| (i, o))).expect("a held wait");
                            fail(RunError { stream: i, op, error: Gates::deadlock() });
                            return;
                        }
                    }
                    end();
                }));
            }
        }
        ready.wait_for(&handles);
        let start = *start_at.get_or_init(Instant::now);
        ready.open(&handles);
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
        cpu_ns: match interleave {
            Interleave::InTurn => Vec::new(),
            Interleave::Threads | Interleave::PinnedThreads => {
                counters.iter().map(|c| c.cpu_ns.load(Ordering::Relaxed)).collect()
            }
        },
    })
}

/// Job ordering: counters that `signal` operations raise and `wait`
/// operations wait on. A wait that no live stream can ever end (every
/// stream still running waits too) is a deadlock, reported as the waiting
/// operation's failure rather than a hang.
struct Gates {
    signals: Vec<AtomicU64>,
    /// Streams that have not ended.
    live: AtomicUsize,
    /// What each waiting stream waits for: `(gate, signals)`.
    waiting: Mutex<Vec<(usize, u32, u64)>>,
}

impl Gates {
    fn new(streams: &[StreamSpec]) -> Gates {
        let n = streams.iter().map(StreamSpec::gates).max().unwrap_or(0);
        Gates {
            signals: (0..n).map(|_| AtomicU64::new(0)).collect(),
            live: AtomicUsize::new(streams.len()),
            waiting: Mutex::new(Vec::new()),
        }
    }

    fn deadlock() -> OpError {
        OpError::Failed("waits for a signal no running stream will give (the jobs' `after` form a cycle)".into())
    }

    fn open(&self, gate: u32, n: u64) -> bool {
        self.signals[gate as usize].load(Ordering::SeqCst) >= n
    }

    /// Signal, or report whether the wait is over.
    fn try_pass(&self, op: &Op) -> bool {
        match op.kind {
            OpKind::Signal => {
                self.signals[op.file as usize].fetch_add(1, Ordering::SeqCst);
                true
            }
            _ => self.open(op.file, op.offset),
        }
    }

    /// Stream `stream` signals, or waits until the gate opens, the run
    /// stops, or no stream is left to open it: every live stream waits,
    /// and at a gate still closed.
    fn pass(&self, stream: usize, op: &Op, stop: &AtomicBool) -> Result<(), OpError> {
        if self.try_pass(op) {
            return Ok(());
        }
        self.waiting.lock().expect("waiters").push((stream, op.file, op.offset));
        let out = loop {
            if self.try_pass(op) || stop.load(Ordering::Relaxed) {
                break Ok(());
            }
            {
                let w = self.waiting.lock().expect("waiters");
                // A stream signals before it leaves, so a gate seen closed
                // after its last signaller left stays closed.
                if w.len() >= self.live.load(Ordering::SeqCst) && w.iter().all(|&(_, g, n)| !self.open(g, n)) {
                    break Err(Self::deadlock());
                }
            }
            std::thread::sleep(Duration::from_micros(50));
        };
        self.waiting.lock().expect("waiters").retain(|w| w.0 != stream);
        out
    }

    /// A stream has ended.
    fn leave(&self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The scheduler's own fairness: `workers` threads placed as `interleave`
/// places them, each spinning on a fixed unit of work until `limit`; a
/// unit counts as one data operation. No target is involved, so the
/// spread of the counts is the scheduler's.
pub fn spin_control(workers: usize, interleave: Interleave, limit: Duration) -> RunStats {
    let cpus = binding(interleave);
    let stop = AtomicBool::new(false);
    let ready = StartGate::default();
    let results: Vec<(u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|i| {
                let (stop, ready) = (&stop, &ready);
                let cpus = &cpus;
                s.spawn(move || {
                    bind_worker(cpus, i);
                    ready.wait();
                    let (mut units, mut x) = (0u64, i as u64 + 1);
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..256 {
                            x = std::hint::black_box(
                                x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407),
                            );
                        }
                        units += 1;
                    }
                    (units, thread_cpu_ns().unwrap_or(0))
                })
            })
            .collect();
        ready.wait_for(&handles);
        ready.open(&handles);
        std::thread::sleep(limit);
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().expect("a spinning thread panicked")).collect()
    });
    RunStats {
        elapsed: limit,
        data_ops: results.iter().map(|r| r.0).collect(),
        bytes: 0,
        creates: 0,
        cpu_ns: results.iter().map(|r| r.1).collect(),
    }
}

/// Starts every worker at the same moment.
///
/// A `std::sync::Barrier` releases its waiters through its mutex: each woken
/// thread has to run to take the mutex and hand it on, and once the first
/// ones are working every hand-off waits for the scheduler to pick the next
/// woken thread. With 64 workers on 2 CPUs the last of them started seconds
/// late, and the spread stayed: 64 identical spinning threads released by
/// a barrier ended 2 s at 0.00–0.62 slowest/fastest (mostly under 0.3),
/// against 0.85–0.94 when each is woken on its own, as here.
#[derive(Default)]
struct StartGate {
    arrived: AtomicUsize,
    open: AtomicBool,
}

impl StartGate {
    /// Worker side: park until the gate opens.
    fn wait(&self) {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        while !self.open.load(Ordering::Acquire) {
            std::thread::park();
        }
    }

    /// Until every worker of `handles` waits (or one has ended early, which
    /// only a panic does: the join reports it).
    fn wait_for<T>(&self, handles: &[ScopedJoinHandle<'_, T>]) {
        while self.arrived.load(Ordering::Acquire) < handles.len() && !handles.iter().any(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Open, and wake each worker with its own unpark.
    fn open<T>(&self, handles: &[ScopedJoinHandle<'_, T>]) {
        self.open.store(true, Ordering::Release);
        for h in handles {
            h.thread().unpark();
        }
    }
}

/// The CPUs workers are bound to under `interleave`, in turn (empty: not
/// bound). Binding is best effort: a CPU set that cannot be read leaves
/// the workers where the scheduler puts them.
fn binding(interleave: Interleave) -> Vec<usize> {
    match interleave {
        Interleave::PinnedThreads => crate::sys::allowed_cpus().unwrap_or_default(),
        Interleave::Threads | Interleave::InTurn => Vec::new(),
    }
}

/// Bind the calling thread, worker `i`, to its CPU of `cpus`; a refusal
/// leaves it unbound, as [`binding`] says.
fn bind_worker(cpus: &[usize], i: usize) {
    if !cpus.is_empty() {
        let _ = crate::sys::bind_current_thread(cpus[i % cpus.len()]);
    }
}

/// Apply operations one by one from this thread (set-up phases).
pub fn apply_all(target: &dyn Target, ops: impl IntoIterator<Item = Op>) -> Result<(), RunError> {
    for op in ops {
        target.apply(&op).map_err(|error| RunError { stream: 0, op, error })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::StartGate;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_gate_holds_every_worker_until_it_opens() {
        let (gate, passed) = (StartGate::default(), AtomicUsize::new(0));
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        gate.wait();
                        passed.fetch_add(1, Ordering::SeqCst);
                    })
                })
                .collect();
            gate.wait_for(&handles);
            // Every worker is inside `wait`; a stray unpark must not let one out.
            for h in &handles {
                h.thread().unpark();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(passed.load(Ordering::SeqCst), 0);
            gate.open(&handles);
        });
        assert_eq!(passed.load(Ordering::SeqCst), 8);
    }

    #[test]
    fn a_worker_that_dies_before_the_gate_does_not_hang_the_start() {
        let gate = StartGate::default();
        let joined: Vec<bool> = std::thread::scope(|s| {
            let handles = vec![
                s.spawn(|| gate.wait()),
                s.spawn(|| {
                    if std::hint::black_box(true) {
                        panic!("set-up failed");
                    }
                    gate.wait()
                }),
            ];
            gate.wait_for(&handles);
            gate.open(&handles);
            handles.into_iter().map(|h| h.join().is_ok()).collect()
        });
        assert_eq!(joined, vec![true, false]);
    }
}
