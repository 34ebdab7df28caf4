//! What ext4's directories need from the file layer
//! ([`crate::Ext4Namespace`]): an inode numbered inside a chosen group, a
//! block appended to a directory, and the per-group counts ext4's inode
//! allocator reads.

use super::{FileId, FileKind, Fs};
use crate::alloc_log::Purpose;
use crate::change_log::Change;
use crate::error::{FsError, Result};
use crate::ext4_tree::Merge;
use crate::extent_map::{ExtentMap, ExtentState};
use mballoc::AllocRequest;

impl Fs {
    /// A new inode of `kind` numbered as ext4 numbers it once `group` is
    /// chosen: the lowest free number in that group, else in the next
    /// group with one (wrapping). A regular file comes open once, like
    /// [`Fs::create`]; a directory holds no handle.
    pub(crate) fn create_in_group(&self, group: u32, kind: FileKind) -> Result<FileId> {
        let _op = self.op();
        let ipg = u64::from(self.cfg.shape.inodes_per_group);
        let groups = self.alloc.geometry().groups();
        let id = (0..groups)
            .map(|i| u64::from((group + i) % groups))
            .find_map(|g| self.inodes.take_in(g * ipg + 1, (g + 1) * ipg + 1))
            .ok_or_else(|| FsError::InvalidConfig("inode numbers exhausted".into()))?;
        self.note(Change::Create { ino: id });
        self.ext4_counts.inode(-1, kind == FileKind::Directory);
        self.insert_file(id, kind, 0, ExtentMap::new(), u32::from(kind == FileKind::Regular));
        self.tick();
        Ok(FileId(id))
    }

    /// The group inode `f` belongs to.
    pub(crate) fn inode_group(&self, f: FileId) -> u32 {
        let groups = u64::from(self.alloc.geometry().groups());
        (((f.0 - 1) / u64::from(self.cfg.shape.inodes_per_group)) % groups) as u32
    }

    /// Free inode numbers in each group.
    pub(crate) fn free_inodes_per_group(&self) -> Vec<u32> {
        let ipg = u64::from(self.cfg.shape.inodes_per_group);
        (0..u64::from(self.alloc.geometry().groups()))
            .map(|g| (ipg - self.inodes.used_in(g * ipg + 1, (g + 1) * ipg + 1)) as u32)
            .collect()
    }

    /// Free blocks in each group as ext4's group counters say, which
    /// follow the on-disk bitmap: a block freed in the running transaction
    /// counts as free (it leaves the bitmap at once, the buddy at commit),
    /// and so does a preallocation's unused block (only the buddy holds
    /// it).
    pub(crate) fn free_blocks_per_group(&self) -> Vec<u64> {
        let geo = self.alloc.geometry();
        let mut free: Vec<u64> =
            (0..geo.groups()).map(|g| self.alloc.group_summary(g).map_or(0, |s| u64::from(s.free))).collect();
        let mut add = |start: u64, len: u64| free[geo.group_of(start) as usize] += len;
        for (start, len) in self.deferred_frees.pending_ranges() {
            add(start, len);
        }
        for (_, node) in self.files.entries() {
            for pa in node.pas.lock().iter() {
                for (a, b) in pa.unused.iter() {
                    add(pa.physical_of(a), b - a);
                }
            }
        }
        for lg in &self.lgs {
            for pa in lg.lock().iter() {
                let (start, len) = pa.run();
                add(start, len);
            }
        }
        free
    }

    /// Start ext4's per-CPU counts (`batch`: the kernel's
    /// `percpu_counter_batch`) from the exact values, `dirs` directories.
    pub(crate) fn start_ext4_counts(&self, batch: u32, dirs: u64) {
        let free_blocks = self.free_blocks_per_group().iter().sum();
        let free_inodes = self.free_inodes_per_group().iter().map(|&n| u64::from(n)).sum();
        self.ext4_counts.start(batch, super::SharedCounts { free_blocks, free_inodes, dirs });
    }

    /// The shared values of ext4's per-CPU counts, once started.
    pub(crate) fn ext4_shared_counts(&self) -> Option<super::SharedCounts> {
        self.ext4_counts.read()
    }

    /// Append one ext4 block to directory `dir`, as ext4 grows a
    /// directory: a one-block metadata request whose goal continues the
    /// directory's last block (else its home group), mapped written.
    /// Under bigalloc only a block that starts a cluster asks: the
    /// others lie in the cluster the directory already holds.
    pub(crate) fn append_directory_block(&self, dir: FileId) -> Result<()> {
        let _op = self.op();
        let node = self.node(dir)?;
        let mut ino = node.inode.lock();
        if ino.kind != FileKind::Directory || ino.unlinked {
            return Err(FsError::Directory(format!("inode {} is not a directory", dir.0)));
        }
        let bs = self.ext4_block_size();
        let cb = self.cluster_bits;
        let k = ino.size / bs;
        let l = k >> cb;
        let at = match ino.map.find(l) {
            Some(e) => (e.physical_of(l) << cb) + (k - (l << cb)),
            None => {
                let goal = self.goal(&ino, l);
                let req = AllocRequest::new(1).goal(goal);
                let physical = self.allocate_metadata_block(dir.0, l, req, goal, Purpose::Directory)?;
                ino.map.insert(l, physical, 1, ExtentState::Written);
                self.note(Change::Map { ino: dir.0, logical: l, physical, len: 1, state: ExtentState::Written });
                physical << cb
            }
        };
        let size = ino.size;
        self.give_ext4_blocks(&mut ino, size, bs);
        let freed = self.tree_map_blocks(&mut ino, k, at, 1, ExtentState::Written, Merge::Yes);
        self.release_tree_blocks(freed);
        ino.size += bs;
        Ok(())
    }
}
