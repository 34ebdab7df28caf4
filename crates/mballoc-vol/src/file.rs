//! `std::io` handles: a [`File`] opened by path on a mounted [`Volume`]
//! reads, writes and seeks like `std::fs::File`, so it can be handed to
//! anything that takes `Read`, `Write` or `Seek` (a `BufReader`, a
//! compressor, `io::copy`), and adds positional I/O, durability, space
//! management and its extent map.
//!
//! ```
//! use mballoc_vol::{FormatOptions, MemDevice, MountOptions, OpenOptions, Volume};
//! use std::io::{Read, Seek, SeekFrom, Write};
//! use std::sync::Arc;
//!
//! let dev = Arc::new(MemDevice::new(64 << 20));
//! Volume::format(dev.clone(), &FormatOptions::default())?;
//! let vol = Volume::open(dev, MountOptions::default())?;
//! vol.create_dir("/logs")?;
//! let mut f = vol.file("/logs/a", OpenOptions::new().read(true).write(true).create(true))?;
//! f.write_all(b"hello, extents")?;
//! f.sync_all()?;
//! f.seek(SeekFrom::Start(7))?;
//! let mut s = String::new();
//! f.read_to_string(&mut s)?;
//! assert_eq!(s, "extents");
//! assert_eq!(f.extents()?.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A `File` holds its volume; any number may be open at once, from any
//! threads (`File` is `Send` and `Sync`; the volume serializes what
//! touches one file, see ARCHITECTURE.md). Dropping one closes it: an
//! unlinked file goes away at its last close.

use crate::error::{Result, VolError};
use crate::namespace::Owner;
use crate::paths::Last;
use crate::volume::Volume;
use mballoc_fs::{FallocateMode, FileId, MappedExtent};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

/// How [`Volume::file`] opens: the flags of `open(2)`, as
/// `std::fs::OpenOptions` has them.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: Option<u32>,
}

impl OpenOptions {
    /// Nothing allowed yet.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }
    /// Allow reads.
    pub fn read(&mut self, on: bool) -> &mut OpenOptions {
        self.read = on;
        self
    }
    /// Allow writes.
    pub fn write(&mut self, on: bool) -> &mut OpenOptions {
        self.write = on;
        self
    }
    /// Every write goes to the end (implies write).
    pub fn append(&mut self, on: bool) -> &mut OpenOptions {
        self.append = on;
        self
    }
    /// Cut the file to nothing on open (needs write).
    pub fn truncate(&mut self, on: bool) -> &mut OpenOptions {
        self.truncate = on;
        self
    }
    /// Make the file if it does not exist (needs write).
    pub fn create(&mut self, on: bool) -> &mut OpenOptions {
        self.create = on;
        self
    }
    /// Make the file, failing if it exists (needs write).
    pub fn create_new(&mut self, on: bool) -> &mut OpenOptions {
        self.create_new = on;
        self
    }
    /// Permission bits for a file this open makes (0o644 by default).
    pub fn mode(&mut self, mode: u32) -> &mut OpenOptions {
        self.mode = Some(mode);
        self
    }
}

/// An open regular file: a cursor over it, plus positional calls. It
/// holds its volume (an `Arc`), so it can be kept and moved anywhere; a
/// volume unmounted while files are open leaves them failing
/// [`VolError::Unmounted`].
pub struct File {
    vol: Arc<Volume>,
    id: FileId,
    pos: u64,
    readable: bool,
    writable: bool,
    append: bool,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File").field("id", &self.id).field("pos", &self.pos).finish()
    }
}

impl Volume {
    /// Open the regular file at `path` as `opts` say (symbolic links
    /// followed).
    pub fn file(self: &Arc<Self>, path: impl AsRef<Path>, opts: &OpenOptions) -> Result<File> {
        let path = path.as_ref();
        self.open_path(path, opts).map_err(|e| e.at(path))
    }

