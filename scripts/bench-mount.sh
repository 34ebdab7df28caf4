#!/usr/bin/env bash
# The seeds' fio and fallocate2 lines on a mounted engine volume and on
# kernel ext4, in one run, both through system calls (the engine through
# FUSE, so every call also crosses into this process and back).
#
# usage: [MOUNT_OPTIONS=LIST] scripts/bench-mount.sh [REPEATS] [FALLOCATE2_C]
#   REPEATS        runs of each measurement (default 3); medians and ranges
#   FALLOCATE2_C   will-it-scale's loop as a C file (default
#                  ../shared/anchors/fallocate2.c); skipped if missing
#   MOUNT_OPTIONS  `mballoc mount -o` options for the engine (e.g. uring,
#                  busy_poll=0); none by default
# Needs root, fuse3, fio, gcc, e2fsprogs. Images live in /dev/shm.
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${1:-3}
F2C=${2:-../shared/anchors/fallocate2.c}
. scripts/bench-mount-workdir.sh bench
if [ -f "$F2C" ]; then gcc -O2 -o "$W/fallocate2" "$F2C"; fi

mount_fs() { # engine|ext4
    rm -f "$W/img"
    if [ "$1" = engine ]; then
        "$M" mkfs "$W/img" --size 2G >/dev/null
        "$M" mount ${MOUNT_OPTIONS:+-o "$MOUNT_OPTIONS"} "$W/img" "$W/mnt"
    else
        truncate -s 2G "$W/img"
        mkfs.ext4 -q -F "$W/img"
        mount -o loop "$W/img" "$W/mnt"
    fi
}

unmount_fs() { # engine|ext4
    if [ "$1" = engine ]; then "$M" umount "$W/mnt"; else umount "$W/mnt"; fi
}

extents() { # max extents per fio file, as filefrag counts (the image is unmounted)
    "$M" inspect "$W/img" --files | grep seed000 | awk '{n=$(NF-2); if(n>m)m=n} END {print m}'
}

median_range() { # values on stdin -> "median (min–max)"
    sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%g (%g–%g)", m, v[1], v[NR]}'
}

printf '%-8s %-32s %-18s %-26s\n' backend "fio bw MiB/s, median (range)" "extents/file max" "fallocate2 ops/s, 2 procs"
for fs in ext4 engine; do
    bws=() maxes=() f2=()
    for _ in $(seq "$REPEATS"); do
        mount_fs $fs
        bw=$(fio --name=seed000 --directory="$W/mnt" --ioengine=falloc --rw=write --bs=4k \
            --fallocate=none --file_append=1 --thread --numjobs=8 --size=64M --group_reporting \
            --output-format=json |
            python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["write"]["bw"]/1024))')
        bws+=("$bw")
        if [ -x "$W/fallocate2" ]; then
            mkdir "$W/mnt/f2"
            f2+=("$("$W/fallocate2" "$W/mnt/f2" 2 5 | sed 's/.*total_ops_per_s=\([0-9]*\).*/\1/')")
        fi
        unmount_fs $fs
        maxes+=("$(extents)")
    done
    printf '%-8s %-32s %-18s %-26s\n' $fs \
        "$(printf '%s\n' "${bws[@]}" | median_range)" \
        "$(printf '%s\n' "${maxes[@]}" | median_range)" \
        "$( [ ${#f2[@]} -gt 0 ] && printf '%s\n' "${f2[@]}" | median_range || echo skipped)"
done
