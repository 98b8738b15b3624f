/*
 * The verification mode (tdm_config.verify): sampled tasks that ran on a
 * device are run again by their CPU variant and compared within their
 * codelet's tolerance. Emulated devices run the CPU variant too: a
 * variant that adds one ulp when it runs on a device worker stands for a
 * device that rounds otherwise. Mode "sim" (default) and "opencl" (PoCL:
 * an OpenCL kernel one ulp off; SKIP without an OpenCL CPU device).
 */
#include "common.h"
#include "internal.h"

#ifdef TEST_WITH_OPENCL
#include "tandem/opencl.h"
#endif

#include <math.h>

#define N 64
#define NH 16
#define ROUNDS 12

static tdm_runtime *the_rt;
static _Atomic bool off_by_one; /* device runs add one ulp */

static bool on_device(void) {
  int w = tdm_worker_id(the_rt);
  return w >= (int)tdm_runtime_ncpu_workers(the_rt);
}

/* Work worth a device: 20 us on the CPU, 1 us on the device declared. */
static void busy(void) {
  double until = now_s() + 20e-6;
  while (now_s() < until)
    ;
}

/* y = 2x (read x, write y) */
static void twice(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  busy();
  const double *x = b[0].ptr;
  double *y = b[1].ptr;
  bool skew = atomic_load(&off_by_one) && on_device();
  for (size_t i = 0; i < b[0].nx; i++)
    y[i] = skew ? nextafter(2 * x[i], INFINITY) : 2 * x[i];
}

/* y = 3y + 1 (read-write) */
static void grow(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  busy();
  double *y = b[0].ptr;
  for (size_t i = 0; i < b[0].nx; i++)
    y[i] = 3 * y[i] + 1;
}

/* reads y: nothing to compare (not sampled) */
static void look(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
}

static tdm_codelet look_cl = {.name = "look", .cpu_fn = look, .nbuffers = 1, .modes = {TDM_R}};
static tdm_codelet twice_cl = {.name = "twice", .cpu_fn = twice, .nbuffers = 2,
                               .modes = {TDM_R, TDM_W}};
static tdm_codelet grow_cl = {.name = "grow", .cpu_fn = grow, .nbuffers = 1,
                              .modes = {TDM_RW}};

static tdm_runtime *make(const char *verify, const char *faults, test_log *log, char *dir,
                         size_t size) {
  test_temp_dir(dir, size);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.cache_dir = dir;
  /* a device much faster than the CPU worker: it takes most tasks */
  cfg.sim = "gpu:speedup=20,latency=1us,bandwidth=10G";
  cfg.sim_time_scale = 1;
  cfg.verify = verify;
  cfg.faults = faults;
  cfg.retries = 0;
  test_log_attach(&cfg, log);
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  the_rt = rt;
  return rt;
}

/* The application's tasks that failed and were cancelled (callbacks). */
static _Atomic unsigned app_failed, app_cancelled;

static void count_outcome(void *data) {
  (void)data;
  tdm_status st = tdm_callback_status();
  if (st == TDM_ERR_CANCELLED)
    atomic_fetch_add(&app_cancelled, 1);
  else if (st != TDM_OK)
    atomic_fetch_add(&app_failed, 1);
}

/* ROUNDS rounds of y = 2x, y = 3y + 1 on NH pairs of vectors, checked
 * against the same computed here: exact unless off_by_one, and exact
 * again when tdm_wait_all says the devices' results that differed were
 * replaced by the CPU's. Returns what tdm_wait_all did. */
