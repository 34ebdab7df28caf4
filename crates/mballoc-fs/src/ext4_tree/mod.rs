//! The shape of ext4's extent tree for one file, kept to know when ext4
//! allocates and frees tree blocks ([`ExtentTreeBlocks::InVolume`]).
//!
//! ext4 keeps four extents in the inode. A fifth makes the tree grow in
//! depth: a block is allocated, the inode's extents move into it, and the
//! inode holds one index entry. A full leaf is split at the insertion
//! point (an append gets a new, empty leaf to the right), allocating a
//! block for each level below the lowest index with room; when every
//! index is full the tree grows again. Extents merge only with
//! neighbours in the same leaf; a depth-1 tree whose one leaf fits the
//! inode again moves back into it and frees the leaf. Removing a range
//! frees every leaf and index block it empties; an emptied tree is depth
//! 0 again. Writes into unwritten extents are converted as `convert.rs`
//! describes, with `dioread_nolock` or without.
//!
//! The model keeps its own extents, merged by these rules, because ext4's
//! entry counts (and so its allocations) depend on them; the file layer's
//! extent map merges across leaves and would count fewer.
//!
//! [`ExtentTreeBlocks::InVolume`]: crate::ExtentTreeBlocks::InVolume

use crate::extent_map::{ExtentState, MAX_UNWRITTEN_LEN, MAX_WRITTEN_LEN};

/// Entries the inode holds.
const ROOT_CAP: usize = 4;

/// One extent as a tree entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ext {
    logical: u64,
    physical: u64,
    len: u32,
    unwritten: bool,
}

impl Ext {
    fn end(&self) -> u64 {
        self.logical + u64::from(self.len)
    }
    fn max_len(&self) -> u32 {
        if self.unwritten {
            MAX_UNWRITTEN_LEN
        } else {
            MAX_WRITTEN_LEN
        }
    }
}

/// `ext4_can_extents_be_merged(a, b)`: `b` continues `a`.
fn mergeable(a: &Ext, b: &Ext) -> bool {
    a.unwritten == b.unwritten
        && a.end() == b.logical
        && a.physical + u64::from(a.len) == b.physical
        && a.len + b.len <= a.max_len()
}

#[derive(Debug, Clone)]
enum Node {
    Leaf(Vec<Ext>),
    /// `(first logical block, child node)`.
    Index(Vec<(u64, usize)>),
}

/// Where ext4 asks for a new tree block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TreeGoal {
    /// The file's goal block (`ext4_inode_to_goal_block`): a tree growing
    /// out of the inode for the first time.
    Home,
    /// Near this block (`ext4_ext_find_goal`): a split, next to the data
    /// the new extent continues.
    Near(u64),
    /// Exactly this block first (`HINT_TRY_GOAL`): a tree growing again,
    /// just before its old top node.
    TryFirst(u64),
}

/// Whether an inserted extent may merge with its neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Merge {
    /// As any insertion.
    Yes,
    /// Never: writeback's blocks go in unwritten before the I/O
    /// (`EXT4_GET_BLOCKS_PRE_IO`) and merge when it completes.
    BeforeIo,
}

/// Where tree blocks come from and go.
pub(crate) trait TreeBlocks {
    /// A block for a new tree node (`None`: no space; the node is kept
    /// without one).
    fn alloc(&mut self, goal: TreeGoal) -> Option<u64>;
    /// A tree node's block is no longer used.
    fn free(&mut self, block: u64);
}

/// One file's extent tree, as ext4 would shape it.
#[derive(Debug, Clone)]
pub(crate) struct Ext4Tree {
    nodes: Vec<Option<(Node, Option<u64>)>>,
    spare: Vec<usize>,
    depth: usize,
    /// Entries per tree block: `(block size − 12) / 12`.
    cap: usize,
}

/// A path from the root: node ids, and at each index the position taken.
type Path = Vec<(usize, usize)>;

impl Ext4Tree {
    /// An empty tree for blocks of `block_size` bytes.
    pub(crate) fn new(block_size: u64) -> Ext4Tree {
        Ext4Tree {
            nodes: vec![Some((Node::Leaf(Vec::new()), None))],
            spare: Vec::new(),
            depth: 0,
            cap: ((block_size as usize).saturating_sub(12) / 12).max(ROOT_CAP + 1),
        }
    }

