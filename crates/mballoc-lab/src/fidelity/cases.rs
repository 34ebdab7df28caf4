//! The built-in fidelity cases: the shapes that decide where ext4 puts
//! data (small files and deletes, interleaved appends, holes punched and
//! reused, random writes into a sparse file, fallocate to 85 % and back,
//! a nearly full volume, unwritten extents written into), at 4 KiB and
//! 1 KiB blocks, plus one at 64 KiB blocks that kernels with a 4 KiB page
//! refuse to mount before 6.19. Each is a seeded list of operations; a
//! user's own workload or trace becomes a case with [`Case::from_trace`].
//!
//! The engine side names files through ext4's directories
//! ([`mballoc_fs::Ext4Namespace`]), so a case may make directories and
//! grow them; the regression case `directories-1k` does. Other
//! configurations, bigalloc volumes among them, follow in `configured`
//! and `bigalloc_cases`.

use crate::error::LabError;
use crate::trace::Trace;
use crate::workload::{Interleave, Op, OpKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One fidelity case: a volume and the operations to run on it.
#[derive(Debug, Clone)]
pub struct Case {
    /// Name in reports.
    pub name: String,
    /// What it exercises, in a line.
    pub about: String,
    /// The operations (streams, issued in turn), the volume size and
    /// block size.
    pub trace: Trace,
    /// The kernel's mkfs arguments, mount options and knobs, which the
    /// engine follows.
    pub ext4: super::config::Ext4Config,
    /// An ext4 image both sides start from instead of a fresh mkfs.
    pub image: Option<std::path::PathBuf>,
}

impl Case {
    /// A case from a workload's trace.
    pub fn from_trace(name: &str, trace: Trace) -> Case {
        Case {
            name: name.to_string(),
            about: "a workload of the user's".into(),
            trace,
            ext4: Default::default(),
            image: None,
        }
    }

    /// Refuse what the comparison cannot follow yet: job ordering needs
    /// the threaded runner while a case runs its streams in turn.
    pub fn check_ops(&self) -> Result<(), LabError> {
        let bad = self.trace.streams.iter().flatten().find(|op| matches!(op.kind, OpKind::Wait | OpKind::Signal));
        match bad {
            Some(op) => Err(LabError::Invalid(format!(
                "{}: lab fidelity does not compare workloads that {} (lab workload runs them on every backend)",
                self.name,
                op.kind.name()
            ))),
            None => Ok(()),
        }
    }
}

/// Builds one case's operations.
pub(super) struct Ops {
    files: Vec<String>,
    ops: Vec<Op>,
}

impl Ops {
    pub(super) fn new() -> Ops {
        Ops { files: Vec::new(), ops: Vec::new() }
    }

    fn slot(&mut self, name: &str) -> u32 {
        match self.files.iter().position(|f| f == name) {
            Some(i) => i as u32,
            None => {
                self.files.push(name.to_string());
                (self.files.len() - 1) as u32
            }
        }
    }

    fn op(&mut self, kind: OpKind, name: &str, offset: u64, len: u64) -> &mut Ops {
        let file = self.slot(name);
        self.ops.push(Op { kind, file, offset, len, to: 0 });
        self
    }

    pub(super) fn create(&mut self, f: &str) -> &mut Ops {
        self.op(OpKind::Create, f, 0, 0)
    }
    pub(super) fn write(&mut self, f: &str, offset: u64, len: u64) -> &mut Ops {
        self.op(OpKind::Write, f, offset, len)
    }
    pub(super) fn fallocate(&mut self, f: &str, offset: u64, len: u64) -> &mut Ops {
        self.op(OpKind::Fallocate, f, offset, len)
    }
    pub(super) fn fallocate_keep(&mut self, f: &str, offset: u64, len: u64) -> &mut Ops {
        self.op(OpKind::FallocateKeepSize, f, offset, len)
    }
    pub(super) fn punch(&mut self, f: &str, offset: u64, len: u64) -> &mut Ops {
        self.op(OpKind::Punch, f, offset, len)
    }
    pub(super) fn truncate(&mut self, f: &str, size: u64) -> &mut Ops {
        self.op(OpKind::Truncate, f, size, 0)
    }
    pub(super) fn fsync(&mut self, f: &str) -> &mut Ops {
        self.op(OpKind::Fsync, f, 0, 0)
    }
    pub(super) fn close(&mut self, f: &str) -> &mut Ops {
        self.op(OpKind::Close, f, 0, 0)
    }
    pub(super) fn unlink(&mut self, f: &str) -> &mut Ops {
        self.op(OpKind::Unlink, f, 0, 0)
    }
    pub(super) fn mkdir(&mut self, d: &str) -> &mut Ops {
        self.op(OpKind::Mkdir, d, 0, 0)
    }
    /// `from` renamed (or, with `OpKind::Link`, linked) to `to`.
    pub(super) fn to(&mut self, kind: OpKind, from: &str, to: &str) -> &mut Ops {
        let to = self.slot(to);
        self.op(kind, from, 0, 0);
        self.ops.last_mut().expect("just pushed").to = to;
        self
    }

    pub(super) fn case(self, name: &str, about: &str, volume: u64, block_size: u32) -> Case {
        Case {
            name: name.into(),
            about: about.into(),
            trace: Trace {
                volume,
                block_size,
                interleave: Interleave::InTurn,
                files: self.files,
                streams: vec![self.ops],
            },
            ext4: Default::default(),
            image: None,
        }
    }
}

pub(super) const KIB: u64 = 1 << 10;
pub(super) const MIB: u64 = 1 << 20;
pub(super) const GIB: u64 = 1 << 30;

/// Small files written and closed, some deleted, more written: the
/// locality group and its preallocation.
pub(super) fn small_files(name: &str, block_size: u32, volume: u64, count: usize, seed: u64) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut o = Ops::new();
    let mut live = Vec::new();
    for i in 0..count {
        let f = format!("s{i}");
        let len = rng.gen_range(1..=60) * KIB + rng.gen_range(0..KIB);
        o.create(&f).write(&f, 0, len);
        if i % 16 == 15 {
            o.fsync(&f);
        }
        o.close(&f);
        live.push(f);
    }
    let mut k = 0;
    live.retain(|f| {
        k += 1;
        if k % 3 == 0 {
            o.unlink(f);
            false
        } else {
            true
        }
    });
    if let Some(f) = live.first().cloned() {
        o.create(&f).write(&f, 0, 3 * KIB).fsync(&f).close(&f);
    }
    for i in 0..count / 4 {
        let f = format!("t{i}");
        let len = rng.gen_range(1..=48) * KIB;
        o.create(&f).write(&f, 0, len).close(&f);
    }
    o.case(name, "small files written and closed, a third deleted, more written", volume, block_size)
}

