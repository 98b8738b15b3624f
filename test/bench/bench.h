/* What the benchmarks share: a monotonic clock and the median of runs. */
#ifndef TDM_BENCH_H
#define TDM_BENCH_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0 .. n-1], n > 0; v is left as it is. */
static inline double bench_median(const double *v, int n) {
  double *s = malloc((size_t)n * sizeof *s);
  if (!s)
    abort(); /* a benchmark has nothing better to do */
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, bench_cmp_double);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

#endif
