//! The crash harness: run a seeded workload on a recording device, then
//! for every crash point (each prefix of the device's writes, and a torn
//! version of the write at the point) mount the device as it would be,
//! and check that the volume is clean, that every file fsync'ed before
//! the point reads back exactly, and that no block is lost or owned twice.
//!
//! Size knobs: `MBALLOC_CRASH_SEEDS` (workloads, default 4) and
//! `MBALLOC_CRASH_OPS` (operations per workload, default 120).

mod common;

use mballoc_fs::{FallocateMode, FileId};
use mballoc_vol::crash::RecordingDevice;
use mballoc_vol::{check, Device, FormatOptions, MemDevice, MountOptions, Repair, VolError, Volume};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const BS: u64 = 1024;
const DEV_BYTES: u64 = 8 << 20;

fn format_opts() -> FormatOptions {
    format_with_groups(1024)
}

fn format_with_groups(bpg: u32) -> FormatOptions {
    FormatOptions {
        block_size: BS as u32,
        blocks_per_group: Some(bpg),
        log_blocks: Some(24),
        inode_count: Some(32),
        tree_blocks: Some(48),
    }
}

fn mount_opts(folio: u32) -> MountOptions {
    MountOptions {
        folio_size: folio,
        cache_bytes: 256 << 10,
        dirty_bytes: 48 << 10,
        commit_interval_ops: 9,
        ..MountOptions::default()
    }
}

#[derive(Debug, Clone)]
enum Mark {
    /// A change to the file that began after `start` device events.
    Modified { start: usize },
    /// An fsync that returned after `end` events, with the contents then.
    Synced { end: usize, data: Vec<u8> },
}

struct Model {
    files: Vec<(FileId, Vec<u8>)>,
    marks: std::collections::HashMap<FileId, Vec<Mark>>,
}

impl Model {
    /// Files whose contents the crash at `point` must preserve. With
    /// `torn`, part of event `point` reached the device too, so a change
    /// that began with it may show.
    fn settled(&self, point: usize, torn: bool) -> Vec<(FileId, &[u8])> {
        let reached = |start: usize| start < point || (torn && start == point);
        let mut out = Vec::new();
        for (f, marks) in &self.marks {
            let mut expect: Option<&[u8]> = None;
            for m in marks {
                match m {
                    Mark::Synced { end, data } if *end <= point => expect = Some(data),
                    Mark::Modified { start } if reached(*start) => expect = None,
                    _ => {}
                }
            }
            if let Some(d) = expect {
                out.push((*f, d));
            }
        }
        out
    }
}

fn fill(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v
}

