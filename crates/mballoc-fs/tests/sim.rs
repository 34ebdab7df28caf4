//! Deterministic simulation: seeded random streams of file operations
//! against the whole stack, with a reference model of every file's mapping.
//!
//! After every operation: the engine's checker (no block owned twice,
//! allocated = extents + preallocations + pending frees, counters add up,
//! allocator invariants), the model's view of every file equals FIEMAP's,
//! and an operation failed with NoSpace exactly when the blocks it needed
//! were not there.
//!
//! `MBALLOC_SEED` replays one seed; `MBALLOC_TEST_SCALE` multiplies the
//! number of seeds and operations.

use mballoc_testkit as common;

use mballoc::{Geometry, Tunables};
use mballoc_fs::RangeSet;
use mballoc_fs::{
    CloseBehaviour, Concurrency, FallocateMode, FiemapKind, FileId, Fs, FsConfig, FsError, Normalization,
    PreallocTable, StreamPlacement,
};
use rand::Rng;
use std::collections::BTreeMap;

const BS: u64 = 4096;

#[derive(Default, Clone)]
struct ModelFile {
    size: u64,
    open: u32,
    written: RangeSet,
    unwritten: RangeSet,
    dirty_unwritten: RangeSet,
    delayed: RangeSet,
    /// Truncated to zero since its last close: under ext4's close the
    /// next close writes the file back (auto_da_alloc).
    truncated_to_zero: bool,
}

