//! An opened volume: the superblock and every group descriptor, read and
//! checked up front; bitmaps and inodes read on demand.

use crate::checksum::crc32c_raw;
use crate::error::{Ext4Error, Result};
use crate::group::{base_metadata, desc_location, parse_desc, GroupDesc};
use crate::inode::{inode_checksum, Inode};
use crate::source::BlockSource;
use crate::superblock::{ChecksumPolicy, Ext4Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

/// An ext2/3/4 volume opened for reading.
///
/// ```no_run
/// use mballoc_ext4::{ChecksumPolicy, FileSource, Ext4Volume};
/// let vol = Ext4Volume::open(FileSource::open("disk.img")?, ChecksumPolicy::Verify)?;
/// let mut free = 0;
/// vol.for_each_free_run(|_start, len| free += len)?;
/// println!("{free} free blocks of {}", vol.superblock().blocks_count);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Ext4Volume<S> {
    src: S,
    sb: Ext4Superblock,
    groups: Vec<GroupDesc>,
    policy: ChecksumPolicy,
    /// Bitmaps and inode tables of BLOCK_UNINIT groups, sorted: they are
    /// in use wherever they sit, though no written bitmap says so.
    uninit_meta: Vec<(u64, u64)>,
    /// The kernel's "system zone": every block of the file system's own
    /// metadata (superblock and descriptor copies, reserved descriptor
    /// blocks, bitmaps, inode tables) and the journal's data blocks,
    /// merged runs `(start, len, owner)`, ascending; the owner is the
    /// journal's inode for its blocks, 0 for the rest. A file that maps
    /// into a run it does not own is refused, as block_validity refuses it.
    system_zone: Vec<(u64, u64, u32)>,
}

impl<S: BlockSource> Ext4Volume<S> {
    /// Read and check the superblock and all group descriptors.
    pub fn open(src: S, policy: ChecksumPolicy) -> Result<Self> {
        let len = src.len();
        if len < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE as u64 {
            return Err(Ext4Error::Truncated { what: "superblock", block: 0, len });
        }
        let mut raw = vec![0u8; SUPERBLOCK_SIZE];
        src.read_at(SUPERBLOCK_OFFSET, &mut raw).map_err(|e| Ext4Error::io("superblock", SUPERBLOCK_OFFSET, e))?;
        let sb = Ext4Superblock::parse(&raw, policy)?;
        let bytes = sb.blocks_count * u64::from(sb.block_size);
        if len < bytes {
            return Err(Ext4Error::Truncated { what: "the volume's last block", block: sb.blocks_count - 1, len });
        }
        let mut vol =
            Ext4Volume { src, sb, groups: Vec::new(), policy, uninit_meta: Vec::new(), system_zone: Vec::new() };
        vol.read_descriptors()?;
        vol.protect_journal()?;
        Ok(vol)
    }

    fn read_descriptors(&mut self) -> Result<()> {
        let sb = &self.sb;
        let mut groups = Vec::with_capacity(sb.groups as usize);
        let mut cached: Option<(u64, Vec<u8>)> = None;
        for g in 0..sb.groups {
            let (block, offset) = desc_location(sb, g);
            if cached.as_ref().is_none_or(|(b, _)| *b != block) {
                cached = Some((block, self.read_block("group descriptor block", block)?));
            }
            let raw = &cached.as_ref().expect("descriptor block just read").1;
            let desc = parse_desc(sb, g, &raw[offset..offset + sb.desc_size as usize], block, self.policy)?;
            groups.push(desc);
        }
        let mut uninit = Vec::new();
        if sb.group_csum() {
            for d in groups.iter().filter(|d| d.block_uninit()) {
                uninit.push((d.block_bitmap, 1));
                uninit.push((d.inode_bitmap, 1));
                uninit.push((d.inode_table, u64::from(sb.inode_table_blocks())));
            }
        }
        uninit.sort_unstable();
        let mut zone: Vec<(u64, u64)> = Vec::with_capacity(groups.len() * 4);
        for (g, d) in groups.iter().enumerate() {
            zone.extend(crate::group::base_metadata(sb, g as u32));
            zone.push((d.block_bitmap, 1));
            zone.push((d.inode_bitmap, 1));
            zone.push((d.inode_table, u64::from(sb.inode_table_blocks())));
        }
        zone.sort_unstable();
        self.groups = groups;
        self.uninit_meta = uninit;
        self.system_zone = merge_zone(zone.into_iter().map(|(s, l)| (s, l, 0)).collect());
        Ok(())
    }

