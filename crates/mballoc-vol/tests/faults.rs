//! Device errors at every point: a seeded workload runs once to count its
//! device calls, then again for each read, write and flush number N with
//! that call failing (once, and from then on). Every failure must be a
//! typed error from the call that met it, never a panic; an operation
//! that fails must leave its file as it was (a direct write may leave
//! part of its range written); after a failed commit the volume refuses
//! writes and still serves reads. Then the device is healed and mounted
//! again: `check` is clean, no block is lost or owned twice, and every
//! file whose fsync returned, and that did not change after, reads back
//! exactly.
//!
//! Size knobs: `MBALLOC_FAULT_SEEDS` (workloads, default 3),
//! `MBALLOC_FAULT_OPS` (operations per workload, default 150) and
//! `MBALLOC_FAULT_SEED` (the first seed).

mod common;

use mballoc_fs::{FallocateMode, FileId};
use mballoc_vol::fault::{DeviceOp, Fault, FaultyDevice, Persistence};
use mballoc_vol::{FormatOptions, MemDevice, MountOptions, VolError, Volume};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

const BS: u64 = 1024;

fn format_opts() -> FormatOptions {
    FormatOptions {
        block_size: BS as u32,
        blocks_per_group: Some(1024),
        log_blocks: Some(24),
        inode_count: Some(32),
        tree_blocks: Some(48),
    }
}

fn mount_opts() -> MountOptions {
    MountOptions {
        folio_size: 4096,
        cache_bytes: 128 << 10,
        dirty_bytes: 32 << 10,
        commit_interval_ops: 7,
        ..MountOptions::default()
    }
}

/// What the workload believes of a file.
#[derive(Debug, Clone)]
struct FileModel {
    /// Its contents, if every operation on it either succeeded or
    /// changed nothing.
    data: Option<Vec<u8>>,
    /// Its contents as of its last fsync that returned, if nothing was
    /// done to it since.
    synced: Option<Vec<u8>>,
}

impl FileModel {
    fn changed(&mut self) {
        self.synced = None;
    }
}

type Device = FaultyDevice<MemDevice>;

