//! `mballoc._native`: the Rust side of the Python package. The package's
//! Python modules (`python/mballoc`) wrap these classes in the shapes
//! Python code expects (a context manager, an `io.RawIOBase` file, dicts
//! keyed by ext4's names); everything here is thin: arguments in, the
//! library's call with the GIL released where it does I/O, results out,
//! and every error an `OSError` carrying its errno.

use mballoc_vol::{Access, FallocateMode, FileDevice, FileId, MountOptions, OpenMode, OpenOptions, VolError};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::{Arc, Mutex};

fn os_err(e: VolError) -> PyErr {
    // OSError(errno, message) becomes the matching subclass in Python
    // (FileNotFoundError for ENOENT, FileExistsError for EEXIST, ...).
    PyOSError::new_err((e.errno(), e.to_string()))
}

fn value_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A mounted volume (`mballoc.Volume` wraps it).
#[pyclass(module = "mballoc._native", frozen)]
struct Volume {
    vol: Mutex<Option<Arc<mballoc_vol::Volume>>>,
}

impl Volume {
    fn get(&self) -> PyResult<Arc<mballoc_vol::Volume>> {
        let v = self.vol.lock().expect("not poisoned: no call panics holding it");
        v.clone().ok_or_else(|| PyOSError::new_err((libc_ebadf(), "the volume is unmounted")))
    }
}

fn libc_ebadf() -> i32 {
    9
}

#[pymethods]
impl Volume {
    /// Make a new volume file of `size` bytes at `path` (nothing there is
    /// overwritten).
    #[staticmethod]
    #[pyo3(signature = (path, size, block_size = 4096))]
    fn format(py: Python<'_>, path: &str, size: u64, block_size: u32) -> PyResult<()> {
        let opts = mballoc_vol::FormatOptions { block_size, ..Default::default() };
        py.detach(|| mballoc_vol::mkfs(std::path::Path::new(path), Some(size), &opts, mballoc_vol::Overwrite::Refuse))
            .map(drop)
            .map_err(os_err)
    }

    /// Mount the volume at `path`.
    #[staticmethod]
    #[pyo3(signature = (path, read_only = false, stats = true))]
    fn open(py: Python<'_>, path: &str, read_only: bool, stats: bool) -> PyResult<Volume> {
        let (mode, access) = match read_only {
            true => (OpenMode::ReadOnly, Access::ReadOnly),
            false => (OpenMode::ReadWrite, Access::ReadWrite),
        };
        let vol = py
            .detach(|| {
                let dev = FileDevice::open(std::path::Path::new(path), mode)?;
                let opts = MountOptions { access, ..MountOptions::default() };
                mballoc_vol::Volume::open_with(Arc::new(dev), opts, |c| c.placement.tunables.mb_stats = stats)
            })
            .map_err(os_err)?;
        Ok(Volume { vol: Mutex::new(Some(vol)) })
    }

    /// Write everything back and leave the volume clean. Refused while
    /// files are open.
    fn unmount(&self, py: Python<'_>) -> PyResult<()> {
        let mut slot = self.vol.lock().expect("not poisoned");
        let Some(v) = slot.take() else { return Ok(()) };
        if Arc::strong_count(&v) > 1 {
            *slot = Some(v);
            return Err(PyOSError::new_err((16, "files of this volume are still open")));
        }
        py.detach(|| v.unmount()).map_err(os_err)
    }

    fn mkdir(&self, path: &str) -> PyResult<()> {
        self.get()?.mkdir_path(path).map(drop).map_err(os_err)
    }

    fn listdir(&self, path: &str) -> PyResult<Vec<String>> {
        let names = self.get()?.list_dir(path).map_err(os_err)?;
        Ok(names.into_iter().map(|n| String::from_utf8_lossy(&n).into_owned()).collect())
    }

    /// `(inode, mode, size, nlink, blocks allocated)`.
    fn stat(&self, path: &str) -> PyResult<(u64, u32, u64, u32, u64)> {
        let v = self.get()?;
        let ino = v.resolve(path).map_err(os_err)?;
        let a = v.attr(ino).map_err(os_err)?;
        let (size, blocks) = match a.is_file() {
            true => (v.size(ino).map_err(os_err)?, v.blocks_held(ino).map_err(os_err)?),
            false => (0, 0),
        };
        Ok((ino.0, a.mode, size, v.nlink(ino).map_err(os_err)?, blocks))
    }

