//! The FUSE wire format (Linux's `include/uapi/linux/fuse.h`, protocol
//! 7.x): opcodes, flag bits, and the layouts of the structures this
//! server reads and writes, as byte offsets. Every structure is read
//! field by field from the request bytes and written field by field into
//! the reply, in the machine's byte order (the kernel and the server share
//! it), so no memory is reinterpreted and a short or garbled request is a
//! typed error, never undefined behaviour.

/// The protocol's major version; the minor this server speaks.
pub const KERNEL_VERSION: u32 = 7;
pub const KERNEL_MINOR: u32 = 40;

/// Request opcodes this server knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Opcode {
    Lookup = 1,
    Forget = 2,
    Getattr = 3,
    Setattr = 4,
    Readlink = 5,
    Symlink = 6,
    Mknod = 8,
    Mkdir = 9,
    Unlink = 10,
    Rmdir = 11,
    Rename = 12,
    Link = 13,
    Open = 14,
    Read = 15,
    Write = 16,
    Statfs = 17,
    Release = 18,
    Fsync = 20,
    Setxattr = 21,
    Getxattr = 22,
    Listxattr = 23,
    Removexattr = 24,
    Flush = 25,
    Init = 26,
    Opendir = 27,
    Readdir = 28,
    Releasedir = 29,
    Fsyncdir = 30,
    Getlk = 31,
    Setlk = 32,
    Setlkw = 33,
    Access = 34,
    Create = 35,
    Interrupt = 36,
    Bmap = 37,
    Destroy = 38,
    Ioctl = 39,
    Poll = 40,
    BatchForget = 42,
    Fallocate = 43,
    Readdirplus = 44,
    Rename2 = 45,
    Lseek = 46,
    CopyFileRange = 47,
    Syncfs = 50,
    Tmpfile = 51,
    Statx = 52,
}

impl Opcode {
    /// The opcode for a number, `None` for one this server does not know.
    pub fn from_u32(n: u32) -> Option<Opcode> {
        use Opcode::*;
        Some(match n {
            1 => Lookup,
            2 => Forget,
            3 => Getattr,
            4 => Setattr,
            5 => Readlink,
            6 => Symlink,
            8 => Mknod,
            9 => Mkdir,
            10 => Unlink,
            11 => Rmdir,
            12 => Rename,
            13 => Link,
            14 => Open,
            15 => Read,
            16 => Write,
            17 => Statfs,
            18 => Release,
            20 => Fsync,
            21 => Setxattr,
            22 => Getxattr,
            23 => Listxattr,
            24 => Removexattr,
            25 => Flush,
            26 => Init,
            27 => Opendir,
            28 => Readdir,
            29 => Releasedir,
            30 => Fsyncdir,
            31 => Getlk,
            32 => Setlk,
            33 => Setlkw,
            34 => Access,
            35 => Create,
            36 => Interrupt,
            37 => Bmap,
            38 => Destroy,
            39 => Ioctl,
            40 => Poll,
            42 => BatchForget,
            43 => Fallocate,
            44 => Readdirplus,
            45 => Rename2,
            46 => Lseek,
            47 => CopyFileRange,
            50 => Syncfs,
            51 => Tmpfile,
            52 => Statx,
            _ => return None,
        })
    }
}

/// `fuse_init_in.flags` / `fuse_init_out.flags` (the low word) and
/// `flags2` (the high word, shifted up by 32 here).
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    pub const EXPORT_SUPPORT: u64 = 1 << 4;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DONT_MASK: u64 = 1 << 6;
    pub const HAS_IOCTL_DIR: u64 = 1 << 11;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const POSIX_ACL: u64 = 1 << 20;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const SETXATTR_EXT: u64 = 1 << 29;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    /// Requests may come over io_uring (`fuse/uring.rs`).
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// `fuse_open_out.open_flags`.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
/// `fuse_open_out.open_flags`: keep the page cache the file has.
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;

