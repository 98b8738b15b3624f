/*
 * Kernels that cannot be launched as written, on PoCL (integrated or
 * discrete, as test-opencl-run):
 *
 *   test-opencl-kernels integrated | discrete
 *
 * Each kind of mismatch between a kernel's parameters and what Tandem
 * passes (too few, a uint for a ulong, a pointer where a value goes) and
 * a work size the driver refuses is a programming error: the variant is
 * disabled on the device once, the device is not quarantined and keeps
 * running a healthy codelet, the application is told (tdm_wait_all
 * returns TDM_ERR_KERNEL once, tdm_config.kernel_event_fn is called, the
 * log names codelet, kernel, what it declares and what Tandem passes),
 * and the results are right: the CPU variant ran them, or the tasks
 * ended with TDM_ERR_KERNEL where there is none. Then the opt-in
 * convention of pointers alone (TDM_OPENCL_POINTERS) on vectors and
 * matrices. Exits 77 (skip) where no OpenCL CPU device is installed.
 */
#include "opencl-fixture.h"

#define TASKS 12

/* ---- kernels that do not take what Tandem passes --------------------------- */

/* saxpy's parameters, as each bad kernel declares them */
#define BODY "{ size_t i = get_global_id(0); y[i] = a * x[i] + y[i]; }\n"
static const tdm_opencl_variant too_few_cl = {
    .source = "__kernel void saxpy(__global const float *x, ulong nx,\n"
              "                    __global float *y, ulong ny) { float a = 1;\n"
              "  size_t i = get_global_id(0); y[i] = a * x[i] + y[i]; }\n",
    .kernel = "saxpy"};
static const tdm_opencl_variant uint_cl = {
    .source = "__kernel void saxpy(__global const float *x, uint nx,\n"
              "                    __global float *y, uint ny, float a)" BODY,
    .kernel = "saxpy"};
static const tdm_opencl_variant order_cl = {
    .source = "__kernel void saxpy(__global const float *x, __global float *y,\n"
              "                    ulong nx, ulong ny, float a)" BODY,
    .kernel = "saxpy"};

/* a work-group size that does not divide the work size */
static void bad_local(const tdm_buffer *bufs, const void *args, size_t args_size,
                      unsigned *dims, size_t global[3], size_t local[3]) {
  (void)args;
  (void)args_size;
  *dims = 1;
  global[0] = bufs[0].rows;
  local[0] = 3;
}
static const tdm_opencl_variant work_cl = {
    .source = "__kernel void saxpy(__global const float *x, ulong nx,\n"
              "                    __global float *y, ulong ny, float a)" BODY,
    .kernel = "saxpy",
    .work_size = bad_local};

/* an escape hatch that sets its kernel up wrong */
static cl_int wrong_enqueue(cl_command_queue queue, const cl_mem *mems, const tdm_buffer *bufs,
                            const void *args, size_t args_size, cl_event *done) {
  (void)queue;
  (void)mems;
  (void)bufs;
  (void)args;
  (void)args_size;
  (void)done;
  return CL_INVALID_ARG_SIZE;
}
static const tdm_opencl_variant enqueue_cl = {.enqueue = wrong_enqueue};

static bool quarantined(tdm_runtime *rt) {
  tdm_device_info r = {.struct_size = sizeof r};
  assert_int_equal(tdm_runtime_device(rt, (unsigned)the_device(rt), &r), TDM_OK);
  return r.quarantined != 0;
}

/* TASKS saxpy tasks of cl (a = 2) into y, each on its own slice; then a
 * healthy codelet on the device. */
