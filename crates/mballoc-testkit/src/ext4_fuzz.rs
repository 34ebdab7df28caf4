//! Inputs of the ext4 reader's fuzz targets, shared with the test that
//! replays the kept ones: small pristine images made once per process
//! with `mke2fs -d`, so inputs mutate real structures.

use std::process::Command;
use std::sync::OnceLock;

/// 1 KiB-block images (metadata_csum off so that mutations reach the
/// parsers behind the checksums, and on so checksums are exercised):
/// /a is a 40 KiB file whose inode the extent target rewrites.
pub fn base(csum: bool) -> &'static [u8] {
    static PLAIN: OnceLock<Vec<u8>> = OnceLock::new();
    static CSUM: OnceLock<Vec<u8>> = OnceLock::new();
    let cell = if csum { &CSUM } else { &PLAIN };
    cell.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mballoc-fuzz-{}-{csum}", std::process::id()));
        let tree = dir.join("tree");
        std::fs::create_dir_all(tree.join("d")).unwrap();
        std::fs::write(tree.join("a"), vec![0xAAu8; 40 << 10]).unwrap();
        std::fs::write(tree.join("d/b"), b"b").unwrap();
        let img = dir.join("img");
        let features = if csum { "metadata_csum" } else { "^metadata_csum,^uninit_bg" };
        let ok = Command::new("mke2fs")
            .args(["-q", "-F", "-t", "ext4", "-b", "1024", "-N", "64", "-O", features, "-d"])
            .arg(&tree)
            .arg(&img)
            .arg("1M")
            .status()
            .expect("mke2fs runs")
            .success();
        assert!(ok, "mke2fs failed");
        let bytes = std::fs::read(&img).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        bytes
    })
}

/// The superblock target's image: the first input byte picks the base
/// image (bit 0: with checksums) and the region (bit 1: descriptors at
/// byte 2048, else the superblock at 1024); the rest overwrites it.
pub fn superblock_image(data: &[u8]) -> Option<Vec<u8>> {
    let (&flags, rest) = data.split_first()?;
    let mut img = base(flags & 1 != 0).to_vec();
    let start = if flags & 2 != 0 { 2048 } else { 1024 };
    let n = rest.len().min(img.len() - start);
    img[start..start + n].copy_from_slice(&rest[..n]);
    Some(img)
}

/// /a's inode: the first one after the reserved inodes (mke2fs -d gives
/// it number 12: lost+found is 11).
const EXTENT_INO: usize = 12;

/// The extent target's image: the first 60 input bytes replace /a's
/// `i_block` (the tree root), the rest fills the volume's last blocks,
/// where index entries may point.
pub fn extent_image(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < 60 {
        return None;
    }
    let mut img = base(false).to_vec();
    let le32 = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    let inode_size = usize::from(u16::from_le_bytes([img[1024 + 0x58], img[1024 + 0x59]]));
    // Group 0's inode table, from its descriptor at block 2.
    let itable = le32(&img, 2048 + 8);
    let at = itable * 1024 + (EXTENT_INO - 1) * inode_size + 0x28;
    img[at..at + 60].copy_from_slice(&data[..60]);
    let rest = &data[60..];
    let n = rest.len().min(16 * 1024);
    let end = img.len();
    img[end - n..].copy_from_slice(&rest[..n]);
    Some(img)
}

/// Read everything the reader can read; errors are expected, panics are bugs.
pub fn exercise(bytes: Vec<u8>) {
    use mballoc_ext4::{ChecksumPolicy, Ext4Volume, MemSource};
    for policy in [ChecksumPolicy::Verify, ChecksumPolicy::Ignore] {
        if let Ok(vol) = Ext4Volume::open(MemSource(bytes.clone()), policy) {
            let _ = vol.for_each_free_run(|_, _| {});
            let _ = vol.walk();
            for claiming in [mballoc_ext4::Claiming::PerFile, mballoc_ext4::Claiming::Volume] {
                let _ = vol.walk_each(claiming, |_| Ok(()));
            }
            let _ = mballoc_ext4::engine::allocator(&vol);
            let _ = mballoc_ext4::engine::load(&vol, |_| {});
        }
    }
}