/// Files appended in turn, 64 KiB at a time: streams, inode
/// preallocations and the stream goals.
pub(super) fn interleaved(rounds: u64) -> Case {
    let mut o = Ops::new();
    let names = ["a", "b", "c", "d"];
    for f in names {
        o.create(f);
    }
    for r in 0..rounds {
        for f in names {
            o.write(f, r * 64 * KIB, 64 * KIB);
        }
        if r % 16 == 15 {
            for f in names {
                o.fsync(f);
            }
        }
    }
    for f in names {
        o.fsync(f).close(f);
    }
    o.case("interleaved-appends", "four files appended 64 KiB at a time in turn", 4 * GIB, 4096)
}

/// A large file written, holes punched in it, then new files that fall
/// into the holes.
pub(super) fn punched(size: u64, files: usize) -> Case {
    let mut o = Ops::new();
    o.create("big").write("big", 0, size).fsync("big");
    let mut at = 0;
    while at + 64 * KIB <= size {
        o.punch("big", at + 256 * KIB, 64 * KIB);
        at += 512 * KIB;
    }
    o.fsync("big");
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for i in 0..files {
        let f = format!("h{i}");
        let len = rng.gen_range(10..=50) * 4 * KIB;
        o.create(&f).write(&f, 0, len).fsync(&f).close(&f);
    }
    o.close("big");
    o.case("punched-reuse", "a large file punched every 512 KiB, then new files in its holes", 4 * GIB, 4096)
}

