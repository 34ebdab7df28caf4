//! Each pass is reachable: for each, a free-space shape where that pass, and
//! not an earlier one, satisfies the request; the per-pass hit and
//! useless-loop counters say so.

use mballoc::{AllocRequest, Allocator, Criterion, FoundBy, Geometry, OptimizeScan, Tunables};

const BPG: u32 = 1024;
const GROUPS: u64 = 16;

/// 16 groups of 1024 blocks, optimize-scan on, stats on; every group full
/// except the runs `free(g)` returns.
fn shaped(free: impl Fn(u32) -> Vec<(u32, u32)>) -> Allocator {
    let geo = Geometry::with_group_size(4096, BPG, GROUPS * u64::from(BPG)).unwrap();
    let t = Tunables { mb_optimize_scan: OptimizeScan::On, ..Tunables::with_stats() };
    let a = Allocator::builder(geo).tunables(t).build().unwrap();
    a.claim(0, GROUPS * u64::from(BPG)).unwrap();
    for g in 0..GROUPS as u32 {
        for (s, l) in free(g) {
            a.free(geo.group_first_block(g) + u64::from(s), l.into()).unwrap();
        }
    }
    a.reset_stats();
    a
}

fn expect_pass(a: &Allocator, req: AllocRequest, cr: Criterion, len: u32) {
    let got = a.allocate(&req).unwrap();
    assert_eq!(got.found_by, FoundBy::Pass(cr), "{req:?} -> {got:?}");
    assert_eq!(got.extent.len, len);
    let s = a.stats();
    for c in Criterion::ALL {
        let hits = s.cr_hits[c.index()];
        assert_eq!(hits, u64::from(c == cr), "hits of {c:?}");
        if c < cr && !(c == Criterion::BestAvailLen && req.min_len.is_none()) {
            assert!(s.cr_useless_loops[c.index()] >= 1, "{c:?} should have failed first");
        }
    }
    a.check_consistency().unwrap();
}

#[test]
fn power2_aligned() {
    let a = shaped(|_| vec![(0, BPG)]);
    expect_pass(&a, AllocRequest::new(8), Criterion::PowerOf2Aligned, 8);
    assert_eq!(a.stats().two_n_hits, 1);
}

#[test]
fn goal_len_fast() {
    // Runs of 14 at 16k+1: no aligned 8-block chunk, but the average
    // fragment (14) covers a request of 8.
    let a = shaped(|_| (0..BPG / 16).map(|k| (16 * k + 1, 14)).collect());
    expect_pass(&a, AllocRequest::new(8), Criterion::GoalLenFast, 8);
}

#[test]
fn best_avail_len() {
    // Runs of 40: nothing of 64, average 40; trimmed to 32 it fits.
    let a = shaped(|_| (0..BPG / 64).map(|k| (64 * k + 3, 40)).collect());
    expect_pass(&a, AllocRequest::new(64).min_len(8), Criterion::BestAvailLen, 32);
}

#[test]
fn goal_len_slow() {
    // One unaligned run of 64 in group 5 among single-block holes: no
    // aligned 64 chunk, average far below 64, but 64 free in one run.
    let a = shaped(|g| {
        if g != 5 {
            return vec![];
        }
        let mut v = vec![(100, 64)];
        v.extend((0..24).map(|j| (4 * j + 2, 1)));
        v.extend((0..50).map(|j| (200 + 4 * j, 1)));
        v
    });
    expect_pass(&a, AllocRequest::new(64), Criterion::GoalLenSlow, 64);
}

#[test]
fn any_free() {
    // Thirty single free blocks in all: no group has 64 free.
    let a = shaped(|g| if g == 9 { (0..30).map(|j| (10 * j + 5, 1)).collect() } else { vec![] });
    let got = a.allocate(&AllocRequest::new(64)).unwrap();
    assert_eq!(got.found_by, FoundBy::Pass(Criterion::AnyFree));
    assert_eq!(got.extent.len, 1);
    // The best candidate is taken after the last pass ran, and mb_stats
    // counts that as ext4 does: no pass's hit, one more failed first pass.
    let st = a.stats();
    assert_eq!(st.cr_hits, [0, 0, 0, 0, 0]);
    assert_eq!(st.success, 0);
    assert_eq!(st.reqs, 1);
    assert!(st.cr_useless_loops[0] >= 1);
    // With a minimum nothing can meet, it is NoSpace and nothing changes.
    let before = a.free_blocks();
    assert!(matches!(a.allocate(&AllocRequest::new(64).min_len(2)), Err(mballoc::Error::NoSpace { .. })));
    assert_eq!(a.free_blocks(), before);
    a.check_consistency().unwrap();
}

