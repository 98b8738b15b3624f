/*
 * tandem-info: its JSON document is valid JSON, has the documented members
 * with their documented types (docs/tandem-info.md), and says what a
 * runtime created in the same environment reports through the API; under
 * several environments (defaults, a recorded hybrid laptop, CPU devices
 * admitted, no devices, no loader). Its text output names the same things.
 *
 *   test-info path/to/tandem-info
 */
#include "common.h"
#include "json.h"

#include <sys/wait.h>

static const char *tool;

static int run_tool(const char *args, char **out) { return test_run(tool, args, out); }

static const char *const tandem_vars[] = {
    "TANDEM_NWORKERS",       "TANDEM_BIND",         "TANDEM_SPIN_US",
    "TANDEM_LOG_LEVEL",      "TANDEM_SYNTHETIC_TOPOLOGY", "TANDEM_TOPOLOGY_XML",
    "TANDEM_DEVICES",        "TANDEM_OPENCL_CPU",   "TANDEM_DEVICE_MEMORY",
    "TANDEM_OPENCL_LIBRARY", "TANDEM_SIM",          "TANDEM_SCHED",
};

static int clean_env(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof tandem_vars / sizeof tandem_vars[0]; i++)
    unsetenv(tandem_vars[i]);
  return 0;
}

/* ---- typed access: each fails the test when the member is missing or of
 * another type than documented ------------------------------------------- */

static json *member(const json *obj, const char *key, json_type type) {
  json *v = json_get(obj, key);
  if (!v)
    fail_msg("member \"%s\" is missing", key);
  if (v->type != type)
    fail_msg("member \"%s\" has type %d, not %d", key, (int)v->type, (int)type);
  return v;
}

static const char *str(const json *obj, const char *key) {
  return member(obj, key, JSON_STRING)->string;
}

static double num(const json *obj, const char *key) {
  return member(obj, key, JSON_NUMBER)->number;
}

static int boolean(const json *obj, const char *key) {
  return member(obj, key, JSON_BOOL)->boolean;
}

/* An integer or null (null: -1). */
static long long opt(const json *obj, const char *key) {
  json *v = json_get(obj, key);
  if (!v)
    fail_msg("member \"%s\" is missing", key);
  if (v->type == JSON_NULL)
    return -1;
  if (v->type != JSON_NUMBER)
    fail_msg("member \"%s\" is neither a number nor null", key);
  return (long long)v->number;
}

static const json *array(const json *obj, const char *key, size_t n) {
  json *v = member(obj, key, JSON_ARRAY);
  if (v->n != n)
    fail_msg("\"%s\" has %zu elements, the runtime reports %zu", key, v->n, n);
  for (size_t i = 0; i < n; i++)
    if (v->items[i]->type != JSON_OBJECT)
      fail_msg("\"%s\"[%zu] is not an object", key, i);
  return v;
}

static const char *class_key(tdm_device_class c) {
  static const char *const keys[] = {"unknown", "integrated_gpu", "discrete_gpu", "cpu",
                                     "accelerator", "emulated"};
  return (unsigned)c < 6 ? keys[c] : "unknown";
}

/* tandem-info --json in the current environment, against a runtime
 * created in the same environment. Returns the document. */
