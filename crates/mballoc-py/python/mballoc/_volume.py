"""Volumes: format, mount, the namespace by path, check and repair, and
the lifecycle rules that keep work.

A mounted ``Volume`` unmounts when its ``with`` block ends (the files
still open are closed first, and an exception that ended the block
arrives unchanged), when ``unmount()`` is called, and otherwise — it was
forgotten — when it is garbage-collected or the interpreter exits, with a
``ResourceWarning``: what was written is kept either way, as a program
that ends without unmounting expects.
"""

import atexit
import os
import warnings
import weakref
from typing import Any, Dict, List, Mapping, Optional, Type, Union

from . import _native
from ._file import File
from ._types import CheckReport, DirEntry, GroupRow, MbStats, Setting, StatResult, StatVfs, _parse_groups, _parse_stats, _stat_result

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

_MODES: Dict[str, Dict[str, bool]] = {
    "rb": dict(read=True),
    "r+b": dict(read=True, write=True),
    "wb": dict(write=True, create=True, truncate=True),
    "w+b": dict(read=True, write=True, create=True, truncate=True),
    "ab": dict(write=True, append=True, create=True),
    "a+b": dict(read=True, write=True, append=True, create=True),
    "xb": dict(write=True, create=True, exclusive=True),
    "x+b": dict(read=True, write=True, create=True, exclusive=True),
}

#: Volumes mounted and not yet unmounted: unmounted at exit.
_live: "weakref.WeakSet[Volume]" = weakref.WeakSet()


def _fs(path: PathLike) -> bytes:
    return os.fsencode(path)


def _warn_unmounted(v: "Volume", when: str) -> None:
    warnings.warn(
        f"volume {v.path!r} was not unmounted; unmounting it {when} (use `with` or call unmount())",
        ResourceWarning,
        stacklevel=3,
    )


def format(
    path: PathLike,
    size: int,
    block_size: int = 4096,
    *,
    blocks_per_group: Optional[int] = None,
    inode_count: Optional[int] = None,
    force: bool = False,
) -> None:
    """Make a new volume file of ``size`` bytes at ``path``. Something
    already there (a volume, another file system, data) is an
    ``OSError`` (``EEXIST`` or ``EBUSY``) unless ``force``."""
    _native.Volume.format(_fs(path), size, block_size, blocks_per_group, inode_count, force)


def _options(
    profile: Optional[str],
    stats: bool,
    settings: Optional[Mapping[str, object]],
    commit: Optional[float],
    cache_bytes: Optional[int],
    folio_size: Optional[int],
) -> List[str]:
    out = []
    if profile is not None:
        out.append(f"profile={profile}")
    if stats:
        out.append("mb_stats=1")
    for k, v in (settings or {}).items():
        out.append(f"{k}={v}")
    for k, v in (("commit", commit), ("cache_bytes", cache_bytes), ("folio_size", folio_size)):
        if v is not None:
            out.append(f"{k}={v}")
    return out


def mount(
    path: PathLike,
    *,
    read_only: bool = False,
    profile: Optional[str] = None,
    stats: bool = False,
    settings: Optional[Mapping[str, object]] = None,
    commit: Optional[float] = None,
    cache_bytes: Optional[int] = None,
    folio_size: Optional[int] = None,
    fault_injection: bool = False,
) -> "Volume":
    """Mount the volume file at ``path`` (replaying its journal).

    ``profile`` is ``"default"`` or ``"kernel"`` (every ext4 decision);
    ``settings`` are the engine's settings by name
    (``{"mb_max_to_scan": 50}``, as ``mballoc.settings()`` lists them, the
    ones a mount may choose) applied after the profile; ``stats`` counts
    ``mb_stats``. ``commit`` is the longest time in seconds written data
    stays volatile without ``fsync`` (ext4's ``commit=``, 5 by default; 0:
    only ``fsync``, ``sync`` and unmount). ``cache_bytes`` and
    ``folio_size`` size the cache. ``fault_injection`` mounts through a
    device that ``Volume.inject_fault`` can make fail."""
    opts = _options(profile, stats, settings, commit, cache_bytes, folio_size)
    native = _native.Volume.mount(_fs(path), read_only, opts, fault_injection)
    return Volume(native, os.fsdecode(path))


