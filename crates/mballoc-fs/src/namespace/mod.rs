//! ext4's directories, as far as they decide allocation: which group a new
//! inode goes to (and so where its blocks are sought), and when a
//! directory takes another block.
//!
//! The file layer itself has no names: [`Fs::create`] numbers files from
//! the lowest free inode and places them by number. A profile that makes
//! ext4's decisions for programs that make directories needs ext4's
//! namespace too: [`Ext4Namespace`] keeps each directory's entries block
//! by block ([`DirLayout`]), chooses groups by ext4's rules (Orlov for
//! directories, the parent's flex group for the rest), and asks the file
//! layer for each directory block exactly when ext4 appends one: a
//! one-block metadata request, no normalization, no preallocation, from
//! the block after the directory's last (a new directory: the first group
//! of its flex group).

mod dir_layout;
pub mod dirhash;
mod orlov;

pub use dir_layout::{DirFormat, DirHash, DirLayout, LayoutError, Record};

use crate::error::{FsError, Result};
use crate::fs::{FileId, FileKind, Fs};
use orlov::{GroupCounts, InodeGeometry, Parent};
use std::collections::HashMap;

/// What `unlink` took away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// The inode the name pointed at.
    pub file: FileId,
    /// Whether that was its last name (for a directory: it is gone).
    pub last_name: bool,
}

#[derive(Debug, Clone)]
struct Dir {
    /// `None` when the directory's shape on the volume is not modelled:
    /// the reason.
    layout: std::result::Result<DirLayout, String>,
    children: HashMap<Box<[u8]>, FileId>,
    /// The group of the last inode made in it (`i_last_alloc_group`).
    last_alloc: Option<u32>,
}

/// ext4's namespace over a file layer (see the module documentation).
#[derive(Debug)]
pub struct Ext4Namespace {
    format: DirFormat,
    root: FileId,
    dirs: HashMap<u64, Dir>,
    /// Names per inode.
    links: HashMap<u64, u32>,
    /// Each directory's parent.
    parents: HashMap<u64, FileId>,
    /// Directories per group.
    used_dirs: Vec<u32>,
}

impl Ext4Namespace {
    /// A namespace whose root directory is `root` (a directory the file
    /// layer holds), with `used_dirs[g]` directories in each group (the
    /// group descriptors' counts). Add the root's and every other existing
    /// directory's entries with [`Ext4Namespace::import_dir`].
    ///
    /// From here on `fs` keeps ext4's per-CPU counts of free blocks, free
    /// inodes and directories as one CPU changes them, with the kernel's
    /// `percpu_counter_batch` (`max(32, 2 × online CPUs)`): the inode
    /// allocator reads their lagging shared values.
    pub fn new(
        fs: &Fs,
        format: DirFormat,
        root: FileId,
        used_dirs: Vec<u32>,
        percpu_batch: u32,
    ) -> Result<Ext4Namespace> {
        let groups = fs.allocator().geometry().groups() as usize;
        if used_dirs.len() != groups {
            return Err(FsError::InvalidConfig(format!("{} directory counts for {groups} groups", used_dirs.len())));
        }
        if format.block_size as u64 != fs.ext4_block_size() {
            return Err(FsError::InvalidConfig("directory blocks of another size than the volume's".into()));
        }
        fs.start_ext4_counts(percpu_batch, used_dirs.iter().map(|&d| u64::from(d)).sum());
        Ok(Ext4Namespace {
            format,
            root,
            dirs: HashMap::new(),
            links: HashMap::new(),
            parents: HashMap::new(),
            used_dirs,
        })
    }

