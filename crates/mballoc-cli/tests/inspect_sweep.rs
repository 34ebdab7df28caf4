//! The damaged-image sweep: seeded random damage to the metadata of small
//! images, each read by every `mballoc inspect` report in its own process
//! under a memory limit and a time limit. Any exit but 0 (read) or 1
//! (typed error or damage reported) is a failure: a panic (101), a signal,
//! running out of the 512 MiB address space, or taking over 10 s.
//!
//! Size knob: `MBALLOC_INSPECT_SWEEP` images per layout (default 40; the
//! seed is printed, `MBALLOC_SEED` replays it).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mballoc_testkit::{have, knob, rng, run, seed, Scratch};
use rand::Rng;

const LIMIT: Duration = Duration::from_secs(10);
const MEMORY_KIB: u64 = 512 << 10;

/// Run `inspect ARGS IMG` limited; the exit code, or why it failed.
fn inspect_limited(args: &[&str], img: &Path) -> Result<i32, String> {
    let bin = env!("CARGO_BIN_EXE_mballoc");
    let script = format!("ulimit -v {MEMORY_KIB}; exec \"$0\" inspect \"$@\"");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(bin)
        .args(args)
        .arg(img)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            let mut err = String::new();
            if let Some(mut s) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut s, &mut err);
            }
            return match status.code() {
                Some(c @ (0 | 1)) => Ok(c),
                Some(c) => Err(format!("exit {c}: {err}")),
                None => Err(format!("killed by a signal: {err}")),
            };
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn damaged_metadata_gives_reports_or_errors_in_bounded_time_and_memory() {
    if !have("mke2fs") {
        eprintln!("skipped: mke2fs not installed");
        return;
    }
    let per_layout = knob("MBALLOC_INSPECT_SWEEP", 40);
    let seed = seed("inspect sweep");
    let mut rng = rng(seed);
    let s = Scratch::new("inspect-sweep");
    let tree = s.join("tree");
    for d in 0..6 {
        std::fs::create_dir_all(tree.join(format!("d{d}/sub"))).unwrap();
        for f in 0..12 {
            std::fs::write(tree.join(format!("d{d}/f{f}")), vec![f as u8; 700 * (f + 1)]).unwrap();
        }
        std::fs::write(tree.join(format!("d{d}/sub/deep")), b"deep").unwrap();
        std::os::unix::fs::symlink("../d0/f1", tree.join(format!("d{d}/link"))).unwrap();
    }
    // A directory of several blocks, indexed by e2fsck -D below, so that
    // damage reaches hash indexes too.
    std::fs::create_dir_all(tree.join("wide")).unwrap();
    for i in 0..300 {
        std::fs::write(tree.join(format!("wide/name_{i}")), b"").unwrap();
    }
    let layouts = [
        "-t ext4 -b 1024",
        "-t ext4 -b 1024 -O ^metadata_csum,uninit_bg",
        "-t ext3 -b 1024",
        "-t ext4 -b 4096 -I 256 -O inline_data",
    ];
    let (mut runs, mut failures) = (0u64, Vec::new());
    for opts in layouts {
        let base = s.join("base.img");
        run(Command::new("mke2fs")
            .args(["-q", "-F"])
            .args(opts.split_whitespace())
            .arg("-d")
            .arg(&tree)
            .arg(&base)
            .arg("4M"));
        let pristine = std::fs::read(&base).unwrap();
        // The metadata, the directories and the small files all sit in the
        // first quarter of these images.
        let span = pristine.len() / 4;
        for i in 0..per_layout {
            let mut img = pristine.clone();
            for _ in 0..rng.gen_range(1..=8) {
                let at = rng.gen_range(1024..span);
                img[at] = match rng.gen_range(0..3) {
                    0 => img[at] ^ (1 << rng.gen_range(0..8)),
                    1 => rng.gen(),
                    _ => [0x00, 0xFF, 0x7F, 0x80][rng.gen_range(0..4)],
                };
            }
            let path = s.join("damaged.img");
            std::fs::write(&path, &img).unwrap();
            for args in [&[][..], &["--files"], &["--groups"], &["--freefrag"], &["--files", "--ignore-checksums"]] {
                runs += 1;
                if let Err(why) = inspect_limited(args, &path) {
                    let keep = s.path().parent().unwrap().join(format!("mballoc-sweep-{seed}-{i}.img"));
                    let _ = std::fs::copy(&path, &keep);
                    failures.push(format!("{opts}, image {i}, inspect {args:?}: {why} (kept as {})", keep.display()));
                }
            }
        }
    }
    eprintln!("{runs} runs on {} damaged images", per_layout * layouts.len() as u64);
    assert!(failures.is_empty(), "MBALLOC_SEED={seed}:\n{}", failures.join("\n"));
}
