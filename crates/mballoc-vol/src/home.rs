//! The home areas: reading them (with the journal replayed on top) into a
//! [`State`], and writing a [`State`] back in a checkpoint.
//!
//! A checkpoint never overwrites what the current home state needs until
//! the new version is durable: extent-tree nodes are written to blocks the
//! old trees do not use, flushed, and only then do inode records (each in
//! one sector, so whole or not at all) point at them. Bitmaps and
//! descriptors follow; the superblock, last, resets the journal. A crash
//! anywhere before that leaves the journal intact, and replay (idempotent)
//! brings every file to its committed state again.

use crate::device::Device;
use crate::error::{Result, VolError};
use crate::format::{
    Extent, Superblock, VolumeState, DESC_BYTES, INODE_BYTES, MAX_ENTRY_LEN, MAX_LOGICAL, ROOT_ENTRIES,
};
use crate::records::{bitmap_crc, check_order, Entry, GroupDesc, InodeRecord, Node};
use crate::state::{Apply, FileState, State};
use crate::wal;
use std::collections::BTreeSet;

/// How reading treats damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// The first problem is an error (mounting).
    Strict,
    /// Problems are listed and the damaged part left out (checking,
    /// repairing).
    Salvage,
}

/// What a checkpoint rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Changed,
    Everything,
}

/// The on-disk side of a volume, as the committing thread sees it.
#[derive(Debug, Clone)]
pub struct Home {
    pub sb: Superblock,
    pub state: State,
    /// Tree-area blocks in use by the trees on disk (bit per block).
    zone: Vec<u64>,
    zone_cursor: u64,
    /// Inode slot -> inode number.
    slots: Vec<Option<u64>>,
    free_slots: BTreeSet<u32>,
    /// Next journal block and sequence number to write.
    pub head: u64,
    pub next_seq: u64,
}

/// What reading the home areas found.
#[derive(Debug)]
pub struct Scan {
    pub home: Home,
    /// Damage found (empty when everything checked out).
    pub problems: Vec<String>,
    /// Journal transactions replayed.
    pub replayed: usize,
    /// Groups whose stored bitmap or descriptor differs from the files.
    pub stale_groups: Vec<u32>,
    /// Whether the superblock's counters differ from the files.
    pub stale_counters: bool,
}

fn read(dev: &dyn Device, sb: &Superblock, block: u64, n: u64) -> Result<Vec<u8>> {
    let mut b = vec![0u8; (n * u64::from(sb.block_size)) as usize];
    dev.read_at(sb.offset(block), &mut b).map_err(|e| VolError::io(format!("reading block {block}"), e))?;
    Ok(b)
}

fn write(dev: &dyn Device, sb: &Superblock, block: u64, b: &[u8]) -> Result<()> {
    dev.write_at(sb.offset(block), b).map_err(|e| VolError::io(format!("writing block {block}"), e))
}

fn flush(dev: &dyn Device) -> Result<()> {
    dev.flush().map_err(|e| VolError::io("flushing", e))
}

impl Home {
    /// A freshly formatted volume.
    pub fn empty(sb: Superblock) -> Home {
        let state = State::new(sb.total_blocks, sb.blocks_per_group, sb.data_start);
        let zone = vec![0; (sb.tree_blocks as usize).div_ceil(64)];
        Home {
            slots: vec![None; sb.inode_count as usize],
            free_slots: (0..sb.inode_count).collect(),
            head: 0,
            next_seq: sb.log_seq,
            zone,
            zone_cursor: 0,
            state,
            sb,
        }
    }