    fn unlink(&self, path: &str) -> PyResult<()> {
        let v = self.get()?;
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let dir = v.resolve(dir).map_err(os_err)?;
        v.unlink_at(dir, name.as_bytes()).map_err(os_err)
    }

    /// `[(logical, physical, length), ...]` in blocks.
    fn extents(&self, path: &str) -> PyResult<Vec<(u64, u64, u32)>> {
        let v = self.get()?;
        let ino = v.resolve(path).map_err(os_err)?;
        let e = v.extents(ino).map_err(os_err)?;
        Ok(e.into_iter().map(|e| (e.logical, e.physical, e.len)).collect())
    }

    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let v = self.get()?;
        py.detach(|| v.sync()).map_err(os_err)
    }

    fn block_size(&self) -> PyResult<u32> {
        Ok(self.get()?.superblock().block_size)
    }

    fn mb_stats_text(&self) -> PyResult<String> {
        Ok(self.get()?.fs().allocator().mb_stats_report())
    }

    fn mb_groups_text(&self) -> PyResult<String> {
        Ok(self.get()?.fs().allocator().mb_groups_report())
    }

    /// Open the regular file at `path`; flags as `open(2)`'s.
    #[pyo3(signature = (path, read, write, create = false, truncate = false, exclusive = false))]
    fn open_file(
        &self,
        path: &str,
        read: bool,
        write: bool,
        create: bool,
        truncate: bool,
        exclusive: bool,
    ) -> PyResult<File> {
        let v = self.get()?;
        let mut o = OpenOptions::new();
        o.read(read).write(write).create(create).truncate(truncate).create_new(create && exclusive);
        let f = v.file(path, &o).map_err(os_err)?;
        let id = f.id();
        // The handle keeps the file open from here on; `File.close` ends it.
        std::mem::forget(f);
        Ok(File { vol: Mutex::new(Some(v)), id })
    }
}

/// An open regular file (`mballoc.File`, an `io.RawIOBase`, wraps it).
#[pyclass(module = "mballoc._native", frozen)]
struct File {
    /// Given back at close, so that a closed file does not keep its
    /// volume from unmounting.
    vol: Mutex<Option<Arc<mballoc_vol::Volume>>>,
    id: FileId,
}

impl File {
    fn vol(&self) -> PyResult<Arc<mballoc_vol::Volume>> {
        let v = self.vol.lock().expect("not poisoned: no call panics holding it");
        v.clone().ok_or_else(|| PyValueError::new_err("I/O operation on closed file"))
    }
}

#[pymethods]
impl File {
    /// Up to `n` bytes at `offset` (fewer only at the end).
    fn read_at<'py>(&self, py: Python<'py>, offset: u64, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let vol = self.vol()?;
        let size = vol.size(self.id).map_err(os_err)?;
        let n = n.min(size.saturating_sub(offset) as usize);
        let id = self.id;
        PyBytes::new_with(py, n, |buf| py.detach(|| vol.read(id, offset, buf)).map(drop).map_err(os_err))
    }

    /// Write all of `data` at `offset`; returns its length.
    fn write_at(&self, py: Python<'_>, data: &[u8], offset: u64) -> PyResult<usize> {
        let vol = self.vol()?;
        let id = self.id;
        py.detach(|| vol.write(id, offset, data)).map_err(os_err)?;
        Ok(data.len())
    }

    fn size(&self) -> PyResult<u64> {
        self.vol()?.size(self.id).map_err(os_err)
    }

    fn set_len(&self, py: Python<'_>, size: u64) -> PyResult<()> {
        let vol = self.vol()?;
        py.detach(|| vol.truncate(self.id, size)).map_err(os_err)
    }

    fn fsync(&self, py: Python<'_>) -> PyResult<()> {
        let vol = self.vol()?;
        py.detach(|| vol.fsync(self.id)).map_err(os_err)
    }

    #[pyo3(signature = (offset, length, keep_size = false))]
    fn allocate(&self, py: Python<'_>, offset: u64, length: u64, keep_size: bool) -> PyResult<()> {
        let vol = self.vol()?;
        let mode = if keep_size { FallocateMode::KeepSize } else { FallocateMode::ExtendSize };
        py.detach(|| vol.fallocate(self.id, offset, length, mode)).map_err(os_err)
    }

    fn punch(&self, py: Python<'_>, offset: u64, length: u64) -> PyResult<()> {
        let vol = self.vol()?;
        py.detach(|| vol.punch_hole(self.id, offset, length)).map_err(os_err)
    }

    fn extents(&self) -> PyResult<Vec<(u64, u64, u32)>> {
        let e = self.vol()?.extents(self.id).map_err(os_err)?;
        Ok(e.into_iter().map(|e| (e.logical, e.physical, e.len)).collect())
    }

    fn close(&self) -> PyResult<()> {
        let taken = self.vol.lock().expect("not poisoned").take();
        match taken {
            Some(v) => v.close(self.id).map_err(os_err),
            None => Ok(()),
        }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        if let Some(v) = self.vol.get_mut().ok().and_then(Option::take) {
            // Unreachable through the wrapper, which closes; an orphan a
            // failed close leaves is removed by the next mount.
            let _ = v.close(self.id);
        }
    }
}

