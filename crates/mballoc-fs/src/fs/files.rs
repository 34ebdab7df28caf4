//! Files: create, open, close, unlink, and what FIEMAP would say.

use super::{FiemapExtent, FiemapKind, FileId, FileKind, FileNode, Fs, Inode};
use crate::change_log::Change;
use crate::config::{CloseBehaviour, ExtentTreeBlocks};
use crate::error::{FsError, Result};
use crate::ext4_tree::Ext4Tree;
use crate::extent_map::{ExtentMap, ExtentState, MappedExtent};
use crate::prealloc::InodePas;
use crate::ranges::RangeSet;
use parking_lot::Mutex;
use std::sync::Arc;

impl Fs {
    /// Create an empty file, open once (like `creat`).
    pub fn create(&self) -> Result<FileId> {
        let _op = self.op();
        let id = self.inodes.take();
        if id > u64::from(u32::MAX) {
            return Err(FsError::InvalidConfig("inode numbers exhausted".into()));
        }
        self.note(Change::Create { ino: id });
        self.ext4_counts.inode(-1, false);
        self.insert_file(id, FileKind::Regular, 0, ExtentMap::new(), 1);
        self.tick();
        Ok(FileId(id))
    }

    /// Enter file `id` into the table. Its home group is its inode's
    /// group, as in ext4; with flex groups of 4 or more, the second group
    /// of that flex group for a regular file (ext4 keeps the first for
    /// directories).
    pub(super) fn insert_file(&self, id: u64, kind: FileKind, size: u64, map: ExtentMap, open: u32) {
        let groups = self.alloc.geometry().groups();
        let inode_group = self.inode_group(FileId(id));
        let flex = self.cfg.shape.flex_groups;
        let home_group = if flex >= 4 {
            let g = (inode_group & !(flex - 1)) + u32::from(kind == FileKind::Regular);
            if g < groups {
                g
            } else {
                inode_group
            }
        } else {
            inode_group
        };
        let ext4 = self.ext4_blocks_of(&map, size);
        let tree = (self.cfg.storage.extent_tree == ExtentTreeBlocks::InVolume).then(|| {
            let extents = self.block_extents(map.iter(), ext4.as_deref());
            Ext4Tree::packed(self.ext4_block_size(), extents.iter().map(|e| (e.logical, e.physical, e.len, e.state)))
        });
        let inode = Inode {
            id,
            size,
            map,
            delayed: RangeSet::new(),
            dirty_unwritten: RangeSet::new(),
            open,
            home_group,
            kind,
            on_dirty_list: false,
            unlinked: false,
            truncated_to_zero: false,
            tree,
            folios: Default::default(),
            disk_size: size,
            logged_size: size,
            ext4,
        };
        let node = Arc::new(FileNode { inode: Mutex::new(inode), pas: Mutex::new(InodePas::default()) });
        self.files.insert(id, node);
    }

    /// Open another handle on `f`.
    pub fn open(&self, f: FileId) -> Result<()> {
        let _op = self.op();
        self.with_inode(f, false, |_, ino| {
            ino.open += 1;
            Ok(())
        })
    }

    /// Close one handle. The last close gives back the file's unused
    /// preallocations (see [`CloseBehaviour`] for ext4's conditions).
    pub fn close(&self, f: FileId) -> Result<()> {
        let _op = self.op();
        self.with_inode(f, true, |node, ino| {
            let ext4 = self.cfg.behaviour.close == CloseBehaviour::Ext4;
            if ext4 && std::mem::take(&mut ino.truncated_to_zero) {
                self.flush(node, ino)?;
            }
            ino.open -= 1;
            // ext4 keeps the preallocations while delayed data still
            // waits for writeback, which will want them.
            let keep_for_writeback = ext4 && !ino.delayed.is_empty();
            if ino.open == 0 && !keep_for_writeback {
                self.discard_inode_pas(node);
            }
            Ok(())
        })
    }

