//! The bare allocator (`mballoc.Allocator`): free space and placement,
//! nothing stored; the whole request and which step served it.

use crate::value_err;
use mballoc::{AllocRequest, FoundBy};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

#[pyclass(module = "mballoc._native", frozen)]
pub struct Allocator {
    a: mballoc::Allocator,
}

fn alloc_err(e: mballoc::Error) -> PyErr {
    match e {
        mballoc::Error::NoSpace { .. } => PyOSError::new_err((libc::ENOSPC, e.to_string())),
        e => value_err(e),
    }
}

#[pymethods]
impl Allocator {
    /// An allocator over `blocks` blocks; `settings` are `KEY=VALUE` of the
    /// engine's settings that act on the allocator (`profile`, `mb_*`,
    /// `stripe`, ...). Any other is refused.
    #[new]
    #[pyo3(signature = (blocks, block_size, settings))]
    fn new(blocks: u64, block_size: u32, settings: Vec<String>) -> PyResult<Allocator> {
        let geo = mballoc::Geometry::new(block_size, blocks).map_err(value_err)?;
        let mut cfg = mballoc_fs::FsConfig::new(geo);
        for s in &settings {
            let (k, v) = s.split_once('=').ok_or_else(|| value_err(format!("setting {s:?}: KEY=VALUE")))?;
            match mballoc_fs::setting(k) {
                Some(def) if def.acts_on_allocator() => cfg.set(k, v).map_err(value_err)?,
                Some(_) => return Err(value_err(format!("setting {k}: the file layer's, not the allocator's"))),
                None => return Err(value_err(format!("no setting {k:?}"))),
            }
        }
        let a = cfg.allocator_builder().build().map_err(value_err)?;
        Ok(Allocator { a })
    }

    /// `(start, length, found_by, groups_scanned, extents_scanned)`.
    #[pyo3(signature = (length, goal, goal_policy, min_length, metadata, stream))]
    fn allocate(
        &self,
        length: u32,
        goal: Option<u64>,
        goal_policy: &str,
        min_length: Option<u32>,
        metadata: bool,
        stream: Option<u64>,
    ) -> PyResult<(u64, u32, String, u32, u32)> {
        let mut r = AllocRequest::new(length);
        r = match (goal, goal_policy) {
            (None, "hint") => r,
            (None, p) => return Err(value_err(format!("goal_policy {p:?} needs a goal"))),
            (Some(g), "hint") => r.goal(g),
            (Some(g), "try") => r.try_goal(g),
            (Some(g), "only") => r.goal_only(g),
            (_, p) => return Err(value_err(format!("goal_policy {p:?}: hint, try or only"))),
        };
        if let Some(m) = min_length {
            r = r.min_len(m);
        }
        if metadata {
            r = r.metadata();
        }
        if let Some(s) = stream {
            r = r.stream(s);
        }
        let got = self.a.allocate(&r).map_err(alloc_err)?;
        let by = match got.found_by {
            FoundBy::Goal => "goal".to_string(),
            FoundBy::Pass(c) => c.kernel_name().to_string(),
            FoundBy::Policy => "policy".to_string(),
        };
        Ok((got.extent.start, got.extent.len, by, got.groups_scanned, got.extents_scanned))
    }

    fn free(&self, start: u64, length: u64) -> PyResult<()> {
        self.a.free(start, length).map_err(alloc_err)
    }

    fn free_blocks(&self) -> u64 {
        self.a.free_blocks()
    }

    fn mb_stats_text(&self) -> String {
        self.a.mb_stats_report()
    }

    fn mb_groups_text(&self) -> String {
        self.a.mb_groups_report()
    }
}
