//! The streaming walk: every path from the root, handed to a visitor as
//! it is reached, in bounded memory.
//!
//! What is kept is the current path (one buffer, cut back on the way up),
//! one frame per directory on it (its identity, its extents and a cursor:
//! which block, which entry), the entries of one directory block, and a
//! bit per directory inode reached. Nothing grows with the number of
//! files, nor with the names in one directory; the frames grow with the
//! depth, by a fixed size each. A directory's block is read again when
//! the walk comes back up from a subdirectory named in it, so reads stay
//! at most the blocks plus the subdirectories.
//!
//! Damage is reported where it is found and the walk goes on: a path
//! whose inode or map the kernel would refuse, a directory whose block
//! does not parse (what it named before the bad block was already
//! listed), a directory reached a second time (by a loop, or by a second
//! name, which ext4 never makes), a name an indexed directory's hash
//! index does not lead to (the kernel cannot look it up), and under
//! [`Claiming::Volume`] a file whose blocks another file already owns.

#[cfg(doc)]
use crate::directory::dir_blocks;
use crate::directory::{named_error, DirAt, Ext4DirEntry};
use crate::error::{Ext4Error, Result};
use crate::htree::HashIndex;
use crate::inode::{FileType, Inode, MappingKind, ROOT_INO};
use crate::mapping::{Claims, Ext4Extent, FileMap};
use crate::source::BlockSource;
use crate::sparse_bits::SparseBits;
use crate::volume::Ext4Volume;

/// How a streaming walk checks the blocks files claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claiming {
    /// Each file's map is checked on its own (what listing files needs).
    PerFile,
    /// Every block is claimed once over the whole walk, the journal's
    /// first: a block two files claim makes the second one damaged. Costs
    /// a bit per block of the volume, made on first use.
    Volume,
}

/// A path reached, with its inode and block map.
#[derive(Debug)]
pub struct Found<'a> {
    /// The path's bytes ("/" for the root).
    pub path: &'a [u8],
    /// Its inode.
    pub inode: &'a Inode,
    /// Its block map.
    pub map: &'a FileMap,
}

/// What [`Ext4Volume::walk_each`] hands its visitor.
#[derive(Debug)]
pub enum Visit<'a> {
    /// A path, its inode and its map.
    Path(Found<'a>),
    /// A path the kernel would refuse: its inode, its map or (for a
    /// directory) its entries could not be read, or its blocks are
    /// another file's. What lies under a damaged directory is not
    /// reached; the rest of the walk goes on.
    Damaged {
        /// The path, as the entry's bytes.
        path: &'a [u8],
        /// Why.
        error: Ext4Error,
    },
}

/// A directory on the current path, and where its listing stands.
struct Frame {
    at: DirAt,
    /// An indexed directory's hash index, which every name it lists
    /// must be reachable by.
    index: Option<HashIndex>,
    /// The directory's own path is `path[..path_len]`.
    path_len: usize,
    entries: Entries,
    /// The next entry of the current block (or of the inline list).
    entry: usize,
}

enum Entries {
    Inline(Vec<Ext4DirEntry>),
    Blocks {
        extents: Box<[Ext4Extent]>,
        blocks: u64,
        /// The current block: extent `ext`, block `off` in it.
        ext: usize,
        off: u32,
    },
}

/// The entries of the block one frame is reading, and which frame and
/// block they are.
struct Current {
    key: Option<(usize, usize, u32)>,
    entries: Vec<Ext4DirEntry>,
}

