//! The system calls the kernel backends need and std does not offer:
//! `fallocate` with a mode, the FIEMAP and GETFSMAP ioctls, `statvfs`, and
//! the CPU affinity calls the runner binds workers with.
//! Every `unsafe` block of the crate is here.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

/// `fallocate` modes the workloads use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocMode {
    /// Allocate and extend the size (mode 0).
    ExtendSize,
    /// `FALLOC_FL_KEEP_SIZE`.
    KeepSize,
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`.
    PunchHole,
    /// `FALLOC_FL_ZERO_RANGE`: the range reads as zeroes, allocated.
    ZeroRange,
}

/// `fallocate(fd, mode, offset, len)`.
pub fn fallocate(file: &File, mode: FallocMode, offset: u64, len: u64) -> io::Result<()> {
    let mode = match mode {
        FallocMode::ExtendSize => 0,
        FallocMode::KeepSize => libc::FALLOC_FL_KEEP_SIZE,
        FallocMode::PunchHole => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        FallocMode::ZeroRange => libc::FALLOC_FL_ZERO_RANGE,
    };
    // SAFETY: the descriptor stays open for the lifetime of `file`;
    // fallocate only reads its integer arguments.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset as libc::off_t, len as libc::off_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One FIEMAP record, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiemapRecord {
    /// Logical byte offset.
    pub logical: u64,
    /// Physical byte offset.
    pub physical: u64,
    /// Bytes.
    pub len: u64,
    /// `FIEMAP_EXTENT_*` flags.
    pub flags: u32,
}

/// `FIEMAP_EXTENT_UNWRITTEN`.
pub const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
const FIEMAP_FLAG_SYNC: u32 = 0x1;
/// `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
const FIEMAP_BATCH: usize = 512;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawFiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

#[repr(C)]
struct RawFiemap {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fm_extents: [RawFiemapExtent; FIEMAP_BATCH],
}

/// Every extent FIEMAP reports for `file` (after syncing it, as `e4defrag -c`
/// and `filefrag -s` do), in logical order.
pub fn fiemap(file: &File) -> io::Result<Vec<FiemapRecord>> {
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut m = Box::new(RawFiemap {
            fm_start: start,
            fm_length: u64::MAX - start,
            fm_flags: FIEMAP_FLAG_SYNC,
            fm_mapped_extents: 0,
            fm_extent_count: FIEMAP_BATCH as u32,
            fm_reserved: 0,
            fm_extents: [RawFiemapExtent::default(); FIEMAP_BATCH],
        });
        // SAFETY: `m` is a properly laid out `struct fiemap` with room for
        // `fm_extent_count` records; the kernel writes no further.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP as _, &mut *m as *mut RawFiemap) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (m.fm_mapped_extents as usize).min(FIEMAP_BATCH);
        if n == 0 {
            return Ok(out);
        }
        for e in &m.fm_extents[..n] {
            out.push(FiemapRecord {
                logical: e.fe_logical,
                physical: e.fe_physical,
                len: e.fe_length,
                flags: e.fe_flags,
            });
        }
        let last = m.fm_extents[n - 1];
        if last.fe_flags & FIEMAP_EXTENT_LAST != 0 {
            return Ok(out);
        }
        start = last.fe_logical + last.fe_length;
    }
}

/// One GETFSMAP record, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsmapRecord {
    /// Device number.
    pub device: u32,
    /// Physical byte offset.
    pub physical: u64,
    /// Bytes.
    pub len: u64,
    /// Owner code (`FMR_OWN_FREE` for free space).
    pub owner: u64,
    /// `FMR_OF_*` flags.
    pub flags: u32,
}

impl FsmapRecord {
    /// Free space (`FMR_OWN_FREE`).
    pub fn is_free(&self) -> bool {
        self.flags & FMR_OF_SPECIAL_OWNER != 0 && self.owner == FMR_OWN_FREE
    }
}

