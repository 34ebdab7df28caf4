//! An inode's attributes as one byte string (format 3): type and
//! permissions, owner, chattr flags, generation, device number, times,
//! every name the inode has (hard links), a symbolic link's target and the
//! extended attributes.
//!
//! Keeping all of it in one value keeps the journal's rule that every
//! record is an assignment: any change of names or attributes journals the
//! inode's whole [`Attr`] (tag 8), which replays the same however often it
//! is applied, and a rename, link or `setxattr` is one record. The first
//! [`ATTR_INLINE`] bytes live in the inode record; the rest in overflow
//! blocks of the extent-tree area, written copy-on-write with the file's
//! tree (see `home`), so a durable inode record always points at a whole
//! attribute string.
//!
//! An inode with attributes and no names (other than the root) is an
//! *orphan*: unlinked while open. It lives until its last close, and the
//! next read-write mount removes one a crash left behind, as ext4's orphan
//! list does.

use crate::codec::{get16, get32, get64, put16, put32, put64};
use crate::error::{Result, VolError};
use crate::limits::{MAX_ATTR_BYTES, NAME_MAX, SYMLINK_MAX};
use std::collections::BTreeMap;

/// `S_IFMT`: the file-type bits of a mode.
pub const S_IFMT: u32 = 0o170_000;
/// A directory.
pub const S_IFDIR: u32 = 0o040_000;
/// A regular file.
pub const S_IFREG: u32 = 0o100_000;
/// A symbolic link.
pub const S_IFLNK: u32 = 0o120_000;
/// A character device.
pub const S_IFCHR: u32 = 0o020_000;
/// A block device.
pub const S_IFBLK: u32 = 0o060_000;
/// A named pipe.
pub const S_IFIFO: u32 = 0o010_000;
/// A socket.
pub const S_IFSOCK: u32 = 0o140_000;

/// chattr `S`: writes are synchronous (durable when they return).
pub const FL_SYNC: u32 = 0x08;
/// chattr `i`: no change to contents, names or attributes.
pub const FL_IMMUTABLE: u32 = 0x10;
/// chattr `a`: writes only at the end; no truncation, no unlink.
pub const FL_APPEND: u32 = 0x20;
/// chattr `d`: skipped by dump.
pub const FL_NODUMP: u32 = 0x40;
/// chattr `A`: no access-time updates.
pub const FL_NOATIME: u32 = 0x80;
/// Attribute-string encoding bit: extended attribute value lengths take
/// 4 bytes (set only when a value is longer than 65535 bytes).
const WIDE_VALUES: u16 = 1;
/// Attribute-string encoding bit: a birth time (8 bytes) follows the
/// fixed fields.
const BIRTH_TIME: u16 = 2;
/// Longest extended attribute value (Linux's `XATTR_SIZE_MAX`).
pub const XATTR_VALUE_MAX: usize = 65536;
/// Every chattr flag the volume keeps (ext4's values).
pub const FL_KNOWN: u32 = FL_SYNC | FL_IMMUTABLE | FL_APPEND | FL_NODUMP | FL_NOATIME;

/// Bytes of the attribute string kept in the inode record itself.
pub const ATTR_INLINE: usize = 260;
/// Bytes of the fixed part of the attribute string.
const FIXED: usize = 56;
/// Longest extended-attribute name, in bytes (as Linux's `XATTR_NAME_MAX`).
pub const XATTR_NAME_MAX: usize = 255;
/// The namespaces an extended attribute's name may start with.
const XATTR_PREFIXES: [&str; 4] = ["user.", "trusted.", "security.", "system."];

/// One name of an inode: an entry of directory `parent`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Link {
    /// The directory holding the entry.
    pub parent: u64,
    /// The entry's name.
    pub name: Vec<u8>,
}

