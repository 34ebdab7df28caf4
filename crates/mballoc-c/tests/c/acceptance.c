/* What keeps work, from C: a program that returns without closing its
 * volume, the commit interval under kill -9, a write to an immutable
 * file, ZERO_RANGE failing half-way, and the namespace by path. Built
 * as C89 and as C11 by scripts/c-tests.sh and run there:
 *
 *   acceptance DIR        (DIR: a scratch directory)
 *
 * Prints one line per check and exits non-zero at the first failure. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mballoc.h"

#define CHECK(call)                                                             \
    do {                                                                        \
        long long rc_ = (long long)(call);                                      \
        if (rc_ < 0) {                                                          \
            fprintf(stderr, "%s:%d: %s: %lld: %s\n", __FILE__, __LINE__, #call, \
                    rc_, mb_last_error());                                      \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

#define EXPECT(cond, what)                                                      \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: %s (%s)\n", __FILE__, __LINE__, what,       \
                    mb_last_error());                                           \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static char scratch[4096];

static const char *at(const char *name) {
    static char buf[4][4200];
    static int next = 0;
    char *b = buf[next++ % 4];
    sprintf(b, "%s/%s", scratch, name);
    return b;
}

static void write_file(MbVolume *v, const char *path, const char *data, size_t len) {
    MbFile *f = NULL;
    CHECK(mb_file_open(v, path, MB_O_WRITE | MB_O_CREATE | MB_O_TRUNC, 0, &f));
    EXPECT(mb_file_write_at(f, (const uint8_t *)data, len, 0) == (int64_t)len, "a whole write");
    CHECK(mb_file_close(f));
}

/* The file's contents are exactly `data`. */
static int holds(MbVolume *v, const char *path, const char *data, size_t len) {
    MbFile *f = NULL;
    char *back;
    int64_t got;
    int same;
    if (mb_file_open(v, path, MB_O_READ, 0, &f) < 0)
        return 0;
    back = malloc(len + 1);
    got = mb_file_read_at(f, (uint8_t *)back, len + 1, 0);
    same = got == (int64_t)len && memcmp(back, data, len) == 0;
    free(back);
    CHECK(mb_file_close(f));
    return same;
}

static void sleep_ms(long ms) {
    struct timespec t;
    t.tv_sec = ms / 1000;
    t.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&t, NULL);
}

/* A child writes without any sync, with this commit interval, and is
 * killed a second later: whether the write is there afterwards. */
static int survives_kill(const char *vol, const char *commit) {
    int fds[2];
    pid_t pid;
    char c;
    MbVolume *v = NULL;
    int kept;
    char options[64];
    EXPECT(pipe(fds) == 0, "pipe");
    sprintf(options, "commit=%s", commit);
    pid = fork();
    EXPECT(pid >= 0, "fork");
    if (pid == 0) {
        CHECK(mb_volume_open(vol, options, &v));
        write_file(v, "/f", "durable without sync", 21);
        EXPECT(write(fds[1], "w", 1) == 1, "tell the parent");
        for (;;)
            sleep(60);
    }
    EXPECT(read(fds[0], &c, 1) == 1, "the child wrote");
    sleep_ms(1000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fds[0]);
    close(fds[1]);
    CHECK(mb_volume_open(vol, NULL, &v));
    kept = holds(v, "/f", "durable without sync", 21);
    CHECK(mb_volume_close(v));
    return kept;
}

static void returning_without_close_keeps_the_files(const char *vol) {
    pid_t pid;
    int status;
    MbVolume *v = NULL;
    pid = fork();
    EXPECT(pid >= 0, "fork");
    if (pid == 0) {
        CHECK(mb_volume_open(vol, "commit=0", &v));
        CHECK(mb_mkdir(v, "/d", 0));
        write_file(v, "/d/f", "kept at exit", 12);
        exit(0); /* no mb_volume_close */
    }
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child ran");
    CHECK(mb_volume_open(vol, NULL, &v));
    EXPECT(holds(v, "/d/f", "kept at exit", 12), "a program that ends without closing keeps what it wrote");
    CHECK(mb_volume_close(v));
    printf("ok: a program that exits without mb_volume_close keeps its files\n");
}

static void an_immutable_file_refuses_writes(MbVolume *v) {
    MbFile *f = NULL;
    write_file(v, "/fixed", "fixed", 5);
    CHECK(mb_set_flags(v, "/fixed", MB_FL_IMMUTABLE));
    CHECK(mb_file_open(v, "/fixed", MB_O_READ | MB_O_WRITE, 0, &f));
    EXPECT(mb_file_write_at(f, (const uint8_t *)"X", 1, 0) == -EPERM, "a write to an immutable file");
    EXPECT(mb_file_set_len(f, 0) == -EPERM, "a truncate of an immutable file");
    EXPECT(mb_file_fallocate(f, 0, 0, 1 << 20) == -EPERM, "an fallocate of an immutable file");
    CHECK(mb_file_close(f));
    EXPECT(mb_unlink(v, "/fixed") == -EPERM, "an unlink of an immutable file");
    CHECK(mb_set_flags(v, "/fixed", 0));
    EXPECT(holds(v, "/fixed", "fixed", 5), "unchanged");
    printf("ok: an immutable file refuses writes, truncates, fallocate and unlink\n");
}

