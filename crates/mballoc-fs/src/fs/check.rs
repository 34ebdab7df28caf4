//! The checker: every invariant the engine promises, verified from scratch.

use super::{FileNode, Fs};
use std::sync::Arc;

/// The checker: every invariant the engine promises, verified from scratch.
impl Fs {
    /// Verify, from scratch: no block has two owners among files,
    /// preallocations and pending frees; those owners are exactly the
    /// allocator's used blocks (besides metadata); the space counters add up;
    /// preallocations never cover mapped blocks; and the allocator's own
    /// invariants. Meant for tests and `check`; call it when no other thread
    /// is inside the engine.
    pub fn check(&self) -> std::result::Result<(), String> {
        self.alloc.check_consistency()?;
        let flying = self.windows_in_flight();
        if flying != 0 {
            return Err(format!("{flying} preallocation windows in flight with no thread inside the engine"));
        }
        let total = self.alloc.geometry().total_blocks();
        let mut owned = vec![0u64; total.div_ceil(64) as usize];
        let mut count = 0u64;
        let mut mark = |s: u64, len: u64, what: &str| -> std::result::Result<(), String> {
            if s.checked_add(len).is_none_or(|e| e > total) {
                return Err(format!("{what} [{s}, +{len}) outside the volume"));
            }
            for b in s..s + len {
                let (w, bit) = ((b / 64) as usize, b % 64);
                if owned[w] & (1 << bit) != 0 {
                    return Err(format!("block {b} owned twice (second owner: {what})"));
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
                mark(e.physical, e.len.into(), &format!("inode {id} extent at logical {}", e.logical))?;
            }
            for b in ino.tree.iter().flat_map(|t| t.blocks()) {
                mark(b >> self.cluster_bits, 1, &format!("inode {id} extent-tree block"))?;
            }
            for (s, e) in ino.delayed.iter() {
                if !ino.map.overlapping(s, e).is_empty() {
                    return Err(format!("inode {id}: delayed run [{s}, {e}) is mapped"));
                }
            }
            self.check_ext4_blocks(id, &ino)?;
            reserved += ino.delayed.len();
            dirty += ino.delayed.len() + ino.dirty_unwritten.len();
            for pa in node.pas.lock().iter() {
                for (s, e) in pa.unused.iter() {
                    if !ino.map.overlapping(s, e).is_empty() {
                        return Err(format!("inode {id}: preallocated logical [{s}, {e}) is mapped"));
                    }
                    mark(pa.physical_of(s), e - s, &format!("inode {id} preallocation"))?;
                }
                pa_free += pa.unused.len();
            }
        }
        for lg in &self.lgs {
            for r in lg.lock().iter() {
                mark(r.pstart, r.free.into(), "locality-group run")?;
                pa_free += u64::from(r.free);
            }
        }
        let mut pending = 0;
        for (s, len) in self.deferred_frees.pending_ranges() {
            mark(s, len, "pending free")?;
            pending += len;
        }
        let mut owned_free = None;
        self.alloc.for_each_free_extent(|s, len| {
            if owned_free.is_none() {
                owned_free = (s..s + len).find(|&b| owned[(b / 64) as usize] & (1 << (b % 64)) != 0);
            }
        });
        if let Some(b) = owned_free {
            return Err(format!("block {b} has an owner but is free in the allocator"));
        }
        let used = total - self.alloc.free_blocks();
        if count + self.metadata_blocks != used {
            return Err(format!("owned {count} + metadata {} != allocator used {used}", self.metadata_blocks));
        }
        if pa_free != self.preallocated_blocks() {
            return Err(format!("preallocated counter {} != {pa_free}", self.preallocated_blocks()));
        }
        if pending != self.pending_free_blocks() {
            return Err(format!("pending counter {} != {pending}", self.pending_free_blocks()));
        }
        if reserved != self.space.reserved() {
            return Err(format!("reserved counter {} != delayed blocks {reserved}", self.space.reserved()));
        }
        if dirty != self.dirty_blocks() {
            return Err(format!("dirty counter {} != {dirty}", self.dirty_blocks()));
        }
        let backing = self.alloc.free_blocks() + pa_free + pending;
        if self.space.claimable() + reserved != backing {
            return Err(format!(
                "claimable {} + reserved {reserved} != free {} + preallocated {pa_free} + pending {pending}",
                self.space.claimable(),
                self.alloc.free_blocks()
            ));
        }
        Ok(())
    }
}
