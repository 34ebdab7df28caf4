//! Real crashes: a child process runs a seeded multi-threaded workload on
//! a volume file and is killed with SIGKILL at a random moment; the parent
//! mounts the volume again, checks it, and reads back every file whose
//! last fsync returned before the kill and that nothing touched after.
//!
//! The child writes its own account to a side log, each line made
//! durable before it goes on: `begin F` before it changes file F, `synced
//! F V` after an fsync of F holding version V returned. A file whose last
//! line is `synced` must read back as that version exactly.
//!
//! And the commit interval, through the library alone: a child writes a
//! file, never fsyncs it, and is killed after the interval; the file is
//! there, as ext4's `commit=` promises.
//!
//! Size knobs: `MBALLOC_KILLS` (kills, default 20), `MBALLOC_KILL_SEED`
//! (the first seed).

mod common;

use mballoc_vol::{FileDevice, FileId, FormatOptions, MountOptions, OpenMode, Overwrite, Volume};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const THREADS: u64 = 4;

/// Version `v` of a file: its length and bytes follow from `(f, v)`.
fn version(f: u64, v: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(f.wrapping_mul(1_000_003) ^ v);
    let len = rng.gen_range(1..40_000);
    (0..len).map(|_| rng.gen()).collect()
}

fn mount_opts() -> MountOptions {
    MountOptions { folio_size: 16384, dirty_bytes: 256 << 10, commit_interval_ops: 50, ..MountOptions::default() }
}

/// The side log, one durable line at a time.
struct Account(Mutex<std::fs::File>);

impl Account {
    fn say(&self, line: String) {
        let mut f = self.0.lock().unwrap();
        writeln!(f, "{line}").unwrap();
        f.sync_data().unwrap();
    }
}

/// The child: run until killed.
fn child(volume: &Path, account: &Path, seed: u64) {
    let dev = Arc::new(FileDevice::open(volume, OpenMode::ReadWrite).unwrap());
    let vol = Volume::open(dev, mount_opts()).unwrap();
    let log =
        Arc::new(Account(Mutex::new(std::fs::OpenOptions::new().append(true).create(true).open(account).unwrap())));
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let (vol, log) = (vol.clone(), log.clone());
        handles.push(std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 31 + t);
            // This thread's files: the ones it made in earlier lives are
            // not known to it; it makes new ones.
            let mut mine: Vec<(FileId, u64)> = Vec::new();
            loop {
                if mine.len() < 3 || rng.gen_bool(0.05) {
                    let f = vol.create().unwrap();
                    mine.push((f, 0));
                    continue;
                }
                let i = rng.gen_range(0..mine.len());
                let (f, v) = mine[i];
                log.say(format!("begin {}", f.0));
                match rng.gen_range(0..10) {
                    0..=6 => {
                        let v = v + 1;
                        let data = version(f.0, v);
                        vol.truncate(f, 0).unwrap();
                        vol.write(f, 0, &data).unwrap();
                        vol.fsync(f).unwrap();
                        log.say(format!("synced {} {v}", f.0));
                        mine[i].1 = v;
                    }
                    7 => {
                        let size = vol.size(f).unwrap();
                        vol.write(f, size / 2, &[0xEE; 5000]).unwrap();
                    }
                    8 => {
                        vol.punch_hole(f, 1000, 9000).unwrap();
                    }
                    _ => {
                        vol.unlink(f).unwrap();
                        mine.remove(i);
                    }
                }
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
}

/// The child process's entry: a test that does nothing unless the parent
/// started it.
#[test]
fn kill_child() {
    let Ok(volume) = std::env::var("MBALLOC_KILL_VOLUME") else { return };
    let account = std::env::var("MBALLOC_KILL_ACCOUNT").unwrap();
    let seed: u64 = std::env::var("MBALLOC_KILL_CHILD_SEED").unwrap().parse().unwrap();
    child(Path::new(&volume), Path::new(&account), seed);
}

/// What the account says each file must hold: `Some(v)` when its last
/// line is `synced F V`.
fn expected(account: &Path) -> HashMap<u64, Option<u64>> {
    let mut out = HashMap::new();
    let text = std::fs::read_to_string(account).unwrap_or_default();
    for line in text.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        match w.as_slice() {
            ["begin", f] => {
                out.insert(f.parse().unwrap(), None);
            }
            ["synced", f, v] => {
                out.insert(f.parse().unwrap(), Some(v.parse().unwrap()));
            }
            // A line cut by the kill.
            _ => {}
        }
    }
    out
}

