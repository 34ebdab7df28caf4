//! Metadata mutations for testing the checks: find every structure a
//! volume holds, change a byte of one, and, if asked, make every checksum
//! that covers it valid again — what a bad disk or a hostile image can
//! hand a mount that checksums alone would not catch. The mutation sweep
//! and the fuzz target are built on it; [`crate::fault`] and
//! [`crate::crash`] are its siblings for device errors and power loss.
//!
//! ```
//! use mballoc_vol::mutate::{mutate, structures, Seal};
//! use mballoc_vol::{check, FormatOptions, MemDevice, Repair, Volume};
//! use std::sync::Arc;
//!
//! let dev = Arc::new(MemDevice::new(4 << 20));
//! let opts = FormatOptions { block_size: 1024, ..FormatOptions::default() };
//! Volume::format(dev.clone(), &opts).unwrap();
//! let all = structures(&*dev).unwrap();
//! // The superblock's free-block count, changed and resealed: the
//! // checksum passes, the check still finds it.
//! mutate(&*dev, &all[0], 112, 0x01, Seal::Resealed).unwrap();
//! assert!(!check(&*dev, Repair::No).unwrap().is_clean());
//! ```

use crate::codec::{get16, get32, get64, put32};
use crate::device::Device;
use crate::error::{Result, VolError};
use crate::format::{Superblock, DESC_BYTES, INODE_BYTES, NODE_MAGIC, OVERFLOW_MAGIC, SUPERBLOCK_BYTES};
use crate::records::{self, Overflow};
use crate::wal;

pub mod fuzz;
pub mod rules;

/// What a structure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The superblock.
    Superblock,
    /// One group descriptor.
    Descriptor,
    /// One group's block bitmap (its checksum is in the descriptor).
    Bitmap,
    /// One inode record.
    Inode,
    /// An extent-tree node in the tree area.
    TreeNode,
    /// A block of an inode's attribute overflow chain.
    Attributes,
    /// A committed journal transaction awaiting replay.
    Transaction,
}

/// One structure on the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Structure {
    /// What it is.
    pub kind: Kind,
    /// Its first byte on the device.
    pub offset: u64,
    /// Its length in bytes.
    pub len: usize,
    /// The inodes whose own records it is: an inode record's inode, a
    /// tree node's or attribute block's owner, every inode a transaction
    /// changes. Empty for volume-wide structures.
    pub owners: Vec<u64>,
}

/// Whether checksums are made valid again after the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// Left as they were: the change is damage a checksum finds.
    Raw,
    /// Recomputed, with every checksum that covers the structure: the
    /// change passes every checksum and only the checks find it.
    Resealed,
}

fn superblock(dev: &dyn Device) -> Result<Superblock> {
    let head = crate::format::read_superblock(dev)?;
    Superblock::decode(&head, dev.len())
}

fn read(dev: &dyn Device, at: u64, len: usize) -> Result<Vec<u8>> {
    let mut b = vec![0u8; len];
    dev.read_at(at, &mut b).map_err(|e| VolError::io(format!("reading byte {at}"), e))?;
    Ok(b)
}

fn write(dev: &dyn Device, at: u64, b: &[u8]) -> Result<()> {
    dev.write_at(at, b).map_err(|e| VolError::io(format!("writing byte {at}"), e))
}

