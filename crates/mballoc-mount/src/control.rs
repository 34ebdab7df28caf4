//! Requests about an inode's attributes and about the volume as a whole:
//! getattr, statx, setattr, extended attributes, statfs, and the ioctls
//! (chattr's flags, the label, FITRIM, shutdown).

use crate::fuse::abi::{fattr, Out, SETXATTR_ACL_KILL_SGID};
use crate::server::{errno, Caller, Done, VolumeFs, TTL};
use crate::stat::{file_attr, join_ns, put_attr_out, statx_attributes};
use mballoc_fs::FileId;
use mballoc_vol::{SetAttr, Time, VolError, XattrSet, NAME_MAX};
use std::sync::atomic::Ordering;

/// `FS_IOC_GETFLAGS` and `FS_IOC_SETFLAGS` (64- and 32-bit encodings).
const GETFLAGS: [u32; 2] = [0x8008_6601, 0x8004_6601];
const SETFLAGS: [u32; 2] = [0x4008_6602, 0x4004_6602];
/// `FS_IOC_FSGETXATTR` and `FS_IOC_FSSETXATTR`: the same flags in
/// `struct fsxattr` (28 bytes), which the kernel reads before it sets any.
const FSGETXATTR: u32 = 0x801C_581F;
const FSSETXATTR: u32 = 0x401C_5820;
/// chattr flags and their `fsx_xflags` bits (sync, immutable, append,
/// nodump, noatime).
const XFLAGS: [(u32, u32); 5] = [(0x08, 0x20), (0x10, 0x08), (0x20, 0x10), (0x40, 0x80), (0x80, 0x40)];
/// `FS_IOC_GETFSLABEL` / `FS_IOC_SETFSLABEL` (a 256-byte buffer).
const GETFSLABEL: u32 = 0x8100_9431;
const SETFSLABEL: u32 = 0x4100_9432;
/// `FITRIM` (`struct fstrim_range`: start, len, minlen).
const FITRIM: u32 = 0xC018_5879;
/// `XFS_IOC_GOINGDOWN` (what xfstests' godown sends) and ext4's
/// `EXT4_IOC_SHUTDOWN`: take the volume down as a crash would.
const GOINGDOWN: u32 = 0x8004_587D;

impl VolumeFs {
    pub(crate) fn getattr(&self, ino: u64, out: &mut Out) -> Done {
        put_attr_out(out, &self.vol, ino, TTL).map_err(|e| errno(&e))
    }

    pub(crate) fn statx(&self, ino: u64, out: &mut Out) -> Done {
        let (a, _, flags) = file_attr(&self.vol, ino).map_err(|e| errno(&e))?;
        let (s, ns) = crate::fuse::abi::valid(TTL);
        // attr_valid, its nanoseconds, flags, two spare words.
        out.u64(s).u32(ns).u32(0).u64(0).u64(0);
        let (bits, mask) = statx_attributes(flags);
        a.put_statx(out, bits, mask);
        Ok(())
    }

    pub(crate) fn setattr(&self, c: Caller, ino: u64, s: &crate::fuse::request::SetattrIn, out: &mut Out) -> Done {
        let r = (|| {
            if s.valid & fattr::SIZE != 0 {
                self.truncate(c, ino, s.size, s.valid)?;
            }
            let time =
                |now: u32, t: (i64, u32)| if s.valid & now != 0 { Time::Now } else { Time::At(join_ns(t.0, t.1)) };
            let set = SetAttr {
                mode: (s.valid & fattr::MODE != 0).then_some(s.mode),
                uid: (s.valid & fattr::UID != 0).then_some(s.uid),
                gid: (s.valid & fattr::GID != 0).then_some(s.gid),
                atime: (s.valid & fattr::ATIME != 0).then(|| time(fattr::ATIME_NOW, s.atime)),
                mtime: (s.valid & fattr::MTIME != 0).then(|| time(fattr::MTIME_NOW, s.mtime)),
            };
            if set != SetAttr::default() {
                self.vol.set_attr_by(FileId(ino), set, c.vol())?;
            }
            Ok(())
        })();
        r.map_err(|e: VolError| errno(&e))?;
        self.getattr(ino, out)
    }