/// `fuse_setattr_in.valid`.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_write_in.write_flags`: the writer may not keep set-ID bits.
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_open_in.open_flags`: an `O_TRUNC` open by a writer that may not
/// keep set-ID bits.
pub const OPEN_KILL_SUIDGID: u32 = 1 << 0;
/// `fuse_setxattr_in.setxattr_flags`: an ACL change that drops the
/// set-group-ID bit.
pub const SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;
/// `fuse_fsync_in.fsync_flags`: data only.
pub const FSYNC_FDATASYNC: u32 = 1 << 0;

/// A notification (sent with `unique` 0): drop an inode's cached attributes.
pub const NOTIFY_INVAL_INODE: i32 = 2;

/// Sizes of the fixed parts.
pub const IN_HEADER: usize = 40;
pub const OUT_HEADER: usize = 16;
pub const DIRENT: usize = 24;

/// Reads a request's fixed fields and strings in order.
#[derive(Debug)]
pub struct Args<'a> {
    bytes: &'a [u8],
    /// Where names and data are when they do not follow the fixed fields:
    /// over io_uring the kernel puts an operation's fixed structure in
    /// one buffer and the rest in another.
    payload: Option<&'a [u8]>,
}

/// A request shorter than its opcode's structure, or a name without its
/// terminating zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

impl<'a> Args<'a> {
    pub fn new(bytes: &'a [u8]) -> Args<'a> {
        Args { bytes, payload: None }
    }

    /// Fixed fields from `fixed`, names and data from `payload`.
    pub fn split(fixed: &'a [u8], payload: &'a [u8]) -> Args<'a> {
        Args { bytes: fixed, payload: Some(payload) }
    }

    /// Names and data come next: go on in the payload, if it is apart.
    fn variable(&mut self) {
        if let Some(p) = self.payload.take() {
            self.bytes = p;
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.bytes.len() < n {
            return Err(Malformed);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub fn u16(&mut self) -> Result<u16, Malformed> {
        Ok(u16::from_ne_bytes(self.take(2)?.try_into().map_err(|_| Malformed)?))
    }

    pub fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_ne_bytes(self.take(4)?.try_into().map_err(|_| Malformed)?))
    }

    pub fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_ne_bytes(self.take(8)?.try_into().map_err(|_| Malformed)?))
    }

    /// Skip `n` bytes (padding, fields this server does not read).
    pub fn skip(&mut self, n: usize) -> Result<(), Malformed> {
        self.take(n).map(|_| ())
    }

    /// A zero-terminated name, without its zero.
    pub fn name(&mut self) -> Result<&'a [u8], Malformed> {
        self.variable();
        let end = self.bytes.iter().position(|&b| b == 0).ok_or(Malformed)?;
        let name = self.take(end)?;
        self.take(1)?;
        Ok(name)
    }

    /// Exactly `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        self.variable();
        self.take(n)
    }
}

/// Builds a reply body field by field.
#[derive(Debug, Default)]
pub struct Out {
    pub bytes: Vec<u8>,
    /// A READ's data, sent after `bytes`: kept from request to request at
    /// its largest length, so a read is not preceded by zeroing a
    /// megabyte (a sixth of the server's time on cold sequential reads).
    data: Vec<u8>,
    data_len: usize,
    /// The serving thread's pipe (`/dev/fuse` only), the request being
    /// answered, and whether the reply is queued in the pipe instead.
    pipe: Option<super::splice::ReplyPipe>,
    unique: u64,
    piped: bool,
}

/// Reads shorter than this are answered from a buffer: splicing costs
/// more system calls, which only a large reply's saved copy pays for.
pub const SPLICE_MIN: usize = 64 << 10;

impl Out {
    pub fn with_capacity(n: usize) -> Out {
        Out { bytes: Vec::with_capacity(n), ..Out::default() }
    }

    /// Empty, for the next request (the data buffer keeps its memory).
    pub fn clear(&mut self) {
        assert!(!self.piped, "a spliced reply was sent or thrown away before the next request");
        self.bytes.clear();
        self.data_len = 0;
    }

    /// Empty, for request `unique`.
    pub fn clear_for(&mut self, unique: u64) {
        self.clear();
        self.unique = unique;
    }

