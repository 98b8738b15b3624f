/* OpenCL device classification, deduplication and selection on fabricated
 * device records; the runtime when the loader is not found or is not an
 * OpenCL loader, or OpenCL is not wanted; bad device configuration; the
 * machine queries' argument checks. */
#include "common.h"

#include "platform/devices.h"
#include "internal.h"

static tdm_device_record dev(uint64_t type, bool unified, uint64_t svm) {
  tdm_device_record d;
  memset(&d, 0, sizeof d);
  d.type = type;
  d.host_unified = unified;
  d.svm_caps = svm;
  return d;
}

static void test_classification(void **state) {
  (void)state;
  tdm_device_record igpu = dev(TDM_CL_TYPE_GPU, true, 0);
  tdm_device_record igpu_svm = dev(TDM_CL_TYPE_GPU, false, 1u << 2);
  tdm_device_record dgpu = dev(TDM_CL_TYPE_GPU, false, 1u << 0); /* coarse SVM only */
  tdm_device_record cpu = dev(TDM_CL_TYPE_CPU, true, 0);
  tdm_device_record acc = dev(TDM_CL_TYPE_ACCELERATOR, false, 0);
  tdm_device_record custom = dev(TDM_CL_TYPE_CUSTOM, false, 0);
  tdm_device_record *all[] = {&igpu, &igpu_svm, &dgpu, &cpu, &acc, &custom};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    tdm__classify_device(all[i]);
  assert_int_equal(igpu.cls, TDM_DEVICE_INTEGRATED_GPU);
  assert_int_equal(igpu_svm.cls, TDM_DEVICE_INTEGRATED_GPU);
  assert_int_equal(dgpu.cls, TDM_DEVICE_DISCRETE_GPU);
  assert_int_equal(cpu.cls, TDM_DEVICE_CPU);
  assert_int_equal(acc.cls, TDM_DEVICE_ACCELERATOR);
  assert_int_equal(custom.cls, TDM_DEVICE_ACCELERATOR);
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    assert_true(all[i]->reason[0] != 0); /* every class says why */
  assert_string_equal(tdm_device_class_name(TDM_DEVICE_DISCRETE_GPU), "discrete GPU");
  assert_string_equal(tdm_device_class_name((tdm_device_class)99), "unknown");
}

static void test_dedupe(void **state) {
  (void)state;
  tdm_device_record d[6];
  d[0] = dev(TDM_CL_TYPE_GPU, false, 0); /* dGPU on platform 0 */
  d[0].has_pci = true;
  d[0].pci_bus = 3;
  d[1] = dev(TDM_CL_TYPE_GPU, true, 0); /* iGPU, no ids */
  d[2] = d[0];                          /* the same dGPU through platform 1 */
  d[2].platform = 1;
  d[3] = dev(TDM_CL_TYPE_GPU, false, 0); /* another dGPU: other bus */
  d[3].has_pci = true;
  d[3].pci_bus = 4;
  d[4] = dev(TDM_CL_TYPE_GPU, false, 0); /* known by UUID */
  d[4].has_uuid = true;
  memset(d[4].uuid, 0xab, 16);
  d[5] = d[4]; /* and seen again */
  d[5].platform = 2;
  tdm__dedupe_devices(d, 6);
  assert_int_equal(d[0].duplicate_of, -1);
  assert_int_equal(d[1].duplicate_of, -1);
  assert_int_equal(d[2].duplicate_of, 0);
  assert_int_equal(d[3].duplicate_of, -1);
  assert_int_equal(d[4].duplicate_of, -1);
  assert_int_equal(d[5].duplicate_of, 4);
  /* devices reporting no identity, or a zero UUID, are never merged */
  tdm_device_record z[2] = {dev(TDM_CL_TYPE_GPU, false, 0), dev(TDM_CL_TYPE_GPU, false, 0)};
  z[0].has_uuid = z[1].has_uuid = true;
  tdm__dedupe_devices(z, 2);
  assert_int_equal(z[1].duplicate_of, -1);
}

/* ---- selection ---------------------------------------------------------- */

