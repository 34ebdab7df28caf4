"""The bare allocator: free space and placement, nothing stored."""

from typing import List, Mapping, Optional

from . import _native
from ._types import Allocation, GroupRow, MbStats, _parse_groups, _parse_stats


class Allocator:
    """ext4's multiblock allocator over ``blocks`` blocks.

    ``profile`` (``"default"`` or ``"kernel"``) and ``settings`` (the
    allocator's tunables by ext4's names, ``{"mb_max_to_scan": 50}``)
    choose its policy; ``stats`` counts ``mb_stats``."""

    def __init__(
        self,
        blocks: int,
        block_size: int = 4096,
        *,
        profile: Optional[str] = None,
        stats: bool = False,
        settings: Optional[Mapping[str, object]] = None,
    ) -> None:
        opts = [] if profile is None else [f"profile={profile}"]
        if stats:
            opts.append("mb_stats=1")
        opts += [f"{k}={v}" for k, v in (settings or {}).items()]
        self._a = _native.Allocator(blocks, block_size, opts)

    def allocate(
        self,
        length: int = 1,
        goal: Optional[int] = None,
        *,
        goal_policy: str = "hint",
        min_length: Optional[int] = None,
        metadata: bool = False,
        stream: Optional[int] = None,
    ) -> Allocation:
        """Up to ``length`` blocks, at least ``min_length`` (1 unless given).
        ``goal`` is where to look: ``goal_policy`` ``"hint"`` starts the
        scan at its group, ``"try"`` tries exactly it first, ``"only"``
        takes it or fails. ``metadata`` marks a metadata request (never
        trimmed by CR_BEST_AVAIL_LEN); ``stream`` uses that stream goal.
        A full allocator is ``OSError(ENOSPC)``."""
        return Allocation(*self._a.allocate(length, goal, goal_policy, min_length, metadata, stream))

    def free(self, start: int, length: int) -> None:
        """Give blocks back; a block already free is ``ValueError`` and
        nothing is freed."""
        self._a.free(start, length)

    @property
    def free_blocks(self) -> int:
        return self._a.free_blocks()

    def stats(self) -> MbStats:
        """The counters keyed by ext4's ``mb_stats`` names (empty unless
        ``stats=True``)."""
        return _parse_stats(self._a.mb_stats_text())

    def mb_groups(self) -> List[GroupRow]:
        return _parse_groups(self._a.mb_groups_text())
