/* Sequential write through the C API (scripts/bench-bindings.sh): format,
 * write TOTAL bytes in CHUNK-byte writes, fsync, close; print the seconds
 * from the first write to the end of the fsync. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mballoc.h"

int main(int argc, char **argv) {
    const char *path;
    unsigned long long total, done;
    size_t chunk, i;
    MbVolume *vol = NULL;
    MbFile *f = NULL;
    unsigned char *buf;
    struct timespec a, b;
    if (argc != 4) {
        fprintf(stderr, "usage: seqwrite PATH TOTAL CHUNK\n");
        return 2;
    }
    path = argv[1];
    total = strtoul(argv[2], NULL, 10);
    chunk = strtoul(argv[3], NULL, 10);
    if (mb_format(path, total * 2, 4096, MB_FORMAT_FORCE) < 0 || mb_volume_open(path, NULL, &vol) < 0 ||
        mb_file_open(vol, "/seq", MB_O_WRITE | MB_O_CREATE, 0, &f) < 0) {
        fprintf(stderr, "%s\n", mb_last_error());
        return 1;
    }
    buf = malloc(chunk);
    for (i = 0; i < chunk; i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (done = 0; done < total; done += chunk)
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
    printf("%.4f\n", (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
    free(buf);
    return 0;
}
