//! Replies through a pipe (splice(2)). A READ answered from a buffer costs
//! two copies of every byte: the device's pages into the buffer, and the
//! buffer into the pages of the file being read. Spliced, the device's
//! pages go into a pipe by reference and the kernel copies them once,
//! from the pipe into the reply (`fuse_dev_splice_write`).
//!
//! A reply is the 16-byte header, written into the pipe first (its
//! length must be known before the data: the volume says it when a read
//! starts), then its pieces, then the whole pipe spliced to `/dev/fuse`
//! in one call, as the kernel requires. The pipe's write end does not
//! block: a reply that does not fit (a read of many small extents, each
//! taking pipe slots of its own) fails with [`Overflow`], is thrown away,
//! and the caller answers from a buffer instead.

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Bytes a serving thread's pipe asks for: a 1 MiB reply and its slots.
/// An unprivileged process gets at most `/proc/sys/fs/pipe-max-size`
/// (1 MiB by default), and so may this one.
pub const PIPE_BYTES: usize = 4 << 20;

/// The largest READ to ask the kernel for when replies are spliced: half
/// of what a pipe gets here (a page-aligned reply takes a slot per page,
/// its header one more, and a piece that starts inside a page one more),
/// at most 1 MiB; `None` if no pipe can be made.
pub fn largest_reply() -> Option<u32> {
    let p = ReplyPipe::new(PIPE_BYTES).ok()?;
    let half = (p.capacity() / 2).min(1 << 20) as u32;
    Some(half / 4096 * 4096).filter(|&n| n >= 4096)
}

/// A reply did not fit in the pipe.
#[derive(Debug)]
pub struct Overflow;

impl std::fmt::Display for Overflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the reply does not fit in the pipe")
    }
}

impl std::error::Error for Overflow {}

/// One serving thread's pipe, and the reply queued in it.
#[derive(Debug)]
pub struct ReplyPipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
    queued: usize,
}

impl ReplyPipe {
    /// A pipe holding `want` bytes, or as many as the kernel grants (an
    /// unprivileged process up to `/proc/sys/fs/pipe-max-size`).
    pub fn new(want: usize) -> io::Result<ReplyPipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        let want = i32::try_from(want).unwrap_or(i32::MAX);
        let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(1 << 20);
        let capacity = match fcntl(write.as_fd(), FcntlArg::F_SETPIPE_SZ(want)) {
            Ok(n) => n,
            Err(_) => match fcntl(write.as_fd(), FcntlArg::F_SETPIPE_SZ(want.min(max))) {
                Ok(n) => n,
                Err(_) => fcntl(write.as_fd(), FcntlArg::F_GETPIPE_SZ)?,
            },
        };
        Ok(ReplyPipe { read, write, capacity: capacity as usize, queued: 0 })
    }

    /// Bytes the pipe holds at most (a reply also needs a slot per piece).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of the reply queued so far.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Start the reply to request `unique`, of `body` bytes.
    pub fn begin(&mut self, unique: u64, body: usize) -> io::Result<()> {
        assert_eq!(self.queued, 0, "a reply begins in an empty pipe");
        let len = u32::try_from(super::abi::OUT_HEADER + body).map_err(|_| io::Error::other(Overflow))?;
        let mut header = [0u8; super::abi::OUT_HEADER];
        header[0..4].copy_from_slice(&len.to_ne_bytes());
        header[8..16].copy_from_slice(&unique.to_ne_bytes());
        self.write_in(&header)
    }

    /// Move `len` bytes of `fd` at `offset` into the reply, by reference.
    pub fn splice_in(&mut self, fd: BorrowedFd<'_>, offset: u64, mut len: usize) -> io::Result<()> {
        let mut off = i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        while len > 0 {
            match splice(fd, Some(&mut off), self.write.as_fd(), None, len, SpliceFFlags::SPLICE_F_NONBLOCK) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the device ended")),
                Ok(n) => {
                    len -= n;
                    self.queued += n;
                }
                Err(nix::errno::Errno::EAGAIN) => return Err(io::Error::other(Overflow)),
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Copy `b` into the reply.
    pub fn write_in(&mut self, mut b: &[u8]) -> io::Result<()> {
        while !b.is_empty() {
            match nix::unistd::write(&self.write, b) {
                Ok(n) => {
                    b = &b[n..];
                    self.queued += n;
                }
                Err(nix::errno::Errno::EAGAIN) => return Err(io::Error::other(Overflow)),
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Send the queued reply to the kernel, in one splice.
    pub fn send(&mut self, dev: &File) -> io::Result<()> {
        let len = self.queued;
        let sent = loop {
            match splice(self.read.as_fd(), None, dev.as_fd(), None, len, SpliceFFlags::empty()) {
                Err(nix::errno::Errno::EINTR) => continue,
                r => break r,
            }
        };
        match sent {
            Ok(n) if n == len => {
                self.queued = 0;
                Ok(())
            }
            Ok(n) => {
                self.discard();
                Err(io::Error::other(format!("a reply of {len} bytes was taken short, {n}")))
            }
            // The request was interrupted and forgotten, or the mount is
            // gone: nobody waits for this answer any more.
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENODEV) => {
                self.discard();
                Ok(())
            }
            Err(e) => {
                self.discard();
                Err(e.into())
            }
        }
    }

    /// Throw away what is queued (a reply abandoned part way).
    pub fn discard(&mut self) {
        let mut scratch = [0u8; 64 << 10];
        while self.queued > 0 {
            match nix::unistd::read(&self.read, &mut scratch[..self.queued.min(64 << 10)]) {
                Ok(0) | Err(nix::errno::Errno::EAGAIN) => break,
                Ok(n) => self.queued -= n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => break,
            }
        }
        // Nothing else reads this pipe: what was queued is all it held.
        assert_eq!(self.queued, 0, "a reply pipe emptied");
    }
}

/// Whether `e` is a pipe's [`Overflow`].
pub fn is_overflow(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<Overflow>()
            || err.downcast_ref::<io::Error>().and_then(|i| i.get_ref()).is_some_and(|i| i.is::<Overflow>())
        {
            return true;
        }
        cur = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_reply_is_the_header_then_its_pieces_and_overflow_is_thrown_away() {
        let mut p = ReplyPipe::new(1 << 20).unwrap();
        assert!(p.capacity() >= 64 << 10);
        let mut f = tempfile_in_shm();
        f.write_all(&[7u8; 8192]).unwrap();
        p.begin(42, 4096 + 3).unwrap();
        p.splice_in(f.as_fd(), 4096, 4096).unwrap();
        p.write_in(b"abc").unwrap();
        assert_eq!(p.queued(), 16 + 4096 + 3);
        let mut got = vec![0u8; p.queued()];
        assert_eq!(nix::unistd::read(&p.read, &mut got).unwrap(), got.len());
        assert_eq!(u32::from_ne_bytes(got[0..4].try_into().unwrap()) as usize, got.len());
        assert_eq!(u64::from_ne_bytes(got[8..16].try_into().unwrap()), 42);
        assert!(got[16..16 + 4096].iter().all(|&b| b == 7) && &got[16 + 4096..] == b"abc");
        p.queued = 0;
        // More than the pipe holds: Overflow, then an empty pipe again.
        let big = vec![1u8; p.capacity() + 4096];
        let e = p.write_in(&big).unwrap_err();
        assert!(is_overflow(&e), "{e}");
        p.discard();
        assert_eq!(p.queued(), 0);
    }

    fn tempfile_in_shm() -> File {
        let path = std::env::temp_dir().join(format!("mballoc-splice-test-{}", std::process::id()));
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}