impl<S: BlockSource> Ext4Volume<S> {
    /// Visit every path from the root as it is reached, depth first in
    /// directory order, in memory that does not grow with the number of
    /// files (see the module's notes). Each inode's map is checked as the
    /// kernel checks it, and its blocks as `claiming` says. A damaged path
    /// is handed over as such and skipped; damage that leaves nothing to
    /// walk (the root) and failed reads of the source are the error.
    pub fn walk_each(&self, claiming: Claiming, mut visit: impl FnMut(Visit<'_>) -> Result<()>) -> Result<()> {
        let sb = self.superblock();
        let mut claims = match claiming {
            Claiming::PerFile => None,
            Claiming::Volume => Some(Claims::bits(sb.blocks_count)),
        };
        // Inodes with more than one name whose blocks are claimed already.
        let mut linked = SparseBits::new(u64::from(sb.inodes_count) + 1);
        let mut seen_dirs = SparseBits::new(u64::from(sb.inodes_count) + 1);
        if let Some(c) = claims.as_mut() {
            let journal = sb.journal_inum;
            if journal != 0 && sb.has_compat(crate::superblock::compat::HAS_JOURNAL) {
                self.file_map_claimed(&self.inode(journal)?, c)?;
            }
        }
        let root = self.live_root()?;
        let root_map = match claims.as_mut() {
            Some(c) => self.file_map_claimed(&root, c)?,
            None => self.file_map(&root)?,
        };
        seen_dirs.insert(u64::from(ROOT_INO));
        let mut path = b"/".to_vec();
        visit(Visit::Path(Found { path: &path, inode: &root, map: &root_map }))?;
        let mut frames = vec![self.frame(&root, root_map, path.len())?];
        let mut current = Current { key: None, entries: Vec::new() };
        while let Some(depth) = frames.len().checked_sub(1) {
            let (d, logical) = match self.next_entry(&mut frames[depth], depth, &mut current) {
                Ok(Some(d)) => d,
                Ok(None) => {
                    frames.pop();
                    continue;
                }
                Err(e @ Ext4Error::Io { .. }) => return Err(e),
                Err(error) => {
                    let len = frames[depth].path_len;
                    visit(Visit::Damaged { path: &path[..len], error })?;
                    frames.pop();
                    continue;
                }
            };
            if d.name == b"." || d.name == b".." {
                continue;
            }
            let parent = frames[depth].at.ino;
            // The child's path, made in place: the walk's work per entry
            // is its name, not its depth.
            path.truncate(frames[depth].path_len);
            if path.len() > 1 {
                path.push(b'/');
            }
            path.extend_from_slice(&d.name);
            let ino = d.ino;
            let unreachable = frames[depth].index.as_ref().and_then(|i| i.leads_to(&d.name, logical).err());
            let via = Some((parent, d));
            if let Some(why) = unreachable {
                let shown = String::from_utf8_lossy(&path).into_owned();
                visit(Visit::Damaged { path: &path, error: named_error(ino, &via, format!("{shown}: {why}")) })?;
                continue;
            }
            let reached = (|| -> Result<(Inode, FileMap)> {
                let inode = self.named_inode(&path, ino, &via)?;
                let is_dir = inode.file_type() == FileType::Directory;
                if is_dir && !seen_dirs.insert(u64::from(ino)) {
                    let shown = String::from_utf8_lossy(&path);
                    return Err(named_error(
                        ino,
                        &via,
                        format!("{shown} reaches directory inode {ino} again (a loop or a second name)"),
                    ));
                }
                let map = match claims.as_mut() {
                    Some(c) if is_dir || inode.links_count < 2 || linked.insert(u64::from(ino)) => {
                        self.file_map_claimed(&inode, c)?
                    }
                    _ => self.file_map(&inode)?,
                };
                Ok((inode, map))
            })();
            match reached {
                Ok((inode, map)) => {
                    visit(Visit::Path(Found { path: &path, inode: &inode, map: &map }))?;
                    if inode.file_type() == FileType::Directory {
                        match self.frame(&inode, map, path.len()) {
                            Ok(f) => frames.push(f),
                            Err(error) => visit(Visit::Damaged { path: &path, error })?,
                        }
                    }
                }
                Err(e @ Ext4Error::Io { .. }) => return Err(e),
                Err(error) => visit(Visit::Damaged { path: &path, error })?,
            }
        }
        Ok(())
    }

    /// A frame for directory `dir`, its listing not started.
    fn frame(&self, dir: &Inode, map: FileMap, path_len: usize) -> Result<Frame> {
        let at = DirAt::of(dir);
        let mut index = None;
        let entries = if map.kind == MappingKind::Inline {
            Entries::Inline(self.inline_dir(dir)?)
        } else {
            // The kernel looks names up through the index only where the
            // volume has dir_index.
            if at.indexed && self.superblock().has_compat(crate::superblock::compat::DIR_INDEX) {
                index = self.hash_index(&at, &map.extents)?;
            }
            let blocks = dir.size.div_ceil(u64::from(self.superblock().block_size));
            Entries::Blocks { extents: map.extents.into_boxed_slice(), blocks, ext: 0, off: 0 }
        };
        Ok(Frame { at, index, path_len, entries, entry: 0 })
    }

    /// The next entry of frame `depth` and the logical block holding it,
    /// reading its blocks as needed into `current` (again, when a
    /// subdirectory's listing used it meanwhile).
    fn next_entry(&self, f: &mut Frame, depth: usize, current: &mut Current) -> Result<Option<(Ext4DirEntry, u64)>> {
        let (extents, blocks, ext, off) = match &mut f.entries {
            Entries::Inline(list) => {
                let e = list.get(f.entry).cloned();
                f.entry += 1;
                return Ok(e.map(|e| (e, 0)));
            }
            Entries::Blocks { extents, blocks, ext, off } => (extents, *blocks, ext, off),
        };
        loop {
            // The block the cursor is on, if any is left.
            let Some((logical, physical)) = block_at(extents, blocks, ext, off) else {
                return Ok(None);
            };
            if current.key != Some((depth, *ext, *off)) {
                current.key = None;
                current.entries.clear();
                self.dir_block(&f.at, logical, physical, &mut current.entries)?;
                current.key = Some((depth, *ext, *off));
            }
            if let Some(e) = current.entries.get(f.entry) {
                f.entry += 1;
                return Ok(Some((e.clone(), logical)));
            }
            f.entry = 0;
            *off += 1;
        }
    }
}

/// The written block the cursor `(ext, off)` is on, moved past unwritten
/// extents and ended extents first; `None` past the directory's size.
/// The same blocks, in the same order, as [`dir_blocks`] gives.
fn block_at(extents: &[Ext4Extent], blocks: u64, ext: &mut usize, off: &mut u32) -> Option<(u64, u64)> {
    loop {
        let e = extents.get(*ext)?;
        if e.unwritten || *off >= e.len {
            *ext += 1;
            *off = 0;
            continue;
        }
        let logical = e.logical + u64::from(*off);
        if logical >= blocks {
            return None;
        }
        return Some((logical, e.physical + u64::from(*off)));
    }
}
