//! Mount, check and repair against crafted volumes: structures that pass
//! every checksum yet say something impossible or contradict each other.
//! Mount refuses them with a typed error and writes nothing; check lists
//! them; repair fixes what is proven bad, refuses (writing nothing) where
//! fixing would destroy something it cannot prove bad, and one repair is
//! always enough.

use crate::check::{check, Repair};
use crate::device::{Device, MemDevice};
use crate::format::{FormatOptions, Superblock, INODE_BYTES, SUPERBLOCK_BYTES};
use crate::mount_options::MountOptions;
use crate::records::InodeRecord;
use crate::volume::Volume;
use crate::wal;
use crate::VolError;
use mballoc_fs::{Change, FileId};
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

fn mount(dev: &Arc<MemDevice>) -> crate::Result<Arc<Volume>> {
    Volume::open(dev.clone(), MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() })
}

fn superblock(dev: &MemDevice) -> Superblock {
    let mut head = vec![0u8; SUPERBLOCK_BYTES];
    dev.read_at(0, &mut head).unwrap();
    Superblock::decode(&head, dev.len()).unwrap()
}

/// A crashed volume whose journal holds one transaction per file: file
/// `i` holds `[i; 3000]`.
fn journal_of(files: u8) -> (Arc<MemDevice>, Vec<FileId>) {
    let dev = Arc::new(MemDevice::new(4 << 20));
    Volume::format(dev.clone(), &opts()).unwrap();
    let ids = fsync_each_then_crash(&dev, files);
    (dev, ids)
}

/// Mount, write `files` files (file `i` holds `[i + 1; 3000]`), each
/// fsynced in its own transaction, and crash.
fn fsync_each_then_crash(dev: &Arc<MemDevice>, files: u8) -> Vec<FileId> {
    let vol = mount(dev).unwrap();
    let mut ids = Vec::new();
    for i in 0..files {
        let f = vol.create().unwrap();
        vol.write(f, 0, &[i + 1; 3000]).unwrap();
        vol.fsync(f).unwrap();
        ids.push(f);
    }
    vol.abandon();
    ids
}

/// `(journal block, blocks, seq, epoch)` of every transaction in order.
fn transactions(dev: &MemDevice) -> Vec<(u64, u64, u64, u64)> {
    let sb = superblock(dev);
    wal::scan(dev, &sb).unwrap().found.iter().map(|f| (f.at, f.blocks, f.seq, sb.checkpoints)).collect()
}

/// Overwrite transaction `k` with `payload` framed as it was (same
/// sequence and epoch, every checksum valid). It must take no more
/// blocks than the original.
fn reframe(dev: &MemDevice, k: usize, payload: &[u8], seq_delta: u64) {
    let sb = superblock(dev);
    let (at, blocks, seq, epoch) = transactions(dev)[k];
    let tx = wal::frame(payload, seq + seq_delta, epoch, sb.seed(), sb.block_size as usize);
    assert!(tx.len() as u64 <= blocks * u64::from(sb.block_size), "the crafted transaction fits its place");
    dev.write_at(sb.offset(sb.log_start + at), &tx).unwrap();
}

fn encoded(changes: &[Change]) -> Vec<u8> {
    let mut b = Vec::new();
    changes.iter().for_each(|c| wal::encode(c, &mut b));
    b
}

/// Mount fails with a typed error and writes nothing.
fn mount_refused(dev: &Arc<MemDevice>) -> VolError {
    let before = dev.to_bytes();
    let e = mount(dev).err().expect("mount refuses");
    assert!(dev.to_bytes() == before, "a refused mount wrote");
    e
}

/// A repair that must be refused: it writes nothing and says why.
fn repair_refused(dev: &Arc<MemDevice>) -> Vec<String> {
    let before = dev.to_bytes();
    let r = check(&**dev, Repair::Yes).unwrap();
    assert!(!r.is_clean() && !r.repaired && !r.refused.is_empty(), "{r:?}");
    assert!(dev.to_bytes() == before, "a refused repair wrote");
    r.refused
}

/// A repair that must succeed in one pass: afterwards the volume
/// mounts and checks clean.
fn repaired(dev: &Arc<MemDevice>) -> Arc<Volume> {
    let r = check(&**dev, Repair::Yes).unwrap();
    assert!(r.repaired && r.refused.is_empty(), "{r:?}");
    converged(dev)
}

