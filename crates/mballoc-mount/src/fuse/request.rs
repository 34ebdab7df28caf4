//! One request from the kernel: its header (who asks, about which node)
//! and its operation with the arguments decoded, borrowing names and
//! write payloads from the read buffer.

use super::abi::{Args, Malformed, Opcode, IN_HEADER};

/// Who made a request, and about which node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

/// `setattr`'s fields, each present when its bit was set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetattrIn {
    pub valid: u32,
    pub fh: u64,
    pub size: u64,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// A decoded operation. Each carries the fields the protocol sends,
/// whether or not the server acts on them today.
#[derive(Debug)]
#[allow(dead_code)]
pub enum Op<'a> {
    Lookup {
        name: &'a [u8],
    },
    Forget {
        nlookup: u64,
    },
    BatchForget,
    Getattr {
        fh: Option<u64>,
    },
    Setattr(SetattrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        mode: u32,
        rdev: u32,
        umask: u32,
        name: &'a [u8],
    },
    Mkdir {
        mode: u32,
        umask: u32,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        flags: u32,
        name: &'a [u8],
        newname: &'a [u8],
    },
    Link {
        oldnodeid: u64,
        name: &'a [u8],
    },
    Open {
        flags: i32,
        open_flags: u32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        write_flags: u32,
        data: &'a [u8],
    },
    Statfs,
    Release {
        fh: u64,
    },
    Fsync {
        fh: u64,
        datasync: bool,
    },
    Setxattr {
        name: &'a [u8],
        value: &'a [u8],
        flags: i32,
        setxattr_flags: u32,
    },
    Getxattr {
        name: &'a [u8],
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush,
    Init {
        major: u32,
        minor: u32,
        max_readahead: u32,
        flags: u64,
    },
    Opendir,
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
        plus: bool,
    },
    Releasedir {
        fh: u64,
    },
    Fsyncdir,
    Access {
        mask: u32,
    },
    Create {
        flags: i32,
        mode: u32,
        umask: u32,
        open_flags: u32,
        name: &'a [u8],
    },
    Tmpfile {
        flags: i32,
        mode: u32,
        umask: u32,
    },
    Interrupt,
    Destroy,
    Ioctl {
        fh: u64,
        flags: u32,
        cmd: u32,
        in_data: &'a [u8],
        out_size: u32,
    },
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: i32,
    },
    Lseek {
        fh: u64,
        offset: u64,
        whence: u32,
    },
    CopyFileRange {
        fh_in: u64,
        off_in: u64,
        nodeid_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    },
    Syncfs,
    Statx {
        fh: Option<u64>,
    },
    /// Known but not served (locks, poll, bmap): the kernel falls back
    /// or stops asking on ENOSYS.
    Unsupported(Opcode),
    /// An opcode this server has never heard of.
    Unknown(u32),
}

/// A request: the header and the operation.
#[derive(Debug)]
pub struct Request<'a> {
    pub header: Header,
    pub op: Op<'a>,
}

/// Why a buffer is not a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRequest {
    /// Too short for a header, or its length disagrees with the bytes read.
    Framing,
    /// The header is fine (the request can be answered EIO), its
    /// arguments are not.
    Arguments(Header),
}

impl std::fmt::Display for BadRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadRequest::Framing => f.write_str("not a FUSE request"),
            BadRequest::Arguments(h) => {
                write!(f, "request {} (opcode {}) has malformed arguments; answered EIO", h.unique, h.opcode)
            }
        }
    }
}

const GETATTR_FH: u32 = 1;

