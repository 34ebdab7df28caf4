//! Helpers the workspace's tests share.
//!
//! * Randomized tests take a seed from [`seed`] (`MBALLOC_SEED`, else a
//!   fresh one) and print it, so a failure is one line to replay; heavy
//!   ones scale with [`scale`] (`MBALLOC_TEST_SCALE`, default 1) or a named
//!   [`knob`].
//! * Tests that need a tool, root or loop devices ask first ([`have`],
//!   [`is_root`], [`can_loop_mount`]) and skip with one line otherwise.
//! * [`Scratch`] is a temporary directory removed when dropped;
//!   [`mke2fs_image`] makes an ext4 image from a directory tree without
//!   root.
//! * With the `ext4-fuzz` feature, `ext4_fuzz` builds the ext4 reader's
//!   fuzz inputs (the fuzz targets and the regression test share it).

#![deny(unsafe_code)]

#[cfg(feature = "ext4-fuzz")]
pub mod ext4_fuzz;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The seed for a randomized test: `MBALLOC_SEED` or a fresh one, printed
/// so any failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let s = std::env::var("MBALLOC_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    eprintln!("{test}: MBALLOC_SEED={s}");
    s
}

/// A deterministic generator from `seed`.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Size knob for heavy randomized runs: `MBALLOC_TEST_SCALE` (default 1).
pub fn scale() -> usize {
    knob("MBALLOC_TEST_SCALE", 1) as usize
}

/// A numeric setting from the environment variable `name`, or `default`.
pub fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Whether `tool` runs here (it is asked for its version).
pub fn have(tool: &str) -> bool {
    Command::new(tool).arg("-V").output().is_ok()
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        libc::geteuid() == 0
    }
}

/// Whether loop devices can be set up here (root, and a loop-control
/// device).
pub fn can_loop_mount() -> bool {
    is_root() && Path::new("/dev/loop-control").exists()
}

/// Run a command that must succeed; its standard output.
pub fn run(c: &mut Command) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(out.status.success(), "{c:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// A fresh directory, removed on drop; a file system mounted on its
/// `mnt` (see [`Scratch::mount_point`]) is unmounted first, so a failed
/// test leaves no mount behind.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A new, empty directory under the temporary directory whose name
    /// starts with `name`.
    pub fn new(name: &str) -> Scratch {
        Scratch::under(&std::env::temp_dir(), name)
    }

    /// As [`Scratch::new`], in /dev/shm where there is one: images there
    /// cost no disk I/O (and a loop device over tmpfs works).
    pub fn in_memory(name: &str) -> Scratch {
        let shm = Path::new("/dev/shm");
        Scratch::under(if shm.is_dir() { shm } else { Path::new("/tmp") }, name)
    }

    fn under(base: &Path, name: &str) -> Scratch {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("mballoc-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Scratch(dir)
    }

    /// `mnt` inside it, created: where a test mounts, and what drop
    /// unmounts.
    pub fn mount_point(&self) -> PathBuf {
        let mnt = self.0.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap_or_else(|e| panic!("{}: {e}", mnt.display()));
        mnt
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let mnt = self.0.join("mnt");
        if mnt.is_dir() {
            // Lazily: a server or a loop device may still hold it; a FUSE
            // mount whose server is gone needs fusermount3.
            let quiet = |c: &mut Command| {
                let _ = c.stdout(Stdio::null()).stderr(Stdio::null()).status();
            };
            quiet(Command::new("umount").arg("-l").arg(&mnt));
            quiet(Command::new("fusermount3").args(["-u", "-z"]).arg(&mnt));
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An ext4 image of `size` (as mke2fs takes it, e.g. `"8M"`) made with
/// `mke2fs OPTS -d TREE`, where `populate` fills TREE; its bytes. `None`,
/// with one line on standard error, where mke2fs is not installed.
pub fn mke2fs_image(opts: &str, size: &str, populate: impl FnOnce(&Path)) -> Option<Vec<u8>> {
    if !have("mke2fs") {
        eprintln!("skipped: mke2fs not installed");
        return None;
    }
    let dir = Scratch::new("mke2fs");
    let tree = dir.join("tree");
    std::fs::create_dir_all(&tree).expect("tree directory");
    populate(&tree);
    let img = dir.join("img");
    run(Command::new("mke2fs")
        .args(["-q", "-F"])
        .args(opts.split_whitespace())
        .arg("-d")
        .arg(&tree)
        .arg(&img)
        .arg(size));
    Some(std::fs::read(&img).expect("the image mke2fs wrote"))
}
