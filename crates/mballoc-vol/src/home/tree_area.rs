//! The extent-tree area: reading and writing files' trees and the
//! overflow chains of long attribute strings, copy-on-write, and the
//! bitmap of its blocks in use.

use super::{read, write, Home};
use crate::device::Device;
use crate::error::{Result, VolError};
use crate::format::{Extent, MAX_LOGICAL, ROOT_ENTRIES};
use crate::records::{check_order, Entry, InodeRecord, Node, Overflow};

/// Whether reading a tree keeps what it can past a damaged node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Partial {
    /// Any damage fails the whole tree (mounting).
    Refuse,
    /// Damaged nodes below the root are left out (salvaging).
    Keep,
}

/// A file's extents, the tree blocks holding them, and the damaged nodes
/// left out (reading [`Partial::Keep`]).
pub(super) type ReadTree = (Vec<Extent>, Vec<u64>, Vec<VolError>);

/// Why a file's tree could not be read.
pub(super) enum TreeError {
    /// It fails its own checks: proven bad.
    Damaged(VolError),
    /// It passes them but contradicts the superblock or another file.
    Suspect(VolError),
    /// The device failed to read it: nothing is proven either way.
    Device(VolError),
}

impl Home {
    /// A file's extents and tree blocks, every node checked. A node that
    /// fails its checks makes the inode damaged; a node that passes them
    /// but lies outside the tree area, or that another file's tree holds,
    /// makes it suspect: the superblock or the other file may be the
    /// wrong one.
    ///
    /// With `partial` (salvaging), a damaged node below the root is left
    /// out with what it leads to, and listed in the third result: the
    /// rest of the file is still worth keeping.
    pub(super) fn read_tree(
        &self,
        dev: &dyn Device,
        rec: &InodeRecord,
        partial: Partial,
    ) -> std::result::Result<ReadTree, TreeError> {
        let mut extents = Vec::new();
        let mut tree = Vec::new();
        let mut lost = Vec::new();
        let mut seen = std::collections::HashSet::new();
        check_order(&rec.root, 0, MAX_LOGICAL + 1, 0).map_err(TreeError::Damaged)?;
        // (entries, depth, logical bounds) still to visit.
        let mut stack = vec![(rec.root.clone(), rec.depth)];
        while let Some((entries, depth)) = stack.pop() {
            for (i, e) in entries.iter().enumerate() {
                match *e {
                    Entry::Leaf(x) => extents.push(x),
                    Entry::Index { logical, child } => {
                        let hi = match entries.get(i + 1) {
                            Some(Entry::Index { logical, .. }) => *logical,
                            _ => MAX_LOGICAL + 1,
                        };
                        match self.read_node(dev, rec, depth, logical, hi, child, &mut seen) {
                            Ok(node) => {
                                tree.push(child);
                                stack.push((node.entries, depth - 1));
                            }
                            Err(TreeError::Damaged(e)) if partial == Partial::Keep => lost.push(e),
                            Err(e) => return Err(e),
                        }
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
        Ok((extents, tree, lost))
    }

    /// The node `child` an index entry of depth `depth` points at for
    /// logical blocks `[logical, hi)`, checked.
    #[allow(clippy::too_many_arguments)]
    fn read_node(
        &self,
        dev: &dyn Device,
        rec: &InodeRecord,
        depth: u16,
        logical: u64,
        hi: u64,
        child: u64,
        seen: &mut std::collections::HashSet<u64>,
    ) -> std::result::Result<Node, TreeError> {
        let sb = &self.sb;
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
        let node = Node::decode(sb.seed(), child, &b, depth - 1, rec.ino as u32).map_err(TreeError::Damaged)?;
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
        check_order(&node.entries, logical, hi, child).map_err(TreeError::Damaged)?;
        if first_logical(&node.entries) != logical {
            return Err(damaged("first entry differs from its index".into()));
        }
        Ok(node)
    }

    /// The rest of a long attribute string from its overflow chain, every
    /// block checked as tree nodes are: a block that fails its own checks
    /// makes the inode damaged; a valid one outside the tree area, or held
    /// by another file or by this file's tree, makes it suspect.
    pub(super) fn read_overflow(
        &self,
        dev: &dyn Device,
        rec: &InodeRecord,
        head: &crate::records::AttrHead,
        tree: &[u64],
    ) -> std::result::Result<(crate::attr::Attr, Vec<u64>), TreeError> {
        let sb = &self.sb;
        if head.len > sb.max_attr_bytes() {
            let d = format!(
                "inode {}: attributes of {} bytes (this volume keeps {})",
                rec.ino,
                head.len,
                sb.max_attr_bytes()
            );
            return Err(TreeError::Damaged(VolError::corrupt("inode", rec.overflow, d)));
        }
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
    pub(super) fn write_overflow(
        &mut self,
        dev: &dyn Device,
        ino: u64,
        attr: &crate::attr::Attr,
    ) -> Result<(u64, Vec<u64>)> {
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

    pub(super) fn zone_get(&self, block: u64) -> bool {
        let i = block - self.sb.tree_start;
        self.zone[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    pub(super) fn zone_set(&mut self, block: u64, used: bool) {
        let i = block - self.sb.tree_start;
        let w = &mut self.zone[(i / 64) as usize];
        if used {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }

    pub(super) fn zone_free(&self) -> u64 {
        u64::from(self.sb.tree_blocks) - self.zone.iter().map(|w| u64::from(w.count_ones())).sum::<u64>()
    }

    pub(super) fn zone_alloc(&mut self) -> u64 {
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

    /// Write a file's nodes to fresh blocks; returns its depth, root and
    /// node blocks.
    pub(super) fn write_tree(
        &mut self,
        dev: &dyn Device,
        ino: u64,
        leaves: Vec<Entry>,
    ) -> Result<(u16, Vec<Entry>, Vec<u64>)> {
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

pub(super) fn first_logical(c: &[Entry]) -> u64 {
    match c[0] {
        Entry::Leaf(e) => e.logical,
        Entry::Index { logical, .. } => logical,
    }
}
