//! include/mballoc.h is what cbindgen makes of this crate: regenerate with
//! `MBALLOC_WRITE_HEADER=1 cargo test -p mballoc-c --test header` (which
//! also turns cbindgen's `//` guard comments into C89's `/* */`).

use std::path::Path;

#[test]
fn the_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut made = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate")
        .write(&mut made);
    // cbindgen ends its C++ guards with `//` comments, which C89 does not
    // have: they become `/* */`, and the header compiles as C89.
    let made = String::from_utf8(made)
        .unwrap()
        .replace("// __cplusplus", "/* __cplusplus */")
        .replace("// extern \"C\"", "/* extern \"C\" */");
    assert!(!made.contains("//"), "a `//` comment left in the header");
    let path = crate_dir.join("../../include/mballoc.h");
    if std::env::var_os("MBALLOC_WRITE_HEADER").is_some() {
        std::fs::write(&path, &made).unwrap();
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(kept == made, "include/mballoc.h is stale: MBALLOC_WRITE_HEADER=1 cargo test -p mballoc-c --test header");
}
