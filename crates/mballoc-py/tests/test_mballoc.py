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
    mballoc.format(path, size=256 << 20)
    return path


def test_write_fsync_read_extents_stats(vol_path):
    data = bytes((i * 7 + 3) & 0xFF for i in range(3 << 20))
    with mballoc.mount(vol_path, stats=True) as vol:
        vol.mkdir("/data")
        with vol.open("/data/blob", "wb") as f:
            assert f.write(data) == len(data)
            f.fsync()
        with vol.open("/data/blob", "rb") as f:
            f.seek(1 << 20)
            assert f.read(4096) == data[1 << 20 : (1 << 20) + 4096]
            assert f.tell() == (1 << 20) + 4096
        assert vol.listdir("/data") == ["blob"]
        assert vol.stat("/data/blob").st_size == len(data)
        ext = vol.extents("/data/blob")
        assert sum(length for _, _, length in ext) * vol.block_size == len(data)
        assert all(isinstance(x, int) for e in ext for x in e)
        stats = vol.mb_stats()
        assert stats["reqs"] >= 1 and "success" in stats
        groups = vol.mb_groups()
        assert groups[0]["group"] == 0 and sum(g["free"] for g in groups) > 0
    # Durable: a new mount reads it back.
    with mballoc.mount(vol_path, read_only=True) as vol:
        with vol.open("/data/blob") as f:
            assert f.read() == data


def test_file_object_protocol(vol_path):
    with mballoc.mount(vol_path) as vol:
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
    with mballoc.mount(vol_path) as vol:
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
        mballoc.format(vol_path, size=64 << 20)
    assert e.value.errno in (errno.EBUSY, errno.EEXIST)


def test_a_full_volume_is_enospc(tmp_path):
    path = str(tmp_path / "small")
    mballoc.format(path, size=16 << 20)
    with mballoc.mount(path) as vol:
        with vol.open("/big", "wb") as f:
            with pytest.raises(OSError) as e:
                for _ in range(64):
                    f.write(b"\0" * (1 << 20))
                f.fsync()
            assert e.value.errno == errno.ENOSPC


def test_allocator():
    a = mballoc.Allocator(blocks=1 << 20, block_size=4096, profile="kernel", stats=True)
    got = a.allocate(64, goal=5000, goal_policy="try")
    assert (got.start, got.length, got.found_by) == (5000, 64, "goal")
    assert a.free_blocks == (1 << 20) - 64
    a.free(got.start, got.length)
    assert a.stats()["reqs"] == 1
    with pytest.raises(ValueError, match="free already"):
        a.free(got.start, got.length)
    with pytest.raises(ValueError):
        mballoc.Allocator(blocks=1 << 20, profile="fastest")
    with pytest.raises(ValueError, match="file layer"):
        mballoc.Allocator(blocks=1 << 20, settings={"close": "ext4"})
    assert mballoc.Allocator(blocks=1 << 20).stats() == {}, "statistics are off unless asked for, as in Rust and C"


def test_allocator_takes_the_whole_request():
    a = mballoc.Allocator(blocks=1 << 18, settings={"mb_max_to_scan": 50})
    first = a.allocate(8, goal=100, goal_policy="only")
    assert first.start == 100 and first.found_by == "goal"
    with pytest.raises(OSError) as e:
        a.allocate(8, goal=100, goal_policy="only")
    assert e.value.errno == errno.ENOSPC
    meta = a.allocate(4, metadata=True, min_length=4)
    assert meta.length == 4 and meta.found_by.startswith("CR_")
    s1 = a.allocate(16, stream=1)
    s2 = a.allocate(16, stream=1)
    assert s2.start == s1.start + 16, "a stream's requests follow each other"
    with pytest.raises(ValueError):
        a.allocate(0)
    with pytest.raises(ValueError):
        a.allocate(8, goal_policy="only")


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


@pytest.mark.parametrize("doc", ["README.md", "docs/LIBRARY.md"])
def test_the_documented_examples_run(tmp_path, doc):
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", doc)
    if not os.path.exists(path):
        pytest.skip(f"{doc} is not beside the package source")
    text = open(path).read()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block.replace("/tmp/py.vol", str(tmp_path / "py.vol")), doc, "exec"), {})
