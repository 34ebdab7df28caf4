//! A mounted connection served by a pool of threads: the INIT handshake,
//! then each thread reads requests on its own clone of the connection,
//! hands them to the [`Handler`] and writes the answer.
//!
//! A request that panics (a bug) is answered EIO and reported to the
//! handler, which decides what the file system does next; the thread and
//! the mount carry on. A request that cannot be decoded is answered EIO
//! when its header can be read and dropped otherwise; neither stops the
//! server.

use super::abi::{init, Out, KERNEL_MINOR, KERNEL_VERSION};
use super::channel::{BusyPoll, Channel, Received};
use super::request::{BadRequest, Header, Op, Request};
use super::stats::{RequestStats, Transport};
use anyhow::{Context, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a handler did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Reply with the bytes left in `out`.
    Reply,
    /// Reply with this errno.
    Error(i32),
    /// Send nothing (FORGET and its kin expect no reply).
    Silent,
}

/// What the connection was agreed to do, for the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreed {
    /// The kernel's protocol minor version.
    pub minor: u32,
    /// Capability bits both sides have (abi::init).
    pub flags: u64,
    /// The largest WRITE payload.
    pub max_write: u32,
    /// The readahead the kernel will use, in bytes.
    pub max_readahead: u32,
}

/// What the server asks for at INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    /// Capability bits wanted (abi::init); the kernel's offer limits them.
    pub flags: u64,
    /// The largest WRITE payload (at most 1 MiB without raising the
    /// kernel's max_pages_limit).
    pub max_write: u32,
    /// The largest readahead, bytes.
    pub max_readahead: u32,
    /// Timestamp granularity in nanoseconds.
    pub time_gran: u32,
}

/// Serves requests.
pub trait Handler: Send + Sync {
    /// The connection is set up as `agreed`; called once, before any request.
    fn init(&self, agreed: &Agreed);
    /// Answer one request; a reply's body goes into `out` (empty on entry).
    fn handle(&self, h: &Header, op: Op<'_>, out: &mut Out) -> Answer;
    /// A request panicked: what the file system does about a bug.
    fn on_panic(&self, h: &Header);
}

/// The serving threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    /// How many.
    pub threads: usize,
    /// How long one of them keeps polling for a request before sleeping
    /// (zero: never).
    pub busy_poll: std::time::Duration,
    /// Take requests over io_uring too, if the kernel offers it (a thread
    /// per CPU beside `threads`; `uring`).
    pub uring: bool,
    /// Splice large READ replies through a pipe per thread (`splice`).
    pub splice: bool,
}

/// Shake hands on `ch` and serve with `pool` until the file system is
/// unmounted, counting every request in `stats`.
pub fn serve(ch: Channel, pool: Pool, mut wanted: Wanted, handler: &dyn Handler, stats: &RequestStats) -> Result<()> {
    if pool.uring {
        wanted.flags |= init::OVER_IO_URING;
    }
    let agreed = handshake(&ch, wanted)?;
    handler.init(&agreed);
    let uring_queues = if agreed.flags & init::OVER_IO_URING != 0 {
        super::uring::queue_count()?
    } else {
        if pool.uring {
            let why = if super::uring::enabled_in_kernel() {
                "the kernel did not offer it"
            } else {
                "the fuse module's enable_uring is off (Linux 6.14 on; root: echo Y > /sys/module/fuse/parameters/enable_uring)"
            };
            eprintln!("mballoc mount: no FUSE over io_uring: {why}; serving through /dev/fuse");
        }
        0
    };
    // The largest request: the header, a WRITE's arguments and its data.
    let buf_len = agreed.max_write as usize + 4096 + 256;
    let mut channels = vec![ch];
    for _ in 1..pool.threads.max(1) {
        channels.push(channels[0].clone_for_thread().context("cloning the FUSE connection for a thread")?);
    }
    let busy = &BusyPoll::new(pool.busy_poll);
    let setxattr_ext = agreed.flags & init::SETXATTR_EXT != 0;
    let session_fd = channels[0].file();
    std::thread::scope(|s| {
        let mut workers: Vec<_> = channels
            .iter()
            .enumerate()
            .map(|(i, ch)| {
                std::thread::Builder::new()
                    .name(format!("mballoc-fuse-{i}"))
                    .spawn_scoped(s, move || worker(ch, buf_len, setxattr_ext, pool.splice, busy, handler, stats))
                    .context("starting a FUSE thread")
            })
            .collect();
        for qid in 0..uring_queues {
            let qid = u16::try_from(qid).context("more CPUs than FUSE queues")?;
            workers.push(
                std::thread::Builder::new()
                    .name(format!("mballoc-uring-{qid}"))
                    .spawn_scoped(s, move || {
                        let served = super::uring::serve_queue(
                            session_fd,
                            qid,
                            pool.busy_poll,
                            buf_len,
                            setxattr_ext,
                            handler,
                            stats,
                        );
                        // Said now, not at unmount, and not an end of the
                        // mount: until every queue has registered the
                        // kernel sends everything through /dev/fuse (a
                        // kernel that refuses the entries); a queue that
                        // stops later leaves its CPU's requests waiting,
                        // which this explains.
                        if let Err(e) = served {
                            eprintln!("mballoc mount: FUSE io_uring queue {qid} stopped: {e:#}");
                        }
                        Ok(())
                    })
                    .context("starting a FUSE io_uring thread"),
            );
        }
        for w in workers {
            match w {
                Ok(h) => h.join().map_err(|_| anyhow::anyhow!("a FUSE thread died"))??,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })
}

fn handshake(ch: &Channel, wanted: Wanted) -> Result<Agreed> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match ch.receive(&mut buf, &BusyPoll::default()).context("reading the kernel's INIT")? {
            Received::Request(n) => n,
            Received::Gone => anyhow::bail!("the mount went away before INIT"),
        };
        let req = match Request::parse(&buf[..n], false) {
            Ok(r) => r,
            Err(_) => continue,
        };
        let Op::Init { major, minor, max_readahead, flags } = req.op else {
            // Nothing but INIT may come first; refuse it and wait.
            ch.reply(req.header.unique, -libc::EIO, &[])?;
            continue;
        };
        if major != KERNEL_VERSION {
            // Tell the kernel which major this server speaks; it retries
            // with that or gives up.
            let mut o = Out::default();
            o.u32(KERNEL_VERSION).u32(KERNEL_MINOR);
            ch.reply(req.header.unique, 0, &[&o.bytes])?;
            continue;
        }
        let agreed_flags = (flags & wanted.flags) | (flags & init::INIT_EXT);
        let max_pages = wanted.max_write.div_ceil(4096).max(1);
        let agreed = Agreed {
            minor: minor.min(KERNEL_MINOR),
            flags: agreed_flags,
            max_write: wanted.max_write,
            max_readahead: wanted.max_readahead.min(max_readahead),
        };
        let mut o = Out::default();
        o.u32(KERNEL_VERSION).u32(KERNEL_MINOR).u32(agreed.max_readahead).u32(agreed_flags as u32);
        // max_background, congestion_threshold: the kernel's defaults.
        o.u16(0).u16(0).u32(agreed.max_write).u32(wanted.time_gran);
        o.u16(max_pages.min(u32::from(u16::MAX)) as u16).u16(0).u32((agreed_flags >> 32) as u32);
        o.zeros(64 - o.bytes.len());
        ch.reply(req.header.unique, 0, &[&o.bytes])?;
        return Ok(agreed);
    }
}

