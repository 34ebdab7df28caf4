//! Format 3's objects: hard links, symbolic links, device nodes, extended
//! attributes, chattr flags, RENAME_EXCHANGE and orphans, each through an
//! unmount and a crash, with attribute strings long enough to overflow the
//! inode record into the tree area.

use mballoc_vol::{
    check, FileId, FormatOptions, MemDevice, MountOptions, Owner, Repair, Replace, VolError, Volume, XattrSet,
    FL_APPEND, FL_IMMUTABLE, MAX_ATTR_BYTES, ROOT_INO, S_IFCHR, S_IFIFO, S_IFLNK, S_IFMT, XATTR_VALUE_MAX,
};
use std::sync::Arc;

fn fresh() -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(8 << 20));
    let opts = FormatOptions {
        block_size: 1024,
        blocks_per_group: Some(1024),
        log_blocks: Some(32),
        inode_count: Some(128),
        tree_blocks: Some(64),
    };
    Volume::format(dev.clone(), &opts).unwrap();
    dev
}

fn mount(dev: &Arc<MemDevice>) -> Arc<Volume> {
    Volume::open(dev.clone(), MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() })
        .unwrap()
}

/// Mount what a crash now would leave: the device as it is, no unmount;
/// the mount and its device.
fn crash(vol: Arc<Volume>, dev: &Arc<MemDevice>) -> (Arc<Volume>, Arc<MemDevice>) {
    let image = dev.to_bytes();
    vol.abandon();
    let dev2 = Arc::new(MemDevice::from_bytes(image));
    let v = mount(&dev2);
    assert!(check(&*dev2, Repair::No).unwrap().is_clean());
    (v, dev2)
}

fn read_all(vol: &Volume, f: FileId) -> Vec<u8> {
    let mut b = vec![0u8; vol.size(f).unwrap() as usize];
    vol.read(f, 0, &mut b).unwrap();
    b
}

#[test]
fn hard_links_share_one_inode_and_survive() {
    let dev = fresh();
    let vol = mount(&dev);
    let d = vol.mkdir_at(FileId(ROOT_INO), b"d", Owner::default()).unwrap();
    let f = vol.create_at(FileId(ROOT_INO), b"a", Owner::default()).unwrap();
    vol.write(f, 0, b"shared").unwrap();
    vol.close(f).unwrap();
    vol.link_at(f, d, b"b").unwrap();
    vol.link_at(f, FileId(ROOT_INO), &[b'L'; 255]).unwrap();
    assert_eq!(vol.nlink(f).unwrap(), 3);
    assert_eq!(vol.lookup(d, b"b").unwrap(), f);
    assert!(matches!(vol.link_at(d, FileId(ROOT_INO), b"dd"), Err(VolError::IsADirectory(_))));
    assert!(matches!(vol.link_at(f, d, b"b"), Err(VolError::Exists { .. })));
    assert_eq!((vol.nlink(FileId(ROOT_INO)).unwrap(), vol.nlink(d).unwrap()), (3, 2));
    vol.sync().unwrap();
    let (vol, dev) = crash(vol, &dev);
    assert_eq!(vol.nlink(f).unwrap(), 3);
    assert_eq!(read_all(&vol, vol.lookup(d, b"b").unwrap()), b"shared");
    // Removing names one by one: the data stays until the last.
    vol.unlink_at(FileId(ROOT_INO), b"a").unwrap();
    vol.unlink_at(FileId(ROOT_INO), &[b'L'; 255]).unwrap();
    assert_eq!(vol.nlink(f).unwrap(), 1);
    assert_eq!(read_all(&vol, f), b"shared");
    // A rename between two names of one inode changes nothing.
    vol.link_at(f, d, b"c").unwrap();
    vol.rename_at(d, b"b", d, b"c", Replace::Allowed).unwrap();
    assert_eq!(vol.nlink(f).unwrap(), 2);
    vol.unmount().unwrap();
    let vol = mount(&dev);
    assert_eq!(vol.nlink(f).unwrap(), 2);
    vol.unlink_at(d, b"b").unwrap();
    vol.unlink_at(d, b"c").unwrap();
    assert!(vol.attr(f).is_err(), "gone with its last name");
    vol.unmount().unwrap();
    assert!(check(&*dev, Repair::No).unwrap().is_clean());
}

