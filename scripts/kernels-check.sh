#!/usr/bin/env bash
# The kernel profile of another kernel, proven on that kernel: Debian's
# 6.1 (before CR_BEST_AVAIL_LEN, with linked order lists, short runs
# measured, page-sized folios, the older punch and one stream
# goal) fetched,
# booted under qemu with this build of mballoc inside, and fidelity cases
# run there against the engine under the profile of 6.1, every file
# identical required. Skipped with one line where the kernel cannot be
# fetched (no apt, no network) or booted (no qemu, no busybox).
#
# usage: scripts/kernels-check.sh [KERNEL] [CASE...]
set -euo pipefail
cd "$(dirname "$0")/.."
kernel=${1:-6.1}
shift || true
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(interleaved-appends fallocate-fill delete-refill fragmented-free short-scans punch-edges)
for tool in apt-get dpkg-deb depmod qemu-system-x86_64; do
    command -v "$tool" >/dev/null || { echo "kernels: skipped: no $tool"; exit 0; }
done
[ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || { echo "kernels: skipped: no busybox"; exit 0; }
cargo build --release -q -p mballoc-cli
M=target/release/mballoc
if ! fetched=$($M lab kernels fetch "$kernel" 2>&1); then
    echo "kernels: skipped: cannot fetch $kernel: $fetched"
    exit 0
fi
echo "kernels: $fetched"
args=()
for c in "${cases[@]}"; do args+=(--case "$c"); done
$M lab kernels run "$kernel" --timeout 600 -- lab fidelity --quick "${args[@]}" --require 100 --out /tmp/mballoc-kernels-check
