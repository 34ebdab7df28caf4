//! The engine side of a fidelity case: the engine loaded from the
//! pristine image under its kernel profile, the same operations in the
//! same order, the same final flush.

use super::kernel_side::DirtyOrder;
use super::{merge_runs, Case, Request, Run, Side};
use crate::error::{Context, LabError};
use crate::workload::{Op, OpKind};
use mballoc::FoundBy;
use mballoc_fs::{FallocateMode, FileId, Fs, FsConfig, Purpose, ServedBy};
use std::collections::HashMap;
use std::path::Path;

/// The kernel profile as a kernel on a machine with `possible_cpus` would
/// run it: statistics on, and as many stream goals as that kernel makes
/// (`min(possible CPUs, ceil(groups / 4))`).
pub fn kernel_profile(cfg: &mut FsConfig, possible_cpus: u32) {
    let geo = cfg.geometry;
    *cfg = FsConfig::kernel(geo);
    cfg.tunables.mb_stats = true;
    cfg.stream_goals = Some(possible_cpus.min(geo.groups().div_ceil(4)).max(1));
}

/// CPUs the kernel could ever bring online (`/sys/devices/system/cpu/possible`).
pub fn possible_cpus() -> u32 {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let n: u32 = text
        .trim()
        .split(',')
        .filter_map(|r| match r.split_once('-') {
            Some((a, b)) => Some(b.parse::<u32>().ok()? - a.parse::<u32>().ok()? + 1),
            None => r.parse::<u32>().ok().map(|_| 1),
        })
        .sum();
    if n > 0 {
        n
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
    }
}

pub(super) fn run(case: &Case, image: &Path, ops: &[Op], possible_cpus: u32) -> Result<Side, LabError> {
    let src = mballoc_ext4::FileSource::open(image).map_err(|e| LabError::io(image.display().to_string(), e))?;
    let vol = mballoc_ext4::Volume::open(src, mballoc_ext4::ChecksumPolicy::Verify)?;
    let base = u64::from(vol.superblock().first_data_block);
    let total_blocks = vol.superblock().blocks_count;
    let mut write_mode = crate::backend::WriteMode::Delalloc;
    let loaded = mballoc_ext4::engine::load(&vol, |cfg| {
        kernel_profile(cfg, possible_cpus);
        write_mode = case.ext4.apply_engine(cfg);
    })
    .context("loading the image into the engine")?;
    let fs = loaded.fs;
    if base > 0 && fs.config().tunables.stripe > 0 {
        // ext4 aligns to its block numbers; the engine's start at the
        // first data block (1 with 1 KiB blocks).
        return Err(LabError::Invalid(format!(
            "{}: stripe alignment on a volume whose first data block is {base} is not modelled",
            case.name
        )));
    }
    fs.allocator().reset_stats();
    fs.record_allocations();
    let mut ids: HashMap<u32, FileId> = HashMap::new();
    let mut open: HashMap<u32, bool> = HashMap::new();
    let mut dirty = DirtyOrder::default();
    for (i, op) in ops.iter().enumerate() {
        dirty.note(op);
        apply(&fs, op, write_mode, &mut ids, &mut open)
            .map_err(|e| LabError::from(e).context(format!("operation {} ({})", i + 1, op.kind.name())))?;
    }
    for &slot in dirty.files() {
        if let Some(&f) = ids.get(&slot) {
            // An fsync through a read-only handle, as the kernel side
            // does: no last-writer close follows it.
            fs.writeback(f)?;
            fs.try_commit()?;
        }
    }
    // mb_stats as read before unmount; then unmount gives back every
    // preallocation, and the kernel's image shows their blocks free.
    let mb_stats = fs.allocator().mb_stats_report();
    fs.discard_preallocations();
    fs.commit();
    let mut files = Vec::new();
    for (slot, name) in case.trace.files.iter().enumerate() {
        let Some(&f) = ids.get(&(slot as u32)) else { continue };
        let runs = fs
            .extents(f)?
            .into_iter()
            .map(|e| Run { logical: e.logical, physical: e.physical + base, len: u64::from(e.len) })
            .collect();
        files.push((name.clone(), f.0, merge_runs(runs)));
    }
    let mut free = Vec::new();
    fs.allocator().for_each_free_extent(|s, l| free.push((s + base, l)));
    let requests = fs
        .take_allocations()
        .into_iter()
        .map(|e| Request {
            ino: e.ino,
            logical: e.logical,
            len: e.len,
            goal: e.goal + base,
            data: e.purpose == Purpose::Data,
            result: e.result.map(|(p, n)| (p + base, n)),
            how: match e.served_by {
                ServedBy::InodePreallocation | ServedBy::GroupPreallocation => "preallocation".into(),
                ServedBy::Allocator(FoundBy::Goal) => "goal".into(),
                ServedBy::Allocator(FoundBy::Pass(cr)) => cr.kernel_name().into(),
                ServedBy::Allocator(FoundBy::Policy) => "policy".into(),
                ServedBy::Failed => "failed".into(),
            },
        })
        .collect();
    Ok(Side {
        files,
        free,
        total_blocks,
        block_size: case.trace.block_size,
        mb_stats,
        requests,
        lost_events: 0,
        trace_text: String::new(),
    })
}

