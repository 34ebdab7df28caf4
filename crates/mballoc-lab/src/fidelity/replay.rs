//! Replaying a kernel allocation trace against the image it started from.
//!
//! The tracepoints carry each request's goal and, for requests the
//! regular allocator served, the normalized goal extent, the flags, the
//! pass and the result; they do not carry a file's size or open state,
//! which decide between locality group and stream and size the window.
//! So the replay takes the kernel's own decisions up to the search, and
//! tests the search: for every request `ext4_mballoc_alloc` reports, the
//! engine's allocator, holding the same free space, is asked for the same
//! goal extent from the same group, and its answer and pass are set
//! beside the kernel's. The engine's state then follows the kernel's
//! (its answer is given back and the kernel's taken), so one early
//! difference does not spoil every later comparison: each request is
//! judged on the state the kernel had.
//!
//! Free space follows the trace: results and new preallocations are taken,
//! released preallocations given back at once, freed blocks at the next
//! journal commit. Requests served from a preallocation are counted, not
//! searched.
//!
//! Right after a mount ext4 has built no group's buddy, and its cheap
//! passes skip groups not yet built (`mballoc::Allocator::unload_buddies`).
//! A trace that records `ext4_mb_buddy_bitmap_load` starts the engine in
//! that state. The engine builds what a request's search builds (the goal's
//! group, a slow pass's groups, their page neighbours) itself; the trace
//! says what else the kernel built (its background prefetch, the prefetch
//! at the end of a request, frees, reads of `mb_groups`), and the engine
//! follows it: a load by the requesting task during a request after that
//! request's search, any other at once.
//!
//! The whole-file figures (layouts, free extents after the run) need the
//! operations themselves: `mballoc lab fidelity`.

use crate::error::LabError;
use crate::kernel_trace::{pass_name, Event, Flags, GroupExtent, KernelTrace};
use mballoc::{AllocRequest, Allocator, FoundBy};
use mballoc_fs::{FsConfig, KernelVersion};
use serde::Serialize;
use std::fmt::Write;

/// What a replay found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayReport {
    /// Requests the trace holds (`ext4_request_blocks`).
    pub requests: usize,
    /// Requests served by the regular allocator (searched again here).
    pub searched: usize,
    /// Of those, the engine found the same extent.
    pub same_extent: usize,
    /// Of those, the engine's pass was the kernel's too.
    pub same_pass: usize,
    /// Requests served from a preallocation.
    pub from_preallocation: usize,
    /// Hits per pass, kernel and engine, in the order of
    /// [`mballoc::Criterion::ALL`] plus "goal" last.
    pub pass_hits: ([u64; 6], [u64; 6]),
    /// The first searched request whose answer differed, with its context.
    pub first_divergence: Option<String>,
    /// Events the trace's ring buffer dropped.
    pub lost_events: u64,
    /// Free extents of the image before the trace and after it.
    pub free_extents: (u64, u64),
    /// Buddies the kernel built during requests, and of those, the ones
    /// the engine's own search had built (the rest it took from the trace).
    pub buddy_loads: (usize, usize),
}

impl ReplayReport {
    /// The report as text.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let pct = |a: usize, b: usize| if b == 0 { 100.0 } else { 100.0 * a as f64 / b as f64 };
        let _ = writeln!(
            o,
            "{} requests: {} searched by the allocator, {} served from preallocations",
            self.requests, self.searched, self.from_preallocation
        );
        let _ = writeln!(
            o,
            "same extent {}/{} ({:.1}%), same pass {}/{} ({:.1}%)",
            self.same_extent,
            self.searched,
            pct(self.same_extent, self.searched),
            self.same_pass,
            self.searched,
            pct(self.same_pass, self.searched)
        );
        let names = ["p2_aligned", "goal_fast", "best_avail", "goal_slow", "any_free", "goal"];
        let hits: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n} {}/{}", self.pass_hits.0[i], self.pass_hits.1[i]))
            .collect();
        let _ = writeln!(o, "hits kernel/engine: {}", hits.join(", "));
        let _ = writeln!(o, "free extents before {} after {}", self.free_extents.0, self.free_extents.1);
        if self.buddy_loads.0 > 0 {
            let _ = writeln!(
                o,
                "buddies built during requests: {}, of which the engine's search built {} itself",
                self.buddy_loads.0, self.buddy_loads.1
            );
        }
        if self.lost_events > 0 {
            let _ =
                writeln!(o, "the trace's ring buffer dropped {} events: figures are a lower bound", self.lost_events);
        }
        match &self.first_divergence {
            Some(d) => {
                let _ = writeln!(o, "first divergence:\n{d}");
            }
            None => {
                let _ = writeln!(o, "first divergence: none");
            }
        }
        o
    }
}

