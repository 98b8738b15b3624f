/*
 * demo: a small image-processing pipeline on Tandem, on the CPU cores and
 * an OpenCL device.
 *
 * A 2048 x 2048 image is cut into tiles. Each tile is blurred into a
 * second image (reading its own tile and the same tile of the source; a
 * CPU task), then brightened in place (a task with a CPU and an OpenCL
 * variant: it runs where the placement policy predicts it finishes
 * first, TANDEM_SCHED to choose another policy), and a last stage sums
 * every tile into a bucket per tile row (CPU). The dependencies come from
 * the access modes alone; the data follows the tasks between host and
 * device. The demo checks the result against a sequential run and prints
 * where each kind of task ran and how many bytes moved.
 *
 * Devices: the runtime's default choice (every GPU). On a machine without
 * one, the demo admits an OpenCL CPU device (such as PoCL) if there is
 * one, to show the OpenCL path; TANDEM_DEVICE_MEMORY=discrete makes that
 * device copy its data as a discrete GPU would. TANDEM_TRACE=demo.json
 * records a trace (tools/tandem-trace draws it), TANDEM_STATS=1 prints
 * statistics.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tandem.h>
#include <tandem/opencl.h>

#define N 2048
#define TILE 256
#define NT (N / TILE)

static _Atomic unsigned ran_on[256];

static void count_worker(const void *args) {
  const tdm_runtime *rt = *(tdm_runtime *const *)args;
  int w = tdm_worker_id(rt);
  if (w >= 0 && w < 256)
    ran_on[w]++;
}

/* buffers: source tile (R), destination tile (W) */
static void blur(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  const float *s = b[0].ptr;
  float *d = b[1].ptr;
  for (size_t r = 0; r < b[0].rows; r++)
    for (size_t c = 0; c < b[0].cols; c++) {
      float acc = 0;
      int n = 0;
      for (int dr = -1; dr <= 1; dr++)
        for (int dc = -1; dc <= 1; dc++) {
          long rr = (long)r + dr, cc = (long)c + dc;
          if (rr < 0 || cc < 0 || rr >= (long)b[0].rows || cc >= (long)b[0].cols)
            continue;
          acc += s[rr * (long)b[0].ld + cc];
          n++;
        }
      d[r * b[1].ld + c] = acc / (float)n;
    }
  count_worker(args);
}

static void brighten(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  float *d = b[0].ptr;
  for (size_t r = 0; r < b[0].rows; r++)
    for (size_t c = 0; c < b[0].cols; c++)
      d[r * b[0].ld + c] = d[r * b[0].ld + c] * 1.5f + 0.25f;
  count_worker(args);
}

/* The same on an OpenCL device: one work-item per pixel of the tile. The
 * task's argument (the runtime pointer, for the CPU variant's statistics)
 * comes last; the kernel ignores it. No contraction into fused
 * multiply-adds, so that both variants compute the same bits. */
static const tdm_opencl_variant brighten_cl = {
    .source = "#pragma OPENCL FP_CONTRACT OFF\n"
              "__kernel void brighten(__global float *d, ulong rows, ulong cols, ulong ld,\n"
              "                       ulong runtime) {\n"
              "  size_t c = get_global_id(0), r = get_global_id(1);\n"
              "  d[r * ld + c] = d[r * ld + c] * 1.5f + 0.25f;\n"
              "}\n",
    .kernel = "brighten"};

/* buffers: tile (R), row sums (RW) */
static void sum_tile(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  const float *d = b[0].ptr;
  double *acc = b[1].ptr;
  for (size_t r = 0; r < b[0].rows; r++)
    for (size_t c = 0; c < b[0].cols; c++)
      *acc += d[r * b[0].ld + c];
  count_worker(args);
}

static void reference(const float *src, float *dst, double *sums) {
  for (int ti = 0; ti < NT; ti++)
    for (int tj = 0; tj < NT; tj++) {
      tdm_buffer s = {.ptr = (void *)(src + ti * TILE * N + tj * TILE),
                      .elem_size = sizeof(float), .rows = TILE, .cols = TILE, .ld = N};
      tdm_buffer d = {.ptr = dst + ti * TILE * N + tj * TILE,
                      .elem_size = sizeof(float), .rows = TILE, .cols = TILE, .ld = N};
      tdm_buffer bd[2] = {s, d};
      tdm_runtime *none = NULL;
      blur(bd, &none, 0);
      brighten(&bd[1], &none, 0);
      tdm_buffer bs[2] = {d, {.ptr = &sums[ti], .elem_size = sizeof(double), .rows = 1,
                              .cols = 1, .ld = 1}};
      sum_tile(bs, &none, 0);
    }
}

/* The runtime's messages (warnings by default; TANDEM_LOG_LEVEL=info and
 * TANDEM_STATS=1 say more) go to standard error. */
static void print_log(void *data, tdm_log_level level, const char *message) {
  (void)data;
  static const char *const names[] = {"error", "warning", "info", "debug"};
  fprintf(stderr, "tandem %s: %s\n", names[level], message);
}

