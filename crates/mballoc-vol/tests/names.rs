//! The directory tree: the operations and their errors, persistence across
//! unmount and crash, and a crash at every device event of a seeded run of
//! namespace operations, after which the tree is exactly the one of the
//! last sync or of the sync in flight.
//!
//! Size knob: `MBALLOC_NAMES_OPS` (operations, default 120), seed
//! `MBALLOC_NAMES_SEED`.

use mballoc_vol::crash::RecordingDevice;
use mballoc_vol::{
    check, FileId, FormatOptions, MemDevice, MountOptions, Owner, Repair, Replace, SetAttr, VolError, Volume, XattrSet,
    ROOT_INO,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

fn format_opts() -> FormatOptions {
    FormatOptions {
        block_size: 1024,
        blocks_per_group: Some(1024),
        log_blocks: Some(24),
        inode_count: Some(64),
        tree_blocks: Some(48),
    }
}

fn mount_opts() -> MountOptions {
    MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() }
}

fn fresh() -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(4 << 20));
    Volume::format(dev.clone(), &format_opts()).unwrap();
    dev
}

/// Every path in the volume, with its kind and (for anything but a
/// directory) its inode, contents, link target and extended attributes.
fn paths(vol: &Volume) -> BTreeMap<String, Option<Vec<u8>>> {
    fn walk(vol: &Volume, dir: FileId, prefix: &str, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        for e in vol.dir_entries(dir).unwrap() {
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
            if e.is_dir {
                out.insert(path.clone(), None);
                walk(vol, e.ino, &path, out);
            } else {
                let f = e.ino;
                let mut data = vec![0u8; vol.size(f).unwrap() as usize];
                vol.read(f, 0, &mut data).unwrap();
                let a = vol.attr(e.ino).unwrap();
                let mut sig = format!("{}:{:o}:{}:", e.ino.0, a.mode, a.links.len()).into_bytes();
                sig.extend_from_slice(&data);
                sig.extend_from_slice(&a.target);
                for (k, v) in &a.xattrs {
                    sig.extend_from_slice(k);
                    sig.extend_from_slice(v);
                }
                out.insert(path, Some(sig));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(vol, FileId(ROOT_INO), "", &mut out);
    out
}

#[test]
fn operations_and_their_errors() {
    let dev = fresh();
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let d = vol.mkdir_at(FileId(ROOT_INO), b"d", Owner { mode: 0o750, umask: 0, uid: 5, gid: 6 }).unwrap();
    let f = vol.create_at(d, b"f", Owner::default()).unwrap();
    vol.write(f, 0, b"hello").unwrap();
    assert_eq!(vol.lookup(FileId(ROOT_INO), b"d").unwrap(), d);
    assert_eq!(vol.lookup(d, b"f").unwrap(), f);
    let a = vol.attr(d).unwrap();
    assert!(a.is_dir() && a.mode & 0o777 == 0o750 && a.uid == 5 && a.gid == 6);
    assert!(matches!(vol.create_at(d, b"f", Owner::default()), Err(VolError::Exists { .. })));
    assert!(matches!(vol.create_at(d, b"a/b", Owner::default()), Err(VolError::InvalidName { .. })));
    assert!(matches!(vol.create_at(d, &[b'n'; 256], Owner::default()), Err(VolError::InvalidName { .. })));
    let long = vol.create_at(d, &[b'n'; 255], Owner::default()).unwrap();
    vol.close(long).unwrap();
    vol.unlink_at(d, &[b'n'; 255]).unwrap();
    assert!(matches!(vol.create_at(f, b"x", Owner::default()), Err(VolError::NotADirectory(_))));
    assert!(matches!(vol.lookup(d, b"nope"), Err(VolError::NoEntry { .. })));
    assert!(matches!(vol.rmdir_at(FileId(ROOT_INO), b"d"), Err(VolError::NotEmpty(_))));
    assert!(matches!(vol.unlink_at(FileId(ROOT_INO), b"d"), Err(VolError::IsADirectory(_))));
    assert!(matches!(vol.rmdir_at(d, b"f"), Err(VolError::NotADirectory(_))));
    // A directory cannot move under itself.
    let sub = vol.mkdir_at(d, b"sub", Owner::default()).unwrap();
    assert!(matches!(vol.rename_at(FileId(ROOT_INO), b"d", sub, b"d", Replace::Allowed), Err(VolError::Loop(_))));
    // Rename over a file replaces it; NOREPLACE refuses.
    let g = vol.create_at(FileId(ROOT_INO), b"g", Owner::default()).unwrap();
    vol.write(g, 0, b"old").unwrap();
    assert!(matches!(vol.rename_at(d, b"f", FileId(ROOT_INO), b"g", Replace::Never), Err(VolError::Exists { .. })));
    vol.rename_at(d, b"f", FileId(ROOT_INO), b"g", Replace::Allowed).unwrap();
    assert_eq!(vol.lookup(FileId(ROOT_INO), b"g").unwrap(), f);
    // The replaced file was still open: an orphan until its last close.
    assert_eq!(vol.size(g).unwrap(), 3);
    assert!(vol.attr(g).unwrap().links.is_empty());
    vol.close(g).unwrap();
    assert!(vol.size(g).is_err(), "the replaced file is gone");
    assert!(matches!(
        vol.rename_at(FileId(ROOT_INO), b"g", FileId(ROOT_INO), b"d", Replace::Allowed),
        Err(VolError::IsADirectory(_))
    ));
    // A directory moves with its entries.
    vol.rename_at(FileId(ROOT_INO), b"d", FileId(ROOT_INO), b"e", Replace::Allowed).unwrap();
    assert_eq!(vol.lookup(vol.lookup(FileId(ROOT_INO), b"e").unwrap(), b"sub").unwrap(), sub);
    let a = vol
        .set_attr(f, SetAttr { mode: Some(0o600), mtime: Some(mballoc_vol::Time::At(7)), ..SetAttr::default() })
        .unwrap();
    assert_eq!((a.mode, a.mtime), (mballoc_vol::S_IFREG | 0o600, 7));
    let before = vol.usage();
    vol.close(f).unwrap();
    vol.unlink_at(FileId(ROOT_INO), b"g").unwrap();
    assert_eq!(vol.usage().free_inodes, before.free_inodes + 1);
    vol.rmdir_at(vol.lookup(FileId(ROOT_INO), b"e").unwrap(), b"sub").unwrap();
    vol.rmdir_at(FileId(ROOT_INO), b"e").unwrap();
    assert!(vol.dir_entries(FileId(ROOT_INO)).unwrap().is_empty());
    vol.unmount().unwrap();
    assert!(check(&*dev, Repair::No).unwrap().is_clean());
}

#[test]
fn the_tree_survives_unmount_and_crash() {
    let dev = fresh();
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let d = vol.mkdir_at(FileId(ROOT_INO), b"logs", Owner::default()).unwrap();
    let f = vol.create_at(d, b"a.log", Owner { mode: 0o600, umask: 0, uid: 1000, gid: 100 }).unwrap();
    vol.write(f, 0, &[1; 3000]).unwrap();
    vol.fsync(f).unwrap();
    let want = paths(&vol);
    vol.unmount().unwrap();
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    assert_eq!(paths(&vol), want);
    assert_eq!(vol.attr(f).unwrap().uid, 1000);
    vol.rename_at(d, b"a.log", FileId(ROOT_INO), b"b.log", Replace::Allowed).unwrap();
    vol.sync().unwrap();
    let want = paths(&vol);
    vol.abandon(); // a crash: the rename is in the journal only
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    assert_eq!(paths(&vol), want);
    assert!(want.contains_key("/b.log") && !want.contains_key("/logs/a.log"));
}

#[test]
fn files_made_without_names_appear_in_the_root_by_number() {
    let dev = fresh();
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    vol.create_at(FileId(ROOT_INO), b"13", Owner::default()).unwrap_or_else(|e| panic!("{e}"));
    let f = vol.create().unwrap();
    let name = vol.dir_entries(FileId(ROOT_INO)).unwrap().into_iter().find(|e| e.ino == f).unwrap().name;
    assert_eq!(f.0, 13, "the engine numbers files from 12");
    assert_eq!(name, b"13.1", "{}", String::from_utf8_lossy(&name));
    assert_eq!(vol.files().len(), 2);
}

#[test]
fn an_older_format_is_refused_with_a_reason() {
    let dev = fresh();
    let mut sb = vec![0u8; 512];
    mballoc_vol::Device::read_at(&*dev, 0, &mut sb).unwrap();
    sb[4..8].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32c::crc32c(&sb[..508]);
    sb[508..].copy_from_slice(&crc.to_le_bytes());
    mballoc_vol::Device::write_at(&*dev, 0, &sb).unwrap();
    let e = Volume::open(dev.clone(), mount_opts()).err().expect("refused");
    assert!(matches!(e, VolError::Version { found: 1, supported: 3 }), "{e}");
    assert!(e.to_string().contains("no directory tree"), "{e}");
    sb[4..8].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c::crc32c(&sb[..508]);
    sb[508..].copy_from_slice(&crc.to_le_bytes());
    mballoc_vol::Device::write_at(&*dev, 0, &sb).unwrap();
    let e = Volume::open(dev.clone(), mount_opts()).err().expect("refused");
    assert!(matches!(e, VolError::Version { found: 2, supported: 3 }), "{e}");
    assert!(e.to_string().contains("mballoc upgrade"), "{e}");
}

#[test]
fn a_crash_at_any_point_leaves_the_last_synced_tree_or_the_next() {
    let ops = mballoc_testkit::knob("MBALLOC_NAMES_OPS", 120);
    let seed = mballoc_testkit::knob("MBALLOC_NAMES_SEED", 0x7EE5);
    let base = fresh();
    let dev = Arc::new(RecordingDevice::new(base.to_bytes()));
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // (device events when the sync returned, the tree then)
    let mut synced = vec![(dev.events(), paths(&vol))];
    let mut dirs = vec![FileId(ROOT_INO)];
    for i in 0..ops {
        // A rename over an empty directory removes it.
        dirs.retain(|&d| vol.attr(d).is_ok());
        let dir = dirs[rng.gen_range(0..dirs.len())];
        let entries = vol.dir_entries(dir).unwrap();
        let name = format!("n{}", rng.gen_range(0..12)).into_bytes();
        match rng.gen_range(0..11) {
            0..=2 => {
                if let Ok(f) = vol.create_at(dir, &name, Owner::default()) {
                    vol.write(f, 0, &vec![i as u8; rng.gen_range(1..3000)]).unwrap();
                    vol.close(f).unwrap();
                }
            }
            3 => {
                if let Ok(d) = vol.mkdir_at(dir, &name, Owner::default()) {
                    dirs.push(d);
                }
            }
            4..=5 if !entries.is_empty() => {
                let e = &entries[rng.gen_range(0..entries.len())];
                let to = dirs[rng.gen_range(0..dirs.len())];
                let how = [Replace::Allowed, Replace::Exchange][rng.gen_range(0..2)];
                let _ = vol.rename_at(dir, &e.name, to, &name, how);
            }
            7 if !entries.is_empty() => {
                // A hard link, a symbolic link (long ones overflow the
                // inode record) or an extended attribute.
                let e = &entries[rng.gen_range(0..entries.len())];
                let to = dirs[rng.gen_range(0..dirs.len())];
                let _ = match rng.gen_range(0..3) {
                    0 => vol.link_at(e.ino, to, &name),
                    1 => vol
                        .symlink_at(to, &name, &vec![b'a' + (i % 26) as u8; rng.gen_range(1..600)], Owner::default())
                        .map(drop),
                    _ => vol.set_xattr_at(e.ino, b"user.t", &vec![i as u8; rng.gen_range(0..900)], XattrSet::Any),
                };
            }
            6 if !entries.is_empty() => {
                let e = &entries[rng.gen_range(0..entries.len())];
                let gone = if e.is_dir { vol.rmdir_at(dir, &e.name) } else { vol.unlink_at(dir, &e.name) };
                if gone.is_ok() {
                    dirs.retain(|&d| d != e.ino);
                }
            }
            _ => {
                vol.sync().unwrap();
                synced.push((dev.events(), paths(&vol)));
            }
        }
    }
    vol.sync().unwrap();
    synced.push((dev.events(), paths(&vol)));
    vol.unmount().unwrap();
    let n = dev.events();
    let mut image = dev.base().to_vec();
    let mut checked = 0;
    for point in 0..=n {
        if point > 0 {
            dev.apply(&mut image, point - 1, point);
        }
        let vol = Volume::open(Arc::new(MemDevice::from_bytes(image.clone())), mount_opts())
            .unwrap_or_else(|e| panic!("seed {seed}, crash after {point} of {n} events: mount: {e}"));
        let got = paths(&vol);
        // The last sync that returned by this point, or the next.
        let k = synced.iter().rposition(|(at, _)| *at <= point).unwrap();
        let ok = got == synced[k].1 || synced.get(k + 1).is_some_and(|(_, t)| got == *t);
        if !ok {
            let names = |t: &BTreeMap<String, Option<Vec<u8>>>| t.keys().cloned().collect::<Vec<_>>();
            panic!(
                "seed {seed}, crash after {point} of {n} events: tree {:?} is neither sync {k} {:?} nor the next",
                names(&got),
                names(&synced[k].1)
            );
        }
        checked += 1;
    }
    assert!(checked > 10, "only {checked} crash points");
}