fn pass_index(cr: &str) -> Option<usize> {
    mballoc::Criterion::ALL.iter().position(|c| c.kernel_name() == cr)
}

/// Replay `trace`, recorded on `kernel` (which names its numbered
/// passes), on an allocator holding `image`'s free space, tuned as
/// `tunables` say (the kernel's defaults, or a policy to try). Blocks in
/// the trace are ext4's; `base` is the image's first data block. With
/// bigalloc the allocator's units are clusters of `2^cluster_bits`
/// blocks: the allocation events print clusters already, frees print
/// blocks and are cut to the clusters ext4 frees.
pub fn replay(
    trace: &KernelTrace,
    kernel: KernelVersion,
    alloc: &Allocator,
    base: u64,
    cluster_bits: u32,
) -> Result<ReplayReport, LabError> {
    let geo = *alloc.geometry();
    let bpg = u64::from(geo.blocks_per_group());
    let mut r = ReplayReport { lost_events: trace.lost, ..ReplayReport::default() };
    let count_free = |a: &Allocator| {
        let mut n = 0u64;
        a.for_each_free_extent(|_, _| n += 1);
        n
    };
    r.free_extents.0 = count_free(alloc);
    let mut pending: Vec<(u64, u64)> = Vec::new();
    let mut context: Vec<String> = Vec::new();
    let block_of = |e: &GroupExtent| u64::from(e.group) * bpg + e.start.max(0) as u64;
    // The task whose request is under way, and the buddies it built.
    let mut requester: Option<u32> = None;
    let mut built: Vec<u32> = Vec::new();
    let follow = |built: &mut Vec<u32>| {
        for g in built.drain(..) {
            let _ = alloc.load_buddy(g);
        }
    };
    for (n, ev) in trace.events.iter().enumerate() {
        match ev {
            Event::Request { task, .. } => {
                r.requests += 1;
                follow(&mut built);
                requester = Some(*task);
            }
            Event::BuddyLoad { task, group } if requester == Some(*task) => built.push(*group),
            Event::BuddyLoad { group, .. } => {
                let _ = alloc.load_buddy(*group);
            }
            Event::Allocated { .. } => {
                follow(&mut built);
                requester = None;
            }
            Event::Prealloc { .. } => {
                r.from_preallocation += 1;
                follow(&mut built);
            }
            Event::Mballoc { ino, orig, goal, result, cr, flags, groups, .. } => {
                r.searched += 1;
                // Found at the goal block: no group was scanned.
                let kernel_pass = if *groups == 0 && result.group == goal.group && result.start == goal.start {
                    5
                } else {
                    pass_index(&pass_name(cr, (kernel.major, kernel.minor))).unwrap_or(4)
                };
                r.pass_hits.0[kernel_pass] += 1;
                let kernel_block = block_of(result);
                let len = goal.len.clamp(1, geo.blocks_per_group());
                let mut req = AllocRequest::new(len).original_len(orig.len.clamp(1, len));
                let g = block_of(goal).min(geo.total_blocks() - 1);
                req = if goal.start >= 0 && flags.has(Flags::TRY_GOAL) { req.try_goal(g) } else { req.goal(g) };
                if !flags.has(Flags::DATA) {
                    req = req.metadata();
                }
                let answer = alloc.allocate(&req).ok();
                r.buddy_loads.0 += built.len();
                r.buddy_loads.1 += built.iter().filter(|&&g| alloc.is_buddy_loaded(g)).count();
                follow(&mut built);
                let (engine_block, engine_len, engine_pass) = match answer {
                    Some(a) => {
                        let p = match a.found_by {
                            FoundBy::Goal => 5,
                            FoundBy::Pass(c) => c.index(),
                            FoundBy::Policy => unreachable!("replay's allocator has the kernel's policy"),
                        };
                        (a.extent.start, a.extent.len, p)
                    }
                    None => (u64::MAX, 0, 4),
                };
                r.pass_hits.1[engine_pass] += 1;
                let same = engine_block == kernel_block && engine_len == result.len;
                r.same_extent += usize::from(same);
                r.same_pass += usize::from(same && engine_pass == kernel_pass);
                let line = format!(
                    "  inode {ino} logical {} want {} (goal {}/{} len {}): kernel {}+{} by {}, engine {} by {}",
                    orig.logical,
                    orig.len,
                    goal.group,
                    goal.start,
                    goal.len,
                    kernel_block + base,
                    result.len,
                    names(kernel_pass),
                    if engine_len == 0 {
                        "nothing".to_string()
                    } else {
                        format!("{}+{}", engine_block + base, engine_len)
                    },
                    names(engine_pass),
                );
                if !same && r.first_divergence.is_none() {
                    let mut d = String::new();
                    for c in &context {
                        let _ = writeln!(d, "{c}");
                    }
                    let _ = write!(d, "{line}  <- event {}", n + 1);
                    r.first_divergence = Some(d);
                }
                context.push(line);
                if context.len() > 3 {
                    context.remove(0);
                }
                // The kernel's state from here on.
                if engine_len > 0 {
                    alloc.free(engine_block, u64::from(engine_len)).map_err(LabError::from)?;
                }
                take(alloc, kernel_block, u64::from(result.len));
            }
            Event::Free { block, count, keep_first, keep_last, .. } if *block >= base => {
                if let Some(c) = freed_clusters(block - base, *count, cluster_bits, (*keep_first, *keep_last)) {
                    pending.push(c);
                }
            }
            Event::Commit { .. } => {
                for (b, c) in pending.drain(..) {
                    give(alloc, b, c);
                }
            }
            Event::ReleasePa { block, count, .. } if *block >= base => {
                // The first block, and clusters.
                give(alloc, (block - base) >> cluster_bits, *count);
            }
            _ => {}
        }
    }
    for (b, c) in pending.drain(..) {
        give(alloc, b, c);
    }
    r.free_extents.1 = count_free(alloc);
    Ok(r)
}