    /// Read superblock-described home areas and replay the journal.
    pub fn read(dev: &dyn Device, sb: Superblock, mode: ReadMode) -> Result<Scan> {
        let mut problems = Vec::new();
        let mut note = |e: VolError| -> Result<()> {
            match mode {
                ReadMode::Strict => Err(e),
                ReadMode::Salvage => {
                    problems.push(e.to_string());
                    Ok(())
                }
            }
        };
        let mut home = Home::empty(sb.clone());
        home.state.dirty_groups.clear();
        let seed = sb.seed();
        let bs = sb.block_size as usize;
        // Descriptors and bitmaps as stored.
        let descs_raw = read(dev, &sb, sb.desc_start, sb.desc_blocks())?;
        let mut descs = vec![None; sb.groups as usize];
        for (g, d) in descs.iter_mut().enumerate() {
            let at = g * DESC_BYTES;
            let block = sb.desc_start + (at / bs) as u64;
            match GroupDesc::decode(seed, g as u32, &descs_raw[at..at + DESC_BYTES], block) {
                Ok(x) => *d = Some(x),
                Err(e) => note(e)?,
            }
        }
        let bitmaps_raw = read(dev, &sb, sb.bitmap_start, u64::from(sb.groups))?;
        // The journal first: with transactions to replay, the home files
        // may come from a checkpoint cut short.
        let found = match wal::scan(dev, &sb) {
            Ok(found) => found,
            Err(e) => {
                note(e)?;
                Vec::new()
            }
        };
        let how = if found.is_empty() { Apply::Live } else { Apply::Replay };
        // Inodes and their trees.
        let itable = read(dev, &sb, sb.itable_start, sb.itable_blocks())?;
        for slot in 0..sb.inode_count {
            let at = slot as usize * INODE_BYTES;
            let block = sb.itable_start + (at / bs) as u64;
            let rec = match InodeRecord::decode(seed, slot, &itable[at..at + INODE_BYTES], block) {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(e) => {
                    note(e)?;
                    continue;
                }
            };
            let loaded = home.read_tree(dev, &rec).and_then(|(extents, tree)| {
                let f = FileState {
                    size: rec.size,
                    extents: extents.iter().map(|e| (e.logical, (e.physical, e.len, e.unwritten))).collect(),
                    slot: Some(slot),
                    tree: tree.clone(),
                };
                home.state.load_file(rec.ino, f, how).map_err(|d| VolError::corrupt("inode", block, d))?;
                Ok(tree)
            });
            match loaded {
                Ok(tree) => {
                    tree.iter().for_each(|&b| home.zone_set(b, true));
                    home.slots[slot as usize] = Some(rec.ino);
                    home.free_slots.remove(&slot);
                }
                Err(e) => note(e)?,
            }
        }
        // The journal's transactions, replayed over the home files.
        let mut replayed = 0;
        for tx in found {
            let block = sb.log_start + tx.at;
            // A change that cannot apply changes nothing; salvaging keeps
            // what came before it.
            let applied = tx.changes.iter().try_for_each(|c| home.state.replay(c));
            if let Err(d) = applied {
                note(VolError::corrupt("journal transaction", block, format!("sequence {}: {d}", tx.seq)))?;
                break;
            }
            home.head = tx.at + tx.blocks;
            home.next_seq = tx.seq + 1;
            replayed += 1;
        }
        // What is stored against what the files say.
        let mut stale_groups = Vec::new();
        for g in 0..sb.groups {
            let want = home.bitmap_block(g);
            let stored = &bitmaps_raw[g as usize * bs..(g as usize + 1) * bs];
            let desc_ok = descs[g as usize]
                .is_some_and(|d| d.bitmap_crc == bitmap_crc(seed, g, stored) && d == home.desc(g, &want));
            if stored != want.as_slice() || !desc_ok {
                stale_groups.push(g);
            }
        }
        let stale_counters = sb.free_blocks != home.state.free || sb.files != home.state.files.len() as u64;
        if replayed == 0 && mode == ReadMode::Strict {
            if let Some(&g) = stale_groups.first() {
                return Err(VolError::corrupt(
                    "block bitmap",
                    sb.bitmap_start + u64::from(g),
                    format!("group {g}'s bitmap or descriptor disagrees with the files' extents"),
                ));
            }
            if stale_counters {
                return Err(VolError::corrupt("superblock", 0, "free block or file count disagrees with the files"));
            }
        }
        home.state.dirty_groups.extend(stale_groups.iter().copied());
        Ok(Scan { home, problems, replayed, stale_groups, stale_counters })
    }

    /// A file's extents and tree blocks, every node checked.
    fn read_tree(&self, dev: &dyn Device, rec: &InodeRecord) -> Result<(Vec<Extent>, Vec<u64>)> {
        let sb = &self.sb;
        let mut extents = Vec::new();
        let mut tree = Vec::new();
        let mut seen = std::collections::HashSet::new();
        check_order(&rec.root, 0, MAX_LOGICAL + 1, 0)?;
        // (entries, depth, logical bounds) still to visit.
        let mut stack = vec![(rec.root.clone(), rec.depth)];
        while let Some((entries, depth)) = stack.pop() {
            for (i, e) in entries.iter().enumerate() {
                match *e {
                    Entry::Leaf(x) => extents.push(x),
                    Entry::Index { logical, child } => {
                        if depth == 0 {
                            return Err(VolError::corrupt("extent tree", child, "index entry in a leaf"));
                        }
                        let in_area = child >= sb.tree_start && child < sb.tree_start + u64::from(sb.tree_blocks);
                        if !in_area || self.zone_get(child) || !seen.insert(child) {
                            return Err(VolError::corrupt(
                                "extent tree",
                                child,
                                format!("inode {}: node outside the tree area or reached twice", rec.ino),
                            ));
                        }
                        tree.push(child);
                        let hi = match entries.get(i + 1) {
                            Some(Entry::Index { logical, .. }) => *logical,
                            _ => MAX_LOGICAL + 1,
                        };
                        let b = read(dev, sb, child, 1)?;
                        let node = Node::decode(sb.seed(), child, &b, depth - 1, rec.ino as u32)?;
                        check_order(&node.entries, logical, hi, child)?;
                        if first_logical(&node.entries) != logical {
                            return Err(VolError::corrupt("extent tree", child, "first entry differs from its index"));
                        }
                        stack.push((node.entries, depth - 1));
                    }
                }
            }
        }
        extents.sort_unstable_by_key(|e| e.logical);
        for w in extents.windows(2) {
            if w[0].logical_end() > w[1].logical {
                return Err(VolError::corrupt("extent tree", 0, format!("inode {}: extents overlap", rec.ino)));
            }
        }
        Ok((extents, tree))
    }