def check(path: PathLike, repair: bool = False, force: Optional[List[str]] = None) -> CheckReport:
    """Check the unmounted volume file at ``path``; with ``repair``, fix
    what can be fixed without destroying anything not proven bad
    (``force``: ``"free-unowned"``, ``"drop-journal-tail"`` to go further)."""
    return CheckReport(*_native.check(_fs(path), repair, list(force or [])))


def settings() -> List[Setting]:
    """Every engine setting with its unit, range and meaning."""
    return [Setting(*s) for s in _native.settings()]


class Volume:
    """A mounted volume (``mballoc.mount``); a context manager that
    unmounts on exit. Paths are absolute from the volume's root; symbolic
    links are followed as the kernel follows them."""

    def __init__(self, native: "_native.Volume", path: str) -> None:
        self._v: Optional[_native.Volume] = native
        self.path = path
        self._files: "weakref.WeakSet[File]" = weakref.WeakSet()
        _live.add(self)

    mount = staticmethod(mount)
    format = staticmethod(format)

    def _n(self) -> "_native.Volume":
        if self._v is None:
            raise ValueError(f"volume {self.path!r} is unmounted")
        return self._v

    def __enter__(self) -> "Volume":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Any) -> None:
        if exc is None:
            self.unmount()
            return
        # An exception is on its way: unmount, and let nothing replace it.
        try:
            self.unmount()
        except Exception as e:  # noqa: BLE001 - reported, not raised
            warnings.warn(f"unmounting {self.path!r} after {exc_type.__name__ if exc_type else 'an error'}: {e}")

    def __del__(self) -> None:
        if getattr(self, "_v", None) is not None:
            _warn_unmounted(self, "as it is garbage-collected")
            try:
                self.unmount()
            except Exception:  # noqa: BLE001 - nothing can hear it now
                pass

    def __repr__(self) -> str:
        state = "mounted" if self._v is not None else "unmounted"
        return f"<mballoc.Volume {self.path!r} {state}>"

    @property
    def mounted(self) -> bool:
        return self._v is not None

    def unmount(self) -> None:
        """Close the files still open, write everything back and leave the
        volume clean. A second call does nothing."""
        if self._v is None:
            return
        for f in list(self._files):
            f.close()
        v, self._v = self._v, None
        _live.discard(self)
        v.unmount()

    def open(self, path: PathLike, mode: str = "rb", perms: int = 0o644) -> File:
        """A binary file object for the regular file at ``path``: ``mode`` as
        ``open()``'s (``rb``, ``wb``, ``r+b``, ``ab``, ``xb`` and their
        ``+`` forms); ``perms`` for a file it makes."""
        flags = _MODES.get(mode)
        if flags is None:
            raise ValueError(f"mode {mode!r}: binary modes only (rb, wb, r+b, ab, xb, ...)")
        f = dict(read=False, write=False, append=False, create=False, truncate=False, exclusive=False)
        f.update(flags)
        native = self._n().open(_fs(path), mode=perms, **f)
        file = File(native, mode, os.fsdecode(path))
        self._files.add(file)
        return file

    def mkdir(self, path: PathLike, mode: int = 0o755) -> None:
        self._n().mkdir(_fs(path), mode)

    def makedirs(self, path: PathLike, exist_ok: bool = False) -> None:
        """``mkdir -p``: an existing directory is an error unless ``exist_ok``."""
        if not exist_ok:
            try:
                self.stat(path)
            except FileNotFoundError:
                pass
            else:
                raise FileExistsError(17, "File exists", os.fsdecode(path))
        self._n().makedirs(_fs(path))

    def rmdir(self, path: PathLike) -> None:
        self._n().rmdir(_fs(path))

    def unlink(self, path: PathLike) -> None:
        self._n().unlink(_fs(path))

    remove = unlink

    def rename(self, src: PathLike, dst: PathLike, *, noreplace: bool = False, exchange: bool = False) -> None:
        """Move ``src`` to ``dst``, replacing it (``os.replace``); with
        ``noreplace`` an existing ``dst`` is ``FileExistsError``
        (``RENAME_NOREPLACE``); with ``exchange`` the two swap
        (``RENAME_EXCHANGE``)."""
        if noreplace and exchange:
            raise ValueError("noreplace and exchange exclude each other")
        how = "never" if noreplace else "exchange" if exchange else "allowed"
        self._n().rename(_fs(src), _fs(dst), how)

    def link(self, src: PathLike, dst: PathLike) -> None:
        """A further name ``dst`` for the file ``src``."""
        self._n().link(_fs(src), _fs(dst))

    def symlink(self, target: PathLike, link: PathLike) -> None:
        """Make ``link`` a symbolic link to ``target``."""
        self._n().symlink(_fs(target), _fs(link))

    def readlink(self, path: PathLike) -> str:
        return os.fsdecode(self._n().readlink(_fs(path)))

    def listdir(self, path: PathLike = "/") -> List[str]:
        return [e.name for e in self.scandir(path)]

    def scandir(self, path: PathLike = "/") -> List[DirEntry]:
        """The directory's entries by name, with inode and type."""
        return [DirEntry(os.fsdecode(n), ino, kind) for n, ino, kind in self._n().scandir(_fs(path))]

    def stat(self, path: PathLike, follow_symlinks: bool = True) -> StatResult:
        return _stat_result(self._n().stat(_fs(path), follow_symlinks))

    def lstat(self, path: PathLike) -> StatResult:
        return self.stat(path, follow_symlinks=False)

    def exists(self, path: PathLike) -> bool:
        try:
            self.stat(path)
        except FileNotFoundError:
            return False
        return True

    def truncate(self, path: PathLike, size: int) -> None:
        self._n().truncate(_fs(path), size)

    def chmod(self, path: PathLike, mode: int) -> None:
        self._n().chmod(_fs(path), mode)

    def get_flags(self, path: PathLike) -> int:
        """chattr flags (``mballoc.FL_IMMUTABLE``, ``FL_APPEND``, ...)."""
        return self._n().get_flags(_fs(path))

    def set_flags(self, path: PathLike, flags: int) -> None:
        self._n().set_flags(_fs(path), flags)

    def getxattr(self, path: PathLike, name: str) -> bytes:
        return self._n().getxattr(_fs(path), name)

    def setxattr(self, path: PathLike, name: str, value: bytes, flags: int = 0) -> None:
        """``flags``: 0, ``os.XATTR_CREATE`` or ``os.XATTR_REPLACE``."""
        self._n().setxattr(_fs(path), name, value, flags)

    def listxattr(self, path: PathLike) -> List[str]:
        return self._n().listxattr(_fs(path))

    def removexattr(self, path: PathLike, name: str) -> None:
        self._n().removexattr(_fs(path), name)

    def statvfs(self) -> StatVfs:
        return StatVfs(*self._n().statvfs())

    def extents(self, path: PathLike) -> List[Any]:
        """``[(logical, physical, length), ...]`` in blocks."""
        return self._n().extents(_fs(path))

    def sync(self) -> None:
        """Write back every file and commit."""
        self._n().sync()

    @property
    def block_size(self) -> int:
        return self._n().block_size()

    def settings(self) -> Dict[str, str]:
        """Every engine setting in force, by name."""
        return dict(self._n().settings())

    def mb_stats(self) -> MbStats:
        """The allocator's counters keyed by ext4's ``mb_stats`` names
        (empty unless mounted with ``stats=True``)."""
        return _parse_stats(self._n().mb_stats_text())

    def mb_groups(self) -> List[GroupRow]:
        """One row per group, as ``/proc/fs/ext4/DEV/mb_groups``."""
        return _parse_groups(self._n().mb_groups_text())

    def inject_fault(self, op: str, nth: int = 1, once: bool = True) -> None:
        """Fail the ``nth`` next device ``op`` (``"read"``, ``"write"``,
        ``"flush"``) with ``EIO``, once or from then on (a volume mounted
        with ``fault_injection=True``)."""
        self._n().inject_fault(op, nth, once)

    def heal(self) -> None:
        """Disarm an injected fault."""
        self._n().heal()


@atexit.register
def _unmount_forgotten() -> None:
    for v in list(_live):
        if v.mounted:
            _warn_unmounted(v, "at exit")
            try:
                v.unmount()
            except Exception as e:  # noqa: BLE001 - said, then on to the next
                warnings.warn(f"unmounting {v.path!r} at exit: {e}")
