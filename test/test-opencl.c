/*
 * OpenCL discovery for real, through the ICD loader:
 *   test-opencl pocl         finds an OpenCL CPU device (PoCL) and classifies
 *                            it as such; exits 77 (skip) where no OpenCL
 *                            platform is installed
 *   test-opencl no-platform  run with OCL_ICD_VENDORS naming an empty or a
 *                            broken ICD directory: discovery reports
 *                            TDM_ERR_NO_OPENCL with a log message, no crash
 */
#include <stdio.h>
#include <string.h>

#include "devices.h"
#include "internal.h"

static unsigned logged;

static void count_log(void *data, tdm_log_level level, const char *msg) {
  (void)data;
  (void)level;
  logged++;
  printf("log: %s\n", msg);
}

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.nworkers = 1;
  cfg.log_fn = count_log;
  cfg.log_level = TDM_LOG_DEBUG;
  tdm_runtime *rt;
  if (tdm_runtime_create(&cfg, &rt))
    return 1;
  tdm_device_record *recs;
  unsigned n;
  logged = 0;
  tdm_status st = tdm__discover_opencl(rt, NULL, &recs, &n);
  int rc = 1;
  if (!strcmp(argv[1], "pocl")) {
    if (st == TDM_ERR_NO_OPENCL) {
      printf("no OpenCL platform here: skipped\n");
      rc = 77;
    } else if (st == TDM_OK) {
      for (unsigned i = 0; i < n; i++) {
        printf("device %u: %s / %s: %s (%s), %u CUs, %llu MiB, context %s\n", i,
               recs[i].platform_name, recs[i].name, tdm__device_class_name(recs[i].cls),
               recs[i].reason, recs[i].compute_units,
               (unsigned long long)(recs[i].global_mem >> 20), recs[i].context_ok ? "ok" : "failed");
        if (recs[i].cls == TDM_CLASS_CPU_DEVICE && recs[i].context_ok &&
            recs[i].compute_units > 0 && recs[i].name[0])
          rc = 0;
      }
      if (rc)
        printf("FAIL: no usable OpenCL CPU device among %u\n", n);
    }
  } else if (!strcmp(argv[1], "no-platform")) {
    rc = st == TDM_ERR_NO_OPENCL && n == 0 && !recs && logged > 0 ? 0 : 1;
    if (rc)
      printf("FAIL: status %s, %u devices, %u log messages\n", tdm_status_name(st), n, logged);
  }
  free(recs);
  tdm_runtime_destroy(rt);
  return rc;
}
