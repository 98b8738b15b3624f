/*
 * bench-place: what placing a task costs as the machine grows, in real
 * time: N independent tasks (each reads one of 256 small vectors, and
 * does nothing) that an emulated device could run, submitted from one
 * thread and waited for, under heft, on
 *
 *   - this machine's cores as 2 CPU workers + 1 emulated GPU, and
 *   - a synthetic topology of 64 cores (64 CPU workers) + 8 emulated GPUs,
 *
 * both on this machine's cores, so the second has 72 threads on them:
 * the figures say how the scheduler's shared state (one lock per
 * placement and completion, the devices' queues) behaves with many
 * workers and devices, not what a 64-core machine would do. Per task:
 * wall time and CPU time (user + system) of the process, the median of
 * REPS runs, the two machines alternating; the ratio of the large
 * machine's to the small one's is the median of the per-run ratios.
 *
 * usage: bench-place [--quick] [POLICY]   (heft by default; eager puts
 * every task in the queue every worker shares)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "tandem.h"

#include "bench.h"

#define REPS 5
#define NDATA 256

static void nothing(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
}

static const tdm_codelet noop = {.name = "bench-place noop", .cpu_fn = nothing,
                                 .nbuffers = 1, .modes = {TDM_R}};

static void log_errors(void *data, tdm_log_level level, const char *msg) {
  (void)data;
  if (level <= TDM_LOG_WARNING)
    fprintf(stderr, "bench-place: %s\n", msg);
}

static double cpu_seconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
         (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

typedef struct machine {
  const char *name;
  unsigned workers;
  const char *topology; /* NULL: this machine's */
  const char *sim;
} machine;

/* One run: wall and CPU seconds per task, or a negative wall time when
 * the runtime could not be made. */
static const char *policy = "heft";

static void run(const machine *m, unsigned n, double *wall, double *cpu) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.nworkers = m->workers;
  cfg.synthetic_topology = m->topology;
  cfg.sim = m->sim;
  cfg.scheduler = policy;
  cfg.app = "bench-place";
  cfg.log_fn = log_errors;
  tdm_runtime *rt = NULL;
  static double data[NDATA][4];
  tdm_handle *h[NDATA];
  *wall = -1;
  if (tdm_runtime_create(&cfg, &rt) != TDM_OK) {
    fprintf(stderr, "bench-place: cannot create the runtime for %s\n", m->name);
    return;
  }
  for (unsigned i = 0; i < NDATA; i++)
    if (tdm_register_vector(rt, data[i], 4, sizeof(double), &h[i]) != TDM_OK)
      abort();
  /* the models calibrated first, as in a program that ran before */
  for (unsigned i = 0; i < 200; i++)
    tdm_submit(rt, &(tdm_task_desc){.codelet = &noop, .handles = {h[i % NDATA]}});
  tdm_wait_all(rt);
  double c0 = cpu_seconds(), t0 = bench_now();
  for (unsigned i = 0; i < n; i++)
    if (tdm_submit(rt, &(tdm_task_desc){.codelet = &noop, .handles = {h[i % NDATA]}}) != TDM_OK)
      abort();
  if (tdm_wait_all(rt) != TDM_OK)
    abort();
  *wall = (bench_now() - t0) / n;
  *cpu = (cpu_seconds() - c0) / n;
  for (unsigned i = 0; i < NDATA; i++)
    tdm_handle_unregister(h[i]);
  tdm_runtime_destroy(rt);
}

int main(int argc, char **argv) {
  unsigned n = 200000;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      n = 20000;
    else
      policy = argv[i];
  }
  static const machine machines[2] = {
      {"2 CPU workers + 1 emulated GPU", 2, NULL, "gpu:speedup=1,memory=shared"},
      {"64 CPU workers (synthetic) + 8 emulated GPUs", 64, "pack:1 core:64 pu:1",
       "g0:speedup=1,memory=shared;g1:speedup=1,memory=shared;g2:speedup=1,memory=shared;"
       "g3:speedup=1,memory=shared;g4:speedup=1,memory=shared;g5:speedup=1,memory=shared;"
       "g6:speedup=1,memory=shared;g7:speedup=1,memory=shared"},
  };
  double wall[2][REPS], cpu[2][REPS], ratio_wall[REPS], ratio_cpu[REPS];
  for (int r = 0; r < REPS; r++) {
    for (int k = 0; k < 2; k++) {
      run(&machines[k], n, &wall[k][r], &cpu[k][r]);
      if (wall[k][r] < 0)
        return 1;
    }
    ratio_wall[r] = wall[1][r] / wall[0][r];
    ratio_cpu[r] = cpu[1][r] / cpu[0][r];
  }
  printf("bench-place: %u independent empty tasks a device could run, %s, median of %d runs\n",
         n, policy, REPS);
  printf("%-46s %14s %14s\n", "machine", "wall us/task", "CPU us/task");
  for (int k = 0; k < 2; k++)
    printf("%-46s %14.2f %14.2f\n", machines[k].name, 1e6 * bench_median(wall[k], REPS),
           1e6 * bench_median(cpu[k], REPS));
  printf("%-46s %14.2f %14.2f\n", "ratio, large / small (median of per-run ratios)",
         bench_median(ratio_wall, REPS), bench_median(ratio_cpu, REPS));
  return 0;
}
