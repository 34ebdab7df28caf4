//! Exclusive opens and careful mkfs: a volume is never opened read-write
//! twice, and mkfs never destroys what it was not told to.

use mballoc_fs::FsConfig;
use mballoc_testkit::Scratch;
use mballoc_vol::{
    mkfs, probe, FileDevice, FormatOptions, MemDevice, MountOptions, OpenMode, Overwrite, VolError, Volume,
};
use std::sync::Arc;

fn small() -> FormatOptions {
    FormatOptions { block_size: 1024, ..FormatOptions::default() }
}

#[test]
fn a_second_read_write_open_is_busy_and_read_only_opens_share() {
    let dir = Scratch::new("open");
    let path = dir.join("vol");
    mkfs(&path, Some(8 << 20), &small(), Overwrite::Refuse).unwrap();
    let first = FileDevice::open(&path, OpenMode::ReadWrite).unwrap();
    for mode in [OpenMode::ReadWrite, OpenMode::ReadOnly] {
        match FileDevice::open(&path, mode) {
            Err(VolError::Busy { path: p, holder }) => {
                assert_eq!(p, path);
                assert!(holder.is_some_and(|h| h.contains(&std::process::id().to_string())), "{mode:?}");
            }
            other => panic!("{mode:?}: {other:?}"),
        }
    }
    // A mounted volume holds its device: a second mount cannot write.
    let vol = Volume::open(Arc::new(first), MountOptions::default()).unwrap();
    assert!(matches!(FileDevice::open(&path, OpenMode::ReadWrite), Err(VolError::Busy { .. })));
    vol.unmount().unwrap();
    let r1 = FileDevice::open(&path, OpenMode::ReadOnly).unwrap();
    let r2 = FileDevice::open(&path, OpenMode::ReadOnly).unwrap();
    assert!(matches!(FileDevice::open(&path, OpenMode::ReadWrite), Err(VolError::Busy { .. })));
    drop((r1, r2));
    FileDevice::open(&path, OpenMode::ReadWrite).unwrap();
}

