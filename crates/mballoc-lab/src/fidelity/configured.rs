//! Built-in cases beyond the default configuration: ext4's other
//! configurations the profile follows (no flex_bg, small groups, linear
//! scans, a short scan limit, no journal, a RAID stripe, no delayed
//! allocation), the shapes again at 1 KiB and 2 KiB
//! blocks, and one regression case per cause fixed in the profile, each
//! on a shape its setting or rule moves.

use super::cases::{fragmented_free, interleaved, near_full, punched, truncate_rewrite, Case, Ops, GIB, KIB, MIB};
use super::config::Ext4Config;
use crate::workload::OpKind;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// `c` renamed, described and run with `ext4`.
fn configured(mut c: Case, name: &str, about: &str, ext4: Ext4Config) -> Case {
    c.name = name.into();
    c.about = about.into();
    c.ext4 = ext4;
    c
}

/// `c` at another block size: the operations are in bytes, so only the
/// volume's blocks change.
fn at_block_size(c: Case, block_size: u32, name: &str, about: &str) -> Case {
    let mut c = configured(c.clone(), name, about, c.ext4);
    c.trace.block_size = block_size;
    c
}

/// A request longer than its normalized window, which starts before the
/// request: 6 MiB written from 1 MiB into an empty file and synced, so
/// writeback asks for 1,536 blocks from block 256 of a 7 MiB file, whose
/// window is the 2 MiB-aligned [0, 512). ext4 makes no preallocation when
/// the extent found is no longer than the request and maps all of it at
/// the request's block; a profile that compared the extent with the
/// window's remainder (256 blocks) mapped that and preallocated the rest.
fn window_shorter_than_request(files: usize) -> Case {
    let mut o = Ops::new();
    for i in 0..files {
        let f = format!("w{i}");
        o.create(&f).write(&f, MIB, 6 * MIB).fsync(&f);
        o.write(&f, 0, 300 * KIB).fsync(&f).close(&f);
    }
    o.case(
        "window-shorter",
        "6 MiB written from 1 MiB into empty files: requests longer than a window that starts before them (no preallocation, mapped whole)",
        GIB,
        4096,
    )
}

/// Four writers, each writing eight 64 KiB files 16 KiB at a time, the
/// writers' writes in turn: without delayed allocation every block is its
/// own request as it is written.
fn writers_in_turn(files: usize) -> Case {
    let mut o = Ops::new();
    for i in 0..files {
        let names: Vec<String> = (0..4).map(|w| format!("w{w}f{i}")).collect();
        for n in &names {
            o.create(n);
        }
        for k in 0..4 {
            for n in &names {
                o.write(n, k * 16 * KIB, 16 * KIB);
            }
        }
        for n in &names {
            o.close(n);
        }
    }
    o.case("writers-in-turn", "four writers' 64 KiB files in 16 KiB writes, in turn", GIB, 4096)
}

/// Directories at 1 KiB blocks, where a 512 MiB volume has four flex
/// groups: three top directories (spread over flex groups by their names'
/// hash and the groups' counts), three subdirectories each, and in each
/// `files` small files, enough that the directory outgrows its first
/// block, becomes indexed and splits its leaves; then a lock file renamed
/// over `index`, a hard link, every third file unlinked and new names
/// made in the room they left.
fn directories(files: usize) -> Case {
    let mut o = Ops::new();
    for top in ["src", "docs", "assets"] {
        o.mkdir(top);
        for sub in 0..3 {
            let d = format!("{top}/d{sub}");
            o.mkdir(&d);
            let name = |i: usize| format!("{d}/file-{i:04}.txt");
            for i in 0..files {
                let f = name(i);
                o.create(&f).write(&f, 0, (i as u64 % 12 + 1) * KIB).close(&f);
            }
            let (index, lock) = (format!("{d}/index"), format!("{d}/index.lock"));
            o.create(&index).write(&index, 0, 4 * KIB).close(&index);
            o.create(&lock).write(&lock, 0, 6 * KIB).close(&lock);
            o.to(OpKind::Rename, &lock, &index);
            o.to(OpKind::Link, &name(1), &format!("{d}/linked"));
            for i in (0..files).step_by(3) {
                o.unlink(&name(i));
            }
            for i in 0..files / 3 {
                let f = format!("{d}/n{i}");
                o.create(&f).write(&f, 0, 2 * KIB).close(&f);
            }
        }
    }
    o.case(
        "directories-1k",
        "three trees of small files at 1 KiB blocks: inodes placed by Orlov, directories grown and indexed, names renamed, linked and unlinked",
        512 * MIB,
        1024,
    )
}

/// One directory at 1 KiB blocks whose names are added, half of them
/// removed, then added again: the leaves that split now hold records
/// with slack, and ext4 weighs each entry by its record's length when it
/// picks the split (`dx_make_map`). The hash seed is fixed so the splits
/// are the same every run.
fn directory_splits(files: usize) -> Case {
    let mut o = Ops::new();
    o.mkdir("d");
    let name = |p: &str, i: usize| format!("d/{p}-{i:05}.dat");
    for i in 0..files {
        let f = name("a", i);
        o.create(&f).write(&f, 0, KIB).close(&f);
    }
    for i in (0..files).step_by(2) {
        o.unlink(&name("a", i));
    }
    for i in 0..files {
        let f = name("bb", i);
        o.create(&f).write(&f, 0, KIB).close(&f);
    }
    let mut c = o.case(
        "directory-splits-1k",
        "one directory at 1 KiB blocks: names added, half removed, added again; leaves split by their records' lengths",
        256 * MIB,
        1024,
    );
    c.ext4 = Ext4Config { mkfs: args(&["-E", "hash_seed=daf3bc57-6a09-4cc5-b947-bf69b5f8d293"]), ..Default::default() };
    c
}

