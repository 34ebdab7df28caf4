"""The Python package against the same scenario as the Rust and C tests:
format, write 3 MiB, fsync, read back at an offset, extents, stats; and the
errors a Python caller meets."""

import errno
import io
import os

import pytest

import mballoc


@pytest.fixture
def vol_path(tmp_path):
    path = str(tmp_path / "vol")
    mballoc.Volume.format(path, size=256 << 20)
    return path


def test_write_fsync_read_extents_stats(vol_path):
    data = bytes((i * 7 + 3) & 0xFF for i in range(3 << 20))
    with mballoc.Volume.open(vol_path) as vol:
        vol.mkdir("/data")
        with vol.open("/data/blob", "wb") as f:
            assert f.write(data) == len(data)
            f.fsync()
        with vol.open("/data/blob", "rb") as f:
            f.seek(1 << 20)
            assert f.read(4096) == data[1 << 20 : (1 << 20) + 4096]
            assert f.tell() == (1 << 20) + 4096
        assert vol.listdir("/data") == ["blob"]
        assert vol.stat("/data/blob").size == len(data)
        ext = vol.extents("/data/blob")
        assert sum(length for _, _, length in ext) * vol.block_size == len(data)
        assert all(isinstance(x, int) for e in ext for x in e)
        stats = vol.mb_stats()
        assert stats["reqs"] >= 1 and "success" in stats
        groups = vol.mb_groups()
        assert groups[0]["group"] == 0 and sum(g["free"] for g in groups) > 0
    # Durable: a new mount reads it back.
    with mballoc.Volume.open(vol_path, read_only=True) as vol:
        with vol.open("/data/blob") as f:
            assert f.read() == data


def test_file_object_protocol(vol_path):
    with mballoc.Volume.open(vol_path) as vol:
        with vol.open("/f", "w+b") as f:
            assert isinstance(f, io.RawIOBase) and f.writable() and f.readable()
            f.write(b"hello world")
            f.seek(-5, io.SEEK_END)
            assert f.read() == b"world"
            f.truncate(5)
            f.seek(0)
            assert f.read() == b"hello"
            buf = bytearray(3)
            f.seek(1)
            assert f.readinto(buf) == 3 and bytes(buf) == b"ell"
        with vol.open("/f", "ab") as f:
            f.write(b"!")
        with io.BufferedReader(vol.open("/f", "rb")) as f:
            assert f.read() == b"hello!"
        with pytest.raises(ValueError):
            f.read()


def test_errors_are_oserrors_with_errno(vol_path):
    with mballoc.Volume.open(vol_path) as vol:
        with pytest.raises(FileNotFoundError):
            vol.open("/missing", "rb")
        vol.open("/x", "wb").close()
        with pytest.raises(FileExistsError) as e:
            vol.open("/x", "xb")
        assert e.value.errno == errno.EEXIST
        with pytest.raises(ValueError):
            vol.open("/x", "r")
        with pytest.raises(io.UnsupportedOperation):
            vol.open("/x", "rb").write(b"no")
    with pytest.raises(OSError) as e:
        mballoc.Volume.format(vol_path, size=64 << 20)
    assert e.value.errno in (errno.EBUSY, errno.EEXIST)


def test_a_full_volume_is_enospc(tmp_path):
    path = str(tmp_path / "small")
    mballoc.Volume.format(path, size=16 << 20)
    with mballoc.Volume.open(path) as vol:
        with vol.open("/big", "wb") as f:
            with pytest.raises(OSError) as e:
                for _ in range(64):
                    f.write(b"\0" * (1 << 20))
                f.fsync()
            assert e.value.errno == errno.ENOSPC


def test_allocator():
    a = mballoc.Allocator(blocks=1 << 20, block_size=4096, profile="kernel")
    start, length = a.allocate(goal=5000, length=64)
    assert length == 64 and a.free_blocks == (1 << 20) - 64
    a.free(start, length)
    assert a.stats()["reqs"] == 1
    with pytest.raises(ValueError):
        a.free(start, length)
    with pytest.raises(ValueError):
        mballoc.Allocator(blocks=1 << 20, profile="fastest")


def test_lab_run_matches_the_cli_json():
    names = [n for n, _ in mballoc.lab.scenarios()]
    assert "fallocate2" in names
    r = mballoc.lab.run("fallocate2", quick=True, backends=["engine"], set={"engine.profile": "kernel"})
    assert r["quick"] is True and r["seed"] == 1
    (s,) = r["scenarios"]
    assert s["name"] == "fallocate2" and s["rows"]
    assert any("settings over every row" in n for n in s["notes"])
    with pytest.raises(ValueError):
        mballoc.lab.run("nope")


def test_version():
    assert mballoc.__version__.count(".") == 2


def test_the_module_docs_run():
    import doctest

    failures, tried = doctest.testmod(mballoc)
    assert tried > 0 and failures == 0


def test_the_readme_example_runs(tmp_path):
    readme = os.path.join(os.path.dirname(__file__), "..", "..", "..", "README.md")
    if not os.path.exists(readme):
        pytest.skip("README.md is not beside the package source")
    text = open(readme).read()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block.replace("/tmp/py.vol", str(tmp_path / "py.vol")), "README.md", "exec"), {})
