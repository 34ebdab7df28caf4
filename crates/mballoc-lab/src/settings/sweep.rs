//! Sweeps: a key run at several values, a row per value. A key is scoped
//! to the backends it configures: an `engine.` key makes engine rows, an
//! `ext4.` key ext4 rows, so sweeping one of each runs the sum of their
//! values, not the product, and the backends no sweep touches run once.
//! `workload.` keys change what every backend runs and cross everything.
//!
//! Keys of one scope cross each other (`product`) or move together
//! (`zip`: the i-th value of every key in one run).

use super::{parse_assignment, Scope};
use crate::error::LabError;

/// How the values of several swept keys combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SweepMode {
    /// Every combination of the keys of one scope.
    #[default]
    Product,
    /// The i-th values of every key together (all keys need as many values).
    Zip,
}

impl SweepMode {
    /// Parse `product` or `zip`.
    pub fn parse(s: &str) -> Result<SweepMode, LabError> {
        match s {
            "product" => Ok(SweepMode::Product),
            "zip" => Ok(SweepMode::Zip),
            _ => Err(LabError::Invalid(format!("sweep mode {s:?}: choose product or zip"))),
        }
    }
}

/// Which backends a point runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backends {
    /// Every backend of the run.
    All,
    /// Only the backends these scopes configure.
    Only(Vec<Scope>),
    /// Every backend but those these scopes configure (they are swept).
    AllBut(Vec<Scope>),
}

impl Backends {
    /// Whether a backend configured by `scope` runs at this point.
    pub fn admits(&self, scope: Scope) -> bool {
        match self {
            Backends::All => true,
            Backends::Only(s) => s.contains(&scope),
            Backends::AllBut(s) => !s.contains(&scope),
        }
    }
}

/// One run of a sweep: the settings it lays over the run's, and which
/// backends it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// `(scope.key, value)` pairs, in the order the sweeps were given.
    pub assign: Vec<(String, String)>,
    /// The backends that run at this point.
    pub backends: Backends,
}

/// Check a sweep: `key` (`scope.name`) with each of `values`.
pub fn check_sweep(key: &str, values: &[String]) -> Result<Scope, LabError> {
    if values.is_empty() {
        return Err(LabError::Invalid(format!("sweep {key:?}: no values")));
    }
    let mut scope = None;
    for v in values {
        scope = Some(parse_assignment(&format!("{key}={v}"))?.scope);
    }
    Ok(scope.expect("at least one value"))
}

/// Parse `--sweep scope.key=v1,v2,...` into the key and its values, each
/// checked.
pub fn parse_sweep(arg: &str) -> Result<(String, Vec<String>), LabError> {
    let (key, values) = arg
        .split_once('=')
        .ok_or_else(|| LabError::Invalid(format!("sweep {arg:?}: not of the form scope.key=v1,v2,...")))?;
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
    check_sweep(key.trim(), &values)?;
    Ok((key.trim().to_string(), values))
}

