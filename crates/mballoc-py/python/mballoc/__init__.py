"""ext4's multiblock allocator and a crash-safe volume over it.

>>> import mballoc, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "vol")
>>> mballoc.format(path, size=64 << 20)
>>> with mballoc.mount(path, profile="kernel", stats=True) as vol:
...     vol.makedirs("/d/e")
...     with vol.open("/d/e/f", "wb") as f:
...         _ = f.write(b"x" * 10000)
...     vol.rename("/d/e/f", "/d/g")
...     vol.listdir("/d"), vol.stat("/d/g").st_size, vol.mb_stats()["reqs"] > 0
(['e', 'g'], 10000, True)

``mount`` gives a ``Volume``; ``Volume.open`` gives a ``File`` (an
``io.RawIOBase``). Errors are ``OSError`` subclasses carrying the errno and
the path (``FileNotFoundError``, ``FileExistsError``, ``OSError`` with
``errno.ENOSPC`` for a full volume); a bad argument is ``ValueError``.
What was written is kept whatever ends the program: see ``Volume``.
"""

from . import _native, lab
from ._allocator import Allocator
from ._file import File
from ._native import __version__
from ._types import (
    FL_APPEND,
    FL_IMMUTABLE,
    FL_NOATIME,
    FL_NODUMP,
    FL_SYNC,
    Allocation,
    CheckReport,
    DirEntry,
    GroupRow,
    MbStats,
    Setting,
    StatResult,
    StatVfs,
)
from ._volume import Volume, check, format, mount, settings

__all__ = [
    "mount",
    "format",
    "check",
    "settings",
    "Volume",
    "File",
    "Allocator",
    "Allocation",
    "StatResult",
    "StatVfs",
    "DirEntry",
    "CheckReport",
    "Setting",
    "MbStats",
    "GroupRow",
    "FL_SYNC",
    "FL_IMMUTABLE",
    "FL_APPEND",
    "FL_NODUMP",
    "FL_NOATIME",
    "lab",
    "__version__",
]
