//! From an image to the engine: the allocator's state from the bitmaps,
//! and the engine's files from the image's files.
//!
//! The engine numbers blocks from 0 in group 0; ext4 numbers them from
//! `s_first_data_block` (1 with 1 KiB blocks). Engine block = ext4 block −
//! first data block; an engine "block" is an ext4 cluster under bigalloc
//! ([`Shape::cluster_bits`](mballoc_fs::Shape::cluster_bits)), whose volumes start at block 0: [`load`]
//! maps each file's clusters, and refuses a file whose extents split a
//! cluster between two physical clusters or two states.

use crate::error::{Ext4Error, Result};
use crate::inode::{FileType, MappingKind};
use crate::source::BlockSource;
use crate::volume::Ext4Volume;
use mballoc::{Allocator, Geometry};
use mballoc_fs::{ExtentState, FileId, FileKind, Fs, FsConfig, ImportedFile, InodeNumbers, MappedExtent, StripeUnits};
use std::collections::HashSet;

mod namespace;

pub use namespace::{load_with_namespace, WithNamespace};

/// The engine's geometry for this volume (in clusters).
pub fn geometry<S: BlockSource>(vol: &Ext4Volume<S>) -> Result<Geometry> {
    let sb = vol.superblock();
    let clusters = (sb.blocks_count - u64::from(sb.first_data_block)).div_ceil(u64::from(sb.cluster_ratio()));
    Geometry::with_group_size(sb.block_size, sb.clusters_per_group, clusters)
        .map_err(|e| Ext4Error::Unsupported(format!("engine geometry: {e}")))
}

/// Every group's bitmap, trimmed to the engine's group lengths.
fn bitmaps<S: BlockSource>(vol: &Ext4Volume<S>) -> Result<Vec<Vec<u64>>> {
    (0..vol.superblock().groups).map(|g| vol.block_bitmap(g)).collect()
}

/// Groups per flex group as ext4 uses them (1 without flex_bg).
pub fn flex_groups<S: BlockSource>(vol: &Ext4Volume<S>) -> u32 {
    let sb = vol.superblock();
    if sb.feature_incompat & crate::superblock::incompat::FLEX_BG != 0 {
        1 << sb.log_groups_per_flex.min(31)
    } else {
        1
    }
}

/// The groups whose descriptors say `BLOCK_UNINIT` and whose flag ext4
/// honours (with group-descriptor checksums), for
/// [`Allocator::unload_buddies`].
pub fn block_uninit_groups<S: BlockSource>(vol: &Ext4Volume<S>) -> Vec<u32> {
    if !vol.superblock().group_csum() {
        return Vec::new();
    }
    (0..).zip(vol.groups()).filter(|(_, d)| d.block_uninit()).map(|(g, _)| g).collect()
}

/// The image's RAID stripe, unless a `stripe=` already chose one, and
/// ext4's mount-time rounding of the locality-group window up to a
/// multiple of it (`ext4_mb_init`). The stripe is given in blocks; the
/// allocator counts clusters, and ext4 turns off a stripe that is not a
/// whole number of them (since 6.5; before, it took the block count as
/// a cluster count: [`StripeUnits`]).
fn with_stripe(t: &mut mballoc::Tunables, sb: &crate::superblock::Ext4Superblock, units: StripeUnits) {
    if t.stripe == 0 {
        t.stripe = sb.stripe();
    }
    let ratio = sb.cluster_ratio();
    if units == StripeUnits::Converted {
        t.stripe = if t.stripe.is_multiple_of(ratio) { t.stripe / ratio } else { 0 };
    }
    if t.stripe > 1 {
        t.mb_group_prealloc = t.mb_group_prealloc.div_ceil(t.stripe) * t.stripe;
    }
}

/// An allocator holding the image's free space, one group per ext4 group,
/// with the image's flex groups. Its `mb_groups_report` is the kernel's
/// `mb_groups` for the image.
pub fn allocator<S: BlockSource>(vol: &Ext4Volume<S>) -> Result<Allocator> {
    allocator_with(vol, mballoc::Tunables::default(), StripeUnits::Converted, None)
}

/// [`allocator`] tuned by `t` (the image's stripe, in the `units` the
/// profile counts it in, where `t` sets none) and deciding by `policy`
/// (ext4's where `None`): the allocator of one kernel profile.
pub fn allocator_with<S: BlockSource>(
    vol: &Ext4Volume<S>,
    mut t: mballoc::Tunables,
    units: StripeUnits,
    policy: Option<std::sync::Arc<dyn mballoc::Policy>>,
) -> Result<Allocator> {
    with_stripe(&mut t, vol.superblock(), units);
    let mut builder = Allocator::builder(geometry(vol)?).flex_groups(flex_groups(vol)).tunables(t);
    if let Some(p) = policy {
        builder = builder.policy(p);
    }
    let alloc = builder.build().map_err(|e| Ext4Error::Unsupported(format!("engine: {e}")))?;
    for (g, bitmap) in bitmaps(vol)?.iter().enumerate() {
        alloc
            .load_group_bitmap(g as u32, bitmap)
            .map_err(|e| Ext4Error::Unsupported(format!("loading group {g}: {e}")))?;
    }
    Ok(alloc)
}

/// An engine started from an image.
pub struct Loaded {
    /// The engine, holding the image's free space and files.
    pub fs: Fs,
    /// Each regular file's path and its id in the engine (its inode number).
    pub files: Vec<(String, FileId)>,
}

/// Build an engine from the image: its free space, and its regular files
/// (closed, with their extents). `configure` adjusts the engine's
/// configuration (tunables, placement) before it is built; the geometry
/// and inodes per group come from the image.
pub fn load<S: BlockSource>(vol: &Ext4Volume<S>, configure: impl FnOnce(&mut FsConfig)) -> Result<Loaded> {
    load_carrying(vol, configure, Directories::AsMetadata)
}

