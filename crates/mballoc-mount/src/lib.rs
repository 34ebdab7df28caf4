//! # mballoc-mount — a volume as a FUSE file system
//!
//! The server behind `mballoc mount`: programs written elsewhere (fio,
//! tar, git, rsync, cp -a) reach the engine through ordinary system calls.
//! Each FUSE request maps onto one or a few [`Volume`] calls; FUSE inode
//! numbers are the volume's (the root is 1 on both sides), and each
//! inode's generation number travels with it, so file handles can be
//! exported (`name_to_handle_at`, NFS).
//!
//! ## What is durable when
//!
//! **Every byte written before a successful `fsync`/`fdatasync` of its
//! file, or written more than the commit interval ago (`commit=`, 5 s by
//! default), survives a kill -9 of the server or a power cut; so do names
//! and attributes changed before then.** An `fsync` writes the file's
//! dirty data and commits the journal. A thread syncs the whole volume
//! every half interval ([`MountConfig::commit`]), so a write is durable at
//! most one interval later while a sync takes under half of it. `sync(2)`
//! and `syncfs(2)` return without reaching this server: the kernel sends
//! them only to fuseblk and virtiofs servers, so the interval is what
//! bounds them here. Unmounting syncs, checkpoints and marks the volume
//! clean.
//!
//! ## What a program sees
//!
//! * Regular files, directories (`st_nlink` = 2 + subdirectories), hard
//!   links, symbolic links, FIFOs, sockets and device nodes (stored, opened
//!   by the kernel), names up to 255 bytes, extended attributes in the
//!   `user.`, `trusted.`, `security.` and `system.` namespaces, chattr's
//!   immutable, append-only, nodump and noatime flags (`FS_IOC_GETFLAGS`,
//!   `FS_IOC_SETFLAGS`).
//! * A file unlinked while open keeps working through its descriptors and
//!   is freed at its last close; one a crash left behind is freed at the
//!   next mount (ext4's orphan list).
//! * Directory listings are stable: an entry present for the whole listing
//!   is returned once, however the directory changes meanwhile ([`dirs`]).
//! * `rename` with `RENAME_NOREPLACE` and `RENAME_EXCHANGE`; `truncate` by
//!   path; `fallocate` allocate, PUNCH_HOLE and ZERO_RANGE at and past the
//!   end of the file as ext4; set-user-ID and set-group-ID bits cleared by
//!   writes from anyone but root; set-group-ID directories passing their
//!   group down; access times as ext4's `relatime` (or `noatime`).
//! * Permissions are the kernel's (`default_permissions`), for every user
//!   (`allow_other`); devices and set-user-ID bits have no effect (`nodev`,
//!   `nosuid`).
//!
//! * POSIX ACLs (`system.posix_acl_access`, `system.posix_acl_default`):
//!   the kernel enforces them, the volume keeps them and the mode in step
//!   and applies default ACLs (and otherwise the umask) to new inodes.
//!
//! Not there: `RENAME_WHITEOUT` (`EOPNOTSUPP`), and `COLLAPSE_RANGE` and
//! `INSERT_RANGE`, which the kernel's FUSE refuses before any server
//! sees them (the volume has both: [`mballoc_vol::Volume::collapse_range`]).
//!
//! The mount ends on `mballoc umount`, `fusermount3 -u`, SIGTERM, SIGINT or
//! SIGHUP: the session stops, then the volume syncs, checkpoints and is
//! marked clean. A killed server leaves the journal, which the next mount
//! replays like any crash.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod data;
pub mod dirs;
mod errno;
mod flusher;
mod options;
mod server;
mod stat;
mod table;

pub use options::{parse_size, Atime, MountConfig, Profile};
pub use table::{is_mounted, mounted_source, umount};

use anyhow::{Context, Result};
use fuser::{Config, MountOption, Session};
use mballoc_fs::FsConfig;
use mballoc_vol::{Access, FileDevice, MountOptions, OpenMode, Volume};
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

/// Mount and serve until unmounted or signalled; then sync and close the
/// volume cleanly. Returns once the volume is closed.
pub fn serve(args: &MountArgs) -> Result<()> {
    let c = &args.config;
    let mode = if c.read_only { OpenMode::ReadOnly } else { OpenMode::ReadWrite };
    let dev = FileDevice::open(&args.volume, mode).with_context(|| format!("opening {}", args.volume.display()))?;
    let access = if c.read_only { Access::ReadOnly } else { Access::ReadWrite };
    let opts = MountOptions { folio_size: c.folio, access, ..MountOptions::default() };
    let profile = c.profile;
    let vol = Volume::open_with(Arc::new(dev), opts, |cfg| {
        if profile == Profile::Kernel {
            *cfg = FsConfig::kernel(cfg.geometry);
        }
    })
    .with_context(|| format!("mounting {}", args.volume.display()))?;
    let vol = Arc::new(vol);
    let source = std::fs::canonicalize(&args.volume).unwrap_or_else(|_| args.volume.clone());
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::FSName(format!("{}{}", table::SOURCE_PREFIX, source.display())),
        MountOption::Subtype("mballoc".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    if c.read_only {
        cfg.mount_options.push(MountOption::RO);
    }
    cfg.acl = fuser::SessionACL::All;
    cfg.n_threads = Some(c.threads.max(1));
    let fs = server::VolumeFs { vol: vol.clone(), listings: dirs::Listings::default(), atime: c.atime };
    let mut session =
        Session::new(fs, &args.dir, &cfg).with_context(|| format!("mounting on {}", args.dir.display()))?;
    let flusher = if c.read_only { None } else { flusher::Flusher::start(vol.clone(), c.commit) };
    let mut unmounter = session.unmount_callable();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .context("installing signal handlers")?;
    let handle = signals.handle();
    let dir = args.dir.clone();
    let watcher = std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            eprintln!("mballoc mount: signal {sig}: unmounting {}", dir.display());
            if let Err(e) = unmounter.unmount() {
                eprintln!("mballoc mount: unmounting {}: {e}", dir.display());
            }
        }
    });
    let served = session.run();
    handle.close();
    let _ = watcher.join();
    drop(flusher);
    served.with_context(|| format!("serving {}", args.dir.display()))?;
    let vol =
        Arc::try_unwrap(vol).map_err(|_| anyhow::anyhow!("the volume is still in use after the session ended"))?;
    vol.unmount().with_context(|| format!("closing {}", args.volume.display()))?;
    Ok(())
}
