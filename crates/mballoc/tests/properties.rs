//! After any sequence of allocations, frees and claims, the incrementally kept
//! buddy, info and order indexes equal those regenerated from the bitmaps; no
//! extent overlaps another live extent or a reserved block; free counts add up;
//! and a failed operation changes nothing.

use mballoc_testkit as common;

use mballoc::{AllocRequest, Allocator, Error, Geometry, OptimizeScan, Tunables};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use rand::Rng;
use std::collections::BTreeMap;

/// The test's own model: live extents by start, and reserved ranges.
struct Model {
    live: BTreeMap<u64, u64>,
    reserved: Vec<(u64, u64)>,
    total: u64,
}

impl Model {
    fn overlaps_live(&self, s: u64, len: u64) -> bool {
        let e = s + len;
        self.live.range(..e).next_back().is_some_and(|(&ls, &ll)| ls + ll > s)
    }
    fn overlaps_reserved(&self, s: u64, len: u64) -> bool {
        self.reserved.iter().any(|&(rs, rl)| rs < s + len && s < rs + rl)
    }
    fn covered(&self, s: u64, len: u64) -> bool {
        let mut pos = s;
        while pos < s + len {
            match self.live.range(..=pos).next_back() {
                Some((&ls, &ll)) if ls + ll > pos => pos = ls + ll,
                _ => return false,
            }
        }
        true
    }
    fn used(&self) -> u64 {
        self.live.values().sum::<u64>() + self.reserved.iter().map(|r| r.1).sum::<u64>()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Alloc { len: u32, goal: Option<u64>, policy: u8, min: Option<u32>, stream: Option<u64>, meta: bool },
    FreePart { pick: usize, head: u32, cut: u32 },
    Claim { start: u64, len: u32 },
    BadFree { start: u64, len: u64 },
    Tune { optimize: u8, trim: u32, max_scan: u32 },
}

fn op_strategy(total: u64, bpg: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1..=bpg, proptest::option::of(0..total), 0u8..3, proptest::option::of(1..=bpg), proptest::option::of(0u64..8), any::<bool>())
            .prop_map(|(len, goal, policy, min, stream, meta)| Op::Alloc { len, goal, policy, min: min.map(|m| m.min(len)), stream, meta }),
        4 => (any::<usize>(), any::<u32>(), any::<u32>()).prop_map(|(pick, head, cut)| Op::FreePart { pick, head, cut }),
        1 => (0..total, 1u32..64).prop_map(|(start, len)| Op::Claim { start, len }),
        1 => (0..total + 10, 0u64..70).prop_map(|(start, len)| Op::BadFree { start, len }),
        1 => (0u8..3, 0u32..5, 1u32..300).prop_map(|(optimize, trim, max_scan)| Op::Tune { optimize, trim, max_scan }),
    ]
}

fn build(bs: u32, bpg: u32, total: u64, prefix: u32) -> (Allocator, Model) {
    let geo = Geometry::with_group_size(bs, bpg, total).unwrap().with_reserved_per_group(prefix).unwrap();
    let extra = (total / 3, 5u64);
    let a = Allocator::builder(geo)
        .reserve(extra.0, extra.1)
        .tunables(Tunables::with_stats())
        .stream_goals(3)
        .build()
        .unwrap();
    let mut reserved = vec![extra];
    for g in 0..geo.groups() {
        if prefix > 0 {
            reserved.push((geo.group_first_block(g), u64::from(prefix)));
        }
    }
    // Merge overlaps so `used()` counts each block once.
    reserved.sort_unstable();
    let mut merged: Vec<(u64, u64)> = vec![];
    for (s, l) in reserved {
        match merged.last_mut() {
            Some(m) if s <= m.0 + m.1 => m.1 = m.1.max(s + l - m.0),
            _ => merged.push((s, l)),
        }
    }
    (a, Model { live: BTreeMap::new(), reserved: merged, total })
}

