//! Where a read's bytes go. [`Volume::read`] fills a buffer. A front end
//! that can move the device's pages by reference (a FUSE server splicing
//! its reply, splice(2)) takes a read through [`Volume::read_to`] as
//! pieces instead: the bytes the device holds as ranges of the device, and
//! only what is not on the device as it reads (a cached folio's bytes,
//! zeros) as bytes. One read path serves both, under the file's cache
//! lock, so neither sees a write half done.

use crate::device::Device;
use crate::error::{Result, VolError};
use crate::volume::Volume;
use mballoc_fs::{ExtentState, FileId};
use std::io;
use std::sync::atomic::Ordering;

/// Takes a read's bytes in order (see the module).
pub trait ReadSink {
    /// The read returns `len` bytes; said once, before any piece.
    fn start(&mut self, len: usize) -> io::Result<()>;
    /// The next `len` bytes are `dev`'s at byte `offset`.
    fn device(&mut self, dev: &dyn Device, offset: u64, len: usize) -> io::Result<()>;
    /// The next bytes are `b`.
    fn bytes(&mut self, b: &[u8]) -> io::Result<()>;
    /// The next `n` bytes are zeros.
    fn zeros(&mut self, mut n: usize) -> io::Result<()> {
        static ZEROS: [u8; 4096] = [0; 4096];
        while n > 0 {
            let k = n.min(ZEROS.len());
            self.bytes(&ZEROS[..k])?;
            n -= k;
        }
        Ok(())
    }
}

/// A plain read's sink: the caller's buffer.
struct BufSink<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl BufSink<'_> {
    fn next(&mut self, n: usize) -> &mut [u8] {
        let r = self.at..self.at + n;
        self.at += n;
        &mut self.buf[r]
    }
}

impl ReadSink for BufSink<'_> {
    fn start(&mut self, len: usize) -> io::Result<()> {
        assert!(len <= self.buf.len(), "a read of {len} bytes into {}", self.buf.len());
        Ok(())
    }

    fn device(&mut self, dev: &dyn Device, offset: u64, len: usize) -> io::Result<()> {
        dev.read_at(offset, self.next(len))
    }

    fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.next(b.len()).copy_from_slice(b);
        Ok(())
    }

    fn zeros(&mut self, n: usize) -> io::Result<()> {
        // The buffer may hold anything (a reused one): every byte is set.
        self.next(n).fill(0);
        Ok(())
    }
}

impl Volume {
    /// Read up to `buf.len()` bytes at `offset`; fewer at the end of the
    /// file. Cached (possibly dirty) folios are read from memory, the rest
    /// from the device; holes and unwritten extents read as zeros.
    pub fn read(&self, f: FileId, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let len = buf.len();
        self.read_to(f, offset, len, &mut BufSink { buf, at: 0 })
    }

    /// [`Volume::read`] of up to `len` bytes, its bytes given to `sink` in
    /// order: what the device holds as device ranges, the rest as bytes.
    /// Returns the bytes read. A sink's error is returned as the read's.
    pub fn read_to(&self, f: FileId, offset: u64, len: usize, sink: &mut dyn ReadSink) -> Result<usize> {
        let cache = self.cache_of(f);
        let mut fc = cache.lock();
        let size = self.fs.size(f)?;
        let len = if offset >= size { 0 } else { len.min((size - offset) as usize) };
        sink.start(len).map_err(|e| VolError::io("starting a read's reply".to_string(), e))?;
        let fsz = u64::from(self.opts.folio_size);
        let mut at = 0;
        while at < len {
            let pos = offset + at as u64;
            let in_folio = (pos % fsz) as usize;
            let n = (fsz as usize - in_folio).min(len - at);
            match fc.folios.get(&(pos / fsz)) {
                Some(folio) => {
                    // What the folio keeps of the range; past it, zeros.
                    let kept = folio.kept() as usize;
                    let (a, b) = (in_folio.min(kept), (in_folio + n).min(kept));
                    let passed = |e| VolError::io(format!("passing on cached bytes at {pos}"), e);
                    sink.bytes(folio.slice(a..b)).map_err(passed)?;
                    sink.zeros(n - (b - a)).map_err(passed)?;
                }
                // Nothing cached means nothing dirty: the device's bytes,
                // with no folio to fill and copy (a kernel above keeps its
                // own page cache).
                None => self.read_uncached(f, pos, n, sink)?,
            }
            at += n;
        }
        if self.cached.load(Ordering::Acquire) > self.opts.cache_bytes {
            let dropped = fc.drop_clean();
            self.cached.fetch_sub(dropped, Ordering::AcqRel);
        }
        Ok(len)
    }

    /// `n` bytes at `pos` as the device holds them: written extents read,
    /// everything else (holes, unwritten extents) zero.
    fn read_uncached(&self, f: FileId, pos: u64, n: usize, sink: &mut dyn ReadSink) -> Result<()> {
        let bs = self.block_size();
        let end = pos + n as u64;
        let mut filled = pos;
        for e in self.fs.lookup(f, pos / bs, end.div_ceil(bs))? {
            if e.state != ExtentState::Written {
                continue;
            }
            let a = (e.logical * bs).max(pos);
            let b = (e.logical_end() * bs).min(end);
            if a >= b {
                continue;
            }
            debug_assert!(a >= filled, "extents come in order and do not overlap");
            let dev_at = e.physical_of(a / bs) * bs + a % bs;
            let failed = |e| VolError::io(format!("reading block {}", dev_at / bs), e);
            sink.zeros((a - filled) as usize).map_err(failed)?;
            sink.device(&*self.dev, dev_at, (b - a) as usize).map_err(failed)?;
            filled = b;
        }
        let failed = |e| VolError::io(format!("reading at {filled}"), e);
        sink.zeros((end - filled) as usize).map_err(failed)
    }
}
