//! Traces: a workload expanded, one operation per line, after a header
//! naming the volume. A trace replays exactly what a workload (or a
//! recording) did, stream by stream. The lines:
//!
//! * `STREAM OP PATH` for create, open, fsync, close, unlink and mkdir;
//! * `STREAM OP PATH OFFSET LEN` for fallocate, fallocate-keep-size,
//!   write, read, punch, and truncate (`OFFSET` is the size, `LEN` 0);
//! * `STREAM rename PATH TO` and `STREAM link PATH TO`;
//! * `STREAM signal GATE` and `STREAM wait GATE COUNT`: job ordering (the
//!   stream waits until gate `GATE` has been signalled `COUNT` times).
//!
//! Paths are relative to the workload's root and hold no spaces.
//!
//! ```text
//! # mballoc trace 1
//! volume 1073741824
//! block-size 4096
//! interleave threads
//! 0 create job.0.0
//! 0 fallocate job.0.0 0 4096
//! 0 rename job.0.0 done/job.0.0
//! 0 signal 0
//! 1 wait 0 1
//! 1 open done/job.0.0
//! 1 read done/job.0.0 0 4096
//! ```

use crate::workload::{Interleave, Op, OpKind, StreamSpec, Workload, WorkloadError};
use std::collections::HashMap;
use std::sync::Arc;

/// An expanded workload: streams of listed operations.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Volume size in bytes.
    pub volume: u64,
    /// Block size in bytes.
    pub block_size: u32,
    /// How the streams are issued.
    pub interleave: Interleave,
    /// File names, by slot.
    pub files: Vec<String>,
    /// Each stream's operations, in order.
    pub streams: Vec<Vec<Op>>,
}

const TRACE_MAGIC: &str = "# mballoc trace 1";

impl Trace {
    /// Expand a workload; fails if a job repeats forever or the expansion
    /// exceeds `max_ops`.
    pub fn from_workload(w: &Workload, max_ops: usize) -> Result<Trace, WorkloadError> {
        let mut streams = Vec::new();
        let mut total = 0usize;
        for s in w.streams() {
            if s.endless() {
                return Err(WorkloadError::Invalid {
                    name: w.name.clone(),
                    why: "a timed job has no finite trace".into(),
                });
            }
            let ops: Vec<Op> = s.ops().take(max_ops.saturating_sub(total) + 1).collect();
            total += ops.len();
            if total > max_ops {
                return Err(WorkloadError::Invalid {
                    name: w.name.clone(),
                    why: format!("more than {max_ops} operations"),
                });
            }
            streams.push(ops);
        }
        Ok(Trace {
            volume: w.volume.0,
            block_size: w.block_size,
            interleave: w.interleave,
            files: w.file_names(),
            streams,
        })
    }

    /// The text form.
    pub fn write(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        writeln!(out, "{TRACE_MAGIC}")?;
        writeln!(out, "volume {}", self.volume)?;
        writeln!(out, "block-size {}", self.block_size)?;
        let il = match self.interleave {
            Interleave::Threads => "threads",
            Interleave::PinnedThreads => "pinned-threads",
            Interleave::InTurn => "in-turn",
        };
        writeln!(out, "interleave {il}")?;
        for (i, ops) in self.streams.iter().enumerate() {
            for op in ops {
                let kind = op.kind.name();
                if op.kind == OpKind::Signal {
                    writeln!(out, "{i} {kind} {}", op.file)?;
                    continue;
                }
                if op.kind == OpKind::Wait {
                    writeln!(out, "{i} {kind} {} {}", op.file, op.offset)?;
                    continue;
                }
                let name = &self.files[op.file as usize];
                if op.kind.takes_range() {
                    writeln!(out, "{i} {kind} {name} {} {}", op.offset, op.len)?;
                } else if op.kind.takes_target() {
                    writeln!(out, "{i} {kind} {name} {}", self.files[op.to as usize])?;
                } else {
                    writeln!(out, "{i} {kind} {name}")?;
                }
            }
        }
        Ok(())
    }

