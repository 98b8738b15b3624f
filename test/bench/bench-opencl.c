/*
 * bench-opencl: a stream of independent tasks, each reading fresh input,
 * on an OpenCL device made to behave as a discrete GPU (its inputs are
 * copied to it). Measures the makespan with transfers serialised (one task
 * in flight: the next task's input is copied only when the kernel before
 * it has finished) and with prefetch (several tasks in flight: inputs are
 * copied while the kernel before runs) and with the adaptive window (the
 * default: as many in flight as hide the copies), the bytes moved, and the overlap
 * ratio (transfer time + compute time) / makespan, where the transfer
 * time is the same stream with a kernel that does nothing but read, and
 * the compute time the same stream with no copies (the device told to
 * behave as integrated). Above 1: transfers and kernels overlapped.
 * First, the time the first submission of an uncached codelet takes on
 * the submitting thread (its program builds on the runtime's).
 *
 *   bench-opencl [--quick] [--tasks N] [--mib M] [--work K]
 *
 * Uses the first OpenCL device it finds, admitting CPU devices (PoCL), so
 * that it runs on machines without a GPU. Prints medians of the runs,
 * interleaved so that the configurations see the same machine load.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tandem.h"

#include "bench.h"
#include "tandem/opencl.h"

/* y = f(x), f being `work` multiply-adds per element (0: a copy). */
static const tdm_opencl_variant work_cl = {
    .source = "__kernel void work(__global const float *x, ulong nx,\n"
              "                   __global float *y, ulong ny, uint k) {\n"
              "  size_t i = get_global_id(0);\n"
              "  float v = x[i];\n"
              "  for (uint j = 0; j < k; j++)\n"
              "    v = v * 0.999f + 0.5f;\n"
              "  y[i] = v;\n"
              "}\n",
    .kernel = "work"};
static const tdm_codelet work = {
    .name = "work", .nbuffers = 2, .modes = {TDM_R, TDM_W}, .opencl = &work_cl};

enum { SERIAL, PREFETCH, ADAPTIVE, TRANSFER_ONLY, COMPUTE_ONLY, NCONF };
static const char *const conf_name[NCONF] = {
    "serialised (1 task in flight)", "prefetch (4 tasks in flight)",
    "adaptive window (the default)", "transfers alone (kernel reads only)",
    "compute alone (no copies)"};

typedef struct bench {
  int tasks;
  size_t n; /* floats per input */
  unsigned work;
  float **in, **out;
} bench;

static tdm_runtime *make_runtime(int conf) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.opencl_cpu_devices = 1;
  cfg.device_memory = conf == COMPUTE_ONLY ? TDM_MEMORY_SHARED : TDM_MEMORY_SEPARATE;
  cfg.device_tasks = conf == SERIAL ? 1 : conf == ADAPTIVE ? 0 : 4;
  tdm_runtime *rt = NULL;
  tdm_status st = tdm_runtime_create(&cfg, &rt);
  if (st) {
    fprintf(stderr, "bench-opencl: no runtime: %s\n", tdm_strerror(st));
    exit(1);
  }
  return rt;
}

static int used_device(tdm_runtime *rt) {
  tdm_machine_info mi = {.struct_size = sizeof mi};
  tdm_runtime_machine(rt, &mi);
  for (unsigned i = 0; i < mi.opencl_devices; i++) {
    tdm_device_info d = {.struct_size = sizeof d};
    if (tdm_runtime_device(rt, i, &d) == TDM_OK && d.used)
      return (int)i;
  }
  return -1;
}