/// The clusters `ext4_free_blocks` frees for `count` blocks from `block`
/// (`(first, clusters)`, or none): a partial cluster at either end is
/// rounded out to free it whole, or in to keep it when the flags say
/// another extent shares it.
fn freed_clusters(block: u64, count: u64, bits: u32, (keep_first, keep_last): (bool, bool)) -> Option<(u64, u64)> {
    let ratio = 1u64 << bits;
    let (mut b, mut c) = (block, count);
    let off = b % ratio;
    if off != 0 {
        if keep_first {
            b += ratio - off;
            c = c.saturating_sub(ratio - off);
        } else {
            b -= off;
            c += off;
        }
    }
    let over = c % ratio;
    if over != 0 {
        if keep_last {
            c -= over;
        } else {
            c += ratio - over;
        }
    }
    (c > 0).then_some((b >> bits, c >> bits))
}

/// A pass index as [`ReplayReport::pass_hits`] numbers them: the
/// criteria, then the goal.
fn names(i: usize) -> &'static str {
    mballoc::Criterion::ALL.get(i).map_or("goal", |c| c.kernel_name())
}

/// Mark `[b, b + n)` used, skipping blocks already used (a trace that
/// dropped events may disagree with the state).
fn take(a: &Allocator, b: u64, n: u64) {
    each_run(a, b, n, false, |s, l| {
        let _ = a.claim(s, l);
    });
}

/// Mark `[b, b + n)` free, skipping blocks already free.
fn give(a: &Allocator, b: u64, n: u64) {
    each_run(a, b, n, true, |s, l| {
        let _ = a.free(s, l);
    });
}

/// Call `f` on each run of `[b, b + n)` whose blocks are in use (`used`)
/// or free.
fn each_run(a: &Allocator, b: u64, n: u64, used: bool, mut f: impl FnMut(u64, u64)) {
    let total = a.geometry().total_blocks();
    let end = (b + n).min(total);
    let mut x = b;
    while x < end {
        if a.is_used(x).unwrap_or(!used) != used {
            x += 1;
            continue;
        }
        let s = x;
        while x < end && a.is_used(x).unwrap_or(!used) == used {
            x += 1;
        }
        f(s, x - s);
    }
}

