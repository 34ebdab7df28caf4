//! A Debian kernel, fetched and unpacked without installing it: the
//! package is downloaded by `apt-get download` (from the host's sources,
//! or from a suite of Debian's through an apt state of the lab's own, so
//! the host's configuration is never touched), unpacked by `dpkg-deb -x`
//! into the cache, and its modules indexed by `depmod -b` there.

use crate::error::LabError;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Which kernel: a series ("6.1", "6.12") or an exact ABI
/// ("6.1.0-56-cloud-amd64"), from the host's apt sources or from a
/// suite ("trixie-backports:7.3").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSpec {
    /// The Debian suite with its own apt state, or none for the host's.
    pub suite: Option<String>,
    /// A series or an exact ABI.
    pub version: String,
}

impl std::str::FromStr for KernelSpec {
    type Err = LabError;
    fn from_str(s: &str) -> Result<Self, LabError> {
        let (suite, version) = match s.split_once(':') {
            Some((suite, v)) => (Some(suite.to_string()), v),
            None => (None, s),
        };
        let ok = |c: char| c.is_ascii_alphanumeric() || "._+-".contains(c);
        if version.is_empty() || !version.chars().all(ok) || suite.as_deref().is_some_and(|s| !s.chars().all(ok)) {
            return Err(LabError::Invalid(format!(
                "kernel {s:?}: a series (6.1), an ABI (6.1.0-56-cloud-amd64) or SUITE:VERSION (trixie-backports:7.3)"
            )));
        }
        Ok(KernelSpec { suite, version: version.to_string() })
    }
}

/// The flavour fetched: Debian's cloud kernels keep virtio in modules
/// small enough for an initramfs.
const FLAVOUR: &str = "cloud-amd64";

/// An unpacked kernel in the cache.
#[derive(Debug, Clone)]
pub struct Unpacked {
    /// `uname -r` in the guest.
    pub abi: String,
    /// The cache directory: `vmlinuz`, `lib/modules/ABI/`, `package.txt`.
    pub dir: PathBuf,
}

impl Unpacked {
    /// The kernel image.
    pub fn vmlinuz(&self) -> PathBuf {
        self.dir.join("vmlinuz")
    }

    /// The module tree.
    pub fn modules(&self) -> PathBuf {
        self.dir.join("lib/modules").join(&self.abi)
    }
}

/// Where fetched kernels are kept: `$MBALLOC_KERNELS`, or
/// `~/.cache/mballoc/kernels`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MBALLOC_KERNELS") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache/mballoc/kernels")
}

/// apt's options for `spec`'s suite (none for the host's sources).
fn apt_options(spec: &KernelSpec, cache: &Path) -> Result<Vec<String>, LabError> {
    let Some(suite) = &spec.suite else { return Ok(Vec::new()) };
    let dir = cache.join("apt").join(suite);
    for d in ["lists/partial", "archives/partial"] {
        std::fs::create_dir_all(dir.join(d)).map_err(|e| LabError::io(dir.display().to_string(), e))?;
    }
    let list = dir.join("sources.list");
    std::fs::write(
        &list,
        format!("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian {suite} main\n"),
    )
    .map_err(|e| LabError::io(list.display().to_string(), e))?;
    let d = dir.display();
    let opts = vec![
        format!("-oDir::State={d}"),
        format!("-oDir::State::Lists={d}/lists"),
        "-oDir::State::status=/dev/null".to_string(),
        format!("-oDir::Cache={d}"),
        format!("-oDir::Cache::archives={d}/archives"),
        format!("-oDir::Etc::SourceList={}", list.display()),
        "-oDir::Etc::SourceParts=/dev/null".to_string(),
    ];
    let fresh = std::fs::read_dir(dir.join("lists")).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name().to_string_lossy().contains("_Packages")
                && e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|a| a.as_secs() < 86_400))
        })
    });
    if !fresh {
        output(Command::new("apt-get").args(&opts).arg("update"), "apt-get update")?;
    }
    Ok(opts)
}

/// Run `cmd`; its stdout, or an error naming `what`: unavailable when
/// the program is missing, a tool failure when it fails.
pub(super) fn output(cmd: &mut Command, what: &str) -> Result<String, LabError> {
    let out = cmd.output().map_err(|e| LabError::Unavailable(format!("{what}: {e}")))?;
    if !out.status.success() {
        let message = String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("").trim().to_string();
        return Err(LabError::Tool { program: what.to_string(), message });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The newest ABI of `spec`'s series that apt offers, or else the newest
/// already in `cache` (fetched once from another suite: `bullseye:5.10`
/// makes `5.10` work); an ABI is itself.
fn resolve(spec: &KernelSpec, apt: &[String], cache: &Path) -> Result<String, LabError> {
    let v = &spec.version;
    if v.contains('-') || v.contains('+') {
        return Ok(v.clone());
    }
    let pattern = format!("^linux-image-{}[.-][0-9].*-{FLAVOUR}(-unsigned)?$", v.replace('.', "\\."));
    let list =
        output(Command::new("apt-cache").args(apt).args(["search", "--names-only", &pattern]), "apt-cache search")?;
    let mut abis: Vec<String> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(|p| p.trim_start_matches("linux-image-").trim_end_matches("-unsigned").to_string())
        .collect();
    if abis.is_empty() {
        let series =
            |n: &str| n.strip_prefix(v.as_str()).is_some_and(|r| r.starts_with(['.', '-'])) && n.ends_with(FLAVOUR);
        let cached = std::fs::read_dir(cache).into_iter().flatten().flatten();
        abis = cached.map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| series(n)).collect();
    }
    abis.sort_by_key(|a| version_key(a));
    abis.pop().ok_or_else(|| {
        LabError::Unavailable(format!(
            "no {FLAVOUR} kernel of series {v} in {} (apt-get update?)",
            spec.suite.as_deref().unwrap_or("the host's apt sources")
        ))
    })
}

/// Numbers in a version string, compared as numbers.
fn version_key(s: &str) -> Vec<u64> {
    s.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty()).filter_map(|p| p.parse().ok()).collect()
}

