//! Loading images into the engine: the allocator's free space is the
//! image's, files keep their extents, and the engine works on from there.

use mballoc_ext4::{engine, ChecksumPolicy, Ext4Volume, MemSource};
use mballoc_fs::{ExtentState, FileId};

fn image(opts: &str, size: &str) -> Option<Vec<u8>> {
    mballoc_testkit::mke2fs_image(opts, size, |tree| {
        std::fs::create_dir_all(tree.join("d")).unwrap();
        for i in 0..20u8 {
            std::fs::write(tree.join(format!("d/f{i}")), vec![i + 1; 3000 * usize::from(i) + 1]).unwrap();
        }
        std::fs::write(tree.join("big"), vec![9u8; 5 << 20]).unwrap();
    })
}

#[test]
fn the_engine_starts_from_an_image() {
    for opts in ["-t ext4 -b 4096", "-t ext4 -b 1024", "-t ext3 -b 4096"] {
        let Some(bytes) = image(opts, "64M") else { return };
        let vol = Ext4Volume::open(MemSource(bytes), ChecksumPolicy::Verify).unwrap();
        let mut image_free = 0;
        vol.for_each_free_run(|_, len| image_free += len).unwrap();
        let loaded = engine::load(&vol, |_| {}).unwrap();
        let fs = &loaded.fs;
        assert_eq!(fs.allocator().free_blocks(), image_free, "{opts}");
        assert_eq!(fs.check(), Ok(()), "{opts}");
        assert_eq!(loaded.files.len(), 21, "{opts}");
        let base = u64::from(vol.superblock().first_data_block);
        let tree = vol.walk().unwrap();
        for e in tree.files() {
            let id = FileId(u64::from(e.inode.ino));
            assert_eq!(fs.size(id).unwrap(), e.inode.size);
            // Block by block, the engine maps each file as the image does.
            let blocks = |v: Vec<(u64, u64, u64)>| -> Vec<(u64, u64)> {
                v.into_iter().flat_map(|(l, p, n)| (0..n).map(move |i| (l + i, p + i))).collect()
            };
            let ours = blocks(
                fs.extents(id).unwrap().iter().map(|x| (x.logical, x.physical + base, u64::from(x.len))).collect(),
            );
            let theirs = blocks(e.map.extents.iter().map(|x| (x.logical, x.physical, u64::from(x.len))).collect());
            assert_eq!(ours, theirs, "{opts} {}", e.path);
            assert!(fs.extents(id).unwrap().iter().all(|x| x.state == ExtentState::Written));
        }
        // The engine goes on: new files land in the image's free space,
        // old files can be truncated, and nothing is owned twice.
        let f = fs.create().unwrap();
        fs.write(f, 0, 3 << 20).unwrap();
        fs.fsync(f).unwrap();
        let big = loaded.files.iter().find(|(p, _)| p == "/big").unwrap().1;
        fs.open(big).unwrap();
        fs.truncate(big, 1 << 20).unwrap();
        fs.close(big).unwrap();
        fs.sync().unwrap();
        assert_eq!(fs.check(), Ok(()), "{opts}");
        let mut a = engine::allocator(&vol).unwrap().mb_groups_report();
        a.truncate(8);
        assert_eq!(a, "#group: ");
    }
}

#[test]
fn bigalloc_files_load_as_their_clusters() {
    let Some(bytes) = image("-t ext4 -b 4096 -O bigalloc -C 16384", "64M") else { return };
    let vol = Ext4Volume::open(MemSource(bytes), ChecksumPolicy::Verify).unwrap();
    let alloc = engine::allocator(&vol).unwrap();
    let mut free_blocks = 0;
    vol.for_each_free_run(|_, len| free_blocks += len).unwrap();
    assert_eq!(alloc.free_blocks() * u64::from(vol.superblock().cluster_ratio()), free_blocks);
    let loaded = engine::load(&vol, |_| {}).unwrap();
    let fs = &loaded.fs;
    assert_eq!(fs.cluster_bits(), 2);
    assert_eq!(fs.check(), Ok(()));
    assert_eq!(loaded.files.len(), 21);
    // Each file's blocks, in ext4 blocks, are the image's.
    let tree = vol.walk().unwrap();
    for e in tree.files() {
        let id = FileId(u64::from(e.inode.ino));
        let blocks = |v: Vec<(u64, u64, u64)>| -> Vec<(u64, u64)> {
            v.into_iter().flat_map(|(l, p, n)| (0..n).map(move |i| (l + i, p + i))).collect()
        };
        let ours =
            blocks(fs.ext4_extents(id).unwrap().iter().map(|x| (x.logical, x.physical, u64::from(x.len))).collect());
        let theirs = blocks(e.map.extents.iter().map(|x| (x.logical, x.physical, u64::from(x.len))).collect());
        assert_eq!(ours, theirs, "{}", e.path);
    }
    // A configuration for other clusters is refused, not run as this one.
    let other = engine::load(&vol, |cfg| *cfg = mballoc_fs::FsConfig::kernel(cfg.shape.geometry));
    assert!(matches!(other, Err(mballoc_ext4::Ext4Error::Unsupported(_))));
    // The engine goes on in clusters: a new file, a truncate, all freed.
    let f = fs.create().unwrap();
    fs.write(f, 0, (1 << 20) + 5000).unwrap();
    fs.fsync(f).unwrap();
    let big = loaded.files.iter().find(|(p, _)| p == "/big").unwrap().1;
    fs.open(big).unwrap();
    fs.truncate(big, (1 << 20) + 1).unwrap();
    fs.close(big).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.check(), Ok(()));
}
