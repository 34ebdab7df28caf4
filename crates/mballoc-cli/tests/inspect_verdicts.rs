//! `mballoc inspect` against the kernel's own verdict, one rule per test:
//! each image is made by mke2fs and changed by debugfs one field at a
//! time (debugfs keeps every checksum valid). Without root the expected
//! verdict is asserted on inspect alone; as root the image is also
//! loop-mounted read-only and the kernel must agree.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mballoc_testkit::{have, is_root, run, Scratch};

fn mballoc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mballoc"))
}

macro_rules! need_e2fsprogs {
    () => {
        if !have("mke2fs") || !have("debugfs") {
            eprintln!("skipped: e2fsprogs not installed");
            return;
        }
    };
}

/// An image of `size` made by `mke2fs OPTS -d TREE` in `dir`, `tree`
/// filling the tree first.
fn image(dir: &Path, opts: &str, size: &str, tree: impl FnOnce(&Path)) -> PathBuf {
    let t = dir.join("tree");
    std::fs::create_dir_all(&t).unwrap();
    tree(&t);
    let img = dir.join("img");
    run(Command::new("mke2fs").args(["-q", "-F"]).args(opts.split_whitespace()).arg("-d").arg(&t).arg(&img).arg(size));
    img
}

/// Run debugfs commands (one per line) on `img`, writing.
fn debugfs(img: &Path, cmds: &str) {
    let f = img.with_extension("cmds");
    std::fs::write(&f, cmds).unwrap();
    run(Command::new("debugfs").args(["-w", "-f"]).arg(&f).arg(img));
}

/// debugfs's answer to one read-only request.
fn ask(img: &Path, req: &str) -> String {
    run(Command::new("debugfs").args(["-R", req]).arg(img))
}

fn inspect(args: &[&str], img: &Path) -> Output {
    mballoc().arg("inspect").args(args).arg(img).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The image mounted read-only by the kernel, as root; unmounted on drop.
struct Kernel {
    mnt: PathBuf,
}

impl Kernel {
    /// `None` without root (said on stderr), or `Some(Err)` when the
    /// kernel refuses the mount.
    fn mount(img: &Path, what: &str) -> Option<Result<Kernel, String>> {
        if !is_root() {
            eprintln!("skipped: the kernel's verdict on {what} needs root (a loop mount)");
            return None;
        }
        let mnt = img.with_extension("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let out = Command::new("mount").args(["-o", "loop,ro"]).arg(img).arg(&mnt).output().unwrap();
        Some(if out.status.success() { Ok(Kernel { mnt }) } else { Err(text(&out.stderr)) })
    }

    /// Whether the kernel opens and reads the first byte of `path`.
    fn reads(&self, path: &str) -> bool {
        std::fs::File::open(self.mnt.join(path.trim_start_matches('/')))
            .and_then(|f| std::io::Read::read(&mut &f, &mut [0u8; 1]))
            .is_ok()
    }

    /// The kernel's mb_groups for the mounted volume.
    fn mb_groups(&self) -> String {
        let dev = run(Command::new("findmnt").args(["-n", "-o", "SOURCE"]).arg(&self.mnt));
        let name = dev.trim().rsplit('/').next().unwrap().to_string();
        std::fs::read_to_string(format!("/proc/fs/ext4/{name}/mb_groups")).unwrap()
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).output();
    }
}

/// /good (4 bytes) and /bad (20,000 bytes) on a 4 KiB-block volume with
/// 256-byte inodes.
fn two_files(dir: &Path) -> PathBuf {
    image(dir, "-t ext4 -b 4096 -I 256", "16M", |t| {
        std::fs::write(t.join("good"), b"good").unwrap();
        std::fs::write(t.join("bad"), vec![1u8; 20_000]).unwrap();
    })
}

/// Inode fields the kernel refuses (`__ext4_iget`, block_validity's
/// journal blocks, what open needs): inspect reports /bad as damaged,
/// says why, and lists /good; the kernel refuses /bad and reads /good.
#[test]
fn fields_the_kernel_refuses_are_damage() {
    need_e2fsprogs!();
    // JOURNAL is replaced by the journal's first block.
    let cases = [
        ("size 0xFFFFFFFF001", "past the largest file"),
        ("size 0x100000000000", "past the largest file"),
        ("size 0x7fffffffffffffff", "past the largest file"),
        ("mode 0170644", "of no file type"),
        ("flags 0x280000", "extended attribute's value"),
        ("flags 0x80800", "encrypt flag"),
        ("flags 0x180000", "verity flag"),
        ("extra_isize 132", "too large"),
        ("extra_isize 160", "too large"),
        ("block[5] JOURNAL", "the journal"),
        ("file_acl JOURNAL", "extended-attribute block"),
    ];
    for (field, why) in cases {
        let s = Scratch::new("refused");
        let img = two_files(s.path());
        let journal = ask(&img, "bmap <8> 0").trim().to_string();
        debugfs(&img, &format!("sif /bad {}\n", field.replace("JOURNAL", &journal)));
        let out = inspect(&["--files"], &img);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{field}: {stderr}");
        assert_eq!(text(&out.stdout), "/good: 1 extent found\n", "{field}");
        assert!(stderr.contains("/bad: damaged") && stderr.contains(why), "{field}: {stderr}");
        let summary = inspect(&[], &img);
        assert_eq!(summary.status.code(), Some(1), "{field}: the summary says it too");
        assert!(text(&summary.stderr).contains("/bad: damaged"), "{field}");
        let Some(k) = Kernel::mount(&img, field) else { continue };
        let k = k.unwrap_or_else(|e| panic!("{field}: the kernel refused the mount: {e}"));
        assert!(!k.reads("/bad"), "{field}: the kernel read what inspect refused");
        assert!(k.reads("/good"), "{field}");
    }
}

/// The largest size the kernel accepts for an extent-mapped file on a
/// 4 KiB-block volume (2^32 − 1 blocks) is listed, not damage.
#[test]
fn the_largest_file_size_is_accepted() {
    need_e2fsprogs!();
    let s = Scratch::new("maxsize");
    let img = two_files(s.path());
    debugfs(&img, "sif /bad size 0xFFFFFFFF000\n");
    let out = inspect(&["--files"], &img);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("/bad: 1 extent found"));
    if let Some(k) = Kernel::mount(&img, "the largest size") {
        assert!(k.unwrap().reads("/bad"));
    }
}

