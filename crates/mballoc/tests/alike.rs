//! Groups loaded alike share one template until a request changes them,
//! and behave exactly as if each had been loaded on its own.

use mballoc::{AllocRequest, Allocator, Geometry, Tunables};

fn pattern(bpg: u32) -> Vec<u64> {
    // 50-block free runs at the start of every other 100-block period.
    let mut used = vec![u64::MAX; bpg as usize / 64];
    for p in (0..bpg - 100).step_by(200) {
        for b in p..p + 50 {
            used[(b / 64) as usize] &= !(1 << (b % 64));
        }
    }
    used
}

#[test]
fn alike_groups_answer_as_groups_loaded_one_by_one() {
    let geo = Geometry::new(4096, 64 * 32768).unwrap();
    let used = pattern(32768);
    let one_by_one = Allocator::builder(geo).tunables(Tunables::with_stats()).build().unwrap();
    for g in 0..64 {
        one_by_one.load_group_bitmap(g, &used).unwrap();
    }
    let alike = Allocator::builder(geo).tunables(Tunables::with_stats()).build().unwrap();
    alike.load_groups_alike(0, 64, &used).unwrap();
    assert_eq!(alike.free_blocks(), one_by_one.free_blocks());
    for i in 0..500u64 {
        let req = AllocRequest::new(if i % 3 == 0 { 64 } else { 16 }).goal(i * 3001 % geo.total_blocks());
        let (a, b) = (one_by_one.allocate(&req), alike.allocate(&req));
        assert_eq!(a.map(|x| x.extent), b.map(|x| x.extent), "request {i}");
    }
    alike.check_consistency().unwrap();
    // Only the groups the requests changed were built.
    assert!(alike.stats().buddies_generated < one_by_one.stats().buddies_generated);
    assert_eq!(alike.mb_groups_report(), one_by_one.mb_groups_report());
}

#[test]
fn bad_alike_loads_are_refused_and_change_nothing() {
    let geo = Geometry::new(4096, 64 * 32768).unwrap();
    let a = Allocator::new(geo).unwrap();
    let free = a.free_blocks();
    assert!(a.load_groups_alike(60, 5, &pattern(32768)).is_err(), "past the volume");
    assert!(a.load_groups_alike(0, 0, &pattern(32768)).is_err(), "no groups");
    assert!(a.load_groups_alike(0, 4, &[0u64; 8]).is_err(), "too short a bitmap");
    let reserved = Allocator::builder(geo).reserve(5 * 32768 + 10, 4).build().unwrap();
    assert!(reserved.load_groups_alike(0, 8, &vec![0u64; 512]).is_err(), "a reserved block shown free");
    assert_eq!(a.free_blocks(), free);
    // A group already built takes its own copy; the rest share.
    a.allocate(&AllocRequest::new(8).try_goal(3 * 32768)).unwrap();
    a.load_groups_alike(0, 64, &pattern(32768)).unwrap();
    a.check_consistency().unwrap();
    // Fifteen runs at most.
    for g in 0..14 {
        a.load_groups_alike(g, 1, &pattern(32768)).unwrap();
    }
    assert!(a.load_groups_alike(20, 1, &pattern(32768)).is_err());
    a.check_consistency().unwrap();
}