    /// Carry over directory `dir` with its entries (`children`), laid out
    /// as `layout` says, or with the reason its layout is not followed
    /// (adding a name to it is then refused).
    pub fn import_dir(
        &mut self,
        dir: FileId,
        layout: std::result::Result<DirLayout, String>,
        children: impl IntoIterator<Item = (Vec<u8>, FileId)>,
    ) {
        let children: HashMap<Box<[u8]>, FileId> = children.into_iter().map(|(n, f)| (n.into(), f)).collect();
        for f in children.values() {
            *self.links.entry(f.0).or_default() += 1;
            self.parents.insert(f.0, dir);
        }
        self.links.entry(dir.0).or_insert(1);
        self.dirs.insert(dir.0, Dir { layout, children, last_alloc: None });
    }

    /// The root directory.
    pub fn root(&self) -> FileId {
        self.root
    }

    /// Whether `f` is a directory of this namespace.
    pub fn is_dir(&self, f: FileId) -> bool {
        self.dirs.contains_key(&f.0)
    }

    /// What `name` in `dir` names.
    pub fn lookup(&self, dir: FileId, name: &[u8]) -> Option<FileId> {
        self.dirs.get(&dir.0)?.children.get(name).copied()
    }

    /// Make directory `name` in `parent`: its inode in the group Orlov
    /// picks, its first block, then its entry in the parent.
    pub fn mkdir(&mut self, fs: &Fs, parent: FileId, name: &[u8]) -> Result<FileId> {
        self.check_new(parent, name)?;
        let top = parent == self.root;
        let hash = dirhash::half_md4(name, self.format.hash.seed, dirhash::HashChars::Signed);
        let group = self.choose(fs, parent, |geo, c, p| geo.dir_group(c, Parent { top, ..p }, hash))?;
        let dir = fs.create_in_group(group, FileKind::Directory)?;
        if let Err(e) = fs.append_directory_block(dir).and_then(|()| self.add_entry(fs, parent, name)) {
            let _ = fs.unlink(dir);
            return Err(e);
        }
        self.dirs.get_mut(&parent.0).expect("checked").children.insert(name.into(), dir);
        self.dirs
            .insert(dir.0, Dir { layout: Ok(DirLayout::new(self.format)), children: HashMap::new(), last_alloc: None });
        self.links.insert(dir.0, 1);
        self.parents.insert(dir.0, parent);
        self.used_dirs[fs.inode_group(dir) as usize] += 1;
        Ok(dir)
    }

    /// Create regular file `name` in `parent` (open once, like
    /// [`Fs::create`]): its inode in the first group of the parent's flex
    /// group with a free inode, then its entry.
    pub fn create(&mut self, fs: &Fs, parent: FileId, name: &[u8]) -> Result<FileId> {
        self.check_new(parent, name)?;
        let group = self.choose(fs, parent, |geo, c, p| geo.other_group(c, p))?;
        let f = fs.create_in_group(group, FileKind::Regular)?;
        if let Err(e) = self.add_entry(fs, parent, name) {
            let _ = fs.unlink(f);
            return Err(e);
        }
        self.dirs.get_mut(&parent.0).expect("checked").children.insert(name.into(), f);
        self.links.insert(f.0, 1);
        Ok(f)
    }

    /// Another name for regular file `target`.
    pub fn link(&mut self, fs: &Fs, parent: FileId, name: &[u8], target: FileId) -> Result<()> {
        if self.is_dir(target) {
            return Err(FsError::Directory("a hard link to a directory".into()));
        }
        self.check_new(parent, name)?;
        self.add_entry(fs, parent, name)?;
        self.dirs.get_mut(&parent.0).expect("checked").children.insert(name.into(), target);
        *self.links.entry(target.0).or_default() += 1;
        Ok(())
    }

    /// Remove `name` from `parent`. An empty directory goes with it (its
    /// blocks to the running transaction); a regular file is only told
    /// whether that was its last name: the caller removes it from the file
    /// layer once no handle holds it.
    pub fn unlink(&mut self, fs: &Fs, parent: FileId, name: &[u8]) -> Result<Removed> {
        let f = self.lookup(parent, name).ok_or_else(|| missing(parent, name))?;
        self.check_removable(f)?;
        self.remove_entry(parent, name);
        self.drop_link(fs, f)
    }

