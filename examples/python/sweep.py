# %% [markdown]
# # A sweep from Python: mb_max_to_scan against fragmentation
#
# Runs the lab's `small-files-fragmented` scenario on the engine for a few
# values of ext4's `mb_max_to_scan`, gathers each variant's extents per
# file into a table, and plots it. Run it as a script
# (`python3 examples/python/sweep.py`, which writes `sweep.png`) or cell by
# cell in a notebook. Needs `pip install ./crates/mballoc-py matplotlib`.

# %%
import os
from typing import Dict, List

import matplotlib

if not os.environ.get("DISPLAY"):
    matplotlib.use("Agg")
import matplotlib.pyplot as plt

import mballoc

values = [1, 4, 16, 64, 200]
table: Dict[str, List[float]] = {}  # variant -> [avg extents per file, one per value]
for v in values:
    r = mballoc.lab.run(
        "small-files-fragmented",
        quick=True,
        backends=["engine"],
        set={"engine.mb_max_to_scan": v, "engine.profile": "kernel"},
    )
    for row in r["scenarios"][0]["rows"]:
        table.setdefault(row["variant"], []).append(row["metrics"]["avg_extents_per_file"])

# %%
for variant, ys in table.items():
    print(f"{variant:<30}", "  ".join(f"{y:.3f}" for y in ys))

# %%
fig, ax = plt.subplots(figsize=(6, 4))
for variant, ys in table.items():
    ax.plot(values, ys, marker="o", label=variant)
ax.set_xscale("log")
ax.set_xlabel("mb_max_to_scan (extents examined per group)")
ax.set_ylabel("average extents per file")
ax.set_title("small-files-fragmented, kernel profile, engine")
ax.legend()
fig.tight_layout()
out = os.environ.get("SWEEP_PNG", "sweep.png")
fig.savefig(out)
print("plot:", out)
