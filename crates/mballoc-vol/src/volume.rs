//! A mounted volume: the engine, its journal ([`crate::log`]) and the folio
//! cache, behind file operations that carry data. Mounting (replay,
//! import into the engine), the file namespace and durability calls live
//! here; buffered I/O is in `buffered`, unbuffered I/O in `direct`.

use crate::cache::FileCache;
use crate::device::Device;
use crate::error::{Result, VolError};
use crate::format::{FormatOptions, Superblock, VolumeState, SUPERBLOCK_BYTES};
use crate::home::{Home, ReadMode, Scan};
use crate::log::Log;
use crate::mount_options::{Access, MountOptions};
use crate::wal;
use mballoc_fs::{ExtentState, FallocateMode, FileId, Fs, FsConfig, ImportedFile, MappedExtent};
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Counters of the persistence path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VolumeStats {
    /// Journal transactions written.
    pub transactions: u64,
    /// Journal blocks written.
    pub journal_blocks: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Device flushes.
    pub flushes: u64,
    /// Data bytes written to the device.
    pub data_bytes: u64,
    /// Device writes of file data.
    pub data_writes: u64,
    /// Transactions replayed at mount.
    pub replayed: u64,
}

/// A mounted volume.
///
/// ```
/// use mballoc_vol::{FormatOptions, MemDevice, MountOptions, Volume};
/// use std::sync::Arc;
///
/// let dev = Arc::new(MemDevice::new(64 << 20));
/// Volume::format(dev.clone(), &FormatOptions::default())?;
/// let vol = Volume::open(dev.clone(), MountOptions::default())?;
/// let f = vol.create()?;
/// vol.write(f, 0, b"hello, extents")?;
/// vol.fsync(f)?; // durable: data first, then the journal
/// vol.abandon();  // a crash: nothing more written, no unmount
///
/// let vol = Volume::open(dev, MountOptions::default())?; // replays the journal
/// let mut buf = [0u8; 14];
/// assert_eq!(vol.read(f, 0, &mut buf)?, 14);
/// assert_eq!(&buf, b"hello, extents");
/// # Ok::<(), mballoc_vol::VolError>(())
/// ```
pub struct Volume {
    pub(crate) dev: Arc<dyn Device>,
    pub(crate) fs: Fs,
    pub(crate) log: Arc<Log>,
    pub(crate) sb: Superblock,
    pub(crate) opts: MountOptions,
    pub(crate) files: Mutex<mballoc_fs::IdMap<Arc<Mutex<FileCache>>>>,
    pub(crate) cached: AtomicU64,
    pub(crate) dirty: AtomicU64,
    pub(crate) live_files: AtomicU64,
    pub(crate) data_bytes: AtomicU64,
    pub(crate) data_writes: AtomicU64,
    pub(crate) replayed: u64,
    /// Names and attributes ([`crate::names`]).
    pub(crate) tree: RwLock<crate::names::Tree>,
    /// The next inode generation (file handles tell reused numbers apart).
    pub(crate) generation: std::sync::atomic::AtomicU32,
    /// Unmounted or abandoned: no more changes, and nothing left for
    /// dropping to do.
    pub(crate) closed: AtomicBool,
    /// The commit interval's thread, if one runs.
    pub(crate) timer: Mutex<Option<crate::durability::CommitTimer>>,
    /// This volume's hold on its device, given back when it is dropped.
    _claim: Claim,
}

/// A mounted volume's hold on its device handle: one read-write volume,
/// or any number of read-only ones, per handle.
struct Claim {
    /// `None` for a snapshot, which claims nothing.
    dev: Option<Arc<dyn Device>>,
    writer: bool,
}

impl Claim {
    fn take(dev: &Arc<dyn Device>, access: Access) -> Result<Claim> {
        let writer = access == Access::ReadWrite;
        if access == Access::Snapshot {
            return Ok(Claim { dev: None, writer });
        }
        if let Some(h) = dev.holders() {
            if !h.acquire(writer) {
                return Err(VolError::Busy {
                    path: std::path::PathBuf::from("this device handle"),
                    holder: Some("another mounted volume of this process".into()),
                });
            }
        }
        Ok(Claim { dev: Some(dev.clone()), writer })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(h) = self.dev.as_ref().and_then(|d| d.holders()) {
            h.release(self.writer);
        }
    }
}

