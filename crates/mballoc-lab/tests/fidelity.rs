//! The kernel profile held to kernel runs kept in `tests/data/fidelity`
//! (recorded with `mballoc lab fidelity --quick --case NAME --keep DIR` on
//! Linux 6.18, the images stored with `e2image -Q`): the engine, loaded
//! from the same pristine image and given the same operations, must end
//! with every file laid out as ext4 laid it out, answer every one of
//! ext4's allocation requests as ext4 did, and print the same mb_stats.
//! The kernel's trace replayed on the bare allocator must agree too.
//! No root needed: this runs everywhere.
//!
//! As root with loop devices, one small case also runs live against this
//! machine's kernel, with agreement thresholds (a kernel newer than the
//! one the profile follows may legitimately differ a little).

use mballoc_lab::fidelity::{self, replay, stored};
use mballoc_lab::LabError;
use std::path::PathBuf;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/fidelity")
}

/// mb_stats lines that measure the host, not the decisions.
fn decisions(mb_stats: &str) -> Vec<&str> {
    mb_stats.lines().filter(|l| !l.contains("buddies")).collect()
}

/// Replay a kept run on the engine and require what every kept run must
/// agree in: each file laid out, each data block placed and each request
/// answered as the kernel did, and as many free extents.
fn same_outcome(name: &str, run: &stored::StoredRun) -> fidelity::Agreement {
    let a = run.replay().unwrap_or_else(|e| panic!("{name}: {}", mballoc_lab::chain(&e)));
    eprintln!("{}", a.text());
    assert!(a.files > 0 && a.kernel_requests > 0, "{name}: the kept run is empty");
    assert_eq!(
        a.files_identical,
        a.files,
        "{name}: files laid out differently, first: {:?}",
        &a.differing_files[..a.differing_files.len().min(4)]
    );
    assert_eq!(a.blocks_same, a.blocks, "{name}: data blocks placed differently");
    assert_eq!(
        (a.requests_matched, a.engine_requests),
        (a.kernel_requests, a.kernel_requests),
        "{name}: requests differ; first: {:?}",
        a.first_divergence
    );
    assert_eq!(a.free_extents.0, a.free_extents.1, "{name}: free extents");
    a
}

fn check_stored(name: &str) {
    let run = match stored::load(&data(), name) {
        Err(LabError::Unavailable(why)) => {
            eprintln!("skipped {name}: {why}");
            return;
        }
        r => r.unwrap_or_else(|e| panic!("{name}: {}", mballoc_lab::chain(&e))),
    };
    let a = same_outcome(name, &run);
    assert_eq!(a.lost_events, 0, "{name}: the kept trace dropped events");
    assert_eq!(a.free_blocks.0, a.free_blocks.1, "{name}: free blocks");
    let body = |h: &str| h.lines().filter(|l| !l.starts_with("Device:")).collect::<Vec<_>>().join("\n");
    assert_eq!(body(&a.histograms.0), body(&a.histograms.1), "{name}: e2freefrag histogram");
    assert_eq!(decisions(&a.mb_stats.0), decisions(&a.mb_stats.1), "{name}: mb_stats");

    // The allocator alone, taught the kernel's earlier answers, searches
    // each request again: the same extent by the same pass every time.
    let trace = std::fs::read_to_string(data().join(format!("{name}.trace"))).unwrap();
    let r = replay::replay_file(&trace, None, run.image(), run.kernel_version, |_| {}).unwrap();
    eprintln!("{}", r.text());
    assert!(r.searched > 0, "{name}: no request reached the allocator");
    assert_eq!(r.same_extent, r.searched, "{name}: {:?}", r.first_divergence);
    assert_eq!(r.same_pass, r.searched, "{name}: passes differ");
}

#[test]
fn kept_run_near_full() {
    check_stored("near-full");
}

#[test]
fn kept_run_sparse_random_1k() {
    check_stored("sparse-random-1k");
}

/// A run kept on an older kernel (its release is in `NAME.meta`): the
/// engine under that kernel's profile lays out every file as it did and
/// answers every request as it did. Its mb_stats are in that kernel's
/// format, so they are not compared line for line.
fn check_stored_older(name: &str) {
    let run = stored::load(&data(), name).unwrap_or_else(|e| panic!("{name}: {}", mballoc_lab::chain(&e)));
    assert!(run.kernel_version < mballoc_fs::KernelVersion::NEWEST, "{name}: kept on an older kernel");
    same_outcome(name, &run);
    // The search alone, under that kernel's profile and the case's knobs,
    // its passes named as it numbered them.
    let trace = std::fs::read_to_string(data().join(format!("{name}.trace"))).unwrap();
    let r = replay::replay_file(&trace, None, run.image(), run.kernel_version, |cfg| {
        run.case.ext4.apply_engine(cfg);
    })
    .unwrap();
    assert!(r.searched > 0, "{name}: no request reached the allocator");
    assert_eq!(r.same_extent, r.searched, "{name}: {:?}", r.first_divergence);
    assert_eq!(r.same_pass, r.searched, "{name}: passes differ");
}

