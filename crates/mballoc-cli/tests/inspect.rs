//! `mballoc inspect` against e2fsprogs on images made by `mkfs.ext4` in
//! several layouts: the free-space report must equal `e2freefrag`'s byte
//! for byte, and each file's extent count must equal `filefrag`'s.
//!
//! As root the images are loop-mounted and populated by the kernel
//! (writes, fallocate, punched holes, an htree directory, hard and
//! symbolic links); otherwise `mke2fs -d` copies a generated tree in, and
//! only the free-space report is compared.

use mballoc_testkit::Scratch;
use std::path::Path;
use std::process::Command;

use mballoc_testkit::{have, is_root, run};

fn mballoc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mballoc"))
}

/// Each variant: a name and mkfs options.
const VARIANTS: &[(&str, &str)] = &[
    ("4k", "-t ext4 -b 4096"),
    ("1k", "-t ext4 -b 1024"),
    ("4k-no64bit", "-t ext4 -b 4096 -O ^64bit"),
    ("4k-flex1", "-t ext4 -b 4096 -G 1"),
    ("4k-noflex", "-t ext4 -b 4096 -O ^flex_bg"),
    ("4k-nocsum-uninit", "-t ext4 -b 4096 -O ^metadata_csum,uninit_bg"),
    ("1k-nocsum-32bit", "-t ext4 -b 1024 -O ^metadata_csum,uninit_bg,^64bit"),
    ("4k-meta_bg", "-t ext4 -b 4096 -O meta_bg,^resize_inode"),
    ("1k-sparse_super2", "-t ext4 -b 1024 -O sparse_super2"),
    ("4k-bigalloc", "-t ext4 -b 4096 -O bigalloc -C 65536"),
    ("ext3", "-t ext3 -b 4096"),
    ("ext2-1k", "-t ext2 -b 1024"),
    ("4k-inline_data", "-t ext4 -b 4096 -I 256 -O inline_data"),
    // Groups that are not a power of two, as -g (or -i, -N and some sizes)
    // make them.
    ("4k-groups-32664", "-t ext4 -b 4096 -g 32664"),
    ("1k-groups-8000", "-t ext4 -b 1024 -g 8000"),
];

/// Populate a mounted volume; returns `filefrag` lines for every regular file.
fn populate_mounted(mnt: &Path) -> Vec<String> {
    let sh = |script: &str| run(Command::new("sh").arg("-c").arg(script).current_dir(mnt));
    sh("mkdir -p a/b/c big && for i in $(seq 1 300); do echo $i > big/name-long-enough-to-need-blocks-$i; done");
    sh("dd if=/dev/zero of=a/data bs=1M count=12 status=none");
    // fallocate is ext4-only; ext2/3 get written files instead.
    sh("fallocate -l 24M a/b/falloc 2>/dev/null || dd if=/dev/zero of=a/b/falloc bs=1M count=24 status=none");
    sh("fallocate -p -o 1M -l 64K a/b/falloc 2>/dev/null; fallocate -p -o 5M -l 3M a/b/falloc 2>/dev/null; true");
    sh("dd if=/dev/zero of=a/b/c/sparse bs=4K count=3 seek=100 status=none");
    sh("dd if=/dev/zero of=a/b/c/sparse bs=4K count=3 seek=5000 conv=notrunc status=none");
    sh("for i in $(seq 1 16); do dd if=/dev/zero of=a/inter$((i%4)) bs=64K count=1 oflag=append conv=notrunc status=none; sync; done");
    sh("ln a/data a/b/hardlink && ln -s /a/data symlink && rm -f big/name-long-enough-to-need-blocks-1*");
    // Under inline_data: a directory whose entries continue from i_block
    // into the system.data attribute, empty and tiny inline files, and one
    // that outgrew the inode.
    sh("mkdir inl && for i in 1 2 3 4 5; do echo x > inl/abcdefg$i; done");
    sh(": > empty && printf abc > tiny && head -c 100 /dev/zero > inl100 && head -c 3000 /dev/zero > outgrown");
    let list = sh("find . -type f | sort");
    list.lines()
        .map(|f| {
            let line = run(Command::new("filefrag").arg(f).current_dir(mnt));
            line.trim_end().replacen("./", "/", 1)
        })
        .collect()
}