fn verify(volume: &Path, account: &Path) -> Result<usize, String> {
    let dev = Arc::new(FileDevice::open(volume, OpenMode::ReadWrite).map_err(|e| format!("reopen: {e}"))?);
    let vol = common::mount_checked(dev, mount_opts())?;
    let mut verified = 0;
    for (f, v) in expected(account) {
        if let Some(v) = v {
            common::reads_back(&vol, FileId(f), &version(f, v)).map_err(|e| format!("version {v} synced: {e}"))?;
            verified += 1;
        }
    }
    vol.unmount().map_err(|e| format!("unmount: {e}"))?;
    Ok(verified)
}

#[test]
fn sigkill_at_random_moments_loses_nothing_fsynced() {
    let kills = mballoc_testkit::knob("MBALLOC_KILLS", 20);
    let base = mballoc_testkit::knob("MBALLOC_KILL_SEED", 0x4B11);
    let dir = mballoc_testkit::Scratch::new("kill");
    let volume: PathBuf = dir.join("vol");
    let account: PathBuf = dir.join("account");
    let fo = FormatOptions { block_size: 4096, ..FormatOptions::default() };
    mballoc_vol::mkfs(&volume, Some(64 << 20), &fo, Overwrite::Refuse).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(base);
    let mut verified = 0;
    for k in 0..kills {
        let seed = base + k;
        let mut c = std::process::Command::new(&exe)
            .args(["kill_child", "--exact", "--nocapture", "--test-threads=1"])
            .env("MBALLOC_KILL_VOLUME", &volume)
            .env("MBALLOC_KILL_ACCOUNT", &account)
            .env("MBALLOC_KILL_CHILD_SEED", seed.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.gen_range(40..400)));
        let early = c.try_wait().unwrap();
        let _ = c.kill();
        let out = c.wait_with_output().unwrap();
        if let Some(status) = early {
            panic!(
                "MBALLOC_KILL_SEED={seed}: the child ended by itself ({status}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        match verify(&volume, &account) {
            Ok(n) => verified += n,
            Err(e) => panic!("MBALLOC_KILL_SEED={seed}, after kill {k}: {e}"),
        }
    }
    eprintln!("{kills} kills, {verified} fsync'ed files verified");
    assert!(verified > 0, "no fsync completed before any kill");
}

/// The interval's child: write a file and a directory, never sync, say so,
/// then wait to be killed.
#[test]
fn interval_child() {
    let Ok(volume) = std::env::var("MBALLOC_INTERVAL_VOLUME") else { return };
    let account = std::env::var("MBALLOC_INTERVAL_ACCOUNT").unwrap();
    let dev = Arc::new(FileDevice::open(Path::new(&volume), OpenMode::ReadWrite).unwrap());
    let opts = MountOptions { commit: Duration::from_secs(1), commit_interval_ops: 0, ..MountOptions::default() };
    let vol = Volume::open(dev, opts).unwrap();
    vol.create_dir("/kept").unwrap();
    let mut f = vol.file("/kept/data", mballoc_vol::OpenOptions::new().write(true).create(true)).unwrap();
    f.write_all(&version(1, 1)).unwrap();
    drop(f);
    let log = Account(Mutex::new(std::fs::File::create(account).unwrap()));
    log.say("written".into());
    std::thread::sleep(Duration::from_secs(3600));
}

/// Written without an fsync more than the commit interval before a kill
/// -9: durable, through the library alone.
#[test]
fn the_commit_interval_makes_unsynced_writes_durable() {
    let dir = mballoc_testkit::Scratch::new("interval");
    let volume: PathBuf = dir.join("vol");
    let account: PathBuf = dir.join("account");
    mballoc_vol::mkfs(&volume, Some(64 << 20), &FormatOptions::default(), Overwrite::Refuse).unwrap();
    let mut c = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["interval_child", "--exact", "--nocapture", "--test-threads=1"])
        .env("MBALLOC_INTERVAL_VOLUME", &volume)
        .env("MBALLOC_INTERVAL_ACCOUNT", &account)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(&account).is_ok_and(|a| a.contains("written")) {
        assert!(c.try_wait().unwrap().is_none(), "the child ended by itself");
        assert!(t0.elapsed() < Duration::from_secs(30), "the child never wrote");
        std::thread::sleep(Duration::from_millis(10));
    }
    // One interval and a half: the sync that starts within half an
    // interval of the write has had another half to finish.
    std::thread::sleep(Duration::from_millis(1500));
    let _ = c.kill(); // SIGKILL
    c.wait().unwrap();
    let dev = Arc::new(FileDevice::open(&volume, OpenMode::ReadWrite).unwrap());
    let vol = common::mount_checked(dev, mount_opts()).unwrap();
    let f = vol.resolve("/kept/data").expect("the directory and the file are there");
    common::reads_back(&vol, f, &version(1, 1)).unwrap();
}
