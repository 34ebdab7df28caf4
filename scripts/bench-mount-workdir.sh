# Sourced by the mount benchmarks (bench-mount*.sh), from the project's
# root: builds mballoc (M), makes a work directory in /dev/shm (W) named
# after $1 with a mount point W/mnt, and leaves nothing mounted or behind
# on exit.
cargo build --release -q -p mballoc-cli
M=$PWD/target/release/mballoc
W=$(mktemp -d "/dev/shm/mballoc-$1.XXXXXX")
cleanup() {
    fusermount3 -u -z "$W/mnt" 2>/dev/null || true
    umount "$W/mnt" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT INT TERM
mkdir -p "$W/mnt"
