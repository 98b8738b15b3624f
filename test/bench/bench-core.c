/*
 * bench-core: the cost of Tandem's core, side by side with OpenMP tasks
 * (GCC's libgomp) in the same process, on the same number of threads.
 *
 *  (a) independent empty tasks submitted from one thread
 *  (b) a chain of tasks on one read-write handle; and the same chain made
 *      with explicit edges (tdm_task_create, tdm_task_depends_on), against
 *      the same OpenMP chain
 *  (c) fan-out/fan-in: one writer, then F readers, repeated
 *  (d) a stencil of width = worker count and 1000 steps (also with
 *      oneTBB's flow graph, where built in, and replayed: see (j)), where each task
 *      reads its left, own and right neighbour of the previous step, swept
 *      over task sizes to find the minimum effective task granularity at
 *      50% efficiency (METG), as defined by Task Bench (Slaughter et al.,
 *      "Task Bench: A Parameterized Benchmark for Evaluating Parallel
 *      Runtime Performance", SC 2020): the smallest average task duration
 *      (wall time x cores / tasks) at which the run still reaches 50% of
 *      the peak rate of useful work.
 *  (e) sparse work, as in a desktop application: one small task every
 *      5 ms for 1 s; the CPU time the process burns meanwhile (percent of
 *      one core) and the round trip of each task (submit + wait), median
 *      and 99th percentile; and a lone empty task every 2 ms (create,
 *      submit, tdm_task_wait, as bench-peers times it), and oneTBB's
 *      (enqueued in an arena, the caller blocked until it ends) where
 *      built in.
 *  (f) what tracing costs (trace_cost).
 *  (h) the tasks of (a), submitted by a task running on a worker rather
 *      than by the application's thread (nested producers: the other
 *      workers get them by stealing)
 *  (i) wide tasks: each reads 1, then 7, of 8 handles written by the
 *      step before and writes one (an input more costs the difference / 6)
 *  (j) recorded graphs (tdm_graph_*): (a) and (b) recorded once and
 *      launched again and again (1000 tasks a launch), against the same
 *      tasks submitted, side by side: replayed / submitted; and (d) with
 *      two steps of the stencil recorded and launched STEPS / 2 times
 *  (g) creating and destroying a runtime, with the default devices and
 *      with none (TANDEM_DEVICES=none), interleaved, once the process has
 *      made one; and the first creation of a process, in a fresh one
 *      (this program run again: --first-create [none]); and, where
 *      oneTBB is built in, its whole scheduler started and finalized.
 *
 * Every figure is the median of REPS runs; Tandem and OpenMP alternate
 * within each repetition, and the Tandem/OpenMP ratio is the median of the
 * per-repetition ratios (below 1: Tandem is faster).
 *
 * usage: bench-core [--quick | --micro | --sparse | --stencil]   (--quick: fewer
 * tasks, for a smoke run; --micro: (a), (h), (i), (b), (c), (j) alone; --sparse: (e)
 * alone; --stencil: (d) alone)
 */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tandem.h"

#include "bench.h"
#ifdef BENCH_HAVE_TBB
#include "bench-core-tbb.h"
#endif

#define REPS 5

static int quick;

static void pause_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- task bodies ------------------------------------------------------- */

static void empty_fn(const tdm_buffer *b, const void *a, size_t n) {
  (void)b;
  (void)a;
  (void)n;
}

/* Task Bench's compute kernel, in spirit: a dependent chain of
 * multiply-adds that the compiler cannot remove. */
static double busy(long iters, double x) {
  for (long i = 0; i < iters; i++)
    x = x * 0.999999 + 0.000001;
  return x;
}

static void stencil_fn(const tdm_buffer *b, const void *a, size_t n) {
  (void)n;
  long iters = *(const long *)a;
  double in = *(double *)b[0].ptr + *(double *)b[1].ptr + *(double *)b[2].ptr;
  *(double *)b[3].ptr = busy(iters, in / 3.0);
}

/* ---- the workloads ------------------------------------------------------ */

/* n independent empty tasks, from the calling thread: (a)'s application
 * thread, (h)'s producer task */
static void submit_empty(tdm_runtime *rt, long n) {
  static const tdm_codelet cl = {.name = "empty", .cpu_fn = empty_fn};
  tdm_task_desc d = {.codelet = &cl};
  for (long i = 0; i < n; i++)
    tdm_submit(rt, &d);
}

static double tdm_independent(tdm_runtime *rt, long n) {
  double t0 = bench_now();
  submit_empty(rt, n);
  tdm_wait_all(rt);
  return bench_now() - t0;
}

static double omp_independent(int nthreads, long n) {
  double t0 = bench_now();
#pragma omp parallel num_threads(nthreads)
#pragma omp single
  for (long i = 0; i < n; i++) {
#pragma omp task
    empty_fn(NULL, NULL, 0);
  }
  return bench_now() - t0;
}

