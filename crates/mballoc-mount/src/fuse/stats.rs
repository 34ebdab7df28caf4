//! Per-request counters: for each opcode, how many requests came, how many
//! failed, the bytes each way and the time spent serving them, so that a
//! mount's speed can be explained request by request; and which way
//! requests came (`/dev/fuse` or io_uring) and how many READ replies were
//! spliced. Every serving thread adds to relaxed atomics; a reader sees a
//! slightly moving total.

use super::abi::Opcode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Opcodes counted one by one (every FUSE opcode is below this).
const SLOTS: usize = 64;

#[derive(Default)]
struct Slot {
    count: AtomicU64,
    errors: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    nanos: AtomicU64,
}

/// The way a request came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Read from `/dev/fuse`.
    DevFuse,
    /// Taken from an io_uring queue.
    Uring,
}

/// The counters of one mount.
pub struct RequestStats {
    slots: Vec<Slot>,
    /// Requests by [`Transport`], in its order.
    via: [AtomicU64; 2],
    /// READ replies spliced from the device (`fuse/splice.rs`).
    spliced: AtomicU64,
}

impl Default for RequestStats {
    fn default() -> Self {
        RequestStats {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            via: Default::default(),
            spliced: AtomicU64::new(0),
        }
    }
}

impl RequestStats {
    /// One request of `opcode` that came `via`, served in `took`,
    /// `bytes_in` long, answered with `bytes_out` bytes or an error.
    pub fn record(&self, via: Transport, opcode: u32, bytes_in: usize, bytes_out: usize, failed: bool, took: Duration) {
        self.via[via as usize].fetch_add(1, Ordering::Relaxed);
        let s = &self.slots[(opcode as usize).min(SLOTS - 1)];
        s.count.fetch_add(1, Ordering::Relaxed);
        if failed {
            s.errors.fetch_add(1, Ordering::Relaxed);
        }
        s.bytes_in.fetch_add(bytes_in as u64, Ordering::Relaxed);
        s.bytes_out.fetch_add(bytes_out as u64, Ordering::Relaxed);
        s.nanos.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    }

    /// A READ reply went through the pipe.
    pub fn spliced(&self) {
        self.spliced.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests counted so far of `opcode`.
    #[cfg(test)]
    pub fn count(&self, opcode: Opcode) -> u64 {
        self.slots[opcode as usize].count.load(Ordering::Relaxed)
    }

    /// A table: one line per opcode seen, busiest first.
    pub fn report(&self) -> String {
        let mut rows: Vec<(u32, [u64; 5])> = self
            .slots
            .iter()
            .enumerate()
            .map(|(op, s)| {
                let v = [&s.count, &s.errors, &s.bytes_in, &s.bytes_out, &s.nanos].map(|a| a.load(Ordering::Relaxed));
                (op as u32, v)
            })
            .filter(|(_, v)| v[0] > 0)
            .collect();
        rows.sort_by_key(|(_, v)| std::cmp::Reverse(v[4]));
        let mut out = format!(
            "{:<16} {:>10} {:>8} {:>12} {:>12} {:>10} {:>9}\n",
            "request", "count", "errors", "MiB in", "MiB out", "server s", "µs each"
        );
        for (op, [count, errors, bin, bout, nanos]) in rows {
            let name = Opcode::from_u32(op).map_or_else(|| format!("opcode {op}"), |o| format!("{o:?}"));
            out.push_str(&format!(
                "{:<16} {:>10} {:>8} {:>12.1} {:>12.1} {:>10.3} {:>9.1}\n",
                name,
                count,
                errors,
                bin as f64 / (1 << 20) as f64,
                bout as f64 / (1 << 20) as f64,
                nanos as f64 / 1e9,
                nanos as f64 / 1e3 / count as f64
            ));
        }
        let [dev, uring] = self.via.each_ref().map(|a| a.load(Ordering::Relaxed));
        let spliced = self.spliced.load(Ordering::Relaxed);
        out.push_str(&format!(
            "requests over /dev/fuse {dev}, over io_uring {uring}; READ replies spliced {spliced}\n"
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_opcode() {
        let s = RequestStats::default();
        s.record(Transport::DevFuse, Opcode::Write as u32, 4096 + 80, 24, false, Duration::from_micros(30));
        s.record(Transport::Uring, Opcode::Write as u32, 80, 16, true, Duration::from_micros(10));
        s.record(Transport::DevFuse, Opcode::Lookup as u32, 50, 144, false, Duration::from_micros(5));
        s.record(Transport::DevFuse, Opcode::Read as u32, 80, 1 << 20, false, Duration::from_micros(90));
        s.spliced();
        assert_eq!((s.count(Opcode::Write), s.count(Opcode::Lookup), s.count(Opcode::Read)), (2, 1, 1));
        let r = s.report();
        assert!(r.lines().nth(1).unwrap().starts_with("Read "), "{r}");
        assert_eq!(r.lines().count(), 5);
        assert_eq!(r.lines().last().unwrap(), "requests over /dev/fuse 3, over io_uring 1; READ replies spliced 1");
    }
}
