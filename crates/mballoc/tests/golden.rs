//! Output formats, byte for byte: mb_groups and mb_stats as the kernel prints
//! them, and e2freefrag's histogram compared with e2freefrag's own output on
//! a real fragmented ext4 image (tests/data, made with mkfs.ext4 + debugfs).

use mballoc::report::{mb_stats, FreeSpaceHistogram};
use mballoc::{Allocator, Geometry, MbStats, Tunables};

#[test]
fn mb_groups_worked_example() {
    // One free run from 29929 to the end of a 32768-block group, and an
    // untouched group (four order-13 chunks).
    let a = Allocator::new(Geometry::new(4096, 2 * 32768).unwrap()).unwrap();
    a.claim(0, 29929).unwrap();
    let expected = "\
#group: free  frags first [ 2^0   2^1   2^2   2^3   2^4   2^5   2^6   2^7   2^8   2^9   2^10  2^11  2^12  2^13  ]
#0    : 2839  1     29929 [ 1     1     1     0     1     0     0     0     1     1     0     1     0     0     ]
#1    : 32768 1     0     [ 0     0     0     0     0     0     0     0     0     0     0     0     0     4     ]
";
    assert_eq!(a.mb_groups_report(), expected);
}

#[test]
fn mb_groups_small_blocks_print_fourteen_columns() {
    // 1 KiB blocks: orders 0..=11 exist, columns 12 and 13 print 0.
    let a = Allocator::new(Geometry::new(1024, 8192).unwrap()).unwrap();
    assert_eq!(
        a.mb_groups_report().lines().nth(1).unwrap(),
        "#0    : 8192  1     0     [ 0     0     0     0     0     0     0     0     0     0     0     4     0     0     ]"
    );
}

#[test]
fn mb_stats_layout() {
    let off = mb_stats(&MbStats::default(), false, 4);
    assert_eq!(
        off,
        "mballoc:\n\tmb stats collection turned off.\n\tTo enable, please write \"1\" to sysfs file mb_stats.\n"
    );

    let s = MbStats {
        reqs: 28402,
        success: 28302,
        preallocation_reqs: 0,
        groups_scanned: 30512,
        cr_hits: [25011, 1380, 310, 40, 0],
        cr_groups_considered: [27950, 2802, 920, 900, 0],
        cr_extents_scanned: [25011, 4977, 403, 1200, 0],
        cr_useless_loops: [3, 12, 2, 0, 0],
        extents_scanned: 31591,
        goal_hits: 1520,
        stream_goal_hits: 7,
        len_goal_hits: 26150,
        two_n_hits: 25011,
        policy_hits: 9,
        breaks: 0,
        lost: 0,
        buddies_generated: 245,
        buddies_time_used: 4710512,
        preallocated: 1853248,
        discarded: 1204,
        allocated: 0,
    };
    let expected = "mballoc:
\treqs: 28402
\tsuccess: 28302
\tgroups_scanned: 30512
\tcr_p2_aligned_stats:
\t\thits: 25011
\t\tgroups_considered: 27950
\t\textents_scanned: 25011
\t\tuseless_loops: 3
\tcr_goal_fast_stats:
\t\thits: 1380
\t\tgroups_considered: 2802
\t\textents_scanned: 4977
\t\tuseless_loops: 12
\tcr_best_avail_stats:
\t\thits: 310
\t\tgroups_considered: 920
\t\textents_scanned: 403
\t\tuseless_loops: 2
\tcr_goal_slow_stats:
\t\thits: 40
\t\tgroups_considered: 900
\t\textents_scanned: 1200
\t\tuseless_loops: 0
\tcr_any_free_stats:
\t\thits: 0
\t\tgroups_considered: 0
\t\textents_scanned: 0
\t\tuseless_loops: 0
\textents_scanned: 31591
\t\tgoal_hits: 1520
\t\tstream_goal_hits: 7
\t\tlen_goal_hits: 26150
\t\t2^n_hits: 25011
\t\tbreaks: 0
\t\tlost: 0
\tbuddies_generated: 245/245
\tbuddies_time_used: 4710512
\tpreallocated: 1853248
\tdiscarded: 1204
";
    assert_eq!(mb_stats(&s, true, 245), expected);

    // The allocator's own report has the same shape.
    let a = Allocator::builder(Geometry::new(4096, 1 << 20).unwrap()).tunables(Tunables::with_stats()).build().unwrap();
    let report = a.mb_stats_report();
    let labels = |t: &str| t.lines().map(|l| l.split(':').next().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(labels(&report), labels(expected));
}

fn fixture(bs: u32) -> (u64, u64, Vec<(u64, u64)>, String) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    let sup = std::fs::read_to_string(format!("{dir}/super-{bs}.txt")).unwrap();
    let field = |name: &str| -> u64 {
        sup.lines().find(|l| l.starts_with(name)).unwrap().split(':').nth(1).unwrap().trim().parse().unwrap()
    };
    let extents = std::fs::read_to_string(format!("{dir}/free-extents-{bs}.txt"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut it = l.split_whitespace().map(|x| x.parse::<u64>().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        })
        .collect();
    let expected = std::fs::read_to_string(format!("{dir}/e2freefrag-{bs}.txt")).unwrap();
    (field("Block count"), field("Free blocks"), extents, expected)
}

#[test]
fn e2freefrag_matches_real_output() {
    for bs in [1024, 4096] {
        let (total, free, extents, expected) = fixture(bs);
        let mut h = FreeSpaceHistogram::new(bs, total, free);
        for &(_, len) in &extents {
            h.add(len);
        }
        assert_eq!(h.render("ff.img"), expected, "block size {bs}");
    }
}

#[test]
fn allocator_histogram_matches_real_output() {
    // Load the image's free-space map into an allocator: everything that is
    // not free on the image is claimed. Its histogram must print the same.
    for bs in [1024, 4096] {
        let (total, free, extents, expected) = fixture(bs);
        let a = Allocator::new(Geometry::new(bs, total).unwrap()).unwrap();
        let mut pos = 0;
        for &(s, l) in &extents {
            if s > pos {
                a.claim(pos, s - pos).unwrap();
            }
            pos = s + l;
        }
        if pos < total {
            a.claim(pos, total - pos).unwrap();
        }
        assert_eq!(a.free_blocks(), free);
        assert_eq!(a.free_space_histogram().render("ff.img"), expected, "block size {bs}");
        a.check_consistency().unwrap();
    }
}
