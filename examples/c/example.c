/* The mballoc C library's tour: format a volume, write 3 MiB, fsync, read
 * back at an offset, print the extents and the allocator's mb_stats.
 *
 *   cargo build --release -p mballoc-c
 *   cc examples/c/example.c -Iinclude target/release/libmballoc_c.a \
 *       -lpthread -ldl -lm -o target/example-c
 *   target/example-c /tmp/example.vol
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mballoc.h"

#define CHECK(call)                                                          \
    do {                                                                     \
        int rc_ = (call);                                                    \
        if (rc_ < 0) {                                                       \
            fprintf(stderr, "%s: %d: %s\n", #call, rc_, mb_last_error());    \
            return 1;                                                        \
        }                                                                    \
    } while (0)

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "example.vol";
    unlink(path);
    printf("mballoc %s\n", mb_version());
    CHECK(mb_format(path, 256ull << 20, 4096));

    MbVolume *vol = NULL;
    CHECK(mb_volume_open(path, MB_VOLUME_STATS, &vol));
    CHECK(mb_mkdir(vol, "/data"));

    MbFile *f = NULL;
    CHECK(mb_file_open(vol, "/data/blob", MB_O_READ | MB_O_WRITE | MB_O_CREATE, &f));
    size_t len = 3u << 20;
    unsigned char *buf = malloc(len);
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    if (mb_file_write_at(f, buf, len, 0) != (int64_t)len) {
        fprintf(stderr, "write: %s\n", mb_last_error());
        return 1;
    }
    CHECK(mb_file_sync(f));

    unsigned char back[4096];
    int64_t got = mb_file_read_at(f, back, sizeof back, 1u << 20);
    if (got != (int64_t)sizeof back || memcmp(back, buf + (1u << 20), sizeof back) != 0) {
        fprintf(stderr, "read back %lld bytes, not what was written\n", (long long)got);
        return 1;
    }
    printf("read back %lld bytes at 1 MiB: match\n", (long long)got);

    size_t count = 0;
    CHECK(mb_file_extents(f, NULL, 0, &count));
    MbExtent *ext = calloc(count ? count : 1, sizeof *ext);
    CHECK(mb_file_extents(f, ext, count, &count));
    for (size_t i = 0; i < count; i++)
        printf("extent %zu: logical %llu -> physical %llu, %u blocks%s\n", i,
               (unsigned long long)ext[i].logical, (unsigned long long)ext[i].physical,
               ext[i].length, ext[i].unwritten ? " (unwritten)" : "");

    /* A bad call: a clear error, nothing changed. */
    MbFile *missing = NULL;
    int rc = mb_file_open(vol, "/nope", MB_O_READ, &missing);
    printf("opening /nope: %d (%s)\n", rc, mb_last_error());

    MbVolumeStat st;
    CHECK(mb_volume_stat(vol, &st));
    printf("volume: %llu blocks of %u bytes, %llu free, %llu inodes\n", (unsigned long long)st.blocks,
           st.block_size, (unsigned long long)st.free_blocks, (unsigned long long)st.inodes);
    char *stats = mb_volume_mb_stats(vol);
    printf("%s", stats);
    mb_string_free(stats);

    CHECK(mb_file_close(f));
    CHECK(mb_volume_close(vol));
    free(ext);
    free(buf);
    return 0;
}