    /// A directory that still holds names cannot lose its own.
    fn check_removable(&self, f: FileId) -> Result<()> {
        match self.dirs.get(&f.0) {
            Some(d) if !d.children.is_empty() => Err(FsError::Directory(format!("directory {} is not empty", f.0))),
            _ => Ok(()),
        }
    }

    /// One of `f`'s names is gone; a directory goes with it.
    fn drop_link(&mut self, fs: &Fs, f: FileId) -> Result<Removed> {
        let links = self.links.get_mut(&f.0).expect("every named inode is counted");
        *links -= 1;
        let last_name = *links == 0;
        if last_name {
            self.links.remove(&f.0);
        }
        if self.dirs.remove(&f.0).is_some() {
            self.used_dirs[fs.inode_group(f) as usize] -= 1;
            fs.unlink(f)?;
        }
        Ok(Removed { file: f, last_name })
    }

    /// Rename `from` to `to` as ext4 does: the new name is added first (or
    /// an existing one repointed), then the old one removed. Returns what
    /// a replaced name pointed at, as [`Ext4Namespace::unlink`] would.
    pub fn rename(&mut self, fs: &Fs, from: (FileId, &[u8]), to: (FileId, &[u8])) -> Result<Option<Removed>> {
        let f = self.lookup(from.0, from.1).ok_or_else(|| missing(from.0, from.1))?;
        let target = self.lookup(to.0, to.1);
        if target == Some(f) {
            // Two names of one inode (or the same name): nothing to do.
            return Ok(None);
        }
        if target.is_none() {
            self.check_new(to.0, to.1)?;
        }
        if self.is_dir(f) {
            // A directory cannot move into itself or below itself.
            let mut at = Some(to.0);
            while let Some(d) = at.filter(|&d| d != self.root) {
                if d == f {
                    return Err(FsError::Directory(format!("directory {} would move below itself", f.0)));
                }
                at = self.parents.get(&d.0).copied();
            }
        }
        if let Some(old) = target {
            if self.is_dir(old) != self.is_dir(f) {
                return Err(FsError::Directory(format!(
                    "a {} cannot replace a {}",
                    if self.is_dir(f) { "directory" } else { "file" },
                    if self.is_dir(old) { "directory" } else { "file" }
                )));
            }
        }
        let replaced = match target {
            Some(old) => {
                self.check_removable(old)?;
                Some(self.drop_link(fs, old)?)
            }
            None => {
                self.add_entry(fs, to.0, to.1)?;
                None
            }
        };
        self.dirs.get_mut(&to.0 .0).expect("checked").children.insert(to.1.into(), f);
        self.remove_entry(from.0, from.1);
        if self.is_dir(f) {
            self.parents.insert(f.0, to.0);
        }
        Ok(replaced)
    }

    fn check_new(&self, parent: FileId, name: &[u8]) -> Result<()> {
        let d = self
            .dirs
            .get(&parent.0)
            .ok_or_else(|| FsError::Directory(format!("inode {} is not a directory", parent.0)))?;
        if name.is_empty() || name.len() > 255 || name.contains(&b'/') || name == b"." || name == b".." {
            return Err(FsError::Directory(format!("invalid name {:?}", String::from_utf8_lossy(name))));
        }
        if d.children.contains_key(name) {
            return Err(FsError::Directory(format!("{:?} exists", String::from_utf8_lossy(name))));
        }
        Ok(())
    }

