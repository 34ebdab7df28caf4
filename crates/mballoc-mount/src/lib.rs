//! # mballoc-mount — a volume as a FUSE file system
//!
//! The server behind `mballoc mount`: programs written elsewhere (fio,
//! tar, git, rsync, cp -a, xfstests) reach the engine through ordinary
//! system calls. The crate speaks the kernel's FUSE protocol itself
//! (`fuse`: the wire format, the connection, mounting, the serving
//! threads, which busy-poll `/dev/fuse` for a while before sleeping, and
//! FUSE over io_uring with a queue per CPU where the kernel offers it)
//! and maps each request onto one or a few [`Volume`] calls
//! (`server` dispatches; `entries`, `data`, `control` and `dirs` hold
//! the operations). FUSE inode numbers are the volume's (the root is 1 on
//! both sides), and each inode's generation number travels with it, so
//! file handles can be exported (`name_to_handle_at`, NFS).
//!
//! ## What is durable when
//!
//! **Every byte written before a successful `fsync`/`fdatasync` of its
//! file, or written more than the commit interval ago (`commit=`, 5 s by
//! default), survives a kill -9 of the server or a power cut; so do names
//! and attributes changed before then.** An `fsync` writes the file's
//! dirty data and commits the journal. A thread syncs the whole volume
//! every half interval ([`MountConfig::commit`]), so a write is durable at
//! most one interval later while a sync takes under half of it. On a
//! fuseblk mount (a block device, or `-o loop`) `sync(2)` and `syncfs(2)`
//! reach the server (`FUSE_SYNCFS`) and are durable on return; on a plain
//! mount the kernel does not pass them on, and the interval bounds them.
//! Unmounting syncs, checkpoints and marks the volume clean.
//!
//! ## What a program sees
//!
//! What ext4 shows, checked by the same observations on both
//! (`tests/posix.rs`) and by xfstests (docs/MOUNT.md): hard and symbolic
//! links, device nodes (opened by the kernel; a user's mount is `nodev`),
//! FIFOs, sockets, extended attributes and POSIX ACLs, chattr flags,
//! files and directories removed while open, `O_TMPFILE`, `renameat2`'s
//! three flags, set-ID bits cleared as the VFS clears them, access times
//! as the mount's VFS flags say (`vfs_flags`), stable listings (`dirs`),
//! shutdown, the label and FITRIM. `COLLAPSE_RANGE` and `INSERT_RANGE`
//! are refused by the kernel's FUSE before any server sees them (the
//! volume has both: [`mballoc_vol::Volume::collapse_range`]).
//!
//! ## When something goes wrong
//!
//! A request that meets a bug (a panic) is answered EIO; the volume then
//! takes no more changes ([`mballoc_vol::Halt`]), as ext4's
//! `errors=remount-ro`: the mount stays up, reads go on, and what was
//! committed is kept. A request the server cannot decode is answered EIO.
//!
//! The mount ends on `mballoc umount`, `umount`, `fusermount3 -u`,
//! SIGTERM, SIGINT or SIGHUP: the session stops, then the volume syncs,
//! checkpoints and is marked clean. A killed server leaves the journal,
//! which the next mount replays like any crash. SIGUSR1 prints the
//! per-request counters (`--stats` prints them at unmount).

#![deny(unsafe_code)]

mod control;
mod data;
mod dirs;
mod entries;
mod fuse;
mod kernel_cache;
mod options;
mod server;
mod stat;
mod table;
mod vfs_flags;

/// The server's cache of file data (`-o cache_bytes=` changes it), half
/// of it dirty at most: the kernel's page cache holds what is read again,
/// so the server's own need only gather writes (see [`serve`]).
pub const MOUNT_CACHE_BYTES: u64 = 64 << 20;

