//! What a repair does with damage it can answer: files that lost part of
//! their data or their directory go to lost+found with what could be
//! read, and the answers that give something up (`Force`) are taken only
//! when asked for, and reported.

use mballoc_fs::FileId;
use mballoc_vol::mutate::{mutate, structures, Kind, Seal};
use mballoc_vol::{check, check_with, Force, FormatOptions, MemDevice, MountOptions, Owner, Repair, Volume};
use std::sync::Arc;

fn opts() -> FormatOptions {
    FormatOptions {
        block_size: 1024,
        blocks_per_group: Some(1024),
        log_blocks: Some(64),
        inode_count: Some(32),
        tree_blocks: Some(32),
    }
}

fn mount(dev: &Arc<MemDevice>) -> Arc<Volume> {
    Volume::open(dev.clone(), MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() })
        .unwrap()
}

fn read(vol: &Volume, ino: u64) -> Vec<u8> {
    let mut b = vec![0u8; vol.size(FileId(ino)).unwrap() as usize];
    vol.read(FileId(ino), 0, &mut b).unwrap();
    b
}

/// `/dir/{x,y}`, `/frag` (every other block of 200 punched out: 100
/// extents, more than one tree node holds) and `/pad`, unmounted cleanly.
fn volume() -> (Arc<MemDevice>, u64, u64, u64) {
    let dev = Arc::new(MemDevice::new(4 << 20));
    Volume::format(dev.clone(), &opts()).unwrap();
    let vol = mount(&dev);
    let root = vol.root();
    let dir = vol.mkdir_at(root, b"dir", Owner::default()).unwrap();
    for (name, byte) in [(&b"x"[..], 0x11u8), (b"y", 0x22)] {
        let f = vol.create_at(dir, name, Owner::default()).unwrap();
        vol.write(f, 0, &[byte; 1500]).unwrap();
        vol.close(f).unwrap();
    }
    let frag = vol.create_at(root, b"frag", Owner::default()).unwrap();
    let pad = vol.create_at(root, b"pad", Owner::default()).unwrap();
    for i in 0..BLOCKS {
        vol.write(frag, i * 1024, &[i as u8 + 1; 1024]).unwrap();
    }
    vol.fsync(frag).unwrap();
    for i in (1..BLOCKS).step_by(2) {
        vol.punch_hole(frag, i * 1024, 1024).unwrap();
    }
    vol.write(pad, 0, &[0xEE; 40 * 1024]).unwrap();
    vol.close(frag).unwrap();
    vol.close(pad).unwrap();
    vol.unmount().unwrap();
    (dev, dir.0, frag.0, pad.0)
}

const BLOCKS: u64 = 200;

fn lost_found(vol: &Volume) -> Vec<(Vec<u8>, u64)> {
    let lf = vol.lookup(vol.root(), b"lost+found").expect("lost+found exists");
    vol.dir_entries(lf).unwrap().into_iter().map(|e| (e.name, e.ino.0)).collect()
}

fn converged(dev: &Arc<MemDevice>) {
    let r = check(&**dev, Repair::No).unwrap();
    assert!(r.is_clean() && r.pending_transactions == 0, "{r:?}");
}

#[test]
fn the_files_of_a_damaged_directory_go_to_lost_found() {
    let (dev, dir, _, _) = volume();
    let rec = structures(&*dev).unwrap().into_iter().find(|s| s.kind == Kind::Inode && s.owners == [dir]).unwrap();
    mutate(&*dev, &rec, 100, 0x40, Seal::Raw).unwrap();
    let r = check(&*dev, Repair::Yes).unwrap();
    assert!(r.repaired && r.quarantined.len() == 2, "{r:?}");
    converged(&dev);
    let vol = mount(&dev);
    let moved = lost_found(&vol);
    assert_eq!(moved.len(), 2, "{moved:?}");
    let mut contents: Vec<Vec<u8>> = moved.iter().map(|&(_, ino)| read(&vol, ino)).collect();
    contents.sort();
    assert_eq!(contents, vec![vec![0x11; 1500], vec![0x22; 1500]]);
    assert!(vol.lookup(vol.root(), b"dir").is_err());
}

