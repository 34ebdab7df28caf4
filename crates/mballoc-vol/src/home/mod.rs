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
use crate::force::Force;
use crate::format::{Extent, Superblock, DESC_BYTES, INODE_BYTES, MAX_ENTRY_LEN, ROOT_INO};
use crate::records::{bitmap_crc, Entry, GroupDesc, InodeRecord};
use crate::state::{Apply, FileState, State};
use crate::wal;
use budget::TreeBudget;
use std::collections::BTreeSet;
use tree_area::{Partial, TreeError};

mod budget;
mod checkpoint;
mod quarantine;
mod replay;
mod tree_area;

/// How reading treats damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// The first problem is an error (mounting).
    Strict,
    /// Problems are listed and the damaged part left out (checking,
    /// repairing).
    Salvage,
    /// As strict, for a read beside a writer: bitmaps, descriptors and
    /// counters a checkpoint is rewriting may lag the files, which are
    /// what the state is built from anyway.
    Snapshot,
}

/// Whether a problem stops a repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refuse {
    /// No: the repair's answer destroys nothing intact.
    No,
    /// Yes: no answer is safe.
    Yes,
    /// Unless the caller chose this answer.
    Unless(Force),
}

/// Why a repair will not write, and the answer that would let it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub why: String,
    pub unless: Option<Force>,
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
    /// Past every transaction the journal holds, of any epoch: where the
    /// next checkpoint's epoch starts at the earliest.
    pub seq_floor: u64,
}

