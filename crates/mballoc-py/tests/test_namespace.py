"""The whole namespace by path, with the errors ``os`` would give."""

import errno
import os
import stat
import time

import pytest

import mballoc


@pytest.fixture
def vol(tmp_path):
    path = str(tmp_path / "vol")
    mballoc.format(path, size=64 << 20)
    with mballoc.mount(path) as v:
        yield v


def test_directories_names_and_links(vol):
    vol.makedirs("/a/b/c")
    with pytest.raises(FileExistsError):
        vol.makedirs("/a/b")
    vol.makedirs("/a/b", exist_ok=True)
    with vol.open("/a/b/c/f", "wb") as f:
        f.write(b"hello")
    vol.link("/a/b/c/f", "/a/g")
    assert vol.stat("/a/g").st_nlink == 2
    vol.symlink("b/c", "/a/link")
    assert vol.readlink("/a/link") == "b/c"
    assert vol.lstat("/a/link").is_symlink() and vol.stat("/a/link").is_dir()
    with vol.open("/a/link/f") as f:
        assert f.read() == b"hello"
    entries = vol.scandir("/a")
    assert [e.name for e in entries] == ["b", "g", "link"]
    assert entries[0].is_dir() and entries[1].is_file() and entries[2].is_symlink()

    with pytest.raises(FileExistsError):
        vol.rename("/a/g", "/a/b/c/f", noreplace=True)
    with vol.open("/x", "wb") as f:
        f.write(b"x")
    vol.rename("/x", "/a/g", exchange=True)
    with vol.open("/x") as f:
        assert f.read() == b"hello"
    vol.rename("/x", "/a/g")
    assert not vol.exists("/x")

    vol.truncate("/a/g", 2)
    assert vol.stat("/a/g").st_size == 2
    vol.chmod("/a/g", 0o600)
    assert stat.S_IMODE(vol.stat("/a/g").st_mode) == 0o600
    with pytest.raises(OSError) as e:
        vol.rmdir("/a/b")
    assert e.value.errno == errno.ENOTEMPTY and e.value.filename == "/a/b"
    with pytest.raises(IsADirectoryError):
        vol.unlink("/a/b")
    vol.unlink("/a/b/c/f")
    vol.rmdir("/a/b/c")
    assert vol.listdir("/a/b") == []


def test_stat_has_times_and_statvfs_counts(vol):
    before = time.time_ns()
    with vol.open("/t", "wb") as f:
        f.write(b"\0" * 10000)
        st = f.stat()
    assert st.st_size == 10000 and st.st_blocks >= 10000 // 512
    for t in (st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns, st.st_birthtime_ns):
        assert before - 10**9 <= t <= time.time_ns() + 10**9
    assert abs(st.st_mtime - st.st_mtime_ns / 1e9) < 1e-6
    v = vol.statvfs()
    assert v.f_bsize == 4096 and 0 < v.f_bfree < v.f_blocks and v.f_ffree < v.f_files and v.f_namemax == 255


def test_extended_attributes(vol):
    with vol.open("/x", "wb"):
        pass
    vol.setxattr("/x", "user.k", b"v", os.XATTR_CREATE)
    with pytest.raises(FileExistsError):
        vol.setxattr("/x", "user.k", b"w", os.XATTR_CREATE)
    vol.setxattr("/x", "user.k", b"w", os.XATTR_REPLACE)
    assert vol.getxattr("/x", "user.k") == b"w" and vol.listxattr("/x") == ["user.k"]
    vol.removexattr("/x", "user.k")
    with pytest.raises(OSError) as e:
        vol.getxattr("/x", "user.k")
    assert e.value.errno == errno.ENODATA


def test_space_calls_on_a_file(vol):
    with vol.open("/s", "w+b") as f:
        f.allocate(0, 1 << 20)
        assert f.stat().st_size == 1 << 20
        f.write(b"\xff" * 8192)
        f.punch(0, 4096)
        f.zero_range(4096, 100)
        f.seek(0)
        data = f.read(8192)
        assert data[:4196] == b"\0" * 4196 and data[4196:] == b"\xff" * (8192 - 4196)
        assert len(f.extents()) >= 1


def test_paths_may_be_bytes_or_pathlike(vol):
    import pathlib

    vol.mkdir(b"/bytes")
    vol.mkdir(pathlib.PurePosixPath("/bytes/p"))
    assert vol.listdir("/bytes") == ["p"]


def test_check_and_repair(tmp_path):
    path = str(tmp_path / "vol")
    mballoc.format(path, size=64 << 20)
    with mballoc.mount(path) as vol:
        with vol.open("/f", "wb") as f:
            f.write(b"x" * 5000)
    r = mballoc.check(path)
    assert r.clean and r.problems == [] and r.regular_files == 1 and not r.repaired
    r = mballoc.check(path, repair=True)
    assert r.clean and r.regular_files == 1
    with pytest.raises(FileNotFoundError) as e:
        mballoc.check(str(tmp_path / "missing"))
    assert e.value.filename == str(tmp_path / "missing")
    small = tmp_path / "small"
    small.write_bytes(b"x" * 100)
    with pytest.raises(OSError) as e:
        mballoc.check(str(small))
    assert e.value.errno == errno.EINVAL and "too small" in str(e.value)


def test_settings_reach_the_engine(tmp_path):
    path = str(tmp_path / "vol")
    mballoc.format(path, size=64 << 20)
    keys = {s.key: s for s in mballoc.settings()}
    assert keys["mb_max_to_scan"].mountable and not keys["inodes_per_group"].mountable
    with mballoc.mount(path, profile="kernel", settings={"mb_max_to_scan": 77}, commit=1) as vol:
        s = vol.settings()
        assert s["mb_max_to_scan"] == "77" and s["locality_groups"] == "1" and s["punch"] == "ext4"
    with pytest.raises(OSError) as e:
        mballoc.mount(path, settings={"mb_max_to_scam": 1})
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        mballoc.mount(path, settings={"inodes_per_group": 64})
    assert e.value.errno == errno.EINVAL and "fixed" in str(e.value)
    with pytest.raises(OSError) as e:
        mballoc.mount(path, commit=-1)
    assert e.value.errno == errno.EINVAL


def test_format_refuses_then_forces(tmp_path):
    path = str(tmp_path / "vol")
    mballoc.format(path, size=64 << 20)
    with pytest.raises(OSError):
        mballoc.format(path, size=64 << 20)
    mballoc.format(path, size=32 << 20, force=True)
    with mballoc.mount(path) as vol:
        assert vol.statvfs().f_blocks * 4096 < 32 << 20
    with pytest.raises(OSError) as e:
        mballoc.format(str(tmp_path / "tiny"), size=4096)
    assert e.value.errno == errno.EINVAL
