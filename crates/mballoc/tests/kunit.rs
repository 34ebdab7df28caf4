//! The kernel's KUnit mballoc cases (fs/ext4/mballoc-test.c) re-created as
//! behavioural tests, for 1 KiB, 4 KiB and 64 KiB blocks. The fixture is the
//! kernel's: 4 groups of 1024 allocation units (8192 blocks in 8-block
//! clusters), unit 0 of group 0 reserved as metadata, goal group 1.

use mballoc_testkit as common;

use mballoc::{Allocator, Buddy, Geometry};
use rand::Rng;

const CPG: u32 = 1024;
const GROUPS: u64 = 4;
const GOAL_GROUP: u64 = 1;

fn fixture(block_size: u32) -> Allocator {
    let geo = Geometry::with_group_size(block_size, CPG, GROUPS * u64::from(CPG)).unwrap();
    Allocator::builder(geo).reserve(0, 1).build().unwrap()
}

/// Eight non-overlapping ascending ranges in one group, one per slice of
/// `CPG / 8` (`mbt_generate_test_ranges`); zero-length ones are dropped.
fn ranges(rng: &mut impl Rng) -> Vec<(u32, u32)> {
    let max = CPG / 8;
    (0..8)
        .filter_map(|i| {
            let start = rng.gen_range(0..max);
            let len = rng.gen_range(0..max).min(max - start);
            (len > 0).then_some((i * max + start, len))
        })
        .collect()
}

fn fill_all(a: &Allocator) {
    for g in 0..GROUPS {
        let base = g * u64::from(CPG);
        let from = if g == 0 { 1 } else { base };
        a.claim(from, base + u64::from(CPG) - from).unwrap();
    }
}

const BLOCK_SIZES: [u32; 3] = [1024, 4096, 65536];

#[test]
fn new_blocks_simple() {
    for bs in BLOCK_SIZES {
        let a = fixture(bs);
        let goal = GOAL_GROUP * u64::from(CPG);
        assert_eq!(a.allocate_simple(goal).unwrap(), goal, "bs {bs}: goal itself");
        assert_eq!(a.allocate_simple(goal).unwrap(), goal + 1, "bs {bs}: next after goal");
        a.claim(goal + 2, u64::from(CPG) - 2).unwrap();
        assert_eq!(a.allocate_simple(goal).unwrap(), 2 * u64::from(CPG), "bs {bs}: next group");
        a.claim(2 * u64::from(CPG) + 1, 2 * u64::from(CPG) - 1).unwrap();
        assert_eq!(a.allocate_simple(goal).unwrap(), 1, "bs {bs}: wraps to group 0 past metadata");
        a.claim(2, u64::from(CPG) - 2).unwrap();
        let before = a.free_blocks();
        assert!(a.allocate_simple(goal).is_err(), "bs {bs}: full volume");
        assert_eq!(a.free_blocks(), before);
        a.check_consistency().unwrap();
    }
}

#[test]
fn free_blocks_simple() {
    let seed = common::seed("free_blocks_simple");
    let mut rng = common::rng(seed);
    for bs in BLOCK_SIZES {
        let a = fixture(bs);
        fill_all(&a);
        let base = GOAL_GROUP * u64::from(CPG);
        for (start, len) in ranges(&mut rng) {
            a.free(base + u64::from(start), u64::from(len)).unwrap();
            for g in 0..GROUPS as u32 {
                let info = a.group_info(g).unwrap();
                if u64::from(g) == GOAL_GROUP {
                    assert_eq!(info.first_free, start, "seed {seed} bs {bs}");
                    a.with_group(g, |b| assert_eq!(b.next_used(start), start + len, "seed {seed} bs {bs}")).unwrap();
                } else {
                    assert_eq!(info.free, 0, "seed {seed} bs {bs}: group {g} touched");
                }
            }
            a.claim(base + u64::from(start), u64::from(len)).unwrap();
        }
        a.check_consistency().unwrap();
    }
}

