//! `mballoc upgrade`: a cleanly unmounted version-2 volume becomes a
//! version-3 one in place, crash-safe at every step.
//!
//! Version 3 changed only the inode record's attribute half. A version-2
//! record read as version 3 is an inode with no attributes yet (bytes
//! 24–31 and 240–247 were zero, and the record checksum is the same), so
//! the upgrade writes no inode record itself: it journals every inode's
//! attributes as version-3 attribute records, under the next epoch, and
//! then switches the superblock to version 3 and that epoch. The next
//! mount replays the journal like any other and its checkpoint writes the
//! records home. A crash before the superblock is written leaves the
//! version-2 volume as it was (its own epoch finds no transaction); a
//! crash after leaves a version-3 volume whose journal holds every name.

use crate::attr::{Attr, Link};
use crate::codec::{get16, get32, get64};
use crate::device::Device;
use crate::error::{Result, VolError};
use crate::format::{Superblock, VolumeState, INODE_BYTES, INODE_MAGIC, ROOT_INO, VERSION};
use crate::wal::{self, Running};

/// What an upgrade did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upgraded {
    /// Inodes whose attributes were carried over.
    pub inodes: u64,
    /// Journal transactions written (replayed by the next mount).
    pub transactions: u64,
}

/// Where version 2 kept an inode's attributes.
const V2_ATTR: usize = 256;
/// Longest version-2 name.
const V2_NAME_MAX: usize = 202;

/// Convert the version-2 volume on `dev` to version 3. Refused, with
/// nothing written, unless the volume is version 2 and was unmounted
/// cleanly, or when its journal cannot hold every inode's attributes.
pub fn upgrade(dev: &dyn Device) -> Result<Upgraded> {
    let head = crate::format::read_superblock(dev)?;
    let found = get32(&head, 4);
    if found == VERSION {
        return Err(VolError::InvalidArgument(format!("the volume is already version {VERSION}")));
    }
    let mut sb = Superblock::decode_version(&head, dev.len(), 2)?;
    if sb.state != VolumeState::Clean {
        return Err(VolError::InvalidArgument(
            "the version-2 volume was not unmounted cleanly: mount and unmount it with the build that made it first"
                .into(),
        ));
    }
    let seed = sb.seed();
    let bs = sb.block_size as usize;
    let mut running = Running::default();
    let mut generation = 1u32;
    let mut inodes = 0;
    let per_block = sb.inodes_per_block() as usize;
    for blk in 0..sb.itable_blocks() {
        let mut b = vec![0u8; bs];
        let at = sb.offset(sb.itable_start + blk);
        dev.read_at(at, &mut b).map_err(|e| VolError::io(format!("reading block {}", sb.itable_start + blk), e))?;
        for i in 0..per_block {
            let slot = blk as usize * per_block + i;
            if slot >= sb.inode_count as usize {
                break;
            }
            let r = &b[i * INODE_BYTES..(i + 1) * INODE_BYTES];
            if let Some((ino, attr)) = v2_attr(seed, slot as u32, r, sb.itable_start + blk, &mut generation)? {
                attr.check_room(sb.max_attr_bytes())?;
                running.push_attrs(&[(ino, &attr)]);
                inodes += 1;
            }
        }
    }
    // Every piece under the next epoch, from journal block 0.
    let epoch = sb.checkpoints + 1;
    let log_blocks = u64::from(sb.log_blocks);
    let mut frames = Vec::new();
    let mut blocks = 0u64;
    for (k, range) in running.chunks(bs, log_blocks).into_iter().enumerate() {
        let tx = wal::frame(&running.bytes()[range], sb.log_seq + k as u64, epoch, seed, bs);
        blocks += (tx.len() / bs) as u64;
        frames.push(tx);
    }
    if blocks > log_blocks {
        return Err(VolError::InvalidArgument(format!(
            "the attributes of {inodes} inodes need {blocks} journal blocks; the journal has {log_blocks}"
        )));
    }
    let mut at = sb.log_start;
    for tx in &frames {
        dev.write_at(sb.offset(at), tx).map_err(|e| VolError::io("writing the journal", e))?;
        at += (tx.len() / bs) as u64;
    }
    dev.flush().map_err(|e| VolError::io("flushing", e))?;
    sb.checkpoints = epoch;
    sb.state = VolumeState::Mounted;
    dev.write_at(0, &sb.encode()).map_err(|e| VolError::io("writing the superblock", e))?;
    dev.flush().map_err(|e| VolError::io("flushing", e))?;
    Ok(Upgraded { inodes, transactions: frames.len() as u64 })
}

