//! Seed 003 at its own scale: the ~100 TB OST of the talk (753,000 groups
//! of 32,768 4 KiB blocks, 92 TiB), aged to ~78% used with every free
//! extent 50 blocks long, then a file written in 1 MiB steps and fsynced
//! (dd bs=1M conv=fsync), on the engine under the kernel profile, with the
//! order indexes (`mb_optimize_scan=1`) and with linear scans. The talk's
//! symptom was time: a 12-second job took 12 minutes, the allocator
//! "processing group 8 after starting from group 753402".
//!
//! Every group holds the same aged bitmap, loaded as one shared template
//! (`Allocator::load_groups_alike`): a group gets a buddy of its own only
//! when a request changes it, so memory follows the groups the write
//! touches, as the kernel's buddy cache follows the groups it loads.

use super::Env;
use crate::report::{col, Plot, Row, ScenarioReport};
use mballoc::{Geometry, OptimizeScan, Tunables};
use mballoc_fs::{Fs, FsConfig};
use std::time::Instant;

/// One line for `lab list`.
pub const ABOUT: &str =
    "seed 003 at its scale: 753,000 groups (92 TiB) aged to 78% in 50-block free extents, a 1 GiB dd; index vs linear scans, time, scans and memory";

/// Blocks per group (4 KiB blocks, mke2fs's default).
const GROUP: u32 = 32_768;

/// The aged group: a 50-block free run at the start of each 100-block
/// period for 22 periods of every 50 (the lab's `aged` pattern), the
/// rest used: 22% free, every free extent 50 blocks.
fn aged_bitmap() -> Vec<u64> {
    let mut used = vec![u64::MAX; GROUP as usize / 64];
    let mut p = 0u32;
    while p + 100 <= GROUP {
        if (p / 100) % 50 < 22 {
            for b in p..p + 50 {
                used[(b / 64) as usize] &= !(1 << (b % 64));
            }
        }
        p += 100;
    }
    used
}

/// This process's peak resident memory so far in MiB (Linux's VmHWM),
/// if it can be read.
fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = s.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}

struct Outcome {
    row: Row,
}

fn one(env: &Env, groups: u32, write_mib: u64, optimize: OptimizeScan) -> Result<Outcome, String> {
    let geo = Geometry::new(4096, u64::from(groups) * u64::from(GROUP)).map_err(|e| e.to_string())?;
    let mut cfg = FsConfig::kernel(geo);
    env.settings.apply_engine(&mut cfg);
    cfg.placement.tunables = Tunables { mb_stats: true, mb_optimize_scan: optimize, ..cfg.placement.tunables };
    let t0 = Instant::now();
    let fs = Fs::import_alike(cfg, &aged_bitmap()).map_err(|e| e.to_string())?;
    let aged_in = t0.elapsed();
    let used = 100.0 * (1.0 - fs.allocator().free_blocks() as f64 / geo.total_blocks() as f64);
    let label = match optimize {
        OptimizeScan::Off => "linear scan",
        _ => "optimize_scan",
    };
    let bar = env.bar(write_mib, format!("aged-at-scale {label}: {write_mib} MiB in 1 MiB writes"));
    let t = Instant::now();
    let f = fs.create().map_err(|e| e.to_string())?;
    for i in 0..write_mib {
        fs.write(f, i << 20, 1 << 20).map_err(|e| e.to_string())?;
        bar.inc(1);
    }
    fs.fsync(f).map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let s = fs.allocator().stats();
    let mut row = Row::new("engine", label);
    row.set("groups", u64::from(groups))
        .set("used_pct", (used * 10.0).round() / 10.0)
        .set("age_s", (aged_in.as_secs_f64() * 100.0).round() / 100.0)
        .set("write_mib", write_mib)
        .set("write_s", (secs * 1000.0).round() / 1000.0)
        .set("reqs", s.reqs)
        .set("allocator_reqs", s.cr_hits.iter().sum::<u64>())
        .set("extents", fs.extents(f).map_err(|e| e.to_string())?.len() as u64)
        .set("extents_scanned", s.extents_scanned)
        .set("extents_scanned_per_request", (s.extents_scanned as f64 / s.reqs.max(1) as f64 * 10.0).round() / 10.0)
        .set("breaks", s.breaks)
        .set("groups_considered", s.cr_groups_considered.iter().sum::<u64>())
        .set("groups_built", s.buddies_generated);
    if let Some(peak) = peak_rss_mib() {
        row.set("peak_rss_mib", peak);
    }
    Ok(Outcome { row })
}

