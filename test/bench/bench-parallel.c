/*
 * bench-parallel: data-parallel operations (tdm_parallel_submit) in
 * virtual time. A range of 4 Mi elements (10 ns of one core each on
 * average, 4 bytes in and 4 out each), regular or irregular (an
 * element's cost from 1 to 10 times the base, highest in the middle),
 * cut as the runtime cuts it and placed by heft, on machines from 2
 * cores + an integrated GPU to 16 cores + a discrete GPU. The adaptive
 * split on a first run (the model empty: the cut counts each device as
 * TDM_PARALLEL_UNKNOWN_UNITS workers and begins with small probes while
 * heft calibrates) and a calibrated one (the cut and the placement from
 * the model the first run left); for comparison the static split (one
 * chunk per worker, in proportion to the declared speeds), the CPU cores
 * alone and the devices alone (adaptive). Each row: chunks, makespan and
 * its ratio to the machine's bound (the work over the machine's speed,
 * every worker busy), each class's share of the work (to compare with
 * its share of the speed, in the heading), and the idle tail (from the
 * first class done to the end). Exact: the same on every run.
 *
 * --real: the same comparison in real time, on the runtime's threads:
 * an irregular operation (Mandelbrot rows) and a regular one over an
 * image, adaptive against the CPU workers alone, the devices alone
 * (TDM_PARALLEL_NO_CPU) and the static split by speed
 * (TDM_PARALLEL_STATIC), beside emulated GPUs and PoCL; medians of 5
 * runs, with the bytes each operation moved.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem.h"
#include "tandem/opencl.h"
#include "vt-parallel.h"

static builder b;

static const struct {
  const char *name, *desc;
} machines[] = {
    {"2 cores + integrated GPU (3x)", "cpu:workers=2;igpu:speedup=3,memory=shared"},
    {"2 cores + discrete GPU (10x)", "cpu:workers=2;gpu:speedup=10,latency=10us,bandwidth=10G"},
    {"2 cores + 2 discrete GPUs (10x, 5x)",
     "cpu:workers=2;gpu0:speedup=10,latency=10us,bandwidth=10G;"
     "gpu1:speedup=5,latency=10us,bandwidth=10G"},
    {"16 cores + discrete GPU (10x)",
     "cpu:workers=16;gpu:speedup=10,latency=10us,bandwidth=10G"},
};

static void row(const char *what, const tdm_vt_machine *m, const vt_op_figures *r,
                double bound) {
  printf("  %-22s %6u %9.2f %7.3f  ", what, r->chunks, 1e3 * r->makespan, r->makespan / bound);
  char shares[96] = "";
  size_t at = 0;
  for (unsigned c = 0; c < m->nclasses; c++)
    at += (size_t)snprintf(shares + at, sizeof shares - at, "%s%.1f", c ? " / " : "",
                           100 * r->share[c]);
  printf("%-22s %8.3f\n", shares, 1e3 * r->tail);
}

/* ---- real time (--real) --------------------------------------------------- */

/* Two operations over a 1024 x 768 image: Mandelbrot rows (fixed point,
 * as samples/mandelbrot.c: from nearly free to `ITER` iterations a
 * pixel) and a regular one (each pixel a 200-step recurrence of its
 * coordinates). */
#define W 1024
#define H 768
#define ITER 256

typedef struct margs {
  int64_t x0, y0, step;
  uint32_t iterations, regular;
} margs;

static unsigned char pixel(const margs *a, size_t x, size_t y) {
  if (a->regular) {
    uint32_t v = (uint32_t)(x * 2654435761u ^ y * 40503u);
    for (unsigned k = 0; k < 200; k++)
      v = v * 1664525u + 1013904223u;
    return (unsigned char)(v >> 24);
  }
  int64_t cr = a->x0 + (int64_t)x * a->step, ci = a->y0 - (int64_t)y * a->step;
  int64_t zr = 0, zi = 0, four = (int64_t)4 << 28;
  unsigned k = 0;
  while (k < a->iterations) {
    int64_t rr = (zr * zr) >> 28, ii = (zi * zi) >> 28;
    if (rr + ii > four)
      break;
    int64_t ri = (zr * zi) >> 27;
    zr = rr - ii + cr;
    zi = ri + ci;
    k++;
  }
  return (unsigned char)k;
}

static void rows_cpu(const tdm_buffer *b, const tdm_range *r, const void *p, size_t size) {
  (void)size;
  for (size_t y = r->begin[0]; y < r->end[0]; y++)
    for (size_t x = 0; x < b[0].cols; x++)
      ((unsigned char *)b[0].ptr)[(y - r->begin[0]) * b[0].ld + x] = pixel(p, x, y);
}

