//! `mballoc lab kernels`: fetch a Debian kernel, or run an `mballoc`
//! command inside it under qemu (or here, for `host`).

use anyhow::{Context, Result};
use clap::Subcommand;

#[derive(Subcommand)]
pub(crate) enum KernelsCmd {
    /// Download and unpack a kernel into the cache (`$MBALLOC_KERNELS`,
    /// default ~/.cache/mballoc/kernels) and print its ABI.
    Fetch {
        /// A series (6.1, 6.12), an ABI (6.1.0-56-cloud-amd64) or
        /// SUITE:VERSION (trixie-backports:7.3).
        kernel: String,
    },
    /// Run `mballoc ARGS...` on that kernel: in a qemu guest, or here for
    /// `host`. Its output is printed as it printed it, and its exit status
    /// is this command's.
    Run {
        /// `host`, a series, an ABI or SUITE:VERSION (as for fetch).
        kernel: String,
        /// CPUs the guest sees (since 6.17 layouts depend on it).
        #[arg(long)]
        cpus: Option<u32>,
        /// Guest memory in MiB.
        #[arg(long, default_value_t = 3072)]
        memory: u32,
        /// Seconds before the guest is stopped.
        #[arg(long, default_value_t = 1800)]
        timeout: u64,
        /// A directory the command writes (relative to its working
        /// directory, e.g. the `--keep` or `--out` of a fidelity run), copied
        /// back to the same relative path here.
        #[arg(long, value_name = "DIR")]
        bring: Option<String>,
        /// The `mballoc` command line to run (after `--`).
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
}

/// Run `mballoc lab kernels ...`.
pub(crate) fn run(cmd: KernelsCmd) -> Result<()> {
    use mballoc_lab::kernels;
    use std::io::Write as _;
    match cmd {
        KernelsCmd::Fetch { kernel } => {
            let k = kernels::fetch(&kernel.parse()?)?;
            println!("{}\t{}", k.abi, k.dir.display());
            Ok(())
        }
        KernelsCmd::Run { kernel, cpus, memory, timeout, bring, args } => {
            if kernel == "host" {
                let me = std::env::current_exe().context("this program's path")?;
                let status = std::process::Command::new(me).args(&args).status().context("running it here")?;
                std::process::exit(status.code().unwrap_or(1));
            }
            let k = kernels::fetch(&kernel.parse()?)?;
            let mut opts = kernels::GuestOptions {
                memory_mib: memory,
                timeout: std::time::Duration::from_secs(timeout),
                bring: bring.clone(),
                ..Default::default()
            };
            if let Some(n) = cpus {
                opts.cpus = n;
            }
            let r = kernels::run(&k, &args, &opts)?;
            std::io::stdout().write_all(&r.stdout)?;
            std::io::stderr().write_all(&r.stderr)?;
            if let Some(dir) = &bring {
                if r.brought.is_empty() {
                    eprintln!("mballoc lab kernels: the guest left no directory {dir:?} to bring back");
                } else {
                    untar(&r.brought).with_context(|| format!("unpacking the guest's {dir:?} here"))?;
                    eprintln!("mballoc lab kernels: brought the guest's {dir:?} back");
                }
            }
            eprintln!(
                "mballoc lab kernels: ran on {} ({} CPUs, emulated) in {:.1} s, exit status {}",
                r.uname,
                opts.cpus,
                r.elapsed.as_secs_f64(),
                r.status
            );
            std::process::exit(r.status);
        }
    }
}

/// Unpack a gzipped tar archive into the working directory.
fn untar(archive: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut tar = std::process::Command::new("tar")
        .args(["-xzf", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .context("running tar")?;
    tar.stdin.take().context("tar's input")?.write_all(archive)?;
    let status = tar.wait()?;
    anyhow::ensure!(status.success(), "tar exited with {status}");
    Ok(())
}
