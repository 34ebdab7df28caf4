//! The records the home areas hold, each with a crc32c bound to its
//! location (group, slot or block) so a record copied to the wrong place
//! fails its check: group descriptors, inode records, extent-tree entries
//! and nodes, and attribute overflow blocks.

use crate::attr::{Attr, ATTR_INLINE};
use crate::codec::{get16, get32, get64, put16, put32, put64};
use crate::error::{Result, VolError};
use crate::format::{
    Extent, DESC_BYTES, ENTRY_BYTES, INODE_BYTES, INODE_MAGIC, MAX_DEPTH, MAX_ENTRY_LEN, MAX_LOGICAL, NODE_HEADER,
    NODE_MAGIC, OVERFLOW_HEADER, OVERFLOW_MAGIC, ROOT_ENTRIES,
};
use crate::limits::MAX_ATTR_BYTES;

/// One group's descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupDesc {
    /// Free blocks in the group.
    pub free: u32,
    /// crc32c of the group's bitmap block.
    pub bitmap_crc: u32,
}

impl GroupDesc {
    /// Write descriptor `g` into `out` (`DESC_BYTES`).
    pub fn encode(&self, seed: u32, g: u32, out: &mut [u8]) {
        out.fill(0);
        put32(out, 0, self.free);
        put32(out, 4, self.bitmap_crc);
        let crc = desc_crc(seed, g, out);
        put32(out, DESC_BYTES - 4, crc);
    }

    /// Parse descriptor `g`.
    pub fn decode(seed: u32, g: u32, b: &[u8], block: u64) -> Result<GroupDesc> {
        if get32(b, DESC_BYTES - 4) != desc_crc(seed, g, b) {
            return Err(VolError::Checksum { structure: "group descriptor", block });
        }
        Ok(GroupDesc { free: get32(b, 0), bitmap_crc: get32(b, 4) })
    }
}

pub(crate) fn desc_crc(seed: u32, g: u32, b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(seed, &g.to_le_bytes()), &b[..DESC_BYTES - 4])
}

/// A bitmap block's checksum.
pub fn bitmap_crc(seed: u32, g: u32, block: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(seed, &g.to_le_bytes()), block)
}

/// One entry of an extent tree: an extent in a leaf, a child in an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Leaf(Extent),
    Index { logical: u64, child: u64 },
}

impl Entry {
    fn logical(&self) -> u64 {
        match *self {
            Entry::Leaf(e) => e.logical,
            Entry::Index { logical, .. } => logical,
        }
    }

    fn encode(&self, out: &mut [u8]) {
        match *self {
            Entry::Leaf(e) => {
                debug_assert!(e.len > 0 && e.len <= MAX_ENTRY_LEN && e.logical_end() - 1 <= MAX_LOGICAL);
                put32(out, 0, e.logical as u32);
                put32(out, 4, e.len as u32 | if e.unwritten { 1 << 31 } else { 0 });
                put64(out, 8, e.physical);
            }
            Entry::Index { logical, child } => {
                put32(out, 0, logical as u32);
                put32(out, 4, 0);
                put64(out, 8, child);
            }
        }
    }

    fn decode(b: &[u8], leaf: bool) -> Entry {
        let logical = u64::from(get32(b, 0));
        if leaf {
            let lf = get32(b, 4);
            Entry::Leaf(Extent {
                logical,
                len: u64::from(lf & !(1 << 31)),
                unwritten: lf & (1 << 31) != 0,
                physical: get64(b, 8),
            })
        } else {
            Entry::Index { logical, child: get64(b, 8) }
        }
    }
}

/// An inode record: a file's number, size and the root of its extent
/// tree, then its attributes: their first [`ATTR_INLINE`] bytes here, the
/// rest in a chain of overflow blocks starting at `overflow`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeRecord {
    pub ino: u64,
    pub size: u64,
    /// 0: `root` holds extents; otherwise index entries to nodes of
    /// depth `depth - 1`.
    pub depth: u16,
    pub root: Vec<Entry>,
    pub attr: Option<Attr>,
    /// The first overflow block (0: the attributes fit the record).
    pub overflow: u64,
}

