//! A mounted volume (`mballoc.Volume` wraps it): the path-level
//! namespace, settings, statistics, fault injection; formatting and
//! checking a volume file.

use crate::file::File;
use crate::stat::{stat_tuple, StatTuple};
use crate::{os_err, value_err};
use mballoc_vol::fault::{DeviceOp, Fault, FaultyDevice, Persistence};
use mballoc_vol::{
    Access, Device, FileDevice, Force, FormatOptions, MountOptions, OpenMode, OpenOptions, Overwrite, Repair, Replace,
    VolError, XattrSet,
};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::{Arc, Mutex};

#[pyclass(module = "mballoc._native", frozen)]
pub struct Volume {
    vol: Mutex<Option<Arc<mballoc_vol::Volume>>>,
    /// The device, when mounted with fault injection.
    faults: Option<Arc<FaultyDevice<FileDevice>>>,
}

fn unmounted() -> PyErr {
    PyOSError::new_err((libc::EBADF, "the volume is unmounted"))
}

impl Volume {
    fn get(&self) -> PyResult<Arc<mballoc_vol::Volume>> {
        let v = self.vol.lock().expect("not poisoned: no call panics holding it");
        v.clone().ok_or_else(unmounted)
    }

    /// Run `op` on the volume with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&Arc<mballoc_vol::Volume>) -> mballoc_vol::Result<T> + Send,
    ) -> PyResult<T> {
        let v = self.get()?;
        py.detach(|| op(&v)).map_err(os_err)
    }
}

fn replace(how: &str) -> PyResult<Replace> {
    match how {
        "allowed" => Ok(Replace::Allowed),
        "never" => Ok(Replace::Never),
        "exchange" => Ok(Replace::Exchange),
        h => Err(value_err(format!("replace={h:?}: allowed, never or exchange"))),
    }
}

#[pymethods]
impl Volume {
    /// Make a new volume file of `size` bytes at `path`; what is there is
    /// kept (an error) unless `force`.
    #[staticmethod]
    #[pyo3(signature = (path, size, block_size, blocks_per_group, inode_count, force))]
    fn format(
        py: Python<'_>,
        path: &[u8],
        size: u64,
        block_size: u32,
        blocks_per_group: Option<u32>,
        inode_count: Option<u32>,
        force: bool,
    ) -> PyResult<()> {
        let opts = FormatOptions { block_size, blocks_per_group, inode_count, ..Default::default() };
        let overwrite = if force { Overwrite::Force } else { Overwrite::Refuse };
        let p = crate::path(path);
        py.detach(|| mballoc_vol::mkfs(p, Some(size), &opts, overwrite)).map(drop).map_err(|e| os_err(e_at(e, p)))
    }

    /// Mount the volume file at `path`; `options` are `KEY=VALUE` as
    /// `MountOptions::set` takes them.
    #[staticmethod]
    #[pyo3(signature = (path, read_only, options, fault_injection))]
    fn mount(
        py: Python<'_>,
        path: &[u8],
        read_only: bool,
        options: Vec<String>,
        fault_injection: bool,
    ) -> PyResult<Volume> {
        let (mode, access) = match read_only {
            true => (OpenMode::ReadOnly, Access::ReadOnly),
            false => (OpenMode::ReadWrite, Access::ReadWrite),
        };
        let mut opts = MountOptions { access, ..MountOptions::default() };
        opts.set_all(options.iter().map(String::as_str)).map_err(os_err)?;
        let p = crate::path(path);
        let (vol, faults) = py
            .detach(|| {
                let dev = FileDevice::open(p, mode)?;
                if fault_injection {
                    let dev = Arc::new(FaultyDevice::new(dev, None));
                    let vol = mballoc_vol::Volume::open(dev.clone() as Arc<dyn Device>, opts)?;
                    Ok((vol, Some(dev)))
                } else {
                    Ok((mballoc_vol::Volume::open(Arc::new(dev), opts)?, None))
                }
            })
            .map_err(|e| os_err(e_at(e, p)))?;
        Ok(Volume { vol: Mutex::new(Some(vol)), faults })
    }

    /// Write everything back and leave the volume clean. Files still open
    /// fail `EBADF` from then on.
    fn unmount(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.vol.lock().expect("not poisoned").take();
        match taken {
            Some(v) => py.detach(|| v.unmount()).map_err(os_err),
            None => Ok(()),
        }
    }

    fn mounted(&self) -> bool {
        self.vol.lock().expect("not poisoned").is_some()
    }