/// Run the workload; returns the model and the recording.
fn workload_on(seed: u64, ops: u64, opts: &FormatOptions) -> (Model, Arc<RecordingDevice>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let fresh = Arc::new(MemDevice::new(DEV_BYTES));
    Volume::format(fresh.clone(), opts).unwrap();
    let dev = Arc::new(RecordingDevice::new(fresh.to_bytes()));
    let folio = [1024u32, 4096, 65536][(seed % 3) as usize];
    // Every other seed streams buffered writes of two blocks or more
    // straight to their blocks (the mount's write-through path).
    let streamed = seed % 2 == 1;
    let opts = MountOptions { write_through_bytes: if streamed { 2 * BS } else { 0 }, ..mount_opts(folio) };
    let vol = Volume::open(dev.clone(), opts).unwrap();
    let mut m = Model { files: Vec::new(), marks: Default::default() };
    for _ in 0..ops {
        let start = dev.events();
        let pick = rng.gen_range(0..100);
        if m.files.is_empty() || (pick < 8 && m.files.len() < 6) {
            let f = vol.create().unwrap();
            m.files.push((f, Vec::new()));
            m.marks.entry(f).or_default().push(Mark::Modified { start });
            continue;
        }
        let i = rng.gen_range(0..m.files.len());
        let f = m.files[i].0;
        let data = &mut m.files[i].1;
        let size = data.len() as u64;
        let modified = match pick {
            8..=44 => {
                let mut off = rng.gen_range(0..=size + 8192).min(600_000);
                let mut len = rng.gen_range(1..24_000);
                if pick < 20 {
                    // Whole blocks: streamed where the mount streams.
                    off = off / BS * BS;
                    len = (len as u64 / BS).max(1) as usize * BS as usize;
                }
                let bytes = fill(&mut rng, len);
                match vol.write(f, off, &bytes) {
                    Ok(()) => {
                        if data.len() < (off as usize + len) {
                            data.resize(off as usize + len, 0);
                        }
                        data[off as usize..off as usize + len].copy_from_slice(&bytes);
                        true
                    }
                    Err(e) => panic!("seed {seed}: write: {e}"),
                }
            }
            45..=52 => {
                let off = rng.gen_range(0..=size / BS + 4) * BS;
                let len = rng.gen_range(1..12) * BS;
                let bytes = fill(&mut rng, len as usize);
                vol.write_direct(f, off, &bytes).unwrap_or_else(|e| panic!("seed {seed}: direct write: {e}"));
                if (data.len() as u64) < off + len {
                    data.resize((off + len) as usize, 0);
                }
                data[off as usize..(off + len) as usize].copy_from_slice(&bytes);
                true
            }
            53..=60 => {
                let to = rng.gen_range(0..=size + 3000);
                vol.truncate(f, to).unwrap();
                data.resize(to as usize, 0);
                true
            }
            61..=66 if size > 0 => {
                let off = rng.gen_range(0..size);
                let len = rng.gen_range(1..=size - off + 2000);
                vol.punch_hole(f, off, len).unwrap();
                let end = (off + len).min(size);
                data[off as usize..end as usize].fill(0);
                true
            }
            67..=71 => {
                let off = rng.gen_range(0..size + 20_000);
                let len = rng.gen_range(1..40_000);
                let mode = if rng.gen_bool(0.5) { FallocateMode::KeepSize } else { FallocateMode::ExtendSize };
                vol.fallocate(f, off, len, mode).unwrap();
                if mode == FallocateMode::ExtendSize && data.len() < (off + len) as usize {
                    data.resize((off + len) as usize, 0);
                }
                true
            }
            72..=90 => {
                vol.fsync(f).unwrap();
                let snapshot = data.clone();
                m.marks.entry(f).or_default().push(Mark::Synced { end: dev.events(), data: snapshot });
                false
            }
            91..=93 => {
                vol.unlink(f).unwrap();
                m.files.remove(i);
                true
            }
            94 => {
                vol.sync().unwrap();
                false
            }
            _ => false,
        };
        if modified {
            m.marks.entry(f).or_default().push(Mark::Modified { start });
        }
    }
    // Everything still open is synced, then the volume unmounted: the last
    // crash points fall inside the final checkpoint.
    vol.sync().unwrap();
    let end = dev.events();
    for (f, data) in &m.files {
        m.marks.entry(*f).or_default().push(Mark::Synced { end, data: data.clone() });
    }
    vol.unmount().unwrap();
    (m, dev)
}

/// Mount the image of a crash and check it; an error names the problem.
fn verify(image: Vec<u8>, model: &Model, point: usize, torn: bool) -> Result<(), String> {
    let vol = common::mount_checked(Arc::new(MemDevice::from_bytes(image)), mount_opts(4096))?;
    for (f, want) in model.settled(point, torn) {
        common::reads_back(&vol, f, want)?;
    }
    // The recovered volume stays usable: a write and an fsync go through.
    if let Some(&f) = vol.files().first() {
        vol.open_file(f).map_err(|e| format!("open after recovery: {e}"))?;
        vol.write(f, 0, b"after").map_err(|e| format!("write after recovery: {e}"))?;
        vol.fsync(f).map_err(|e| format!("fsync after recovery: {e}"))?;
    }
    Ok(())
}

#[test]
fn every_crash_point_recovers() {
    crash_everywhere(&format_opts(), 4);
}

/// The same on 1,000-block groups: not a power of two.
#[test]
fn every_crash_point_recovers_on_groups_of_any_length() {
    crash_everywhere(&format_with_groups(1000), 2);
}

