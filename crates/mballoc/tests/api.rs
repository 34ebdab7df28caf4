//! Errors leave state unchanged; goals, streams, huge volumes, threads.

use mballoc::{AllocRequest, Allocator, Error, FoundBy, Geometry};
use std::sync::Arc;

fn snapshot(a: &Allocator) -> (u64, String) {
    (a.free_blocks(), a.mb_groups_report())
}

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let geo = Geometry::new(4096, 4 * 32768).unwrap().with_reserved_per_group(16).unwrap();
    let a = Allocator::builder(geo).reserve(40000, 10).build().unwrap();
    let e = a.allocate(&AllocRequest::new(100).try_goal(5000)).unwrap().extent;
    let before = snapshot(&a);
    assert_eq!(a.free(e.start, 0), Err(Error::ZeroLength));
    assert_eq!(a.free(e.start + 100, 1), Err(Error::AlreadyFree { block: e.start + 100 }));
    assert_eq!(a.free(e.start + 50, 100), Err(Error::AlreadyFree { block: e.start + 100 }));
    assert!(matches!(a.free(4 * 32768 - 1, 2), Err(Error::OutOfRange { .. })));
    assert!(matches!(a.free(u64::MAX, 2), Err(Error::OutOfRange { .. })));
    assert_eq!(a.free(32768 + 3, 1), Err(Error::ReservedBlock { block: 32768 + 3 }));
    assert_eq!(a.free(39995, 10), Err(Error::ReservedBlock { block: 40000 }));
    assert_eq!(a.claim(e.start + 99, 2), Err(Error::AlreadyInUse { block: e.start + 99 }));
    assert_eq!(a.allocate(&AllocRequest::new(0)).unwrap_err(), Error::ZeroLength);
    assert!(matches!(a.allocate(&AllocRequest::new(32769)), Err(Error::RequestTooLarge { .. })));
    assert!(matches!(a.allocate(&AllocRequest::new(8).goal(1 << 40)), Err(Error::GoalOutOfRange { .. })));
    assert!(matches!(a.allocate(&AllocRequest::new(8).min_len(9)), Err(Error::MinExceedsLen { .. })));
    assert!(matches!(a.allocate(&AllocRequest::new(8).goal_only(e.start)), Err(Error::NoSpace { .. })));
    assert_eq!(snapshot(&a), before);
    a.check_consistency().unwrap();
    assert!(matches!(Allocator::builder(geo).flex_groups(3).build(), Err(Error::InvalidGeometry(_))));
}

#[test]
fn full_volume_is_nospace_not_a_panic() {
    let a = Allocator::new(Geometry::with_group_size(1024, 64, 200).unwrap()).unwrap();
    let mut got = 0;
    while let Ok(x) = a.allocate(&AllocRequest::new(7)) {
        got += u64::from(x.extent.len);
    }
    assert_eq!(got, 200);
    assert_eq!(a.free_blocks(), 0);
    assert!(matches!(a.allocate(&AllocRequest::new(1)), Err(Error::NoSpace { .. })));
    assert!(a.allocate_simple(0).is_err());
    a.check_consistency().unwrap();
}

#[test]
fn goals() {
    let a = Allocator::new(Geometry::new(4096, 8 * 32768).unwrap()).unwrap();
    let x = a.allocate(&AllocRequest::new(2).try_goal(70000)).unwrap();
    assert_eq!((x.extent.start, x.found_by), (70000, FoundBy::Goal));
    // The fallocate pattern: the goal just past the previous extent.
    let y = a.allocate(&AllocRequest::new(2).try_goal(70002)).unwrap();
    assert_eq!(y.extent.start, 70002);
    // Goal taken: try-goal falls back to the passes, goal-only fails.
    let z = a.allocate(&AllocRequest::new(2).try_goal(70000)).unwrap();
    // The buddy search hands out the smallest fitting aligned chunk: 70004.
    assert_eq!(z.extent.start, 70004);
    assert!(a.allocate(&AllocRequest::new(2).goal_only(70001)).is_err());
    // Goal-only with a minimum accepts a partial run at the goal.
    a.claim(70010, 1).unwrap();
    let p = a.allocate(&AllocRequest::new(8).min_len(4).goal_only(70006)).unwrap();
    assert_eq!(p.extent, mballoc::Extent { start: 70006, len: 4 });
    a.check_consistency().unwrap();
}

