//! `mballoc`: run the lab, benchmark the allocator, print its reports.

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
    println!("mballoc lab: engine scenarios (seed {seed}{})\n", if quick { ", quick" } else { "" });
    for n in names {
        match n {
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