    /// A tree already holding `extents` (a file carried over from a
    /// volume): leaves packed full, their blocks not the engine's.
    pub(crate) fn packed(block_size: u64, extents: impl IntoIterator<Item = (u64, u64, u32, ExtentState)>) -> Ext4Tree {
        let mut t = Ext4Tree::new(block_size);
        let exts: Vec<Ext> = extents
            .into_iter()
            .map(|(l, p, n, s)| Ext { logical: l, physical: p, len: n, unwritten: s == ExtentState::Unwritten })
            .collect();
        if exts.len() <= ROOT_CAP {
            t.nodes[0] = Some((Node::Leaf(exts), None));
            return t;
        }
        let mut level: Vec<(u64, usize)> =
            exts.chunks(t.cap).map(|c| (c[0].logical, t.add(Node::Leaf(c.to_vec()), None))).collect();
        t.depth = 1;
        while level.len() > ROOT_CAP {
            level = level.chunks(t.cap).map(|c| (c[0].0, t.add(Node::Index(c.to_vec()), None))).collect();
            t.depth += 1;
        }
        t.nodes[0] = Some((Node::Index(level), None));
        t
    }

    fn add(&mut self, n: Node, block: Option<u64>) -> usize {
        match self.spare.pop() {
            Some(i) => {
                self.nodes[i] = Some((n, block));
                i
            }
            None => {
                self.nodes.push(Some((n, block)));
                self.nodes.len() - 1
            }
        }
    }

    fn node(&self, i: usize) -> &Node {
        &self.nodes[i].as_ref().expect("live node").0
    }

    fn node_mut(&mut self, i: usize) -> &mut Node {
        &mut self.nodes[i].as_mut().expect("live node").0
    }

    fn cap_of(&self, i: usize) -> usize {
        if i == 0 {
            ROOT_CAP
        } else {
            self.cap
        }
    }

    fn len_of(&self, i: usize) -> usize {
        match self.node(i) {
            Node::Leaf(v) => v.len(),
            Node::Index(v) => v.len(),
        }
    }

    fn drop_node(&mut self, i: usize, blocks: &mut dyn TreeBlocks) {
        if let Some((_, Some(b))) = self.nodes[i].take() {
            blocks.free(b);
        }
        self.spare.push(i);
    }