/// The KUnit reference builder: start from the bitmap, pair free order-k
/// chunks into order k+1 level by level. Returns, per order, the maximal free
/// chunk indices, plus the counters.
fn reference_buddy(used: &[bool], max_order: u32) -> (Vec<Vec<bool>>, Vec<u32>) {
    let n = used.len();
    let mut free_at: Vec<Vec<bool>> = vec![used.iter().map(|u| !u).collect()];
    let mut counters = vec![0u32; max_order as usize + 1];
    for k in 0..max_order as usize {
        let cur = &free_at[k];
        let mut next = vec![false; cur.len() / 2];
        for i in 0..next.len() {
            next[i] = cur[2 * i] && cur[2 * i + 1];
        }
        free_at.push(next);
    }
    // A chunk is maximal at k if free at k and its parent is not free.
    let mut maximal = Vec::new();
    for k in 0..=max_order as usize {
        let m: Vec<bool> = (0..free_at[k].len())
            .map(|i| free_at[k][i] && (k == max_order as usize || !free_at[k + 1].get(i / 2).copied().unwrap_or(false)))
            .collect();
        counters[k] = m.iter().filter(|&&b| b).count() as u32;
        maximal.push(m);
    }
    assert_eq!(free_at[0].len(), n);
    (maximal, counters)
}

fn assert_matches_reference(b: &Buddy, used: &[bool], what: &str) {
    let (maximal, counters) = reference_buddy(used, b.max_order());
    let info = b.info();
    for k in 1..=b.max_order() {
        for (i, &m) in maximal[k as usize].iter().enumerate() {
            assert_eq!(b.is_free_chunk(k, i as u32), m, "{what}: order {k} chunk {i}");
        }
    }
    assert_eq!(&info.counters[..counters.len()], &counters[..], "{what}: counters");
    let free = used.iter().filter(|u| !**u).count() as u32;
    let first = used.iter().position(|u| !u).unwrap_or(used.len()) as u32;
    let frags = (0..used.len()).filter(|&i| !used[i] && (i == 0 || used[i - 1])).count() as u32;
    let largest = counters.iter().rposition(|&c| c > 0).map_or(-1, |k| k as i8);
    assert_eq!((info.free, info.first_free, info.fragments), (free, first, frags), "{what}: free/first/frags");
    assert_eq!(info.largest_free_order, if free == 0 { -1 } else { largest }, "{what}: largest order");
}

fn bitmap_words(used: &[bool]) -> Vec<u64> {
    let mut w = vec![0u64; used.len().div_ceil(64)];
    for (i, &u) in used.iter().enumerate() {
        if u {
            w[i / 64] |= 1 << (i % 64);
        }
    }
    w
}

#[test]
fn generate_buddy() {
    let seed = common::seed("generate_buddy");
    let mut rng = common::rng(seed);
    for bs in BLOCK_SIZES {
        let geo = Geometry::with_group_size(bs, CPG, GROUPS * u64::from(CPG)).unwrap();
        let mut used = vec![false; CPG as usize];
        for (start, len) in ranges(&mut rng) {
            used[start as usize..(start + len) as usize].fill(true);
            let b = Buddy::from_bitmap(CPG, geo.max_order(), geo.num_orders(), &bitmap_words(&used));
            assert_matches_reference(&b, &used, &format!("seed {seed} bs {bs}"));
        }
    }
}

#[test]
fn mark_used() {
    let seed = common::seed("mark_used");
    let mut rng = common::rng(seed);
    for bs in BLOCK_SIZES {
        let a = fixture(bs);
        let base = GOAL_GROUP * u64::from(CPG);
        let mut used = vec![false; CPG as usize];
        for (start, len) in ranges(&mut rng) {
            a.claim(base + u64::from(start), u64::from(len)).unwrap();
            used[start as usize..(start + len) as usize].fill(true);
            a.with_group(GOAL_GROUP as u32, |b| {
                assert!(*b == b.regenerated(), "seed {seed} bs {bs}: incremental != regenerated");
                assert_matches_reference(b, &used, &format!("seed {seed} bs {bs}"));
            })
            .unwrap();
        }
        a.check_consistency().unwrap();
    }
}

