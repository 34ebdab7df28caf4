"""The allocation lab from Python: ``run`` gives what
``mballoc lab run SCENARIO --json`` prints, as Python objects."""

import json
from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import _native


def scenarios() -> List[Tuple[str, str]]:
    """Every scenario: ``(name, one line about it)``."""
    return _native.lab_scenarios()


def run(
    scenario: str,
    quick: bool = True,
    backends: Iterable[str] = ("engine",),
    set: Optional[Dict[str, object]] = None,  # noqa: A002 - the CLI's name
    seed: int = 1,
) -> Dict[str, Any]:
    """Run one scenario on ``backends`` (``engine``; ``ext4``, ``xfs``,
    ``btrfs`` and ``mount`` need root) with ``set`` laid over every row
    (``{"engine.mb_max_to_scan": 50, "engine.profile": "kernel"}``: the
    keys of ``mballoc lab settings``)."""
    settings = [f"{k}={v}" for k, v in (set or {}).items()]
    report: Dict[str, Any] = json.loads(_native.lab_run(scenario, quick, list(backends), settings, seed))
    return report