static void test_parse_devices(void **state) {
  (void)state;
  tdm_device_selection sel;
  char bad[32];
  assert_int_equal(tdm__parse_devices(NULL, &sel, bad, sizeof bad), TDM_OK);
  assert_string_equal(sel.text, "all");
  assert_false(sel.none);
  assert_true(sel.classes & 1u << TDM_DEVICE_DISCRETE_GPU);
  assert_false(sel.classes & 1u << TDM_DEVICE_CPU); /* never by "all" */
  assert_int_equal(tdm__parse_devices(" Integrated , 3,250", &sel, bad, sizeof bad), TDM_OK);
  assert_int_equal(sel.classes, 1u << TDM_DEVICE_INTEGRATED_GPU);
  assert_true(sel.indices[0] & 1u << 3);
  assert_true(sel.indices[250 / 64] & 1ull << (250 % 64));
  assert_int_equal(tdm__parse_devices("none", &sel, bad, sizeof bad), TDM_OK);
  assert_true(sel.none);
  assert_int_equal(tdm__parse_devices("gpu,cpu,accelerator,discrete", &sel, bad, sizeof bad),
                   TDM_OK);
  static const struct {
    const char *text, *bad;
  } wrong[] = {
      {"gpus", "gpus"}, {"gpu,,cpu", ""}, {"none,gpu", "none,gpu"}, {"256", "256"},
      {"-1", "-1"},     {"1x", "1x"},     {",", ""},                 {"99999999999", "99999999999"},
  };
  for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
    assert_int_equal(tdm__parse_devices(wrong[i].text, &sel, bad, sizeof bad),
                     TDM_ERR_INVALID_ARG);
    assert_string_equal(bad, wrong[i].bad);
  }
}

/* A laptop with an iGPU, a dGPU seen through two platforms, an OpenCL CPU
 * device and an accelerator. */
enum { IGPU, DGPU, DGPU_AGAIN, CPUDEV, ACCEL, NMACHINE };

static void machine(tdm_device_record *d) {
  d[IGPU] = dev(TDM_CL_TYPE_GPU, true, 0);
  d[DGPU] = dev(TDM_CL_TYPE_GPU, false, 0);
  d[DGPU].has_pci = true;
  d[DGPU].pci_bus = 1;
  d[DGPU_AGAIN] = d[DGPU];
  d[DGPU_AGAIN].platform = 1;
  d[CPUDEV] = dev(TDM_CL_TYPE_CPU, true, 0);
  d[ACCEL] = dev(TDM_CL_TYPE_ACCELERATOR, false, 0);
  for (int i = 0; i < NMACHINE; i++)
    tdm__classify_device(&d[i]);
  tdm__dedupe_devices(d, NMACHINE);
}

/* Selects with `text` (and admit_cpu); returns a bit per used device. */
static unsigned select_with(const char *text, bool admit_cpu, tdm_device_memory mem,
                            tdm_device_record *d) {
  tdm_device_selection sel;
  char bad[32];
  machine(d);
  assert_int_equal(tdm__parse_devices(text, &sel, bad, sizeof bad), TDM_OK);
  sel.admit_cpu = admit_cpu;
  sel.memory = mem;
  tdm__select_devices(d, NMACHINE, &sel);
  unsigned used = 0;
  for (int i = 0; i < NMACHINE; i++) {
    assert_true(d[i].usage[0] != 0); /* always says why */
    assert_int_equal(d[i].worker, -1); /* workers are given by the runtime */
    if (d[i].used) {
      used |= 1u << i;
      assert_non_null(strstr(d[i].usage, "used: "));
    } else {
      assert_non_null(strstr(d[i].usage, "not used: "));
    }
  }
  return used;
}

static void test_select_devices(void **state) {
  (void)state;
  tdm_device_record d[NMACHINE];
  const tdm_device_memory rep = TDM_MEMORY_AS_REPORTED;
  /* by default: every GPU and accelerator, once; not the CPU device */
  assert_int_equal(select_with("all", false, rep, d), 1u << IGPU | 1u << DGPU | 1u << ACCEL);
  assert_non_null(strstr(d[DGPU_AGAIN].usage, "same device as device 1"));
  assert_non_null(strstr(d[CPUDEV].usage, "TANDEM_OPENCL_CPU=1"));
  assert_int_equal(select_with("gpu", false, rep, d), 1u << IGPU | 1u << DGPU);
  assert_int_equal(select_with("integrated", false, rep, d), 1u << IGPU);
  assert_non_null(strstr(d[DGPU].usage, "not selected by devices=\"integrated\""));
  assert_int_equal(select_with("discrete", false, rep, d), 1u << DGPU);
  assert_int_equal(select_with("accelerator", false, rep, d), 1u << ACCEL);
  /* the CPU device: by class, by number, or admitted */
  assert_int_equal(select_with("cpu", false, rep, d), 1u << CPUDEV);
  assert_int_equal(select_with("3", false, rep, d), 1u << CPUDEV);
  assert_int_equal(select_with("all", true, rep, d),
                   1u << IGPU | 1u << DGPU | 1u << ACCEL | 1u << CPUDEV);
  assert_non_null(strstr(d[CPUDEV].usage, "opencl_cpu_devices"));
  assert_int_equal(select_with("integrated", true, rep, d), 1u << IGPU | 1u << CPUDEV);
  /* numbers; a duplicate stays unused even when named */
  assert_int_equal(select_with("0,4", false, rep, d), 1u << IGPU | 1u << ACCEL);
  assert_int_equal(select_with("2", false, rep, d), 0);
  assert_int_equal(select_with("17", false, rep, d), 0); /* no such device: nothing */
  assert_int_equal(select_with("none", true, rep, d), 0);
}

