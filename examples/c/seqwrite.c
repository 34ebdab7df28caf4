/* Sequential write through the C API (scripts/bench-bindings.sh): format,
 * write TOTAL bytes in CHUNK-byte writes, fsync, close; print the seconds
 * from the first write to the end of the fsync. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "mballoc.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: seqwrite PATH TOTAL CHUNK\n");
        return 2;
    }
    const char *path = argv[1];
    unsigned long long total = strtoull(argv[2], NULL, 10);
    size_t chunk = strtoull(argv[3], NULL, 10);
    unlink(path);
    MbVolume *vol = NULL;
    MbFile *f = NULL;
    if (mb_format(path, total * 2, 4096) < 0 || mb_volume_open(path, 0, &vol) < 0 ||
        mb_file_open(vol, "/seq", MB_O_WRITE | MB_O_CREATE, &f) < 0) {
        fprintf(stderr, "%s\n", mb_last_error());
        return 1;
    }
    unsigned char *buf = malloc(chunk);
    for (size_t i = 0; i < chunk; i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (unsigned long long done = 0; done < total; done += chunk)
        if (mb_file_write_at(f, buf, chunk, done) < 0) {
            fprintf(stderr, "%s\n", mb_last_error());
            return 1;
        }
    if (mb_file_sync(f) < 0) {
        fprintf(stderr, "%s\n", mb_last_error());
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    mb_file_close(f);
    mb_volume_close(vol);
    printf("%.4f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    free(buf);
    return 0;
}