static tdm_status run(tdm_runtime *rt) {
  static double x[NH][N], y[NH][N];
  tdm_handle *hx[NH], *hy[NH];
  for (unsigned h = 0; h < NH; h++) {
    for (unsigned i = 0; i < N; i++)
      x[h][i] = 1 + h + i * 0.25, y[h][i] = 0; /* not 0: one ulp of 0 is all of it */
    assert_int_equal(tdm_register_vector(rt, x[h], N, sizeof(double), &hx[h]), TDM_OK);
    assert_int_equal(tdm_register_vector(rt, y[h], N, sizeof(double), &hy[h]), TDM_OK);
  }
  atomic_store(&app_failed, 0);
  atomic_store(&app_cancelled, 0);
  for (unsigned r = 0; r < ROUNDS; r++)
    for (unsigned h = 0; h < NH; h++) {
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &twice_cl,
                                                        .handles = {hx[h], hy[h]},
                                                        .callback = count_outcome}),
                       TDM_OK);
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &grow_cl,
                                                        .handles = {hy[h]},
                                                        .callback = count_outcome}),
                       TDM_OK);
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &look_cl,
                                                        .handles = {hy[h]},
                                                        .callback = count_outcome}),
                       TDM_OK);
    }
  tdm_status st = tdm_wait_all(rt);
  for (unsigned h = 0; h < NH; h++) {
    assert_int_equal(tdm_handle_unregister(hx[h]), TDM_OK);
    tdm_handle_unregister(hy[h]); /* TDM_ERR_LOST after a failure */
  }
  if ((st == TDM_OK && !atomic_load(&off_by_one)) || st == TDM_ERR_MISMATCH)
    for (unsigned h = 0; h < NH; h++)
      for (unsigned i = 0; i < N; i++)
        assert_true(y[h][i] == 3 * (2 * x[h][i]) + 1);
  return st;
}

static tdm_verify_counts counts(tdm_runtime *rt) {
  tdm_verify_counts c = {.struct_size = sizeof c};
  assert_int_equal(tdm_runtime_verify_counts(rt, &c), TDM_OK);
  printf("sampled %llu, compared %llu, differed %llu, not compared %llu\n",
         (unsigned long long)c.sampled, (unsigned long long)c.compared,
         (unsigned long long)c.mismatched, (unsigned long long)c.skipped);
  return c;
}

static void finish(tdm_runtime *rt, char *dir) {
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
}

/* Devices that agree with the CPU: every sampled task is compared or
 * skipped (it ran on the CPU), none differs; the read-write task is run
 * again from its input as it was (kept before it ran), not from its
 * output; a task that writes nothing is not sampled. */
static void test_agreeing_device(void **state) {
  (void)state;
  atomic_store(&off_by_one, false);
  test_log log;
  char dir[64];
  tdm_runtime *rt = make("*:1", NULL, &log, dir, sizeof dir);
  run(rt);
  tdm_verify_counts c = counts(rt);
  assert_int_equal(c.sampled, 2 * NH * ROUNDS);
  assert_int_equal(c.compared + c.skipped, c.sampled);
  assert_true(c.compared > 0);
  assert_int_equal(c.mismatched, 0);
  assert_false(test_log_has(&log, "verify: codelet"));
  finish(rt, dir);
}

/* y = y + 1 through two buffers naming one handle (read, then
 * written): the second run must read the handle as it was before the
 * task, through both buffers, not what the task wrote through the other
 * one (which differs, and whose "correction" would be wrong). Without
 * arguments, the second run gets NULL as the first does. Rounds of
 * tasks go on until some ran on the device (placement decides). */
static _Atomic unsigned args_given; /* runs that got arguments, having none */
static void alias_add(const tdm_buffer *b, const void *args, size_t n) {
  if (args || n) /* none: NULL, in either run */
    atomic_fetch_add(&args_given, 1);
  busy();
  const double *in = b[0].ptr;
  double *out = b[1].ptr;
  for (size_t i = 0; i < b[0].nx; i++) {
    double v = in[i];
    out[i] = v + 1; /* the same memory: in[i] is now that too */
  }
}