/* One run of the stream; returns the makespan, adds the bytes moved. */
static double run(tdm_runtime *rt, const bench *b, unsigned k, uint64_t *bytes) {
  int dev = used_device(rt);
  tdm_device_counters c0 = {.struct_size = sizeof c0}, c1 = {.struct_size = sizeof c1};
  tdm_runtime_device_counters(rt, (unsigned)dev, &c0);
  tdm_handle **hin = calloc((size_t)b->tasks, sizeof *hin);
  tdm_handle **hout = calloc((size_t)b->tasks, sizeof *hout);
  for (int t = 0; t < b->tasks; t++) { /* fresh: the device has none of it */
    tdm_register_vector(rt, b->in[t], b->n, sizeof(float), &hin[t]);
    tdm_register_vector(rt, b->out[t], b->n, sizeof(float), &hout[t]);
  }
  double t0 = bench_now();
  for (int t = 0; t < b->tasks; t++) {
    tdm_status st = tdm_submit(rt, &(tdm_task_desc){.codelet = &work,
                                                    .handles = {hin[t], hout[t]},
                                                    .args = &k,
                                                    .args_size = sizeof k});
    if (st) {
      fprintf(stderr, "bench-opencl: submit: %s\n", tdm_strerror(st));
      exit(1);
    }
  }
  tdm_wait_all(rt);
  double span = bench_now() - t0;
  tdm_runtime_device_counters(rt, (unsigned)dev, &c1);
  *bytes += c1.bytes_to_device - c0.bytes_to_device;
  for (int t = 0; t < b->tasks; t++) { /* outputs come home: not timed */
    tdm_handle_unregister(hin[t]);
    tdm_handle_unregister(hout[t]);
  }
  free(hin);
  free(hout);
  return span;
}

/* The first submission of a codelet whose program is in no cache (a
 * source of its own, each run): the time tdm_submit takes on the caller,
 * and until the task has ended (its program built meanwhile on the
 * runtime's build thread). The first run also pays for the compiler's
 * loading. */
static void first_submissions(tdm_runtime *rt, int runs) {
  double submit[16], ended[16];
  runs = runs < 16 ? runs : 16;
  static float y[1024];
  tdm_handle *h;
  if (tdm_register_vector(rt, y, 1024, sizeof(float), &h))
    return;
  for (int r = 0; r < runs; r++) {
    static char src[16][160];
    snprintf(src[r], sizeof src[r], "/* %ld %d */ __kernel void k(__global float *y, ulong n) "
             "{ y[get_global_id(0)] += 1.0f; }\n", (long)time(NULL), r);
    static tdm_opencl_variant v[16];
    static tdm_codelet cl[16];
    v[r] = (tdm_opencl_variant){.source = src[r], .kernel = "k"};
    cl[r] = (tdm_codelet){.name = "first", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &v[r]};
    double t0 = bench_now();
    tdm_submit(rt, &(tdm_task_desc){.codelet = &cl[r], .handles = {h}});
    submit[r] = bench_now() - t0;
    tdm_wait_all(rt);
    ended[r] = bench_now() - t0;
  }
  tdm_handle_unregister(h);
  printf("first submission of an uncached codelet: tdm_submit %.3f ms on the caller "
         "(median of %d; the first %.3f ms), its task ended after %.0f ms (the first %.0f ms)\n\n",
         1e3 * bench_median(submit, runs), runs, 1e3 * submit[0], 1e3 * bench_median(ended, runs),
         1e3 * ended[0]);
}

