/*
 * Tandem over MPI ranks that are not alike: a tiled GEMM and a tiled
 * Cholesky with their tiles 2-D block-cyclic (every rank as many) and
 * weighted by each rank's throughput (tdm_mpi_weighted_owners), in turn,
 * on ranks made unlike by emulated devices:
 *
 *   mpirun --oversubscribe -np N build/test/bench/bench-mpi [tiles] [tile] [reps]
 *
 * Rank r emulates one CPU worker and, for r mod 4 = 0, 1, 2, 3, a GPU 8x
 * as fast, none, one 2x as fast, none (tdm_config.sim, its time scale 32
 * on every rank: a CPU task that runs t takes 32 t, a device's 32 t /
 * speedup; the waiting is sleep, so ranks oversubscribing the cores
 * still keep their speeds). Each declares 1 + its device's speedup as
 * its throughput. Printed per repetition: each run's makespan (the
 * slowest rank's, from a barrier to the end of its tasks), the ratio of
 * weighted to block-cyclic, the messages and bytes they moved; at the
 * end, the medians. The same shapes on one rank (-np 1) give the
 * single-rank figure to compare with. With two ranks or more, then: a
 * ping-pong through tasks beside MPI's own (the latency the runtime and
 * its progress thread add), and the CPU an idle rank uses.
 */
#include <math.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tandem.h"
#include "tandem/mpi.h"
#include "../tiles.h"

static int rank, size;