/// Writes scattered into a file fallocated at 1 KiB blocks, mounted
/// nodioread_nolock: writeback converts the written blocks itself,
/// moving them into the initialized extent before them or zeroing up to
/// 32 KiB around them, so the tree holds fewer extents than with
/// dioread_nolock and its leaves split at other times.
fn unwritten_nodioread(writes: usize) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(73);
    let mut o = Ops::new();
    o.create("u").fallocate("u", 0, 16 * MIB);
    for i in 0..writes {
        let at = rng.gen_range(0..16_384u64) * KIB;
        o.write("u", at, rng.gen_range(1..=4) * KIB);
        if i % 25 == 24 {
            o.fsync("u");
        }
    }
    o.fsync("u").close("u");
    let mut c = o.case(
        "nodioread-1k",
        "writes scattered into a 16 MiB file fallocated at 1 KiB blocks, mounted nodioread_nolock: conversions at writeback, neighbours taking written blocks, zero-out",
        512 * MIB,
        1024,
    );
    c.ext4 = Ext4Config { mount: args(&["nodioread_nolock"]), ..Default::default() };
    c
}

/// The configured and regression cases; `quick` keeps each small enough
/// for CI.
pub(super) fn cases(quick: bool) -> Vec<Case> {
    let q = |full: u64, small: u64| if quick { small } else { full };
    let fragmented = || fragmented_free(q(4, 2) * GIB, q(95, 90), q(40, 10) as usize);
    // At 2 KiB blocks the full-size shape's names outgrow the root
    // directory's first block; the quick shape's do not.
    let fragmented_2k = || fragmented_free(2 * GIB, 90, 10);
    vec![
        configured(
            fragmented(),
            "no-flex-bg",
            "fragmented-free on a volume made with -O ^flex_bg: no flex groups, every group's metadata its own",
            Ext4Config { mkfs: args(&["-O", "^flex_bg"]), ..Default::default() },
        ),
        configured(
            interleaved(q(160, 32)),
            "small-groups",
            "interleaved on 16,384-block groups (mkfs -g 16384)",
            Ext4Config { mkfs: args(&["-g", "16384"]), ..Default::default() },
        ),
        configured(
            fragmented(),
            "linear-scan",
            "fragmented-free mounted mb_optimize_scan=0: the passes scan groups linearly (2 of 76 files agree if the engine keeps its indexes)",
            Ext4Config { mount: args(&["mb_optimize_scan=0"]), ..Default::default() },
        ),
        configured(
            near_full(q(1, 1) * GIB / q(1, 2)),
            "short-scans",
            "near-full with mb_max_to_scan=2 and mb_min_to_scan=1: scans stop at the second extent (113 of 129 files agree if the engine scans on)",
            Ext4Config {
                knobs: vec![("mb_max_to_scan".into(), "2".into()), ("mb_min_to_scan".into(), "1".into())],
                ..Default::default()
            },
        ),
        configured(
            truncate_rewrite(q(300, 60) as usize),
            "no-journal",
            "truncate-rewrite on a volume made without a journal: freed blocks reusable at once, not at commit (9 of 12 files agree if the engine waits for the commit)",
            Ext4Config { mkfs: args(&["-O", "^has_journal,^orphan_file"]), ..Default::default() },
        ),
        configured(
            writers_in_turn(8),
            "no-delalloc",
            "four writers' 64 KiB files in 16 KiB writes, mounted nodelalloc: each block its own request, at write time",
            Ext4Config { mount: args(&["nodelalloc"]), ..Default::default() },
        ),
        configured(
            fragmented(),
            "stripe",
            "fragmented-free on a volume made with -E stride=16,stripe_width=64: stripe-aligned goals, scans and windows (3 of 76 files agree if the engine ignores the stripe)",
            Ext4Config { mkfs: args(&["-E", "stride=16,stripe_width=64"]), ..Default::default() },
        ),
        at_block_size(interleaved(q(160, 32)), 2048, "interleaved-2k", "interleaved-appends at 2 KiB blocks"),
        at_block_size(fragmented_2k(), 2048, "fragmented-free-2k", "fragmented-free at 2 KiB blocks"),
        at_block_size(punched(q(96, 24) * MIB, q(40, 12) as usize), 1024, "punched-1k", "punched-holes at 1 KiB blocks"),
        at_block_size(
            configured(
                interleaved(q(160, 32)),
                "",
                "",
                Ext4Config { mkfs: args(&["-O", "^flex_bg"]), ..Default::default() },
            ),
            1024,
            "no-flex-bg-1k",
            "interleaved-appends at 1 KiB blocks on a volume made with -O ^flex_bg",
        ),
        at_block_size(
            configured(fragmented_2k(), "", "", Ext4Config { mount: args(&["mb_optimize_scan=0"]), ..Default::default() }),
            2048,
            "linear-scan-2k",
            "linear-scan at 2 KiB blocks",
        ),
        window_shorter_than_request(q(8, 4) as usize),
        directories(q(200, 60) as usize),
        directory_splits(q(600, 300) as usize),
        unwritten_nodioread(q(1200, 400) as usize),
    ]
}
