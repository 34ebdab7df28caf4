//! What every recovery test checks after a crash or a fault: the volume
//! mounts, the engine and `check` find nothing wrong, and the files that
//! must have survived read back exactly.

use mballoc_vol::{check, Device, FileId, MountOptions, Repair, Volume};
use std::sync::Arc;

/// Mount `dev` and check it; an error names the problem.
pub fn mount_checked(dev: Arc<dyn Device>, opts: MountOptions) -> Result<Arc<Volume>, String> {
    let vol = Volume::open(dev.clone(), opts).map_err(|e| format!("mount: {e}"))?;
    vol.fs().check().map_err(|e| format!("engine check: {e}"))?;
    let report = check(&*dev, Repair::No).map_err(|e| format!("check: {e}"))?;
    if !report.is_clean() {
        return Err(format!("check after mount: {:?}", report.problems));
    }
    Ok(vol)
}

/// File `f` holds exactly `want`.
pub fn reads_back(vol: &Volume, f: FileId, want: &[u8]) -> Result<(), String> {
    let size = vol.size(f).map_err(|e| format!("{f:?} must have survived but is missing: {e}"))?;
    if size != want.len() as u64 {
        return Err(format!("{f:?}: size {size}, {} bytes survive", want.len()));
    }
    let mut got = vec![0u8; want.len()];
    vol.read(f, 0, &mut got).map_err(|e| format!("{f:?}: read: {e}"))?;
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!("{f:?}: contents differ from byte {at}"));
    }
    Ok(())
}
