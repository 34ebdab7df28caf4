//! FUSE over io_uring (Linux 6.14 on, when the fuse module's
//! `enable_uring` parameter is on): requests reach the server through one
//! io_uring per CPU instead of read(2) on `/dev/fuse`.
//!
//! Why: over `/dev/fuse` every request wakes a sleeping server thread on
//! whichever CPU the scheduler picks, and every reply wakes the caller
//! back; on a virtual machine a wakeup across CPUs costs tens of
//! microseconds, more than the server's work on a small request. Over
//! io_uring the kernel puts a request on the queue of the CPU the caller
//! runs on, whose thread here is pinned to that CPU, so the caller and the
//! server take turns on one CPU; and a reply and the wait for the next
//! request are one system call.
//!
//! The protocol (`include/uapi/linux/fuse.h`, 7.42): each queue (one per
//! possible CPU, all of them, or the kernel never switches over) gives
//! the kernel entries, each a header buffer ([`HEADER_BYTES`]: the
//! request's `fuse_in_header`, the operation's fixed structure, and the
//! entry's commit id and payload size) and a payload buffer (names, write
//! data, extensions; a reply's whole body), with a REGISTER command. The
//! command completes when the kernel has put a request in the entry; the
//! server answers by writing `fuse_out_header` and the body into the same
//! buffers and sending COMMIT_AND_FETCH, which hands the entry back for
//! the next request. FORGET, INTERRUPT and anything sent before every
//! queue is registered still come over `/dev/fuse`, so the ordinary
//! threads serve beside these.
//!
//! The buffers belong to the kernel from registration until the
//! connection ends (a command completes with an error then); a queue that
//! stops for any other reason leaks them rather than free memory the
//! kernel may still write.
#![allow(unsafe_code)]

use super::abi::{Out, OUT_HEADER};
use super::request::{BadRequest, Op, Request};
use super::session::{answer, Answer, Handler};
use super::stats::{RequestStats, Transport};
use anyhow::{Context, Result};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::fs::File;
use std::os::fd::AsRawFd;

/// `struct fuse_uring_req_header`: `in_out` (128 bytes), `op_in` (128) and
/// `fuse_uring_ent_in_out` (32).
pub const HEADER_BYTES: usize = 288;
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// Requests the kernel may hand one queue before the server answers.
const DEPTH: usize = 4;

/// Whether the running kernel serves FUSE over io_uring at all.
pub fn enabled_in_kernel() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|s| s.trim() == "Y")
}

/// The kernel's queue count: one per possible CPU (`/sys/devices/system/
/// cpu/possible`, a list such as `0-1` or `0,2-3`).
pub fn queue_count() -> Result<usize> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/possible").context("reading the possible CPUs")?;
    let mut last = None;
    for part in list.trim().split(',') {
        let hi = part.rsplit('-').next().unwrap_or(part);
        last = last.max(Some(hi.parse::<usize>().with_context(|| format!("possible CPUs {list:?}"))?));
    }
    last.map(|n| n + 1).context("no possible CPU")
}

/// One entry's buffers. Boxed so their addresses never move; the iovec
/// array is read by the kernel at registration only.
struct Entry {
    header: Box<[u8; HEADER_BYTES]>,
    /// Never resized: the kernel holds its address.
    payload: Vec<u8>,
    iov: Box<[libc::iovec; 2]>,
}

impl Entry {
    fn new(payload_bytes: usize) -> Box<Entry> {
        let mut e = Box::new(Entry {
            header: Box::new([0; HEADER_BYTES]),
            payload: vec![0u8; payload_bytes],
            iov: Box::new([libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 2]),
        });
        e.iov[0] = libc::iovec { iov_base: e.header.as_mut_ptr().cast(), iov_len: HEADER_BYTES };
        e.iov[1] = libc::iovec { iov_base: e.payload.as_mut_ptr().cast(), iov_len: e.payload.len() };
        e
    }

    fn u64_at(&self, at: usize) -> u64 {
        u64::from_ne_bytes(self.header[at..at + 8].try_into().expect("8 bytes"))
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_ne_bytes(self.header[at..at + 4].try_into().expect("4 bytes"))
    }
}

