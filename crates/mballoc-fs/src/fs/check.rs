//! The checker: every invariant the engine promises, verified from scratch.

use super::{FileNode, Fs};
use crate::violation::{Counter, Owner, Violation};
use std::sync::Arc;

/// The checker: every invariant the engine promises, verified from scratch.
impl Fs {
    /// Verify, from scratch: no block has two owners among files,
    /// preallocations and pending frees; those owners are exactly the
    /// allocator's used blocks (besides metadata); the space counters add up;
    /// preallocations never cover mapped blocks; and the allocator's own
    /// invariants. Meant for tests and `check`; call it when no other thread
    /// is inside the engine.
    pub fn check(&self) -> std::result::Result<(), Violation> {
        self.alloc.check_consistency()?;
        let flying = self.windows_in_flight();
        if flying != 0 {
            return Err(Violation::WindowsInFlight(flying));
        }
        let total = self.alloc.geometry().total_blocks();
        let mut owned = vec![0u64; total.div_ceil(64) as usize];
        let mut count = 0u64;
        let mut mark = |s: u64, len: u64, owner: Owner| -> std::result::Result<(), Violation> {
            if s.checked_add(len).is_none_or(|e| e > total) {
                return Err(Violation::OutsideVolume { owner, start: s, len });
            }
            for b in s..s + len {
                let (w, bit) = ((b / 64) as usize, b % 64);
                if owned[w] & (1 << bit) != 0 {
                    return Err(Violation::OwnedTwice { block: b, second: owner });
                }
                owned[w] |= 1 << bit;
            }
            count += len;
            Ok(())
        };
        let mut reserved = 0u64;
        let mut dirty = 0u64;
        let mut pa_free = 0u64;
        let nodes: Vec<(u64, Arc<FileNode>)> = self.files.entries();
        for (id, node) in nodes {
            let ino = node.inode.lock();
            for e in ino.map.iter() {
                mark(e.physical, e.len.into(), Owner::Extent { file: id, logical: e.logical })?;
            }
            for b in ino.tree.iter().flat_map(|t| t.blocks()) {
                mark(b >> self.cluster_bits, 1, Owner::TreeBlock { file: id })?;
            }
            for (s, e) in ino.delayed.iter() {
                if !ino.map.overlapping(s, e).is_empty() {
                    return Err(Violation::Mapped { file: id, what: "delayed run", start: s, end: e });
                }
            }
            self.check_ext4_blocks(id, &ino)?;
            reserved += ino.delayed.len();
            dirty += ino.delayed.len() + ino.dirty_unwritten.len();
            for pa in node.pas.lock().iter() {
                for (s, e) in pa.unused.iter() {
                    if !ino.map.overlapping(s, e).is_empty() {
                        return Err(Violation::Mapped { file: id, what: "preallocated logical", start: s, end: e });
                    }
                    mark(pa.physical_of(s), e - s, Owner::Preallocation { file: id })?;
                }
                pa_free += pa.unused.len();
            }
        }
        for lg in &self.lgs {
            for r in lg.lock().iter() {
                mark(r.pstart, r.free.into(), Owner::LocalityGroupRun)?;
                pa_free += u64::from(r.free);
            }
        }
        let mut pending = 0;
        for (s, len) in self.deferred_frees.pending_ranges() {
            mark(s, len, Owner::PendingFree)?;
            pending += len;
        }
        let mut owned_free = None;
        self.alloc.for_each_free_extent(|s, len| {
            if owned_free.is_none() {
                owned_free = (s..s + len).find(|&b| owned[(b / 64) as usize] & (1 << (b % 64)) != 0);
            }
        });
        if let Some(b) = owned_free {
            return Err(Violation::OwnedButFree(b));
        }
        let used = total - self.alloc.free_blocks();
        let backing = self.alloc.free_blocks() + pa_free + pending;
        for (counter, kept, counted) in [
            (Counter::Used, used, count + self.metadata_blocks),
            (Counter::Preallocated, self.preallocated_blocks(), pa_free),
            (Counter::PendingFree, self.pending_free_blocks(), pending),
            (Counter::Reserved, self.space.reserved(), reserved),
            (Counter::Dirty, self.dirty_blocks(), dirty),
            (Counter::Claimable, self.space.claimable() + reserved, backing),
        ] {
            if kept != counted {
                return Err(Violation::Count { counter, kept, counted });
            }
        }
        Ok(())
    }
}