/// Whether apt has a downloadable candidate for `package`.
fn has_candidate(apt: &[String], package: &str) -> bool {
    output(Command::new("apt-cache").args(apt).args(["policy", package]), "apt-cache policy")
        .is_ok_and(|p| p.lines().any(|l| l.trim().starts_with("Candidate:") && !l.contains("(none)")))
}

/// Fetch and unpack `spec` into the cache, or find it there.
pub fn fetch(spec: &KernelSpec) -> Result<Unpacked, LabError> {
    let cache = cache_dir();
    let apt = apt_options(spec, &cache)?;
    let abi = resolve(spec, &apt, &cache)?;
    let dir = cache.join(&abi);
    let unpacked = Unpacked { abi: abi.clone(), dir: dir.clone() };
    if unpacked.vmlinuz().is_file() && unpacked.modules().join("modules.dep").is_file() {
        return Ok(unpacked);
    }
    // Up to 6.18 one package holds the kernel and its modules (the
    // unsigned one is the same kernel without the secure-boot chain);
    // from 6.19 they are split in three.
    let mut packages = vec![if has_candidate(&apt, &format!("linux-image-{abi}-unsigned")) {
        format!("linux-image-{abi}-unsigned")
    } else {
        format!("linux-image-{abi}")
    }];
    for part in ["linux-binary", "linux-modules", "linux-base"] {
        if has_candidate(&apt, &format!("{part}-{abi}")) {
            packages.push(format!("{part}-{abi}"));
        }
    }
    let debs = cache.join("debs");
    std::fs::create_dir_all(&debs).map_err(|e| LabError::io(debs.display().to_string(), e))?;
    output(Command::new("apt-get").args(&apt).arg("download").args(&packages).current_dir(&debs), "apt-get download")?;
    let root = cache.join(format!("unpack-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut described = String::new();
    for p in &packages {
        let deb = newest_deb(&debs, p)?;
        output(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root), "dpkg-deb -x")?;
        described.push_str(&output(
            Command::new("dpkg-deb").arg("-f").arg(&deb).args(["Package", "Version"]),
            "dpkg-deb -f",
        )?);
    }
    let found = |name: &str| find_file(&root, &|p: &Path| p.file_name().is_some_and(|n| n == name));
    let vmlinuz = found(&format!("vmlinuz-{abi}"))
        .or_else(|| found("vmlinuz"))
        .ok_or_else(|| LabError::Unavailable(format!("no vmlinuz in {}", packages.join(", "))))?;
    let modules = find_file(&root, &|p: &Path| p.ends_with(format!("lib/modules/{abi}")) && p.is_dir())
        .ok_or_else(|| LabError::Unavailable(format!("no modules for {abi} in {}", packages.join(", "))))?;
    let _ = std::fs::remove_dir_all(&dir);
    let io = |e| LabError::io(dir.display().to_string(), e);
    std::fs::create_dir_all(dir.join("lib/modules")).map_err(io)?;
    std::fs::rename(&vmlinuz, unpacked.vmlinuz()).map_err(io)?;
    std::fs::rename(&modules, unpacked.modules()).map_err(io)?;
    std::fs::write(dir.join("package.txt"), described).map_err(io)?;
    let _ = std::fs::remove_dir_all(&root);
    // The package's postinst writes modules.dep; it never ran here.
    output(Command::new("depmod").arg("-b").arg(&dir).arg(&abi), "depmod (kmod)")?;
    Ok(unpacked)
}

fn newest_deb(debs: &Path, package: &str) -> Result<PathBuf, LabError> {
    let prefix = format!("{package}_");
    std::fs::read_dir(debs)
        .map_err(|e| LabError::io(debs.display().to_string(), e))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
        .ok_or_else(|| LabError::Unavailable(format!("apt-get download left no {package} package")))
}

/// The first path under `dir` (depth first) that `pick` accepts.
fn find_file(dir: &Path, pick: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if pick(&p) {
            return Some(p);
        }
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            if let Some(f) = find_file(&p, pick) {
                return Some(f);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_versions_sort_as_numbers() {
        let s: KernelSpec = "trixie-backports:7.3".parse().unwrap();
        assert_eq!((s.suite.as_deref(), s.version.as_str()), (Some("trixie-backports"), "7.3"));
        assert_eq!("6.1".parse::<KernelSpec>().unwrap().suite, None);
        assert!("6.1; rm -rf /".parse::<KernelSpec>().is_err());
        assert!(version_key("6.1.0-56-cloud-amd64") > version_key("6.1.0-9-cloud-amd64"));
    }
}
