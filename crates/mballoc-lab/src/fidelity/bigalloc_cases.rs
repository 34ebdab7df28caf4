//! Built-in cases on bigalloc volumes (`mkfs -O bigalloc`): clusters of
//! blocks are the allocation unit, while files, windows and ext4's
//! extent tree still count blocks. Each case puts blocks of one cluster
//! in different writes, so ext4 maps some blocks into clusters the file
//! already holds, splits and converts extents inside a cluster, and
//! frees a cluster only once nothing of the file is left in it.

use super::cases::{fragmented_free, small_files, Case, Ops, GIB, KIB, MIB};
use super::config::Ext4Config;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn bigalloc(extra: &[&str]) -> Ext4Config {
    let mkfs = ["-O", "bigalloc"].iter().chain(extra).map(|s| s.to_string()).collect();
    Ext4Config { mkfs, ..Default::default() }
}

/// 4 KiB blocks in 16 KiB clusters: appends smaller than a cluster, each
/// synced; small files for the locality group; writes scattered into an
/// fallocated file; a file punched and truncated inside its clusters.
fn mixed(rounds: u64, small: usize) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(61);
    let mut o = Ops::new();
    let appenders = ["p", "q", "r", "s"];
    for f in appenders {
        o.create(f);
    }
    for r in 0..rounds {
        for f in appenders {
            o.write(f, r * 4 * KIB, 4 * KIB).fsync(f);
        }
    }
    for i in 0..small {
        let f = format!("s{i}");
        let len = rng.gen_range(1..=60) * KIB + rng.gen_range(0..KIB);
        o.create(&f).write(&f, 0, len).close(&f);
        if i % 3 == 2 {
            o.unlink(&format!("s{}", i - 1));
        }
    }
    o.create("v").fallocate_keep("v", 0, 8 * MIB);
    for i in 0..small {
        let at = rng.gen_range(0..2048u64) * 4 * KIB;
        o.write("v", at, rng.gen_range(1..=3) * 4 * KIB);
        if i % 16 == 15 {
            o.fsync("v");
        }
    }
    o.fsync("v").close("v");
    o.create("w").write("w", 0, 24 * MIB).fsync("w");
    for k in 0..8u64 {
        // Two blocks of one cluster, then a run across clusters.
        o.punch("w", k * MIB + 4 * KIB, 8 * KIB);
        o.punch("w", k * MIB + 512 * KIB + 12 * KIB, 40 * KIB);
    }
    o.fsync("w").truncate("w", 20 * MIB + 6 * KIB).fsync("w").close("w");
    for f in appenders {
        o.close(f);
    }
    o.unlink("q");
    o.create("x").write("x", 0, 3 * MIB + 5 * KIB).close("x");
    o.case(
        "bigalloc",
        "4 KiB blocks in 16 KiB clusters: appends smaller than a cluster, small files, writes into an fallocated file, holes punched inside clusters, a truncate inside one",
        2 * GIB,
        4096,
    )
}

/// 1 KiB blocks in 16 KiB clusters: random writes of one to three blocks
/// into a sparse file, so most clusters take several writes and the tree
/// holds several extents per cluster; then a punch and a truncate.
fn sparse_1k(writes: usize) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(67);
    let mut o = Ops::new();
    o.create("k");
    for i in 0..writes {
        let block = rng.gen_range(0..65_536u64);
        o.write("k", block * KIB, rng.gen_range(1..=3) * KIB);
        if i % 50 == 49 {
            o.fsync("k");
        }
    }
    o.fsync("k").punch("k", 10 * MIB + 3 * KIB, 20 * MIB).truncate("k", 50 * MIB + 7 * KIB).fsync("k").close("k");
    o.case(
        "bigalloc-1k",
        "1 KiB blocks in 16 KiB clusters: random writes of 1 to 3 KiB into a sparse file, a punch and a truncate inside clusters",
        512 * MIB,
        1024,
    )
}

/// The bigalloc cases; `quick` keeps each small enough for CI.
pub(super) fn cases(quick: bool) -> Vec<Case> {
    let q = |full: u64, small: u64| if quick { small } else { full };
    let mut striped = fragmented_free(q(4, 2) * GIB, q(95, 90), q(40, 10) as usize);
    striped.name = "bigalloc-stripe".into();
    striped.about =
        "fragmented-free with mkfs's default 64 KiB clusters and a 64-block stripe: stripe-aligned scans in clusters"
            .into();
    striped.ext4 = bigalloc(&["-E", "stride=16,stripe_width=64"]);
    // Closed files written back later: a request rounded up to whole
    // clusters no longer ends at the size, so the window leaves a
    // preallocation, which ext4 gives back as soon as writeback has
    // allocated the file's last delayed cluster
    // (`ext4_da_update_reserve_space`); 27 of 30 files agree if it stays.
    let mut closed = small_files("bigalloc-small-files-1k", 1024, 512 * MIB, q(64, 32) as usize, 7);
    closed.about =
        "small-files at 1 KiB blocks in 8 KiB clusters: preallocations of closed files given back at writeback".into();
    closed.ext4 = bigalloc(&["-C", "8192"]);
    let mut c = vec![mixed(q(48, 16), q(90, 30) as usize), sparse_1k(q(1500, 400) as usize), closed, striped];
    c[0].ext4 = bigalloc(&["-C", "16384"]);
    c[1].ext4 = bigalloc(&["-C", "16384"]);
    c
}
