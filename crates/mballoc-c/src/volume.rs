//! Volumes from C: format, open with options, close, sync, statvfs,
//! check and repair, and the fault-injecting device for tests.

use crate::{c_string, guard_int, invalid, known_flags, put, vol_err, CError};
use mballoc_vol::fault::{DeviceOp, Fault, FaultyDevice, Persistence};
use mballoc_vol::{
    Access, Device, FileDevice, Force, FormatOptions, MountOptions, OpenMode, Overwrite, Repair, Volume,
};
use std::ffi::{c_char, c_int};
use std::sync::{Arc, Mutex, Once, Weak};

/// `mb_format`: overwrite whatever the path holds.
pub const MB_FORMAT_FORCE: c_int = 1;
/// `mb_check`: write the repair.
pub const MB_CHECK_REPAIR: c_int = 1;
/// `mb_volume_inject_fault`: fail a read.
pub const MB_FAULT_READ: c_int = 0;
/// `mb_volume_inject_fault`: fail a write.
pub const MB_FAULT_WRITE: c_int = 1;
/// `mb_volume_inject_fault`: fail a flush.
pub const MB_FAULT_FLUSH: c_int = 2;

/// A mounted volume.
pub struct MbVolume {
    pub(crate) vol: Arc<Volume>,
    faults: Option<Arc<FaultyDevice<FileDevice>>>,
}

/// A volume's space and inodes, as `statvfs` gives them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MbStatVfs {
    /// Bytes per block.
    pub block_size: u32,
    /// Longest name, in bytes.
    pub name_max: u32,
    /// Blocks a file can be given (the data area).
    pub blocks: u64,
    /// Of them, free.
    pub free_blocks: u64,
    /// Inode slots.
    pub inodes: u64,
    /// Of them, free.
    pub free_inodes: u64,
}

/// What `mb_check` found.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MbCheck {
    /// 1 if nothing is wrong.
    pub clean: c_int,
    /// 1 if a repair (or a journal replay) was written.
    pub repaired: c_int,
    /// Problems found.
    pub problems: u64,
    /// Reasons a repair was refused (nothing was written).
    pub refused: u64,
    /// Inodes moved (or that would be moved) to lost+found.
    pub quarantined: u64,
    /// Orphans the next mount removes (not a problem).
    pub orphans: u64,
    /// Inodes, the root included.
    pub inodes: u64,
    /// Of them, regular files.
    pub regular_files: u64,
    /// Free data blocks.
    pub free_blocks: u64,
}

/// Every volume opened and not yet closed: a program that ends without
/// `mb_volume_close` (returning from `main`, `exit`) has them unmounted
/// by an `atexit` handler, so what it wrote is kept, as a C program
/// expects of files.
static LIVE: Mutex<Vec<Weak<Volume>>> = Mutex::new(Vec::new());
static AT_EXIT: Once = Once::new();

extern "C" fn unmount_at_exit() {
    let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    for v in live.iter().filter_map(Weak::upgrade) {
        if let Err(e) = v.unmount() {
            eprintln!("mballoc: a volume left open at exit could not be closed cleanly: {e}");
        }
    }
}

fn track(vol: &Arc<Volume>) {
    AT_EXIT.call_once(|| {
        // SAFETY: registering a handler that takes no arguments and
        // touches only this library's state; it runs once, at exit.
        unsafe { libc::atexit(unmount_at_exit) };
    });
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(vol));
}

pub(crate) unsafe fn volume<'a>(v: *const MbVolume) -> Result<&'a MbVolume, CError> {
    // SAFETY: a non-NULL `v` came from `mb_volume_open` and has not been
    // closed (the header's contract).
    unsafe { v.as_ref() }.ok_or_else(|| invalid("the volume is NULL"))
}

/// Format a new volume file of `size` bytes (blocks of `block_size`; 0 for
/// 4096) at `path`. A path that holds anything is refused (`-EEXIST` or
/// `-EBUSY`) unless `flags` has `MB_FORMAT_FORCE`; a size or block size
/// no volume can have is `-EINVAL`.
#[no_mangle]
pub unsafe extern "C" fn mb_format(path: *const c_char, size: u64, block_size: u32, flags: c_int) -> c_int {
    guard_int(|| {
        known_flags(flags, MB_FORMAT_FORCE, "format")?;
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let path = unsafe { crate::path(path, "path") }?;
        let mut opts = FormatOptions::default();
        if block_size != 0 {
            opts.block_size = block_size;
        }
        let overwrite = if flags & MB_FORMAT_FORCE != 0 { Overwrite::Force } else { Overwrite::Refuse };
        mballoc_vol::mkfs(path, Some(size), &opts, overwrite).map_err(|e| at(e, path))?;
        Ok(0)
    })
}

