/* Files by name from C: make a few, list them, rename one, delete them,
 * and show the volume empty again.
 *
 *   cc -std=c89 examples/c/files.c -Iinclude target/release/libmballoc_c.a \
 *       -lpthread -ldl -lm -o target/files-c
 *   target/files-c /tmp/files.vol */
#include <stdio.h>
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

/* Print the directory `path`, one entry per line; the entry count. */
static int list(MbVolume *v, const char *path) {
    MbDir *d = NULL;
    MbDirEntry e;
    MbStat st;
    char full[512];
    int n = 0, rc;
    CHECK(mb_opendir(v, path, &d));
    while ((rc = mb_readdir(d, &e)) == 1) {
        sprintf(full, "%s/%s", path, e.name);
        if (mb_stat(v, full, MB_STAT_NOFOLLOW, &st) < 0) {
            mb_closedir(d);
            fprintf(stderr, "stat %s: %s\n", full, mb_last_error());
            return -1;
        }
        printf("  %-10s inode %-4llu %6llu bytes %s\n", e.name, (unsigned long long)e.ino,
               (unsigned long long)st.size, (st.mode & 0170000) == 0040000 ? "(directory)" : "");
        n++;
    }
    mb_closedir(d);
    return rc < 0 ? rc : n;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "files.vol";
    const char *names[3];
    MbVolume *v = NULL;
    MbFile *f = NULL;
    char text[64];
    int i;
    names[0] = "/docs/a.txt";
    names[1] = "/docs/b.txt";
    names[2] = "/docs/c.txt";

    CHECK(mb_format(path, 64u << 20, 4096, MB_FORMAT_FORCE));
    CHECK(mb_volume_open(path, NULL, &v));
    CHECK(mb_mkdir(v, "/docs", 0));
    for (i = 0; i < 3; i++) {
        sprintf(text, "file %d of 3\n", i + 1);
        CHECK(mb_file_open(v, names[i], MB_O_WRITE | MB_O_CREATE | MB_O_EXCL, 0644, &f));
        CHECK(mb_file_write_at(f, (const uint8_t *)text, strlen(text), 0));
        CHECK(mb_file_close(f));
    }
    printf("/docs:\n");
    CHECK(list(v, "/docs"));

    CHECK(mb_rename(v, "/docs/b.txt", "/docs/renamed.txt", MB_RENAME_NOREPLACE));
    printf("after renaming b.txt:\n");
    CHECK(list(v, "/docs"));

    CHECK(mb_unlink(v, "/docs/a.txt"));
    CHECK(mb_unlink(v, "/docs/renamed.txt"));
    CHECK(mb_unlink(v, "/docs/c.txt"));
    CHECK(mb_rmdir(v, "/docs"));
    printf("after deleting everything, the root holds %d entries\n", list(v, ""));
    CHECK(mb_volume_close(v));
    return 0;
}
