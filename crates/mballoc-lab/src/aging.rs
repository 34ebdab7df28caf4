//! Aging as researchers do it, as traces: the same seeded operations on
//! every backend, one stream, so a run reproduces and backends compare.
//!
//! * [`geriatrix`]: a profile-driven create/delete ager after Geriatrix
//!   (Kadekodi et al., ATC '18). A profile gives the distributions of file
//!   size, directory depth and age at deletion (how many operations a file
//!   lives) and a target fullness; the ager creates files drawn from the
//!   size and depth distributions until the volume reaches the fullness,
//!   then churns: each step deletes the file the age distribution points to
//!   and creates another, for as many bytes as the profile asks. Fullness
//!   is the ager's own count of live bytes against the volume (not any
//!   backend's), which is what keeps the operations the same everywhere.
//!   [`Convergence`] says how close the live files ended to the profile.
//! * [`git_pulls`]: the git-pull ager of Conway et al. (FAST '17): a tree
//!   of files updated pull by pull as `git checkout` does it (a changed file
//!   is written anew under a temporary name and renamed over the old one),
//!   with files added and removed as a project's history adds and removes
//!   them.
//!
//! Layouts are then scored on every backend by the lab's metrics, the
//! layout score among them ([`crate::metrics::layout_score`]).

use crate::trace::Trace;
use crate::workload::{Interleave, Op, OpKind};
use rand::distributions::{Distribution, WeightedIndex};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A Geriatrix profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// File sizes in bytes and their weights.
    pub sizes: Vec<(u64, f64)>,
    /// Directory depths (0: the root) and their weights.
    pub depths: Vec<(u32, f64)>,
    /// Ages at deletion, in churn steps, and their weights: a file lives
    /// about this many create/delete steps.
    pub ages: Vec<(u64, f64)>,
    /// Live bytes over the volume's, 0 to 1.
    pub fullness: f64,
    /// Bytes created during churn, in multiples of the volume.
    pub churn: f64,
}

impl Profile {
    /// A profile after Agrawal et al.'s metadata study (FAST '07), as
    /// Geriatrix ships it, scaled down: mostly small files, a long tail of
    /// large ones, directories three deep on average, most files short-lived.
    pub fn agrawal() -> Profile {
        Profile {
            sizes: vec![
                (4 << 10, 0.30),
                (16 << 10, 0.25),
                (64 << 10, 0.20),
                (256 << 10, 0.13),
                (1 << 20, 0.08),
                (8 << 20, 0.035),
                (64 << 20, 0.005),
            ],
            depths: vec![(1, 0.15), (2, 0.30), (3, 0.30), (4, 0.15), (6, 0.10)],
            ages: vec![(10, 0.5), (100, 0.3), (1000, 0.2)],
            fullness: 0.75,
            churn: 2.0,
        }
    }

    fn check(&self) -> Result<(), String> {
        let ok =
            |w: &[f64]| !w.is_empty() && w.iter().all(|x| x.is_finite() && *x >= 0.0) && w.iter().sum::<f64>() > 0.0;
        if !ok(&self.sizes.iter().map(|s| s.1).collect::<Vec<_>>())
            || !ok(&self.depths.iter().map(|s| s.1).collect::<Vec<_>>())
            || !ok(&self.ages.iter().map(|s| s.1).collect::<Vec<_>>())
        {
            return Err("every distribution needs a positive total weight".into());
        }
        if self.sizes.iter().any(|s| s.0 == 0) || self.ages.iter().any(|a| a.0 == 0) {
            return Err("sizes and ages are positive".into());
        }
        if !(0.0..0.98).contains(&self.fullness) || !(0.0..=100.0).contains(&self.churn) {
            return Err(format!(
                "fullness {} (0 to 0.98) or churn {} (0 to 100) out of range",
                self.fullness, self.churn
            ));
        }
        Ok(())
    }
}