static double tdm_chain(tdm_runtime *rt, long n) {
  static const tdm_codelet cl = {.name = "link", .cpu_fn = empty_fn,
                                 .nbuffers = 1, .modes = {TDM_RW}};
  double x = 0;
  tdm_handle *h;
  tdm_register_vector(rt, &x, 1, sizeof x, &h);
  tdm_task_desc d = {.codelet = &cl, .handles = {h}};
  double t0 = bench_now();
  for (long i = 0; i < n; i++)
    tdm_submit(rt, &d);
  tdm_wait_all(rt);
  double t = bench_now() - t0;
  tdm_handle_unregister(h);
  return t;
}

/* (b) again with explicit edges: each task made with tdm_task_create,
 * depending on the one before (tdm_task_depends_on), no buffer */
static double tdm_chain_explicit(tdm_runtime *rt, long n) {
  static const tdm_codelet cl = {.name = "link", .cpu_fn = empty_fn};
  tdm_task_desc d = {.codelet = &cl};
  double t0 = bench_now();
  tdm_task *prev = NULL;
  for (long i = 0; i < n; i++) {
    tdm_task *t;
    if (tdm_task_create(rt, &d, &t))
      break;
    if (prev) {
      tdm_task_depends_on(t, prev);
      tdm_task_release(prev);
    }
    tdm_task_submit(t);
    prev = t;
  }
  if (prev)
    tdm_task_release(prev);
  tdm_wait_all(rt);
  return bench_now() - t0;
}

static double omp_chain(int nthreads, long n) {
  double x = 0;
  double t0 = bench_now();
#pragma omp parallel num_threads(nthreads)
#pragma omp single
  for (long i = 0; i < n; i++) {
#pragma omp task depend(inout : x)
    empty_fn(NULL, &x, 0);
  }
  return bench_now() - t0;
}

/* (h) the same independent tasks, produced by a task running on a worker
 * (the other workers take them from its deque by stealing) */
typedef struct {
  tdm_runtime *rt;
  long n;
} producer_args;

static void producer_fn(const tdm_buffer *b, const void *a, size_t n) {
  (void)b;
  (void)n;
  const producer_args *p = a;
  submit_empty(p->rt, p->n);
}

static double tdm_nested(tdm_runtime *rt, long n) {
  static const tdm_codelet cl = {.name = "producer", .cpu_fn = producer_fn};
  producer_args args = {rt, n};
  tdm_task_desc d = {.codelet = &cl, .args = &args, .args_size = sizeof args};
  double t0 = bench_now();
  tdm_submit(rt, &d);
  tdm_wait_all(rt);
  return bench_now() - t0;
}

static double omp_nested(int nthreads, long n) {
  double t0 = bench_now();
#pragma omp parallel num_threads(nthreads)
#pragma omp single
#pragma omp task
  for (long i = 0; i < n; i++) {
#pragma omp task
    empty_fn(NULL, NULL, 0);
  }
  return bench_now() - t0;
}

#define FAN 64

static double tdm_fan(tdm_runtime *rt, long rounds) {
  static const tdm_codelet w = {.name = "fan-in", .cpu_fn = empty_fn,
                                .nbuffers = 1, .modes = {TDM_W}};
  static const tdm_codelet r = {.name = "fan-out", .cpu_fn = empty_fn,
                                .nbuffers = 1, .modes = {TDM_R}};
  double x = 0;
  tdm_handle *h;
  tdm_register_vector(rt, &x, 1, sizeof x, &h);
  tdm_task_desc dw = {.codelet = &w, .handles = {h}}, dr = {.codelet = &r, .handles = {h}};
  double t0 = bench_now();
  for (long k = 0; k < rounds; k++) {
    tdm_submit(rt, &dw);
    for (int i = 0; i < FAN; i++)
      tdm_submit(rt, &dr);
  }
  tdm_wait_all(rt);
  double t = bench_now() - t0;
  tdm_handle_unregister(h);
  return t;
}

static double omp_fan(int nthreads, long rounds) {
  double x = 0;
  double t0 = bench_now();
#pragma omp parallel num_threads(nthreads)
#pragma omp single
  for (long k = 0; k < rounds; k++) {
#pragma omp task depend(out : x)
    empty_fn(NULL, &x, 0);
    for (int i = 0; i < FAN; i++) {
#pragma omp task depend(in : x)
      empty_fn(NULL, &x, 0);
    }
  }
  return bench_now() - t0;
}

/* (i) wide tasks: two layers of WIDE handles; each step, task i reads
 * k handles of the previous layer (i, i+1, .. mod WIDE) and writes its
 * own of the next. The cost of one more input: (k = 7 minus k = 1) / 6. */
#define WIDE 8
static double wide_data[2][WIDE];
static int wide_k; /* inputs per task */

static double tdm_wide(tdm_runtime *rt, long steps) {
  tdm_codelet cl = {.name = "wide", .cpu_fn = empty_fn, .nbuffers = (unsigned)wide_k + 1};
  for (int j = 0; j < wide_k; j++)
    cl.modes[j] = TDM_R;
  cl.modes[wide_k] = TDM_W;
  tdm_handle *h[2][WIDE];
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < WIDE; i++)
      tdm_register_vector(rt, &wide_data[l][i], 1, sizeof(double), &h[l][i]);
  double t0 = bench_now();
  for (long s = 0; s < steps; s++) {
    int p = (int)(s & 1), q = p ^ 1;
    for (int i = 0; i < WIDE; i++) {
      tdm_task_desc d = {.codelet = &cl};
      for (int j = 0; j < wide_k; j++)
        d.handles[j] = h[p][(i + j) % WIDE];
      d.handles[wide_k] = h[q][i];
      tdm_submit(rt, &d);
    }
  }
  tdm_wait_all(rt);
  double t = bench_now() - t0;
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < WIDE; i++)
      tdm_handle_unregister(h[l][i]);
  return t;
}