/// What the engine makes of the image's directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directories {
    /// Their blocks are metadata the engine never allocates or frees.
    AsMetadata,
    /// Each is a [`FileKind::Directory`](mballoc_fs::FileKind) file of the
    /// engine, its blocks its own (for [`load_with_namespace`]).
    AsFiles,
}

/// [`load`], with the image's directories carried as `dirs` says.
pub fn load_carrying<S: BlockSource>(
    vol: &Ext4Volume<S>,
    configure: impl FnOnce(&mut FsConfig),
    dirs: Directories,
) -> Result<Loaded> {
    let sb = vol.superblock();
    let cluster_bits = sb.cluster_ratio().trailing_zeros();
    if cluster_bits > 0 && sb.first_data_block != 0 {
        return Err(Ext4Error::Unsupported("a bigalloc volume whose first data block is not 0".into()));
    }
    let geo = geometry(vol)?;
    let mut cfg = FsConfig::new(geo).with_cluster_bits(cluster_bits);
    configure(&mut cfg);
    if cfg.shape.cluster_bits != cluster_bits {
        return Err(Ext4Error::Unsupported(format!(
            "a configuration for clusters of 2^{} blocks on a volume with clusters of 2^{cluster_bits}",
            cfg.shape.cluster_bits
        )));
    }
    cfg.shape.geometry = geo;
    cfg.shape.inodes_per_group = sb.inodes_per_group;
    if cfg.shape.flex_groups > 1 {
        // A profile that models flex groups models the image's.
        cfg.shape.flex_groups = flex_groups(vol);
    }
    if let InodeNumbers::LowestFree { .. } = cfg.behaviour.inode_numbers {
        cfg.behaviour.inode_numbers = InodeNumbers::LowestFree { first: u64::from(sb.first_ino) };
    }
    with_stripe(&mut cfg.placement.tunables, sb, cfg.behaviour.stripe_units);
    let tree = vol.walk()?;
    let base = u64::from(sb.first_data_block);
    let mut files = Vec::new();
    let mut imported: Vec<ImportedFile> = Vec::new();
    let mut carried = HashSet::new();
    let carried_kind = |e: &crate::directory::Entry| match e.inode.file_type() {
        FileType::Regular => Some(FileKind::Regular),
        FileType::Directory if dirs == Directories::AsFiles && e.map.kind != MappingKind::Inline => {
            Some(FileKind::Directory)
        }
        _ => None,
    };
    for e in &tree.entries {
        let Some(kind) = carried_kind(e) else { continue };
        if kind == FileKind::Regular {
            files.push((e.path.clone(), FileId(u64::from(e.inode.ino))));
        }
        if !carried.insert(e.inode.ino) {
            continue; // another name of a file already carried over
        }
        let extents = in_clusters(
            e.map.extents.iter().map(|x| MappedExtent {
                logical: x.logical,
                physical: x.physical - base,
                len: x.len,
                state: if x.unwritten { ExtentState::Unwritten } else { ExtentState::Written },
            }),
            cluster_bits,
        )
        .map_err(|why| Ext4Error::Unsupported(format!("{}: {why}", e.path)))?;
        imported.push(ImportedFile { ino: u64::from(e.inode.ino), size: e.inode.size, extents, kind });
    }
    let lowest_free = matches!(cfg.behaviour.inode_numbers, InodeNumbers::LowestFree { .. });
    let fs = Fs::import(cfg, &bitmaps(vol)?, imported)
        .map_err(|e| Ext4Error::Unsupported(format!("the engine refused the image: {e}")))?;
    if lowest_free {
        // Every inode the image uses (directories, the orphan file) is
        // taken, so new files get the numbers ext4 would give them.
        for g in 0..sb.groups {
            fs.reserve_inode_numbers(vol.inodes_in_use(g)?.into_iter().map(u64::from));
        }
    }
    Ok(Loaded { fs, files })
}

/// A file's extents in ext4 blocks as the engine's clusters of
/// `2^bits` blocks: each block at the same offset in its physical
/// cluster as in its logical one (ext4's rule), a cluster two extents
/// share given to the first (the extent count stays ext4's). A cluster split between two physical clusters or two
/// states has no cluster-sized equivalent and is refused.
fn in_clusters(
    extents: impl Iterator<Item = MappedExtent>,
    bits: u32,
) -> std::result::Result<Vec<MappedExtent>, String> {
    if bits == 0 {
        return Ok(extents.collect());
    }
    let mask = (1u64 << bits) - 1;
    let mut out: Vec<MappedExtent> = Vec::new();
    for x in extents {
        if x.logical & mask != x.physical & mask {
            return Err(format!(
                "logical block {} lies at another offset of its cluster than physical {}",
                x.logical, x.physical
            ));
        }
        let first = x.logical >> bits;
        let last = (x.logical + u64::from(x.len) - 1) >> bits;
        let mut c = MappedExtent {
            logical: first,
            physical: x.physical >> bits,
            len: (last - first + 1) as u32,
            state: x.state,
        };
        if let Some(prev) = out.last_mut() {
            if prev.logical_end() > c.logical {
                // The previous extent ends in this extent's first cluster.
                if prev.physical_of(c.logical) != c.physical || prev.state != c.state {
                    return Err(format!("cluster {} holds blocks of two extents that differ", c.logical));
                }
                c.logical += 1;
                c.physical += 1;
                c.len -= 1;
            }
        }
        if c.len > 0 {
            out.push(c);
        }
    }
    Ok(out)
}