/// How close the live files ended to the profile: total-variation
/// distances (0: the same distribution, 1: disjoint) and the fullness.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Convergence {
    /// Between the profile's size distribution (by count) and the live files'.
    pub size_distance: f64,
    /// The same for directory depths.
    pub depth_distance: f64,
    /// Live bytes over the volume's at the end.
    pub fullness: f64,
    /// Files created and deleted.
    pub creates: u64,
    /// Files deleted.
    pub deletes: u64,
}

/// Create (or truncate) `slot` and write `size` bytes into it, 1 MiB at
/// a time, as a program copying a file in does.
fn create_and_write(ops: &mut Vec<Op>, slot: u32, size: u64) {
    ops.push(Op::on(OpKind::Create, slot));
    let mut at = 0;
    while at < size {
        let n = (size - at).min(1 << 20);
        ops.push(Op::ranged(OpKind::Write, slot, at, n));
        at += n;
    }
}

fn distance(want: &[f64], got: &[u64]) -> f64 {
    let (tw, tg) = (want.iter().sum::<f64>(), got.iter().sum::<u64>().max(1) as f64);
    0.5 * want.iter().zip(got).map(|(w, g)| (w / tw - *g as f64 / tg).abs()).sum::<f64>()
}

/// Slots of an aging trace: a deleted file's slot is reused for the next
/// file made in the same directory, so a trace of any length names a
/// bounded set of paths.
struct Names {
    files: Vec<String>,
    free: std::collections::HashMap<String, Vec<u32>>,
}

impl Names {
    fn take(&mut self, dir: &str) -> u32 {
        if let Some(s) = self.free.get_mut(dir).and_then(Vec::pop) {
            return s;
        }
        let slot = self.files.len() as u32;
        self.files.push(if dir.is_empty() { format!("f{slot}") } else { format!("{dir}/f{slot}") });
        slot
    }
}