    fn open_path(self: &Arc<Self>, path: &Path, opts: &OpenOptions) -> Result<File> {
        let writable = opts.write || opts.append;
        if !opts.read && !writable {
            return Err(VolError::InvalidArgument("open for neither reading nor writing".into()));
        }
        if (opts.truncate || opts.create || opts.create_new) && !writable {
            return Err(VolError::InvalidArgument("truncate and create need write access".into()));
        }
        let (parent, name) = self.parent_of(path)?;
        let id = match self.lookup(parent, name) {
            Ok(_) if opts.create_new => {
                return Err(VolError::Exists { dir: parent.0, name: String::from_utf8_lossy(name).into_owned() });
            }
            Ok(_) => {
                let f = self.resolve_as(path, Last::Follow)?;
                let a = self.attr(f)?;
                if a.is_dir() {
                    return Err(VolError::IsADirectory(f.0));
                }
                if !a.is_file() {
                    return Err(VolError::InvalidArgument("not a regular file".into()));
                }
                self.open_file(f)?;
                f
            }
            Err(VolError::NoEntry { .. }) if opts.create || opts.create_new => {
                let owner = Owner { mode: opts.mode.unwrap_or(0o644), ..Owner::default() };
                self.create_at(parent, name, owner)?
            }
            Err(e) => return Err(e),
        };
        let file = File { vol: self.clone(), id, pos: 0, readable: opts.read, writable, append: opts.append };
        if opts.truncate {
            self.truncate(id, 0)?;
        }
        Ok(file)
    }
}

impl File {
    /// The file's inode.
    pub fn id(&self) -> FileId {
        self.id
    }

    /// Its size in bytes.
    pub fn len(&self) -> Result<u64> {
        self.vol.size(self.id)
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    fn can_read(&self) -> Result<()> {
        match self.readable {
            true => Ok(()),
            false => Err(VolError::InvalidArgument("the file was not opened for reading".into())),
        }
    }

    fn can_write(&self) -> Result<()> {
        match self.writable {
            true => Ok(()),
            false => Err(VolError::InvalidArgument("the file was not opened for writing".into())),
        }
    }

    /// Read at `offset` without moving the cursor; short only at the end.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.can_read()?;
        self.vol.read(self.id, offset, buf)
    }

    /// Write all of `buf` at `offset` without moving the cursor; a file
    /// opened to append writes at its end instead (as `pwrite` on an
    /// `O_APPEND` file does on Linux).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.can_write()?;
        if buf.is_empty() {
            return Ok(());
        }
        let offset = if self.append { self.vol.size(self.id)? } else { offset };
        self.vol.write(self.id, offset, buf)
    }

    /// Make the data and metadata durable (`fsync`).
    pub fn sync_all(&self) -> Result<()> {
        self.vol.fsync(self.id)
    }

    /// Make the data durable (`fdatasync`: on this volume the same
    /// commit as [`File::sync_all`]).
    pub fn sync_data(&self) -> Result<()> {
        self.vol.fsync(self.id)
    }

    /// Cut or extend to `size` bytes (extending reads as zeros).
    pub fn set_len(&self, size: u64) -> Result<()> {
        self.can_write()?;
        self.vol.truncate(self.id, size)
    }

    /// Reserve blocks for `[offset, offset + len)` (`fallocate`): with
    /// [`FallocateMode::ExtendSize`] the size grows to cover it.
    pub fn allocate(&self, offset: u64, len: u64, mode: FallocateMode) -> Result<()> {
        self.can_write()?;
        self.vol.fallocate(self.id, offset, len, mode)
    }

    /// Deallocate `[offset, offset + len)`; it reads as zeros after.
    pub fn punch(&self, offset: u64, len: u64) -> Result<()> {
        self.can_write()?;
        self.vol.punch_hole(self.id, offset, len)
    }

    /// Make `[offset, offset + len)` read as zeros, keeping (or
    /// allocating) its blocks (`FALLOC_FL_ZERO_RANGE`): all or nothing.
    pub fn zero_range(&self, offset: u64, len: u64, mode: FallocateMode) -> Result<()> {
        self.can_write()?;
        self.vol.zero_range(self.id, offset, len, mode)
    }

    /// Its [`crate::Metadata`] (`fstat`).
    pub fn metadata(&self) -> Result<crate::Metadata> {
        self.vol.metadata_of(self.id)
    }

    /// Where its blocks are: the extent map as FIEMAP would give it.
    pub fn extents(&self) -> Result<Vec<MappedExtent>> {
        self.vol.extents(self.id)
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.append {
            self.pos = self.len()?;
        }
        self.write_at(buf, self.pos)?;
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }

    /// Nothing to do: writes reach the volume's cache at once, and
    /// durability is [`File::sync_all`]'s.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let base = match to {
            SeekFrom::Start(n) => {
                self.pos = n;
                return Ok(n);
            }
            SeekFrom::End(d) => (self.len()?, d),
            SeekFrom::Current(d) => (self.pos, d),
        };
        match base.0.checked_add_signed(base.1) {
            Some(p) => {
                self.pos = p;
                Ok(p)
            }
            None => Err(io::Error::new(io::ErrorKind::InvalidInput, "seek before the start of the file")),
        }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        // A close that fails (the device failed while removing an orphan)
        // leaves the orphan for the next mount, as a crash would.
        let _ = self.vol.close(self.id);
    }
}
