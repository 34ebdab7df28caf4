//! The directory tree, built from every inode's names ([`Attr::links`]):
//! a directory is an inode that others name as parent and holds no data
//! of its own. A directory has one name (the root none); any other inode
//! has as many as it has hard links, and none while it is an orphan
//! (unlinked, still open).
//!
//! Mount and check verify the tree: every parent a live directory, no two
//! entries of one directory alike, every directory reachable from the
//! root. Inodes the engine made whose names never reached the journal (a
//! crash between the create and its attribute record) have no attributes
//! at all; mount removes them, with the orphans.

pub use crate::attr::{check_name, now, Attr, Link, S_IFDIR, S_IFMT, S_IFREG};
use crate::error::{Result, VolError};
use crate::format::ROOT_INO;
use mballoc_fs::IdMap;
use std::collections::BTreeMap;

/// The tree as mounted: every inode's attributes, and each directory's
/// entries by name.
#[derive(Debug, Default, Clone)]
pub struct Tree {
    /// By inode number.
    pub attrs: IdMap<Attr>,
    /// Directory → name → inode.
    pub entries: IdMap<BTreeMap<Vec<u8>, u64>>,
    /// Directory → how many of its entries are directories.
    subdirs: IdMap<u32>,
}

impl Tree {
    /// Build from every inode's attributes, checking that they form one
    /// tree from the root. Inodes without attributes are not in `attrs`.
    pub fn build(attrs: IdMap<Attr>) -> std::result::Result<Tree, Vec<String>> {
        let mut problems = Vec::new();
        let mut t = Tree { attrs: IdMap::default(), entries: IdMap::default(), subdirs: IdMap::default() };
        match attrs.get(&ROOT_INO) {
            Some(a) if a.is_dir() && a.links.is_empty() => {}
            Some(_) => problems.push("inode 1: the root is not a directory without a name".to_string()),
            None => problems.push("inode 1: no root directory".to_string()),
        }
        for (&ino, a) in &attrs {
            if a.is_dir() {
                t.entries.entry(ino).or_default();
            }
        }
        let mut sorted: Vec<(&u64, &Attr)> = attrs.iter().collect();
        sorted.sort_unstable_by_key(|(&i, _)| i);
        for (&ino, a) in sorted {
            if ino == ROOT_INO {
                continue;
            }
            // A directory has one name, or none: removed while open, an
            // orphan the next read-write mount removes.
            if a.is_dir() && a.links.len() > 1 {
                problems.push(format!("inode {ino}: a directory with {} names", a.links.len()));
                continue;
            }
            for l in &a.links {
                let Some(parent) = attrs.get(&l.parent).filter(|p| p.is_dir()) else {
                    problems.push(format!("inode {ino}: parent {} is not a directory", l.parent));
                    continue;
                };
                if l.parent != ROOT_INO && parent.links.is_empty() {
                    problems.push(format!("inode {ino}: parent {} is a removed directory", l.parent));
                    continue;
                }
                let dir = t.entries.get_mut(&l.parent).expect("made for every directory");
                if let Some(other) = dir.insert(l.name.clone(), ino) {
                    problems.push(format!(
                        "inode {ino}: directory {} already names inode {other} {:?}",
                        l.parent,
                        String::from_utf8_lossy(&l.name)
                    ));
                }
                if a.is_dir() {
                    *t.subdirs.entry(l.parent).or_default() += 1;
                }
            }
        }
        if problems.is_empty() {
            // Every directory must lead to the root: a cycle of
            // directories naming each other as parent is reachable from
            // nowhere (other inodes hang off directories).
            for (&ino, a) in &attrs {
                if !a.is_dir() {
                    continue;
                }
                let (mut at, mut steps) = (ino, 0usize);
                while at != ROOT_INO {
                    // An orphan leads nowhere, and is no cycle.
                    let Some(p) = attrs[&at].parent() else { break };
                    at = p;
                    steps += 1;
                    if steps > attrs.len() {
                        problems.push(format!("inode {ino}: not reachable from the root"));
                        break;
                    }
                }
            }
        }
        if problems.is_empty() {
            t.attrs = attrs;
            Ok(t)
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

    /// Whether directory `ino` is `dir` or lies under it.
    pub fn is_within(&self, mut ino: u64, dir: u64) -> bool {
        loop {
            if ino == dir {
                return true;
            }
            if ino == ROOT_INO {
                return false;
            }
            // A directory removed while open is under nothing.
            match self.attrs[&ino].parent() {
                Some(p) => ino = p,
                None => return false,
            }
        }
    }

    /// `st_nlink`: a directory's two plus its subdirectories, another
    /// inode's names.
    pub fn nlink(&self, ino: u64) -> Result<u32> {
        let a = self.attr(ino)?;
        Ok(if a.is_dir() && (ino == ROOT_INO || !a.links.is_empty()) {
            2 + self.subdirs.get(&ino).copied().unwrap_or(0)
        } else {
            a.links.len() as u32
        })
    }

    /// Inodes with attributes and no name: unlinked while open.
    pub fn orphans(&self) -> Vec<u64> {
        let mut v: Vec<u64> =
            self.attrs.iter().filter(|(&i, a)| i != ROOT_INO && a.links.is_empty()).map(|(&i, _)| i).collect();
        v.sort_unstable();
        v
    }

    /// Put `ino` in the tree with `attr`, under every name it has (each
    /// parent a directory and each name free: the caller checked).
    pub fn insert(&mut self, ino: u64, attr: Attr) {
        if attr.is_dir() {
            self.entries.entry(ino).or_default();
        }
        for l in &attr.links {
            self.add_entry(ino, attr.is_dir(), l);
        }
        self.attrs.insert(ino, attr);
    }

    /// Give `ino` one more name (the parent a directory, the name free).
    pub fn link(&mut self, ino: u64, l: Link) {
        let dir = self.attrs[&ino].is_dir();
        self.add_entry(ino, dir, &l);
        let a = self.attrs.get_mut(&ino).expect("a live inode");
        let at = a.links.binary_search(&l).expect_err("a new name");
        a.links.insert(at, l);
    }

    /// Take one name from `ino`; it stays in the tree (an orphan, if that
    /// was its last).
    pub fn unlink(&mut self, ino: u64, l: &Link) {
        let dir = self.attrs[&ino].is_dir();
        self.drop_entry(ino, dir, l);
        let a = self.attrs.get_mut(&ino).expect("a live inode");
        let at = a.links.binary_search(l).expect("a name it has");
        a.links.remove(at);
    }

    /// Take `ino` out of the tree under every name; its attributes go
    /// with it. A directory must be empty.
    pub fn remove(&mut self, ino: u64) -> Attr {
        let a = self.attrs.remove(&ino).expect("a live inode");
        for l in &a.links {
            self.drop_entry(ino, a.is_dir(), l);
        }
        if a.is_dir() {
            let e = self.entries.remove(&ino).unwrap_or_default();
            assert!(e.is_empty(), "only empty directories are removed");
            self.subdirs.remove(&ino);
        }
        a
    }

    fn add_entry(&mut self, ino: u64, dir: bool, l: &Link) {
        let old = self.entries.get_mut(&l.parent).expect("the parent is a directory").insert(l.name.clone(), ino);
        assert!(old.is_none(), "inode {ino}: the name was free");
        if dir {
            *self.subdirs.entry(l.parent).or_default() += 1;
        }
    }

    fn drop_entry(&mut self, ino: u64, dir: bool, l: &Link) {
        let gone = self.entries.get_mut(&l.parent).and_then(|d| d.remove(&l.name));
        assert_eq!(gone, Some(ino), "inode {ino} was named in its parent");
        if dir {
            let n = self.subdirs.get_mut(&l.parent).expect("counted");
            *n -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(parent: u64, name: &str) -> Attr {
        Attr { mode: S_IFREG | 0o644, links: vec![Link { parent, name: name.as_bytes().to_vec() }], ..Attr::default() }
    }

    fn dir(parent: u64, name: &str) -> Attr {
        Attr { mode: S_IFDIR | 0o755, ..file(parent, name) }
    }

    #[test]
    fn the_tree_is_checked() {
        let mut attrs = IdMap::default();
        attrs.insert(ROOT_INO, Attr::root(0));
        attrs.insert(12, dir(ROOT_INO, "d"));
        let mut f = file(12, "f");
        f.links.push(Link { parent: ROOT_INO, name: b"hard".to_vec() });
        f.links.sort();
        attrs.insert(13, f);
        attrs.insert(14, Attr { links: vec![], ..file(12, "gone") });
        let t = Tree::build(attrs.clone()).unwrap();
        assert_eq!(t.lookup(12, b"f").unwrap(), 13);
        assert_eq!(t.lookup(ROOT_INO, b"hard").unwrap(), 13);
        assert_eq!((t.nlink(13).unwrap(), t.nlink(ROOT_INO).unwrap(), t.nlink(12).unwrap()), (2, 3, 2));
        assert_eq!(t.orphans(), vec![14]);
        assert!(t.is_within(12, ROOT_INO) && !t.is_within(ROOT_INO, 12));
        assert!(matches!(t.lookup(13, b"x"), Err(VolError::NotADirectory(13))));

        let mut twin = attrs.clone();
        twin.insert(15, file(12, "f"));
        assert!(Tree::build(twin).is_err(), "two entries alike");
        let mut orphan = attrs.clone();
        orphan.insert(15, file(99, "g"));
        assert!(Tree::build(orphan).is_err(), "parent missing");
        let mut under_file = attrs.clone();
        under_file.insert(15, file(13, "g"));
        assert!(Tree::build(under_file).is_err(), "parent not a directory");
        // A directory removed while open is an orphan, with a link count
        // of 0; nothing may be named under it.
        let mut nameless_dir = attrs.clone();
        nameless_dir.insert(15, Attr { links: vec![], ..dir(12, "x") });
        let t = Tree::build(nameless_dir.clone()).unwrap();
        assert_eq!((t.orphans(), t.nlink(15).unwrap()), (vec![14, 15], 0));
        nameless_dir.insert(16, file(15, "under"));
        assert!(Tree::build(nameless_dir).is_err(), "a name under a removed directory");
        let mut cycle = attrs;
        cycle.insert(20, dir(21, "a"));
        cycle.insert(21, dir(20, "b"));
        assert!(Tree::build(cycle).is_err(), "a loop reachable from nowhere");
    }

    #[test]
    fn links_and_unlinks_keep_counts() {
        let mut attrs = IdMap::default();
        attrs.insert(ROOT_INO, Attr::root(0));
        let mut t = Tree::build(attrs).unwrap();
        t.insert(12, dir(ROOT_INO, "d"));
        t.insert(13, file(12, "f"));
        t.link(13, Link { parent: ROOT_INO, name: b"g".to_vec() });
        assert_eq!((t.nlink(13).unwrap(), t.nlink(ROOT_INO).unwrap()), (2, 3));
        t.unlink(13, &Link { parent: 12, name: b"f".to_vec() });
        t.unlink(13, &Link { parent: ROOT_INO, name: b"g".to_vec() });
        assert_eq!(t.orphans(), vec![13]);
        assert!(t.dir(12).unwrap().is_empty());
        t.remove(13);
        t.remove(12);
        assert_eq!(t.nlink(ROOT_INO).unwrap(), 2);
    }
}
