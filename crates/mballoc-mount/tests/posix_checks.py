#!/usr/bin/env python3
"""POSIX promises a program relies on, observed in a directory.

Run as `posix_checks.py DIR [CHECK...]`: each check works in a fresh
subdirectory of DIR and prints `check: observation` lines. The same script
runs on a loop-mounted ext4 and on an mballoc mount; the test that calls it
compares the lines, so the expected answer is always the kernel's.
Observations are what both file systems must agree on: results, errno
names, sizes, link counts, types; never inode numbers or times.
"""

import ctypes
import ctypes.util
import errno
import os
import stat
import struct
import sys

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

AT_FDCWD = -100
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 0x01, 0x02, 0x10
FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE = 0x08, 0x20
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
FS_IMMUTABLE_FL, FS_APPEND_FL, FS_NODUMP_FL, FS_NOATIME_FL = 0x10, 0x20, 0x40, 0x80
NOBODY = 65534


def err(fn, *args):
    """Call fn; 'ok' or the errno's name."""
    try:
        r = fn(*args)
        return "ok" if r is None else f"ok {r}"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def check_rc(rc):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def renameat2(a, b, flags):
    check_rc(libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), flags))


def fallocate(fd, mode, off, length):
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    check_rc(libc.fallocate(fd, mode, off, length))


