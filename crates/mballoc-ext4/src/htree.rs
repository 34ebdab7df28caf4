//! An indexed directory's hash index, as the kernel's lookup follows it:
//! the root (logical block 0) and its interior nodes map ranges of name
//! hashes to leaf blocks. A name stored in a leaf the index does not lead
//! its hash to is listed by readdir but cannot be looked up: the kernel
//! answers ENOENT (or EUCLEAN) for it. [`HashIndex::leads_to`] asks that
//! question for each name.
//!
//! Only half-MD4 (mke2fs's default, signed or unsigned as the volume's
//! flags say) is computed; an index of another hash is not checked.

use crate::bytes::{le16, le32};
use crate::directory::DirAt;
use crate::error::{Ext4Error, Result};
use crate::mapping::Ext4Extent;
use crate::source::BlockSource;
use crate::volume::Ext4Volume;
use mballoc_fs::HashChars;

/// `s_flags` bit: names hash as unsigned bytes.
const UNSIGNED_HASH: u32 = 0x2;
/// dx_root_info's hash version for half-MD4.
const HALF_MD4: u8 = 1;
/// Interior levels the kernel follows (3 with largedir).
const MAX_LEVELS: u8 = 3;

/// The leaves of one indexed directory: `(lowest hash, logical block)`
/// in index order, and how names hash.
#[derive(Debug)]
pub(crate) struct HashIndex {
    leaves: Vec<(u32, u64)>,
    seed: [u32; 4],
    chars: HashChars,
}

impl HashIndex {
    /// The logical leaf blocks the kernel's lookup of `name` reads: the
    /// leaf whose range holds the name's hash, then the next ones while
    /// their range starts at the same hash with the collision bit.
    pub(crate) fn leads_to(&self, name: &[u8], logical: u64) -> std::result::Result<(), String> {
        let h = mballoc_fs::half_md4(name, self.seed, self.chars);
        // As the kernel's probe: the last entry whose stored hash (the
        // collision bit included) is not above the name's.
        let i = self.leaves.partition_point(|&(lo, _)| lo <= h).saturating_sub(1);
        let mut reached = vec![self.leaves[i].1];
        for &(lo, block) in &self.leaves[i + 1..] {
            if lo & 1 == 0 || lo & !1 != h {
                break;
            }
            reached.push(block);
        }
        if reached.contains(&logical) {
            Ok(())
        } else {
            Err(format!(
                "its hash {h:#x} leads the directory's index to block {}, not to block {logical} that holds it: the kernel cannot look it up",
                reached[0]
            ))
        }
    }
}

impl<S: BlockSource> Ext4Volume<S> {
    /// The hash index of indexed directory `dir` (its blocks mapped by
    /// `extents`), or `None` where it is not checked (a hash other than
    /// half-MD4). Index blocks that do not parse are the error.
    pub(crate) fn hash_index(&self, dir: &DirAt, extents: &[Ext4Extent]) -> Result<Option<HashIndex>> {
        let physical = |logical: u64| {
            extents
                .iter()
                .find(|e| !e.unwritten && e.logical <= logical && logical < e.logical + u64::from(e.len))
                .map(|e| e.physical + (logical - e.logical))
        };
        let bad = |block: u64, reason: String| Ext4Error::Directory { ino: dir.ino, block, reason };
        let root_block = physical(0).ok_or_else(|| bad(0, "an indexed directory without its first block".into()))?;
        let root = self.read_block("directory index root", root_block)?;
        let (version, info_len, levels) = (root[28], usize::from(root[29]), root[30]);
        if version != HALF_MD4 {
            return Ok(None);
        }
        if levels >= MAX_LEVELS {
            return Err(bad(root_block, format!("an index of {} levels", levels + 1)));
        }
        let sb = self.superblock();
        let chars = if sb.flags & UNSIGNED_HASH != 0 { HashChars::Unsigned } else { HashChars::Signed };
        let mut leaves = Vec::new();
        // (block's bytes, where its entries start, levels below it, its block)
        let mut stack = vec![(root, 24 + info_len, levels, root_block, 0u32)];
        while let Some((raw, at, below, block, low)) = stack.pop() {
            if at + 8 > raw.len() {
                return Err(bad(block, "index entries past the block".into()));
            }
            let (limit, count) = (usize::from(le16(&raw, at)), usize::from(le16(&raw, at + 2)));
            if count == 0 || count > limit || at + limit * 8 > raw.len() {
                return Err(bad(block, format!("an index node with count {count}, limit {limit}")));
            }
            let mut children = Vec::with_capacity(count);
            for i in 0..count {
                let e = at + i * 8;
                let hash = if i == 0 { low } else { le32(&raw, e) };
                let logical = u64::from(le32(&raw, e + 4) & 0x0FFF_FFFF);
                children.push((hash, logical));
            }
            if below == 0 {
                leaves.extend(children);
                continue;
            }
            // Pushed in reverse so that they come off in index order.
            for &(hash, logical) in children.iter().rev() {
                let p = physical(logical)
                    .ok_or_else(|| bad(block, format!("an index entry names block {logical}, a hole")))?;
                let node = self.read_block("directory index node", p)?;
                stack.push((node, 8, below - 1, p, hash));
            }
        }
        Ok(Some(HashIndex { leaves, seed: sb.hash_seed, chars }))
    }
}
