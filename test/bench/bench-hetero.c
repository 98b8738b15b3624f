/*
 * bench-hetero: tiled GEMM and tiled Cholesky run for real by the
 * runtime's threads, on the CPU cores alone, with emulated devices
 * (tdm_config.sim) and with PoCL as a real OpenCL device, under each
 * placement policy: makespan, its ratio to the lower bound, tasks per
 * kind of worker, bytes moved, and how much slower the CPU workers' gemm
 * ran in the runs than when measured alone.
 *
 * Tiles are 128 x 128 doubles with plain C kernels (no BLAS). The lower
 * bound is tdm__vt_lower_bound (the larger of the critical path and the
 * work spread over every worker at its speed) on the same task graph,
 * with each kernel's time on one core measured once, alone, before any
 * run (the median of 9; times the time scale on an emulated machine,
 * whose CPU tasks take that much longer), never from the runs it judges,
 * and the declared speed-ups of the emulated devices. PoCL runs on the
 * same two cores as the CPU workers, so its bound counts the CPU workers
 * only. Each configuration runs once to calibrate
 * the models (kept in a temporary cache directory), then `runs` times:
 * the median is shown.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tandem.h"

#include "bench.h"
#include "internal.h" /* tries placed again (rt->nretries) */
#include "tandem/opencl.h"
#include "vt-graphs.h"

#define B 128 /* tile side */
#define MAXT 8

/* ---- CPU kernels (row-major, leading dimension ld) -------------------- */

#define AT(buf, i, j) (((double *)(buf).ptr)[(i) * (buf).ld + (j)])

static void gemm_nn(const tdm_buffer *b, const void *args, size_t n) { /* C += A B */
  (void)args, (void)n;
  for (size_t i = 0; i < B; i++)
    for (size_t k = 0; k < B; k++) {
      double a = AT(b[0], i, k);
      for (size_t j = 0; j < B; j++)
        AT(b[2], i, j) += a * AT(b[1], k, j);
    }
}

/* C -= A B^T */
static void minus_abt(const tdm_buffer *a, const tdm_buffer *b, const tdm_buffer *c) {
  for (size_t i = 0; i < B; i++)
    for (size_t j = 0; j < B; j++) {
      double s = 0;
      for (size_t k = 0; k < B; k++)
        s += AT(*a, i, k) * AT(*b, j, k);
      AT(*c, i, j) -= s;
    }
}

static void gemm_nt(const tdm_buffer *b, const void *args, size_t n) { /* C -= A B^T */
  (void)args, (void)n;
  minus_abt(&b[0], &b[1], &b[2]);
}

static void syrk(const tdm_buffer *b, const void *args, size_t n) { /* C -= A A^T */
  (void)args, (void)n;
  minus_abt(&b[0], &b[0], &b[1]);
}

static void trsm(const tdm_buffer *b, const void *args, size_t n) { /* X L^T = X */
  (void)args, (void)n;
  for (size_t r = 0; r < B; r++)
    for (size_t j = 0; j < B; j++) {
      double x = AT(b[1], r, j);
      for (size_t k = 0; k < j; k++)
        x -= AT(b[1], r, k) * AT(b[0], j, k);
      AT(b[1], r, j) = x / AT(b[0], j, j);
    }
}

static void potrf(const tdm_buffer *b, const void *args, size_t n) { /* lower, in place */
  (void)args, (void)n;
  for (size_t j = 0; j < B; j++) {
    double s = AT(b[0], j, j);
    for (size_t k = 0; k < j; k++)
      s -= AT(b[0], j, k) * AT(b[0], j, k);
    AT(b[0], j, j) = sqrt(s);
    for (size_t i = j + 1; i < B; i++) {
      double x = AT(b[0], i, j);
      for (size_t k = 0; k < j; k++)
        x -= AT(b[0], i, k) * AT(b[0], j, k);
      AT(b[0], i, j) = x / AT(b[0], j, j);
    }
  }
}

/* ---- OpenCL variants (the same arithmetic) ------------------------------ */

#define CL_HEAD "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
#define MAT(x) "__global double *" #x ", ulong " #x "r, ulong " #x "c, ulong " #x "ld"

