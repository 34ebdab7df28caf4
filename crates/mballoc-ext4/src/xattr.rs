//! Extended attributes kept in the inode itself (after `i_extra_isize`),
//! as far as the reader needs them: `system.data`, where an inline-data
//! file or directory continues past the 60 bytes of `i_block`.
//!
//! Layout: a 4-byte magic, then entries (name length, name index, value
//! offset, value inode, value size, hash, name, padded to 4 bytes) ending
//! in four zero bytes; value offsets count from the first entry.

use crate::bytes::{le16, le32};

/// `EXT4_XATTR_MAGIC`.
const MAGIC: u32 = 0xEA02_0000;
/// `EXT4_XATTR_INDEX_SYSTEM`.
pub(crate) const INDEX_SYSTEM: u8 = 7;
/// Bytes of an entry before its name.
const ENTRY_HEAD: usize = 16;

/// The value of attribute `index`.`name` in the in-inode attribute area
/// `ibody` (the inode's bytes after `i_extra_isize`), if present. An area
/// that does not parse is an error saying why.
pub(crate) fn ibody_value<'a>(ibody: &'a [u8], index: u8, name: &[u8]) -> Result<Option<&'a [u8]>, String> {
    if ibody.len() < 4 || le32(ibody, 0) != MAGIC {
        return Ok(None);
    }
    let area = &ibody[4..];
    let mut at = 0;
    while at + 4 <= area.len() && le32(area, at) != 0 {
        if at + ENTRY_HEAD > area.len() {
            return Err(format!("attribute entry at byte {at} runs past the inode"));
        }
        let name_len = usize::from(area[at]);
        let entry_index = area[at + 1];
        let value_offs = usize::from(le16(area, at + 2));
        let value_inum = le32(area, at + 4);
        let value_size = le32(area, at + 8) as usize;
        let name_end = at + ENTRY_HEAD + name_len;
        if name_end > area.len() {
            return Err(format!("attribute name at byte {at} runs past the inode"));
        }
        if entry_index == index && &area[at + ENTRY_HEAD..name_end] == name {
            if value_inum != 0 {
                return Err("attribute value kept in another inode".into());
            }
            return match value_offs.checked_add(value_size) {
                Some(end) if end <= area.len() => Ok(Some(&area[value_offs..end])),
                _ => Err(format!("attribute value of {value_size} bytes at {value_offs} runs past the inode")),
            };
        }
        at = (name_end + 3) & !3;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn area(entries: &[(u8, &[u8], &[u8])]) -> Vec<u8> {
        // Names first, values packed at the end, as ext4 lays them out.
        let mut head = MAGIC.to_le_bytes().to_vec();
        let names: usize = entries.iter().map(|(_, n, _)| (ENTRY_HEAD + n.len() + 3) & !3).sum::<usize>() + 4;
        let mut values = Vec::new();
        for (index, name, value) in entries {
            let offs = names + values.len();
            head.push(name.len() as u8);
            head.push(*index);
            head.extend_from_slice(&(offs as u16).to_le_bytes());
            head.extend_from_slice(&0u32.to_le_bytes());
            head.extend_from_slice(&(value.len() as u32).to_le_bytes());
            head.extend_from_slice(&0u32.to_le_bytes());
            head.extend_from_slice(name);
            while !(head.len() - 4).is_multiple_of(4) {
                head.push(0);
            }
            values.extend_from_slice(value);
        }
        head.extend_from_slice(&[0; 4]);
        head.extend_from_slice(&values);
        head
    }

    #[test]
    fn finds_system_data_among_others() {
        let a = area(&[(1, b"user.x", b"12345"), (INDEX_SYSTEM, b"data", b"continued")]);
        assert_eq!(ibody_value(&a, INDEX_SYSTEM, b"data"), Ok(Some(&b"continued"[..])));
        assert_eq!(ibody_value(&a, INDEX_SYSTEM, b"nope"), Ok(None));
        assert_eq!(ibody_value(&[0; 8], INDEX_SYSTEM, b"data"), Ok(None));
    }

    #[test]
    fn damaged_areas_are_errors_not_panics() {
        let a = area(&[(INDEX_SYSTEM, b"data", b"continued")]);
        for cut in 5..a.len() {
            let _ = ibody_value(&a[..cut], INDEX_SYSTEM, b"data");
        }
        let mut bad = a.clone();
        bad[4 + 8] = 0xFF; // value size
        assert!(ibody_value(&bad, INDEX_SYSTEM, b"data").is_err());
        let mut bad = a.clone();
        bad[4] = 200; // name length
        assert!(ibody_value(&bad, INDEX_SYSTEM, b"data").is_err());
    }
}
