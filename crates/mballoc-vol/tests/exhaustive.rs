//! Bounded exhaustive crash testing: every workload of up to three
//! operations from a fixed alphabet (create, write, fallocate, punch,
//! truncate, rename, link, unlink, mkdir, fsync, sync over a few sizes
//! and offsets), run on a recording device and crashed at every point of
//! every flush interval: each prefix in order, each write torn, and the
//! writes since the last flush reordered (each one lost while the others
//! landed, each one alone). Every crash state must mount, check clean,
//! and hold what was acknowledged:
//!
//! * the names as of the last fsync or sync that reached the disk, unless
//!   a later operation that changes names had begun;
//! * each file's bytes as of its last fsync or sync that reached the
//!   disk, unless a later operation that changes them had begun.
//!
//! `fdatasync` is `fsync` on this volume (both commit the journal), so it
//! is not a separate letter.
//!
//! Size knobs: `MBALLOC_EXHAUSTIVE_OPS` (longest workload, default 3: all
//! 4,368 workloads of one to three operations, a few seconds) and
//! `MBALLOC_EXHAUSTIVE_SAMPLE` (workloads one operation longer drawn at
//! random besides, default 0). `MBALLOC_EXHAUSTIVE_OPS=4` runs all 69,904
//! of up to four. The seed: `MBALLOC_EXHAUSTIVE_SEED`.

use mballoc_fs::{FallocateMode, FileId};
use mballoc_vol::crash::RecordingDevice;
use mballoc_vol::{check, FormatOptions, MemDevice, MountOptions, Owner, Repair, Replace, Volume};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

fn mount_opts() -> MountOptions {
    MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    CreateG,
    WriteF { off: u64, len: usize },
    WriteG,
    Fallocate,
    Punch,
    Truncate(u64),
    RenameFToH,
    RenameGOverF,
    LinkF,
    UnlinkF,
    Mkdir,
    FsyncF,
    FsyncG,
    Sync,
}

const ALPHABET: [Op; 16] = [
    Op::CreateG,
    Op::WriteF { off: 0, len: 100 },
    Op::WriteF { off: 3000, len: 5000 },
    Op::WriteG,
    Op::Fallocate,
    Op::Punch,
    Op::Truncate(2000),
    Op::Truncate(20_000),
    Op::RenameFToH,
    Op::RenameGOverF,
    Op::LinkF,
    Op::UnlinkF,
    Op::Mkdir,
    Op::FsyncF,
    Op::FsyncG,
    Op::Sync,
];

/// Path → (inode, bytes of a regular file).
type Snapshot = BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)>;

fn snapshot(vol: &Volume) -> Snapshot {
    let mut out = Snapshot::new();
    let mut dirs = vec![(Vec::new(), vol.root())];
    while let Some((path, dir)) = dirs.pop() {
        for e in vol.dir_entries(dir).unwrap() {
            let mut p = path.clone();
            p.push(b'/');
            p.extend_from_slice(&e.name);
            let a = vol.attr(e.ino).unwrap();
            let data = if a.is_dir() {
                dirs.push((p.clone(), e.ino));
                None
            } else {
                let f = e.ino;
                let mut b = vec![0u8; vol.size(f).unwrap() as usize];
                vol.read(f, 0, &mut b).unwrap();
                Some(b)
            };
            out.insert(p, (e.ino.0, data));
        }
    }
    out
}

/// `/f` (6,000 bytes) and `/d`, unmounted.
fn base() -> Vec<u8> {
    let dev = Arc::new(MemDevice::new(1 << 20));
    let opts = FormatOptions {
        block_size: 1024,
        blocks_per_group: Some(1024),
        log_blocks: Some(48),
        inode_count: Some(16),
        tree_blocks: Some(16),
    };
    Volume::format(dev.clone(), &opts).unwrap();
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let f = vol.create_at(vol.root(), b"f", Owner::default()).unwrap();
    vol.write(f, 0, &[0xF0; 6000]).unwrap();
    vol.close(f).unwrap();
    vol.mkdir_at(vol.root(), b"d", Owner::default()).unwrap();
    vol.unmount().unwrap();
    dev.to_bytes()
}

fn path_ino(vol: &Volume, path: &[&[u8]]) -> Option<FileId> {
    path.iter().try_fold(vol.root(), |dir, name| vol.lookup(dir, name).ok())
}

