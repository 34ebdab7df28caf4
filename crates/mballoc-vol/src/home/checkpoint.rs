//! Checkpoints: the committed state written home, copy-on-write, in
//! batches that fit the tree area, then the superblock that restarts the
//! journal.

use super::{flush, write, Home, Scope};
use crate::device::Device;
use crate::error::{Result, VolError};
use crate::format::{VolumeState, DESC_BYTES, INODE_BYTES};
use crate::records::{Entry, InodeRecord};
use std::collections::BTreeSet;

impl Home {
    /// Write the state home and reset the journal. `state` is what the
    /// superblock will say (`Clean` only at unmount).
    pub fn checkpoint(&mut self, dev: &dyn Device, state: VolumeState) -> Result<()> {
        self.checkpoint_scope(dev, state, Scope::Changed)
    }

    /// A checkpoint that rewrites every inode block, bitmap and descriptor
    /// (repair), or only what changed.
    ///
    /// Files' new trees are written in batches that fit the tree area's
    /// free blocks, files whose trees shrink first: each batch's inodes
    /// are made durable before its old trees are reused, so a crash at any
    /// point leaves every inode pointing at a tree that is whole, and the
    /// journal, replayed again, brings every file to the committed state.
    /// It succeeds whenever the tree area holds, for every file, the larger
    /// of its old and new trees plus the largest of those once more
    /// ([`Home::admit`]).
    pub fn checkpoint_scope(&mut self, dev: &dyn Device, state: VolumeState, scope: Scope) -> Result<()> {
        if scope == Scope::Everything {
            self.state.dirty_groups.extend(0..self.sb.groups);
        }
        let sb = self.sb.clone();
        let (seed, bs) = (sb.seed(), sb.block_size as usize);
        let dirty: Vec<u64> = std::mem::take(&mut self.state.dirty_files).into_iter().collect();
        let live: Vec<u64> = dirty.iter().copied().filter(|i| self.state.files.contains_key(i)).collect();
        let new_slots = live.iter().filter(|i| self.state.files[i].slot.is_none()).count();
        let dropped = std::mem::take(&mut self.state.dropped);
        if new_slots as u64 > self.free_slots.len() + dropped.len() as u64 {
            self.state.dirty_files.extend(dirty);
            self.state.dropped = dropped;
            return Err(VolError::NoInodes(sb.inode_count));
        }
        let mut plans: Vec<(u64, Vec<Entry>, u64)> = live
            .iter()
            .map(|&ino| {
                let f = &self.state.files[&ino];
                let entries = Home::leaf_entries(f);
                let nodes = self.nodes_needed(entries.len()) + self.attr_blocks(f);
                (ino, entries, nodes)
            })
            .collect();
        plans.sort_by_key(|(ino, _, nodes)| *nodes as i64 - self.state.files[ino].tree.len() as i64);
        let per_inode_block = sb.inodes_per_block() as usize;
        let mut all_itable: BTreeSet<usize> = match scope {
            Scope::Everything => (0..sb.itable_blocks() as usize).collect(),
            Scope::Changed => BTreeSet::new(),
        };
        // Dropped files go with the first batch: their slots are zeroed
        // and their trees freed with it.
        let mut freed_now: Vec<u64> = Vec::new();
        let mut itable: BTreeSet<usize> = BTreeSet::new();
        for (slot, mut tree) in dropped {
            freed_now.append(&mut tree);
            self.slots.remove(&slot);
            self.records.remove(&slot);
            self.free_slots.give_back(slot);
            itable.insert(slot as usize / per_inode_block);
        }
        let mut rest = plans.into_iter().peekable();
        loop {
            // 1. A batch of new trees, in blocks no tree on disk uses.
            let mut room = self.zone_free();
            let mut batch = Vec::new();
            while let Some((_, _, nodes)) = rest.peek() {
                if *nodes > room {
                    break;
                }
                room -= *nodes;
                batch.push(rest.next().expect("peeked"));
            }
            if batch.is_empty() && rest.peek().is_some() {
                let needed = rest.peek().map_or(0, |p| p.2);
                self.state.dirty_files.extend(rest.map(|p| p.0));
                return Err(VolError::MetadataFull { needed, free: self.zone_free() });
            }
            let mut old_trees = std::mem::take(&mut freed_now);
            for (ino, entries, _) in batch {
                let (depth, root, mut blocks) = self.write_tree(dev, ino, entries)?;
                let attr = self.state.files[&ino].attr.clone();
                let (overflow, mut chain) = match &attr {
                    Some(a) => self.write_overflow(dev, ino, a)?,
                    None => (0, Vec::new()),
                };
                blocks.append(&mut chain);
                let f = self.state.files.get_mut(&ino).expect("live file");
                old_trees.append(&mut std::mem::replace(&mut f.tree, blocks));
                let slot = match f.slot {
                    Some(s) => s,
                    None => {
                        let s = self.free_slots.pop().expect("slots were counted");
                        f.slot = Some(s);
                        self.slots.insert(s, ino);
                        s
                    }
                };
                self.records.insert(slot, InodeRecord { ino, size: f.size, depth, root, attr, overflow });
                itable.insert(slot as usize / per_inode_block);
            }
            flush(dev)?;
            // 2. Their inode records (and, with them, every other record
            // of the same blocks as the table holds it).
            let last = rest.peek().is_none();
            if last {
                itable.append(&mut all_itable);
            }
            for blk in std::mem::take(&mut itable) {
                let mut b = vec![0u8; bs];
                for i in 0..per_inode_block {
                    let slot = (blk * per_inode_block + i) as u32;
                    if slot >= sb.inode_count {
                        break;
                    }
                    if let Some(rec) = self.records.get(&slot) {
                        rec.encode(seed, slot, &mut b[i * INODE_BYTES..(i + 1) * INODE_BYTES]);
                    }
                }
                write(dev, &sb, sb.itable_start + blk as u64, &b)?;
            }
            if last {
                freed_now = old_trees;
                break;
            }
            // The batch's inodes are durable: its old trees can be reused.
            flush(dev)?;
            old_trees.into_iter().for_each(|b| self.zone_set(b, false));
        }
        // 3. Bitmaps and descriptors of the groups that changed.
        let groups: Vec<u32> = std::mem::take(&mut self.state.dirty_groups).into_iter().collect();
        let mut desc_blocks = BTreeSet::new();
        for &g in &groups {
            write(dev, &sb, sb.bitmap_start + u64::from(g), &self.bitmap_block(g))?;
            desc_blocks.insert(g as usize * DESC_BYTES / bs);
        }
        for blk in desc_blocks {
            let mut b = vec![0u8; bs];
            let per = bs / DESC_BYTES;
            for i in 0..per {
                let g = (blk * per + i) as u32;
                if g >= sb.groups {
                    break;
                }
                let d = self.desc(g, &self.bitmap_block(g));
                d.encode(seed, g, &mut b[i * DESC_BYTES..(i + 1) * DESC_BYTES]);
            }
            write(dev, &sb, sb.desc_start + blk as u64, &b)?;
        }
        flush(dev)?;
        // 4. The superblock: the journal starts over.
        self.next_seq = self.next_seq.max(self.seq_floor);
        self.sb.log_seq = self.next_seq;
        self.sb.checkpoints += 1;
        self.sb.free_blocks = self.state.free;
        self.sb.files = self.state.files.len() as u64;
        self.sb.state = state;
        write(dev, &sb, 0, &self.sb.encode())?;
        flush(dev)?;
        self.head = 0;
        for b in freed_now {
            self.zone_set(b, false);
        }
        self.refresh_budget(dirty);
        Ok(())
    }
}