/// Linux 6.1's linked order lists and its commit-order frees: a volume
/// whose free space is in holes, where the lists' heads and the sets'
/// walk from the goal pick different groups from the eighth request on.
#[test]
fn kept_run_on_6_1_fragmented_free() {
    check_stored_older("fragmented-free-6.1");
}

/// Linux 6.1's cheap pass measuring the short free runs it steps over
/// from 6.4 on: with `mb_max_to_scan=2` they decide which run is taken.
#[test]
fn kept_run_on_6_1_short_scans() {
    check_stored_older("short-scans-6.1");
}

/// Linux 6.1's punch.
#[test]
fn kept_run_on_6_1_punch_edges() {
    check_stored_older("punch-edges-6.1");
}

/// Linux 6.1's stripe, counted in clusters on a bigalloc volume.
#[test]
fn kept_run_on_6_1_bigalloc_stripe() {
    check_stored_older("bigalloc-stripe-6.1");
}

#[test]
fn a_damaged_kept_run_is_an_error() {
    let dir = std::env::temp_dir().join(format!("mballoc-fidelity-damaged-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for ext in ["ops", "trace", "free", "mb_stats", "meta", "qcow2"] {
        std::fs::copy(data().join(format!("near-full.{ext}")), dir.join(format!("x.{ext}"))).unwrap();
    }
    std::fs::write(dir.join("x.layout"), "f0 13 0+8@notanumber\n").unwrap();
    let e = stored::load(&dir, "x").err().expect("a bad layout line is refused");
    assert!(mballoc_lab::chain(&e).contains("x.layout:1"), "{}", mballoc_lab::chain(&e));
    std::fs::remove_file(dir.join("x.layout")).unwrap();
    assert!(stored::load(&dir, "x").is_err(), "a missing layout is refused");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn live_kernel_agrees_on_a_small_case() {
    let case = fidelity::builtin(true).into_iter().find(|c| c.name == "small-files-1k").unwrap();
    match fidelity::run(&case, None) {
        Err(e) if e.is_unavailable() => eprintln!("skipped: {}", mballoc_lab::chain(&e)),
        Err(e) => panic!("{}", mballoc_lab::chain(&e)),
        Ok(a) => {
            eprintln!("{}", a.text());
            assert!(a.file_share() >= 0.95, "files identical {:.1}%", 100.0 * a.file_share());
            assert!(a.block_share() >= 0.99, "blocks in place {:.2}%", 100.0 * a.block_share());
            assert!((a.free_extent_ratio() - 1.0).abs() <= 0.05, "free extents {:?}", a.free_extents);
        }
    }
}

#[test]
fn a_difference_between_two_kernels_is_put_down_to_the_rule_that_makes_it() {
    use mballoc_fs::{KernelRule, KernelVersion};
    if !mballoc_lab::sys::is_root() {
        eprintln!("skipped a_difference_between_two_kernels_is_put_down_to_the_rule_that_makes_it: needs root");
        return;
    }
    let case = fidelity::builtin(true).into_iter().find(|c| c.name == "fragmented-free").expect("a built-in case");
    let (v6_1, v6_12, v6_18) = (KernelVersion::new(6, 1), KernelVersion::new(6, 12), KernelVersion::new(6, 18));
    // 6.12 and 6.18 differ in large folios, which this case's whole-run
    // writebacks never show, and in stream goals per CPU (two CPUs
    // modelled): the answers part, and that rule alone parts them.
    let d = fidelity::kernel_diff(&case, v6_12, v6_18, 2).unwrap();
    assert!(d.agreement.first_divergence.is_some(), "{}", d.text(v6_12, v6_18));
    assert_eq!(
        d.rules,
        vec![
            (KernelRule::LargeFolios.change().to_string(), false),
            (KernelRule::StreamGoalPerCpu.change().to_string(), true)
        ]
    );
    // 6.1 and 6.12 differ in CR_BEST_AVAIL_LEN, which this case never
    // reaches, in the short runs CR_GOAL_LEN_FAST measures, in the
    // stripe's units (it has no stripe), in the punch (it punches
    // nothing) and in the order lists (6.12 stable has the xarrays): the
    // lists alone part them.
    let old = fidelity::kernel_diff(&case, v6_1, v6_12, 2).unwrap();
    assert!(old.agreement.first_divergence.is_some(), "{}", old.text(v6_1, v6_12));
    assert_eq!(
        old.rules,
        vec![
            (KernelRule::BestAvail.change().to_string(), false),
            (KernelRule::SkipShortRuns.change().to_string(), false),
            (KernelRule::StripeInBlocks.change().to_string(), false),
            (KernelRule::PunchToSizePage.change().to_string(), false),
            (KernelRule::OrderXarrays.change().to_string(), true)
        ]
    );
}
