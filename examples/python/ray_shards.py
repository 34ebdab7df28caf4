# %% [markdown]
# # A lab run fanned out over a Ray cluster
#
# Splits one `mballoc lab run` into shards (`--shard I/N`), runs each shard
# as a Ray task, brings the shard documents back through Ray's object
# store (no shared file system needed) and merges them with
# `mballoc lab merge` into the report the run makes on one machine. Then
# it runs the same command unsharded here and checks that the two reports
# have the same scenarios, rows and notes.
#
# Every node needs the Python package and the `mballoc` binary
# (`$MBALLOC`, else the one on `PATH`). Without a cluster address
# (`RAY_ADDRESS`), `ray.init` starts a local cluster on this machine.
# Needs `pip install ./crates/mballoc-py ray`; the shard count is
# `SHARDS` (default 3).

# %%
import json
import os
import subprocess
from typing import Any, Dict, List

import ray

import mballoc

argv = [
    "lab", "run", "aged", "multiblock-cost", "fragmented-core", "--quick",
    "--backends", "engine", "--sweep", "engine.mb_max_to_scan=50,200",
]  # fmt: skip
shards = int(os.environ.get("SHARDS", "3"))

ray.init(num_cpus=min(shards, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False)


@ray.remote
def run_shard(index: int) -> str:
    return mballoc.lab.run_shard(argv, index, shards)


documents: List[str] = ray.get([run_shard.remote(i) for i in range(1, shards + 1)])
ray.shutdown()
for doc in documents:
    d = json.loads(doc)
    print(f"shard {d['shard']['index']}/{d['shard']['count']}: {len(d['run']['cells'])} of {len(d['cells'])} cells")

# %%
merged: Dict[str, Any] = mballoc.lab.merge(documents)
for s in merged["scenarios"]:
    print(f"{s['name']:<20} {len(s['rows'])} rows")

# %% [markdown]
# The same command on one machine: the same scenarios, rows (backend,
# variant, sweep point) and notes. Throughput differs between any two
# runs, sharded or not.

# %%
program = os.environ.get("MBALLOC", "mballoc")
one = json.loads(subprocess.run([program, *argv, "--json", "--out", "lab-report"], capture_output=True, text=True,
                                check=True).stdout)  # fmt: skip


def shape(report: Dict[str, Any]) -> List[Any]:
    return [
        (s["name"], s["notes"], [(r["backend"], r["variant"], r.get("point")) for r in s["rows"]])
        for s in report["scenarios"]
    ]


assert shape(one) == shape(merged), "the merged report differs from the unsharded run's"
print(f"merged {shards} shards: the same {len(one['scenarios'])} scenarios, rows and notes as one machine's run")