/// Without root: a generated tree copied in by `mke2fs -d`.
fn generated_tree(dir: &Path) {
    for d in ["a/b/c", "big"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    for i in 0..300 {
        std::fs::write(dir.join(format!("big/name-long-enough-to-need-blocks-{i}")), format!("{i}\n")).unwrap();
    }
    std::fs::write(dir.join("a/data"), vec![7u8; 3 << 20]).unwrap();
    std::fs::write(dir.join("a/b/c/small"), vec![1u8; 5000]).unwrap();
    std::fs::write(dir.join("empty"), b"").unwrap();
    std::fs::write(dir.join("tiny"), b"abc").unwrap();
}

#[test]
fn inspect_matches_e2freefrag_and_filefrag_on_mkfs_variants() {
    if !have("mke2fs") || !have("e2freefrag") {
        eprintln!("skipped: e2fsprogs not installed");
        return;
    }
    let root = is_root();
    let mut checked = 0;
    let mut uninit_groups = 0;
    for (name, opts) in VARIANTS {
        let scratch = Scratch::in_memory(name);
        let img = scratch.join("img");
        let mut mkfs = Command::new("mke2fs");
        mkfs.arg("-q").arg("-F").args(opts.split_whitespace());
        let expected_files = if root {
            // Large enough (and sparse) that mke2fs leaves groups
            // BLOCK_UNINIT, whose bitmaps the reader must compute.
            run(mkfs.arg(&img).arg("1G"));
            let mnt = scratch.join("mnt");
            std::fs::create_dir_all(&mnt).unwrap();
            run(Command::new("mount").args(["-o", "loop"]).arg(&img).arg(&mnt));
            let lines = populate_mounted(&mnt);
            run(Command::new("umount").arg(&mnt));
            std::fs::remove_dir(&mnt).unwrap();
            Some(lines)
        } else {
            let tree = scratch.join("tree");
            generated_tree(&tree);
            run(mkfs.arg("-d").arg(&tree).arg(&img).arg("96M"));
            None
        };
        let dump = run(Command::new("dumpe2fs").arg(&img));
        uninit_groups += dump.matches("BLOCK_UNINIT").count();
        let ours = run(mballoc().args(["inspect", "--freefrag"]).arg(&img));
        if opts.contains("bigalloc") {
            // e2freefrag looks each block up at cluster (block >> 2 × the
            // cluster bits) on bigalloc volumes, so its report there is not
            // the volume's; dumpe2fs's free ranges are the reference.
            let (blocks, runs) = dumpe2fs_free(&img);
            assert_eq!(free_blocks_in(&ours), blocks, "{name}: free blocks vs dumpe2fs");
            assert!(ours.contains(&format!("Num. free extent: {runs}\n")), "{name}: {runs} runs expected:\n{ours}");
        } else {
            let theirs = run(Command::new("e2freefrag").arg(&img));
            assert_eq!(ours, theirs, "{name}: inspect --freefrag differs from e2freefrag");
        }
        if expected_files.is_none() && opts.contains("inline_data") {
            // As filefrag counts them: inline data is one extent, an empty
            // file none (mke2fs -d keeps small files inline).
            let files = run(mballoc().args(["inspect", "--files"]).arg(&img));
            assert!(files.contains("/tiny: 1 extent found\n"), "{name}: {files}");
            assert!(files.contains("/empty: 0 extents found\n"), "{name}: {files}");
        }
        let groups = run(mballoc().args(["inspect", "--groups"]).arg(&img));
        assert!(groups.starts_with("#group: free"), "{name}: {groups}");
        if root {
            // The kernel's own mb_groups on a fresh read-only mount (its
            // buddies built from the same bitmaps, no preallocation yet).
            let mnt = scratch.join("mnt");
            std::fs::create_dir_all(&mnt).unwrap();
            run(Command::new("mount").args(["-o", "loop,ro"]).arg(&img).arg(&mnt));
            let dev = run(Command::new("findmnt").args(["-n", "-o", "SOURCE"]).arg(&mnt));
            let proc = format!("/proc/fs/ext4/{}/mb_groups", dev.trim().rsplit('/').next().unwrap());
            let kernel = std::fs::read_to_string(proc);
            run(Command::new("umount").arg(&mnt));
            std::fs::remove_dir(&mnt).unwrap();
            assert_eq!(groups, kernel.unwrap(), "{name}: inspect --groups against the kernel's mb_groups");
        }
        if let Some(mut expected) = expected_files {
            let mut got: Vec<String> =
                run(mballoc().args(["inspect", "--files"]).arg(&img)).lines().map(str::to_string).collect();
            expected.sort();
            got.sort();
            assert_eq!(got, expected, "{name}: inspect --files differs from filefrag");
        }
        checked += 1;
    }
    assert_eq!(checked, VARIANTS.len());
    assert!(uninit_groups > 0, "no variant had a BLOCK_UNINIT group to compute");
}

/// The free-block total in e2freefrag-style text: the sum of the
/// histogram's "Free Blocks" column.
fn free_blocks_in(report: &str) -> u64 {
    report
        .lines()
        .skip_while(|l| !l.starts_with("Extent Size Range"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().rev().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// Free blocks and maximal free runs per dumpe2fs's per-group
/// "Free blocks: a-b, c" lists (runs that touch across groups merge). On
/// bigalloc volumes the bounds are the first blocks of clusters.
fn dumpe2fs_free(img: &Path) -> (u64, u64) {
    let text = run(Command::new("dumpe2fs").arg(img));
    let field = |name: &str| -> u64 {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in dumpe2fs"));
        line[name.len()..].trim().parse().unwrap()
    };
    let ratio = field("Cluster size:") / field("Block size:");
    let mut ranges = Vec::new();
    // Per-group lists are indented; the unindented line is the total.
    for l in text.lines().filter_map(|l| l.strip_prefix("  Free blocks: ")) {
        for r in l.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            ranges.push((a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()));
        }
    }
    ranges.sort_unstable();
    let total = ranges.iter().map(|(a, b)| b - a + ratio).sum();
    let runs = ranges.iter().enumerate().filter(|(i, (a, _))| *i == 0 || ranges[i - 1].1 + ratio != *a).count();
    (total, runs as u64)
}

#[test]
fn inspect_reports_a_corrupt_image_with_a_typed_error() {
    if !have("mke2fs") {
        eprintln!("skipped: e2fsprogs not installed");
        return;
    }
    let scratch = Scratch::in_memory("corrupt");
    let img = scratch.join("img");
    run(Command::new("mke2fs").args(["-q", "-F", "-t", "ext4", "-b", "4096"]).arg(&img).arg("32M"));
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[1024 + 0x38] ^= 0xFF; // the magic
    std::fs::write(&img, &bytes).unwrap();
    let out = mballoc().args(["inspect", "--freefrag"]).arg(&img).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad magic"), "{err}");
}

#[test]
fn names_are_bytes_and_partitions_take_an_offset() {
    use std::os::unix::ffi::OsStrExt;
    if !have("mke2fs") {
        eprintln!("skipped: e2fsprogs not installed");
        return;
    }
    let scratch = Scratch::in_memory("offset");
    let tree = scratch.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    // A Latin-1 name: not UTF-8, printed as its bytes, as filefrag does.
    std::fs::write(tree.join(std::ffi::OsStr::from_bytes(b"caf\xe9")), vec![7u8; 5000]).unwrap();
    let fs = scratch.join("fs");
    run(Command::new("mke2fs").args(["-q", "-F", "-t", "ext4", "-b", "4096", "-d"]).arg(&tree).arg(&fs).arg("16M"));
    let files = mballoc().args(["inspect", "--files"]).arg(&fs).output().unwrap();
    assert!(files.status.success());
    assert!(files.stdout.windows(6).any(|w| w == b"/caf\xe9:"), "{}", String::from_utf8_lossy(&files.stdout));
    // The same file system 1 MiB into an image with a boot sector.
    let part = scratch.join("part");
    let mut bytes = vec![0u8; 1 << 20];
    bytes[510..512].copy_from_slice(&[0x55, 0xAA]);
    bytes.extend(std::fs::read(&fs).unwrap());
    std::fs::write(&part, &bytes).unwrap();
    let refused = mballoc().arg("inspect").arg(&part).output().unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains("partition table") && err.contains("--offset"), "{err}");
    let by_flag = mballoc().args(["inspect", "--files", "--offset", "1048576"]).arg(&part).output().unwrap();
    assert_eq!(by_flag.stdout, files.stdout);
    let by_name =
        mballoc().args(["inspect", "--files"]).arg(format!("{}?offset=1048576", part.display())).output().unwrap();
    assert_eq!(by_name.stdout, files.stdout);
    let empty = scratch.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let e = mballoc().arg("inspect").arg(&empty).output().unwrap();
    assert!(String::from_utf8_lossy(&e.stderr).contains("the image is empty"));
}

#[test]
fn a_damaged_file_is_reported_and_the_rest_listed() {
    if !have("mke2fs") || !have("debugfs") {
        eprintln!("skipped: e2fsprogs not installed");
        return;
    }
    let scratch = Scratch::in_memory("damaged");
    let tree = scratch.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::write(tree.join("good"), b"good").unwrap();
    std::fs::write(tree.join("bad"), vec![1u8; 20_000]).unwrap();
    std::fs::write(tree.join("sub/deep"), b"x").unwrap();
    let img = scratch.join("img");
    run(Command::new("mke2fs").args(["-q", "-F", "-t", "ext4", "-b", "4096", "-d"]).arg(&tree).arg(&img).arg("16M"));
    // The extent header's magic gone (debugfs keeps the checksum valid).
    run(Command::new("debugfs").args(["-w", "-R", "sif /bad block[0] 0"]).arg(&img));
    let out = mballoc().args(["inspect", "--files"]).arg(&img).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["/good: 1 extent found", "/sub/deep: 1 extent found"]);
    assert!(stderr.contains("/bad: damaged: ") && stderr.contains("1 damaged path"), "{stderr}");
}

/// Inodes the kernel refuses to read (its block_validity system zone and
/// `__ext4_iget`'s checks), each made with debugfs (which keeps every
/// checksum valid): inspect reports the file as damaged and lists the
/// rest. As root the kernel's verdict is read from a read-only mount of
/// the same image, and must agree.
#[test]
fn inodes_the_kernel_refuses_are_refused() {
    if !have("mke2fs") || !have("debugfs") || !have("dumpe2fs") {
        eprintln!("skipped: e2fsprogs not installed");
        return;
    }
    // i_block[5] is the first extent's start (after the 12-byte header
    // and the extent's logical block and length); TABLE is replaced by
    // the inode table's first block.
    let cases = [
        ("an extent into the inode table", "block[5] TABLE"),
        ("an extended-attribute block in the inode table", "file_acl TABLE"),
        ("i_extra_isize not a multiple of 4", "extra_isize 30"),
        ("a negative i_size", "size 0x8000000000000000"),
        ("the casefold flag without the feature", "flags 0x40080000"),
        ("the inline-data flag without the feature", "flags 0x10000000"),
    ];
    for (what, field) in cases {
        let scratch = Scratch::in_memory("refused");
        let tree = scratch.join("tree");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::write(tree.join("good"), b"good").unwrap();
        std::fs::write(tree.join("bad"), vec![1u8; 20_000]).unwrap();
        let img = scratch.join("img");
        run(Command::new("mke2fs")
            .args(["-q", "-F", "-t", "ext4", "-b", "4096", "-I", "256", "-d"])
            .arg(&tree)
            .arg(&img)
            .arg("16M"));
        let dump = run(Command::new("dumpe2fs").arg(&img));
        let table: u64 = dump
            .lines()
            .find_map(|l| l.split("Inode table at ").nth(1))
            .and_then(|r| r.split('-').next())
            .and_then(|n| n.trim().parse().ok())
            .expect("dumpe2fs names the inode table");
        let set = format!("sif /bad {}", field.replace("TABLE", &table.to_string()));
        run(Command::new("debugfs").args(["-w", "-R", &set]).arg(&img));
        let out = mballoc().args(["inspect", "--files"]).arg(&img).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "/good: 1 extent found\n", "{what}");
        assert!(stderr.contains("/bad: damaged"), "{what}: {stderr}");
        if !is_root() {
            eprintln!("skipped: the kernel's verdict on {what} needs root (a loop mount)");
            continue;
        }
        let mnt = scratch.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        run(Command::new("mount").args(["-o", "loop,ro"]).arg(&img).arg(&mnt));
        let kernel_bad = std::fs::read(mnt.join("bad"));
        let kernel_good = std::fs::read(mnt.join("good"));
        run(Command::new("umount").arg(&mnt));
        assert!(kernel_bad.is_err(), "{what}: the kernel read the file inspect refused");
        assert_eq!(kernel_good.unwrap(), b"good", "{what}");
    }
}

