//! `mballoc inspect`: reports on an ext4 image.

use anyhow::Result;
use mballoc::report::FreeSpaceHistogram;
use mballoc_ext4::superblock::{compat, incompat, ro_compat};
use mballoc_ext4::{BlockSource, Volume};
use std::fmt::Write;
use std::path::Path;

/// e2freefrag's report for the image, named `device` as e2freefrag names it.
pub fn freefrag<S: BlockSource>(vol: &Volume<S>, device: &str) -> Result<String> {
    let sb = vol.superblock();
    let mut h = FreeSpaceHistogram::new(sb.block_size, sb.blocks_count, sb.free_blocks_count);
    vol.for_each_free_run(|_, len| h.add(len))?;
    Ok(h.render(device))
}

/// A short description of the volume.
pub fn summary<S: BlockSource>(vol: &Volume<S>, image: &Path) -> Result<String> {
    let sb = vol.superblock();
    let mut o = String::new();
    writeln!(o, "Image: {}", image.display())?;
    writeln!(o, "Block size: {} bytes, cluster size: {} bytes", sb.block_size, sb.cluster_size)?;
    writeln!(o, "Blocks: {} ({} free per the superblock)", sb.blocks_count, sb.free_blocks_count)?;
    writeln!(o, "Groups: {} of {} blocks, {} inodes each", sb.groups, sb.blocks_per_group, sb.inodes_per_group)?;
    let mut features = Vec::new();
    for (on, name) in [
        (sb.has_compat(compat::HAS_JOURNAL), "has_journal"),
        (sb.has_compat(compat::RESIZE_INODE), "resize_inode"),
        (sb.has_compat(compat::DIR_INDEX), "dir_index"),
        (sb.has_compat(compat::SPARSE_SUPER2), "sparse_super2"),
        (sb.has_incompat(incompat::FILETYPE), "filetype"),
        (sb.has_incompat(incompat::META_BG), "meta_bg"),
        (sb.has_incompat(incompat::EXTENTS), "extent"),
        (sb.has_incompat(incompat::BIT64), "64bit"),
        (sb.has_incompat(incompat::FLEX_BG), "flex_bg"),
        (sb.has_incompat(incompat::INLINE_DATA), "inline_data"),
        (sb.has_ro_compat(ro_compat::SPARSE_SUPER), "sparse_super"),
        (sb.has_ro_compat(ro_compat::HUGE_FILE), "huge_file"),
        (sb.has_ro_compat(ro_compat::GDT_CSUM), "uninit_bg"),
        (sb.has_ro_compat(ro_compat::BIGALLOC), "bigalloc"),
        (sb.has_ro_compat(ro_compat::METADATA_CSUM), "metadata_csum"),
    ] {
        if on {
            features.push(name);
        }
    }
    writeln!(o, "Features: {}", features.join(" "))?;
    if sb.needs_recovery() {
        writeln!(o, "Warning: the journal needs recovery; this view predates it")?;
    }
    let tree = vol.walk()?;
    let files: Vec<_> = tree.files().collect();
    let extents: u64 = files.iter().map(|e| e.map.filefrag_extents()).sum();
    writeln!(
        o,
        "Paths: {} ({} regular files, {} extents as filefrag counts)",
        tree.entries.len(),
        files.len(),
        extents
    )?;
    let (mut runs, mut free) = (0u64, 0u64);
    vol.for_each_free_run(|_, len| {
        runs += 1;
        free += len;
    })?;
    writeln!(o, "Free: {free} blocks in {runs} extents (from the bitmaps)")?;
    Ok(o)
}