static double omp_wide(int nthreads, long steps) {
  double t0 = bench_now();
#pragma omp parallel num_threads(nthreads)
#pragma omp single
  for (long s = 0; s < steps; s++) {
    int p = (int)(s & 1), q = p ^ 1;
    for (int i = 0; i < WIDE; i++) {
      if (wide_k == 1) {
#pragma omp task depend(in : wide_data[p][i]) depend(out : wide_data[q][i])
        empty_fn(NULL, NULL, 0);
      } else {
#pragma omp task depend(in : wide_data[p][i], wide_data[p][(i + 1) % WIDE],                  \
                            wide_data[p][(i + 2) % WIDE], wide_data[p][(i + 3) % WIDE],      \
                            wide_data[p][(i + 4) % WIDE], wide_data[p][(i + 5) % WIDE],      \
                            wide_data[p][(i + 6) % WIDE]) depend(out : wide_data[q][i])
        empty_fn(NULL, NULL, 0);
      }
    }
  }
  return bench_now() - t0;
}

static double tdm_wide1(tdm_runtime *rt, long steps) {
  wide_k = 1;
  return tdm_wide(rt, steps);
}
static double omp_wide1(int nthreads, long steps) {
  wide_k = 1;
  return omp_wide(nthreads, steps);
}
static double tdm_wide7(tdm_runtime *rt, long steps) {
  wide_k = 7;
  return tdm_wide(rt, steps);
}
static double omp_wide7(int nthreads, long steps) {
  wide_k = 7;
  return omp_wide(nthreads, steps);
}

#define STEPS 1000
#define MAXW 256

static double grid[2][MAXW];

static double tdm_stencil(tdm_runtime *rt, int width, long iters) {
  static const tdm_codelet cl = {.name = "stencil", .cpu_fn = stencil_fn,
                                 .nbuffers = 4, .modes = {TDM_R, TDM_R, TDM_R, TDM_W}};
  tdm_handle *h[2][MAXW];
  for (int p = 0; p < 2; p++)
    for (int i = 0; i < width; i++) {
      grid[p][i] = 1.0;
      tdm_register_vector(rt, &grid[p][i], 1, sizeof(double), &h[p][i]);
    }
  double t0 = bench_now();
  for (int t = 1; t <= STEPS; t++) {
    int cur = t % 2, prev = 1 - cur;
    for (int i = 0; i < width; i++) {
      int l = i > 0 ? i - 1 : i, r = i + 1 < width ? i + 1 : i;
      tdm_task_desc d = {.codelet = &cl,
                         .handles = {h[prev][l], h[prev][i], h[prev][r], h[cur][i]},
                         .args = &iters,
                         .args_size = sizeof iters};
      tdm_submit(rt, &d);
    }
  }
  tdm_wait_all(rt);
  double t = bench_now() - t0;
  for (int p = 0; p < 2; p++)
    for (int i = 0; i < width; i++)
      tdm_handle_unregister(h[p][i]);
  return t;
}

static double omp_stencil(int nthreads, int width, long iters) {
  for (int p = 0; p < 2; p++)
    for (int i = 0; i < width; i++)
      grid[p][i] = 1.0;
  double t0 = bench_now();
#pragma omp parallel num_threads(nthreads)
#pragma omp single
  for (int t = 1; t <= STEPS; t++) {
    int cur = t % 2, prev = 1 - cur;
    for (int i = 0; i < width; i++) {
      int l = i > 0 ? i - 1 : i, r = i + 1 < width ? i + 1 : i;
#pragma omp task depend(in : grid[prev][l], grid[prev][i], grid[prev][r]) \
    depend(out : grid[cur][i]) firstprivate(cur, prev, l, r, i)
      grid[cur][i] = busy(iters, (grid[prev][l] + grid[prev][i] + grid[prev][r]) / 3.0);
    }
  }
  return bench_now() - t0;
}

/* (d) again, two steps recorded once (outside the time: a program
 * records its frame once) and launched STEPS / 2 times */
