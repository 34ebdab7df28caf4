//! The in-process engine's name table, so that a workload's `rename`,
//! `link`, `unlink`, `open` and `close` act as the kernel's do on the same
//! workload. A slot is both a path and a descriptor, as in the kernel
//! backends: it may name a file, hold it open, or both. A file goes when
//! its last name and its last handle have; a rename moves the name and
//! leaves the handle where it was (a descriptor outlives a rename), and
//! closes a handle the target slot held on the file it replaced; a name
//! made by `link` or `rename` must be opened before it is used.

use super::OpError;
use mballoc_fs::FileId;
use mballoc_fs::IdMap;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default, Clone, Copy, PartialEq, Eq)]
struct Slot {
    /// The file (0: none).
    id: u64,
    /// Whether the slot's path names it.
    named: bool,
    /// Whether the slot holds it open.
    open: bool,
}

impl Slot {
    fn pack(self) -> u64 {
        self.id << 2 | u64::from(self.named) << 1 | u64::from(self.open)
    }
    fn unpack(v: u64) -> Slot {
        Slot { id: v >> 2, named: v & 2 != 0, open: v & 1 != 0 }
    }
}

/// Slots (one word each, read without a lock on every data operation) and
/// link counts. Every change takes the one lock, so a rename changes two
/// slots and a count together; readers see each slot whole.
pub(crate) struct Slots {
    state: Vec<AtomicU64>,
    counts: Mutex<Counts>,
}

/// Names and open handles per file.
#[derive(Default)]
struct Counts {
    links: IdMap<u32>,
    handles: IdMap<u32>,
}

/// What the file layer must do after a change, in order: close these
/// handles, then remove these files (their last name and handle went).
#[derive(Default, Debug, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub(crate) close: Vec<FileId>,
    pub(crate) unlink: Vec<FileId>,
}

/// The table under its lock.
struct Locked<'a> {
    state: &'a [AtomicU64],
    c: parking_lot::MutexGuard<'a, Counts>,
}

impl Locked<'_> {
    fn get(&self, i: u32) -> Result<Slot, OpError> {
        self.state
            .get(i as usize)
            .map(|a| Slot::unpack(a.load(Ordering::Acquire)))
            .ok_or_else(|| OpError::Failed(format!("no file slot {i}")))
    }

    fn named(&self, i: u32) -> Result<Slot, OpError> {
        match self.get(i)? {
            s if s.named => Ok(s),
            _ => Err(OpError::Failed(format!("file slot {i} names no file"))),
        }
    }

    /// Set slot `i`, keeping the handle counts in step.
    fn set(&mut self, i: u32, s: Slot) {
        let old = Slot::unpack(self.state[i as usize].swap(s.pack(), Ordering::AcqRel));
        if old.open {
            let n = self.c.handles.get_mut(&old.id).expect("an open slot is counted");
            *n -= 1;
            if *n == 0 {
                self.c.handles.remove(&old.id);
            }
        }
        if s.open {
            *self.c.handles.entry(s.id).or_default() += 1;
        }
    }

    /// What is left to do for `id` now that a name or handle went.
    fn settle(&self, id: u64, closed: bool, out: &mut Dropped) {
        if closed {
            out.close.push(FileId(id));
        }
        if !self.c.links.contains_key(&id) && !self.c.handles.contains_key(&id) {
            out.unlink.push(FileId(id));
        }
    }

    fn drop_name(&mut self, id: u64) {
        let n = self.c.links.get_mut(&id).expect("a named file has a link count");
        *n -= 1;
        if *n == 0 {
            self.c.links.remove(&id);
        }
    }
}

impl Slots {
    pub(crate) fn new(n: usize) -> Slots {
        Slots { state: (0..n).map(|_| AtomicU64::new(0)).collect(), counts: Mutex::new(Counts::default()) }
    }

