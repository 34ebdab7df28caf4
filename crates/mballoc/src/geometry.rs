//! Volume geometry: block size, group size, group count, reserved blocks.
//!
//! Every length and offset the allocator deals in is a block (an allocation
//! unit: a cluster when the caller uses bigalloc-style clusters). A group holds
//! at most `8 × block_size` blocks because its bitmap is one block, and any
//! multiple of 8 up to that, as ext4's do: mkfs makes groups of 32,664 blocks
//! (`-g`, `-i`, `-N`, and some sizes), and the buddy, like ext4's, works on any
//! group length. A power-of-two group size keeps block → group a shift.

use crate::error::{Error, Result};

/// Largest number of groups a volume may have (the 2^32-block ext4 ceiling is
/// far above this; 2^24 groups keeps group numbers comfortably in `u32`).
pub const MAX_GROUPS: u64 = 1 << 24;

/// The shape of a volume. Cheap to copy.
///
/// ```
/// use mballoc::Geometry;
/// // 128 TiB at 4 KiB blocks: 2^20 groups of 32768 blocks.
/// let g = Geometry::new(4096, 1u64 << 35).unwrap();
/// assert_eq!(g.groups(), 1 << 20);
/// assert_eq!(g.num_orders(), 14);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    block_size_log2: u8,
    blocks_per_group: u32,
    /// `log2(blocks_per_group)` when it is a power of two (the usual
    /// case: block → group is then a shift, not a division).
    group_shift: Option<u8>,
    total_blocks: u64,
    groups: u32,
    reserved_per_group: u32,
}

impl Geometry {
    /// A volume of `total_blocks` blocks of `block_size` bytes, with the
    /// default group size of `8 × block_size` blocks.
    pub fn new(block_size: u32, total_blocks: u64) -> Result<Self> {
        block_size_log2(block_size)?;
        Self::with_group_size(block_size, 8 * block_size, total_blocks)
    }

    /// A volume with an explicit group size: a multiple of 8 (a whole
    /// byte of bitmap) from 8 to `8 × block_size`, as ext4 allows.
    pub fn with_group_size(block_size: u32, blocks_per_group: u32, total_blocks: u64) -> Result<Self> {
        let bits = block_size_log2(block_size)?;
        if !blocks_per_group.is_multiple_of(8) || blocks_per_group < 8 || blocks_per_group > 8 * block_size {
            return Err(Error::InvalidGeometry(format!(
                "blocks per group {blocks_per_group} must be a multiple of 8 in 8..={}",
                8 * block_size
            )));
        }
        if total_blocks == 0 {
            return Err(Error::InvalidGeometry("volume has no blocks".into()));
        }
        let groups = total_blocks.div_ceil(u64::from(blocks_per_group));
        if groups > MAX_GROUPS {
            return Err(Error::InvalidGeometry(format!("{groups} groups exceed the maximum of {MAX_GROUPS}")));
        }
        Ok(Geometry {
            block_size_log2: bits,
            blocks_per_group,
            group_shift: blocks_per_group.is_power_of_two().then(|| blocks_per_group.trailing_zeros() as u8),
            total_blocks,
            groups: groups as u32,
            reserved_per_group: 0,
        })
    }