/// The superblock and everything it leads to, read as `access` needs:
/// strictly, and for a snapshot again until no checkpoint ran meanwhile.
fn read_home(dev: &dyn Device, access: Access) -> Result<(Superblock, Scan)> {
    let superblock = || -> Result<Vec<u8>> { crate::format::read_superblock(dev) };
    let mode = if access == Access::Snapshot { ReadMode::Snapshot } else { ReadMode::Strict };
    for _ in 0..8 {
        let head = superblock()?;
        let sb = Superblock::decode(&head, dev.len())?;
        // Strict: a tree that fails its checks is an error here, so the
        // tree holds every named inode.
        let read = Home::read(dev, sb.clone(), mode);
        if access != Access::Snapshot {
            return Ok((sb, read?));
        }
        // A checkpoint rewrites home areas in place before its superblock:
        // what was read is the state of one moment only if the superblock
        // did not move. (Transactions appended meanwhile are not seen.)
        if superblock()? == head {
            return Ok((sb, read?));
        }
    }
    Err(VolError::Busy {
        path: std::path::PathBuf::from("the volume"),
        holder: Some("a writer that checkpointed during every attempt to read it".into()),
    })
}

/// A generation counter's start: different on every mount, so a number
/// reused after a remount still gets a new generation.
fn now_seed() -> u32 {
    let ns = crate::names::now() as u64;
    (ns ^ (ns >> 32)) as u32 | 1
}

/// Extents as the engine holds them: no longer than an extent may be.
fn engine_extents(f: &crate::state::FileState) -> Vec<MappedExtent> {
    let mut out = Vec::new();
    for e in f.extent_list() {
        let state = if e.unwritten { ExtentState::Unwritten } else { ExtentState::Written };
        let (mut l, mut p, mut n) = (e.logical, e.physical, e.len);
        while n > 0 {
            let len = n.min(u64::from(state.max_len()));
            out.push(MappedExtent { logical: l, physical: p, len: len as u32, state });
            l += len;
            p += len;
            n -= len;
        }
    }
    out
}

impl Volume {
    /// Write an empty volume onto `dev`, using all of it.
    pub fn format(dev: Arc<dyn Device>, opts: &FormatOptions) -> Result<Superblock> {
        let sb = Superblock::layout(dev.len(), opts, crate::format::new_uuid())?;
        let bs = u64::from(sb.block_size);
        // No old inode or journal block may survive under the new seed.
        let zero = vec![0u8; (256 * bs) as usize];
        for (start, n) in [(sb.log_start, 2), (sb.itable_start, sb.itable_blocks())] {
            let mut b = start;
            while b < start + n {
                let k = (start + n - b).min(256);
                dev.write_at(sb.offset(b), &zero[..(k * bs) as usize]).map_err(|e| VolError::io("formatting", e))?;
                b += k;
            }
        }
        let mut home = Home::formatted(sb.clone(), crate::names::now());
        home.state.dirty_groups = (0..sb.groups).collect();
        home.checkpoint(&*dev, VolumeState::Clean)?;
        Ok(home.sb)
    }

    /// Mount: check the superblock and every structure, replay the journal
    /// and, read-write, write the replayed state home. A volume that fails
    /// a check is not written to.
    pub fn open(dev: Arc<dyn Device>, opts: MountOptions) -> Result<Arc<Volume>> {
        Self::open_with(dev, opts, |_| {})
    }

