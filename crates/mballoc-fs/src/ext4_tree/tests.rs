//! The tree's shape under appends, splits, removals and conversions.

use super::*;

/// Blocks numbered from 1000, a log of allocations and frees.
#[derive(Default)]
struct Log {
    next: u64,
    allocated: Vec<u64>,
    freed: Vec<u64>,
}

impl TreeBlocks for Log {
    fn alloc(&mut self, _: TreeGoal) -> Option<u64> {
        self.next += 1;
        self.allocated.push(1000 + self.next);
        Some(1000 + self.next)
    }
    fn free(&mut self, b: u64) {
        self.freed.push(b);
    }
}

#[test]
fn the_fifth_extent_grows_the_tree_and_a_full_leaf_splits() {
    let mut t = Ext4Tree::new(4096);
    let mut log = Log::default();
    // Discontiguous appends: one entry each.
    for i in 0..4 {
        t.map(i * 10, 5000 + i * 100, 5, ExtentState::Written, Merge::Yes, &mut log);
    }
    assert!(log.allocated.is_empty(), "four extents fit the inode");
    t.map(40, 9000, 5, ExtentState::Written, Merge::Yes, &mut log);
    assert_eq!(log.allocated.len(), 1, "the fifth grows the tree");
    assert_eq!(t.depth, 1);
    // A contiguous append merges: no new entry.
    t.map(45, 9005, 5, ExtentState::Written, Merge::Yes, &mut log);
    assert_eq!(t.entries(), 5);
    for i in 5..340 {
        t.map(i * 10, 20_000 + i * 100, 5, ExtentState::Written, Merge::Yes, &mut log);
    }
    assert_eq!(t.entries(), 340);
    assert_eq!(log.allocated.len(), 1);
    t.map(5000, 90_000, 1, ExtentState::Written, Merge::Yes, &mut log);
    assert_eq!(log.allocated.len(), 2, "an append to a full leaf gets a new leaf");
    // Truncating everything frees both leaves and resets the depth.
    t.remove(0, u64::MAX / 2, &mut log);
    assert_eq!((t.depth, t.entries()), (0, 0));
    assert_eq!(log.freed.len(), 2);
}

#[test]
fn a_punch_splits_and_a_write_into_unwritten_splits_then_merges_back() {
    let mut t = Ext4Tree::new(4096);
    let mut log = Log::default();
    t.map(0, 10_000, 1000, ExtentState::Unwritten, Merge::Yes, &mut log);
    // Writes in the middle: three entries each time, never merged
    // back into unwritten neighbours.
    let w = |t: &mut Ext4Tree, a, b, log: &mut Log| {
        t.split_for_write(a, b, log);
        t.written(a, b, log);
    };
    w(&mut t, 100, 110, &mut log);
    assert_eq!(t.entries(), 3);
    w(&mut t, 110, 120, &mut log);
    assert_eq!(t.entries(), 3, "the second write merges with the first");
    w(&mut t, 300, 310, &mut log);
    assert_eq!(t.entries(), 5);
    assert_eq!(log.allocated.len(), 1);
    // Writing the rest converts everything; the entries merge and the
    // leaf moves back into the inode.
    w(&mut t, 0, 1000, &mut log);
    assert_eq!((t.entries(), t.depth), (1, 0));
    assert_eq!(log.freed, log.allocated);
    // A punch in the middle of an extent splits it.
    t.remove(400, 500, &mut log);
    assert_eq!(t.entries(), 2);
}

#[test]
fn packed_trees_hold_their_extents_without_blocks_of_their_own() {
    let exts = (0..1000u64).map(|i| (i * 2, 50_000 + i * 3, 1u32, ExtentState::Written));
    let t = Ext4Tree::packed(4096, exts);
    assert_eq!(t.entries(), 1000);
    assert_eq!(t.depth, 1);
    assert_eq!(t.blocks().count(), 0);
}

/// The root's entries as `(logical, len, unwritten)`.
fn shape(t: &Ext4Tree) -> Vec<(u64, u32, bool)> {
    match t.node(0) {
        Node::Leaf(v) => v.iter().map(|x| (x.logical, x.len, x.unwritten)).collect(),
        Node::Index(_) => panic!("a depth-0 tree"),
    }
}

#[test]
fn without_dioread_nolock_written_blocks_move_into_a_neighbour_or_zero_out_around() {
    let mut log = Log::default();
    // An initialized extent followed by an unwritten one it continues: a
    // write at the unwritten one's start moves into the first.
    let mut t = Ext4Tree::new(4096);
    t.map(0, 1000, 10, ExtentState::Written, Merge::Yes, &mut log);
    t.map(10, 1010, 20, ExtentState::Unwritten, Merge::Yes, &mut log);
    t.convert_initialized((10, 12), 8, 100, &mut log);
    assert_eq!(shape(&t), vec![(0, 12, false), (12, 18, true)]);
    // A short unwritten extent inside the size: a write in its middle
    // zeroes the rest, and the whole extent is initialized.
    let mut t = Ext4Tree::new(4096);
    t.map(0, 2000, 6, ExtentState::Unwritten, Merge::Yes, &mut log);
    t.convert_initialized((2, 3), 8, 6, &mut log);
    assert_eq!(shape(&t), vec![(0, 6, false)]);
    // The same extent past the on-disk size is split in three.
    let mut t = Ext4Tree::new(4096);
    t.map(0, 2000, 6, ExtentState::Unwritten, Merge::Yes, &mut log);
    t.convert_initialized((2, 3), 8, 3, &mut log);
    assert_eq!(shape(&t), vec![(0, 2, true), (2, 1, false), (3, 3, true)]);
    // A long extent: the tail is zeroed only when it is short, the head
    // only when it and the write are.
    let mut t = Ext4Tree::new(4096);
    t.map(0, 3000, 100, ExtentState::Unwritten, Merge::Yes, &mut log);
    t.convert_initialized((94, 95), 8, 100, &mut log);
    assert_eq!(shape(&t), vec![(0, 94, true), (94, 6, false)]);
    t.convert_initialized((3, 4), 8, 100, &mut log);
    assert_eq!(shape(&t), vec![(0, 4, false), (4, 90, true), (94, 6, false)]);
    assert!(log.allocated.is_empty());
}