static double tdm_stencil_replayed(tdm_runtime *rt, int width, long iters) {
  static const tdm_codelet cl = {.name = "stencil", .cpu_fn = stencil_fn,
                                 .nbuffers = 4, .modes = {TDM_R, TDM_R, TDM_R, TDM_W}};
  tdm_handle *h[2][MAXW];
  for (int p = 0; p < 2; p++)
    for (int i = 0; i < width; i++) {
      grid[p][i] = 1.0;
      tdm_register_vector(rt, &grid[p][i], 1, sizeof(double), &h[p][i]);
    }
  tdm_graph *g;
  if (tdm_graph_create(rt, &g))
    return NAN;
  for (int t = 1; t <= 2; t++) {
    int cur = t % 2, prev = 1 - cur;
    for (int i = 0; i < width; i++) {
      int l = i > 0 ? i - 1 : i, r = i + 1 < width ? i + 1 : i;
      tdm_task_desc d = {.codelet = &cl,
                         .handles = {h[prev][l], h[prev][i], h[prev][r], h[cur][i]},
                         .args = &iters,
                         .args_size = sizeof iters};
      tdm_graph_add(g, &d, NULL);
    }
  }
  double t0 = bench_now();
  for (int t = 0; t < STEPS / 2; t++)
    tdm_graph_launch(g);
  tdm_wait_all(rt);
  double t = bench_now() - t0;
  tdm_graph_destroy(g);
  for (int p = 0; p < 2; p++)
    for (int i = 0; i < width; i++)
      tdm_handle_unregister(h[p][i]);
  return t;
}

/* ---- recorded graphs (j) ------------------------------------------------- */

#define LAUNCH_TASKS 1000

/* LAUNCH_TASKS tasks of d recorded once (not timed), launched n /
 * LAUNCH_TASKS times: the time from the first launch to the last end */
static double replayed(tdm_runtime *rt, const tdm_task_desc *d, long n) {
  tdm_graph *g;
  if (tdm_graph_create(rt, &g))
    return NAN;
  for (int i = 0; i < LAUNCH_TASKS; i++)
    tdm_graph_add(g, d, NULL);
  double t0 = bench_now();
  for (long i = 0; i < n / LAUNCH_TASKS; i++)
    tdm_graph_launch(g);
  tdm_wait_all(rt);
  double t = bench_now() - t0;
  tdm_graph_destroy(g);
  return t;
}

/* (a) replayed */
static double tdm_independent_replayed(tdm_runtime *rt, long n) {
  static const tdm_codelet cl = {.name = "empty", .cpu_fn = empty_fn};
  return replayed(rt, &(tdm_task_desc){.codelet = &cl}, n);
}

/* (b) replayed: each launch after the last, one chain of n */
static double tdm_chain_replayed(tdm_runtime *rt, long n) {
  static const tdm_codelet cl = {.name = "link", .cpu_fn = empty_fn,
                                 .nbuffers = 1, .modes = {TDM_RW}};
  double x = 0;
  tdm_handle *h;
  tdm_register_vector(rt, &x, 1, sizeof x, &h);
  double t = replayed(rt, &(tdm_task_desc){.codelet = &cl, .handles = {h}}, n);
  tdm_handle_unregister(h);
  return t;
}

/* Submitted against replayed, alternating within each repetition; the
 * median of the per-repetition ratios. */
static void replay_side_by_side(const char *name, tdm_runtime *rt,
                                double (*submitted)(tdm_runtime *, long),
                                double (*replayed)(tdm_runtime *, long), long n) {
  double ts[REPS], tr[REPS], ratio[REPS];
  submitted(rt, n / 10);
  replayed(rt, n / 10);
  for (int r = 0; r < REPS; r++) {
    ts[r] = submitted(rt, n) / (double)n * 1e9;
    pause_ms(20);
    tr[r] = replayed(rt, n) / (double)n * 1e9;
    pause_ms(20);
    ratio[r] = tr[r] / ts[r];
  }
  printf("%-28s %9ld %12.0f %12.0f %10.2f\n", name, n, bench_median(ts, REPS),
         bench_median(tr, REPS), bench_median(ratio, REPS));
  fflush(stdout);
}

static void graphs(tdm_runtime *rt, long scale) {
  printf("\n(j) recorded graphs, %d tasks a launch; medians of %d runs\n", LAUNCH_TASKS, REPS);
  printf("%-28s %9s %12s %12s %10s\n", "workload", "tasks", "submit ns/t", "replay ns/t",
         "replay/sub");
  replay_side_by_side("(a) independent empty tasks", rt, tdm_independent,
                      tdm_independent_replayed, 1000000 / scale);
  replay_side_by_side("(b) chain on one handle", rt, tdm_chain, tdm_chain_replayed,
                      200000 / scale);
}

/* ---- sparse work: CPU burnt between tasks -------------------------------- */

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define SPARSE_TASKS 200

/* Returns the CPU percentage; rtt_us[k] gets task k's round trip. */
static double tdm_sparse(tdm_runtime *rt, double *rtt_us) {
  static const tdm_codelet cl = {.name = "sparse", .cpu_fn = stencil_fn,
                                 .nbuffers = 4, .modes = {TDM_R, TDM_R, TDM_R, TDM_W}};
  double x[4] = {1, 1, 1, 0};
  long iters = 1000;
  tdm_handle *h[4];
  for (int i = 0; i < 4; i++)
    tdm_register_vector(rt, &x[i], 1, sizeof(double), &h[i]);
  tdm_task_desc d = {.codelet = &cl, .handles = {h[0], h[1], h[2], h[3]}, .args = &iters,
                     .args_size = sizeof iters};
  double c0 = cpu_now(), t0 = bench_now();
  for (int k = 0; k < SPARSE_TASKS; k++) {
    double s = bench_now();
    tdm_submit(rt, &d);
    tdm_wait_all(rt);
    rtt_us[k] = (bench_now() - s) * 1e6;
    pause_ms(5);
  }
  double cpu = (cpu_now() - c0) / (bench_now() - t0) * 100;
  for (int i = 0; i < 4; i++)
    tdm_handle_unregister(h[i]);
  return cpu;
}