    pub(crate) fn statfs(&self, out: &mut Out) -> Done {
        let u = self.vol.usage();
        out.u64(u.data_blocks).u64(u.free_blocks).u64(u.free_blocks).u64(u.inodes).u64(u.free_inodes);
        out.u32(u.block_size).u32(NAME_MAX as u32).u32(u.block_size).u32(0).zeros(24);
        Ok(())
    }

    pub(crate) fn setxattr(&self, c: Caller, ino: u64, name: &[u8], value: &[u8], flags: i32, ext: u32) -> Done {
        let how = match flags {
            0 => XattrSet::Any,
            libc::XATTR_CREATE => XattrSet::Create,
            libc::XATTR_REPLACE => XattrSet::Replace,
            _ => return Err(libc::EINVAL),
        };
        let kill_sgid = ext & SETXATTR_ACL_KILL_SGID != 0;
        match self.vol.set_xattr_at(FileId(ino), name, value, how) {
            // A name in no namespace the volume keeps: ext4 answers EOPNOTSUPP.
            Err(VolError::InvalidName { .. }) => return Err(libc::EOPNOTSUPP),
            Err(e) => return Err(errno(&e)),
            Ok(()) => {}
        }
        if kill_sgid {
            // An access ACL set by a caller outside the file's group
            // without CAP_FSETID: the set-group-ID bit goes, as on ext4.
            let a = self.vol.attr(FileId(ino)).map_err(|e| errno(&e))?;
            if a.mode & 0o2000 != 0 {
                let set = SetAttr { mode: Some(a.mode & 0o7777 & !0o2000), ..SetAttr::default() };
                self.vol.set_attr_by(FileId(ino), set, c.vol()).map_err(|e| errno(&e))?;
            }
        }
        self.invalidate(ino);
        Ok(())
    }

    pub(crate) fn getxattr(&self, ino: u64, name: &[u8], size: u32, out: &mut Out) -> Done {
        let v = self.vol.get_xattr_at(FileId(ino), name).map_err(|e| errno(&e))?;
        sized(out, size, &v)
    }

    pub(crate) fn listxattr(&self, ino: u64, size: u32, out: &mut Out) -> Done {
        let names = self.vol.list_xattrs_at(FileId(ino)).map_err(|e| errno(&e))?;
        let mut all = Vec::new();
        for n in names {
            all.extend_from_slice(&n);
            all.push(0);
        }
        sized(out, size, &all)
    }

    pub(crate) fn removexattr(&self, ino: u64, name: &[u8]) -> Done {
        self.vol.remove_xattr_at(FileId(ino), name).map_err(|e| errno(&e))?;
        self.invalidate(ino);
        Ok(())
    }