#[test]
fn streams_move_their_goal() {
    let a = Allocator::builder(Geometry::new(4096, 16 * 32768).unwrap()).stream_goals(4).build().unwrap();
    assert_eq!(a.stream_goal_count(), 4);
    // Fill group 0 so stream 1 moves on, then keeps allocating next to itself.
    a.claim(0, 32768).unwrap();
    let first = a.allocate(&AllocRequest::new(64).stream(1)).unwrap().extent;
    let second = a.allocate(&AllocRequest::new(64).stream(1)).unwrap().extent;
    assert_eq!(a.geometry().group_of(first.start), a.geometry().group_of(second.start));
    a.check_consistency().unwrap();
}

#[test]
fn a_128_tib_volume_is_cheap() {
    // 2^20 groups of 32768 blocks at 4 KiB. Nothing is materialized until used.
    let t0 = std::time::Instant::now();
    let a = Allocator::new(Geometry::new(4096, 1u64 << 35).unwrap()).unwrap();
    assert_eq!(a.free_blocks(), 1 << 35);
    let x = a.allocate(&AllocRequest::new(8192).goal(700_000 * 32768)).unwrap();
    assert_eq!(a.geometry().group_of(x.extent.start), 700_000);
    assert!(x.groups_scanned <= 2, "{x:?}");
    a.free(x.extent.start, 8192).unwrap();
    assert_eq!(a.free_blocks(), 1 << 35);
    eprintln!("128 TiB volume: create + alloc + free in {:?}", t0.elapsed());
    assert_eq!(a.stats().buddies_generated, 1);
}

#[test]
fn threads_never_double_allocate() {
    let a = Arc::new(Allocator::new(Geometry::with_group_size(4096, 1024, 64 * 1024).unwrap()).unwrap());
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                let mut mine = vec![];
                for i in 0..2000u64 {
                    if let Ok(x) = a.allocate(&AllocRequest::new(1 + (i % 13) as u32).goal(t * 8000)) {
                        mine.push(x.extent);
                    }
                    if i % 3 == 0 && !mine.is_empty() {
                        let e = mine.swap_remove((i as usize) % mine.len());
                        a.free(e.start, e.len.into()).unwrap();
                    }
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<_> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    all.sort();
    for w in all.windows(2) {
        assert!(w[0].end() <= w[1].start, "overlap {:?} {:?}", w[0], w[1]);
    }
    let used: u64 = all.iter().map(|e| u64::from(e.len)).sum();
    assert_eq!(a.free_blocks() + used, 64 * 1024);
    a.check_consistency().unwrap();
}

#[test]
fn queries_past_the_volume_are_typed_errors() {
    let a = Allocator::new(Geometry::with_group_size(4096, 1024, 4 * 1024).unwrap()).unwrap();
    assert_eq!(a.group_info(4), Err(Error::GroupOutOfRange { group: 4, groups: 4 }));
    assert_eq!(a.group_summary(u32::MAX).unwrap_err(), Error::GroupOutOfRange { group: u32::MAX, groups: 4 });
    assert!(matches!(a.with_group(9, |_| ()), Err(Error::GroupOutOfRange { .. })));
    assert!(matches!(a.is_used(4096), Err(Error::OutOfRange { start: 4096, .. })));
    assert_eq!(a.is_used(4095), Ok(false));
    assert_eq!(a.group_info(3).unwrap().free, 1024);
}