#[test]
fn symlinks_devices_and_long_attributes_overflow_and_survive() {
    let dev = fresh();
    let vol = mount(&dev);
    let short = vol.symlink_at(FileId(ROOT_INO), b"s", b"../target", Owner::default()).unwrap();
    let target: Vec<u8> = (0..4095).map(|i| b'a' + (i % 26) as u8).collect();
    let long = vol.symlink_at(FileId(ROOT_INO), b"long", &target, Owner::default()).unwrap();
    assert!(vol.symlink_at(FileId(ROOT_INO), b"x", &[b'a'; 4096], Owner::default()).is_err());
    assert!(matches!(vol.link_target(FileId(ROOT_INO)), Err(VolError::NotASymlink(_))));
    let null = vol
        .mknod_at(FileId(ROOT_INO), b"null", S_IFCHR, 0x0103, Owner { mode: 0o666, umask: 0, uid: 0, gid: 0 })
        .unwrap();
    let fifo = vol.mknod_at(FileId(ROOT_INO), b"fifo", S_IFIFO, 77, Owner::default()).unwrap();
    let f = vol.create_at(FileId(ROOT_INO), b"f", Owner::default()).unwrap();
    vol.close(f).unwrap();
    let big = vec![9u8; 3000];
    vol.set_xattr_at(f, b"user.big", &big, XattrSet::Any).unwrap();
    vol.set_xattr_at(f, b"security.selinux", b"ctx", XattrSet::Create).unwrap();
    assert!(matches!(vol.set_xattr_at(f, b"user.big", b"", XattrSet::Create), Err(VolError::Exists { .. })));
    assert!(matches!(vol.set_xattr_at(f, b"user.none", b"", XattrSet::Replace), Err(VolError::NoAttribute { .. })));
    // A value Linux allows, on a volume whose 32-block journal keeps less
    // per inode; and one past what Linux allows.
    let max = vol.superblock().max_attr_bytes();
    assert!(max < MAX_ATTR_BYTES);
    assert!(matches!(vol.set_xattr_at(f, b"user.huge", &vec![0; max], XattrSet::Any), Err(VolError::NoRoom { .. })));
    assert!(matches!(
        vol.set_xattr_at(f, b"user.huge", &vec![0; XATTR_VALUE_MAX + 1], XattrSet::Any),
        Err(VolError::InvalidArgument(_))
    ));
    assert!(vol.set_xattr_at(f, b"bogus.x", b"", XattrSet::Any).is_err());
    let check_all = |vol: &Volume| {
        assert_eq!(vol.link_target(short).unwrap(), b"../target");
        assert_eq!(vol.link_target(long).unwrap(), target);
        assert_eq!(vol.attr(long).unwrap().mode & S_IFMT, S_IFLNK);
        let n = vol.attr(null).unwrap();
        assert_eq!((n.mode, n.rdev), (S_IFCHR | 0o666, 0x0103));
        assert_eq!(vol.attr(fifo).unwrap().rdev, 0, "only devices keep a number");
        assert_eq!(vol.get_xattr_at(f, b"user.big").unwrap(), big);
        assert_eq!(vol.list_xattrs_at(f).unwrap(), vec![b"security.selinux".to_vec(), b"user.big".to_vec()]);
    };
    check_all(&vol);
    vol.sync().unwrap();
    let (vol, dev) = crash(vol, &dev);
    check_all(&vol);
    vol.unmount().unwrap();
    assert!(check(&*dev, Repair::No).unwrap().is_clean());
    let vol = mount(&dev);
    check_all(&vol);
    // Shrinking back into the record frees its overflow blocks.
    vol.remove_xattr_at(f, b"user.big").unwrap();
    assert!(matches!(vol.get_xattr_at(f, b"user.big"), Err(VolError::NoAttribute { .. })));
    vol.unlink_at(FileId(ROOT_INO), b"long").unwrap();
    vol.unmount().unwrap();
    assert!(check(&*dev, Repair::No).unwrap().is_clean());
}

