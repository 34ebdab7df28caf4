//! A connection to the kernel's FUSE client: `/dev/fuse` opened for one
//! mount. Each read takes one whole request; each write gives one whole
//! reply or notification (a header and its body in one `writev`). Every
//! serving thread has its own clone of the connection, so the kernel
//! hands requests to threads without them sharing a descriptor.

use super::abi::OUT_HEADER;
use std::fs::File;
use std::io::{self, IoSlice, Read, Write};

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

    /// Read the next request into `buf` (which must hold the largest
    /// request: the negotiated max_write plus a page).
    pub fn receive(&self, buf: &mut [u8]) -> io::Result<Received> {
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
