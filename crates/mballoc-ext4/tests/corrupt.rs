//! Damaged images: each corruption gives the typed error that names the
//! structure, never a panic. Images are made by `mke2fs -d` (no root
//! needed), read into memory, and bytes are flipped at locations the
//! reader itself computes.

use mballoc_ext4::testing::crc32c_raw;
use mballoc_ext4::testing::desc_location;
use mballoc_ext4::{ChecksumPolicy, Ext4Error, Ext4Volume, MemSource};

struct Image {
    bytes: Vec<u8>,
}

/// An image of `opts` holding /a and /b (40 KiB each), and /dir with a
/// few entries. Callers skip first where mke2fs is missing.
fn image(opts: &str) -> Image {
    let bytes = mballoc_testkit::mke2fs_image(opts, "8M", |tree| {
        std::fs::create_dir_all(tree.join("dir")).unwrap();
        std::fs::write(tree.join("a"), vec![0xAAu8; 40 << 10]).unwrap();
        std::fs::write(tree.join("b"), vec![0xBBu8; 40 << 10]).unwrap();
        for i in 0..5 {
            std::fs::write(tree.join(format!("dir/f{i}")), b"x").unwrap();
        }
    })
    .expect("mke2fs, checked by the caller");
    Image { bytes }
}

impl Image {
    fn open(&self, policy: ChecksumPolicy) -> Result<Ext4Volume<MemSource>, Ext4Error> {
        Ext4Volume::open(MemSource(self.bytes.clone()), policy)
    }

    fn vol(&self) -> Ext4Volume<MemSource> {
        self.open(ChecksumPolicy::Verify).expect("pristine image opens")
    }

    /// Open and walk everything.
    fn read_all(&self, policy: ChecksumPolicy) -> Result<(), Ext4Error> {
        let v = self.open(policy)?;
        v.for_each_free_run(|_, _| {})?;
        v.walk().map(drop)
    }

    fn ino_of(&self, path: &str) -> u32 {
        self.vol().walk().unwrap().entries.iter().find(|e| e.path == path).unwrap().inode.ino
    }

    /// Byte offset of inode `ino`.
    fn inode_at(&self, ino: u32) -> usize {
        let v = self.vol();
        let sb = v.superblock();
        let g = (ino - 1) / sb.inodes_per_group;
        let idx = u64::from((ino - 1) % sb.inodes_per_group);
        (v.groups()[g as usize].inode_table * u64::from(sb.block_size) + idx * u64::from(sb.inode_size)) as usize
    }

    fn block_size(&self) -> usize {
        self.vol().superblock().block_size as usize
    }

    /// Rewrite the superblock checksum after editing it.
    fn reseal_superblock(&mut self) {
        let c = crc32c_raw(!0, &self.bytes[1024..1024 + 0x3FC]);
        self.bytes[1024 + 0x3FC..1024 + 0x400].copy_from_slice(&c.to_le_bytes());
    }