static const tdm_opencl_variant gemm_nn_cl = {
    .source = CL_HEAD "__kernel void gemm_nn(" MAT(a) ", " MAT(b) ", " MAT(c) ") {\n"
                      "  size_t j = get_global_id(0), i = get_global_id(1);\n"
                      "  double s = c[i * cld + j];\n"
                      "  for (ulong k = 0; k < ac; k++) s += a[i * ald + k] * b[k * bld + j];\n"
                      "  c[i * cld + j] = s;\n}\n",
    .kernel = "gemm_nn"};
static const tdm_opencl_variant gemm_nt_cl = {
    .source = CL_HEAD "__kernel void gemm_nt(" MAT(a) ", " MAT(b) ", " MAT(c) ") {\n"
                      "  size_t j = get_global_id(0), i = get_global_id(1);\n"
                      "  double s = 0;\n"
                      "  for (ulong k = 0; k < ac; k++) s += a[i * ald + k] * b[j * bld + k];\n"
                      "  c[i * cld + j] -= s;\n}\n",
    .kernel = "gemm_nt"};
static const tdm_opencl_variant syrk_cl = {
    .source = CL_HEAD "__kernel void syrk(" MAT(a) ", " MAT(c) ") {\n"
                      "  size_t j = get_global_id(0), i = get_global_id(1);\n"
                      "  double s = 0;\n"
                      "  for (ulong k = 0; k < ac; k++) s += a[i * ald + k] * a[j * ald + k];\n"
                      "  c[i * cld + j] -= s;\n}\n",
    .kernel = "syrk"};

static void rows(const tdm_buffer *b, const void *args, size_t size, unsigned *dims,
                 size_t global[3], size_t local[3]) {
  (void)args, (void)size, (void)local;
  *dims = 1;
  global[0] = b[1].nx; /* one work-item per row of X */
}

static const tdm_opencl_variant trsm_cl = {
    .source = CL_HEAD "__kernel void trsm(" MAT(l) ", " MAT(x) ") {\n"
                      "  size_t r = get_global_id(0);\n"
                      "  for (ulong j = 0; j < xc; j++) {\n"
                      "    double v = x[r * xld + j];\n"
                      "    for (ulong k = 0; k < j; k++) v -= x[r * xld + k] * l[j * lld + k];\n"
                      "    x[r * xld + j] = v / l[j * lld + j];\n  }\n}\n",
    .kernel = "trsm",
    .work_size = rows};

enum { K_GEMM_NN, K_GEMM_NT, K_SYRK, K_TRSM, K_POTRF, NK };

/* The durations of the kernels run by CPU workers in the timed runs. */
#define MAX_SEEN 8192
static tdm_runtime *current;
static _Atomic bool recording;
static double seen[NK][MAX_SEEN];
static _Atomic unsigned nseen[NK];

#define TIMED(kind, fn)                                                                       \
  static void timed_##fn(const tdm_buffer *b, const void *args, size_t n) {                  \
    double t0 = bench_now();                                                                      \
    fn(b, args, n);                                                                           \
    double t = bench_now() - t0;                                                                  \
    int w = tdm_worker_id(current);                                                           \
    if (atomic_load(&recording) && w >= 0 && (unsigned)w < tdm_runtime_ncpu_workers(current)) { \
      unsigned i = atomic_fetch_add(&nseen[kind], 1);                                         \
      if (i < MAX_SEEN)                                                                       \
        seen[kind][i] = t;                                                                    \
    }                                                                                         \
  }
TIMED(K_GEMM_NN, gemm_nn)
TIMED(K_GEMM_NT, gemm_nt)
TIMED(K_SYRK, syrk)
TIMED(K_TRSM, trsm)
TIMED(K_POTRF, potrf)
/* codelet names match vt-graphs.h's (the bound) and the sim speed-ups */
static tdm_codelet codelets[NK] = {
    [K_GEMM_NN] = {.name = "gemm", .cpu_fn = timed_gemm_nn, .nbuffers = 3,
                   .modes = {TDM_R, TDM_R, TDM_RW}, .opencl = &gemm_nn_cl},
    [K_GEMM_NT] = {.name = "gemm", .cpu_fn = timed_gemm_nt, .nbuffers = 3,
                   .modes = {TDM_R, TDM_R, TDM_RW}, .opencl = &gemm_nt_cl},
    [K_SYRK] = {.name = "syrk", .cpu_fn = timed_syrk, .nbuffers = 2, .modes = {TDM_R, TDM_RW},
                .opencl = &syrk_cl},
    [K_TRSM] = {.name = "trsm", .cpu_fn = timed_trsm, .nbuffers = 2, .modes = {TDM_R, TDM_RW},
                .opencl = &trsm_cl},
    [K_POTRF] = {.name = "potrf", .cpu_fn = timed_potrf, .nbuffers = 1, .modes = {TDM_RW}},
};

