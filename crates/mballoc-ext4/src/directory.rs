//! Directories: linear entry blocks (with their metadata_csum tails),
//! htree index blocks (read as the empty blocks they look like, their
//! own checksums verified), and inline directories. `walk` follows them
//! from the root to name every file.

use crate::bytes::{le16, le32};
use crate::checksum::crc32c_raw;
use crate::error::{Ext4Error, Result};
use crate::inode::{inode_csum_seed, FileType, Inode, MappingKind, ROOT_INO};
use crate::mapping::{Claims, FileMap, INLINE_ROOT_BYTES};
use crate::source::BlockSource;
use crate::superblock::{incompat, ChecksumPolicy};
use crate::volume::Ext4Volume;
use std::collections::{HashMap, HashSet};

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ext4DirEntry {
    /// The inode it names (never 0).
    pub ino: u32,
    /// The name's bytes.
    pub name: Vec<u8>,
    /// The block that holds the entry: a directory block, or the inode
    /// table block of an inline directory.
    pub block: u64,
}

/// A path reached from the root, with its inode and block map.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Absolute path inside the volume ("/" for the root), names that are
    /// not UTF-8 shown with U+FFFD.
    pub path: String,
    /// The same path as the directory entries' bytes (what filefrag
    /// prints).
    pub raw_path: Vec<u8>,
    /// Its inode.
    pub inode: Inode,
    /// Its block map.
    pub map: FileMap,
}

/// A walk of the whole tree: every path, and a check that no two inodes
/// (nor one inode twice) claim a block.
#[derive(Debug, Clone)]
pub struct Tree {
    /// Every path, sorted; a hard-linked file appears under each name.
    pub entries: Vec<Entry>,
}

impl Tree {
    /// Regular files.
    pub fn files(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.inode.file_type() == FileType::Regular)
    }
}

/// A path still to visit: its inode, and the directory and entry that
/// named it (none for the root).
type Pending = (Vec<u8>, u32, Option<(u32, Ext4DirEntry)>);

const TAIL_LEN: usize = 12;
/// Record lengths inside an inline directory are plain (the 64 KiB-block
/// encoding never applies).
const INLINE_REC_LIMIT: usize = 4096;
const TAIL_FILE_TYPE: u8 = 0xDE;

impl<S: BlockSource> Ext4Volume<S> {
    /// The entries of directory `dir` (including "." and "..").
    pub fn read_dir(&self, dir: &Inode, map: &FileMap) -> Result<Vec<Ext4DirEntry>> {
        if map.kind == MappingKind::Inline {
            return self.inline_dir(dir);
        }
        let mut out = Vec::new();
        let at = DirAt::of(dir);
        let blocks = dir.size.div_ceil(u64::from(self.superblock().block_size));
        for (logical, physical) in dir_blocks(blocks, &map.extents) {
            self.dir_block(&at, logical, physical, &mut out)?;
        }
        Ok(out)
    }

    /// The entries of an inline directory: the parent's number, then
    /// entries filling the rest of i_block, then (a larger directory)
    /// more entries filling the system.data attribute.
    pub(crate) fn inline_dir(&self, dir: &Inode) -> Result<Vec<Ext4DirEntry>> {
        let bad = |block: u64, reason: String| Ext4Error::Directory { ino: dir.ino, block, reason };
        let filetype = self.superblock().has_incompat(incompat::FILETYPE);
        let mut out = Vec::new();
        let at = dir.table_block;
        out.push(Ext4DirEntry { ino: le32(&dir.block, 0), name: b"..".to_vec(), block: at });
        parse_entries(&dir.block[4..], INLINE_REC_LIMIT, filetype, at, &mut out).map_err(|r| bad(at, r))?;
        let more = crate::xattr::ibody_value(&dir.ibody, crate::xattr::INDEX_SYSTEM, b"data")
            .map_err(|r| bad(at, format!("inline directory attribute: {r}")))?
            .unwrap_or(&[]);
        let held = INLINE_ROOT_BYTES + more.len() as u64;
        if dir.size > held {
            return Err(bad(at, format!("inline directory of {} bytes holds only {held}", dir.size)));
        }
        parse_entries(more, INLINE_REC_LIMIT, filetype, at, &mut out).map_err(|r| bad(at, r))?;
        Ok(out)
    }