fn apply(
    fs: &Fs,
    op: &Op,
    write_mode: crate::backend::WriteMode,
    ids: &mut HashMap<u32, FileId>,
    open: &mut HashMap<u32, bool>,
) -> Result<(), mballoc_fs::FsError> {
    let id = |ids: &HashMap<u32, FileId>| ids.get(&op.file).copied().ok_or(mballoc_fs::FsError::UnknownFile(FileId(0)));
    match op.kind {
        OpKind::Create => {
            if open.insert(op.file, false) == Some(true) {
                fs.close(id(ids)?)?;
            }
            match ids.get(&op.file).copied() {
                Some(f) => {
                    fs.open(f)?;
                    fs.truncate(f, 0)?;
                }
                None => {
                    ids.insert(op.file, fs.create()?);
                }
            }
            open.insert(op.file, true);
        }
        OpKind::Write => match write_mode {
            crate::backend::WriteMode::Delalloc => fs.write(id(ids)?, op.offset, op.len)?,
            crate::backend::WriteMode::NoDelalloc => fs.write_through(id(ids)?, op.offset, op.len)?,
        },
        OpKind::Fallocate => fs.fallocate(id(ids)?, op.offset, op.len, FallocateMode::ExtendSize)?,
        OpKind::FallocateKeepSize => fs.fallocate(id(ids)?, op.offset, op.len, FallocateMode::KeepSize)?,
        OpKind::Punch => fs.punch_hole(id(ids)?, op.offset, op.len)?,
        OpKind::Truncate => fs.truncate(id(ids)?, op.offset)?,
        OpKind::Fsync => fs.fsync(id(ids)?)?,
        OpKind::Close => {
            if open.insert(op.file, false) == Some(true) {
                fs.close(id(ids)?)?;
            }
        }
        OpKind::Unlink => {
            id(ids)?;
            remove_name(fs, op.file, ids, open)?;
        }
        OpKind::Rename => {
            // A directory has no file in the engine.
            let Some(f) = ids.get(&op.file).copied() else { return Ok(()) };
            if ids.get(&op.to).is_some_and(|&old| old != f) {
                // ext4_rename over an existing file allocates the renamed
                // file's delayed blocks first (auto_da_alloc), so a
                // replace-by-rename does not leave a zero-length file
                // after a crash.
                fs.writeback(f)?;
                remove_name(fs, op.to, ids, open)?;
            }
            ids.remove(&op.file);
            ids.insert(op.to, f);
            let was_open = open.remove(&op.file).unwrap_or(false);
            open.insert(op.to, was_open);
        }
        OpKind::Link => {
            ids.insert(op.to, id(ids)?);
        }
        OpKind::Open => {
            let f = id(ids)?;
            if open.insert(op.file, true) != Some(true) {
                fs.open(f)?;
            }
        }
        OpKind::Read => {
            let bs = fs.block_size();
            fs.lookup(id(ids)?, op.offset / bs, (op.offset + op.len).div_ceil(bs))?;
        }
        // No directories in the engine; the cases refuse the rest
        // (`Case::check_ops`) before either side runs.
        OpKind::Mkdir => {}
        OpKind::Wait | OpKind::Signal => {
            unreachable!("refused by Case::check_ops: {}", op.kind.name())
        }
    }
    Ok(())
}

/// Take name `slot` away from its file (closing the handle open under it):
/// the file goes with its last name.
fn remove_name(
    fs: &Fs,
    slot: u32,
    ids: &mut HashMap<u32, FileId>,
    open: &mut HashMap<u32, bool>,
) -> Result<(), mballoc_fs::FsError> {
    let Some(f) = ids.remove(&slot) else { return Ok(()) };
    if open.insert(slot, false) == Some(true) {
        fs.close(f)?;
    }
    if !ids.values().any(|&x| x == f) {
        fs.unlink(f)?;
    }
    Ok(())
}