/// After a repair: clean, nothing pending, and it mounts.
fn converged(dev: &Arc<MemDevice>) -> Arc<Volume> {
    let again = check(&**dev, Repair::No).unwrap();
    assert!(again.is_clean() && again.pending_transactions == 0, "{again:?}");
    mount(dev).unwrap()
}

fn contents(vol: &Volume, f: FileId) -> Vec<u8> {
    let mut b = vec![0u8; vol.size(f).unwrap() as usize];
    vol.read(f, 0, &mut b).unwrap();
    b
}

#[test]
fn a_backwards_range_in_the_last_transaction_is_refused_then_dropped() {
    for bad in [Change::Unmap { ino: 12, first: 9, end: 3 }, Change::Written { ino: 12, first: 9, end: 3 }] {
        let (dev, ids) = journal_of(2);
        reframe(&dev, 1, &encoded(&[bad]), 0);
        assert!(matches!(mount_refused(&dev), VolError::Corrupt { .. }));
        let r = check(&*dev, Repair::No).unwrap();
        assert!(!r.is_clean());
        // Proven bad and last: the repair drops it and keeps the rest.
        let vol = repaired(&dev);
        assert_eq!(contents(&vol, ids[0]), vec![1; 3000]);
    }
}

#[test]
fn intact_transactions_before_a_bad_one_are_kept() {
    let (dev, ids) = journal_of(3);
    reframe(&dev, 2, &[99u8; 40], 0);
    let vol = repaired(&dev);
    assert_eq!(contents(&vol, ids[0]), vec![1; 3000]);
    assert_eq!(contents(&vol, ids[1]), vec![2; 3000]);
}

#[test]
fn a_bad_transaction_before_intact_ones_refuses_repair() {
    let (dev, _) = journal_of(3);
    reframe(&dev, 1, &[99u8; 40], 0);
    mount_refused(&dev);
    let why = repair_refused(&dev);
    assert!(why.iter().any(|w| w.contains("follows")), "{why:?}");
}

#[test]
fn a_damaged_or_renumbered_transaction_in_the_middle_is_found() {
    // A flipped commit checksum, and a sequence number moved on: the run
    // stops there, and the transactions after it are not silently lost.
    for how in ["flip", "bump"] {
        let (dev, _) = journal_of(3);
        let sb = superblock(&dev);
        let (at, blocks, _, _) = transactions(&dev)[1];
        match how {
            "flip" => {
                let commit = sb.offset(sb.log_start + at + blocks - 1) + 24;
                let mut b = [0u8; 1];
                dev.read_at(commit, &mut b).unwrap();
                dev.write_at(commit, &[b[0] ^ 1]).unwrap();
            }
            _ => {
                let mut tx = vec![0u8; (blocks * u64::from(sb.block_size)) as usize];
                dev.read_at(sb.offset(sb.log_start + at), &mut tx).unwrap();
                let payload_len = u32::from_le_bytes(tx[24..28].try_into().unwrap()) as usize;
                let payload = tx[48..48 + payload_len].to_vec();
                reframe(&dev, 1, &payload, 5);
            }
        }
        let r = check(&*dev, Repair::No).unwrap();
        assert!(!r.is_clean(), "{how}: check calls it clean");
        mount_refused(&dev);
        repair_refused(&dev);
    }
}

#[test]
fn impossible_journal_records_are_refused() {
    let cases: Vec<Vec<Change>> = vec![
        vec![Change::Create { ino: 0 }],
        (100..140).map(|ino| Change::Create { ino }).collect(),
        vec![Change::Size { ino: 12, size: u64::MAX }],
        vec![Change::Map { ino: 12, logical: 0, physical: 3, len: 1, state: mballoc_fs::ExtentState::Written }],
    ];
    for (i, changes) in cases.iter().enumerate() {
        let (dev, ids) = journal_of(2);
        let payload = encoded(changes);
        // Grow the journal's last transaction to fit, if need be: it is
        // last, so nothing after it moves.
        let sb = superblock(&dev);
        let (at, _, seq, epoch) = transactions(&dev)[1];
        let tx = wal::frame(&payload, seq, epoch, sb.seed(), sb.block_size as usize);
        dev.write_at(sb.offset(sb.log_start + at), &tx).unwrap();
        assert!(matches!(mount_refused(&dev), VolError::Corrupt { .. }), "case {i}");
        let vol = repaired(&dev);
        assert_eq!(contents(&vol, ids[0]), vec![1; 3000], "case {i}");
    }
}

