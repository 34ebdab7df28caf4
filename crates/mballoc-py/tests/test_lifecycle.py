"""What keeps work: an exception inside ``with``, a script that never
unmounts, a forgotten volume, the commit interval under ``kill -9``, the
flags that refuse changes, and a call the device fails half-way."""

import errno
import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import mballoc


@pytest.fixture
def path(tmp_path):
    p = str(tmp_path / "vol")
    mballoc.format(p, size=64 << 20)
    return p


def read(vol, name):
    with vol.open(name) as f:
        return f.read()


class Boom(Exception):
    pass


def test_an_exception_inside_with_arrives_unchanged_and_keeps_the_work(path):
    original = Boom("mine")
    with pytest.raises(Boom) as caught:
        with mballoc.mount(path) as vol:
            vol.mkdir("/d")
            with vol.open("/d/closed", "wb") as f:
                f.write(b"closed before")
            still_open = vol.open("/d/open", "wb")
            still_open.write(b"open at the raise")
            raise original
    assert caught.value is original and caught.value.__context__ is None
    assert still_open.closed and not vol.mounted
    with mballoc.mount(path) as vol:
        assert read(vol, "/d/closed") == b"closed before"
        assert read(vol, "/d/open") == b"open at the raise"


def run_script(body, *args):
    code = textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_script_that_ends_without_unmount_keeps_its_files(path):
    r = run_script(
        """
        import sys, mballoc
        vol = mballoc.mount(sys.argv[1])
        vol.mkdir("/d")
        with vol.open("/d/f", "wb") as f:
            f.write(b"kept at exit")
        """,
        path,
    )
    assert r.returncode == 0, r.stderr
    assert "ResourceWarning" in r.stderr and "not unmounted" in r.stderr, r.stderr
    assert mballoc.check(path).clean
    with mballoc.mount(path) as vol:
        assert read(vol, "/d/f") == b"kept at exit"


def test_a_forgotten_volume_warns_and_unmounts_when_collected(path):
    vol = mballoc.mount(path)
    with vol.open("/f", "wb") as f:
        f.write(b"kept when collected")
    with pytest.warns(ResourceWarning, match="not unmounted"):
        del vol
        gc.collect()
    with mballoc.mount(path) as vol:
        assert read(vol, "/f") == b"kept when collected"


def test_a_file_kept_elsewhere_does_not_block_unmount(path):
    vol = mballoc.mount(path)
    history = [vol.open("/f", "wb")]  # as a notebook's output history keeps it
    history[0].write(b"x")
    vol.unmount()
    assert history[0].closed
    with pytest.raises(ValueError):
        history[0].write(b"y")
    with mballoc.mount(path) as vol:
        assert read(vol, "/f") == b"x"


def kill_after_write(path, commit, wait):
    """Write a file without fsync in a child, wait, kill -9 it: what the
    next mount finds."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, time, mballoc
                vol = mballoc.mount(sys.argv[1], commit=float(sys.argv[2]))
                with vol.open("/f", "wb") as f:
                    f.write(b"durable without fsync")
                print("written", flush=True)
                time.sleep(60)
                """
            ),
            path,
            str(commit),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "written"
        time.sleep(wait)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    with mballoc.mount(path) as vol:
        return vol.exists("/f") and read(vol, "/f")


def test_the_commit_interval_makes_writes_durable_under_kill_9(path, tmp_path):
    assert kill_after_write(path, commit=0.2, wait=1.0) == b"durable without fsync"
    other = str(tmp_path / "other")
    mballoc.format(other, size=64 << 20)
    assert kill_after_write(other, commit=0, wait=1.0) is False, "without the interval nothing was committed"


def test_a_write_to_an_immutable_file_is_refused(path):
    with mballoc.mount(path) as vol:
        with vol.open("/f", "wb") as f:
            f.write(b"fixed")
        vol.set_flags("/f", mballoc.FL_IMMUTABLE)
        with vol.open("/f", "r+b") as f:
            with pytest.raises(PermissionError):
                f.write(b"changed")
            with pytest.raises(PermissionError):
                f.truncate(0)
            with pytest.raises(PermissionError):
                f.allocate(0, 1 << 20)
        with pytest.raises(PermissionError):
            vol.truncate("/f", 0)
        with pytest.raises(PermissionError):
            vol.unlink("/f")
        vol.set_flags("/f", 0)
        vol.set_flags("/f", mballoc.FL_APPEND)
        with vol.open("/f", "ab") as f:
            f.write(b"+more")
        with vol.open("/f", "r+b") as f:
            with pytest.raises(PermissionError):
                f.write(b"X")
        assert read(vol, "/f") == b"fixed+more"


def test_zero_range_failing_half_way_changes_nothing(path):
    data = bytes((i * 31 + 4) & 0xFF for i in range(17_636))
    with mballoc.mount(path) as vol:
        with vol.open("/e", "wb") as f:
            f.write(data)
    # A fresh mount: nothing cached, so the partial blocks must be read.
    with mballoc.mount(path, fault_injection=True) as vol:
        with vol.open("/e", "r+b") as f:
            vol.inject_fault("read", 1)
            with pytest.raises(OSError) as e:
                f.zero_range(1000, 9000, keep_size=True)
            assert e.value.errno == errno.EIO
            vol.heal()
            f.seek(0)
            assert f.read() == data, "the failed call changed nothing"
    with mballoc.mount(path) as vol:
        assert read(vol, "/e") == data
