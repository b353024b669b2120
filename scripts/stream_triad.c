/* STREAM triad (McCalpin's kernel, a[j] = b[j] + q*c[j] on doubles) as an
 * independent reference for tfbench's memory/bandwidth triad cases.
 * Usage: stream_triad ELEMENTS_PER_ARRAY [TIMES]. Threads: OMP_NUM_THREADS.
 * Like STREAM: static OpenMP schedule, arrays first touched by the threads
 * that use them, 24 bytes counted per element (write-allocate not counted),
 * the first pass discarded; prints the best and the median rate, and checks
 * the result. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s ELEMENTS_PER_ARRAY [TIMES]\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]);
    int times = argc > 2 ? atoi(argv[2]) : 20;
    if (n <= 0 || times < 2) return 2;
    double *a = aligned_alloc(64, ((n * 8 + 63) / 64) * 64);
    double *b = aligned_alloc(64, ((n * 8 + 63) / 64) * 64);
    double *c = aligned_alloc(64, ((n * 8 + 63) / 64) * 64);
    if (!a || !b || !c) return 1;
    const double q = 3.0;
#pragma omp parallel for schedule(static)
    for (long j = 0; j < n; j++) {
        a[j] = -1.0;
        b[j] = (double)(j % 1024);
        c[j] = (double)((j * 7) % 1024) * 0.5;
    }
    double *t = malloc(sizeof(double) * times);
    for (int k = 0; k < times; k++) {
        double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (long j = 0; j < n; j++) a[j] = b[j] + q * c[j];
        t[k] = omp_get_wtime() - t0;
    }
    for (long j = 0; j < n; j++) {
        double want = (double)(j % 1024) + q * ((double)((j * 7) % 1024) * 0.5);
        if (a[j] != want) {
            fprintf(stderr, "element %ld: %g, expected %g\n", j, a[j], want);
            return 1;
        }
    }
    qsort(t + 1, times - 1, sizeof(double), cmp);
    double bytes = 24.0 * (double)n;
    printf("threads %d elements %ld best_GBps %.3f median_GBps %.3f\n", omp_get_max_threads(), n,
           bytes / t[1] / 1e9, bytes / t[1 + (times - 1) / 2] / 1e9);
    return 0;
}
