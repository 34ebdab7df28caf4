//! The directory tree. Every inode names itself: its record holds its
//! parent directory's number and its own name beside its attributes (mode,
//! owner, times), so a directory is an inode that others name as parent
//! and holds no data of its own. One inode has one name (no hard links).
//!
//! This keeps the journal's rule that every record is an assignment: a
//! create, rename or `chmod` journals the inode's whole [`Attr`] (tag 8),
//! which replays the same however often it is applied, and a rename is one
//! record however far it moves. An inode's name is journaled right after
//! the engine journals its creation, by the same thread and before the
//! file is handed out, so nothing written to the file can be durable
//! unless the name is; a crash between the two leaves an empty, nameless
//! inode, which mount removes. Mount and check verify the tree: every
//! parent a live directory, no two entries of one directory alike, every
//! inode reachable from the root.

use crate::codec::{get16, get32, get64, put16, put32, put64};
use crate::error::{Result, VolError};
use crate::format::{NAME_MAX, ROOT_INO};
use mballoc_fs::IdMap;
use std::collections::BTreeMap;

/// `S_IFMT`: the file-type bits of a mode.
pub const S_IFMT: u32 = 0o170_000;
/// A directory.
pub const S_IFDIR: u32 = 0o040_000;
/// A regular file.
pub const S_IFREG: u32 = 0o100_000;

/// Where the attribute half starts inside an inode record.
pub const ATTR_OFFSET: usize = 256;
const NAME_AT: usize = ATTR_OFFSET + 48;

/// An inode's name and attributes. Times are nanoseconds since the epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attr {
    /// The directory holding it; the root is its own parent.
    pub parent: u64,
    /// Type and permission bits, as `st_mode`.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Last access.
    pub atime: i64,
    /// Last change of the contents.
    pub mtime: i64,
    /// Last change of the inode.
    pub ctime: i64,
    /// The name in its parent (empty for the root).
    pub name: Vec<u8>,
}