impl ModelFile {
    fn remove(&mut self, first: u64, end: u64) {
        for set in [&mut self.written, &mut self.unwritten, &mut self.dirty_unwritten, &mut self.delayed] {
            set.remove(first, end);
        }
    }
    fn holes(&self, first: u64, end: u64) -> u64 {
        (first..end)
            .filter(|&b| !self.written.contains(b) && !self.unwritten.contains(b) && !self.delayed.contains(b))
            .count() as u64
    }
    fn flush(&mut self) {
        for (s, e) in self.delayed.split_off_from(0) {
            self.written.insert(s, e);
        }
        for (s, e) in self.dirty_unwritten.split_off_from(0) {
            self.unwritten.remove(s, e);
            self.written.insert(s, e);
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Writeback {
    /// Only explicit writeback: the model knows every state exactly.
    Explicit,
    /// Background writeback at a small dirty limit: the model checks which
    /// blocks hold something, not their state.
    Background,
}

struct Sim {
    fs: Fs,
    files: BTreeMap<u64, ModelFile>,
    unlinked: Vec<FileId>,
    mode: Writeback,
    max_blocks: u64,
    no_space: u64,
    ext4_close: bool,
    /// Punches follow `ext4_punch_hole` (nothing past the page boundary at
    /// or after the size).
    ext4_punch: bool,
}

impl Sim {
    /// A 16-group volume, or (`tight`) a 4-group one that runs full.
    fn new(norm: Normalization, mode: Writeback, tight: bool, tweak: fn(&mut FsConfig)) -> Sim {
        let total = if tight { 4 * 1024 - 100 } else { 16 * 1024 - 300 };
        let geo = Geometry::with_group_size(4096, 1024, total).unwrap();
        let mut cfg = FsConfig::new(geo);
        cfg.placement.tunables = Tunables::with_stats();
        cfg.placement.normalization = norm;
        cfg.placement.locality_groups = 2;
        cfg.shape.inodes_per_group = 4;
        cfg.storage.commit_interval_ops = 97;
        cfg.shape.reserved = vec![(2000, 40)];
        cfg.storage.dirty_limit_blocks = if mode == Writeback::Explicit { u64::MAX } else { 600 };
        tweak(&mut cfg);
        let ext4_close = cfg.behaviour.close == CloseBehaviour::Ext4;
        let ext4_punch = cfg.behaviour.punch == mballoc_fs::PunchBehaviour::Ext4;
        Sim {
            ext4_close,
            ext4_punch,
            fs: Fs::new(cfg).unwrap(),
            files: BTreeMap::new(),
            unlinked: Vec::new(),
            mode,
            max_blocks: 3000,
            no_space: 0,
        }
    }

    fn delayed_total(&self) -> u64 {
        self.files.values().map(|f| f.delayed.len()).sum()
    }

    /// Blocks a new claim may take: free + preallocated + pending − reserved,
    /// each counter verified by the checker against a walk.
    fn available(&self) -> u64 {
        let fs = &self.fs;
        (fs.allocator().free_blocks() + fs.preallocated_blocks() + fs.pending_free_blocks())
            .checked_sub(self.delayed_total())
            .expect("reservations exceed backing blocks")
    }

    fn pick(&self, rng: &mut impl Rng) -> Option<(FileId, ModelFile)> {
        if self.files.is_empty() {
            return None;
        }
        let i = rng.gen_range(0..self.files.len());
        self.files.iter().nth(i).map(|(&k, v)| (FileId(k), v.clone()))
    }

    fn byte_range(&self, rng: &mut impl Rng, m: &ModelFile) -> (u64, u64) {
        let max = self.max_blocks * BS;
        let off = match rng.gen_range(0..4) {
            0 => m.size,
            1 => m.size.saturating_sub(rng.gen_range(0..8 * BS)),
            _ => rng.gen_range(0..max),
        }
        .min(max - 1);
        let len = match rng.gen_range(0..5) {
            0 => rng.gen_range(1..BS),
            1 => BS,
            2 => rng.gen_range(1..64) * BS,
            3 => rng.gen_range(1..400) * BS + rng.gen_range(0..BS),
            _ => rng.gen_range(1..32 * BS),
        };
        (off, len.min(max - off))
    }

    fn step(&mut self, rng: &mut impl Rng, op_no: usize) {
        let op = rng.gen_range(0..100);
        let ctx = format!("op {op_no} (kind {op})");
        match op {
            0..=7 => {
                if self.files.len() < 24 {
                    let f = self.fs.create().unwrap();
                    // ext4's numbering reuses an unlinked file's number.
                    self.unlinked.retain(|&u| u != f);
                    self.files.insert(f.0, ModelFile { open: 1, ..Default::default() });
                }
            }
            8..=35 => {
                let Some((f, m)) = self.pick(rng) else { return };
                let (off, len) = self.byte_range(rng, &m);
                let (first, end) = (off / BS, (off + len).div_ceil(BS));
                let need = m.holes(first, end);
                let avail = self.available();
                let r = self.fs.write(f, off, len);
                if m.open == 0 {
                    assert_eq!(r, Err(FsError::NotOpen(f)), "{ctx}");
                    return;
                }
                if need > avail {
                    assert!(matches!(r, Err(FsError::NoSpace { .. })), "{ctx}: write needing {need} of {avail}: {r:?}");
                    self.no_space += 1;
                    return;
                }
                r.unwrap_or_else(|e| panic!("{ctx}: write [{off}, +{len}) needing {need} of {avail}: {e}"));
                let m = self.files.get_mut(&f.0).unwrap();
                for b in first..end {
                    if m.unwritten.contains(b) {
                        m.dirty_unwritten.insert(b, b + 1);
                    } else if !m.written.contains(b) {
                        m.delayed.insert(b, b + 1);
                    }
                }
                m.size = m.size.max(off + len);
            }
            36..=47 => {
                let Some((f, m)) = self.pick(rng) else { return };
                let (off, len) = self.byte_range(rng, &m);
                let (first, end) = (off / BS, (off + len).div_ceil(BS));
                let mode = if rng.gen_bool(0.3) { FallocateMode::KeepSize } else { FallocateMode::ExtendSize };
                let need = m.holes(first, end);
                let avail = self.available();
                let r = self.fs.fallocate(f, off, len, mode);
                if m.open == 0 {
                    assert_eq!(r, Err(FsError::NotOpen(f)), "{ctx}");
                    return;
                }
                if need > avail {
                    assert!(
                        matches!(r, Err(FsError::NoSpace { .. })),
                        "{ctx}: fallocate needing {need} of {avail}: {r:?}"
                    );
                    self.no_space += 1;
                    return;
                }
                r.unwrap_or_else(|e| panic!("{ctx}: fallocate [{off}, +{len}) needing {need} of {avail}: {e}"));
                let m = self.files.get_mut(&f.0).unwrap();
                for b in first..end {
                    if !m.written.contains(b) && !m.unwritten.contains(b) && !m.delayed.contains(b) {
                        m.unwritten.insert(b, b + 1);
                    }
                }
                if mode == FallocateMode::ExtendSize {
                    m.size = m.size.max(off + len);
                }
            }
            48..=55 => {
                let Some((f, m)) = self.pick(rng) else { return };
                let size =
                    if rng.gen_bool(0.5) { rng.gen_range(0..=m.size) } else { rng.gen_range(0..self.max_blocks * BS) };
                let r = self.fs.truncate(f, size);
                if m.open == 0 {
                    assert_eq!(r, Err(FsError::NotOpen(f)), "{ctx}");
                    return;
                }
                r.unwrap();
                let m = self.files.get_mut(&f.0).unwrap();
                m.truncated_to_zero |= size == 0;
                if size < m.size {
                    m.remove(size.div_ceil(BS), u64::MAX);
                }
                m.size = size;
            }
            56..=63 => {
                let Some((f, m)) = self.pick(rng) else { return };
                let (off, len) = self.byte_range(rng, &m);
                let r = self.fs.punch_hole(f, off, len);
                if m.open == 0 {
                    assert_eq!(r, Err(FsError::NotOpen(f)), "{ctx}");
                    return;
                }
                r.unwrap();
                let mut len = len;
                if self.ext4_punch {
                    if off >= m.size {
                        return;
                    }
                    if off + len > m.size {
                        len = m.size.div_ceil(4096) * 4096 - off;
                    }
                }
                let (first, end) = (off.div_ceil(BS), (off + len) / BS);
                if first < end {
                    self.files.get_mut(&f.0).unwrap().remove(first, end);
                }
            }
            64..=69 => {
                let Some((f, m)) = self.pick(rng) else { return };
                let r = self.fs.fsync(f);
                if m.open == 0 {
                    assert_eq!(r, Err(FsError::NotOpen(f)), "{ctx}");
                    return;
                }
                r.unwrap();
                self.files.get_mut(&f.0).unwrap().flush();
            }
            70..=73 => {
                let Some((f, _)) = self.pick(rng) else { return };
                self.fs.writeback(f).unwrap();
                self.files.get_mut(&f.0).unwrap().flush();
            }
            74..=75 => {
                self.fs.sync().unwrap();
                self.files.values_mut().for_each(ModelFile::flush);
            }
            76..=78 => {
                self.fs.commit();
            }
            79..=80 => {
                self.fs.discard_preallocations();
            }
            81..=86 => {
                let Some((f, m)) = self.pick(rng) else { return };
                if m.open == 0 || rng.gen_bool(0.3) {
                    self.fs.open(f).unwrap();
                    self.files.get_mut(&f.0).unwrap().open += 1;
                } else {
                    self.fs.close(f).unwrap();
                    let m = self.files.get_mut(&f.0).unwrap();
                    m.open -= 1;
                    if self.ext4_close && std::mem::take(&mut m.truncated_to_zero) {
                        m.flush();
                    }
                }
            }
            87..=91 => {
                let Some((f, _)) = self.pick(rng) else { return };
                self.fs.unlink(f).unwrap();
                self.files.remove(&f.0);
                self.unlinked.push(f);
            }
            92..=95 => {
                // Operations on files that are gone or never were.
                let f = if !self.unlinked.is_empty() && rng.gen_bool(0.7) {
                    self.unlinked[rng.gen_range(0..self.unlinked.len())]
                } else {
                    FileId(rng.gen_range(0..5) + if rng.gen_bool(0.5) { 0 } else { 1 << 40 })
                };
                let expect_unlinked = self.unlinked.contains(&f);
                let results = [
                    self.fs.write(f, 0, BS),
                    self.fs.fallocate(f, 0, BS, FallocateMode::ExtendSize),
                    self.fs.truncate(f, 0),
                    self.fs.punch_hole(f, 0, BS),
                    self.fs.fsync(f),
                    self.fs.unlink(f),
                    self.fs.open(f),
                ];
                for r in results {
                    match r {
                        Err(FsError::Unlinked(g)) if expect_unlinked && g == f => {}
                        Err(FsError::UnknownFile(g)) if !expect_unlinked && g == f => {}
                        other => panic!("{ctx}: operation on dead file {f:?} gave {other:?}"),
                    }
                }
            }
            _ => {
                // Ranges past the largest file size.
                let Some((f, _)) = self.pick(rng) else { return };
                let max = self.fs.max_file_size();
                let off = max - rng.gen_range(0..4 * BS);
                for r in [
                    self.fs.write(f, off, 8 * BS),
                    self.fs.fallocate(f, u64::MAX - 1, 2, FallocateMode::KeepSize),
                    self.fs.punch_hole(f, off, 8 * BS),
                    self.fs.truncate(f, max + 1),
                ] {
                    assert!(matches!(r, Err(FsError::FileTooLarge { .. })), "{ctx}: {r:?}");
                }
            }
        }
    }

    fn verify(&self, ctx: &str) {
        self.fs.check().unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(
            self.fs.files().iter().map(|f| f.0).collect::<Vec<_>>(),
            self.files.keys().copied().collect::<Vec<_>>()
        );
        for (&id, m) in &self.files {
            let f = FileId(id);
            assert_eq!(self.fs.size(f).unwrap(), m.size, "{ctx}: size of {f:?}");
            let mut got = [RangeSet::new(), RangeSet::new(), RangeSet::new()];
            for e in self.fs.fiemap(f).unwrap() {
                let k = match e.kind {
                    FiemapKind::Written => 0,
                    FiemapKind::Unwritten => 1,
                    FiemapKind::Delayed => 2,
                };
                got[k].insert(e.logical, e.logical + e.len);
            }
            if self.mode == Writeback::Explicit {
                assert_eq!(got[0], m.written, "{ctx}: written blocks of {f:?}");
                assert_eq!(got[1], m.unwritten, "{ctx}: unwritten blocks of {f:?}");
                assert_eq!(got[2], m.delayed, "{ctx}: delayed blocks of {f:?}");
            } else {
                let union = |sets: [&RangeSet; 3]| {
                    let mut u = RangeSet::new();
                    for s in sets {
                        for (a, b) in s.iter() {
                            u.insert(a, b);
                        }
                    }
                    u
                };
                assert_eq!(
                    union([&got[0], &got[1], &got[2]]),
                    union([&m.written, &m.unwritten, &m.delayed]),
                    "{ctx}: blocks of {f:?}"
                );
            }
        }
    }

    /// Background writeback moved some files' delayed blocks to written: let
    /// the model follow what FIEMAP now says (the union is already checked).
    fn follow_background_writeback(&mut self) {
        if self.mode != Writeback::Background {
            return;
        }
        for (&id, m) in self.files.iter_mut() {
            let delayed: u64 = self
                .fs
                .fiemap(FileId(id))
                .unwrap()
                .iter()
                .filter(|e| e.kind == FiemapKind::Delayed)
                .map(|e| e.len)
                .sum();
            if delayed != m.delayed.len() {
                assert_eq!(delayed, 0, "background writeback flushes whole files");
                m.flush();
            }
        }
    }
}

fn run(name: &str, norm: fn() -> Normalization, mode: Writeback, tweak: fn(&mut FsConfig)) {
    let base = common::seed(name);
    let seeds = 8 * common::scale();
    let ops = 3000 * common::scale();
    for i in 0..seeds as u64 {
        let seed = base.wrapping_add(i);
        let mut rng = common::rng(seed);
        let mut sim = Sim::new(norm(), mode, i % 2 == 1, tweak);
        for op in 0..ops {
            let ctx = format!("{name}: MBALLOC_SEED={seed}, op {op}");
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                sim.step(&mut rng, op);
                sim.verify(&ctx);
                sim.follow_background_writeback();
            }));
            if let Err(e) = r {
                eprintln!("failed at {ctx}");
                std::panic::resume_unwind(e);
            }
        }
        let s = sim.fs.stats();
        assert!(s.alloc_requests > 0, "{name}: seed {seed} never allocated");
        eprintln!("{name}: seed {seed}: {} NoSpace answers, {s:?}", sim.no_space);
    }
}

