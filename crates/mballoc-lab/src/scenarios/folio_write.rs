//! Seed 004's buffered-write table: one file written sequentially at
//! 4 KiB, 64 KiB and 1 MiB per call, in three modes — `cache` (the data
//! stays in the cache), `sync` (every write is followed by fsync, fio's
//! sync=1) and `writeback` (buffered, written back as it goes, fsync at
//! the end). The engine runs a persistent volume in /dev/shm with small
//! (4 KiB) and large (2 MiB) folios; kernel ext4 runs on a loop-mounted
//! image in /dev/shm with its own folio policy.

use super::{for_each_variant, Env, Stats, Variant};
use crate::error::{Context, LabError};
use crate::loop_mount::KernelFs;
use crate::report::{col, Plot, Row, ScenarioReport};
use mballoc_vol::MountOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};

/// One line for `lab list`.
pub const ABOUT: &str =
    "seed 004: buffered write IOPS and MiB/s at 4 KiB / 64 KiB / 1 MiB, cache / sync / writeback, small vs large folios";

const BLOCK: u32 = 4096;
const SIZES: [u64; 3] = [4 << 10, 64 << 10, 1 << 20];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Cache,
    Sync,
    Writeback,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Cache => "cache",
            Mode::Sync => "sync",
            Mode::Writeback => "writeback",
        }
    }
}

/// Bytes written per row.
fn total(env: &Env, mode: Mode) -> u64 {
    match (env.quick, mode) {
        (true, Mode::Sync) => 4 << 20,
        (true, _) => 32 << 20,
        (false, Mode::Sync) => 32 << 20,
        (false, _) => 256 << 20,
    }
}

fn row(backend: &str, variant: &str, mode: Mode, bs: u64, bytes: u64, elapsed: Duration) -> Row {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mut r = Row::new(backend, variant);
    r.set("mode", mode.name())
        .set("bs_kib", bs >> 10)
        .set("iops", ((bytes / bs) as f64 / secs).round())
        .set("mib_per_s", (bytes as f64 / secs / f64::from(1 << 20) * 10.0).round() / 10.0);
    r
}

/// The MountOptions of an engine row: `folio`-byte folios, a cache that
/// holds the whole file, and (but in cache mode) a 64 MiB dirty limit.
fn mount_options(folio: u32, mode: Mode, bytes: u64) -> MountOptions {
    MountOptions {
        folio_size: folio,
        cache_bytes: bytes * 2,
        dirty_bytes: if mode == Mode::Cache { bytes * 2 } else { 64 << 20 },
        ..MountOptions::default()
    }
}

fn engine_row(v: &Variant, mode: Mode, bs: u64, bytes: u64) -> Result<Duration, LabError> {
    let (vol, _file) = v.engine_volume(bytes * 2 + (256 << 20), BLOCK)?;
    let f = vol.create()?;
    let data = vec![0x5Au8; bs as usize];
    let t0 = Instant::now();
    let mut at = 0;
    while at < bytes {
        vol.write(f, at, &data)?;
        if mode == Mode::Sync {
            vol.fsync(f)?;
        }
        at += bs;
    }
    if mode == Mode::Writeback {
        vol.fsync(f)?;
    }
    Ok(t0.elapsed())
}

fn kernel_row(v: &Variant, mode: Mode, bs: u64, bytes: u64) -> Result<Duration, LabError> {
    let m = v.kernel_mount(bytes * 2 + (256 << 20), BLOCK)?;
    let path = m.dir().join("folio-write");
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    if mode == Mode::Sync {
        o.custom_flags(libc::O_SYNC);
    }
    let file = o.open(&path).map_err(|e| LabError::io(path.display().to_string(), e))?;
    let data = vec![0x5Au8; bs as usize];
    let t0 = Instant::now();
    let mut at = 0;
    while at < bytes {
        file.write_all_at(&data, at).map_err(|e| LabError::io("write", e))?;
        at += bs;
    }
    if mode == Mode::Writeback {
        file.sync_all().map_err(|e| LabError::io("fsync", e))?;
    }
    let elapsed = t0.elapsed();
    drop(file);
    m.unmount().context("unmounting")?;
    Ok(elapsed)
}

/// Run the scenario.
pub fn run(env: &Env) -> ScenarioReport {
    let mut rep = ScenarioReport::new(
        "folio-write",
        "seed 004: one file written sequentially; cache = buffered only, sync = fsync after every write, writeback = buffered + fsync at the end",
        vec![col("mode", "mode", 0), col("bs_kib", "bs KiB", 0), col("iops", "IOPS", 0), col("mib_per_s", "MiB/s", 1)],
    );
    for mode in [Mode::Cache, Mode::Sync, Mode::Writeback] {
        let bytes = total(env, mode);
        let variants = [
            Variant::engine("4 KiB folios", |_| {}).on_device_with(mount_options(4 << 10, mode, bytes)),
            Variant::engine("2 MiB folios", |_| {}).on_device_with(mount_options(2 << 20, mode, bytes)),
            Variant::kernel(KernelFs::Ext4, "default", ""),
        ];
        for bs in SIZES {
            for_each_variant(env, &mut rep, Stats::Off, &variants, |v, rep| {
                let backend = v.backend().name();
                let bar = env.bar(0, format!("folio-write {backend} {} {} {} KiB", v.label(), mode.name(), bs >> 10));
                let t = match v.backend() {
                    crate::backend::BackendKind::Engine => engine_row(v, mode, bs, bytes),
                    crate::backend::BackendKind::Kernel(_) => kernel_row(v, mode, bs, bytes),
                    // Not among this scenario's variants.
                    crate::backend::BackendKind::Mounted => unreachable!("folio-write has no mounted variant"),
                };
                bar.finish_and_clear();
                rep.rows.push(row(backend, v.label(), mode, bs, bytes, t?));
                Ok(())
            });
        }
    }
    let bw = |v: &str, mode: &str, bs: u64| {
        rep.rows
            .iter()
            .find(|r| {
                r.variant == v
                    && r.metrics.get("mode").and_then(|m| m.as_str()) == Some(mode)
                    && r.num("bs_kib") == Some((bs >> 10) as f64)
            })
            .and_then(|r| r.num("mib_per_s"))
    };
    for mode in ["cache", "sync", "writeback"] {
        for bs in SIZES {
            if let (Some(small), Some(large)) = (bw("4 KiB folios", mode, bs), bw("2 MiB folios", mode, bs)) {
                rep.notes.push(format!(
                    "{mode} {} KiB: 2 MiB folios give {:+.0}% over 4 KiB folios",
                    bs >> 10,
                    (large / small - 1.0) * 100.0
                ));
            }
        }
    }
    rep.notes.push(format!(
        "{} MiB per row ({} MiB in sync mode); the engine's volume is a file in /dev/shm, ext4's a loop-mounted image there",
        total(env, Mode::Cache) >> 20,
        total(env, Mode::Sync) >> 20
    ));
    for (mode, what) in
        [("cache", "kept in the cache"), ("sync", "fsync after every write"), ("writeback", "fsync at the end")]
    {
        rep.plots.push(
            Plot::lines(
                &format!("folio-write, {mode} mode ({what}): MiB/s by write size"),
                "bs_kib",
                "bytes per write call (KiB)",
                "mib_per_s",
                "MiB written per second",
            )
            .only("mode", mode),
        );
    }
    rep
}
