"""The values the package returns: named tuples for ``stat``,
``statvfs``, directory entries, allocations and check reports, typed dicts
for the allocator's ``mb_stats`` and ``mb_groups``, and the parsers that
make those from the reports' text."""

import stat as _stat
import sys
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

if sys.version_info >= (3, 8):
    from typing import TypedDict
else:  # pragma: no cover - the package needs 3.8
    raise ImportError("mballoc needs Python 3.8 or later")

#: chattr ``S``: writes are synchronous.
FL_SYNC = 0x08
#: chattr ``i``: no change to contents, names or attributes.
FL_IMMUTABLE = 0x10
#: chattr ``a``: writes only at the end; no truncation, no unlink.
FL_APPEND = 0x20
#: chattr ``d``: skipped by dump.
FL_NODUMP = 0x40
#: chattr ``A``: no access-time updates.
FL_NOATIME = 0x80


class StatResult(NamedTuple):
    """What ``Volume.stat`` and ``File.stat`` give, in ``os.stat_result``'s
    names. Times are nanoseconds since the epoch; ``st_blocks`` counts
    512-byte units, as ``os.stat``'s does."""

    st_ino: int
    st_mode: int
    st_nlink: int
    st_uid: int
    st_gid: int
    st_size: int
    st_blocks: int
    st_blksize: int
    st_rdev: int
    st_flags: int
    st_atime_ns: int
    st_mtime_ns: int
    st_ctime_ns: int
    st_birthtime_ns: int

    @property
    def st_mtime(self) -> float:
        """Modification time in seconds."""
        return self.st_mtime_ns / 1e9

    def is_dir(self) -> bool:
        return _stat.S_ISDIR(self.st_mode)

    def is_file(self) -> bool:
        return _stat.S_ISREG(self.st_mode)

    def is_symlink(self) -> bool:
        return _stat.S_ISLNK(self.st_mode)


_StatTuple = Tuple[Tuple[int, int, int, int, int, int, int, int, int, int], Tuple[int, int, int, int]]


def _stat_result(t: _StatTuple) -> StatResult:
    (ino, mode, nlink, uid, gid, size, blocks, bsize, rdev, flags), times = t
    return StatResult(ino, mode, nlink, uid, gid, size, blocks * (bsize // 512), bsize, rdev, flags, *times)


class StatVfs(NamedTuple):
    """What ``Volume.statvfs`` gives, in ``os.statvfs_result``'s names."""

    f_bsize: int
    f_blocks: int
    f_bfree: int
    f_files: int
    f_ffree: int
    f_namemax: int


class DirEntry(NamedTuple):
    """One entry of ``Volume.scandir``."""

    name: str
    ino: int
    #: The type bits (``stat.S_IFREG``, ``stat.S_IFDIR``, ...).
    kind: int

    def is_dir(self) -> bool:
        return self.kind == _stat.S_IFDIR

    def is_file(self) -> bool:
        return self.kind == _stat.S_IFREG

    def is_symlink(self) -> bool:
        return self.kind == _stat.S_IFLNK


class Allocation(NamedTuple):
    """What ``Allocator.allocate`` gives."""

    start: int
    length: int
    #: Which step found the blocks: ``goal``, a pass's kernel name
    #: (``CR_POWER2_ALIGNED``, ``CR_GOAL_LEN_FAST``, ``CR_BEST_AVAIL_LEN``,
    #: ``CR_GOAL_LEN_SLOW``, ``CR_ANY_FREE``) or ``policy``.
    found_by: str
    groups_scanned: int
    extents_scanned: int


class CheckReport(NamedTuple):
    """What ``mballoc.check`` found (and, with ``repair=True``, did)."""

    clean: bool
    problems: List[str]
    repaired: bool
    refused: List[str]
    quarantined: List[str]
    orphans: int
    inodes: int
    regular_files: int
    free_blocks: int
    pending_transactions: int
    #: Why the volume last stopped taking changes, if it did.
    stopped: Optional[str]


class Setting(NamedTuple):
    """One engine setting, as ``mballoc.settings()`` lists them."""

    key: str
    unit: str
    range: str
    about: str
    #: Whether a mount may choose it (the shape and storage settings are
    #: the volume's own).
    mountable: bool


#: ``mb_stats`` by ext4's names: the top-level counters by their own name,
#: each pass's as ``cr_p2_aligned_stats.hits`` and so on. Empty when the
#: volume or allocator counts nothing (``stats=False``, the default, as
#: the kernel's ``mb_stats=0``).
MbStats = TypedDict(
    "MbStats",
    {
        "reqs": int,
        "success": int,
        "groups_scanned": int,
        "cr_p2_aligned_stats.hits": int,
        "cr_p2_aligned_stats.groups_considered": int,
        "cr_p2_aligned_stats.extents_scanned": int,
        "cr_p2_aligned_stats.useless_loops": int,
        "cr_goal_fast_stats.hits": int,
        "cr_goal_fast_stats.groups_considered": int,
        "cr_goal_fast_stats.extents_scanned": int,
        "cr_goal_fast_stats.useless_loops": int,
        "cr_best_avail_stats.hits": int,
        "cr_best_avail_stats.groups_considered": int,
        "cr_best_avail_stats.extents_scanned": int,
        "cr_best_avail_stats.useless_loops": int,
        "cr_goal_slow_stats.hits": int,
        "cr_goal_slow_stats.groups_considered": int,
        "cr_goal_slow_stats.extents_scanned": int,
        "cr_goal_slow_stats.useless_loops": int,
        "cr_any_free_stats.hits": int,
        "cr_any_free_stats.groups_considered": int,
        "cr_any_free_stats.extents_scanned": int,
        "cr_any_free_stats.useless_loops": int,
        "extents_scanned": int,
        "goal_hits": int,
        "stream_goal_hits": int,
        "len_goal_hits": int,
        "2^n_hits": int,
        "breaks": int,
        "lost": int,
        "buddies_generated": str,
        "buddies_time_used": int,
        "preallocated": int,
        "discarded": int,
    },
    total=False,
)


class GroupRow(TypedDict):
    """One row of ``mb_groups``, as ``/proc/fs/ext4/DEV/mb_groups``."""

    group: int
    free: int
    frags: int
    first: int
    #: Free extents by order: ``counters[k]`` of 2^k blocks.
    counters: List[int]


def _parse_stats(text: str) -> MbStats:
    """The ``mb_stats`` text keyed by ext4's names; values that are not one
    number stay strings."""
    out: Dict[str, Union[int, str]] = {}
    if "collection turned off" in text:
        return {}
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
    return out  # type: ignore[return-value]


def _parse_groups(text: str) -> List[GroupRow]:
    rows: List[GroupRow] = []
    for line in text.splitlines():
        if not line.startswith("#") or line.startswith("#group"):
            continue
        head, _, rest = line.partition("[")
        g, _, fields = head.partition(":")
        free, frags, first = (int(x) for x in fields.split()[:3])
        counters = [int(x) for x in rest.rstrip("] \n").split()]
        rows.append(GroupRow(group=int(g[1:]), free=free, frags=frags, first=first, counters=counters))
    return rows
