#!/usr/bin/env bash
# Sequential write of 1 GiB in 1 MiB writes (then fsync) through the Rust
# API, the C API and the Python file object, in the same run, interleaved
# in a rotating order, REPEATS times each (default 5): medians with min-max, and each binding's
# throughput as a ratio of Rust's. Volume files go in $BENCH_DIR (default
# target/bench-bindings, on the disk the build is on).
#
#   scripts/bench-bindings.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
total=$((1 << 30))
chunk=$((1 << 20))
dir=${BENCH_DIR:-target/bench-bindings}
mkdir -p "$dir"
cargo build -q --release -p mballoc-vol --example seqwrite
cargo build -q --release -p mballoc-c
cc -O2 -Wall examples/c/seqwrite.c -Iinclude target/release/libmballoc_c.a -lpthread -ldl -lm -o target/seqwrite-c
python3 -c "import mballoc" 2>/dev/null || { echo "install the Python package first: pip install ./crates/mballoc-py" >&2; exit 1; }
declare -A runs
orders=("rust c python" "c python rust" "python rust c")
for r in $(seq 0 "$repeats"); do
    # Each round in another order, so that no API always follows the same
    # one (the disk is still settling the last run's 1 GiB).
    for lang in ${orders[$((r % 3))]}; do
        # A fresh volume file for every run: writing over the blocks an
        # earlier run left would spare the host file system its allocation.
        rm -f "$dir/vol"
        case $lang in
            rust) s=$(target/release/examples/seqwrite "$dir/vol" $total $chunk) ;;
            c) s=$(target/seqwrite-c "$dir/vol" $total $chunk) ;;
            python) s=$(python3 examples/python/seqwrite.py "$dir/vol" $total $chunk) ;;
        esac
        # The first round warms the page cache and the allocator's code
        # paths; it is not counted.
        [ "$r" -gt 0 ] && runs[$lang]+="$s "
    done
done
rm -f "$dir/vol"
python3 - "${runs[rust]}" "${runs[c]}" "${runs[python]}" "$total" <<'PY'
import statistics, sys
total = int(sys.argv[4])
rows = dict(zip(["rust", "c", "python"], (list(map(float, a.split())) for a in sys.argv[1:4])))
base = total / statistics.median(rows["rust"])
print(f"{'API':<8} {'median MiB/s':>12} {'min-max MiB/s':>16} {'vs Rust':>8}")
for name, secs in rows.items():
    rates = [total / s / 2**20 for s in secs]
    med = statistics.median(rates)
    print(f"{name:<8} {med:>12.0f} {min(rates):>7.0f}-{max(rates):<8.0f} {med * 2**20 / base:>7.2f}x")
PY