/// Writes of whole blocks at least this long go straight to their blocks
/// (`-o write_through_bytes=` changes it; 0 caches every write): the
/// kernel sends a large write as 1 MiB requests, and a copy through the
/// server's cache was a quarter of its time on sequential writes.
pub const MOUNT_WRITE_THROUGH_BYTES: u64 = 256 << 10;

pub use options::{parse_size, Atime, MountConfig, Profile};
pub use table::{is_mounted, mounted_source, umount};

use anyhow::{Context, Result};
use fuse::mount::MountSpec;
use mballoc_vol::{Access, FileDevice, MountOptions, OpenMode, Volume};
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::Arc;

/// What to mount where, and how.
#[derive(Debug, Clone)]
pub struct MountArgs {
    /// The volume file or device.
    pub volume: PathBuf,
    /// The mount point.
    pub dir: PathBuf,
    /// Options.
    pub config: MountConfig,
}

/// The devices a mount holds: the volume, and for `-o loop` the loop
/// device it reaches the volume file through (the file stays locked).
struct Devices {
    volume: Arc<FileDevice>,
    /// The block device a fuseblk mount names, if any.
    block: Option<PathBuf>,
    _file: Option<FileDevice>,
}

fn open_devices(args: &MountArgs) -> Result<Devices> {
    let c = &args.config;
    let path = &args.volume;
    let kind = std::fs::metadata(path).with_context(|| format!("opening {}", path.display()))?.file_type();
    let fuseblk = (kind.is_block_device() || c.loop_device) && !c.read_only && nix::unistd::geteuid().is_root();
    if !fuseblk {
        let mode = if c.read_only { OpenMode::ReadOnly } else { OpenMode::ReadWrite };
        let dev = FileDevice::open(path, mode).with_context(|| format!("opening {}", path.display()))?;
        return Ok(Devices { volume: Arc::new(dev), block: None, _file: None });
    }
    if kind.is_block_device() {
        // The kernel claims the device for the mount; this open must not.
        let dev = FileDevice::open(path, OpenMode::ReadWriteKernelClaimed)
            .with_context(|| format!("opening {}", path.display()))?;
        return Ok(Devices { volume: Arc::new(dev), block: Some(path.clone()), _file: None });
    }
    // -o loop: the file stays locked for the mount's life; its data goes
    // through a loop device that detaches itself when the last user closes it.
    let file = FileDevice::open(path, OpenMode::ReadWrite).with_context(|| format!("opening {}", path.display()))?;
    let backing = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
    let (loopdev, held) = fuse::attach_loop(&backing).context("setting up a loop device (-o loop)")?;
    drop(backing);
    let dev = FileDevice::open(&loopdev, OpenMode::ReadWriteKernelClaimed)
        .with_context(|| format!("opening {}", loopdev.display()))?;
    // The volume's open holds the loop device now.
    drop(held);
    Ok(Devices { volume: Arc::new(dev), block: Some(loopdev), _file: Some(file) })
}