fn crash_everywhere(opts: &FormatOptions, default_seeds: u64) {
    let seeds = mballoc_testkit::knob("MBALLOC_CRASH_SEEDS", default_seeds);
    let ops = mballoc_testkit::knob("MBALLOC_CRASH_OPS", 120);
    let base_seed = mballoc_testkit::knob("MBALLOC_CRASH_SEED", 0x5eed);
    let mut points = 0;
    for s in 0..seeds {
        let seed = base_seed + s;
        let (model, dev) = workload_on(seed, ops, opts);
        let n = dev.events();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC0FFEE);
        let mut image = dev.base().to_vec();
        for point in 0..=n {
            if point > 0 {
                dev.apply(&mut image, point - 1, point);
            }
            let whole = verify(image.clone(), &model, point, false);
            if let Err(e) = whole {
                panic!("seed {seed}, crash after {point} of {n} device events: {e}");
            }
            points += 1;
            if point < n && dev.sectors(point) > 1 {
                let sectors = rng.gen_range(1..dev.sectors(point));
                let mut torn = image.clone();
                dev.tear(&mut torn, point, sectors);
                if let Err(e) = verify(torn, &model, point, true) {
                    panic!("seed {seed}, crash in event {point} of {n} after {sectors} sectors: {e}");
                }
                points += 1;
            }
        }
    }
    eprintln!("{points} crash points verified");
    if seeds >= 4 && ops >= 120 {
        assert!(points >= 1000, "only {points} crash points");
    }
}

#[test]
fn preallocations_are_never_persisted() {
    let dev = Arc::new(MemDevice::new(DEV_BYTES));
    Volume::format(dev.clone(), &format_opts()).unwrap();
    let vol = Volume::open(dev.clone(), mount_opts(4096)).unwrap();
    let f = vol.create().unwrap();
    vol.write(f, 0, &[7u8; 5000]).unwrap();
    vol.fsync(f).unwrap();
    let prealloc = vol.fs().preallocated_blocks();
    assert!(prealloc > 0, "writeback of a small file should leave a locality-group preallocation");
    let free_live = vol.fs().allocator().free_blocks();
    vol.abandon(); // crash
    let vol = Volume::open(dev.clone(), mount_opts(4096)).unwrap();
    assert_eq!(vol.fs().allocator().free_blocks(), free_live + prealloc, "preallocated blocks come back free");
    assert!(check(&*dev, Repair::No).unwrap().is_clean());
    let _ = dev.len();
}

#[test]
fn direct_reads_see_buffered_data_up_to_the_end_of_file() {
    let dev = Arc::new(MemDevice::new(DEV_BYTES));
    Volume::format(dev.clone(), &format_opts()).unwrap();
    let vol = Volume::open(dev, mount_opts(4096)).unwrap();
    let f = vol.create().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let data = fill(&mut rng, 10_000);
    vol.write(f, 0, &data).unwrap();
    vol.punch_hole(f, 3072, 2048).unwrap();
    let mut want = data.clone();
    want[3072..5120].fill(0);
    // Dirty data is written back first; the read stops at the size.
    let mut buf = vec![0xEEu8; 12 * 1024];
    assert_eq!(vol.read_direct(f, 0, &mut buf).unwrap(), 10_000);
    assert_eq!(&buf[..10_000], &want[..]);
    let mut tail = vec![0u8; 2048];
    assert_eq!(vol.read_direct(f, 8192, &mut tail).unwrap(), 10_000 - 8192);
    assert_eq!(&tail[..10_000 - 8192], &want[8192..]);
    assert!(vol.read_direct(f, 100, &mut tail).is_err(), "unaligned offset");
}

#[test]
fn a_mount_policy_applies_and_leaves_the_geometry_alone() {
    let dev = Arc::new(MemDevice::new(64 << 20));
    Volume::format(dev.clone(), &format_opts()).unwrap();
    let vol = Volume::open_with(dev.clone(), mount_opts(4096), |cfg| {
        cfg.placement.tunables.mb_optimize_scan = mballoc::OptimizeScan::Off;
        cfg.storage.dirty_limit_blocks = 1;
        cfg.shape.geometry = mballoc::Geometry::new(4096, 1 << 30).unwrap();
    })
    .unwrap();
    let cfg = vol.fs().config();
    assert_eq!(cfg.placement.tunables.mb_optimize_scan, mballoc::OptimizeScan::Off);
    assert_eq!(cfg.storage.dirty_limit_blocks, u64::MAX, "the volume keeps its own dirty limit");
    assert_eq!(cfg.shape.geometry.total_blocks(), vol.fs().allocator().geometry().total_blocks());
    let f = vol.create().unwrap();
    vol.write(f, 0, &[7u8; 8192]).unwrap();
    vol.fsync(f).unwrap();
    vol.abandon();
    // Nothing of the policy was persisted: a plain mount has the default.
    let vol = Volume::open(dev, mount_opts(4096)).unwrap();
    assert_eq!(vol.fs().config().placement.tunables.mb_optimize_scan, mballoc::Tunables::default().mb_optimize_scan);
    let mut buf = [0u8; 8192];
    assert_eq!(vol.read(f, 0, &mut buf).unwrap(), 8192);
    assert!(buf.iter().all(|&b| b == 7));
}

