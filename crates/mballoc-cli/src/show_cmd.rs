//! `mballoc lab show SCENARIO`: a built-in scenario's workload as TOML,
//! or, for the scenarios that drive their targets directly, what they run.

use anyhow::{bail, Result};
use mballoc_lab::scenarios;

/// Print what `scenario` runs.
pub(crate) fn show(scenario: &str) -> Result<()> {
    let w = match scenario {
        "fallocate2" => scenarios::fallocate2::workload(64, 2.0, 8 << 30),
        "fio-falloc" => scenarios::fio_falloc::workload(64, 64 << 20, 8 << 30),
        "small-files-fragmented" => scenarios::small_files::workload(64, 256, 8 << 30),
        "multiblock-cost" => scenarios::multiblock::workload(600, 640),
        "aged" => scenarios::aged::workload(8 << 30, 1 << 30),
        // These drive their target directly, not through a
        // workload: say what they run instead.
        "folio-write" => {
            println!(
                "# folio-write runs its own loop, not a workload: one file written sequentially\n\
                 # at 4 KiB, 64 KiB and 1 MiB per call, in three modes (cache; sync: fsync after\n\
                 # every write; writeback: fsync at the end), on the engine's persistent volume\n\
                 # with 4 KiB and 2 MiB folios and on kernel ext4 by system calls."
            );
            return Ok(());
        }
        "fallocate2-core" | "fragmented-core" => {
            println!(
                "# {scenario} runs on the allocator alone (no files, no workload): see\n\
                 # `mballoc lab list` for what it measures and `mballoc bench alloc` to run it."
            );
            return Ok(());
        }
        "aged-at-scale" => {
            println!(
                "# aged-at-scale runs on the engine alone, not through a workload: 753,000 groups of\n\
                 # 32,768 blocks, each loaded from one aged bitmap (a 50-block free run in 22 of every\n\
                 # 50 periods of 100 blocks), then a 1 GiB file written in 1 MiB steps and fsynced,\n\
                 # under the kernel profile with mb_optimize_scan=1 and =0."
            );
            return Ok(());
        }
        "aging" => {
            println!(
                "# aging replays seeded traces, not a workload: Geriatrix's profile-driven creates\n\
                 # and deletes and the git-pull ager, each one stream of operations generated from\n\
                 # its seed and run unchanged on the engine, ext4, XFS, btrfs and the mount."
            );
            return Ok(());
        }
        other => bail!("no scenario {other:?} (`mballoc lab list` names them)"),
    };
    print!("{}", w.to_toml());
    Ok(())
}
