//! Directories: linear entry blocks (with their metadata_csum tails),
//! htree index blocks (read as the empty blocks they look like, their
//! own checksums verified), and inline directories. `walk` follows them
//! from the root to name every file.

use crate::bytes::{le16, le32};
use crate::checksum::crc32c_raw;
use crate::error::{Ext4Error, Result};
use crate::inode::{inode_csum_seed, FileType, Inode, MappingKind, ROOT_INO};
use crate::mapping::FileMap;
use crate::source::BlockSource;
use crate::superblock::{incompat, ChecksumPolicy};
use crate::volume::Volume;
use std::collections::{HashMap, HashSet};

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The inode it names (never 0).
    pub ino: u32,
    /// The name's bytes.
    pub name: Vec<u8>,
}

/// A path reached from the root, with its inode and block map.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Absolute path inside the volume ("/" for the root).
    pub path: String,
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

const TAIL_LEN: usize = 12;
const TAIL_FILE_TYPE: u8 = 0xDE;

impl<S: BlockSource> Volume<S> {
    /// The entries of directory `dir` (including "." and "..").
    pub fn read_dir(&self, dir: &Inode, map: &FileMap) -> Result<Vec<DirEntry>> {
        let sb = self.superblock();
        let mut out = Vec::new();
        let bad = |block: u64, reason: String| Ext4Error::Directory { ino: dir.ino, block, reason };
        if map.kind == MappingKind::Inline {
            if dir.size > 60 {
                return Err(Ext4Error::Unsupported(format!(
                    "inline-data directory inode {} continues in an extended attribute",
                    dir.ino
                )));
            }
            // The parent's number, then entries filling the rest of i_block.
            out.push(DirEntry { ino: le32(&dir.block, 0), name: b"..".to_vec() });
            parse_entries(&dir.block[4..], 4096, sb.has_incompat(incompat::FILETYPE), &mut out)
                .map_err(|r| bad(0, r))?;
            return Ok(out);
        }
        let bs = u64::from(sb.block_size);
        let blocks = dir.size.div_ceil(bs);
        let seed = (sb.metadata_csum() && self.policy() == ChecksumPolicy::Verify)
            .then(|| inode_csum_seed(sb, dir.ino, dir.generation));
        for e in &map.extents {
            if e.unwritten {
                continue;
            }
            for i in 0..u64::from(e.len) {
                if e.logical + i >= blocks {
                    break;
                }
                let block = e.physical + i;
                let raw = self.read_block("directory block", block)?;
                let index_block = dir.is_indexed() && (e.logical + i == 0 || is_dx_node(&raw));
                if index_block {
                    if let Some(seed) = seed {
                        check_dx_csum(seed, &raw, e.logical + i == 0).map_err(|r| bad(block, r))?;
                    }
                    // Index blocks name no children: the root's "." and ".."
                    // are the directory itself and its parent.
                    continue;
                }
                let body = match seed {
                    Some(seed) => {
                        let t = raw.len() - TAIL_LEN;
                        let tail = &raw[t..];
                        if le32(tail, 0) != 0 || le16(tail, 4) != TAIL_LEN as u16 || tail[7] != TAIL_FILE_TYPE {
                            return Err(bad(block, "no checksum tail".into()));
                        }
                        let (stored, computed) = (le32(tail, 8), crc32c_raw(seed, &raw[..t]));
                        if stored != computed {
                            return Err(Ext4Error::Checksum {
                                structure: format!("directory inode {} block", dir.ino),
                                block,
                                stored,
                                computed,
                            });
                        }
                        &raw[..t]
                    }
                    None => &raw[..],
                };
                parse_entries(body, raw.len(), sb.has_incompat(incompat::FILETYPE), &mut out)
                    .map_err(|r| bad(block, r))?;
            }
        }
        Ok(out)
    }

