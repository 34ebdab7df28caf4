//! The engine side of a fidelity case: the engine loaded from the
//! pristine image under its kernel profile, the same operations in the
//! same order, the same final flush.

use super::kernel_side::DirtyOrder;
use super::{merge_runs, Case, Request, Run, Side};
use crate::error::{Context, LabError};
use crate::workload::{Op, OpKind};
use mballoc::FoundBy;
use mballoc_fs::{Ext4Namespace, FallocateMode, FileId, Fs, FsConfig, KernelRule, Purpose, Removed, ServedBy};
use std::collections::HashMap;
use std::path::Path;

/// The kernel profile with the rules `has` names (a release's, or one
/// release's with a rule of another's), as that kernel on a machine with
/// `possible_cpus` would run it: statistics on, and as many stream goals
/// as it makes (one before 6.17; since then `min(possible CPUs,
/// ceil(groups / 4))`), and the free-space watermark it switches writes
/// to allocate at once under (`EXT4_FREECLUSTERS_WATERMARK`: 4 × the
/// per-CPU batch × possible CPUs).
pub(super) fn profile_with(cfg: &mut FsConfig, has: &dyn Fn(KernelRule) -> bool, possible_cpus: u32) {
    let geo = cfg.shape.geometry;
    *cfg = FsConfig::kernel_with(geo, has).with_cluster_bits(cfg.shape.cluster_bits);
    cfg.placement.tunables.mb_stats = true;
    let watermark_blocks = 4 * u64::from(percpu_batch()) * u64::from(possible_cpus);
    cfg.storage.low_space = mballoc_fs::LowSpace::Ext4 { watermark_blocks };
    if has(KernelRule::StreamGoalPerCpu) {
        cfg.placement.stream_goals = Some(possible_cpus.min(geo.groups().div_ceil(4)).max(1));
    }
}

/// The running kernel's release (`/proc/sys/kernel/osrelease`), which
/// chooses the profile the engine runs under; the newest modelled when
/// it cannot be read.
pub fn running_kernel() -> mballoc_fs::KernelVersion {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|r| mballoc_fs::KernelVersion::from_release(r.trim()))
        .unwrap_or(mballoc_fs::KernelVersion::NEWEST)
}

/// CPUs the kernel could ever bring online (`/sys/devices/system/cpu/possible`).
pub fn possible_cpus() -> u32 {
    cpus_listed("/sys/devices/system/cpu/possible")
}

/// The kernel's `percpu_counter_batch` here: `max(32, 2 × online CPUs)`.
pub fn percpu_batch() -> u32 {
    (2 * cpus_listed("/sys/devices/system/cpu/online")).max(32)
}

/// CPUs in a sysfs CPU list (`0-3,6`); this process's parallelism when
/// the list cannot be read.
fn cpus_listed(path: &str) -> u32 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
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