/// Mount and serve until unmounted or signalled; then sync and close the
/// volume cleanly. Returns once the volume is closed.
pub fn serve(args: &MountArgs) -> Result<()> {
    let c = &args.config;
    // A volume mounted already is mounted again as ext4 mounts a mounted
    // device again: the same file system at a second place (a bind mount
    // of the first), served by the one server.
    let canonical = std::fs::canonicalize(&args.volume).unwrap_or_else(|_| args.volume.clone());
    if let Some(first) = table::mount_point_of(&canonical)? {
        fuse::mount::bind(&first, &args.dir, c.read_only)?;
        eprintln!("mballoc mount: {} is mounted on {}: mounted there too", args.volume.display(), first.display());
        return Ok(());
    }
    let devices = open_devices(args)?;
    let access = if c.read_only { Access::ReadOnly } else { Access::ReadWrite };
    // The kernel's page cache holds what was read and written (each open
    // keeps it, readahead fills it): the server's own cache is for the
    // dirty data delayed allocation waits on, and is kept small, so its
    // folios are reused while still in memory instead of faulted in anew
    // (sequential writes: 0.39x ext4 with 512 MiB, 0.6x with 64 MiB).
    let mut opts = MountOptions {
        folio_size: c.folio,
        access,
        commit: c.commit,
        cache_bytes: MOUNT_CACHE_BYTES,
        dirty_bytes: MOUNT_CACHE_BYTES / 2,
        write_through_bytes: MOUNT_WRITE_THROUGH_BYTES,
        ..MountOptions::default()
    };
    // The profile first, then the options and settings in the order given.
    opts.set("profile", c.profile.name())?;
    opts.set_all(c.settings.iter().map(String::as_str))?;
    let vol =
        Volume::open(devices.volume.clone(), opts).with_context(|| format!("mounting {}", args.volume.display()))?;
    let source = std::fs::canonicalize(&args.volume).unwrap_or_else(|_| args.volume.clone());
    let table_source = match &devices.block {
        Some(b) => b.display().to_string(),
        None => format!("{}{}", table::SOURCE_PREFIX, source.display()),
    };
    let root = nix::unistd::geteuid().is_root();
    let spec = MountSpec {
        source: &table_source,
        dir: &args.dir,
        subtype: "mballoc",
        // The kernel's block size for the mount: at most a page.
        block: devices.block.as_ref().map(|_| vol.superblock().block_size.min(4096)),
        read_only: c.read_only,
        // Device nodes and set-user-ID programs work as on ext4 when root
        // mounts; a user's mount cannot have them.
        devices: root,
        atime: c.atime,
        // Spliced replies are whole in one pipe: reads no larger than
        // half of what a pipe may hold here.
        max_read: (c.splice && !c.uring).then(fuse::splice::largest_reply).flatten(),
    };
    let mut fs = server::VolumeFs::new(vol.clone(), c.atime, c.read_only);
    fs.mount_dir = Some(args.dir.clone());
    let ch = fuse::mount::mount(&spec)?;
    if let Ok(n) = ch.clone_for_thread() {
        let _ = fs.notifier.set(n);
    }
    let vfs = vfs_flags::Watcher::start(&args.dir, fs.vfs.clone(), vol.clone());
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1])
        .context("installing signal handlers")?;
    let handle = signals.handle();
    let dir = args.dir.clone();
    let stats = Arc::new(fuse::stats::RequestStats::default());
    let counted = stats.clone();
    let watcher = std::thread::spawn(move || {
        for sig in signals.forever() {
            if sig == SIGUSR1 {
                eprint!("mballoc mount: requests so far on {}:\n{}", dir.display(), counted.report());
                continue;
            }
            eprintln!("mballoc mount: signal {sig}: unmounting {}", dir.display());
            if let Err(e) = fuse::mount::unmount(&dir, true) {
                eprintln!("mballoc mount: unmounting {}: {e}", dir.display());
            }
            break;
        }
    });
    let served = fuse::session::serve(
        ch,
        fuse::session::Pool { threads: c.threads, busy_poll: c.busy_poll, uring: c.uring, splice: c.splice },
        server::VolumeFs::wanted(),
        &fs,
        &stats,
    );
    if c.stats {
        eprint!("mballoc mount: requests served on {}:\n{}", args.dir.display(), stats.report());
    }
    handle.close();
    let _ = watcher.join();
    drop(vfs);
    served.with_context(|| format!("serving {}", args.dir.display()))?;
    drop(fs);
    if vol.is_halted() {
        // After a shutdown or a bug the volume writes nothing more: it is
        // left as a crash leaves it, and the next mount replays its journal.
        eprintln!("mballoc mount: {} was not marked clean; the next mount replays its journal", args.volume.display());
        vol.abandon();
        return Ok(());
    }
    vol.unmount().with_context(|| format!("closing {}", args.volume.display()))?;
    drop(devices);
    Ok(())
}
