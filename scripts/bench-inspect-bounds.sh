#!/usr/bin/env bash
# `mballoc inspect` (the summary) and `mballoc inspect --files` on each
# ext4 image given: wall time and peak memory (max RSS), cold cache each
# time (root: drop_caches), REPEATS rounds (default 3) alternating, medians
# with min-max. BENCHMARKS.md's images: a million files in 1,000
# directories, one directory of a million names, and a chain of 200,000
# directories, made by
#
#   python3 -c 'import os; [os.makedirs(f"t1m/d{d:03d}", exist_ok=True) or [open(f"t1m/d{d:03d}/f{f:03d}", "wb").write(b"x") for f in range(1000)] for d in range(1000)]'
#   mke2fs -q -F -t ext4 -b 1024 -N 1100000 -O ^inline_data -d t1m img1m.img 2G
#   mkdir wide && (cd wide && python3 -c '[open(f"f{i:07d}", "wb").close() for i in range(1000000)]')
#   mke2fs -q -F -t ext4 -b 4096 -N 1100000 -d wide wide.img 2G
#   python3 -c 'import os; os.mkdir("deep"); os.chdir("deep"); [os.mkdir("d") or os.chdir("d") for _ in range(200000)]'
#   ulimit -s unlimited; mke2fs -q -F -t ext4 -b 1024 -N 210000 -d deep deep.img 1G
#
#   scripts/bench-inspect-bounds.sh [-r REPEATS] IMAGE...
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=3
if [ "${1:-}" = -r ]; then
    repeats=$2
    shift 2
fi
[ "$(id -u)" = 0 ] || { echo "needs root (drop_caches)" >&2; exit 1; }
cargo build -q --release -p mballoc-cli
measure() { # command... -> "seconds maxrss_kib"
    sync
    echo 3 > /proc/sys/vm/drop_caches
    local tf
    tf=$(mktemp)
    # Damage makes inspect exit 1; the figures stand either way.
    /usr/bin/time -o "$tf" -f "%e %M" "$@" >/dev/null 2>&1 || true
    tail -1 "$tf"
    rm -f "$tf"
}
for img in "$@"; do
    declare -a summary=() files=()
    for _ in $(seq 1 "$repeats"); do
        summary+=("$(measure target/release/mballoc inspect "$img")")
        files+=("$(measure target/release/mballoc inspect --files "$img")")
    done
    python3 - "$img" "${summary[@]}" --- "${files[@]}" <<'PY'
import statistics, sys
img, args = sys.argv[1], sys.argv[2:]
k = args.index("---")
print(img)
print(f"  {'':<24} {'median s':>9} {'min-max s':>12} {'peak RSS MiB':>13}")
for name, samples in {"inspect (summary)": args[:k], "inspect --files": args[k + 1:]}.items():
    secs = [float(s.split()[0]) for s in samples]
    rss = [int(s.split()[1]) / 1024 for s in samples]
    print(f"  {name:<24} {statistics.median(secs):>9.2f} {min(secs):>5.2f}-{max(secs):<6.2f} {statistics.median(rss):>13.1f}")
PY
done