#[test]
fn linear_scan_reaches_the_same_passes() {
    // With optimize-scan off the cheap passes scan linearly from the goal.
    let a = shaped(|_| (0..BPG / 16).map(|k| (16 * k + 1, 14)).collect());
    a.set_tunables(Tunables { mb_optimize_scan: OptimizeScan::Off, ..a.tunables() }).unwrap();
    let got = a.allocate(&AllocRequest::new(8).goal(7 * u64::from(BPG))).unwrap();
    assert_eq!(got.found_by, FoundBy::Pass(Criterion::GoalLenFast));
    assert_eq!(got.extent.start, 7 * u64::from(BPG) + 1, "linear scan starts at the goal group");
}

/// Lustre's thresholds: a volume with 12% free skips straight to
/// CR_GOAL_LEN_SLOW (below c2 = 15%), though CR_POWER2_ALIGNED would have
/// served the request; with the thresholds off it starts at the cheapest.
#[test]
fn lustre_thresholds_pick_the_first_pass() {
    let a = shaped(|g| if g < 2 { vec![(0, BPG)] } else { vec![] });
    a.set_tunables(a.tunables().with_lustre_thresholds()).unwrap();
    let got = a.allocate(&AllocRequest::new(8)).unwrap();
    assert_eq!(got.found_by, FoundBy::Pass(Criterion::GoalLenSlow));
    let s = a.stats();
    for c in [Criterion::PowerOf2Aligned, Criterion::GoalLenFast, Criterion::BestAvailLen] {
        assert_eq!(s.cr_groups_considered[c.index()], 0, "{c:?} was skipped");
    }
    a.set_tunables(Tunables { mb_c1_threshold: 0, mb_c2_threshold: 0, mb_c3_threshold: 0, ..a.tunables() }).unwrap();
    a.reset_stats();
    expect_pass(&a, AllocRequest::new(8), Criterion::PowerOf2Aligned, 8);
}

/// With a RAID stripe, a goal of one stripe is taken only where a stripe
/// starts, and a goal of several stripes is served first from a run that
/// starts on a stripe boundary, even when an unaligned run comes first.
#[test]
fn a_stripe_aligns_goals_and_fast_scans() {
    // Group 3 free from block 10 to its end, everything else full.
    let a = shaped(|g| if g == 3 { vec![(10, BPG - 10)] } else { vec![] });
    let mut t = a.tunables();
    t.stripe = 64;
    a.set_tunables(t).unwrap();
    let group3 = 3 * u64::from(BPG);
    // Three stripes from the group's start: the aligned scan skips the
    // free blocks 10..64 and starts at 64.
    let got = a.allocate(&AllocRequest::new(192).goal(group3)).unwrap();
    assert_eq!(got.extent.start, group3 + 64, "{got:?}");
    assert_eq!(got.found_by, FoundBy::Pass(Criterion::GoalLenFast));
    // One stripe tried at an unaligned free goal: refused there, found
    // aligned.
    let got = a.allocate(&AllocRequest::new(64).try_goal(group3 + 300)).unwrap();
    assert_ne!(got.found_by, FoundBy::Goal, "{got:?}");
    assert_eq!(got.extent.start % 64, 0, "{got:?}");
    // Without the stripe the same goal is taken where it is.
    t.stripe = 0;
    a.set_tunables(t).unwrap();
    let got = a.allocate(&AllocRequest::new(64).try_goal(group3 + 700)).unwrap();
    assert_eq!((got.found_by, got.extent.start), (FoundBy::Goal, group3 + 700));
    a.check_consistency().unwrap();
}
