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
    Extent, Superblock, VolumeState, DESC_BYTES, INODE_BYTES, MAX_ENTRY_LEN, MAX_LOGICAL, ROOT_ENTRIES, ROOT_INO,
};
use crate::records::{bitmap_crc, check_order, Entry, GroupDesc, InodeRecord, Node, Overflow};
use crate::state::{Apply, FileState, State};
use crate::wal;
use mballoc_fs::Change;
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
    /// Inode slots in use -> inode number.
    slots: std::collections::HashMap<u32, u64>,
    /// Each slot's record as the inode table holds it: what a checkpoint
    /// writes again for a file it is not rewriting yet.
    records: std::collections::HashMap<u32, InodeRecord>,
    /// Slots free for new files.
    free_slots: SlotPool,
    /// What the worst checkpoint needs of the tree area.
    budget: TreeBudget,
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
    /// Why writing a repair would destroy something not proven bad (empty
    /// when a repair is safe).
    pub unrepairable: Vec<String>,
    /// Journal transactions replayed.
    pub replayed: usize,
    /// Groups whose stored bitmap or descriptor differs from the files.
    pub stale_groups: Vec<u32>,
    /// Whether the superblock's counters differ from the files.
    pub stale_counters: bool,
    /// The directory tree of the named inodes (empty if it failed its
    /// checks, which are then among the problems).
    pub tree: crate::names::Tree,
}

/// The tree area's budget: for every file, the larger of its tree on disk
/// and the tree its committed extents need. A checkpoint writes each new
/// tree while the old one still stands, one batch at a time, so it always
/// succeeds while the sum of these plus the largest of them once more fits
/// the tree area; commits and writes that would break that are refused.
#[derive(Debug, Clone, Default)]
struct TreeBudget {
    need: mballoc_fs::IdMap<u64>,
    sum: u64,
    counts: std::collections::BTreeMap<u64, u32>,
}

impl TreeBudget {
    fn set(&mut self, ino: u64, need: Option<u64>) {
        if let Some(old) = self.need.remove(&ino) {
            self.sum -= old;
            let c = self.counts.get_mut(&old).expect("counted");
            *c -= 1;
            if *c == 0 {
                self.counts.remove(&old);
            }
        }
        if let Some(n) = need {
            self.need.insert(ino, n);
            self.sum += n;
            *self.counts.entry(n).or_default() += 1;
        }
    }

    /// Blocks the worst checkpoint from here needs.
    fn total(&self) -> u64 {
        self.sum + self.counts.keys().next_back().copied().unwrap_or(0)
    }

    /// [`TreeBudget::total`] as it would be with `trial`'s needs set,
    /// leaving the budget as it was.
    fn total_with(&mut self, trial: &[(u64, Option<u64>)]) -> u64 {
        let old: Vec<(u64, Option<u64>)> = trial.iter().map(|&(ino, _)| (ino, self.need.get(&ino).copied())).collect();
        for &(ino, need) in trial {
            self.set(ino, need);
        }
        let total = self.total();
        for &(ino, need) in old.iter().rev() {
            self.set(ino, need);
        }
        total
    }
}

/// Why a file's tree could not be read.
enum TreeError {
    /// It fails its own checks: proven bad.
    Damaged(VolError),
    /// It passes them but contradicts the superblock or another file.
    Suspect(VolError),
    /// The device failed to read it: nothing is proven either way.
    Device(VolError),
}

/// Free inode slots, lowest first: the slots past a watermark are all
/// free; below it, the ones freed since. Memory follows the slots in use,
/// not the slot count the superblock claims.
#[derive(Debug, Clone)]
struct SlotPool {
    count: u32,
    watermark: u32,
    freed: BTreeSet<u32>,
}

impl SlotPool {
    fn new(count: u32) -> SlotPool {
        SlotPool { count, watermark: 0, freed: BTreeSet::new() }
    }

    fn len(&self) -> u64 {
        u64::from(self.count - self.watermark) + self.freed.len() as u64
    }

    /// Mark `slot` in use (a file read from it).
    fn take(&mut self, slot: u32) {
        if slot >= self.watermark {
            self.freed.extend(self.watermark..slot);
            self.watermark = slot + 1;
        } else {
            self.freed.remove(&slot);
        }
    }

    /// The lowest free slot, now in use.
    fn pop(&mut self) -> Option<u32> {
        if let Some(s) = self.freed.pop_first() {
            return Some(s);
        }
        (self.watermark < self.count).then(|| {
            self.watermark += 1;
            self.watermark - 1
        })
    }