/// What an inode record says of attributes too long for it: their
/// length, checksum and first bytes; the rest is in its overflow chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrHead {
    pub len: usize,
    pub crc: u32,
    pub inline: Vec<u8>,
}

impl AttrHead {
    /// The whole attribute string from its overflow payloads, checked.
    pub fn finish(&self, seed: u32, rest: &[u8]) -> std::result::Result<Attr, String> {
        let mut all = self.inline.clone();
        all.extend_from_slice(rest);
        if all.len() != self.len || crc32c::crc32c_append(seed, &all) != self.crc {
            return Err(format!("attributes of {} bytes do not match their checksum", all.len()));
        }
        Attr::decode(&all)
    }
}

impl InodeRecord {
    /// Write the record for inode slot `slot` into `out` (`INODE_BYTES`).
    pub fn encode(&self, seed: u32, slot: u32, out: &mut [u8]) {
        assert!(self.root.len() <= ROOT_ENTRIES, "an inode holds at most {ROOT_ENTRIES} root entries");
        out.fill(0);
        put32(out, 0, INODE_MAGIC);
        put16(out, 4, self.depth);
        put16(out, 6, self.root.len() as u16);
        put64(out, 8, self.ino);
        put64(out, 16, self.size);
        for (i, e) in self.root.iter().enumerate() {
            e.encode(&mut out[32 + i * ENTRY_BYTES..32 + (i + 1) * ENTRY_BYTES]);
        }
        if let Some(a) = &self.attr {
            let b = a.encode();
            assert_eq!(b.len() > ATTR_INLINE, self.overflow != 0, "overflow blocks go with long attributes");
            put32(out, 24, b.len() as u32);
            put32(out, 28, crc32c::crc32c_append(seed, &b));
            put64(out, OVERFLOW_AT, self.overflow);
            let n = b.len().min(ATTR_INLINE);
            out[INLINE_AT..INLINE_AT + n].copy_from_slice(&b[..n]);
        }
        let crc = slot_crc(seed, slot, out);
        put32(out, INODE_BYTES - 4, crc);
    }

    /// Parse slot `slot`: `None` for a free (all-zero) slot. Attributes
    /// longer than the record come back as an [`AttrHead`] to finish from
    /// the overflow chain.
    pub fn decode(seed: u32, slot: u32, b: &[u8], block: u64) -> Result<Option<(InodeRecord, Option<AttrHead>)>> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if get32(b, INODE_BYTES - 4) != slot_crc(seed, slot, b) {
            return Err(VolError::Checksum { structure: "inode", block });
        }
        let bad = |d: String| Err(VolError::corrupt("inode", block, format!("slot {slot}: {d}")));
        if get32(b, 0) != INODE_MAGIC {
            return bad("bad magic".into());
        }
        let depth = get16(b, 4);
        let n = get16(b, 6) as usize;
        if depth > MAX_DEPTH || n > ROOT_ENTRIES {
            return bad(format!("depth {depth}, {n} root entries"));
        }
        let ino = get64(b, 8);
        if ino == 0 || ino > u64::from(u32::MAX) {
            return bad(format!("inode number {ino}"));
        }
        let root = (0..n).map(|i| Entry::decode(&b[32 + i * ENTRY_BYTES..], depth == 0)).collect();
        let (len, crc, overflow) = (get32(b, 24) as usize, get32(b, 28), get64(b, OVERFLOW_AT));
        let mut rec = InodeRecord { ino, size: get64(b, 16), depth, root, attr: None, overflow };
        if len > MAX_ATTR_BYTES || (len > ATTR_INLINE) != (overflow != 0) {
            return bad(format!("attributes of {len} bytes, overflow block {overflow}"));
        }
        if len == 0 {
            return Ok(Some((rec, None)));
        }
        let head = AttrHead { len, crc, inline: b[INLINE_AT..INLINE_AT + len.min(ATTR_INLINE)].to_vec() };
        if len > ATTR_INLINE {
            return Ok(Some((rec, Some(head))));
        }
        match head.finish(seed, &[]) {
            Ok(a) => rec.attr = Some(a),
            Err(d) => return bad(d),
        }
        Ok(Some((rec, None)))
    }
}

