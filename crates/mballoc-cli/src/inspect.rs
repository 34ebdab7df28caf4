//! `mballoc inspect`: reports on an ext4 image or an mballoc volume.

use anyhow::{Context, Result};
use mballoc::report::FreeSpaceHistogram;
use mballoc_ext4::{compat, incompat, ro_compat};
use mballoc_ext4::{BlockSource, Ext4Volume};
use std::fmt::Write;
use std::io::Write as _;
use std::path::Path;

/// One of `inspect`'s reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Freefrag,
    Groups,
    Files,
}

/// The reports asked for, in the order the command line asks for them
/// (`inspect IMG --groups --freefrag` prints the groups first).
pub fn modes_in_order(args: &[String], freefrag: bool, groups: bool, files: bool) -> Vec<Mode> {
    let mut order: Vec<(usize, Mode)> =
        [("--freefrag", freefrag, Mode::Freefrag), ("--groups", groups, Mode::Groups), ("--files", files, Mode::Files)]
            .into_iter()
            .filter(|&(_, on, _)| on)
            .map(|(flag, _, m)| (args.iter().position(|a| a == flag).unwrap_or(usize::MAX), m))
            .collect();
    order.sort_by_key(|&(at, _)| at);
    order.into_iter().map(|(_, m)| m).collect()
}