    /// Append the entries of directory block `logical` (at `physical`) of
    /// directory `dir` to `out`, its checksum verified. Index blocks of an
    /// htree name no children (the root's "." and ".." are the directory
    /// itself and its parent).
    pub(crate) fn dir_block(
        &self,
        dir: &DirAt,
        logical: u64,
        physical: u64,
        out: &mut Vec<Ext4DirEntry>,
    ) -> Result<()> {
        let sb = self.superblock();
        let bad = |reason: String| Ext4Error::Directory { ino: dir.ino, block: physical, reason };
        let seed = (sb.metadata_csum() && self.policy() == ChecksumPolicy::Verify)
            .then(|| inode_csum_seed(sb, dir.ino, dir.generation));
        let raw = self.read_block("directory block", physical)?;
        if dir.indexed && (logical == 0 || is_dx_node(&raw)) {
            if let Some(seed) = seed {
                check_dx_csum(seed, &raw, logical == 0).map_err(bad)?;
            }
            return Ok(());
        }
        let body = match seed {
            Some(seed) => {
                let t = raw.len() - TAIL_LEN;
                let tail = &raw[t..];
                if le32(tail, 0) != 0 || le16(tail, 4) != TAIL_LEN as u16 || tail[7] != TAIL_FILE_TYPE {
                    return Err(bad("no checksum tail".into()));
                }
                let (stored, computed) = (le32(tail, 8), crc32c_raw(seed, &raw[..t]));
                if stored != computed {
                    return Err(Ext4Error::Checksum {
                        structure: format!("directory inode {} block", dir.ino),
                        block: physical,
                        stored,
                        computed,
                    });
                }
                &raw[..t]
            }
            None => &raw[..],
        };
        parse_entries(body, raw.len(), sb.has_incompat(incompat::FILETYPE), physical, out).map_err(bad)
    }

    /// Walk every directory from the root. Checks that the root is a
    /// directory, that directories do not loop, that entries name live
    /// inodes, and that no block is claimed twice among the inodes reached
    /// and the journal; every block is claimed before it is read, so a
    /// walk reads each block of the image at most once. An error names
    /// the block that holds the bad structure (for a bad entry, the
    /// directory block that holds it).
    pub fn walk(&self) -> Result<Tree> {
        let mut claims = Claims::default();
        let mut entries = Vec::new();
        let mut maps: HashMap<u32, (Inode, FileMap)> = HashMap::new();
        let mut seen_dirs = HashSet::new();
        let root = self.live_root()?;
        let root_map = self.file_map_claimed(&root, &mut claims)?;
        maps.insert(ROOT_INO, (root, root_map));
        let mut stack: Vec<Pending> = vec![(b"/".to_vec(), ROOT_INO, None)];
        while let Some((raw_path, ino, via)) = stack.pop() {
            let path = String::from_utf8_lossy(&raw_path).into_owned();
            let named = |reason: String| named_error(ino, &via, reason);
            let (inode, map) = match maps.get(&ino) {
                Some(m) => m.clone(),
                None => {
                    let inode = self.named_inode(&raw_path, ino, &via)?;
                    let map = self.file_map_claimed(&inode, &mut claims)?;
                    maps.insert(ino, (inode.clone(), map.clone()));
                    (inode, map)
                }
            };
            if inode.file_type() == FileType::Directory {
                if !seen_dirs.insert(ino) {
                    return Err(named(format!("{path} reaches directory inode {ino} again (a loop or a hard link)")));
                }
                for d in self.read_dir(&inode, &map)? {
                    if d.name == b"." || d.name == b".." {
                        continue;
                    }
                    stack.push((child_path(&raw_path, &d.name), d.ino, Some((ino, d))));
                }
            }
            entries.push(Entry { path, raw_path, inode, map });
        }
        let journal = self.superblock().journal_inum;
        if journal != 0 && !maps.contains_key(&journal) {
            let inode = self.inode(journal)?;
            self.file_map_claimed(&inode, &mut claims)?;
        }
        entries.sort_by(|a, b| a.raw_path.cmp(&b.raw_path));
        Ok(Tree { entries })
    }
}

/// What reading a directory's blocks needs of its inode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirAt {
    pub(crate) ino: u32,
    pub(crate) generation: u32,
    pub(crate) indexed: bool,
}

impl DirAt {
    pub(crate) fn of(dir: &Inode) -> DirAt {
        DirAt { ino: dir.ino, generation: dir.generation, indexed: dir.is_indexed() }
    }
}

/// The written blocks of a directory of `blocks` blocks, `(logical,
/// physical)` in map order (unwritten extents and holes hold no entries).
pub(crate) fn dir_blocks(blocks: u64, extents: &[crate::mapping::Ext4Extent]) -> impl Iterator<Item = (u64, u64)> + '_ {
    extents.iter().filter(|e| !e.unwritten).flat_map(move |e| {
        (0..u64::from(e.len)).map(move |i| (e.logical + i, e.physical + i)).take_while(move |&(l, _)| l < blocks)
    })
}

/// An error about the entry that named `ino` (or, for the root, about the
/// inode itself).
pub(crate) fn named_error(ino: u32, via: &Option<(u32, Ext4DirEntry)>, reason: String) -> Ext4Error {
    match via {
        Some((dir, e)) => Ext4Error::Directory { ino: *dir, block: e.block, reason },
        None => Ext4Error::Inode { ino, block: 0, reason },
    }
}

/// The path of entry `name` of the directory at `parent`.
pub(crate) fn child_path(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut child = parent.to_vec();
    if parent != b"/" {
        child.push(b'/');
    }
    child.extend_from_slice(name);
    child
}