/// Run `ops` on the engine loaded from `image`, under the kernel profile
/// with the rules `has` names.
pub(super) fn run(
    case: &Case,
    image: &Path,
    ops: &[Op],
    has: &dyn Fn(KernelRule) -> bool,
    possible_cpus: u32,
) -> Result<Side, LabError> {
    let src = mballoc_ext4::FileSource::open(image).map_err(|e| LabError::io(image.display().to_string(), e))?;
    let vol = mballoc_ext4::Ext4Volume::open(src, mballoc_ext4::ChecksumPolicy::Verify)?;
    let base = u64::from(vol.superblock().first_data_block);
    let total_blocks = vol.superblock().blocks_count;
    let mut write_mode = crate::backend::WriteMode::Delalloc;
    let loaded = mballoc_ext4::engine::load_with_namespace(
        &vol,
        |cfg| {
            profile_with(cfg, has, possible_cpus);
            write_mode = case.ext4.apply_engine(cfg);
        },
        percpu_batch(),
    )
    .context("loading the image into the engine")?;
    let fs = loaded.loaded.fs;
    let mut names = Names { ns: loaded.namespace, paths: &case.trace.files };
    if base > 0 && fs.config().placement.tunables.stripe > 0 {
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
        apply(&fs, op, write_mode, &mut names, &mut ids, &mut open)
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
    // The engine's blocks are clusters under bigalloc; ext4's reports
    // count blocks, except a request's lengths, which are clusters.
    let cb = fs.cluster_bits();
    let block = |n: u64| (n << cb) + base;
    let mut files = Vec::new();
    for (slot, name) in case.trace.files.iter().enumerate() {
        let Some(f) = ids.get(&(slot as u32)).copied().or_else(|| names.file(slot as u32)) else { continue };
        if names.ns.is_dir(f) {
            continue;
        }
        let runs = fs
            .ext4_extents(f)?
            .into_iter()
            .map(|e| Run { logical: e.logical, physical: e.physical + base, len: u64::from(e.len) })
            .collect();
        files.push((name.clone(), f.0, merge_runs(runs)));
    }
    let mut free = Vec::new();
    fs.allocator().for_each_free_extent(|s, l| {
        let start = block(s);
        free.push((start, (l << cb).min(total_blocks - start)));
    });
    let requests = fs
        .take_allocations()
        .into_iter()
        .map(|e| Request {
            ino: e.ino,
            logical: e.logical << cb,
            len: e.len,
            goal: block(e.goal),
            data: e.purpose == Purpose::Data,
            result: e.result.map(|(p, n)| (block(p), n)),
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
    names: &mut Names<'_>,
    ids: &mut HashMap<u32, FileId>,
    open: &mut HashMap<u32, bool>,
) -> Result<(), mballoc_fs::FsError> {
    let id = |ids: &HashMap<u32, FileId>, names: &Names<'_>| {
        ids.get(&op.file).copied().or_else(|| names.file(op.file)).ok_or(mballoc_fs::FsError::UnknownFile(FileId(0)))
    };
    match op.kind {
        OpKind::Create => {
            if open.insert(op.file, false) == Some(true) {
                fs.close(id(ids, names)?)?;
            }
            match id(ids, names).ok() {
                Some(f) => {
                    fs.open(f)?;
                    fs.truncate(f, 0)?;
                    ids.insert(op.file, f);
                }
                None => {
                    let (dir, leaf) = names.parent(op.file)?;
                    ids.insert(op.file, names.ns.create(fs, dir, leaf)?);
                }
            }
            open.insert(op.file, true);
        }
        OpKind::Write => write_mode.write(fs, id(ids, names)?, op.offset, op.len)?,
        OpKind::Fallocate => fs.fallocate(id(ids, names)?, op.offset, op.len, FallocateMode::ExtendSize)?,
        OpKind::FallocateKeepSize => fs.fallocate(id(ids, names)?, op.offset, op.len, FallocateMode::KeepSize)?,
        OpKind::Punch => fs.punch_hole(id(ids, names)?, op.offset, op.len)?,
        OpKind::Truncate => fs.truncate(id(ids, names)?, op.offset)?,
        OpKind::Fsync => fs.fsync(id(ids, names)?)?,
        OpKind::Close => {
            if open.insert(op.file, false) == Some(true) {
                fs.close(id(ids, names)?)?;
            }
        }
        OpKind::Unlink => {
            let (dir, leaf) = names.parent(op.file)?;
            let removed = names.ns.unlink(fs, dir, leaf)?;
            drop_name(fs, op.file, removed, ids, open)?;
        }
        OpKind::Rename => {
            let (from_dir, from_leaf) = names.parent(op.file)?;
            let (to_dir, to_leaf) = names.parent(op.to)?;
            let f = names.ns.lookup(from_dir, from_leaf);
            let replaced = names.ns.rename(fs, (from_dir, from_leaf), (to_dir, to_leaf))?;
            if let (Some(f), Some(old)) = (f, replaced) {
                if !names.ns.is_dir(f) && old.file != f {
                    // ext4_rename over an existing file allocates the
                    // renamed file's delayed blocks (auto_da_alloc), so a
                    // replace-by-rename does not leave a zero-length file
                    // after a crash.
                    fs.writeback(f)?;
                }
                drop_name(fs, op.to, old, ids, open)?;
            }
            if let Some(f) = ids.remove(&op.file) {
                ids.insert(op.to, f);
            }
            let was_open = open.remove(&op.file).unwrap_or(false);
            open.insert(op.to, was_open);
        }
        OpKind::Link => {
            let f = id(ids, names)?;
            let (dir, leaf) = names.parent(op.to)?;
            names.ns.link(fs, dir, leaf, f)?;
            ids.insert(op.to, f);
        }
        OpKind::Open => {
            let f = id(ids, names)?;
            ids.insert(op.file, f);
            if open.insert(op.file, true) != Some(true) {
                fs.open(f)?;
            }
        }
        OpKind::Read => {
            let bs = fs.block_size();
            fs.lookup(id(ids, names)?, op.offset / bs, (op.offset + op.len).div_ceil(bs))?;
        }
        OpKind::Mkdir => names.mkdir_all(fs, op.file)?,
        OpKind::Wait | OpKind::Signal => {
            unreachable!("refused by Case::check_ops: {}", op.kind.name())
        }
    }
    Ok(())
}

/// Name `slot` is gone (`removed` says what it named): its handle
/// closes, and a file whose last name it was goes.
fn drop_name(
    fs: &Fs,
    slot: u32,
    removed: Removed,
    ids: &mut HashMap<u32, FileId>,
    open: &mut HashMap<u32, bool>,
) -> Result<(), mballoc_fs::FsError> {
    ids.remove(&slot);
    if open.insert(slot, false) == Some(true) {
        fs.close(removed.file)?;
    }
    if removed.last_name && fs.size(removed.file).is_ok() {
        fs.unlink(removed.file)?;
    }
    Ok(())
}

/// The case's names, resolved through ext4's namespace.
struct Names<'a> {
    ns: Ext4Namespace,
    paths: &'a [String],
}

impl<'a> Names<'a> {
    fn components(&self, slot: u32) -> Vec<&'a [u8]> {
        self.paths[slot as usize].split('/').filter(|c| !c.is_empty() && *c != ".").map(str::as_bytes).collect()
    }

    /// The directory holding name `slot`, and its last component.
    fn parent(&self, slot: u32) -> Result<(FileId, &'a [u8]), mballoc_fs::FsError> {
        let parts = self.components(slot);
        let (leaf, dirs) = parts
            .split_last()
            .ok_or_else(|| mballoc_fs::FsError::Directory(format!("{:?} names no file", self.paths[slot as usize])))?;
        let mut at = self.ns.root();
        for d in dirs {
            at = self.ns.lookup(at, d).filter(|&f| self.ns.is_dir(f)).ok_or_else(|| {
                mballoc_fs::FsError::Directory(format!(
                    "{:?}: no directory {:?}",
                    self.paths[slot as usize],
                    String::from_utf8_lossy(d)
                ))
            })?;
        }
        Ok((at, leaf))
    }

    /// What name `slot` names now, if anything.
    fn file(&self, slot: u32) -> Option<FileId> {
        let (dir, leaf) = self.parent(slot).ok()?;
        self.ns.lookup(dir, leaf)
    }

    /// `mkdir -p`: each missing directory of name `slot`, outermost first.
    fn mkdir_all(&mut self, fs: &Fs, slot: u32) -> Result<(), mballoc_fs::FsError> {
        let parts: Vec<Vec<u8>> = self.components(slot).into_iter().map(<[u8]>::to_vec).collect();
        let mut at = self.ns.root();
        for d in &parts {
            at = match self.ns.lookup(at, d) {
                Some(f) if self.ns.is_dir(f) => f,
                Some(_) => {
                    return Err(mballoc_fs::FsError::Directory(format!("{:?} is a file", self.paths[slot as usize])))
                }
                None => self.ns.mkdir(fs, at, d)?,
            };
        }
        Ok(())
    }
}