/// Run the workload with `fault`; returns the device and the files.
fn run(
    seed: u64,
    ops: u64,
    image: &[u8],
    fault: Option<Fault>,
) -> Result<(Arc<Device>, BTreeMap<FileId, FileModel>), String> {
    let dev = Arc::new(FaultyDevice::new(MemDevice::from_bytes(image.to_vec()), fault));
    let mut files: BTreeMap<FileId, FileModel> = BTreeMap::new();
    // Every other seed streams buffered writes of two blocks or more
    // straight to their blocks (the mount's write-through path).
    let streamed = seed % 2 == 1;
    let opts = MountOptions { write_through_bytes: if streamed { 2 * BS } else { 0 }, ..mount_opts() };
    let vol = match Volume::open(dev.clone(), opts) {
        Ok(v) => v,
        Err(e) if dev.tripped() => {
            let _: VolError = e;
            return Ok((dev, files));
        }
        Err(e) => return Err(format!("mount: {e}")),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut aborted = false;
    for step in 0..ops {
        let pick = rng.gen_range(0..100);
        let ids: Vec<FileId> = files.keys().copied().collect();
        if ids.is_empty() || (pick < 8 && ids.len() < 5) {
            match vol.create() {
                Ok(f) => {
                    files.insert(f, FileModel { data: Some(Vec::new()), synced: None });
                }
                Err(e) => note(&dev, &mut aborted, step, "create", e)?,
            }
            continue;
        }
        let f = ids[rng.gen_range(0..ids.len())];
        let m = files.get_mut(&f).expect("listed");
        let size = vol.size(f).map_err(|e| format!("step {step}: size: {e}"))?;
        if let Some(d) = &m.data {
            if d.len() as u64 != size {
                return Err(format!("step {step}: {f:?} has size {size}, the model {}", d.len()));
            }
        }
        match pick {
            8..=40 => {
                let mut off = rng.gen_range(0..=size + 6000).min(300_000);
                let mut len = rng.gen_range(1..16_000);
                if pick < 18 {
                    // Whole blocks: streamed where the mount streams.
                    off = off / BS * BS;
                    len = (len as u64 / BS).max(1) as usize * BS as usize;
                }
                let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                match vol.write(f, off, &bytes) {
                    Ok(()) => {
                        m.changed();
                        if let Some(d) = &mut m.data {
                            if d.len() < off as usize + len {
                                d.resize(off as usize + len, 0);
                            }
                            d[off as usize..off as usize + len].copy_from_slice(&bytes);
                        }
                    }
                    Err(e) => note(&dev, &mut aborted, step, "write", e)?,
                }
            }
            41..=47 => {
                let off = rng.gen_range(0..=size / BS + 3) * BS;
                let len = rng.gen_range(1..10) * BS;
                let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                match vol.write_direct(f, off, &bytes) {
                    Ok(()) => {
                        m.changed();
                        if let Some(d) = &mut m.data {
                            if (d.len() as u64) < off + len {
                                d.resize((off + len) as usize, 0);
                            }
                            d[off as usize..(off + len) as usize].copy_from_slice(&bytes);
                        }
                    }
                    Err(e) => {
                        // Part of the range may have been written.
                        m.changed();
                        m.data = None;
                        note(&dev, &mut aborted, step, "direct write", e)?;
                    }
                }
            }
            48..=54 => {
                let to = rng.gen_range(0..=size + 3000);
                match vol.truncate(f, to) {
                    Ok(()) => {
                        m.changed();
                        if let Some(d) = &mut m.data {
                            d.resize(to as usize, 0);
                        }
                    }
                    Err(e) => note(&dev, &mut aborted, step, "truncate", e)?,
                }
            }
            55..=59 if size > 0 => {
                let off = rng.gen_range(0..size);
                let len = rng.gen_range(1..=size - off + 2000);
                match vol.punch_hole(f, off, len) {
                    Ok(()) => {
                        m.changed();
                        if let Some(d) = &mut m.data {
                            let end = (off + len).min(size);
                            d[off as usize..end as usize].fill(0);
                        }
                    }
                    Err(e) => note(&dev, &mut aborted, step, "punch", e)?,
                }
            }
            60..=64 => {
                let off = rng.gen_range(0..size + 10_000);
                let len = rng.gen_range(1..30_000);
                let mode = if rng.gen_bool(0.5) { FallocateMode::KeepSize } else { FallocateMode::ExtendSize };
                match vol.fallocate(f, off, len, mode) {
                    Ok(()) => {
                        m.changed();
                        if let Some(d) = &mut m.data {
                            if mode == FallocateMode::ExtendSize && d.len() < (off + len) as usize {
                                d.resize((off + len) as usize, 0);
                            }
                        }
                    }
                    Err(e) => note(&dev, &mut aborted, step, "fallocate", e)?,
                }
            }
            65..=84 => match vol.fsync(f) {
                Ok(()) => {
                    if aborted {
                        return Err(format!("step {step}: fsync succeeded on an aborted volume"));
                    }
                    m.synced = m.data.clone();
                }
                Err(e) => note(&dev, &mut aborted, step, "fsync", e)?,
            },
            85..=88 => match vol.unlink(f) {
                Ok(()) => {
                    files.remove(&f);
                }
                Err(e) => note(&dev, &mut aborted, step, "unlink", e)?,
            },
            89..=91 => match vol.sync() {
                Ok(()) => files.values_mut().for_each(|m| m.synced = m.data.clone()),
                Err(e) => note(&dev, &mut aborted, step, "sync", e)?,
            },
            _ => {
                // A read: what the model says, unless the device failed it.
                let mut got = vec![0u8; size as usize];
                match vol.read(f, 0, &mut got) {
                    Ok(n) => {
                        if let Some(d) = &m.data {
                            if n != d.len() || got != *d {
                                return Err(format!("step {step}: {f:?} reads other bytes than were written"));
                            }
                        }
                    }
                    Err(e) => {
                        if !matches!(e, VolError::Io { .. }) {
                            return Err(format!("step {step}: read failed with {e}"));
                        }
                    }
                }
            }
        }
    }
    // Reads keep working, aborted or not, while the device reads.
    if !matches!(fault, Some(Fault { op: DeviceOp::Read, persistence: Persistence::FromThenOn, .. })) {
        for (f, m) in &files {
            let Some(d) = &m.data else { continue };
            let mut got = vec![0u8; d.len()];
            match vol.read(*f, 0, &mut got) {
                Ok(n) if n == d.len() && got == *d => {}
                Ok(_) => return Err(format!("at the end: {f:?} reads other bytes than were written")),
                Err(VolError::Io { .. }) if fault.is_some_and(|x| x.op == DeviceOp::Read) => {}
                Err(e) => return Err(format!("at the end: reading {f:?}: {e}")),
            }
        }
    }
    vol.abandon(); // a crash
    Ok((dev, files))
}

/// A failed call: a device error where the device failed, read-only
/// after the journal aborted, and nothing else.
fn note(dev: &Device, aborted: &mut bool, step: u64, what: &str, e: VolError) -> Result<(), String> {
    match &e {
        VolError::Io { .. } if dev.tripped() => {}
        VolError::ReadOnly if dev.tripped() => {}
        VolError::Fs(mballoc_fs::FsError::NoSpace { .. }) | VolError::MetadataFull { .. } => return Ok(()),
        _ => return Err(format!("step {step}: {what} failed with {e}, the device {}", tripped_or_not(dev))),
    }
    if matches!(e, VolError::ReadOnly) {
        *aborted = true;
    }
    Ok(())
}

fn tripped_or_not(dev: &Device) -> &'static str {
    if dev.tripped() {
        "having failed"
    } else {
        "never failing"
    }
}