    fn give_back(&mut self, slot: u32) {
        self.freed.insert(slot);
    }
}

/// Inode-table blocks read at a time: memory stays bounded whatever the
/// superblock claims.
const ITABLE_CHUNK: u64 = 256;

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
    /// A freshly formatted volume: the root directory, made at `now`.
    pub fn formatted(sb: Superblock, now: i64) -> Home {
        let mut home = Home::empty(sb);
        let root = FileState { attr: Some(crate::names::Attr::root(now)), ..FileState::default() };
        home.state.files.insert(ROOT_INO, root);
        home.state.dirty_files.insert(ROOT_INO);
        home
    }

    /// No files at all: where reading a volume starts.
    pub fn empty(sb: Superblock) -> Home {
        let state = State::new(sb.total_blocks, sb.blocks_per_group, sb.data_start);
        let zone = vec![0; (sb.tree_blocks as usize).div_ceil(64)];
        Home {
            slots: std::collections::HashMap::new(),
            records: std::collections::HashMap::new(),
            free_slots: SlotPool::new(sb.inode_count),
            budget: TreeBudget::default(),
            head: 0,
            next_seq: sb.log_seq,
            zone,
            zone_cursor: 0,
            state,
            sb,
        }
    }

    /// Read superblock-described home areas and replay the journal.
    ///
    /// Strict (mounting): the first problem is an error. Salvage
    /// (checking): every problem is listed, damaged inodes and trees left
    /// out, and whatever would make a repair destroy something not proven
    /// bad is listed as unrepairable: descriptors that fail their
    /// checksums (the superblock may be wrong), trees that are valid but
    /// lie outside the tree area, two valid inodes claiming one block, and
    /// a journal damaged before transactions that are intact.
    pub fn read(dev: &dyn Device, sb: Superblock, mode: ReadMode) -> Result<Scan> {
        let mut problems = Vec::new();
        let mut unrepairable = Vec::new();
        let mut note = |e: VolError, refuse: bool| -> Result<()> {
            match mode {
                ReadMode::Strict => Err(e),
                ReadMode::Salvage => {
                    if refuse {
                        unrepairable.push(e.to_string());
                    }
                    problems.push(e.to_string());
                    Ok(())
                }
            }
        };
        let mut home = Home::empty(sb.clone());
        home.state.dirty_groups.clear();
        let seed = sb.seed();
        let bs = sb.block_size as usize;
        // Descriptors and bitmaps as stored. A descriptor that fails its
        // checksum means a bad block, or a superblock that does not belong
        // to these structures: a repair could not tell which.
        let descs_raw = read(dev, &sb, sb.desc_start, sb.desc_blocks())?;
        let mut descs = vec![None; sb.groups as usize];
        for (g, d) in descs.iter_mut().enumerate() {
            let at = g * DESC_BYTES;
            let block = sb.desc_start + (at / bs) as u64;
            match GroupDesc::decode(seed, g as u32, &descs_raw[at..at + DESC_BYTES], block) {
                Ok(x) => *d = Some(x),
                Err(e) => note(e, false)?,
            }
        }
        if descs.iter().all(Option::is_none) {
            // Not one descriptor matches: more likely the superblock (its
            // seed or layout) than every descriptor at once.
            note(
                VolError::corrupt("group descriptors", sb.desc_start, "none passes its checksum under this superblock"),
                true,
            )?;
        }
        let bitmaps_raw = read(dev, &sb, sb.bitmap_start, u64::from(sb.groups))?;
        // The journal first: with transactions to replay, the home files
        // may come from a checkpoint cut short.
        let journal = wal::scan(dev, &sb)?;
        let how = if journal.found.is_empty() { Apply::Live } else { Apply::Replay };
        // Inodes and their trees, a bounded piece of the table at a time.
        let mut damaged_inodes = 0;
        let mut valid_inodes = 0u64;
        let per_block = u64::from(sb.inodes_per_block());
        let table_blocks = sb.itable_blocks();
        let mut first = 0;
        while first < table_blocks {
            let n = ITABLE_CHUNK.min(table_blocks - first);
            let chunk = read(dev, &sb, sb.itable_start + first, n)?;
            for i in 0..(n * per_block) as usize {
                let slot = (first * per_block) as usize + i;
                if slot >= sb.inode_count as usize {
                    break;
                }
                let slot = slot as u32;
                let at = i * INODE_BYTES;
                let block = sb.itable_start + first + (at / bs) as u64;
                let (mut rec, head) = match InodeRecord::decode(seed, slot, &chunk[at..at + INODE_BYTES], block) {
                    Ok(Some(r)) => r,
                    Ok(None) => continue,
                    Err(e) => {
                        damaged_inodes += 1;
                        note(e, false)?;
                        continue;
                    }
                };
                valid_inodes += 1;
                if rec.size > sb.max_file_size() {
                    note(
                        VolError::corrupt("inode", block, format!("size {} passes the largest file", rec.size)),
                        true,
                    )?;
                    continue;
                }
                let tree = match home.read_tree(dev, &rec) {
                    Ok(t) => t,
                    Err(TreeError::Damaged(e)) => {
                        damaged_inodes += 1;
                        note(e, false)?;
                        continue;
                    }
                    Err(TreeError::Suspect(e)) => {
                        note(e, true)?;
                        continue;
                    }
                    Err(TreeError::Device(e)) => return Err(e),
                };
                let (extents, mut nodes) = tree;
                if let Some(head) = &head {
                    match home.read_overflow(dev, &rec, head, &nodes) {
                        Ok((a, blocks)) => {
                            rec.attr = Some(a);
                            nodes.extend(blocks);
                        }
                        Err(TreeError::Damaged(e)) => {
                            damaged_inodes += 1;
                            note(e, false)?;
                            continue;
                        }
                        Err(TreeError::Suspect(e)) => {
                            note(e, true)?;
                            continue;
                        }
                        Err(TreeError::Device(e)) => return Err(e),
                    }
                }
                let f = FileState {
                    size: rec.size,
                    extents: extents.iter().map(|e| (e.logical, (e.physical, e.len, e.unwritten))).collect(),
                    slot: Some(slot),
                    tree: nodes.clone(),
                    attr: rec.attr.clone(),
                };
                match home.state.load_file(rec.ino, f, how) {
                    Ok(()) => {
                        nodes.iter().for_each(|&b| home.zone_set(b, true));
                        home.slots.insert(slot, rec.ino);
                        home.records.insert(slot, rec);
                        home.free_slots.take(slot);
                    }
                    // Valid records that contradict each other: which is
                    // right cannot be proven.
                    Err(d) => note(VolError::corrupt("inode", block, d), true)?,
                }
            }
            first += n;
        }
        if valid_inodes == 0 && damaged_inodes > 0 && sb.files > 0 {
            note(
                VolError::corrupt(
                    "inode table",
                    sb.itable_start,
                    "no inode record passes its checksum under this superblock",
                ),
                true,
            )?;
        }
        // The journal's transactions, replayed over the home files, each
        // whole or not at all.
        let mut replayed = 0;
        let before = (mode == ReadMode::Salvage && !journal.found.is_empty()).then(|| home.state.clone());
        let total = journal.found.len();
        for (k, tx) in journal.found.iter().enumerate() {
            let block = sb.log_start + tx.at;
            let applied = tx.changes.iter().try_for_each(|c| home.state.replay_record(c, sb.max_file_size()));
            // Only the end of the journal must fit the inode slots: while
            // a checkpoint cut short leaves the home state ahead, files it
            // already holds are made again by the transactions before it.
            let files = home.state.files.len();
            let applied = applied.and_then(|()| match k + 1 == total && files > sb.inode_count as usize {
                true => Err(format!("replay ends with {files} files for {} inode slots", sb.inode_count)),
                false => Ok(()),
            });
            if let Err(d) = applied {
                // A transaction that passes its checksums but cannot apply
                // is proven bad; the ones before it stand. Intact ones
                // after it would be lost: no repair then.
                let e = VolError::corrupt("journal transaction", block, format!("sequence {}: {d}", tx.seq));
                note(e, k + 1 < total || journal.damage.is_some())?;
                if let Some(state) = &before {
                    home.state = state.clone();
                    for t in &journal.found[..k] {
                        t.changes
                            .iter()
                            .try_for_each(|c| home.state.replay_record(c, sb.max_file_size()))
                            .expect("a transaction that applied once applies again");
                    }
                }
                break;
            }
            home.head = tx.at + tx.blocks;
            home.next_seq = tx.seq + 1;
            replayed += 1;
        }
        if let Some(d) = &journal.damage {
            note(VolError::corrupt("journal", d.block, d.detail.clone()), d.followed)?;
        }
        // The names: one tree from the root. Valid inodes that name each
        // other wrongly cannot be put right without guessing.
        let named = home.state.files.iter().filter_map(|(&i, f)| f.attr.clone().map(|a| (i, a))).collect();
        let tree = match crate::names::Tree::build(named) {
            Ok(t) => t,
            Err(found) => {
                for p in found {
                    note(VolError::corrupt("directory tree", sb.itable_start, p), true)?;
                }
                crate::names::Tree::default()
            }
        };
        // What is stored against what the files say.
        let mut stale_groups = Vec::new();
        let mut unowned = 0u64;
        for g in 0..sb.groups {
            let want = home.bitmap_block(g);
            let stored = &bitmaps_raw[g as usize * bs..(g as usize + 1) * bs];
            let stored_valid = descs[g as usize].is_some_and(|d| d.bitmap_crc == bitmap_crc(seed, g, stored));
            let desc_ok = stored_valid && descs[g as usize].is_some_and(|d| d == home.desc(g, &want));
            if stored != want.as_slice() || !desc_ok {
                stale_groups.push(g);
                // Blocks a valid bitmap says are in use that no file owns:
                // freeing them needs a damaged inode to blame.
                if stored_valid {
                    unowned += stored.iter().zip(&want).map(|(s, w)| u64::from((s & !w).count_ones())).sum::<u64>();
                }
            }
        }
        if unowned > 0 && damaged_inodes == 0 && replayed == 0 && mode == ReadMode::Salvage {
            unrepairable.push(format!(
                "{unowned} blocks are in use in the bitmaps but owned by no file, and no damaged inode explains them"
            ));
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
        let inos: Vec<u64> = home.state.files.keys().copied().collect();
        home.refresh_budget(inos);
        Ok(Scan { home, problems, unrepairable, replayed, stale_groups, stale_counters, tree })
    }

    /// A file's extents and tree blocks, every node checked. A node that
    /// fails its checks makes the inode damaged; a node that passes them
    /// but lies outside the tree area, or that another file's tree holds,
    /// makes it suspect: the superblock or the other file may be the
    /// wrong one.
    fn read_tree(
        &self,
        dev: &dyn Device,
        rec: &InodeRecord,
    ) -> std::result::Result<(Vec<Extent>, Vec<u64>), TreeError> {
        let sb = &self.sb;
        let mut extents = Vec::new();
        let mut tree = Vec::new();
        let mut seen = std::collections::HashSet::new();
        check_order(&rec.root, 0, MAX_LOGICAL + 1, 0).map_err(TreeError::Damaged)?;
        // (entries, depth, logical bounds) still to visit.
        let mut stack = vec![(rec.root.clone(), rec.depth)];
        while let Some((entries, depth)) = stack.pop() {
            for (i, e) in entries.iter().enumerate() {
                match *e {
                    Entry::Leaf(x) => extents.push(x),
                    Entry::Index { logical, child } => {
                        let damaged = |d: String| TreeError::Damaged(VolError::corrupt("extent tree", child, d));
                        if depth == 0 {
                            return Err(damaged("index entry in a leaf".into()));
                        }
                        if !seen.insert(child) {
                            return Err(damaged(format!("inode {}: node reached twice", rec.ino)));
                        }
                        if child >= sb.total_blocks {
                            return Err(damaged(format!("inode {}: node past the volume", rec.ino)));
                        }
                        let b = read(dev, sb, child, 1).map_err(TreeError::Device)?;
                        let node = Node::decode(sb.seed(), child, &b, depth - 1, rec.ino as u32)
                            .map_err(TreeError::Damaged)?;
                        let in_area = child >= sb.tree_start && child < sb.tree_start + u64::from(sb.tree_blocks);
                        if !in_area || self.zone_get(child) {
                            return Err(TreeError::Suspect(VolError::corrupt(
                                "extent tree",
                                child,
                                format!(
                                    "inode {}: a valid node {}",
                                    rec.ino,
                                    if in_area { "another file's tree holds too" } else { "outside the tree area" }
                                ),
                            )));
                        }
                        tree.push(child);
                        let hi = match entries.get(i + 1) {
                            Some(Entry::Index { logical, .. }) => *logical,
                            _ => MAX_LOGICAL + 1,
                        };
                        check_order(&node.entries, logical, hi, child).map_err(TreeError::Damaged)?;
                        if first_logical(&node.entries) != logical {
                            return Err(damaged("first entry differs from its index".into()));
                        }
                        stack.push((node.entries, depth - 1));
                    }
                }
            }
        }
        extents.sort_unstable_by_key(|e| e.logical);
        for w in extents.windows(2) {
            if w[0].logical_end() > w[1].logical {
                return Err(TreeError::Damaged(VolError::corrupt(
                    "extent tree",
                    0,
                    format!("inode {}: extents overlap", rec.ino),
                )));
            }
        }
        Ok((extents, tree))
    }

    /// The rest of a long attribute string from its overflow chain, every
    /// block checked as tree nodes are: a block that fails its own checks
    /// makes the inode damaged; a valid one outside the tree area, or held
    /// by another file or by this file's tree, makes it suspect.
    fn read_overflow(
        &self,
        dev: &dyn Device,
        rec: &InodeRecord,
        head: &crate::records::AttrHead,
        tree: &[u64],
    ) -> std::result::Result<(crate::attr::Attr, Vec<u64>), TreeError> {
        let sb = &self.sb;
        let want = sb.overflow_blocks(head.len);
        let (mut rest, mut blocks) = (Vec::new(), Vec::new());
        let mut at = rec.overflow;
        while at != 0 {
            let damaged = |d: String| TreeError::Damaged(VolError::corrupt("attribute block", at, d));
            if blocks.len() as u64 == want || at >= sb.total_blocks || blocks.contains(&at) {
                return Err(damaged(format!("inode {}: the chain does not end after {want} blocks", rec.ino)));
            }
            let b = read(dev, sb, at, 1).map_err(TreeError::Device)?;
            let ov = Overflow::decode(sb.seed(), at, &b, rec.ino as u32).map_err(TreeError::Damaged)?;
            let in_area = at >= sb.tree_start && at < sb.tree_start + u64::from(sb.tree_blocks);
            if !in_area || self.zone_get(at) || tree.contains(&at) {
                return Err(TreeError::Suspect(VolError::corrupt(
                    "attribute block",
                    at,
                    format!(
                        "inode {}: a valid block {}",
                        rec.ino,
                        if in_area { "another file holds too" } else { "outside the tree area" }
                    ),
                )));
            }
            rest.extend_from_slice(&ov.payload);
            blocks.push(at);
            at = ov.next;
        }
        let a = head.finish(sb.seed(), &rest).map_err(|d| {
            TreeError::Damaged(VolError::corrupt("attribute block", rec.overflow, format!("inode {}: {d}", rec.ino)))
        })?;
        Ok((a, blocks))
    }

    /// Write an attribute string's overflow chain to fresh blocks: its
    /// first block (0 if it fits the record) and every block.
    fn write_overflow(&mut self, dev: &dyn Device, ino: u64, attr: &crate::attr::Attr) -> Result<(u64, Vec<u64>)> {
        let bytes = attr.encode();
        let n = self.sb.overflow_blocks(bytes.len()) as usize;
        if n == 0 {
            return Ok((0, Vec::new()));
        }
        let (seed, bs) = (self.sb.seed(), self.sb.block_size as usize);
        let blocks: Vec<u64> = (0..n).map(|_| self.zone_alloc()).collect();
        for (i, chunk) in bytes[crate::attr::ATTR_INLINE..].chunks(Overflow::capacity(bs)).enumerate() {
            let next = blocks.get(i + 1).copied().unwrap_or(0);
            let ov = Overflow { owner: ino as u32, next, payload: chunk.to_vec() };
            write(dev, &self.sb, blocks[i], &ov.encode(seed, blocks[i], bs))?;
        }
        Ok((blocks[0], blocks))
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
        self.sb.tree_nodes(entries as u64)
    }

    /// A file's budget: the larger of its tree on disk and the tree its
    /// committed extents need.
    fn need_of(&self, f: &FileState) -> u64 {
        (f.tree.len() as u64).max(self.nodes_needed(f.entries() as usize) + self.attr_blocks(f))
    }

    /// Overflow blocks a file's attributes take.
    fn attr_blocks(&self, f: &FileState) -> u64 {
        f.attr.as_ref().map_or(0, |a| self.sb.overflow_blocks(a.encoded_len()))
    }

    /// Recompute the budget of `inos` from the state (files that are gone
    /// leave it; unlinked files' trees count as dropped until a
    /// checkpoint frees them).
    pub fn refresh_budget(&mut self, inos: impl IntoIterator<Item = u64>) {
        for ino in inos {
            let need = self.state.files.get(&ino).map(|f| self.need_of(f));
            self.budget.set(ino, need);
        }
    }

    fn dropped_nodes(&self) -> u64 {
        self.state.dropped.iter().map(|(_, t)| t.len() as u64).sum()
    }

    /// Whether committing `records` keeps every checkpoint possible:
    /// `Err((needed, tree blocks))` when it would not.
    pub fn admit(&mut self, records: &[wal::Record]) -> std::result::Result<(), (u64, u64)> {
        let changes: Vec<Change> = records.iter().filter_map(|r| r.change().copied()).collect();
        // The latest attributes each record gives, by the overflow
        // blocks they take.
        let mut attr_blocks: mballoc_fs::IdMap<u64> = Default::default();
        for r in records {
            if let wal::Record::Attr { ino, attr } = r {
                attr_blocks.insert(*ino, self.sb.overflow_blocks(attr.encoded_len()));
            }
        }
        // Cheaply first: a change adds at most two entries to its file, a
        // file's entries are at most its extents plus one per longest
        // entry the volume could hold, and a file's need enters the worst
        // checkpoint at most twice. While that fits the headroom, so does
        // the exact figure.
        let mut per_file: mballoc_fs::IdMap<u64> = Default::default();
        let mut run = (0u64, 0u64);
        for c in &changes {
            if c.ino() != run.0 && run.1 > 0 {
                *per_file.entry(run.0).or_default() += run.1;
                run.1 = 0;
            }
            run = (c.ino(), run.1 + 1);
        }
        *per_file.entry(run.0).or_default() += run.1;
        let long = self.sb.total_blocks / MAX_ENTRY_LEN + 1;
        let bound: u64 = per_file
            .iter()
            .map(|(ino, n)| {
                let now = self.state.files.get(ino).map_or(0, |f| f.extents.len() as u64);
                self.sb.tree_nodes(now + long + 2 * n)
            })
            .sum::<u64>()
            + attr_blocks.values().sum::<u64>();
        if 2 * bound <= self.headroom() {
            return Ok(());
        }
        let mut after = self.state.entries_after(&changes);
        for &ino in attr_blocks.keys() {
            if let Some(f) = self.state.files.get(&ino) {
                after.entry(ino).or_insert(Some(f.entries()));
            }
        }
        let mut dropped = self.dropped_nodes();
        let mut trial = Vec::with_capacity(after.len());
        for (&ino, entries) in &after {
            let f = self.state.files.get(&ino);
            let disk = f.map_or(0, |f| f.tree.len() as u64);
            match entries {
                Some(e) => {
                    let attr = attr_blocks.get(&ino).copied().unwrap_or_else(|| f.map_or(0, |f| self.attr_blocks(f)));
                    trial.push((ino, Some(disk.max(self.nodes_needed(*e as usize) + attr))))
                }
                None => {
                    trial.push((ino, None));
                    dropped += disk;
                }
            }
        }
        let needed = self.budget.total_with(&trial) + dropped;
        self.fits(needed)
    }

    /// Whether file `ino` may grow to `entries` tree entries (counting
    /// everything it may still gain from data not yet written back).
    pub fn admit_growth(&mut self, ino: u64, entries: u64) -> std::result::Result<(), (u64, u64)> {
        let f = self.state.files.get(&ino);
        let disk = f.map_or(0, |f| f.tree.len() as u64);
        let attr = f.map_or(0, |f| self.attr_blocks(f));
        let old = self.budget.need.get(&ino).copied().unwrap_or(0);
        let need = old.max(disk).max(self.nodes_needed(entries as usize) + attr);
        let needed = self.budget.total_with(&[(ino, Some(need))]) + self.dropped_nodes();
        self.fits(needed)
    }

    fn fits(&self, needed: u64) -> std::result::Result<(), (u64, u64)> {
        let have = u64::from(self.sb.tree_blocks);
        if needed <= have {
            Ok(())
        } else {
            Err((needed, have))
        }
    }

    /// Tree blocks no checkpoint from here can need: while a file's
    /// tree grows by less than half of this, it fits (its need enters the
    /// sum once and the largest term at most once more).
    pub fn headroom(&self) -> u64 {
        u64::from(self.sb.tree_blocks).saturating_sub(self.budget.total() + self.dropped_nodes())
    }

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