/// Punches at and past a file's end, and a punch inside one block, each
/// followed by writes that show what the punch left: ext4's rules
/// (`ext4_punch_hole`: nothing at or past the size, an end past it cut to
/// the page after it, preallocations discarded only when whole blocks go).
/// The regression case of `PunchBehaviour::Ext4`.
fn punch_edges() -> Case {
    let mut o = Ops::new();
    // Blocks fallocated past the size, then punches that start at the size
    // and reach past it: the blocks out there stay.
    o.create("edge").fallocate_keep("edge", 0, MIB).write("edge", 0, 64 * KIB).fsync("edge");
    o.punch("edge", 64 * KIB, 256 * KIB).punch("edge", 32 * KIB, MIB).fsync("edge");
    // A file with a preallocation window, punched inside one block: the
    // window stays, and the next append is served from it.
    o.create("window").write("window", 0, 256 * KIB).fsync("window");
    o.punch("window", 8 * KIB + 100, 1000).write("window", 256 * KIB, 64 * KIB).fsync("window");
    // The same with a whole block punched: the window goes.
    o.create("whole").write("whole", 0, 256 * KIB).fsync("whole");
    o.punch("whole", 8 * KIB, 4 * KIB).write("whole", 256 * KIB, 64 * KIB).fsync("whole");
    // New files fall into whatever the punches gave back.
    for i in 0..8 {
        let f = format!("after{i}");
        o.create(&f).write(&f, 0, 96 * KIB).fsync(&f).close(&f);
    }
    for f in ["edge", "window", "whole"] {
        o.close(f);
    }
    o.case(
        "punch-edges",
        "punches at and past the size and inside one block, then writes that show what stayed",
        GIB,
        4096,
    )
}

/// Random 4 KiB writes into a sparse file.
fn sparse_random(writes: usize) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let mut o = Ops::new();
    o.create("sparse");
    for i in 0..writes {
        let block = rng.gen_range(0..65_536u64);
        o.write("sparse", block * 4 * KIB, 4 * KIB);
        if i % 100 == 99 {
            o.fsync("sparse");
        }
    }
    o.fsync("sparse").close("sparse");
    o.case("sparse-random", "random 4 KiB writes into a 256 MiB sparse file", 4 * GIB, 4096)
}

/// fallocate files until the volume is 85 % full, delete every other one,
/// then fill again with files of another size.
fn fallocate_fill(volume: u64, first: u64, second: u64) -> Case {
    let mut o = Ops::new();
    let target = volume * 85 / 100;
    let mut used = volume / 20; // room for metadata
    let mut names = Vec::new();
    let mut i = 0;
    while used + first <= target {
        let f = format!("f{i}");
        o.create(&f).fallocate(&f, 0, first).close(&f);
        names.push(f);
        used += first;
        i += 1;
    }
    for (k, f) in names.iter().enumerate() {
        if k % 2 == 1 {
            o.unlink(f);
            used -= first;
        }
    }
    // An fsync commits the unlinks: their blocks are free again.
    o.create("commit").fsync("commit").close("commit");
    let mut j = 0;
    while used + second <= target {
        let f = format!("g{j}");
        o.create(&f).fallocate(&f, 0, second).close(&f);
        used += second;
        j += 1;
    }
    o.case("fallocate-fill", "fallocate to 85 %, delete every other file, fill again", volume, 4096)
}

/// A volume written to 97 %, files deleted here and there, written again.
pub(super) fn near_full(volume: u64) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let mut o = Ops::new();
    let target = volume * 97 / 100;
    let mut used = volume / 20;
    let mut live: Vec<(String, u64)> = Vec::new();
    let mut i = 0;
    while used < target {
        let len = rng.gen_range(1..=8) * MIB;
        let f = format!("n{i}");
        o.create(&f).write(&f, 0, len).fsync(&f).close(&f);
        live.push((f, len));
        used += len;
        i += 1;
    }
    for _ in 0..live.len() / 4 {
        let k = rng.gen_range(0..live.len());
        let (f, len) = live.swap_remove(k);
        o.unlink(&f);
        used -= len;
    }
    o.create("c").fsync("c").close("c");
    while used + MIB < target {
        let len = rng.gen_range(1..=4) * MIB;
        let f = format!("m{i}");
        o.create(&f).write(&f, 0, len).fsync(&f).close(&f);
        used += len;
        i += 1;
    }
    o.case("near-full", "written to 97 %, a quarter deleted, written again", volume, 4096)
}

