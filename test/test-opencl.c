/*
 * OpenCL discovery and device selection for real, through the ICD loader:
 *   test-opencl pocl         an OpenCL CPU device (PoCL) is found, classified
 *                            as a CPU device, not used by default, used when
 *                            admitted (config, environment, by class or by
 *                            number), with one device worker and no CPU core
 *                            taken from the CPU workers; the memory override
 *                            both ways. Exits 77 (skip) where no OpenCL CPU
 *                            device is installed.
 *   test-opencl no-platform  run with OCL_ICD_VENDORS naming an empty or a
 *                            broken ICD directory: the runtime starts on
 *                            the CPU cores only, says why, and runs tasks
 */
#include "common.h"

static tdm_config base_config(test_log *log) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  test_log_attach(&cfg, log);
  return cfg;
}

static tdm_runtime *create(const tdm_config *cfg) {
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(cfg, &rt), TDM_OK);
  return rt;
}

static void add_one(const tdm_buffer *bufs, const void *args, size_t size) {
  (void)args;
  (void)size;
  ((int *)bufs[0].ptr)[0] += 1;
}

/* The runtime still runs tasks on its CPU workers. */
static void runs_tasks(tdm_runtime *rt) {
  int x = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &h), TDM_OK);
  tdm_codelet cl = {.name = "add_one", .cpu_fn = add_one, .nbuffers = 1, .modes = {TDM_RW}};
  for (int i = 0; i < 10; i++) {
    tdm_task_desc d = {.codelet = &cl, .handles = {h}};
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(x, 10);
}

/* The number of the first OpenCL CPU device, or -1. */
static int find_cpu_device(tdm_runtime *rt, tdm_device_info *out) {
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  for (unsigned i = 0; i < mi.opencl_devices; i++) {
    out->struct_size = sizeof *out;
    assert_int_equal(tdm_runtime_device(rt, i, out), TDM_OK);
    if (out->device_class == TDM_DEVICE_CPU && out->duplicate_of < 0)
      return (int)i;
  }
  return -1;
}

static void test_found_not_used_by_default(void **state) {
  (void)state;
  test_log log;
  tdm_config cfg = base_config(&log);
  tdm_runtime *rt = create(&cfg);
  tdm_device_info d;
  int i = find_cpu_device(rt, &d);
  assert_true(i >= 0);
  printf("device %d: %s (%s) on platform %u: %s, %s; %u CUs, %llu MiB; %s\n", i, d.name,
         d.vendor, d.platform, tdm_device_class_name(d.device_class), d.class_reason,
         d.compute_units, (unsigned long long)(d.global_mem_bytes >> 20), d.usage);
  assert_true(d.name[0] && d.compute_units > 0 && d.global_mem_bytes > 0);
  assert_non_null(strstr(d.opencl_version, "OpenCL"));
  assert_non_null(strstr(d.class_reason, "CPU"));
  assert_true(d.shared_memory);
  assert_false(d.used);
  assert_int_equal(d.worker, -1);
  assert_non_null(strstr(d.usage, "TANDEM_OPENCL_CPU=1"));
  assert_int_equal(tdm_runtime_nworkers(rt), 2);
  assert_int_equal(tdm_runtime_ncpu_workers(rt), 2);
  tdm_platform_info p = {.struct_size = sizeof p};
  assert_int_equal(tdm_runtime_platform(rt, d.platform, &p), TDM_OK);
  assert_true(p.name[0] && p.devices >= 1);
  runs_tasks(rt);
  tdm_runtime_destroy(rt);
}

/* Admitted: used, with a device worker after the CPU workers. */
static void expect_used(tdm_runtime *rt, const char *usage_part) {
  tdm_device_info d;
  int i = find_cpu_device(rt, &d);
  assert_true(i >= 0);
  assert_true(d.used);
  assert_non_null(strstr(d.usage, usage_part));
  /* no core is reserved for the device: as many CPU workers as asked */
  assert_int_equal(tdm_runtime_ncpu_workers(rt), 2);
  assert_true(tdm_runtime_nworkers(rt) >= 3);
  assert_int_equal(d.worker, 2); /* the first device worker */
  tdm_worker_info w = {.struct_size = sizeof w};
  assert_int_equal(tdm_runtime_worker(rt, (unsigned)d.worker, &w), TDM_OK);
  assert_int_equal(w.type, TDM_WORKER_DEVICE);
  assert_int_equal(w.device, i);
  assert_int_equal(w.core, -1);
  assert_int_equal(tdm_runtime_worker(rt, 0, &w), TDM_OK);
  assert_int_equal(w.type, TDM_WORKER_CPU);
  assert_int_equal(w.device, -1);
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  assert_int_equal(mi.cpu_workers, 2);
  assert_int_equal(mi.device_workers, tdm_runtime_nworkers(rt) - 2);
  runs_tasks(rt);
}