/// Every structure in use on `dev`: the superblock, each descriptor and
/// bitmap, each inode record in use, each tree-area block that passes its
/// checksum, and each transaction the next mount would replay.
pub fn structures(dev: &dyn Device) -> Result<Vec<Structure>> {
    let sb = superblock(dev)?;
    let bs = sb.block_size as usize;
    let seed = sb.seed();
    let mut out = vec![Structure { kind: Kind::Superblock, offset: 0, len: SUPERBLOCK_BYTES, owners: vec![] }];
    for g in 0..u64::from(sb.groups) {
        let offset = sb.offset(sb.desc_start) + g * DESC_BYTES as u64;
        out.push(Structure { kind: Kind::Descriptor, offset, len: DESC_BYTES, owners: vec![] });
        let offset = sb.offset(sb.bitmap_start + g);
        out.push(Structure { kind: Kind::Bitmap, offset, len: bs, owners: vec![] });
    }
    for slot in 0..u64::from(sb.inode_count) {
        let offset = slot_offset(&sb, slot);
        let b = read(dev, offset, INODE_BYTES)?;
        if b.iter().any(|&x| x != 0) {
            let owners = vec![get64(&b, 8)];
            out.push(Structure { kind: Kind::Inode, offset, len: INODE_BYTES, owners });
        }
    }
    for block in sb.tree_start..sb.tree_start + u64::from(sb.tree_blocks) {
        let offset = sb.offset(block);
        let b = read(dev, offset, bs)?;
        let kind = match get16(&b, 0) {
            NODE_MAGIC if get32(&b, 12) == records::node_crc(seed, block, &b) => Kind::TreeNode,
            OVERFLOW_MAGIC if Overflow::decode(seed, block, &b, get32(&b, 4)).is_ok() => Kind::Attributes,
            _ => continue,
        };
        // A node keeps its owner at byte 8, an attribute block at byte 4.
        let owner = get32(&b, if kind == Kind::TreeNode { 8 } else { 4 });
        out.push(Structure { kind, offset, len: bs, owners: vec![u64::from(owner)] });
    }
    for tx in wal::scan(dev, &sb)?.found {
        let mut owners: Vec<u64> = tx.changes.iter().map(wal::Record::ino).collect();
        owners.sort_unstable();
        owners.dedup();
        let offset = sb.offset(sb.log_start + tx.at);
        out.push(Structure { kind: Kind::Transaction, offset, len: tx.blocks as usize * bs, owners });
    }
    Ok(out)
}

/// XOR byte `at` of `s` with `xor` (not 0), then, with [`Seal::Resealed`],
/// recompute every checksum that covers it: the structure's own, and for
/// a bitmap its descriptor's, for an inode's attributes or an attribute
/// block the attribute string's in the inode record.
pub fn mutate(dev: &dyn Device, s: &Structure, at: usize, xor: u8, seal: Seal) -> Result<()> {
    if at >= s.len || xor == 0 {
        return Err(VolError::InvalidArgument(format!("byte {at} of {} by {xor:#x}", s.len)));
    }
    let mut b = read(dev, s.offset, s.len)?;
    b[at] ^= xor;
    write(dev, s.offset, &b)?;
    if seal == Seal::Raw {
        return Ok(());
    }
    // The superblock as it was: a resealed change to it must not move
    // where the others are found.
    let sb = superblock(dev).or_else(|_| {
        let mut old = b.clone();
        old[at] ^= xor;
        Superblock::decode(&old, dev.len())
    });
    match s.kind {
        Kind::Superblock => {
            let crc = crc32c::crc32c(&b[..SUPERBLOCK_BYTES - 4]);
            put32(&mut b, SUPERBLOCK_BYTES - 4, crc);
            write(dev, 0, &b)
        }
        Kind::Descriptor => {
            let sb = sb?;
            let g = ((s.offset - sb.offset(sb.desc_start)) / DESC_BYTES as u64) as u32;
            reseal_descriptor(&sb, g, &mut b);
            write(dev, s.offset, &b)
        }
        Kind::Bitmap => {
            let sb = sb?;
            let g = (s.offset / u64::from(sb.block_size) - sb.bitmap_start) as u32;
            let at = sb.offset(sb.desc_start) + u64::from(g) * DESC_BYTES as u64;
            let mut d = read(dev, at, DESC_BYTES)?;
            put32(&mut d, 4, records::bitmap_crc(sb.seed(), g, &b));
            reseal_descriptor(&sb, g, &mut d);
            write(dev, at, &d)
        }
        Kind::Inode => {
            let sb = sb?;
            reseal_inode(dev, &sb, s.offset, b)
        }
        Kind::TreeNode | Kind::Attributes => {
            let sb = sb?;
            let block = s.offset / u64::from(sb.block_size);
            let seed = sb.seed();
            if s.kind == Kind::TreeNode {
                let crc = records::node_crc(seed, block, &b);
                put32(&mut b, 12, crc);
                return write(dev, s.offset, &b);
            }
            let crc = records::overflow_crc(seed, block, &b);
            put32(&mut b, 16, crc);
            write(dev, s.offset, &b)?;
            // The attribute string's checksum is in its inode's record.
            let owner = u64::from(get32(&b, 4));
            for slot_at in inode_offsets(dev, &sb)? {
                let r = read(dev, slot_at, INODE_BYTES)?;
                if get64(&r, 8) == owner {
                    reseal_inode(dev, &sb, slot_at, r)?;
                }
            }
            Ok(())
        }
        Kind::Transaction => {
            let sb = sb?;
            let bs = sb.block_size as usize;
            let seed = sb.seed();
            let hcrc = crc32c::crc32c_append(seed, &b[..28]);
            put32(&mut b, 28, hcrc);
            let body = b.len() - bs;
            let crc = crc32c::crc32c_append(seed, &b[..body]);
            put32(&mut b[body..], 24, crc);
            let ccrc = crc32c::crc32c_append(seed, &b[body..body + 28]);
            put32(&mut b[body..], 28, ccrc);
            write(dev, s.offset, &b)
        }
    }
}

