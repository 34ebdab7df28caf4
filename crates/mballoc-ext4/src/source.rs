//! Where the bytes come from. The reader asks for byte ranges through one
//! small trait, so an image file, a buffer in memory and (later) a block
//! device or a writable volume all fit behind it.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A random-access, read-only byte source.
pub trait BlockSource {
    /// Length in bytes.
    fn len(&self) -> u64;

    /// Whether the source holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fill `buf` from byte `offset`. Reading past the end is an error
    /// (`UnexpectedEof`); the reader checks ranges before asking.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
}

/// An image in a file (or a block device opened as one).
#[derive(Debug)]
pub struct FileSource {
    file: File,
    len: u64,
    /// Where the file system starts in the file (a partition's offset).
    offset: u64,
}

impl FileSource {
    /// Open `path` read-only.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::open_at(path, 0)
    }

    /// Open `path` read-only, the file system starting `offset` bytes in
    /// (a partitioned image: e2fsprogs' `IMAGE?offset=N`).
    pub fn open_at(path: impl AsRef<Path>, offset: u64) -> io::Result<Self> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        let whole = if meta.file_type().is_file() { meta.len() } else { device_len(&file)? };
        if offset > whole {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("offset {offset} is past the end of the {whole}-byte file"),
            ));
        }
        Ok(FileSource { file, len: whole - offset, offset })
    }
}

/// A block device reports length 0 in its metadata; its end is found by
/// seeking there.
fn device_len(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::End(0))
}

impl BlockSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, self.offset + offset)
    }
}

/// An image held in memory (tests, fuzzing, images built on the fly).
#[derive(Debug, Clone)]
pub struct MemSource(pub Vec<u8>);

impl BlockSource for MemSource {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start.checked_add(buf.len()).ok_or(io::ErrorKind::UnexpectedEof)?;
        let src = self.0.get(start..end).ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

impl<S: BlockSource + ?Sized> BlockSource for &S {
    fn len(&self) -> u64 {
        (**self).len()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
}