/// `mballoc inspect` on an ext4 image (`IMAGE?offset=N` or `offset`: the
/// file system starts that many bytes in).
pub fn ext4(image: &Path, offset: u64, policy: mballoc_ext4::ChecksumPolicy, order: &[Mode]) -> Result<()> {
    let (image, offset) = split_offset(image, offset)?;
    if std::fs::metadata(&image).is_ok_and(|m| m.is_file() && m.len() == 0) {
        anyhow::bail!("reading {}: the image is empty", image.display());
    }
    let src =
        mballoc_ext4::FileSource::open_at(&image, offset).with_context(|| format!("opening {}", image.display()))?;
    let vol = match Ext4Volume::open(src, policy) {
        Ok(v) => v,
        Err(e @ mballoc_ext4::Ext4Error::BadMagic { .. }) => {
            anyhow::bail!("reading {}: {e}: {}", image.display(), what_it_holds(&image, offset))
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", image.display())),
    };
    let mut out = std::io::stdout().lock();
    if order.is_empty() {
        let damaged = summary(&vol, &image, &mut out)?;
        anyhow::ensure!(damaged == 0, "{}: {damaged} damaged path(s), listed above", image.display());
    } else if vol.superblock().needs_recovery() {
        // The summary says it in its own lines; every other report says it
        // where a reader of the report will see it.
        eprintln!("warning: {}: the journal needs recovery; this view predates it", image.display());
    }
    for &mode in order {
        match mode {
            Mode::Freefrag => {
                write!(out, "{}", freefrag(&vol, &image.display().to_string())?)?;
            }
            Mode::Groups => {
                let alloc = mballoc_ext4::engine::allocator(&vol)?;
                // The kernel marks a group whose bitmap's free count differs from
                // its descriptor's corrupt when it builds the buddy, and says so
                // at the end of the group's line. A BLOCK_UNINIT group's count is
                // not the descriptor's: the kernel computes it as it computes
                // the bitmap, so the two always agree.
                let computed = |d: &mballoc_ext4::GroupDesc| vol.superblock().group_csum() && d.block_uninit();
                for (g, line) in alloc.mb_groups_report().lines().enumerate() {
                    let corrupt = g > 0
                        && vol.groups().get(g - 1).is_some_and(|d| {
                            !computed(d) && alloc.group_info(g as u32 - 1).is_ok_and(|i| i.free != d.free_blocks)
                        });
                    writeln!(out, "{line}{}", if corrupt { " Block bitmap corrupted!" } else { "" })?;
                }
            }
            Mode::Files => {
                // Streamed: each line as its file is reached, nothing of the tree
                // kept (memory follows the depth, not the file count). A file the
                // kernel would refuse is reported and skipped; the rest is listed.
                let mut write_err = None;
                let mut damaged = 0u64;
                let walked = vol.walk_each(mballoc_ext4::Claiming::PerFile, |v| {
                    if write_err.is_some() {
                        return Ok(());
                    }
                    let line = match v {
                        mballoc_ext4::Visit::Path(e) if e.inode.file_type() == mballoc_ext4::FileType::Regular => {
                            let n = e.map.filefrag_extents();
                            // The name's own bytes, as filefrag prints them.
                            out.write_all(e.path)
                                .and_then(|()| writeln!(out, ": {n} extent{} found", if n == 1 { "" } else { "s" }))
                        }
                        mballoc_ext4::Visit::Path(_) => Ok(()),
                        mballoc_ext4::Visit::Damaged { path, error } => {
                            damaged += 1;
                            let mut err = std::io::stderr().lock();
                            err.write_all(path).and_then(|()| writeln!(err, ": damaged: {error}"))
                        }
                    };
                    if let Err(e) = line {
                        write_err = Some(e);
                    }
                    Ok(())
                });
                if let Some(err) = write_err {
                    return Err(err.into());
                }
                walked?;
                anyhow::ensure!(damaged == 0, "{}: {damaged} damaged path(s), listed above", image.display());
            }
        }
    }
    Ok(())
}

/// What a file that is not ext2/3/4 holds, as far as its signatures say.
fn what_it_holds(image: &Path, offset: u64) -> String {
    let Ok(dev) = mballoc_vol::FileDevice::open(image, mballoc_vol::OpenMode::Snapshot) else {
        return "not an ext2/3/4 file system".into();
    };
    use mballoc_vol::Device;
    if dev.len() <= offset {
        return format!("the image is {} bytes long: nothing at offset {offset}", dev.len());
    }
    let mut head = vec![0u8; (dev.len() - offset).min(64 << 10) as usize];
    if dev.read_at(offset, &mut head).is_ok() && head.iter().all(|&b| b == 0) {
        return "it holds only zeros there (an empty or unformatted image?)".into();
    }
    match (offset, mballoc_vol::probe(&dev)) {
        (0, Ok(Some(p @ ("a GPT partition table" | "a partition table or boot sector")))) => {
            format!("it holds {p}; give the partition's start with --offset BYTES or IMAGE?offset=BYTES")
        }
        (0, Ok(Some(what))) => format!("it holds {what}, not an ext2/3/4 file system"),
        _ => "not an ext2/3/4 file system".into(),
    }
}

/// `IMAGE?offset=N` as e2fsprogs writes it, when no file has that name.
fn split_offset(image: &Path, offset: u64) -> Result<(std::path::PathBuf, u64)> {
    let text = image.to_string_lossy();
    if !image.exists() {
        if let Some((path, n)) = text.rsplit_once("?offset=") {
            let n: u64 = n.parse().with_context(|| format!("{text}: the offset is not a number"))?;
            anyhow::ensure!(offset == 0 || offset == n, "{text}: and --offset {offset} disagree");
            return Ok((path.into(), n));
        }
    }
    Ok((image.to_path_buf(), offset))
}

/// e2freefrag's report for the image, named `device` as e2freefrag names it.
pub fn freefrag<S: BlockSource>(vol: &Ext4Volume<S>, device: &str) -> Result<String> {
    let sb = vol.superblock();
    let mut h = FreeSpaceHistogram::new(sb.block_size, sb.blocks_count, sb.free_blocks_count);
    vol.for_each_free_run(|_, len| h.add(len))?;
    Ok(h.render(device))
}

/// A short description of the volume, written to `out` as it is found;
/// damaged paths go to stderr, one line each. Returns how many there
/// were: the counts then cover the rest of the volume.
pub fn summary<S: BlockSource>(vol: &Ext4Volume<S>, image: &Path, out: &mut impl std::io::Write) -> Result<u64> {
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
    out.write_all(o.as_bytes())?;
    // Streamed, every block claimed once: memory follows the depth and
    // the volume's size, not the number of files.
    let (mut paths, mut files, mut extents, mut damaged) = (0u64, 0u64, 0u64, 0u64);
    let mut err = std::io::stderr().lock();
    let mut write_err = None;
    vol.walk_each(mballoc_ext4::Claiming::Volume, |v| {
        match v {
            mballoc_ext4::Visit::Path(e) => {
                paths += 1;
                if e.inode.file_type() == mballoc_ext4::FileType::Regular {
                    files += 1;
                    extents += e.map.filefrag_extents();
                }
            }
            mballoc_ext4::Visit::Damaged { path, error } => {
                damaged += 1;
                if let Err(e) = err.write_all(path).and_then(|()| writeln!(err, ": damaged: {error}")) {
                    write_err.get_or_insert(e);
                }
            }
        }
        Ok(())
    })?;
    if let Some(e) = write_err {
        return Err(e.into());
    }
    let partial = if damaged > 0 { format!(", {damaged} damaged") } else { String::new() };
    writeln!(out, "Paths: {paths} ({files} regular files, {extents} extents as filefrag counts{partial})")?;
    let (mut runs, mut free) = (0u64, 0u64);
    vol.for_each_free_run(|_, len| {
        runs += 1;
        free += len;
    })?;
    writeln!(out, "Free: {free} blocks in {runs} extents (from the bitmaps)")?;
    Ok(damaged)
}

/// What `inspect` prints for a volume of our own format: the same reports
/// as for an ext4 image, from the committed state (a snapshot open, which
/// replays the journal in memory, writes nothing, and works beside a
/// mount that is writing the volume).
pub fn own_volume(image: &Path, order: &[Mode]) -> Result<String> {
    use mballoc_vol::{Access, FileDevice, MountOptions, OpenMode};
    let dev = FileDevice::open(image, OpenMode::Snapshot)?;
    let vol = mballoc_vol::Volume::open(
        std::sync::Arc::new(dev),
        MountOptions { access: Access::Snapshot, ..MountOptions::default() },
    )?;
    let sb = vol.superblock();
    let alloc = vol.fs().allocator();
    let mut o = String::new();
    if order.is_empty() {
        writeln!(o, "Volume: {} (mballoc format)", image.display())?;
        writeln!(o, "Block size: {} bytes", sb.block_size)?;
        writeln!(o, "Blocks: {} ({} free)", sb.total_blocks, alloc.free_blocks())?;
        writeln!(o, "Groups: {} of {} blocks", sb.groups, sb.blocks_per_group)?;
        // The same counts `mballoc check` gives: inodes of every kind, the
        // root included, and of them the regular files.
        let files: Vec<_> = vol.files().into_iter().filter(|f| vol.attr(*f).is_ok_and(|a| a.is_file())).collect();
        let extents: u64 = files.iter().map(|&f| filefrag_of(&vol, f)).sum::<Result<u64>>()?;
        let inodes = vol.usage().inodes - vol.usage().free_inodes;
        writeln!(o, "Inodes: {inodes} ({} regular files, {extents} extents as filefrag counts)", files.len())?;
        let (mut runs, mut free) = (0u64, 0u64);
        alloc.for_each_free_extent(|_, len| {
            runs += 1;
            free += len;
        });
        writeln!(o, "Free: {free} blocks in {runs} extents")?;
    }
    for &mode in order {
        match mode {
            Mode::Freefrag => {
                let mut h = FreeSpaceHistogram::new(sb.block_size, sb.total_blocks, alloc.free_blocks());
                alloc.for_each_free_extent(|_, len| h.add(len));
                o.push_str(&h.render(&image.display().to_string()));
            }
            Mode::Groups => o.push_str(&alloc.mb_groups_report()),
            Mode::Files => {
                let mut stack = vec![(vol.root(), String::new())];
                while let Some((dir, prefix)) = stack.pop() {
                    for e in vol.dir_entries(dir)? {
                        let path = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
                        if e.is_dir {
                            stack.push((e.ino, path));
                        } else {
                            let n = filefrag_of(&vol, e.ino)?;
                            writeln!(o, "{path}: {n} extent{} found", if n == 1 { "" } else { "s" })?;
                        }
                    }
                }
            }
        }
    }
    Ok(o)
}

fn filefrag_of(vol: &mballoc_vol::Volume, f: mballoc_fs::FileId) -> Result<u64> {
    let ext = vol.extents(f)?;
    Ok(mballoc_ext4::filefrag_count(ext.iter().map(|e| (e.logical, e.physical, u64::from(e.len)))))
}

/// Whether `image` holds a volume of our own format.
pub fn is_own_volume(image: &Path) -> bool {
    mballoc_vol::FileDevice::open(image, mballoc_vol::OpenMode::Snapshot)
        .ok()
        .and_then(|d| mballoc_vol::probe(&d).ok().flatten())
        == Some("an mballoc volume")
}
