#!/usr/bin/env bash
# One round trip to the mount's server, against the same call on kernel
# ext4: getxattr of an absent attribute, which FUSE always sends to the
# server (ENODATA is not cached) and the server answers without work.
# 100,000 calls after 1,000 of warm-up, three runs each: the mount with
# busy polling (the default), without it, over io_uring (where the fuse
# module's enable_uring is on), and ext4 on a loop device.
#
# usage: scripts/bench-mount-rtt.sh [CALLS]
# Needs root, fuse3, gcc, e2fsprogs. Both volumes are files in /dev/shm.
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS=${1:-100000}
. scripts/bench-mount-workdir.sh rtt
gcc -O2 -o "$W/round-trip" scripts/round-trip.c
"$M" mkfs "$W/img" --size 1G >/dev/null
runs() { # label
    touch "$W/mnt/f"
    for _ in 1 2 3; do printf '%-28s %s\n' "$1" "$("$W/round-trip" "$W/mnt/f" "$CALLS")"; done
}
"$M" mount "$W/img" "$W/mnt" && runs "mount" && "$M" umount "$W/mnt"
"$M" mount -o busy_poll=0 "$W/img" "$W/mnt" && runs "mount busy_poll=0" && "$M" umount "$W/mnt"
if [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ]; then
    "$M" mount -o uring "$W/img" "$W/mnt" && runs "mount uring" && "$M" umount "$W/mnt"
else
    echo "mount uring: skipped (the fuse module's enable_uring is off)"
fi
truncate -s 1G "$W/ext4.img"
mkfs.ext4 -q -F "$W/ext4.img"
mount -o loop "$W/ext4.img" "$W/mnt" && runs "ext4" && umount "$W/mnt"
