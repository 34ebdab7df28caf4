//! Targeted behaviour of the file layer.

use mballoc_testkit as common;

use mballoc::{Geometry, Tunables};
use mballoc_fs::{
    ExtentState, FallocateMode, FiemapKind, FileId, FreeReuse, Fs, FsConfig, FsError, Normalization, PreallocTable,
    StreamPlacement,
};
use rand::Rng;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// A 1 GiB volume of 4 KiB blocks (8 groups of 32,768).
fn gib_volume() -> FsConfig {
    let mut cfg = FsConfig::new(Geometry::new(4096, 1 << 18).unwrap());
    cfg.placement.tunables = Tunables::with_stats();
    cfg.placement.locality_groups = 1;
    // Fixed, so results do not depend on the machine's CPU count.
    cfg.placement.stream_goals = Some(2);
    cfg
}

fn extent_count(fs: &Fs, f: FileId) -> usize {
    fs.extents(f).unwrap().len()
}

#[test]
fn a_12_mib_delayed_write_is_one_allocation_and_one_extent() {
    let fs = Fs::new(gib_volume()).unwrap();
    let f = fs.create().unwrap();
    for i in 0..3072 {
        fs.write(f, i * 4096, 4096).unwrap();
    }
    assert!(fs.extents(f).unwrap().is_empty(), "delayed: nothing allocated before writeback");
    assert_eq!(fs.reserved_blocks(), 3072);
    fs.fsync(f).unwrap();
    let ex = fs.extents(f).unwrap();
    assert_eq!(ex.len(), 1, "{ex:?}");
    assert_eq!((ex[0].logical, ex[0].len, ex[0].state), (0, 3072, ExtentState::Written));
    assert_eq!(fs.stats().alloc_requests, 1);
    assert_eq!(fs.allocator().stats().reqs, 1);
    assert_eq!(fs.reserved_blocks(), 0);
    fs.check().unwrap();
}

fn interleaved_appenders(cfg: FsConfig, files: usize, appends: u64, how: Append) -> (f64, u64) {
    let fs = Fs::new(cfg).unwrap();
    let ids: Vec<FileId> = (0..files).map(|_| fs.create().unwrap()).collect();
    for i in 0..appends {
        for &f in &ids {
            match how {
                Append::Write => fs.write(f, i * 4096, 4096).unwrap(),
                Append::Fallocate => fs.fallocate(f, i * 4096, 4096, FallocateMode::ExtendSize).unwrap(),
            }
        }
    }
    for &f in &ids {
        fs.close(f).unwrap();
    }
    fs.sync().unwrap();
    fs.check().unwrap();
    let counts: Vec<u64> = ids.iter().map(|&f| fs.fragments(f).unwrap()).collect();
    (counts.iter().sum::<u64>() as f64 / files as f64, *counts.iter().max().unwrap())
}

#[derive(Clone, Copy)]
enum Append {
    Write,
    Fallocate,
}

#[test]
fn sixty_four_interleaved_appenders_stay_in_few_extents() {
    // 64 files appended 4 KiB at a time in turn, 1 MiB each, with background
    // writeback every 8 MiB of dirty data.
    let mut cfg = gib_volume();
    cfg.storage.dirty_limit_blocks = 2048;
    let (mean, max) = interleaved_appenders(cfg, 64, 256, Append::Write);
    eprintln!("64 interleaved buffered appenders: {mean:.2} extents per file on average, {max} at most");
    assert!(max <= 4, "delayed allocation with stream windows should keep files whole: {mean} mean, {max} max");

    // The same with fallocate appends (no delayed allocation, no
    // normalization: ext4 does not grow a one-extent fallocate), the shape
    // that makes ext4 interleave. Per-file placement keeps them whole.
    let (mean, max) = interleaved_appenders(gib_volume(), 64, 256, Append::Fallocate);
    eprintln!("64 interleaved fallocate appenders, per-file placement: {mean:.2} extents per file, {max} at most");
    assert!(max <= 8, "per-file streams should survive interleaving: {mean} mean, {max} max");

    // ext4's placement interleaves them block by block.
    let mut cfg = gib_volume();
    cfg.placement.stream_placement = StreamPlacement::Kernel;
    let (mean, max) = interleaved_appenders(cfg, 64, 256, Append::Fallocate);
    eprintln!("64 interleaved fallocate appenders, kernel placement: {mean:.2} extents per file, {max} at most");
    assert!(mean > 100.0, "kernel placement should interleave: {mean} mean");
}

