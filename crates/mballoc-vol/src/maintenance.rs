//! The volume as a whole, beyond its files: its label, and trimming its
//! free space (`FITRIM`).

use crate::error::{Result, VolError};
use crate::volume::Volume;

impl Volume {
    /// The volume's label.
    pub fn label(&self) -> Vec<u8> {
        self.log.home.lock().sb.label.clone()
    }

    /// Set the volume's label (at most [`crate::LABEL_MAX`] bytes, no NUL);
    /// durable when this returns.
    pub fn set_label(&self, label: &[u8]) -> Result<()> {
        self.writable()?;
        if label.len() > crate::limits::LABEL_MAX || label.contains(&0) {
            return Err(VolError::InvalidArgument(format!(
                "a label is at most {} bytes without NUL ({} given)",
                crate::limits::LABEL_MAX,
                label.len()
            )));
        }
        let mut home = self.log.home.lock();
        let old = std::mem::replace(&mut home.sb.label, label.to_vec());
        home.write_superblock(&*self.dev).inspect_err(|_| home.sb.label = old)
    }

    /// `FITRIM`: tell the device that the free runs of at least `min_len`
    /// bytes inside `len` bytes at `start` hold nothing (a volume file
    /// gives the space back to its file system). Returns the bytes
    /// trimmed. A device that cannot discard gives `Io` with EOPNOTSUPP.
    pub fn trim(&self, start: u64, len: u64, min_len: u64) -> Result<u64> {
        self.writable()?;
        let bs = self.block_size();
        let sb = &self.sb;
        // ext4's limits: a range of at least a block, starting inside the
        // volume; runs no longer than a group.
        if len < bs || start >= sb.total_blocks * bs || min_len > u64::from(sb.blocks_per_group) * bs {
            return Err(VolError::InvalidArgument(format!(
                "trim {len} bytes from byte {start} (the volume has {}, blocks of {bs}), runs of at least \
                 {min_len} bytes",
                sb.total_blocks * bs
            )));
        }
        let first = start.div_ceil(bs).max(sb.data_start);
        let end = (start.saturating_add(len) / bs).min(sb.total_blocks);
        let blocks = self
            .fs
            .trim(first, end, min_len.div_ceil(bs), |s, n| match self.dev.discard(s * bs, n * bs) {
                Ok(true) => Ok(()),
                Ok(false) => Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
                Err(e) => Err(e),
            })
            .map_err(|e| VolError::io("discarding free space", e))?;
        Ok(blocks * bs)
    }
}
