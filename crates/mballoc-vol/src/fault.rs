//! Device errors on demand: a device that fails the Nth read, write or
//! flush, once or from then on, so that tests can prove every error path
//! (the fault-injection half of the crash harness; [`crate::crash`] is
//! the other half).

use crate::device::Device;
use crate::format::SECTOR;
use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A kind of device call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceOp {
    /// `read_at`.
    Read,
    /// `write_at`.
    Write,
    /// `flush`.
    Flush,
}

/// How long an injected fault lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Only the chosen call fails (a transient error).
    Once,
    /// The chosen call and every later call of the same kind fail (a
    /// dead device, a full host disk).
    FromThenOn,
}

/// Which call fails, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The kind of call.
    pub op: DeviceOp,
    /// Its number among calls of that kind, from 1.
    pub nth: u64,
    /// Once, or from then on.
    pub persistence: Persistence,
    /// The errno the call fails with (`EIO`; `ENOSPC` for a sparse
    /// volume file on a full disk).
    pub errno: i32,
}

impl Fault {
    /// `EIO` on the `nth` call of kind `op`.
    pub fn eio(op: DeviceOp, nth: u64, persistence: Persistence) -> Fault {
        Fault { op, nth, persistence, errno: libc::EIO }
    }
}

/// A device that passes calls to `inner` and fails the one a [`Fault`]
/// names. A failing write first writes half of its sectors, as a real
/// device may have before it gave up.
#[derive(Debug)]
pub struct FaultyDevice<D> {
    inner: D,
    fault: Mutex<Option<Fault>>,
    calls: [AtomicU64; 3],
    tripped: AtomicBool,
}

impl<D: Device> FaultyDevice<D> {
    /// Wrap `inner`; with `fault` `None` it only counts calls.
    pub fn new(inner: D, fault: Option<Fault>) -> FaultyDevice<D> {
        FaultyDevice { inner, fault: Mutex::new(fault), calls: Default::default(), tripped: AtomicBool::new(false) }
    }

    /// Calls made so far of kind `op`.
    pub fn calls(&self, op: DeviceOp) -> u64 {
        self.calls[op as usize].load(Ordering::Relaxed)
    }

    /// Whether the fault has fired.
    pub fn tripped(&self) -> bool {
        self.tripped.load(Ordering::Relaxed)
    }

    /// Fail as `fault` says from now on (its `nth` counts calls made
    /// since the device was made, these included).
    pub fn arm(&self, fault: Fault) {
        self.tripped.store(false, Ordering::Relaxed);
        *self.fault.lock() = Some(fault);
    }

    /// Stop failing (the device was replaced, the disk has room again).
    pub fn heal(&self) {
        *self.fault.lock() = None;
    }

    /// The device underneath.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Count a call of kind `op`; the error to fail it with, if it fails.
    fn call(&self, op: DeviceOp) -> Option<io::Error> {
        let n = self.calls[op as usize].fetch_add(1, Ordering::Relaxed) + 1;
        let f = (*self.fault.lock())?;
        let fails = f.op == op
            && match f.persistence {
                Persistence::Once => n == f.nth,
                Persistence::FromThenOn => n >= f.nth,
            };
        fails.then(|| {
            self.tripped.store(true, Ordering::Relaxed);
            io::Error::from_raw_os_error(f.errno)
        })
    }
}

impl<D: Device> Device for FaultyDevice<D> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match self.call(DeviceOp::Read) {
            Some(e) => Err(e),
            None => self.inner.read_at(offset, buf),
        }
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        match self.call(DeviceOp::Write) {
            Some(e) => {
                let sectors = buf.len() / SECTOR;
                if sectors > 1 {
                    self.inner.write_at(offset, &buf[..sectors / 2 * SECTOR])?;
                }
                Err(e)
            }
            None => self.inner.write_at(offset, buf),
        }
    }

    fn flush(&self) -> io::Result<()> {
        match self.call(DeviceOp::Flush) {
            Some(e) => Err(e),
            None => self.inner.flush(),
        }
    }

    fn holders(&self) -> Option<&crate::device::Holders> {
        self.inner.holders()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    #[test]
    fn the_chosen_call_fails_and_a_failing_write_is_torn() {
        let dev = FaultyDevice::new(MemDevice::new(8192), Some(Fault::eio(DeviceOp::Write, 2, Persistence::Once)));
        dev.write_at(0, &[1u8; 1024]).unwrap();
        let e = dev.write_at(1024, &[2u8; 2048]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert!(dev.tripped());
        dev.write_at(4096, &[3u8; 512]).unwrap();
        let mut b = [0u8; 2048];
        dev.read_at(1024, &mut b).unwrap();
        assert!(b[..1024].iter().all(|&x| x == 2) && b[1024..].iter().all(|&x| x == 0), "half the sectors landed");
        let dead =
            FaultyDevice::new(MemDevice::new(4096), Some(Fault::eio(DeviceOp::Flush, 1, Persistence::FromThenOn)));
        assert!(dead.flush().is_err() && dead.flush().is_err());
        dead.heal();
        dead.flush().unwrap();
        assert_eq!(dead.calls(DeviceOp::Flush), 3);
    }
}
