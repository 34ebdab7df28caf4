"""The allocation lab from Python: ``run`` gives what
``mballoc lab run SCENARIO --json`` prints, as Python objects;
``run_shard`` and ``merge`` split a run of the ``mballoc`` command over
machines (``--shard I/N``, ``mballoc lab merge``)."""

import json
import os
import shutil
import subprocess
import tempfile
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

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


def _program(program: Optional[str]) -> str:
    return program or os.environ.get("MBALLOC") or shutil.which("mballoc") or "mballoc"


def _output(cmd: List[str], cwd: Optional[str] = None) -> str:
    """``cmd``'s standard output; ``RuntimeError`` with its message when it fails."""
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def run_shard(argv: Sequence[str], index: int, count: int, program: Optional[str] = None) -> str:
    """Run shard ``index`` (from 1) of ``count`` of the ``mballoc`` command
    ``argv`` (``["lab", "run", ...]`` or ``["lab", "fidelity", ...]``) and
    return its shard document, for :func:`merge`.

    Every shard of one run is handed the same ``argv``: which cells a shard
    runs is computed from the command alone, so the shards can run on any
    machines in any order (a Ray task each, a Slurm array). ``program`` is
    the ``mballoc`` binary: by default ``$MBALLOC``, else the one on
    ``PATH``."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: the index runs from 1 to the count")
    # Every shard's command line is the same but for --shard (the merge
    # checks): the same relative --out, in a directory of its own.
    with tempfile.TemporaryDirectory(prefix="mballoc-shard-") as cwd:
        prog = _program(program)
        if os.sep in prog:
            prog = os.path.abspath(prog)
        return _output([prog, *argv, "--shard", f"{index}/{count}", "--out", "shard", "--json"], cwd=cwd)


def merge(documents: Sequence[str], program: Optional[str] = None) -> Dict[str, Any]:
    """The report of a sharded run from every shard's document (what
    :func:`run_shard` returns, in any order): what the run prints with
    ``--json`` on one machine, as Python objects. Refused (``RuntimeError``
    with the reason) when a shard is missing, given twice or of another
    run."""
    with tempfile.TemporaryDirectory(prefix="mballoc-merge-") as d:
        files = []
        for k, doc in enumerate(documents):
            path = os.path.join(d, f"part-{k}.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write(doc)
            files.append(path)
        cmd = [_program(program), "lab", "merge", "--json", "--out", os.path.join(d, "report"), *files]
        merged: Dict[str, Any] = json.loads(_output(cmd))
        return merged