fn at(e: mballoc_vol::VolError, p: &std::path::Path) -> CError {
    (e.errno(), format!("{}: {e}", p.display()))
}

/// Mount the volume file at `path` and store the handle in `*out`.
/// `options` (NULL for none) is a comma-separated list: `ro` (read-only:
/// nothing is written, not even a replay), `stats` (count `mb_stats`, off
/// by default as in ext4), `fault_injection` (mount through a device
/// `mb_volume_inject_fault` can fail), and any `KEY=VALUE` a mount takes:
/// `commit=SECONDS` (5 by default; 0: only sync and close make writes
/// durable), `cache_bytes=`, `folio_size=`, `profile=kernel|default`, and
/// the engine's settings by name (`mb_max_to_scan=50`; `mballoc lab
/// settings` lists them). An unknown option or bad value is `-EINVAL`.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_open(path: *const c_char, options: *const c_char, out: *mut *mut MbVolume) -> c_int {
    guard_int(|| {
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let path = unsafe { crate::path(path, "path") }?;
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        let options = match options.is_null() {
            true => "",
            // SAFETY: `options` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
            false => unsafe { crate::string(options, "options") }?,
        };
        let mut opts = MountOptions::default();
        let mut faults = false;
        for o in options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            match o {
                "ro" => opts.access = Access::ReadOnly,
                "rw" => opts.access = Access::ReadWrite,
                "stats" => opts.set("mb_stats", "1").map_err(vol_err)?,
                "fault_injection" => faults = true,
                kv => {
                    let (k, v) = kv.split_once('=').ok_or_else(|| invalid(&format!("option {kv:?}: no such flag")))?;
                    opts.set(k.trim(), v.trim()).map_err(vol_err)?;
                }
            }
        }
        let mode = if opts.access.writes() { OpenMode::ReadWrite } else { OpenMode::ReadOnly };
        let dev = FileDevice::open(path, mode).map_err(|e| at(e, path))?;
        let (vol, faults) = if faults {
            let dev = Arc::new(FaultyDevice::new(dev, None));
            (Volume::open(dev.clone() as Arc<dyn Device>, opts), Some(dev))
        } else {
            (Volume::open(Arc::new(dev), opts), None)
        };
        let vol = vol.map_err(|e| at(e, path))?;
        track(&vol);
        // SAFETY: `out` is non-NULL and points at writable storage for a
        // pointer (the header's contract).
        unsafe { *out = Box::into_raw(Box::new(MbVolume { vol, faults })) };
        Ok(0)
    })
}

/// Unmount: everything written reaches the disk, the volume is left clean,
/// and the handle is gone whatever the answer (after a failure the next
/// mount recovers as after a crash). Files still open are not freed: each
/// fails `-EBADF` from then on and must still be closed.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_close(v: *mut MbVolume) -> c_int {
    if v.is_null() {
        return 0;
    }
    guard_int(|| {
        // SAFETY: `v` came from `mb_volume_open` (Box::into_raw) and is
        // given back once (the header's contract).
        let h = unsafe { Box::from_raw(v) };
        h.vol.clone().unmount().map_err(vol_err)?;
        Ok(0)
    })
}

/// Write back every file and commit: what was written is durable.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_sync(v: *const MbVolume) -> c_int {
    guard_int(|| {
        // SAFETY: `v` is NULL (refused) or a handle from `mb_volume_open` not yet closed (the header's contract).
        unsafe { volume(v) }?.vol.sync().map_err(vol_err)?;
        Ok(0)
    })
}

/// Fill `*out` with the volume's space and inode counts.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_statvfs(v: *const MbVolume, out: *mut MbStatVfs) -> c_int {
    guard_int(|| {
        // SAFETY: `v` is NULL (refused) or a handle from `mb_volume_open` not yet closed (the header's contract).
        let u = unsafe { volume(v) }?.vol.usage();
        let s = MbStatVfs {
            block_size: u.block_size,
            name_max: mballoc_vol::NAME_MAX as u32,
            blocks: u.data_blocks,
            free_blocks: u.free_blocks,
            inodes: u.inodes,
            free_inodes: u.free_inodes,
        };
        // SAFETY: `out` is NULL (refused) or valid for one write (the header's contract).
        unsafe { put(out, s, "out") }?;
        Ok(0)
    })
}

/// The value of engine setting `key` in force on the volume, as text;
/// free with `mb_string_free`. NULL (and `mb_last_error`) for no such key.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_setting(v: *const MbVolume, key: *const c_char) -> *mut c_char {
    let mut s = None;
    guard_int(|| {
        // SAFETY: `v` is NULL (refused) or a handle from `mb_volume_open` not yet closed (the header's contract).
        let v = unsafe { volume(v) }?;
        // SAFETY: `key` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let key = unsafe { crate::string(key, "key") }?;
        s = Some(v.vol.fs().config().get(key).ok_or_else(|| invalid(&format!("no setting {key:?}")))?);
        Ok(0)
    });
    c_string(s)
}