/* As tdm_sparse. */
static double omp_sparse(int nthreads, double *rtt_us) {
  double x[4] = {1, 1, 1, 0};
  double c0 = cpu_now(), t0 = bench_now();
  for (int k = 0; k < SPARSE_TASKS; k++) {
    double s = bench_now();
#pragma omp parallel num_threads(nthreads)
#pragma omp single
    {
#pragma omp task depend(in : x[0], x[1], x[2]) depend(out : x[3])
      x[3] = busy(1000, (x[0] + x[1] + x[2]) / 3.0);
    }
    rtt_us[k] = (bench_now() - s) * 1e6;
    pause_ms(5);
  }
  return (cpu_now() - c0) / (bench_now() - t0) * 100;
}

/* A lone empty task every 2 ms, as bench-peers times it (create, submit,
 * tdm_task_wait): rtt_us[k] gets task k's round trip. */
static void tdm_lone(tdm_runtime *rt, double *rtt_us) {
  static const tdm_codelet cl = {.name = "lone", .cpu_fn = empty_fn};
  tdm_task_desc d = {.codelet = &cl};
  for (int k = 0; k < SPARSE_TASKS; k++) {
    pause_ms(2);
    tdm_task *t;
    double s = bench_now();
    tdm_task_create(rt, &d, &t);
    tdm_task_submit(t);
    tdm_task_wait(t);
    rtt_us[k] = (bench_now() - s) * 1e6;
    tdm_task_release(t);
  }
}

/* The p-quantile (0 to 1) of v[0 .. n-1]. */
static double quantile(const double *v, int n, double p) {
  double *s = malloc((size_t)n * sizeof *s);
  if (!s)
    abort();
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, bench_cmp_double);
  double q = s[(int)(p * (n - 1) + 0.5)];
  free(s);
  return q;
}

/* tdm_lone with oneTBB (a task enqueued in an arena, the caller blocked
 * until it ends); NaN without oneTBB */
static void tbb_lone(int nthreads, double *rtt_us) {
  for (int k = 0; k < SPARSE_TASKS; k++) {
    pause_ms(2);
#ifdef BENCH_HAVE_TBB
    rtt_us[k] = bench_tbb_lone(nthreads) * 1e6;
#else
    (void)nthreads;
    rtt_us[k] = NAN;
#endif
  }
}

static void sparse(tdm_runtime *rt, int nthreads) {
  double ct[3], co[3], rt_t[3 * SPARSE_TASKS], rt_o[3 * SPARSE_TASKS], lone[3 * SPARSE_TASKS];
  double lone_b[3 * SPARSE_TASKS];
  for (int r = 0; r < 3; r++) {
    ct[r] = tdm_sparse(rt, rt_t + r * SPARSE_TASKS);
    pause_ms(50);
    tdm_lone(rt, lone + r * SPARSE_TASKS);
    pause_ms(50);
    tbb_lone(nthreads, lone_b + r * SPARSE_TASKS);
    pause_ms(50);
    co[r] = omp_sparse(nthreads, rt_o + r * SPARSE_TASKS);
    pause_ms(50);
  }
  int n = 3 * SPARSE_TASKS;
  printf("\n(e) sparse work: one task every 5 ms, %d tasks, 3 runs interleaved\n",
         SPARSE_TASKS);
  printf("%-28s %12s %12s\n", "", "Tandem", "OpenMP");
  printf("%-28s %11.1f%% %11.1f%%\n", "CPU burnt (% of one core)", bench_median(ct, 3),
         bench_median(co, 3));
  printf("%-28s %12.1f %12.1f\n", "round trip, median (us)", quantile(rt_t, n, 0.5),
         quantile(rt_o, n, 0.5));
  printf("%-28s %12.1f %12.1f\n", "round trip, p99 (us)", quantile(rt_t, n, 0.99),
         quantile(rt_o, n, 0.99));
  printf("%-28s %12.1f\n", "lone empty task, median (us)", quantile(lone, n, 0.5));
  printf("%-28s %12.1f\n", "lone empty task, p99 (us)", quantile(lone, n, 0.99));
#ifdef BENCH_HAVE_TBB
  printf("%-28s %12.1f (a task enqueued in an arena, the caller blocked)\n",
         "oneTBB lone task, median (us)", quantile(lone_b, n, 0.5));
  printf("%-28s %12.1f\n", "oneTBB lone task, p99 (us)", quantile(lone_b, n, 0.99));
  bench_tbb_fini(); /* its arena goes */
#endif
}

/* Seconds to create and destroy a runtime with these devices (NULL: the
 * default), the median of n. */