    /// Whether `text` is a trace (it opens with the trace header of any
    /// version, so that another version gets the trace parser's error), not
    /// a TOML workload.
    pub fn is_trace(text: &str) -> bool {
        text.starts_with("# mballoc trace")
    }

    /// Parse the text form.
    pub fn parse(text: &str) -> Result<Trace, WorkloadError> {
        let err = |line: usize, why: String| WorkloadError::Trace { line, why };
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, l)) if l.trim() == TRACE_MAGIC => {}
            _ => return Err(err(1, format!("expected {TRACE_MAGIC:?}"))),
        }
        let mut t =
            Trace { volume: 0, block_size: 4096, interleave: Interleave::Threads, files: vec![], streams: vec![] };
        let mut slots: HashMap<String, u32> = HashMap::new();
        let num = |n: usize, s: Option<&str>, what: &str| -> Result<u64, WorkloadError> {
            s.and_then(|s| s.parse().ok()).ok_or_else(|| err(n, format!("expected {what}")))
        };
        for (i, line) in lines {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut w = line.split_whitespace();
            let first = w.next().expect("non-empty line has a word");
            match first {
                "volume" => t.volume = num(n, w.next(), "a byte count")?,
                "block-size" => {
                    t.block_size = u32::try_from(num(n, w.next(), "a block size")?)
                        .map_err(|_| err(n, "block size too large".into()))?
                }
                "interleave" => {
                    t.interleave = match w.next() {
                        Some("threads") => Interleave::Threads,
                        Some("pinned-threads") => Interleave::PinnedThreads,
                        Some("in-turn") => Interleave::InTurn,
                        other => return Err(err(n, format!("unknown interleave {other:?}"))),
                    }
                }
                _ => {
                    let stream = num(n, Some(first), "a stream number")? as usize;
                    if stream > 1 << 20 {
                        return Err(err(n, format!("stream {stream} is out of range")));
                    }
                    let kind_name = w.next().ok_or_else(|| err(n, "missing operation".into()))?;
                    let kind = OpKind::ALL
                        .into_iter()
                        .find(|k| k.name() == kind_name)
                        .ok_or_else(|| err(n, format!("unknown operation {kind_name:?}")))?;
                    let mut slot_of = |name: &str| -> u32 {
                        let next_slot = t.files.len() as u32;
                        *slots.entry(name.to_string()).or_insert_with(|| {
                            t.files.push(name.to_string());
                            next_slot
                        })
                    };
                    let mut op = Op::on(kind, 0);
                    if kind.is_gate() {
                        op.file = u32::try_from(num(n, w.next(), "a gate number")?)
                            .map_err(|_| err(n, "gate number out of range".into()))?;
                        if kind == OpKind::Wait {
                            op.offset = num(n, w.next(), "a signal count")?;
                        }
                    } else {
                        let name = w.next().ok_or_else(|| err(n, "missing file name".into()))?;
                        op.file = slot_of(name);
                        if kind.takes_range() {
                            op.offset = num(n, w.next(), "an offset")?;
                            op.len = num(n, w.next(), "a length")?;
                            if kind != OpKind::Truncate && op.len == 0 {
                                return Err(err(n, format!("{kind_name} with zero length")));
                            }
                        } else if kind.takes_target() {
                            let to = w.next().ok_or_else(|| err(n, "missing target name".into()))?;
                            op.to = slot_of(to);
                        }
                    }
                    if w.next().is_some() {
                        return Err(err(n, "trailing words".into()));
                    }
                    if t.streams.len() <= stream {
                        t.streams.resize_with(stream + 1, Vec::new);
                    }
                    t.streams[stream].push(op);
                }
            }
        }
        if t.volume == 0 {
            return Err(err(1, "no `volume` line".into()));
        }
        if !t.block_size.is_power_of_two() || !(1024..=65536).contains(&t.block_size) {
            return Err(err(1, format!("block size {} is not a power of two from 1024 to 65536", t.block_size)));
        }
        if t.volume < 16 * u64::from(t.block_size) {
            return Err(err(1, format!("volume {} is too small", t.volume)));
        }
        Ok(t)
    }

    /// The streams, ready to run.
    pub fn stream_specs(&self) -> Vec<StreamSpec> {
        self.streams.iter().map(|s| StreamSpec::Listed(Arc::new(s.clone()))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::APPENDERS;

    #[test]
    fn trace_round_trips() {
        let w = Workload::from_toml(APPENDERS).unwrap();
        let t = Trace::from_workload(&w, 1000).unwrap();
        let mut text = Vec::new();
        t.write(&mut text).unwrap();
        let back = Trace::parse(std::str::from_utf8(&text).unwrap()).unwrap();
        assert_eq!(back, t);
        assert!(Trace::from_workload(&w, 10).is_err());
        for il in ["threads", "pinned-threads"] {
            let w = Workload::from_toml(&APPENDERS.replace("in-turn", il)).unwrap();
            let t = Trace::from_workload(&w, 1000).unwrap();
            let mut text = Vec::new();
            t.write(&mut text).unwrap();
            let back = Trace::parse(std::str::from_utf8(&text).unwrap()).unwrap();
            assert_eq!((back.interleave, &back), (w.interleave, &t));
        }
    }

    #[test]
    fn every_op_round_trips_through_a_trace() {
        let w = Workload::from_toml(include_str!("../../../examples/workloads/publish.toml")).unwrap();
        let t = Trace::from_workload(&w, 100_000).unwrap();
        let mut text = Vec::new();
        t.write(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        for line in
            ["0 mkdir done", "2 wait 0 2", "0 signal 0", "2 rename tmp/writer.0.0 done/0.0", "4 read done/0.0 0 786432"]
        {
            assert!(text.contains(&format!("{line}\n")), "{line} not in\n{text}");
        }
        let back = Trace::parse(&text).unwrap();
        // Slots are numbered in order of first use in a parsed trace: the
        // same operations on the same names.
        let named = |t: &Trace| -> Vec<String> {
            t.streams
                .iter()
                .flatten()
                .map(|o| {
                    if o.kind.is_gate() {
                        format!("{o:?}")
                    } else {
                        format!(
                            "{:?} {} {} {} {}",
                            o.kind,
                            t.files[o.file as usize],
                            o.offset,
                            o.len,
                            if o.kind.takes_target() { &t.files[o.to as usize] } else { "" }
                        )
                    }
                })
                .collect()
        };
        assert_eq!(named(&back), named(&t));
    }

    #[test]
    fn bad_traces_are_typed_errors() {
        for bad in [
            "",
            "# mballoc trace 1\n0 create f",
            "# mballoc trace 1\nvolume 1M\n0 write f 0",
            "# mballoc trace 1\nvolume 1M\n0 write f 0 0",
            "# mballoc trace 1\nvolume 1M\nx create f",
            "# mballoc trace 1\nvolume 1M\n0 fly f",
            "# mballoc trace 1\nvolume 1M\n99999999 create f",
            "# mballoc trace 1\nvolume 1073741824\nblock-size 0\n0 create f",
            "# mballoc trace 1\nvolume 1073741824\nblock-size 3000\n0 create f",
            "# mballoc trace 1\nvolume 4096\n0 create f",
            "# mballoc trace 1\nvolume 1M\n0 rename f",
            "# mballoc trace 1\nvolume 1M\n0 wait g 1",
            "# mballoc trace 1\nvolume 1M\n0 wait 0",
        ] {
            assert!(Trace::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Trace::parse("# mballoc trace 1\nvolume 1073741824\nblock-size 1024\n0 create f").is_ok());
    }
}