    fn zone_get(&self, block: u64) -> bool {
        let i = block - self.sb.tree_start;
        self.zone[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn zone_set(&mut self, block: u64, used: bool) {
        let i = block - self.sb.tree_start;
        let w = &mut self.zone[(i / 64) as usize];
        if used {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }

    fn zone_free(&self) -> u64 {
        u64::from(self.sb.tree_blocks) - self.zone.iter().map(|w| u64::from(w.count_ones())).sum::<u64>()
    }

    fn zone_alloc(&mut self) -> u64 {
        let n = u64::from(self.sb.tree_blocks);
        for k in 0..n {
            let b = self.sb.tree_start + (self.zone_cursor + k) % n;
            if !self.zone_get(b) {
                self.zone_set(b, true);
                self.zone_cursor = (b - self.sb.tree_start + 1) % n;
                return b;
            }
        }
        unreachable!("tree area space was counted before allocating")
    }

    /// Group `g`'s bitmap block as the state has it.
    fn bitmap_block(&self, g: u32) -> Vec<u8> {
        let bs = self.sb.block_size as usize;
        let mut b = vec![0u8; bs];
        for (i, w) in self.state.bitmaps[g as usize].iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    fn desc(&self, g: u32, bitmap: &[u8]) -> GroupDesc {
        let geo = self.sb.geometry();
        let used: u32 = self.state.bitmaps[g as usize].iter().map(|w| w.count_ones()).sum();
        GroupDesc { free: geo.group_len(g) - used, bitmap_crc: bitmap_crc(self.sb.seed(), g, bitmap) }
    }

    /// Entries of a file's extents as stored: pieces no longer than an
    /// entry holds.
    fn leaf_entries(f: &FileState) -> Vec<Entry> {
        let mut out = Vec::new();
        for mut e in f.extent_list() {
            while e.len > 0 {
                let n = e.len.min(MAX_ENTRY_LEN);
                out.push(Entry::Leaf(Extent { len: n, ..e }));
                e.logical += n;
                e.physical += n;
                e.len -= n;
            }
        }
        out
    }

    /// Tree nodes a file needs beyond its inode.
    fn nodes_needed(&self, entries: usize) -> u64 {
        let per = self.sb.node_entries();
        let (mut n, mut level) = (0u64, entries);
        while level > ROOT_ENTRIES {
            level = level.div_ceil(per);
            n += level as u64;
        }
        n
    }

    /// Write the state home and reset the journal. `state` is what the
    /// superblock will say (`Clean` only at unmount).
    pub fn checkpoint(&mut self, dev: &dyn Device, state: VolumeState) -> Result<()> {
        self.checkpoint_scope(dev, state, Scope::Changed)
    }

    /// A checkpoint that rewrites every inode block, bitmap and descriptor
    /// (repair), or only what changed.
    pub fn checkpoint_scope(&mut self, dev: &dyn Device, state: VolumeState, scope: Scope) -> Result<()> {
        if scope == Scope::Everything {
            self.state.dirty_groups.extend(0..self.sb.groups);
        }
        let sb = self.sb.clone();
        let (seed, bs) = (sb.seed(), sb.block_size as usize);
        let dirty: Vec<u64> = std::mem::take(&mut self.state.dirty_files).into_iter().collect();
        let live: Vec<u64> = dirty.iter().copied().filter(|i| self.state.files.contains_key(i)).collect();
        let mut plans = Vec::with_capacity(live.len());
        let mut needed = 0;
        for &ino in &live {
            let entries = Home::leaf_entries(&self.state.files[&ino]);
            needed += self.nodes_needed(entries.len());
            plans.push((ino, entries));
        }
        let new_slots = live.iter().filter(|i| self.state.files[i].slot.is_none()).count();
        let dropped = std::mem::take(&mut self.state.dropped);
        if needed > self.zone_free() || new_slots > self.free_slots.len() + dropped.len() {
            self.state.dirty_files.extend(dirty);
            self.state.dropped = dropped;
            if needed > self.zone_free() {
                return Err(VolError::MetadataFull { needed, free: self.zone_free() });
            }
            return Err(VolError::NoInodes(sb.inode_count));
        }
        // 1. New trees, in blocks no tree on disk uses.
        let mut old_trees: Vec<u64> = Vec::new();
        let mut dirty_itable: BTreeSet<usize> = match scope {
            Scope::Everything => (0..self.sb.itable_blocks() as usize).collect(),
            Scope::Changed => BTreeSet::new(),
        };
        let per_inode_block = sb.inodes_per_block() as usize;
        let mut records = Vec::new();
        for (ino, entries) in plans {
            let (depth, root, blocks) = self.write_tree(dev, ino, entries)?;
            let f = self.state.files.get_mut(&ino).expect("live file");
            old_trees.append(&mut std::mem::replace(&mut f.tree, blocks));
            records.push((ino, InodeRecord { ino, size: f.size, depth, root }));
        }
        flush(dev)?;
        // 2. Inode records: freed slots are zeroed, new files take slots.
        for (slot, mut tree) in dropped {
            old_trees.append(&mut tree);
            self.slots[slot as usize] = None;
            self.free_slots.insert(slot);
            dirty_itable.insert(slot as usize / per_inode_block);
        }
        let mut images: std::collections::HashMap<u32, InodeRecord> = Default::default();
        for (ino, rec) in records {
            let f = self.state.files.get_mut(&ino).expect("live file");
            let slot = match f.slot {
                Some(s) => s,
                None => {
                    let s = self.free_slots.pop_first().expect("slots were counted");
                    f.slot = Some(s);
                    self.slots[s as usize] = Some(ino);
                    s
                }
            };
            dirty_itable.insert(slot as usize / per_inode_block);
            images.insert(slot, rec);
        }
        for blk in dirty_itable {
            let mut b = vec![0u8; bs];
            for i in 0..per_inode_block {
                let slot = (blk * per_inode_block + i) as u32;
                if slot >= sb.inode_count {
                    break;
                }
                let out = &mut b[i * INODE_BYTES..(i + 1) * INODE_BYTES];
                if let Some(rec) = images.get(&slot) {
                    rec.encode(seed, slot, out);
                } else if let Some(ino) = self.slots[slot as usize] {
                    self.record_of(ino).encode(seed, slot, out);
                }
            }
            write(dev, &sb, sb.itable_start + blk as u64, &b)?;
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
        self.sb.log_seq = self.next_seq;
        self.sb.checkpoints += 1;
        self.sb.free_blocks = self.state.free;
        self.sb.files = self.state.files.len() as u64;
        self.sb.state = state;
        write(dev, &sb, 0, &self.sb.encode())?;
        flush(dev)?;
        self.head = 0;
        for b in old_trees {
            self.zone_set(b, false);
        }
        Ok(())
    }

    /// The record of a file whose tree is already on disk.
    fn record_of(&self, ino: u64) -> InodeRecord {
        let f = &self.state.files[&ino];
        let entries = Home::leaf_entries(f);
        let (depth, root) = self.root_for(&entries, &f.tree);
        InodeRecord { ino, size: f.size, depth, root }
    }

    /// Rebuild the root of a tree whose node blocks are `tree`, in the
    /// order `write_tree` allocated them.
    fn root_for(&self, leaves: &[Entry], tree: &[u64]) -> (u16, Vec<Entry>) {
        let per = self.sb.node_entries();
        let mut level: Vec<Entry> = leaves.to_vec();
        let mut depth = 0;
        let mut blocks = tree.iter();
        while level.len() > ROOT_ENTRIES {
            level = level
                .chunks(per)
                .map(|c| Entry::Index { logical: first_logical(c), child: *blocks.next().expect("tree block") })
                .collect();
            depth += 1;
        }
        (depth, level)
    }

    /// Write a file's nodes to fresh blocks; returns its depth, root and
    /// node blocks.
    fn write_tree(&mut self, dev: &dyn Device, ino: u64, leaves: Vec<Entry>) -> Result<(u16, Vec<Entry>, Vec<u64>)> {
        let per = self.sb.node_entries();
        let (seed, bs) = (self.sb.seed(), self.sb.block_size as usize);
        let mut level = leaves;
        let mut depth = 0u16;
        let mut blocks = Vec::new();
        while level.len() > ROOT_ENTRIES {
            let mut next = Vec::new();
            for chunk in level.chunks(per) {
                let b = self.zone_alloc();
                let node = Node { depth, owner: ino as u32, entries: chunk.to_vec() };
                write(dev, &self.sb, b, &node.encode(seed, b, bs))?;
                blocks.push(b);
                next.push(Entry::Index { logical: first_logical(chunk), child: b });
            }
            level = next;
            depth += 1;
        }
        Ok((depth, level, blocks))
    }
}

fn first_logical(c: &[Entry]) -> u64 {
    match c[0] {
        Entry::Leaf(e) => e.logical,
        Entry::Index { logical, .. } => logical,
    }
}