    /// Declare the first `n` blocks of every group as metadata (bitmaps,
    /// inode tables): they are never handed out and can never be freed.
    pub fn with_reserved_per_group(mut self, n: u32) -> Result<Self> {
        if n >= self.last_group_len() || n >= self.blocks_per_group() {
            return Err(Error::InvalidGeometry(format!(
                "{n} reserved blocks per group leave a group with no free block"
            )));
        }
        self.reserved_per_group = n;
        Ok(self)
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        1 << self.block_size_log2
    }
    /// log2 of the block size.
    pub fn block_size_log2(&self) -> u32 {
        u32::from(self.block_size_log2)
    }
    /// Blocks in a full group.
    pub fn blocks_per_group(&self) -> u32 {
        self.blocks_per_group
    }
    /// Blocks in the volume.
    pub fn total_blocks(&self) -> u64 {
        self.total_blocks
    }
    /// Number of groups (the last may be partial).
    pub fn groups(&self) -> u32 {
        self.groups
    }
    /// Reserved blocks at the start of every group.
    pub fn reserved_per_group(&self) -> u32 {
        self.reserved_per_group
    }
    /// `MB_NUM_ORDERS`: buddy orders 0 ..= block_size_log2 + 1.
    pub fn num_orders(&self) -> usize {
        self.block_size_log2 as usize + 2
    }
    /// Largest buddy order a chunk can have in a group of this geometry: the
    /// kernel's `block_size_log2 + 1`, but never above the group size.
    pub fn max_order(&self) -> u32 {
        (self.block_size_log2() + 1).min(self.blocks_per_group.ilog2())
    }
    /// Blocks in group `g`.
    pub fn group_len(&self, g: u32) -> u32 {
        if g + 1 == self.groups {
            self.last_group_len()
        } else {
            self.blocks_per_group()
        }
    }
    fn last_group_len(&self) -> u32 {
        let rem = self.total_blocks % u64::from(self.blocks_per_group);
        if rem == 0 {
            self.blocks_per_group()
        } else {
            rem as u32
        }
    }
    /// Group holding `block`.
    pub fn group_of(&self, block: u64) -> u32 {
        match self.group_shift {
            Some(s) => (block >> s) as u32,
            None => (block / u64::from(self.blocks_per_group)) as u32,
        }
    }
    /// Offset of `block` inside its group.
    pub fn offset_in_group(&self, block: u64) -> u32 {
        match self.group_shift {
            Some(_) => (block & (u64::from(self.blocks_per_group) - 1)) as u32,
            None => (block % u64::from(self.blocks_per_group)) as u32,
        }
    }
    /// First block of group `g`.
    pub fn group_first_block(&self, g: u32) -> u64 {
        u64::from(g) * u64::from(self.blocks_per_group)
    }
    /// `[start, start + len)` lies inside the volume (and does not overflow).
    pub(crate) fn check_range(&self, start: u64, len: u64) -> Result<()> {
        match start.checked_add(len) {
            Some(end) if end <= self.total_blocks() => Ok(()),
            _ => Err(Error::OutOfRange { start, len, total_blocks: self.total_blocks() }),
        }
    }

    /// Split `[start, start + len)` into per-group pieces `(group, offset,
    /// len)`, ascending. The range must lie inside the volume.
    pub(crate) fn pieces(&self, start: u64, len: u64) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        let end = start + len;
        let mut pos = start;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let g = self.group_of(pos);
            let off = self.offset_in_group(pos);
            let n = (u64::from(self.group_len(g) - off)).min(end - pos) as u32;
            pos += u64::from(n);
            Some((g, off, n))
        })
    }
}

fn block_size_log2(block_size: u32) -> Result<u8> {
    if !block_size.is_power_of_two() || !(1024..=65536).contains(&block_size) {
        return Err(Error::InvalidGeometry(format!(
            "block size {block_size} must be a power of two from 1 KiB to 64 KiB"
        )));
    }
    Ok(block_size.trailing_zeros() as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_last_group() {
        let g = Geometry::new(1024, 8192 * 3 + 100).unwrap();
        assert_eq!(g.groups(), 4);
        assert_eq!(g.group_len(3), 100);
        assert_eq!(g.group_len(2), 8192);
        assert_eq!(g.max_order(), 11);
    }

    #[test]
    fn any_multiple_of_8_makes_groups() {
        // What mkfs.ext4 -b 4096 makes of a 128 MiB device.
        let g = Geometry::with_group_size(4096, 32_664, 32_768).unwrap();
        assert_eq!((g.groups(), g.group_len(0), g.group_len(1)), (2, 32_664, 104));
        assert_eq!((g.group_of(32_663), g.group_of(32_664), g.offset_in_group(32_665)), (0, 1, 1));
        assert_eq!(g.group_first_block(1), 32_664);
        assert_eq!(g.max_order(), 13, "2^14 > 32,664: the largest chunk is 2^13");
        let pieces: Vec<_> = g.pieces(32_660, 10).collect();
        assert_eq!(pieces, vec![(0, 32_660, 4), (1, 0, 6)]);
        assert!(Geometry::with_group_size(4096, 32_665, 1 << 20).is_err(), "not a whole bitmap byte");
    }

    #[test]
    fn rejects_bad_shapes() {
        assert!(Geometry::new(3000, 10).is_err());
        assert!(Geometry::new(512, 10).is_err());
        assert!(Geometry::new(4096, 0).is_err());
        assert!(Geometry::with_group_size(4096, 1 << 16, 1 << 20).is_err());
        assert!(Geometry::new(4096, 100).unwrap().with_reserved_per_group(100).is_err());
        assert!(Geometry::new(1024, 1 << 40).is_err());
    }
}