impl<'a> Request<'a> {
    /// Decode the request held in `buf` (exactly the bytes one read gave).
    /// `setxattr_ext`: whether INIT agreed on the longer setxattr header.
    pub fn parse(buf: &'a [u8], setxattr_ext: bool) -> Result<Request<'a>, BadRequest> {
        if buf.len() < IN_HEADER {
            return Err(BadRequest::Framing);
        }
        let (header, extlen) = parse_header(buf)?;
        if header.len as usize != buf.len() {
            return Err(BadRequest::Framing);
        }
        // Extensions (security contexts, supplementary groups) trail the
        // arguments; this server negotiates none, but skips any it is sent.
        let body_end = buf.len().checked_sub(usize::from(extlen) * 8).filter(|&e| e >= IN_HEADER);
        let Some(body_end) = body_end else { return Err(BadRequest::Arguments(header)) };
        let args = Args::new(&buf[IN_HEADER..body_end]);
        let op = decode(header.opcode, args, setxattr_ext).map_err(|_| BadRequest::Arguments(header))?;
        Ok(Request { header, op })
    }

    /// Decode a request that came over io_uring: the header in `header`,
    /// the operation's fixed structure at the start of `fixed`, names,
    /// data and extensions in `payload` (exactly the bytes the kernel
    /// put there).
    pub fn parse_split(
        header: &'a [u8],
        fixed: &'a [u8],
        payload: &'a [u8],
        setxattr_ext: bool,
    ) -> Result<Request<'a>, BadRequest> {
        let (header, extlen) = parse_header(header)?;
        let body_end = payload.len().checked_sub(usize::from(extlen) * 8);
        let Some(body_end) = body_end else { return Err(BadRequest::Arguments(header)) };
        let args = Args::split(fixed, &payload[..body_end]);
        let op = decode(header.opcode, args, setxattr_ext).map_err(|_| BadRequest::Arguments(header))?;
        Ok(Request { header, op })
    }
}

/// The header at the start of `buf`, and the length of the extensions
/// (in 8-byte units) the request carries.
fn parse_header(buf: &[u8]) -> Result<(Header, u16), BadRequest> {
    let mut a = Args::new(buf);
    (|| -> Result<(Header, u16), Malformed> {
        let (len, opcode, unique, nodeid) = (a.u32()?, a.u32()?, a.u64()?, a.u64()?);
        let (uid, gid, pid, extlen) = (a.u32()?, a.u32()?, a.u32()?, a.u16()?);
        a.skip(2)?;
        Ok((Header { len, opcode, unique, nodeid, uid, gid, pid }, extlen))
    })()
    .map_err(|_| BadRequest::Framing)
}

