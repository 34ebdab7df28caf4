/* The multiblock-cost scenario on a mounted kernel file system: files of
 * SIZE_KIB written 4 KiB at a time, fsync'ed, closed; then unlinked outside
 * the timing. Prints ns per 4 KiB block.
 *
 *   cc -O2 -o multiblock-kernel tools/multiblock-kernel.c
 *   ./multiblock-kernel DIR SIZE_KIB FILES
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s DIR SIZE_KIB FILES\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    long size = atol(argv[2]) * 1024, files = atol(argv[3]);
    static char buf[4096];
    memset(buf, 0xab, sizeof buf);
    char path[4096];
    double total = 0;
    long blocks = 0;
    for (long i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/f%ld", dir, i);
        double t0 = now();
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0) { perror("open"); return 1; }
        for (long off = 0; off < size; off += 4096) {
            long n = size - off < 4096 ? size - off : 4096;
            if (write(fd, buf, n) != n) { perror("write"); return 1; }
            blocks++;
        }
        if (fsync(fd)) { perror("fsync"); return 1; }
        close(fd);
        total += now() - t0;
        if (i % 64 == 63 || i == files - 1) {
            for (long j = i - (i % 64); j <= i; j++) {
                snprintf(path, sizeof path, "%s/f%ld", dir, j);
                unlink(path);
            }
            sync();
        }
    }
    printf("%.1f ns/block over %ld blocks\n", total / blocks, blocks);
    return 0;
}