    /// The group a new inode under `parent` goes to, by `rule`.
    fn choose(
        &mut self,
        fs: &Fs,
        parent: FileId,
        rule: impl FnOnce(&InodeGeometry, &GroupCounts, Parent) -> Option<u32>,
    ) -> Result<u32> {
        let a = fs.allocator();
        let geo = InodeGeometry {
            groups: a.geometry().groups(),
            inodes_per_group: fs.config().shape.inodes_per_group,
            blocks_per_group: a.geometry().blocks_per_group(),
            flex: fs.config().shape.flex_groups.max(1),
        };
        let counts = GroupCounts {
            inodes: fs.free_inodes_per_group(),
            blocks: fs.free_blocks_per_group(),
            dirs: self.used_dirs.clone(),
            shared: fs.ext4_shared_counts(),
        };
        let d = self.dirs.get_mut(&parent.0).expect("checked by the caller");
        let p = Parent { ino: parent.0, group: fs.inode_group(parent), last_alloc: d.last_alloc, top: false };
        let g = rule(&geo, &counts, p).ok_or_else(|| FsError::InvalidConfig("no free inode".into()))?;
        d.last_alloc = Some(g);
        Ok(g)
    }

    /// Put `name` in `dir`'s blocks, appending blocks as ext4 would.
    fn add_entry(&mut self, fs: &Fs, dir: FileId, name: &[u8]) -> Result<()> {
        let d = self.dirs.get_mut(&dir.0).expect("checked by the caller");
        let layout = d.layout.as_mut().map_err(|why| FsError::Directory(format!("directory {}: {why}", dir.0)))?;
        if layout.fits(name) {
            let appended = layout.add(name).map_err(|e| layout_error(dir, e))?;
            assert_eq!(appended, 0, "a name that fits takes no block");
            return Ok(());
        }
        let mut grown = layout.clone();
        let appended = grown.add(name).map_err(|e| layout_error(dir, e))?;
        if fs.available_blocks() < u64::from(appended) {
            return Err(FsError::NoSpace { needed: u64::from(appended), available: fs.available_blocks() });
        }
        for _ in 0..appended {
            fs.append_directory_block(dir)?;
        }
        *layout = grown;
        Ok(())
    }

    fn remove_entry(&mut self, dir: FileId, name: &[u8]) {
        let d = self.dirs.get_mut(&dir.0).expect("the name was looked up");
        d.children.remove(name);
        if let Ok(l) = d.layout.as_mut() {
            l.remove(name);
        }
    }
}

fn missing(dir: FileId, name: &[u8]) -> FsError {
    FsError::Directory(format!("no {:?} in directory {}", String::from_utf8_lossy(name), dir.0))
}

