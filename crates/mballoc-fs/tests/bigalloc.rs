//! The file layer on a bigalloc volume: clusters allocated, reserved and
//! freed whole, files and the extent tree in ext4 blocks.

use mballoc::Geometry;
use mballoc_fs::{AllocEvent, ExtentState, FallocateMode, FileId, Fs, FsConfig, FsError, MappedExtent, Purpose};
use rand::{Rng, SeedableRng};

const KIB: u64 = 1024;

/// 512 MiB of 4 KiB blocks in 16 KiB clusters (32,768 clusters a group),
/// under the kernel profile.
fn clustered() -> Fs {
    let geo = Geometry::with_group_size(4096, 32768, 32768).unwrap();
    let cfg = FsConfig::kernel(geo).with_cluster_bits(2);
    Fs::new(cfg).unwrap()
}

/// `(logical, physical, len)` of each extent in ext4 blocks.
fn blocks(fs: &Fs, f: FileId) -> Vec<(u64, u64, u32)> {
    fs.ext4_extents(f).unwrap().iter().map(|e: &MappedExtent| (e.logical, e.physical, e.len)).collect()
}

fn free(fs: &Fs) -> u64 {
    fs.commit();
    fs.allocator().free_blocks()
}

#[test]
fn the_cluster_ratio_scales_the_locality_group_window_as_ext4_does() {
    let geo = Geometry::new(4096, 1 << 18).unwrap();
    assert_eq!(FsConfig::kernel(geo).with_cluster_bits(2).placement.tunables.mb_group_prealloc, 128);
    assert_eq!(FsConfig::kernel(geo).with_cluster_bits(4).placement.tunables.mb_group_prealloc, 32);
    assert_eq!(
        FsConfig::kernel(geo).with_cluster_bits(8).placement.tunables.mb_group_prealloc,
        32,
        "at least 32 clusters"
    );
    let too_big = FsConfig::kernel(geo).with_cluster_bits(19);
    assert!(matches!(Fs::new(too_big), Err(FsError::InvalidConfig(_))), "clusters above 1 GiB are refused");
}

#[test]
fn a_write_takes_whole_clusters_and_maps_its_own_blocks() {
    let fs = clustered();
    assert_eq!(fs.block_size(), 16 * KIB);
    assert_eq!(fs.ext4_block_size(), 4 * KIB);
    let f = fs.create().unwrap();
    fs.write(f, 0, 21 * KIB).unwrap();
    assert_eq!(fs.reserved_blocks(), 2, "two clusters promised");
    fs.fsync(f).unwrap();
    let units = fs.extents(f).unwrap();
    assert_eq!(units.iter().map(|e| e.len).sum::<u32>(), 2, "{units:?}");
    let b = blocks(&fs, f);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].2, 6, "21 KiB is six 4 KiB blocks: {b:?}");
    assert_eq!(b[0].1 % 4, 0, "block 0 at the start of its cluster");
    fs.check().unwrap();
}

#[test]
fn a_block_written_into_a_held_cluster_asks_for_nothing() {
    let fs = clustered();
    fs.record_allocations();
    let f = fs.create().unwrap();
    fs.write(f, 0, 4 * KIB).unwrap();
    fs.fsync(f).unwrap();
    let asked = fs.take_allocations().len();
    for k in 1..4 {
        fs.write(f, k * 4 * KIB, 4 * KIB).unwrap();
        fs.fsync(f).unwrap();
    }
    let later: Vec<AllocEvent> = fs.take_allocations();
    assert_eq!(asked, 1);
    assert!(later.iter().all(|e| e.purpose != Purpose::Data), "blocks 1..4 lie in cluster 0: {later:?}");
    let b = blocks(&fs, f);
    assert_eq!(b.len(), 1, "the four blocks merge into one extent: {b:?}");
    assert_eq!(b[0].2, 4);
    // The fifth block starts a new cluster, which is asked for.
    fs.write(f, 16 * KIB, 4 * KIB).unwrap();
    fs.fsync(f).unwrap();
    let data: Vec<_> = fs.take_allocations().into_iter().filter(|e| e.purpose == Purpose::Data).collect();
    assert_eq!(data.len(), 1);
    assert_eq!((data[0].logical, data[0].len), (1, 1), "logical cluster 1, one cluster");
    fs.check().unwrap();
}

