//! Job ordering (`after`) holds under every interleaving, and a cycle in
//! a trace's gates is reported, never a hang.

use indicatif::ProgressBar;
use mballoc_lab::backend::WriteMode;
use mballoc_lab::runner;
use mballoc_lab::scenarios;
use mballoc_lab::trace::Trace;
use mballoc_lab::workload::{Interleave, Workload};

/// Writers make and rename files; readers, ordered after a step of the
/// writers, open the renamed files: run too early, the open fails.
const ORDERED: &str = r#"
name = "ordered"
volume = "256M"
[[job]]
name = "w"
clones = 8
setup = [{ op = "create" }]
steps = [
  { op = "write", len = "16K", count = 8 },
  { op = "rename", to = "ready/{clone}" },
  { op = "fsync" },
]
[[job]]
name = "r"
clones = 8
after = "w:2"
names = "ready/{clone}"
steps = [{ op = "open" }, { op = "read", len = "128K" }, { op = "close" }]
"#;

#[test]
fn readers_never_start_before_the_writers_step() {
    let rounds: u32 = std::env::var("MBALLOC_ORDERING_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    for il in [Interleave::Threads, Interleave::InTurn] {
        for round in 0..rounds {
            let mut w = Workload::from_toml(ORDERED).unwrap();
            w.interleave = il;
            let t = scenarios::engine(&w, WriteMode::Delalloc, |_| {}).unwrap();
            let r = runner::run(&t, &w.streams(), il, None, &ProgressBar::hidden());
            let r = r.unwrap_or_else(|e| panic!("{il:?}, round {round}: {e}"));
            // 8 writers x 8 writes, 8 readers x 1 read.
            assert_eq!(r.total_data_ops(), 72, "{il:?}");
        }
    }
}

#[test]
fn a_cycle_of_waits_is_reported_not_hung() {
    let text =
        "# mballoc trace 1\nvolume 268435456\n0 create a\n0 wait 0 1\n0 signal 1\n1 create b\n1 wait 1 1\n1 signal 0\n";
    let t = Trace::parse(text).unwrap();
    let w = Workload { volume: mballoc_lab::units::Size(t.volume), ..Default::default() };
    for il in [Interleave::Threads, Interleave::InTurn] {
        let target = scenarios::engine_with_files(&w, t.files.clone(), WriteMode::Delalloc, |_| {}).unwrap();
        let e = runner::run(&target, &t.stream_specs(), il, None, &ProgressBar::hidden()).unwrap_err();
        assert!(e.to_string().contains("cycle"), "{il:?}: {e}");
    }
}
