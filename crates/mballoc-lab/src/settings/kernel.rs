//! The kernel file systems' keys: mkfs arguments, mount options and, for
//! ext4, the /sys/fs/ext4/DEV knobs the lab may write, each with its
//! kernel default, unit and range. A knob outside this list is refused
//! when it is parsed, a value outside its range too; [`preflight`] then
//! has the kernel itself check the mkfs arguments, mount options and
//! knobs on a small scratch volume, once, before any scenario's mkfs.

use super::{Scope, Settings};
use crate::error::LabError;
use crate::loop_mount::{KernelFs, Mount};

/// The keys every kernel file system takes.
pub const KERNEL_KEYS: &[(&str, &str)] = &[
    ("mkfs", "extra mkfs arguments, split at spaces (\"-O ^flex_bg\")"),
    ("mount", "extra mount options, as `mount -o` takes them (\"nodelalloc,commit=60\")"),
];

/// One writable ext4 knob.
#[derive(Debug, Clone, Copy)]
pub struct Ext4Knob {
    /// The file's name under /sys/fs/ext4/DEV/.
    pub name: &'static str,
    /// The kernel's default (mballoc-design §8.5).
    pub default: &'static str,
    /// Its unit.
    pub unit: &'static str,
    /// Smallest and largest value the lab writes.
    pub range: (u64, u64),
    /// What it changes.
    pub about: &'static str,
}

const INT_MAX: u64 = i32::MAX as u64;

const fn knob(
    name: &'static str,
    default: &'static str,
    unit: &'static str,
    range: (u64, u64),
    about: &'static str,
) -> Ext4Knob {
    Ext4Knob { name, default, unit, range, about }
}

/// The ext4 knobs the lab writes: the allocator's, and the few others
/// that move allocation or writeback. Error-injection and read-only files
/// are left out on purpose.
pub const EXT4_KNOBS: &[Ext4Knob] = &[
    knob("mb_stats", "0", "flag", (0, 1), "count what the allocator does (/proc/fs/ext4/DEV/mb_stats)"),
    knob("mb_max_to_scan", "200", "extents", (1, INT_MAX), "extents measured before the best so far is taken"),
    knob("mb_min_to_scan", "10", "extents", (0, INT_MAX), "extents measured before a larger candidate is accepted"),
    knob("mb_order2_req", "2", "order", (0, INT_MAX), "smallest order for the power-of-two pass"),
    knob("mb_stream_req", "16", "blocks", (0, INT_MAX), "file size from which a file uses its own preallocation"),
    knob("mb_group_prealloc", "512", "clusters", (0, INT_MAX), "locality-group window (at most a group's clusters)"),
    knob("mb_max_linear_groups", "0 (4 rotational)", "groups", (0, INT_MAX), "groups tried linearly first"),
    knob("mb_best_avail_max_trim_order", "3", "orders", (0, INT_MAX), "orders CR_BEST_AVAIL_LEN may trim"),
    knob("mb_prefetch", "8 x flex size or 32", "groups", (0, INT_MAX), "bitmaps read per prefetch batch"),
    knob("mb_prefetch_limit", "4 x mb_prefetch", "groups", (0, INT_MAX), "prefetch reads per allocation"),
    knob("inode_readahead_blks", "32", "blocks", (0, 1 << 30), "inode table readahead (a power of two)"),
    knob("inode_goal", "0", "inode", (0, u32::MAX as u64), "first inode number tried for new inodes"),
    knob("extent_max_zeroout_kb", "32", "KiB", (0, INT_MAX), "unwritten extents zeroed out rather than split"),
    knob("reserved_clusters", "min(2 %, 4096)", "clusters", (0, u64::MAX), "hidden reserve for metadata"),
    knob("max_writeback_mb_bump", "128", "MiB", (0, INT_MAX), "most one writeback pass writes per inode"),
];

/// The knob called `name`, if the lab writes it.
pub fn ext4_knob(name: &str) -> Option<&'static Ext4Knob> {
    EXT4_KNOBS.iter().find(|k| k.name == name)
}