impl<S: BlockSource> Ext4Volume<S> {
    /// The root inode, which both walks start from: a live directory, or
    /// nothing can be walked.
    pub(crate) fn live_root(&self) -> Result<Inode> {
        let root = self.inode(ROOT_INO)?;
        if root.file_type() != FileType::Directory || root.links_count == 0 {
            return Err(Ext4Error::Inode {
                ino: ROOT_INO,
                block: root.table_block,
                reason: format!("the root is not a live directory (mode {:#o}, {} links)", root.mode, root.links_count),
            });
        }
        Ok(root)
    }

    /// The live inode `ino` that `path` names (through the entry `via`),
    /// or why it cannot be one: past the last inode, unreadable, or not in
    /// use.
    pub(crate) fn named_inode(&self, raw_path: &[u8], ino: u32, via: &Option<(u32, Ext4DirEntry)>) -> Result<Inode> {
        // Spelled out only for an error: a path can be long.
        let path = || String::from_utf8_lossy(raw_path);
        let sb = self.superblock();
        if ino > sb.inodes_count {
            return Err(named_error(ino, via, format!("{} names inode {ino}, past the last inode", path())));
        }
        if ino != ROOT_INO && ino < sb.first_ino {
            return Err(named_error(
                ino,
                via,
                format!("{} names inode {ino}, a reserved one (the first for files is {})", path(), sb.first_ino),
            ));
        }
        let inode = self.inode(ino).map_err(|e| match e {
            Ext4Error::Inode { reason, .. } => {
                named_error(ino, via, format!("{} names inode {ino}, which {reason}", path()))
            }
            e => e,
        })?;
        if inode.links_count == 0 || inode.mode == 0 {
            return Err(named_error(ino, via, format!("{} names inode {ino}, which is not in use", path())));
        }
        if inode.flags & crate::inode::iflags::EA_INODE != 0 {
            return Err(named_error(
                ino,
                via,
                format!("{} names inode {ino}, which holds an extended attribute's value, not a file", path()),
            ));
        }
        Ok(inode)
    }
}

/// An htree interior node: one empty entry spanning the whole block.
fn is_dx_node(raw: &[u8]) -> bool {
    le32(raw, 0) == 0 && rec_len(le16(raw, 4), raw.len()) == raw.len()
}

/// Check an htree block's checksum (the `dx_tail` after `limit` entries).
fn check_dx_csum(seed: u32, raw: &[u8], root: bool) -> std::result::Result<(), String> {
    let count_offset = if root { 24 + usize::from(raw[24 + 5]) } else { 8 };
    if count_offset + 4 > raw.len() {
        return Err("htree header past the block".into());
    }
    let (limit, count) = (usize::from(le16(raw, count_offset)), usize::from(le16(raw, count_offset + 2)));
    let tail = count_offset + limit * 8;
    if count > limit || tail + 8 > raw.len() {
        return Err(format!("htree node with count {count}, limit {limit}"));
    }
    let mut c = crc32c_raw(seed, &raw[..count_offset + count * 8]);
    c = crc32c_raw(c, &raw[tail..tail + 4]);
    c = crc32c_raw(c, &[0; 4]);
    let stored = le32(raw, tail + 4);
    if stored != c {
        return Err(format!("htree node checksum mismatch (stored {stored:#x}, computed {c:#x})"));
    }
    Ok(())
}

/// Decode `rec_len` (64 KiB blocks store 65536 in 16 bits specially).
pub(crate) fn rec_len(raw: u16, block_size: usize) -> usize {
    let len = usize::from(raw);
    if block_size < 65536 {
        len
    } else if raw == u16::MAX || raw == 0 {
        65536
    } else {
        (len & 65532) | ((len & 3) << 16)
    }
}

/// Parse the entries packed in `buf`.
fn parse_entries(
    buf: &[u8],
    block_size: usize,
    filetype: bool,
    block: u64,
    out: &mut Vec<Ext4DirEntry>,
) -> std::result::Result<(), String> {
    let mut pos = 0;
    while pos < buf.len() {
        if pos + 8 > buf.len() {
            return Err(format!("entry header at byte {pos} runs past the block"));
        }
        let ino = le32(buf, pos);
        let len = rec_len(le16(buf, pos + 4), block_size);
        let name_len = if filetype { usize::from(buf[pos + 6]) } else { usize::from(le16(buf, pos + 6)) };
        if len < 8 || !len.is_multiple_of(4) || pos + len > buf.len() {
            return Err(format!("entry at byte {pos} has record length {len}"));
        }
        if ino != 0 && 8 + name_len > len {
            return Err(format!("entry at byte {pos}: name of {name_len} bytes in a record of {len}"));
        }
        if ino != 0 {
            out.push(Ext4DirEntry { ino, name: buf[pos + 8..pos + 8 + name_len].to_vec(), block });
        }
        pos += len;
    }
    Ok(())
}