/// Geriatrix's aging of a `volume`-byte volume of `block_size` blocks
/// under `profile`, seeded: the trace and how close it converged.
pub fn geriatrix(profile: &Profile, volume: u64, block_size: u32, seed: u64) -> Result<(Trace, Convergence), String> {
    profile.check()?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let size_of = WeightedIndex::new(profile.sizes.iter().map(|s| s.1)).map_err(|e| e.to_string())?;
    let depth_of = WeightedIndex::new(profile.depths.iter().map(|s| s.1)).map_err(|e| e.to_string())?;
    let age_of = WeightedIndex::new(profile.ages.iter().map(|s| s.1)).map_err(|e| e.to_string())?;
    let target = (profile.fullness * volume as f64) as u64;
    let mut names = Names { files: Vec::new(), free: Default::default() };
    let mut ops = Vec::new();
    // Live files: (slot, bytes, size class, depth class, step it dies at, dir).
    let mut live: Vec<(u32, u64, usize, usize, u64, String)> = Vec::new();
    let (mut bytes, mut churned, mut step, mut creates, mut deletes) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let churn_target = (profile.churn * volume as f64) as u64;
    let smallest = profile.sizes.iter().map(|s| s.0).min().expect("checked non-empty");
    let mut dirs_made = std::collections::HashSet::new();
    let mut full = false;
    let mut draws = 0u64;
    let delete_due = |live: &mut Vec<(u32, u64, usize, usize, u64, String)>,
                      ops: &mut Vec<Op>,
                      names: &mut Names,
                      bytes: &mut u64|
     -> bool {
        // The file whose time has come first (the oldest among equals).
        let Some(i) = live.iter().enumerate().min_by_key(|(_, f)| f.4).map(|(i, _)| i) else { return false };
        let f = live.swap_remove(i);
        ops.push(Op::on(OpKind::Unlink, f.0));
        names.free.entry(f.5).or_default().push(f.0);
        *bytes -= f.1;
        true
    };
    loop {
        draws += 1;
        if draws > 1 << 26 {
            return Err("the profile does not converge on this volume".into());
        }
        full |= bytes + smallest > target;
        if full && churned >= churn_target {
            break;
        }
        let sc = size_of.sample(&mut rng);
        let size = profile.sizes[sc].0;
        if size > target {
            continue;
        }
        if bytes + size > target {
            if !full {
                continue;
            }
            // Churn: make room by deleting what is due.
            while bytes + size > target {
                if !delete_due(&mut live, &mut ops, &mut names, &mut bytes) {
                    break;
                }
                deletes += 1;
            }
        }
        let dc = depth_of.sample(&mut rng);
        let depth = profile.depths[dc].0;
        // Eight directories per level, so paths fan out.
        let bucket: u32 = rng.gen_range(0..8);
        let dir: String = (0..depth).map(|d| format!("d{d}-{}", (bucket + d) % 8)).collect::<Vec<_>>().join("/");
        if !dir.is_empty() && dirs_made.insert(dir.clone()) {
            let slot = names.files.len() as u32;
            names.files.push(dir.clone());
            ops.push(Op::on(OpKind::Mkdir, slot));
        }
        let slot = names.take(&dir);
        create_and_write(&mut ops, slot, size);
        ops.push(Op::on(OpKind::Close, slot));
        let lives = profile.ages[age_of.sample(&mut rng)].0;
        live.push((slot, size, sc, dc, step + lives, dir));
        bytes += size;
        creates += 1;
        if full {
            churned += size;
        }
        step += 1;
    }
    // Everything written reaches its place before layouts are read.
    if let Some(f) = live.first() {
        ops.push(Op::on(OpKind::Open, f.0));
        ops.push(Op::on(OpKind::Fsync, f.0));
        ops.push(Op::on(OpKind::Close, f.0));
    }
    let mut by_size = vec![0u64; profile.sizes.len()];
    let mut by_depth = vec![0u64; profile.depths.len()];
    for f in &live {
        by_size[f.2] += 1;
        by_depth[f.3] += 1;
    }
    let conv = Convergence {
        size_distance: distance(&profile.sizes.iter().map(|s| s.1).collect::<Vec<_>>(), &by_size),
        depth_distance: distance(&profile.depths.iter().map(|s| s.1).collect::<Vec<_>>(), &by_depth),
        fullness: bytes as f64 / volume as f64,
        creates,
        deletes,
    };
    let trace = Trace { volume, block_size, interleave: Interleave::InTurn, files: names.files, streams: vec![ops] };
    Ok((trace, conv))
}