/// Run `op`; an error (a missing file, a name taken) is part of the
/// workload, as it would be for a program. Whether it did anything.
fn apply(vol: &Volume, op: Op, k: usize, open: &mut Vec<FileId>) -> bool {
    let root = vol.root();
    let file = |path: &[&[u8]], open: &mut Vec<FileId>| {
        let f = path_ino(vol, path)?;
        if !open.contains(&f) {
            vol.open_file(f).ok()?;
            open.push(f);
        }
        Some(f)
    };
    let pattern = |len: usize| vec![0x10 + k as u8; len];
    let missing = Err(mballoc_vol::VolError::NoInode(0));
    let done = match op {
        Op::CreateG => vol.create_at(root, b"g", Owner::default()).map(|g| open.push(g)),
        Op::WriteF { off, len } => file(&[b"f"], open).map_or(missing, |f| vol.write(f, off, &pattern(len))),
        Op::WriteG => file(&[b"g"], open).map_or(missing, |g| vol.write(g, 0, &pattern(5000))),
        Op::Fallocate => file(&[b"f"], open).map_or(missing, |f| vol.fallocate(f, 0, 16_384, FallocateMode::KeepSize)),
        Op::Punch => file(&[b"f"], open).map_or(missing, |f| vol.punch_hole(f, 1000, 4000)),
        Op::Truncate(n) => file(&[b"f"], open).map_or(missing, |f| vol.truncate(f, n)),
        Op::RenameFToH => vol.rename_at(root, b"f", path_ino(vol, &[b"d"]).unwrap(), b"h", Replace::Allowed),
        Op::RenameGOverF => vol.rename_at(root, b"g", root, b"f", Replace::Allowed),
        Op::LinkF => match path_ino(vol, &[b"f"]) {
            Some(f) => vol.link_at(f, path_ino(vol, &[b"d"]).unwrap(), b"l"),
            None => missing,
        },
        Op::UnlinkF => vol.unlink_at(root, b"f"),
        Op::Mkdir => vol.mkdir_at(path_ino(vol, &[b"d"]).unwrap(), b"e", Owner::default()).map(drop),
        Op::FsyncF => file(&[b"f"], open).map_or(missing, |f| vol.fsync(f)),
        Op::FsyncG => file(&[b"g"], open).map_or(missing, |g| vol.fsync(g)),
        Op::Sync => vol.sync(),
    };
    done.is_ok()
}

/// One run: the device, per operation the events before and after it,
/// and the volume as a program saw it after each (index 0: before any).
struct Run {
    dev: RecordingDevice,
    spans: Vec<(usize, usize)>,
    /// Whether each operation succeeded (a failed fsync acknowledges
    /// nothing).
    ok: Vec<bool>,
    seen: Vec<Snapshot>,
}

fn run(image: &[u8], ops: &[Op]) -> Run {
    let dev = Arc::new(RecordingDevice::new(image.to_vec()));
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let mut open = Vec::new();
    let mut spans = Vec::new();
    let mut ok = Vec::new();
    let mut seen = vec![snapshot(&vol)];
    for (k, &op) in ops.iter().enumerate() {
        let start = dev.events();
        ok.push(apply(&vol, op, k, &mut open));
        spans.push((start, dev.events()));
        seen.push(snapshot(&vol));
    }
    vol.abandon(); // the crash
    let dev = Arc::try_unwrap(dev).unwrap_or_else(|_| panic!("the volume is gone"));
    Run { dev, spans, ok, seen }
}

/// Check a crash state in which every event before `durable` landed and
/// events up to `maybe` may have.
fn verify(r: &Run, ops: &[Op], image: Vec<u8>, durable: usize, maybe: usize) -> Result<(), String> {
    let dev = Arc::new(MemDevice::from_bytes(image));
    let vol = Volume::open(dev.clone(), mount_opts()).map_err(|e| format!("mount: {e}"))?;
    let got = snapshot(&vol);
    vol.unmount().map_err(|e| format!("unmount: {e}"))?;
    let c = check(&*dev, Repair::No).map_err(|e| format!("check: {e}"))?;
    if !c.is_clean() || c.pending_transactions > 0 {
        return Err(format!("after the mount, check: {c:?}"));
    }
    let acked = |i: usize| r.ok[i] && r.spans[i].1 <= durable;
    let begun = |j: usize| r.spans[j].0 < maybe;
    let names = |s: &Snapshot| s.iter().map(|(p, (ino, _))| (p.clone(), *ino)).collect::<BTreeMap<_, _>>();
    // Names: as of the last fsync or sync that reached the disk.
    let last = (0..ops.len()).rev().find(|&i| matches!(ops[i], Op::FsyncF | Op::FsyncG | Op::Sync) && acked(i));
    let from = last.map_or(0, |i| i + 1);
    let renamed_later = (from..ops.len()).any(|j| begun(j) && names(&r.seen[j]) != names(&r.seen[j + 1]));
    if !renamed_later && names(&got) != names(&r.seen[from]) {
        return Err(format!("names {:?}, acknowledged {:?}", names(&got), names(&r.seen[from])));
    }
    // Bytes: per file, as of its last fsync or sync that reached the disk.
    let content = |s: &Snapshot, ino: u64| s.values().find(|(i, _)| *i == ino).and_then(|(_, d)| d.clone());
    for (path, (ino, data)) in &got {
        let Some(data) = data else { continue };
        let synced = (0..ops.len()).rev().find(|&i| {
            acked(i)
                && match ops[i] {
                    Op::Sync => true,
                    Op::FsyncF => r.seen[i].get(&b"/f"[..]).is_some_and(|(x, _)| x == ino),
                    Op::FsyncG => r.seen[i].get(&b"/g"[..]).is_some_and(|(x, _)| x == ino),
                    _ => false,
                }
        });
        let from = synced.map_or(0, |i| i + 1);
        if synced.is_none() && !r.seen[0].values().any(|(i, _)| i == ino) {
            continue; // made after the last acknowledgement: anything goes
        }
        let changed_later =
            (from..ops.len()).any(|j| begun(j) && content(&r.seen[j], *ino) != content(&r.seen[j + 1], *ino));
        if changed_later {
            continue;
        }
        if let Some(want) = content(&r.seen[from], *ino) {
            if *data != want {
                let diff = data.iter().zip(&want).position(|(a, b)| a != b);
                return Err(format!(
                    "{}: {} bytes, acknowledged {} (first difference at {diff:?})",
                    String::from_utf8_lossy(path),
                    data.len(),
                    want.len()
                ));
            }
        }
    }
    Ok(())
}