/* ---- the two applications ------------------------------------------------ */

static double tiles[3][MAXT][MAXT][B * B];
static double original[MAXT][MAXT][B * B];

static void submit(tdm_runtime *rt, int k, tdm_handle *a, tdm_handle *b, tdm_handle *c) {
  tdm_task_desc d = {.codelet = &codelets[k], .handles = {a, b, c}};
  if (tdm_submit(rt, &d) != TDM_OK) {
    fprintf(stderr, "bench-hetero: submit failed\n");
    exit(1);
  }
}

static void fill(unsigned nt, bool cholesky) {
  unsigned n = nt * B;
  for (unsigned I = 0; I < nt; I++)
    for (unsigned J = 0; J < nt; J++)
      for (unsigned i = 0; i < B; i++)
        for (unsigned j = 0; j < B; j++) {
          unsigned gi = I * B + i, gj = J * B + j;
          if (cholesky) { /* symmetric, diagonally dominant: positive definite */
            double v = 1.0 / (1.0 + fabs((double)gi - (double)gj)) + (gi == gj ? n : 0);
            tiles[0][I][J][i * B + j] = original[I][J][i * B + j] = v;
          } else {
            tiles[0][I][J][i * B + j] = sin(gi * 0.37 + gj * 0.11);
            tiles[1][I][J][i * B + j] = cos(gi * 0.13 - gj * 0.29);
            tiles[2][I][J][i * B + j] = 0;
          }
        }
}

/* Runs the application once; returns the seconds from the first submit
 * to the end of tdm_wait_all. */
static bool app_failed; /* the last run_app: tasks failed or versions lost */

static double run_app(tdm_runtime *rt, unsigned nt, bool cholesky) {
  app_failed = false;
  fill(nt, cholesky);
  tdm_handle *h[3][MAXT][MAXT];
  for (int m = 0; m < (cholesky ? 1 : 3); m++)
    for (unsigned i = 0; i < nt; i++)
      for (unsigned j = 0; j < nt; j++)
        if (tdm_register_matrix(rt, tiles[m][i][j], B, B, B, sizeof(double), &h[m][i][j])) {
          fprintf(stderr, "bench-hetero: register failed\n");
          exit(1);
        }
  double t0 = bench_now();
  if (cholesky) {
    tdm_handle *(*A)[MAXT] = h[0];
    for (unsigned k = 0; k < nt; k++) {
      submit(rt, K_POTRF, A[k][k], NULL, NULL);
      for (unsigned i = k + 1; i < nt; i++)
        submit(rt, K_TRSM, A[k][k], A[i][k], NULL);
      for (unsigned i = k + 1; i < nt; i++) {
        submit(rt, K_SYRK, A[i][k], A[i][i], NULL);
        for (unsigned j = k + 1; j < i; j++)
          submit(rt, K_GEMM_NT, A[i][k], A[j][k], A[i][j]);
      }
    }
  } else {
    for (unsigned i = 0; i < nt; i++)
      for (unsigned j = 0; j < nt; j++)
        for (unsigned k = 0; k < nt; k++)
          submit(rt, K_GEMM_NN, h[0][i][k], h[1][k][j], h[2][i][j]);
  }
  app_failed = tdm_wait_all(rt) != TDM_OK;
  double t = bench_now() - t0;
  for (int m = 0; m < (cholesky ? 1 : 3); m++)
    for (unsigned i = 0; i < nt; i++)
      for (unsigned j = 0; j < nt; j++)
        app_failed |= tdm_handle_unregister(h[m][i][j]) != TDM_OK;
  return t;
}