/// A FUSE command for entry `index` of queue `qid`: `struct
/// fuse_uring_cmd_req` in the SQE's command area, the entry's iovecs at
/// `addr` with a length of 2 (REGISTER reads them; COMMIT_AND_FETCH
/// ignores them).
fn command(fd: &File, cmd: u32, qid: u16, commit_id: u64, entry: &Entry, index: usize) -> squeue::Entry128 {
    let mut req = [0u8; 80];
    req[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    req[16..18].copy_from_slice(&qid.to_ne_bytes());
    let sqe = opcode::UringCmd80::new(types::Fd(fd.as_raw_fd()), cmd)
        .cmd(req)
        .addr(Some(entry.iov.as_ptr() as u64))
        .build()
        .user_data(index as u64);
    // SAFETY: `Entry128` is `#[repr(C)]` around the kernel's 128-byte
    // `io_uring_sqe` (64 bytes) and 64 more command bytes; `len` is the
    // u32 at byte 24 of `io_uring_sqe`, which `UringCmd80` leaves zero and
    // has no setter for. Both conversions are between types of exactly
    // 128 bytes with no invalid bit patterns in the bytes touched.
    unsafe {
        let mut raw: [u8; 128] = std::mem::transmute(sqe);
        raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
        std::mem::transmute::<[u8; 128], squeue::Entry128>(raw)
    }
}

/// How a queue ended.
enum End {
    /// The connection is gone: the kernel let go of every buffer.
    Gone,
    /// The queue stopped while the connection lives.
    Failed(anyhow::Error),
}

/// Serve queue `qid` (pinned to CPU `qid`) until the connection ends,
/// polling for `busy_poll` after each request before sleeping.
pub fn serve_queue(
    fd: &File,
    qid: u16,
    busy_poll: std::time::Duration,
    payload_bytes: usize,
    setxattr_ext: bool,
    handler: &dyn Handler,
    stats: &RequestStats,
) -> Result<()> {
    let mut cpus = nix::sched::CpuSet::new();
    // A CPU that is offline (or outside our set) serves nobody; its queue
    // is registered all the same, unpinned.
    if cpus.set(usize::from(qid)).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpus);
    }
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> =
        IoUring::builder().build(2 * DEPTH as u32).context("creating an io_uring for FUSE")?;
    let mut entries: Vec<Box<Entry>> = (0..DEPTH).map(|_| Entry::new(payload_bytes)).collect();
    match run(&mut ring, fd, qid, busy_poll, &mut entries, setxattr_ext, handler, stats) {
        End::Gone => Ok(()),
        End::Failed(e) => {
            // The kernel may still hold these buffers.
            std::mem::forget(entries);
            std::mem::forget(ring);
            Err(e)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    fd: &File,
    qid: u16,
    busy_poll: std::time::Duration,
    entries: &mut [Box<Entry>],
    setxattr_ext: bool,
    handler: &dyn Handler,
    stats: &RequestStats,
) -> End {
    for (i, e) in entries.iter().enumerate() {
        let sqe = command(fd, CMD_REGISTER, qid, 0, e, i);
        // SAFETY: the entry's buffers and iovecs are boxed, live until the
        // connection ends (or are leaked), and are not touched here while
        // the kernel owns them (until its completion arrives).
        if unsafe { ring.submission().push(&sqe) }.is_err() {
            return End::Failed(anyhow::anyhow!("the io_uring's submission queue is full"));
        }
    }
    let mut out = Out::with_capacity(4096);
    let mut done = Vec::with_capacity(DEPTH);
    loop {
        if !busy_poll.is_zero() {
            // Hand back the answers, then look for the next request for a
            // while before sleeping: each look enters the kernel, where
            // the work that fills an entry runs (see `BusyPoll` for why).
            let start = std::time::Instant::now();
            while ring.submit_and_wait(0).is_ok() && ring.completion().is_empty() && start.elapsed() < busy_poll {
                std::thread::yield_now();
            }
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return End::Failed(anyhow::Error::new(e).context("waiting on the FUSE io_uring")),
        }
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data() as usize, c.result())));
        for &(i, result) in &done {
            if result < 0 {
                return match -result {
                    // The connection ended (unmount, abort): every command
                    // is completed with one of these.
                    libc::ENOTCONN | libc::ENODEV | libc::ECANCELED => End::Gone,
                    e => End::Failed(anyhow::anyhow!(
                        "the kernel refused a FUSE io_uring command: {}",
                        std::io::Error::from_raw_os_error(e)
                    )),
                };
            }
            let Some(e) = entries.get_mut(i) else {
                return End::Failed(anyhow::anyhow!("a completion for entry {i}, which does not exist"));
            };
            let commit_id = e.u64_at(ENT_IN_OUT + 8);
            serve_entry(e, &mut out, setxattr_ext, handler, stats);
            let sqe = command(fd, CMD_COMMIT_AND_FETCH, qid, commit_id, e, i);
            // SAFETY: as at registration; the entry goes back to the kernel.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                return End::Failed(anyhow::anyhow!("the io_uring's submission queue is full"));
            }
        }
    }
}