    /// Add the journal's data blocks to the system zone, as the kernel
    /// does at mount: a file that maps into the journal is refused. A
    /// journal that cannot be mapped, or that maps into the metadata,
    /// is the error (the kernel refuses the mount).
    fn protect_journal(&mut self) -> Result<()> {
        let ino = self.sb.journal_inum;
        if !self.sb.has_compat(crate::superblock::compat::HAS_JOURNAL) || ino == 0 {
            return Ok(());
        }
        let journal = self.inode(ino)?;
        let map = self.file_map(&journal)?;
        let mut zone = std::mem::take(&mut self.system_zone);
        zone.extend(map.extents.iter().map(|x| (x.physical, u64::from(x.len), ino)));
        self.system_zone = merge_zone(zone);
        Ok(())
    }

    /// The first block of `[start, start + len)` that holds the file
    /// system's own metadata or the journal, if any (the kernel's
    /// block_validity check).
    pub fn system_zone_block(&self, start: u64, len: u64) -> Option<u64> {
        self.zone_block_for(start, len, 0)
    }

    /// The first block of `[start, start + len)` in the system zone that
    /// inode `ino` does not own (the journal owns its own blocks).
    pub(crate) fn zone_block_for(&self, start: u64, len: u64, ino: u32) -> Option<u64> {
        let end = start.saturating_add(len);
        let i = self.system_zone.partition_point(|&(s, l, _)| s + l <= start);
        self.system_zone[i..]
            .iter()
            .take_while(|&&(s, _, _)| s < end)
            .find(|&&(_, _, owner)| owner == 0 || owner != ino)
            .map(|&(s, _, _)| s.max(start))
    }

    /// The superblock.
    pub fn superblock(&self) -> &Ext4Superblock {
        &self.sb
    }

    /// All group descriptors.
    pub fn groups(&self) -> &[GroupDesc] {
        &self.groups
    }

    /// Whether checksums are verified.
    pub fn policy(&self) -> ChecksumPolicy {
        self.policy
    }

    /// The underlying source.
    pub fn source(&self) -> &S {
        &self.src
    }

    /// Read one block; `what` names it in errors.
    pub fn read_block(&self, what: &'static str, block: u64) -> Result<Vec<u8>> {
        let bs = u64::from(self.sb.block_size);
        if block >= self.sb.blocks_count {
            return Err(Ext4Error::Truncated { what, block, len: self.src.len() });
        }
        let mut buf = vec![0u8; bs as usize];
        self.src.read_at(block * bs, &mut buf).map_err(|e| Ext4Error::io(what, block * bs, e))?;
        Ok(buf)
    }

    /// Whether group `g`'s bitmap is computed rather than read.
    fn computed_bitmap(&self, g: u32) -> bool {
        self.sb.group_csum() && self.groups[g as usize].block_uninit()
    }

    /// Group `g`'s block bitmap, one bit per cluster (set = in use), as
    /// 64-bit words. BLOCK_UNINIT groups get theirs computed: superblock
    /// and descriptor copies, plus the bitmaps and inode tables of
    /// uninitialized groups, wherever those sit. Clusters past the end of
    /// the volume read as in use.
    pub fn block_bitmap(&self, g: u32) -> Result<Vec<u64>> {
        let sb = &self.sb;
        let cpg = sb.clusters_per_group as usize;
        let mut words = vec![0u64; cpg.div_ceil(64)];
        let d = self.groups[g as usize];
        if !self.computed_bitmap(g) {
            let raw = self.read_block("block bitmap", d.block_bitmap)?;
            if sb.metadata_csum() && self.policy == ChecksumPolicy::Verify {
                let full = crc32c_raw(sb.csum_seed, &raw[..cpg / 8]);
                let computed = if sb.desc_size >= 0x3A { full } else { full & 0xFFFF };
                if computed != d.block_bitmap_csum {
                    return Err(Ext4Error::Checksum {
                        structure: format!("group {g} block bitmap"),
                        block: d.block_bitmap,
                        stored: d.block_bitmap_csum,
                        computed,
                    });
                }
            }
            for (i, w) in words.iter_mut().enumerate() {
                let mut bytes = [0u8; 8];
                let from = i * 8;
                let to = (from + 8).min(cpg / 8);
                bytes[..to - from].copy_from_slice(&raw[from..to]);
                *w = u64::from_le_bytes(bytes);
            }
        } else if let Some((s, len)) = base_metadata(sb, g) {
            self.mark(g, &mut words, s, len);
        }
        let first = sb.group_first_block(g);
        let end = first + u64::from(sb.group_blocks(g));
        let lo = self.uninit_meta.partition_point(|&(s, l)| s + l <= first);
        for &(s, len) in self.uninit_meta[lo..].iter().take_while(|&&(s, _)| s < end) {
            self.mark(g, &mut words, s, len);
        }
        let ratio = u64::from(sb.cluster_ratio());
        let live = (u64::from(sb.group_blocks(g)).div_ceil(ratio)) as usize;
        for c in live..words.len() * 64 {
            words[c / 64] |= 1 << (c % 64);
        }
        Ok(words)
    }

