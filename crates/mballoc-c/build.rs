//! The shared library's SONAME: `libmballoc_c.so.MAJOR`, so programs
//! linked against one major version keep loading it across minor ones
//! (what `make install` names the file and its links after).

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets it");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmballoc_c.so.{major}");
    }
}