#[test]
fn a_file_with_a_damaged_tree_node_keeps_what_could_be_read_in_lost_found() {
    let (dev, _, frag, pad) = volume();
    // The tree area keeps old copies of nodes too: damage the one in use.
    let image = dev.to_bytes();
    let live =
        structures(&*dev).unwrap().into_iter().filter(|s| s.kind == Kind::TreeNode && s.owners == [frag]).find(|n| {
            let copy = MemDevice::from_bytes(image.clone());
            mutate(&copy, n, 40, 0x01, Seal::Raw).unwrap();
            !check(&copy, Repair::No).unwrap().is_clean()
        });
    mutate(&*dev, &live.expect("frag's tree has a node in use"), 40, 0x01, Seal::Raw).unwrap();
    let r = check(&*dev, Repair::Yes).unwrap();
    assert!(r.repaired, "{r:?}");
    assert!(r.quarantined.iter().any(|q| q.contains(&format!("inode {frag}"))), "{r:?}");
    converged(&dev);
    let vol = mount(&dev);
    assert!(lost_found(&vol).iter().any(|&(_, ino)| ino == frag));
    // Every block still mapped holds what was written there; the others
    // read as holes. The neighbour is untouched.
    let data = read(&vol, frag);
    let n = BLOCKS as usize;
    assert_eq!(data.len(), n * 1024);
    let block = |i: usize| &data[i * 1024..(i + 1) * 1024];
    let kept = (0..n).step_by(2).filter(|&i| block(i).iter().all(|&x| x == i as u8 + 1)).count();
    let holes = (0..n).filter(|&i| block(i).iter().all(|&x| x == 0)).count();
    assert_eq!(kept + holes, n);
    assert!(kept > 0 && holes > 0, "{kept} blocks kept, {holes} lost");
    assert_eq!(read(&vol, pad), vec![0xEE; 40 * 1024]);
}

#[test]
fn leaked_bitmap_bits_are_freed_only_when_asked() {
    let (dev, ..) = volume();
    let bitmap = structures(&*dev).unwrap().into_iter().find(|s| s.kind == Kind::Bitmap).unwrap();
    // The last bytes of group 0's bitmap: blocks no file holds.
    for at in 100..113 {
        mutate(&*dev, &bitmap, at, 0xFF, Seal::Resealed).unwrap();
    }
    let before = dev.to_bytes();
    let r = check(&*dev, Repair::Yes).unwrap();
    assert!(!r.repaired && r.refused.iter().any(|w| w.contains("--force free-unowned")), "{r:?}");
    assert!(dev.to_bytes() == before, "a refused repair wrote");
    let r = check_with(&*dev, Repair::Yes, &[Force::FreeUnowned]).unwrap();
    assert!(r.repaired && r.forced.iter().any(|f| f.starts_with("free-unowned")), "{r:?}");
    converged(&dev);
}

#[test]
fn force_without_need_changes_nothing_it_would_not() {
    let (dev, ..) = volume();
    let before = dev.to_bytes();
    let r = check_with(&*dev, Repair::Yes, &[Force::FreeUnowned, Force::DropJournalTail]).unwrap();
    assert!(r.is_clean() && !r.repaired && r.forced.is_empty(), "{r:?}");
    assert!(dev.to_bytes() == before);
}

/// An empty file whose record is intact and whose attribute blocks are
/// not goes to lost+found like any file read in part (as FORMAT.md says),
/// not away as an orphan.
#[test]
fn an_empty_file_with_damaged_attributes_goes_to_lost_found() {
    let dev = Arc::new(MemDevice::new(4 << 20));
    Volume::format(dev.clone(), &opts()).unwrap();
    let vol = mount(&dev);
    let f = vol.create_at(vol.root(), b"empty", Owner::default()).unwrap();
    // Attributes long enough for an overflow block.
    vol.set_xattr_at(f, b"user.long", &[0x5A; 900], mballoc_vol::XattrSet::Any).unwrap();
    vol.close(f).unwrap();
    vol.unmount().unwrap();
    let block = structures(&*dev)
        .unwrap()
        .into_iter()
        .find(|s| s.kind == Kind::Attributes && s.owners == [f.0])
        .expect("the file has an overflow block");
    mutate(&*dev, &block, 40, 0x01, Seal::Raw).unwrap();
    let r = check(&*dev, Repair::Yes).unwrap();
    assert!(r.repaired, "{r:?}");
    assert!(r.quarantined.iter().any(|q| q.contains(&format!("inode {}", f.0))), "{r:?}");
    converged(&dev);
    let vol = mount(&dev);
    assert!(lost_found(&vol).iter().any(|&(_, ino)| ino == f.0), "{:?}", lost_found(&vol));
    assert_eq!(vol.size(f).unwrap(), 0);
}
