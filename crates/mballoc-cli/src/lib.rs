//! `mballoc`: run the lab, benchmark the allocator, print its reports.
//!
//! The command is a library so that a program of its own can be the same
//! command with more in it: an allocation policy registered before
//! [`main`] runs is one `engine.policy=NAME` away in every lab command
//! (see `examples/first_fit.rs`).

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use mballoc_ext4::ChecksumPolicy;
use mballoc_lab::backend::BackendKind;
use mballoc_lab::scenarios::{self, Env, StartImage};
use mballoc_lab::settings::Settings;
use mballoc_lab::trace::Trace;
use mballoc_lab::units::Size;
use mballoc_lab::workload::Workload;
use std::io::Write;
use std::path::PathBuf;

mod fidelity_cmd;
mod inspect;
mod kernel_diff_cmd;
mod kernels_cmd;
mod lab_settings;
mod mount;
mod pace;
mod plan;
mod record_cmd;
mod shard;
mod shell;
mod show_cmd;
mod user_workload;
mod volume_cmd;

use plan::{backends, Job, Plan, RunScenario};

#[derive(Parser)]
#[command(name = "mballoc", version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("MBALLOC_COMMIT"), ")"), about = "ext4's multiblock allocator: lab, benchmarks and reports")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// The allocation policy a mount runs the engine with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProfileArg {
    /// The engine's own defaults.
    Default,
    /// ext4's decisions (docs/PROFILES.md).
    Kernel,
}

#[derive(Subcommand)]
enum Cmd {
    /// Reproducible experiments on the engine and kernel file systems.
    Lab {
        #[command(subcommand)]
        cmd: LabCmd,
    },
    /// Read an ext2/3/4 image or an mballoc volume: free space, groups, files.
    Inspect {
        /// The image file, volume or block device.
        image: PathBuf,
        /// The free-space report, as `e2freefrag IMAGE` prints it.
        #[arg(long)]
        freefrag: bool,
        /// Per-group free space, in the layout of /proc/fs/ext4/DEV/mb_groups.
        #[arg(long)]
        groups: bool,
        /// One line per regular file, as `filefrag PATH` prints it.
        #[arg(long)]
        files: bool,
        /// Read on when a checksum does not match.
        #[arg(long)]
        ignore_checksums: bool,
        /// Where the file system starts in the image, in bytes (a partition;
        /// `IMAGE?offset=N` says the same, as e2fsprogs writes it).
        #[arg(long, default_value_t = 0)]
        offset: u64,
    },
    /// Make an empty volume in a file (created sparse if missing) or on a block device.
    Mkfs {
        /// The file or device.
        volume: PathBuf,
        /// Size in bytes for a new file (suffix K, M, G or T allowed).
        #[arg(long)]
        size: Option<String>,
        /// Bytes per block.
        #[arg(long, default_value_t = 4096)]
        block_size: u32,
        /// Journal blocks (default: 1/64 of the volume, 64 to 16384).
        #[arg(long)]
        journal_blocks: Option<u32>,
        /// Inode slots (default: one per 64 KiB; 16 to 2147483647).
        #[arg(long)]
        inodes: Option<u32>,
        /// Format even a device that holds a volume, a file system, a
        /// partition table or any data (destroying it).
        #[arg(long)]
        force: bool,
    },
    /// Verify a volume: checksums, journal, bitmaps against extents, counters.
    /// Exit status 0 when clean (committed transactions that await replay
    /// are not a problem) or repaired, 1 otherwise.
    Check {
        /// The file or device.
        volume: PathBuf,
        /// Replay the journal, drop inodes that fail their own checks, move what
        /// can be read only in part to /lost+found, rebuild bitmaps and
        /// counters; refused (nothing written) when that would destroy
        /// something not proven bad.
        #[arg(long)]
        repair: bool,
        /// Where a repair would refuse, take this answer (repeatable):
        /// free-unowned (free blocks a valid bitmap marks used that no file
        /// owns), drop-journal-tail (leave out a damaged or impossible journal
        /// transaction with the intact ones after it).
        #[arg(long, value_name = "ANSWER")]
        force: Vec<mballoc_vol::Force>,
    },
    /// Mount a volume with FUSE: programs use it through ordinary system
    /// calls. Returns once mounted (the server runs on in the background)
    /// unless --foreground. Ends on `mballoc umount DIR`, `fusermount3 -u DIR`
    /// or SIGTERM, after which the volume is synced and marked clean.
    /// Durable: every byte written before a successful fsync/fdatasync, or
    /// more than the commit interval ago, survives a kill -9 or a power cut;
    /// sync(2) and syncfs(2) are durable on return on a fuseblk mount (a
    /// volume on a block device, or a volume file with -o loop, as root);
    /// on a plain mount the kernel does not pass them on and the commit
    /// interval bounds them.
    Mount {
        /// The volume file or device.
        volume: PathBuf,
        /// An empty directory to mount it on.
        dir: PathBuf,
        /// Bytes per page-cache folio (4 KiB to 2 MiB, a power of two).
        #[arg(long, default_value = "2M")]
        folio: String,
        /// The allocation policy: the engine's own, or ext4's (docs/PROFILES.md).
        #[arg(long, value_enum, default_value = "default")]
        profile: ProfileArg,
        /// Threads serving FUSE requests [default: two per CPU, 4 to 16].
        #[arg(long)]
        threads: Option<usize>,
        /// Seconds data may stay volatile without an fsync (ext4's commit=); 0: only fsync and unmount commit.
        #[arg(long, default_value_t = 5)]
        commit: u64,
        /// Options as mount(8) gives them: commit=SECS, ro, noatime, relatime, strictatime, loop
        /// (a volume file through a loop device, mounted as fuseblk), stats, uring (FUSE over io_uring where the kernel has it on), nosplice (copy large reads through a buffer), folio=SIZE, threads=N, busy_poll=MICROS,
        /// profile=default|kernel (they win over the flags above).
        #[arg(short = 'o', long = "options")]
        options: Option<String>,
        /// Serve in this process until unmounted.
        #[arg(long)]
        foreground: bool,
        /// At unmount print, per request type, the count, errors, bytes each
        /// way and time in the server (SIGUSR1 prints them while mounted).
        #[arg(long)]
        stats: bool,
    },
    /// Convert a cleanly unmounted version-2 volume to version 3 in place
    /// (crash-safe: the names go through the journal), then mount and
    /// unmount it once so everything is written home.
    Upgrade {
        /// The file or device.
        volume: PathBuf,
    },
    /// Unmount a volume mounted by `mballoc mount`; returns once the volume
    /// is closed and clean.
    Umount {
        /// The mount point.
        dir: PathBuf,
    },
    /// Micro-benchmarks.
    /// Shell completions (bash, zsh, fish, elvish, powershell) on stdout:
    /// `mballoc completions bash > /etc/bash_completion.d/mballoc`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Manual pages from these definitions: mballoc.1 and one per
    /// subcommand, written to DIR.
    Man {
        /// Where the pages go.
        #[arg(long, default_value = "target/man")]
        out: PathBuf,
    },
    /// Micro-benchmarks of the bare allocator and the engine.
    Bench {
        #[command(subcommand)]
        cmd: BenchCmd,
    },
}