#[test]
fn truncate_then_reallocate_before_commit_does_not_reuse_freed_blocks() {
    let mut cfg = FsConfig::new(Geometry::with_group_size(4096, 1024, 1024).unwrap());
    cfg.storage.commit_interval_ops = 0;
    let fs = Fs::new(cfg).unwrap();
    let a = fs.create().unwrap();
    fs.write(a, 0, 600 * 4096).unwrap();
    fs.writeback(a).unwrap();
    fs.commit();
    let freed = fs.extents(a).unwrap();
    fs.truncate(a, 0).unwrap();
    assert_eq!(fs.pending_free_blocks(), 600);
    // Everything else that is free, and more, is wanted now.
    let b = fs.create().unwrap();
    let room = fs.allocator().free_blocks();
    fs.write(b, 0, room * 4096).unwrap();
    fs.writeback(b).unwrap();
    for e in fs.extents(b).unwrap() {
        for old in &freed {
            let overlap =
                e.physical < old.physical + u64::from(old.len) && old.physical < e.physical + u64::from(e.len);
            assert!(!overlap, "{e:?} reuses {old:?} before the truncate committed");
        }
    }
    fs.check().unwrap();
    // The freed blocks come back at commit, and can then be used.
    assert_eq!(fs.commit(), 600);
    assert_eq!(fs.pending_free_blocks(), 0);
    let c = fs.create().unwrap();
    fs.write(c, 0, 600 * 4096).unwrap();
    fs.fsync(c).unwrap();
    fs.check().unwrap();
}

#[test]
fn a_write_that_needs_pending_frees_commits_instead_of_failing() {
    let mut cfg = FsConfig::new(Geometry::with_group_size(4096, 1024, 2048).unwrap());
    cfg.storage.commit_interval_ops = 0;
    let fs = Fs::new(cfg).unwrap();
    let a = fs.create().unwrap();
    fs.fallocate(a, 0, 2048 * 4096, FallocateMode::ExtendSize).unwrap();
    assert_eq!(fs.available_blocks(), 0);
    assert!(matches!(fs.write(a, 2048 * 4096, 1), Err(FsError::NoSpace { needed: 1, available: 0 })));
    fs.punch_hole(a, 0, 1024 * 4096).unwrap();
    assert_eq!(fs.allocator().free_blocks(), 0, "punched blocks wait for the commit");
    let b = fs.create().unwrap();
    fs.write(b, 0, 1024 * 4096).unwrap();
    fs.fsync(b).unwrap();
    assert_eq!(fs.extents(b).unwrap().iter().map(|e| u64::from(e.len)).sum::<u64>(), 1024);
    assert!(fs.stats().reclaims >= 1);
    fs.check().unwrap();
}

#[test]
fn preallocations_never_cause_no_space() {
    // Small files leave locality-group runs, streams leave windows; then one
    // file asks for every block that is left.
    let mut cfg = FsConfig::new(Geometry::with_group_size(4096, 1024, 8192).unwrap());
    cfg.placement.locality_groups = 2;
    let fs = Fs::new(cfg).unwrap();
    let mut rng = common::rng(common::seed("preallocations_never_cause_no_space"));
    for _ in 0..40 {
        let f = fs.create().unwrap();
        let len = rng.gen_range(1..40) * 4096;
        fs.write(f, 0, len).unwrap();
        fs.fsync(f).unwrap();
    }
    assert!(fs.preallocated_blocks() > 0);
    let big = fs.create().unwrap();
    let all = fs.available_blocks();
    fs.fallocate(big, 0, all * 4096, FallocateMode::ExtendSize).unwrap();
    assert_eq!(fs.available_blocks(), 0);
    assert_eq!(fs.preallocated_blocks(), 0, "pressure gave back every preallocation");
    fs.check().unwrap();
}

