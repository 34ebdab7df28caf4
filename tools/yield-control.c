/* What sched_yield costs a thread's share of the CPU. THREADS identical
 * threads, released together, each compute units of about 2 us; with EVERY
 * > 0 a thread calls sched_yield after every EVERY units. After SECONDS it
 * prints the least and the most CPU time any thread got, and their ratio
 * (1.00 is perfectly even).
 *
 *   cc -O2 -pthread -o yield-control tools/yield-control.c
 *   ./yield-control 64 0 2      # no yields
 *   ./yield-control 64 100 2    # a yield every ~200 us of CPU time
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 1024

static atomic_int go, stop;
static long every;
static double cpu_ms[MAX_THREADS];

static void *worker(void *arg) {
    long i = (long)arg;
    unsigned long x = (unsigned long)i + 1, units = 0;
    while (!atomic_load(&go))
        ;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int k = 0; k < 2000; k++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        units++;
        if (every > 0 && units % every == 0)
            sched_yield();
    }
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    cpu_ms[i] = t.tv_sec * 1e3 + t.tv_nsec / 1e6;
    return (void *)x; /* keeps the work from being optimized away */
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s THREADS EVERY SECONDS\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]);
    every = atol(argv[2]);
    double secs = atof(argv[3]);
    if (n < 1 || n > MAX_THREADS || every < 0 || secs <= 0) {
        fprintf(stderr, "THREADS in 1..%d, EVERY >= 0, SECONDS > 0\n", MAX_THREADS);
        return 2;
    }
    pthread_t t[MAX_THREADS];
    for (long i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    usleep(100000);
    atomic_store(&go, 1);
    struct timespec d = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
    nanosleep(&d, NULL);
    atomic_store(&stop, 1);
    double lo = 1e300, hi = 0;
    for (long i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        lo = cpu_ms[i] < lo ? cpu_ms[i] : lo;
        hi = cpu_ms[i] > hi ? cpu_ms[i] : hi;
    }
    printf("threads=%ld every=%ld cpu_ms_min=%.1f cpu_ms_max=%.1f min/max=%.2f\n", n, every, lo, hi, lo / hi);
    return 0;
}