#[derive(clap::Args)]
struct Output {
    /// Backends: engine, ext4, xfs, btrfs, and mount (the engine through
    /// `mballoc mount`, by system calls); all but engine need root and are
    /// skipped with the reason otherwise.
    #[arg(long, value_delimiter = ',', default_value = "engine,ext4,xfs,btrfs")]
    backends: Vec<String>,
    /// Seed for every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory for index.html.
    #[arg(long, default_value = "lab-report")]
    out: PathBuf,
    /// Print the results as JSON on stdout (and nothing else there).
    #[arg(long)]
    json: bool,
    /// Also write every value as CSV, one line per sample.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Lay a setting over every row: `engine.KEY=VALUE` (a tunable by its
    /// kernel name, `profile=kernel`, a file-layer setting), `ext4.mount=OPTS`,
    /// `ext4.mkfs=ARGS`, `ext4.KNOB=VALUE` (/sys/fs/ext4), `xfs.mount=...`.
    /// Repeatable; `mballoc lab settings` lists the keys.
    #[arg(long = "set", value_name = "SCOPE.KEY=VALUE")]
    set: Vec<String>,
    /// Run once per value, a row per value: `engine.mb_max_to_scan=50,200,1000`.
    /// A key runs only the backends it configures (an `engine.` key engine
    /// rows, an `ext4.` key ext4 rows; `workload.` keys every backend), and
    /// backends no sweep touches run once. Repeatable.
    #[arg(long, value_name = "SCOPE.KEY=V1,V2,...")]
    sweep: Vec<String>,
    /// How several swept keys of one scope combine: `product` (every
    /// combination) or `zip` (the i-th values together; each key needs as
    /// many values, and zipped keys of different scopes run together).
    #[arg(long, value_name = "MODE", default_value = "product", value_parser = ["product", "zip"])]
    sweep_mode: String,
    /// Run every row N times: tables show the median and min–max, JSON and
    /// CSV keep every sample. Default: 3 for a full-size `lab run` (its
    /// figures are the headline ones), 1 for `--quick` and `lab workload`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: Option<u32>,
    /// Run only shard I of N of the run's cells (a scenario at one sweep
    /// point) and write them to OUT/shard-I-of-N.json, for `lab merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<shard::Shard>,
}