#define MUST(x)                                                                \
  do {                                                                         \
    tdm_status st_ = (x);                                                      \
    if (st_) {                                                                 \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #x, tdm_status_name(st_));    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)

static void submit(tdm_mpi *m, const tdm_codelet *cl, tdm_handle *a, tdm_handle *b,
                   tdm_handle *c) {
  MUST(tdm_mpi_submit(m, &(tdm_task_desc){.codelet = cl, .handles = {a, b, c}}));
}

typedef struct {
  double seconds;
  uint64_t messages, bytes;
} run;

/* One run of `what` (0 GEMM, 1 Cholesky) with these owners: the slowest
 * rank's time, and every rank's messages and bytes. */
static run one_run(tdm_runtime *rt, tdm_mpi *m, int what, size_t nt, size_t tb,
                   const int *owners, uint64_t key) {
  size_t n = nt * tb;
  double *mem[3];
  tdm_handle *h[3];
  int nmat = what == 0 ? 3 : 1;
  for (int k = 0; k < nmat; k++) {
    mem[k] = tdm_malloc(n * n * sizeof(double));
    if (!mem[k])
      MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t r = 0; r < n; r++)
      for (size_t c = 0; c < n; c++)
        mem[k][r * n + c] = what == 1 ? (double)((r * c) % 5) / 8 + (r == c ? (double)n : 0)
                                      : (double)((r * 3 + c * (size_t)(k + 1)) % 7) - 3;
    MUST(tdm_register_matrix(rt, mem[k], n, n, n, sizeof(double), &h[k]));
    MUST(tdm_matrix_partition(h[k], tb, tb, 0));
    MUST(tdm_mpi_register_tiles(m, h[k], owners, key + 100000 * (uint64_t)k));
  }
  tdm_mpi_counters c0 = {.struct_size = sizeof c0}, c1 = {.struct_size = sizeof c1};
  MUST(tdm_mpi_get_counters(m, &c0));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
#define T(k, i, j) tdm_matrix_tile(h[k], i, j)
  if (what == 0) {
    for (size_t i = 0; i < nt; i++)
      for (size_t j = 0; j < nt; j++)
        for (size_t k = 0; k < nt; k++)
          submit(m, &gemm_nn_cl, T(0, i, k), T(1, k, j), T(2, i, j));
  } else {
    for (size_t k = 0; k < nt; k++) {
      submit(m, &potrf_cl, T(0, k, k), NULL, NULL);
      for (size_t i = k + 1; i < nt; i++)
        submit(m, &trsm_cl, T(0, k, k), T(0, i, k), NULL);
      for (size_t j = k + 1; j < nt; j++)
        for (size_t i = j; i < nt; i++)
          submit(m, &gemm_nt_cl, T(0, i, k), T(0, j, k), T(0, i, j));
    }
  }
#undef T
  MUST(tdm_mpi_wait_all(m));
  double mine = MPI_Wtime() - t0, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MUST(tdm_mpi_get_counters(m, &c1));
  if (getenv("BENCH_MPI_VERBOSE")) { /* each rank's time and tasks, devices' share */
    tdm_device_counters d = {.struct_size = sizeof d};
    bool dev = tdm_runtime_device_counters(rt, 0, &d) == TDM_OK;
    fprintf(stderr, "    rank %d: %.1f ms, %llu tasks (%llu on its device so far)\n", rank,
            mine * 1e3, (unsigned long long)(c1.tasks_run - c0.tasks_run),
            dev ? (unsigned long long)d.tasks : 0ull);
  }
  uint64_t mb[2] = {c1.sent - c0.sent, c1.bytes_sent - c0.bytes_sent}, all[2];
  MPI_Allreduce(mb, all, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (int k = 0; k < nmat; k++) {
    MUST(tdm_mpi_forget_tiles(m, h[k]));
    MUST(tdm_matrix_unpartition(h[k], 0));
    MUST(tdm_handle_unregister(h[k]));
    tdm_free(mem[k]);
  }
  return (run){slowest, all[0], all[1]};
}

static int cmp(const void *a, const void *b);

/* ---- latency and idle CPU (two ranks or more) ---------------------------------- */

static void bump(const tdm_buffer *b, const void *args, size_t n) {
  (void)args, (void)n;
  ((double *)b[1].ptr)[0] = ((const double *)b[0].ptr)[0] + 1;
}
static const tdm_codelet bump_cl = {.name = "bump", .cpu_fn = bump, .nbuffers = 2,
                                    .modes = {TDM_R, TDM_W}};

/* A ping-pong of one double between ranks 0 and 1 through tasks (x on 0,
 * y on 1: y = x + 1 on 1, x = y + 1 on 0), against MPI's own ping-pong of
 * 8 bytes in the same run: what a round trip costs through the runtime,
 * its tasks and the progress thread. Then the process's CPU while it
 * idles a second with m alive. Only ranks 0 and 1 take part in the
 * ping-pong (the others skip its tasks). On a runtime and tdm_mpi of
 * their own, not emulated: beside the others, as an application may
 * have several. */
static void latency(int rounds) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.bind_workers = 0;
  cfg.devices = "none";
  tdm_runtime *rt;
  MUST(tdm_runtime_create(&cfg, &rt));
  tdm_mpi *m;
  MUST(tdm_mpi_create(rt, MPI_COMM_WORLD, &m));
  double x = 0, y = 0;
  tdm_handle *hx, *hy;
  MUST(tdm_register_vector(rt, &x, 1, sizeof x, &hx));
  MUST(tdm_register_vector(rt, &y, 1, sizeof y, &hy));
  MUST(tdm_mpi_register(m, hx, 0, 900000001));
  MUST(tdm_mpi_register(m, hy, 1, 900000002));
  double *via = calloc((size_t)rounds, sizeof *via), *raw = calloc((size_t)rounds, sizeof *raw);
  if (!via || !raw)
    MPI_Abort(MPI_COMM_WORLD, 1);
  for (int r = 0; r < rounds; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    submit(m, &bump_cl, hx, hy, NULL);
    submit(m, &bump_cl, hy, hx, NULL);
    MUST(tdm_mpi_fetch(m, hx, 0)); /* rank 0: x is home */
    via[r] = MPI_Wtime() - t0;
    /* (before the barrier, whose busy wait would take the cores that the
     * other rank's tasks need: on two cores, a scheduler's quantum) */
    MUST(tdm_mpi_wait_all(m));
    MPI_Barrier(MPI_COMM_WORLD);
    double v = 0;
    t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(&v, 1, MPI_DOUBLE, 1, 7, MPI_COMM_WORLD);
      MPI_Recv(&v, 1, MPI_DOUBLE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(&v, 1, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(&v, 1, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD);
    }
    raw[r] = MPI_Wtime() - t0;
  }
  MUST(tdm_mpi_wait_all(m));
  if (rank == 0) {
    if (x != 2.0 * rounds)
      fprintf(stderr, "bench-mpi: ping-pong ended at %g, not %d\n", x, 2 * rounds);
    qsort(via, (size_t)rounds, sizeof *via, cmp);
    qsort(raw, (size_t)rounds, sizeof *raw, cmp);
    printf("round trip through tasks %.1f us (p90 %.1f), MPI's own %.1f us (p90 %.1f): "
           "%.1f us added (medians of %d)\n", via[rounds / 2] * 1e6,
           via[rounds * 9 / 10] * 1e6, raw[rounds / 2] * 1e6, raw[rounds * 9 / 10] * 1e6,
           (via[rounds / 2] - raw[rounds / 2]) * 1e6, rounds);
  }
  free(via);
  free(raw);
  MUST(tdm_mpi_forget(m, hx));
  MUST(tdm_mpi_forget(m, hy));
  MUST(tdm_handle_unregister(hx));
  MUST(tdm_handle_unregister(hy));
  /* idle: what the process burns with its runtime and progress thread
   * alive and nothing to do */
  MPI_Barrier(MPI_COMM_WORLD);
  struct rusage u0, u1;
  getrusage(RUSAGE_SELF, &u0);
  double t0 = MPI_Wtime();
  struct timespec second = {1, 0};
  nanosleep(&second, NULL);
  getrusage(RUSAGE_SELF, &u1);
  double cpu = (double)(u1.ru_utime.tv_sec - u0.ru_utime.tv_sec) +
               (double)(u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) +
               1e-6 * (double)(u1.ru_utime.tv_usec - u0.ru_utime.tv_usec +
                               u1.ru_stime.tv_usec - u0.ru_stime.tv_usec);
  double wall = MPI_Wtime() - t0, most = 0, pct = 100 * cpu / wall;
  MPI_Reduce(&pct, &most, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("idle for a second, the busiest rank used %.2f%% of a core\n", most);
  MUST(tdm_mpi_destroy(m));
  tdm_runtime_destroy(rt);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int level;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t nt = argc > 1 ? (size_t)atoi(argv[1]) : 6, tb = argc > 2 ? (size_t)atoi(argv[2]) : 48;
  int reps = argc > 3 ? atoi(argv[3]) : 3;
  if (nt < 1 || nt > 64 || tb < 1 || tb > 512 || reps < 1 || reps > 50) {
    if (!rank)
      fprintf(stderr, "usage: bench-mpi [tiles 1-64] [tile 1-512] [reps 1-50]\n");
    MPI_Finalize();
    return 2;
  }
  static const double speedup[4] = {8, 0, 2, 0};
  double s = speedup[rank % 4];
  char spec[96];
  snprintf(spec, sizeof spec, s > 0 ? "gpu:speedup=%g,memory=shared" : "cpu.0:speedup=1", s);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.bind_workers = 0;
  cfg.sim = spec;
  cfg.sim_time_scale = 32;
  tdm_runtime *rt;
  MUST(tdm_runtime_create(&cfg, &rt));
  tdm_mpi *m;
  MUST(tdm_mpi_create(rt, MPI_COMM_WORLD, &m));
  double *w = malloc((size_t)size * sizeof *w);
  int *uniform = malloc(nt * nt * sizeof *uniform), *weighted = malloc(nt * nt * sizeof *weighted);
  if (!w || !uniform || !weighted)
    MPI_Abort(MPI_COMM_WORLD, 1);
  MUST(tdm_mpi_weights(m, 1 + s, w));
  int p, q;
  tdm_mpi_grid(size, &p, &q);
  for (size_t i = 0; i < nt; i++)
    for (size_t j = 0; j < nt; j++)
      uniform[i * nt + j] = tdm_mpi_block_cyclic(p, q, i, j);
  MUST(tdm_mpi_weighted_owners(w, size, nt * nt, weighted));
  if (!rank) {
    printf("bench-mpi: %d rank%s (grid %d x %d), %zu x %zu tiles of %zu x %zu doubles; "
           "throughputs:", size, size == 1 ? "" : "s", p, q, nt, nt, tb, tb);
    for (int r = 0; r < size; r++)
      printf(" %g", w[r]);
    printf("\n");
  }
  static const char *const name[2] = {"gemm", "cholesky"};
  double *ratio[2] = {calloc((size_t)reps, sizeof(double)), calloc((size_t)reps, sizeof(double))};
  double *tu[2] = {calloc((size_t)reps, sizeof(double)), calloc((size_t)reps, sizeof(double))};
  double *tw[2] = {calloc((size_t)reps, sizeof(double)), calloc((size_t)reps, sizeof(double))};
  uint64_t key = 0;
  for (int rep = 0; rep < reps; rep++)
    for (int what = 0; what < 2; what++) {
      run u = one_run(rt, m, what, nt, tb, uniform, key += 1000000);
      run v = one_run(rt, m, what, nt, tb, weighted, key += 1000000);
      tu[what][rep] = u.seconds;
      tw[what][rep] = v.seconds;
      ratio[what][rep] = v.seconds / u.seconds;
      if (!rank)
        printf("  %-8s rep %d: block-cyclic %8.1f ms (%llu messages, %.1f MB), weighted %8.1f "
               "ms (%llu messages, %.1f MB): weighted / block-cyclic %.2f\n",
               name[what], rep, u.seconds * 1e3, (unsigned long long)u.messages,
               (double)u.bytes / 1e6, v.seconds * 1e3, (unsigned long long)v.messages,
               (double)v.bytes / 1e6, ratio[what][rep]);
    }
  for (int what = 0; what < 2 && !rank; what++) {
    qsort(ratio[what], (size_t)reps, sizeof(double), cmp);
    qsort(tu[what], (size_t)reps, sizeof(double), cmp);
    qsort(tw[what], (size_t)reps, sizeof(double), cmp);
    printf("%-8s medians: block-cyclic %.1f ms, weighted %.1f ms, ratio %.2f\n", name[what],
           tu[what][reps / 2] * 1e3, tw[what][reps / 2] * 1e3, ratio[what][reps / 2]);
  }
  for (int what = 0; what < 2; what++)
    free(ratio[what]), free(tu[what]), free(tw[what]);
  if (size >= 2)
    latency(200);
  free(w), free(uniform), free(weighted);
  MUST(tdm_mpi_destroy(m));
  tdm_runtime_destroy(rt);
  MPI_Finalize();
  return 0;
}
