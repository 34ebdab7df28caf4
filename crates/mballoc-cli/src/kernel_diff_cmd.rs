//! `mballoc lab kernel-diff A B [WORKLOAD...]`: two kernels' profiles on
//! the same cases (the built-in ones, or workloads, traces and
//! recordings), where their answers first part and which rule parts them.

use anyhow::Result;
use clap::Args;
use mballoc_fs::KernelVersion;
use mballoc_lab::fidelity::{self, CaseDiff};

/// The arguments of `lab kernel-diff`.
#[derive(Args, Debug)]
pub struct KernelDiffArgs {
    /// The first kernel's release (`6.1`).
    a: KernelVersion,
    /// The second kernel's release (`6.12`).
    b: KernelVersion,
    /// TOML workloads, traces or recordings (`mballoc lab record`) to
    /// compare on; the built-in fidelity cases when none is given.
    workloads: Vec<std::path::PathBuf>,
    /// Only these built-in fidelity cases (by name; repeatable); all of
    /// them by default.
    #[arg(long = "case", value_name = "NAME")]
    cases: Vec<String>,
    /// Smaller built-in cases.
    #[arg(long)]
    quick: bool,
    /// CPUs of the machine both kernels are modelled on (stream goals per
    /// CPU since 6.17); this machine's by default.
    #[arg(long)]
    cpus: Option<u32>,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Run it.
pub fn run(args: &KernelDiffArgs) -> Result<()> {
    // Names and workloads checked before the root check, as everywhere.
    let (cases, _images) =
        crate::fidelity_cmd::cases_of(&args.workloads, &args.cases, args.quick, &Default::default())?;
    if !mballoc_lab::sys::is_root() {
        println!("kernel-diff: skipped (needs root: the cases' images are made with loop mounts)");
        return Ok(());
    }
    crate::plan::clean_up_on_signal()?;
    let cpus = args.cpus.unwrap_or_else(fidelity::possible_cpus);
    let mut diffs: Vec<CaseDiff> = Vec::new();
    for case in &cases {
        match fidelity::kernel_diff(case, args.a, args.b, cpus) {
            Ok(d) => {
                if !args.json {
                    println!("{}", d.text(args.a, args.b));
                }
                diffs.push(d);
            }
            Err(e) => eprintln!("kernel-diff: {}: {}", case.name, mballoc_lab::chain(&e)),
        }
    }
    let same = diffs.iter().filter(|d| d.agreement.first_divergence.is_none()).count();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&diffs)?);
    } else {
        println!("{same} of {} cases: the same answer to every request under {} and {}", diffs.len(), args.a, args.b);
    }
    Ok(())
}