#[test]
fn small_files_are_packed_by_the_locality_group() {
    let fs = Fs::new(gib_volume()).unwrap();
    let mut starts = Vec::new();
    for _ in 0..100 {
        let f = fs.create().unwrap();
        fs.write(f, 0, 8 * KIB).unwrap();
        fs.close(f).unwrap();
        fs.writeback(f).unwrap();
        let ex = fs.extents(f).unwrap();
        assert_eq!(ex.len(), 1);
        starts.push(ex[0].physical);
    }
    let s = fs.stats();
    assert!(s.group_pa_hits >= 90, "{s:?}");
    // 100 files of two blocks each in a handful of 512-block runs.
    let span = starts.iter().max().unwrap() - starts.iter().min().unwrap();
    assert!(span < 512, "small files spread over {span} blocks");
    fs.check().unwrap();
}

#[test]
fn fallocate_gives_unwritten_extents_that_writes_convert() {
    let fs = Fs::new(gib_volume()).unwrap();
    let f = fs.create().unwrap();
    fs.fallocate(f, 0, MIB, FallocateMode::KeepSize).unwrap();
    assert_eq!(fs.size(f).unwrap(), 0);
    fs.fallocate(f, MIB, MIB, FallocateMode::ExtendSize).unwrap();
    assert_eq!(fs.size(f).unwrap(), 2 * MIB);
    let ex = fs.extents(f).unwrap();
    assert!(ex.iter().all(|e| e.state == ExtentState::Unwritten));
    assert_eq!(ex.iter().map(|e| u64::from(e.len)).sum::<u64>(), 512);
    // A write into preallocated space needs no new block.
    let before = fs.available_blocks();
    fs.write(f, 100 * 4096, 50 * 4096).unwrap();
    assert_eq!(fs.available_blocks(), before);
    let unwritten_before: Vec<_> = fs.fiemap(f).unwrap();
    assert!(unwritten_before.iter().all(|e| e.kind == FiemapKind::Unwritten), "converted only at writeback");
    fs.fsync(f).unwrap();
    let kinds: Vec<(u64, u64, FiemapKind)> = fs.fiemap(f).unwrap().iter().map(|e| (e.logical, e.len, e.kind)).collect();
    assert!(kinds.contains(&(100, 50, FiemapKind::Written)), "{kinds:?}");
    assert_eq!(fs.extents(f).unwrap().iter().map(|e| u64::from(e.len)).sum::<u64>(), 512);
    fs.check().unwrap();
}

#[test]
fn punched_pieces_merge_in_the_transaction() {
    let mut cfg = gib_volume();
    cfg.storage.commit_interval_ops = 0;
    let fs = Fs::new(cfg).unwrap();
    let f = fs.create().unwrap();
    fs.fallocate(f, 0, 64 * 4096, FallocateMode::ExtendSize).unwrap();
    assert_eq!(extent_count(&fs, f), 1);
    fs.punch_hole(f, 10 * 4096, 4096).unwrap();
    fs.punch_hole(f, 12 * 4096, 4096).unwrap();
    fs.punch_hole(f, 11 * 4096, 4096).unwrap();
    let j = fs.stats().deferred_frees;
    assert_eq!((j.records, j.merges), (2, 2), "{j:?}");
    assert_eq!(fs.pending_free_blocks(), 3);
    assert_eq!(extent_count(&fs, f), 2);
    fs.check().unwrap();
}

