#!/usr/bin/env bash
# The C library from C: every example and the acceptance program, built
# as C89 and as C11 with every warning an error, and run; then `make
# install` into a staging directory and the tour built through pkg-config
# against the shared library (its SONAME) and run.
#
#   scripts/c-tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p mballoc-c
out=target/c-tests
rm -rf "$out" && mkdir -p "$out/run"
link=(-Iinclude target/release/libmballoc_c.a -lpthread -ldl -lm)
for std in c89 c11; do
    for src in examples/c/example.c examples/c/files.c examples/c/seqwrite.c crates/mballoc-c/tests/c/acceptance.c; do
        name=$(basename "$src" .c)
        cc -std=$std -Wall -Wextra -Werror "$src" "${link[@]}" -o "$out/$name-$std"
    done
    "$out/example-$std" "$out/run/example.vol" > "$out/example-$std.txt"
    grep -q "match" "$out/example-$std.txt"
    "$out/files-$std" "$out/run/files.vol" | grep -q "root holds 0 entries"
    "$out/seqwrite-$std" "$out/run/seq.vol" $((16 << 20)) $((1 << 20)) > /dev/null
    "$out/acceptance-$std" "$out/run"
done
echo "C89 and C11: examples and acceptance pass"

# Installed: headers, both libraries and pkg-config's file.
stage="$PWD/$out/stage"
make -s -C crates/mballoc-c install DESTDIR="$stage" PREFIX=/usr/local > /dev/null
lib="$stage/usr/local/lib"
test "$(readelf -d "$lib/libmballoc_c.so" | sed -n 's/.*soname: \[\(.*\)\]/\1/p')" = libmballoc_c.so.0
flags=$(PKG_CONFIG_SYSROOT_DIR="$stage" PKG_CONFIG_PATH="$lib/pkgconfig" pkg-config --cflags --libs mballoc)
cc -std=c89 -Wall -Wextra -Werror examples/c/files.c $flags -o "$out/files-installed"
LD_LIBRARY_PATH="$lib" "$out/files-installed" "$out/run/installed.vol" | grep -q "root holds 0 entries"
echo "installed: pkg-config and the shared library (SONAME libmballoc_c.so.0) work"
