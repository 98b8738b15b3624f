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
 * single-rank figure to compare with. Then, on real CPU tasks (one
 * worker a rank, no emulation): the overlap of messages with kernels
 * (the share of the time a message is in flight during which a kernel
 * runs, seen through MPI's profiling interface), and Task Bench's 1-D
 * stencil through Tandem beside the same stencil written with MPI alone,
 * in turn, at two grains (what a task costs with MPI in the loop). With
 * two ranks or more, last: a ping-pong through tasks beside MPI's own
 * (the latency the runtime and its progress adds), and the CPU an idle
 * rank uses.
 */
#include <math.h>
#include <mpi.h>
#include <stdatomic.h>
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

/* The codelets a run submits: tiles.h's, or those that time each run
 * of their function (for the overlap). */
typedef struct {
  const tdm_codelet *gemm_nn, *gemm_nt, *potrf, *trsm;
} kernels;

static const kernels plain = {&gemm_nn_cl, &gemm_nt_cl, &potrf_cl, &trsm_cl};

/* One run of `what` (0 GEMM, 1 Cholesky) with these owners: the slowest
 * rank's time, and every rank's messages and bytes. */
static run one_run(tdm_runtime *rt, tdm_mpi *m, int what, size_t nt, size_t tb,
                   const int *owners, uint64_t key, const kernels *cl) {
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
          submit(m, cl->gemm_nn, T(0, i, k), T(1, k, j), T(2, i, j));
  } else {
    for (size_t k = 0; k < nt; k++) {
      submit(m, cl->potrf, T(0, k, k), NULL, NULL);
      for (size_t i = k + 1; i < nt; i++)
        submit(m, cl->trsm, T(0, k, k), T(0, i, k), NULL);
      for (size_t j = k + 1; j < nt; j++)
        for (size_t i = j; i < nt; i++)
          submit(m, cl->gemm_nt, T(0, i, k), T(0, j, k), T(0, i, j));
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

/* A runtime of one CPU worker, not emulated, and its tdm_mpi: beside the
 * emulated one, as an application may have several. */
static void plain_runtime(tdm_runtime **rt, tdm_mpi **m) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.bind_workers = 0;
  cfg.devices = "none";
  MUST(tdm_runtime_create(&cfg, rt));
  MUST(tdm_mpi_create(*rt, MPI_COMM_WORLD, m));
}

/* ---- overlap of messages with computation ---------------------------------------- */

/* Seen from outside, through MPI's profiling interface (this program's
 * MPI_Isend, MPI_Irecv and MPI_Testsome come first): each message
 * libtandem-mpi posts is in flight from its post to the MPI_Testsome
 * that finds it complete; each tile kernel runs from its start to its
 * end (timed codelets). The overlap is the share of the time some
 * message is in flight on a rank during which a kernel runs there. Only
 * while `watching`, when one tdm_mpi (one progress thread, which makes
 * these calls) exists. */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { SPANS = 1 << 16, PENDING = 4096 };
typedef struct {
  double t0, t1;
} span;
static _Atomic bool watching;
static span comm[SPANS]; /* the progress thread's */
static int ncomm, npend, pend_at[PENDING];
static MPI_Request pend[PENDING], seen[PENDING];
static span comp[SPANS];
static _Atomic int ncomp;

static void posted(MPI_Request r) {
  if (!atomic_load(&watching) || ncomm == SPANS || npend == PENDING)
    return;
  comm[ncomm] = (span){now(), 0};
  pend[npend] = r;
  pend_at[npend++] = ncomm++;
}

int MPI_Isend(const void *b, int c, MPI_Datatype t, int d, int g, MPI_Comm m, MPI_Request *r) {
  int rc = PMPI_Isend(b, c, t, d, g, m, r);
  if (rc == MPI_SUCCESS)
    posted(*r);
  return rc;
}

int MPI_Irecv(void *b, int c, MPI_Datatype t, int s, int g, MPI_Comm m, MPI_Request *r) {
  int rc = PMPI_Irecv(b, c, t, s, g, m, r);
  if (rc == MPI_SUCCESS)
    posted(*r);
  return rc;
}

int MPI_Testsome(int n, MPI_Request *r, int *k, int *idx, MPI_Status *st) {
  bool watch = atomic_load(&watching) && n <= PENDING;
  if (watch)
    memcpy(seen, r, (size_t)n * sizeof *r);
  int rc = PMPI_Testsome(n, r, k, idx, st);
  for (int j = 0; watch && *k != MPI_UNDEFINED && j < *k; j++)
    for (int p = 0; p < npend; p++)
      if (pend[p] == seen[idx[j]]) {
        comm[pend_at[p]].t1 = now();
        pend[p] = pend[--npend];
        pend_at[p] = pend_at[npend];
        break;
      }
  return rc;
}

#define TIMED(fn)                                                              \
  static void timed_##fn(const tdm_buffer *b, const void *args, size_t n) {    \
    double t0 = now();                                                         \
    fn(b, args, n);                                                            \
    int k = atomic_fetch_add(&ncomp, 1);                                       \
    if (k < SPANS)                                                             \
      comp[k] = (span){t0, now()};                                             \
  }
TIMED(gemm_nn)
TIMED(gemm_nt)
TIMED(potrf)
TIMED(trsm)

static int by_start(const void *a, const void *b) {
  double x = ((const span *)a)->t0, y = ((const span *)b)->t0;
  return (x > y) - (x < y);
}

/* The spans merged into disjoint ones, in order; their count. */
static int merge(span *s, int n) {
  qsort(s, (size_t)n, sizeof *s, by_start);
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (k && s[i].t0 <= s[k - 1].t1) {
      if (s[i].t1 > s[k - 1].t1)
        s[k - 1].t1 = s[i].t1;
    } else {
      s[k++] = s[i];
    }
  }
  return k;
}