#[test]
fn bad_calls_are_typed_errors_that_change_nothing() {
    let mut cfg = FsConfig::new(Geometry::with_group_size(4096, 1024, 4096).unwrap());
    cfg.storage.commit_interval_ops = 0;
    let fs = Fs::new(cfg).unwrap();
    let f = fs.create().unwrap();
    fs.write(f, 0, 100 * 4096).unwrap();
    fs.fallocate(f, 200 * 4096, 100 * 4096, FallocateMode::KeepSize).unwrap();
    let snapshot = |fs: &Fs| {
        (
            fs.fiemap(f).unwrap(),
            fs.size(f).unwrap(),
            fs.available_blocks(),
            fs.reserved_blocks(),
            fs.allocator().free_blocks(),
        )
    };
    let before = snapshot(&fs);
    let max = fs.max_file_size();
    assert_eq!(fs.fallocate(f, 0, 0, FallocateMode::ExtendSize), Err(FsError::ZeroLength));
    assert_eq!(fs.punch_hole(f, 0, 0), Err(FsError::ZeroLength));
    assert!(matches!(fs.write(f, max, 1), Err(FsError::FileTooLarge { .. })));
    assert!(matches!(fs.write(f, u64::MAX, 2), Err(FsError::FileTooLarge { .. })));
    assert!(matches!(fs.truncate(f, max + 1), Err(FsError::FileTooLarge { .. })));
    assert!(matches!(fs.fallocate(f, 0, 5000 * 4096, FallocateMode::ExtendSize), Err(FsError::NoSpace { .. })));
    assert!(matches!(fs.write(f, 0, 5000 * 4096), Err(FsError::NoSpace { .. })));
    assert_eq!(fs.open(FileId(3)), Err(FsError::UnknownFile(FileId(3))));
    assert_eq!(fs.size(FileId(1 << 40)), Err(FsError::UnknownFile(FileId(1 << 40))));
    assert_eq!(snapshot(&fs), before);
    fs.close(f).unwrap();
    assert_eq!(fs.write(f, 0, 1), Err(FsError::NotOpen(f)));
    assert_eq!(fs.close(f), Err(FsError::NotOpen(f)));
    fs.unlink(f).unwrap();
    assert_eq!(fs.size(f), Err(FsError::Unlinked(f)));
    assert_eq!(fs.unlink(f), Err(FsError::Unlinked(f)));
    assert_eq!(fs.reserved_blocks(), 0, "unlink dropped the delayed blocks");
    assert_eq!(fs.pending_free_blocks(), 100, "and sent the fallocated ones to the transaction");
    fs.check().unwrap();
}

#[test]
fn an_oversized_prealloc_table_is_rejected() {
    let mut cfg = FsConfig::new(Geometry::with_group_size(4096, 1024, 4096).unwrap());
    cfg.placement.normalization = Normalization::Table(PreallocTable::lustre_default());
    assert!(matches!(Fs::new(cfg).err(), Some(FsError::InvalidConfig(_))));
    let mut cfg = FsConfig::new(Geometry::with_group_size(4096, 1024, 4096).unwrap());
    cfg.shape.flex_groups = 3;
    assert!(matches!(Fs::new(cfg).err(), Some(FsError::Alloc(mballoc::Error::InvalidGeometry(_)))));
}

#[test]
fn threads_sharing_the_engine_keep_every_invariant() {
    let mut cfg = FsConfig::new(Geometry::with_group_size(4096, 2048, 8 * 2048).unwrap());
    cfg.placement.locality_groups = 4;
    cfg.storage.dirty_limit_blocks = 512;
    let fs = Fs::new(cfg).unwrap();
    let base = common::seed("threads_sharing_the_engine_keep_every_invariant");
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let fs = &fs;
            s.spawn(move || {
                let mut rng = common::rng(base.wrapping_add(t));
                let mut mine: Vec<FileId> = Vec::new();
                for _ in 0..1500 {
                    if mine.len() < 4 || rng.gen_bool(0.05) {
                        mine.push(fs.create().unwrap());
                        continue;
                    }
                    let f = mine[rng.gen_range(0..mine.len())];
                    let off = rng.gen_range(0..1024) * 4096;
                    let len = rng.gen_range(1..64) * 4096;
                    let r = match rng.gen_range(0..10) {
                        0..=4 => fs.write(f, off, len),
                        5 => fs.fallocate(f, off, len, FallocateMode::KeepSize),
                        6 => fs.punch_hole(f, off, len),
                        7 => fs.truncate(f, off),
                        8 => fs.fsync(f),
                        _ => {
                            let i = mine.iter().position(|&g| g == f).unwrap();
                            mine.swap_remove(i);
                            fs.unlink(f)
                        }
                    };
                    match r {
                        Ok(()) | Err(FsError::NoSpace { .. }) => {}
                        Err(e) => panic!("seed {}: {e}", base.wrapping_add(t)),
                    }
                }
            });
        }
    });
    fs.check().unwrap();
    fs.sync().unwrap();
    fs.check().unwrap();
}

