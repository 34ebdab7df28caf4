//! `mballoc mkfs`, `mballoc check` and `mballoc upgrade`: the commands
//! that make, verify and convert a volume.

use anyhow::{Context, Result};
use mballoc_vol::{FileDevice, Force, FormatOptions, MountOptions, OpenMode, Overwrite, Repair};
use std::path::Path;

/// Make a volume and say what it is.
pub fn mkfs(
    volume: &Path,
    size: Option<u64>,
    block_size: u32,
    journal_blocks: Option<u32>,
    inodes: Option<u32>,
    force: bool,
) -> Result<()> {
    let opts =
        FormatOptions { block_size, log_blocks: journal_blocks, inode_count: inodes, ..FormatOptions::default() };
    let overwrite = if force { Overwrite::Force } else { Overwrite::Refuse };
    let sb = mballoc_vol::mkfs(volume, size, &opts, overwrite)
        .with_context(|| format!("making a volume on {}", volume.display()))?;
    println!(
        "{}: {} blocks of {} bytes, {} groups, {} journal blocks, {} inodes, {} data blocks from {}, UUID {}",
        volume.display(),
        sb.total_blocks,
        sb.block_size,
        sb.groups,
        sb.log_blocks,
        sb.inode_count,
        sb.total_blocks - sb.data_start,
        sb.data_start,
        sb.uuid_text()
    );
    Ok(())
}

/// Check (and with `repair`, repair, taking the answers in `force` where
/// it would refuse) a volume; exit status 1 when it is left not clean.
pub fn check(volume: &Path, repair: bool, force: &[Force]) -> Result<()> {
    if !force.is_empty() && !repair {
        anyhow::bail!("--force chooses how a repair proceeds: give --repair too");
    }
    let mode = if repair { OpenMode::ReadWrite } else { OpenMode::ReadOnly };
    let dev = FileDevice::open(volume, mode).with_context(|| format!("opening {}", volume.display()))?;
    let how = if repair { Repair::Yes } else { Repair::No };
    let r = mballoc_vol::check_with(&dev, how, force).with_context(|| format!("checking {}", volume.display()))?;
    let name = volume.display();
    for p in &r.problems {
        println!("{name}: {p}");
    }
    if let Some(why) = &r.stopped {
        let note = if r.repaired { "this repair cleared the note" } else { "`--repair` clears this note" };
        println!(
            "{name}: when last mounted the volume stopped taking changes: {why}; what was committed is \
             checked as the rest ({note})"
        );
    }
    if r.pending_transactions > 0 {
        let when = if r.repaired { "were replayed" } else { "await replay at the next mount" };
        println!("{name}: {} committed journal transaction(s) {when}", r.pending_transactions);
    }
    if r.orphans > 0 {
        let when = if r.repaired { "were removed" } else { "are removed at the next mount" };
        println!("{name}: {} orphaned inode(s) (unlinked while open) {when}", r.orphans);
    }
    for q in &r.quarantined {
        let tense = if r.repaired { "" } else { "(on repair) " };
        println!("{name}: {tense}{q}");
    }
    for f in &r.forced {
        println!("{name}: forced {f}");
    }
    for why in &r.refused {
        println!("{name}: not repaired: {why}");
    }
    let verdict = match (r.is_clean(), r.repaired) {
        (true, _) => "clean",
        (false, true) => "repaired",
        (false, false) => "NOT clean",
    };
    println!(
        "{name}: {verdict}, {} inodes ({} regular files), {} free blocks",
        r.inodes, r.regular_files, r.free_blocks
    );
    if !r.is_clean() && !r.repaired {
        std::process::exit(1);
    }
    Ok(())
}

/// Convert a version-2 volume, then mount and unmount it once so every
/// record is written home.
pub fn upgrade(volume: &Path) -> Result<()> {
    let dev = FileDevice::open(volume, OpenMode::ReadWrite).with_context(|| format!("opening {}", volume.display()))?;
    let done = mballoc_vol::upgrade(&dev).with_context(|| format!("upgrading {}", volume.display()))?;
    let vol = mballoc_vol::Volume::open(std::sync::Arc::new(dev), MountOptions::default())
        .with_context(|| format!("mounting {} after the upgrade", volume.display()))?;
    vol.unmount().with_context(|| format!("closing {}", volume.display()))?;
    println!(
        "{}: version 3, the attributes of {} inodes carried over in {} journal transaction(s)",
        volume.display(),
        done.inodes,
        done.transactions
    );
    Ok(())
}
