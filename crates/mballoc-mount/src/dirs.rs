//! Directory listings that stay stable while the directory changes.
//!
//! `opendir` takes a snapshot of the entries (with `.` and `..`); each
//! `readdir` serves from it, and a cookie is a position in it. Every entry
//! present for the whole listing is returned exactly once however many
//! creates and unlinks happen meanwhile (what `find -delete`, `rm -r` and
//! Python's `shutil.rmtree` rely on), and a listing always ends. A rewind
//! (offset 0 again) takes a new snapshot, so `rewinddir` sees the
//! directory as it is then, as POSIX asks. Memory: one listing per open
//! directory handle, freed at `releasedir`.

use crate::fuse::abi::{Out, DIRENT};
use crate::server::{errno, Done, VolumeFs};
use mballoc_fs::FileId;
use mballoc_vol::{VolError, S_IFDIR};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One entry of a listing.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub ino: u64,
    /// Type bits (`S_IFDIR`, ...).
    pub kind: u32,
    pub name: Vec<u8>,
}

/// Open directory handles and their listings.
#[derive(Default)]
pub(crate) struct Listings {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Vec<Entry>>>>,
}

impl Listings {
    /// A new handle holding `entries`.
    pub fn open(&self, entries: Vec<Entry>) -> u64 {
        // Handles start at 1: 0 is what a kernel without opendir sends.
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.open.lock().insert(fh, Arc::new(entries));
        fh
    }

    /// The listing of `fh`, taken anew by `fresh` at offset 0 (a rewind)
    /// or when the handle is unknown.
    pub fn get<E>(
        &self,
        fh: u64,
        offset: u64,
        fresh: impl FnOnce() -> Result<Vec<Entry>, E>,
    ) -> Result<Arc<Vec<Entry>>, E> {
        if offset > 0 {
            if let Some(l) = self.open.lock().get(&fh) {
                return Ok(l.clone());
            }
        }
        let l = Arc::new(fresh()?);
        if fh != 0 {
            self.open.lock().insert(fh, l.clone());
        }
        Ok(l)
    }

    /// Forget a handle.
    pub fn release(&self, fh: u64) {
        self.open.lock().remove(&fh);
    }

    /// Handles open now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.open.lock().len()
    }
}

/// `struct fuse_dirent` for `e`, whose cookie (the offset of the entry
/// after it) is `next`; false if it does not fit in `room` bytes.
fn put_dirent(out: &mut Out, e: &Entry, next: u64, room: usize) -> bool {
    let len = (DIRENT + e.name.len()).next_multiple_of(8);
    if out.bytes.len() + len > room {
        return false;
    }
    out.u64(e.ino).u64(next).u32(e.name.len() as u32).u32(e.kind >> 12).raw(&e.name).align8();
    true
}

impl VolumeFs {
    fn listing(&self, dir: u64) -> Result<Vec<Entry>, VolError> {
        let entries = self.vol.dir_entries(FileId(dir))?;
        let parent = self.vol.attr(FileId(dir))?.parent().unwrap_or(dir);
        let mut out = Vec::with_capacity(entries.len() + 2);
        out.push(Entry { ino: dir, kind: S_IFDIR, name: b".".to_vec() });
        out.push(Entry { ino: parent, kind: S_IFDIR, name: b"..".to_vec() });
        out.extend(entries.into_iter().map(|e| Entry { ino: e.ino.0, kind: e.kind, name: e.name }));
        Ok(out)
    }

    /// Open a directory: its listing is taken, and the directory is held
    /// open, so removing it meanwhile leaves it readable (empty, with a
    /// link count of 0) until `releasedir`, as on ext4.
    pub(crate) fn opendir(&self, dir: u64, out: &mut Out) -> Done {
        let l = self.listing(dir).map_err(|e| errno(&e))?;
        if dir != self.vol.root().0 {
            self.vol.open_file(FileId(dir)).map_err(|e| errno(&e))?;
        }
        out.u64(self.listings.open(l)).u32(0).u32(0);
        Ok(())
    }

    pub(crate) fn releasedir(&self, dir: u64, fh: u64) -> Done {
        self.listings.release(fh);
        if dir != self.vol.root().0 {
            return self.release(dir);
        }
        Ok(())
    }

    pub(crate) fn readdir(&self, dir: u64, fh: u64, offset: u64, size: u32, _plus: bool, out: &mut Out) -> Done {
        let listing = self.listings.get(fh, offset, || self.listing(dir)).map_err(|e| errno(&e))?;
        // A cookie is the position after an entry in the handle's listing.
        for (i, e) in listing.iter().enumerate().skip(offset as usize) {
            if !put_dirent(out, e, i as u64 + 1, size as usize) {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str) -> Entry {
        Entry { ino: 1, kind: mballoc_vol::S_IFREG, name: name.as_bytes().to_vec() }
    }

    #[test]
    fn a_listing_stays_until_rewound_or_released() {
        let l = Listings::default();
        let fh = l.open(vec![e("a"), e("b")]);
        let fresh = || Ok::<_, ()>(vec![e("x")]);
        assert_eq!(l.get(fh, 1, fresh).unwrap().len(), 2, "served from the snapshot");
        assert_eq!(l.get(fh, 0, fresh).unwrap().len(), 1, "a rewind takes a new one");
        l.release(fh);
        assert_eq!(l.len(), 0);
    }

    #[test]
    fn records_are_padded_and_stop_at_the_buffer() {
        let mut o = Out::default();
        assert!(put_dirent(&mut o, &e("abc"), 1, 4096));
        assert_eq!(o.bytes.len(), 32);
        assert!(!put_dirent(&mut o, &e("abc"), 2, 40));
        assert_eq!(o.bytes.len(), 32);
    }
}