static void test_memory_behaviour(void **state) {
  (void)state;
  tdm_device_record d[NMACHINE];
  select_with("all", true, TDM_MEMORY_AS_REPORTED, d);
  assert_true(d[IGPU].shared_memory);
  assert_false(d[DGPU].shared_memory);
  assert_true(d[CPUDEV].shared_memory);
  assert_false(d[ACCEL].shared_memory);
  assert_null(strstr(d[IGPU].memory_reason, "forced"));
  select_with("all", true, TDM_MEMORY_SEPARATE, d);
  for (int i = 0; i < NMACHINE; i++) {
    assert_false(d[i].shared_memory);
    assert_non_null(strstr(d[i].memory_reason, "forced by device_memory=discrete"));
  }
  select_with("all", true, TDM_MEMORY_SHARED, d);
  for (int i = 0; i < NMACHINE; i++) {
    assert_true(d[i].shared_memory);
    assert_non_null(strstr(d[i].memory_reason, "forced by device_memory=integrated"));
  }
}

/* ---- the runtime when OpenCL is missing or broken ----------------------- */

static tdm_runtime *runtime_with(const char *devices, const char *library, test_log *log) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.nworkers = 1;
  cfg.devices = devices;
  cfg.opencl_library = library;
  test_log_attach(&cfg, log);
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  return rt;
}

static void expect_cpu_only(tdm_runtime *rt, const char *summary_part) {
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  assert_int_equal(mi.opencl_status, TDM_ERR_NO_OPENCL);
  assert_int_equal(mi.opencl_platforms, 0);
  assert_int_equal(mi.opencl_devices, 0);
  assert_int_equal(mi.device_workers, 0);
  assert_int_equal(tdm_runtime_nworkers(rt), 1);
  assert_non_null(strstr(mi.opencl_summary, summary_part));
  tdm_device_info di = {.struct_size = sizeof di};
  assert_int_equal(tdm_runtime_device(rt, 0, &di), TDM_ERR_INVALID_ARG);
}

/* What a library built without the OpenCL headers (-Dopencl=disabled;
 * TDM_FAKE_OPENCL is defined only with them) says instead of looking for
 * a loader. */
#define WITHOUT_OPENCL "built without the OpenCL headers"

static void test_loader_not_found(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = runtime_with(NULL, "/nonexistent/libOpenCL.so.1", &log);
#ifdef TDM_FAKE_OPENCL
  const char *said = "cannot load the OpenCL loader /nonexistent/libOpenCL.so.1";
#else
  const char *said = WITHOUT_OPENCL;
#endif
  assert_true(test_log_has(&log, said));
  assert_true(test_log_has(&log, "runtime started")); /* and it runs */
  assert_int_equal(test_log_errors(&log), 0);
  expect_cpu_only(rt, said);
  tdm_runtime_destroy(rt);
}

static void test_loader_not_opencl(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = runtime_with(NULL, "libm.so.6", &log); /* no clGetPlatformIDs */
#ifdef TDM_FAKE_OPENCL
  assert_true(test_log_has(&log, "libm.so.6 has no clGetPlatformIDs"));
  const char *said = "not an OpenCL loader";
#else
  const char *said = WITHOUT_OPENCL;
#endif
  assert_int_equal(test_log_errors(&log), 0); /* a warning, not an error */
  expect_cpu_only(rt, said);
  tdm_runtime_destroy(rt);
}

static void test_devices_none(void **state) {
  (void)state;
  test_log log;
  /* "none" does not even open the loader: a bad path is never noticed */
  tdm_runtime *rt = runtime_with("none", "/nonexistent/libOpenCL.so.1", &log);
  expect_cpu_only(rt, "not looked for");
  tdm_runtime_destroy(rt);
}