/// The kernel profile punches as `ext4_punch_hole` does: nothing at or
/// past the size, an end past it cut to the page boundary at or after it, and
/// the file's preallocations given back only when whole blocks go.
#[test]
fn kernel_profile_punch_follows_ext4() {
    let fs = Fs::new(FsConfig::kernel(Geometry::new(4096, 1 << 18).unwrap())).unwrap();
    let f = fs.create().unwrap();
    // 100 blocks written (past the locality group's 16): the request is
    // normalized and the rest of the window stays preallocated for the
    // file.
    fs.write(f, 0, 100 * 4096).unwrap();
    fs.fsync(f).unwrap();
    let pa = fs.preallocated_blocks();
    assert!(pa > 0, "a preallocation to keep");
    let before = fs.extents(f).unwrap();
    // At or past the size: nothing at all.
    fs.punch_hole(f, 100 * 4096, 4096).unwrap();
    fs.punch_hole(f, 500 * 4096, 4096).unwrap();
    assert_eq!((fs.extents(f).unwrap(), fs.preallocated_blocks()), (before.clone(), pa));
    // Inside one block: no whole block removed, preallocations kept.
    fs.punch_hole(f, 100, 1000).unwrap();
    assert_eq!((fs.extents(f).unwrap(), fs.preallocated_blocks()), (before, pa));
    // Whole blocks: removed, preallocations given back.
    fs.punch_hole(f, 4096, 2 * 4096).unwrap();
    assert_eq!(fs.preallocated_blocks(), 0);
    assert_eq!(fs.extents(f).unwrap().iter().map(|e| u64::from(e.len)).sum::<u64>(), 98);

    // Blocks allocated past the size (fallocate, keep size) survive a
    // punch to far past the end, but for the page after the size.
    let g = fs.create().unwrap();
    fs.write(g, 0, 2 * 4096 + 100).unwrap();
    fs.fsync(g).unwrap();
    fs.fallocate(g, 0, 64 * 4096, FallocateMode::KeepSize).unwrap();
    fs.punch_hole(g, 4096, 1 << 30).unwrap();
    let kept: u64 = fs.extents(g).unwrap().iter().map(|e| u64::from(e.len)).sum();
    assert_eq!(kept, 64 - 2, "blocks 1 and 2 (up to the page boundary after the size) go, the rest stay");
    // A size on a page boundary: the block after it stays (round_up of a
    // multiple of the page is itself).
    let h = fs.create().unwrap();
    fs.write(h, 0, 16 * 4096).unwrap();
    fs.fsync(h).unwrap();
    fs.fallocate(h, 0, 64 * 4096, FallocateMode::KeepSize).unwrap();
    fs.punch_hole(h, 8 * 4096, 1 << 30).unwrap();
    let kept: Vec<(u64, u32)> = fs.extents(h).unwrap().iter().map(|e| (e.logical, e.len)).collect();
    assert_eq!(kept.iter().map(|e| u64::from(e.1)).sum::<u64>(), 64 - 8, "{kept:?}");
    assert!(kept.iter().any(|e| e.0 == 16), "block 16 stays: {kept:?}");

    // The engine's own profile punches the range as given.
    let own = Fs::new(gib_volume()).unwrap();
    let h = own.create().unwrap();
    own.write(h, 0, 2 * 4096 + 100).unwrap();
    own.fsync(h).unwrap();
    own.fallocate(h, 0, 64 * 4096, FallocateMode::KeepSize).unwrap();
    own.punch_hole(h, 4096, 1 << 30).unwrap();
    assert_eq!(own.extents(h).unwrap().iter().map(|e| u64::from(e.len)).sum::<u64>(), 1);
}