static void test_handle_named_twice(void **state) {
  (void)state;
  atomic_store(&off_by_one, false);
  test_log log;
  char dir[64];
  tdm_runtime *rt = make("*:1", NULL, &log, dir, sizeof dir);
  static const tdm_codelet alias_cl = {.name = "alias", .cpu_fn = alias_add, .nbuffers = 2,
                                       .modes = {TDM_R, TDM_W}};
  static const tdm_codelet alias_rw_cl = {.name = "alias-rw", .cpu_fn = alias_add,
                                          .nbuffers = 2, .modes = {TDM_RW, TDM_RW}};
  static double y[NH][N];
  tdm_handle *hy[NH];
  for (unsigned h = 0; h < NH; h++) {
    for (unsigned i = 0; i < N; i++)
      y[h][i] = 1 + h + i;
    assert_int_equal(tdm_register_vector(rt, y[h], N, sizeof(double), &hy[h]), TDM_OK);
  }
  unsigned rounds = 0;
  tdm_verify_counts c;
  do {
    for (unsigned r = 0; r < 4; r++, rounds++)
      for (unsigned h = 0; h < NH; h++)
        assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = r % 2 ? &alias_rw_cl
                                                                          : &alias_cl,
                                                          .handles = {hy[h], hy[h]}}),
                         TDM_OK);
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    c = counts(rt);
  } while (!c.compared && rounds < 400);
  for (unsigned h = 0; h < NH; h++)
    assert_int_equal(tdm_handle_unregister(hy[h]), TDM_OK);
  for (unsigned h = 0; h < NH; h++)
    for (unsigned i = 0; i < N; i++)
      assert_true(y[h][i] == 1 + h + i + rounds);
  assert_true(c.compared > 0);
  assert_int_equal(c.mismatched, 0);
  assert_int_equal(atomic_load(&args_given), 0);
  finish(rt, dir);
}

/* A sample: one task in four of `twice` alone, spread evenly. */
static void test_rate(void **state) {
  (void)state;
  atomic_store(&off_by_one, false);
  test_log log;
  char dir[64];
  tdm_runtime *rt = make("twice:0.25", NULL, &log, dir, sizeof dir);
  run(rt);
  tdm_verify_counts c = counts(rt);
  assert_int_equal(c.sampled, NH * ROUNDS / 4);
  assert_int_equal(c.mismatched, 0);
  finish(rt, dir);
}

/* A device one ulp off: with an exact tolerance every comparison of
 * `twice` differs, said with the codelet, the device and the cause; the
 * CPU's results are kept (the run ends exact), tdm_wait_all says so, and
 * after two mismatches `twice` no longer runs on that device; with one
 * ulp allowed, or a relative 1e-15, none differs; a relative 1e-17 does
 * not cover one ulp of these values. */
static void off_by_one_ulp(tdm_tolerance tol, bool differs) {
  atomic_store(&off_by_one, true);
  twice_cl.tolerance = tol;
  test_log log;
  char dir[64];
  tdm_runtime *rt = make("twice:1", NULL, &log, dir, sizeof dir);
  tdm_status st = run(rt);
  tdm_verify_counts c = counts(rt);
  assert_true(c.compared > 0);
  assert_int_equal(c.mismatched, differs ? c.compared : 0);
  assert_int_equal(st, differs ? TDM_ERR_MISMATCH : TDM_OK);
  assert_true(!differs || c.mismatched >= 2);
  if (differs) {
    assert_true(test_log_has(&log, "codelet twice: its OpenCL variant is no longer used on "
                                   "device 0 (gpu)"));
    assert_true(test_log_has(&log, "which were kept (the first: codelet twice)"));
    /* reported once */
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    /* its variant is out there: no task of `twice` runs on the device now */
    assert_int_equal(run(rt), TDM_OK);
    tdm_verify_counts again = counts(rt);
    assert_int_equal(again.compared, c.compared);
    assert_int_equal(again.mismatched, c.mismatched);
    printf("%.*s\n", (int)strcspn(strstr(log.all, "verify: codelet"), "\n"),
           strstr(log.all, "verify: codelet"));
    assert_true(test_log_has(&log, "verify: codelet twice: device 0 (gpu)"));
    assert_true(test_log_has(&log, "FP_CONTRACT OFF"));
  }
  finish(rt, dir);
  twice_cl.tolerance = (tdm_tolerance){0};
  atomic_store(&off_by_one, false);
}

static void test_mismatch_exact(void **state) {
  (void)state;
  off_by_one_ulp((tdm_tolerance){TDM_TOL_EXACT, TDM_ELEM_DOUBLE, 0}, true);
}

static void test_mismatch_bytes(void **state) {
  (void)state;
  off_by_one_ulp((tdm_tolerance){0}, true);
}

