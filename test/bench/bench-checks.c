/*
 * bench-checks: what Tandem's checks of the application's input cost on
 * the shapes that would make a naive check slow.
 *
 *  (a) the cycle check of tdm_task_depends_on: a chain of 100,000 created
 *      tasks, each depending on the one before, and a lattice 2 wide and
 *      10,000 deep, each task depending on both tasks of the layer before;
 *      also both with the edges added from the sinks back to the sources
 *      (no search either: what counts is the order of creation), and both
 *      created sinks first (each edge then goes against the order kept:
 *      the check searches both ways and moves the smaller side), with the
 *      edges added from the sources or from the sinks (each edge then
 *      moves one task into the same place: the labels around it are given
 *      again, a few at a time);
 *      timed from the first create to the last depends_on, then to the
 *      end of the run.
 *  (b) the overlap check of registration: 100,000 disjoint vectors
 *      registered then unregistered, per call, against the same with one
 *      vector registered and unregistered 100,000 times (the check then
 *      has nothing to search).
 *
 * Every figure is the median of REPS runs.
 *
 * usage: bench-checks [--quick]   (--quick: a tenth of the sizes)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tandem.h"

#include "bench.h"

#define REPS 5

static void check(tdm_status st, const char *what) {
  if (st != TDM_OK) {
    fprintf(stderr, "bench-checks: %s: %s\n", what, tdm_strerror(st));
    exit(1);
  }
}

static void nothing(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
}

static const tdm_codelet empty = {.name = "empty", .cpu_fn = nothing};

/* bits: edges added from the sinks back; tasks created sinks first */
enum { SOURCES_FIRST = 0, SINKS_FIRST = 1, CREATED_SINKS_FIRST = 2 };

/* Builds `layers` layers of `width` created tasks, each depending on every
 * task of the layer before, in the given order; *build: seconds to the
 * last depends_on; returns seconds to the end of the run. */
static double graph(tdm_runtime *rt, long layers, int width, int order, double *build) {
  long n = layers * width;
  tdm_task **t = malloc((size_t)n * sizeof *t);
  if (!t)
    exit(1);
  /* node k of the graph (layer k / width) is t[at(k)] */
#define at(k) (order & CREATED_SINKS_FIRST ? n - 1 - (k) : (k))
  double t0 = bench_now();
  for (long i = 0; i < n; i++)
    check(tdm_task_create(rt, &(tdm_task_desc){.codelet = &empty}, &t[i]), "create");
  for (long l = 1; l < layers; l++) {
    long layer = order & SINKS_FIRST ? layers - l : l;
    for (int a = 0; a < width; a++)
      for (int b = 0; b < width; b++)
        check(tdm_task_depends_on(t[at(layer * width + a)], t[at((layer - 1) * width + b)]),
              "depends_on");
  }
  *build = bench_now() - t0;
  for (long k = 0; k < n; k++)
    check(tdm_task_submit(t[at(k)]), "submit");
#undef at
  check(tdm_wait_all(rt), "wait_all");
  double total = bench_now() - t0;
  for (long i = 0; i < n; i++)
    tdm_task_release(t[i]);
  free(t);
  return total;
}

static void graphs(tdm_runtime *rt, long scale) {
  static const struct {
    const char *order_name;
    long layers;
    int width, order;
  } shapes[] = {
      {"edges sources first", 100000, 1, SOURCES_FIRST},
      {"edges sinks first", 100000, 1, SINKS_FIRST},
      {"edges sources first", 10000, 2, SOURCES_FIRST},
      {"edges sinks first", 10000, 2, SINKS_FIRST},
      {"created sinks first", 100000, 1, CREATED_SINKS_FIRST},
      {"created sinks first", 10000, 2, CREATED_SINKS_FIRST},
      {"both sinks first", 320000, 1, CREATED_SINKS_FIRST | SINKS_FIRST},
      {"both sinks first", 10000, 2, CREATED_SINKS_FIRST | SINKS_FIRST},
  };
  printf("(a) cycle check (median of %d)                 build (s)   build+run (s)\n", REPS);
  for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    double b[REPS], r[REPS];
    long layers = shapes[s].layers / scale;
    for (int i = 0; i < REPS; i++)
      r[i] = graph(rt, layers, shapes[s].width, shapes[s].order, &b[i]);
    char name[32]; /* the sizes run: --quick runs a tenth */
    if (shapes[s].width == 1)
      snprintf(name, sizeof name, "chain %ld", layers);
    else
      snprintf(name, sizeof name, "lattice %d x %ld", shapes[s].width, layers);
    printf("    %-20s %-22s %9.4f   %9.4f\n", name, shapes[s].order_name,
           bench_median(b, REPS), bench_median(r, REPS));
  }
}

static void registrations(tdm_runtime *rt, long scale) {
  long n = 100000 / scale;
  double *data = malloc((size_t)n * 2 * sizeof *data);
  tdm_handle **h = malloc((size_t)n * sizeof *h);
  if (!data || !h)
    exit(1);
  double many[REPS], one[REPS];
  for (int i = 0; i < REPS; i++) {
    double t0 = bench_now();
    for (long k = 0; k < n; k++) /* every other slot: no two touch */
      check(tdm_register_vector(rt, data + 2 * k, 1, sizeof(double), &h[k]), "register");
    for (long k = 0; k < n; k++)
      check(tdm_handle_unregister(h[k]), "unregister");
    many[i] = (bench_now() - t0) / (double)n;
    t0 = bench_now();
    for (long k = 0; k < n; k++) {
      check(tdm_register_vector(rt, data, 1, sizeof(double), &h[0]), "register");
      check(tdm_handle_unregister(h[0]), "unregister");
    }
    one[i] = (bench_now() - t0) / (double)n;
  }
  printf("(b) registration (median of %d)           per register + unregister (us)\n", REPS);
  printf("    %ld vectors registered at once      %9.3f\n", n, 1e6 * bench_median(many, REPS));
  printf("    one vector at a time                  %9.3f\n", 1e6 * bench_median(one, REPS));
  free(data);
  free(h);
}

int main(int argc, char **argv) {
  long scale = argc > 1 && !strcmp(argv[1], "--quick") ? 10 : 1;
  tdm_config cfg;
  tdm_config_init(&cfg);
  tdm_runtime *rt = NULL;
  check(tdm_runtime_create(&cfg, &rt), "runtime");
  graphs(rt, scale);
  registrations(rt, scale);
  tdm_runtime_destroy(rt);
  return 0;
}