/// Every combination of the sweeps' values (the first sweep varies
/// slowest), each as `(key, value)` pairs; one empty combination when
/// there are no sweeps.
pub fn combinations(sweeps: &[(String, Vec<String>)]) -> Vec<Vec<(String, String)>> {
    let mut out = vec![vec![]];
    for (key, values) in sweeps {
        out = out
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((key.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    out
}

/// The i-th values of every sweep together.
fn zipped(sweeps: &[(String, Vec<String>)]) -> Result<Vec<Vec<(String, String)>>, LabError> {
    let Some(n) = sweeps.first().map(|s| s.1.len()) else { return Ok(vec![vec![]]) };
    if let Some((k, v)) = sweeps.iter().find(|s| s.1.len() != n) {
        return Err(LabError::Invalid(format!(
            "--sweep-mode zip: {k} has {} values where {} has {n}; zipped keys move together, so each needs as many",
            v.len(),
            sweeps[0].0
        )));
    }
    Ok((0..n).map(|i| sweeps.iter().map(|(k, v)| (k.clone(), v[i].clone())).collect()).collect())
}

/// A swept key and its values.
type Sweep = (String, Vec<String>);

/// The runs a set of sweeps makes (see the module's doc).
pub fn points(sweeps: &[Sweep], mode: SweepMode) -> Result<Vec<Point>, LabError> {
    let mut scoped: Vec<(Scope, Vec<Sweep>)> = Vec::new();
    let mut global = Vec::new();
    for (key, values) in sweeps {
        let scope = check_sweep(key, values)?;
        if scope == Scope::Workload {
            global.push((key.clone(), values.clone()));
        } else if let Some(g) = scoped.iter_mut().find(|g| g.0 == scope) {
            g.1.push((key.clone(), values.clone()));
        } else {
            scoped.push((scope, vec![(key.clone(), values.clone())]));
        }
    }
    let scopes: Vec<Scope> = scoped.iter().map(|g| g.0).collect();
    if mode == SweepMode::Zip {
        let backends =
            if global.is_empty() && !scopes.is_empty() { Backends::Only(scopes.clone()) } else { Backends::All };
        let mut out: Vec<Point> =
            zipped(sweeps)?.into_iter().map(|assign| Point { assign, backends: backends.clone() }).collect();
        if backends != Backends::All {
            out.push(Point { assign: vec![], backends: Backends::AllBut(scopes) });
        }
        return Ok(out);
    }
    let mut out = Vec::new();
    for base in combinations(&global) {
        if scoped.is_empty() {
            out.push(Point { assign: base, backends: Backends::All });
            continue;
        }
        for (scope, keys) in &scoped {
            for c in combinations(keys) {
                let mut assign = base.clone();
                assign.extend(c);
                out.push(Point { assign, backends: Backends::Only(vec![*scope]) });
            }
        }
        out.push(Point { assign: base, backends: Backends::AllBut(scopes.clone()) });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loop_mount::KernelFs;

    fn sweep(s: &str) -> (String, Vec<String>) {
        parse_sweep(s).unwrap()
    }

    #[test]
    fn sweeps_parse_and_combine() {
        let a = sweep("engine.mb_max_to_scan=50,200");
        let b = sweep("ext4.mount=delalloc, nodelalloc");
        assert!(parse_sweep("engine.mb_max_to_scan=50,zero").is_err());
        assert!(parse_sweep("engine.mb_max_to_scan=").is_err());
        let c = combinations(&[a, b]);
        assert_eq!(c.len(), 4);
        assert_eq!(c[1], [("engine.mb_max_to_scan".into(), "50".into()), ("ext4.mount".into(), "nodelalloc".into())]);
        assert_eq!(combinations(&[]), [Vec::<(String, String)>::new()]);
    }

    #[test]
    fn scoped_sweeps_add_up_instead_of_crossing() {
        let s = [sweep("engine.mb_max_to_scan=50,200,1000,5000"), sweep("ext4.mb_max_to_scan=50,200,1000,5000")];
        let p = points(&s, SweepMode::Product).unwrap();
        // 4 engine points, 4 ext4 points, and the rest (xfs, btrfs) once.
        assert_eq!(p.len(), 9);
        let engine = p.iter().filter(|p| p.backends.admits(Scope::Engine)).count();
        let ext4 = p.iter().filter(|p| p.backends.admits(Scope::Kernel(KernelFs::Ext4))).count();
        let xfs = p.iter().filter(|p| p.backends.admits(Scope::Kernel(KernelFs::Xfs))).count();
        assert_eq!((engine, ext4, xfs), (4, 4, 1));
        // Two keys of one scope cross.
        let s = [sweep("engine.mb_max_to_scan=50,200"), sweep("engine.mb_min_to_scan=5,10,20")];
        assert_eq!(
            points(&s, SweepMode::Product).unwrap().iter().filter(|p| p.backends.admits(Scope::Engine)).count(),
            6
        );
    }

    #[test]
    fn zipped_keys_move_together() {
        let s = [sweep("engine.mb_max_to_scan=50,200"), sweep("ext4.mb_max_to_scan=50,200")];
        let p = points(&s, SweepMode::Zip).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(
            p[1].assign,
            [("engine.mb_max_to_scan".into(), "200".into()), ("ext4.mb_max_to_scan".into(), "200".into())]
        );
        let uneven = [sweep("engine.mb_max_to_scan=50,200"), sweep("ext4.mb_max_to_scan=50")];
        assert!(points(&uneven, SweepMode::Zip).unwrap_err().to_string().contains("as many"));
    }

    #[test]
    fn workload_sweeps_cross_every_backend() {
        let s = [sweep("workload.interleave=threads,in-turn"), sweep("engine.mb_max_to_scan=50,200")];
        let p = points(&s, SweepMode::Product).unwrap();
        // Per interleave: 2 engine points and one for the rest.
        assert_eq!(p.len(), 6);
        assert!(p.iter().all(|p| p.assign[0].0 == "workload.interleave"));
        assert_eq!(points(&[], SweepMode::Product).unwrap(), [Point { assign: vec![], backends: Backends::All }]);
    }
}
