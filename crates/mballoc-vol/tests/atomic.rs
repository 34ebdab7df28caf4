//! Every mutating call is all or nothing when the device fails under it.
//!
//! Each call runs on a volume fresh from the device (nothing cached, so
//! partial blocks must be read), once without faults to learn what it
//! does, then once for every read, write and flush it makes with that one
//! failing. A call that returns an error must leave every file, name,
//! attribute and mapping as they were; one that succeeds despite the
//! fault must have done exactly what it does without one.

use mballoc_fs::{FallocateMode, FileId};
use mballoc_vol::fault::{DeviceOp, Fault, FaultyDevice, Persistence};
use mballoc_vol::{FormatOptions, MemDevice, MountOptions, Owner, Replace, SetAttr, Volume, XattrSet};
use std::collections::BTreeMap;
use std::sync::Arc;

const BS: u64 = 1024;

/// A roomy cache, or one of two folios that already holds dirty data, so
/// that the call must write back and evict while it works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cache {
    Roomy,
    Tight,
}

fn mount_opts(cache: Cache) -> MountOptions {
    let (cache_bytes, dirty_bytes) = match cache {
        Cache::Roomy => (64 << 10, 32 << 10),
        Cache::Tight => (8 << 10, 4 << 10),
    };
    MountOptions { folio_size: 4096, commit_interval_ops: 0, cache_bytes, dirty_bytes, ..MountOptions::default() }
}

/// Root holds `a` (10,000 bytes), `b` (3,000), `e` (17,636), `d/` with
/// `c` (5,000) and a symbolic link `s`; `a` has an extended attribute.
fn image() -> Vec<u8> {
    let dev = Arc::new(MemDevice::new(8 << 20));
    let opts = FormatOptions { block_size: BS as u32, blocks_per_group: Some(2048), ..FormatOptions::default() };
    Volume::format(dev.clone(), &opts).unwrap();
    let vol = Volume::open(dev.clone(), mount_opts(Cache::Roomy)).unwrap();
    let root = vol.root();
    let fill = |name: &[u8], dir: FileId, len: usize, seed: u8| {
        let f = vol.create_at(dir, name, Owner::default()).unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        vol.write(f, 0, &data).unwrap();
        vol.close(f).unwrap();
        f
    };
    let a = fill(b"a", root, 10_000, 1);
    fill(b"b", root, 3_000, 2);
    fill(b"e", root, 17_636, 4);
    let d = vol.mkdir_at(root, b"d", Owner::default()).unwrap();
    fill(b"c", d, 5_000, 3);
    vol.symlink_at(root, b"s", b"a", Owner::default()).unwrap();
    vol.set_xattr_at(a, b"user.k", b"v", XattrSet::Any).unwrap();
    vol.unmount().unwrap();
    dev.to_bytes()
}

/// What a caller can see: per path, the mode, owner, names, extended
/// attributes, size, contents and mapping (times left out: they differ
/// run to run).
type Snapshot = BTreeMap<Vec<u8>, String>;

fn snapshot(vol: &Volume) -> Snapshot {
    let mut out = Snapshot::new();
    let mut dirs = vec![(b"/".to_vec(), vol.root())];
    while let Some((path, dir)) = dirs.pop() {
        for e in vol.dir_entries(dir).unwrap() {
            let mut p = path.clone();
            p.extend_from_slice(&e.name);
            let a = vol.attr(e.ino).unwrap();
            let mut line =
                format!("mode {:o} uid {} gid {} nlink {} xattrs {:?}", a.mode, a.uid, a.gid, a.links.len(), a.xattrs);
            if a.is_dir() {
                p.push(b'/');
                dirs.push((p.clone(), e.ino));
            } else if a.mode & mballoc_vol::S_IFMT == mballoc_vol::S_IFREG {
                let f = e.ino;
                let mut data = vec![0u8; vol.size(f).unwrap() as usize];
                vol.read(f, 0, &mut data).unwrap();
                let ext = vol.extents(f).unwrap();
                line += &format!(" size {} crc {:08x} extents {ext:?}", data.len(), crc32c::crc32c(&data));
            } else {
                line += &format!(" target {:?}", vol.link_target(e.ino).ok());
            }
            out.insert(p, line);
        }
    }
    out
}

/// Mounted, with every regular file open as a caller would have it (and,
/// with a tight cache, `d/c` partly rewritten and not yet written back).
fn mount(dev: Arc<FaultyDevice<MemDevice>>, cache: Cache) -> Arc<Volume> {
    let vol = Volume::open(dev, mount_opts(cache)).unwrap();
    for path in [&[&b"a"[..]][..], &[b"b"], &[b"e"], &[b"d", b"c"]] {
        vol.open_file(ino(&vol, path)).unwrap();
    }
    if cache == Cache::Tight {
        vol.write(ino(&vol, &[b"d", b"c"]), 100, &[0xCC; 3000]).unwrap();
    }
    vol
}

fn ino(vol: &Volume, path: &[&[u8]]) -> FileId {
    path.iter().fold(vol.root(), |dir, name| vol.lookup(dir, name).unwrap())
}

type Call = fn(&Volume) -> mballoc_vol::Result<()>;