#[test]
fn a_cluster_is_freed_once_nothing_of_the_file_is_left_in_it() {
    let fs = clustered();
    let f = fs.create().unwrap();
    fs.write(f, 0, 64 * KIB).unwrap();
    fs.fsync(f).unwrap();
    let before = free(&fs);
    // Two blocks of cluster 1: its other two stay, and so does it.
    fs.punch_hole(f, 16 * KIB, 8 * KIB).unwrap();
    assert_eq!(free(&fs), before);
    assert_eq!(
        blocks(&fs, f).len(),
        2,
        "a hole of two blocks inside cluster 1: {:?} {:?}",
        blocks(&fs, f),
        fs.extents(f)
    );
    // The rest of cluster 1: now empty, it goes.
    fs.punch_hole(f, 24 * KIB, 8 * KIB).unwrap();
    assert_eq!(free(&fs), before + 1);
    // Whole clusters 2 and most of 3 go; the block left keeps cluster 3.
    fs.punch_hole(f, 32 * KIB, 28 * KIB).unwrap();
    assert_eq!(free(&fs), before + 2);
    // A truncate inside cluster 3 keeps it for the block below the size.
    fs.truncate(f, 61 * KIB).unwrap();
    assert_eq!(free(&fs), before + 2);
    fs.truncate(f, 40 * KIB).unwrap();
    assert_eq!(free(&fs), before + 3);
    fs.unlink(f).unwrap();
    assert_eq!(free(&fs), before + 4);
    fs.check().unwrap();
}

#[test]
fn fallocate_maps_its_blocks_and_writes_into_them_convert() {
    let fs = clustered();
    let f = fs.create().unwrap();
    fs.fallocate(f, 4 * KIB, 40 * KIB, FallocateMode::KeepSize).unwrap();
    let b = fs.ext4_extents(f).unwrap();
    assert_eq!(b.iter().map(|e| (e.logical, e.len)).collect::<Vec<_>>(), vec![(1, 10)], "{b:?}");
    // Block 0 lies in a cluster the file holds: fallocate again maps it
    // there without a new cluster.
    let held = free(&fs);
    fs.fallocate(f, 0, 4 * KIB, FallocateMode::KeepSize).unwrap();
    assert_eq!(free(&fs), held);
    fs.write(f, 8 * KIB, 4 * KIB).unwrap();
    fs.fsync(f).unwrap();
    assert_eq!(blocks(&fs, f).iter().map(|e| e.2).sum::<u32>(), 11);
    // Block 2 is written now; the rest of its cluster stays unwritten.
    let states: Vec<(u64, u32, ExtentState)> =
        fs.ext4_extents(f).unwrap().iter().map(|e| (e.logical, e.len, e.state)).collect();
    use ExtentState::{Unwritten, Written};
    assert_eq!(states, vec![(0, 2, Unwritten), (2, 1, Written), (3, 8, Unwritten)], "{states:?}");
    fs.check().unwrap();
}

#[test]
fn random_sub_cluster_writes_keep_every_count_true() {
    let seed: u64 = std::env::var("MBALLOC_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(71);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let fs = clustered();
    let empty = free(&fs);
    let files: Vec<FileId> = (0..4).map(|_| fs.create().unwrap()).collect();
    let n = std::env::var("MBALLOC_BIGALLOC_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(400);
    for i in 0..n {
        let f = files[rng.gen_range(0..files.len())];
        let at = rng.gen_range(0..2048u64) * 4 * KIB + rng.gen_range(0..2) * 2 * KIB;
        let len = rng.gen_range(1..12u64) * 2 * KIB;
        let r = match rng.gen_range(0..10) {
            0..=5 => fs.write(f, at, len),
            6 => fs.punch_hole(f, at, len),
            7 => fs.fallocate(f, at, len, FallocateMode::KeepSize),
            8 => fs.truncate(f, at),
            _ => fs.fsync(f),
        };
        r.unwrap_or_else(|e| panic!("seed {seed}, operation {i}: {e}"));
        if i % 50 == 0 {
            fs.check().unwrap_or_else(|e| panic!("seed {seed}, after operation {i}: {e}"));
        }
    }
    fs.sync().unwrap();
    fs.check().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for &f in &files {
        // Every extent's blocks lie at their logical offset in their cluster.
        for e in fs.ext4_extents(f).unwrap() {
            assert_eq!(e.logical % 4, e.physical % 4, "seed {seed}: {e:?}");
        }
        fs.unlink(f).unwrap();
    }
    fs.discard_preallocations();
    assert_eq!(free(&fs), empty, "seed {seed}: every cluster back");
}