    /// Open the regular file at `path` with `open(2)`'s flags.
    #[pyo3(signature = (path, read, write, append, create, truncate, exclusive, mode))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        &self,
        py: Python<'_>,
        path: &[u8],
        read: bool,
        write: bool,
        append: bool,
        create: bool,
        truncate: bool,
        exclusive: bool,
        mode: u32,
    ) -> PyResult<File> {
        let mut o = OpenOptions::new();
        o.read(read).write(write).append(append).create(create).truncate(truncate).create_new(exclusive).mode(mode);
        self.with(py, |v| v.file(crate::path(path), &o)).map(File::new)
    }

    fn mkdir(&self, py: Python<'_>, path: &[u8], mode: u32) -> PyResult<()> {
        self.with(py, |v| v.create_dir_mode(crate::path(path), mode))
    }

    fn makedirs(&self, py: Python<'_>, path: &[u8]) -> PyResult<()> {
        self.with(py, |v| v.create_dir_all(crate::path(path)))
    }

    fn rmdir(&self, py: Python<'_>, path: &[u8]) -> PyResult<()> {
        self.with(py, |v| v.remove_dir(crate::path(path)))
    }

    fn unlink(&self, py: Python<'_>, path: &[u8]) -> PyResult<()> {
        self.with(py, |v| v.remove_file(crate::path(path)))
    }

    fn rename(&self, py: Python<'_>, src: &[u8], dst: &[u8], how: &str) -> PyResult<()> {
        let how = replace(how)?;
        self.with(py, |v| v.rename(crate::path(src), crate::path(dst), how))
    }

    fn link(&self, py: Python<'_>, src: &[u8], dst: &[u8]) -> PyResult<()> {
        self.with(py, |v| v.hard_link(crate::path(src), crate::path(dst)))
    }

    fn symlink(&self, py: Python<'_>, target: &[u8], link: &[u8]) -> PyResult<()> {
        self.with(py, |v| v.symlink(crate::path(target), crate::path(link)))
    }

    fn readlink<'py>(&self, py: Python<'py>, path: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        use std::os::unix::ffi::OsStrExt;
        let t = self.with(py, |v| v.read_link(crate::path(path)))?;
        Ok(PyBytes::new(py, t.as_os_str().as_bytes()))
    }

    /// `[(name, ino, type bits), ...]` by name.
    fn scandir(&self, py: Python<'_>, path: &[u8]) -> PyResult<Vec<(Vec<u8>, u64, u32)>> {
        let e = self.with(py, |v| v.read_dir(crate::path(path)))?;
        Ok(e.into_iter().map(|e| (e.name, e.ino.0, e.kind)).collect())
    }

    fn stat(&self, py: Python<'_>, path: &[u8], follow: bool) -> PyResult<StatTuple> {
        let m = self.with(py, |v| match follow {
            true => v.metadata(crate::path(path)),
            false => v.symlink_metadata(crate::path(path)),
        })?;
        Ok(stat_tuple(m))
    }

    fn truncate(&self, py: Python<'_>, path: &[u8], size: u64) -> PyResult<()> {
        self.with(py, |v| v.set_len(crate::path(path), size))
    }

    fn chmod(&self, py: Python<'_>, path: &[u8], mode: u32) -> PyResult<()> {
        self.with(py, |v| v.set_permissions(crate::path(path), mode))
    }

    /// chattr flags of `path` (`FL_IMMUTABLE`, ...).
    fn get_flags(&self, py: Python<'_>, path: &[u8]) -> PyResult<u32> {
        let p = crate::path(path);
        self.with(py, |v| v.resolve(p).and_then(|f| v.flags(f)).map_err(|e| e_at(e, p)))
    }

    fn set_flags(&self, py: Python<'_>, path: &[u8], flags: u32) -> PyResult<()> {
        let p = crate::path(path);
        self.with(py, |v| v.resolve(p).and_then(|f| v.set_flags(f, flags)).map_err(|e| e_at(e, p)))
    }

    fn getxattr<'py>(&self, py: Python<'py>, path: &[u8], name: &str) -> PyResult<Bound<'py, PyBytes>> {
        let value = self.with(py, |v| v.get_xattr(crate::path(path), name))?;
        Ok(PyBytes::new(py, &value))
    }

    /// `flags` as `os.setxattr`'s: 0, `XATTR_CREATE` (1) or `XATTR_REPLACE` (2).
    fn setxattr(&self, py: Python<'_>, path: &[u8], name: &str, value: &[u8], flags: i32) -> PyResult<()> {
        let how = match flags {
            0 => XattrSet::Any,
            1 => XattrSet::Create,
            2 => XattrSet::Replace,
            f => return Err(value_err(format!("flags {f}: 0, XATTR_CREATE or XATTR_REPLACE"))),
        };
        self.with(py, |v| v.set_xattr(crate::path(path), name, value, how))
    }

    fn listxattr(&self, py: Python<'_>, path: &[u8]) -> PyResult<Vec<String>> {
        self.with(py, |v| v.list_xattrs(crate::path(path)))
    }

    fn removexattr(&self, py: Python<'_>, path: &[u8], name: &str) -> PyResult<()> {
        self.with(py, |v| v.remove_xattr(crate::path(path), name))
    }

    /// `(block size, data blocks, free blocks, inodes, free inodes, name max)`.
    fn statvfs(&self) -> PyResult<(u32, u64, u64, u64, u64, usize)> {
        let u = self.get()?.usage();
        Ok((u.block_size, u.data_blocks, u.free_blocks, u.inodes, u.free_inodes, mballoc_vol::NAME_MAX))
    }

    /// `[(logical, physical, length), ...]` in blocks.
    fn extents(&self, py: Python<'_>, path: &[u8]) -> PyResult<Vec<(u64, u64, u32)>> {
        let p = crate::path(path);
        let e = self.with(py, |v| v.resolve(p).and_then(|f| v.extents(f)).map_err(|e| e_at(e, p)))?;
        Ok(e.into_iter().map(|e| (e.logical, e.physical, e.len)).collect())
    }

    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |v| v.sync())
    }

    fn block_size(&self) -> PyResult<u32> {
        Ok(self.get()?.superblock().block_size)
    }

    /// Every engine setting in force, by name, as text.
    fn settings(&self) -> PyResult<Vec<(String, String)>> {
        let v = self.get()?;
        let fs = v.fs();
        let cfg = fs.config();
        Ok(mballoc_fs::SETTINGS.iter().filter_map(|s| cfg.get(s.key).map(|value| (s.key.to_string(), value))).collect())
    }

    fn mb_stats_text(&self) -> PyResult<String> {
        Ok(self.get()?.fs().allocator().mb_stats_report())
    }

    fn mb_groups_text(&self) -> PyResult<String> {
        Ok(self.get()?.fs().allocator().mb_groups_report())
    }

    /// Fail the `nth` next device call of kind `op` (`read`, `write`,
    /// `flush`), once or from then on, with EIO.
    fn inject_fault(&self, op: &str, nth: u64, once: bool) -> PyResult<()> {
        let dev = self.faults.as_ref().ok_or_else(|| value_err("mounted without fault_injection=True"))?;
        let op = match op {
            "read" => DeviceOp::Read,
            "write" => DeviceOp::Write,
            "flush" => DeviceOp::Flush,
            o => return Err(value_err(format!("op {o:?}: read, write or flush"))),
        };
        if nth == 0 {
            return Err(value_err("nth counts from 1"));
        }
        let persistence = if once { Persistence::Once } else { Persistence::FromThenOn };
        dev.arm(Fault::eio(op, dev.calls(op) + nth, persistence));
        Ok(())
    }

    /// Disarm any injected fault.
    fn heal(&self) -> PyResult<()> {
        let dev = self.faults.as_ref().ok_or_else(|| value_err("mounted without fault_injection=True"))?;
        dev.heal();
        Ok(())
    }
}