def getflags(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = ctypes.c_uint(0)
        check_rc(libc.ioctl(fd, ctypes.c_ulong(FS_IOC_GETFLAGS), ctypes.byref(buf)))
        return buf.value
    finally:
        os.close(fd)


def setflags(path, flags):
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = ctypes.c_uint(flags)
        check_rc(libc.ioctl(fd, ctypes.c_ulong(FS_IOC_SETFLAGS), ctypes.byref(buf)))
    finally:
        os.close(fd)


def as_nobody(fn):
    """Run fn in a child as uid/gid 65534: its result or errno name."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = err(fn)
        except BaseException as e:  # noqa: BLE001 - reported, never raised in the child
            out = f"child failed: {e}"
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    data = os.read(r, 4096).decode()
    os.close(r)
    os.waitpid(pid, 0)
    return data


def write(path, data=b"x", flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def c_unlinked_open(d):
    p = f"{d}/f"
    write(p, b"hello")
    fd = os.open(p, os.O_RDWR)
    os.unlink(p)
    out = [f"exists after unlink: {os.path.exists(p)}"]
    out.append(f"fstat nlink {os.fstat(fd).st_nlink} size {os.fstat(fd).st_size}")
    os.lseek(fd, 0, os.SEEK_END)
    os.write(fd, b" world")
    os.lseek(fd, 0, os.SEEK_SET)
    out.append(f"read {os.read(fd, 100)!r}")
    out.append(f"ftruncate {err(os.ftruncate, fd, 3)} size {os.fstat(fd).st_size}")
    os.close(fd)
    out.append(f"listing {sorted(os.listdir(d))}")
    return out


def c_truncate_by_path(d):
    p = f"{d}/f"
    write(p, b"0123456789")
    out = [f"truncate {err(os.truncate, p, 4)} size {os.stat(p).st_size}"]
    out.append(f"grow {err(os.truncate, p, 10000)} size {os.stat(p).st_size}")
    with open(p, "rb") as f:
        out.append(f"head {f.read(6)!r}")
    out.append(f"dir {err(os.truncate, d, 0)}")
    return out


def c_fallocate_past_eof(d):
    p = f"{d}/f"
    write(p, b"a" * 10000)
    fd = os.open(p, os.O_RDWR)
    out = []
    for name, mode, off, length in [
        ("zero at eof", FALLOC_FL_ZERO_RANGE, 10000, 4096),
        ("zero past eof keep", FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 40000, 4096),
        ("zero inside", FALLOC_FL_ZERO_RANGE, 100, 200),
        ("punch past eof", FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100000, 4096),
        ("punch without keep", FALLOC_FL_PUNCH_HOLE, 0, 4096),
        ("alloc past eof keep", FALLOC_FL_KEEP_SIZE, 200000, 8192),
        ("alloc extend", 0, 300000, 8192),
        ("zero length", 0, 0, 0),
    ]:
        r = err(fallocate, fd, mode, off, length)
        out.append(f"{name}: {r} size {os.fstat(fd).st_size}")
    os.lseek(fd, 90, os.SEEK_SET)
    out.append(f"zeroed {os.read(fd, 20)!r}")
    os.close(fd)
    return out


def c_long_names(d):
    out = []
    for n in (255, 256):
        out.append(f"create {n}: {err(write, d + '/' + 'n' * n)}")
    out.append(f"stat 300: {err(os.stat, d + '/' + 'q' * 300)}")
    out.append(f"stat 255 missing: {err(os.stat, d + '/' + 'q' * 255)}")
    out.append(f"mkdir 256: {err(os.mkdir, d + '/' + 'm' * 256)}")
    out.append(f"namemax {os.statvfs(d).f_namemax}")
    return out


def c_directory_nlink(d):
    out = [f"empty {os.stat(d).st_nlink}"]
    os.mkdir(f"{d}/a")
    os.mkdir(f"{d}/b")
    write(f"{d}/f")
    out.append(f"two subdirs {os.stat(d).st_nlink}")
    os.rename(f"{d}/a", f"{d}/b/a")
    out.append(f"moved {os.stat(d).st_nlink} {os.stat(d + '/b').st_nlink}")
    os.rmdir(f"{d}/b/a")
    out.append(f"removed {os.stat(d + '/b').st_nlink}")
    return out


def c_blocks_of_unsynced_data(d):
    p = f"{d}/f"
    write(p, b"z" * 8192)
    out = [f"blocks {os.stat(p).st_blocks}"]
    write(p, b"z" * 100000, os.O_WRONLY | os.O_APPEND)
    out.append(f"appended {os.stat(p).st_blocks}")
    return out


def c_rename_flags(d):
    write(f"{d}/a", b"A")
    write(f"{d}/b", b"B")
    os.mkdir(f"{d}/dir")
    out = [f"noreplace {err(renameat2, f'{d}/a', f'{d}/b', RENAME_NOREPLACE)}"]
    out.append(f"exchange {err(renameat2, f'{d}/a', f'{d}/b', RENAME_EXCHANGE)}")
    out.append(f"after {open(f'{d}/a').read()}{open(f'{d}/b').read()}")
    out.append(f"exchange file dir {err(renameat2, f'{d}/a', f'{d}/dir', RENAME_EXCHANGE)}")
    out.append(f"types {stat.S_ISDIR(os.stat(f'{d}/a').st_mode)} {stat.S_ISREG(os.stat(f'{d}/dir').st_mode)}")
    out.append(f"exchange missing {err(renameat2, f'{d}/a', f'{d}/none', RENAME_EXCHANGE)}")
    out.append(f"noreplace free {err(renameat2, f'{d}/b', f'{d}/c', RENAME_NOREPLACE)}")
    out.append(f"dir into itself {err(os.rename, f'{d}/a', f'{d}/a/x')}")
    out.append(f"listing {sorted(os.listdir(d))}")
    return out


def c_hard_links(d):
    write(f"{d}/a", b"data")
    os.mkdir(f"{d}/sub")
    os.link(f"{d}/a", f"{d}/sub/b")
    os.link(f"{d}/a", f"{d}/c")
    sa, sb = os.stat(f"{d}/a"), os.stat(f"{d}/sub/b")
    out = [f"nlink {sa.st_nlink} same inode {sa.st_ino == sb.st_ino}"]
    out.append(f"link exists {err(os.link, f'{d}/a', f'{d}/c')}")
    out.append(f"link dir {err(os.link, f'{d}/sub', f'{d}/sub2')}")
    os.unlink(f"{d}/a")
    out.append(f"after unlink {os.stat(f'{d}/c').st_nlink} {open(f'{d}/sub/b').read()}")
    os.rename(f"{d}/c", f"{d}/sub/b")
    out.append(f"rename onto own link {os.stat(f'{d}/sub/b').st_nlink} {sorted(os.listdir(d))}")
    return out


def c_symlinks(d):
    os.symlink("target", f"{d}/dangling")
    write(f"{d}/target", b"t")
    os.symlink("target", f"{d}/l")
    st = os.lstat(f"{d}/l")
    out = [f"lstat link {stat.S_ISLNK(st.st_mode)} size {st.st_size} perm {oct(st.st_mode & 0o777)}"]
    out.append(f"readlink {os.readlink(f'{d}/l')} follow {open(f'{d}/l').read()}")
    long = "x" * 4095
    out.append(f"4095 {err(os.symlink, long, f'{d}/long')} {len(os.readlink(f'{d}/long'))}")
    out.append(f"4096 {err(os.symlink, long + 'x', f'{d}/toolong')}")
    out.append(f"readlink file {err(os.readlink, f'{d}/target')}")
    out.append(f"exists {err(os.symlink, 'a', f'{d}/l')}")
    os.mkdir(f"{d}/dir")
    os.symlink("dir", f"{d}/dl")
    write(f"{d}/dl/inside", b"i")
    out.append(f"through {sorted(os.listdir(f'{d}/dir'))}")
    return out


def c_special_files(d):
    os.mkfifo(f"{d}/fifo", 0o640)
    os.mknod(f"{d}/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(f"{d}/blk", 0o600 | stat.S_IFBLK, os.makedev(7, 99))
    os.mknod(f"{d}/sock", 0o600 | stat.S_IFSOCK)
    out = []
    for n in ("fifo", "null", "blk", "sock"):
        st = os.lstat(f"{d}/{n}")
        out.append(f"{n} {stat.filemode(st.st_mode)} rdev {os.major(st.st_rdev)},{os.minor(st.st_rdev)}")
    # Neither mount is nodev: the device node opens the device.
    out.append(f"open null {err(os.open, f'{d}/null', os.O_RDONLY)}")
    return out


def c_xattrs(d):
    p = f"{d}/f"
    write(p)
    out = [f"set {err(os.setxattr, p, 'user.a', b'1')}"]
    out.append(f"create existing {err(os.setxattr, p, 'user.a', b'2', os.XATTR_CREATE)}")
    out.append(f"replace missing {err(os.setxattr, p, 'user.b', b'2', os.XATTR_REPLACE)}")
    out.append(f"replace {err(os.setxattr, p, 'user.a', b'22', os.XATTR_REPLACE)} {os.getxattr(p, 'user.a')!r}")
    out.append(f"empty value {err(os.setxattr, p, 'user.e', b'')} {os.getxattr(p, 'user.e')!r}")
    out.append(f"trusted {err(os.setxattr, p, 'trusted.t', b'tt')}")
    out.append(f"bad namespace {err(os.setxattr, p, 'bogus.x', b'1')}")
    out.append(f"get missing {err(os.getxattr, p, 'user.zz')}")
    out.append(f"list {sorted(x for x in os.listxattr(p) if not x.startswith('security.'))}")
    out.append(f"remove {err(os.removexattr, p, 'user.a')} again {err(os.removexattr, p, 'user.a')}")
    big = b"v" * 2000
    out.append(f"2000 bytes {err(os.setxattr, p, 'user.big', big)} {os.getxattr(p, 'user.big') == big}")
    os.mkdir(f"{d}/dir")
    out.append(f"on dir {err(os.setxattr, d + '/dir', 'user.d', b'x')}")
    os.symlink("f", f"{d}/l")
    out.append(f"user on symlink {err(os.setxattr, d + '/l', 'user.l', b'x', 0, follow_symlinks=False)}")
    return out


def c_setgid_directory(d):
    os.chown(d, 0, 50)
    os.chmod(d, 0o2775)
    write(f"{d}/f")
    os.mkdir(f"{d}/sub")
    f, s = os.stat(f"{d}/f"), os.stat(f"{d}/sub")
    return [f"file gid {f.st_gid}", f"dir gid {s.st_gid} setgid {bool(s.st_mode & 0o2000)}"]


def c_setuid_cleared_by_writes(d):
    out = []
    for name, action in [
        ("write", lambda p: write(p, b"w", os.O_WRONLY | os.O_APPEND)),
        ("truncate", lambda p: os.truncate(p, 0)),
        ("fallocate", lambda p: fallocate(os.open(p, os.O_RDWR), 0, 0, 4096)),
    ]:
        p = f"{d}/{name}"
        write(p, b"data")
        os.chmod(p, 0o6777)
        r = as_nobody(lambda: action(p))
        out.append(f"{name} by another user: {r} mode {oct(os.stat(p).st_mode & 0o7777)}")
        os.chmod(p, 0o6777)
        action(p)
        out.append(f"{name} by root: mode {oct(os.stat(p).st_mode & 0o7777)}")
    return out


def c_capabilities_dropped_by_writes(d):
    # A VFS_CAP_REVISION_2 value: cap_net_bind_service permitted.
    caps = struct.pack("<IIIII", 0x02000000, 1 << 10, 0, 0, 0)
    out = []
    for name, action in [
        ("write", lambda p: write(p, b"w", os.O_WRONLY | os.O_APPEND)),
        ("truncate", lambda p: os.truncate(p, 1)),
    ]:
        p = f"{d}/{name}"
        write(p, b"data")
        out.append(f"{name}: set {err(os.setxattr, p, 'security.capability', caps)}")
        action(p)
        out.append(f"{name} by root: capability {err(os.getxattr, p, 'security.capability')}")
    return out


def c_permissions(d):
    p = f"{d}/private"
    write(p, b"secret")
    os.chmod(p, 0o600)
    os.chmod(d, 0o755)
    out = [f"read other {as_nobody(lambda: open(p).read())}"]
    out.append(f"create other {as_nobody(lambda: write(d + '/new'))}")
    os.chmod(d, 0o1777)
    out.append(f"create in sticky {as_nobody(lambda: write(d + '/new'))}")
    out.append(f"unlink others in sticky {as_nobody(lambda: os.unlink(p))}")
    return out


def c_chattr_flags(d):
    p = f"{d}/f"
    write(p, b"data")
    out = []
    setflags(p, getflags(p) | FS_IMMUTABLE_FL)
    out.append(f"immutable set {bool(getflags(p) & FS_IMMUTABLE_FL)}")
    out.append(f"write {err(os.open, p, os.O_WRONLY)}")
    out.append(f"unlink {err(os.unlink, p)} rename {err(os.rename, p, d + '/g')} chmod {err(os.chmod, p, 0o600)}")
    out.append(f"link {err(os.link, p, d + '/h')} truncate {err(os.truncate, p, 0)}")
    setflags(p, getflags(p) & ~FS_IMMUTABLE_FL)
    setflags(p, getflags(p) | FS_APPEND_FL)
    out.append(f"append-only plain open {err(os.open, p, os.O_WRONLY)}")
    out.append(f"append-only O_APPEND {err(write, p, b'more', os.O_WRONLY | os.O_APPEND)}")
    out.append(f"append-only unlink {err(os.unlink, p)}")
    setflags(p, getflags(p) & ~FS_APPEND_FL)
    setflags(p, getflags(p) | FS_NODUMP_FL | FS_NOATIME_FL)
    out.append(f"nodump noatime {getflags(p) & (FS_NODUMP_FL | FS_NOATIME_FL):#x}")
    out.append(f"size {os.stat(p).st_size}")
    return out


def c_delete_while_listing(d):
    n = 3000
    for i in range(n):
        open(f"{d}/e{i:05}", "w").close()
    left = 0
    with os.scandir(d) as it:
        for e in it:
            os.unlink(e.path)
    left = len(os.listdir(d))
    return [f"left after deleting while listing {n}: {left}"]


def c_create_while_listing(d):
    for i in range(2000):
        open(f"{d}/e{i:05}", "w").close()
    seen = set()
    created = 0
    with os.scandir(d) as it:
        for e in it:
            seen.add(e.name)
            if created < 5000:
                open(f"{d}/new{created:05}", "w").close()
                created += 1
    old = sum(1 for s in seen if s.startswith("e"))
    return [f"listing ended; old entries seen {old} of 2000"]


def acl_cmd(*args):
    """setfacl/getfacl: their output, or the first line of their error."""
    import subprocess

    r = subprocess.run(list(args), capture_output=True, text=True)
    if r.returncode != 0:
        return f"rc {r.returncode}"
    return " ".join(r.stdout.split())


def c_posix_acls(d):
    p = f"{d}/f"
    write(p, b"secret")
    os.chmod(p, 0o600)
    out = [f"before: other user reads {as_nobody(lambda: open(p).read())}"]
    out.append(f"setfacl {acl_cmd('setfacl', '-m', f'u:{NOBODY}:r', p)} mode {oct(os.stat(p).st_mode & 0o777)}")
    out.append(f"getfacl {acl_cmd('getfacl', '--omit-header', '--numeric', p)}")
    out.append(f"after: other user reads {as_nobody(lambda: open(p).read())}")
    os.chmod(p, 0o600)
    out.append(f"chmod 600: {acl_cmd('getfacl', '--omit-header', '--numeric', p)}")
    out.append(f"after chmod: other user reads {as_nobody(lambda: open(p).read())}")
    out.append(f"setfacl -b {acl_cmd('setfacl', '-b', p)} xattr {err(os.getxattr, p, 'system.posix_acl_access')}")
    dd = f"{d}/dd"
    os.mkdir(dd)
    out.append(f"default {acl_cmd('setfacl', '-d', '-m', f'u:{NOBODY}:rwx,m::rwx', dd)}")
    old = os.umask(0o077)
    try:
        write(f"{dd}/x", b"x")
        os.mkdir(f"{dd}/sub")
    finally:
        os.umask(old)
    out.append(f"inherited file mode {oct(os.stat(dd + '/x').st_mode & 0o777)}")
    out.append(f"inherited file {acl_cmd('getfacl', '--omit-header', '--numeric', dd + '/x')}")
    out.append(f"inherited dir {acl_cmd('getfacl', '--omit-header', '--numeric', dd + '/sub')}")
    out.append(f"default on a file {acl_cmd('setfacl', '-d', '-m', 'u::rw', p)}")
    return out


def c_timestamps(d):
    p = f"{d}/f"
    write(p, b"x")
    os.utime(p, ns=(1_000_000_000, 2_000_000_000))
    st = os.stat(p)
    out = [f"utime {st.st_atime_ns} {st.st_mtime_ns}"]
    with open(p) as f:
        f.read()
    st2 = os.stat(p)
    out.append(f"read updates old atime {st2.st_atime_ns > 2_000_000_000}")
    before = os.stat(d).st_mtime_ns
    write(f"{d}/g")
    out.append(f"create moves dir mtime {os.stat(d).st_mtime_ns >= before}")
    c0 = os.stat(p).st_ctime_ns
    os.link(p, f"{d}/h")
    out.append(f"link moves ctime {os.stat(p).st_ctime_ns >= c0}")
    return out


def c_mmap_of_o_direct(d):
    import mmap

    p = f"{d}/f"
    write(p, b"m" * 8192)
    fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    try:
        m = mmap.mmap(fd, 8192)
        first = m[:4]
        m[0:4] = b"MMAP"
        m.flush()
        m.close()
        out = [f"mmap of an O_DIRECT file: read {first!r}"]
    except OSError as e:
        out = [f"mmap of an O_DIRECT file: {errno.errorcode.get(e.errno, e.errno)}"]
    finally:
        os.close(fd)
    with open(p, "rb") as f:
        out.append(f"after msync {f.read(4)!r}")
    return out


def c_file_handles(d):
    write(f"{d}/f", b"handle")

    class FileHandle(ctypes.Structure):
        _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 128)]

    fh = FileHandle()
    fh.handle_bytes = 128
    mount_id = ctypes.c_int()
    rc = libc.name_to_handle_at(AT_FDCWD, f"{d}/f".encode(), ctypes.byref(fh), ctypes.byref(mount_id), 0)
    if rc < 0:
        return [f"name_to_handle_at {errno.errorcode[ctypes.get_errno()]}"]
    mfd = os.open(d, os.O_RDONLY)
    fd = libc.open_by_handle_at(mfd, ctypes.byref(fh), os.O_RDONLY)
    out = ["name_to_handle_at ok"]
    if fd < 0:
        out.append(f"open_by_handle_at {errno.errorcode[ctypes.get_errno()]}")
    else:
        out.append(f"open_by_handle_at read {os.read(fd, 10)!r}")
        os.close(fd)
    os.close(mfd)
    return out


CHECKS = {name[2:]: fn for name, fn in globals().items() if name.startswith("c_")}


def main():
    root = sys.argv[1]
    names = sys.argv[2:] or list(CHECKS)
    for name in names:
        d = os.path.join(root, name)
        os.mkdir(d)
        try:
            lines = CHECKS[name](d)
        except Exception as e:  # noqa: BLE001 - an unexpected failure is an observation too
            lines = [f"raised {type(e).__name__}: {e}"]
        for line in lines:
            print(f"{name}: {line}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