    /// [`Volume::open`] with the engine's profile chosen by `policy`: its
    /// [`mballoc_fs::Placement`] and [`mballoc_fs::Behaviour`] are taken
    /// whole (`*cfg = FsConfig::kernel(cfg.shape.geometry)` is ext4's, every
    /// decision). A profile is a mount-time choice, like ext4's mount
    /// options and sysfs knobs: nothing of it is persisted. The shape is
    /// the volume's, and so is storage (the volume writes back, commits,
    /// keeps extent trees and frees blocks itself).
    pub fn open_with(
        dev: Arc<dyn Device>,
        opts: MountOptions,
        policy: impl FnOnce(&mut FsConfig),
    ) -> Result<Arc<Volume>> {
        let claim = Claim::take(&dev, opts.access)?;
        let bs_ok = opts.folio_size.is_power_of_two() && opts.folio_size <= 2 << 20;
        let (sb, scan) = read_home(&*dev, opts.access)?;
        if !bs_ok || opts.folio_size < sb.block_size {
            return Err(VolError::InvalidArgument(format!(
                "folio size {} must be a power of two from the block size {} to 2 MiB",
                opts.folio_size, sb.block_size
            )));
        }
        let Scan { home, replayed, stale_groups, stale_counters, tree, .. } = scan;
        let geo = sb.geometry();
        let mut chosen = FsConfig::new(geo);
        for s in &opts.settings {
            let (k, v) = s.split_once('=').unwrap_or((s, ""));
            chosen.set(k, v).map_err(|e| VolError::InvalidArgument(format!("option {s}: {e}")))?;
        }
        policy(&mut chosen);
        // The profile's placement and behaviour, whole; the shape is the
        // volume's, and so is storage: the volume writes back and commits
        // itself (so a write is never switched to allocate at once), keeps
        // extent trees in its tree area, and frees blocks only once a
        // commit is durable.
        let cfg = FsConfig {
            placement: chosen.placement,
            behaviour: chosen.behaviour,
            storage: mballoc_fs::Storage {
                dirty_limit_blocks: u64::MAX,
                commit_interval_ops: opts.commit_interval_ops,
                extent_tree: mballoc_fs::ExtentTreeBlocks::Outside,
                free_reuse: mballoc_fs::FreeReuse::AtCommit,
                low_space: mballoc_fs::LowSpace::Delay,
            },
            shape: FsConfig::new(geo).shape,
        };
        // The root is the volume's, not the engine's: it holds no data.
        let files: Vec<ImportedFile> = home
            .state
            .files
            .iter()
            .filter(|(&ino, _)| ino != crate::format::ROOT_INO)
            .map(|(&ino, f)| ImportedFile {
                ino,
                size: f.size,
                extents: engine_extents(f),
                kind: mballoc_fs::FileKind::Regular,
            })
            .collect();
        let live = home.state.files.len() as u64;
        // Inodes a crash caught between the engine's create and the name,
        // and orphans: unlinked while open when the volume went down.
        let mut nameless: Vec<u64> = home.state.files.keys().filter(|i| !tree.attrs.contains_key(i)).copied().collect();
        nameless.extend(tree.orphans());
        nameless.sort_unstable();
        let mut fs = Fs::import(cfg, &home.state.bitmaps, files)?;
        let needs_write = replayed > 0 || !stale_groups.is_empty() || stale_counters;
        let log = Arc::new(Log {
            dev: dev.clone(),
            running: Mutex::new(wal::Running::default()),
            home: Mutex::new(home),
            data_written: AtomicBool::new(false),
            aborted: AtomicBool::new(!opts.access.writes()),
            failure: Mutex::new(None),
            headroom: AtomicU64::new(0),
            transactions: AtomicU64::new(0),
            journal_blocks: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        });
        if opts.access.writes() && needs_write {
            let mut h = log.home.lock();
            log.checkpoint(&mut h, VolumeState::Mounted)?;
        }
        log.publish(&log.home.lock());
        fs.attach_change_log(log.clone());
        Ok(Volume {
            dev,
            fs,
            log,
            sb,
            opts,
            files: Mutex::new(mballoc_fs::IdMap::default()),
            cached: AtomicU64::new(0),
            dirty: AtomicU64::new(0),
            live_files: AtomicU64::new(live),
            data_bytes: AtomicU64::new(0),
            data_writes: AtomicU64::new(0),
            replayed: replayed as u64,
            tree: RwLock::new(tree),
            generation: std::sync::atomic::AtomicU32::new(now_seed()),
            closed: AtomicBool::new(false),
            timer: Mutex::new(None),
            _claim: claim,
        })
        .and_then(|v| v.remove_nameless(&nameless).map(|()| v))
        .map(|v| {
            let v = Arc::new(v);
            if v.opts.access.writes() {
                *v.timer.lock() = crate::durability::CommitTimer::start(&v);
            }
            v
        })
    }

