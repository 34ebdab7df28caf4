//! `mballoc`: run the lab, benchmark the allocator, print its reports.

mod fallocate2;
mod interleaved;
mod kernel;
mod multiblock;
mod workloads;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "mballoc", version, about = "ext4's multiblock allocator: lab, benchmarks and reports")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Reproducible experiments.
    Lab {
        #[command(subcommand)]
        cmd: LabCmd,
    },
    /// Micro-benchmarks of the allocator core.
    Bench {
        #[command(subcommand)]
        cmd: BenchCmd,
    },
}

#[derive(Subcommand)]
enum LabCmd {
    /// List the scenarios.
    List,
    /// Run scenarios (all when none is named).
    Run {
        /// Scenario names (see `mballoc lab list`).
        scenarios: Vec<String>,
        /// Scale sizes down for a fast run.
        #[arg(long)]
        quick: bool,
        /// Seed for every random choice.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Seed 000's fallocate2 on the whole engine (scalable and legacy) and,
    /// as root, on kernel ext4.
    Fallocate2 {
        /// Worker counts (comma-separated).
        #[arg(long, default_value = "1,2,4,8,16,32,64")]
        workers: String,
        /// Seconds per row.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Rows to run: engine, engine-kernel-placement, engine-legacy, kernel-ext4.
        #[arg(long, value_delimiter = ',', default_values_t = FALLOCATE2_BACKENDS.iter().map(|s| s.to_string()))]
        backends: Vec<String>,
    },
    /// fallocate2 pattern and the fragmented 2^20-group volume.
    Alloc {
        /// Seconds per fallocate2 measurement.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Groups in the fragmented volume (1 KiB blocks, 8192 per group).
        #[arg(long, default_value_t = 1 << 20)]
        groups: u32,
        /// Requests on the fragmented volume.
        #[arg(long, default_value_t = 100_000)]
        requests: u64,
        /// Worker threads for fallocate2 (comma-separated).
        #[arg(long, default_value = "1,2")]
        threads: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

const SCENARIOS: &[(&str, &str)] = &[
    (
        "fallocate2",
        "seed 000's will-it-scale loop on the whole engine, scalable vs legacy locking, and on kernel ext4: ops/s by workers",
    ),
    (
        "fio-falloc",
        "seed 000's fio job: 64 files appended 4 KiB at a time with fallocate, interleaved; extents per file and free space",
    ),
    ("fallocate2-core", "seed 000's will-it-scale loop on the allocator alone: ops/s by worker count"),
    (
        "fragmented-core",
        "80%-full, 50%-fragmented volume: cost and groups scanned per request, optimize_scan on vs off",
    ),
    (
        "multiblock-cost",
        "seed 002: cost per block of 5 KiB, 600 KiB and 12 MiB files, block-at-a-time vs nodelalloc vs delalloc",
    ),
];

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Lab { cmd: LabCmd::List } => {
            for (name, what) in SCENARIOS {
                println!("{name:<18} {what}");
            }
            Ok(())
        }
        Cmd::Lab { cmd: LabCmd::Run { scenarios, quick, seed } } => lab_run(scenarios, quick, seed),
        Cmd::Bench { cmd: BenchCmd::Fallocate2 { workers, seconds, backends } } => {
            if let Some(b) = backends.iter().find(|b| !FALLOCATE2_BACKENDS.contains(&b.as_str())) {
                anyhow::bail!("unknown backend {b:?}; choose from {}", FALLOCATE2_BACKENDS.join(","));
            }
            run_fallocate2_engine(&parse_threads(&workers)?, Duration::from_secs_f64(seconds), &backends);
            Ok(())
        }
        Cmd::Bench { cmd: BenchCmd::Alloc { seconds, groups, requests, threads, seed } } => {
            let threads = parse_threads(&threads)?;
            run_fallocate2(&threads, Duration::from_secs_f64(seconds));
            run_fragmented(groups, requests, seed, false);
            Ok(())
        }
    }
}

fn parse_threads(s: &str) -> Result<Vec<usize>> {
    s.split(',')
        .map(|t| t.trim().parse::<usize>().map_err(|e| anyhow::anyhow!("bad thread count {t:?}: {e}")))
        .collect()
}

fn lab_run(scenarios: Vec<String>, quick: bool, seed: u64) -> Result<()> {
    let names: Vec<&str> = if scenarios.is_empty() {
        SCENARIOS.iter().map(|s| s.0).collect()
    } else {
        scenarios.iter().map(String::as_str).collect()
    };
    for n in &names {
        if !SCENARIOS.iter().any(|s| s.0 == *n) {
            anyhow::bail!("unknown scenario {n:?}; `mballoc lab list` names them");
        }
    }
    println!("mballoc lab (seed {seed}{})\n", if quick { ", quick" } else { "" });
    for n in names {
        match n {
            "fallocate2" => {
                let (workers, secs): (&[usize], f64) =
                    if quick { (&[1, 2, 8, 64], 0.3) } else { (&[1, 2, 4, 8, 16, 32, 64], 2.0) };
                let all: Vec<String> = FALLOCATE2_BACKENDS.iter().map(|s| s.to_string()).collect();
                run_fallocate2_engine(workers, Duration::from_secs_f64(secs), &all);
            }
            "fio-falloc" => {
                let job = if quick {
                    interleaved::Job { files: 64, blocks_per_file: 1024, volume_bytes: 512 << 20 }
                } else {
                    interleaved::Job { files: 64, blocks_per_file: 16384, volume_bytes: 8 << 30 }
                };
                run_fio_falloc(&job);
            }
            "fallocate2-core" => {
                let secs = if quick { 0.3 } else { 2.0 };
                run_fallocate2(&[1, 2, 8, 64], Duration::from_secs_f64(secs));
            }
            "fragmented-core" => {
                let (groups, requests) = if quick { (1 << 10, 10_000) } else { (1 << 16, 100_000) };
                run_fragmented(groups, requests, seed, true);
            }
            "multiblock-cost" => run_multiblock(Duration::from_secs_f64(if quick { 0.1 } else { 1.0 })),
            _ => unreachable!("checked above"),
        }
    }
    Ok(())
}

fn run_fallocate2(threads: &[usize], duration: Duration) {
    println!("== fallocate2 (allocator only: 2-block allocations at the goal past the previous one, 128 per file, then free; 8 GiB volume)");
    println!(
        "{:>8} {:>10} {:>14} {:>14} {:>12} {:>12}",
        "workers", "mb_stats", "total ops/s", "per worker", "ns/op", "min/max"
    );
    for &n in threads {
        for stats in [false, true] {
            let r = workloads::fallocate2(n, duration, stats);
            let (mn, mx) =
                (r.per_thread.iter().min().copied().unwrap_or(0), r.per_thread.iter().max().copied().unwrap_or(0));
            println!(
                "{:>8} {:>10} {:>14.0} {:>14.0} {:>12.1} {:>12.2}",
                n,
                if stats { "on" } else { "off" },
                r.ops_per_s(),
                r.ops_per_s() / n as f64,
                r.ns_per_op(),
                if mx == 0 { 0.0 } else { mn as f64 / mx as f64 }
            );
        }
    }
    println!();
}

/// The fallocate2 rows: the engine three ways, then kernel ext4.
const FALLOCATE2_BACKENDS: &[&str] = &["engine", "engine-kernel-placement", "engine-legacy", "kernel-ext4"];

fn run_fallocate2_engine(workers: &[usize], duration: Duration, backends: &[String]) {
    println!("== fallocate2 (seed 000: each worker appends 8 KiB with fallocate up to 1 MiB, truncates, repeats; 8 GiB volume; one op = one fallocate)");
    let want = |b: &str| backends.iter().any(|x| x == b);
    let ext4 = if want("kernel-ext4") {
        match kernel::Mount::new(kernel::KernelFs::Ext4, 8 << 30, "fallocate2") {
            Ok(m) => Some(m),
            Err(why) => {
                println!("   kernel ext4 skipped: {why}");
                None
            }
        }
    } else {
        None
    };
    println!("{:>8} {:>24} {:>14} {:>14} {:>12}", "workers", "backend", "total ops/s", "per worker", "min/max");
    let mut first: Vec<(String, f64)> = Vec::new();
    let mut last: Vec<(String, f64)> = Vec::new();
    for &n in workers {
        use mballoc::Concurrency::{Legacy, Scalable};
        use mballoc_fs::StreamPlacement::{Kernel, PerFile};
        let variants = [
            ("engine", Scalable, PerFile),
            ("engine-kernel-placement", Scalable, Kernel),
            ("engine-legacy", Legacy, Kernel),
        ];
        let mut rows: Vec<(String, fallocate2::Rates)> = variants
            .iter()
            .filter(|v| want(v.0))
            .map(|&(name, c, p)| (name.to_string(), fallocate2::engine(n, duration, c, p)))
            .collect();
        if let Some(m) = &ext4 {
            match fallocate2::kernel(m, n, duration) {
                Ok(r) => rows.push(("kernel-ext4".into(), r)),
                Err(e) => println!("   kernel ext4 at {n} workers failed: {e}"),
            }
        }
        for (name, r) in &rows {
            println!(
                "{:>8} {:>24} {:>14.0} {:>14.0} {:>12.2}",
                n,
                name,
                r.total_ops_per_s(),
                r.per_worker_ops_per_s(),
                r.fairness()
            );
        }
        let totals = rows.iter().map(|(name, r)| (name.clone(), r.total_ops_per_s()));
        if first.is_empty() {
            first = totals.collect();
        } else {
            last = totals.collect();
        }
    }
    if let Some(top) = workers.last().filter(|_| !last.is_empty()) {
        for ((name, one), (_, many)) in first.iter().zip(&last) {
            println!("   {name}: {top} workers give {:.2}x the 1-worker total", many / one);
        }
    }
    if let (Some((_, e)), Some((_, k))) = (first.first(), first.iter().find(|(n, _)| n == "kernel-ext4")) {
        println!(
            "   1 worker: engine {:.1}x kernel ext4 (in-process calls vs system calls on a loop-mounted image)",
            e / k
        );
    }
    println!();
}

fn run_fio_falloc(job: &interleaved::Job) {
    use interleaved::Interleave;
    use mballoc_fs::StreamPlacement;
    println!(
        "== fio-falloc (seed 000: {} files x {} MiB appended 4 KiB at a time with fallocate, interleaved; {} GiB volume)",
        job.files,
        (job.blocks_per_file * 4096) >> 20,
        job.volume_bytes as f64 / (1u64 << 30) as f64
    );
    println!(
        "{:>8} {:>22} {:>10} {:>14} {:>12} {:>13} {:>18}",
        "appends", "backend", "MiB/s", "extents/file", "max extents", "free extents", "avg free extent"
    );
    for how in [Interleave::InTurn, Interleave::Threads] {
        let mut rows: Vec<(&str, interleaved::Outcome)> = vec![
            ("engine", interleaved::engine(job, how, StreamPlacement::PerFile)),
            ("engine-kernel-placement", interleaved::engine(job, how, StreamPlacement::Kernel)),
        ];
        match interleaved::kernel_ext4(job, how) {
            Ok(o) => rows.push(("kernel-ext4", o)),
            Err(why) => println!("   kernel ext4 skipped: {why}"),
        }
        for (name, o) in &rows {
            println!(
                "{:>8} {:>22} {:>10.0} {:>14.1} {:>12} {:>13} {:>15} KB",
                how.name(),
                name,
                o.mib_per_s(job),
                o.avg_extents(),
                o.max_extents(),
                o.free_extents,
                o.avg_free_extent_kib
            );
        }
        for (name, o) in &rows {
            println!("   {name} ({}), free space as e2freefrag shows it:", how.name());
            for line in o.freefrag.lines().skip_while(|l| !l.starts_with("HISTOGRAM")).skip(2) {
                println!("     {line}");
            }
        }
    }
    println!();
}

fn run_fragmented(groups: u32, requests: u64, seed: u64, print_mb_stats: bool) {
    println!("== fragmented volume: {groups} groups x 8192 blocks of 1 KiB, 80% full, half the groups in 4-block holes; 64-block requests at random goals");
    let t0 = Instant::now();
    let a = workloads::fragmented_volume(groups, seed);
    println!("   built in {:.2?}; free {} of {} blocks", t0.elapsed(), a.free_blocks(), a.geometry().total_blocks());
    println!(
        "{:>14} {:>10} {:>12} {:>14} {:>14} {:>14} {:>12}",
        "optimize_scan", "requests", "ns/request", "groups seen/rq", "scanned/rq", "max scanned", "extents/rq"
    );
    let mut last = None;
    for optimize in [true, false] {
        let r = workloads::fragmented_run(&a, optimize, requests, 64, seed);
        println!(
            "{:>14} {:>10} {:>12.0} {:>14.2} {:>14.2} {:>14} {:>12.2}",
            if optimize { "on" } else { "off" },
            r.requests,
            r.ns_per_request(),
            r.groups_considered_per_request(),
            r.groups_scanned_per_request(),
            r.max_groups_scanned,
            r.extents_scanned_per_request()
        );
        if optimize {
            last = Some(r.mb_stats);
        }
    }
    if print_mb_stats {
        if let Some(s) = last {
            println!("\n   mb_stats (optimize_scan on):\n{s}");
        }
    }
    println!();
}

fn run_multiblock(budget: Duration) {
    println!("== multiblock-cost (engine: files written 4 KiB at a time on an empty 4 GiB volume, then fsync)");
    println!(
        "{:>9} {:>16} {:>8} {:>12} {:>16} {:>14}",
        "size KiB", "variant", "files", "ns/block", "alloc calls/file", "extents/file"
    );
    for size_kib in [5, 600, 12 * 1024] {
        for v in [multiblock::Variant::BlockAtATime, multiblock::Variant::NoDelalloc, multiblock::Variant::Delalloc] {
            let c = multiblock::run(size_kib, v, budget);
            println!(
                "{:>9} {:>16} {:>8} {:>12.1} {:>16.2} {:>14.2}",
                c.size_kib,
                c.variant.name(),
                c.files,
                c.ns_per_block(),
                c.requests_per_file,
                c.extents_per_file
            );
        }
    }
    println!("   alloc calls = allocator requests + requests served from a preallocation");
    println!();
}
