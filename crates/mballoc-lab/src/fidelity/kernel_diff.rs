//! Two kernels' profiles on one workload: where their answers first part,
//! and which of the rules that set the two releases apart makes them part.
//!
//! Both sides are the engine, loaded from the same pristine image and
//! given the same operations; only the profile differs. The rules a
//! profile follows are [`KernelRule`]s, each introduced by one release.
//! For each rule that one kernel has and the other lacks, the first
//! kernel's profile is run again with that rule alone set as the second
//! kernel has it: a rule whose run parts from the first kernel's at the
//! same request, with the second kernel's answer, is the rule that
//! explains the difference.

use super::compare::{compare, Agreement};
use super::{engine_side, in_turn, kernel_side, Case};
use crate::error::LabError;
use mballoc_fs::{KernelRule, KernelVersion};
use serde::Serialize;

/// One case under two kernels' profiles.
#[derive(Debug, Clone, Serialize)]
pub struct CaseDiff {
    /// The case.
    pub case: String,
    /// How far the second profile agrees with the first (the first in the
    /// place [`compare`] calls the kernel's).
    pub agreement: Agreement,
    /// Each rule the two kernels differ in, and whether it alone moves
    /// the first kernel's answers to the second's at the first difference.
    pub rules: Vec<(String, bool)>,
}

/// Run `case` on the engine under the profiles of kernels `a` and `b`
/// (on a machine with `possible_cpus`), and under `a`'s with each rule
/// that differs set as `b` has it. Needs root (the case's image is made
/// with a loop mount when it is populated).
pub fn kernel_diff(case: &Case, a: KernelVersion, b: KernelVersion, possible_cpus: u32) -> Result<CaseDiff, LabError> {
    case.check_ops()?;
    let image = kernel_side::make_image(case)?;
    let ops = in_turn(&case.trace.streams);
    let run = |has: &dyn Fn(KernelRule) -> bool| engine_side::run(case, image.path(), &ops, has, possible_cpus);
    let side_a = run(&|r| r.in_kernel(a))?;
    let side_b = run(&|r| r.in_kernel(b))?;
    let agreement = compare(&case.name, &side_a, &side_b);
    let mut rules = Vec::new();
    for rule in KernelRule::ALL.into_iter().filter(|r| r.in_kernel(a) != r.in_kernel(b)) {
        let explains = match &agreement.first_divergence {
            None => false,
            Some(first) => {
                let side = run(&|r| if r == rule { r.in_kernel(b) } else { r.in_kernel(a) })?;
                compare(&case.name, &side_a, &side)
                    .first_divergence
                    .is_some_and(|d| d.index == first.index && d.engine == first.engine)
            }
        };
        rules.push((rule.change().to_string(), explains));
    }
    Ok(CaseDiff { case: case.name.clone(), agreement, rules })
}

impl CaseDiff {
    /// The report: agreement, the first difference with each kernel's
    /// answer, and the rules.
    pub fn text(&self, a: KernelVersion, b: KernelVersion) -> String {
        let g = &self.agreement;
        let mut out = format!(
            "== {}\nfiles identical {}/{}, requests the same {}/{} ({a}: {} requests, {b}: {})\n",
            self.case,
            g.files_identical,
            g.files,
            g.requests_matched,
            g.kernel_requests,
            g.kernel_requests,
            g.engine_requests
        );
        match &g.first_divergence {
            None => out.push_str("the same answer to every request\n"),
            Some(d) => {
                out.push_str(&format!("first difference, request {}:\n", d.index + 1));
                for line in &d.before {
                    out.push_str(&format!("    both: {line}\n"));
                }
                out.push_str(&format!("  {a}: {}\n  {b}: {}\n", d.kernel, d.engine));
            }
        }
        if self.rules.is_empty() {
            out.push_str(&format!("no modelled rule differs between {a} and {b}\n"));
        } else if g.first_divergence.is_some() && !self.rules.iter().any(|(_, explains)| *explains) {
            out.push_str("  no one rule alone gives it: the rules act together\n");
        }
        for (rule, explains) in &self.rules {
            let verdict = if *explains {
                "alone, gives the difference"
            } else if g.first_divergence.is_some() {
                "alone, does not give it"
            } else {
                "makes no difference here"
            };
            out.push_str(&format!("  rule: {rule}: {verdict}\n"));
        }
        out
    }
}