fn step(a: &Allocator, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let before = a.free_blocks();
    match *op {
        Op::Alloc { len, goal, policy, min, stream, meta } => {
            let mut r = AllocRequest::new(len);
            if let Some(g) = goal {
                r = match policy {
                    0 => r.goal(g),
                    1 => r.try_goal(g),
                    _ => r.goal_only(g),
                };
            }
            if let Some(mn) = min {
                r = r.min_len(mn);
            }
            if let Some(s) = stream {
                r = r.stream(s);
            }
            if meta {
                r = r.metadata();
            }
            match a.allocate(&r) {
                Ok(got) => {
                    let e = got.extent;
                    prop_assert!(e.len >= 1 && e.len <= len);
                    prop_assert!(e.len >= min.unwrap_or(1));
                    prop_assert!(e.end() <= m.total);
                    prop_assert!(!m.overlaps_live(e.start, e.len.into()), "double allocation {e:?}");
                    prop_assert!(!m.overlaps_reserved(e.start, e.len.into()), "reserved handed out {e:?}");
                    if policy == 2 && goal.is_some() {
                        prop_assert_eq!(Some(e.start), goal);
                    }
                    m.live.insert(e.start, e.len.into());
                }
                Err(Error::NoSpace { .. }) => {
                    prop_assert_eq!(a.free_blocks(), before);
                    // NoSpace only when it must be: no free run of the minimum.
                    if policy != 2 || goal.is_none() {
                        let need = u64::from(min.unwrap_or(1));
                        let mut longest = 0;
                        a.for_each_free_extent(|s, l| {
                            // Runs are per group for allocation purposes.
                            let geo = a.geometry();
                            let mut pos = s;
                            while pos < s + l {
                                let g = geo.group_of(pos);
                                let end = (geo.group_first_block(g) + u64::from(geo.group_len(g))).min(s + l);
                                longest = longest.max(end - pos);
                                pos = end;
                            }
                        });
                        prop_assert!(longest < need, "NoSpace with a free run of {longest} >= {need}");
                    }
                }
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
        Op::FreePart { pick, head, cut } => {
            if m.live.is_empty() {
                return Ok(());
            }
            let (&s, &l) = m.live.iter().nth(pick % m.live.len()).unwrap();
            // Free a sub-range [s+h, s+h+n) of a live extent.
            let h = u64::from(head) % l;
            let n = 1 + u64::from(cut) % (l - h);
            a.free(s + h, n).map_err(|e| TestCaseError::fail(format!("free failed: {e}")))?;
            m.live.remove(&s);
            if h > 0 {
                m.live.insert(s, h);
            }
            if h + n < l {
                m.live.insert(s + h + n, l - h - n);
            }
            prop_assert_eq!(a.free_blocks(), before + n);
        }
        Op::Claim { start, len } => {
            let len = u64::from(len).min(m.total - start);
            let r = a.claim(start, len);
            let ok = !m.overlaps_live(start, len) && !m.overlaps_reserved(start, len);
            prop_assert_eq!(r.is_ok(), ok, "claim {}+{}: {:?}", start, len, r);
            if ok {
                m.live.insert(start, len);
            } else {
                prop_assert_eq!(a.free_blocks(), before);
            }
        }
        Op::BadFree { start, len } => {
            // Anything not wholly covered by live extents must fail unchanged.
            if len == 0 || !m.covered(start, len) {
                prop_assert!(a.free(start, len).is_err());
                prop_assert_eq!(a.free_blocks(), before);
            }
        }
        Op::Tune { optimize, trim, max_scan } => {
            let t = Tunables {
                mb_optimize_scan: [OptimizeScan::Auto, OptimizeScan::On, OptimizeScan::Off][optimize as usize],
                mb_best_avail_max_trim_order: trim,
                mb_max_to_scan: max_scan,
                ..a.tunables()
            };
            a.set_tunables(t).unwrap();
        }
    }
    a.check_consistency().map_err(|v| TestCaseError::fail(v.to_string()))?;
    prop_assert_eq!(a.free_blocks() + m.used(), m.total, "free + live + reserved != total");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48 * common::scale() as u32, ..ProptestConfig::default() })]

    #[test]
    fn random_ops_keep_every_invariant(
        shape in 0usize..5,
        ops in proptest::collection::vec(op_strategy(4 * 256 + 77, 256), 1..120),
    ) {
        // Groups of any multiple of 8 blocks, as mkfs makes them, beside
        // powers of two.
        let (bs, bpg, prefix) =
            [(1024u32, 256u32, 0u32), (4096, 256, 3), (65536, 256, 1), (4096, 264, 2), (1024, 320, 0)][shape];
        let total = 4 * u64::from(bpg) + 77;
        let (a, mut m) = build(bs, bpg, total, prefix);
        for op in &ops {
            step(&a, &mut m, op)?;
        }
    }
}

/// A longer seeded simulation on a 20-group volume (optimize-scan on by
/// default), many operations per seed. `MBALLOC_TEST_SCALE` multiplies it.
#[test]
fn seeded_simulation() {
    simulate("seeded_simulation", 512);
}

/// The same on groups of 520 blocks: not a power of two.
#[test]
fn seeded_simulation_on_groups_of_any_length() {
    simulate("seeded_simulation_on_groups_of_any_length", 520);
}

fn simulate(name: &str, bpg: u32) {
    let seed = common::seed(name);
    let mut rng = common::rng(seed);
    let total = 20 * u64::from(bpg);
    let (a, mut m) = build(4096, bpg, total, 2);
    let strategy = op_strategy(total, bpg);
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for i in 0..3000 * common::scale() {
        let mut op = strategy.new_tree(&mut runner).unwrap().current();
        // Bias towards small requests so the volume fills and fragments.
        if let Op::Alloc { len, min, .. } = &mut op {
            *len = 1 + *len % rng.gen_range(1..=64);
            *min = min.map(|x| x.min(*len));
        }
        if let Err(e) = step(&a, &mut m, &op) {
            panic!("seed {seed}, op {i} {op:?}: {e}");
        }
    }
}
