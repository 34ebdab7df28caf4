//! Scenarios on the allocator alone (no file layer): the fallocate2
//! pattern as raw allocations, and a fragmented volume of 2^16 groups.

use super::Env;
use crate::core_workloads as cw;
use crate::report::{col, Plot, Row, ScenarioReport};
use std::time::Duration;

/// One line for `lab list`.
pub const FALLOCATE2_ABOUT: &str = "seed 000's will-it-scale loop on the allocator alone: ops/s by worker count";
/// One line for `lab list`.
pub const FRAGMENTED_ABOUT: &str =
    "80%-full, 50%-fragmented volume: cost and groups scanned per request, optimize_scan on vs off";

/// Run the allocator-only fallocate2 scenario.
pub fn run_fallocate2(env: &Env) -> ScenarioReport {
    let secs = if env.quick { 0.3 } else { 2.0 };
    let mut rep = ScenarioReport::new(
        "fallocate2-core",
        "allocator only: 2-block allocations at the goal past the previous one, 128 per file, then free; 8 GiB volume",
        vec![
            col("workers", "workers", 0),
            col("mb_stats", "mb_stats", 0),
            col("ops_per_s", "total ops/s", 0),
            col("ns_per_op", "ns/op", 1),
            col("min_max", "min/max", 2),
        ],
    );
    for n in [1usize, 2, 8, 64] {
        for stats in [false, true] {
            let bar = env.bar(0, format!("fallocate2-core x{n}"));
            let r = cw::fallocate2(n, Duration::from_secs_f64(secs), stats);
            bar.finish_and_clear();
            let (mn, mx) =
                (r.per_thread.iter().min().copied().unwrap_or(0), r.per_thread.iter().max().copied().unwrap_or(0));
            let mut row = Row::new("engine", "allocator");
            row.set("workers", n as u64)
                .set("mb_stats", if stats { "on" } else { "off" })
                .set("ops_per_s", r.ops_per_s().round())
                .set("ns_per_op", (r.ns_per_op() * 10.0).round() / 10.0)
                .set("min_max", if mx == 0 { 0.0 } else { (mn as f64 / mx as f64 * 100.0).round() / 100.0 });
            rep.rows.push(row);
        }
    }
    rep.plots.push(
        Plot::lines(
            "allocator fallocate2: ops/s by workers",
            "workers",
            "workers (threads)",
            "ops_per_s",
            "operations per second, all workers",
        )
        .split_by("mb_stats"),
    );
    rep
}

/// Run the fragmented-volume scenario.
pub fn run_fragmented(env: &Env) -> ScenarioReport {
    let (groups, requests) = if env.quick { (1 << 10, 10_000) } else { (1 << 16, 100_000) };
    let mut rep = fragmented(groups, requests, env.seed);
    rep.name = "fragmented-core".into();
    rep
}

/// The fragmented-volume table (also `mballoc bench alloc`).
pub fn fragmented(groups: u32, requests: u64, seed: u64) -> ScenarioReport {
    let a = cw::fragmented_volume(groups, seed);
    let mut rep = ScenarioReport::new(
        "fragmented",
        &format!("{groups} groups x 8192 blocks of 1 KiB, 80% full, half the groups in 4-block holes; 64-block requests at random goals"),
        vec![
            col("requests", "requests", 0),
            col("ns_per_request", "ns/request", 0),
            col("groups_considered_per_request", "groups seen/rq", 2),
            col("groups_scanned_per_request", "scanned/rq", 2),
            col("max_groups_scanned", "max scanned", 0),
            col("extents_scanned_per_request", "extents/rq", 2),
        ],
    );
    for optimize in [true, false] {
        let r = cw::fragmented_run(&a, optimize, requests, 64, seed);
        let mut row = Row::new("engine", if optimize { "optimize_scan=1" } else { "optimize_scan=0" });
        row.set("requests", r.requests)
            .set("ns_per_request", r.ns_per_request().round())
            .set("groups_considered_per_request", r.groups_considered_per_request())
            .set("groups_scanned_per_request", r.groups_scanned_per_request())
            .set("max_groups_scanned", r.max_groups_scanned)
            .set("extents_scanned_per_request", r.extents_scanned_per_request());
        rep.rows.push(row);
        if optimize {
            rep.sections.push(("mb_stats (optimize_scan on)".into(), r.mb_stats));
        }
    }
    rep.plots.push(Plot::bars("fragmented volume: time per request", "ns_per_request", "nanoseconds per request"));
    rep.plots.push(Plot::bars(
        "fragmented volume: groups scanned per request",
        "groups_scanned_per_request",
        "groups scanned under their lock, per request",
    ));
    rep
}
