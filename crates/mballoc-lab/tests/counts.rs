//! One definition per count: the same workload under profile=kernel on
//! the engine and on kernel ext4, mb_stats=1 on both, streams issued in
//! turn so neither side's scheduler decides the interleaving, and each
//! count the lab reports compared (needs root; skipped otherwise).
//!
//! What is compared and why a count may differ at all:
//! * `reqs` (every allocation context released, preallocation hits
//!   included) and the power-of-two pass's hits, within 10 %;
//! * the requests that reach the allocator's passes: ext4's include the
//!   directory blocks its 1,024 names need (ext4_append, about ten), of
//!   which the in-memory engine has none, so the engine may be that many
//!   short and never more;
//! * extents per file, within 1 %.
//!
//! On the aged volume only `reqs` is compared, within 15 %: ext4's flusher
//! starts writeback while dd is still writing, in pieces the engine does
//! not see (docs/PROFILES.md). That moves how requests split between the
//! passes and preallocations, and, since a short allocation is followed by
//! a request for the rest of its page-cache folio, how many short
//! allocations add one: the engine, writing each file back whole at
//! fsync, meets more of them (771 requests against ext4's 687, 4.4 % apart
//! before the folios were followed).

use mballoc_lab::backend::BackendKind;
use mballoc_lab::loop_mount::KernelFs;
use mballoc_lab::report::{Row, ScenarioReport};
use mballoc_lab::scenarios::{self, Env};
use mballoc_lab::settings::Settings;

fn env() -> Option<Env> {
    if !mballoc_testkit::can_loop_mount() {
        eprintln!("skipped: needs root and loop devices");
        return None;
    }
    let mut s = Settings::default();
    for a in ["engine.profile=kernel", "engine.mb_stats=1", "ext4.mb_stats=1", "workload.interleave=in-turn"] {
        s.set_str(a).unwrap();
    }
    Some(Env::new(true, 1, vec![BackendKind::Engine, BackendKind::Kernel(KernelFs::Ext4)]).with_settings(s))
}

fn pair<'a>(r: &'a ScenarioReport, variant: &str) -> (&'a Row, &'a Row) {
    let find = |b: &str| {
        r.rows
            .iter()
            .find(|row| row.backend == b && row.variant == variant)
            .unwrap_or_else(|| panic!("no {b} row {variant:?}: {:?} {:?}", r.skipped, r.notes))
    };
    (find("engine"), find("ext4"))
}

fn within(what: &str, engine: f64, ext4: f64, pct: f64) {
    let off = (engine - ext4).abs() / ext4.max(1.0) * 100.0;
    assert!(off <= pct, "{what}: engine {engine}, ext4 {ext4}: {off:.1} % apart, more than {pct} %");
}

fn hits(row: &Row, pass: usize) -> f64 {
    row.metrics["cr_hits"][pass].as_f64().unwrap_or_else(|| panic!("cr_hits in {:?}", row.metrics))
}

#[test]
fn small_files_counts_agree_with_ext4s() {
    let Some(env) = env() else { return };
    let r = scenarios::small_files::run(&env);
    for variant in ["with CR_BEST_AVAIL_LEN", "without CR_BEST_AVAIL_LEN"] {
        let (e, k) = pair(&r, variant);
        let n = |row: &Row, key: &str| row.num(key).unwrap_or_else(|| panic!("{key} in {:?}", row.metrics));
        within("reqs", n(e, "reqs"), n(k, "reqs"), 10.0);
        within("power-of-two hits", hits(e, 0), hits(k, 0), 10.0);
        let (ea, ka) = (n(e, "allocator_reqs"), n(k, "allocator_reqs"));
        assert!(ea <= ka && ka - ea <= 16.0, "allocator requests: engine {ea}, ext4 {ka}");
        within("extents per file", n(e, "avg_extents_per_file"), n(k, "avg_extents_per_file"), 1.0);
    }
}

#[test]
fn aged_counts_agree_with_ext4s() {
    let Some(env) = env() else { return };
    let r = scenarios::aged::run(&env);
    let (e, k) = pair(&r, "optimize_scan");
    let n = |row: &Row, key: &str| row.num(key).unwrap_or_else(|| panic!("{key} in {:?}", row.metrics));
    within("reqs", n(e, "reqs"), n(k, "reqs"), 15.0);
}
