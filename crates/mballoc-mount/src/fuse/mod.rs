//! The mount's own FUSE transport: the kernel's wire protocol read and
//! written directly on `/dev/fuse`, without libfuse.
//!
//! Why not a crate: the server needs requests no published Rust FUSE crate
//! passes on (`FUSE_SYNCFS`, which makes `sync(2)` durable on fuseblk
//! mounts; `FUSE_TMPFILE` for `O_TMPFILE`; `FUSE_STATX`), a mount as
//! fuseblk, notifications to drop the kernel's cached attributes when the
//! server changes them itself (set-ID bits cleared by a write), and the
//! freedom to answer a request that hit a bug with EIO instead of losing
//! the thread. The protocol is small and documented in
//! `include/uapi/linux/fuse.h`; this module is its reader and writer
//! (`abi`, `request`), the connection (`channel`), mounting (`mount`),
//! the serving threads (`session`) and replies spliced through a pipe
//! (`splice`).

pub mod abi;
pub mod channel;
pub mod mount;
pub mod request;
pub mod session;
pub mod splice;
pub mod stats;
mod sys;
pub mod uring;

pub use sys::attach_loop;