static void mismatch(const tdm_opencl_variant *bad, const char *says) {
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  atomic_store(&kernel_events, 0);
  atomic_store(&device_events, 0);
  atomic_store(&cpu_runs, 0);
  tdm_codelet cl = saxpy_both;
  cl.name = "bad saxpy";
  cl.opencl = bad;
  float *x = array(1, 1), *y = array(0, 0);
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
  /* tries on the device first: the runtime learns both classes */
  for (int i = 0; i < TASKS; i++)
    saxpy(rt, &cl, hx, hy, 2);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_KERNEL);
  assert_int_equal(tdm_wait_all(rt), TDM_OK); /* told once */
  assert_int_equal(atomic_load(&kernel_events), 1);
  assert_string_equal(kernel_event_codelet, "bad saxpy");
  assert_int_equal(atomic_load(&cpu_runs), TASKS); /* all of them, once each */
  assert_int_equal(atomic_load(&device_events), 0);
  assert_false(quarantined(rt));
  assert_true(test_log_has(&log, bad->enqueue ? "codelet bad saxpy, kernel (its enqueue function), on device"
                                              : "codelet bad saxpy, kernel saxpy, on device"));
  if (!test_log_has(&log, says))
    fprintf(stderr, "%s\n", log.all);
  assert_true(test_log_has(&log, says));
  assert_true(test_log_has(&log, "TDM_ERR_KERNEL"));
  /* later tasks of it go to the CPU without a word */
  unsigned errors = test_log_errors(&log);
  saxpy(rt, &cl, hx, hy, 2);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(test_log_errors(&log), errors);
  assert_int_equal(atomic_load(&cpu_runs), TASKS + 1);
  /* the device still runs the healthy codelet */
  uint64_t before = counters(rt).tasks;
  saxpy(rt, &saxpy_gpu_only, hx, hy, 2);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(counters(rt).tasks, before + 1);
  assert_int_equal(atomic_load(&kernel_events), 1);
  tdm_handle_unregister(hx);
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 2.0f * (TASKS + 2) * x[i]);
  run_end(rt, x, y);
}

static void test_too_few_params(void **state) {
  (void)state;
  mismatch(&too_few_cl, "declares 4 parameters where Tandem passes 5");
}

static void test_uint_for_ulong(void **state) {
  (void)state;
  /* from the parameters' sizes, or from the driver's refusal */
  mismatch(&uint_cl, "uint");
}

static void test_pointer_for_value(void **state) {
  (void)state;
  mismatch(&order_cl, "parameter 1 is a __global pointer");
}

static void test_work_group_size(void **state) {
  (void)state;
  mismatch(&work_cl, "CL_INVALID_WORK_GROUP_SIZE");
}

static void test_enqueue_function(void **state) {
  (void)state;
  mismatch(&enqueue_cl, "its enqueue function returned an error that says its arguments");
}

/* A codelet with only a bad OpenCL variant: its task ends with
 * TDM_ERR_KERNEL (not retried: one event, no quarantine), a submission
 * after that is refused at once, the handle keeps its contents. */
static void test_only_a_bad_kernel(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  atomic_store(&kernel_events, 0);
  atomic_store(&device_events, 0);
  static const tdm_codelet cl = {
      .name = "bad only", .nbuffers = 2, .modes = {TDM_R, TDM_RW}, .opencl = &too_few_cl};
  float *x = array(1, 1), *y = array(5, 0);
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
  float a = 2;
  tdm_task *t = NULL;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl, .handles = {hx, hy},
                                                        .args = &a, .args_size = sizeof a},
                                   &t),
                   TDM_OK);
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  assert_int_equal(tdm_task_wait(t), TDM_ERR_KERNEL);
  tdm_task_release(t);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  assert_int_equal(tdm_wait_all(rt), TDM_OK); /* the disabled variant told with the failure */
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .handles = {hx, hy},
                                                    .args = &a, .args_size = sizeof a}),
                   TDM_ERR_KERNEL);
  assert_true(test_log_has(&log, "tdm_submit: codelet bad only: no device can run its OpenCL "
                                 "variant (ERR_KERNEL"));
  assert_int_equal(atomic_load(&kernel_events), 1);
  assert_int_equal(atomic_load(&device_events), 0);
  assert_false(quarantined(rt));
  tdm_handle_unregister(hx);
  assert_int_equal(tdm_handle_unregister(hy), TDM_ERR_LOST);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 5.0f);
  run_end(rt, x, y);
}

/* ---- pointers alone ---------------------------------------------------------- */

static const tdm_opencl_variant saxpy_pointers_cl = {
    .source = "__kernel void saxpy(__global const float *x, __global float *y, float a)" BODY,
    .kernel = "saxpy",
    .flags = TDM_OPENCL_POINTERS};
static const tdm_codelet saxpy_pointers = {.name = "saxpy (pointers)",
                                           .nbuffers = 2,
                                           .modes = {TDM_R, TDM_RW},
                                           .opencl = &saxpy_pointers_cl};