/// A version-2 inode record's number and attributes, as version 3 keeps
/// them; `None` for a free slot or an inode that never got a name.
fn v2_attr(seed: u32, slot: u32, r: &[u8], block: u64, generation: &mut u32) -> Result<Option<(u64, Attr)>> {
    if r.iter().all(|&x| x == 0) {
        return Ok(None);
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c_append(seed, &slot.to_le_bytes()), &r[..INODE_BYTES - 4]);
    if get32(r, INODE_BYTES - 4) != crc {
        return Err(VolError::Checksum { structure: "inode", block });
    }
    let bad = |d: String| VolError::corrupt("inode", block, format!("slot {slot}: {d}"));
    if get32(r, 0) != INODE_MAGIC {
        return Err(bad("bad magic".into()));
    }
    let ino = get64(r, 8);
    let mode = get32(r, V2_ATTR + 8);
    if mode == 0 {
        return Ok(None);
    }
    let len = get16(r, V2_ATTR + 20) as usize;
    if len > V2_NAME_MAX {
        return Err(bad(format!("name of {len} bytes")));
    }
    let parent = get64(r, V2_ATTR);
    let name = r[V2_ATTR + 48..V2_ATTR + 48 + len].to_vec();
    *generation += 1;
    let attr = Attr {
        mode,
        uid: get32(r, V2_ATTR + 12),
        gid: get32(r, V2_ATTR + 16),
        atime: get64(r, V2_ATTR + 24) as i64,
        mtime: get64(r, V2_ATTR + 32) as i64,
        ctime: get64(r, V2_ATTR + 40) as i64,
        generation: *generation,
        links: if ino == ROOT_INO { Vec::new() } else { vec![Link { parent, name }] },
        ..Attr::default()
    };
    attr.validate().map_err(bad)?;
    Ok(Some((ino, attr)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::SUPERBLOCK_BYTES;
    use crate::{FileId, FormatOptions, MemDevice, MountOptions, Volume};
    use std::sync::Arc;

    /// A version-2 record, written the way version 2 wrote it.
    fn v2_record(seed: u32, slot: u32, ino: u64, parent: u64, mode: u32, name: &[u8]) -> Vec<u8> {
        use crate::codec::{put16, put32, put64};
        let mut r = vec![0u8; INODE_BYTES];
        put32(&mut r, 0, INODE_MAGIC);
        put64(&mut r, 8, ino);
        put64(&mut r, V2_ATTR, parent);
        put32(&mut r, V2_ATTR + 8, mode);
        put32(&mut r, V2_ATTR + 12, 1000);
        put16(&mut r, V2_ATTR + 20, name.len() as u16);
        put64(&mut r, V2_ATTR + 32, 77);
        r[V2_ATTR + 48..V2_ATTR + 48 + name.len()].copy_from_slice(name);
        let crc = crc32c::crc32c_append(crc32c::crc32c_append(seed, &slot.to_le_bytes()), &r[..INODE_BYTES - 4]);
        put32(&mut r, INODE_BYTES - 4, crc);
        r
    }

    #[test]
    fn a_version_2_volume_becomes_version_3_with_every_name() {
        let dev = Arc::new(MemDevice::new(8 << 20));
        let opts = FormatOptions { block_size: 1024, ..FormatOptions::default() };
        let sb = Volume::format(dev.clone(), &opts).unwrap();
        // Make it a version-2 volume: the root, a directory and a file
        // with a 202-byte name (too long for a version-3 record's inline
        // bytes: it overflows on the way).
        let long = vec![b'n'; V2_NAME_MAX];
        let table = sb.offset(sb.itable_start);
        for (slot, rec) in [
            v2_record(sb.seed(), 0, 1, 1, 0o040_755, b""),
            v2_record(sb.seed(), 1, 12, 1, 0o040_700, b"dir"),
            v2_record(sb.seed(), 2, 13, 12, 0o100_644, &long),
        ]
        .into_iter()
        .enumerate()
        {
            dev.write_at(table + (slot * INODE_BYTES) as u64, &rec).unwrap();
        }
        let mut v2 = sb.clone();
        v2.files = 3;
        let mut head = v2.encode();
        head[4..8].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&head[..SUPERBLOCK_BYTES - 4]);
        head[SUPERBLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
        dev.write_at(0, &head).unwrap();
        assert!(matches!(Volume::open(dev.clone(), MountOptions::default()), Err(VolError::Version { found: 2, .. })));

        let done = upgrade(&*dev).unwrap();
        assert_eq!(done.inodes, 3);
        assert!(upgrade(&*dev).is_err(), "already version 3");
        let vol = Volume::open(dev.clone(), MountOptions::default()).unwrap();
        let d = vol.lookup(vol.root(), b"dir").unwrap();
        assert_eq!(vol.lookup(d, &long).unwrap(), FileId(13));
        let a = vol.attr(FileId(13)).unwrap();
        assert_eq!((a.uid, a.mtime, a.mode), (1000, 77, 0o100_644));
        assert_eq!(vol.size(FileId(13)).unwrap(), 0);
        vol.unmount().unwrap();
        assert!(crate::check(&*dev, crate::Repair::No).unwrap().is_clean());
    }
}