static void test_bad_device_config(void **state) {
  (void)state;
  test_log log;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  test_log_attach(&cfg, &log);
  cfg.devices = "gpu,fpga";
  tdm_runtime *rt = (tdm_runtime *)1;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_INVALID_ARG);
  assert_null(rt);
  assert_non_null(strstr(log.last, "\"fpga\""));
  cfg.devices = NULL;
  cfg.device_memory = (tdm_device_memory)7;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_INVALID_ARG);
  assert_non_null(strstr(log.last, "device_memory"));
  /* from the environment, a bad value is ignored with a warning */
  cfg.device_memory = TDM_MEMORY_AS_REPORTED;
  cfg.ignore_env = 0;
  cfg.log_level = TDM_LOG_WARNING;
  cfg.nworkers = 1;
  setenv("TANDEM_DEVICES", "fpga", 1);
  setenv("TANDEM_DEVICE_MEMORY", "unified", 1);
  setenv("TANDEM_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so.1", 1);
  unsigned before = test_log_count(&log);
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  assert_int_equal(test_log_count(&log), before + 2);
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  assert_string_equal(mi.devices, "all");
  assert_int_equal(mi.device_memory, TDM_MEMORY_AS_REPORTED);
#ifdef TDM_FAKE_OPENCL
  assert_non_null(strstr(mi.opencl_summary, "/nonexistent/")); /* that one was taken */
#else
  assert_non_null(strstr(mi.opencl_summary, WITHOUT_OPENCL));
#endif
  tdm_runtime_destroy(rt);
  setenv("TANDEM_DEVICES", "none", 1);
  setenv("TANDEM_DEVICE_MEMORY", "discrete", 1);
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  assert_string_equal(mi.devices, "none");
  assert_int_equal(mi.device_memory, TDM_MEMORY_SEPARATE);
  tdm_runtime_destroy(rt);
  unsetenv("TANDEM_DEVICES");
  unsetenv("TANDEM_DEVICE_MEMORY");
  unsetenv("TANDEM_OPENCL_LIBRARY");
}

/* The queries check their arguments. */
static void test_query_arguments(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = runtime_with("none", NULL, &log);
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(NULL, &mi), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_runtime_machine(rt, NULL), TDM_ERR_INVALID_ARG);
  mi.struct_size = sizeof mi - 1;
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_ERR_INVALID_ARG);
  assert_non_null(strstr(log.last, "struct_size"));
  tdm_worker_info wi = {.struct_size = sizeof wi};
  assert_int_equal(tdm_runtime_worker(rt, 0, &wi), TDM_OK);
  assert_int_equal(wi.struct_size, sizeof wi);
  assert_int_equal(tdm_runtime_worker(rt, 1, &wi), TDM_ERR_INVALID_ARG);
  assert_non_null(strstr(log.last, "out of range"));
  tdm_cpu_kind_info ki = {.struct_size = sizeof ki};
  assert_int_equal(tdm_runtime_cpu_kind(rt, 0, &ki), TDM_OK);
  assert_int_equal(tdm_runtime_cpu_kind(rt, 1, &ki), TDM_ERR_INVALID_ARG);
  tdm_platform_info pi = {.struct_size = sizeof pi};
  assert_int_equal(tdm_runtime_platform(rt, 0, &pi), TDM_ERR_INVALID_ARG);
  /* a larger structure (a newer caller) is filled as far as known */
  struct {
    tdm_worker_info w;
    char more[32];
  } big;
  memset(&big, 0x5a, sizeof big);
  big.w.struct_size = sizeof big;
  assert_int_equal(tdm_runtime_worker(rt, 0, &big.w), TDM_OK);
  assert_int_equal(big.w.struct_size, sizeof big);
  assert_int_equal(big.w.type, TDM_WORKER_CPU);
  assert_int_equal(big.more[0], 0x5a);
  tdm_runtime_destroy(rt);
}


/* ---- a made-up machine, through the real discovery code ------------------ */

#ifdef TDM_FAKE_OPENCL
#include <dlfcn.h>

