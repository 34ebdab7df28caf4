//! A connection to the kernel's FUSE client: `/dev/fuse` opened for one
//! mount. Each read takes one whole request; each write gives one whole
//! reply or notification (a header and its body in one `writev`). Every
//! serving thread has its own clone of the connection, so the kernel
//! hands requests to threads without them sharing a descriptor.
//!
//! With busy polling ([`BusyPoll`]) one thread at a time makes its
//! descriptor non-blocking and keeps reading for a while after it finds
//! the queue empty, before it sleeps in read(2) like the others: a request
//! that comes within that window is taken without waking a thread. On a
//! virtual machine waking an idle CPU costs tens of microseconds, several
//! times the server's own work on a small request.

use super::abi::OUT_HEADER;
use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a serving thread keeps polling for the next request before
/// it sleeps, and the token that lets only one thread poll at a time (the
/// others would take CPU time from the programs the mount serves).
#[derive(Debug, Default)]
pub struct BusyPoll {
    window: Duration,
    polling: AtomicBool,
}

impl BusyPoll {
    /// Poll for up to `window` (zero: never; every thread sleeps at once).
    pub fn new(window: Duration) -> BusyPoll {
        BusyPoll { window, polling: AtomicBool::new(false) }
    }

    /// Whether threads poll at all.
    pub fn enabled(&self) -> bool {
        !self.window.is_zero()
    }
}

/// One descriptor of a FUSE connection.
#[derive(Debug)]
pub struct Channel {
    file: File,
}

/// What a read from the connection gave.
#[derive(Debug)]
pub enum Received {
    /// A request of this many bytes at the start of the buffer.
    Request(usize),
    /// The file system was unmounted (or the connection aborted): no more
    /// requests will come.
    Gone,
}

impl Channel {
    /// Open `/dev/fuse` for a new connection.
    pub fn open() -> io::Result<Channel> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse")?;
        Ok(Channel { file })
    }

    /// Wrap a descriptor that already belongs to a connection (what
    /// fusermount3 hands back).
    pub fn from_file(file: File) -> Channel {
        Channel { file }
    }

    /// The descriptor, for the mount options (`fd=N`).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Another descriptor of the same connection, for another thread.
    pub fn clone_for_thread(&self) -> io::Result<Channel> {
        let new = Channel::open()?;
        super::sys::clone_fuse(&new.file, &self.file)?;
        Ok(new)
    }

    /// Whether reads return EAGAIN on an empty queue (busy polling)
    /// or wait for a request.
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let mut flags = OFlag::from_bits_truncate(fcntl(self.file.as_fd(), FcntlArg::F_GETFL)?);
        flags.set(OFlag::O_NONBLOCK, on);
        fcntl(self.file.as_fd(), FcntlArg::F_SETFL(flags))?;
        Ok(())
    }

    /// Read the next request into `buf` (which must hold the largest
    /// request: the negotiated max_write plus a page), polling first as
    /// `busy` allows.
    pub fn receive(&self, buf: &mut [u8], busy: &BusyPoll) -> io::Result<Received> {
        if busy.enabled() {
            if let Some(r) = self.busy_poll(buf, busy)? {
                return Ok(r);
            }
        }
        loop {
            match (&self.file).read(buf) {
                Ok(n) => return Ok(Received::Request(n)),
                Err(e) => match e.raw_os_error() {
                    // A signal, or a request interrupted before it was read.
                    Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                    Some(libc::ENODEV) => return Ok(Received::Gone),
                    _ => return Err(e),
                },
            }
        }
    }

    /// Keep reading without waiting, for up to `busy`'s window, if no
    /// other thread polls; `None`: nothing came (or another thread polls). Only
    /// the polling thread's descriptor is non-blocking: the others wait
    /// in read(2), where the kernel wakes one of them per request (poll(2)
    /// would wake them all).
    fn busy_poll(&self, buf: &mut [u8], busy: &BusyPoll) -> io::Result<Option<Received>> {
        if busy.polling.swap(true, Ordering::Acquire) {
            return Ok(None);
        }
        let got = self.set_nonblocking(true).and_then(|()| {
            let start = Instant::now();
            loop {
                match (&self.file).read(buf) {
                    Ok(n) => return Ok(Some(Received::Request(n))),
                    Err(e) => match e.raw_os_error() {
                        Some(libc::EAGAIN | libc::EINTR | libc::ENOENT) => {
                            if start.elapsed() >= busy.window {
                                return Ok(None);
                            }
                            // Another task that wants this CPU gets it.
                            std::thread::yield_now();
                        }
                        Some(libc::ENODEV) => return Ok(Some(Received::Gone)),
                        _ => return Err(e),
                    },
                }
            }
        });
        let blocking = self.set_nonblocking(false);
        busy.polling.store(false, Ordering::Release);
        let got = got?;
        blocking?;
        Ok(got)
    }

    /// Answer request `unique`: `error` is 0 or a negative errno; `body`
    /// the reply's bytes (nothing with an error).
    pub fn reply(&self, unique: u64, error: i32, body: &[&[u8]]) -> io::Result<()> {
        self.send(unique, error, body)
    }

    /// A notification the kernel did not ask for (`code` is one of
    /// abi's NOTIFY_*).
    pub fn notify(&self, code: i32, body: &[&[u8]]) -> io::Result<()> {
        self.send(0, code, body)
    }

    fn send(&self, unique: u64, error: i32, body: &[&[u8]]) -> io::Result<()> {
        let len = OUT_HEADER + body.iter().map(|b| b.len()).sum::<usize>();
        let mut header = [0u8; OUT_HEADER];
        header[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        header[4..8].copy_from_slice(&error.to_ne_bytes());
        header[8..16].copy_from_slice(&unique.to_ne_bytes());
        let mut slices = Vec::with_capacity(body.len() + 1);
        slices.push(IoSlice::new(&header));
        slices.extend(body.iter().map(|b| IoSlice::new(b)));
        match (&self.file).write_vectored(&slices) {
            Ok(n) if n == len => Ok(()),
            Ok(n) => Err(io::Error::other(format!("a reply of {len} bytes was taken short, {n}"))),
            // The request was interrupted and forgotten, or the mount is
            // gone: nobody waits for this answer any more.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