/// Descriptor counters no group can have (debugfs, checksum recomputed):
/// the kernel mounts the volume and reads its files, and so does inspect.
#[test]
fn counters_the_kernel_tolerates_are_tolerated() {
    if !have("mke2fs") || !have("debugfs") {
        eprintln!("skipped: e2fsprogs not installed");
        return;
    }
    let scratch = Scratch::in_memory("counters");
    let tree = scratch.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("good"), b"good").unwrap();
    let img = scratch.join("img");
    run(Command::new("mke2fs").args(["-q", "-F", "-t", "ext4", "-b", "4096", "-d"]).arg(&tree).arg(&img).arg("16M"));
    for set in ["set_bg 0 itable_unused 60000", "set_bg 0 free_blocks_count 60000", "set_bg 0 checksum calc"] {
        run(Command::new("debugfs").args(["-w", "-R", set]).arg(&img));
    }
    for mode in ["--files", "--groups", "--freefrag"] {
        let out = mballoc().args(["inspect", mode]).arg(&img).output().unwrap();
        assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let files = run(mballoc().args(["inspect", "--files"]).arg(&img));
    assert_eq!(files, "/good: 1 extent found\n");
    // The free count disagrees with the bitmap: the kernel's mb_groups
    // marks the group.
    let groups = run(mballoc().args(["inspect", "--groups"]).arg(&img));
    assert!(groups.lines().nth(1).unwrap().ends_with("] Block bitmap corrupted!"), "{groups}");
    if !is_root() {
        eprintln!("skipped: the kernel's verdict needs root (a loop mount)");
        return;
    }
    let mnt = scratch.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    run(Command::new("mount").args(["-o", "loop,ro"]).arg(&img).arg(&mnt));
    let read = std::fs::read(mnt.join("good"));
    let dev = run(Command::new("findmnt").args(["-n", "-o", "SOURCE"]).arg(&mnt));
    let name = dev.trim().rsplit('/').next().unwrap().to_string();
    let kernel_groups = std::fs::read_to_string(format!("/proc/fs/ext4/{name}/mb_groups"));
    run(Command::new("umount").arg(&mnt));
    assert_eq!(read.unwrap(), b"good", "the kernel reads it too");
    assert_eq!(kernel_groups.unwrap(), groups, "inspect --groups against the kernel's mb_groups");
}