fn decode(opcode: u32, mut a: Args<'_>, setxattr_ext: bool) -> Result<Op<'_>, Malformed> {
    let Some(code) = Opcode::from_u32(opcode) else { return Ok(Op::Unknown(opcode)) };
    use Opcode as O;
    Ok(match code {
        O::Lookup => Op::Lookup { name: a.name()? },
        O::Forget => Op::Forget { nlookup: a.u64()? },
        O::BatchForget => Op::BatchForget,
        O::Getattr | O::Statx => {
            let flags = a.u32()?;
            a.skip(4)?;
            let fh = a.u64()?;
            let fh = (flags & GETATTR_FH != 0).then_some(fh);
            if code == O::Getattr {
                Op::Getattr { fh }
            } else {
                Op::Statx { fh }
            }
        }
        O::Setattr => {
            let valid = a.u32()?;
            a.skip(4)?;
            let (fh, size) = (a.u64()?, a.u64()?);
            a.skip(8)?; // lock_owner
            let (at, mt, ct) = (a.u64()? as i64, a.u64()? as i64, a.u64()? as i64);
            let (atn, mtn, ctn) = (a.u32()?, a.u32()?, a.u32()?);
            let mode = a.u32()?;
            a.skip(4)?;
            let (uid, gid) = (a.u32()?, a.u32()?);
            Op::Setattr(SetattrIn {
                valid,
                fh,
                size,
                atime: (at, atn),
                mtime: (mt, mtn),
                ctime: (ct, ctn),
                mode,
                uid,
                gid,
            })
        }
        O::Readlink => Op::Readlink,
        O::Symlink => {
            let name = a.name()?;
            Op::Symlink { name, target: a.name()? }
        }
        O::Mknod => {
            let (mode, rdev, umask) = (a.u32()?, a.u32()?, a.u32()?);
            a.skip(4)?;
            Op::Mknod { mode, rdev, umask, name: a.name()? }
        }
        O::Mkdir => {
            let (mode, umask) = (a.u32()?, a.u32()?);
            Op::Mkdir { mode, umask, name: a.name()? }
        }
        O::Unlink => Op::Unlink { name: a.name()? },
        O::Rmdir => Op::Rmdir { name: a.name()? },
        O::Rename | O::Rename2 => {
            let newdir = a.u64()?;
            let flags = if code == O::Rename2 {
                let f = a.u32()?;
                a.skip(4)?;
                f
            } else {
                0
            };
            let name = a.name()?;
            Op::Rename { newdir, flags, name, newname: a.name()? }
        }
        O::Link => {
            let oldnodeid = a.u64()?;
            Op::Link { oldnodeid, name: a.name()? }
        }
        O::Open => Op::Open { flags: a.u32()? as i32, open_flags: a.u32()? },
        O::Opendir => Op::Opendir,
        O::Read | O::Readdir | O::Readdirplus => {
            let (fh, offset, size) = (a.u64()?, a.u64()?, a.u32()?);
            match code {
                O::Read => Op::Read { fh, offset, size },
                _ => Op::Readdir { fh, offset, size, plus: code == O::Readdirplus },
            }
        }
        O::Write => {
            let (fh, offset, size, write_flags) = (a.u64()?, a.u64()?, a.u32()?, a.u32()?);
            a.skip(16)?; // lock_owner, flags, padding
            Op::Write { fh, offset, write_flags, data: a.bytes(size as usize)? }
        }
        O::Statfs => Op::Statfs,
        O::Release => Op::Release { fh: a.u64()? },
        O::Releasedir => Op::Releasedir { fh: a.u64()? },
        O::Fsync => {
            let fh = a.u64()?;
            Op::Fsync { fh, datasync: a.u32()? & super::abi::FSYNC_FDATASYNC != 0 }
        }
        O::Fsyncdir => Op::Fsyncdir,
        O::Setxattr => {
            let (size, flags) = (a.u32()?, a.u32()? as i32);
            let setxattr_flags = if setxattr_ext {
                let f = a.u32()?;
                a.skip(4)?;
                f
            } else {
                0
            };
            let name = a.name()?;
            Op::Setxattr { name, value: a.bytes(size as usize)?, flags, setxattr_flags }
        }
        O::Getxattr => {
            let size = a.u32()?;
            a.skip(4)?;
            Op::Getxattr { name: a.name()?, size }
        }
        O::Listxattr => Op::Listxattr { size: a.u32()? },
        O::Removexattr => Op::Removexattr { name: a.name()? },
        O::Flush => Op::Flush,
        O::Init => {
            let (major, minor, max_readahead, flags) = (a.u32()?, a.u32()?, a.u32()?, a.u32()?);
            // flags2 arrives from 7.36 on; older kernels send 16 bytes.
            let flags2 = a.u32().unwrap_or(0);
            Op::Init { major, minor, max_readahead, flags: u64::from(flags) | u64::from(flags2) << 32 }
        }
        O::Access => Op::Access { mask: a.u32()? },
        O::Create | O::Tmpfile => {
            let (flags, mode, umask, open_flags) = (a.u32()? as i32, a.u32()?, a.u32()?, a.u32()?);
            if code == O::Tmpfile {
                Op::Tmpfile { flags, mode, umask }
            } else {
                Op::Create { flags, mode, umask, open_flags, name: a.name()? }
            }
        }
        O::Interrupt => Op::Interrupt,
        O::Destroy => Op::Destroy,
        O::Ioctl => {
            let (fh, flags, cmd) = (a.u64()?, a.u32()?, a.u32()?);
            a.skip(8)?; // arg: a pointer in the caller, meaningless here
            let (in_size, out_size) = (a.u32()?, a.u32()?);
            Op::Ioctl { fh, flags, cmd, in_data: a.bytes(in_size as usize)?, out_size }
        }
        O::Fallocate => {
            let (fh, offset, length, mode) = (a.u64()?, a.u64()?, a.u64()?, a.u32()? as i32);
            Op::Fallocate { fh, offset, length, mode }
        }
        O::Lseek => {
            let (fh, offset, whence) = (a.u64()?, a.u64()?, a.u32()?);
            Op::Lseek { fh, offset, whence }
        }
        O::CopyFileRange => {
            let (fh_in, off_in, nodeid_out, fh_out, off_out, len) =
                (a.u64()?, a.u64()?, a.u64()?, a.u64()?, a.u64()?, a.u64()?);
            Op::CopyFileRange { fh_in, off_in, nodeid_out, fh_out, off_out, len }
        }
        O::Syncfs => Op::Syncfs,
        O::Getlk | O::Setlk | O::Setlkw | O::Bmap | O::Poll => Op::Unsupported(code),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(opcode: u32, body: &[u8]) -> Vec<u8> {
        let len = (IN_HEADER + body.len()) as u32;
        let mut b = Vec::new();
        for v in [len, opcode] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [7u64, 42] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [1000u32, 1000, 99] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn a_lookup_and_a_rename_decode() {
        let b = request(1, b"name\0");
        let r = Request::parse(&b, false).unwrap();
        assert_eq!((r.header.unique, r.header.nodeid, r.header.uid), (7, 42, 1000));
        assert!(matches!(r.op, Op::Lookup { name: b"name" }));
        let mut body = 5u64.to_ne_bytes().to_vec();
        body.extend_from_slice(&2u32.to_ne_bytes());
        body.extend_from_slice(&[0; 4]);
        body.extend_from_slice(b"a\0b\0");
        let b = request(45, &body);
        let r = Request::parse(&b, false).unwrap();
        assert!(matches!(r.op, Op::Rename { newdir: 5, flags: 2, name: b"a", newname: b"b" }));
    }

    #[test]
    fn requests_split_as_io_uring_delivers_them_decode_the_same() {
        // A write: fixed fields in the operation buffer (with whatever
        // follows them there), the data in the payload.
        let header = request(16, b"");
        let mut write_in = vec![0xAAu8; 128];
        write_in[..8].copy_from_slice(&3u64.to_ne_bytes());
        write_in[8..16].copy_from_slice(&4096u64.to_ne_bytes());
        write_in[16..20].copy_from_slice(&5u32.to_ne_bytes());
        write_in[20..24].copy_from_slice(&0u32.to_ne_bytes());
        let r = Request::parse_split(&header, &write_in, b"hello", false).unwrap();
        assert!(matches!(r.op, Op::Write { fh: 3, offset: 4096, write_flags: 0, data: b"hello" }), "{:?}", r.op);
        // A lookup has no fixed structure: its name is the payload.
        let lookup = request(1, b"");
        let r = Request::parse_split(&lookup, &[0xAA; 128], b"name\0", false).unwrap();
        assert!(matches!(r.op, Op::Lookup { name: b"name" }));
        // A create: four fixed words, then the name.
        let mut fixed = vec![0u8; 128];
        for (i, v) in [0o101u32, 0o644, 0o022, 0].iter().enumerate() {
            fixed[4 * i..4 * i + 4].copy_from_slice(&v.to_ne_bytes());
        }
        let create = request(35, b"");
        let r = Request::parse_split(&create, &fixed, b"f\0", false).unwrap();
        assert!(matches!(r.op, Op::Create { flags: 0o101, mode: 0o644, umask: 0o022, name: b"f", .. }));
        // Short payloads are errors with the header kept for the answer.
        let short = Request::parse_split(&header, &write_in, b"hell", false);
        assert!(matches!(short, Err(BadRequest::Arguments(h)) if h.unique == 7));
        assert_eq!(Request::parse_split(&[0; 8], &fixed, b"", false).unwrap_err(), BadRequest::Framing);
    }

    #[test]
    fn garbled_requests_are_errors_not_panics() {
        assert_eq!(Request::parse(&[0; 10], false).unwrap_err(), BadRequest::Framing);
        let mut b = request(1, b"unterminated");
        assert!(matches!(Request::parse(&b, false), Err(BadRequest::Arguments(h)) if h.unique == 7));
        b[0] = 0xff; // a length that disagrees with the bytes
        assert_eq!(Request::parse(&b, false).unwrap_err(), BadRequest::Framing);
        // A write claiming more data than it carries.
        let mut body = vec![0u8; 40];
        body[16..20].copy_from_slice(&100u32.to_ne_bytes());
        assert!(matches!(Request::parse(&request(16, &body), false), Err(BadRequest::Arguments(_))));
        assert!(matches!(Request::parse(&request(999, b""), false).unwrap().op, Op::Unknown(999)));
    }
}