/// Unwritten extents: fallocate, write into parts, punch, truncate.
fn fallocate_mix() -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let mut o = Ops::new();
    for i in 0..6 {
        let f = format!("u{i}");
        o.create(&f).fallocate_keep(&f, 0, 32 * MIB);
        for _ in 0..12 {
            let at = rng.gen_range(0..512u64) * 64 * KIB;
            o.write(&f, at, 64 * KIB);
        }
        o.fsync(&f);
        o.punch(&f, 8 * MIB, 4 * MIB).truncate(&f, 20 * MIB).fsync(&f).close(&f);
    }
    o.case("fallocate-mix", "fallocate, writes into unwritten extents, punch, truncate", 4 * GIB, 4096)
}

/// Rounds of files of mixed sizes written and a random share deleted: the
/// passes past CR_POWER2_ALIGNED on a volume that fills and frees.
fn delete_refill(volume: u64, rounds: usize) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let mut o = Ops::new();
    let mut live: Vec<(String, u64)> = Vec::new();
    let mut used = volume / 20;
    let mut i = 0;
    for _ in 0..rounds {
        while used < volume * 9 / 10 && live.len() < 200 {
            let len = match rng.gen_range(0..10) {
                0..=4 => rng.gen_range(1..=64) * 4 * KIB,
                5..=8 => rng.gen_range(1..=16) * MIB,
                _ => rng.gen_range(16..=64) * MIB,
            };
            let f = format!("r{i}");
            o.create(&f).write(&f, 0, len).fsync(&f).close(&f);
            live.push((f, len));
            used += len;
            i += 1;
        }
        for _ in 0..live.len() / 2 {
            let (f, len) = live.swap_remove(rng.gen_range(0..live.len()));
            o.unlink(&f);
            used -= len;
        }
        o.create("c").fsync("c").close("c");
    }
    o.case("delete-refill", "files of mixed sizes to 90 %, half deleted, filled again", volume, 4096)
}

/// Files rewritten in place: truncated to zero and written again (ext4
/// writes them back at close), shrunk, grown.
pub(super) fn truncate_rewrite(rounds: usize) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let mut o = Ops::new();
    let names: Vec<String> = (0..12).map(|i| format!("w{i}")).collect();
    for f in &names {
        o.create(f).write(f, 0, rng.gen_range(1..=256) * 4 * KIB).close(f);
    }
    for _ in 0..rounds {
        let f = &names[rng.gen_range(0..names.len())];
        match rng.gen_range(0..3) {
            0 => {
                // creat() over the file: truncated to zero, written, closed.
                o.create(f).write(f, 0, rng.gen_range(1..=256) * 4 * KIB).close(f);
            }
            1 => {
                o.create(f).truncate(f, rng.gen_range(0..=64) * 4 * KIB).close(f);
            }
            _ => {
                o.create(f).write(f, 0, rng.gen_range(1..=64) * 4 * KIB).fsync(f).close(f);
            }
        }
    }
    o.case("truncate-rewrite", "files truncated to zero and rewritten, shrunk and grown", 4 * GIB, 4096)
}

/// Small appends to several files in turn, each fsynced: locality group
/// while small, then streams with inode preallocations.
fn small_appends(rounds: u64) -> Case {
    let mut o = Ops::new();
    let names = ["p", "q", "r", "s", "t", "u"];
    for f in names {
        o.create(f);
    }
    for r in 0..rounds {
        for f in names {
            o.write(f, r * 4 * KIB, 4 * KIB).fsync(f);
        }
    }
    for f in names {
        o.close(f);
    }
    o.case("small-appends", "six files appended 4 KiB at a time in turn, each append fsynced", 4 * GIB, 4096)
}

