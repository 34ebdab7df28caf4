//! Where a volume lives: anything that reads and writes bytes at offsets
//! and can make earlier writes durable.

use parking_lot::RwLock;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// A block device, or a file standing in for one. Writes may be torn or
/// lost until [`Device::flush`] returns; the format assumes only that a
/// 512-byte sector is written whole or not at all.
pub trait Device: Send + Sync {
    /// Size in bytes.
    fn len(&self) -> u64;
    /// True for a zero-byte device.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fill `buf` from `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Write `buf` at `offset`.
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Make every completed write durable (a cache flush).
    fn flush(&self) -> io::Result<()>;
}

/// A volume in a regular file or on a block device.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    len: u64,
}

/// How [`FileDevice`] opens its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpenMode {
    /// Reads and writes.
    #[default]
    ReadWrite,
    /// Reads only: every write fails.
    ReadOnly,
}

impl FileDevice {
    /// Open an existing file or block device.
    pub fn open(path: &Path, mode: OpenMode) -> io::Result<FileDevice> {
        let file = OpenOptions::new().read(true).write(mode == OpenMode::ReadWrite).open(path)?;
        let len = device_len(&file)?;
        Ok(FileDevice { file, len })
    }

    /// Create (or truncate) a regular file of `len` bytes, sparse.
    pub fn create(path: &Path, len: u64) -> io::Result<FileDevice> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).mode(0o644).open(path)?;
        file.set_len(len)?;
        Ok(FileDevice { file, len })
    }
}

/// A regular file's length, or a block device's size (seek to the end).
fn device_len(file: &File) -> io::Result<u64> {
    let meta = file.metadata()?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::End(0))
}

impl Device for FileDevice {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// A volume in memory.
#[derive(Debug, Default)]
pub struct MemDevice {
    bytes: RwLock<Vec<u8>>,
}

impl MemDevice {
    /// `len` zero bytes.
    pub fn new(len: u64) -> MemDevice {
        MemDevice { bytes: RwLock::new(vec![0; len as usize]) }
    }

    /// A device holding `bytes`.
    pub fn from_bytes(bytes: Vec<u8>) -> MemDevice {
        MemDevice { bytes: RwLock::new(bytes) }
    }

    /// A copy of the contents.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.bytes.read().clone()
    }
}

fn range(len: usize, offset: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
    match usize::try_from(offset).ok().and_then(|o| o.checked_add(n).map(|e| (o, e))) {
        Some((o, e)) if e <= len => Ok(o..e),
        _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("{n} bytes at {offset} pass the end ({len})"))),
    }
}

impl Device for MemDevice {
    fn len(&self) -> u64 {
        self.bytes.read().len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let b = self.bytes.read();
        let r = range(b.len(), offset, buf.len())?;
        buf.copy_from_slice(&b[r]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut b = self.bytes.write();
        let r = range(b.len(), offset, buf.len())?;
        b[r].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}