    /// Tree blocks the engine allocated for this file (not carried over).
    pub(crate) fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.nodes.iter().flatten().filter_map(|(_, b)| *b)
    }

    /// Entries in the tree's leaves.
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.nodes.iter().flatten().map(|(n, _)| if let Node::Leaf(v) = n { v.len() } else { 0 }).sum()
    }

    /// `ext4_find_extent`: the path to the leaf for `logical`.
    fn find(&self, logical: u64) -> Path {
        let mut path = Vec::with_capacity(self.depth + 1);
        let mut i = 0;
        loop {
            match self.node(i) {
                Node::Index(v) => {
                    let k = v.iter().rposition(|e| e.0 <= logical).unwrap_or(0);
                    path.push((i, k));
                    i = v[k].1;
                }
                Node::Leaf(v) => {
                    let k = v.iter().rposition(|e| e.logical <= logical).unwrap_or(0);
                    path.push((i, k));
                    return path;
                }
            }
        }
    }

    fn leaf(&mut self, i: usize) -> &mut Vec<Ext> {
        match self.node_mut(i) {
            Node::Leaf(v) => v,
            Node::Index(_) => unreachable!("path ends at a leaf"),
        }
    }

    /// Keys above a leaf whose first entry changed (`ext4_ext_correct_indexes`).
    fn correct_keys(&mut self, path: &Path) {
        let Some(&(leaf, _)) = path.last() else { return };
        let Some(first) = (match self.node(leaf) {
            Node::Leaf(v) => v.first().map(|e| e.logical),
            Node::Index(v) => v.first().map(|e| e.0),
        }) else {
            return;
        };
        let mut key = first;
        for d in (0..path.len() - 1).rev() {
            let (node, pos) = path[d];
            if let Node::Index(v) = self.node_mut(node) {
                v[pos].0 = key;
                if pos != 0 {
                    break;
                }
                key = v[0].0;
            }
        }
    }

    /// Insert an extent (`ext4_ext_insert_extent`). `merge` is false for
    /// the pieces of a split made before I/O, which ext4 never merges.
    fn insert(&mut self, e: Ext, merge: Merge, blocks: &mut dyn TreeBlocks) {
        loop {
            let mut path = self.find(e.logical);
            let (leaf, mut pos) = *path.last().expect("a path has a leaf");
            let n = self.len_of(leaf);
            if merge == Merge::Yes && n > 0 {
                let v = self.leaf(leaf);
                // The nearer of the found extent and its right neighbour.
                let mut at = pos;
                let mut try_append = true;
                if at + 1 < n && v[at].end() < e.logical {
                    at += 1;
                    try_append = false;
                } else if at > 0 && e.end() < v[at].logical {
                    at -= 1;
                }
                if try_append && mergeable(&v[at], &e) {
                    v[at].len += e.len;
                    path.last_mut().expect("leaf").1 = at;
                    self.after_insert(&path, merge, blocks);
                    return;
                }
                if mergeable(&e, &v[at]) {
                    v[at].logical = e.logical;
                    v[at].physical = e.physical;
                    v[at].len += e.len;
                    path.last_mut().expect("leaf").1 = at;
                    self.after_insert(&path, merge, blocks);
                    return;
                }
            }
            if n >= self.cap_of(leaf) {
                // The next leaf may have room for an extent past this one.
                let last = match self.node(leaf) {
                    Node::Leaf(v) => v.last().map_or(0, |x| x.logical),
                    Node::Index(_) => unreachable!(),
                };
                if e.logical > last {
                    if let Some(next) = self.next_leaf_key(&path) {
                        let npath = self.find(next);
                        let nleaf = npath.last().expect("leaf").0;
                        if self.len_of(nleaf) < self.cap {
                            let mut npath = npath;
                            npath.last_mut().expect("leaf").1 = 0;
                            self.leaf(nleaf).insert(0, e);
                            self.after_insert(&npath, merge, blocks);
                            return;
                        }
                    }
                }
                self.create_new_leaf(&path, e, blocks);
                continue;
            }
            let v = self.leaf(leaf);
            if !v.is_empty() && e.logical > v[pos].logical {
                pos += 1;
            }
            v.insert(pos, e);
            path.last_mut().expect("leaf").1 = pos;
            self.after_insert(&path, merge, blocks);
            return;
        }
    }

    /// Merges around the inserted entry, keys, and the move back into the
    /// inode.
    fn after_insert(&mut self, path: &Path, merge: Merge, blocks: &mut dyn TreeBlocks) {
        let (leaf, pos) = *path.last().expect("leaf");
        if merge == Merge::Yes {
            let v = self.leaf(leaf);
            let merged = pos > 0 && merge_right(v, pos - 1);
            if !merged {
                merge_right(v, pos.min(v.len() - 1));
            }
        }
        self.correct_keys(path);
        if merge == Merge::Yes {
            self.merge_up(blocks);
        }
    }

    /// The first logical block of the leaf after this path's, if any
    /// (`ext4_ext_next_leaf_block`).
    fn next_leaf_key(&self, path: &Path) -> Option<u64> {
        for d in (0..path.len() - 1).rev() {
            let (node, pos) = path[d];
            if let Node::Index(v) = self.node(node) {
                if pos + 1 < v.len() {
                    return Some(v[pos + 1].0);
                }
            }
        }
        None
    }

    /// `ext4_ext_create_new_leaf`: split below the lowest index with room,
    /// or grow the tree in depth first.
    fn create_new_leaf(&mut self, path: &Path, e: Ext, blocks: &mut dyn TreeBlocks) {
        let mut i = path.len() - 1;
        while i > 0 && self.len_of(path[i].0) >= self.cap_of(path[i].0) {
            i -= 1;
        }
        if self.len_of(path[i].0) < self.cap_of(path[i].0) && i < path.len() - 1 {
            self.split(path, e, i, blocks);
        } else {
            self.grow(blocks);
        }
    }

    /// `ext4_ext_grow_indepth`: the root's entries move to a new block.
    fn grow(&mut self, blocks: &mut dyn TreeBlocks) {
        // Out of the inode: the file's goal; again: just before the old
        // top node.
        let goal = match self.node(0) {
            Node::Index(v) => v
                .first()
                .and_then(|&(_, child)| self.nodes[child].as_ref().and_then(|n| n.1))
                .filter(|&b| b > 0)
                .map_or(TreeGoal::Home, |b| TreeGoal::TryFirst(b - 1)),
            Node::Leaf(_) => TreeGoal::Home,
        };
        let block = blocks.alloc(goal);
        let root = std::mem::replace(self.node_mut(0), Node::Index(Vec::new()));
        let key = match &root {
            Node::Leaf(v) => v.first().map_or(0, |x| x.logical),
            Node::Index(v) => v.first().map_or(0, |x| x.0),
        };
        let child = self.add(root, block);
        *self.node_mut(0) = Node::Index(vec![(key, child)]);
        self.depth += 1;
    }

    /// `ext4_ext_split` below index level `at`: the entries after the
    /// insertion point move to new nodes, one per level below `at`.
    fn split(&mut self, path: &Path, e: Ext, at: usize, blocks: &mut dyn TreeBlocks) {
        let depth = path.len() - 1;
        let (leaf, pos) = path[depth];
        let goal = self.find_goal(leaf, pos, e.logical);
        let new_blocks: Vec<Option<u64>> = (0..depth - at).map(|_| blocks.alloc(goal)).collect();
        let (moved, border) = {
            let v = self.leaf(leaf);
            if pos + 1 < v.len() {
                let border = v[pos + 1].logical;
                (v.split_off(pos + 1), border)
            } else {
                (Vec::new(), e.logical)
            }
        };
        let mut child = self.add(Node::Leaf(moved), new_blocks[depth - at - 1]);
        for d in (at + 1..depth).rev() {
            let (node, p) = path[d];
            let tail = match self.node_mut(node) {
                Node::Index(v) => v.split_off(p + 1),
                Node::Leaf(_) => unreachable!(),
            };
            let mut entries = vec![(border, child)];
            entries.extend(tail);
            child = self.add(Node::Index(entries), new_blocks[d - at - 1]);
        }
        let (node, p) = path[at];
        if let Node::Index(v) = self.node_mut(node) {
            v.insert(p + 1, (border, child));
        }
    }

    /// `ext4_ext_find_goal`: where the extent at `pos` of `leaf` would put
    /// logical block `l`; the leaf's own block for an empty leaf.
    fn find_goal(&self, leaf: usize, pos: usize, l: u64) -> TreeGoal {
        match self.node(leaf) {
            Node::Leaf(v) => match v.get(pos) {
                Some(x) if l >= x.logical => TreeGoal::Near(x.physical + (l - x.logical)),
                Some(x) => x.physical.checked_sub(x.logical - l).map_or(TreeGoal::Home, TreeGoal::Near),
                None => self.nodes[leaf].as_ref().and_then(|n| n.1).map_or(TreeGoal::Home, TreeGoal::Near),
            },
            Node::Index(_) => TreeGoal::Home,
        }
    }

    /// `ext4_ext_try_to_merge_up`: a depth-1 tree with one leaf that fits
    /// the inode moves back into it.
    fn merge_up(&mut self, blocks: &mut dyn TreeBlocks) {
        if self.depth != 1 {
            return;
        }
        let child = match self.node(0) {
            Node::Index(v) if v.len() == 1 => v[0].1,
            _ => return,
        };
        if self.len_of(child) > ROOT_CAP {
            return;
        }
        let leaf = std::mem::replace(self.node_mut(child), Node::Leaf(Vec::new()));
        *self.node_mut(0) = leaf;
        self.depth = 0;
        self.drop_node(child, blocks);
    }

    /// Map `[logical, +len)` at `physical` (new blocks of a file).
    pub(crate) fn map(
        &mut self,
        logical: u64,
        physical: u64,
        len: u32,
        state: ExtentState,
        merge: Merge,
        blocks: &mut dyn TreeBlocks,
    ) {
        let unwritten = state == ExtentState::Unwritten;
        let mut at = 0;
        // One entry holds at most one extent's worth.
        while at < len {
            let max = if unwritten { MAX_UNWRITTEN_LEN } else { MAX_WRITTEN_LEN };
            let n = (len - at).min(max);
            let e = Ext { logical: logical + u64::from(at), physical: physical + u64::from(at), len: n, unwritten };
            self.insert(e, merge, blocks);
            at += n;
        }
    }

    /// The entry containing `l`, by position: `(leaf path, index)`.
    fn entry_at(&self, l: u64) -> Option<(Path, Ext)> {
        let path = self.find(l);
        let (leaf, pos) = *path.last()?;
        match self.node(leaf) {
            Node::Leaf(v) => v.get(pos).filter(|x| x.logical <= l && l < x.end()).map(|x| (path.clone(), *x)),
            Node::Index(_) => None,
        }
    }

    /// Split the entry containing `at` into `[.., at)` and `[at, ..)`
    /// (`ext4_split_extent_at`): the right part is inserted as a new entry,
    /// never merged.
    fn split_at(&mut self, at: u64, blocks: &mut dyn TreeBlocks) {
        let Some((path, x)) = self.entry_at(at) else { return };
        if x.logical == at {
            return;
        }
        let (leaf, pos) = *path.last().expect("leaf");
        let left = (at - x.logical) as u32;
        self.leaf(leaf)[pos].len = left;
        let right =
            Ext { logical: at, physical: x.physical + u64::from(left), len: x.len - left, unwritten: x.unwritten };
        self.insert(right, Merge::BeforeIo, blocks);
    }

    /// Unmap `[first, end)` (`ext4_ext_remove_space`): an extent that
    /// runs past `end` is split there first; leaves and index blocks the
    /// removal empties are freed; an empty tree is depth 0 again.
    pub(crate) fn remove(&mut self, first: u64, end: u64, blocks: &mut dyn TreeBlocks) {
        if first >= end {
            return;
        }
        self.split_at(end, blocks);
        // Right to left, as ext4 walks: removing a leaf's index entry
        // leaves the paths of the leaves to its left as they were.
        for path in self.leaf_paths().into_iter().rev() {
            let (leaf, _) = *path.last().expect("leaf");
            let v = self.leaf(leaf);
            if v.last().is_some_and(|x| x.end() <= first) {
                break;
            }
            let had = v.len();
            let first_before = v.first().map(|x| x.logical);
            v.retain_mut(|x| {
                if x.end() <= first || x.logical >= end {
                    true
                } else if x.logical < first {
                    x.len = (first - x.logical) as u32;
                    true
                } else {
                    false
                }
            });
            let emptied = v.is_empty() && had > 0;
            let first_changed = v.first().map(|x| x.logical) != first_before;
            if emptied && self.depth > 0 {
                self.remove_leaf(&path, blocks);
            } else if first_changed {
                self.correct_keys(&path);
            }
        }
        if self.depth > 0 && self.len_of(0) == 0 {
            *self.node_mut(0) = Node::Leaf(Vec::new());
            self.depth = 0;
        }
    }

    /// Every leaf's path, in logical order.
    fn leaf_paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        let mut stack: Vec<Path> = vec![vec![(0, 0)]];
        while let Some(path) = stack.pop() {
            let (node, _) = *path.last().expect("non-empty");
            match self.node(node) {
                Node::Leaf(_) => out.push(path),
                Node::Index(v) => {
                    for (k, &(_, child)) in v.iter().enumerate().rev() {
                        let mut p = path.clone();
                        p.last_mut().expect("non-empty").1 = k;
                        p.push((child, 0));
                        stack.push(p);
                    }
                }
            }
        }
        out
    }

    /// Free an emptied leaf and every index node its removal empties
    /// (`ext4_ext_rm_idx`).
    fn remove_leaf(&mut self, path: &Path, blocks: &mut dyn TreeBlocks) {
        let mut d = path.len() - 1;
        loop {
            let (node, _) = path[d];
            if node == 0 {
                return;
            }
            self.drop_node(node, blocks);
            let (parent, pos) = path[d - 1];
            let now_empty = match self.node_mut(parent) {
                Node::Index(v) => {
                    v.remove(pos);
                    v.is_empty()
                }
                Node::Leaf(_) => unreachable!(),
            };
            if !now_empty || parent == 0 {
                return;
            }
            d -= 1;
        }
    }
}

/// `ext4_ext_try_to_merge_right` from entry `i`; whether anything merged.
fn merge_right(v: &mut Vec<Ext>, i: usize) -> bool {
    let mut merged = false;
    while i + 1 < v.len() && mergeable(&v[i], &v[i + 1]) {
        v[i].len += v[i + 1].len;
        v.remove(i + 1);
        merged = true;
    }
    merged
}

mod convert;
#[cfg(test)]
mod tests;