    /// Inode numbers group `g`'s inode bitmap marks in use (none for an
    /// INODE_UNINIT group), ascending. The bitmap's checksum is not
    /// verified: the numbers only tell an engine which numbers a new file
    /// may take.
    pub fn inodes_in_use(&self, g: u32) -> Result<Vec<u32>> {
        let d = self.groups[g as usize];
        if self.sb.group_csum() && d.inode_uninit() {
            return Ok(Vec::new());
        }
        let raw = self.read_block("inode bitmap", d.inode_bitmap)?;
        let ipg = self.sb.inodes_per_group as usize;
        Ok((0..ipg.min(raw.len() * 8))
            .filter(|&i| raw[i / 8] & (1 << (i % 8)) != 0)
            .map(|i| g * self.sb.inodes_per_group + i as u32 + 1)
            .collect())
    }

    /// Set the clusters of blocks `[s, s + len)` that fall in group `g`.
    fn mark(&self, g: u32, words: &mut [u64], s: u64, len: u64) {
        let first = self.sb.group_first_block(g);
        let end = first + u64::from(self.sb.group_blocks(g));
        let (a, b) = (s.max(first), (s + len).min(end));
        let ratio = u64::from(self.sb.cluster_ratio());
        for c in (a - first) / ratio..(b.saturating_sub(first)).div_ceil(ratio) {
            words[(c / 64) as usize] |= 1 << (c % 64);
        }
    }

    /// Call `f(start_block, len_blocks)` for every maximal free run, in
    /// block order; runs continue across group boundaries, as e2freefrag
    /// counts them.
    pub fn for_each_free_run(&self, mut f: impl FnMut(u64, u64)) -> Result<()> {
        let ratio = u64::from(self.sb.cluster_ratio());
        let mut run: Option<(u64, u64)> = None;
        for g in 0..self.sb.groups {
            let words = self.block_bitmap(g)?;
            let first = self.sb.group_first_block(g);
            let clusters = u64::from(self.sb.group_blocks(g)).div_ceil(ratio);
            for c in 0..clusters {
                let used = words[(c / 64) as usize] & (1 << (c % 64)) != 0;
                let block = first + c * ratio;
                let len = ratio.min(self.sb.blocks_count - block);
                match (&mut run, used) {
                    (Some((_, l)), false) => *l += len,
                    (None, false) => run = Some((block, len)),
                    (Some(_), true) => {
                        let (s, l) = run.take().expect("run is open");
                        f(s, l);
                    }
                    (None, true) => {}
                }
            }
        }
        if let Some((s, l)) = run {
            f(s, l);
        }
        Ok(())
    }