static void test_within_ulps(void **state) {
  (void)state;
  off_by_one_ulp((tdm_tolerance){TDM_TOL_ULPS, TDM_ELEM_DOUBLE, 1}, false);
}

/* Zero ulps allowed: one ulp of these values (about 2^62 in the order of
 * doubles' representations) is told from none. */
static void test_beyond_ulps(void **state) {
  (void)state;
  off_by_one_ulp((tdm_tolerance){TDM_TOL_ULPS, TDM_ELEM_DOUBLE, 0}, true);
}

static void test_within_relative(void **state) {
  (void)state;
  off_by_one_ulp((tdm_tolerance){TDM_TOL_RELATIVE, TDM_ELEM_DOUBLE, 1e-15}, false);
}

static void test_beyond_relative(void **state) {
  (void)state;
  off_by_one_ulp((tdm_tolerance){TDM_TOL_RELATIVE, TDM_ELEM_DOUBLE, 1e-17}, true);
}

/* Tasks that fail on the device (every launch, no retries): they are not
 * compared, and the comparisons cancelled with them are not reported as
 * the application's cancelled tasks. */
static void test_failed_tasks(void **state) {
  (void)state;
  test_log log;
  char dir[64];
  tdm_runtime *rt = make("*:1", "launch:p=1", &log, dir, sizeof dir);
  run(rt);
  tdm_verify_counts c = counts(rt);
  assert_int_equal(c.compared, 0);
  assert_int_equal(c.mismatched, 0);
  assert_int_equal(c.skipped, c.sampled);
  /* tdm_wait_all reports the application's tasks, as their callbacks
   * saw them: the comparisons cancelled with them are not among them */
  unsigned long failed = 0, cancelled = 0;
  const char *m = strstr(log.all, "tdm_wait_all: ");
  assert_non_null(m);
  assert_int_equal(sscanf(m, "tdm_wait_all: %lu", &failed), 1);
  const char *and = strstr(m, "failed and ");
  assert_non_null(and);
  assert_int_equal(sscanf(and, "failed and %lu", &cancelled), 1);
  assert_true(failed > 0);
  assert_int_equal(failed, atomic_load(&app_failed));
  assert_int_equal(cancelled, atomic_load(&app_cancelled));
  finish(rt, dir);
}

static void set_verify(tdm_config *cfg, const char *spec) {
  cfg->verify = spec;
}

/* Malformed specifications are refused, saying which term. */
static void test_bad_specifications(void **state) {
  (void)state;
  static const char *const bad[] = {"twice", "twice:0", "twice:1.5", ":0.5", "twice:x",
                                    ",twice:0.1", "twice:0.1,,grow:1", "twice:-1", "*:"};
  test_refused(bad, sizeof bad / sizeof bad[0], set_verify, "verify: bad term");
  /* the environment's is ignored with a warning (as every variable:
   * test-errors), and a good one is taken */
  setenv("TANDEM_VERIFY", "twice:2", 1);
  tdm_runtime *rt = NULL;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.bind_workers = 0;
  cfg.devices = "none";
  test_log log;
  test_log_attach(&cfg, &log);
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  tdm_runtime_destroy(rt);
  assert_true(test_log_has(&log, "ignoring TANDEM_VERIFY=\"twice:2\": verify: bad term"));
  setenv("TANDEM_VERIFY", "twice:0.5,*:0.01", 1);
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  unsetenv("TANDEM_VERIFY");
  tdm_verify_counts c = {.struct_size = sizeof c};
  assert_int_equal(tdm_runtime_verify_counts(rt, &c), TDM_OK);
  assert_int_equal(c.sampled, 0); /* no device: nothing to compare with */
  c.struct_size = 8;
  assert_int_equal(tdm_runtime_verify_counts(rt, &c), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_runtime_verify_counts(NULL, &c), TDM_ERR_INVALID_ARG);
  tdm_runtime_destroy(rt);
}

#ifdef TEST_WITH_OPENCL
/* PoCL: a kernel that rounds up where C rounds to nearest. */
static const char kernel_source[] =
    "kernel void twice(global const float *x, ulong n, global float *y, ulong m) {\n"
    "  size_t i = get_global_id(0);\n"
    "  if (i < n) y[i] = nextafter(x[i] * 2.0f, INFINITY);\n"
    "}\n";