    /// Handles open on `f`.
    pub fn open_handles(&self, f: FileId) -> Result<u32> {
        self.with_inode(f, false, |_, ino| Ok(ino.open))
    }

    /// Blocks `f` holds or has reserved: mapped ones and delayed data
    /// still waiting for writeback (ext4 counts both in `st_blocks`).
    pub fn blocks_held(&self, f: FileId) -> Result<u64> {
        self.with_inode(f, false, |_, ino| Ok(ino.map.blocks() + ino.delayed.len()))
    }

    /// File size in bytes.
    pub fn size(&self, f: FileId) -> Result<u64> {
        self.with_inode(f, false, |_, ino| Ok(ino.size))
    }

    /// The file's allocated extents (written and unwritten), ascending.
    pub fn extents(&self, f: FileId) -> Result<Vec<MappedExtent>> {
        self.with_inode(f, false, |_, ino| Ok(ino.map.iter().collect()))
    }

    /// The most extent records the file can have once everything it holds
    /// in memory is written back, if each delayed run maps in one piece:
    /// its records now, two more per run of dirty unwritten blocks (which
    /// may split the extent around it) and one per delayed run. A store
    /// with a bounded extent-tree area refuses writes by it.
    pub fn extent_records_bound(&self, f: FileId) -> Result<u64> {
        self.with_inode(f, false, |_, ino| {
            Ok(ino.map.len() as u64 + 2 * ino.dirty_unwritten.runs() + ino.delayed.runs())
        })
    }

    /// Extents as `filefrag` counts them: records that continue one another
    /// both logically and physically count once, whatever their state or
    /// the extent-length limit split them into.
    pub fn fragments(&self, f: FileId) -> Result<u64> {
        self.with_inode(f, false, |_, ino| {
            let mut n = 0;
            let mut next = None;
            for e in ino.map.iter() {
                if next != Some((e.logical, e.physical)) {
                    n += 1;
                }
                next = Some((e.logical_end(), e.physical + u64::from(e.len)));
            }
            Ok(n)
        })
    }

    /// Everything FIEMAP would report: allocated extents and delayed runs,
    /// ascending by logical block.
    pub fn fiemap(&self, f: FileId) -> Result<Vec<FiemapExtent>> {
        self.with_inode(f, false, |_, ino| {
            let mut v: Vec<FiemapExtent> = ino
                .map
                .iter()
                .map(|e| FiemapExtent {
                    logical: e.logical,
                    physical: Some(e.physical),
                    len: e.len.into(),
                    kind: match e.state {
                        ExtentState::Written => FiemapKind::Written,
                        ExtentState::Unwritten => FiemapKind::Unwritten,
                    },
                })
                .chain(ino.delayed.iter().map(|(s, e)| FiemapExtent {
                    logical: s,
                    physical: None,
                    len: e - s,
                    kind: FiemapKind::Delayed,
                }))
                .collect();
            v.sort_unstable_by_key(|e| e.logical);
            Ok(v)
        })
    }

    /// Remove the file: its delayed data is dropped, its blocks go to the
    /// running transaction, its preallocations are given back.
    pub fn unlink(&self, f: FileId) -> Result<()> {
        let _op = self.op();
        let node = self.node(f)?;
        let mut ino = node.inode.lock();
        if ino.unlinked {
            return Err(FsError::Unlinked(f));
        }
        ino.unlinked = true;
        self.files.remove(f.0);
        let (_, _, removed) = self.cut_blocks(&mut ino, 0, u64::MAX);
        // One record, which unmaps as it removes: a crash shows the file
        // whole or gone.
        self.note(Change::Unlink { ino: f.0 });
        self.release(removed);
        self.discard_inode_pas(&node);
        self.ext4_counts.inode(1, ino.kind == FileKind::Directory);
        drop(ino);
        self.inodes.give_back(f.0);
        self.tick();
        Ok(())
    }

    /// Ids of the files that exist, ascending.
    pub fn files(&self) -> Vec<FileId> {
        self.files.entries().into_iter().map(|(k, _)| FileId(k)).collect()
    }
}