/* The largest error of the result against a direct computation. */
static double check(unsigned nt, bool cholesky) {
  double worst = 0;
  if (cholesky) { /* (L L^T)[gi][gj] against the original, lower triangle */
    for (unsigned gi = 0; gi < nt * B; gi += 7)
      for (unsigned gj = 0; gj <= gi; gj += 5) {
        double s = 0;
        for (unsigned k = 0; k <= gj; k++)
          s += tiles[0][gi / B][k / B][(gi % B) * B + k % B] *
               tiles[0][gj / B][k / B][(gj % B) * B + k % B];
        worst = fmax(worst, fabs(s - original[gi / B][gj / B][(gi % B) * B + gj % B]));
      }
  } else {
    for (unsigned gi = 0; gi < nt * B; gi += 7)
      for (unsigned gj = 0; gj < nt * B; gj += 5) {
        double s = 0;
        for (unsigned k = 0; k < nt * B; k++)
          s += sin(gi * 0.37 + k * 0.11) * cos(k * 0.13 - gj * 0.29);
        worst = fmax(worst, fabs(s - tiles[2][gi / B][gj / B][(gi % B) * B + gj % B]));
      }
  }
  return worst;
}

/* ---- machines, bounds, table --------------------------------------------- */

typedef struct machine {
  const char *name;
  const char *sim; /* NULL: none */
  bool pocl;
} machine;

static const machine machines[] = {
    {"2 CPU workers", NULL, false},
    {"+ emulated integrated GPU", "igpu:gemm=3.3,syrk=2.7,trsm=2.7,potrf=0.7,memory=shared",
     false},
    {"+ emulated discrete GPU",
     "dgpu:gemm=10,syrk=8,trsm=8,potrf=2,latency=10us,bandwidth=10G", false},
    {"+ 2 emulated discrete GPUs (1x, 0.5x)",
     "dgpu:gemm=10,syrk=8,trsm=8,potrf=2,latency=10us,bandwidth=10G;"
     "half:gemm=5,syrk=4,trsm=4,potrf=1,latency=10us,bandwidth=10G",
     false},
    {"+ PoCL (OpenCL, memory of its own)", NULL, true},
};
#define SCALE 20.0 /* emulated machines: twice the largest speed-up */

static double kernel_time[NK]; /* one tile on one core, seconds */

/* Each kernel's time on one core, on tiles of the Cholesky matrix, in
 * cache as they mostly are during the runs: the median of 9 after one
 * unmeasured call. */
static void measure_kernels(void) {
  static double t[3][B * B], saved[3][B * B];
  tdm_buffer b[3];
  for (int i = 0; i < 3; i++)
    b[i] = (tdm_buffer){.ptr = t[i], .elem_size = sizeof(double), .nx = B, .ny = B, .ld = B};
  fill(2, true); /* a diagonal tile, and two below it */
  memcpy(saved[0], tiles[0][0][0], sizeof saved[0]);
  memcpy(saved[1], tiles[0][1][0], sizeof saved[1]);
  memcpy(saved[2], tiles[0][1][1], sizeof saved[2]);
  for (int k = 0; k < NK; k++) {
    double v[10];
    for (int r = 0; r < 10; r++) {
      memcpy(t, saved, sizeof t);
      if (k == K_TRSM)
        potrf(b, NULL, 0); /* its L */
      const tdm_buffer *args = k <= K_GEMM_NT ? (tdm_buffer[]){b[1], b[1], b[2]}
                               : k == K_SYRK  ? (tdm_buffer[]){b[1], b[2]}
                                              : b; /* trsm: L, X; potrf: A */
      double t0 = bench_now();
      codelets[k].cpu_fn(args, NULL, 0);
      v[r] = bench_now() - t0;
    }
    kernel_time[k] = bench_median(v + 1, 9);
  }
}

/* A kernel's time on a CPU worker in the timed runs (the median), else
 * as measured before the runs: shown beside the bound, never in it. */
static double kernel_seen(int k) {
  unsigned n = atomic_load(&nseen[k]);
  if (n > MAX_SEEN)
    n = MAX_SEEN;
  return n ? bench_median(seen[k], (int)n) : kernel_time[k];
}

/* The lower bound on machine m, from the kernels' times measured before
 * the runs (times the time scale on an emulated machine, whose CPU tasks
 * take that much longer) and the declared speed-ups. */