static void zero_range_failing_half_way_changes_nothing(const char *vol) {
    MbVolume *v = NULL;
    MbFile *f = NULL;
    static char data[17636];
    size_t i;
    for (i = 0; i < sizeof data; i++)
        data[i] = (char)(i * 31 + 4);
    CHECK(mb_volume_open(vol, NULL, &v));
    write_file(v, "/e", data, sizeof data);
    CHECK(mb_volume_close(v));
    /* A fresh open: nothing cached, so the partial blocks must be read. */
    CHECK(mb_volume_open(vol, "fault_injection", &v));
    CHECK(mb_file_open(v, "/e", MB_O_READ | MB_O_WRITE, 0, &f));
    CHECK(mb_volume_inject_fault(v, MB_FAULT_READ, 1, 0));
    EXPECT(mb_file_fallocate(f, MB_FALLOC_ZERO_RANGE | MB_FALLOC_KEEP_SIZE, 1000, 9000) == -EIO,
           "the zeroing meets the failed read");
    CHECK(mb_volume_heal(v));
    CHECK(mb_file_close(f));
    EXPECT(holds(v, "/e", data, sizeof data), "the failed call changed nothing");
    CHECK(mb_volume_close(v));
    CHECK(mb_volume_open(vol, NULL, &v));
    EXPECT(holds(v, "/e", data, sizeof data), "nor after a remount");
    CHECK(mb_volume_close(v));
    printf("ok: a ZERO_RANGE failing half-way changes nothing\n");
}

static void the_namespace_by_path(MbVolume *v) {
    MbDir *d = NULL;
    MbDirEntry e;
    MbStat st;
    char names[256] = "";
    char buf[64];
    int rc;
    CHECK(mb_mkdir(v, "/n", 0));
    write_file(v, "/n/a", "a", 1);
    write_file(v, "/n/b", "bb", 2);
    CHECK(mb_symlink(v, "a", "/n/s"));
    CHECK(mb_link(v, "/n/a", "/n/h"));
    CHECK(mb_rename(v, "/n/b", "/n/c", MB_RENAME_NOREPLACE));
    EXPECT(mb_rename(v, "/n/c", "/n/a", MB_RENAME_NOREPLACE) == -EEXIST, "RENAME_NOREPLACE");
    CHECK(mb_opendir(v, "/n", &d));
    while ((rc = mb_readdir(d, &e)) == 1) {
        strcat(names, e.name);
        strcat(names, " ");
    }
    CHECK(rc);
    mb_closedir(d);
    EXPECT(strcmp(names, "a c h s ") == 0, "the listing, by name");
    EXPECT(mb_readlink(v, "/n/s", buf, sizeof buf) == 1 && buf[0] == 'a', "readlink");
    CHECK(mb_stat(v, "/n/s", 0, &st));
    EXPECT(st.size == 1 && st.nlink == 2 && st.mtime_ns > 0, "stat follows the link");
    CHECK(mb_stat(v, "/n/s", MB_STAT_NOFOLLOW, &st));
    EXPECT((st.mode & 0170000) == 0120000, "lstat");
    CHECK(mb_setxattr(v, "/n/c", "user.k", (const uint8_t *)"v", 1, MB_XATTR_CREATE));
    EXPECT(mb_getxattr(v, "/n/c", "user.k", NULL, 0) == 1, "the value's length");
    EXPECT(mb_listxattr(v, "/n/c", buf, sizeof buf) == 7 && strcmp(buf, "user.k") == 0, "listxattr");
    CHECK(mb_removexattr(v, "/n/c", "user.k"));
    EXPECT(mb_getxattr(v, "/n/c", "user.k", NULL, 0) == -ENODATA, "removed");
    EXPECT(mb_rmdir(v, "/n") == -ENOTEMPTY, "rmdir of a full directory");
    CHECK(mb_unlink(v, "/n/a"));
    CHECK(mb_unlink(v, "/n/c"));
    CHECK(mb_unlink(v, "/n/h"));
    CHECK(mb_unlink(v, "/n/s"));
    CHECK(mb_rmdir(v, "/n"));
    EXPECT(mb_stat(v, "/n", 0, &st) == -ENOENT, "gone");
    EXPECT(strstr(mb_last_error(), "/n") != NULL, "the message names the path");
    EXPECT(mb_file_open(v, "/x", 1 << 20, 0, NULL) == -EINVAL, "unknown open flags");
    EXPECT(mb_rename(v, "/x", "/y", 4) == -EINVAL, "unknown rename flags");
    printf("ok: the namespace by path, with its errors\n");
}

int main(int argc, char **argv) {
    MbVolume *v = NULL;
    const char *vol;
    if (argc < 2) {
        fprintf(stderr, "usage: acceptance DIR\n");
        return 2;
    }
    strncpy(scratch, argv[1], sizeof scratch - 1);

    vol = at("a.vol");
    CHECK(mb_format(vol, 64u << 20, 4096, MB_FORMAT_FORCE));
    returning_without_close_keeps_the_files(vol);

    CHECK(mb_format(vol, 64u << 20, 4096, MB_FORMAT_FORCE));
    EXPECT(survives_kill(vol, "0.2"), "the commit interval made the write durable");
    CHECK(mb_format(vol, 64u << 20, 4096, MB_FORMAT_FORCE));
    EXPECT(!survives_kill(vol, "0"), "without the interval nothing was committed");
    printf("ok: the commit interval makes writes durable under kill -9\n");

    CHECK(mb_format(vol, 64u << 20, 4096, MB_FORMAT_FORCE));
    CHECK(mb_volume_open(vol, NULL, &v));
    an_immutable_file_refuses_writes(v);
    the_namespace_by_path(v);
    CHECK(mb_volume_close(v));
    zero_range_failing_half_way_changes_nothing(vol);
    EXPECT(mb_volume_open(vol, "nosuch=1", &v) == -EINVAL, "an unknown option");
    EXPECT(mb_volume_open(vol, "inodes_per_group=64", &v) == -EINVAL, "a format setting at open");
    printf("all passed\n");
    return 0;
}
