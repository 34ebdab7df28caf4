//! Policies decide where they override ext4 and nowhere else: a pick is
//! taken only if it is still free and fits, the passes a policy leaves out
//! never run, its scan limit is the one that breaks, and what it reads is
//! counted as the passes' reading is.

use mballoc::{
    AllocRequest, Allocator, Criterion, FoundBy, Geometry, Groups, Passes, Pick, Policy, RequestInfo, Tunables,
};
use std::ops::ControlFlow;
use std::sync::Arc;

fn with(policy: impl Policy + 'static) -> Allocator {
    Allocator::builder(Geometry::new(4096, 1 << 18).unwrap())
        .tunables(Tunables::with_stats())
        .policy(Arc::new(policy))
        .build()
        .unwrap()
}

/// The last free run of the last group with one long enough: as far from
/// ext4's choice as a policy can be.
#[derive(Debug)]
struct LastFit;

impl Policy for LastFit {
    fn name(&self) -> &str {
        "last-fit"
    }
    fn choose(&self, req: &RequestInfo, groups: &mut Groups<'_>) -> Option<Pick> {
        for g in (0..groups.count()).rev() {
            let mut pick = None;
            groups.free_runs(g, |start, len| {
                if len >= req.len {
                    pick = Some(Pick { group: g, start: start + len - req.len, len: req.len });
                }
                ControlFlow::Continue(())
            });
            if pick.is_some() {
                return pick;
            }
        }
        None
    }
}

#[test]
fn a_policy_pick_is_taken_and_counted() {
    let a = with(LastFit);
    let x = a.allocate(&AllocRequest::new(64)).unwrap();
    assert_eq!(x.found_by, FoundBy::Policy);
    assert_eq!(x.extent.start + 64, a.geometry().total_blocks());
    let s = a.stats();
    assert_eq!((s.reqs, s.policy_hits, s.groups_scanned), (1, 1, 1));
    assert_eq!(s.extents_scanned, 1, "the one free run of the last group");
    a.check_consistency().unwrap();
}

/// Picks that must not be taken: used blocks, out of the volume, longer
/// than the request, shorter than its minimum.
#[derive(Debug)]
struct Wrong(Pick);

impl Policy for Wrong {
    fn name(&self) -> &str {
        "wrong"
    }
    fn choose(&self, _: &RequestInfo, _: &mut Groups<'_>) -> Option<Pick> {
        Some(self.0)
    }
}

#[test]
fn a_pick_that_does_not_fit_falls_back_to_the_passes() {
    let geo = Geometry::new(4096, 1 << 18).unwrap();
    let bpg = geo.blocks_per_group();
    for bad in [
        Pick { group: 99, start: 100, len: 16 },    // no such group
        Pick { group: 3, start: 100, len: 17 },     // longer than the request
        Pick { group: 3, start: bpg - 8, len: 16 }, // past the group's end
        Pick { group: 3, start: 100, len: 0 },      // nothing
    ] {
        let a = with(Wrong(bad));
        let x = a.allocate(&AllocRequest::new(16)).unwrap();
        assert!(matches!(x.found_by, FoundBy::Pass(_)), "{bad:?}: {x:?}");
        a.check_consistency().unwrap();
    }
    // A pick of blocks already handed out is refused too.
    let a = with(Wrong(Pick { group: 3, start: 100, len: 16 }));
    assert_eq!(a.allocate(&AllocRequest::new(16)).unwrap().found_by, FoundBy::Policy);
    let again = a.allocate(&AllocRequest::new(16)).unwrap();
    assert!(matches!(again.found_by, FoundBy::Pass(_)));
    assert_ne!(again.extent.start, 3 * u64::from(bpg) + 100);
    a.check_consistency().unwrap();
}

#[derive(Debug)]
struct OnlyAnyFree;

impl Policy for OnlyAnyFree {
    fn name(&self) -> &str {
        "any-free"
    }
    fn passes(&self, _: &RequestInfo) -> Passes {
        Passes::NONE.with(Criterion::AnyFree)
    }
    fn max_to_scan(&self, _default: u32, _: &RequestInfo) -> u32 {
        2
    }
}

#[test]
fn the_passes_and_the_scan_limit_are_the_policys() {
    let a = with(OnlyAnyFree);
    // Fragment group 1 so a scan meets many short runs.
    let g1 = u64::from(a.geometry().blocks_per_group());
    for i in 0..1000 {
        a.claim(g1 + 2 * i, 1).unwrap();
    }
    for _ in 0..20 {
        let x = a.allocate(&AllocRequest::new(256).min_len(1)).unwrap();
        assert_eq!(x.found_by, FoundBy::Pass(Criterion::AnyFree));
    }
    let s = a.stats();
    assert_eq!(s.cr_hits, [0, 0, 0, 0, 20]);
    assert_eq!(s.cr_groups_considered[..4], [0, 0, 0, 0]);
    a.check_consistency().unwrap();
    // With no pass at all and no pick, nothing serves a request.
    #[derive(Debug)]
    struct Nothing;
    impl Policy for Nothing {
        fn name(&self) -> &str {
            "nothing"
        }
        fn passes(&self, _: &RequestInfo) -> Passes {
            Passes::NONE
        }
    }
    assert!(with(Nothing).allocate(&AllocRequest::new(8)).is_err());
}