/// What reading the home areas found.
#[derive(Debug)]
pub struct Scan {
    pub home: Home,
    /// Damage found (empty when everything checked out).
    pub problems: Vec<String>,
    /// Why writing a repair would destroy something not proven bad (empty
    /// when a repair is safe).
    pub unrepairable: Vec<Refusal>,
    /// Journal transactions replayed.
    pub replayed: usize,
    /// Groups whose stored bitmap or descriptor differs from the files.
    pub stale_groups: Vec<u32>,
    /// Whether the superblock's counters differ from the files.
    pub stale_counters: bool,
    /// The directory tree of the named inodes (empty if it failed its
    /// checks, which are then among the problems).
    pub tree: crate::names::Tree,
    /// Inodes moved to lost+found, each with where and why.
    pub quarantined: Vec<String>,
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
            seq_floor: sb.log_seq,
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
        let mut note = |e: VolError, refuse: Refuse| -> Result<()> {
            match mode {
                ReadMode::Strict | ReadMode::Snapshot => Err(e),
                ReadMode::Salvage => {
                    match refuse {
                        Refuse::No => {}
                        Refuse::Yes => unrepairable.push(Refusal { why: e.to_string(), unless: None }),
                        Refuse::Unless(f) => unrepairable.push(Refusal { why: e.to_string(), unless: Some(f) }),
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
                Err(e) => note(e, Refuse::No)?,
            }
        }
        if descs.iter().all(Option::is_none) {
            // Not one descriptor matches: more likely the superblock (its
            // seed or layout) than every descriptor at once.
            note(
                VolError::corrupt("group descriptors", sb.desc_start, "none passes its checksum under this superblock"),
                Refuse::Yes,
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
        let partial = if mode == ReadMode::Salvage { Partial::Keep } else { Partial::Refuse };
        // Inodes kept with part of what they held, and why.
        let mut partly = std::collections::BTreeMap::new();
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
                        note(e, Refuse::No)?;
                        continue;
                    }
                };
                valid_inodes += 1;
                if rec.size > sb.max_file_size() {
                    note(
                        VolError::corrupt("inode", block, format!("size {} passes the largest file", rec.size)),
                        Refuse::Yes,
                    )?;
                    continue;
                }
                // The tree, then the rest of long attributes: both from
                // the tree area, checked alike.
                let read = home.read_tree(dev, &rec, partial).and_then(|(extents, mut nodes, mut lost)| {
                    if let Some(head) = &head {
                        match home.read_overflow(dev, &rec, head, &nodes) {
                            Ok((a, blocks)) => {
                                rec.attr = Some(a);
                                nodes.extend(blocks);
                            }
                            // The data is still the file's: kept, with
                            // attributes made up for it.
                            Err(TreeError::Damaged(e)) if partial == Partial::Keep => lost.push(e),
                            Err(e) => return Err(e),
                        }
                    }
                    Ok((extents, nodes, lost))
                });
                let (extents, nodes) = match read {
                    Ok((extents, nodes, lost)) if !lost.is_empty() => {
                        damaged_inodes += 1;
                        let why: Vec<String> = lost.iter().map(ToString::to_string).collect();
                        for e in lost {
                            note(e, Refuse::No)?;
                        }
                        partly.insert(rec.ino, why.join("; "));
                        (extents, nodes)
                    }
                    Ok((extents, nodes, _)) => (extents, nodes),
                    Err(TreeError::Damaged(e)) => {
                        damaged_inodes += 1;
                        note(e, Refuse::No)?;
                        continue;
                    }
                    Err(TreeError::Suspect(e)) => {
                        note(e, Refuse::Yes)?;
                        continue;
                    }
                    Err(TreeError::Device(e)) => return Err(e),
                };
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
                    Err(d) => note(VolError::corrupt("inode", block, d), Refuse::Yes)?,
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
                Refuse::Yes,
            )?;
        }
        // The journal's transactions, replayed over the home files, each
        // whole or not at all.
        home.seq_floor = home.seq_floor.max(journal.max_seq + 1);
        let (mut kept, before) = home.replay(&journal, mode, &mut note)?;
        if let Some(d) = &journal.damage {
            let refuse = if d.followed { Refuse::Unless(Force::DropJournalTail) } else { Refuse::No };
            note(VolError::corrupt("journal", d.block, d.detail.clone()), refuse)?;
        }
        // The names: one tree from the root. Salvaging, what lost its data
        // or its directory goes to lost+found rather than away.
        let mut named = home.names(&partly, mode);
        if let (Err(found), Some(last)) = (&named.0, kept.checked_sub(1)) {
            // Without the last transaction, does the tree hold? Then leaving
            // it out is an answer, but not a proven one: a crafted home
            // record can break the tree with the transaction's help.
            if mode == ReadMode::Salvage {
                let mut alt = home.clone();
                alt.replay_prefix(&journal, last, before.as_ref());
                let without = alt.names(&partly, mode);
                if without.0.is_ok() {
                    let tx = &journal.found[last];
                    let why = format!("sequence {}: leaves the directory tree broken: {}", tx.seq, found.join("; "));
                    let e = VolError::corrupt("journal transaction", sb.log_start + tx.at, why);
                    note(e, Refuse::Unless(Force::DropJournalTail))?;
                    alt.set_head(&journal, last);
                    home = alt;
                    kept = last;
                    named = without;
                }
            }
        }
        let replayed = kept;
        let (tree, quarantined) = named;
        // A move is a problem of its own: the damage behind it may have
        // been found already (a damaged directory), or not (a valid name
        // whose directory does not exist).
        for q in &quarantined {
            note(VolError::corrupt("directory tree", sb.itable_start, q.clone()), Refuse::No)?;
        }
        let tree = match tree {
            Ok(t) => t,
            Err(found) => {
                // Valid inodes that name each other wrongly cannot be put
                // right without guessing.
                for p in found {
                    note(VolError::corrupt("directory tree", sb.itable_start, p), Refuse::Yes)?;
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
            unrepairable.push(Refusal {
                why: format!(
                    "{unowned} blocks are in use in the bitmaps but owned by no file, and no damaged inode explains them"
                ),
                unless: Some(Force::FreeUnowned),
            });
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
        Ok(Scan { home, problems, unrepairable, replayed, stale_groups, stale_counters, tree, quarantined })
    }

    /// The directory tree of the state's names, after moving what must go
    /// to lost+found (salvaging), with a line per inode moved.
    fn names(
        &mut self,
        partly: &std::collections::BTreeMap<u64, String>,
        mode: ReadMode,
    ) -> (std::result::Result<crate::names::Tree, Vec<String>>, Vec<String>) {
        let mut moved = Vec::new();
        if mode == ReadMode::Salvage {
            match self.quarantine(partly) {
                Ok(m) => moved = m,
                Err(why) => return (Err(vec![why]), moved),
            }
        }
        let named = self.state.files.iter().filter_map(|(&i, f)| f.attr.clone().map(|a| (i, a))).collect();
        (crate::names::Tree::build(named), moved)
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
}

impl Home {
    /// Write the superblock as it stands (one sector: whole or not at
    /// all) and make it durable.
    pub fn write_superblock(&self, dev: &dyn Device) -> Result<()> {
        dev.write_at(0, &self.sb.encode()).map_err(|e| VolError::io("writing the superblock", e))?;
        dev.flush().map_err(|e| VolError::io("flushing", e))
    }

    /// Note in the superblock why the volume stopped taking changes (the
    /// first reason is kept).
    pub fn record_error(&mut self, dev: &dyn Device, reason: &str) -> Result<()> {
        if self.sb.error.is_none() {
            self.sb.error = Some(reason.to_string());
        }
        self.write_superblock(dev)
    }
}
