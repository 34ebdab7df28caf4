"""ext4's multiblock allocator and a crash-safe volume over it.

>>> import mballoc, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "vol")
>>> mballoc.Volume.format(path, size=64 << 20)
>>> with mballoc.Volume.open(path) as vol:
...     vol.mkdir("/d")
...     with vol.open("/d/f", "wb") as f:
...         _ = f.write(b"x" * 10000)
...         f.fsync()
...     vol.listdir("/d"), vol.stat("/d/f").size
(['f'], 10000)

Errors are ``OSError`` subclasses carrying the errno (``FileNotFoundError``
for a missing path, ``FileExistsError``, ``OSError`` with ``errno.ENOSPC``
for a full volume); a bad argument is ``ValueError``.
"""

import io
from typing import Dict, List, NamedTuple, Tuple, Union

from . import _native, lab
from ._native import __version__

__all__ = ["Volume", "File", "StatResult", "Allocator", "lab", "__version__"]


def _parse_stats(text: str) -> Dict[str, Union[int, str]]:
    """The ``mb_stats`` text as a dict keyed by ext4's names: top-level
    counters by their own name (``reqs``, ``success``, ``groups_scanned``,
    ``extents_scanned``...), a pass's counters as ``cr_p2_aligned_stats.hits``
    and so on; values that are not one number stay strings."""
    out: Dict[str, Union[int, str]] = {}
    section = ""
    for line in text.splitlines()[1:]:
        depth = len(line) - len(line.lstrip("\t"))
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if not value:
            section = key
            continue
        if depth == 1:
            section = ""
        name = f"{section}.{key}" if section and depth >= 2 else key
        try:
            out[name] = int(value)
        except ValueError:
            out[name] = value
    return out


def _parse_groups(text: str) -> List[Dict[str, object]]:
    """``mb_groups`` as rows: group, free, frags, first and the free-extent
    counts by order (``counters[k]`` for 2^k blocks)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("#") or line.startswith("#group"):
            continue
        head, _, rest = line.partition("[")
        g, _, fields = head.partition(":")
        free, frags, first = (int(x) for x in fields.split()[:3])
        counters = [int(x) for x in rest.rstrip("] \n").split()]
        rows.append({"group": int(g[1:]), "free": free, "frags": frags, "first": first, "counters": counters})
    return rows


class StatResult(NamedTuple):
    """What ``Volume.stat`` gives."""

    ino: int
    mode: int
    size: int
    nlink: int
    blocks: int


class File(io.RawIOBase):
    """A file of a volume as a Python binary file object: read, write,
    seek, tell, truncate and ``fsync()``; a context manager. Unbuffered, as
    ``open(..., buffering=0)``; wrap in ``io.BufferedReader`` or
    ``io.BufferedWriter`` for small reads or writes."""

    def __init__(self, native: "_native.File", mode: str, name: str):
        super().__init__()
        self._f = native
        self._mode = mode
        self._pos = 0
        self._append = "a" in mode
        self.name = name

    @property
    def mode(self) -> str:
        return self._mode

    def readable(self) -> bool:
        return "r" in self._mode or "+" in self._mode

    def writable(self) -> bool:
        return any(c in self._mode for c in "wax+")

    def seekable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        self._checkClosed()
        if not self.readable():
            raise io.UnsupportedOperation("not readable")
        view = memoryview(b).cast("B")
        data = self._f.read_at(self._pos, len(view))
        n = len(data)
        view[:n] = data
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        self._checkClosed()
        if not self.readable():
            raise io.UnsupportedOperation("not readable")
        if size is None or size < 0:
            size = max(self._f.size() - self._pos, 0)
        data = self._f.read_at(self._pos, size)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def write(self, b) -> int:
        self._checkClosed()
        if not self.writable():
            raise io.UnsupportedOperation("not writable")
        if self._append:
            self._pos = self._f.size()
        data = b if isinstance(b, bytes) else bytes(b)
        n = self._f.write_at(data, self._pos)
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._f.size()}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        self._checkClosed()
        return self._pos

    def truncate(self, size=None) -> int:
        self._checkClosed()
        if not self.writable():
            raise io.UnsupportedOperation("not writable")
        size = self._pos if size is None else size
        self._f.set_len(size)
        return size

    def fsync(self) -> None:
        """Make the file's data and metadata durable."""
        self._checkClosed()
        self._f.fsync()

    def extents(self) -> List[Tuple[int, int, int]]:
        """``[(logical, physical, length), ...]`` in blocks."""
        return self._f.extents()

    def close(self) -> None:
        if not self.closed:
            self._f.close()
        super().close()