/// The first inode is a signed number to the kernel: 2^32 − 1 is refused
/// at mount, and so by inspect.
#[test]
fn a_first_inode_the_kernel_reads_as_negative_is_refused() {
    need_e2fsprogs!();
    let s = Scratch::new("first-ino-neg");
    let img = two_files(s.path());
    debugfs(&img, "ssv first_ino 4294967295\n");
    let out = inspect(&["--files"], &img);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("negative"), "{}", text(&out.stderr));
    if let Some(k) = Kernel::mount(&img, "a negative first inode") {
        assert!(k.is_err(), "the kernel mounted what inspect refused");
    }
}

/// A name that points below the first inode for files (lost+found, 11,
/// once the first inode is 12) is "bad inode number" to the kernel.
#[test]
fn a_name_of_a_reserved_inode_is_damage() {
    need_e2fsprogs!();
    let s = Scratch::new("reserved-name");
    let img = two_files(s.path());
    debugfs(&img, "ssv first_ino 12\n");
    let out = inspect(&["--files"], &img);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/lost+found: damaged") && stderr.contains("reserved"), "{stderr}");
    assert!(text(&out.stdout).contains("/good: 1 extent found"));
    if let Some(k) = Kernel::mount(&img, "a reserved inode's name") {
        let k = k.unwrap();
        assert!(std::fs::metadata(k.mnt.join("lost+found")).is_err(), "the kernel looked it up");
        assert!(k.reads("/good"));
    }
}

/// A directory with a second name is listed once: the second name is
/// damage, and a chain of 30 directories each named twice (2^30 paths to
/// a walk that follows every name) takes no longer than the image.
#[test]
fn a_directory_reached_twice_is_listed_once() {
    need_e2fsprogs!();
    let s = Scratch::new("dir-twice");
    let depth = 30;
    let img = image(s.path(), "-t ext4 -b 4096", "16M", |t| {
        let mut d = t.to_path_buf();
        for i in 0..depth {
            d = d.join(format!("d{i}"));
        }
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("leaf"), b"x").unwrap();
    });
    let mut cmds = String::new();
    let mut d = String::new();
    for i in 0..depth {
        // /d0/.../d{i-1}/again{i} names d{i} a second time.
        let parent = d.clone();
        d = format!("{d}/d{i}");
        cmds.push_str(&format!("link {d} {parent}/again{i}\n"));
    }
    debugfs(&img, &cmds);
    let started = std::time::Instant::now();
    let out = inspect(&["--files"], &img);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(text(&out.stdout).lines().count(), 1, "the leaf once: {}", text(&out.stdout));
    assert_eq!(stderr.matches("again (a loop or a second name)").count(), depth, "{stderr}");
    let summary = inspect(&[], &img);
    assert_eq!(summary.status.code(), Some(1));
    assert!(text(&summary.stdout).contains("1 regular files"), "{}", text(&summary.stdout));
    eprintln!("{depth} doubly named directories: {:?}", started.elapsed());
}

/// A group whose last blocks are all in use, shorter than the others:
/// the kernel shows the group size as its first free block, and so does
/// `inspect --groups`.
#[test]
fn a_full_short_last_group_reads_as_the_kernel_reads_it() {
    need_e2fsprogs!();
    let s = Scratch::new("full-last");
    // 40,960 blocks: group 0 of 32,768 and group 1 of 8,192, whose
    // bitmaps and inode table sit in group 0 (flex_bg).
    let img = image(s.path(), "-t ext4 -b 4096", "160M", |_| {});
    debugfs(&img, "setb 32768 8192\n");
    let groups = run(mballoc().args(["inspect", "--groups"]).arg(&img));
    let line = groups.lines().nth(2).unwrap();
    assert!(line.starts_with("#1    : 0     0     32768 "), "{groups}");
    if let Some(k) = Kernel::mount(&img, "a full last group") {
        assert_eq!(k.unwrap().mb_groups(), groups);
    }
}