fn layout_error(dir: FileId, e: LayoutError) -> FsError {
    match e {
        LayoutError::IndexFull => FsError::Directory(format!(
            "directory {}: its index root is full; ext4 would add an index level, which is not modelled",
            dir.0
        )),
        LayoutError::Unsupported(why) => FsError::Directory(format!("directory {}: {why}", dir.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FsConfig, HashChars};
    use mballoc::Geometry;

    /// A 512 MiB volume of 1 KiB blocks (64 groups, four flex groups of
    /// 16), 2,048 inodes a group, its root in group 0.
    fn volume() -> (Fs, Ext4Namespace) {
        let mut cfg = FsConfig::kernel(Geometry::new(1024, 64 * 8192).unwrap());
        cfg.shape.inodes_per_group = 2048;
        let fs = Fs::new(cfg).unwrap();
        let root = fs.create_in_group(0, FileKind::Directory).unwrap();
        fs.append_directory_block(root).unwrap();
        let format = DirFormat {
            block_size: 1024,
            checksums: true,
            indexed: true,
            hash: DirHash { seed: [7, 8, 9, 10], chars: HashChars::Signed },
        };
        let mut used = vec![0; 64];
        used[0] = 1;
        let mut ns = Ext4Namespace::new(&fs, format, root, used, 32).unwrap();
        ns.import_dir(root, Ok(DirLayout::new(format)), []);
        (fs, ns)
    }

    #[test]
    fn directories_spread_files_follow_and_directories_grow() {
        let (fs, mut ns) = volume();
        let root = ns.root();
        let tops: Vec<FileId> =
            ["a", "b", "c", "d"].iter().map(|n| ns.mkdir(&fs, root, n.as_bytes()).unwrap()).collect();
        // Top directories spread over the flex groups with at least the
        // average of free inodes and blocks: not flex group 0, which
        // holds the root and the reserved inodes.
        let mut flexes: Vec<u32> = tops.iter().map(|&d| fs.inode_group(d) / 16).collect();
        flexes.sort_unstable();
        flexes.dedup();
        assert_eq!(flexes, vec![1, 2, 3]);
        let d = tops[1];
        let group = fs.inode_group(d);
        assert_eq!(group % 16, 0);
        let sub = ns.mkdir(&fs, d, b"sub").unwrap();
        assert_eq!(fs.inode_group(sub) / 16, group / 16, "a deeper directory stays in its parent's flex group");
        for i in 0..200 {
            let f = ns.create(&fs, sub, format!("file-{i:04}").as_bytes()).unwrap();
            assert_eq!(fs.inode_group(f), group, "files take the first group of the parent's flex group");
        }
        // 200 names of 20 bytes outgrow one 1 KiB block: indexed, split.
        let blocks: u64 = fs.extents(sub).unwrap().iter().map(|e| u64::from(e.len)).sum();
        assert!(blocks >= 5, "{blocks} blocks");
        let first = fs.extents(sub).unwrap()[0].physical;
        assert_eq!(
            fs.allocator().geometry().group_of(first),
            group,
            "a directory's blocks from its flex group's first group"
        );
        assert_eq!(fs.check(), Ok(()));
    }

    #[test]
    fn refused_operations_change_nothing() {
        let (fs, mut ns) = volume();
        let root = ns.root();
        let d = ns.mkdir(&fs, root, b"d").unwrap();
        let f = ns.create(&fs, d, b"f").unwrap();
        let files = fs.files().len();
        for bad in [&b"d"[..], b"", b".", b"a/b"] {
            assert!(matches!(ns.mkdir(&fs, root, bad), Err(FsError::Directory(_))), "{bad:?}");
        }
        assert!(matches!(ns.create(&fs, f, b"x"), Err(FsError::Directory(_))), "a file is no directory");
        assert!(matches!(ns.unlink(&fs, root, b"d"), Err(FsError::Directory(_))), "not empty");
        assert!(matches!(ns.link(&fs, root, b"d2", d), Err(FsError::Directory(_))), "no links to directories");
        let sub = ns.mkdir(&fs, d, b"sub").unwrap();
        assert!(matches!(ns.rename(&fs, (root, b"d"), (sub, b"x")), Err(FsError::Directory(_))), "below itself");
        assert!(
            matches!(ns.rename(&fs, (d, b"f"), (d, b"sub")), Err(FsError::Directory(_))),
            "a file over a directory"
        );
        assert!(
            matches!(ns.rename(&fs, (root, b"d"), (d, b"f")), Err(FsError::Directory(_))),
            "a directory over a file"
        );
        assert!(matches!(ns.rename(&fs, (d, b"f"), (root, b"a/b")), Err(FsError::Directory(_))), "a bad new name");
        ns.unlink(&fs, d, b"sub").unwrap();
        assert_eq!(fs.files().len(), files);
        // Links count names: the file goes with the last.
        ns.link(&fs, root, b"g", f).unwrap();
        assert_eq!(ns.unlink(&fs, d, b"f").unwrap(), Removed { file: f, last_name: false });
        assert_eq!(ns.rename(&fs, (root, b"g"), (d, b"h")).unwrap(), None);
        assert_eq!(ns.lookup(d, b"h"), Some(f));
        assert_eq!(ns.unlink(&fs, d, b"h").unwrap(), Removed { file: f, last_name: true });
        assert_eq!(ns.unlink(&fs, root, b"d").unwrap(), Removed { file: d, last_name: true });
        assert!(fs.size(d).is_err(), "an empty directory goes with its name");
    }
}
