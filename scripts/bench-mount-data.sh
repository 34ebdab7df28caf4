#!/usr/bin/env bash
# The mount's data paths against kernel ext4, in one run, both through
# system calls (the engine through FUSE, so every call also crosses into
# the mount process and back): 1 MiB sequential write + fsync, cold 1 MiB
# sequential read, 4 KiB random write + fdatasync, and 4 KiB file
# creation with an fsync every 100th file.
#
# usage: [MOUNT_OPTIONS=LIST] scripts/bench-mount-data.sh [REPEATS]
#   REPEATS        runs of each measurement (default 3); medians and ranges
#   MOUNT_OPTIONS  `mballoc mount -o` options for the engine (e.g. uring,
#                  busy_poll=0); none by default
# Needs root, fuse3, fio, e2fsprogs. Both volumes are files in /dev/shm.
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${1:-3}
. scripts/bench-mount-workdir.sh bench-data

mount_fs() { # engine|ext4 [fresh]
    if [ "${2:-}" = fresh ]; then
        rm -f "$W/img"
        if [ "$1" = engine ]; then
            "$M" mkfs "$W/img" --size 2G >/dev/null
        else
            truncate -s 2G "$W/img"
            mkfs.ext4 -q -F "$W/img"
        fi
    fi
    if [ "$1" = engine ]; then "$M" mount ${MOUNT_OPTIONS:+-o "$MOUNT_OPTIONS"} "$W/img" "$W/mnt"; else mount -o loop "$W/img" "$W/mnt"; fi
}

unmount_fs() { # engine|ext4
    if [ "$1" = engine ]; then "$M" umount "$W/mnt"; else umount "$W/mnt"; fi
}

fio_json() { # fio args... -> the JSON report
    fio --directory="$W/mnt" --ioengine=psync --group_reporting --output-format=json "$@"
}

field() { # python expression over the report `r` (stdin)
    python3 -c "import json,sys; r=json.load(sys.stdin)['jobs'][0]; print($1)"
}

median_range() { # values on stdin -> "median (min–max)"
    sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.0f (%.0f–%.0f)", m, v[1], v[NR]}'
}

declare -A RES VALS
# The two file systems alternate within each repeat (ext4 first in odd
# repeats, the mount first in even ones), so both meet the same host:
# this machine's speed drifts by 2x over minutes.
for r in $(seq "$REPEATS"); do
    order="ext4 engine"
    [ $((r % 2)) = 0 ] && order="engine ext4"
    for fs in $order; do
        mount_fs $fs fresh
        # MiB/s: bytes over the whole job, the closing fsync included.
        VALS[$fs,seqw]+="$(fio_json --name=seq --rw=write --bs=1M --size=512M --end_fsync=1 | field "round(r['write']['io_bytes']/1048576/(r['job_runtime']/1000),1)") "
        unmount_fs $fs
        sync
        echo 3 >/proc/sys/vm/drop_caches
        mount_fs $fs
        VALS[$fs,seqr]+="$(fio_json --name=seq --rw=read --bs=1M --size=512M | field "round(r['read']['bw']/1024,1)") "
        VALS[$fs,randw]+="$(fio_json --name=rand --rw=randwrite --bs=4k --size=64M --io_size=16M --fdatasync=1 --randrepeat=1 | field "round(r['write']['iops'])") "
        mkdir "$W/mnt/small"
        VALS[$fs,create]+="$(fio_json --name=small --directory="$W/mnt/small" --rw=write --bs=4k --filesize=4k --nrfiles=4000 \
            --openfiles=1 --file_service_type=sequential --create_on_open=1 --fsync=100 | field "round(r['write']['iops'])") "
        unmount_fs $fs
    done
done
for fs in ext4 engine; do
    for k in seqw seqr randw create; do
        RES[$fs,$k]=$(printf '%s\n' ${VALS[$fs,$k]} | median_range)
    done
done

ratio() { # key -> engine median / ext4 median
    python3 -c "print(f'{float(\"${RES[engine,$1]%% *}\")/float(\"${RES[ext4,$1]%% *}\"):.2f}×')"
}

printf '| %-40s | %-26s | %-26s | %-6s |\n' measurement "ext4, median (range)" "engine mounted" ratio
printf '| %-40s | %-26s | %-26s | %-6s |\n' "1 MiB sequential write + fsync, MiB/s" "${RES[ext4,seqw]}" "${RES[engine,seqw]}" "$(ratio seqw)"
printf '| %-40s | %-26s | %-26s | %-6s |\n' "cold 1 MiB sequential read, MiB/s" "${RES[ext4,seqr]}" "${RES[engine,seqr]}" "$(ratio seqr)"
printf '| %-40s | %-26s | %-26s | %-6s |\n' "4 KiB random write + fdatasync, IOPS" "${RES[ext4,randw]}" "${RES[engine,randw]}" "$(ratio randw)"
printf '| %-40s | %-26s | %-26s | %-6s |\n' "4 KiB files, fsync every 100th, files/s" "${RES[ext4,create]}" "${RES[engine,create]}" "$(ratio create)"