static int live_contexts(void) {
  void *lib = dlopen(TDM_FAKE_OPENCL, RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(lib);
  int (*live)(void);
  *(void **)&live = dlsym(lib, "fake_live_contexts"); /* POSIX's way */
  assert_non_null(live);
  int n = live();
  dlclose(lib);
  return n;
}

static tdm_device_info device(tdm_runtime *rt, unsigned i) {
  tdm_device_info d = {.struct_size = sizeof d};
  assert_int_equal(tdm_runtime_device(rt, i, &d), TDM_OK);
  return d;
}

/* iGPU, dGPU, a GPU without context, the dGPU again, a CPU device, an
 * empty platform (test/fake-opencl.c). */
static void test_fake_machine(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = runtime_with(NULL, TDM_FAKE_OPENCL, &log);
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  assert_int_equal(mi.opencl_status, TDM_OK);
  assert_string_equal(mi.opencl_summary, "3 platforms, 5 devices");
  tdm_platform_info p = {.struct_size = sizeof p};
  assert_int_equal(tdm_runtime_platform(rt, 2, &p), TDM_OK);
  assert_string_equal(p.name, "Fake Empty Platform");
  assert_int_equal(p.devices, 0);

  tdm_device_info igpu = device(rt, 0), dgpu = device(rt, 1), broken = device(rt, 2),
                  again = device(rt, 3), cpu = device(rt, 4);
  assert_int_equal(igpu.device_class, TDM_DEVICE_INTEGRATED_GPU);
  assert_true(igpu.shared_memory);
  assert_int_equal(dgpu.device_class, TDM_DEVICE_DISCRETE_GPU);
  assert_false(dgpu.shared_memory);
  assert_true(dgpu.has_pci);
  assert_int_equal(again.duplicate_of, 1);
  assert_int_equal(cpu.device_class, TDM_DEVICE_CPU);
  /* a name longer than the record keeps its first 127 bytes */
  assert_int_equal(strlen(again.name), 127);
  assert_memory_equal(again.name, "Fake dGPU seen again", 20);
  /* used: the iGPU and the dGPU, workers after the CPU worker */
  assert_true(igpu.used && dgpu.used);
  assert_int_equal(igpu.worker, 1);
  assert_int_equal(dgpu.worker, 2);
  assert_false(broken.used || again.used || cpu.used);
  assert_int_equal(broken.worker, -1);
  assert_non_null(strstr(broken.usage, "no OpenCL context could be created on it (CL_DEVICE_NOT_AVAILABLE, error -2)"));
  assert_true(test_log_has(&log, "Fake broken GPU): not used: no OpenCL context"));
  assert_int_equal(tdm_runtime_nworkers(rt), 3);
  assert_int_equal(mi.device_workers, 2);
  tdm_worker_info w = {.struct_size = sizeof w};
  assert_int_equal(tdm_runtime_worker(rt, 2, &w), TDM_OK);
  assert_int_equal(w.type, TDM_WORKER_DEVICE);
  assert_int_equal(w.device, 1);
  /* locality: hwloc's helper read the dGPU's (NVIDIA-style) PCI address
   * through Tandem's loaded entry points; the iGPU reports none */
  assert_true(dgpu.near_cpus[0] != 0);
  assert_int_equal(w.numa_node, dgpu.numa_node);
  if (mi.numa_nodes == 1)
    assert_true(dgpu.numa_node >= 0);
  assert_int_equal(igpu.numa_node, -1);
  assert_string_equal(igpu.near_cpus, "");
  /* a context per device used, released at destroy */
  assert_int_equal(live_contexts(), 2);
  tdm_runtime_destroy(rt);
  assert_int_equal(live_contexts(), 0);
}

static void test_fake_machine_selection(void **state) {
  (void)state;
  test_log log;
  static const struct {
    const char *devices;
    unsigned used; /* a bit per device */
  } cases[] = {
      {"discrete", 1u << 1},     {"integrated", 1u << 0}, {"gpu", 1u << 0 | 1u << 1},
      {"cpu", 1u << 4},          {"1,4", 1u << 1 | 1u << 4},
      {"2", 0}, /* selected, but no context: not used */
      {"3", 0}, /* the duplicate */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    tdm_runtime *rt = runtime_with(cases[c].devices, TDM_FAKE_OPENCL, &log);
    unsigned used = 0, next_worker = 1;
    for (unsigned i = 0; i < 5; i++) {
      tdm_device_info d = device(rt, i);
      if (d.used) {
        used |= 1u << i;
        assert_int_equal(d.worker, (int)next_worker++); /* in device order */
      }
    }
    if (used != cases[c].used)
      fail_msg("devices=\"%s\": used %#x, expected %#x", cases[c].devices, used, cases[c].used);
    assert_int_equal(tdm_runtime_nworkers(rt), next_worker);
    assert_int_equal(live_contexts(), (int)next_worker - 1);
    tdm_runtime_destroy(rt);
  }
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_classification),
      cmocka_unit_test(test_dedupe),
      cmocka_unit_test(test_parse_devices),
      cmocka_unit_test(test_select_devices),
      cmocka_unit_test(test_memory_behaviour),
      cmocka_unit_test(test_loader_not_found),
      cmocka_unit_test(test_loader_not_opencl),
      cmocka_unit_test(test_devices_none),
      cmocka_unit_test(test_bad_device_config),
      cmocka_unit_test(test_query_arguments),
#ifdef TDM_FAKE_OPENCL
      cmocka_unit_test(test_fake_machine),
      cmocka_unit_test(test_fake_machine_selection),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