/// Random writes into a sparse file on 1 KiB blocks: 84 entries a leaf,
/// so the tree splits and grows deeper.
fn sparse_random_1k(writes: usize) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(47);
    let mut o = Ops::new();
    o.create("k");
    for i in 0..writes {
        let block = rng.gen_range(0..200_000u64);
        o.write("k", block * KIB, KIB);
        if i % 50 == 49 {
            o.fsync("k");
        }
    }
    o.punch("k", 20 * MIB, 40 * MIB).fsync("k").close("k");
    o.case("sparse-random-1k", "random 1 KiB writes into a sparse file, then a punch: a deep tree", 512 * MIB, 1024)
}

/// Many writes into an fallocated file: unwritten extents split, merge,
/// and their leaves come and go.
fn unwritten_writes(writes: usize) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(53);
    let mut o = Ops::new();
    o.create("v").fallocate_keep("v", 0, 128 * MIB);
    for i in 0..writes {
        let at = rng.gen_range(0..32_768u64) * 4 * KIB;
        o.write("v", at, rng.gen_range(1..=4) * 4 * KIB);
        if i % 40 == 39 {
            o.fsync("v");
        }
    }
    o.fsync("v").close("v");
    o.case("unwritten-writes", "writes scattered over a 128 MiB fallocated file", 4 * GIB, 4096)
}

/// Free space left in 4 MiB holes, then 12 MiB files. At `fill` percent of the volume the largest writes find no run as long
/// as they ask and are allocated in part (which the kernel profile does not
/// follow exactly: docs/PROFILES.md).
pub(super) fn fragmented_free(volume: u64, fill: u64, big: usize) -> Case {
    let mut o = Ops::new();
    // 4 MiB files to delete between 24 MiB files to keep (few names: the
    // root directory stays one block).
    let pairs = (volume * fill / 100 / (28 * MIB)) as usize;
    for i in 0..pairs {
        let (a, b) = (format!("x{i}"), format!("k{i}"));
        o.create(&a).fallocate(&a, 0, 4 * MIB).close(&a);
        o.create(&b).fallocate(&b, 0, 24 * MIB).close(&b);
    }
    for i in 0..pairs {
        o.unlink(&format!("x{i}"));
    }
    o.create("c").fsync("c").close("c");
    for i in 0..big {
        let f = format!("y{i}");
        o.create(&f).write(&f, 0, 12 * MIB).fsync(&f).close(&f);
    }
    o.case("fragmented-free", "free space in 4 MiB holes, then 12 MiB files: partial allocations", volume, 4096)
}

/// The built-in cases named in `only` (all of them when it is empty); a
/// name that is no built-in case is an error listing the cases.
pub fn builtin_named(quick: bool, only: &[String]) -> Result<Vec<Case>, LabError> {
    let all = builtin(quick);
    if let Some(n) = only.iter().find(|n| !all.iter().any(|c| &c.name == *n)) {
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        return Err(LabError::Invalid(format!("no built-in case {n:?}; the cases are {}", names.join(", "))));
    }
    Ok(all.into_iter().filter(|c| only.is_empty() || only.contains(&c.name)).collect())
}

/// The built-in set; `quick` keeps each case small enough for CI.
pub fn builtin(quick: bool) -> Vec<Case> {
    let q = |full: u64, small: u64| if quick { small } else { full };
    let mut v = vec![
        small_files("small-files", 4096, 2 * GIB, q(240, 60) as usize, 5),
        interleaved(q(160, 32)),
        punched(q(96, 24) * MIB, q(40, 12) as usize),
        sparse_random(q(1500, 300) as usize),
        fallocate_fill(q(2, 1) * GIB, 24 * MIB, 10 * MIB),
        near_full(q(1, 1) * GIB / q(1, 2)),
        fallocate_mix(),
        small_files("small-files-1k", 1024, 512 * MIB, q(64, 32) as usize, 7),
        delete_refill(q(4, 1) * GIB, q(4, 2) as usize),
        truncate_rewrite(q(300, 60) as usize),
        small_appends(q(200, 40)),
        sparse_random_1k(q(3000, 400) as usize),
        unwritten_writes(q(800, 120) as usize),
        fragmented_free(q(4, 2) * GIB, q(95, 90), q(40, 10) as usize),
    ];
    v.push(punch_edges());
    v.push(small_files("small-files-64k", 65536, 4 * GIB, 16, 9));
    v.extend(super::configured::cases(quick));
    v.extend(super::bigalloc_cases::cases(quick));
    v
}
