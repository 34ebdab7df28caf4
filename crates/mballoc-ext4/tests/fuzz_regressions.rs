//! Every input kept from fuzzing (seeds, and any input that ever crashed
//! the reader) replayed through the fuzz targets' own code: each must end
//! in a value or a typed error.

use mballoc_testkit::ext4_fuzz as base;

use std::path::Path;

fn replay(dir: &str, build: fn(&[u8]) -> Option<Vec<u8>>) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions").join(dir);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if let Some(img) = build(&data) {
            eprintln!("replaying {}", path.display());
            base::exercise(img);
            n += 1;
        }
    }
    n
}

#[test]
fn kept_fuzz_inputs_end_in_values_or_errors() {
    if !mballoc_testkit::have("mke2fs") {
        eprintln!("skipped: mke2fs not installed");
        return;
    }
    assert!(replay("superblock", base::superblock_image) >= 4);
    assert!(replay("extent_tree", base::extent_image) >= 1);
}