    /// Unlink inodes no name reaches (read-write mounts only; read-only
    /// ones just do not show them).
    fn remove_nameless(&self, inos: &[u64]) -> Result<()> {
        if !self.opts.access.writes() || inos.is_empty() {
            return Ok(());
        }
        let mut t = self.tree.write();
        for &ino in inos {
            self.drop_inode(FileId(ino))?;
            if t.attrs.contains_key(&ino) {
                t.remove(ino);
            }
        }
        drop(t);
        self.engine(self.fs.try_commit()).map(|_| ())
    }

    /// The engine underneath, read-only (extent maps, allocator
    /// statistics and reports): every change goes through the volume,
    /// which journals and caches it.
    pub fn fs(&self) -> mballoc_fs::FsView<'_> {
        self.fs.view()
    }

    /// For a [`Access::Snapshot`] open: whether what it shows is still
    /// what is committed (no checkpoint and no transaction since it was
    /// read). A reader that must not mix two states reads, then asks, and
    /// opens a new snapshot when the answer is no.
    pub fn snapshot_is_current(&self) -> Result<bool> {
        let mut head = vec![0u8; SUPERBLOCK_BYTES];
        self.dev.read_at(0, &mut head).map_err(|e| VolError::io("reading the superblock", e))?;
        let sb = Superblock::decode(&head, self.dev.len())?;
        if sb.checkpoints != self.sb.checkpoints || sb.log_seq != self.sb.log_seq {
            return Ok(false);
        }
        let (at, seq) = {
            let h = self.log.home.lock();
            (h.head, h.next_seq)
        };
        Ok(!wal::committed_at(&*self.dev, &sb, at, seq)?)
    }

    /// The superblock as mounted.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// Counters so far.
    pub fn stats(&self) -> VolumeStats {
        VolumeStats {
            transactions: self.log.transactions.load(Ordering::Relaxed),
            journal_blocks: self.log.journal_blocks.load(Ordering::Relaxed),
            checkpoints: self.log.checkpoints.load(Ordering::Relaxed),
            flushes: self.log.flushes.load(Ordering::Relaxed),
            data_bytes: self.data_bytes.load(Ordering::Relaxed),
            data_writes: self.data_writes.load(Ordering::Relaxed),
            replayed: self.replayed,
        }
    }

    pub(crate) fn writable(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(VolError::Unmounted);
        }
        if self.log.aborted.load(Ordering::Acquire) {
            Err(self.log.failure())
        } else {
            Ok(())
        }
    }

    /// An engine result, its log failure told as the journal's own error.
    pub(crate) fn engine<T>(&self, r: mballoc_fs::Result<T>) -> Result<T> {
        r.map_err(|e| match e {
            mballoc_fs::FsError::Log(_) => self.log.failure(),
            e => VolError::Fs(e),
        })
    }

    /// Refuse an operation that could grow file `f`'s extent tree by
    /// `more` records past what the tree area can hold: running out of
    /// metadata space is an error at the write, never a volume that
    /// cannot be checkpointed. Cheap while the area has room to spare.
    pub(crate) fn admit_records(&self, f: FileId, more: u64) -> Result<()> {
        let headroom = self.log.headroom.load(Ordering::Acquire);
        // No file can have more records than the volume has data blocks:
        // with room for the largest tree there is, nothing to look up.
        if 2 * self.sb.tree_nodes(self.sb.total_blocks - self.sb.data_start) <= headroom {
            return Ok(());
        }
        let records = self.fs.extent_records_bound(f)? + more;
        if 2 * self.sb.tree_nodes(records) <= headroom {
            return Ok(());
        }
        self.log
            .home
            .lock()
            .admit_growth(f.0, records)
            .map_err(|(needed, have)| VolError::MetadataFull { needed, free: have })
    }

    pub(crate) fn block_size(&self) -> u64 {
        u64::from(self.sb.block_size)
    }

    pub(crate) fn folio_blocks(&self) -> u64 {
        u64::from(self.opts.folio_size) / self.block_size()
    }

    /// Every file's cache, taken out of the table's lock.
    pub(crate) fn caches(&self) -> Vec<(u64, Arc<Mutex<FileCache>>)> {
        self.files.lock().iter().map(|(&k, v)| (k, v.clone())).collect()
    }

    pub(crate) fn cache_of(&self, f: FileId) -> Arc<Mutex<FileCache>> {
        self.files.lock().entry(f.0).or_default().clone()
    }

    /// Every live regular file.
    pub fn files(&self) -> Vec<FileId> {
        let t = self.tree.read();
        let mut v: Vec<FileId> = t.attrs.iter().filter(|(_, a)| !a.is_dir()).map(|(&i, _)| FileId(i)).collect();
        v.sort_unstable();
        v
    }

    /// Create an empty file, open once, named by its number in the root
    /// directory (`13`, or `13.1` if a file already has that name).
    pub fn create(&self) -> Result<FileId> {
        let spec = crate::namespace::NodeSpec { mode: crate::names::S_IFREG | 0o644, ..Default::default() };
        self.make(crate::format::ROOT_INO, crate::namespace::Naming::Numbered, spec, crate::namespace::Owner::default())
    }

    /// An inode from the engine, counted against the inode slots.
    pub(crate) fn next_generation(&self) -> u32 {
        self.generation.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn create_inode(&self) -> Result<FileId> {
        let n = self.live_files.fetch_add(1, Ordering::AcqRel);
        if n >= u64::from(self.sb.inode_count) {
            self.live_files.fetch_sub(1, Ordering::AcqRel);
            return Err(VolError::NoInodes(self.sb.inode_count));
        }
        self.fs.create().map_err(|e| {
            self.live_files.fetch_sub(1, Ordering::AcqRel);
            e.into()
        })
    }

    /// Open another handle.
    pub fn open_file(&self, f: FileId) -> Result<()> {
        Ok(self.fs.open(f)?)
    }

    /// Handles open on the file.
    pub fn open_handles(&self, f: FileId) -> Result<u32> {
        Ok(self.fs.open_handles(f)?)
    }

    /// Blocks the file holds: mapped, and reserved for delayed data
    /// (what ext4 counts in `st_blocks`).
    pub fn blocks_held(&self, f: FileId) -> Result<u64> {
        Ok(self.fs.blocks_held(f)?)
    }

    /// File size in bytes.
    pub fn size(&self, f: FileId) -> Result<u64> {
        Ok(self.fs.size(f)?)
    }

    /// The file's allocated extents.
    pub fn extents(&self, f: FileId) -> Result<Vec<MappedExtent>> {
        Ok(self.fs.extents(f)?)
    }

    /// Allocate unwritten blocks for the range's holes.
    pub(crate) fn allocate(&self, f: FileId, offset: u64, len: u64, mode: FallocateMode) -> Result<()> {
        self.writable()?;
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        if mode == FallocateMode::ExtendSize {
            self.zero_tail_before_growth(f, &mut fc, offset.saturating_add(len))?;
        }
        self.admit_records(f, 2)?;
        self.engine(self.fs.fallocate(f, offset, len, mode))
    }

    /// Remove the file (or empty directory) and its cached data.
    pub fn unlink(&self, f: FileId) -> Result<()> {
        self.remove_inode(f.0)
    }

    /// The engine's unlink, and the file's cache dropped; the caller holds
    /// the tree.
    pub(crate) fn drop_inode(&self, f: FileId) -> Result<()> {
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        self.fs.unlink(f)?;
        self.live_files.fetch_sub(1, Ordering::AcqRel);
        let bs = self.block_size();
        self.dirty.fetch_sub(fc.dirty_blocks * bs, Ordering::AcqRel);
        self.cached.fetch_sub(fc.kept(), Ordering::AcqRel);
        *fc = FileCache::default();
        self.files.lock().remove(&f.0);
        Ok(())
    }
}
