//! The rules a mutated volume is held to, shared by the mutation sweep
//! and the fuzz target:
//!
//! * `check` writes nothing; a volume it calls clean mounts.
//! * A volume that mounts serves every file the change could not speak
//!   for (not the owner of the changed record, not named by a changed
//!   transaction) exactly as last fsynced, names and all; unmounted, it
//!   checks clean and mounts again.
//! * A repair either refuses and writes nothing, or converges: afterwards
//!   the volume checks clean with nothing pending, mounts, and every file
//!   the change could not speak for is intact (names in a directory the
//!   change spoke for may have moved to /lost+found).

use super::{structures, Structure};
use crate::{check, FormatOptions, MemDevice, MountOptions, Owner, Repair, Volume, XattrSet};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

fn mount_opts() -> MountOptions {
    MountOptions { folio_size: 4096, commit_interval_ops: 0, ..MountOptions::default() }
}

/// Per inode: its names (parent, name) and, for a regular file, its bytes.
pub type Model = BTreeMap<u64, (Vec<(u64, Vec<u8>)>, Option<Vec<u8>>)>;

/// What a program sees of every inode reachable from the root.
pub fn model(vol: &Volume) -> Model {
    let mut out = Model::new();
    let mut dirs = vec![vol.root()];
    while let Some(dir) = dirs.pop() {
        for e in vol.dir_entries(dir).unwrap() {
            if out.contains_key(&e.ino.0) {
                continue;
            }
            let a = vol.attr(e.ino).unwrap();
            let mut names: Vec<(u64, Vec<u8>)> = a.links.iter().map(|l| (l.parent, l.name.clone())).collect();
            names.sort();
            let data = if a.is_dir() {
                dirs.push(e.ino);
                None
            } else if a.mode & crate::S_IFMT == crate::S_IFREG {
                // A changed size can make a file of any length: past what
                // any file here holds, the size alone tells it apart.
                let f = e.ino;
                let size = vol.size(f).unwrap();
                let mut b = size.to_le_bytes().to_vec();
                if size <= 1 << 20 {
                    b.resize(8 + size as usize, 0);
                    vol.read(f, 0, &mut b[8..]).unwrap();
                }
                Some(b)
            } else if a.is_symlink() {
                Some(vol.link_target(e.ino).unwrap())
            } else {
                Some(a.mode.to_le_bytes().to_vec())
            };
            out.insert(e.ino.0, (names, data));
        }
    }
    out
}

/// Whether the volume was left with transactions to replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Left {
    /// A journal of fsynced transactions awaiting replay.
    Crashed,
    /// Cleanly unmounted: everything home.
    Unmounted,
}

/// A volume with a checkpointed home (a fragmented file whose tree needs
/// nodes, a directory, long attributes that overflow, a symbolic link, a
/// hard link) and fsynced changes on top, left crashed (a journal to
/// replay) or unmounted; and what every file must read back.
pub fn sample_volume(left: Left) -> (Vec<u8>, Model) {
    let dev = Arc::new(MemDevice::new(4 << 20));
    let opts = FormatOptions {
        block_size: 1024,
        blocks_per_group: Some(1024),
        log_blocks: Some(64),
        inode_count: Some(32),
        tree_blocks: Some(32),
    };
    Volume::format(dev.clone(), &opts).unwrap();
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let root = vol.root();
    let frag = vol.create_at(root, b"frag", Owner::default()).unwrap();
    let pad = vol.create_at(root, b"pad", Owner::default()).unwrap();
    // Alternate appends so that neither file's blocks are contiguous.
    for i in 0..20u64 {
        vol.write(frag, i * 1024, &[i as u8 + 1; 1024]).unwrap();
        vol.fsync(frag).unwrap();
        vol.write(pad, i * 1024, &[0xEE; 1024]).unwrap();
        vol.fsync(pad).unwrap();
    }
    let d = vol.mkdir_at(root, b"dir", Owner::default()).unwrap();
    let b = vol.create_at(d, b"b", Owner::default()).unwrap();
    vol.write(b, 0, &[0xB0; 3000]).unwrap();
    vol.set_xattr_at(b, b"user.long", &[0x5A; 700], XattrSet::Any).unwrap();
    vol.link_at(b, root, b"b-link").unwrap();
    vol.symlink_at(root, b"sym", b"dir/b", Owner::default()).unwrap();
    for f in [frag, pad, b] {
        vol.close(f).unwrap();
    }
    vol.unmount().unwrap();
    let vol = Volume::open(dev.clone(), mount_opts()).unwrap();
    let c = vol.create_at(root, b"c", Owner::default()).unwrap();
    vol.write(c, 0, &[0xC0; 2000]).unwrap();
    vol.fsync(c).unwrap();
    vol.open_file(frag).unwrap();
    vol.write(frag, 500, &[0x77; 2600]).unwrap();
    vol.fsync(frag).unwrap();
    vol.rename_at(d, b"b", d, b"b2", crate::Replace::Allowed).unwrap();
    vol.open_file(c).unwrap();
    vol.write(c, 2000, &[0xC1; 100]).unwrap();
    vol.fsync(c).unwrap();
    let want = model(&vol);
    match left {
        Left::Crashed => vol.abandon(),
        Left::Unmounted => vol.unmount().unwrap(),
    }
    (dev.to_bytes(), want)
}