static json *check_json_matches_runtime(void) {
  char *out;
  assert_int_equal(run_tool("--json", &out), 0);
  json *doc = json_parse(out);
  if (!doc)
    fail_msg("tandem-info --json printed something that is not JSON:\n%s", out);
  free(out);

  tdm_config cfg;
  tdm_config_init(&cfg); /* environment applies, as in tandem-info */
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  tdm_machine_info m = {.struct_size = sizeof m};
  assert_int_equal(tdm_runtime_machine(rt, &m), TDM_OK);

  assert_string_equal(str(doc, "format"), "tandem-info");
  assert_true(num(doc, "format_version") == 1);
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", TDM_VERSION_MAJOR, TDM_VERSION_MINOR,
           TDM_VERSION_PATCH);
  assert_string_equal(str(doc, "tandem_version"), version);

  const json *mj = member(doc, "machine", JSON_OBJECT);
  assert_string_equal(str(mj, "topology_source"), m.topology_source);
  assert_string_equal(str(mj, "cpu_model"), m.cpu_model);
  assert_true(num(mj, "packages") == m.packages);
  assert_true(num(mj, "numa_nodes") == m.numa_nodes);
  assert_true(num(mj, "cores") == m.cores);
  assert_true(num(mj, "pus") == m.pus);
  assert_true(num(mj, "usable_cores") == m.usable_cores);
  assert_true(num(mj, "usable_pus") == m.usable_pus);
  assert_string_equal(str(mj, "usable_cpus"), m.usable_cpus);
  assert_true(num(mj, "memory_bytes") == (double)m.memory_bytes);
  const json *caches = member(mj, "caches", JSON_OBJECT);
  assert_true(num(member(caches, "l1d", JSON_OBJECT), "bytes") == (double)m.l1d_bytes);
  assert_true(num(member(caches, "l2", JSON_OBJECT), "count") == m.l2_count);
  assert_true(num(member(caches, "l3", JSON_OBJECT), "bytes") == (double)m.l3_bytes);

  const json *kinds = array(doc, "cpu_kinds", m.cpu_kinds);
  for (unsigned k = 0; k < m.cpu_kinds; k++) {
    tdm_cpu_kind_info ki = {.struct_size = sizeof ki};
    assert_int_equal(tdm_runtime_cpu_kind(rt, k, &ki), TDM_OK);
    const json *kj = kinds->items[k];
    assert_true(num(kj, "index") == k);
    assert_string_equal(str(kj, "name"), ki.name);
    assert_int_equal(opt(kj, "efficiency"), ki.efficiency);
    assert_true(num(kj, "cores") == ki.cores);
    assert_true(num(kj, "workers") == ki.workers);
    assert_string_equal(str(kj, "worker_ids"), ki.worker_ids);
  }

  unsigned nw = tdm_runtime_nworkers(rt);
  assert_int_equal(nw, m.cpu_workers + m.device_workers);
  const json *workers = array(doc, "workers", nw);
  for (unsigned w = 0; w < nw; w++) {
    tdm_worker_info wi = {.struct_size = sizeof wi};
    assert_int_equal(tdm_runtime_worker(rt, w, &wi), TDM_OK);
    const json *wj = workers->items[w];
    assert_true(num(wj, "id") == w);
    assert_string_equal(str(wj, "type"), wi.type == TDM_WORKER_CPU ? "cpu" : "device");
    assert_true(num(wj, "cpu_kind") == wi.cpu_kind);
    assert_int_equal(opt(wj, "core"), wi.core);
    assert_string_equal(str(wj, "cpus"), wi.cpus);
    assert_int_equal(opt(wj, "numa_node"), wi.numa_node);
    assert_int_equal(opt(wj, "device"), wi.device);
  }

  const json *sel = member(doc, "selection", JSON_OBJECT);
  assert_string_equal(str(sel, "devices"), m.devices);
  assert_int_equal(boolean(sel, "opencl_cpu_devices"), m.opencl_cpu_devices);
  static const char *const modes[] = {"reported", "integrated", "discrete"};
  assert_string_equal(str(sel, "device_memory"), modes[m.device_memory]);

  const json *cl = member(doc, "opencl", JSON_OBJECT);
  assert_int_equal(boolean(cl, "available"), m.opencl_status == TDM_OK);
  assert_string_equal(str(cl, "summary"), m.opencl_summary);
  const json *plats = array(cl, "platforms", m.opencl_platforms);
  for (unsigned p = 0; p < m.opencl_platforms; p++) {
    tdm_platform_info pi = {.struct_size = sizeof pi};
    assert_int_equal(tdm_runtime_platform(rt, p, &pi), TDM_OK);
    const json *pj = plats->items[p];
    assert_true(num(pj, "index") == p);
    assert_string_equal(str(pj, "name"), pi.name);
    assert_string_equal(str(pj, "vendor"), pi.vendor);
    assert_string_equal(str(pj, "version"), pi.version);
    assert_true(num(pj, "devices") == pi.devices);
  }

  const json *devs = array(doc, "devices", m.opencl_devices);
  for (unsigned i = 0; i < m.opencl_devices; i++) {
    tdm_device_info d = {.struct_size = sizeof d};
    assert_int_equal(tdm_runtime_device(rt, i, &d), TDM_OK);
    const json *dj = devs->items[i];
    assert_true(num(dj, "index") == i);
    assert_true(num(dj, "platform") == d.platform);
    assert_string_equal(str(dj, "name"), d.name);
    assert_string_equal(str(dj, "vendor"), d.vendor);
    assert_string_equal(str(dj, "driver_version"), d.driver_version);
    assert_string_equal(str(dj, "opencl_version"), d.opencl_version);
    assert_string_equal(str(dj, "class"), class_key(d.device_class));
    assert_string_equal(str(dj, "class_reason"), d.class_reason);
    assert_int_equal(boolean(dj, "shared_memory"), d.shared_memory);
    assert_string_equal(str(dj, "memory_reason"), d.memory_reason);
    assert_true(num(dj, "compute_units") == d.compute_units);
    assert_true(num(dj, "clock_mhz") == d.clock_mhz);
    assert_true(num(dj, "global_mem_bytes") == (double)d.global_mem_bytes);
    assert_true(num(dj, "max_alloc_bytes") == (double)d.max_alloc_bytes);
    assert_true(num(dj, "local_mem_bytes") == (double)d.local_mem_bytes);
    assert_int_equal(boolean(dj, "fp64"), d.fp64);
    assert_int_equal(boolean(dj, "host_unified_memory"), d.host_unified_memory);
    assert_true(num(dj, "svm_capabilities") == (double)d.svm_capabilities);
    const json *pci = json_get(dj, "pci"), *uuid = json_get(dj, "uuid");
    assert_non_null(pci);
    assert_non_null(uuid);
    assert_int_equal(pci->type, d.has_pci ? JSON_STRING : JSON_NULL);
    assert_int_equal(uuid->type, d.has_uuid ? JSON_STRING : JSON_NULL);
    assert_int_equal(opt(dj, "duplicate_of"), d.duplicate_of);
    assert_int_equal(opt(dj, "numa_node"), d.numa_node);
    assert_string_equal(str(dj, "near_cpus"), d.near_cpus);
    assert_int_equal(boolean(dj, "used"), d.used);
    assert_string_equal(str(dj, "usage"), d.usage);
    assert_int_equal(opt(dj, "worker"), d.worker);
    assert_int_equal(boolean(dj, "quarantined"), d.quarantined);
    assert_string_equal(str(dj, "quarantine_reason"), d.quarantine_reason);
  }

  const json *log = member(doc, "log", JSON_ARRAY);
  for (size_t i = 0; i < log->n; i++) {
    const char *level = str(log->items[i], "level");
    assert_true(!strcmp(level, "error") || !strcmp(level, "warning") || !strcmp(level, "info") ||
                !strcmp(level, "debug"));
    str(log->items[i], "message");
  }
  tdm_runtime_destroy(rt);
  return doc;
}