/* Runs GEMM and Cholesky block-cyclic on real CPU tasks (one worker a
 * rank, no emulation: a kernel's time is its run) and prints, for each,
 * the time messages were in flight and the share of it with a kernel
 * running, on the rank with the least (and the median rank). */
static void overlap(size_t nt, size_t tb, const int *owners) {
  tdm_runtime *rt;
  tdm_mpi *m;
  plain_runtime(&rt, &m);
  static tdm_codelet t[4];
  t[0] = gemm_nn_cl, t[0].cpu_fn = timed_gemm_nn;
  t[1] = gemm_nt_cl, t[1].cpu_fn = timed_gemm_nt;
  t[2] = potrf_cl, t[2].cpu_fn = timed_potrf;
  t[3] = trsm_cl, t[3].cpu_fn = timed_trsm;
  const kernels timed = {&t[0], &t[1], &t[2], &t[3]};
  static const char *const name[2] = {"gemm", "cholesky"};
  for (int what = 0; what < 2; what++) {
    ncomm = npend = 0;
    atomic_store(&ncomp, 0);
    atomic_store(&watching, true);
    double t0 = now();
    run r = one_run(rt, m, what, nt, tb, owners, 800000000 + 1000000 * (uint64_t)what, &timed);
    double t1 = now();
    atomic_store(&watching, false);
    MUST(tdm_mpi_wait_all(m)); /* (the progress thread's last calls seen) */
    for (int i = 0; i < ncomm; i++)
      if (comm[i].t1 == 0) /* (not seen complete while watching) */
        comm[i].t1 = t1;
    int nc = merge(comm, ncomm), nk = merge(comp, atomic_load(&ncomp) < SPANS ? ncomp : SPANS);
    double in_flight = 0, both = 0;
    for (int i = 0, j = 0; i < nc; i++) {
      in_flight += comm[i].t1 - comm[i].t0;
      while (j < nk && comp[j].t1 <= comm[i].t0)
        j++;
      for (int k = j; k < nk && comp[k].t0 < comm[i].t1; k++) {
        double a = comp[k].t0 > comm[i].t0 ? comp[k].t0 : comm[i].t0;
        double b = comp[k].t1 < comm[i].t1 ? comp[k].t1 : comm[i].t1;
        both += b - a;
      }
    }
    double mine[2] = {in_flight, in_flight > 0 ? both / in_flight : 1};
    double *all = malloc(2 * (size_t)size * sizeof *all);
    if (!all)
      MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (!rank) {
      double share[64];
      int n = size < 64 ? size : 64;
      for (int k = 0; k < n; k++)
        share[k] = all[2 * k + 1];
      qsort(share, (size_t)n, sizeof *share, cmp);
      printf("overlap, %-8s (real CPU tasks, block-cyclic, %.1f ms, %llu messages): messages in "
             "flight %.1f ms on rank 0, a kernel running for %.0f%% of that time (ranks: least "
             "%.0f%%, median %.0f%%)\n", name[what], (t1 - t0) * 1e3,
             (unsigned long long)r.messages, all[0] * 1e3, 100 * all[1], 100 * share[0],
             100 * share[n / 2]);
    }
    free(all);
  }
  MUST(tdm_mpi_destroy(m));
  tdm_runtime_destroy(rt);
}