fn mount(image: &[u8]) -> Result<(Arc<MemDevice>, Arc<Volume>), String> {
    let dev = Arc::new(MemDevice::from_bytes(image.to_vec()));
    let vol = Volume::open(dev.clone(), mount_opts()).map_err(|e| e.to_string())?;
    Ok((dev, vol))
}

/// Every inode outside `owners` as `want` has it: the same contents, and
/// the same names, but for names in a directory among `owners`, which may
/// be gone (a repair may have given one in /lost+found instead).
pub fn intact(got: &Model, want: &Model, owners: &BTreeSet<u64>) -> Result<(), String> {
    let lost_found: Option<u64> = got
        .iter()
        .find(|(_, (names, data))| data.is_none() && names == &[(1, b"lost+found".to_vec())])
        .map(|(&i, _)| i);
    for (ino, w) in want.iter().filter(|(i, _)| !owners.contains(i)) {
        let Some(g) = got.get(ino) else { return Err(format!("inode {ino} is gone")) };
        if g.1 != w.1 {
            return Err(format!("inode {ino}'s contents changed"));
        }
        let kept: Vec<_> = w.0.iter().filter(|(p, _)| !owners.contains(p)).cloned().collect();
        let (quarantined, rest): (Vec<_>, Vec<_>) = g.0.iter().cloned().partition(|(p, _)| Some(*p) == lost_found);
        let may_move = kept.len() < w.0.len();
        let lost_name = kept.iter().any(|n| !rest.contains(n));
        let new_name = rest.iter().any(|n| !w.0.contains(n));
        if lost_name || new_name || (!quarantined.is_empty() && !may_move) {
            return Err(format!("inode {ino} is named {:?}, was {:?}", g.0, w.0));
        }
    }
    Ok(())
}

/// What the rules saw, case by case.
#[derive(Default, Debug, Clone, Copy)]
pub struct Tally {
    /// Volumes judged.
    pub cases: u64,
    /// `check` refused to read them (an error, not a report).
    pub check_refused: u64,
    /// `check` reported problems.
    pub unclean: u64,
    /// The mount succeeded.
    pub mounted: u64,
    /// A repair wrote and converged.
    pub repaired: u64,
    /// A repair refused and wrote nothing.
    pub repair_refused: u64,
}

/// Apply the rules to one mutated image; `Err` names the broken rule.
pub fn judge(image: &[u8], want: &Model, owners: &BTreeSet<u64>, t: &mut Tally) -> Result<(), String> {
    t.cases += 1;
    let dev = MemDevice::from_bytes(image.to_vec());
    let report = check(&dev, Repair::No);
    if dev.to_bytes() != image {
        return Err("check without repair wrote".into());
    }
    let clean = match &report {
        Ok(r) => r.is_clean(),
        Err(_) => {
            t.check_refused += 1;
            false
        }
    };
    match mount(image) {
        Ok((dev, vol)) => {
            t.mounted += 1;
            intact(&model(&vol), want, owners).map_err(|e| format!("mounted: {e}"))?;
            vol.unmount().map_err(|e| format!("unmount: {e}"))?;
            let again = check(&*dev, Repair::No).map_err(|e| format!("check after the mount: {e}"))?;
            if !again.is_clean() {
                return Err(format!("the mount left a volume that checks unclean: {:?}", again.problems));
            }
            let (_, vol) = mount(&dev.to_bytes()).map_err(|e| format!("mount after the mount: {e}"))?;
            intact(&model(&vol), want, owners).map_err(|e| format!("mounted again: {e}"))?;
        }
        Err(e) if clean => return Err(format!("check calls it clean but the mount refuses: {e}")),
        Err(_) => {}
    }
    if report.is_err() || clean {
        return Ok(());
    }
    t.unclean += 1;
    let dev = Arc::new(MemDevice::from_bytes(image.to_vec()));
    let r = check(&*dev, Repair::Yes).map_err(|e| format!("repair: {e}"))?;
    if !r.repaired {
        t.repair_refused += 1;
        if dev.to_bytes() != image {
            return Err("a refused repair wrote".into());
        }
        return Ok(());
    }
    t.repaired += 1;
    let again = check(&*dev, Repair::No).map_err(|e| format!("check after repair: {e}"))?;
    if !again.is_clean() || again.pending_transactions > 0 {
        return Err(format!("repair did not converge: {again:?}"));
    }
    let vol = Volume::open(dev.clone(), mount_opts()).map_err(|e| format!("mount after repair: {e}"))?;
    intact(&model(&vol), want, owners).map_err(|e| format!("after repair: {e}"))
}

/// What the structure speaks for once changed: its owners before and after.
pub fn owners_after(dev: &MemDevice, s: &Structure) -> BTreeSet<u64> {
    let mut owners: BTreeSet<u64> = s.owners.iter().copied().collect();
    if let Ok(now) = structures(dev) {
        if let Some(n) = now.iter().find(|n| n.offset == s.offset) {
            owners.extend(n.owners.iter().copied());
        }
    }
    owners
}