/* Whether any message of the document's log contains `part`. */
static int logged(const json *doc, const char *part) {
  const json *log = json_get(doc, "log");
  for (size_t i = 0; log && i < log->n; i++)
    if (strstr(str(log->items[i], "message"), part))
      return 1;
  return 0;
}

static void test_defaults(void **state) {
  (void)state;
  json *doc = check_json_matches_runtime();
  const json *m = json_get(doc, "machine");
  assert_true(num(m, "usable_cores") >= 1);
  /* CPU devices are never used by default */
  const json *devs = json_get(doc, "devices");
  for (size_t i = 0; i < devs->n; i++)
    if (!strcmp(str(devs->items[i], "class"), "cpu"))
      assert_false(boolean(devs->items[i], "used"));
  json_free(doc);
}

static void test_hybrid_laptop(void **state) {
  (void)state;
  setenv("TANDEM_TOPOLOGY_XML", TDM_TOPOLOGY_DIR "/hybrid-laptop.xml", 1);
  json *doc = check_json_matches_runtime();
  const json *kinds = json_get(doc, "cpu_kinds");
  assert_int_equal(kinds->n, 2);
  assert_string_equal(str(kinds->items[1], "name"), "IntelCore");
  assert_string_equal(str(kinds->items[1], "worker_ids"), "0-3");
  assert_string_equal(str(kinds->items[0], "worker_ids"), "4-11");
  json_free(doc);
}

static void test_cpu_devices_admitted(void **state) {
  (void)state;
  setenv("TANDEM_OPENCL_CPU", "1", 1);
  json *doc = check_json_matches_runtime();
  const json *devs = json_get(doc, "devices");
  for (size_t i = 0; i < devs->n; i++)
    if (!strcmp(str(devs->items[i], "class"), "cpu") && opt(devs->items[i], "duplicate_of") < 0)
      assert_true(boolean(devs->items[i], "used"));
  json_free(doc);
}

static void test_no_devices(void **state) {
  (void)state;
  setenv("TANDEM_DEVICES", "none", 1);
  json *doc = check_json_matches_runtime();
  assert_false(boolean(json_get(doc, "opencl"), "available"));
  assert_int_equal(json_get(doc, "devices")->n, 0);
  json_free(doc);
}

/* --verbose and --bandwidth: each OpenCL device's limits and extensions,
 * and its copies measured, as documented; the same in the text. */
