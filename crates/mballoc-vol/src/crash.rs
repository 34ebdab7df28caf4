//! Crash simulation: a device that records every write and flush, and
//! rebuilds the device as it would be after a crash at any point — every
//! write before the point whole, the write at the point torn after some
//! sectors, nothing after.

use crate::device::{Device, MemDevice};
use crate::format::SECTOR;
use parking_lot::Mutex;
use std::io;

/// One recorded device call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `data` written at byte `offset`.
    Write {
        /// Byte offset.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// A cache flush.
    Flush,
}

/// A memory device that keeps a log of what was done to it.
#[derive(Debug)]
pub struct RecordingDevice {
    base: Vec<u8>,
    live: MemDevice,
    events: Mutex<Vec<Event>>,
}

impl RecordingDevice {
    /// Start from `image`.
    pub fn new(image: Vec<u8>) -> RecordingDevice {
        RecordingDevice { live: MemDevice::from_bytes(image.clone()), base: image, events: Mutex::new(Vec::new()) }
    }

    /// Events so far.
    pub fn events(&self) -> usize {
        self.events.lock().len()
    }

    /// The image before any event.
    pub fn base(&self) -> &[u8] {
        &self.base
    }

    /// Apply events `[from, to)` whole to `image`.
    pub fn apply(&self, image: &mut [u8], from: usize, to: usize) {
        for e in &self.events.lock()[from..to] {
            if let Event::Write { offset, data } = e {
                image[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
            }
        }
    }

    /// Apply the first `sectors` sectors of event `at` if it is a write;
    /// returns how many sectors it has (0 for a flush).
    pub fn tear(&self, image: &mut [u8], at: usize, sectors: usize) -> usize {
        match &self.events.lock()[at] {
            Event::Write { offset, data } => {
                let n = (sectors * SECTOR).min(data.len());
                image[*offset as usize..*offset as usize + n].copy_from_slice(&data[..n]);
                data.len().div_ceil(SECTOR)
            }
            Event::Flush => 0,
        }
    }

    /// Sectors in event `at` (0 for a flush).
    pub fn sectors(&self, at: usize) -> usize {
        match &self.events.lock()[at] {
            Event::Write { data, .. } => data.len().div_ceil(SECTOR),
            Event::Flush => 0,
        }
    }
}

impl Device for RecordingDevice {
    fn len(&self) -> u64 {
        self.live.len()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.live.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.live.write_at(offset, buf)?;
        self.events.lock().push(Event::Write { offset, data: buf.to_vec() });
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.events.lock().push(Event::Flush);
        Ok(())
    }

    fn holders(&self) -> Option<&crate::device::Holders> {
        self.live.holders()
    }
}