    fn lock(&self) -> Locked<'_> {
        Locked { state: &self.state, c: self.counts.lock() }
    }

    fn read(&self, slot: u32) -> Slot {
        self.state.get(slot as usize).map_or(Slot::default(), |a| Slot::unpack(a.load(Ordering::Acquire)))
    }

    /// The file `slot` holds open (no lock: every data operation asks).
    pub(crate) fn open_id(&self, slot: u32) -> Result<FileId, OpError> {
        match self.read(slot) {
            s if s.id != 0 && s.open => Ok(FileId(s.id)),
            _ => Err(OpError::Failed(format!("file slot {slot} is not open"))),
        }
    }

    /// The file `slot`'s path names.
    pub(crate) fn named(&self, slot: u32) -> Option<FileId> {
        Some(self.read(slot)).filter(|s| s.named).map(|s| FileId(s.id))
    }

    /// `slot` names new file `id` and holds it open; a file it held open
    /// before is closed (and goes if nothing else holds it).
    pub(crate) fn created(&self, slot: u32, id: u64) -> Result<Dropped, OpError> {
        let mut t = self.lock();
        let old = t.get(slot)?;
        t.set(slot, Slot { id, named: true, open: true });
        t.c.links.insert(id, 1);
        let mut out = Dropped::default();
        if old.id != 0 && old.open {
            t.settle(old.id, true, &mut out);
        }
        Ok(out)
    }

    /// Open `slot`'s file by its name; false if the slot held it open
    /// already (nothing to do).
    pub(crate) fn open(&self, slot: u32) -> Result<bool, OpError> {
        let mut t = self.lock();
        let s = t.named(slot)?;
        t.set(slot, Slot { open: true, ..s });
        Ok(!s.open)
    }

    /// Close `slot`'s handle.
    pub(crate) fn close(&self, slot: u32) -> Result<Dropped, OpError> {
        let mut t = self.lock();
        let s = t.get(slot)?;
        if s.id == 0 || !s.open {
            return Err(OpError::Failed(format!("file slot {slot} is not open")));
        }
        t.set(slot, if s.named { Slot { open: false, ..s } } else { Slot::default() });
        let mut out = Dropped::default();
        t.settle(s.id, true, &mut out);
        Ok(out)
    }

    /// Remove `slot`'s name (its handle, if open, stays).
    pub(crate) fn unlink(&self, slot: u32) -> Result<Dropped, OpError> {
        let mut t = self.lock();
        let s = t.named(slot)?;
        t.set(slot, if s.open { Slot { named: false, ..s } } else { Slot::default() });
        t.drop_name(s.id);
        let mut out = Dropped::default();
        t.settle(s.id, false, &mut out);
        Ok(out)
    }

    /// `rename(from, to)` (see the module's doc).
    pub(crate) fn rename(&self, from: u32, to: u32) -> Result<Dropped, OpError> {
        let mut t = self.lock();
        let src = t.named(from)?;
        let old = t.get(to)?;
        if from == to || (old.named && old.id == src.id) {
            return Ok(Dropped::default());
        }
        t.set(from, if src.open { Slot { named: false, ..src } } else { Slot::default() });
        t.set(to, Slot { id: src.id, named: true, open: false });
        let mut out = Dropped::default();
        if old.id != 0 {
            if old.named {
                t.drop_name(old.id);
            }
            t.settle(old.id, old.open, &mut out);
        }
        Ok(out)
    }

    /// `link(from, to)`: `to` names `from`'s file too (not open there).
    pub(crate) fn link(&self, from: u32, to: u32) -> Result<(), OpError> {
        let mut t = self.lock();
        let id = t.named(from)?.id;
        if t.get(to)?.id != 0 {
            return Err(OpError::Failed(format!("file slot {to} is taken (link(2) would fail with EEXIST)")));
        }
        t.set(to, Slot { id, named: true, open: false });
        *t.c.links.get_mut(&id).expect("counted") += 1;
        Ok(())
    }

    /// Each named file once, with the first slot that names it.
    pub(crate) fn files(&self) -> Vec<(usize, FileId)> {
        let _t = self.lock();
        let mut seen = std::collections::HashSet::new();
        (0..self.state.len())
            .map(|i| (i, self.read(i as u32)))
            .filter(|(_, s)| s.named && seen.insert(s.id))
            .map(|(i, s)| (i, FileId(s.id)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(close: &[u64], unlink: &[u64]) -> Dropped {
        Dropped {
            close: close.iter().map(|&i| FileId(i)).collect(),
            unlink: unlink.iter().map(|&i| FileId(i)).collect(),
        }
    }

    #[test]
    fn a_file_goes_with_its_last_name_and_handle() {
        let s = Slots::new(3);
        s.created(0, 7).unwrap();
        s.link(0, 1).unwrap();
        assert!(s.link(0, 1).is_err(), "the name exists");
        assert!(s.open_id(1).is_err(), "a new name is not open");
        // The name goes, the handle stays, the other name keeps the file.
        assert_eq!(s.unlink(0).unwrap(), d(&[], &[]));
        assert_eq!(s.open_id(0).unwrap(), FileId(7));
        assert_eq!(s.unlink(1).unwrap(), d(&[], &[]));
        // Open but nameless: it goes at the close.
        assert_eq!(s.close(0).unwrap(), d(&[7], &[7]));
        assert!(s.files().is_empty());
    }

    #[test]
    fn rename_moves_the_name_and_leaves_the_handle() {
        let s = Slots::new(3);
        s.created(0, 7).unwrap();
        s.created(1, 8).unwrap();
        // 8 loses its only name and its handle in slot 1: it goes.
        assert_eq!(s.rename(0, 1).unwrap(), d(&[8], &[8]));
        assert_eq!(s.named(1), Some(FileId(7)));
        assert_eq!(s.open_id(0).unwrap(), FileId(7), "the descriptor outlives the rename");
        assert!(s.open_id(1).is_err());
        assert!(s.rename(0, 2).is_err(), "slot 0 names nothing now");
        assert_eq!(s.close(0).unwrap(), d(&[7], &[]));
        assert_eq!(s.files(), [(1, FileId(7))]);
        assert!(s.open(1).unwrap());
        assert!(!s.open(1).unwrap());
    }
}
