//! An open regular file (`mballoc.File`, an `io.RawIOBase`, wraps it).
//! It owns its handle; `close` gives it back, so a closed file keeps
//! nothing of its volume alive.

use crate::os_err;
use mballoc_vol::FallocateMode;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Mutex;

#[pyclass(module = "mballoc._native", frozen)]
pub struct File {
    f: Mutex<Option<mballoc_vol::File>>,
}

impl File {
    pub fn new(f: mballoc_vol::File) -> File {
        File { f: Mutex::new(Some(f)) }
    }

    /// Run `op` on the open file, with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&mballoc_vol::File) -> mballoc_vol::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let g = self.f.lock().expect("not poisoned: no call panics holding it");
            let f = g.as_ref().ok_or_else(|| PyValueError::new_err("I/O operation on closed file"))?;
            op(f).map_err(os_err)
        })
    }
}

fn mode(keep_size: bool) -> FallocateMode {
    match keep_size {
        true => FallocateMode::KeepSize,
        false => FallocateMode::ExtendSize,
    }
}

#[pymethods]
impl File {
    /// Up to `n` bytes at `offset` (fewer only at the end).
    fn read_at<'py>(&self, py: Python<'py>, offset: u64, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let size = self.with(py, |f| f.len())?;
        let n = n.min(size.saturating_sub(offset) as usize);
        // One copy: the volume reads straight into the new bytes object.
        PyBytes::new_with(py, n, |buf| self.with(py, |f| f.read_at(buf, offset)).map(drop))
    }

    /// Write all of `data` at `offset`; returns its length.
    fn write_at(&self, py: Python<'_>, data: &[u8], offset: u64) -> PyResult<usize> {
        self.with(py, |f| f.write_at(data, offset))?;
        Ok(data.len())
    }

    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |f| f.len())
    }

    fn set_len(&self, py: Python<'_>, size: u64) -> PyResult<()> {
        self.with(py, |f| f.set_len(size))
    }

    fn fsync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |f| f.sync_all())
    }

    fn allocate(&self, py: Python<'_>, offset: u64, length: u64, keep_size: bool) -> PyResult<()> {
        self.with(py, |f| f.allocate(offset, length, mode(keep_size)))
    }

    fn punch(&self, py: Python<'_>, offset: u64, length: u64) -> PyResult<()> {
        self.with(py, |f| f.punch(offset, length))
    }

    fn zero_range(&self, py: Python<'_>, offset: u64, length: u64, keep_size: bool) -> PyResult<()> {
        self.with(py, |f| f.zero_range(offset, length, mode(keep_size)))
    }

    fn extents(&self, py: Python<'_>) -> PyResult<Vec<(u64, u64, u32)>> {
        let e = self.with(py, |f| f.extents())?;
        Ok(e.into_iter().map(|e| (e.logical, e.physical, e.len)).collect())
    }

    fn stat(&self, py: Python<'_>) -> PyResult<crate::stat::StatTuple> {
        self.with(py, |f| f.metadata()).map(crate::stat::stat_tuple)
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.f.lock().expect("not poisoned").take();
        // Dropping the handle closes it; an unlinked file goes with it.
        py.detach(|| drop(taken));
        Ok(())
    }
}
