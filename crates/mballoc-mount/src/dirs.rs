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

use fuser::FileType;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One entry of a listing.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub ino: u64,
    pub kind: FileType,
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
    pub fn get(&self, fh: u64, offset: u64, fresh: impl FnOnce() -> Vec<Entry>) -> Arc<Vec<Entry>> {
        if offset > 0 {
            if let Some(l) = self.open.lock().get(&fh) {
                return l.clone();
            }
        }
        let l = Arc::new(fresh());
        if fh != 0 {
            self.open.lock().insert(fh, l.clone());
        }
        l
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

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str) -> Entry {
        Entry { ino: 1, kind: FileType::RegularFile, name: name.as_bytes().to_vec() }
    }

    #[test]
    fn a_listing_stays_until_rewound_or_released() {
        let l = Listings::default();
        let fh = l.open(vec![e("a"), e("b")]);
        assert_eq!(l.get(fh, 1, || vec![e("x")]).len(), 2, "served from the snapshot");
        assert_eq!(l.get(fh, 0, || vec![e("x")]).len(), 1, "a rewind takes a new one");
        l.release(fh);
        assert_eq!(l.len(), 0);
    }
}
