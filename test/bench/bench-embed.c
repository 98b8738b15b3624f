/*
 * Embedding figures:
 *  - dispatch latency: from the end of a task's function to the start of
 *    its callback run by tdm_dispatch on this thread, woken by poll() on
 *    the runtime's event descriptor (TDM_TASK_CALLBACK_ON_DISPATCH), and
 *    to the start of a task pinned to this thread (TDM_TASK_MAIN_THREAD)
 *    behind a worker's task: median, 90th and 99th percentiles of 2,000;
 *  - cancel latency: 64 queued tasks of 20 ms in a group (a document
 *    being closed), cancelled at once: the time tdm_group_wait takes,
 *    against waiting for them all (what closing cost without groups);
 *    medians of 5.
 * Run: build/test/bench/bench-embed [--quick]
 */
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "tandem.h"

static _Atomic double ended_at; /* when the last task's function ended */
static double latency[2000];
static int nlat;

static void stamp(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  atomic_store(&ended_at, bench_now());
}

static void on_done(void *data) {
  (void)data;
  latency[nlat++] = bench_now() - atomic_load(&ended_at);
}

static void pinned(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  latency[nlat++] = bench_now() - atomic_load(&ended_at);
}

static void twenty_ms(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  usleep(20000);
}

static const tdm_codelet cl_stamp = {.name = "stamp", .cpu_fn = stamp};
static const tdm_codelet cl_stamp_rw = {
    .name = "stamp", .cpu_fn = stamp, .nbuffers = 1, .modes = {TDM_RW}};
static const tdm_codelet cl_pinned = {
    .name = "pinned", .cpu_fn = pinned, .nbuffers = 1, .modes = {TDM_RW}};
static const tdm_codelet cl_20ms = {.name = "20ms", .cpu_fn = twenty_ms};

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void report(const char *what, int n) {
  qsort(latency, (size_t)n, sizeof *latency, cmp);
  printf("%-44s median %7.1f us   p90 %7.1f us   p99 %7.1f us\n", what, 1e6 * latency[n / 2],
         1e6 * latency[n * 9 / 10], 1e6 * latency[n * 99 / 100]);
}

/* Waits on the descriptor and dispatches until `want` latencies are in. */
static void loop_until(tdm_runtime *rt, int want) {
  struct pollfd p = {.fd = tdm_runtime_event_fd(rt), .events = POLLIN};
  while (nlat < want) {
    if (poll(&p, 1, 5000) <= 0) {
      fprintf(stderr, "bench-embed: no event in 5 s\n");
      exit(1);
    }
    tdm_dispatch(rt);
  }
}

static tdm_runtime *make(void) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.devices = "none";
  tdm_runtime *rt = NULL;
  if (tdm_runtime_create(&cfg, &rt)) {
    fprintf(stderr, "bench-embed: no runtime\n");
    exit(1);
  }
  return rt;
}

int main(int argc, char **argv) {
  int quick = argc > 1 && !strcmp(argv[1], "--quick");
  int n = quick ? 200 : 2000;
  tdm_runtime *rt = make();

  nlat = 0;
  for (int i = 0; i < n; i++) {
    tdm_task_desc d = {.codelet = &cl_stamp, .callback = on_done,
                       .flags = TDM_TASK_CALLBACK_ON_DISPATCH};
    tdm_submit(rt, &d);
    loop_until(rt, i + 1);
    if (i % 8 == 7)
      usleep(2000); /* now and then, after the workers parked */
  }
  report("task end -> callback in tdm_dispatch", n);

  long v = 0;
  tdm_handle *h;
  tdm_register_vector(rt, &v, 1, sizeof v, &h);
  nlat = 0;
  for (int i = 0; i < n; i++) {
    tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_stamp_rw, .handles = {h}});
    tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_pinned, .handles = {h},
                                    .flags = TDM_TASK_MAIN_THREAD});
    loop_until(rt, i + 1);
    if (i % 8 == 7)
      usleep(2000);
  }
  report("worker task end -> pinned successor starts", n);
  tdm_handle_unregister(h);

  /* closing a document: 64 queued 20 ms tasks */
  double cancel[5], all[5];
  for (int r = 0; r < 5; r++) {
    for (int k = 0; k < 2; k++) {
      tdm_group *g;
      tdm_group_create(rt, NULL, &g);
      for (int i = 0; i < 64; i++)
        tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_20ms, .group = g});
      usleep(5000); /* the first ones run */
      double t0 = bench_now();
      if (k == 0)
        tdm_group_cancel(g);
      tdm_group_wait(g);
      (k == 0 ? cancel : all)[r] = bench_now() - t0;
      tdm_group_release(g);
    }
  }
  unsigned nw = tdm_runtime_ncpu_workers(rt);
  printf("closing 64 queued 20 ms tasks on %u workers: cancel + wait %.1f ms, waiting for "
         "them %.1f ms (medians of 5)\n",
         nw, 1e3 * bench_median(cancel, 5), 1e3 * bench_median(all, 5));
  tdm_runtime_destroy(rt);
  return 0;
}