const FMR_OF_SPECIAL_OWNER: u32 = 0x10;
const FMR_OF_LAST: u32 = 0x20;
/// `FMR_OWNER(0, 1)`.
const FMR_OWN_FREE: u64 = 1;
const FSMAP_BATCH: usize = 1024;
/// `_IOWR('X', 59, struct fsmap_head)`, the head being 192 bytes.
const FS_IOC_GETFSMAP: libc::c_ulong = 0xC0C0_583B;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawFsmap {
    fmr_device: u32,
    fmr_flags: u32,
    fmr_physical: u64,
    fmr_owner: u64,
    fmr_offset: u64,
    fmr_length: u64,
    fmr_reserved: [u64; 3],
}

#[repr(C)]
struct RawFsmapHead {
    fmh_iflags: u32,
    fmh_oflags: u32,
    fmh_count: u32,
    fmh_entries: u32,
    fmh_reserved: [u64; 6],
    fmh_keys: [RawFsmap; 2],
    fmh_recs: [RawFsmap; FSMAP_BATCH],
}

/// The whole space map of the file system holding `file` (any file or
/// directory on it), as GETFSMAP reports it.
pub fn getfsmap(file: &File) -> io::Result<Vec<FsmapRecord>> {
    let high = RawFsmap {
        fmr_device: u32::MAX,
        fmr_flags: u32::MAX,
        fmr_physical: u64::MAX,
        fmr_owner: u64::MAX,
        fmr_offset: u64::MAX,
        fmr_length: 0,
        fmr_reserved: [0; 3],
    };
    let mut head = Box::new(RawFsmapHead {
        fmh_iflags: 0,
        fmh_oflags: 0,
        fmh_count: FSMAP_BATCH as u32,
        fmh_entries: 0,
        fmh_reserved: [0; 6],
        fmh_keys: [RawFsmap::default(), high],
        fmh_recs: [RawFsmap::default(); FSMAP_BATCH],
    });
    let mut out = Vec::new();
    loop {
        // SAFETY: `head` is a properly laid out `struct fsmap_head` followed
        // by room for `fmh_count` records; the kernel writes no further.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_GETFSMAP as _, &mut *head as *mut RawFsmapHead) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (head.fmh_entries as usize).min(FSMAP_BATCH);
        if n == 0 {
            return Ok(out);
        }
        for rec in &head.fmh_recs[..n] {
            out.push(FsmapRecord {
                device: rec.fmr_device,
                physical: rec.fmr_physical,
                len: rec.fmr_length,
                owner: rec.fmr_owner,
                flags: rec.fmr_flags,
            });
        }
        let last = head.fmh_recs[n - 1];
        if last.fmr_flags & FMR_OF_LAST != 0 {
            return Ok(out);
        }
        // The next query starts after the last record returned.
        head.fmh_keys[0] = last;
    }
}

/// Free and total bytes of the file system holding `file`.
pub fn statvfs(file: &File) -> io::Result<(u64, u64)> {
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `s` is a valid, writable statvfs for the call's duration.
    let r = unsafe { libc::fstatvfs(file.as_raw_fd(), &mut s) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let unit = s.f_frsize as u64;
    Ok((s.f_bavail as u64 * unit, s.f_blocks as u64 * unit))
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The kernel's page size in bytes.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions; _SC_PAGESIZE always answers.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

/// The CPUs this process may run on, ascending.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is the empty set, a valid value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed; pid
    // 0 is the calling thread.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET only reads `set`, for CPU numbers below its size.
    Ok((0..bits).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Bind the calling thread to `cpu`.
pub fn bind_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no CPU {cpu} in a cpu_set_t")));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set, a valid value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` was checked against the set's size above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the
    // calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `syncfs`: write back every file of the file system holding `file`,
/// and its journal.
pub fn syncfs(file: &File) -> io::Result<()> {
    // SAFETY: the descriptor is open for the duration of the call.
    let r = unsafe { libc::syncfs(file.as_raw_fd()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