/// Parse a trace file's text, recorded on `kernel`, and replay it on
/// `image` (an ext4 image as it was when the trace began; a `.qcow2` from
/// `e2image -Q` is expanded first) under that kernel's profile, which
/// `configure` may change.
pub fn replay_file(
    trace_text: &str,
    dev: Option<(u32, u32)>,
    image: &std::path::Path,
    kernel: KernelVersion,
    configure: impl FnOnce(&mut FsConfig),
) -> Result<ReplayReport, LabError> {
    let trace = KernelTrace::parse(trace_text, dev)?;
    if trace.events.is_empty() {
        return Err(LabError::Invalid("the trace holds no ext4 allocation events for that device".into()));
    }
    let expanded = match image.extension() {
        Some(e) if e == "qcow2" => Some(crate::loop_mount::Image::from_qcow2(image)?),
        _ => None,
    };
    let image = expanded.as_ref().map_or(image, |i| i.path());
    let src = mballoc_ext4::FileSource::open(image).map_err(|e| LabError::io(image.display().to_string(), e))?;
    let vol = mballoc_ext4::Ext4Volume::open(src, mballoc_ext4::ChecksumPolicy::Verify)?;
    let base = u64::from(vol.superblock().first_data_block);
    let mut cfg = FsConfig::kernel_of(mballoc_ext4::engine::geometry(&vol)?, kernel);
    configure(&mut cfg);
    let alloc = mballoc_ext4::engine::allocator_with(
        &vol,
        cfg.placement.tunables,
        cfg.behaviour.stripe_units,
        cfg.placement.policy.clone(),
    )?;
    if trace.events.iter().any(|e| matches!(e, Event::BuddyLoad { .. })) {
        // Recorded from a fresh mount: start where the kernel started.
        alloc.unload_buddies(&mballoc_ext4::engine::block_uninit_groups(&vol));
    }
    let cluster_bits = vol.superblock().cluster_ratio().trailing_zeros();
    replay(&trace, kernel, &alloc, base, cluster_bits)
}

/// Replay what `path` names: a recording's directory (`mballoc lab
/// record`: its trace, on its image, with the allocator tuned as the
/// recorded kernel was), or a trace file, replayed on `image`. `settings`
/// add to that: `ext4.*` say how the traced kernel ran (its `mb_*` knobs
/// and `mb_optimize_scan` reach the engine's allocator), `engine.*` tune
/// the engine's allocator to try something else. The trace was recorded
/// on `kernel` (a recording's own kernel, else the running one, where
/// `None`): its profile answers, and it names numbered passes.
pub fn replay_path(
    path: &std::path::Path,
    image: Option<&std::path::Path>,
    dev: Option<(u32, u32)>,
    kernel: Option<KernelVersion>,
    settings: &crate::settings::Settings,
) -> Result<ReplayReport, LabError> {
    let (trace, image, mut ext4, recorded_on) = if path.is_dir() {
        let meta = super::record::RecordMeta::read(path)?;
        let image = image.map_or_else(|| path.join("image.qcow2"), std::path::Path::to_path_buf);
        (path.join("trace"), image, meta.ext4(), KernelVersion::from_release(&meta.kernel))
    } else {
        let image = image.ok_or_else(|| {
            LabError::Invalid(format!("{}: a trace file needs the image it started from", path.display()))
        })?;
        (path.to_path_buf(), image.to_path_buf(), super::Ext4Config::default(), None)
    };
    let kernel = kernel.or(recorded_on).unwrap_or_else(super::engine_side::running_kernel);
    ext4.extend(&super::Ext4Config::from_settings(settings));
    let text = std::fs::read_to_string(&trace).map_err(|e| LabError::io(trace.display().to_string(), e))?;
    replay_file(&text, dev, &image, kernel, |cfg| {
        ext4.apply_engine(cfg);
        settings.apply_keys(cfg);
    })
}

#[cfg(test)]
mod tests {
    use super::freed_clusters;

    #[test]
    fn frees_become_the_clusters_ext4_frees() {
        // No bigalloc: blocks are the units.
        assert_eq!(freed_clusters(4328, 3, 0, (false, false)), Some((4328, 3)));
        // Four-block clusters: a partial end is freed whole unless kept.
        assert_eq!(freed_clusters(4328, 4, 2, (false, false)), Some((1082, 1)));
        assert_eq!(freed_clusters(4329, 5, 2, (false, false)), Some((1082, 2)));
        assert_eq!(freed_clusters(4329, 5, 2, (true, false)), Some((1083, 1)));
        assert_eq!(freed_clusters(4328, 1, 2, (true, true)), None);
        assert_eq!(freed_clusters(4328, 6, 2, (false, true)), Some((1082, 1)));
    }
}