/// Answer the request in `e`, leaving the reply in its buffers.
fn serve_entry(e: &mut Entry, out: &mut Out, setxattr_ext: bool, handler: &dyn Handler, stats: &RequestStats) {
    let payload_len = (e.u32_at(ENT_IN_OUT + 16) as usize).min(e.payload.len());
    out.clear();
    let t0 = std::time::Instant::now();
    let parsed = {
        let (header, fixed) = (&e.header[..OP_IN], &e.header[OP_IN..ENT_IN_OUT]);
        Request::parse_split(header, fixed, &e.payload[..payload_len], setxattr_ext)
    };
    let (h, a) = match parsed {
        // A read's data goes straight into the payload buffer, which the
        // reply is sent from (the request needs none of it).
        Ok(Request { header: h, op: Op::Read { fh, offset, size } }) if size as usize <= e.payload.len() => {
            let kept = e.payload.as_ptr();
            out.swap_data(&mut e.payload);
            let a = answer(handler, &h, Op::Read { fh, offset, size }, out);
            let n = out.data_len();
            out.swap_data(&mut e.payload);
            assert_eq!(e.payload.as_ptr(), kept, "the payload buffer the kernel holds moved");
            let fields = out.bytes.len();
            if matches!(a, Answer::Reply) && fields + n <= e.payload.len() {
                e.payload.copy_within(..n, fields);
                e.payload[..fields].copy_from_slice(&out.bytes);
            }
            stats.record(
                Transport::Uring,
                h.opcode,
                h.len as usize,
                fields + n,
                matches!(a, Answer::Error(_)),
                t0.elapsed(),
            );
            return finish(e, h.unique, a, fields + n);
        }
        Ok(req) => {
            let h = req.header;
            (h, answer(handler, &h, req.op, out))
        }
        Err(bad) => {
            eprintln!("mballoc mount: an io_uring entry: {bad}");
            // With no header there is nothing to answer to; the entry
            // still goes back.
            let unique = match bad {
                BadRequest::Arguments(h) => h.unique,
                BadRequest::Framing => 0,
            };
            return reply_header(e, unique, -libc::EIO, 0);
        }
    };
    stats.record(Transport::Uring, h.opcode, h.len as usize, out.len(), matches!(a, Answer::Error(_)), t0.elapsed());
    let mut len = 0;
    if matches!(a, Answer::Reply) {
        for part in out.body() {
            let Some(dst) = e.payload.get_mut(len..len + part.len()) else {
                // A reply larger than the buffer the kernel sized: a bug.
                return reply_header(e, h.unique, -libc::EIO, 0);
            };
            dst.copy_from_slice(part);
            len += part.len();
        }
    }
    finish(e, h.unique, a, len)
}

/// The reply header for answer `a` with `len` bytes of body in place.
fn finish(e: &mut Entry, unique: u64, a: Answer, len: usize) {
    match a {
        Answer::Reply if len <= e.payload.len() => reply_header(e, unique, 0, len),
        Answer::Reply => reply_header(e, unique, -libc::EIO, 0),
        Answer::Error(errno) => reply_header(e, unique, -errno, 0),
        // Requests that expect no answer never come over the ring; the
        // entry goes back all the same.
        Answer::Silent => reply_header(e, unique, 0, 0),
    }
}

/// `fuse_out_header` in `in_out` and the payload size in the entry.
fn reply_header(e: &mut Entry, unique: u64, error: i32, payload: usize) {
    let h = &mut e.header;
    h[0..4].copy_from_slice(&((OUT_HEADER + payload) as u32).to_ne_bytes());
    h[4..8].copy_from_slice(&error.to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    h[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(payload as u32).to_ne_bytes());
}