fn reseal_descriptor(sb: &Superblock, g: u32, d: &mut [u8]) {
    let crc = records::desc_crc(sb.seed(), g, d);
    put32(d, DESC_BYTES - 4, crc);
}

/// Where inode slot `slot`'s record starts on the device.
fn slot_offset(sb: &Superblock, slot: u64) -> u64 {
    let per = u64::from(sb.inodes_per_block());
    sb.offset(sb.itable_start + slot / per) + (slot % per) * INODE_BYTES as u64
}

fn inode_offsets(dev: &dyn Device, sb: &Superblock) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for slot in 0..u64::from(sb.inode_count) {
        let at = slot_offset(sb, slot);
        if read(dev, at, 8)?.iter().any(|&x| x != 0) {
            out.push(at);
        }
    }
    Ok(out)
}

/// Recompute the attribute string's checksum (from the record's inline
/// bytes and its overflow chain as stored) and the record's own.
fn reseal_inode(dev: &dyn Device, sb: &Superblock, at: u64, mut r: Vec<u8>) -> Result<()> {
    // Records never straddle blocks, so the byte offset into the table
    // counts slots directly.
    let slot = ((at - sb.offset(sb.itable_start)) / INODE_BYTES as u64) as u32;
    let len = get32(&r, 24) as usize;
    if len > 0 && len <= crate::limits::MAX_ATTR_BYTES {
        let mut all = r[records::INLINE_AT..records::INLINE_AT + len.min(crate::attr::ATTR_INLINE)].to_vec();
        let mut next = get64(&r, records::OVERFLOW_AT);
        let mut hops = 0;
        while next != 0 && next < sb.total_blocks && hops < 8 && all.len() < len {
            let b = read(dev, sb.offset(next), sb.block_size as usize)?;
            let n = (get32(&b, 20) as usize).min(Overflow::capacity(b.len()));
            all.extend_from_slice(&b[crate::format::OVERFLOW_HEADER..crate::format::OVERFLOW_HEADER + n]);
            next = get64(&b, 8);
            hops += 1;
        }
        put32(&mut r, 28, crc32c::crc32c_append(sb.seed(), &all));
    }
    let crc = records::slot_crc(sb.seed(), slot, &r);
    put32(&mut r, INODE_BYTES - 4, crc);
    write(dev, at, &r)
}