    /// Inode `ino`, checked against its checksum.
    pub fn inode(&self, ino: u32) -> Result<Inode> {
        let sb = &self.sb;
        if ino == 0 || ino > sb.inodes_count {
            return Err(Ext4Error::Inode { ino, block: 0, reason: format!("no such inode (1..={})", sb.inodes_count) });
        }
        let g = (ino - 1) / sb.inodes_per_group;
        let idx = (ino - 1) % sb.inodes_per_group;
        let d = self.groups[g as usize];
        let isz = u64::from(sb.inode_size);
        let byte = u64::from(idx) * isz;
        let block = d.inode_table + byte / u64::from(sb.block_size);
        // Neither INODE_UNINIT nor `itable_unused` stops the kernel from
        // reading an inode a directory names: they only guide allocation.
        let offset = d.inode_table * u64::from(sb.block_size) + byte;
        let mut raw = vec![0u8; isz as usize];
        self.src.read_at(offset, &mut raw).map_err(|e| Ext4Error::io("inode", offset, e))?;
        if sb.metadata_csum() && self.policy == ChecksumPolicy::Verify {
            let (stored, computed) = inode_checksum(sb, ino, &raw);
            if stored != computed {
                return Err(Ext4Error::Checksum { structure: format!("inode {ino}"), block, stored, computed });
            }
        }
        let bad = |reason: String| Err(Ext4Error::Inode { ino, block, reason });
        // The checks the kernel makes before it trusts an inode
        // (`__ext4_iget`): each of these makes it refuse the inode.
        let extra = usize::from(crate::bytes::le16(&raw, 0x80));
        if raw.len() > 128 && 128 + extra > raw.len() {
            return bad(format!("has i_extra_isize {extra}, too large for the {}-byte inode", raw.len()));
        }
        if raw.len() > 128 && extra % 4 != 0 {
            return bad(format!("has i_extra_isize {extra}, not a multiple of 4"));
        }
        let mode = crate::bytes::le16(&raw, 0x0);
        if mode != 0 && !matches!(mode & 0xF000, 0x1000 | 0x2000 | 0x4000 | 0x6000 | 0x8000 | 0xA000 | 0xC000) {
            return bad(format!("has i_mode {mode:#o}, of no file type"));
        }
        let flags = crate::bytes::le32(&raw, 0x20);
        use crate::inode::iflags;
        let size = u64::from(crate::bytes::le32(&raw, 0x4)) | (u64::from(crate::bytes::le32(&raw, 0x6C)) << 32);
        if size > i64::MAX as u64 {
            return bad(format!("has i_size {size}, negative as the kernel reads it"));
        }
        let max = if flags & iflags::EXTENTS != 0 { sb.max_extent_file_size() } else { sb.max_indirect_file_size() };
        if size > max {
            return bad(format!("has i_size {size}, past the largest file this volume can hold ({max})"));
        }
        let acl = u64::from(crate::bytes::le32(&raw, 0x68)) | (u64::from(crate::bytes::le16(&raw, 0x76)) << 32);
        if acl != 0
            && (acl < u64::from(sb.first_data_block)
                || acl >= sb.blocks_count
                || self.system_zone_block(acl, 1).is_some())
        {
            return bad(format!("has its extended-attribute block {acl} outside the volume or in its metadata"));
        }
        use crate::superblock::{incompat, ro_compat};
        if flags & iflags::INLINE_DATA != 0 && !sb.has_incompat(incompat::INLINE_DATA) {
            return bad("has the inline-data flag on a volume without inline_data".into());
        }
        if flags & iflags::CASEFOLD != 0 && !sb.has_incompat(incompat::CASEFOLD) {
            return bad("has the casefold flag on a volume without casefold".into());
        }
        // The kernel reads these two but cannot open the file.
        if flags & iflags::ENCRYPT != 0 && !sb.has_incompat(incompat::ENCRYPT) {
            return bad("has the encrypt flag on a volume without encrypt".into());
        }
        if flags & iflags::VERITY != 0 && !sb.has_ro_compat(ro_compat::VERITY) {
            return bad("has the verity flag on a volume without verity".into());
        }
        Ok(Inode::parse(sb, ino, &raw, block))
    }
}

/// Sort zone runs and merge those that touch and share an owner.
fn merge_zone(mut zone: Vec<(u64, u64, u32)>) -> Vec<(u64, u64, u32)> {
    zone.sort_unstable();
    let mut merged: Vec<(u64, u64, u32)> = Vec::with_capacity(zone.len());
    for (start, len, owner) in zone {
        match merged.last_mut() {
            Some((s, l, o)) if *o == owner && start <= *s + *l => *l = (*l).max(start + len - *s),
            _ => merged.push((start, len, owner)),
        }
    }
    merged
}