/// A BLOCK_UNINIT group's free count is computed, not read from its
/// descriptor: one that says otherwise is not "corrupted" to the kernel,
/// nor to `inspect --groups`.
#[test]
fn a_block_uninit_group_takes_its_computed_count() {
    need_e2fsprogs!();
    let s = Scratch::new("block-uninit");
    let img = image(s.path(), "-t ext4 -b 4096", "1G", |_| {});
    let dump = run(Command::new("dumpe2fs").arg(&img));
    let g: u32 = dump
        .lines()
        .filter(|l| l.starts_with("Group "))
        .find(|l| l.contains("BLOCK_UNINIT"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.trim_end_matches(':').parse().ok())
        .expect("mke2fs leaves a BLOCK_UNINIT group on 1 GiB");
    debugfs(&img, &format!("set_bg {g} free_blocks_count 100\nset_bg {g} checksum calc\n"));
    let groups = run(mballoc().args(["inspect", "--groups"]).arg(&img));
    assert!(!groups.contains("corrupted"), "{groups}");
    if let Some(k) = Kernel::mount(&img, "a BLOCK_UNINIT group") {
        assert_eq!(k.unwrap().mb_groups(), groups);
    }
}

/// INODE_UNINIT only guides allocation: the kernel reads the files of
/// such a group that directories name, and inspect lists them.
#[test]
fn files_in_an_inode_uninit_group_are_read() {
    need_e2fsprogs!();
    let s = Scratch::new("inode-uninit");
    let img = two_files(s.path());
    debugfs(&img, "set_bg 0 flags 1\nset_bg 0 checksum calc\n");
    assert!(run(Command::new("dumpe2fs").arg(&img)).contains("[INODE_UNINIT"), "group 0 is INODE_UNINIT now");
    let out = inspect(&["--files"], &img);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Vec<String> = text(&out.stdout).lines().map(|l| l.split(':').next().unwrap().to_string()).collect();
    assert_eq!(listed, ["/bad", "/good"]);
    if let Some(k) = Kernel::mount(&img, "an INODE_UNINIT group") {
        let k = k.unwrap();
        assert!(k.reads("/bad") && k.reads("/good"));
    }
}

/// One damaged file does not stop the summary: it reports the rest, with
/// the damaged path on stderr, and exits 1.
#[test]
fn the_summary_reports_around_damage() {
    need_e2fsprogs!();
    let s = Scratch::new("summary-partial");
    let img = two_files(s.path());
    debugfs(&img, "sif /bad block[0] 0\n");
    let out = inspect(&[], &img);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("Paths: 3 (1 regular files, 1 extents as filefrag counts, 1 damaged)"), "{stdout}");
    assert!(stdout.contains("\nFree: "), "{stdout}");
    assert!(stderr.contains("/bad: damaged") && stderr.contains("1 damaged path"), "{stderr}");
}

/// An indexed directory whose names the hash index does not lead to (the
/// volume's hash seed changed under it): readdir would list them, the
/// kernel's lookup cannot find them. inspect lists exactly the names the
/// kernel can look up and reports the others.
#[test]
fn names_the_hash_index_does_not_lead_to_are_damage() {
    need_e2fsprogs!();
    if !have("e2fsck") {
        eprintln!("skipped: e2fsck not installed");
        return;
    }
    let s = Scratch::new("htree-seed");
    let img = image(s.path(), "-t ext4 -b 1024", "32M", |t| {
        std::fs::create_dir_all(t.join("big")).unwrap();
        for i in 0..600 {
            std::fs::write(t.join(format!("big/file_{i}")), b"x").unwrap();
        }
    });
    // e2fsck -D indexes the directory (mke2fs -d writes it linear).
    let _ = Command::new("e2fsck").arg("-fyD").arg(&img).output().unwrap();
    let healthy = inspect(&["--files"], &img);
    assert!(healthy.status.success(), "{}", text(&healthy.stderr));
    assert_eq!(text(&healthy.stdout).lines().count(), 600);
    debugfs(&img, "ssv hash_seed 11111111-2222-3333-4444-555555555555\n");
    let out = inspect(&["--files"], &img);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1));
    let listed: std::collections::BTreeSet<String> =
        stdout.lines().map(|l| l.split(':').next().unwrap().to_string()).collect();
    let damaged = stderr.matches("the kernel cannot look it up").count();
    assert_eq!(listed.len() + damaged, 600, "{stderr}");
    assert!(damaged > 0, "a new seed moves most names");
    let Some(k) = Kernel::mount(&img, "a changed hash seed") else { return };
    let k = k.unwrap();
    let found: std::collections::BTreeSet<String> = (0..600)
        .map(|i| format!("/big/file_{i}"))
        .filter(|p| std::fs::metadata(k.mnt.join(p.trim_start_matches('/'))).is_ok())
        .collect();
    assert_eq!(found, listed, "inspect lists what the kernel looks up");
}