static double bound(const machine *m, unsigned nt, bool cholesky) {
  static builder bl;
  static const char *const names[] = {"gemm", "small", "potrf", "trsm", "syrk"};
  char text[512];
  snprintf(text, sizeof text, "cpu:workers=2%s%s", m->sim ? ";" : "", m->sim ? m->sim : "");
  tdm_vt_machine vm;
  char err[160];
  if (tdm__vt_parse_machine(text, names, 5, &vm, err, sizeof err)) {
    fprintf(stderr, "bench-hetero: %s\n", err);
    exit(1);
  }
  if (cholesky)
    tiled_cholesky(&bl, nt);
  else
    tiled_gemm(&bl, nt);
  double scale = m->sim ? SCALE : 1;
  double cpu_time[8] = {[GEMM] = kernel_time[cholesky ? K_GEMM_NT : K_GEMM_NN] * scale,
                        [POTRF] = kernel_time[K_POTRF] * scale,
                        [TRSM] = kernel_time[K_TRSM] * scale,
                        [SYRK] = kernel_time[K_SYRK] * scale};
  for (unsigned i = 0; i < bl.ntasks; i++)
    bl.tasks[i].cpu_time = cpu_time[bl.tasks[i].codelet];
  for (unsigned d = 0; d < bl.ndata; d++)
    bl.bytes[d] = B * B * sizeof(double);
  tdm_vt_graph g = graph(&bl);
  return tdm__vt_lower_bound(&vm, &g);
}

static const char *policies[] = {"heft", "ws", "eager", "random"};

static void table(const char *what, unsigned nt, bool cholesky, int runs, bool with_pocl) {
  printf("\n%s, %ux%u tiles of %dx%d doubles\n", what, nt, nt, B, B);
  printf("%-40s %-7s %12s %10s %7s %16s %10s %9s %7s\n", "machine", "policy", "makespan ms",
         "bound ms", "/bound", "tasks CPU/devs", "MiB moved", "max err", "gemm x");
  for (size_t mi = 0; mi < sizeof machines / sizeof *machines; mi++) {
    const machine *m = &machines[mi];
    if (m->pocl && !with_pocl)
      continue;
    for (int p = 0; p < (m->sim || m->pocl ? 4 : 1); p++) {
      char dir[] = "/tmp/tandem-bench-XXXXXX";
      if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
      }
      tdm_config cfg;
      tdm_config_init(&cfg);
      cfg.nworkers = 2;
      cfg.ignore_env = 1;
      cfg.cache_dir = dir;
      cfg.scheduler = policies[p];
      cfg.sim = m->sim;
      cfg.sim_time_scale = m->sim ? SCALE : 0;
      cfg.devices = m->pocl ? "cpu" : "none";
      cfg.device_memory = m->pocl ? TDM_MEMORY_SEPARATE : TDM_MEMORY_AS_REPORTED;
      tdm_runtime *rt = NULL;
      if (tdm_runtime_create(&cfg, &rt) != TDM_OK) {
        printf("%-40s (no runtime)\n", m->name);
        rmdir(dir);
        continue;
      }
      unsigned ndev = tdm_runtime_nworkers(rt) - tdm_runtime_ncpu_workers(rt);
      if (m->pocl && !ndev) {
        printf("%-40s (no OpenCL CPU device: install pocl-opencl-icd)\n", m->name);
        tdm_runtime_destroy(rt);
        rmdir(dir);
        break;
      }
      current = rt;
      run_app(rt, nt, cholesky); /* calibrates the models */
      uint64_t before_tasks = 0, before_bytes = 0;
      for (unsigned d = 0; d < ndev; d++) {
        tdm_device_counters c = {.struct_size = sizeof c};
        tdm_runtime_device_counters(rt, d, &c);
        before_tasks += c.tasks;
        before_bytes += c.bytes_to_device + c.bytes_to_host;
      }
      double t[15];
      for (int k = 0; k < NK; k++)
        atomic_store(&nseen[k], 0);
      atomic_store(&recording, true);
      for (int r = 0; r < runs; r++)
        t[r] = run_app(rt, nt, cholesky);
      atomic_store(&recording, false);
      double err = check(nt, cholesky);
      uint64_t dev_tasks = 0, bytes = 0;
      for (unsigned d = 0; d < ndev; d++) {
        tdm_device_counters c = {.struct_size = sizeof c};
        tdm_runtime_device_counters(rt, d, &c);
        dev_tasks += c.tasks;
        bytes += c.bytes_to_device + c.bytes_to_host;
      }
      tdm_runtime_destroy(rt); /* saves the models */
      double lb = bound(m, nt, cholesky);
      char cmd[64];
      snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
      if (system(cmd) != 0)
        fprintf(stderr, "bench-hetero: could not remove %s\n", dir);
      unsigned total = nt * nt * nt;
      if (cholesky)
        total = nt + nt * (nt - 1) / 2 * 2 + (nt - 2) * (nt - 1) * nt / 6;
      double per_run_dev = (double)(dev_tasks - before_tasks) / runs;
      char tasks[32];
      snprintf(tasks, sizeof tasks, "%.0f/%.0f", total - per_run_dev, per_run_dev);
      double ms = 1e3 * bench_median(t, runs);
      int gk = cholesky ? K_GEMM_NT : K_GEMM_NN;
      printf("%-40s %-7s %12.1f %10.1f %7.2f %16s %10.2f %9.1e %7.2f\n", p ? "" : m->name,
             m->sim || m->pocl ? policies[p] : "ws", ms, 1e3 * lb, ms / (1e3 * lb), tasks,
             (double)(bytes - before_bytes) / runs / (1 << 20), err,
             kernel_seen(gk) / kernel_time[gk]);
      fflush(stdout);
    }
  }
}

