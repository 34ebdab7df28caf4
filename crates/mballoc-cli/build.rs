//! The commit the binary was built from, for `mballoc --version`: from git
//! when the source is a checkout, "unknown" otherwise (a tarball).

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    println!("cargo:rustc-env=MBALLOC_COMMIT={commit}{}", if dirty { "-modified" } else { "" });
    // Rebuilt when HEAD moves (a commit or a checkout).
    for f in ["../../.git/HEAD", "../../.git/index"] {
        if std::path::Path::new(f).exists() {
            println!("cargo:rerun-if-changed={f}");
        }
    }
}