/// ext4 on a `bytes`-byte image aged to the same pattern (fallocate the
/// whole volume, punch 50 of every 100 blocks over 22 of every 50
/// periods), then the same write, with `mb_optimize_scan=optimize`.
fn kernel_row(env: &Env, bytes: u64, write_mib: u64, optimize: &str) -> Result<Row, crate::LabError> {
    use crate::backend::{KernelTarget, Target};
    use crate::loop_mount::{KernelFs, Mount};
    use crate::workload::{Op, OpKind};
    let bs = 4096u64;
    // Few inodes and lazily zeroed tables: a terabyte's inode tables
    // would not fit in /dev/shm and age nothing.
    let mkfs: Vec<String> = ["-N", "65536", "-E", "lazy_itable_init=1"].iter().map(|s| s.to_string()).collect();
    let mount = Mount::with_mkfs(KernelFs::Ext4, bytes, 4096, &format!("mb_optimize_scan={optimize}"), &mkfs)?;
    let t = KernelTarget::new(mount, vec!["age".into(), "dd".into()], 4096)?;
    let aging = Instant::now();
    let size = super::fill(&t, 0, bs)?;
    super::punch_pattern(&t, 0, size, 100 * bs, 50 * bs, 50 * bs, |i| i % 50 < 22)?;
    t.sync();
    let aged_in = aging.elapsed().as_secs_f64();
    let used = t.free_space().ok().map(|f| 100.0 * (1.0 - f.free_blocks as f64 / f.total_blocks as f64));
    t.mount().set_ext4_knob("mb_stats", "1")?;
    let before = t.counters();
    let label = if optimize == "1" { "optimize_scan" } else { "linear scan" };
    let bar = env.bar(write_mib, format!("aged-at-scale ext4 {label}: {write_mib} MiB"));
    let start = Instant::now();
    crate::runner::apply_all(&t, [Op::on(OpKind::Create, 1)])?;
    for i in 0..write_mib {
        crate::runner::apply_all(&t, [Op::ranged(OpKind::Write, 1, i << 20, 1 << 20)])?;
        bar.inc(1);
    }
    crate::runner::apply_all(&t, [Op::on(OpKind::Fsync, 1)])?;
    let secs = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let mut row = Row::new("ext4", label);
    row.set("groups", bytes / (u64::from(GROUP) * bs))
        .set("used_pct", used.map_or(serde_json::Value::from("n/a"), |u| ((u * 10.0).round() / 10.0).into()))
        .set("age_s", (aged_in * 100.0).round() / 100.0)
        .set("write_mib", write_mib)
        .set("write_s", (secs * 1000.0).round() / 1000.0);
    if let (Some(b), Some(a)) = (before, t.counters()) {
        let d = a.since(&b);
        row.set("reqs", d.reqs)
            .set("extents_scanned_per_request", (d.extents_scanned as f64 / d.reqs.max(1) as f64 * 10.0).round() / 10.0)
            .set("breaks", d.breaks);
    }
    let layouts = t.layouts()?;
    let dd = layouts.iter().find(|f| f.name == "dd").map_or(0, |f| f.filefrag_extents());
    row.set("extents", dd);
    Ok(row)
}

/// Run the scenario: 753,000 groups and 1 GiB at full size, 75,300 groups
/// and 128 MiB with `--quick`.
pub fn run(env: &Env) -> ScenarioReport {
    let (groups, mib) = if env.quick { (75_300, 128) } else { (753_000, 1024) };
    let mut rep = ScenarioReport::new(
        "aged-at-scale",
        &format!(
            "seed 003 at scale: {groups} groups of 32,768 4 KiB blocks ({:.1} TiB) aged to ~78% in 50-block free extents; {mib} MiB written in 1 MiB steps, fsync; kernel profile",
            f64::from(groups) * 32_768.0 * 4096.0 / (1u64 << 40) as f64
        ),
        vec![
            col("used_pct", "used %", 1),
            col("age_s", "aging s", 2),
            col("write_s", "write s", 3),
            col("reqs", "requests", 0),
            col("extents", "extents", 0),
            col("extents_scanned_per_request", "scanned/request", 1),
            col("breaks", "breaks", 0),
            col("groups_considered", "groups considered", 0),
            col("groups_built", "groups built", 0),
            col("peak_rss_mib", "peak MiB (process)", 1),
        ],
    );
    rep.statistics = Some("mb_stats=1 on every backend".into());
    if !env.wants(crate::backend::BackendKind::Engine) {
        rep.skip("engine", "not asked for (--backends)");
        return rep;
    }
    for optimize in [OptimizeScan::On, OptimizeScan::Off] {
        match one(env, groups, mib, optimize) {
            Ok(o) => rep.rows.push(o.row),
            Err(e) => {
                rep.failures += 1;
                rep.notes.push(format!("engine {optimize:?}: {e}"));
            }
        }
    }
    for k in env.kernels() {
        if k != crate::loop_mount::KernelFs::Ext4 {
            rep.skip(k.name(), "seed 003 is about ext4's allocator");
            continue;
        }
        let (tib, gib) = if env.quick { (0u64, 64u64) } else { (1, 0) };
        let bytes = (tib << 40) + (gib << 30);
        for optimize in ["1", "0"] {
            match kernel_row(env, bytes, mib, optimize) {
                Ok(row) => rep.rows.push(row),
                Err(e) if e.is_unavailable() => {
                    rep.skip("ext4", &e.to_string());
                    break;
                }
                Err(e) => {
                    rep.failures += 1;
                    rep.notes.push(format!("ext4 mb_optimize_scan={optimize}: {}", crate::chain(&e)));
                }
            }
        }
        rep.notes.push(format!(
            "ext4: the largest image this machine ages in reasonable time, {} GiB ({} groups, not 753,000): \
             a sparse image in /dev/shm with few inodes, filled by fallocate and punched to the same pattern",
            bytes >> 30,
            bytes / (u64::from(GROUP) * 4096)
        ));
    }
    rep.notes.push(
        "memory: the process's peak resident set so far (every row of the run, and the lab itself); groups built: buddies made (a group gets one only when a request changes it)".into(),
    );
    rep.plots.push(Plot::bars("seed 003 at scale: write time", "write_s", "seconds to write and fsync"));
    rep.plots.push(Plot::bars(
        "seed 003 at scale: extents scanned per request",
        "extents_scanned_per_request",
        "free extents measured per request",
    ));
    rep
}