static void test_admitted_by_config(void **state) {
  (void)state;
  test_log log;
  tdm_config cfg = base_config(&log);
  cfg.opencl_cpu_devices = 1;
  tdm_runtime *rt = create(&cfg);
  expect_used(rt, "opencl_cpu_devices");
  tdm_runtime_destroy(rt);
  cfg.opencl_cpu_devices = 0;
  cfg.devices = "cpu";
  rt = create(&cfg);
  expect_used(rt, "devices=\"cpu\"");
  tdm_device_info d;
  char number[16];
  snprintf(number, sizeof number, "%d", find_cpu_device(rt, &d));
  tdm_runtime_destroy(rt);
  cfg.devices = number;
  rt = create(&cfg);
  expect_used(rt, "selected by devices=");
  tdm_runtime_destroy(rt);
}

static void test_admitted_by_environment(void **state) {
  (void)state;
  test_log log;
  tdm_config cfg = base_config(&log);
  cfg.ignore_env = 0;
  setenv("TANDEM_OPENCL_CPU", "1", 1);
  tdm_runtime *rt = create(&cfg);
  unsetenv("TANDEM_OPENCL_CPU");
  expect_used(rt, "opencl_cpu_devices");
  tdm_runtime_destroy(rt);
  setenv("TANDEM_DEVICES", "cpu", 1);
  rt = create(&cfg);
  unsetenv("TANDEM_DEVICES");
  expect_used(rt, "devices=\"cpu\"");
  tdm_runtime_destroy(rt);
  setenv("TANDEM_DEVICES", "none", 1);
  setenv("TANDEM_OPENCL_CPU", "1", 1);
  rt = create(&cfg);
  unsetenv("TANDEM_DEVICES");
  unsetenv("TANDEM_OPENCL_CPU");
  assert_int_equal(tdm_runtime_nworkers(rt), 2); /* none wins */
  tdm_runtime_destroy(rt);
}

/* The device behaves as integrated or discrete on request. */
static void test_memory_override(void **state) {
  (void)state;
  test_log log;
  tdm_config cfg = base_config(&log);
  cfg.opencl_cpu_devices = 1;
  const tdm_device_memory modes[] = {TDM_MEMORY_SEPARATE, TDM_MEMORY_SHARED};
  for (int m = 0; m < 2; m++) {
    cfg.device_memory = modes[m];
    tdm_runtime *rt = create(&cfg);
    tdm_device_info d;
    assert_true(find_cpu_device(rt, &d) >= 0);
    assert_true(d.used);
    assert_int_equal(d.shared_memory, modes[m] == TDM_MEMORY_SHARED);
    assert_non_null(strstr(d.memory_reason, "forced by device_memory="));
    assert_int_equal(d.device_class, TDM_DEVICE_CPU); /* the class stays what it is */
    tdm_runtime_destroy(rt);
  }
}

static void test_no_platform(void **state) {
  (void)state;
  test_log log;
  tdm_config cfg = base_config(&log);
  tdm_runtime *rt = create(&cfg);
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  printf("OpenCL: %s\n", mi.opencl_summary);
  assert_int_equal(mi.opencl_status, TDM_ERR_NO_OPENCL);
  assert_int_equal(mi.opencl_devices, 0);
  assert_int_equal(tdm_runtime_nworkers(rt), 2);
  assert_non_null(strstr(mi.opencl_summary, "CPU cores only"));
  assert_int_equal(test_log_errors(&log), 0);
  runs_tasks(rt);
  tdm_runtime_destroy(rt);
}

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  if (!strcmp(argv[1], "pocl")) {
    test_log log;
    tdm_config cfg = base_config(&log);
    tdm_runtime *rt = NULL;
    if (tdm_runtime_create(&cfg, &rt))
      return 1;
    tdm_device_info d;
    int found = find_cpu_device(rt, &d);
    tdm_runtime_destroy(rt);
    if (found < 0) {
      printf("no OpenCL CPU device here (install pocl-opencl-icd): skipped\n");
      return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_found_not_used_by_default),
        cmocka_unit_test(test_admitted_by_config),
        cmocka_unit_test(test_admitted_by_environment),
        cmocka_unit_test(test_memory_override),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
  }
  if (!strcmp(argv[1], "no-platform")) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_platform)};
    return cmocka_run_group_tests(tests, NULL, NULL);
  }
  return 2;
}
