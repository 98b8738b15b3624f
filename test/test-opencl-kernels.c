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

static const tdm_opencl_variant double_cl = {
    .source = "__kernel void saxpy(__global const float *x, double nx,\n"
              "                    __global float *y, ulong ny, float a)" BODY,
    .kernel = "saxpy"};
static const tdm_opencl_variant wide_cl = {
    .source = "__kernel void saxpy(__global const double *x, ulong nx,\n"
              "                    __global float *y, ulong ny, float a)" BODY,
    .kernel = "saxpy"};
static const tdm_opencl_variant image_cl = {
    .source = "__kernel void saxpy(__read_only image2d_t x, ulong nx,\n"
              "                    __global float *y, ulong ny, float a) {\n"
              "  y[get_global_id(0)] += a; }\n",
    .kernel = "saxpy"};

/* no work at all: OpenCL 2.1 would call it success */
static void zero_size(const tdm_buffer *bufs, const void *args, size_t args_size,
                      unsigned *dims, size_t global[3], size_t local[3]) {
  (void)bufs;
  (void)args;
  (void)args_size;
  (void)local;
  *dims = 1;
  global[0] = 0;
}
static const tdm_opencl_variant zero_cl = {
    .source = "__kernel void saxpy(__global const float *x, ulong nx,\n"
              "                    __global float *y, ulong ny, float a)" BODY,
    .kernel = "saxpy",
    .work_size = zero_size};

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