#[test]
fn an_orphan_lives_until_its_last_close_or_the_next_mount() {
    let dev = fresh();
    let vol = mount(&dev);
    let before = vol.usage().free_blocks;
    let f = vol.create_at(FileId(ROOT_INO), b"tmp", Owner::default()).unwrap();
    vol.write(f, 0, &[5; 20_000]).unwrap();
    vol.fsync(f).unwrap();
    vol.unlink_at(FileId(ROOT_INO), b"tmp").unwrap();
    assert!(vol.dir_entries(FileId(ROOT_INO)).unwrap().is_empty());
    // Still readable and writable through its handle.
    vol.write(f, 20_000, b"more").unwrap();
    assert_eq!(read_all(&vol, f).len(), 20_004);
    vol.sync().unwrap();
    // A crash now: check counts the orphan (no problem), repair removes it.
    let image = Arc::new(MemDevice::from_bytes(dev.to_bytes()));
    let r = check(&*image, Repair::No).unwrap();
    assert!(r.is_clean() && r.orphans == 1, "{r:?}");
    let r = check(&*image, Repair::Yes).unwrap();
    assert!(r.repaired && r.orphans == 0, "{r:?}");
    let r = check(&*image, Repair::No).unwrap();
    assert!(r.is_clean() && r.orphans == 0 && r.pending_transactions == 0, "{r:?}");
    assert_eq!(mount(&image).usage().free_blocks, before);
    // The next mount removes it and frees its blocks.
    let (vol2, _) = crash(vol, &dev);
    assert!(vol2.attr(f).is_err());
    assert_eq!(vol2.usage().free_blocks, before);
    drop(vol2);
    // Without a crash, the last close removes it.
    let dev = fresh();
    let vol = mount(&dev);
    let f = vol.create_at(FileId(ROOT_INO), b"tmp", Owner::default()).unwrap();
    vol.write(f, 0, &[5; 20_000]).unwrap();
    vol.open_file(f).unwrap();
    vol.unlink_at(FileId(ROOT_INO), b"tmp").unwrap();
    vol.close(f).unwrap();
    assert_eq!(read_all(&vol, f).len(), 20_000, "one handle still open");
    vol.close(f).unwrap();
    assert!(vol.attr(f).is_err());
    vol.unmount().unwrap();
    assert!(check(&*dev, Repair::No).unwrap().is_clean());
}

#[test]
fn exchange_swaps_two_names_in_one_transaction() {
    let dev = fresh();
    let vol = mount(&dev);
    let d = vol.mkdir_at(FileId(ROOT_INO), b"d", Owner::default()).unwrap();
    let sub = vol.mkdir_at(d, b"sub", Owner::default()).unwrap();
    let f = vol.create_at(FileId(ROOT_INO), b"f", Owner::default()).unwrap();
    vol.close(f).unwrap();
    vol.rename_at(FileId(ROOT_INO), b"f", FileId(ROOT_INO), b"d", Replace::Exchange).unwrap();
    assert_eq!((vol.lookup(FileId(ROOT_INO), b"d").unwrap(), vol.lookup(FileId(ROOT_INO), b"f").unwrap()), (f, d));
    assert!(matches!(
        vol.rename_at(FileId(ROOT_INO), b"f", FileId(ROOT_INO), b"none", Replace::Exchange),
        Err(VolError::NoEntry { .. })
    ));
    // A directory cannot be swapped into its own subtree.
    assert!(matches!(vol.rename_at(FileId(ROOT_INO), b"f", d, b"sub", Replace::Exchange), Err(VolError::Loop(_))));
    let _ = sub;
    vol.sync().unwrap();
    let (vol, _) = crash(vol, &dev);
    assert_eq!((vol.lookup(FileId(ROOT_INO), b"d").unwrap(), vol.lookup(FileId(ROOT_INO), b"f").unwrap()), (f, d));
}

