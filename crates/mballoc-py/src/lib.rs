//! `mballoc._native`: the Rust side of the Python package. The package's
//! Python modules (`python/mballoc`) wrap these classes in the shapes
//! Python code expects (a context manager, an `io.RawIOBase` file, named
//! tuples and typed dicts); everything here is thin: arguments in, the
//! library's call with the GIL released where it does I/O, results out,
//! and every error an `OSError` carrying its errno and, where the call
//! took one, the caller's path.

mod allocator;
mod file;
mod lab;
mod stat;
mod volume;

use mballoc_vol::VolError;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `OSError(errno, message[, filename])`: Python makes it the matching
/// subclass (`FileNotFoundError` for ENOENT, `FileExistsError`, ...).
fn os_err(e: VolError) -> PyErr {
    match &e {
        VolError::At { path, source } => {
            let name = String::from_utf8_lossy(path.as_os_str().as_bytes()).into_owned();
            PyOSError::new_err((e.errno(), source.to_string(), name))
        }
        _ => PyOSError::new_err((e.errno(), e.to_string())),
    }
}

fn value_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A path as the wrapper passes it (`os.fsencode`d bytes).
fn path(p: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(p))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<volume::Volume>()?;
    m.add_class::<file::File>()?;
    m.add_class::<allocator::Allocator>()?;
    m.add_function(wrap_pyfunction!(volume::check, m)?)?;
    m.add_function(wrap_pyfunction!(volume::settings, m)?)?;
    m.add_function(wrap_pyfunction!(lab::lab_run, m)?)?;
    m.add_function(wrap_pyfunction!(lab::lab_scenarios, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