#[test]
fn combined_reports_come_in_the_order_asked() {
    if !have("mke2fs") {
        eprintln!("skipped: e2fsprogs not installed");
        return;
    }
    let scratch = Scratch::in_memory("order");
    let img = scratch.join("img");
    run(Command::new("mke2fs").args(["-q", "-F", "-t", "ext4", "-b", "4096"]).arg(&img).arg("16M"));
    let a = run(mballoc().arg("inspect").arg(&img).args(["--groups", "--freefrag"]));
    let b = run(mballoc().arg("inspect").arg(&img).args(["--freefrag", "--groups"]));
    assert!(a.starts_with("#group:") && a.contains("\nDevice: "), "{a}");
    assert!(b.starts_with("Device: ") && b.contains("\n#group:"), "{b}");
}

/// A first inode below the reserved ones: the kernel will not mount it,
/// and inspect refuses it too.
#[test]
fn a_first_inode_among_the_reserved_ones_is_refused() {
    if !have("mke2fs") || !have("debugfs") {
        eprintln!("skipped: e2fsprogs not installed");
        return;
    }
    let scratch = Scratch::in_memory("first-ino");
    let img = scratch.join("img");
    run(Command::new("mke2fs").args(["-q", "-F", "-t", "ext4", "-b", "4096"]).arg(&img).arg("16M"));
    run(Command::new("debugfs").args(["-w", "-R", "ssv first_ino 5"]).arg(&img));
    let out = mballoc().args(["inspect", "--files"]).arg(&img).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("first inode 5"));
    if !is_root() {
        eprintln!("skipped: the kernel's verdict needs root (a loop mount)");
        return;
    }
    let mnt = scratch.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount").args(["-o", "loop,ro"]).arg(&img).arg(&mnt).output().unwrap();
    if mounted.status.success() {
        run(Command::new("umount").arg(&mnt));
    }
    assert!(!mounted.status.success(), "the kernel mounted what inspect refused");
}