_MODES = {
    "rb": dict(read=True, write=False),
    "r+b": dict(read=True, write=True),
    "wb": dict(read=False, write=True, create=True, truncate=True),
    "w+b": dict(read=True, write=True, create=True, truncate=True),
    "ab": dict(read=False, write=True, create=True),
    "a+b": dict(read=True, write=True, create=True),
    "xb": dict(read=False, write=True, create=True, exclusive=True),
    "x+b": dict(read=True, write=True, create=True, exclusive=True),
}


class _ClassOrInstance:
    """``Volume.open(path)`` mounts; ``vol.open(path, mode)`` opens a file:
    one name, told apart by whether it is reached from the class or from
    a volume (as the package's API promises both)."""

    def __init__(self, on_class, on_instance):
        self._on_class = on_class
        self._on_instance = on_instance

    def __get__(self, obj, cls):
        if obj is None:
            return self._on_class.__get__(cls, cls)
        return self._on_instance.__get__(obj, cls)


class Volume:
    """A mounted volume; a context manager that unmounts on exit."""

    def __init__(self, native: "_native.Volume"):
        self._v = native

    @staticmethod
    def format(path: str, size: int, block_size: int = 4096) -> None:
        """Make a new volume file of ``size`` bytes; nothing at ``path`` is
        overwritten."""
        _native.Volume.format(path, size, block_size)

    def _mount(cls, path: str, read_only: bool = False, stats: bool = True) -> "Volume":
        """Mount the volume at ``path`` (replaying its journal). With
        ``stats`` the allocator counts ``mb_stats``."""
        return cls(_native.Volume.open(path, read_only, stats))

    def __enter__(self) -> "Volume":
        return self

    def __exit__(self, *exc) -> None:
        self.unmount()

    def unmount(self) -> None:
        """Write everything back and leave the volume clean."""
        self._v.unmount()

    def mkdir(self, path: str) -> None:
        self._v.mkdir(path)

    def listdir(self, path: str = "/") -> List[str]:
        return self._v.listdir(path)

    def stat(self, path: str) -> StatResult:
        return StatResult(*self._v.stat(path))

    def unlink(self, path: str) -> None:
        self._v.unlink(path)

    def _open_file(self, path: str, mode: str = "rb") -> File:
        """A binary file object: ``mode`` as ``open()``'s (``rb``, ``wb``,
        ``r+b``, ``ab``, ``xb`` and their ``+`` forms)."""
        flags = _MODES.get(mode)
        if flags is None:
            raise ValueError(f"mode {mode!r}: binary modes only (rb, wb, r+b, ab, xb, ...)")
        return File(self._v.open_file(path, **flags), mode, path)

    open = _ClassOrInstance(classmethod(_mount), _open_file)

    def extents(self, path: str) -> List[Tuple[int, int, int]]:
        """``[(logical, physical, length), ...]`` in blocks."""
        return self._v.extents(path)

    def sync(self) -> None:
        self._v.sync()

    @property
    def block_size(self) -> int:
        return self._v.block_size()

    def mb_stats(self) -> Dict[str, Union[int, str]]:
        """The allocator's counters keyed by ext4's ``mb_stats`` names."""
        return _parse_stats(self._v.mb_stats_text())

    def mb_groups(self) -> List[Dict[str, object]]:
        """One row per group, as ``/proc/fs/ext4/DEV/mb_groups``."""
        return _parse_groups(self._v.mb_groups_text())


class Allocator:
    """The bare allocator: free space and placement, nothing stored."""

    def __init__(self, blocks: int, block_size: int = 4096, profile: str = "default"):
        self._a = _native.Allocator(blocks, block_size, profile)

    def allocate(self, goal: int = 0, length: int = 1) -> Tuple[int, int]:
        """``(start, length)``: up to ``length`` blocks near ``goal``."""
        return self._a.allocate(goal, length)

    def free(self, start: int, length: int) -> None:
        self._a.free(start, length)

    @property
    def free_blocks(self) -> int:
        return self._a.free_blocks()

    def stats(self) -> Dict[str, Union[int, str]]:
        """The counters keyed by ext4's ``mb_stats`` names (``reqs``...)."""
        return _parse_stats(self._a.mb_stats_text())

    def mb_groups(self) -> List[Dict[str, object]]:
        return _parse_groups(self._a.mb_groups_text())
