/*
 * placement: how the placement policies share work between the CPU
 * workers and a device, on a machine with or without a GPU.
 *
 * The device is emulated (tdm_config.sim): 8 times a core on "heavy"
 * tasks, half a core on "light" ones, behind a 10 GB/s link. Set
 * TANDEM_SIM to try another machine, e.g.
 *   TANDEM_SIM="a:heavy=20,light=2,memory=shared;b:heavy=4,latency=5us,bandwidth=16G"
 * Each policy runs the same 200 tasks; the program prints where they ran,
 * the bytes copied and the time taken. The first policy also calibrates
 * the models (kept in the cache directory for the next run).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <tandem.h>

enum { HEAVY, LIGHT };
static tdm_runtime *rt;
static _Atomic unsigned ran[2][8]; /* per kind of task: CPU, device 0, 1 ... */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void work(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  int kind = *(const int *)args;
  float *v = b[0].ptr;
  for (int r = 0; r < 200; r++) /* some arithmetic, the same on every worker */
    for (size_t i = 0; i < b[0].rows; i++)
      v[i] = v[i] * 0.999f + 0.001f * (float)i;
  int w = tdm_worker_id(rt), ncpu = (int)tdm_runtime_ncpu_workers(rt);
  int where = w < ncpu ? 0 : 1 + w - ncpu;
  if (where < 8)
    atomic_fetch_add(&ran[kind][where], 1);
}

static const tdm_codelet heavy = {.name = "heavy", .cpu_fn = work, .nbuffers = 1,
                                  .modes = {TDM_RW}};
static const tdm_codelet light = {.name = "light", .cpu_fn = work, .nbuffers = 1,
                                  .modes = {TDM_RW}};

int main(void) {
  static const char *const policies[] = {"heft", "ws", "eager", "random"};
  static float data[200][1024];
  for (int p = 0; p < 4; p++) {
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.sim = "gpu:heavy=8,light=0.5,latency=10us,bandwidth=10G"; /* TANDEM_SIM wins */
    cfg.scheduler = policies[p]; /* so would TANDEM_SCHED: leave it unset here */
    tdm_status st = tdm_runtime_create(&cfg, &rt);
    if (st != TDM_OK) {
      fprintf(stderr, "placement: %s\n", tdm_strerror(st));
      return 1;
    }
    for (int k = 0; k < 2; k++)
      for (int w = 0; w < 8; w++)
        atomic_store(&ran[k][w], 0);
    tdm_handle *h[200];
    for (int i = 0; i < 200; i++)
      tdm_register_vector(rt, data[i], 1024, sizeof(float), &h[i]);
    double t0 = now();
    for (int i = 0; i < 200; i++) {
      int kind = i % 2 ? LIGHT : HEAVY;
      tdm_submit(rt, &(tdm_task_desc){.codelet = kind == HEAVY ? &heavy : &light,
                                      .handles = {h[i]},
                                      .args = &kind,
                                      .args_size = sizeof kind});
    }
    tdm_wait_all(rt);
    double t = now() - t0;
    for (int i = 0; i < 200; i++)
      tdm_handle_unregister(h[i]);
    unsigned ndev = tdm_runtime_nworkers(rt) - tdm_runtime_ncpu_workers(rt);
    uint64_t bytes = 0;
    printf("%-6s %6.1f ms  heavy: %3u on CPU workers", policies[p], 1e3 * t, ran[HEAVY][0]);
    for (unsigned d = 0; d < ndev && d < 7; d++)
      printf(", %3u on device %u", ran[HEAVY][1 + d], d);
    printf("   light: %3u on CPU workers", ran[LIGHT][0]);
    for (unsigned d = 0; d < ndev && d < 7; d++) {
      tdm_device_counters c = {.struct_size = sizeof c};
      tdm_runtime_device_counters(rt, d, &c);
      bytes += c.bytes_to_device + c.bytes_to_host;
      printf(", %3u on device %u", ran[LIGHT][1 + d], d);
    }
    printf("   %llu KiB copied\n", (unsigned long long)(bytes >> 10));
    tdm_runtime_destroy(rt);
  }
  return 0;
}