static const tdm_opencl_variant rows_cl = {
    .source =
        "typedef struct { long x0, y0, step; uint iterations, regular; } margs;\n"
        "__kernel void rows(__global uchar *img, ulong rows, ulong cols, ulong ld, margs a) {\n"
        "  size_t x = get_global_id(0), y = get_global_id(1);\n"
        "  uchar out;\n"
        "  if (a.regular) {\n"
        "    uint v = (uint)(x * 2654435761u ^ y * 40503u);\n"
        "    for (uint k = 0; k < 200; k++) v = v * 1664525u + 1013904223u;\n"
        "    out = (uchar)(v >> 24);\n"
        "  } else {\n"
        "    long cr = a.x0 + (long)x * a.step, ci = a.y0 - (long)y * a.step;\n"
        "    long zr = 0, zi = 0, four = (long)4 << 28;\n"
        "    uint k = 0;\n"
        "    while (k < a.iterations) {\n"
        "      long rr = (zr * zr) >> 28, ii = (zi * zi) >> 28;\n"
        "      if (rr + ii > four) break;\n"
        "      long ri = (zr * zi) >> 27;\n"
        "      zr = rr - ii + cr; zi = ri + ci; k++;\n"
        "    }\n"
        "    out = (uchar)k;\n"
        "  }\n"
        "  img[(y - get_global_offset(1)) * ld + x] = out;\n"
        "}\n",
    .kernel = "rows"};
static const tdm_codelet rows_cl_codelet = {
    .name = "bench_rows", .nbuffers = 1, .modes = {TDM_W}, .opencl = &rows_cl};

/* One operation on rt: the statistics; false on an error. */
static bool one_op(tdm_runtime *rt, unsigned char *img, bool regular, int mode,
                   tdm_parallel_stats *st) {
  int64_t one = (int64_t)1 << 28, step = 3 * one / W;
  margs a = {.x0 = -22 * one / 10, .y0 = (H / 2) * step, .step = step, .iterations = ITER,
             .regular = regular};
  tdm_handle *h;
  if (tdm_register_matrix(rt, img, W, H, W, 1, &h))
    return false;
  *st = (tdm_parallel_stats){.struct_size = sizeof *st};
  static const unsigned flags[] = {0, TDM_PARALLEL_NO_DEVICES, TDM_PARALLEL_NO_CPU,
                                   TDM_PARALLEL_STATIC};
  tdm_parallel_desc d = {.codelet = &rows_cl_codelet,
                         .cpu_fn = rows_cpu,
                         .range = {H, W},
                         .handles = {h},
                         .split_mask = 1,
                         .args = &a,
                         .args_size = sizeof a,
                         .flags = flags[mode],
                         .stats = st};
  tdm_status s = tdm_parallel_submit(rt, &d, NULL);
  tdm_status w = tdm_wait_all(rt);
  tdm_status u = tdm_handle_unregister(h);
  return !s && !w && !u;
}

