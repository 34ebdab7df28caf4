//! Where a volume lives: anything that reads and writes bytes at offsets
//! and can make earlier writes durable.

use crate::error::{Result, VolError};
use parking_lot::RwLock;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
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
    /// Tell the device `len` bytes at `offset` hold nothing worth keeping
    /// (TRIM: a file gives the space back to its file system). False
    /// where the device cannot; what the range then reads is unspecified.
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        let _ = (offset, len);
        Ok(false)
    }
    /// The descriptor reads may move pages from by reference (splice(2)),
    /// where the device is one and nothing stands between it and the
    /// bytes (a device that injects faults or simulates crashes has none,
    /// so every read goes through [`Device::read_at`]).
    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
    /// Who holds this device open as a mounted volume, where the device
    /// keeps count (a second read-write mount through the same handle is
    /// then refused, as a second open of the same path is).
    fn holders(&self) -> Option<&Holders> {
        None
    }
}

/// The volumes mounted on one device handle: one writer, or any number of
/// readers.
#[derive(Debug, Default)]
pub struct Holders(std::sync::atomic::AtomicU64);

const WRITER: u64 = 1 << 63;

impl Holders {
    /// Take the device for a writer (nothing else may hold it) or a
    /// reader (no writer may); false when refused.
    pub fn acquire(&self, writer: bool) -> bool {
        use std::sync::atomic::Ordering;
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| match writer {
                true => (v == 0).then_some(WRITER),
                false => (v & WRITER == 0).then_some(v + 1),
            })
            .is_ok()
    }

    /// Give back what [`Holders::acquire`] took.
    pub fn release(&self, writer: bool) {
        use std::sync::atomic::Ordering;
        let before = self.0.fetch_sub(if writer { WRITER } else { 1 }, Ordering::AcqRel);
        assert!(if writer { before == WRITER } else { before & !WRITER > 0 }, "released what was held");
    }
}

/// A volume in a regular file or on a block device, locked for as long as
/// it is open: a read-write open excludes every other open of the same
/// volume, by this process or another; read-only opens share with each
/// other. A block device opened read-write is also opened `O_EXCL`, so
/// the kernel refuses it while it is mounted or held by another opener.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    len: u64,
    holders: Holders,
}

/// How [`FileDevice`] opens its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpenMode {
    /// Reads and writes.
    #[default]
    ReadWrite,
    /// Reads only: every write fails.
    ReadOnly,
    /// Reads only, beside a writer: no lock is taken, so another process
    /// may hold the volume read-write ([`crate::Access::Snapshot`]).
    Snapshot,
    /// Reads and writes, locked as [`OpenMode::ReadWrite`], but a block
    /// device is not opened `O_EXCL`: for a device the kernel claims
    /// itself once this open has it (a fuseblk mount of the volume).
    ReadWriteKernelClaimed,
}

impl OpenMode {
    fn writes(self) -> bool {
        matches!(self, OpenMode::ReadWrite | OpenMode::ReadWriteKernelClaimed)
    }
}

