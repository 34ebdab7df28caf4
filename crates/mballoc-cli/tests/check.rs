//! `mballoc mkfs` and `mballoc check [--repair]` on a volume file.

use std::process::{Command, Output};

fn mballoc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mballoc")).args(args).output().expect("runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn mkfs_check_corrupt_repair() {
    let dir = std::env::temp_dir().join(format!("mballoc-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let vol = dir.join("vol.img");
    let v = vol.to_str().unwrap();
    let o = mballoc(&["mkfs", v, "--size", "64M"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("16384 blocks of 4096 bytes"), "{}", text(&o));
    let o = mballoc(&["check", v]);
    assert!(o.status.success() && text(&o).contains(": clean"), "{}", text(&o));
    // mkfs over a volume is refused unless forced.
    let o = mballoc(&["mkfs", v, "--size", "32M"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("already holds an mballoc volume; mkfs --force overwrites it"), "{}", text(&o));
    assert_eq!(std::fs::metadata(&vol).unwrap().len(), 64 << 20, "the refused mkfs changed nothing");
    let o = mballoc(&["mkfs", v, "--size", "64M", "--force"]);
    assert!(o.status.success(), "{}", text(&o));

    // A bitmap byte that disagrees with the (empty) file table.
    let mut bytes = std::fs::read(&vol).unwrap();
    let sb = mballoc_vol::Superblock::decode(&bytes[..512], bytes.len() as u64).unwrap();
    let at = (sb.bitmap_start * 4096 + 4000) as usize;
    bytes[at] ^= 0x01;
    std::fs::write(&vol, &bytes).unwrap();
    let o = mballoc(&["check", v]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("group 0") && text(&o).contains("NOT clean"), "{}", text(&o));
    let o = mballoc(&["check", v, "--repair"]);
    assert!(o.status.success() && text(&o).contains("repaired"), "{}", text(&o));
    let o = mballoc(&["check", v]);
    assert!(o.status.success() && text(&o).contains(": clean"), "{}", text(&o));

    // Not a volume at all.
    std::fs::write(&vol, vec![0u8; 1 << 20]).unwrap();
    let o = mballoc(&["check", v]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("bad magic"), "{}", text(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_and_inspect_count_alike() {
    let dir = std::env::temp_dir().join(format!("mballoc-counts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let vol = dir.join("vol.img");
    let v = vol.to_str().unwrap();
    let _ = std::fs::remove_file(&vol);
    assert!(mballoc(&["mkfs", v, "--size", "64M"]).status.success());
    {
        let dev = mballoc_vol::FileDevice::open(&vol, mballoc_vol::OpenMode::ReadWrite).unwrap();
        let vol = mballoc_vol::Volume::open(std::sync::Arc::new(dev), Default::default()).unwrap();
        vol.create_dir("/d").unwrap();
        let rw = mballoc_vol::OpenOptions::new().write(true).create(true).clone();
        for p in ["/a", "/d/b", "/d/c"] {
            vol.file(p, &rw).unwrap().write_at(b"data", 0).unwrap();
        }
        vol.symlink_at(vol.root(), b"s", b"a", mballoc_vol::Owner::default()).unwrap();
        vol.unmount().unwrap();
    }
    // Root, /d, three files and a symbolic link: six inodes, three files.
    let c = text(&mballoc(&["check", v]));
    assert!(c.contains("6 inodes (3 regular files)"), "{c}");
    let i = text(&mballoc(&["inspect", v]));
    assert!(i.contains("Inodes: 6 (3 regular files,"), "{i}");
    std::fs::remove_dir_all(&dir).unwrap();
}
