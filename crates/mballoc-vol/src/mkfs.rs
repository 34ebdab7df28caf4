//! Making a volume on a path, carefully: never over something else
//! without being told to, and never leaving a half-made file behind.

use crate::device::{Device, FileDevice, OpenMode};
use crate::error::{Result, VolError};
use crate::format::{FormatOptions, Superblock};
use crate::probe::probe;
use crate::volume::Volume;
use std::path::Path;
use std::sync::Arc;

/// Whether mkfs may destroy what a device already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overwrite {
    /// Refuse a device that holds a volume, a file system or a partition
    /// table ([`VolError::InUse`]).
    #[default]
    Refuse,
    /// Format whatever is there.
    Force,
}

/// Make an empty volume at `path`: a new file of `size` bytes (created
/// sparse), or the existing file or block device (resized to `size` if it
/// is a file and a size is given). An existing device that holds a
/// recognized signature is refused unless `overwrite` says
/// [`Overwrite::Force`]; a device another open holds is
/// [`VolError::Busy`]; a file this call created is removed again if
/// formatting fails.
///
/// ```
/// use mballoc_vol::{mkfs, FormatOptions, Overwrite, VolError};
/// let dir = std::env::temp_dir().join(format!("mkfs-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("vol");
/// mkfs(&path, Some(64 << 20), &FormatOptions::default(), Overwrite::Refuse)?;
/// // A second mkfs would destroy the volume: refused without --force.
/// let again = mkfs(&path, None, &FormatOptions::default(), Overwrite::Refuse);
/// assert!(matches!(again, Err(VolError::InUse { .. })));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn mkfs(path: &Path, size: Option<u64>, opts: &FormatOptions, overwrite: Overwrite) -> Result<Superblock> {
    let exists = std::fs::symlink_metadata(path).is_ok();
    let dev = if exists {
        let mut dev = FileDevice::open(path, OpenMode::ReadWrite)?;
        let found = probe(&dev).map_err(|e| VolError::io(format!("reading {}", path.display()), e))?;
        if let (Some(what), Overwrite::Refuse) = (found, overwrite) {
            return Err(VolError::InUse { path: path.to_path_buf(), what });
        }
        if let Some(size) = size {
            dev.set_len(size)?;
        }
        dev
    } else {
        let Some(size) = size else {
            return Err(VolError::InvalidArgument(format!(
                "{} does not exist; a size makes a new file",
                path.display()
            )));
        };
        FileDevice::create_new(path, size)?
    };
    let dev: Arc<dyn Device> = Arc::new(dev);
    let made = Volume::format(dev, opts);
    if made.is_err() && !exists {
        let _ = std::fs::remove_file(path);
    }
    made
}