/// The volume allocator's counters as `/proc/fs/ext4/DEV/mb_stats` prints
/// them; free with `mb_string_free`. NULL on failure.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_mb_stats(v: *const MbVolume) -> *mut c_char {
    let mut s = None;
    guard_int(|| {
        // SAFETY: `v` is NULL (refused) or a handle from `mb_volume_open` not yet closed (the header's contract).
        s = Some(unsafe { volume(v) }?.vol.fs().allocator().mb_stats_report());
        Ok(0)
    });
    c_string(s)
}

/// Check the unmounted volume file at `path` (with `MB_CHECK_REPAIR`, fix
/// what can be fixed without destroying anything not proven bad) and fill
/// `*out`. `problems`, if not NULL, receives the report's lines (problems,
/// then refusals and what went to lost+found), to free with
/// `mb_string_free`.
#[no_mangle]
pub unsafe extern "C" fn mb_check(
    path: *const c_char,
    flags: c_int,
    out: *mut MbCheck,
    problems: *mut *mut c_char,
) -> c_int {
    guard_int(|| {
        known_flags(flags, MB_CHECK_REPAIR, "check")?;
        // SAFETY: `path` is NULL (refused) or a NUL-terminated string live for the call (the header's contract).
        let path = unsafe { crate::path(path, "path") }?;
        let repair = flags & MB_CHECK_REPAIR != 0;
        let dev = FileDevice::open(path, if repair { OpenMode::ReadWrite } else { OpenMode::ReadOnly })
            .map_err(|e| at(e, path))?;
        let how = if repair { Repair::Yes } else { Repair::No };
        let r = mballoc_vol::check_with(&dev, how, &[] as &[Force]).map_err(|e| at(e, path))?;
        let c = MbCheck {
            clean: c_int::from(r.is_clean()),
            repaired: c_int::from(r.repaired),
            problems: r.problems.len() as u64,
            refused: r.refused.len() as u64,
            quarantined: r.quarantined.len() as u64,
            orphans: r.orphans,
            inodes: r.inodes,
            regular_files: r.regular_files,
            free_blocks: r.free_blocks,
        };
        // SAFETY: `out` is NULL (refused) or valid for one write (the header's contract).
        unsafe { put(out, c, "out") }?;
        if !problems.is_null() {
            let lines: Vec<String> = r
                .problems
                .iter()
                .cloned()
                .chain(r.refused.iter().map(|x| format!("refused: {x}")))
                .chain(r.quarantined.iter().map(|x| format!("lost+found: {x}")))
                .collect();
            // SAFETY: `problems` is non-NULL and writable (the header's contract).
            unsafe { *problems = c_string(Some(lines.join("\n"))) };
        }
        Ok(0)
    })
}

/// On a volume opened with `fault_injection`: fail the `nth` next device
/// call of kind `op` (`MB_FAULT_READ`, `MB_FAULT_WRITE`, `MB_FAULT_FLUSH`)
/// with `EIO`, once, or (`persistent` non-zero) from then on.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_inject_fault(v: *const MbVolume, op: c_int, nth: u64, persistent: c_int) -> c_int {
    guard_int(|| {
        // SAFETY: `v` is NULL (refused) or a handle from `mb_volume_open` not yet closed (the header's contract).
        let v = unsafe { volume(v) }?;
        let dev = v.faults.as_ref().ok_or_else(|| invalid("the volume was opened without fault_injection"))?;
        let op = match op {
            MB_FAULT_READ => DeviceOp::Read,
            MB_FAULT_WRITE => DeviceOp::Write,
            MB_FAULT_FLUSH => DeviceOp::Flush,
            o => return Err(invalid(&format!("unknown fault op {o}"))),
        };
        if nth == 0 {
            return Err(invalid("nth counts from 1"));
        }
        let p = if persistent != 0 { Persistence::FromThenOn } else { Persistence::Once };
        dev.arm(Fault::eio(op, dev.calls(op) + nth, p));
        Ok(0)
    })
}

/// Disarm an injected fault.
#[no_mangle]
pub unsafe extern "C" fn mb_volume_heal(v: *const MbVolume) -> c_int {
    guard_int(|| {
        // SAFETY: `v` is NULL (refused) or a handle from `mb_volume_open` not yet closed (the header's contract).
        let v = unsafe { volume(v) }?;
        v.faults.as_ref().ok_or_else(|| invalid("the volume was opened without fault_injection"))?.heal();
        Ok(0)
    })
}
