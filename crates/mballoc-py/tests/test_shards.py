"""A run split into shards with ``mballoc.lab.run_shard`` and put together
with ``mballoc.lab.merge`` is the run on one machine. Both drive the
``mballoc`` binary: ``$MBALLOC``, else the workspace's release build, else
the one on ``PATH``; without one the tests say they skipped."""

import os
import shutil

import pytest

import mballoc

HERE = os.path.dirname(os.path.abspath(__file__))
BUILT = os.path.join(HERE, "..", "..", "..", "target", "release", "mballoc")
PROGRAM = os.environ.get("MBALLOC") or (BUILT if os.path.exists(BUILT) else shutil.which("mballoc"))
needs_binary = pytest.mark.skipif(PROGRAM is None, reason="no mballoc binary (cargo build --release -p mballoc-cli)")

ARGV = ["lab", "run", "fragmented-core", "multiblock-cost", "--quick", "--backends", "engine",
        "--sweep", "engine.mb_max_to_scan=50,200"]  # fmt: skip


def shape(report):
    return [
        (s["name"], s["notes"], [(r["backend"], r["variant"], r.get("point")) for r in s["rows"]])
        for s in report["scenarios"]
    ]


@needs_binary
def test_shards_merge_into_the_whole_run():
    docs = [mballoc.lab.run_shard(ARGV, i, 3, program=PROGRAM) for i in (3, 1, 2)]
    merged = mballoc.lab.merge(docs, program=PROGRAM)
    whole = mballoc.lab.merge([mballoc.lab.run_shard(ARGV, 1, 1, program=PROGRAM)], program=PROGRAM)
    assert [s["name"] for s in merged["scenarios"]] == ["fragmented-core", "multiblock-cost"]
    assert shape(merged) == shape(whole)
    assert merged["header"]["command"] == whole["header"]["command"]


@needs_binary
def test_a_missing_or_repeated_shard_is_refused():
    one = mballoc.lab.run_shard(ARGV, 1, 2, program=PROGRAM)
    with pytest.raises(RuntimeError, match="shard 2/2 is missing"):
        mballoc.lab.merge([one], program=PROGRAM)
    with pytest.raises(RuntimeError, match="given 2 times"):
        mballoc.lab.merge([one, one], program=PROGRAM)


def test_a_shard_index_outside_the_count_is_refused():
    with pytest.raises(ValueError, match="from 1 to the count"):
        mballoc.lab.run_shard(ARGV, 0, 2, program="mballoc")
