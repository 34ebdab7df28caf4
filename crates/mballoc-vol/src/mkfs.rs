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
/// recognized signature, or any data at all, is refused unless
/// `overwrite` says [`Overwrite::Force`]; a size no volume can have is
/// refused before anything is created; a device another open holds is
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
    if let Some(size) = size {
        // The layout first: a size no volume can have is refused before
        // anything is created or resized.
        Superblock::layout(size, opts, [0; 16])
            .map_err(|e| VolError::Geometry(format!("a volume of {size} bytes: {e}")))?;
    }
    let dev = if exists {
        let mut dev = FileDevice::open(path, OpenMode::ReadWrite)?;
        let found = probe(&dev).map_err(|e| VolError::io(format!("reading {}", path.display()), e))?;
        let found = match found {
            Some(what) => Some(what),
            None if holds_data(path, &dev)? => Some("data (no known signature)"),
            None => None,
        };
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
        FileDevice::create_new(path, size).inspect_err(|_| {
            // A file made before its size failed (the host file system's
            // largest file) goes again.
            let _ = std::fs::remove_file(path);
        })?
    };
    let dev: Arc<dyn Device> = Arc::new(dev);
    let made = Volume::format(dev, opts);
    if made.is_err() && !exists {
        let _ = std::fs::remove_file(path);
    }
    made
}

/// Whether an existing file or device holds anything mkfs would destroy:
/// a regular file with blocks allocated (a sparse file that was never
/// written holds nothing), or a device whose first MiB is not all zeros.
fn holds_data(path: &Path, dev: &FileDevice) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| VolError::io(format!("reading {}", path.display()), e))?;
    if meta.is_file() {
        return Ok(meta.len() > 0 && meta.blocks() > 0);
    }
    let mut head = vec![0u8; dev.len().min(1 << 20) as usize];
    dev.read_at(0, &mut head).map_err(|e| VolError::io(format!("reading {}", path.display()), e))?;
    Ok(head.iter().any(|&b| b != 0))
}