/// An inode's names and attributes. Times are nanoseconds since the epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attr {
    /// Type and permission bits, as `st_mode`.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// chattr flags (`FL_KNOWN`).
    pub flags: u32,
    /// Told apart from earlier inodes of the same number (file handles).
    pub generation: u32,
    /// Device number of a character or block device (`st_rdev`).
    pub rdev: u32,
    /// Last access.
    pub atime: i64,
    /// Last change of the contents.
    pub mtime: i64,
    /// Last change of the inode.
    pub ctime: i64,
    /// When the inode was made (`statx`'s birth time); 0 for inodes made
    /// before the volume kept it.
    pub btime: i64,
    /// Every name: one for a directory (none for the root), any number
    /// for other inodes (none: an orphan).
    pub links: Vec<Link>,
    /// A symbolic link's target.
    pub target: Vec<u8>,
    /// Extended attributes by full name (`user.x`).
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Attr {
    /// The type bits.
    pub fn kind(&self) -> u32 {
        self.mode & S_IFMT
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.kind() == S_IFDIR
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.kind() == S_IFREG
    }

    /// A symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.kind() == S_IFLNK
    }

    /// A directory's parent (the root: itself); for other inodes the
    /// directory of their first name.
    pub fn parent(&self) -> Option<u64> {
        self.links.first().map(|l| l.parent)
    }

    /// The root directory of a new volume, made at `now`.
    pub fn root(now: i64) -> Attr {
        Attr { mode: S_IFDIR | 0o755, atime: now, mtime: now, ctime: now, btime: now, generation: 1, ..Attr::default() }
    }

    /// The attribute string, [`MAX_ATTR_BYTES`] at most (checked before
    /// any attribute is kept).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; FIXED];
        put32(&mut b, 0, self.mode);
        put32(&mut b, 4, self.uid);
        put32(&mut b, 8, self.gid);
        put32(&mut b, 12, self.flags);
        put32(&mut b, 16, self.generation);
        put32(&mut b, 20, self.rdev);
        put64(&mut b, 24, self.atime as u64);
        put64(&mut b, 32, self.mtime as u64);
        put64(&mut b, 40, self.ctime as u64);
        put16(&mut b, 48, self.links.len() as u16);
        put16(&mut b, 50, self.target.len() as u16);
        put16(&mut b, 52, self.xattrs.len() as u16);
        let wide = self.wide_values();
        let born = self.btime != 0;
        put16(&mut b, 54, if wide { WIDE_VALUES } else { 0 } | if born { BIRTH_TIME } else { 0 });
        if born {
            b.extend_from_slice(&self.btime.to_le_bytes());
        }
        for l in &self.links {
            b.extend_from_slice(&(l.parent as u32).to_le_bytes());
            b.push(l.name.len() as u8);
            b.extend_from_slice(&l.name);
        }
        b.extend_from_slice(&self.target);
        for (k, v) in &self.xattrs {
            b.push(k.len() as u8);
            if wide {
                b.extend_from_slice(&(v.len() as u32).to_le_bytes());
            } else {
                b.extend_from_slice(&(v.len() as u16).to_le_bytes());
            }
            b.extend_from_slice(k);
            b.extend_from_slice(v);
        }
        assert!(b.len() <= MAX_ATTR_BYTES, "attribute sizes are checked before they are kept");
        b
    }

    /// Whether a value is too long for a 16-bit length (Linux allows
    /// 65536 bytes): then every value's length takes 4 bytes.
    fn wide_values(&self) -> bool {
        self.xattrs.values().any(|v| v.len() > usize::from(u16::MAX))
    }

    /// Bytes [`Attr::encode`] gives, without encoding.
    pub fn encoded_len(&self) -> usize {
        let len_bytes = if self.wide_values() { 4 } else { 2 };
        FIXED
            + if self.btime != 0 { 8 } else { 0 }
            + self.links.iter().map(|l| 5 + l.name.len()).sum::<usize>()
            + self.target.len()
            + self.xattrs.iter().map(|(k, v)| 1 + len_bytes + k.len() + v.len()).sum::<usize>()
    }

    /// Parse an attribute string, checking it as [`Attr::validate`] does.
    pub fn decode(b: &[u8]) -> std::result::Result<Attr, String> {
        if b.len() < FIXED || b.len() > MAX_ATTR_BYTES {
            return Err(format!("attributes of {} bytes", b.len()));
        }
        let mut a = Attr {
            mode: get32(b, 0),
            uid: get32(b, 4),
            gid: get32(b, 8),
            flags: get32(b, 12),
            generation: get32(b, 16),
            rdev: get32(b, 20),
            atime: get64(b, 24) as i64,
            mtime: get64(b, 32) as i64,
            ctime: get64(b, 40) as i64,
            ..Attr::default()
        };
        let (links, target, xattrs, encoding) = (get16(b, 48), get16(b, 50) as usize, get16(b, 52), get16(b, 54));
        if encoding & !(WIDE_VALUES | BIRTH_TIME) != 0 {
            return Err(format!("unknown encoding bits {encoding:#x}"));
        }
        let wide = encoding & WIDE_VALUES != 0;
        let mut at = FIXED;
        let short = || "attributes cut short".to_string();
        let take = |at: &mut usize, n: usize| -> std::result::Result<std::ops::Range<usize>, String> {
            let r = *at..at.checked_add(n).filter(|&e| e <= b.len()).ok_or_else(short)?;
            *at = r.end;
            Ok(r)
        };
        if encoding & BIRTH_TIME != 0 {
            let r = take(&mut at, 8)?;
            a.btime = get64(b, r.start) as i64;
            if a.btime == 0 {
                return Err("a birth time of 0 stored".into());
            }
        }
        for _ in 0..links {
            let head = take(&mut at, 5)?;
            let parent = u64::from(get32(b, head.start));
            let name = take(&mut at, b[head.start + 4] as usize)?;
            a.links.push(Link { parent, name: b[name].to_vec() });
        }
        a.target = b[take(&mut at, target)?].to_vec();
        for _ in 0..xattrs {
            let head = take(&mut at, if wide { 5 } else { 3 })?;
            let klen = b[head.start] as usize;
            let vlen = if wide { get32(b, head.start + 1) as usize } else { get16(b, head.start + 1) as usize };
            let k = b[take(&mut at, klen)?].to_vec();
            let v = b[take(&mut at, vlen)?].to_vec();
            // Stored in name order, as encoding writes them: a string in
            // any other order would not read back as the same bytes.
            if a.xattrs.last_key_value().is_some_and(|(last, _)| *last >= k) {
                return Err("extended attributes out of name order, or one named twice".into());
            }
            a.xattrs.insert(k, v);
        }
        if wide != a.wide_values() {
            return Err("value lengths of the wrong width".into());
        }
        if at != b.len() {
            return Err(format!("{} bytes past the attributes", b.len() - at));
        }
        a.validate()?;
        Ok(a)
    }

    /// What every stored attribute must satisfy on its own.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let kind = self.kind();
        if ![S_IFREG, S_IFDIR, S_IFLNK, S_IFCHR, S_IFBLK, S_IFIFO, S_IFSOCK].contains(&kind) {
            return Err(format!("mode {:o} is no file type", self.mode));
        }
        if self.flags & !FL_KNOWN != 0 {
            return Err(format!("unknown flags {:#x}", self.flags));
        }
        if kind == S_IFDIR && self.links.len() > 1 {
            return Err(format!("a directory with {} names", self.links.len()));
        }
        for l in &self.links {
            if l.parent == 0 || l.parent > u64::from(u32::MAX) {
                return Err(format!("parent {}", l.parent));
            }
            check_name(&l.name).map_err(|e| e.to_string())?;
        }
        for w in self.links.windows(2) {
            if w[0] >= w[1] {
                return Err("names out of order or twice".into());
            }
        }
        match (kind == S_IFLNK, self.target.len()) {
            (true, 0) => return Err("a symbolic link to nothing".into()),
            (true, n) if n > SYMLINK_MAX => return Err(format!("a symbolic link of {n} bytes")),
            (true, _) if self.target.contains(&0) => return Err("a symbolic link holding NUL".into()),
            (false, n) if n > 0 => return Err(format!("a {n}-byte link target on mode {:o}", self.mode)),
            _ => {}
        }
        if self.rdev != 0 && kind != S_IFCHR && kind != S_IFBLK {
            return Err(format!("device number {:#x} on mode {:o}", self.rdev, self.mode));
        }
        for (k, v) in &self.xattrs {
            check_xattr_name(k).map_err(|e| e.to_string())?;
            if v.len() > XATTR_VALUE_MAX {
                return Err(format!("an extended attribute value of {} bytes", v.len()));
            }
        }
        if self.encoded_len() > MAX_ATTR_BYTES {
            return Err(format!("attributes of {} bytes", self.encoded_len()));
        }
        Ok(())
    }

    /// Refuse a change that would make the attributes too large to keep.
    /// `max`: the volume's [`crate::Superblock::max_attr_bytes`].
    pub fn check_room(&self, max: usize) -> Result<()> {
        let len = self.encoded_len();
        if len > max {
            return Err(VolError::NoRoom { bytes: len, max });
        }
        Ok(())
    }

    /// The journal record (tag 8): ino, length, then the attribute string.
    pub fn encode_record(&self, ino: u64, out: &mut Vec<u8>) {
        let b = self.encode();
        out.push(ATTR_TAG);
        out.extend_from_slice(&ino.to_le_bytes());
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(&b);
    }

    /// Decode a tag-8 record's body (after the tag): `(ino, attr, bytes
    /// read)`.
    pub fn decode_record(b: &[u8]) -> std::result::Result<(u64, Attr, usize), String> {
        if b.len() < ATTR_FIXED {
            return Err("attribute record cut short".into());
        }
        let (ino, len) = (get64(b, 0), get64(b, 8));
        if len > MAX_ATTR_BYTES as u64 || b.len() < ATTR_FIXED + len as usize {
            return Err(format!("attribute record of {len} bytes"));
        }
        let attr = Attr::decode(&b[ATTR_FIXED..ATTR_FIXED + len as usize])?;
        Ok((ino, attr, ATTR_FIXED + len as usize))
    }
}

