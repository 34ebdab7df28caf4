//! The public module lists of the lab and the ext4 reader, held to what
//! their users (the CLI, the Python and the C bindings) reach for.
//!
//! A `pub mod` that no user names is surface nobody asked for: it binds
//! the crate to its internals. This test reads each crate's `lib.rs`, and
//! fails on a public module the users' sources never name, and on one
//! they name that is not public (so the list below cannot go stale).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `pub mod NAME;` lines of a lib.rs, feature-gated ones excepted (they
/// exist for the crate's own tests).
fn public_modules(lib: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
    let mut out = BTreeSet::new();
    let mut gated = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[cfg(feature") {
            gated = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("pub mod ") {
            let name = rest.trim_end_matches(';').trim_end_matches(" {").trim();
            if !gated {
                out.insert(name.to_string());
            }
        }
        if !line.starts_with("#[") {
            gated = false;
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// What the users name as `krate::name`: every name, and those followed by
/// `::` that are modules (lower case; types and functions are not).
fn named_by_users(krate: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let root = workspace();
    let mut files = Vec::new();
    for user in ["mballoc-cli/src", "mballoc-cli/examples", "mballoc-py/src", "mballoc-c/src"] {
        sources(&root.join("crates").join(user), &mut files);
    }
    let prefix = format!("{krate}::");
    let (mut names, mut modules) = (BTreeSet::new(), BTreeSet::new());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (at, _) in text.match_indices(&prefix) {
            let rest = &text[at + prefix.len()..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            // A module is followed by `::`; a type or function at the root is not one.
            if rest[name.len()..].starts_with("::") && name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                modules.insert(name.clone());
            }
            names.insert(name);
        }
    }
    (names, modules)
}

fn check(krate: &str, dir: &str) {
    let public = public_modules(&workspace().join("crates").join(dir).join("src/lib.rs"));
    let (names, modules) = named_by_users(krate);
    let unused: Vec<_> = public.difference(&names).collect();
    let hidden: Vec<_> = modules.difference(&public).collect();
    assert!(
        unused.is_empty(),
        "{krate}: public modules no user names (make them private, or re-export what is used): {unused:?}"
    );
    assert!(hidden.is_empty(), "{krate}: users name modules that are not public: {hidden:?}");
}

#[test]
fn the_lab_exports_only_the_modules_its_users_name() {
    check("mballoc_lab", "mballoc-lab");
}

#[test]
fn the_reader_exports_only_the_modules_its_users_name() {
    check("mballoc_ext4", "mballoc-ext4");
}