int main(void) {
  float *src = malloc(sizeof(float) * N * N), *dst = malloc(sizeof(float) * N * N);
  float *ref = malloc(sizeof(float) * N * N);
  double sums[NT] = {0}, ref_sums[NT] = {0};
  if (!src || !dst || !ref)
    return 1;
  for (size_t i = 0; i < (size_t)N * N; i++)
    src[i] = (float)((i * 7919) % 256) / 255.0f;

  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.log_fn = print_log;
  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(&cfg, &rt);
  if (st) {
    fprintf(stderr, "tdm_runtime_create: %s\n", tdm_strerror(st));
    return 1;
  }
  tdm_machine_info mi = {.struct_size = sizeof mi};
  tdm_runtime_machine(rt, &mi);
  if (mi.device_workers == 0) {
    /* no GPU: show the OpenCL path on an OpenCL CPU device if there is one */
    for (unsigned i = 0; i < mi.opencl_devices; i++) {
      tdm_device_info d = {.struct_size = sizeof d};
      if (tdm_runtime_device(rt, i, &d) == TDM_OK && d.device_class == TDM_DEVICE_CPU) {
        char name[256]; /* d's strings go with the runtime */
        snprintf(name, sizeof name, "%s", d.name);
        cfg.opencl_cpu_devices = 1;
        tdm_runtime_destroy(rt);
        if ((st = tdm_runtime_create(&cfg, &rt))) {
          fprintf(stderr, "tdm_runtime_create: %s\n", tdm_strerror(st));
          return 1;
        }
        printf("No GPU here: the OpenCL CPU device %s stands in for one.\n", name);
        break;
      }
    }
    tdm_runtime_machine(rt, &mi);
  }
  tdm_handle *hs, *hd, *hsum[NT];
  tdm_register_matrix(rt, src, N, N, N, sizeof(float), &hs);
  tdm_register_matrix(rt, dst, N, N, N, sizeof(float), &hd);
  tdm_matrix_partition(hs, TILE, TILE, 0);
  tdm_matrix_partition(hd, TILE, TILE, 0);
  for (int i = 0; i < NT; i++)
    tdm_register_vector(rt, &sums[i], 1, sizeof(double), &hsum[i]);

  static const tdm_codelet cl_blur = {.name = "blur", .cpu_fn = blur,
                                      .nbuffers = 2, .modes = {TDM_R, TDM_W}};
  static const tdm_codelet cl_bright = {.name = "brighten", .cpu_fn = brighten,
                                        .nbuffers = 1, .modes = {TDM_RW},
                                        .opencl = &brighten_cl};
  static const tdm_codelet cl_sum = {.name = "sum", .cpu_fn = sum_tile,
                                     .nbuffers = 2, .modes = {TDM_R, TDM_RW}};
  unsigned ntasks = 0;
  for (int i = 0; i < NT; i++)
    for (int j = 0; j < NT; j++) {
      tdm_handle *s = tdm_matrix_tile(hs, i, j), *d = tdm_matrix_tile(hd, i, j);
      tdm_task_desc blur_t = {.codelet = &cl_blur, .handles = {s, d}, .args = &rt, .args_size = sizeof rt};
      tdm_task_desc bright_t = {.codelet = &cl_bright, .handles = {d}, .args = &rt, .args_size = sizeof rt};
      tdm_task_desc sum_t = {.codelet = &cl_sum, .handles = {d, hsum[i]}, .args = &rt, .args_size = sizeof rt};
      if ((st = tdm_submit(rt, &blur_t)) || (st = tdm_submit(rt, &bright_t)) ||
          (st = tdm_submit(rt, &sum_t))) {
        fprintf(stderr, "tdm_submit: %s\n", tdm_strerror(st));
        return 1;
      }
      ntasks += 3;
    }
  tdm_wait_all(rt);
  tdm_matrix_unpartition(hs, 0);
  tdm_matrix_unpartition(hd, 0);
  tdm_handle_unregister(hs);
  tdm_handle_unregister(hd);
  for (int i = 0; i < NT; i++)
    tdm_handle_unregister(hsum[i]);

  unsigned ncpu = tdm_runtime_ncpu_workers(rt);
  /* what ran on the devices, and the bytes that moved */
  uint64_t on_devices = 0, to_dev = 0, to_host = 0;
  char devices[512] = "";
  for (unsigned i = 0; i < mi.opencl_devices; i++) {
    tdm_device_info d = {.struct_size = sizeof d};
    tdm_device_counters c = {.struct_size = sizeof c};
    if (tdm_runtime_device(rt, i, &d) || !d.used || tdm_runtime_device_counters(rt, i, &c))
      continue;
    on_devices += c.tasks;
    to_dev += c.bytes_to_device;
    to_host += c.bytes_to_host;
    size_t at = strlen(devices);
    snprintf(devices + at, sizeof devices - at, "%s%llu on device %u (%s, %s)",
             at ? ", " : "", (unsigned long long)c.tasks, i, d.name,
             d.shared_memory ? "sharing host memory" : "memory of its own");
  }
  tdm_runtime_destroy(rt);

  reference(src, ref, ref_sums);
  int ok = memcmp(ref, dst, sizeof(float) * N * N) == 0;
  for (int i = 0; i < NT; i++)
    ok = ok && ref_sums[i] == sums[i];
  unsigned bright_cpu = NT * NT - (unsigned)on_devices;
  printf("Tandem demo: %u tasks (blur, brighten, sum over %dx%d tiles) on %u CPU workers and "
         "%u device%s\n",
         ntasks, NT, NT, ncpu, mi.device_workers, mi.device_workers == 1 ? "" : "s");
  printf("  blur      %3d tasks on CPU workers (CPU variant only)\n", NT * NT);
  printf("  brighten  %3u on CPU workers%s%s (CPU and OpenCL variants)\n", bright_cpu,
         devices[0] ? ", " : "", devices);
  printf("  sum       %3d on CPU workers (CPU variant only)\n", NT * NT);
  printf("  bytes moved: %llu to devices, %llu back to the host\n",
         (unsigned long long)to_dev, (unsigned long long)to_host);
  for (unsigned w = 0; w < ncpu && w < 256; w++)
    printf("  CPU worker %u ran %u tasks\n", w, (unsigned)ran_on[w]);
  printf("result %s the sequential reference\n", ok ? "matches" : "DIFFERS FROM");
  free(src);
  free(dst);
  free(ref);
  return ok ? 0 : 1;
}
