/* The mballoc C library's tour: format a volume, write 3 MiB, fsync, read
 * back at an offset, print the extents and the allocator's mb_stats, and
 * ask the bare allocator for blocks.
 *
 *   cargo build --release -p mballoc-c
 *   cc -std=c89 examples/c/example.c -Iinclude target/release/libmballoc_c.a \
 *       -lpthread -ldl -lm -o target/example-c
 *   target/example-c /tmp/example.vol
 *
 * (after `make -C crates/mballoc-c install`:
 *  cc examples/c/example.c $(pkg-config --cflags --libs mballoc)) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mballoc.h"

#define CHECK(call)                                                          \
    do {                                                                     \
        long long rc_ = (long long)(call);                                   \
        if (rc_ < 0) {                                                       \
            fprintf(stderr, "%s: %lld: %s\n", #call, rc_, mb_last_error());  \
            return 1;                                                        \
        }                                                                    \
    } while (0)

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "example.vol";
    MbVolume *vol = NULL;
    MbFile *f = NULL;
    MbFile *missing = NULL;
    MbExtent *ext;
    MbStatVfs st;
    MbAllocator *a = NULL;
    MbAllocRequest req;
    MbAllocation got;
    size_t len = 3u << 20, count = 0, i;
    unsigned char *buf = malloc(len);
    unsigned char back[4096];
    int64_t n;
    char *stats;
    int rc;

    printf("mballoc %s (header %s)\n", mb_version(), MB_VERSION);
    CHECK(mb_format(path, 256u << 20, 4096, MB_FORMAT_FORCE));
    CHECK(mb_volume_open(path, "profile=kernel,stats", &vol));
    CHECK(mb_mkdir(vol, "/data", 0));

    CHECK(mb_file_open(vol, "/data/blob", MB_O_READ | MB_O_WRITE | MB_O_CREATE, 0, &f));
    for (i = 0; i < len; i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    CHECK(mb_file_write_at(f, buf, len, 0));
    CHECK(mb_file_sync(f));

    n = mb_file_read_at(f, back, sizeof back, 1u << 20);
    if (n != (int64_t)sizeof back || memcmp(back, buf + (1u << 20), sizeof back) != 0) {
        fprintf(stderr, "read back %lld bytes, not what was written\n", (long long)n);
        return 1;
    }
    printf("read back %lld bytes at 1 MiB: match\n", (long long)n);

    CHECK(mb_file_extents(f, NULL, 0, &count));
    ext = calloc(count ? count : 1, sizeof *ext);
    CHECK(mb_file_extents(f, ext, count, &count));
    for (i = 0; i < count; i++)
        printf("extent %lu: logical %llu -> physical %llu, %u blocks%s\n", (unsigned long)i,
               (unsigned long long)ext[i].logical, (unsigned long long)ext[i].physical,
               (unsigned)ext[i].length, ext[i].unwritten ? " (unwritten)" : "");

    /* A bad call: a clear error naming the path, nothing changed. */
    rc = mb_file_open(vol, "/nope", MB_O_READ, 0, &missing);
    printf("opening /nope: %d (%s)\n", rc, mb_last_error());

    CHECK(mb_volume_statvfs(vol, &st));
    printf("volume: %llu blocks of %u bytes, %llu free, %llu of %llu inodes free\n",
           (unsigned long long)st.blocks, (unsigned)st.block_size, (unsigned long long)st.free_blocks,
           (unsigned long long)st.free_inodes, (unsigned long long)st.inodes);
    stats = mb_volume_mb_stats(vol);
    printf("%s", stats);
    mb_string_free(stats);
    CHECK(mb_file_close(f));
    CHECK(mb_volume_close(vol));

    /* The bare allocator: the whole request, and which step served it. */
    CHECK(mb_allocator_new(1u << 20, 4096, "profile=kernel,mb_stats=1", &a));
    memset(&req, 0, sizeof req);
    req.len = 64;
    req.goal = 5000;
    req.goal_policy = MB_GOAL_TRY;
    CHECK(mb_allocator_allocate(a, &req, &got));
    printf("allocated %u blocks at %llu, found by %s\n", (unsigned)got.len, (unsigned long long)got.start,
           mb_found_by_name(got.found_by));
    CHECK(mb_allocator_release(a, got.start, got.len));
    mb_allocator_destroy(a);
    free(ext);
    free(buf);
    return 0;
}