/// Nanoseconds since the epoch, now.
pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// The attribute record's tag in the journal.
pub const ATTR_TAG: u8 = 8;
/// Bytes of an attribute record after its tag, before the string.
pub const ATTR_FIXED: usize = 16;

/// Refuse a name no directory may hold.
pub fn check_name(name: &[u8]) -> Result<()> {
    let why = if name.is_empty() {
        "empty"
    } else if name == b"." || name == b".." {
        "reserved"
    } else if name.contains(&b'/') || name.contains(&0) {
        "holds '/' or NUL"
    } else if name.len() > NAME_MAX {
        "longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(VolError::InvalidName { name: String::from_utf8_lossy(name).into_owned(), why })
}

/// Refuse an extended attribute's name: empty, too long, holding NUL, or
/// outside the namespaces Linux knows.
pub fn check_xattr_name(name: &[u8]) -> Result<()> {
    let bad = |why: &'static str| Err(VolError::InvalidName { name: String::from_utf8_lossy(name).into_owned(), why });
    if name.len() > XATTR_NAME_MAX {
        return bad("longer than 255 bytes");
    }
    if name.contains(&0) {
        return bad("holds NUL");
    }
    match XATTR_PREFIXES.iter().find(|p| name.starts_with(p.as_bytes())) {
        Some(p) if name.len() > p.len() => Ok(()),
        Some(_) => bad("empty after its namespace"),
        None => bad("in no namespace (user., trusted., security., system.)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(parent: u64, name: &str) -> Attr {
        Attr { mode: S_IFREG | 0o644, links: vec![Link { parent, name: name.as_bytes().to_vec() }], ..Attr::default() }
    }

    #[test]
    fn attributes_round_trip_in_strings_and_the_journal() {
        let mut a = Attr {
            uid: 7,
            gid: 9,
            atime: -5,
            mtime: 1 << 40,
            ctime: 3,
            btime: 2,
            generation: 4,
            ..file(12, "fio.0.0")
        };
        a.links.push(Link { parent: 13, name: vec![b'x'; NAME_MAX] });
        a.xattrs.insert(b"user.k".to_vec(), vec![1, 2, 3]);
        a.xattrs.insert(b"security.selinux".to_vec(), Vec::new());
        let b = a.encode();
        assert_eq!(b.len(), a.encoded_len());
        assert_eq!(Attr::decode(&b).unwrap(), a);
        let mut j = Vec::new();
        a.encode_record(40, &mut j);
        assert_eq!(j[0], ATTR_TAG);
        assert_eq!(Attr::decode_record(&j[1..]).unwrap(), (40, a.clone(), j.len() - 1));
        assert!(Attr::decode_record(&j[1..j.len() - 1]).is_err(), "cut short");
        let link = Attr { mode: S_IFLNK | 0o777, target: b"../a/b".to_vec(), ..file(12, "l") };
        assert_eq!(Attr::decode(&link.encode()).unwrap(), link);
        let dev = Attr { mode: S_IFCHR | 0o600, rdev: 0x0103, ..file(12, "null") };
        assert_eq!(Attr::decode(&dev.encode()).unwrap(), dev);
        // A value of Linux's largest size widens every value's length.
        let mut wide = a.clone();
        wide.xattrs.insert(b"user.long".to_vec(), vec![9; XATTR_VALUE_MAX]);
        let b = wide.encode();
        assert_eq!((b.len(), get16(&b, 54)), (wide.encoded_len(), WIDE_VALUES | BIRTH_TIME));
        assert_eq!(Attr::decode(&b).unwrap(), wide);
    }

    /// A string whose attributes are out of name order (or of the other
    /// width) would not encode back to the same bytes, and so not to the
    /// same checksum: refused when read, not rewritten later.
    #[test]
    fn attributes_in_another_order_or_width_are_refused() {
        let mut a = file(12, "f");
        a.xattrs.insert(b"user.a".to_vec(), b"1".to_vec());
        a.xattrs.insert(b"user.b".to_vec(), b"2".to_vec());
        let b = a.encode();
        let at = b.len() - 2 * (1 + 2 + 6 + 1);
        let mut swapped = b[..at].to_vec();
        swapped.extend_from_slice(&b[at + 10..]);
        swapped.extend_from_slice(&b[at..at + 10]);
        assert!(Attr::decode(&swapped).unwrap_err().contains("order"));
        let mut widened = b.clone();
        put16(&mut widened, 54, WIDE_VALUES);
        assert!(Attr::decode(&widened).is_err());
        let mut unknown = b;
        put16(&mut unknown, 54, 2);
        assert!(Attr::decode(&unknown).is_err());
    }

    #[test]
    fn impossible_attributes_are_refused() {
        let ok = file(12, "f");
        let cases = [
            Attr { mode: 0o644, ..ok.clone() },
            Attr { flags: 0x1000_0000, ..ok.clone() },
            Attr { mode: S_IFLNK | 0o777, ..ok.clone() },
            Attr { target: b"x".to_vec(), ..ok.clone() },
            Attr { rdev: 5, ..ok.clone() },
            Attr { links: vec![ok.links[0].clone(), ok.links[0].clone()], ..ok.clone() },
            Attr {
                mode: S_IFDIR | 0o755,
                links: vec![ok.links[0].clone(), Link { parent: 1, name: b"g".to_vec() }],
                ..ok.clone()
            },
            Attr { links: vec![Link { parent: 0, name: b"f".to_vec() }], ..ok.clone() },
        ];
        for (i, c) in cases.iter().enumerate() {
            assert!(c.validate().is_err(), "case {i}: {c:?}");
        }
        let mut xa = ok.clone();
        xa.xattrs.insert(b"nospace".to_vec(), vec![]);
        assert!(xa.validate().is_err());
        let mut big = ok;
        big.xattrs.insert(b"user.big".to_vec(), vec![0; MAX_ATTR_BYTES]);
        assert!(big.validate().is_err() && big.check_room(MAX_ATTR_BYTES).is_err());
    }

    #[test]
    fn bad_names_are_refused() {
        for n in ["", ".", "..", "a/b", "a\0b"] {
            assert!(check_name(n.as_bytes()).is_err(), "{n:?}");
        }
        assert!(check_name(&[b'x'; NAME_MAX]).is_ok());
        assert!(check_name(&[b'x'; NAME_MAX + 1]).is_err());
        assert!(check_xattr_name(b"user.a").is_ok());
        for n in [&b"user."[..], b"other.a", b"user.\0"] {
            assert!(check_xattr_name(n).is_err(), "{n:?}");
        }
    }
}