/* ---- the stencil: the cost of a task with MPI in the loop ------------------------- */

/* Task Bench's stencil_1d: `width` points, each step's point i from
 * points i-1, i, i+1 of the step before (an edge's missing neighbour is
 * itself), the points split into equal blocks over the ranks. Through
 * Tandem: a handle per point and step parity, every rank submitting
 * every task (the sequential task flow); by hand: each rank its block
 * with a ghost cell each side, MPI_Isend/MPI_Irecv of the edge points
 * every step, then its points. The same arithmetic, checked equal; each
 * task spins `iters` iterations (its grain). The difference of the two
 * times per task of a rank is what the runtime costs a task there. */
static double spin(int iters) {
  volatile double x = 1;
  for (int i = 0; i < iters; i++)
    x = x * 1.0000001 + 1e-9;
  return x;
}

static void point(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const int *iters = args;
  double v = (((const double *)b[0].ptr)[0] + ((const double *)b[1].ptr)[0] +
              ((const double *)b[2].ptr)[0]) / 3 + 1;
  spin(*iters);
  ((double *)b[3].ptr)[0] = v;
}
static const tdm_codelet point_cl = {.name = "point", .cpu_fn = point, .nbuffers = 4,
                                     .modes = {TDM_R, TDM_R, TDM_R, TDM_W}};

static double stencil_tandem(tdm_mpi *m, tdm_runtime *rt, int per, int steps, int iters,
                             double *out, uint64_t key) {
  int width = per * size;
  double *v = malloc(2 * (size_t)width * sizeof *v);
  tdm_handle **h = malloc(2 * (size_t)width * sizeof *h);
  if (!v || !h)
    MPI_Abort(MPI_COMM_WORLD, 1);
  for (int k = 0; k < 2 * width; k++) {
    v[k] = k < width ? (double)(k % 7) : 0;
    MUST(tdm_register_vector(rt, &v[k], 1, sizeof v[k], &h[k]));
    MUST(tdm_mpi_register(m, h[k], (k % width) / per, key + (uint64_t)k));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int s = 0; s < steps; s++) {
    tdm_handle **from = h + (s % 2) * width, **to = h + (1 - s % 2) * width;
    for (int i = 0; i < width; i++) {
      tdm_task_desc d = {.codelet = &point_cl,
                         .handles = {from[i ? i - 1 : i], from[i],
                                     from[i + 1 < width ? i + 1 : i], to[i]},
                         .args = &iters, .args_size = sizeof iters};
      MUST(tdm_mpi_submit(m, &d));
    }
  }
  MUST(tdm_mpi_wait_all(m));
  double mine = MPI_Wtime() - t0, slowest;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  for (int j = 0; j < per; j++)
    out[j] = v[(steps % 2) * width + rank * per + j];
  for (int k = 0; k < 2 * width; k++) {
    MUST(tdm_mpi_forget(m, h[k]));
    MUST(tdm_handle_unregister(h[k]));
  }
  free(v);
  free(h);
  return slowest;
}