/// A policy's goal and window reach the file layer's requests.
#[test]
fn a_policy_moves_goals_and_resizes_windows() {
    #[derive(Debug)]
    struct FarAndSmall;
    impl mballoc::Policy for FarAndSmall {
        fn name(&self) -> &str {
            "far-and-small"
        }
        fn goal(&self, default: u64, info: &mballoc::GoalInfo) -> u64 {
            // New files start in group 5; extents continue as ext4's do.
            if info.continues {
                default
            } else {
                5 * 32768
            }
        }
        fn window(&self, _default: u32, info: &mballoc::WindowInfo) -> u32 {
            info.len
        }
    }
    let mut cfg = FsConfig::new(Geometry::new(4096, 1 << 18).unwrap());
    cfg.placement.policy = Some(std::sync::Arc::new(FarAndSmall));
    let fs = Fs::new(cfg).unwrap();
    let f = fs.create().unwrap();
    fs.write(f, 0, 1 << 20).unwrap();
    fs.fsync(f).unwrap();
    let e = fs.extents(f).unwrap();
    assert_eq!(e[0].physical, 5 * 32768, "{e:?}");
    // No window past the request: nothing preallocated.
    assert_eq!(fs.preallocated_blocks(), 0);
    // ext4's own on the same writes: a window bigger than the request.
    let fs = Fs::new(FsConfig::new(Geometry::new(4096, 1 << 18).unwrap())).unwrap();
    let f = fs.create().unwrap();
    fs.write(f, 0, 1 << 20).unwrap();
    fs.fsync(f).unwrap();
    assert_ne!(fs.extents(f).unwrap()[0].physical, 5 * 32768);
}

/// Without a journal (`FreeReuse::AtOnce`) a file's freed blocks are free
/// in the allocator at once; with one they wait for the commit.
#[test]
fn freed_blocks_wait_for_the_commit_unless_told_otherwise() {
    for (reuse, pending) in [(FreeReuse::AtCommit, 64), (FreeReuse::AtOnce, 0)] {
        let mut cfg = FsConfig::kernel(Geometry::new(4096, 1 << 18).unwrap());
        cfg.storage.free_reuse = reuse;
        let fs = Fs::new(cfg).unwrap();
        let f = fs.create().unwrap();
        fs.write(f, 0, 64 * 4096).unwrap();
        fs.fsync(f).unwrap();
        let free = fs.allocator().free_blocks();
        fs.truncate(f, 0).unwrap();
        assert_eq!(fs.pending_free_blocks(), pending, "{reuse:?}");
        assert_eq!(fs.allocator().free_blocks() - free, 64 - pending, "{reuse:?}");
    }
}

/// ext4's switch near a full volume (`ext4_nonda_switch`): once fewer
/// blocks are free than twice the delayed ones, a write first writes every
/// dirty file back; past 1.5 times, it is allocated at once. Without the
/// switch both stay delayed.
#[test]
fn near_a_full_volume_a_write_pushes_writeback_and_allocates_at_once() {
    use mballoc_fs::LowSpace;
    let geo = Geometry::new(4096, 1 << 15).unwrap();
    for low in [LowSpace::Delay, LowSpace::Ext4 { watermark_blocks: 256 }] {
        let mut cfg = FsConfig::kernel(geo);
        cfg.storage.low_space = low;
        let fs = Fs::new(cfg).unwrap();
        let free = fs.allocator().free_blocks();
        let (a, b) = (fs.create().unwrap(), fs.create().unwrap());
        // 70% of the free space waits for writeback: nothing allocated.
        fs.write(a, 0, free * 7 / 10 * 4096).unwrap();
        assert!(fs.extents(a).unwrap().is_empty(), "{low:?}");
        fs.write(b, 0, 16 * 4096).unwrap();
        let (a_mapped, b_mapped) = (!fs.extents(a).unwrap().is_empty(), !fs.extents(b).unwrap().is_empty());
        match low {
            LowSpace::Delay => assert!(!a_mapped && !b_mapped, "delayed whatever the free space"),
            LowSpace::Ext4 { .. } => {
                assert!(a_mapped, "the dirty file was written back before the write");
                assert!(b_mapped, "the write was allocated at once");
                let b_blocks: u64 = fs.extents(b).unwrap().iter().map(|e| u64::from(e.len)).sum();
                assert!(b_blocks >= 16, "every block of the write is mapped: {b_blocks}");
            }
        }
        fs.sync().unwrap();
        assert!(fs.check().is_ok(), "{low:?}");
    }
}