#[test]
fn long_runs_are_written_in_bounded_pieces_and_read_back() {
    for folio in [4096u32, 64 << 10, 2 << 20] {
        let dev = Arc::new(MemDevice::new(64 << 20));
        Volume::format(dev.clone(), &format_opts()).unwrap();
        let vol = Volume::open(dev.clone(), mount_opts(folio)).unwrap();
        let f = vol.create().unwrap();
        let data: Vec<u8> = (0..(5u32 << 20) + 12288).map(|i| (i % 251) as u8).collect();
        vol.write(f, 4096, &data).unwrap();
        vol.fsync(f).unwrap();
        let s = vol.stats();
        assert_eq!(s.data_bytes, data.len() as u64, "folio {folio}");
        assert!(s.data_writes >= data.len().div_ceil(2 << 20) as u64, "folio {folio}: {s:?}");
        vol.abandon();
        let vol = Volume::open(dev, mount_opts(folio)).unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(vol.read(f, 4096, &mut back).unwrap(), data.len());
        assert!(back == data, "folio {folio}: data differs after remount");
    }
}

/// A streamed write (`write_through_bytes`) is on the device when the call
/// returns, placed where a writeback of the same write would place it,
/// and reads back before and after a remount; shorter or unaligned writes
/// are cached as before.
#[test]
fn streamed_writes_reach_their_blocks_at_once_where_writeback_would_put_them() {
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    let mut placed = Vec::new();
    for min in [0, 64 << 10] {
        let dev = Arc::new(MemDevice::new(64 << 20));
        Volume::format(dev.clone(), &format_opts()).unwrap();
        let opts = MountOptions {
            write_through_bytes: min,
            cache_bytes: 8 << 20,
            dirty_bytes: 4 << 20,
            ..mount_opts(64 << 10)
        };
        let vol = Volume::open(dev.clone(), opts.clone()).unwrap();
        let f = vol.create().unwrap();
        // Whole blocks that would pass 2^64: refused, as any write there.
        let past = vol.write(f, u64::MAX - (BS - 1), &data[..64 << 10]);
        assert!(matches!(past, Err(VolError::InvalidArgument(_))), "write_through_bytes={min}: {past:?}");
        vol.write(f, 8192, &data).unwrap();
        let on_device = vol.stats().data_bytes;
        if min == 0 {
            // The writeback of that write alone, for the placement.
            vol.fsync(f).unwrap();
        }
        let written = vol.stats().data_bytes;
        // An unaligned write and a short one stay in the cache either way.
        vol.write(f, 8192 + data.len() as u64 + 100, &[9u8; 70_000]).unwrap();
        vol.write(f, 0, &[5u8; 4096]).unwrap();
        assert_eq!(vol.stats().data_bytes, written, "write_through_bytes={min}: cached writes reached the device");
        if min == 0 {
            assert_eq!(on_device, 0, "nothing streamed when write_through_bytes=0");
        } else {
            assert_eq!(on_device, data.len() as u64, "the streamed write is on the device");
        }
        vol.fsync(f).unwrap();
        let streamed_run = vol.extents(f).unwrap().into_iter().find(|e| e.logical == 8);
        placed.push(streamed_run.map(|e| (e.physical, e.len)));
        vol.unmount().unwrap();
        let vol = Volume::open(dev, opts).unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(vol.read(f, 8192, &mut back).unwrap(), data.len());
        assert!(back == data, "write_through_bytes={min}: the data differs after a remount");
    }
    assert!(placed[0].is_some(), "the written range is mapped: {placed:?}");
    assert_eq!(placed[0], placed[1], "placed where writeback places it: {placed:?}");
}