fn worker(
    ch: &Channel,
    buf_len: usize,
    setxattr_ext: bool,
    splice: bool,
    busy: &BusyPoll,
    handler: &dyn Handler,
    stats: &RequestStats,
) -> Result<()> {
    let mut buf = vec![0u8; buf_len];
    let mut out = Out::with_capacity(4096);
    // A thread without a pipe answers every read from a buffer.
    if splice {
        match super::splice::ReplyPipe::new(super::splice::PIPE_BYTES) {
            Ok(p) => out.set_pipe(p),
            Err(e) => eprintln!("mballoc mount: no pipe to splice reads through ({e}); reads are copied"),
        }
    }
    loop {
        let n = match ch.receive(&mut buf, busy).context("reading a FUSE request")? {
            Received::Request(n) => n,
            Received::Gone => return Ok(()),
        };
        let req = match Request::parse(&buf[..n], setxattr_ext) {
            Ok(r) => r,
            Err(bad) => {
                eprintln!("mballoc mount: a {n}-byte read: {bad}");
                if let BadRequest::Arguments(h) = bad {
                    ch.reply(h.unique, -libc::EIO, &[])?;
                }
                continue;
            }
        };
        let h = req.header;
        out.clear_for(h.unique);
        let t0 = std::time::Instant::now();
        let answer = answer(handler, &h, req.op, &mut out);
        if !matches!(answer, Answer::Reply) {
            out.unpipe();
        }
        let (failed, sent) = match answer {
            Answer::Reply => (false, out.len()),
            Answer::Error(_) => (true, 0),
            Answer::Silent => (false, 0),
        };
        stats.record(Transport::DevFuse, h.opcode, n, sent, failed, t0.elapsed());
        match answer {
            Answer::Reply => match out.piped() {
                Some(pipe) => {
                    pipe.send(ch.file())?;
                    out.pipe_sent();
                    stats.spliced();
                }
                None => ch.reply(h.unique, 0, &out.body())?,
            },
            Answer::Error(e) => ch.reply(h.unique, -e, &[])?,
            Answer::Silent => {}
        }
    }
}

/// The handler's answer to one request; a panic (a bug) is answered EIO
/// and reported to the handler.
pub fn answer(handler: &dyn Handler, h: &Header, op: Op<'_>, out: &mut Out) -> Answer {
    let a = catch_unwind(AssertUnwindSafe(|| handler.handle(h, op, out)));
    a.unwrap_or_else(|_| {
        // The panic hook has printed where; the handler decides what a
        // bug means for the volume.
        eprintln!("mballoc mount: request {} (opcode {}) hit a bug; answered EIO", h.unique, h.opcode);
        let _ = catch_unwind(AssertUnwindSafe(|| handler.on_panic(h)));
        Answer::Error(libc::EIO)
    })
}