static double stencil_by_hand(int per, int steps, int iters, double *out) {
  double *a = malloc((size_t)(per + 2) * sizeof *a), *b = malloc((size_t)(per + 2) * sizeof *b);
  if (!a || !b)
    MPI_Abort(MPI_COMM_WORLD, 1);
  for (int j = 0; j < per; j++)
    a[j + 1] = (double)((rank * per + j) % 7);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int s = 0; s < steps; s++) {
    MPI_Request r[4];
    int nr = 0;
    if (rank > 0) {
      MPI_Irecv(&a[0], 1, MPI_DOUBLE, rank - 1, 5, MPI_COMM_WORLD, &r[nr++]);
      MPI_Isend(&a[1], 1, MPI_DOUBLE, rank - 1, 5, MPI_COMM_WORLD, &r[nr++]);
    }
    if (rank < size - 1) {
      MPI_Irecv(&a[per + 1], 1, MPI_DOUBLE, rank + 1, 5, MPI_COMM_WORLD, &r[nr++]);
      MPI_Isend(&a[per], 1, MPI_DOUBLE, rank + 1, 5, MPI_COMM_WORLD, &r[nr++]);
    }
    MPI_Waitall(nr, r, MPI_STATUSES_IGNORE);
    if (rank == 0)
      a[0] = a[1];
    if (rank == size - 1)
      a[per + 1] = a[per];
    for (int j = 1; j <= per; j++) {
      b[j] = (a[j - 1] + a[j] + a[j + 1]) / 3 + 1;
      spin(iters);
    }
    double *t = a;
    a = b;
    b = t;
  }
  double mine = MPI_Wtime() - t0, slowest;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  memcpy(out, &a[1], (size_t)per * sizeof *out);
  free(a);
  free(b);
  return slowest;
}

/* Both in turn, `reps` times, at grains 0 and `iters`: medians, and the
 * cost a task per rank. */
static void stencil(int reps) {
  enum { PER = 8, STEPS = 200 };
  tdm_runtime *rt;
  tdm_mpi *m;
  plain_runtime(&rt, &m);
  double mine[PER], theirs[PER], *tt = calloc((size_t)reps, sizeof *tt),
         *th = calloc((size_t)reps, sizeof *th);
  if (!tt || !th)
    MPI_Abort(MPI_COMM_WORLD, 1);
  static const int grains[2] = {0, 2000};
  for (int g = 0; g < 2; g++) {
    for (int rep = 0; rep < reps; rep++) {
      tt[rep] = stencil_tandem(m, rt, PER, STEPS, grains[g], mine,
                               700000000 + 100000 * (uint64_t)(rep + reps * g));
      th[rep] = stencil_by_hand(PER, STEPS, grains[g], theirs);
      if (memcmp(mine, theirs, sizeof mine)) {
        fprintf(stderr, "bench-mpi: rank %d: the stencils differ\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    qsort(tt, (size_t)reps, sizeof *tt, cmp);
    qsort(th, (size_t)reps, sizeof *th, cmp);
    double tasks = (double)PER * STEPS; /* a rank's */
    if (!rank)
      printf("stencil, %d points a rank, %d steps, grain %d: Tandem %.2f ms, by hand %.2f ms "
             "(medians of %d, results equal): %.2f us a task by hand, %.2f us added by "
             "Tandem\n", PER, STEPS, grains[g], tt[reps / 2] * 1e3, th[reps / 2] * 1e3, reps,
             th[reps / 2] / tasks * 1e6, (tt[reps / 2] - th[reps / 2]) / tasks * 1e6);
  }
  free(tt);
  free(th);
  MUST(tdm_mpi_destroy(m));
  tdm_runtime_destroy(rt);
}

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
  tdm_runtime *rt;
  tdm_mpi *m;
  plain_runtime(&rt, &m);
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
      run u = one_run(rt, m, what, nt, tb, uniform, key += 1000000, &plain);
      run v = one_run(rt, m, what, nt, tb, weighted, key += 1000000, &plain);
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
  overlap(nt, tb, uniform);
  stencil(reps);
  if (size >= 2)
    latency(200);
  free(w), free(uniform), free(weighted);
  MUST(tdm_mpi_destroy(m));
  tdm_runtime_destroy(rt);
  MPI_Finalize();
  return 0;
}