#[test]
fn flags_forbid_what_ext4_forbids() {
    let dev = fresh();
    let vol = mount(&dev);
    let d = vol.mkdir_at(FileId(ROOT_INO), b"d", Owner::default()).unwrap();
    let f = vol.create_at(d, b"f", Owner::default()).unwrap();
    vol.close(f).unwrap();
    vol.set_flags(f, FL_IMMUTABLE).unwrap();
    assert!(matches!(vol.unlink_at(d, b"f"), Err(VolError::NotPermitted { .. })));
    assert!(matches!(vol.rename_at(d, b"f", d, b"g", Replace::Allowed), Err(VolError::NotPermitted { .. })));
    assert!(matches!(vol.link_at(f, d, b"h"), Err(VolError::NotPermitted { .. })));
    assert!(vol.set_xattr_at(f, b"user.a", b"", XattrSet::Any).is_err());
    assert!(vol.set_flags(f, 0x4000_0000).is_err());
    // The contents too, through every call and the std::io handle.
    vol.open_file(f).unwrap();
    let refused = |r: mballoc_vol::Result<()>| matches!(r, Err(VolError::NotPermitted { .. }));
    assert!(refused(vol.write(f, 0, b"x")), "write");
    assert!(refused(vol.truncate(f, 10)), "truncate");
    assert!(refused(vol.fallocate(f, 0, 4096, mballoc_vol::FallocateMode::KeepSize)), "fallocate");
    assert!(refused(vol.punch_hole(f, 0, 4096)), "punch");
    assert!(refused(vol.zero_range(f, 0, 4096, mballoc_vol::FallocateMode::KeepSize)), "zero range");
    let mut h = vol.file("/d/f", mballoc_vol::OpenOptions::new().write(true)).unwrap();
    assert!(std::io::Write::write_all(&mut h, b"y").is_err(), "std::io write");
    drop(h);
    assert_eq!(vol.size(f).unwrap(), 0, "nothing changed");
    // Append-only: writes at the end and fallocate, nothing else.
    vol.set_flags(f, FL_APPEND).unwrap();
    vol.write(f, 0, b"abc").unwrap();
    vol.write(f, 3, b"def").unwrap();
    assert!(refused(vol.write(f, 1, b"x")), "a write before the end");
    assert!(refused(vol.truncate(f, 1)), "truncate, append-only");
    assert!(refused(vol.punch_hole(f, 0, 1)), "punch, append-only");
    vol.fallocate(f, 6, 4096, mballoc_vol::FallocateMode::KeepSize).unwrap();
    vol.close(f).unwrap();
    vol.set_flags(f, 0).unwrap();
    vol.set_flags(d, FL_APPEND).unwrap();
    let g = vol.create_at(d, b"g", Owner::default()).unwrap();
    vol.close(g).unwrap();
    assert!(matches!(vol.unlink_at(d, b"g"), Err(VolError::NotPermitted { .. })), "append-only: no removal");
    vol.unmount().unwrap();
    let vol = mount(&dev);
    assert_eq!(vol.flags(d).unwrap(), FL_APPEND);
}

#[test]
fn set_group_id_directories_pass_their_group_down() {
    let dev = fresh();
    let vol = mount(&dev);
    let d = vol.mkdir_at(FileId(ROOT_INO), b"d", Owner { mode: 0o2775, umask: 0, uid: 0, gid: 50 }).unwrap();
    let f = vol.create_at(d, b"f", Owner { mode: 0o644, umask: 0, uid: 7, gid: 7 }).unwrap();
    let sub = vol.mkdir_at(d, b"sub", Owner { mode: 0o755, umask: 0, uid: 7, gid: 7 }).unwrap();
    assert_eq!(vol.attr(f).unwrap().gid, 50);
    let s = vol.attr(sub).unwrap();
    assert_eq!((s.gid, s.mode & 0o2000), (50, 0o2000));
}

/// A rename that would lengthen an inode's attributes past what one inode
/// keeps (many long names for one file) is refused, and nothing moves: it
/// once overran the limit and stopped the volume (xfstests generic/070).
#[test]
fn a_rename_past_the_attribute_limit_is_refused_whole() {
    let dev = fresh();
    let vol = mount(&dev);
    let f = vol.create_at(FileId(ROOT_INO), b"x", Owner::default()).unwrap();
    vol.close(f).unwrap();
    let mut n = 0u32;
    loop {
        let name = format!("{n:03}{}", "n".repeat(200));
        match vol.link_at(f, FileId(ROOT_INO), name.as_bytes()) {
            Ok(()) => n += 1,
            Err(VolError::NoRoom { .. }) => break,
            Err(e) => panic!("link {n}: {e}"),
        }
    }
    let before = vol.dir_entries(FileId(ROOT_INO)).unwrap();
    let long = vec![b'z'; 255];
    assert!(matches!(
        vol.rename_at(FileId(ROOT_INO), b"x", FileId(ROOT_INO), &long, Replace::Allowed),
        Err(VolError::NoRoom { .. })
    ));
    assert_eq!(vol.dir_entries(FileId(ROOT_INO)).unwrap(), before, "nothing moved");
    // Exchanging with another file's short name is checked on both sides.
    let g = vol.create_at(FileId(ROOT_INO), &long, Owner::default()).unwrap();
    vol.close(g).unwrap();
    assert!(matches!(
        vol.rename_at(FileId(ROOT_INO), b"x", FileId(ROOT_INO), &long, Replace::Exchange),
        Err(VolError::NoRoom { .. })
    ));
    assert_eq!(vol.lookup(FileId(ROOT_INO), b"x").unwrap(), f);
    let (_vol, _dev) = crash(vol, &dev);
}