    pub(crate) fn ioctl(&self, ino: u64, cmd: u32, in_data: &[u8], out_size: u32, out: &mut Out) -> Done {
        let word = |b: &[u8]| b.get(..4).map(|w| u32::from_ne_bytes(w.try_into().expect("four bytes")));
        // struct fuse_ioctl_out: result, flags, in_iovs, out_iovs; then the data.
        let reply = |out: &mut Out, data: &[u8]| {
            out.i32(0).u32(0).u32(0).u32(0);
            let n = data.len().min(out_size as usize);
            out.raw(&data[..n]).zeros(out_size as usize - n);
        };
        let changes = SETFLAGS.contains(&cmd) || [FSSETXATTR, SETFSLABEL, FITRIM].contains(&cmd);
        if changes && self.vfs.read_only() {
            return Err(libc::EROFS);
        }
        match cmd {
            c if GETFLAGS.contains(&c) || c == FSGETXATTR => {
                let f = self.vol.flags(FileId(ino)).map_err(|e| errno(&e))?;
                let value =
                    if c == FSGETXATTR { XFLAGS.iter().filter(|(fl, _)| f & fl != 0).map(|(_, x)| x).sum() } else { f };
                reply(out, &value.to_ne_bytes());
                Ok(())
            }
            c if SETFLAGS.contains(&c) => {
                let f = word(in_data).ok_or(libc::EINVAL)?;
                self.set_flags(ino, f)?;
                reply(out, &[]);
                Ok(())
            }
            FSSETXATTR => {
                let x = word(in_data).ok_or(libc::EINVAL)?;
                let known: u32 = XFLAGS.iter().map(|(_, x)| x).sum();
                if x & !known != 0 {
                    return Err(libc::EOPNOTSUPP);
                }
                self.set_flags(ino, XFLAGS.iter().filter(|(_, xf)| x & xf != 0).map(|(fl, _)| fl).sum())?;
                reply(out, &[]);
                Ok(())
            }
            GETFSLABEL => {
                let mut label = [0u8; 256];
                let l = self.vol.label();
                label[..l.len()].copy_from_slice(&l);
                reply(out, &label);
                Ok(())
            }
            SETFSLABEL => {
                let raw = in_data.get(..256).ok_or(libc::EINVAL)?;
                let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                self.vol.set_label(&raw[..end]).map_err(|e| errno(&e))?;
                reply(out, &[]);
                Ok(())
            }
            FITRIM => {
                let field =
                    |i: usize| in_data.get(i * 8..i * 8 + 8).map(|b| u64::from_ne_bytes(b.try_into().expect("8")));
                let (start, len, minlen) = (field(0), field(1), field(2));
                let (Some(start), Some(len), Some(minlen)) = (start, len, minlen) else { return Err(libc::EINVAL) };
                let trimmed = self.vol.trim(start, len, minlen).map_err(|e| errno(&e))?;
                let mut r = Vec::with_capacity(24);
                for v in [start, trimmed, minlen] {
                    r.extend_from_slice(&v.to_ne_bytes());
                }
                reply(out, &r);
                Ok(())
            }
            GOINGDOWN => {
                self.shutdown();
                reply(out, &[]);
                Ok(())
            }
            _ => Err(libc::ENOTTY),
        }
    }

    fn set_flags(&self, ino: u64, f: u32) -> Done {
        match self.vol.set_flags(FileId(ino), f) {
            Ok(()) => {
                // The change time moved; the kernel asked nothing back.
                self.invalidate(ino);
                Ok(())
            }
            Err(VolError::InvalidArgument(_)) => Err(libc::EOPNOTSUPP),
            Err(e) => Err(errno(&e)),
        }
    }

    /// A shutdown ioctl. FUSE passes restricted ioctls' arguments only in
    /// the direction their number encodes, and `XFS_IOC_GOINGDOWN` is
    /// encoded as a read: the flag (default, log flush, no log flush)
    /// never reaches the server. Every shutdown therefore does what the
    /// default does on ext4: what was written before the call is made
    /// durable, then the volume takes nothing more: every request after
    /// it fails EIO, and the next mount finds the volume as this left it.
    fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Err(e) = self.vol.sync() {
            eprintln!("mballoc mount: shutdown: the last sync failed: {e}");
        }
        self.vol.halt(mballoc_vol::Halt::Shutdown);
        eprintln!("mballoc mount: shut down: every request now fails EIO until unmounted");
    }
}

/// An extended attribute's value or list as `getxattr(2)` wants it: its
/// size when asked with 0, ERANGE when it does not fit.
fn sized(out: &mut Out, size: u32, v: &[u8]) -> Done {
    if size == 0 {
        out.u32(v.len() as u32).u32(0);
    } else if v.len() > size as usize {
        return Err(libc::ERANGE);
    } else {
        out.raw(v);
    }
    Ok(())
}