#[test]
fn two_valid_inodes_claiming_one_block_refuse_repair() {
    let dev = Arc::new(MemDevice::new(4 << 20));
    Volume::format(dev.clone(), &opts()).unwrap();
    let vol = mount(&dev).unwrap();
    let f = vol.create().unwrap();
    vol.write(f, 0, &[7; 5000]).unwrap();
    vol.unmount().unwrap();
    // Copy the file's inode record into the next slot under another
    // number: two valid records, one set of blocks.
    let sb = superblock(&dev);
    let table = sb.offset(sb.itable_start);
    let mut rec = vec![0u8; INODE_BYTES];
    // Slot 0 holds the root directory, slot 1 the file.
    dev.read_at(table + INODE_BYTES as u64, &mut rec).unwrap();
    let (mut r, _) = InodeRecord::decode(sb.seed(), 1, &rec, sb.itable_start).unwrap().expect("slot 1 in use");
    assert_eq!(r.ino, f.0);
    r.ino += 1;
    r.attr.as_mut().expect("named").links[0].name = b"copy".to_vec();
    let mut copy = vec![0u8; INODE_BYTES];
    r.encode(sb.seed(), 2, &mut copy);
    dev.write_at(table + 2 * INODE_BYTES as u64, &copy).unwrap();
    mount_refused(&dev);
    repair_refused(&dev);
    // The original is still there, whole, once the copy is gone.
    dev.write_at(table + 2 * INODE_BYTES as u64, &vec![0u8; INODE_BYTES]).unwrap();
    assert_eq!(contents(&mount(&dev).unwrap(), f), vec![7; 5000]);
}

#[test]
fn a_self_consistent_but_foreign_superblock_refuses_repair() {
    let (dev, ids) = journal_of(2);
    mount(&dev).unwrap().unmount().unwrap();
    // Same layout, another identity: every checksum seeded from it fails.
    let mut sb = superblock(&dev);
    let original = sb.encode();
    sb.uuid[0] ^= 0xFF;
    dev.write_at(0, &sb.encode()).unwrap();
    mount_refused(&dev);
    let why = repair_refused(&dev);
    assert!(why.iter().any(|w| w.contains("under this superblock")), "{why:?}");
    dev.write_at(0, &original).unwrap();
    assert_eq!(contents(&mount(&dev).unwrap(), ids[1]), vec![2; 3000]);
}

#[test]
fn header_fields_larger_than_the_device_are_refused_before_any_allocation() {
    let dev = Arc::new(MemDevice::new(4 << 20));
    Volume::format(dev.clone(), &opts()).unwrap();
    // Four billion inodes, the layout moved to match: the areas pass the
    // device's end, which is checked before anything is sized by them.
    let mut sb = superblock(&dev);
    sb.inode_count = 4_000_000_000;
    sb.tree_start = sb.itable_start + u64::from(sb.inode_count) / u64::from(sb.inodes_per_block());
    sb.data_start = sb.tree_start + u64::from(sb.tree_blocks);
    sb.total_blocks = sb.data_start + 1000;
    dev.write_at(0, &sb.encode()).unwrap();
    assert!(matches!(check(&*dev, Repair::No), Err(VolError::Corrupt { .. })));
    assert!(matches!(mount(&dev), Err(VolError::Corrupt { .. })));
}

#[test]
fn an_inode_larger_than_the_largest_file_is_refused() {
    let dev = Arc::new(MemDevice::new(4 << 20));
    Volume::format(dev.clone(), &opts()).unwrap();
    let vol = mount(&dev).unwrap();
    let f = vol.create().unwrap();
    vol.write(f, 0, b"small").unwrap();
    vol.unmount().unwrap();
    let sb = superblock(&dev);
    let table = sb.offset(sb.itable_start);
    let mut rec = vec![0u8; INODE_BYTES];
    let at = table + INODE_BYTES as u64; // slot 1: the file, after the root
    dev.read_at(at, &mut rec).unwrap();
    let (mut r, _) = InodeRecord::decode(sb.seed(), 1, &rec, sb.itable_start).unwrap().unwrap();
    assert_eq!(r.ino, f.0);
    r.size = sb.max_file_size() + 1;
    r.encode(sb.seed(), 1, &mut rec);
    dev.write_at(at, &rec).unwrap();
    mount_refused(&dev);
    assert!(!check(&*dev, Repair::No).unwrap().is_clean());
}

