#!/usr/bin/env bash
# xfstests on the mount, as CI runs it: builds xfstests from the pinned
# snapshot in ../shared/xfstests (once; it stays in $XFST_DIR) and runs the
# generic tests listed in scripts/xfstests.list, which all pass here. Exits
# 1 on any failure of a listed test or any server panic (run.sh's verdict).
#
# usage: [XFSTESTS_MOUNT_OPTIONS=LIST] scripts/xfstests.sh [TEST...]
#   TEST...                 default: the list
#   XFSTESTS_MOUNT_OPTIONS  `mballoc mount -o` options for every mount the
#                           tests make (e.g. uring, busy_poll=0)
# Needs root and /dev/fuse; skipped with one line otherwise, or when the
# xfstests glue is not beside the project.
set -euo pipefail
cd "$(dirname "$0")/.."
GLUE=${XFSTESTS_GLUE:-$PWD/../shared/xfstests}
if [ "$(id -u)" != 0 ]; then
    echo "xfstests: skipped: needs root"
    exit 0
fi
if [ ! -e /dev/fuse ]; then
    echo "xfstests: skipped: no /dev/fuse"
    exit 0
fi
if [ ! -x "$GLUE/run.sh" ]; then
    echo "xfstests: skipped: no xfstests glue at $GLUE"
    exit 0
fi
cargo build --release -q -p mballoc-cli
# The servers run a copy, so that a build meanwhile cannot change them.
BIN=$(mktemp -d /tmp/mballoc-xfstests-bin.XXXXXX)
if [ -n "${XFSTESTS_MOUNT_OPTIONS:-}" ]; then
    # The mount helper passes only a few options on; a wrapper adds these.
    cp target/release/mballoc "$BIN/mballoc.real"
    printf '#!/bin/sh\nif [ "$1" = mount ]; then shift; exec "%s" mount -o "%s" "$@"; fi\nexec "%s" "$@"\n' \
        "$BIN/mballoc.real" "$XFSTESTS_MOUNT_OPTIONS" "$BIN/mballoc.real" > "$BIN/mballoc"
    chmod +x "$BIN/mballoc"
    echo "xfstests: every mount with -o $XFSTESTS_MOUNT_OPTIONS"
else
    cp target/release/mballoc "$BIN/mballoc"
fi
MBALLOC_BIN="$BIN/mballoc" "$GLUE/setup.sh" >/dev/null
rm -f "${XFST_DIR:-/tmp/xfstests}"/logs/helper/server-*
if [ $# -gt 0 ]; then
    tests=("$@")
else
    mapfile -t tests < <(grep -o '^generic/[0-9]*' scripts/xfstests.list)
fi
echo "xfstests: ${#tests[@]} tests"
rc=0
"$GLUE/run.sh" "${tests[@]}" || rc=1
# Every listed test passes here: one that failed or did not run (a
# requirement no longer met) fails the run too, whatever ext4 does.
log=$(ls -t "${XFST_DIR:-/tmp/xfstests}"/logs/run-*.log | grep -v watchdog | head -1)
for kind in "Failures:" "Not run:"; do
    line=$(grep "^$kind" "$log" | tail -1 || true)
    if [ -n "$line" ]; then
        echo "xfstests: $line"
        rc=1
    fi
done
exit $rc
