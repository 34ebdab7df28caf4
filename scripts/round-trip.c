/* usage: round-trip PATH N
 * Time N getxattr(2) calls of an absent attribute of PATH, after 1,000
 * of warm-up, and print the mean. On a FUSE mount each is one round trip
 * to the server (an absent attribute is not cached by the kernel). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/xattr.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: round-trip PATH N\n");
        return 2;
    }
    long n = atol(argv[2]);
    if (n <= 0) {
        fprintf(stderr, "N: a positive count\n");
        return 2;
    }
    char buf[64];
    struct timespec a, b;
    for (int i = 0; i < 1000; i++)
        getxattr(argv[1], "user.none", buf, sizeof buf);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++)
        getxattr(argv[1], "user.none", buf, sizeof buf);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("%.2f us per call\n", ns / n / 1000);
    return 0;
}