/// Mount the healed device and check it.
fn verify(dev: &Device, files: &BTreeMap<FileId, FileModel>) -> Result<(), String> {
    dev.heal();
    let vol = common::mount_checked(Arc::new(MemDevice::from_bytes(dev.inner().to_bytes())), mount_opts())?;
    for (f, m) in files {
        if let Some(want) = &m.synced {
            common::reads_back(&vol, *f, want)?;
        }
    }
    Ok(())
}

#[test]
fn every_device_error_is_typed_and_loses_nothing_fsynced() {
    let seeds = mballoc_testkit::knob("MBALLOC_FAULT_SEEDS", 3);
    let ops = mballoc_testkit::knob("MBALLOC_FAULT_OPS", 150);
    let base = mballoc_testkit::knob("MBALLOC_FAULT_SEED", 0xFA17);
    let fresh = Arc::new(MemDevice::new(4 << 20));
    Volume::format(fresh.clone(), &format_opts()).unwrap();
    let image = fresh.to_bytes();
    let mut points = 0;
    for seed in base..base + seeds {
        let (clean, files) = run(seed, ops, &image, None).unwrap_or_else(|e| panic!("MBALLOC_FAULT_SEED={seed}: {e}"));
        verify(&clean, &files).unwrap_or_else(|e| panic!("MBALLOC_FAULT_SEED={seed}, no fault: {e}"));
        for op in [DeviceOp::Read, DeviceOp::Write, DeviceOp::Flush] {
            for nth in 1..=clean.calls(op) {
                for persistence in [Persistence::Once, Persistence::FromThenOn] {
                    let fault = Fault::eio(op, nth, persistence);
                    let what = format!("MBALLOC_FAULT_SEED={seed}, {op:?} {nth} failing {persistence:?}");
                    let outcome = std::panic::catch_unwind(|| {
                        let (dev, files) = run(seed, ops, &image, Some(fault))?;
                        verify(&dev, &files)
                    });
                    match outcome {
                        Ok(Ok(())) => points += 1,
                        Ok(Err(e)) => panic!("{what}: {e}"),
                        Err(_) => panic!("{what}: panicked"),
                    }
                }
            }
        }
    }
    eprintln!("{points} fault points verified");
    if seeds >= 3 && ops >= 150 {
        assert!(points >= 1000, "only {points} fault points");
    }
}

#[test]
fn a_full_host_disk_under_a_volume_turns_it_read_only_and_loses_nothing() {
    // ENOSPC from every write from the 40th on: the sparse volume file
    // can no longer grow.
    let fresh = Arc::new(MemDevice::new(4 << 20));
    Volume::format(fresh.clone(), &format_opts()).unwrap();
    let fault = Fault { op: DeviceOp::Write, nth: 40, persistence: Persistence::FromThenOn, errno: libc::ENOSPC };
    let dev = Arc::new(FaultyDevice::new(MemDevice::from_bytes(fresh.to_bytes()), Some(fault)));
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let mut kept = Vec::new();
    let mut failed = None;
    for i in 0..200u32 {
        let f = match vol.create() {
            Ok(f) => f,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        let data = vec![i as u8; 3000 + i as usize * 10];
        let done = vol.write(f, 0, &data).and_then(|()| vol.fsync(f));
        match done {
            Ok(()) => kept.push((f, data)),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let e = failed.expect("the disk filled");
    assert!(matches!(&e, VolError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC)), "{e}");
    // A failed data write leaves the volume writable (the data stays
    // dirty); the next commit cannot write either and turns it read-only.
    if let Ok(f) = vol.create() {
        assert!(vol.fsync(f).is_err(), "the journal cannot be written");
    }
    let again = vol.create().and_then(|f| vol.write(f, 0, b"x"));
    assert!(matches!(again, Err(VolError::ReadOnly)), "{again:?}");
    for (f, data) in &kept {
        let mut got = vec![0u8; data.len()];
        assert_eq!(vol.read(*f, 0, &mut got).unwrap(), data.len());
        assert_eq!(&got, data, "reads keep working");
    }
    vol.abandon();
    let files = kept.into_iter().map(|(f, d)| (f, FileModel { data: Some(d.clone()), synced: Some(d) })).collect();
    verify(&dev, &files).unwrap();
}
