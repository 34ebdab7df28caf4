#!/usr/bin/env bash
# `mballoc inspect --files` against `find | xargs filefrag` on the same
# ext4 image, cold cache each time (root: drop_caches, a read-only loop
# mount for filefrag): wall time and peak memory (max RSS), REPEATS rounds
# (default 3) alternating, medians with min-max. The image argument is any
# ext4 image; BENCHMARKS.md's was made by
#
#   python3 -c 'import os; [os.makedirs(f"/tmp/t1m/d{d:03d}", exist_ok=True) or [open(f"/tmp/t1m/d{d:03d}/f{f:03d}", "wb").write(b"x") for f in range(1000)] for d in range(1000)]'
#   mke2fs -q -F -t ext4 -b 1024 -N 1100000 -O ^inline_data -d /tmp/t1m /tmp/img1m.img 2G
#
#   scripts/bench-inspect-files.sh IMAGE [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
img=$1
repeats=${2:-3}
[ "$(id -u)" = 0 ] || { echo "needs root (drop_caches, loop mount)" >&2; exit 1; }
cargo build -q --release -p mballoc-cli
mnt=$(mktemp -d)
trap 'umount "$mnt" 2>/dev/null || true; rmdir "$mnt"' EXIT
mount -o loop,ro "$img" "$mnt"
declare -a ours theirs
measure() { # command... -> "seconds maxrss_kib lines"
    sync
    echo 3 > /proc/sys/vm/drop_caches
    local tf lines
    tf=$(mktemp)
    lines=$(/usr/bin/time -o "$tf" -f "%e %M" "$@" | wc -l)
    echo "$(cat "$tf") $lines"
    rm -f "$tf"
}
for r in $(seq 1 "$repeats"); do
    ours+=("$(measure target/release/mballoc inspect --files "$img")")
    theirs+=("$(cd "$mnt" && measure sh -c 'find . -type f -print0 | xargs -0 filefrag')")
done
python3 - "${ours[@]}" --- "${theirs[@]}" <<'PY'
import statistics, sys
args = sys.argv[1:]
k = args.index("---")
rows = {"mballoc inspect --files": args[:k], "find | xargs filefrag": args[k + 1:]}
print(f"{'':<24} {'median s':>9} {'min-max s':>12} {'peak RSS MiB':>13} {'lines':>9}")
for name, samples in rows.items():
    secs = [float(s.split()[0]) for s in samples]
    rss = [int(s.split()[1]) / 1024 for s in samples]
    lines = samples[0].split()[2]
    print(f"{name:<24} {statistics.median(secs):>9.2f} {min(secs):>5.2f}-{max(secs):<6.2f} {statistics.median(rss):>13.1f} {lines:>9}")
PY