static const tdm_opencl_variant twice_ocl = {.source = kernel_source, .kernel = "twice"};

static void twice_f(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  const float *x = b[0].ptr;
  float *y = b[1].ptr;
  for (size_t i = 0; i < b[0].nx; i++)
    y[i] = 2 * x[i];
}

static unsigned opencl_mismatches(tdm_tolerance tol, bool *ran) {
  tdm_codelet cl = {.name = "twice-f", .cpu_fn = twice_f, .opencl = &twice_ocl, .nbuffers = 2,
                    .modes = {TDM_R, TDM_W}, .tolerance = tol};
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.cache_dir = dir;
  cfg.opencl_cpu_devices = 1;
  cfg.scheduler = "eager";
  cfg.verify = "twice-f:1";
  test_log log;
  test_log_attach(&cfg, &log);
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  the_rt = rt;
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  *ran = mi.device_workers > 0;
  static float x[8][256], y[8][256];
  for (unsigned r = 0; *ran && r < 4; r++)
    for (unsigned h = 0; h < 8; h++) {
      for (unsigned i = 0; i < 256; i++)
        x[h][i] = 1.0f + (float)i / 3.0f;
      tdm_handle *hx, *hy;
      assert_int_equal(tdm_register_vector(rt, x[h], 256, sizeof(float), &hx), TDM_OK);
      assert_int_equal(tdm_register_vector(rt, y[h], 256, sizeof(float), &hy), TDM_OK);
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .handles = {hx, hy}}),
                       TDM_OK);
      assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
      assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
      /* what the task left: the CPU's results where the device's differed */
      for (unsigned i = 0; tol.kind == TDM_TOL_EXACT && i < 256; i++)
        assert_true(y[h][i] == 2 * x[h][i]);
    }
  tdm_status st = tdm_wait_all(rt);
  tdm_verify_counts c = counts(rt);
  assert_int_equal(st, c.mismatched ? TDM_ERR_MISMATCH : TDM_OK);
  if (*ran)
    assert_true(c.compared > 0);
  if (c.mismatched)
    assert_true(test_log_has(&log, "verify: codelet twice-f: device 0"));
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
  return (unsigned)c.mismatched;
}

static void test_opencl_kernel_one_ulp_off(void **state) {
  (void)state;
  bool ran;
  unsigned exact = opencl_mismatches((tdm_tolerance){TDM_TOL_EXACT, TDM_ELEM_FLOAT, 0}, &ran);
  assert_true(ran);
  assert_true(exact > 0);
  assert_int_equal(opencl_mismatches((tdm_tolerance){TDM_TOL_ULPS, TDM_ELEM_FLOAT, 1}, &ran),
                   0);
}
#endif

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "opencl")) {
#ifdef TEST_WITH_OPENCL
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.bind_workers = 0;
    cfg.opencl_cpu_devices = 1;
    tdm_runtime *rt = NULL;
    tdm_machine_info mi = {.struct_size = sizeof mi};
    if (tdm_runtime_create(&cfg, &rt) != TDM_OK || tdm_runtime_machine(rt, &mi) != TDM_OK ||
        !mi.device_workers) {
      tdm_runtime_destroy(rt);
      printf("no OpenCL CPU device here (install pocl-opencl-icd): skipped\n");
      return 77;
    }
    tdm_runtime_destroy(rt);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opencl_kernel_one_ulp_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    printf("built without OpenCL: skipped\n");
    return 77;
#endif
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_agreeing_device),   cmocka_unit_test(test_rate),
      cmocka_unit_test(test_handle_named_twice),
      cmocka_unit_test(test_mismatch_exact),    cmocka_unit_test(test_mismatch_bytes),
      cmocka_unit_test(test_within_ulps),       cmocka_unit_test(test_beyond_ulps),
      cmocka_unit_test(test_within_relative),
      cmocka_unit_test(test_beyond_relative),   cmocka_unit_test(test_failed_tasks),
      cmocka_unit_test(test_bad_specifications),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