    /// Give this thread's replies a pipe to splice large reads through.
    pub fn set_pipe(&mut self, pipe: super::splice::ReplyPipe) {
        self.pipe = Some(pipe);
    }

    /// The pipe to queue a reply of `n` data bytes in, and the request's
    /// unique: where there is a pipe, the reply is large enough to gain
    /// and small enough to fit. The reply is then the pipe's (see
    /// [`Out::piped`]) until [`Out::unpipe`].
    pub fn pipe_for(&mut self, n: usize) -> Option<(&mut super::splice::ReplyPipe, u64)> {
        let pipe = self.pipe.as_mut()?;
        // A slot for the header, and one for a piece's partial page.
        if n < SPLICE_MIN || n + 2 * 4096 > pipe.capacity() {
            return None;
        }
        self.piped = true;
        Some((pipe, self.unique))
    }

    /// The pipe holding this request's reply, if it was queued there.
    pub fn piped(&mut self) -> Option<&mut super::splice::ReplyPipe> {
        if self.piped {
            self.pipe.as_mut()
        } else {
            None
        }
    }

    /// The reply is not the pipe's after all: what it queued is thrown
    /// away.
    pub fn unpipe(&mut self) {
        if let Some(p) = self.pipe.as_mut().filter(|_| self.piped) {
            p.discard();
        }
        self.piped = false;
    }

    /// Sent: the next request may queue in the pipe again.
    pub fn pipe_sent(&mut self) {
        debug_assert!(self.pipe.as_ref().is_none_or(|p| p.queued() == 0), "a sent pipe is empty");
        self.piped = false;
    }

    /// `n` bytes of data to fill (whatever an earlier reply left there);
    /// all of them are sent unless [`Out::keep_data`] says fewer.
    pub fn data_mut(&mut self, n: usize) -> &mut [u8] {
        if self.data.len() < n {
            self.data.resize(n, 0);
        }
        self.data_len = n;
        &mut self.data[..n]
    }

    /// Send only the first `n` bytes of the data.
    pub fn keep_data(&mut self, n: usize) {
        assert!(n <= self.data_len, "{n} bytes of {} filled", self.data_len);
        self.data_len = n;
    }

    /// Trade the data buffer for `buf` (which then holds the old one);
    /// the data is empty afterwards. A READ over io_uring is read straight
    /// into the entry's payload buffer this way.
    pub fn swap_data(&mut self, buf: &mut Vec<u8>) {
        std::mem::swap(&mut self.data, buf);
        self.data_len = 0;
    }

    /// Bytes of data filled.
    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// The reply's body: the fields, then the data.
    pub fn body(&self) -> [&[u8]; 2] {
        [&self.bytes, &self.data[..self.data_len]]
    }

    /// Bytes in the reply's body.
    pub fn len(&self) -> usize {
        match self.pipe.as_ref().filter(|_| self.piped) {
            Some(p) => p.queued().saturating_sub(OUT_HEADER),
            None => self.bytes.len() + self.data_len,
        }
    }