/// Where an inode record keeps its first overflow block.
pub(crate) const OVERFLOW_AT: usize = 240;
/// Where an inode record's attribute bytes start.
pub(crate) const INLINE_AT: usize = 248;

/// One block of an inode's attribute overflow chain, in the tree area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    pub owner: u32,
    /// The next block of the chain (0: the last).
    pub next: u64,
    pub payload: Vec<u8>,
}

impl Overflow {
    /// Payload bytes one block holds.
    pub fn capacity(block_size: usize) -> usize {
        block_size - OVERFLOW_HEADER
    }

    /// The block as stored at `block`.
    pub fn encode(&self, seed: u32, block: u64, block_size: usize) -> Vec<u8> {
        assert!(self.payload.len() <= Overflow::capacity(block_size) && !self.payload.is_empty());
        let mut b = vec![0u8; block_size];
        put16(&mut b, 0, OVERFLOW_MAGIC);
        put32(&mut b, 4, self.owner);
        put64(&mut b, 8, self.next);
        put32(&mut b, 20, self.payload.len() as u32);
        b[OVERFLOW_HEADER..OVERFLOW_HEADER + self.payload.len()].copy_from_slice(&self.payload);
        let crc = overflow_crc(seed, block, &b);
        put32(&mut b, 16, crc);
        b
    }

    /// Parse the overflow block at `block`, owned by `owner`.
    pub fn decode(seed: u32, block: u64, b: &[u8], owner: u32) -> Result<Overflow> {
        let bad = |d: String| Err(VolError::corrupt("attribute block", block, d));
        if get16(b, 0) != OVERFLOW_MAGIC {
            return bad("bad magic".into());
        }
        if get32(b, 16) != overflow_crc(seed, block, b) {
            return Err(VolError::Checksum { structure: "attribute block", block });
        }
        let len = get32(b, 20) as usize;
        if len == 0 || len > Overflow::capacity(b.len()) || get32(b, 4) != owner {
            return bad(format!("{len} bytes, owner {}, expected {owner}", get32(b, 4)));
        }
        Ok(Overflow { owner, next: get64(b, 8), payload: b[OVERFLOW_HEADER..OVERFLOW_HEADER + len].to_vec() })
    }
}

pub(crate) fn overflow_crc(seed: u32, block: u64, b: &[u8]) -> u32 {
    let c = crc32c::crc32c_append(seed, &block.to_le_bytes());
    let c = crc32c::crc32c_append(c, &b[..16]);
    crc32c::crc32c_append(c, &b[20..])
}

pub(crate) fn slot_crc(seed: u32, slot: u32, b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(seed, &slot.to_le_bytes()), &b[..INODE_BYTES - 4])
}

/// An extent-tree node block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub depth: u16,
    pub owner: u32,
    pub entries: Vec<Entry>,
}

impl Node {
    /// The node as stored at `block`.
    pub fn encode(&self, seed: u32, block: u64, block_size: usize) -> Vec<u8> {
        let max = (block_size - NODE_HEADER) / ENTRY_BYTES;
        assert!(self.entries.len() <= max, "a node holds at most {max} entries");
        let mut b = vec![0u8; block_size];
        put16(&mut b, 0, NODE_MAGIC);
        put16(&mut b, 2, self.entries.len() as u16);
        put16(&mut b, 4, max as u16);
        put16(&mut b, 6, self.depth);
        put32(&mut b, 8, self.owner);
        for (i, e) in self.entries.iter().enumerate() {
            e.encode(&mut b[NODE_HEADER + i * ENTRY_BYTES..]);
        }
        let crc = node_crc(seed, block, &b);
        put32(&mut b, 12, crc);
        b
    }

