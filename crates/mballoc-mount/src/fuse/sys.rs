//! The device controls the transport needs that have no safe
//! wrapper: cloning a `/dev/fuse` connection for another thread, and
//! attaching a file to a free loop device with autoclear (so a volume
//! file can be mounted as fuseblk). Everything else goes through `nix`'s
//! safe calls or `std`.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Take ownership of a descriptor received over a socket (SCM_RIGHTS).
pub fn own_received(fd: std::os::fd::RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: the kernel installed this descriptor in our table for the
    // message just received; nothing else in the process refers to it, so
    // this is its one owner.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

nix::ioctl_read!(fuse_dev_clone, 229, 0, u32);

/// Bind `new` (a fresh open of /dev/fuse) to the connection of `session`.
pub fn clone_fuse(new: &File, session: &File) -> io::Result<()> {
    let mut fd = session.as_raw_fd() as u32;
    // SAFETY: FUSE_DEV_IOC_CLONE reads one u32 (the session's descriptor)
    // through the pointer, which points at a live local for the call's
    // duration; both descriptors are open files owned by the caller.
    unsafe { fuse_dev_clone(new.as_raw_fd(), &mut fd) }.map_err(io::Error::from)?;
    Ok(())
}

/// `LOOP_CTL_GET_FREE` and `LOOP_CONFIGURE` (linux/loop.h).
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// `struct loop_config`: the backing descriptor, a block size, a
/// `struct loop_info64` (232 bytes) and reserved words.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: [u8; 232],
    reserved: [u64; 8],
}

/// Attach `backing` to a free loop device that detaches itself when its
/// last user closes it; returns the device's path and an open handle,
/// which must stay open until another open holds the device (closing the
/// last one detaches it).
pub fn attach_loop(backing: &File) -> io::Result<(std::path::PathBuf, File)> {
    let ctl = std::fs::OpenOptions::new().read(true).write(true).open("/dev/loop-control")?;
    // Another process may take the free device first: ask again.
    let mut last = None;
    for _ in 0..8 {
        match configure_free(&ctl, backing) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => last = Some(e),
            r => return r,
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EBUSY)))
}

fn configure_free(ctl: &File, backing: &File) -> io::Result<(std::path::PathBuf, File)> {
    // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a number.
    let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let path = std::path::PathBuf::from(format!("/dev/loop{n}"));
    let dev = std::fs::OpenOptions::new().read(true).write(true).open(&path)?;
    // Block size 0: the loop driver's default (512-byte sectors).
    let mut cfg = LoopConfig { fd: backing.as_raw_fd() as u32, block_size: 0, info: [0; 232], reserved: [0; 8] };
    // lo_flags sits at offset 52 of loop_info64 (after device, inode,
    // rdevice, offset, sizelimit, number, encrypt_type, encrypt_key_size).
    cfg.info[52..56].copy_from_slice(&LO_FLAGS_AUTOCLEAR.to_ne_bytes());
    // SAFETY: LOOP_CONFIGURE reads one struct loop_config through the
    // pointer, which is a live, correctly laid out local (repr(C), the
    // kernel's field order and sizes).
    let r = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE as _, &mut cfg as *mut LoopConfig) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((path, dev))
}