#[test]
fn free_blocks() {
    let seed = common::seed("free_blocks");
    let mut rng = common::rng(seed);
    for bs in BLOCK_SIZES {
        let a = fixture(bs);
        let base = GOAL_GROUP * u64::from(CPG);
        a.claim(base, u64::from(CPG)).unwrap();
        assert_eq!(a.group_info(GOAL_GROUP as u32).unwrap().free, 0);
        let mut used = vec![true; CPG as usize];
        for (start, len) in ranges(&mut rng) {
            a.free(base + u64::from(start), u64::from(len)).unwrap();
            used[start as usize..(start + len) as usize].fill(false);
            a.with_group(GOAL_GROUP as u32, |b| {
                assert!(*b == b.regenerated(), "seed {seed} bs {bs}: incremental != regenerated");
                assert_matches_reference(b, &used, &format!("seed {seed} bs {bs}"));
            })
            .unwrap();
        }
        a.check_consistency().unwrap();
    }
}

#[test]
fn mark_diskspace_used() {
    let seed = common::seed("mark_diskspace_used");
    let mut rng = common::rng(seed);
    for bs in BLOCK_SIZES {
        let base = GOAL_GROUP * u64::from(CPG);
        for (start, len) in ranges(&mut rng) {
            let a = fixture(bs);
            a.claim(base + u64::from(start), u64::from(len)).unwrap();
            a.with_group(GOAL_GROUP as u32, |b| {
                assert_eq!(b.next_used(0), start, "seed {seed} bs {bs}");
                assert_eq!(b.next_free(start), start + len, "seed {seed} bs {bs}");
                assert_eq!(b.next_used(start + len), CPG, "seed {seed} bs {bs}");
            })
            .unwrap();
        }
    }
}

/// The buddy of groups whose length is not a power of two (mkfs makes
/// 32,664-block groups, and any multiple of 8 is allowed): built from
/// random bitmaps, it matches the reference for every block size.
#[test]
fn generate_buddy_on_groups_of_any_length() {
    let seed = common::seed("generate_buddy_on_groups_of_any_length");
    let mut rng = common::rng(seed);
    for (bs, len) in [(1024u32, 1000u32), (4096, 32_664), (4096, 24), (65536, 8 * 65536 - 8)] {
        let geo = Geometry::with_group_size(bs, len, 3 * u64::from(len)).unwrap();
        for _ in 0..4 {
            let mut used = vec![false; len as usize];
            for _ in 0..rng.gen_range(0..40) {
                let start = rng.gen_range(0..len);
                let n = rng.gen_range(1..=len.min(3000)).min(len - start);
                used[start as usize..(start + n) as usize].fill(true);
            }
            let b = Buddy::from_bitmap(len, geo.max_order(), geo.num_orders(), &bitmap_words(&used));
            assert_matches_reference(&b, &used, &format!("seed {seed} bs {bs} len {len}"));
        }
    }
}

/// The allocator on 32,664-block groups: every block of every group can
/// be allocated, goals in a later group land there, and freeing gives
/// back exactly what was taken.
#[test]
fn groups_of_32664_blocks_allocate_and_free() {
    let geo = Geometry::with_group_size(4096, 32_664, 32_664 * 3 + 104).unwrap();
    let a = Allocator::new(geo).unwrap();
    let got = a.allocate(&mballoc::AllocRequest::new(2048).try_goal(32_664 + 100)).unwrap();
    assert_eq!(geo.group_of(got.extent.start), 1, "{got:?}");
    let mut taken = vec![got.extent];
    loop {
        match a.allocate(&mballoc::AllocRequest::new(4096)) {
            Ok(r) => taken.push(r.extent),
            Err(mballoc::Error::NoSpace { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(a.free_blocks(), 0);
    assert_eq!(taken.iter().map(|e| u64::from(e.len)).sum::<u64>(), geo.total_blocks());
    for e in &taken {
        assert!(geo.group_of(e.start) == geo.group_of(e.start + u64::from(e.len) - 1), "no extent spans groups");
        a.free(e.start, e.len.into()).unwrap();
    }
    assert_eq!(a.free_blocks(), geo.total_blocks());
}