fn calls() -> Vec<(&'static str, Call)> {
    vec![
        ("write into a partial block", |v| v.write(ino(v, &[b"a"]), 1500, &[9; 700])),
        ("write past the end", |v| v.write(ino(v, &[b"b"]), 2900, &[9; 9000])),
        ("truncate to a partial block", |v| v.truncate(ino(v, &[b"a"]), 4500)),
        ("truncate up", |v| v.truncate(ino(v, &[b"b"]), 2_000_000)),
        ("punch with partial edges", |v| v.punch_hole(ino(v, &[b"a"]), 700, 5000)),
        ("punch past the end", |v| v.punch_hole(ino(v, &[b"b"]), 1700, 90_000)),
        ("punch past the end, another folio", |v| v.punch_hole(ino(v, &[b"a"]), 1700, 90_000)),
        ("punch the middle of an unaligned file", |v| v.punch_hole(ino(v, &[b"e"]), 4000, 9214)),
        ("punch an unaligned file past its end", |v| v.punch_hole(ino(v, &[b"e"]), 8422, 20_000)),
        ("punch an unaligned file into its last block's slack", |v| v.punch_hole(ino(v, &[b"e"]), 8422, 9578)),
        ("zero a range inside", |v| v.zero_range(ino(v, &[b"e"]), 1000, 9000, FallocateMode::KeepSize)),
        ("zero a range past the end", |v| v.zero_range(ino(v, &[b"e"]), 12_000, 20_000, FallocateMode::ExtendSize)),
        ("zero a range in a hole", |v| v.zero_range(ino(v, &[b"b"]), 100_000, 8192, FallocateMode::KeepSize)),
        ("fallocate inside", |v| v.fallocate(ino(v, &[b"a"]), 0, 200_000, FallocateMode::KeepSize)),
        ("fallocate extending", |v| v.fallocate(ino(v, &[b"b"]), 5000, 20_000, FallocateMode::ExtendSize)),
        ("collapse range", |v| v.collapse_range(ino(v, &[b"a"]), 2048, 4096)),
        ("insert range", |v| v.insert_range(ino(v, &[b"a"]), 2048, 4096)),
        ("rename over a file", |v| v.rename_at(v.root(), b"b", ino(v, &[b"d"]), b"c", Replace::Allowed)),
        ("rename exchange", |v| v.rename_at(v.root(), b"a", ino(v, &[b"d"]), b"c", Replace::Exchange)),
        ("unlink", |v| v.unlink_at(v.root(), b"a")),
        ("create", |v| v.create_at(v.root(), b"new", Owner::default()).map(drop)),
        ("mkdir", |v| v.mkdir_at(ino(v, &[b"d"]), b"e", Owner::default()).map(drop)),
        ("link", |v| v.link_at(ino(v, &[b"a"]), ino(v, &[b"d"]), b"a2")),
        ("symlink", |v| v.symlink_at(v.root(), b"t", b"d/c", Owner::default()).map(drop)),
        ("set an extended attribute", |v| v.set_xattr_at(ino(v, &[b"b"]), b"user.x", &[5; 900], XattrSet::Any)),
        ("chmod", |v| v.set_attr(ino(v, &[b"b"]), SetAttr { mode: Some(0o600), ..SetAttr::default() }).map(drop)),
    ]
}

#[test]
fn every_mutating_call_is_all_or_nothing_on_a_device_error() {
    let image = image();
    let mut faults = 0;
    for (cache, (name, call)) in
        [Cache::Roomy, Cache::Tight].into_iter().flat_map(|c| calls().into_iter().map(move |x| (c, x)))
    {
        let name = format!("{name} ({cache:?} cache)");
        let clean = Arc::new(FaultyDevice::new(MemDevice::from_bytes(image.clone()), None));
        let vol = mount(clean.clone(), cache);
        let before = snapshot(&vol);
        let at_mount: Vec<u64> = [DeviceOp::Read, DeviceOp::Write, DeviceOp::Flush].map(|op| clean.calls(op)).to_vec();
        call(&vol).unwrap_or_else(|e| panic!("{name}: {e}"));
        let made: Vec<u64> = [DeviceOp::Read, DeviceOp::Write, DeviceOp::Flush]
            .iter()
            .enumerate()
            .map(|(i, &op)| clean.calls(op) - at_mount[i])
            .collect();
        let after = snapshot(&vol);
        assert_ne!(before, after, "{name} changes something");
        for (i, op) in [DeviceOp::Read, DeviceOp::Write, DeviceOp::Flush].into_iter().enumerate() {
            for k in 1..=made[i] {
                let dev = Arc::new(FaultyDevice::new(MemDevice::from_bytes(image.clone()), None));
                let vol = mount(dev.clone(), cache);
                dev.arm(Fault::eio(op, dev.calls(op) + k, Persistence::Once));
                let result = call(&vol);
                dev.heal();
                let what = format!("{name}, {op:?} {k} of {} failing", made[i]);
                match result {
                    Err(e) => {
                        assert!(dev.tripped(), "{what}: failed without the fault: {e}");
                        assert!(matches!(e, mballoc_vol::VolError::Io { .. }), "{what}: {e}");
                        faults += 1;
                        let now = snapshot(&vol);
                        for (k, v) in &now {
                            if before.get(k) != Some(v) {
                                eprintln!("{what}: {k:?}\n  was {:?}\n  now {v}", before.get(k));
                            }
                        }
                        assert_eq!(now, before, "{what}: the failed call changed the volume ({e})");
                    }
                    Ok(()) => assert_eq!(snapshot(&vol), after, "{what}: succeeded but did something else"),
                }
            }
        }
    }
    eprintln!("{faults} failed calls, each left the volume as it was");
    assert!(faults > 0);
}