    fn put32(&mut self, at: usize, v: u32) {
        self.bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn put16(&mut self, at: usize, v: u16) {
        self.bytes[at..at + 2].copy_from_slice(&v.to_le_bytes());
    }
}

const CSUM: &str = "-t ext4 -b 1024";
const PLAIN: &str = "-t ext4 -b 1024 -O ^metadata_csum,^uninit_bg";

macro_rules! skip_without_mke2fs {
    () => {
        if !mballoc_testkit::have("mke2fs") {
            eprintln!("skipped: mke2fs not installed");
            return;
        }
    };
}

#[test]
fn pristine_images_read_cleanly() {
    skip_without_mke2fs!();
    for opts in [CSUM, PLAIN, "-t ext4 -b 4096 -O bigalloc -C 16384", "-t ext3", "-t ext4 -O meta_bg,^resize_inode"] {
        let img = image(opts);
        img.read_all(ChecksumPolicy::Verify).unwrap_or_else(|e| panic!("{opts}: {e}"));
        let tree = img.vol().walk().unwrap();
        let paths: Vec<_> = tree.files().map(|e| e.path.as_str()).collect();
        assert!(paths.contains(&"/a") && paths.contains(&"/dir/f4"), "{opts}: {paths:?}");
    }
}

#[test]
fn bad_magic_and_truncation() {
    skip_without_mke2fs!();
    let mut img = image(CSUM);
    let whole = img.bytes.clone();
    img.bytes[1024 + 0x38] = 0;
    assert!(matches!(img.read_all(ChecksumPolicy::Ignore), Err(Ext4Error::BadMagic { .. })));
    for len in [0, 1500, whole.len() / 2] {
        img.bytes = whole[..len].to_vec();
        let e = img.read_all(ChecksumPolicy::Verify).unwrap_err();
        assert!(matches!(e, Ext4Error::Truncated { .. }), "{len}: {e}");
    }
}

#[test]
fn superblock_checksum_and_geometry() {
    skip_without_mke2fs!();
    let mut img = image(CSUM);
    img.bytes[1024 + 0x78] ^= 1; // volume name
    match img.read_all(ChecksumPolicy::Verify) {
        Err(Ext4Error::Checksum { structure, .. }) => assert_eq!(structure, "superblock"),
        other => panic!("{other:?}"),
    }
    img.read_all(ChecksumPolicy::Ignore).expect("ignoring checksums reads on");
    for (field, value) in [(0x18usize, 7u32), (0x28, 0), (0x20, 12), (0x4, 1), (0x14, 0)] {
        let mut bad = image(CSUM);
        bad.put32(1024 + field, value);
        bad.reseal_superblock();
        let e = bad.read_all(ChecksumPolicy::Verify).unwrap_err();
        assert!(matches!(e, Ext4Error::Geometry(_)), "field {field:#x} = {value}: {e}");
    }
    let mut bad = image(CSUM);
    bad.put32(1024 + 0x60, bad.vol().superblock().feature_incompat | 0x1); // compression
    bad.reseal_superblock();
    assert!(matches!(bad.read_all(ChecksumPolicy::Verify), Err(Ext4Error::Unsupported(_))));
}

#[test]
fn descriptor_checksum_and_pointers() {
    skip_without_mke2fs!();
    let mut img = image(CSUM);
    let (block, off) = desc_location(img.vol().superblock(), 0);
    let at = block as usize * img.block_size() + off;
    img.bytes[at + 0xE] ^= 1; // free inodes count
    match img.read_all(ChecksumPolicy::Verify) {
        Err(Ext4Error::Checksum { structure, .. }) => assert_eq!(structure, "group 0 descriptor"),
        other => panic!("{other:?}"),
    }
    // Without descriptor checksums, a pointer outside the volume is caught.
    let mut img = image(PLAIN);
    let (block, off) = desc_location(img.vol().superblock(), 0);
    let at = block as usize * img.block_size() + off;
    img.put32(at + 0x8, 0x7FFF_FFFF); // inode table
    match img.read_all(ChecksumPolicy::Verify) {
        Err(Ext4Error::Descriptor { group: 0, reason, .. }) => assert!(reason.contains("inode table"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bitmap_and_inode_checksums() {
    skip_without_mke2fs!();
    let mut img = image(CSUM);
    let bitmap = img.vol().groups()[0].block_bitmap as usize;
    let at = bitmap * img.block_size() + 100;
    img.bytes[at] ^= 0x10;
    match img.read_all(ChecksumPolicy::Verify) {
        Err(Ext4Error::Checksum { structure, .. }) => assert_eq!(structure, "group 0 block bitmap"),
        other => panic!("{other:?}"),
    }
    let mut img = image(CSUM);
    let ino = img.ino_of("/a");
    let at = img.inode_at(ino) + 0x10; // mtime
    img.bytes[at] ^= 1;
    match img.read_all(ChecksumPolicy::Verify) {
        Err(Ext4Error::Checksum { structure, .. }) => assert_eq!(structure, format!("inode {ino}")),
        other => panic!("{other:?}"),
    }
}

/// Edit file /a's extent root (in its inode) and expect an extent error.
fn extent_case(edit: impl FnOnce(&mut Image, usize), expect: &str) {
    let mut img = image(PLAIN);
    let ino = img.ino_of("/a");
    let root = img.inode_at(ino) + 0x28;
    edit(&mut img, root);
    match img.read_all(ChecksumPolicy::Verify) {
        Err(Ext4Error::ExtentTree { ino: i, reason, .. }) => {
            assert_eq!(i, ino);
            assert!(reason.contains(expect), "{reason} should say {expect}");
        }
        other => panic!("expected an extent tree error ({expect}), got {other:?}"),
    }
}

#[test]
fn extent_headers_and_entries() {
    skip_without_mke2fs!();
    extent_case(|img, root| img.put16(root, 0x1234), "magic");
    extent_case(|img, root| img.put16(root + 2, 5), "entries");
    extent_case(|img, root| img.put16(root + 4, 9), "max");
    extent_case(|img, root| img.put16(root + 6, 6), "depth");
    extent_case(|img, root| img.put16(root + 12 + 4, 0), "length 0");
    extent_case(|img, root| img.put32(root + 12 + 8, 0x00FF_FFFF), "outside the volume");
    // A depth-1 root whose two index entries share one leaf.
    extent_case(
        |img, root| {
            let bs = img.block_size();
            let leaf = img.vol().superblock().blocks_count as usize - 2;
            let data = img.bytes[root + 12 + 8..root + 12 + 12].to_vec();
            let at = leaf * bs;
            img.put16(at, 0xF30A);
            img.put16(at + 2, 1);
            img.put16(at + 4, ((bs - 12) / 12) as u16);
            img.put16(at + 6, 0);
            img.put32(at + 12, 0);
            img.put16(at + 16, 1);
            img.put16(at + 18, 0);
            img.bytes[at + 20..at + 24].copy_from_slice(&data);
            img.put16(root + 2, 2);
            img.put16(root + 6, 1);
            for (i, first) in [(0usize, 0u32), (1, 1)] {
                let e = root + 12 + 12 * i;
                img.put32(e, first);
                img.put32(e + 4, leaf as u32);
                img.put16(e + 8, 0);
            }
        },
        "already in the tree",
    );
}

#[test]
fn overlapping_files_are_caught() {
    skip_without_mke2fs!();
    let mut img = image(PLAIN);
    let (a, b) = (img.ino_of("/a"), img.ino_of("/b"));
    let a_start = img.inode_at(a) + 0x28 + 12 + 8;
    let start = u32::from_le_bytes(img.bytes[a_start..a_start + 4].try_into().unwrap());
    let b_start = img.inode_at(b) + 0x28 + 12 + 8;
    img.put32(b_start, start);
    match img.read_all(ChecksumPolicy::Verify) {
        Err(Ext4Error::Overlap { block, first, second }) => {
            assert_eq!(block, u64::from(start));
            assert_eq!([first.min(second), first.max(second)], [a.min(b), a.max(b)]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn directory_records_and_dangling_entries() {
    skip_without_mke2fs!();
    let img = image(PLAIN);
    let dir = img.ino_of("/dir");
    let vol = img.vol();
    let map = vol.file_map(&vol.inode(dir).unwrap()).unwrap();
    let block = map.extents[0].physical as usize * img.block_size();
    drop(vol);
    // "." has rec_len 12; make it run past the block.
    let mut bad = Image { bytes: img.bytes.clone() };
    bad.put16(block + 4, 0xFFF0);
    assert!(matches!(bad.read_all(ChecksumPolicy::Verify), Err(Ext4Error::Directory { ino, .. }) if ino == dir));
    // An entry naming an inode in the never-used part of the table.
    let mut bad = Image { bytes: img.bytes.clone() };
    let second = block + 12; // ".."
    let last = bad.vol().superblock().inodes_count - 1;
    bad.put32(second + 12, last); // the entry after ".." (f0 or similar)
                                  // The error is the entry's: it names the directory and the block
                                  // that holds the entry.
    let e = bad.read_all(ChecksumPolicy::Verify).unwrap_err();
    let dir_block = (block / img.block_size()) as u64;
    assert!(matches!(e, Ext4Error::Directory { ino, block, .. } if ino == dir && block == dir_block), "{e}");
}

#[test]
fn indirect_pointers_outside_the_volume() {
    skip_without_mke2fs!();
    let mut img = image("-t ext3 -b 1024");
    let a = img.ino_of("/a");
    let at = img.inode_at(a) + 0x28 + 4 * 3; // fourth direct pointer
    img.put32(at, 0x7FFF_FFFF);
    match img.read_all(ChecksumPolicy::Verify) {
        Err(Ext4Error::Indirect { ino, reason, .. }) => {
            assert_eq!(ino, a);
            assert!(reason.contains("outside"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// A source that counts the blocks read through it.
struct Counting {
    bytes: Vec<u8>,
    reads: std::cell::Cell<u64>,
}

impl mballoc_ext4::BlockSource for Counting {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.reads.set(self.reads.get() + 1);
        buf.copy_from_slice(&self.bytes[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
}

#[test]
fn a_block_reached_twice_is_an_error_before_anything_behind_it_is_read() {
    skip_without_mke2fs!();
    // /a (40 KiB on 1 KiB blocks: 12 direct blocks and one indirect
    // block) gains a double-indirect block naming 200 distinct indirect
    // blocks, each holding one pointer: to /a's own first data block.
    let mut img = image("-t ext2 -b 1024");
    let a = img.ino_of("/a");
    let bs = img.block_size();
    let first_data = u32::from_le_bytes(img.bytes[img.inode_at(a) + 0x28..][..4].try_into().unwrap());
    let blocks = (img.bytes.len() / bs) as u32;
    let (dind, first_ind) = (blocks - 300, blocks - 250);
    img.put32(img.inode_at(a) + 0x28 + 13 * 4, dind);
    for k in 0..200u32 {
        img.put32(dind as usize * bs + 4 * k as usize, first_ind + k);
        img.put32((first_ind + k) as usize * bs, first_data);
    }
    let src = Counting { bytes: img.bytes.clone(), reads: std::cell::Cell::new(0) };
    let vol = Ext4Volume::open(src, ChecksumPolicy::Verify).unwrap();
    let before = vol.source().reads.get();
    match vol.walk() {
        Err(Ext4Error::Overlap { block, first, second }) => {
            assert_eq!((block, first, second), (u64::from(first_data), a, a));
        }
        other => panic!("{other:?}"),
    }
    // The walk stops at the first indirect block behind the double one:
    // the other 199 are never read.
    let reads = vol.source().reads.get() - before;
    assert!(reads < 40, "{reads} reads");
}

#[test]
fn a_root_that_is_not_a_directory_is_refused() {
    skip_without_mke2fs!();
    let mut img = image(PLAIN);
    let at = img.inode_at(2);
    img.put16(at, 0x81A4); // a regular file, rw-r--r--
    match img.read_all(ChecksumPolicy::Verify) {
        Err(Ext4Error::Inode { ino: 2, block, reason }) => {
            assert_eq!(block as usize, at / img.block_size());
            assert!(reason.contains("root"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_block_bitmap_over_the_superblock_is_refused() {
    skip_without_mke2fs!();
    // 4 KiB blocks: block 0 holds the superblock.
    let mut img = image("-t ext4 -b 4096 -O ^metadata_csum,^uninit_bg");
    let (block, offset) = desc_location(img.vol().superblock(), 0);
    img.put32(block as usize * img.block_size() + offset, 0);
    match img.open(ChecksumPolicy::Verify).map(drop) {
        Err(Ext4Error::Descriptor { group: 0, block: b, reason }) => {
            assert_eq!(b, block);
            assert!(reason.contains("block bitmap at block 0"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn clusters_per_group_must_match_without_bigalloc() {
    skip_without_mke2fs!();
    for value in [0u32, 4096] {
        let mut img = image(PLAIN);
        img.put32(1024 + 0x24, value);
        match img.open(ChecksumPolicy::Verify).map(drop) {
            Err(Ext4Error::Geometry(why)) => assert!(why.contains("clusters per group"), "{why}"),
            other => panic!("{value}: {other:?}"),
        }
    }
}

#[test]
fn a_directory_loop_names_the_block_holding_the_entry() {
    skip_without_mke2fs!();
    let img = image(PLAIN);
    let dir = img.ino_of("/dir");
    let vol = img.vol();
    let map = vol.file_map(&vol.inode(dir).unwrap()).unwrap();
    let dir_block = map.extents[0].physical;
    let entries = vol.read_dir(&vol.inode(dir).unwrap(), &map).unwrap();
    assert!(entries.iter().all(|e| e.block == dir_block));
    drop(vol);
    // Point the first entry after "." and ".." back at /dir itself.
    let mut bad = Image { bytes: img.bytes.clone() };
    let at = dir_block as usize * img.block_size() + 12 + 12;
    bad.put32(at, dir);
    match bad.read_all(ChecksumPolicy::Verify) {
        Err(Ext4Error::Directory { ino, block, reason }) => {
            assert_eq!((ino, block), (dir, dir_block));
            assert!(reason.contains("again"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
