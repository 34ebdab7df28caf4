//! lost+found: where a repair puts what it could read only in part,
//! rather than dropping it.
//!
//! Two kinds of inode go there, each under `#<inode number>`:
//!
//! * an inode whose own record is intact but some of its tree nodes or
//!   its attribute blocks are not: it keeps the extents that could be
//!   read (holes where the rest was) and, if its attributes were lost
//!   with data to show for it, is made a regular file readable by root
//!   alone;
//! * an inode whose directory is gone (damaged and dropped): the names
//!   that led there are replaced by one in lost+found, and a directory
//!   brings its whole subtree with it.
//!
//! ext4's e2fsck does the same with disconnected inodes; the files it
//! finds there are the user's to judge, not the repair's to delete.

use super::Home;
use crate::attr::{now, Attr, Link, S_IFDIR, S_IFREG};
use crate::format::ROOT_INO;
use std::collections::{BTreeMap, BTreeSet};

/// The directory's name in the root.
const LOST_FOUND: &[u8] = b"lost+found";

impl Home {
    /// Move what must go to lost+found there, making it if need be;
    /// `partly` names inodes kept with part of what they held, and why.
    /// Returns a line per inode moved; `Err` when there is no room or
    /// the name is taken by something that is not a directory.
    pub(super) fn quarantine(&mut self, partly: &BTreeMap<u64, String>) -> Result<Vec<String>, String> {
        let files = &self.state.files;
        let live_dir = |ino: u64| files.get(&ino).and_then(|f| f.attr.as_ref()).is_some_and(Attr::is_dir);
        if !live_dir(ROOT_INO) {
            return Ok(Vec::new());
        }
        let mut moves: BTreeMap<u64, String> = BTreeMap::new();
        // Every inode read in part goes, an empty one too: its record is
        // intact, so it is the user's to judge (its name may have been
        // all it held).
        for (&ino, why) in partly {
            if files.contains_key(&ino) {
                moves.insert(ino, why.clone());
            }
        }
        for (&ino, f) in files {
            let Some(a) = &f.attr else { continue };
            if ino == ROOT_INO || moves.contains_key(&ino) {
                continue;
            }
            if let Some(l) = a.links.iter().find(|l| !live_dir(l.parent)) {
                moves.insert(ino, format!("its directory {} is gone", l.parent));
            }
        }
        if moves.is_empty() {
            return Ok(Vec::new());
        }
        let lf = self.lost_found()?;
        let mut taken: BTreeSet<Vec<u8>> = self
            .state
            .files
            .values()
            .filter_map(|f| f.attr.as_ref())
            .flat_map(|a| a.links.iter().filter(|l| l.parent == lf).map(|l| l.name.clone()))
            .collect();
        let dirs: BTreeSet<u64> = self
            .state
            .files
            .iter()
            .filter(|(_, f)| f.attr.as_ref().is_some_and(Attr::is_dir))
            .map(|(&i, _)| i)
            .collect();
        let mut out = Vec::new();
        for (ino, why) in moves {
            let mut name = format!("#{ino}").into_bytes();
            let mut n = 1;
            while taken.contains(&name) {
                name = format!("#{ino}.{n}").into_bytes();
                n += 1;
            }
            taken.insert(name.clone());
            let f = self.state.files.get_mut(&ino).expect("listed from the files");
            let attr = f.attr.get_or_insert_with(|| {
                let t = now();
                Attr { mode: S_IFREG | 0o600, atime: t, mtime: t, ctime: t, generation: 1, ..Attr::default() }
            });
            // A file with lost data keeps no name that would hide it; any
            // other keeps the names whose directory is still there.
            if partly.contains_key(&ino) || attr.is_dir() {
                attr.links.clear();
            } else {
                attr.links.retain(|l| dirs.contains(&l.parent));
            }
            attr.links.push(Link { parent: lf, name: name.clone() });
            self.state.dirty_files.insert(ino);
            out.push(format!("inode {ino}: moved to /lost+found/{}: {why}", String::from_utf8_lossy(&name)));
        }
        Ok(out)
    }

    /// The root's lost+found directory, made if it is not there.
    fn lost_found(&mut self) -> Result<u64, String> {
        for (&ino, f) in &self.state.files {
            let Some(a) = &f.attr else { continue };
            if a.links.iter().any(|l| l.parent == ROOT_INO && l.name == LOST_FOUND) {
                return match a.is_dir() {
                    true => Ok(ino),
                    false => Err(format!("inode {ino} holds the name lost+found and is not a directory")),
                };
            }
        }
        if self.state.files.len() >= self.sb.inode_count as usize {
            return Err("no free inode for lost+found".into());
        }
        let ino = self.state.files.keys().max().map_or(ROOT_INO, |&m| m) + 1;
        let t = now();
        let attr = Attr {
            mode: S_IFDIR | 0o700,
            atime: t,
            mtime: t,
            ctime: t,
            generation: 1,
            links: vec![Link { parent: ROOT_INO, name: LOST_FOUND.to_vec() }],
            ..Attr::default()
        };
        let f = crate::state::FileState { attr: Some(attr), ..Default::default() };
        self.state.files.insert(ino, f);
        self.state.dirty_files.insert(ino);
        Ok(ino)
    }
}