/* m[r][c] += r * 1000 + c: the shape in the by-value arguments */
typedef struct {
  cl_ulong rows, cols;
} shape;
static void mark_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  float *m = b[0].ptr;
  for (size_t r = 0; r < b[0].rows; r++)
    for (size_t c = 0; c < b[0].cols; c++)
      m[r * b[0].ld + c] += (float)(r * 1000 + c);
  atomic_fetch_add(&cpu_runs, 1);
}
static const tdm_opencl_variant mark_cl = {
    .source = "typedef struct { ulong rows, cols; } shape;\n"
              "__kernel void mark(__global float *m, shape s) {\n"
              "  size_t c = get_global_id(0), r = get_global_id(1);\n"
              "  m[r * s.cols + c] += (float)(r * 1000 + c);\n"
              "}\n",
    .kernel = "mark",
    .flags = TDM_OPENCL_POINTERS};
static const tdm_codelet mark = {.name = "mark",
                                 .cpu_fn = mark_cpu,
                                 .nbuffers = 1,
                                 .modes = {TDM_RW},
                                 .opencl = &mark_cl};

static void test_pointers_only(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  atomic_store(&kernel_events, 0);
  float *x = array(1, 1), *y = array(0, 0);
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
  uint64_t before = counters(rt).tasks;
  saxpy(rt, &saxpy_pointers, hx, hy, 3);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(counters(rt).tasks, before + 1);
  tdm_handle_unregister(hx);
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 3.0f * x[i]);

  /* a whole matrix (rows != cols: a transposed loop would show), on
   * the device */
  enum { R = 48, C = 64 };
  float *m = tdm_malloc(R * C * sizeof *m);
  for (int i = 0; i < R * C; i++)
    m[i] = 0;
  tdm_handle *hm;
  assert_int_equal(tdm_register_matrix(rt, m, C, R, C, sizeof *m, &hm), TDM_OK);
  tdm_task *t;
  shape s = {R, C};
  tdm_codelet on_device = mark;
  on_device.cpu_fn = NULL;
  before = counters(rt).tasks;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &on_device, .handles = {hm},
                                                        .args = &s, .args_size = sizeof s},
                                   &t),
                   TDM_OK);
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  assert_int_equal(tdm_task_wait(t), TDM_OK);
  tdm_task_release(t);
  assert_int_equal(counters(rt).tasks, before + 1);
  /* its tiles (16 x 32): packed on a discrete device; on one working in
   * the host's memory, the CPU variant takes them */
  assert_int_equal(tdm_matrix_partition(hm, 16, 32, 0), TDM_OK);
  atomic_store(&cpu_runs, 0);
  before = counters(rt).tasks;
  shape ts = {16, 32};
  for (unsigned i = 0; i < 3; i++)
    for (unsigned j = 0; j < 2; j++) {
      tdm_handle *tile = tdm_matrix_tile(hm, i, j);
      assert_non_null(tile);
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &mark, .handles = {tile},
                                                        .args = &ts, .args_size = sizeof ts}),
                       TDM_OK);
    }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  uint64_t on_dev = counters(rt).tasks - before;
  assert_int_equal(on_dev + atomic_load(&cpu_runs), 6);
  if (!discrete)
    assert_int_equal(on_dev, 0);
  assert_int_equal(tdm_matrix_unpartition(hm, 0), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hm), TDM_OK);
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++)
      assert_true(m[r * C + c] == (float)(r * 1000 + c) + (float)((r % 16) * 1000 + c % 32));
  assert_int_equal(atomic_load(&kernel_events), 0);
  tdm_free(m);
  run_end(rt, x, y);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_too_few_params),    cmocka_unit_test(test_uint_for_ulong),
      cmocka_unit_test(test_pointer_for_value), cmocka_unit_test(test_work_group_size),
      cmocka_unit_test(test_enqueue_function),
      cmocka_unit_test(test_only_a_bad_kernel), cmocka_unit_test(test_pointers_only),
  };
  return opencl_fixture_main(argc, argv, "test-opencl-kernels", tests,
                             sizeof tests / sizeof *tests, NULL, 0, NULL, 0);
}