impl Attr {
    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }

    /// The root directory of a new volume, made at `now`.
    pub fn root(now: i64) -> Attr {
        Attr { parent: ROOT_INO, mode: S_IFDIR | 0o755, atime: now, mtime: now, ctime: now, ..Attr::default() }
    }

    /// Write into an inode record's attribute half (`out` is the whole
    /// record; only `[ATTR_OFFSET, 508)` is touched).
    pub fn encode_into(&self, out: &mut [u8]) {
        assert!(self.name.len() <= NAME_MAX, "names are checked before they are kept");
        put64(out, ATTR_OFFSET, self.parent);
        put32(out, ATTR_OFFSET + 8, self.mode);
        put32(out, ATTR_OFFSET + 12, self.uid);
        put32(out, ATTR_OFFSET + 16, self.gid);
        put16(out, ATTR_OFFSET + 20, self.name.len() as u16);
        put64(out, ATTR_OFFSET + 24, self.atime as u64);
        put64(out, ATTR_OFFSET + 32, self.mtime as u64);
        put64(out, ATTR_OFFSET + 40, self.ctime as u64);
        out[NAME_AT..NAME_AT + self.name.len()].copy_from_slice(&self.name);
    }

    /// Read an inode record's attribute half: `None` if it has none (the
    /// inode of a create cut short by a crash).
    pub fn decode_from(b: &[u8]) -> std::result::Result<Option<Attr>, String> {
        let mode = get32(b, ATTR_OFFSET + 8);
        if mode == 0 {
            return Ok(None);
        }
        let len = get16(b, ATTR_OFFSET + 20) as usize;
        if len > NAME_MAX {
            return Err(format!("name of {len} bytes"));
        }
        let attr = Attr {
            parent: get64(b, ATTR_OFFSET),
            mode,
            uid: get32(b, ATTR_OFFSET + 12),
            gid: get32(b, ATTR_OFFSET + 16),
            atime: get64(b, ATTR_OFFSET + 24) as i64,
            mtime: get64(b, ATTR_OFFSET + 32) as i64,
            ctime: get64(b, ATTR_OFFSET + 40) as i64,
            name: b[NAME_AT..NAME_AT + len].to_vec(),
        };
        attr.validate().map(|()| Some(attr))
    }

    /// What every stored attribute must satisfy on its own.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let kind = self.mode & S_IFMT;
        if kind != S_IFDIR && kind != S_IFREG {
            return Err(format!("mode {:o} is neither a file nor a directory", self.mode));
        }
        if self.parent == 0 || self.parent > u64::from(u32::MAX) {
            return Err(format!("parent {}", self.parent));
        }
        if self.parent != ROOT_INO || !self.name.is_empty() {
            check_name(&self.name).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The journal record (tag 8): ino, parent, mode | uid << 32, gid,
    /// atime, mtime, ctime, name length, then the name's bytes.
    pub fn encode_record(&self, ino: u64, out: &mut Vec<u8>) {
        out.push(ATTR_TAG);
        for x in [
            ino,
            self.parent,
            u64::from(self.mode) | u64::from(self.uid) << 32,
            u64::from(self.gid),
            self.atime as u64,
            self.mtime as u64,
            self.ctime as u64,
            self.name.len() as u64,
        ] {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out.extend_from_slice(&self.name);
    }

    /// Decode a tag-8 record's body (after the tag): `(ino, attr, bytes
    /// read)`.
    pub fn decode_record(b: &[u8]) -> std::result::Result<(u64, Attr, usize), String> {
        if b.len() < ATTR_FIXED {
            return Err("attribute record cut short".into());
        }
        let x = |i: usize| get64(b, i * 8);
        let len = x(7) as usize;
        if len > NAME_MAX || b.len() < ATTR_FIXED + len {
            return Err(format!("attribute record with a name of {} bytes", x(7)));
        }
        let attr = Attr {
            parent: x(1),
            mode: x(2) as u32,
            uid: (x(2) >> 32) as u32,
            gid: x(3) as u32,
            atime: x(4) as i64,
            mtime: x(5) as i64,
            ctime: x(6) as i64,
            name: b[ATTR_FIXED..ATTR_FIXED + len].to_vec(),
        };
        attr.validate()?;
        Ok((x(0), attr, ATTR_FIXED + len))
    }
}

/// Nanoseconds since the epoch, now.
pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// The attribute record's tag in the journal.
pub const ATTR_TAG: u8 = 8;
/// Bytes of an attribute record after its tag, before the name.
pub const ATTR_FIXED: usize = 8 * 8;

/// Refuse a name no directory may hold.
pub fn check_name(name: &[u8]) -> Result<()> {
    let why = if name.is_empty() {
        "empty"
    } else if name == b"." || name == b".." {
        "reserved"
    } else if name.contains(&b'/') || name.contains(&0) {
        "holds '/' or NUL"
    } else if name.len() > NAME_MAX {
        "longer than 202 bytes"
    } else {
        return Ok(());
    };
    Err(VolError::InvalidName { name: String::from_utf8_lossy(name).into_owned(), why })
}

/// The tree as mounted: every inode's attributes, and each directory's
/// entries by name.
#[derive(Debug, Default, Clone)]
pub struct Tree {
    /// By inode number.
    pub attrs: IdMap<Attr>,
    /// Directory → name → inode.
    pub entries: IdMap<BTreeMap<Vec<u8>, u64>>,
}

impl Tree {
    /// Build from every inode's attributes, checking that they form one
    /// tree from the root. Inodes without attributes are not in `attrs`.
    pub fn build(attrs: IdMap<Attr>) -> std::result::Result<Tree, Vec<String>> {
        let mut problems = Vec::new();
        let mut entries: IdMap<BTreeMap<Vec<u8>, u64>> = IdMap::default();
        match attrs.get(&ROOT_INO) {
            Some(a) if a.is_dir() && a.parent == ROOT_INO => {}
            Some(_) => problems.push("inode 1: the root is not a directory that is its own parent".to_string()),
            None => problems.push("inode 1: no root directory".to_string()),
        }
        for (&ino, a) in &attrs {
            if a.is_dir() {
                entries.entry(ino).or_default();
            }
        }
        let mut sorted: Vec<(&u64, &Attr)> = attrs.iter().collect();
        sorted.sort_unstable_by_key(|(&i, _)| i);
        for (&ino, a) in sorted {
            if ino == ROOT_INO {
                continue;
            }
            match attrs.get(&a.parent) {
                Some(p) if p.is_dir() => {}
                _ => {
                    problems.push(format!("inode {ino}: parent {} is not a directory", a.parent));
                    continue;
                }
            }
            let dir = entries.get_mut(&a.parent).expect("made for every directory");
            if let Some(other) = dir.insert(a.name.clone(), ino) {
                problems.push(format!(
                    "inode {ino}: directory {} already names inode {other} {:?}",
                    a.parent,
                    String::from_utf8_lossy(&a.name)
                ));
            }
        }
        if problems.is_empty() {
            // Every inode must lead to the root: a cycle of directories
            // naming each other as parent is reachable from nowhere.
            for &ino in attrs.keys() {
                let (mut at, mut steps) = (ino, 0usize);
                while at != ROOT_INO {
                    at = attrs[&at].parent;
                    steps += 1;
                    if steps > attrs.len() {
                        problems.push(format!("inode {ino}: not reachable from the root"));
                        break;
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(Tree { attrs, entries })
        } else {
            Err(problems)
        }
    }

    /// The attributes of `ino`.
    pub fn attr(&self, ino: u64) -> Result<&Attr> {
        self.attrs.get(&ino).ok_or(VolError::NoInode(ino))
    }

    /// A directory's entries.
    pub fn dir(&self, ino: u64) -> Result<&BTreeMap<Vec<u8>, u64>> {
        match self.attrs.get(&ino) {
            None => Err(VolError::NoInode(ino)),
            Some(a) if !a.is_dir() => Err(VolError::NotADirectory(ino)),
            Some(_) => Ok(&self.entries[&ino]),
        }
    }

    /// The entry `name` of directory `dir`.
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<u64> {
        self.dir(dir)?
            .get(name)
            .copied()
            .ok_or_else(|| VolError::NoEntry { dir, name: String::from_utf8_lossy(name).into_owned() })
    }

    /// Whether `ino` is `dir` or lies under it.
    pub fn is_within(&self, mut ino: u64, dir: u64) -> bool {
        loop {
            if ino == dir {
                return true;
            }
            if ino == ROOT_INO {
                return false;
            }
            ino = self.attrs[&ino].parent;
        }
    }

    /// Put `ino` in the tree with `attr` (its parent is a directory and the
    /// name free: the caller checked).
    pub fn insert(&mut self, ino: u64, attr: Attr) {
        if attr.is_dir() {
            self.entries.entry(ino).or_default();
        }
        let old = self.entries.get_mut(&attr.parent).expect("the parent is a directory").insert(attr.name.clone(), ino);
        assert!(old.is_none(), "inode {ino}: the name was free");
        self.attrs.insert(ino, attr);
    }

    /// Take `ino` out of its directory; its attributes go with it.
    pub fn remove(&mut self, ino: u64) -> Attr {
        let a = self.attrs.remove(&ino).expect("a live inode");
        let gone = self.entries.get_mut(&a.parent).and_then(|d| d.remove(&a.name));
        assert_eq!(gone, Some(ino), "inode {ino} was named in its parent");
        if a.is_dir() {
            let e = self.entries.remove(&ino).unwrap_or_default();
            assert!(e.is_empty(), "only empty directories are removed");
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(parent: u64, name: &str) -> Attr {
        Attr { parent, mode: S_IFREG | 0o644, name: name.as_bytes().to_vec(), ..Attr::default() }
    }

    fn dir(parent: u64, name: &str) -> Attr {
        Attr { mode: S_IFDIR | 0o755, ..file(parent, name) }
    }

    #[test]
    fn attributes_round_trip_in_records_and_the_journal() {
        let a = Attr { uid: 7, gid: 9, atime: -5, mtime: 1 << 40, ctime: 3, ..file(12, "fio.0.0") };
        let mut rec = vec![0u8; 512];
        a.encode_into(&mut rec);
        assert_eq!(Attr::decode_from(&rec).unwrap(), Some(a.clone()));
        assert_eq!(Attr::decode_from(&[0u8; 512]).unwrap(), None);
        let mut j = Vec::new();
        a.encode_record(40, &mut j);
        assert_eq!(j[0], ATTR_TAG);
        assert_eq!(Attr::decode_record(&j[1..]).unwrap(), (40, a, j.len() - 1));
        assert!(Attr::decode_record(&j[1..j.len() - 1]).is_err(), "cut short");
    }

    #[test]
    fn bad_names_are_refused() {
        for n in ["", ".", "..", "a/b", "a\0b"] {
            assert!(check_name(n.as_bytes()).is_err(), "{n:?}");
        }
        assert!(check_name(&[b'x'; NAME_MAX]).is_ok());
        assert!(check_name(&[b'x'; NAME_MAX + 1]).is_err());
    }

    #[test]
    fn the_tree_is_checked() {
        let mut attrs = IdMap::default();
        attrs.insert(ROOT_INO, Attr::root(0));
        attrs.insert(12, dir(ROOT_INO, "d"));
        attrs.insert(13, file(12, "f"));
        let t = Tree::build(attrs.clone()).unwrap();
        assert_eq!(t.lookup(12, b"f").unwrap(), 13);
        assert!(t.is_within(13, ROOT_INO) && !t.is_within(12, 13));
        assert!(matches!(t.lookup(13, b"x"), Err(VolError::NotADirectory(13))));

        let mut twin = attrs.clone();
        twin.insert(14, file(12, "f"));
        assert!(Tree::build(twin).is_err(), "two entries alike");
        let mut orphan = attrs.clone();
        orphan.insert(14, file(99, "g"));
        assert!(Tree::build(orphan).is_err(), "parent missing");
        let mut under_file = attrs.clone();
        under_file.insert(14, file(13, "g"));
        assert!(Tree::build(under_file).is_err(), "parent not a directory");
        let mut cycle = attrs;
        cycle.insert(20, dir(21, "a"));
        cycle.insert(21, dir(20, "b"));
        assert!(Tree::build(cycle).is_err(), "a loop reachable from nowhere");
    }
}
