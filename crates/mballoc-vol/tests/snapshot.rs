//! A read-only open beside a writer: it sees a state the writer
//! committed, whole, or says it cannot; and it can tell when that state
//! has moved on.

use mballoc_vol::{
    Access, FileDevice, FormatOptions, MemDevice, MountOptions, OpenMode, OpenOptions, VolError, Volume,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn small() -> FormatOptions {
    // A small journal: the writer checkpoints every few commits.
    FormatOptions { block_size: 1024, log_blocks: Some(32), ..FormatOptions::default() }
}

fn snapshot_opts() -> MountOptions {
    MountOptions { access: Access::Snapshot, folio_size: 4096, ..MountOptions::default() }
}

#[test]
fn a_snapshot_sees_what_was_committed_and_knows_when_it_is_stale() {
    let dev = Arc::new(MemDevice::new(16 << 20));
    Volume::format(dev.clone(), &small()).unwrap();
    let writer = Volume::open(dev.clone(), MountOptions::default()).unwrap();
    let mut a = writer.file("/a", OpenOptions::new().write(true).create(true)).unwrap();
    std::io::Write::write_all(&mut a, &[1; 5000]).unwrap();
    a.sync_all().unwrap();
    // Written but not committed: not in the snapshot.
    writer.file("/b", OpenOptions::new().write(true).create(true)).unwrap().write_at(&[2; 100], 0).unwrap();
    let ro = MountOptions { access: Access::ReadOnly, ..MountOptions::default() };
    assert!(matches!(Volume::open(dev.clone(), ro), Err(VolError::Busy { .. })), "read-only beside a writer");
    let snap = Volume::open(dev.clone(), snapshot_opts()).unwrap();
    assert_eq!(snap.read_dir("/").unwrap().into_iter().map(|e| e.name).collect::<Vec<_>>(), vec![b"a".to_vec()]);
    let mut back = vec![0u8; 5000];
    snap.file("/a", OpenOptions::new().read(true)).unwrap().read_at(&mut back, 0).unwrap();
    assert!(back.iter().all(|&x| x == 1));
    assert!(snap.snapshot_is_current().unwrap());
    assert!(matches!(
        snap.file("/a", OpenOptions::new().write(true)).unwrap().write_at(b"x", 0),
        Err(VolError::ReadOnly)
    ));
    a.sync_all().unwrap(); // commits /b's name too
    assert!(!snap.snapshot_is_current().unwrap());
    let again = Volume::open(dev.clone(), snapshot_opts()).unwrap();
    assert_eq!(
        again.read_dir("/").unwrap().into_iter().map(|e| e.name).collect::<Vec<_>>(),
        vec![b"a".to_vec(), b"b".to_vec()]
    );
}

#[test]
fn snapshots_taken_while_a_writer_runs_are_whole() {
    let dev = Arc::new(MemDevice::new(32 << 20));
    Volume::format(dev.clone(), &small()).unwrap();
    let writer = Volume::open(dev.clone(), MountOptions { commit_interval_ops: 0, ..MountOptions::default() }).unwrap();
    let stop = AtomicBool::new(false);
    let (mut whole, mut stale, mut busy) = (0, 0, 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Files are written once and fsynced, then unlinked later: a
            // committed name always has its whole contents.
            for i in 0u32..400 {
                let name = format!("/f{i}");
                let f = writer.file(&name, OpenOptions::new().write(true).create(true)).unwrap();
                f.write_at(&vec![(i % 251) as u8 + 1; 3000 + (i as usize % 7) * 1000], 0).unwrap();
                f.sync_all().unwrap();
                if i >= 20 {
                    writer.unlink_at(writer.root(), format!("f{}", i - 20).as_bytes()).unwrap();
                }
            }
            writer.sync().unwrap(); // the last unlink committed too
            stop.store(true, Ordering::Release);
        });
        while !stop.load(Ordering::Acquire) {
            let snap = match Volume::open(dev.clone(), snapshot_opts()) {
                Ok(s) => s,
                Err(VolError::Busy { .. }) => {
                    busy += 1;
                    continue;
                }
                Err(e) => panic!("a snapshot beside a writer: {e}"),
            };
            let mut ok = true;
            for name in snap.read_dir("/").unwrap().into_iter().map(|e| e.name).collect::<Vec<_>>() {
                let name = String::from_utf8(name).unwrap();
                let i: u32 = name[1..].parse().unwrap();
                let id = snap.resolve(&name).unwrap();
                let mut b = vec![0u8; snap.size(id).unwrap() as usize];
                snap.read(id, 0, &mut b).unwrap();
                ok &= b.len() == 3000 + (i as usize % 7) * 1000 && b.iter().all(|&x| x == (i % 251) as u8 + 1);
            }
            // Blocks the writer freed and reused after the snapshot may
            // show other bytes; a snapshot still current must be exact.
            if snap.snapshot_is_current().unwrap() {
                assert!(ok, "a current snapshot read a file wrong");
                whole += 1;
            } else {
                stale += 1;
            }
        }
    });
    eprintln!("{whole} snapshots current and exact, {stale} overtaken by the writer, {busy} retried out");
    // The writer done, a snapshot is current and shows its last 20 files.
    let last = Volume::open(dev.clone(), snapshot_opts()).unwrap();
    assert!(last.snapshot_is_current().unwrap());
    let names: Vec<Vec<u8>> = (380..400).map(|i| format!("f{i}").into_bytes()).collect();
    let mut listed = last.read_dir("/").unwrap().into_iter().map(|e| e.name).collect::<Vec<_>>();
    listed.sort();
    let mut want = names.clone();
    want.sort();
    assert_eq!(listed, want);
}

#[test]
fn another_process_may_hold_the_file_read_write() {
    let dir = mballoc_testkit::Scratch::new("snapshot");
    let path = dir.join("vol");
    let dev = FileDevice::create_new(&path, 16 << 20).unwrap();
    let dev: Arc<dyn mballoc_vol::Device> = Arc::new(dev);
    Volume::format(dev.clone(), &small()).unwrap();
    let writer = Volume::open(dev, MountOptions::default()).unwrap();
    writer.file("/x", OpenOptions::new().write(true).create(true)).unwrap().sync_all().unwrap();
    assert!(matches!(FileDevice::open(&path, OpenMode::ReadOnly), Err(VolError::Busy { .. })));
    let snap = Volume::open(Arc::new(FileDevice::open(&path, OpenMode::Snapshot).unwrap()), snapshot_opts()).unwrap();
    assert_eq!(snap.read_dir("/").unwrap().into_iter().map(|e| e.name).collect::<Vec<_>>(), vec![b"x".to_vec()]);
}