#[test]
fn another_process_holding_the_volume_is_named() {
    if !mballoc_testkit::have("flock") {
        eprintln!("skipped: flock not installed");
        return;
    }
    let dir = Scratch::new("open-other");
    let path = dir.join("vol");
    mkfs(&path, Some(8 << 20), &small(), Overwrite::Refuse).unwrap();
    let ready = dir.join("ready");
    let mut child = std::process::Command::new("flock")
        .arg("-x")
        .arg(&path)
        .arg("-c")
        .arg(format!("touch {} && sleep 30", ready.display()))
        .spawn()
        .unwrap();
    while !ready.exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let got = FileDevice::open(&path, OpenMode::ReadWrite);
    let _ = child.kill();
    let _ = child.wait();
    match got {
        Err(e @ VolError::Busy { .. }) => assert!(e.to_string().contains("in use by process"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn mkfs_refuses_what_it_would_destroy_unless_forced() {
    let dir = Scratch::new("mkfs");
    let path = dir.join("vol");
    let first = mkfs(&path, Some(8 << 20), &small(), Overwrite::Refuse).unwrap();
    // A volume is there: refused, whether the size is given again or not.
    for size in [None, Some(16 << 20)] {
        match mkfs(&path, size, &small(), Overwrite::Refuse) {
            Err(VolError::InUse { what, .. }) => assert_eq!(what, "an mballoc volume"),
            other => panic!("{size:?}: {other:?}"),
        }
    }
    let dev = FileDevice::open(&path, OpenMode::ReadOnly).unwrap();
    assert_eq!(probe(&dev).unwrap(), Some("an mballoc volume"));
    drop(dev);
    let vol = Volume::open(Arc::new(FileDevice::open(&path, OpenMode::ReadWrite).unwrap()), MountOptions::default());
    assert_eq!(vol.unwrap().superblock().uuid, first.uuid, "the refused mkfs changed nothing");
    let again = mkfs(&path, Some(16 << 20), &small(), Overwrite::Force).unwrap();
    assert_ne!(again.uuid, first.uuid);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 << 20);
    // Another file system's signature is refused too.
    if mballoc_testkit::have("mke2fs") {
        let ext = dir.join("ext4");
        mballoc_testkit::run(std::process::Command::new("mke2fs").args(["-q", "-F", "-t", "ext4"]).arg(&ext).arg("8M"));
        match mkfs(&ext, None, &small(), Overwrite::Refuse) {
            Err(VolError::InUse { what, .. }) => assert_eq!(what, "an ext2/3/4 file system"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_failed_mkfs_removes_the_file_it_created_and_only_that() {
    let dir = Scratch::new("mkfs-fail");
    let path = dir.join("vol");
    // Far too small for a volume: the layout is refused after the file
    // was created.
    assert!(mkfs(&path, Some(4096), &small(), Overwrite::Refuse).is_err());
    assert!(!path.exists(), "the half-made file is gone");
    // A file that was there before stays, even when mkfs fails on it.
    std::fs::write(&path, vec![0u8; 4096]).unwrap();
    assert!(mkfs(&path, None, &small(), Overwrite::Refuse).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), vec![0u8; 4096]);
    assert!(matches!(mkfs(&dir.join("missing"), None, &small(), Overwrite::Refuse), Err(VolError::InvalidArgument(_))));
    // A size no volume can have: refused before any file is made.
    let huge = dir.join("huge");
    assert!(matches!(mkfs(&huge, Some(u64::MAX), &small(), Overwrite::Refuse), Err(VolError::Geometry(_))));
    assert!(!huge.exists());
    let few = FormatOptions { inode_count: Some(1), ..small() };
    let e = mkfs(&dir.join("few"), Some(8 << 20), &few, Overwrite::Refuse).unwrap_err();
    assert!(e.to_string().contains("16 to"), "{e}");
    assert!(!dir.join("few").exists());
}

#[test]
fn mkfs_refuses_a_file_holding_data_and_takes_an_empty_one() {
    let dir = Scratch::new("mkfs-data");
    let data = dir.join("data");
    std::fs::write(&data, vec![7u8; 64 << 10]).unwrap();
    std::fs::File::options().write(true).open(&data).unwrap().set_len(8 << 20).unwrap();
    match mkfs(&data, None, &small(), Overwrite::Refuse) {
        Err(VolError::InUse { what, .. }) => assert!(what.contains("data"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&data).unwrap()[..4], [7, 7, 7, 7], "refused: nothing written");
    mkfs(&data, None, &small(), Overwrite::Force).unwrap();
    // A sparse file never written holds nothing: taken without --force.
    let sparse = dir.join("sparse");
    std::fs::File::create(&sparse).unwrap().set_len(8 << 20).unwrap();
    mkfs(&sparse, None, &small(), Overwrite::Refuse).unwrap();
}

#[test]
fn every_open_refuses_what_holds_no_volume_and_a_second_writer_on_one_handle() {
    let dir = Scratch::new("kinds");
    for (what, path) in [("a directory", dir.path().to_path_buf())] {
        match FileDevice::open(&path, OpenMode::ReadOnly) {
            Err(VolError::InvalidArgument(m)) => assert!(m.contains(what), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    let fifo = dir.join("fifo");
    if std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        // Opening would wait for a writer forever; refused at once.
        match FileDevice::open(&fifo, OpenMode::ReadOnly) {
            Err(VolError::InvalidArgument(m)) => assert!(m.contains("a FIFO"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    let dev = Arc::new(mballoc_vol::MemDevice::new(8 << 20));
    Volume::format(dev.clone(), &small()).unwrap();
    let first = Volume::open(dev.clone(), MountOptions::default()).unwrap();
    assert!(matches!(Volume::open(dev.clone(), MountOptions::default()), Err(VolError::Busy { .. })));
    let ro = MountOptions { access: mballoc_vol::Access::ReadOnly, ..MountOptions::default() };
    assert!(matches!(Volume::open(dev.clone(), ro.clone()), Err(VolError::Busy { .. })), "no reader beside a writer");
    first.unmount().unwrap();
    let r1 = Volume::open(dev.clone(), ro.clone()).unwrap();
    let r2 = Volume::open(dev.clone(), ro).unwrap();
    assert!(matches!(Volume::open(dev.clone(), MountOptions::default()), Err(VolError::Busy { .. })));
    drop((r1, r2));
    Volume::open(dev, MountOptions::default()).unwrap();
}

/// A profile chosen at mount is in force whole: every placement and
/// behaviour decision of ext4's kernel profile, with the volume's own
/// shape and storage.
#[test]
fn a_kernel_profile_is_in_force_whole() {
    let dev = Arc::new(MemDevice::new(64 << 20));
    Volume::format(dev.clone(), &FormatOptions::default()).unwrap();
    let vol = Volume::open_with(dev, MountOptions::default(), |c| *c = FsConfig::kernel(c.shape.geometry)).unwrap();
    let got = vol.fs().config().clone();
    let geometry = vol.superblock().geometry();
    let kernel = FsConfig::kernel(geometry);
    assert_eq!(got.behaviour, kernel.behaviour);
    // Placement holds a policy object (no equality): compared as printed.
    assert_eq!(format!("{:?}", got.placement), format!("{:?}", kernel.placement));
    assert_ne!(format!("{:?}", got.placement), format!("{:?}", FsConfig::new(geometry).placement));
    assert_eq!(got.shape, FsConfig::new(geometry).shape);
    assert_eq!(got.storage.extent_tree, mballoc_fs::ExtentTreeBlocks::Outside, "trees live in the tree area");
    assert_eq!(got.storage.free_reuse, mballoc_fs::FreeReuse::AtCommit);
    assert_eq!(got.storage.dirty_limit_blocks, u64::MAX, "the volume writes back itself");
}

#[test]
fn settings_by_name_reach_the_engine_and_bad_ones_refuse_the_mount() {
    let dev = Arc::new(MemDevice::new(64 << 20));
    Volume::format(dev.clone(), &FormatOptions::default()).unwrap();
    let mut opts = MountOptions::default();
    opts.set_all(["profile=kernel", "mb_max_to_scan=50", "commit=0"]).unwrap();
    let vol = Volume::open(dev.clone(), opts).unwrap();
    let got = vol.fs().config().clone();
    let geometry = vol.superblock().geometry();
    let mut kernel = FsConfig::kernel(geometry);
    kernel.placement.tunables.mb_max_to_scan = 50;
    assert_eq!(got.behaviour, kernel.behaviour);
    assert_eq!(format!("{:?}", got.placement), format!("{:?}", kernel.placement));
    vol.unmount().unwrap();

    let mut opts = MountOptions::default();
    for bad in ["mb_max_to_scan=0", "inodes_per_group=64", "dirty_limit_blocks=5", "nosuch=1", "commit=-1", "noequals"]
    {
        let e = opts.set_all([bad]).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "{bad}: {e}");
    }
    assert!(opts.settings.is_empty(), "a refused option changes nothing");
}

#[test]
fn what_is_no_volume_is_an_invalid_argument() {
    let small = Arc::new(MemDevice::new(100));
    let e = Volume::open(small, MountOptions::default()).err().expect("refused");
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    assert!(e.to_string().contains("too small"), "{e}");
    let zeros = Arc::new(MemDevice::new(8 << 20));
    let e = Volume::open(zeros, MountOptions::default()).err().expect("refused");
    assert_eq!((e.errno(), e.to_string().contains("not an mballoc volume")), (libc::EINVAL, true), "{e}");
    let e = Volume::format(Arc::new(MemDevice::new(4096)), &FormatOptions::default()).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "an impossible geometry: {e}");
}