int main(int argc, char **argv) {
  bench b = {.tasks = 64, .n = 1u << 20, .work = 32};
  int runs = 5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      b.tasks = 16;
      b.n = 1u << 18;
      runs = 3;
    } else if (!strcmp(argv[i], "--tasks") && i + 1 < argc) {
      b.tasks = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--mib") && i + 1 < argc) {
      b.n = (size_t)(atof(argv[++i]) * (1 << 20) / sizeof(float));
    } else if (!strcmp(argv[i], "--work") && i + 1 < argc) {
      b.work = (unsigned)atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: bench-opencl [--quick] [--tasks N] [--mib M] [--work K]\n");
      return 2;
    }
  }
  if (b.tasks < 1 || b.n < 1) {
    fprintf(stderr, "bench-opencl: --tasks and --mib must be positive\n");
    return 2;
  }
  tdm_runtime *rts[NCONF];
  for (int c = 0; c < NCONF; c++)
    rts[c] = make_runtime(c);
  int dev = used_device(rts[0]);
  if (dev < 0) {
    printf("bench-opencl: no OpenCL device (install pocl-opencl-icd): nothing measured\n");
    for (int c = 0; c < NCONF; c++)
      tdm_runtime_destroy(rts[c]);
    return 0;
  }
  tdm_device_info d = {.struct_size = sizeof d};
  tdm_runtime_device(rts[0], (unsigned)dev, &d);
  b.in = calloc((size_t)b.tasks, sizeof *b.in);
  b.out = calloc((size_t)b.tasks, sizeof *b.out);
  for (int t = 0; t < b.tasks; t++) {
    b.in[t] = tdm_malloc(b.n * sizeof(float));
    b.out[t] = tdm_malloc(b.n * sizeof(float));
    if (!b.in[t] || !b.out[t]) {
      fprintf(stderr, "bench-opencl: out of memory\n");
      return 1;
    }
    for (size_t i = 0; i < b.n; i++)
      b.in[t][i] = (float)(i % 1000);
  }
  printf("OpenCL stream: %d independent tasks, each reading %.1f MiB of fresh input and "
         "writing as much,\non %s (%s, behaving as a discrete GPU), %u multiply-adds per "
         "element\n\n",
         b.tasks, (double)(b.n * sizeof(float)) / (1 << 20), d.name,
         tdm_device_class_name(d.device_class), b.work);
  first_submissions(rts[COMPUTE_ONLY], runs);
  /* warm-up: programs built (or loaded), buffers of the driver touched */
  uint64_t ignored = 0;
  for (int c = 0; c < NCONF; c++)
    run(rts[c], &b, c == TRANSFER_ONLY ? 0 : b.work, &ignored);
  double *t[NCONF];
  uint64_t bytes[NCONF] = {0};
  for (int c = 0; c < NCONF; c++)
    t[c] = calloc((size_t)runs, sizeof(double));
  double *ratio = calloc((size_t)runs, sizeof(double));
  double *overlap = calloc((size_t)runs, sizeof(double));
  double *adaptive = calloc((size_t)runs, sizeof(double));
  for (int r = 0; r < runs; r++) {
    for (int c = 0; c < NCONF; c++)
      t[c][r] = run(rts[c], &b, c == TRANSFER_ONLY ? 0 : b.work, &bytes[c]);
    ratio[r] = t[SERIAL][r] / t[PREFETCH][r];
    overlap[r] = (t[TRANSFER_ONLY][r] + t[COMPUTE_ONLY][r]) / t[PREFETCH][r];
    adaptive[r] = t[ADAPTIVE][r] / t[PREFETCH][r];
  }
  double serial_overlap[64];
  int ns = runs < 64 ? runs : 64;
  for (int r = 0; r < ns; r++)
    serial_overlap[r] = (t[TRANSFER_ONLY][r] + t[COMPUTE_ONLY][r]) / t[SERIAL][r];
  printf("%-40s %12s %18s\n", "configuration", "makespan ms", "bytes to device");
  for (int c = 0; c < NCONF; c++)
    printf("%-40s %12.2f %18llu\n", conf_name[c], 1e3 * bench_median(t[c], runs),
           (unsigned long long)(bytes[c] / (uint64_t)runs));
  printf("\nmedians of %d runs; per-run ratios, median:\n", runs);
  printf("  serialised / prefetch makespan:                  %.2f\n", bench_median(ratio, runs));
  printf("  adaptive / prefetch makespan:                    %.2f\n",
         bench_median(adaptive, runs));
  printf("  overlap (transfers + compute) / makespan, prefetch:   %.2f\n",
         bench_median(overlap, runs));
  printf("  overlap (transfers + compute) / makespan, serialised: %.2f\n",
         bench_median(serial_overlap, ns));
  for (int c = 0; c < NCONF; c++) {
    tdm_runtime_destroy(rts[c]);
    free(t[c]);
  }
  for (int i = 0; i < b.tasks; i++) {
    tdm_free(b.in[i]);
    tdm_free(b.out[i]);
  }
  free(b.in);
  free(b.out);
  free(ratio);
  free(overlap);
  free(adaptive);
  return 0;
}