static void test_verbose_and_bandwidth(void **state) {
  (void)state;
  setenv("TANDEM_OPENCL_CPU", "1", 1);
  char *out;
  assert_int_equal(run_tool("--json --verbose --bandwidth", &out), 0);
  json *doc = json_parse(out);
  assert_non_null(doc);
  free(out);
  const json *devs = member(doc, "devices", JSON_ARRAY);
  if (devs->n == 0) {
    json_free(doc);
    skip(); /* no OpenCL device here */
  }
  for (size_t i = 0; i < devs->n; i++) {
    const json *d = devs->items[i];
    const json *x = json_get(d, "details"), *l = json_get(d, "link");
    assert_non_null(x);
    assert_non_null(l);
    if (x->type == JSON_NULL) {
      assert_true(strlen(str(d, "details_unavailable")) > 0);
    } else {
      assert_true(num(x, "max_work_group_size") >= 1);
      assert_true(num(x, "max_work_item_dimensions") >= 3);
      assert_true(num(x, "max_parameter_bytes") >= 256); /* OpenCL's minimum for full profile */
      assert_true(num(x, "address_bits") == 32 || num(x, "address_bits") == 64);
      assert_non_null(strstr(str(x, "opencl_c_version"), "OpenCL C"));
      const json *ext = member(x, "extensions", JSON_ARRAY);
      assert_true(ext->n > 0);
      for (size_t e = 0; e < ext->n; e++)
        assert_true(ext->items[e]->type == JSON_STRING && !strncmp(ext->items[e]->string, "cl_", 3));
      assert_int_equal(member(x, "max_work_item_sizes", JSON_ARRAY)->n, 3);
    }
    if (l->type == JSON_NULL) {
      assert_true(strlen(str(d, "link_unmeasured")) > 0);
    } else {
      assert_true(num(l, "latency_to_device_s") > 0 && num(l, "latency_to_host_s") > 0);
      assert_true(num(l, "bandwidth_to_device_bytes_per_s") > 0 &&
                  num(l, "bandwidth_to_host_bytes_per_s") > 0);
      const json *s = member(l, "samples", JSON_ARRAY);
      assert_true(s->n >= 2);
      for (size_t k = 1; k < s->n; k++)
        assert_true(num(s->items[k], "bytes") > num(s->items[k - 1], "bytes"));
      assert_true(num(s->items[0], "bytes") == 64);
    }
  }
  /* PoCL's CPU device, where it is: both read */
  const json *d0 = devs->items[0];
  if (!strcmp(str(d0, "class"), "cpu")) {
    assert_true(json_get(d0, "details")->type == JSON_OBJECT);
    assert_true(json_get(d0, "link")->type == JSON_OBJECT);
  }
  json_free(doc);
  /* without the flags, neither member */
  assert_int_equal(run_tool("--json", &out), 0);
  doc = json_parse(out);
  free(out);
  assert_null(json_get(member(doc, "devices", JSON_ARRAY)->items[0], "details"));
  assert_null(json_get(member(doc, "devices", JSON_ARRAY)->items[0], "link"));
  json_free(doc);
  assert_int_equal(run_tool("--verbose --bandwidth", &out), 0);
  assert_non_null(strstr(out, "Extensions: cl_"));
  assert_non_null(strstr(out, "Link:     host to device"));
  free(out);
}

/* Emulated devices: devices of their own class, each with a worker; the
 * text lists them apart from OpenCL's. */
static void test_emulated_devices(void **state) {
  (void)state;
  setenv("TANDEM_SIM", "gpu:gemm=10,latency=5us,bandwidth=16G;igpu:memory=shared,speedup=2", 1);
  json *doc = check_json_matches_runtime();
  const json *devs = json_get(doc, "devices");
  assert_int_equal(devs->n, 2);
  for (size_t i = 0; i < devs->n; i++) {
    assert_string_equal(str(devs->items[i], "class"), "emulated");
    assert_true(boolean(devs->items[i], "used"));
  }
  json_free(doc);
  char *out;
  assert_int_equal(run_tool("", &out), 0);
  assert_non_null(strstr(out, "Emulated devices"));
  assert_non_null(strstr(out, "Device 0: gpu, worker 2"));
  assert_non_null(strstr(out, "Device 1: igpu, worker 3"));
  assert_non_null(strstr(out, "emulated, on a thread of its own"));
  free(out);
}