/// A path-level error for calls that resolve first.
fn e_at(e: VolError, p: &std::path::Path) -> VolError {
    match e {
        VolError::At { .. } => e,
        e => VolError::At { path: p.to_path_buf(), source: Box::new(e) },
    }
}

/// The check report as `(clean, problems, repaired, refused, quarantined,
/// orphans, inodes, regular_files, free_blocks, pending_transactions,
/// stopped)`.
type CheckTuple = (bool, Vec<String>, bool, Vec<String>, Vec<String>, u64, u64, u64, u64, usize, Option<String>);

/// Check (and with `repair`, repair) the unmounted volume file at `path`.
#[pyfunction]
#[pyo3(signature = (path, repair, force))]
pub fn check(py: Python<'_>, path: &[u8], repair: bool, force: Vec<String>) -> PyResult<CheckTuple> {
    let force = force.iter().map(|f| f.parse::<Force>().map_err(value_err)).collect::<PyResult<Vec<_>>>()?;
    let p = crate::path(path);
    let mode = if repair { OpenMode::ReadWrite } else { OpenMode::ReadOnly };
    let r = py
        .detach(|| {
            let dev = FileDevice::open(p, mode)?;
            let how = if repair { Repair::Yes } else { Repair::No };
            mballoc_vol::check_with(&dev, how, &force)
        })
        .map_err(|e| os_err(e_at(e, p)))?;
    Ok((
        r.is_clean(),
        r.problems,
        r.repaired,
        r.refused,
        r.quarantined,
        r.orphans,
        r.inodes,
        r.regular_files,
        r.free_blocks,
        r.pending_transactions,
        r.stopped,
    ))
}

/// Every engine setting: `(key, unit, range, about, mountable)`.
#[pyfunction]
pub fn settings() -> Vec<(String, String, String, String, bool)> {
    use mballoc_fs::Part;
    mballoc_fs::SETTINGS
        .iter()
        .map(|s| {
            let mountable = !matches!(s.part, Part::Shape | Part::Storage);
            (s.key.into(), s.unit.into(), s.range.into(), s.about.into(), mountable)
        })
        .collect()
}