/// A volume whose file `A` (`[7; 5000]`) is home, and whose journal holds
/// one transaction per further file (`[i + 1; 3000]`).
fn home_and_journal(files: u8) -> (Arc<MemDevice>, FileId, Vec<FileId>) {
    let dev = Arc::new(MemDevice::new(4 << 20));
    Volume::format(dev.clone(), &opts()).unwrap();
    let vol = mount(&dev).unwrap();
    let a = vol.create().unwrap();
    vol.write(a, 0, &[7; 5000]).unwrap();
    vol.unmount().unwrap();
    let ids = fsync_each_then_crash(&dev, files);
    (dev, a, ids)
}

/// Transaction `k` rewritten to map `thief`'s first blocks onto `victim`'s.
fn steal(dev: &Arc<MemDevice>, k: usize, thief: FileId, victim: FileId) {
    let vol =
        Volume::open(dev.clone(), MountOptions { access: crate::Access::ReadOnly, ..MountOptions::default() }).unwrap();
    let e = vol.extents(victim).unwrap()[0];
    vol.abandon();
    let map =
        Change::Map { ino: thief.0, logical: 0, physical: e.physical, len: 2, state: mballoc_fs::ExtentState::Written };
    reframe(dev, k, &encoded(&[map, Change::Size { ino: thief.0, size: 2048 }]), 0);
}

#[test]
fn a_last_transaction_taking_an_intact_files_blocks_is_refused_unless_forced() {
    let (dev, a, ids) = home_and_journal(2);
    steal(&dev, 1, ids[1], a);
    let e = mount_refused(&dev);
    assert!(e.to_string().contains("intact files own"), "{e}");
    assert!(!check(&*dev, Repair::No).unwrap().is_clean());
    // The transaction or the record it took from is wrong, and which is
    // not known: no repair without an answer chosen.
    let why = repair_refused(&dev);
    assert!(why.iter().any(|w| w.contains("--force drop-journal-tail")), "{why:?}");
    let r = crate::check_with(&*dev, Repair::Yes, &[crate::Force::DropJournalTail]).unwrap();
    assert!(r.repaired && r.forced.len() == 1, "{r:?}");
    let vol = converged(&dev);
    assert_eq!(contents(&vol, a), vec![7; 5000]);
    assert_eq!(contents(&vol, ids[0]), vec![1; 3000]);
}

#[test]
fn an_earlier_transaction_taking_an_intact_files_blocks_refuses_repair() {
    let (dev, a, ids) = home_and_journal(3);
    steal(&dev, 0, ids[0], a);
    mount_refused(&dev);
    let why = repair_refused(&dev);
    assert!(why.iter().any(|w| w.contains("intact files own")), "{why:?}");
}

#[test]
fn a_superblock_whose_sequence_or_epoch_moved_forward_is_found() {
    for field in ["sequence", "epoch", "sequence back"] {
        let (dev, ids) = journal_of(2);
        let mut sb = superblock(&dev);
        let original = sb.encode();
        match field {
            "sequence" => sb.log_seq += 1,
            "epoch" => sb.checkpoints += 1,
            _ => sb.log_seq -= 1,
        }
        dev.write_at(0, &sb.encode()).unwrap();
        let e = mount_refused(&dev);
        assert!(matches!(e, VolError::Corrupt { .. }), "{field}: {e}");
        let r = check(&*dev, Repair::No).unwrap();
        assert!(!r.is_clean(), "{field}: check calls it clean: {r:?}");
        repair_refused(&dev);
        // Put back, the pending transactions replay.
        dev.write_at(0, &original).unwrap();
        let vol = mount(&dev).unwrap();
        assert_eq!(contents(&vol, ids[1]), vec![2; 3000], "{field}");
    }
}

#[test]
fn a_repair_that_drops_a_transaction_starts_the_next_epoch_past_it() {
    // The dropped transaction stays on disk under the old epoch; the
    // next epoch must not start at its sequence, or it would look like a
    // transaction never written home.
    let (dev, _, ids) = home_and_journal(2);
    steal(&dev, 1, ids[1], ids[0]);
    crate::check_with(&*dev, Repair::Yes, &[crate::Force::DropJournalTail]).unwrap();
    converged(&dev).unmount().unwrap();
    assert!(check(&*dev, Repair::No).unwrap().is_clean());
}