#[test]
fn simulation_kernel_windows() {
    run("simulation_kernel_windows", || Normalization::KernelWindows, Writeback::Explicit, |_| {});
}

#[test]
fn simulation_kernel_placement_legacy_locks() {
    // ext4's own placement of fallocate appends, under the pre-2025 locking.
    run(
        "simulation_kernel_placement_legacy_locks",
        || Normalization::KernelWindows,
        Writeback::Explicit,
        |cfg| {
            cfg.placement.stream_placement = StreamPlacement::Kernel;
            cfg.placement.concurrency = Concurrency::Legacy;
        },
    );
}

#[test]
fn simulation_kernel_profile() {
    // Every ext4-faithful behaviour at once: writeback and fallocate in
    // capped requests, flex groups, lowest-free inode numbers, ext4's close
    // and extent-tree blocks allocated in the volume.
    run(
        "simulation_kernel_profile",
        || Normalization::KernelWindows,
        Writeback::Explicit,
        |cfg| {
            kernel_profile(cfg);
            cfg.shape.flex_groups = 4;
        },
    );
}

/// Every ext4-faithful behaviour of the kernel profile on `cfg`'s volume,
/// statistics kept on.
fn kernel_profile(cfg: &mut FsConfig) {
    let k = FsConfig::kernel(cfg.shape.geometry);
    cfg.placement.tunables = Tunables { mb_stats: true, ..k.placement.tunables };
    cfg.placement.locality_groups = k.placement.locality_groups;
    cfg.placement.stream_placement = k.placement.stream_placement;
    cfg.placement.writeback_request = k.placement.writeback_request;
    cfg.placement.fallocate_request = k.placement.fallocate_request;
    cfg.behaviour.inode_numbers = k.behaviour.inode_numbers;
    cfg.behaviour.sync_order = k.behaviour.sync_order;
    cfg.behaviour.close = k.behaviour.close;
    cfg.behaviour.punch = k.behaviour.punch;
    cfg.storage.extent_tree = k.storage.extent_tree;
}

#[test]
fn simulation_lustre_table() {
    // The ldiskfs shape, scaled to 1,024-block groups.
    let table = || Normalization::Table(PreallocTable::new((2..=9).map(|k| 1 << k).collect(), 64, 256).unwrap());
    run("simulation_lustre_table", table, Writeback::Explicit, |_| {});
}

#[test]
fn simulation_background_writeback() {
    run("simulation_background_writeback", || Normalization::KernelWindows, Writeback::Background, |_| {});
}

#[test]
fn simulation_kernel_profile_on_groups_of_any_length() {
    // The kernel profile again, on 1,000-block groups (a multiple of 8, not
    // a power of two, as mkfs makes them).
    run(
        "simulation_kernel_profile_on_groups_of_any_length",
        || Normalization::KernelWindows,
        Writeback::Explicit,
        |cfg| {
            let total = cfg.shape.geometry.total_blocks();
            cfg.shape.geometry = Geometry::with_group_size(4096, 1000, total).unwrap();
            kernel_profile(cfg);
        },
    );
}