static double create_destroy(const char *devices, int n) {
  double *t = malloc((size_t)n * sizeof *t);
  if (!t)
    abort();
  for (int i = 0; i < n; i++) {
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.devices = devices;
    tdm_runtime *rt;
    double t0 = bench_now();
    if (tdm_runtime_create(&cfg, &rt))
      abort();
    tdm_runtime_destroy(rt);
    t[i] = bench_now() - t0;
  }
  double m = bench_median(t, n);
  free(t);
  return m;
}

/* The first creation of a process, in a fresh one: milliseconds, the
 * median of 3; NaN when it could not run. */
static double first_create(const char *devices) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0)
    return NAN;
  self[len] = 0;
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "'%s' --first-create%s", self, devices ? " none" : "");
  double t[3];
  for (int r = 0; r < 3; r++) {
    FILE *f = popen(cmd, "r");
    if (!f || fscanf(f, "%lf", &t[r]) != 1)
      t[r] = NAN;
    if (f)
      pclose(f);
  }
  return bench_median(t, 3);
}

static void creation(void) {
  int n = quick ? 20 : 200;
  double d[REPS], none[REPS], ratio[REPS];
  create_destroy(NULL, n / 10); /* warm: the topology, the OpenCL platforms */
  for (int r = 0; r < REPS; r++) {
    d[r] = create_destroy(NULL, n) * 1e3;
    none[r] = create_destroy("none", n) * 1e3;
    ratio[r] = none[r] / d[r];
  }
  printf("\n(g) tdm_runtime_create + tdm_runtime_destroy; medians of %d runs of %d\n", REPS, n);
  printf("%-28s %12s %12s %10s\n", "", "default", "devices=none", "none/def.");
  printf("%-28s %9.3f ms %9.3f ms %10.2f\n", "warm (not the first)", bench_median(d, REPS),
         bench_median(none, REPS), bench_median(ratio, REPS));
  printf("%-28s %9.2f ms %9.2f ms\n", "first of a process (3 runs)", first_create(NULL),
         first_create("none"));
#ifdef BENCH_HAVE_TBB
  /* oneTBB's whole scheduler started and ended, against Tandem's runtime
   * without devices, in turn */
  int nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  double tb[REPS], tn[REPS], ratio_b[REPS];
  for (int r = 0; r < REPS; r++) {
    double b[20];
    for (int i = 0; i < 20; i++)
      b[i] = bench_tbb_start_stop(nthreads) * 1e3;
    tb[r] = bench_median(b, 20); /* negative: oneTBB could not end it */
    tn[r] = create_destroy("none", 20) * 1e3;
    ratio_b[r] = tn[r] / tb[r];
  }
  if (bench_median(tb, REPS) > 0)
    printf("%-28s %9.3f ms (oneTBB's scheduler started and finalized: %.3f ms; "
           "Tandem/oneTBB %.2f)\n", "warm, devices=none", bench_median(tn, REPS),
           bench_median(tb, REPS), bench_median(ratio_b, REPS));
  else
    printf("oneTBB's scheduler could not be finalized here (tbb::finalize failed)\n");
#endif
}

/* ---- driver ------------------------------------------------------------- */

typedef double (*tdm_run)(tdm_runtime *, long);
typedef double (*omp_run)(int, long);

/* Tandem, OpenMP and, where built in, oneTBB (brun: NULL otherwise), in
 * turn within each repetition. */
static void side_by_side(const char *name, tdm_runtime *rt, int nthreads, tdm_run tr,
                         omp_run orun, omp_run brun, long n, long ntasks) {
  double tt[REPS], to[REPS], tb[REPS], ratio[REPS], ratio_b[REPS];
  tr(rt, n / 10); /* warm-up: pools, thread wake-up */
  orun(nthreads, n / 10);
  if (brun)
    brun(nthreads, n / 10);
  for (int r = 0; r < REPS; r++) {
    tt[r] = tr(rt, n) / (double)ntasks * 1e9;
    pause_ms(20);
    to[r] = orun(nthreads, n) / (double)ntasks * 1e9;
    pause_ms(20);
    ratio[r] = tt[r] / to[r];
    if (brun) {
      tb[r] = brun(nthreads, n) / (double)ntasks * 1e9;
      pause_ms(20);
      ratio_b[r] = tt[r] / tb[r];
    }
  }
  printf("%-28s %9ld %12.0f %12.0f %10.2f", name, ntasks, bench_median(tt, REPS),
         bench_median(to, REPS), bench_median(ratio, REPS));
  if (brun)
    printf(" %12.0f %10.2f", bench_median(tb, REPS), bench_median(ratio_b, REPS));
  printf("\n");
  fflush(stdout);
}

#ifdef BENCH_HAVE_TBB
static double tbb_fan(int nthreads, long rounds) {
  return bench_tbb_fan(nthreads, rounds, FAN);
}
static double tbb_wide1(int nthreads, long steps) {
  return bench_tbb_wide(nthreads, steps, WIDE, 1);
}
static double tbb_wide7(int nthreads, long steps) {
  return bench_tbb_wide(nthreads, steps, WIDE, 7);
}
#define TBB(f) f
#else
#define TBB(f) NULL
#endif


/* METG(50%) of one system from its sweep: the smallest granularity with
 * efficiency >= 0.5, interpolated in log space with the next smaller size
 * (Task Bench reports it the same way). */