impl FileDevice {
    /// Open an existing file or block device, locked as `mode` says. A
    /// volume another open holds gives [`VolError::Busy`], naming the
    /// holding process where the system says.
    pub fn open(path: &Path, mode: OpenMode) -> Result<FileDevice> {
        let io = |e| VolError::io(format!("opening {}", path.display()), e);
        let kind = std::fs::metadata(path).map_err(io)?.file_type();
        // Opening a FIFO would wait for a writer; a directory, socket or
        // character device holds no volume.
        let what = if kind.is_fifo() {
            Some("a FIFO")
        } else if kind.is_socket() {
            Some("a socket")
        } else if kind.is_dir() {
            Some("a directory")
        } else if kind.is_char_device() {
            Some("a character device")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(VolError::InvalidArgument(format!(
                "{} is {what}: a volume lives in a regular file or on a block device",
                path.display()
            )));
        }
        let is_block = kind.is_block_device();
        let mut o = OpenOptions::new();
        o.read(true).write(mode.writes());
        if is_block && mode == OpenMode::ReadWrite {
            o.custom_flags(libc::O_EXCL);
        }
        let file = o.open(path).map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => VolError::Busy { path: path.to_path_buf(), holder: None },
            _ => io(e),
        })?;
        lock(&file, path, mode)?;
        let len = device_len(&file).map_err(io)?;
        Ok(FileDevice { file, len, holders: Holders::default() })
    }

    /// Create a new regular file of `len` bytes, sparse and locked
    /// read-write. An existing file is an error ([`std::io::ErrorKind::AlreadyExists`]):
    /// nothing is overwritten.
    pub fn create_new(path: &Path, len: u64) -> Result<FileDevice> {
        let io = |e| VolError::io(format!("creating {}", path.display()), e);
        let file = OpenOptions::new().read(true).write(true).create_new(true).mode(0o644).open(path).map_err(io)?;
        lock(&file, path, OpenMode::ReadWrite)?;
        file.set_len(len).map_err(io)?;
        Ok(FileDevice { file, len, holders: Holders::default() })
    }

    /// Set the length of a regular file this device holds (a new mkfs of
    /// another size); a block device keeps its size.
    pub fn set_len(&mut self, len: u64) -> Result<()> {
        if self.file.metadata().map_err(|e| VolError::io("reading the volume's metadata", e))?.is_file() {
            self.file.set_len(len).map_err(|e| VolError::io("resizing the volume file", e))?;
            self.len = len;
        }
        Ok(())
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

/// Take the open's lock: exclusive for read-write, shared for read-only.
fn lock(file: &File, path: &Path, mode: OpenMode) -> Result<()> {
    // A lock released a moment ago can still be held by a child another
    // thread of this process is forking: the child shares the open file
    // until its exec closes it. So a busy lock is tried again for a short
    // while before it counts as another open's.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(200);
    loop {
        let got = match mode {
            OpenMode::ReadWrite | OpenMode::ReadWriteKernelClaimed => file.try_lock(),
            OpenMode::ReadOnly => file.try_lock_shared(),
            OpenMode::Snapshot => return Ok(()),
        };
        match got {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(VolError::Busy { path: path.to_path_buf(), holder: lock_holder(file) })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(VolError::io(format!("locking {}", path.display()), e)),
        }
    }
}

/// Who holds a lock on `file`, from /proc/locks: "process PID (NAME)".
/// `None` where the system does not say (or the holder is this process).
fn lock_holder(file: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    let (major, minor) = ((dev >> 8) & 0xfff | ((dev >> 32) & !0xfff), (dev & 0xff) | ((dev >> 12) & !0xff));
    let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid: u32 = locks.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"
        (w.len() >= 6 && w[5] == id).then(|| w[4].parse().ok()).flatten()
    })?;
    if pid == std::process::id() {
        return Some(format!("this process ({pid})"));
    }
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    Some(format!("process {pid} ({})", name.trim()))
}

impl Device for FileDevice {
    fn len(&self) -> u64 {
        self.len
    }

    fn holders(&self) -> Option<&Holders> {
        Some(&self.holders)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        Some(self.file.as_fd())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        if !self.file.metadata()?.is_file() {
            return Ok(false);
        }
        let mode = nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE;
        match nix::fcntl::fallocate(&self.file, mode, offset as i64, len as i64) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::EOPNOTSUPP) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// A volume in memory.
#[derive(Debug, Default)]
pub struct MemDevice {
    bytes: RwLock<Vec<u8>>,
    holders: Holders,
}

impl MemDevice {
    /// `len` zero bytes.
    pub fn new(len: u64) -> MemDevice {
        MemDevice { bytes: RwLock::new(vec![0; len as usize]), holders: Holders::default() }
    }

    /// A device holding `bytes`.
    pub fn from_bytes(bytes: Vec<u8>) -> MemDevice {
        MemDevice { bytes: RwLock::new(bytes), holders: Holders::default() }
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

    fn holders(&self) -> Option<&Holders> {
        Some(&self.holders)
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