/* Two emulated discrete GPUs (`sim`), one of which stops working 40 ms
 * into a tiled Cholesky (injected), or whose every 70th try hangs (found by
 * the watchdog, here at 10 times its prediction and at least 20 ms):
 * the other and the CPU workers finish it. Each run on a runtime of its
 * own (the loss counts from its creation), with the models learnt by a
 * run before; heft. */
static void lost_device(const char *name, const char *sim, unsigned nt, int runs) {
  static const struct {
    const char *name, *faults;
    int writeback;
    bool quick_watchdog, no_lineage;
  } cases[] = {
      {"no fault (lineage)", NULL, 0, false, false},
      {"no fault, writeback", NULL, 1, false, false},
      {"no fault, neither", NULL, 0, false, true},
      {"device 0 lost at 40 ms, lineage", "device=0:lost_at=40ms", 0, false, false},
      {"device 0 lost at 40 ms, writeback", "device=0:lost_at=40ms", 1, false, false},
      {"device 0 lost at 40 ms, neither", "device=0:lost_at=40ms", 0, false, true},
      {"device 1 lost at 40 ms, lineage", "device=1:lost_at=40ms", 0, false, false},
      {"device 1 lost at 40 ms, writeback", "device=1:lost_at=40ms", 1, false, false},
      {"device 0 lost from the start", "device=0:lost_at=0s", 0, false, false},
      {"every 70th device try hangs, lineage", "hang:nth=70", 0, true, false},
      {"every 70th device try hangs, writeback", "hang:nth=70", 1, true, false},
  };
  char dir[] = "/tmp/tandem-bench-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(1);
  }
  printf("\nlost device: tiled Cholesky, %ux%u tiles, %s, heft; median of %d runs\n", nt, nt,
         name, runs);
  printf("runs ok: ended with tdm_wait_all and every unregistration TDM_OK (the others "
         "report the failure; their max err is what lost versions left); re-run: tries "
         "placed again per run; replayed: tasks lineage ran again per run; lineage: a version "
         "only a lost device held is made again; writeback: every version a device makes is "
         "copied home at once (and lineage covers the moment before); neither: lost\n");
  printf("%-40s %12s %8s %9s %12s %8s %9s %10s %9s\n", "case", "makespan ms", "ratio",
         "runs ok", "tasks d0/d1", "re-run", "replayed", "MiB moved", "max err");
  double base = 0;
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    double t[15], err = 0;
    int ok = 0;
    uint64_t dev[2] = {0, 0}, bytes = 0, rerun = 0, replayed = 0;
    for (int r = -(c == 0); r < runs; r++) { /* the first, once: the models */
      tdm_config cfg;
      tdm_config_init(&cfg);
      cfg.nworkers = 2;
      cfg.ignore_env = 1;
      cfg.cache_dir = dir;
      cfg.scheduler = "heft";
      cfg.sim = sim;
      cfg.sim_time_scale = SCALE;
      cfg.devices = "none";
      cfg.writeback = cases[c].writeback;
      if (cases[c].no_lineage)
        cfg.lineage = 0;
      cfg.faults = r < 0 ? NULL : cases[c].faults;
      if (cases[c].quick_watchdog) {
        cfg.watchdog_factor = 10;
        cfg.watchdog_min = 0.02;
      }
      tdm_runtime *rt = NULL;
      if (tdm_runtime_create(&cfg, &rt) != TDM_OK) {
        fprintf(stderr, "bench-hetero: no runtime\n");
        exit(1);
      }
      current = rt;
      double s = run_app(rt, nt, true);
      if (r >= 0) {
        t[r] = s;
        double e = check(nt, true);
        ok += !app_failed;
        if (!app_failed && !(e < 1e-6)) /* reported right, and wrong: never */
          fprintf(stderr, "bench-hetero: %s: a run reported success with error %g\n",
                  cases[c].name, e);
        err = e > err ? e : err;
        rerun += atomic_load(&rt->nretries);
        replayed += atomic_load(&rt->nreplayed);
        for (unsigned d = 0; d < 2; d++) {
          tdm_device_counters k = {.struct_size = sizeof k};
          tdm_runtime_device_counters(rt, d, &k);
          dev[d] += k.tasks;
          bytes += k.bytes_to_device + k.bytes_to_host;
        }
      }
      tdm_runtime_destroy(rt);
    }
    double ms = 1e3 * bench_median(t, runs);
    if (c == 0)
      base = ms;
    char tasks[32];
    snprintf(tasks, sizeof tasks, "%.0f/%.0f", (double)dev[0] / runs, (double)dev[1] / runs);
    printf("%-40s %12.1f %8.2f %6d/%-2d %12s %8.1f %9.1f %10.2f %9.1e\n", cases[c].name, ms,
           ms / base, ok, runs, tasks, (double)rerun / runs, (double)replayed / runs,
           (double)bytes / runs / (1 << 20), err);
    fflush(stdout);
  }
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "bench-hetero: could not remove %s\n", dir);
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && !strcmp(argv[1], "--quick");
  bool lost = argc > 1 && !strcmp(argv[1], "--lost"); /* the lost-device tables only */
  if (argc > 1 && !quick && !lost) {
    fprintf(stderr, "usage: bench-hetero [--quick | --lost]\n");
    return 2;
  }
  measure_kernels();
  printf("bench-hetero: one tile on one core, measured alone before the runs (the bounds "
         "count these): gemm %.2f ms (GEMM's), %.2f (Cholesky's), syrk %.2f, trsm %.2f, potrf "
         "%.2f; emulated machines run %.0fx slower than this one (time scale)\n",
         1e3 * kernel_time[K_GEMM_NN], 1e3 * kernel_time[K_GEMM_NT], 1e3 * kernel_time[K_SYRK],
         1e3 * kernel_time[K_TRSM], 1e3 * kernel_time[K_POTRF], SCALE);
  int runs = quick ? 1 : 5;
  if (!lost) {
    table("tiled GEMM", quick ? 4 : 6, false, runs, true);
    table("tiled Cholesky", quick ? 4 : 8, true, runs, true);
  }
  lost_device("2 emulated discrete GPUs, the same",
              "a:gemm=10,syrk=8,trsm=8,potrf=2,latency=10us,bandwidth=10G;"
              "b:gemm=10,syrk=8,trsm=8,potrf=2,latency=10us,bandwidth=10G",
              quick ? 4 : 8, runs);
  lost_device(machines[3].name, machines[3].sim, quick ? 4 : 8, runs);
  printf("\nmakespan: median of %d runs after one that calibrates the models; tasks and "
         "bytes: per run; bound: from the kernel times measured above, before the runs; "
         "gemm x: the CPU workers' gemm in the runs (median) over its time measured alone\n",
         runs);
  return 0;
}