    pub fn u16(&mut self, v: u16) -> &mut Out {
        self.bytes.extend_from_slice(&v.to_ne_bytes());
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Out {
        self.bytes.extend_from_slice(&v.to_ne_bytes());
        self
    }

    pub fn i32(&mut self, v: i32) -> &mut Out {
        self.bytes.extend_from_slice(&v.to_ne_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Out {
        self.bytes.extend_from_slice(&v.to_ne_bytes());
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Out {
        self.bytes.extend_from_slice(&v.to_ne_bytes());
        self
    }

    pub fn zeros(&mut self, n: usize) -> &mut Out {
        self.bytes.resize(self.bytes.len() + n, 0);
        self
    }

    pub fn raw(&mut self, b: &[u8]) -> &mut Out {
        self.bytes.extend_from_slice(b);
        self
    }

    /// Pad to the next multiple of 8 (directory records).
    pub fn align8(&mut self) -> &mut Out {
        let pad = self.bytes.len().next_multiple_of(8) - self.bytes.len();
        self.zeros(pad)
    }
}

/// A file's attributes as `struct fuse_attr` carries them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    /// Seconds and nanoseconds since the epoch.
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    /// Birth time, where the file system keeps one.
    pub btime: Option<(i64, u32)>,
    /// Type and permission bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

impl Attr {
    /// `struct fuse_attr`.
    pub fn put(&self, o: &mut Out) {
        o.u64(self.ino).u64(self.size).u64(self.blocks);
        o.u64(self.atime.0 as u64).u64(self.mtime.0 as u64).u64(self.ctime.0 as u64);
        o.u32(self.atime.1).u32(self.mtime.1).u32(self.ctime.1);
        o.u32(self.mode).u32(self.nlink).u32(self.uid).u32(self.gid).u32(self.rdev).u32(self.blksize).u32(0);
    }

    /// `struct fuse_statx` (256 bytes), with `attributes` (statx's
    /// `STATX_ATTR_*`) and the mask of those the file system knows.
    pub fn put_statx(&self, o: &mut Out, attributes: u64, attributes_mask: u64) {
        // The basic fields, and the birth time where there is one.
        const STATX_BASIC_STATS: u32 = 0x7ff;
        const STATX_BTIME: u32 = 0x800;
        let start = o.bytes.len();
        let mask = STATX_BASIC_STATS | if self.btime.is_some() { STATX_BTIME } else { 0 };
        o.u32(mask).u32(self.blksize).u64(attributes);
        o.u32(self.nlink).u32(self.uid).u32(self.gid).u16(self.mode as u16).u16(0);
        o.u64(self.ino).u64(self.size).u64(self.blocks).u64(attributes_mask);
        for (s, ns) in [self.atime, self.btime.unwrap_or((0, 0)), self.ctime, self.mtime] {
            o.i64(s).u32(ns).i32(0);
        }
        let (major, minor) = (self.rdev >> 8 & 0xfff, (self.rdev & 0xff) | (self.rdev >> 12 & 0xfff00));
        o.u32(major).u32(minor).u32(0).u32(0);
        o.zeros(256 - (o.bytes.len() - start));
    }
}

/// How long the kernel may keep a name or attributes, as seconds and
/// nanoseconds.
pub fn valid(d: std::time::Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

/// `struct fuse_entry_out`.
pub fn put_entry(
    o: &mut Out,
    attr: &Attr,
    generation: u64,
    entry_ttl: std::time::Duration,
    attr_ttl: std::time::Duration,
) {
    let (es, ens) = valid(entry_ttl);
    let (as_, ans) = valid(attr_ttl);
    o.u64(attr.ino).u64(generation).u64(es).u64(as_).u32(ens).u32(ans);
    attr.put(o);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_the_kernels_sizes() {
        let a = Attr::default();
        let mut o = Out::default();
        a.put(&mut o);
        assert_eq!(o.bytes.len(), 88);
        let mut o = Out::default();
        put_entry(&mut o, &a, 0, std::time::Duration::ZERO, std::time::Duration::ZERO);
        assert_eq!(o.bytes.len(), 128);
        let mut o = Out::default();
        a.put_statx(&mut o, 0, 0);
        assert_eq!(o.bytes.len(), 256);
    }

    #[test]
    fn short_requests_and_unterminated_names_are_malformed() {
        let mut a = Args::new(&[1, 0, 0]);
        assert_eq!(a.u32(), Err(Malformed));
        let mut a = Args::new(b"abc");
        assert_eq!(a.name(), Err(Malformed));
        let mut a = Args::new(b"ab\0cd\0");
        assert_eq!(a.name(), Ok(&b"ab"[..]));
        assert_eq!(a.name(), Ok(&b"cd"[..]));
        assert_eq!(a.name(), Err(Malformed));
    }

    #[test]
    fn every_known_opcode_round_trips() {
        for n in 0..100 {
            if let Some(op) = Opcode::from_u32(n) {
                assert_eq!(op as u32, n);
            }
        }
    }
}
