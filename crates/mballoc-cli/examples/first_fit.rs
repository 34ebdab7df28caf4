//! A policy of your own, run through the whole lab: first fit, the
//! oldest placement rule there is. From the group of the request's goal on,
//! take the first free run at least as long as the request; only when no
//! group has one do ext4's passes take over.
//!
//! Copy this file, change `choose` (or `goal`, `window`, `passes`,
//! `max_to_scan`: see `mballoc::Policy`), and run any lab command with it:
//!
//! ```sh
//! cargo run --release -p mballoc-cli --example first_fit -- lab run aged --quick --set engine.policy=first-fit
//! ```
//!
//! The rows, counts and plots are the lab's own: extents and groups the
//! policy reads count as the passes' would, and ext4's rows run beside
//! yours unchanged.

use mballoc::{Groups, Pick, Policy, RequestInfo};
use std::ops::ControlFlow;
use std::sync::Arc;

#[derive(Debug)]
struct FirstFit;

impl Policy for FirstFit {
    fn name(&self) -> &str {
        "first-fit"
    }

    fn choose(&self, req: &RequestInfo, groups: &mut Groups<'_>) -> Option<Pick> {
        let n = groups.count();
        let first = req.goal.map_or(0, |b| groups.geometry().group_of(b));
        for k in 0..n {
            let g = (first + k) % n;
            // The summary is read without a lock: a cheap way past groups
            // that cannot hold the request.
            let s = groups.summary(g);
            if s.free < req.len || s.largest_free_order < 0 {
                continue;
            }
            let mut pick = None;
            groups.free_runs(g, |start, len| {
                if len >= req.len {
                    pick = Some(Pick { group: g, start, len: req.len });
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            });
            if pick.is_some() {
                return pick;
            }
        }
        None
    }
}

fn main() -> std::process::ExitCode {
    mballoc_lab::policies::register(Arc::new(FirstFit));
    mballoc_cli::main()
}
