//! `mballoc lab record` and `mballoc lab replay`: a real program's
//! allocations on ext4, recorded, and the engine's allocator asked the
//! same questions.

use anyhow::{Context, Result};
use clap::Args;
use mballoc_lab::fidelity::record::{record, RecordSpec};
use mballoc_lab::fidelity::Ext4Config;
use mballoc_lab::settings::Settings;
use mballoc_lab::units::Size;
use std::path::PathBuf;

/// `mballoc lab record`.
#[derive(Args)]
pub struct RecordArgs {
    /// Where the recording goes: image.qcow2, trace, ops.strace, record.toml.
    #[arg(long, value_name = "DIR", default_value = "lab-record")]
    out: PathBuf,
    /// The volume's size (suffix K, M, G or T).
    #[arg(long, default_value = "1G")]
    size: Size,
    /// The block size.
    #[arg(long, default_value_t = 4096, value_parser = parse_block_size)]
    block_size: u32,
    /// `ext4.mkfs=ARGS`, `ext4.mount=OPTS` or `ext4.KNOB=VALUE`. Repeatable.
    #[arg(long = "set", value_name = "ext4.KEY=VALUE")]
    set: Vec<String>,
    /// The program, run inside the mount point (also `$MNT`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// `mballoc lab replay`.
#[derive(Args)]
pub struct ReplayArgs {
    /// A recording's directory (`mballoc lab record`), or a trace as
    /// `cat /sys/kernel/tracing/trace` printed it.
    trace: PathBuf,
    /// The ext4 image as it was when the trace began (raw, or `e2image
    /// -Q`'s .qcow2); a recording has its own.
    image: Option<PathBuf>,
    /// The traced device as MAJOR,MINOR (default: the first one seen).
    #[arg(long)]
    dev: Option<String>,
    /// `ext4.mount=OPTS` or `ext4.KNOB=VALUE`: how the traced kernel ran,
    /// when the trace does not say (its knobs and mb_optimize_scan reach
    /// the engine's allocator); `engine.KEY=VALUE`: tune the engine's
    /// allocator to try something else. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// The kernel that recorded the trace, as `6.1` or a `uname -r`
    /// string (default: a recording's own, else the running kernel's):
    /// the engine answers under its profile, and its numbered passes are
    /// named as it numbered them.
    #[arg(long, value_name = "VERSION")]
    kernel: Option<String>,
    /// Exit 1 when fewer searched requests than this share got the
    /// kernel's extent (percent).
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    require: f64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_block_size(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(b @ (1024 | 2048 | 4096 | 8192 | 16384 | 32768 | 65536)) => Ok(b),
        _ => Err(format!("{s}: a block size is a power of two from 1024 to 65536")),
    }
}

pub fn run_record(a: &RecordArgs) -> Result<()> {
    let s = Settings::from_assignments(&a.set)?;
    if let Some(bad) =
        s.iter().find(|x| x.scope != mballoc_lab::settings::Scope::Kernel(mballoc_lab::loop_mount::KernelFs::Ext4))
    {
        anyhow::bail!("{bad}: lab record runs ext4; only ext4.* settings apply");
    }
    let ext4 = Ext4Config::from_settings(&s);
    if ext4.mkfs.iter().any(|x| x == "-b") {
        anyhow::bail!("ext4.mkfs=-b: give the block size as --block-size");
    }
    if !mballoc_lab::sys::is_root() {
        println!("record: skipped (needs root for loop mounts and tracefs)");
        return Ok(());
    }
    crate::plan::clean_up_on_signal()?;
    let spec =
        RecordSpec { command: a.command.clone(), bytes: a.size.0, block_size: a.block_size, ext4, out: a.out.clone() };
    let meta = record(&spec)?;
    println!(
        "recorded {} allocation requests of `{}` on ext4 ({} KiB blocks, kernel {}) in {}{}",
        meta.requests,
        meta.command.join(" "),
        meta.block_size / 1024,
        meta.kernel,
        a.out.display(),
        if meta.strace { ", with its system calls in ops.strace" } else { " (strace is not installed: no ops.strace)" }
    );
    if meta.lost_events > 0 {
        println!("the trace's ring buffer dropped {} events", meta.lost_events);
    }
    println!("replay it: mballoc lab replay {}", a.out.display());
    Ok(())
}

pub fn run_replay(a: &ReplayArgs) -> Result<()> {
    anyhow::ensure!((0.0..=100.0).contains(&a.require), "--require {}: a percentage from 0 to 100", a.require);
    let dev = a
        .dev
        .as_ref()
        .map(|d| -> Result<(u32, u32)> {
            let (x, y) = d.split_once(',').context("--dev takes MAJOR,MINOR")?;
            Ok((x.trim().parse()?, y.trim().parse()?))
        })
        .transpose()?;
    let s = Settings::from_assignments(&a.set)?;
    let kernel = a
        .kernel
        .as_deref()
        .map(|k| {
            mballoc_fs::KernelVersion::from_release(k)
                .with_context(|| format!("--kernel {k}: a version such as 6.1 or a `uname -r` string"))
        })
        .transpose()?;
    let r = mballoc_lab::fidelity::replay::replay_path(&a.trace, a.image.as_deref(), dev, kernel, &s)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", r.text());
    }
    let pct = if r.searched == 0 { 100.0 } else { 100.0 * r.same_extent as f64 / r.searched as f64 };
    if pct < a.require {
        anyhow::bail!("{pct:.2}% of searched requests matched, below --require {}", a.require);
    }
    Ok(())
}
