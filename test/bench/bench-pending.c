/*
 * Back-pressure (tdm_config.max_pending): a producer submits N small
 * tasks (a loop of about a microsecond each, longer than a submission
 * takes: the producer is faster than the workers) in a loop (10
 * million; 1 million with --quick), then waits for them, with the bound
 * at its default and with none. Each run is a
 * process of its own (forked), so that its peak resident set size
 * (getrusage's ru_maxrss) is its own; three runs of each, alternating,
 * medians printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tandem.h"

#define RUNS 3

static void small(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  for (volatile unsigned i = 0; i < 1000; i++)
    ;
}

static const tdm_codelet cl_small = {.name = "small", .cpu_fn = small};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One run in this process: seconds and peak RSS in MiB into out[0..1];
 * false on a failure (printed). */
static int run(unsigned max_pending, long n, double *out) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.max_pending = max_pending;
  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(&cfg, &rt);
  if (st) {
    fprintf(stderr, "tdm_runtime_create: %s\n", tdm_strerror(st));
    return 0;
  }
  double t0 = now();
  for (long i = 0; i < n && !st; i++)
    st = tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_small});
  if (!st)
    st = tdm_wait_all(rt);
  out[0] = now() - t0;
  tdm_runtime_destroy(rt);
  if (st) {
    fprintf(stderr, "submit or wait: %s\n", tdm_strerror(st));
    return 0;
  }
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru)) {
    perror("getrusage");
    return 0;
  }
  out[1] = (double)ru.ru_maxrss / 1024;
  return 1;
}

/* run() in a child process; its figures through a pipe. */
static int forked_run(unsigned max_pending, long n, double *out) {
  int fd[2];
  if (pipe(fd)) {
    perror("pipe");
    return 0;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 0;
  }
  if (pid == 0) {
    close(fd[0]);
    double r[2];
    int ok = run(max_pending, n, r);
    if (ok && write(fd[1], r, sizeof r) != (ssize_t)sizeof r)
      ok = 0;
    _exit(ok ? 0 : 1);
  }
  close(fd[1]);
  ssize_t got = read(fd[0], out, 2 * sizeof *out);
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return got == (ssize_t)(2 * sizeof *out) && WIFEXITED(status) && !WEXITSTATUS(status);
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v) {
  qsort(v, RUNS, sizeof *v, by_value);
  return v[RUNS / 2];
}

int main(int argc, char **argv) {
  long n = argc > 1 && !strcmp(argv[1], "--quick") ? 1000000 : 10000000;
  tdm_config defaults;
  tdm_config_init(&defaults);
  unsigned bounds[2] = {defaults.max_pending, 0};
  double secs[2][RUNS], rss[2][RUNS];
  for (int r = 0; r < RUNS; r++)
    for (int b = 0; b < 2; b++) {
      double out[2];
      if (!forked_run(bounds[b], n, out))
        return 1;
      secs[b][r] = out[0];
      rss[b][r] = out[1];
    }
  printf("bench-pending: %ld small tasks submitted in a loop, then waited for; medians of %d "
         "runs, each a process\n",
         n, RUNS);
  printf("%-24s %12s %14s %12s\n", "max_pending", "seconds", "ns per task", "peak MiB");
  for (int b = 0; b < 2; b++) {
    char name[32];
    snprintf(name, sizeof name, b ? "0 (no bound)" : "%u (default)", bounds[b]);
    double s = median(secs[b]);
    printf("%-24s %12.2f %14.0f %12.1f\n", name, s, 1e9 * s / (double)n, median(rss[b]));
  }
  return 0;
}