/// Every crash state of `r`; returns how many were checked.
fn crash_everywhere(r: &Run, ops: &[Op], base: &[u8]) -> Result<usize, String> {
    let n = r.dev.events();
    let flushes: Vec<usize> = (0..n).filter(|&i| r.dev.sectors(i) == 0).collect();
    let mut starts = vec![0];
    starts.extend(flushes.iter().map(|&f| f + 1));
    let mut states = 0;
    let mut prefix = base.to_vec();
    for (e, &a) in starts.iter().enumerate() {
        if a > n {
            break;
        }
        let b = flushes.get(e).copied().unwrap_or(n);
        // Everything before the interval landed.
        if e > 0 {
            r.dev.apply(&mut prefix, starts[e - 1], a);
        }
        let writes: Vec<usize> = (a..b).collect();
        let mut check_state = |image: Vec<u8>, what: &str| -> Result<(), String> {
            states += 1;
            verify(r, ops, image, a, b).map_err(|err| format!("{what} (events {a}..{b} of {n}): {err}"))
        };
        for p in a..=b {
            let mut img = prefix.clone();
            r.dev.apply(&mut img, a, p);
            check_state(img, &format!("in order through event {p}"))?;
            if p < b && r.dev.sectors(p) > 1 {
                let mut torn = prefix.clone();
                r.dev.apply(&mut torn, a, p);
                r.dev.tear(&mut torn, p, r.dev.sectors(p) / 2);
                check_state(torn, &format!("event {p} torn"))?;
            }
        }
        if writes.len() > 1 {
            for &w in &writes {
                let mut without = prefix.clone();
                let mut alone = prefix.clone();
                for &x in &writes {
                    if x != w {
                        r.dev.apply(&mut without, x, x + 1);
                    }
                }
                r.dev.apply(&mut alone, w, w + 1);
                check_state(without, &format!("event {w} lost, the rest landed"))?;
                check_state(alone, &format!("event {w} alone landed"))?;
            }
        }
    }
    Ok(states)
}

#[test]
fn every_short_workload_survives_every_crash() {
    let depth = mballoc_testkit::knob("MBALLOC_EXHAUSTIVE_OPS", 3) as usize;
    let sample = mballoc_testkit::knob("MBALLOC_EXHAUSTIVE_SAMPLE", 0) as usize;
    let seed = mballoc_testkit::knob("MBALLOC_EXHAUSTIVE_SEED", 0xE4);
    let base = base();
    let mut workloads: Vec<Vec<Op>> = Vec::new();
    let mut level: Vec<Vec<Op>> = vec![vec![]];
    for len in 1..=depth + usize::from(sample > 0) {
        level = level.iter().flat_map(|w| ALPHABET.iter().map(move |&op| [w.clone(), vec![op]].concat())).collect();
        if len <= depth {
            workloads.extend(level.iter().cloned());
        } else {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            workloads.extend(level.choose_multiple(&mut rng, sample).cloned());
        }
    }
    let mut states = 0;
    for ops in &workloads {
        let r = run(&base, ops);
        states += crash_everywhere(&r, ops, &base)
            .unwrap_or_else(|e| panic!("{ops:?} (MBALLOC_EXHAUSTIVE_SEED={seed}): {e}"));
    }
    eprintln!("{} workloads, {states} crash states, every one recovered what was acknowledged", workloads.len());
}