/* Each kind of mismatch, and what the log says of it. */
static void test_each_mismatch(void **state) {
  (void)state;
  static const struct {
    const tdm_opencl_variant *variant;
    const char *says;
  } kinds[] = {
      {&too_few_cl, "declares 4 parameters where Tandem passes 5"},
      /* from the parameters' sizes, or from the driver's refusal */
      {&uint_cl, "uint"},
      {&order_cl, "parameter 1 is a __global pointer"},
      {&work_cl, "CL_INVALID_WORK_GROUP_SIZE"},
      {&double_cl, "parameter 1 is a double (8 bytes), where Tandem passes a ulong"},
      {&wide_cl, "parameter 0 points to 8-byte elements (double*)"},
      {&image_cl, "parameter 0 is a image2d_t, which Tandem never passes"},
      {&zero_cl, "CL_INVALID_GLOBAL_WORK_SIZE"},
      {&enqueue_cl, "its enqueue function returned an error that says its arguments"},
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    mismatch(kinds[i].variant, kinds[i].says);
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

/* ---- enqueue functions that fail after doing something ------------------------ */

/* Returns success and an event that had failed already. */
static cl_int failed_event(cl_command_queue queue, const cl_mem *mems, const tdm_buffer *bufs,
                           const void *args, size_t args_size, cl_event *done) {
  (void)mems;
  (void)bufs;
  (void)args;
  (void)args_size;
  cl_context ctx;
  cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
  cl_event e = err ? NULL : clCreateUserEvent(ctx, &err);
  if (!e)
    return err ? err : CL_OUT_OF_HOST_MEMORY;
  clSetUserEventStatus(e, CL_OUT_OF_RESOURCES);
  *done = e;
  return CL_SUCCESS;
}

/* Runs saxpy (its own kernel), then says it failed. */
static cl_int wrote_then_failed(cl_command_queue queue, const cl_mem *mems,
                                const tdm_buffer *bufs, const void *args, size_t args_size,
                                cl_event *done) {
  (void)args_size;
  (void)done;
  static cl_kernel k;
  cl_context ctx;
  cl_device_id dev;
  cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
  if (!err)
    err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  if (!err && !k) {
    const char *src = saxpy_cl.source;
    cl_program prog = clCreateProgramWithSource(ctx, 1, (const char **)&src, NULL, &err);
    if (!err)
      err = clBuildProgram(prog, 1, &dev, NULL, NULL, NULL);
    if (!err)
      k = clCreateKernel(prog, "saxpy", &err);
    clReleaseProgram(prog);
  }
  cl_ulong n = bufs[0].rows;
  size_t global = n;
  if (!err)
    err = clSetKernelArg(k, 0, sizeof(cl_mem), &mems[0]) | clSetKernelArg(k, 1, 8, &n) |
          clSetKernelArg(k, 2, sizeof(cl_mem), &mems[1]) | clSetKernelArg(k, 3, 8, &n) |
          clSetKernelArg(k, 4, sizeof(float), args);
  if (!err)
    err = clEnqueueNDRangeKernel(queue, k, 1, NULL, &global, NULL, 0, NULL, NULL);
  return err ? err : CL_OUT_OF_RESOURCES;
}

/* An enqueue function whose event had failed when it returned: the task
 * is not reported done (it ends with an error, the data untouched); one
 * that wrote (on a device working in host memory) and then failed: its
 * writes are undone before the CPU variant runs the task again, which
 * applies saxpy once, not twice. */
static void test_enqueue_failures(void **state) {
  (void)state;
  static const tdm_opencl_variant failed_cl = {.enqueue = failed_event};
  static const tdm_opencl_variant wrote_cl = {.enqueue = wrote_then_failed};
  static const tdm_codelet failed_only = {
      .name = "failed event", .nbuffers = 2, .modes = {TDM_R, TDM_RW}, .opencl = &failed_cl};
  tdm_codelet wrote = saxpy_both;
  wrote.name = "wrote then failed";
  wrote.opencl = &wrote_cl;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *x = array(1, 1), *y = array(5, 0);
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
  saxpy(rt, &failed_only, hx, hy, 2);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  tdm_handle_unregister(hx);
  assert_int_equal(tdm_handle_unregister(hy), TDM_ERR_LOST);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 5.0f);
  run_end(rt, x, y);

  rt = device_runtime(&log, 1);
  x = array(1, 1);
  y = array(5, 0);
  hx = vector_of(rt, x);
  hy = vector_of(rt, y);
  atomic_store(&cpu_runs, 0);
  for (int i = 0; i < 4; i++) /* the device is tried first: each fails there */
    saxpy(rt, &wrote, hx, hy, 2);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  tdm_handle_unregister(hx);
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  assert_true(atomic_load(&cpu_runs) >= 1);
  for (int i = 0; i < N; i++)
    if (y[i] != 5.0f + 4 * 2.0f * x[i])
      fail_msg("y[%d] = %g, not %g: a failed try's writes were kept", i, y[i],
               5.0f + 8.0f * x[i]);
  run_end(rt, x, y);
}

/* ---- what an enqueue function may not call ----------------------------------- */

static tdm_runtime *calling_rt;
static _Atomic int from_enqueue[4] = {1, 1, 1, 1};

/* Calls what would take its device's lock or wait, then gives up. */
static cl_int calls_back(cl_command_queue queue, const cl_mem *mems, const tdm_buffer *bufs,
                         const void *args, size_t args_size, cl_event *done) {
  (void)queue;
  (void)mems;
  (void)bufs;
  (void)args;
  (void)args_size;
  (void)done;
  static const tdm_codelet nothing = {.name = "nothing"};
  atomic_store(&from_enqueue[0], tdm_submit(calling_rt, &(tdm_task_desc){.codelet = &nothing}));
  atomic_store(&from_enqueue[1], tdm_runtime_resume(calling_rt));
  atomic_store(&from_enqueue[2], tdm_wait_all(calling_rt));
  atomic_store(&from_enqueue[3], tdm_codelet_build(calling_rt, &nothing, NULL, NULL));
  return CL_INVALID_KERNEL_ARGS;
}

/* They return TDM_ERR_IN_TASK instead of waiting forever for the lock
 * the function runs under. */
static void test_enqueue_calling_back(void **state) {
  (void)state;
  static const tdm_opencl_variant cl = {.enqueue = calls_back};
  tdm_codelet both = saxpy_both;
  both.name = "calls back";
  both.opencl = &cl;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  calling_rt = rt;
  float *x = array(1, 1), *y = array(0, 0);
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
  for (int i = 0; i < 4; i++)
    saxpy(rt, &both, hx, hy, 1);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_KERNEL);
  for (int i = 0; i < 4; i++)
    assert_int_equal(atomic_load(&from_enqueue[i]), TDM_ERR_IN_TASK);
  assert_true(test_log_has(&log, "tdm_submit called from an enqueue or work-size function"));
  tdm_handle_unregister(hx);
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 4.0f * x[i]);
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
      cmocka_unit_test(test_each_mismatch),     cmocka_unit_test(test_enqueue_failures),
      cmocka_unit_test(test_enqueue_calling_back),
      cmocka_unit_test(test_only_a_bad_kernel), cmocka_unit_test(test_pointers_only),
  };
  return opencl_fixture_main(argc, argv, "test-opencl-kernels", tests,
                             sizeof tests / sizeof *tests, NULL, 0, NULL, 0);
}