    /// Parse the node at `block`, expected at `depth` and owned by `owner`.
    pub fn decode(seed: u32, block: u64, b: &[u8], depth: u16, owner: u32) -> Result<Node> {
        let bad = |d: String| Err(VolError::corrupt("extent node", block, d));
        if get16(b, 0) != NODE_MAGIC {
            return bad("bad magic".into());
        }
        if get32(b, 12) != node_crc(seed, block, b) {
            return Err(VolError::Checksum { structure: "extent node", block });
        }
        let (n, max) = (get16(b, 2) as usize, get16(b, 4) as usize);
        if max != (b.len() - NODE_HEADER) / ENTRY_BYTES || n > max || n == 0 {
            return bad(format!("{n} entries of {max}"));
        }
        if get16(b, 6) != depth || get32(b, 8) != owner {
            return bad(format!("depth {} owner {}, expected {depth} and {owner}", get16(b, 6), get32(b, 8)));
        }
        let entries = (0..n).map(|i| Entry::decode(&b[NODE_HEADER + i * ENTRY_BYTES..], depth == 0)).collect();
        Ok(Node { depth, owner, entries })
    }
}

pub(crate) fn node_crc(seed: u32, block: u64, b: &[u8]) -> u32 {
    let c = crc32c::crc32c_append(seed, &block.to_le_bytes());
    let c = crc32c::crc32c_append(c, &b[..12]);
    crc32c::crc32c_append(c, &b[16..])
}

/// Check that entries are in ascending logical order, each inside
/// `[lo, hi)`, and (for leaves) do not overlap.
pub fn check_order(entries: &[Entry], lo: u64, hi: u64, block: u64) -> Result<()> {
    let mut at = lo;
    for (i, e) in entries.iter().enumerate() {
        let l = e.logical();
        let end = match e {
            Entry::Leaf(x) => {
                if x.len == 0 {
                    return Err(VolError::corrupt("extent tree", block, format!("zero-length extent at {l}")));
                }
                x.logical_end()
            }
            Entry::Index { .. } => l + 1,
        };
        let ordered = if i == 0 { l >= lo } else { l >= at };
        if !ordered || end > hi {
            return Err(VolError::corrupt("extent tree", block, format!("entry at logical {l} out of order")));
        }
        at = match e {
            Entry::Leaf(_) => end,
            Entry::Index { .. } => l + 1,
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_and_node_round_trip() {
        let e = Extent { logical: 5, physical: 900, len: 3, unwritten: true };
        let link = crate::attr::Link { parent: 1, name: b"data".to_vec() };
        let attr = Attr { mode: 0o100_600, links: vec![link], ..Attr::default() };
        let rec = InodeRecord {
            ino: 12,
            size: 4096 * 8,
            depth: 0,
            root: vec![Entry::Leaf(e)],
            attr: Some(attr),
            overflow: 0,
        };
        let mut b = vec![0u8; INODE_BYTES];
        rec.encode(1, 3, &mut b);
        assert_eq!(InodeRecord::decode(1, 3, &b, 9).unwrap(), Some((rec.clone(), None)));
        assert!(InodeRecord::decode(1, 4, &b, 9).is_err(), "bound to its slot");

        // Attributes longer than the record: the head here, the rest in
        // overflow blocks.
        let mut long = rec.attr.clone().unwrap();
        long.xattrs.insert(b"user.big".to_vec(), vec![7; 900]);
        let bytes = long.encode();
        let big = InodeRecord { attr: Some(long.clone()), overflow: 500, ..rec };
        big.encode(1, 3, &mut b);
        let (got, head) = InodeRecord::decode(1, 3, &b, 9).unwrap().unwrap();
        assert_eq!((got.attr, got.overflow), (None, 500));
        let head = head.expect("too long for the record");
        let ov = Overflow { owner: 12, next: 0, payload: bytes[ATTR_INLINE..].to_vec() };
        let ob = ov.encode(1, 500, 1024);
        assert_eq!(Overflow::decode(1, 500, &ob, 12).unwrap(), ov);
        assert!(Overflow::decode(1, 501, &ob, 12).is_err(), "bound to its block");
        assert!(Overflow::decode(1, 500, &ob, 13).is_err(), "bound to its owner");
        assert_eq!(head.finish(1, &ov.payload).unwrap(), long);
        assert!(head.finish(1, &ov.payload[1..]).is_err(), "checked whole");
        let node = Node { depth: 0, owner: 12, entries: vec![Entry::Leaf(e)] };
        let nb = node.encode(1, 77, 1024);
        assert_eq!(Node::decode(1, 77, &nb, 0, 12).unwrap(), node);
        assert!(Node::decode(1, 78, &nb, 0, 12).is_err(), "bound to its block");
    }
}
