"""A file of a volume as a Python binary file object."""

import io
from typing import Any, List, Optional, Tuple

from . import _native
from ._types import StatResult, _stat_result


class File(io.RawIOBase):
    """An open regular file: read, write, seek, tell, truncate, ``fsync()``,
    space calls and its extent map; a context manager. Unbuffered, as
    ``open(..., buffering=0)``; wrap in ``io.BufferedReader`` or
    ``io.BufferedWriter`` for small reads or writes. It holds its handle,
    not the volume: unmounting closes it, and closing it gives the handle
    back at once."""

    def __init__(self, native: "_native.File", mode: str, name: str) -> None:
        super().__init__()
        self._f: Optional[_native.File] = native
        self._mode = mode
        self._pos = 0
        self._append = "a" in mode
        self.name = name

    @property
    def mode(self) -> str:
        return self._mode

    def _handle(self) -> "_native.File":
        if self._f is None:
            raise ValueError("I/O operation on closed file")
        return self._f

    def readable(self) -> bool:
        return "r" in self._mode or "+" in self._mode

    def writable(self) -> bool:
        return any(c in self._mode for c in "wax+")

    def seekable(self) -> bool:
        return True

    def _need(self, what: str) -> "_native.File":
        f = self._handle()
        if what == "read" and not self.readable():
            raise io.UnsupportedOperation("not readable")
        if what == "write" and not self.writable():
            raise io.UnsupportedOperation("not writable")
        return f

    def readinto(self, b: Any) -> int:
        f = self._need("read")
        view = memoryview(b).cast("B")
        data = f.read_at(self._pos, len(view))
        n = len(data)
        view[:n] = data
        self._pos += n
        return n

    def read(self, size: Optional[int] = -1) -> bytes:
        f = self._need("read")
        if size is None or size < 0:
            size = max(f.size() - self._pos, 0)
        data = f.read_at(self._pos, size)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def write(self, b: Any) -> int:
        f = self._need("write")
        if self._append:
            self._pos = f.size()
        data = b if isinstance(b, bytes) else bytes(b)
        n = f.write_at(data, self._pos)
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        f = self._handle()
        if whence == io.SEEK_SET:
            base = 0
        elif whence == io.SEEK_CUR:
            base = self._pos
        elif whence == io.SEEK_END:
            base = f.size()
        else:
            raise ValueError(f"whence {whence}: SEEK_SET, SEEK_CUR or SEEK_END")
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        self._handle()
        return self._pos

    def truncate(self, size: Optional[int] = None) -> int:
        f = self._need("write")
        size = self._pos if size is None else size
        f.set_len(size)
        return size

    def fsync(self) -> None:
        """Make the file's data and metadata durable."""
        self._handle().fsync()

    def allocate(self, offset: int, length: int, keep_size: bool = False) -> None:
        """Reserve blocks for ``[offset, offset + length)`` (``fallocate``);
        the size grows to cover it unless ``keep_size``."""
        self._need("write").allocate(offset, length, keep_size)

    def punch(self, offset: int, length: int) -> None:
        """Deallocate ``[offset, offset + length)``; it reads as zeros."""
        self._need("write").punch(offset, length)

    def zero_range(self, offset: int, length: int, keep_size: bool = False) -> None:
        """Make ``[offset, offset + length)`` read as zeros, its blocks kept
        or allocated (``FALLOC_FL_ZERO_RANGE``): all or nothing."""
        self._need("write").zero_range(offset, length, keep_size)

    def stat(self) -> StatResult:
        """``os.fstat``'s answer."""
        return _stat_result(self._handle().stat())

    def extents(self) -> List[Tuple[int, int, int]]:
        """``[(logical, physical, length), ...]`` in blocks."""
        return self._handle().extents()

    def close(self) -> None:
        if self._f is not None:
            f, self._f = self._f, None
            f.close()
        super().close()