static int by_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int real_time(void) {
  static const struct {
    const char *name, *sim;
  } rm[] = {{"2 cores + emulated integrated GPU (3x)", "igpu:speedup=3,memory=shared"},
            {"2 cores + emulated discrete GPU (10x)",
             "gpu:speedup=10,latency=10us,bandwidth=10G"},
            {"2 cores + 2 emulated discrete GPUs (10x, 5x)",
             "gpu0:speedup=10,latency=10us,bandwidth=10G;gpu1:speedup=5,latency=10us,"
             "bandwidth=10G"},
            {"2 cores + PoCL (as a discrete GPU)", NULL}};
  static const char *const modes[] = {"adaptive", "CPU only", "devices only",
                                      "static (speed)"};
  enum { NMODES = 4 };
  unsigned char *img = malloc(W * H);
  char dir[] = "/tmp/bench-parallel-XXXXXX";
  if (!img || !mkdtemp(dir))
    return 1;
  printf("bench-parallel --real: %dx%d image, median of 5 runs after one that calibrates, the "
         "modes interleaved; makespan from the operation's statistics (an emulated machine "
         "runs its cores slower: ratios, not times, compare across machines)\n",
         W, H);
  for (size_t k = 0; k < sizeof rm / sizeof rm[0]; k++) {
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.nworkers = 2;
    cfg.bind_workers = 0;
    cfg.cache_dir = dir;
    cfg.app = "bench-parallel";
    if (rm[k].sim) {
      cfg.sim = rm[k].sim;
    } else {
      cfg.opencl_cpu_devices = 1;
      cfg.device_memory = TDM_MEMORY_SEPARATE;
    }
    tdm_runtime *rt;
    if (tdm_runtime_create(&cfg, &rt))
      continue;
    if (tdm_runtime_nworkers(rt) == tdm_runtime_ncpu_workers(rt)) {
      printf("\n%s: no such device here, skipped\n", rm[k].name);
      tdm_runtime_destroy(rt);
      continue;
    }
    for (int regular = 0; regular < 2; regular++) {
      printf("\n%s, %s\n  %-15s %10s %12s %10s %8s %9s\n", rm[k].name,
             regular ? "regular (200 steps a pixel)" : "Mandelbrot rows (irregular)", "split",
             "ms", "/CPU only", "CPU rows", "tail ms", "MB moved");
      double ms[NMODES][5], share[NMODES][5], tail[NMODES][5], mb[NMODES][5];
      tdm_parallel_stats st;
      for (int m = 0; m < NMODES; m++) /* calibration */
        if (!one_op(rt, img, regular, m, &st))
          return 1;
      for (int r = 0; r < 5; r++)
        for (int m = 0; m < NMODES; m++) {
          if (!one_op(rt, img, regular, m, &st))
            return 1;
          ms[m][r] = 1e3 * st.makespan;
          share[m][r] = 100.0 * (double)st.class_elements[0] / (W * H);
          tail[m][r] = 1e3 * st.tail;
          mb[m][r] = 1e-6 * (double)st.bytes_moved;
        }
      double cpu = 0;
      for (int m = 0; m < NMODES; m++) {
        qsort(ms[m], 5, sizeof ms[m][0], by_double);
        qsort(share[m], 5, sizeof share[m][0], by_double);
        qsort(tail[m], 5, sizeof tail[m][0], by_double);
        qsort(mb[m], 5, sizeof mb[m][0], by_double);
        if (m == 1)
          cpu = ms[1][2];
      }
      for (int m = 0; m < NMODES; m++)
        printf("  %-15s %10.1f %12.3f %9.1f%% %8.1f %9.2f\n", modes[m], ms[m][2],
               cpu > 0 ? ms[m][2] / cpu : 0, share[m][2], tail[m][2], mb[m][2]);
    }
    tdm_runtime_destroy(rt);
  }
  free(img);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) != 0;
}

int main(int argc, char **argv) {
  size_t n = (size_t)1 << 22, grain = 1024;
  if (argc > 1 && !strcmp(argv[1], "--real"))
    return real_time();
  if (argc > 1)
    n = strtoull(argv[1], NULL, 0);
  printf("bench-parallel: a data-parallel operation in virtual time (exact), %zu elements, "
         "grain %zu, heft\n",
         n, grain);
  for (size_t k = 0; k < sizeof machines / sizeof machines[0]; k++) {
    tdm_vt_machine m;
    char err[128];
    if (tdm__vt_parse_machine(machines[k].desc, NULL, 0, &m, err, sizeof err)) {
      printf("%s: %s\n", machines[k].name, err);
      return 1;
    }
    for (int irregular = 0; irregular < 2; irregular++) {
      tdm_perfmodel *model = tdm__model_new();
      vt_op_figures r;
      if (!model || vt_op_run_once(&m, &b, n, grain, irregular, model, &r))
        return 1;
      double bound = r.bound;
      char ideal[96] = "";
      size_t at = 0;
      for (unsigned c = 0; c < m.nclasses; c++)
        at += (size_t)snprintf(ideal + at, sizeof ideal - at, "%s%.1f", c ? " / " : "",
                               100 * r.ideal[c]);
      printf("\n%s, %s: bound %.2f ms, shares of the speed %s %%\n", machines[k].name,
             irregular ? "irregular (1-10x)" : "regular", 1e3 * bound, ideal);
      printf("  %-22s %6s %9s %7s  %-22s %8s\n", "split", "chunks", "ms", "/bound",
             "shares of the work %", "tail ms");
      row("adaptive, first run", &m, &r, bound);
      if (vt_op_run_once(&m, &b, n, grain, irregular, model, &r))
        return 1;
      row("adaptive, calibrated", &m, &r, bound);
      tdm__model_free(model);
      if (vt_op_run(&m, &b, n, grain, irregular, true, NULL, &r))
        return 1;
      row("static (by speed)", &m, &r, bound);
      tdm_vt_machine one = m;
      one.nclasses = 1; /* the CPU cores alone */
      if (vt_op_run_once(&one, &b, n, grain, irregular, NULL, &r))
        return 1;
      row("CPU only", &one, &r, bound);
      one = m;
      one.classes[0].workers = 0; /* the devices alone, calibrated */
      model = tdm__model_new();
      if (!model || vt_op_run_once(&one, &b, n, grain, irregular, model, &r) ||
          vt_op_run_once(&one, &b, n, grain, irregular, model, &r))
        return 1;
      tdm__model_free(model);
      row("devices only", &one, &r, bound);
    }
  }
  return 0;
}