#[derive(Subcommand)]
enum LabCmd {
    /// List the settings `--set`, `--sweep` and a workload's tables take.
    Settings,
    /// List the scenarios.
    List,
    /// Run scenarios (all when none is named).
    Run {
        /// Scenario names (see `mballoc lab list`).
        scenarios: Vec<String>,
        /// Scale every scenario down (the whole set in about two minutes).
        #[arg(long, conflicts_with = "full")]
        quick: bool,
        /// Every scenario at the seed's size, three times (about 35
        /// minutes on 2 cores). Without `--quick` or `--full`, each runs
        /// once at its default scale: full size but for the two largest.
        #[arg(long)]
        full: bool,
        /// Start every volume from this ext4 image (the engine loads it,
        /// ext4 mounts a copy; it is never written).
        #[arg(long, value_name = "IMAGE")]
        from_image: Option<PathBuf>,
        #[command(flatten)]
        out: Output,
    },
    /// Run a workload of your own: a TOML file or a trace.
    Workload {
        /// The TOML workload or `# mballoc trace 1` file.
        file: PathBuf,
        #[command(flatten)]
        out: Output,
    },
    /// Expand a TOML workload into a trace on stdout.
    Trace {
        /// The TOML workload.
        file: PathBuf,
        /// Refuse traces longer than this.
        #[arg(long, default_value_t = 10_000_000)]
        max_ops: usize,
    },
    /// Run workloads on kernel ext4 and on the engine under its kernel
    /// profile, from the same image, and compare them block for block
    /// (needs root). With no workload, the built-in set.
    Fidelity(fidelity_cmd::FidelityArgs),
    /// Make the report of a run done in shards (`--shard I/N` of `lab run`
    /// or `lab fidelity`) from every shard's file: the report the run
    /// makes on one machine.
    Merge(shard::MergeArgs),
    /// Two kernels' profiles on the built-in fidelity cases: where their
    /// answers first part, and which rule that sets the releases apart
    /// parts them (the engine on both sides; needs root for the images).
    KernelDiff(kernel_diff_cmd::KernelDiffArgs),
    /// Replay a kernel allocation trace (a recording, or tracefs text
    /// with its image) on the engine's allocator, request by request.
    Replay(record_cmd::ReplayArgs),
    /// Run a program on a fresh ext4 volume with the allocation
    /// tracepoints on, and keep the image, the trace and its system calls
    /// for `lab replay` (needs root).
    Record(record_cmd::RecordArgs),
    /// Print a built-in scenario's workload as TOML (or, for the scenarios
    /// that run their own loop, what they run).
    Show {
        /// A name from `mballoc lab list`.
        scenario: String,
    },
    /// Other kernels: fetch a Debian kernel, or run any `mballoc` command
    /// inside it under qemu (needs apt-get, dpkg-deb, depmod,
    /// qemu-system-x86 and busybox-static; layouts and counts are the
    /// kernel's, timings are emulated).
    #[command(subcommand)]
    Kernels(kernels_cmd::KernelsCmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Seed 000's fallocate2 on the whole engine (scalable and legacy) and,
    /// as root, on kernel file systems.
    Fallocate2 {
        /// Worker counts (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
        workers: Vec<u32>,
        /// Seconds per row.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Backends to run on: engine and ext4 (ext4 needs root).
        #[arg(long, value_delimiter = ',', default_value = "engine,ext4")]
        backends: Vec<String>,
    },
    /// The allocator alone: fallocate2 pattern and the fragmented 2^20-group volume.
    Alloc {
        /// Groups in the fragmented volume (1 KiB blocks, 8192 per group).
        #[arg(long, default_value_t = 1 << 20)]
        groups: u32,
        /// Requests on the fragmented volume.
        #[arg(long, default_value_t = 100_000)]
        requests: u64,
        /// Seed of the fragmenting pattern and the requests.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

/// The `mballoc` command, on this process's arguments.
pub fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // A reader that stops early (`| head`) is not a failure.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("Error: {}", mballoc_lab::chain(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

/// A reader that stops early (`mballoc lab settings | head`) ends this
/// process as it ends any Unix tool, by SIGPIPE, instead of a panic in the
/// next `println!` (Rust starts programs with SIGPIPE ignored). Not for
/// the mount's server, which must outlive whatever its output goes to.
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: setting a signal's disposition to its default is
    // async-signal-safe and touches no Rust state; it runs on the main
    // thread before this command starts any other.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// With `MBALLOC_PARSE_ONLY` set, check a command line and stop: the
/// arguments, scenario names, settings and sweeps, nothing run (the docs'
/// commands are checked this way in CI).
fn parse_only(cmd: &Cmd) -> Result<()> {
    let out = match cmd {
        Cmd::Lab { cmd: LabCmd::Run { scenarios: names, out, .. } } => {
            for n in names {
                scenarios::find(n).with_context(|| format!("unknown scenario {n:?}"))?;
            }
            out
        }
        Cmd::Lab { cmd: LabCmd::Workload { out, .. } } => out,
        Cmd::Lab { cmd: LabCmd::Show { scenario } } => {
            scenarios::find(scenario).with_context(|| format!("unknown scenario {scenario:?}"))?;
            return Ok(());
        }
        _ => return Ok(()),
    };
    Plan::new(out, Settings::default(), &[])?;
    Ok(())
}

fn run() -> Result<()> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.first().is_some_and(|a| mount::is_helper(a)) {
        return mount::helper(argv);
    }
    // Started as `mkfs.mballoc` (what `mkfs -t mballoc` runs): `mkfs`.
    let as_mkfs = argv.first().and_then(|a| std::path::Path::new(a).file_name()).is_some_and(|n| n == "mkfs.mballoc");
    let cli = if as_mkfs {
        Cli::parse_from(
            std::iter::once("mballoc".into()).chain(std::iter::once("mkfs".into())).chain(argv.into_iter().skip(1)),
        )
    } else {
        Cli::parse()
    };
    if std::env::var_os("MBALLOC_PARSE_ONLY").is_some() {
        return parse_only(&cli.cmd);
    }
    if !matches!(cli.cmd, Cmd::Mount { .. }) {
        end_quietly_on_a_closed_pipe();
    }
    match cli.cmd {
        Cmd::Mkfs { volume, size, block_size, journal_blocks, inodes, force } => {
            let size = size.map(|s| s.parse::<Size>()).transpose()?.map(|s| s.0);
            volume_cmd::mkfs(&volume, size, block_size, journal_blocks, inodes, force)
        }
        Cmd::Mount { volume, dir, folio, profile, threads, commit, options, foreground, stats } => {
            let folio = folio.parse::<Size>().context("--folio")?.0;
            let folio = u32::try_from(folio).context("--folio: at most 2 MiB")?;
            let profile = match profile {
                ProfileArg::Default => mballoc_mount::Profile::Default,
                ProfileArg::Kernel => mballoc_mount::Profile::Kernel,
            };
            let mut config = mballoc_mount::MountConfig {
                folio,
                profile,
                commit: std::time::Duration::from_secs(commit),
                stats,
                ..Default::default()
            };
            if let Some(n) = threads {
                config.threads = n;
            }
            if let Some(o) = options {
                config.apply(&o)?;
            }
            let args = mballoc_mount::MountArgs { volume, dir, config };
            if foreground {
                mballoc_mount::serve(&args)
            } else {
                mount::spawn_daemon(&args)
            }
        }
        Cmd::Umount { dir } => mballoc_mount::umount(&dir),
        Cmd::Upgrade { volume } => volume_cmd::upgrade(&volume),
        Cmd::Completions { shell } => shell::completions(shell),
        Cmd::Man { out } => shell::man(&out),
        Cmd::Check { volume, repair, force } => volume_cmd::check(&volume, repair, &force),
        Cmd::Inspect { image, freefrag, groups, files, offset: 0, .. } if inspect::is_own_volume(&image) => {
            let order = inspect::modes_in_order(&std::env::args().collect::<Vec<_>>(), freefrag, groups, files);
            let out = inspect::own_volume(&image, &order).with_context(|| format!("reading {}", image.display()))?;
            print!("{out}");
            Ok(())
        }
        Cmd::Inspect { image, freefrag, groups, files, ignore_checksums, offset } => {
            let policy = if ignore_checksums { ChecksumPolicy::Ignore } else { ChecksumPolicy::Verify };
            let order = inspect::modes_in_order(&std::env::args().collect::<Vec<_>>(), freefrag, groups, files);
            inspect::ext4(&image, offset, policy, &order)
        }
        Cmd::Lab { cmd: LabCmd::List } => {
            for s in scenarios::ALL {
                println!("{:<24} {}", s.name, s.about);
            }
            Ok(())
        }
        Cmd::Lab { cmd: LabCmd::Settings } => {
            lab_settings::print();
            Ok(())
        }
        Cmd::Lab { cmd: LabCmd::Run { scenarios: names, quick, full, from_image, out } } => {
            let chosen: Vec<&scenarios::Scenario> = if names.is_empty() {
                scenarios::ALL.iter().collect()
            } else {
                names
                    .iter()
                    .map(|n| {
                        scenarios::find(n)
                            .with_context(|| format!("unknown scenario {n:?}; `mballoc lab list` names them"))
                    })
                    .collect::<Result<_>>()?
            };
            let plan = Plan::new(&out, Settings::default(), &[])?.repeat_by_default(if full { 3 } else { 1 });
            let image = from_image.as_deref().map(StartImage::open).transpose()?;
            plan.preflight(image.as_ref().map_or(4096, |i| i.block_size))?;
            let jobs: Vec<Job> = chosen
                .into_iter()
                .map(|s| {
                    let run = s.run;
                    let scale = match (quick, full) {
                        (true, _) => scenarios::Scale::Quick,
                        (_, true) => scenarios::Scale::Full,
                        _ => s.default_scale,
                    };
                    let estimate = Some(s.estimate(scale, plan.backend_count()));
                    let image = image.clone();
                    let f: RunScenario = Box::new(move |env: &Env| {
                        let mut r = run(env);
                        if let Some(img) = &image {
                            r.notes.push(format!(
                                "volumes started from {} (its free space and files)",
                                img.path.display()
                            ));
                        }
                        r
                    });
                    Job { name: s.name.to_string(), run: f, scale, estimate }
                })
                .collect();
            if !out.json {
                let how = match (quick, full) {
                    (true, _) => ", quick",
                    (_, true) => ", full size",
                    _ => "",
                };
                println!("mballoc lab (seed {}{how})\n", out.seed);
            }
            match plan.run(&out, image.as_ref(), &jobs)? {
                Some(report) => plan::finish(&report, &out),
                None => Ok(()),
            }
        }
        Cmd::Lab { cmd: LabCmd::Workload { file, out } } => {
            let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
            let prepared = user_workload::prepare(&text)?;
            let plan = Plan::new(&out, prepared.settings.clone(), &prepared.sweeps)?;
            plan.preflight(prepared.w.block_size)?;
            let name = prepared.w.name.clone();
            let jobs = vec![Job {
                name,
                run: Box::new(move |env: &Env| user_workload::run(env, &prepared)),
                scale: scenarios::Scale::Full,
                estimate: None,
            }];
            match plan.run(&out, None, &jobs)? {
                Some(report) => plan::finish(&report, &out),
                None => Ok(()),
            }
        }
        Cmd::Lab { cmd: LabCmd::Trace { file, max_ops } } => {
            let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
            let t = Trace::from_workload(&Workload::from_toml(&text)?, max_ops)?;
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            t.write(&mut w)?;
            w.flush()?;
            Ok(())
        }
        Cmd::Lab { cmd: LabCmd::Fidelity(a) } => fidelity_cmd::run(&a),
        Cmd::Lab { cmd: LabCmd::Merge(a) } => shard::merge(&a),
        Cmd::Lab { cmd: LabCmd::Replay(a) } => record_cmd::run_replay(&a),
        Cmd::Lab { cmd: LabCmd::KernelDiff(a) } => kernel_diff_cmd::run(&a),
        Cmd::Lab { cmd: LabCmd::Kernels(k) } => kernels_cmd::run(k),
        Cmd::Lab { cmd: LabCmd::Record(a) } => record_cmd::run_record(&a),
        Cmd::Lab { cmd: LabCmd::Show { scenario } } => show_cmd::show(&scenario),
        Cmd::Bench { cmd: BenchCmd::Fallocate2 { workers, seconds, backends: b } } => {
            let env = Env::new(false, 1, backends(&b)?);
            let r = scenarios::fallocate2::run_with(&env, &workers, seconds, 8 << 30);
            println!("{}", r.text());
            Ok(())
        }
        Cmd::Bench { cmd: BenchCmd::Alloc { groups, requests, seed } } => {
            let env = Env::new(false, seed, vec![BackendKind::Engine]);
            println!("{}", scenarios::core::run_fallocate2(&env).text());
            println!("{}", scenarios::core::fragmented(groups, requests, seed).text());
            Ok(())
        }
    }
}