/// The bare allocator (`mballoc.Allocator`).
#[pyclass(module = "mballoc._native", frozen)]
struct Allocator {
    a: mballoc::Allocator,
}

#[pymethods]
impl Allocator {
    #[new]
    #[pyo3(signature = (blocks, block_size = 4096, profile = "default"))]
    fn new(blocks: u64, block_size: u32, profile: &str) -> PyResult<Allocator> {
        let t = match profile {
            "default" => mballoc::Tunables::default(),
            "kernel" => mballoc::Tunables::kernel(),
            p => return Err(value_err(format!("unknown profile {p:?}: kernel or default"))),
        };
        let geo = mballoc::Geometry::new(block_size, blocks).map_err(value_err)?;
        let a = mballoc::Allocator::builder(geo)
            .tunables(mballoc::Tunables { mb_stats: true, ..t })
            .build()
            .map_err(value_err)?;
        Ok(Allocator { a })
    }

    /// `(start, length)` of up to `length` blocks near `goal`.
    #[pyo3(signature = (goal = 0, length = 1))]
    fn allocate(&self, goal: u64, length: u32) -> PyResult<(u64, u32)> {
        let r = self.a.allocate(&mballoc::AllocRequest::new(length).try_goal(goal)).map_err(alloc_err)?;
        Ok((r.extent.start, r.extent.len))
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

fn alloc_err(e: mballoc::Error) -> PyErr {
    match e {
        mballoc::Error::NoSpace { .. } => PyOSError::new_err((28, e.to_string())),
        e => value_err(e),
    }
}

/// One lab scenario run as `mballoc lab run SCENARIO --json` runs it: the
/// report's JSON.
#[pyfunction]
#[pyo3(signature = (scenario, quick, backends, settings, seed = 1))]
fn lab_run(
    py: Python<'_>,
    scenario: &str,
    quick: bool,
    backends: Vec<String>,
    settings: Vec<String>,
    seed: u64,
) -> PyResult<String> {
    use mballoc_lab::backend::BackendKind;
    let s = mballoc_lab::scenarios::find(scenario)
        .ok_or_else(|| value_err(format!("unknown scenario {scenario:?}; mballoc.lab.scenarios() names them")))?;
    let kinds = backends
        .iter()
        .map(|b| BackendKind::parse(b).ok_or_else(|| value_err(format!("unknown backend {b:?}"))))
        .collect::<PyResult<Vec<_>>>()?;
    let mut set = mballoc_lab::settings::Settings::default();
    for a in &settings {
        set.set_str(a).map_err(value_err)?;
    }
    let report = py.detach(|| {
        let env = mballoc_lab::scenarios::Env::new(quick, seed, kinds).with_settings(set.clone());
        let mut r = (s.run)(&env);
        if !set.is_empty() {
            r.notes
                .insert(0, format!("settings over every row (they win over each variant's own): {}", set.describe()));
        }
        mballoc_lab::report::Report { header: mballoc_lab::report::Header::now(), seed, quick, scenarios: vec![r] }
    });
    Ok(report.json())
}

/// Every scenario's name and one line about it.
#[pyfunction]
fn lab_scenarios() -> Vec<(String, String)> {
    mballoc_lab::scenarios::ALL.iter().map(|s| (s.name.to_string(), s.about.to_string())).collect()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Volume>()?;
    m.add_class::<File>()?;
    m.add_class::<Allocator>()?;
    m.add_function(wrap_pyfunction!(lab_run, m)?)?;
    m.add_function(wrap_pyfunction!(lab_scenarios, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