static double metg(const double *gran, const double *eff, int n) {
  double best = NAN;
  for (int k = 0; k < n; k++) {
    if (eff[k] < 0.5)
      continue;
    double g = gran[k];
    if (k + 1 < n && eff[k + 1] < 0.5) {
      double f = (eff[k] - 0.5) / (eff[k] - eff[k + 1]);
      g = exp(log(gran[k]) + f * (log(gran[k + 1]) - log(gran[k])));
    }
    if (isnan(best) || g < best)
      best = g;
  }
  return best;
}

/* (d) with oneTBB's flow graph (its edges made by hand, as its other
 * workloads), where built in; NaN otherwise */
static double tbb_stencil(int nthreads, int width, long iters) {
#ifdef BENCH_HAVE_TBB
  static double rows[2 * MAXW];
  for (int i = 0; i < 2 * width; i++)
    rows[i] = 1.0;
  return bench_tbb_stencil(nthreads, width, STEPS, iters, busy, rows);
#else
  (void)nthreads, (void)width, (void)iters;
  return NAN;
#endif
}

static void stencil_sweep(tdm_runtime *rt, int nthreads) {
  int width = nthreads;
  long ntasks = (long)STEPS * width;
  enum { NK = 16 };
  long iters[NK];
  int nk = 0;
  for (long it = 1L << 18; it >= 16 && nk < NK; it /= 2)
    iters[nk++] = it;
  double tt[NK][REPS], to[NK][REPS], tg[NK][REPS], tb[NK][REPS];
#ifdef BENCH_HAVE_TBB
  bench_tbb_init(nthreads);
#endif
  tdm_stencil(rt, width, 64); /* warm-up */
  tdm_stencil_replayed(rt, width, 64);
  omp_stencil(nthreads, width, 64);
  tbb_stencil(nthreads, width, 64);
  for (int k = 0; k < nk; k++)
    for (int r = 0; r < REPS; r++) {
      tt[k][r] = tdm_stencil(rt, width, iters[k]);
      pause_ms(10);
      tg[k][r] = tdm_stencil_replayed(rt, width, iters[k]);
      pause_ms(10);
      to[k][r] = omp_stencil(nthreads, width, iters[k]);
      pause_ms(10);
      tb[k][r] = tbb_stencil(nthreads, width, iters[k]);
      if (!isnan(tb[k][r]))
        pause_ms(10);
    }
  /* Peak useful rate: the best iterations per second per core seen. */
  double peak = 0;
  for (int k = 0; k < nk; k++)
    for (int r = 0; r < REPS; r++) {
      double work = (double)iters[k] * (double)ntasks / nthreads;
      if (work / tt[k][r] > peak)
        peak = work / tt[k][r];
      if (work / to[k][r] > peak)
        peak = work / to[k][r];
      if (work / tg[k][r] > peak)
        peak = work / tg[k][r];
      if (work / tb[k][r] > peak) /* false for NaN */
        peak = work / tb[k][r];
    }
  double gt[NK], et[NK], go[NK], eo[NK], gg[NK], eg[NK], gb[NK], eb[NK];
  printf("\n(d) stencil, width %d, %d steps (%ld tasks); medians of %d runs\n", width,
         STEPS, ntasks, REPS);
  printf("%10s | %14s %8s | %14s %8s | %14s %8s | %14s %8s\n", "iterations",
         "Tandem gran us", "eff", "replay gran us", "eff", "OpenMP gran us", "eff",
         "oneTBB gran us", "eff");
  for (int k = 0; k < nk; k++) {
    double mt = bench_median(tt[k], REPS), mo = bench_median(to[k], REPS);
    double mg = bench_median(tg[k], REPS), mb = bench_median(tb[k], REPS);
    double ideal = (double)iters[k] * (double)ntasks / nthreads / peak;
    gt[k] = mt * nthreads / (double)ntasks * 1e6;
    go[k] = mo * nthreads / (double)ntasks * 1e6;
    gg[k] = mg * nthreads / (double)ntasks * 1e6;
    et[k] = ideal / mt;
    eo[k] = ideal / mo;
    eg[k] = ideal / mg;
    gb[k] = mb * nthreads / (double)ntasks * 1e6;
    eb[k] = ideal / mb;
    printf("%10ld | %14.2f %8.2f | %14.2f %8.2f | %14.2f %8.2f | %14.2f %8.2f\n", iters[k],
           gt[k], et[k], gg[k], eg[k], go[k], eo[k], gb[k], eb[k]);
  }
#ifdef BENCH_HAVE_TBB
  bench_tbb_fini();
#endif
  double mt = metg(gt, et, nk), mo = metg(go, eo, nk), mg = metg(gg, eg, nk);
  double mb = metg(gb, eb, nk); /* NaN without oneTBB */
  printf("METG(50%%): Tandem %.2f us, replayed %.2f us, OpenMP %.2f us, oneTBB %.2f us; "
         "replayed/submitted %.2f, Tandem/OpenMP %.2f, Tandem/oneTBB %.2f\n",
         mt, mg, mo, mb, mg / mt, mt / mo, mt / mb);
}

/* (f) What tracing costs: (a) on a runtime recording a trace against one
 * that does not, side by side, medians of the per-run ratios. */