    /// Walk every directory from the root. Checks that directories do not
    /// loop, that entries name live inodes, and that no block is claimed
    /// twice among the inodes reached and the journal.
    pub fn walk(&self) -> Result<Tree> {
        let mut entries = Vec::new();
        let mut maps: HashMap<u32, (Inode, FileMap)> = HashMap::new();
        let mut seen_dirs = HashSet::new();
        let mut stack = vec![(String::from("/"), ROOT_INO)];
        while let Some((path, ino)) = stack.pop() {
            let (inode, map) = match maps.get(&ino) {
                Some(m) => m.clone(),
                None => {
                    let inode = self.inode(ino)?;
                    if inode.links_count == 0 || inode.mode == 0 {
                        return Err(Ext4Error::Inode {
                            ino,
                            block: 0,
                            reason: format!("{path} names an inode that is not in use"),
                        });
                    }
                    let map = self.file_map(&inode)?;
                    maps.insert(ino, (inode.clone(), map.clone()));
                    (inode, map)
                }
            };
            if inode.file_type() == FileType::Directory {
                if !seen_dirs.insert(ino) {
                    return Err(Ext4Error::Directory {
                        ino,
                        block: 0,
                        reason: format!("{path} reaches a directory already walked (loop or hard link)"),
                    });
                }
                for d in self.read_dir(&inode, &map)? {
                    if d.ino == 0 || d.name == b"." || d.name == b".." {
                        continue;
                    }
                    let name = String::from_utf8_lossy(&d.name);
                    let child = if path == "/" { format!("/{name}") } else { format!("{path}/{name}") };
                    stack.push((child, d.ino));
                }
            }
            entries.push(Entry { path, inode, map });
        }
        let journal = self.superblock().journal_inum;
        if journal != 0 && !maps.contains_key(&journal) {
            let inode = self.inode(journal)?;
            let map = self.file_map(&inode)?;
            maps.insert(journal, (inode, map));
        }
        check_overlaps(maps.iter().map(|(&ino, (_, m))| (ino, m)))?;
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Tree { entries })
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
fn rec_len(raw: u16, block_size: usize) -> usize {
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
    out: &mut Vec<DirEntry>,
) -> std::result::Result<(), String> {
    let mut pos = 0;
    while pos < buf.len() {
        if pos + 8 > buf.len() {
            return Err(format!("entry header at byte {pos} runs past the block"));
        }
        let ino = le32(buf, pos);
        let len = rec_len(le16(buf, pos + 4), block_size);
        let name_len = if filetype { usize::from(buf[pos + 6]) } else { usize::from(le16(buf, pos + 6)) };
        if len < 8 || len % 4 != 0 || pos + len > buf.len() {
            return Err(format!("entry at byte {pos} has record length {len}"));
        }
        if ino != 0 && 8 + name_len > len {
            return Err(format!("entry at byte {pos}: name of {name_len} bytes in a record of {len}"));
        }
        if ino != 0 {
            out.push(DirEntry { ino, name: buf[pos + 8..pos + 8 + name_len].to_vec() });
        }
        pos += len;
    }
    Ok(())
}

/// Fail if two maps (or one map twice) claim a block.
pub(crate) fn check_overlaps<'a>(maps: impl Iterator<Item = (u32, &'a FileMap)>) -> Result<()> {
    let mut ranges: Vec<(u64, u64, u32)> = Vec::new();
    for (ino, m) in maps {
        ranges.extend(m.extents.iter().map(|e| (e.physical, u64::from(e.len), ino)));
        ranges.extend(m.map_blocks.iter().map(|&b| (b, 1, ino)));
    }
    ranges.sort_unstable();
    let mut reach: Option<(u64, u32)> = None;
    for &(s, len, ino) in &ranges {
        if let Some((end, owner)) = reach {
            if s < end {
                return Err(Ext4Error::Overlap { block: s, first: owner, second: ino });
            }
        }
        if reach.map_or(true, |(end, _)| s + len > end) {
            reach = Some((s + len, ino));
        }
    }
    Ok(())
}