/// Check an ext4 knob and its value against [`EXT4_KNOBS`].
pub fn check_ext4_knob(name: &str, value: &str) -> Result<(), String> {
    let Some(k) = ext4_knob(name) else {
        let names: Vec<&str> = EXT4_KNOBS.iter().map(|k| k.name).collect();
        return Err(format!("no ext4 knob {name:?} the lab writes; they are {}", names.join(", ")));
    };
    let v: u64 = value.parse().map_err(|_| format!("{value:?} is not a whole number"))?;
    if v < k.range.0 || v > k.range.1 {
        return Err(format!("{v} is outside {} ..= {}", k.range.0, k.range.1));
    }
    if name == "inode_readahead_blks" && v != 0 && !v.is_power_of_two() {
        return Err(format!("{v} is not a power of two"));
    }
    Ok(())
}

/// The value of knob `name` on a mounted ext4 volume of this machine,
/// if there is one (the kernel's own default, unless someone changed it).
pub fn live_value(name: &str) -> Option<(String, String)> {
    let dir = std::fs::read_dir("/sys/fs/ext4").ok()?;
    for dev in dir.flatten() {
        if let Ok(v) = std::fs::read_to_string(dev.path().join(name)) {
            return Some((dev.file_name().to_string_lossy().into_owned(), v.trim().to_string()));
        }
    }
    None
}

/// Have the kernel check every kernel setting in `settings` before a
/// scenario runs: for each file system with settings and each block size
/// given, mkfs a small image with the mkfs arguments, mount it with the
/// mount options and (ext4) write every knob. A refusal is an error that
/// names the setting and what the tool said. Without root (or the tools)
/// the kernel rows are skipped anyway, and so is this.
pub fn preflight(settings: &Settings, block_size: u32) -> Result<(), LabError> {
    if !crate::sys::is_root() {
        return Ok(());
    }
    for fs in [KernelFs::Ext4, KernelFs::Xfs, KernelFs::Btrfs] {
        if !settings.iter().any(|s| s.scope == Scope::Kernel(fs)) {
            continue;
        }
        let mkfs = settings.mkfs_args(fs);
        let opts = settings.mount_options(fs).unwrap_or("");
        let m = match Mount::with_mkfs(fs, fs.min_bytes(), block_size, opts, &mkfs) {
            Ok(m) => m,
            Err(e) if e.is_unavailable() => continue,
            Err(e) => {
                return Err(LabError::Invalid(format!(
                    "{}.mkfs={:?} with {}.mount={opts:?} (block size {block_size}): {}",
                    fs.name(),
                    mkfs.join(" "),
                    fs.name(),
                    crate::error::chain(&e)
                )))
            }
        };
        for (name, value) in settings.knobs(fs) {
            m.set_ext4_knob(&name, &value).map_err(|e| {
                LabError::Invalid(format!("setting {}.{name}={value}: {}", fs.name(), crate::error::chain(&e)))
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_are_checked_by_name_and_range() {
        assert!(check_ext4_knob("mb_max_to_scan", "50").is_ok());
        assert!(check_ext4_knob("mb_max_to_scam", "50").unwrap_err().contains("mb_max_to_scan"));
        assert!(check_ext4_knob("mb_max_to_scan", "0").is_err());
        assert!(check_ext4_knob("mb_stats", "2").is_err());
        assert!(check_ext4_knob("mb_group_prealloc", "2147483650").is_err());
        assert!(check_ext4_knob("inode_readahead_blks", "48").is_err());
        assert!(check_ext4_knob("trigger_fs_error", "1").is_err());
    }

    #[test]
    fn every_knob_this_kernel_has_is_in_the_catalogue_or_left_out_on_purpose() {
        let Some((dev, _)) = live_value("mb_stats") else {
            eprintln!("skipped: no mounted ext4 volume to read /sys/fs/ext4 from");
            return;
        };
        for k in EXT4_KNOBS {
            let p = std::path::Path::new("/sys/fs/ext4").join(&dev).join(k.name);
            assert!(p.exists(), "{} is not in this kernel's /sys/fs/ext4/{dev}", k.name);
        }
    }
}