static void trace_cost(void) {
  char path[] = "/tmp/tandem-bench-trace-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0)
    return;
  close(fd);
  tdm_config cfg;
  tdm_config_init(&cfg);
  tdm_runtime *plain, *traced;
  cfg.trace_path = NULL;
  if (tdm_runtime_create(&cfg, &plain))
    return;
  cfg.trace_path = path;
  if (tdm_runtime_create(&cfg, &traced)) {
    tdm_runtime_destroy(plain);
    return;
  }
  const long n = 200000;
  double off[REPS], on[REPS], diff[REPS];
  for (int r = 0; r < REPS; r++) {
    off[r] = tdm_independent(plain, n) / (double)n * 1e9;
    on[r] = tdm_independent(traced, n) / (double)n * 1e9;
    diff[r] = on[r] - off[r];
  }
  printf("\n(f) tracing: %ld independent empty tasks; medians of %d runs\n", n, REPS);
  printf("    tracing off %.0f ns/task, on %.0f ns/task: tracing costs %.0f ns per task\n",
         bench_median(off, REPS), bench_median(on, REPS), bench_median(diff, REPS));
  tdm_runtime_destroy(plain);
  tdm_runtime_destroy(traced); /* writes the trace: not timed */
  unlink(path);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--first-create")) { /* (g), in a fresh process */
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.devices = argc > 2 ? argv[2] : NULL;
    tdm_runtime *rt;
    double t0 = bench_now();
    if (tdm_runtime_create(&cfg, &rt))
      return 1;
    tdm_runtime_destroy(rt);
    printf("%.3f\n", (bench_now() - t0) * 1e3);
    return 0;
  }
  quick = argc > 1 && !strcmp(argv[1], "--quick");
  bool micro = argc > 1 && !strcmp(argv[1], "--micro");
  bool sparse_only = argc > 1 && !strcmp(argv[1], "--sparse");
  if (sparse_only || (argc > 1 && !strcmp(argv[1], "--stencil"))) { /* (e) or (d) alone */
    tdm_runtime *rt;
    if (tdm_runtime_create(NULL, &rt))
      return 1;
    if (sparse_only)
      sparse(rt, (int)tdm_runtime_ncpu_workers(rt));
    else
      stencil_sweep(rt, (int)tdm_runtime_ncpu_workers(rt));
    tdm_runtime_destroy(rt);
    return 0;
  }
  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(NULL, &rt);
  if (st) {
    fprintf(stderr, "tdm_runtime_create: %s\n", tdm_strerror(st));
    return 1;
  }
  int nthreads = (int)tdm_runtime_ncpu_workers(rt);
  long scale = quick ? 10 : 1;
  printf("bench-core: %d workers / %d OpenMP threads; medians of %d runs\n", nthreads,
         nthreads, REPS);
#ifdef BENCH_HAVE_TBB
  bench_tbb_init(nthreads);
  printf("%-28s %9s %12s %12s %10s %12s %10s\n", "workload", "tasks", "Tandem ns/t",
         "OpenMP ns/t", "T/OpenMP", "oneTBB ns/t", "T/oneTBB");
#else
  printf("%-28s %9s %12s %12s %10s   (oneTBB not built in)\n", "workload", "tasks",
         "Tandem ns/t", "OpenMP ns/t", "T/OpenMP");
#endif
  side_by_side("(a) independent empty tasks", rt, nthreads, tdm_independent,
               omp_independent, TBB(bench_tbb_independent), 1000000 / scale,
               1000000 / scale);
  side_by_side("(h) independent, from a task", rt, nthreads, tdm_nested, omp_nested,
               TBB(bench_tbb_nested), 1000000 / scale, 1000000 / scale);
  side_by_side("(i) wide: 1 input + 1 output", rt, nthreads, tdm_wide1, omp_wide1,
               TBB(tbb_wide1), 100000 / scale, 100000 / scale * WIDE);
  side_by_side("(i) wide: 7 inputs + 1 output", rt, nthreads, tdm_wide7, omp_wide7,
               TBB(tbb_wide7), 100000 / scale, 100000 / scale * WIDE);
  side_by_side("(b) chain on one handle", rt, nthreads, tdm_chain, omp_chain,
               TBB(bench_tbb_chain), 200000 / scale, 200000 / scale);
  side_by_side("(b) chain, explicit edges", rt, nthreads, tdm_chain_explicit, omp_chain,
               TBB(bench_tbb_chain), 200000 / scale, 200000 / scale);
  side_by_side("(c) fan-out/fan-in x64", rt, nthreads, tdm_fan, omp_fan, TBB(tbb_fan),
               2000 / scale, 2000 / scale * (FAN + 1));
#ifdef BENCH_HAVE_TBB
  bench_tbb_fini();
#endif
  graphs(rt, scale);
  if (micro) {
    tdm_runtime_destroy(rt);
    return 0;
  }
  if (!quick) {
    stencil_sweep(rt, nthreads);
    sparse(rt, nthreads);
  }
  tdm_runtime_destroy(rt);
  if (!quick)
    trace_cost();
  creation();
  return 0;
}