static void test_no_loader(void **state) {
  (void)state;
  setenv("TANDEM_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so.1", 1);
  json *doc = check_json_matches_runtime();
  assert_false(boolean(json_get(doc, "opencl"), "available"));
#ifdef TDM_FAKE_OPENCL /* defined when Tandem is built with OpenCL */
  assert_true(logged(doc, "cannot load the OpenCL loader"));
#else
  assert_true(logged(doc, "built without the OpenCL headers"));
#endif
  json_free(doc);
}

#ifdef TDM_FAKE_OPENCL
/* A made-up machine with GPUs (test/fake-opencl.c): PCI addresses,
 * duplicates and device workers in the document. */
static void test_fake_machine(void **state) {
  (void)state;
  setenv("TANDEM_OPENCL_LIBRARY", TDM_FAKE_OPENCL, 1);
  json *doc = check_json_matches_runtime();
  const json *devs = json_get(doc, "devices");
  assert_int_equal(devs->n, 5);
  assert_string_equal(str(devs->items[1], "pci"), "0000:00:00.0");
  assert_int_equal(opt(devs->items[3], "duplicate_of"), 1);
  assert_true(logged(doc, "no OpenCL context could be created"));
  json_free(doc);
}
#endif

/* The text output names the same things, and bad arguments are refused. */
static void test_text_output(void **state) {
  (void)state;
  setenv("TANDEM_OPENCL_CPU", "1", 1);
  char *out;
  assert_int_equal(run_tool("", &out), 0);
  tdm_config cfg;
  tdm_config_init(&cfg);
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  tdm_machine_info m = {.struct_size = sizeof m};
  assert_int_equal(tdm_runtime_machine(rt, &m), TDM_OK);
  char line[256];
  snprintf(line, sizeof line, "Workers: %u on CPU cores", m.cpu_workers);
  assert_non_null(strstr(out, line));
  snprintf(line, sizeof line, "(CPUs %s)", m.usable_cpus);
  assert_non_null(strstr(out, line));
  for (unsigned i = 0; i < m.opencl_devices; i++) {
    tdm_device_info d = {.struct_size = sizeof d};
    assert_int_equal(tdm_runtime_device(rt, i, &d), TDM_OK);
    snprintf(line, sizeof line, "Device %u: %s", i, d.name);
    assert_non_null(strstr(out, line));
    assert_non_null(strstr(out, d.used ? "Used:     yes" : "Used:     no"));
  }
  tdm_runtime_destroy(rt);
  free(out);
  assert_int_equal(run_tool("--bogus 2>/dev/null", &out), 2);
  free(out);
  assert_int_equal(run_tool("--help", &out), 0);
  assert_non_null(strstr(out, "--json"));
  free(out);
}

/* The reader the verdicts rest on refuses what is not JSON. */
static void test_json_reader(void **state) {
  (void)state;
  static const char *const good[] = {
      "{}", "[]", "0", "-1.5e+3", "\"a\\u00e9\\ud83d\\ude00\\n\"", "{\"a\": [1, true, null]}",
      " [ {\"k\" : \"v\"} ] ",
  };
  static const char *const bad[] = {
      "", "{", "[1,]", "{\"a\":1,}", "{a:1}", "01", "1.", "+1", "\"\\x\"", "\"a\nb\"",
      "[1] 2", "nul", "\"\\ud800\"", "{\"a\" 1}", "[1 2]", "'a'",
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    json *v = json_parse(good[i]);
    if (!v)
      fail_msg("refused valid JSON: %s", good[i]);
    json_free(v);
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    json *v = json_parse(bad[i]);
    if (v)
      fail_msg("accepted invalid JSON: %s", bad[i]);
  }
  json *v = json_parse("\"\\u00e9\\ud83d\\ude00\"");
  assert_string_equal(v->string, "\xc3\xa9\xf0\x9f\x98\x80");
  json_free(v);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test-info path/to/tandem-info\n");
    return 2;
  }
  tool = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json_reader),
      cmocka_unit_test_setup(test_defaults, clean_env),
      cmocka_unit_test_setup(test_hybrid_laptop, clean_env),
      cmocka_unit_test_setup(test_cpu_devices_admitted, clean_env),
      cmocka_unit_test_setup(test_no_devices, clean_env),
      cmocka_unit_test_setup(test_no_loader, clean_env),
      cmocka_unit_test_setup(test_emulated_devices, clean_env),
      cmocka_unit_test_setup(test_verbose_and_bandwidth, clean_env),
      cmocka_unit_test_setup(test_text_output, clean_env),
#ifdef TDM_FAKE_OPENCL
      cmocka_unit_test_setup(test_fake_machine, clean_env),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