/// The git-pull ager: `files` files of sizes drawn from `profile`'s size
/// distribution, then `pulls` pulls; each rewrites a share `change` of
/// the files (written anew as `.tmp` and renamed over), adds `add` and
/// removes `remove` files, and fsyncs what it wrote, as a checkout does.
pub fn git_pulls(
    profile: &Profile,
    files: u32,
    pulls: u32,
    volume: u64,
    block_size: u32,
    seed: u64,
) -> Result<Trace, String> {
    profile.check()?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let size_of = WeightedIndex::new(profile.sizes.iter().map(|s| s.1)).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = Vec::new();
    let mut ops = Vec::new();
    let slot = |names: &mut Vec<String>, p: String| {
        names.push(p);
        names.len() as u32 - 1
    };
    let tmp = slot(&mut names, "repo/.tmp".into());
    let mut live: Vec<(u32, u64)> = Vec::new();
    let mut budget = volume / 2;
    let mut next = 0u32;
    let mut add = |names: &mut Vec<String>,
                   ops: &mut Vec<Op>,
                   live: &mut Vec<(u32, u64)>,
                   rng: &mut ChaCha8Rng,
                   budget: &mut u64| {
        let size = profile.sizes[size_of.sample(rng)].0.min(*budget / 4).max(u64::from(block_size));
        let s = slot(names, format!("repo/{}/{}", next % 16, next));
        next += 1;
        create_and_write(ops, s, size);
        ops.push(Op::on(OpKind::Fsync, s));
        ops.push(Op::on(OpKind::Close, s));
        live.push((s, size));
        *budget = budget.saturating_sub(size);
    };
    for d in 0..16 {
        let s = slot(&mut names, format!("repo/{d}"));
        ops.push(Op::on(OpKind::Mkdir, s));
    }
    for _ in 0..files {
        add(&mut names, &mut ops, &mut live, &mut rng, &mut budget);
    }
    for _ in 0..pulls {
        let changed = live.len().div_ceil(10);
        for _ in 0..changed {
            let i = rng.gen_range(0..live.len());
            let (s, old) = live[i];
            // Sizes drift as code does: up or down a little, now and then a lot.
            let size = if rng.gen_bool(0.1) { profile.sizes[size_of.sample(&mut rng)].0 } else { old + old / 8 };
            let size = size.min(old + budget / 4).max(u64::from(block_size));
            create_and_write(&mut ops, tmp, size);
            ops.push(Op::on(OpKind::Fsync, tmp));
            ops.push(Op { kind: OpKind::Rename, file: tmp, offset: 0, len: 0, to: s });
            ops.push(Op::on(OpKind::Close, tmp));
            budget = (budget + old).saturating_sub(size);
            live[i].1 = size;
        }
        for _ in 0..rng.gen_range(0..=2) {
            add(&mut names, &mut ops, &mut live, &mut rng, &mut budget);
        }
        if live.len() > 4 && rng.gen_bool(0.5) {
            let (s, size) = live.swap_remove(rng.gen_range(0..live.len()));
            ops.push(Op::on(OpKind::Unlink, s));
            budget += size;
        }
    }
    Ok(Trace { volume, block_size, interleave: Interleave::InTurn, files: names, streams: vec![ops] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geriatrix_converges_to_its_profile_and_reproduces() {
        let p = Profile { churn: 1.0, ..Profile::agrawal() };
        let (t, c) = geriatrix(&p, 1 << 30, 4096, 7).unwrap();
        assert!((c.fullness - 0.75).abs() < 0.02, "{c:?}");
        assert!(c.size_distance < 0.1 && c.depth_distance < 0.1, "{c:?}");
        assert!(c.deletes > 0 && c.creates > c.deletes);
        let (again, _) = geriatrix(&p, 1 << 30, 4096, 7).unwrap();
        assert_eq!(t, again, "seeded: the same trace");
        assert_ne!(t, geriatrix(&p, 1 << 30, 4096, 8).unwrap().0);
        // Every slot a write names was created first, and deleted slots
        // are reused.
        let mut exists = vec![false; t.files.len()];
        for op in &t.streams[0] {
            match op.kind {
                OpKind::Create | OpKind::Mkdir => exists[op.file as usize] = true,
                OpKind::Unlink => exists[op.file as usize] = false,
                OpKind::Write | OpKind::Close => assert!(exists[op.file as usize], "{op:?}"),
                _ => {}
            }
        }
        assert!((t.files.len() as u64) < c.creates);
        assert!(geriatrix(&Profile { fullness: 1.5, ..p.clone() }, 1 << 30, 4096, 1).is_err());
        assert!(geriatrix(&Profile { sizes: vec![], ..p }, 1 << 30, 4096, 1).is_err());
    }

    #[test]
    fn git_pulls_rename_over_what_they_rewrite() {
        let t = git_pulls(&Profile::agrawal(), 50, 20, 256 << 20, 4096, 3).unwrap();
        let ops = &t.streams[0];
        let renames = ops.iter().filter(|o| o.kind == OpKind::Rename).count();
        assert!(renames >= 20 * 5, "{renames}");
        assert_eq!(t, git_pulls(&Profile::agrawal(), 50, 20, 256 << 20, 4096, 3).unwrap());
    }
}
