/*
 * Tasks on a real OpenCL device: PoCL, admitted as a device, made to
 * behave as an integrated GPU (no copies) or as a discrete one (copies):
 *
 *   test-opencl-run integrated | discrete
 *
 * Vector add; a SAXPY chain alternating CPU and OpenCL tasks on the same
 * handles (coherence); byte counters (integrated: zero; discrete: exactly
 * what the graph needs); a device-only chain; tasks with both variants;
 * a tiled matrix multiply (device only, and mixed with the CPU); a task
 * enqueueing its own commands; eviction under a small device-memory limit;
 * a buffer too large for the device; the on-disk program cache (reused,
 * corrupt and truncated entries); a kernel that does not build; an
 * OpenCL-only task without a device; completion callbacks, which submit,
 * on launches and runs that fail (injected) and on cancelled tasks; a
 * callback on an event that fails, which PoCL never calls itself.
 * Exits 77 (skip) where no OpenCL CPU device is installed.
 */
#include "common.h"

#include "internal.h" /* the device fault seam */
#include "tandem/opencl.h"
#include "../backends/opencl/device.h" /* the completion watcher */

#include <dirent.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 4096

static bool discrete;

static uint64_t memory_limit; /* for the next runtime */
static int writeback;          /* for the next runtime */
static char cache_dir[128];   /* a fresh one per run of this program */

static _Atomic unsigned device_events;

static void on_device_event(void *data, unsigned device, const char *why) {
  (void)data;
  (void)device;
  assert_non_null(why);
  atomic_fetch_add(&device_events, 1);
}

static tdm_runtime *device_runtime(test_log *log, int admit) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.device_event_fn = on_device_event;
  cfg.device_memory_limit = memory_limit;
  cfg.writeback = writeback;
  cfg.cache_dir = cache_dir;
  cfg.ignore_env = 1;
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.opencl_cpu_devices = admit;
  cfg.device_memory = discrete ? TDM_MEMORY_SEPARATE : TDM_MEMORY_SHARED;
  test_log_attach(&cfg, log);
  cfg.log_level = TDM_LOG_INFO;
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  return rt;
}

/* The device PoCL is, and its counters. */
static int the_device(tdm_runtime *rt) {
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  for (unsigned i = 0; i < mi.opencl_devices; i++) {
    tdm_device_info d = {.struct_size = sizeof d};
    assert_int_equal(tdm_runtime_device(rt, i, &d), TDM_OK);
    if (d.used)
      return (int)i;
  }
  return -1;
}

static tdm_device_counters counters(tdm_runtime *rt) {
  tdm_device_counters c = {.struct_size = sizeof c};
  assert_int_equal(tdm_runtime_device_counters(rt, (unsigned)the_device(rt), &c), TDM_OK);
  return c;
}

/* ---- two devices (PoCL with POCL_DEVICES="pthread pthread") -------------
 * Each device has its own OpenCL context: data moves between them through
 * the host, and commands wait for events of the other context through
 * joined user events. Placement spreads tasks over the devices by load,
 * so the tests check results, and counts per device that do not depend on
 * which device ran what. */

static unsigned used_devices(tdm_runtime *rt, unsigned *ids) {
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  unsigned n = 0;
  for (unsigned i = 0; i < mi.opencl_devices; i++) {
    tdm_device_info d = {.struct_size = sizeof d};
    assert_int_equal(tdm_runtime_device(rt, i, &d), TDM_OK);
    if (d.used)
      ids[n++] = i;
  }
  return n;
}

/* ---- kernels and their CPU twins ---------------------------------------- */

static const tdm_opencl_variant vadd_cl = {
    .source = "__kernel void vadd(__global const float *a, ulong na,\n"
              "                   __global const float *b, ulong nb,\n"
              "                   __global float *c, ulong nc) {\n"
              "  size_t i = get_global_id(0);\n"
              "  c[i] = a[i] + b[i];\n"
              "}\n",
    .kernel = "vadd"};
static const tdm_codelet vadd = {
    .name = "vadd", .nbuffers = 3, .modes = {TDM_R, TDM_R, TDM_W}, .opencl = &vadd_cl};

static const tdm_opencl_variant saxpy_cl = {
    .source = "__kernel void saxpy(__global const float *x, ulong nx,\n"
              "                    __global float *y, ulong ny, float a) {\n"
              "  size_t i = get_global_id(0);\n"
              "  y[i] = a * x[i] + y[i];\n"
              "}\n",
    .kernel = "saxpy"};

static _Atomic unsigned cpu_runs;

static void saxpy_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  float a = *(const float *)args;
  const float *x = b[0].ptr;
  float *y = b[1].ptr;
  for (size_t i = 0; i < b[0].nx; i++)
    y[i] = a * x[i] + y[i];
  atomic_fetch_add(&cpu_runs, 1);
}

static const tdm_codelet saxpy_gpu_only = {
    .name = "saxpy (OpenCL)", .nbuffers = 2, .modes = {TDM_R, TDM_RW}, .opencl = &saxpy_cl};
static const tdm_codelet saxpy_cpu_only = {
    .name = "saxpy (CPU)", .cpu_fn = saxpy_cpu, .nbuffers = 2, .modes = {TDM_R, TDM_RW}};
static const tdm_codelet saxpy_both = {.name = "saxpy (both)",
                                       .cpu_fn = saxpy_cpu,
                                       .nbuffers = 2,
                                       .modes = {TDM_R, TDM_RW},
                                       .opencl = &saxpy_cl};

static float *array(float first, float step) {
  float *p = tdm_malloc(N * sizeof *p);
  assert_non_null(p);
  for (int i = 0; i < N; i++)
    p[i] = first + step * (float)(i % 100);
  return p;
}

static void saxpy(tdm_runtime *rt, const tdm_codelet *cl, tdm_handle *x, tdm_handle *y, float a) {
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = cl,
                                                    .handles = {x, y},
                                                    .args = &a,
                                                    .args_size = sizeof a}),
                   TDM_OK);
}

/* ---- tests -------------------------------------------------------------- */

static const tdm_opencl_variant scale_cl = {
    .source = "__kernel void scale(__global const float *x, ulong nx,\n"
              "                    __global float *y, ulong ny) {\n"
              "  size_t i = get_global_id(0);\n"
              "  y[i] = 2.0f * x[i];\n"
              "}\n",
    .kernel = "scale"};
static const tdm_codelet scale = {
    .name = "scale", .nbuffers = 2, .modes = {TDM_R, TDM_W}, .opencl = &scale_cl};

/* Readers of one vector on two devices: each device that ran one gets its
 * own copy, once; each output comes home once. */
static void test_two_devices_readers(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  unsigned ids[8];
  assert_int_equal(used_devices(rt, ids), 2);
  enum { T = 16 };
  float *x = array(1, 1), *ys[T];
  tdm_handle *hx, *hy[T];
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  for (int t = 0; t < T; t++) {
    ys[t] = array(0, 0);
    assert_int_equal(tdm_register_vector(rt, ys[t], N, sizeof(float), &hy[t]), TDM_OK);
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &scale, .handles = {hx, hy[t]}}),
                     TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  for (int t = 0; t < T; t++)
    assert_int_equal(tdm_handle_unregister(hy[t]), TDM_OK);
  uint64_t tasks = 0;
  const uint64_t bytes = N * sizeof(float);
  for (int k = 0; k < 2; k++) {
    tdm_device_counters c = {.struct_size = sizeof c};
    assert_int_equal(tdm_runtime_device_counters(rt, ids[k], &c), TDM_OK);
    printf("device %u: %llu tasks, %llu bytes in, %llu out\n", ids[k],
           (unsigned long long)c.tasks, (unsigned long long)c.bytes_to_device,
           (unsigned long long)c.bytes_to_host);
    tasks += c.tasks;
    if (discrete) {
      assert_int_equal(c.bytes_to_device, c.tasks ? bytes : 0); /* x, once */
      assert_int_equal(c.bytes_to_host, c.tasks * bytes);      /* each y */
    }
  }
  assert_int_equal(tasks, T);
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < N; i++)
      assert_true(ys[t][i] == 2 * x[i]);
    tdm_free(ys[t]);
  }
  tdm_handle_unregister(hx);
  tdm_runtime_destroy(rt);
  tdm_free(x);
  assert_int_equal(test_log_errors(&log), 0);
}

static void test_vector_add(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *a = array(1, 1), *b = array(1000, 2), *c = array(0, 0);
  tdm_handle *ha, *hb, *hc;
  assert_int_equal(tdm_register_vector(rt, a, N, sizeof(float), &ha), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, b, N, sizeof(float), &hb), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, c, N, sizeof(float), &hc), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &vadd, .handles = {ha, hb, hc}}),
                   TDM_OK);
  assert_int_equal(tdm_handle_acquire(hc, TDM_R), TDM_OK); /* brings c home */
  for (int i = 0; i < N; i++)
    assert_true(c[i] == a[i] + b[i]);
  assert_int_equal(tdm_handle_release(hc), TDM_OK);
  tdm_device_counters k = counters(rt);
  assert_int_equal(k.tasks, 1);
  const uint64_t bytes = N * sizeof(float);
  /* discrete: a and b go there, c comes back; integrated: nothing moves */
  assert_int_equal(k.bytes_to_device, discrete ? 2 * bytes : 0);
  assert_int_equal(k.bytes_to_host, discrete ? bytes : 0);
  assert_int_equal(k.copies_to_device, discrete ? 2 : 0);
  assert_int_equal(k.copies_to_host, discrete ? 1 : 0);
  tdm_handle_unregister(ha);
  tdm_handle_unregister(hb);
  tdm_handle_unregister(hc);
  assert_int_equal(counters(rt).bytes_to_host, k.bytes_to_host); /* nothing more */
  tdm_runtime_destroy(rt);
  tdm_free(a);
  tdm_free(b);
  tdm_free(c);
  assert_int_equal(test_log_errors(&log), 0);
}

/* y = 2x + y six times, the steps alternating between the device and the
 * CPU: each step must see the previous one's result wherever it ran. */
static void test_saxpy_chain_alternating(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *x = array(1, 1), *y = array(3, 1);
  float *ref = array(3, 1);
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  atomic_store(&cpu_runs, 0);
  const int steps = 6;
  for (int s = 0; s < steps; s++) {
    saxpy(rt, s % 2 ? &saxpy_cpu_only : &saxpy_gpu_only, hx, hy, 2.0f);
    for (int i = 0; i < N; i++)
      ref[i] = 2.0f * x[i] + ref[i];
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  tdm_device_counters k = counters(rt);
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK); /* y comes home */
  assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
  for (int i = 0; i < N; i++)
    if (y[i] != ref[i])
      fail_msg("y[%d] = %g, expected %g", i, (double)y[i], (double)ref[i]);
  assert_int_equal(k.tasks, steps / 2);
  assert_int_equal(atomic_load(&cpu_runs), steps / 2);
  const uint64_t bytes = N * sizeof(float);
  /* discrete: x goes once (it is only read), y goes before each device
   * step and comes back before each CPU step */
  assert_int_equal(k.bytes_to_device, discrete ? (1 + steps / 2) * bytes : 0);
  assert_int_equal(k.bytes_to_host, discrete ? (steps / 2) * bytes : 0);
  assert_int_equal(counters(rt).bytes_to_host, k.bytes_to_host); /* the last step ran on the CPU */
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(y);
  tdm_free(ref);
  assert_int_equal(test_log_errors(&log), 0);
}

/* A chain on the device alone: integrated moves nothing; discrete moves
 * the inputs in once and the result out once, when it is unregistered, or
 * when the runtime is destroyed with the handles still registered. */
static void device_chain(bool by_destroy) {
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *x = array(1, 0), *y = array(0, 0);
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  const int steps = 20;
  for (int s = 0; s < steps; s++)
    saxpy(rt, &saxpy_gpu_only, hx, hy, 1.0f);
  if (!by_destroy) {
    assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
    assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
    tdm_device_counters k = counters(rt);
    const uint64_t bytes = N * sizeof(float);
    assert_int_equal(k.tasks, steps);
    assert_int_equal(k.bytes_to_device, discrete ? 2 * bytes : 0);
    assert_int_equal(k.bytes_to_host, discrete ? bytes : 0);
  }
  tdm_runtime_destroy(rt); /* waits, and brings y home */
  for (int i = 0; i < N; i++)
    assert_true(y[i] == (float)steps);
  tdm_free(x);
  tdm_free(y);
  assert_int_equal(test_log_errors(&log), 0);
}

/* ---- callbacks when tasks fail ------------------------------------------ */

#define CHAIN 40

static tdm_runtime *cb_rt;
static _Thread_local bool in_submit; /* the test thread, inside tdm_submit */
static _Atomic unsigned cb_runs, cb_inside, cb_submitted, cb_children;
static _Atomic int cb_outcome[CHAIN];

static void child(const tdm_buffer *b, const void *args, size_t size) {
  (void)b;
  (void)args;
  (void)size;
  atomic_fetch_add(&cb_children, 1);
}

/* Records the outcome, notes a run inside the application's tdm_submit,
 * and submits a task (which the header allows). */
static void on_end(void *data) {
  static const tdm_codelet cl = {.name = "child", .cpu_fn = child};
  atomic_store(&cb_outcome[(intptr_t)data], (int)tdm_callback_status());
  atomic_fetch_add(&cb_runs, 1);
  if (in_submit)
    atomic_fetch_add(&cb_inside, 1);
  if (tdm_submit(cb_rt, &(tdm_task_desc){.codelet = &cl}) == TDM_OK)
    atomic_fetch_add(&cb_submitted, 1);
}

static void reset_counts(void) {
  atomic_store(&cb_runs, 0);
  atomic_store(&cb_inside, 0);
  atomic_store(&cb_submitted, 0);
  atomic_store(&cb_children, 0);
}

/* Task i: y += x on the device, with on_end; submitted as the application
 * does, in_submit set meanwhile. */
static void submit_watched(tdm_handle *hx, tdm_handle *hy, intptr_t i) {
  static const float a = 1.0f;
  atomic_store(&cb_outcome[i], 1);
  in_submit = true;
  tdm_status st = tdm_submit(cb_rt, &(tdm_task_desc){.codelet = &saxpy_gpu_only,
                                                      .handles = {hx, hy},
                                                      .args = &a,
                                                      .args_size = sizeof a,
                                                      .callback = on_end,
                                                      .callback_data = (void *)i});
  in_submit = false;
  assert_int_equal(st, TDM_OK);
}

/* A chain of OpenCL-only tasks with launch or run faults at rate p (one
 * device, no CPU variant: nothing to retry on): done tasks, then one
 * failed, then the rest cancelled; every callback runs once, none inside
 * the application's tdm_submit, each submits; y keeps the last version
 * produced and reports it lost. A failed run on a discrete device replaced
 * a version only the device held: kept with writeback. */
static void chain_with_faults(unsigned kind, double p) {
  test_log log;
  writeback = kind == TDM_FAULT_COMPLETE;
  cb_rt = device_runtime(&log, 1);
  writeback = 0;
  tdm__faults_set(cb_rt, kind, p, 5);
  float *x = array(1, 0), *y = array(0, 0);
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(cb_rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(cb_rt, y, N, sizeof(float), &hy), TDM_OK);
  reset_counts();
  for (intptr_t i = 0; i < CHAIN; i++)
    submit_watched(hx, hy, i);
  assert_int_equal(tdm_wait_all(cb_rt), TDM_ERR_TASK_FAILED);
  assert_int_equal(tdm_wait_all(cb_rt), TDM_OK); /* reported once */
  assert_int_equal(atomic_load(&cb_runs), CHAIN);
  assert_int_equal(atomic_load(&cb_inside), 0);
  assert_int_equal(atomic_load(&cb_submitted), CHAIN);
  assert_int_equal(atomic_load(&cb_children), CHAIN);
  int done = 0;
  while (done < CHAIN && atomic_load(&cb_outcome[done]) == TDM_OK)
    done++;
  assert_true(done < CHAIN);
  assert_int_equal(atomic_load(&cb_outcome[done]), TDM_ERR_SYSTEM);
  for (int i = done + 1; i < CHAIN; i++)
    assert_int_equal(atomic_load(&cb_outcome[i]), TDM_ERR_CANCELLED);
  assert_int_equal(tdm_handle_acquire(hy, TDM_R), TDM_ERR_LOST);
  assert_int_equal(tdm_handle_unregister(hy), TDM_ERR_LOST);
  assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
  tdm_runtime_destroy(cb_rt);
  for (int i = 0; i < N; i++) /* the version the done tasks produced */
    assert_true(y[i] == (float)done);
  printf("%s faults: %d done, 1 failed, %d cancelled\n",
         kind == TDM_FAULT_LAUNCH ? "launch" : "run", done, CHAIN - done - 1);
  tdm_free(x);
  tdm_free(y);
}

/* Independent OpenCL-only tasks, half of whose launches fail: each is
 * launched from the thread that submits it, inside tdm_submit, and its
 * end (callback, which submits) must come later, elsewhere. Failing so
 * often, the device is quarantined (once, said through the event
 * callback and tdm_device_info): the tasks after that find no device. */
static void independent_with_launch_faults(void) {
  test_log log;
  atomic_store(&device_events, 0);
  cb_rt = device_runtime(&log, 1);
  tdm__faults_set(cb_rt, TDM_FAULT_LAUNCH, 0.5, 3);
  float *x = array(1, 0), *y[CHAIN];
  tdm_handle *hx, *hy[CHAIN];
  assert_int_equal(tdm_register_vector(cb_rt, x, N, sizeof(float), &hx), TDM_OK);
  reset_counts();
  for (intptr_t i = 0; i < CHAIN; i++) {
    y[i] = array(0, 0);
    assert_int_equal(tdm_register_vector(cb_rt, y[i], N, sizeof(float), &hy[i]), TDM_OK);
    submit_watched(hx, hy[i], i);
  }
  assert_int_equal(tdm_wait_all(cb_rt), TDM_ERR_TASK_FAILED);
  assert_int_equal(atomic_load(&cb_inside), 0);
  assert_int_equal(atomic_load(&cb_runs), CHAIN);
  assert_int_equal(atomic_load(&cb_children), CHAIN);
  unsigned failed = 0, no_device = 0;
  for (int i = 0; i < CHAIN; i++) {
    int got = atomic_load(&cb_outcome[i]);
    assert_true(got == TDM_OK || got == TDM_ERR_SYSTEM || got == TDM_ERR_NO_DEVICE);
    failed += got != TDM_OK;
    if (got == TDM_ERR_NO_DEVICE)
      no_device++;
    else /* nothing ran there once it was out */
      assert_int_equal(no_device, 0);
    assert_int_equal(tdm_handle_unregister(hy[i]), got == TDM_OK ? TDM_OK : TDM_ERR_LOST);
    assert_true(y[i][0] == (got == TDM_OK ? 1.0f : 0.0f));
    tdm_free(y[i]);
  }
  assert_true(failed >= 3);
  tdm_device_info d = {.struct_size = sizeof d};
  assert_int_equal(tdm_runtime_device(cb_rt, (unsigned)the_device(cb_rt), &d), TDM_OK);
  assert_int_equal(d.quarantined, 1);
  assert_non_null(strstr(d.quarantine_reason, "failed tries"));
  assert_int_equal(atomic_load(&device_events), 1);
  assert_true(no_device > 0);
  assert_true(test_log_has(&log, "taken out of placement"));
  printf("quarantined after %u failures; %u tasks then found no device\n", failed - no_device,
         no_device);
  assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
  tdm_runtime_destroy(cb_rt);
  tdm_free(x);
}

static void test_callbacks_on_failures(void **state) {
  (void)state;
  independent_with_launch_faults();
  chain_with_faults(TDM_FAULT_LAUNCH, 0.1);
  chain_with_faults(TDM_FAULT_COMPLETE, 0.1);
}

static void test_device_chain(void **state) {
  (void)state;
  device_chain(false);
}

static void test_device_chain_home_at_destroy(void **state) {
  (void)state;
  device_chain(true);
}

/* Independent tasks with both variants: every one runs once, somewhere. */
static void test_both_variants(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  enum { T = 40 };
  float *x = array(1, 1);
  float *ys[T];
  tdm_handle *hx, *hy[T];
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  atomic_store(&cpu_runs, 0);
  for (int t = 0; t < T; t++) {
    ys[t] = array((float)t, 0);
    assert_int_equal(tdm_register_vector(rt, ys[t], N, sizeof(float), &hy[t]), TDM_OK);
    saxpy(rt, &saxpy_both, hx, hy[t], 3.0f);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  for (int t = 0; t < T; t++)
    assert_int_equal(tdm_handle_unregister(hy[t]), TDM_OK);
  tdm_device_counters k = counters(rt);
  printf("tasks with both variants: %u on the CPU, %llu on the device\n",
         atomic_load(&cpu_runs), (unsigned long long)k.tasks);
  assert_int_equal(atomic_load(&cpu_runs) + k.tasks, T);
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < N; i++)
      assert_true(ys[t][i] == 3.0f * x[i] + (float)t);
    tdm_free(ys[t]);
  }
  tdm_handle_unregister(hx);
  tdm_runtime_destroy(rt);
  tdm_free(x);
  assert_int_equal(test_log_errors(&log), 0);
}

/* ---- a tiled matrix multiply -------------------------------------------- */

static const tdm_opencl_variant gemm_cl = {
    .source = "__kernel void gemm(__global const float *a, ulong ar, ulong ac, ulong lda,\n"
              "                   __global const float *b, ulong br, ulong bc, ulong ldb,\n"
              "                   __global float *c, ulong cr, ulong cc, ulong ldc) {\n"
              "  size_t j = get_global_id(0), i = get_global_id(1);\n"
              "  float s = c[i * ldc + j];\n"
              "  for (ulong k = 0; k < ac; k++)\n"
              "    s += a[i * lda + k] * b[k * ldb + j];\n"
              "  c[i * ldc + j] = s;\n"
              "}\n",
    .kernel = "gemm",
    .work_size = NULL};

/* one work-item per element of C (buffer 2), not of A */
static void gemm_size(const tdm_buffer *b, const void *args, size_t size, unsigned *dims,
                      size_t global[3], size_t local[3]) {
  (void)args;
  (void)size;
  (void)local;
  *dims = 2;
  global[0] = b[2].ny;
  global[1] = b[2].nx;
}

static void gemm_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  const float *a = b[0].ptr, *bb = b[1].ptr;
  float *c = b[2].ptr;
  for (size_t i = 0; i < b[2].nx; i++)
    for (size_t j = 0; j < b[2].ny; j++) {
      float s = c[i * b[2].ld + j];
      for (size_t k = 0; k < b[0].ny; k++)
        s += a[i * b[0].ld + k] * bb[k * b[1].ld + j];
      c[i * b[2].ld + j] = s;
    }
  atomic_fetch_add(&cpu_runs, 1);
}

#define MM 100 /* tiles of 32: 4 x 4, the last ones smaller */
#define TILE 32

static void tiled_gemm(bool with_cpu, bool two) {
  static tdm_opencl_variant v;
  v = gemm_cl;
  v.work_size = gemm_size;
  const tdm_codelet gemm = {.name = "gemm",
                            .cpu_fn = with_cpu ? gemm_cpu : NULL,
                            .nbuffers = 3,
                            .modes = {TDM_R, TDM_R, TDM_RW},
                            .opencl = &v};
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *a = tdm_malloc(MM * MM * sizeof *a), *b = tdm_malloc(MM * MM * sizeof *b);
  float *c = tdm_malloc(MM * MM * sizeof *c), *ref = calloc(MM * MM, sizeof *ref);
  for (int i = 0; i < MM; i++)
    for (int j = 0; j < MM; j++) {
      a[i * MM + j] = (float)((i + j) % 5);
      b[i * MM + j] = (float)((2 * i + j) % 7);
      c[i * MM + j] = 0;
    }
  for (int i = 0; i < MM; i++)
    for (int k = 0; k < MM; k++)
      for (int j = 0; j < MM; j++)
        ref[i * MM + j] += a[i * MM + k] * b[k * MM + j];
  tdm_handle *ha, *hb, *hc;
  assert_int_equal(tdm_register_matrix(rt, a, MM, MM, MM, sizeof(float), &ha), TDM_OK);
  assert_int_equal(tdm_register_matrix(rt, b, MM, MM, MM, sizeof(float), &hb), TDM_OK);
  assert_int_equal(tdm_register_matrix(rt, c, MM, MM, MM, sizeof(float), &hc), TDM_OK);
  assert_int_equal(tdm_matrix_partition(ha, TILE, TILE, 0), TDM_OK);
  assert_int_equal(tdm_matrix_partition(hb, TILE, TILE, 0), TDM_OK);
  assert_int_equal(tdm_matrix_partition(hc, TILE, TILE, 0), TDM_OK);
  const size_t nt = (MM + TILE - 1) / TILE;
  atomic_store(&cpu_runs, 0);
  for (size_t i = 0; i < nt; i++)
    for (size_t j = 0; j < nt; j++)
      for (size_t k = 0; k < nt; k++)
        assert_int_equal(
            tdm_submit(rt, &(tdm_task_desc){.codelet = &gemm,
                                            .handles = {tdm_matrix_tile(ha, i, k),
                                                        tdm_matrix_tile(hb, k, j),
                                                        tdm_matrix_tile(hc, i, j)}}),
            TDM_OK);
  assert_int_equal(tdm_matrix_unpartition(ha, 0), TDM_OK);
  assert_int_equal(tdm_matrix_unpartition(hb, 0), TDM_OK);
  assert_int_equal(tdm_matrix_unpartition(hc, 0), TDM_OK);
  assert_int_equal(tdm_handle_acquire(hc, TDM_R), TDM_OK); /* gathers C's tiles home */
  for (int i = 0; i < MM * MM; i++)
    if (c[i] != ref[i])
      fail_msg("C[%d][%d] = %g, expected %g", i / MM, i % MM, (double)c[i], (double)ref[i]);
  assert_int_equal(tdm_handle_release(hc), TDM_OK);
  tdm_device_counters k = {.struct_size = sizeof k};
  unsigned ids[8], ndev = used_devices(rt, ids);
  for (unsigned d = 0; d < ndev; d++) { /* summed over the devices */
    tdm_device_counters c = {.struct_size = sizeof c};
    assert_int_equal(tdm_runtime_device_counters(rt, ids[d], &c), TDM_OK);
    k.tasks += c.tasks;
    k.bytes_to_device += c.bytes_to_device;
    k.bytes_to_host += c.bytes_to_host;
  }
  assert_int_equal(ndev, two ? 2 : 1);
  printf("tiled gemm%s: %llu tasks on the devices, %u on the CPU; %llu bytes in, %llu out\n",
         with_cpu ? " (both variants)" : "", (unsigned long long)k.tasks,
         atomic_load(&cpu_runs), (unsigned long long)k.bytes_to_device,
         (unsigned long long)k.bytes_to_host);
  assert_int_equal(k.tasks + atomic_load(&cpu_runs), nt * nt * nt);
  if (!with_cpu && !two) {
    /* discrete: every tile of A, B and C goes once, C's come back once */
    const uint64_t bytes = MM * MM * sizeof(float);
    assert_int_equal(k.bytes_to_device, discrete ? 3 * bytes : 0);
    assert_int_equal(k.bytes_to_host, discrete ? bytes : 0);
  }
  tdm_handle_unregister(ha);
  tdm_handle_unregister(hb);
  tdm_handle_unregister(hc);
  tdm_runtime_destroy(rt);
  tdm_free(a);
  tdm_free(b);
  tdm_free(c);
  free(ref);
  assert_int_equal(test_log_errors(&log), 0);
  /* every task on the device: tiles of two sizes crossed the link, and
   * their profiled times reached its model (said at destroy). Whether a
   * fit comes out depends on timing noise for copies of a few kB: the
   * fit itself is tested on known data in test-perfmodel. */
  if (discrete && !two && !with_cpu) {
    const char *text = strstr(log.last, " copies timed") ? log.last : log.all;
    const char *at = strstr(text, " copies timed");
    assert_non_null(at);
    while (at > text && at[-1] != ' ')
      at--;
    assert_true(atoi(at) >= 2);
  }
}

static void test_tiled_gemm(void **state) {
  (void)state;
  tiled_gemm(false, false);
}

/* CPU and device share the tiles: coherence of tiles in both directions */
static void test_tiled_gemm_both_variants(void **state) {
  (void)state;
  tiled_gemm(true, false);
}

/* ---- the escape hatch: the task enqueues its own commands --------------- */

static cl_int copy_enqueue(cl_command_queue q, const cl_mem *mems, const tdm_buffer *bufs,
                           const void *args, size_t size, cl_event *done) {
  (void)args;
  (void)size;
  return clEnqueueCopyBuffer(q, mems[0], mems[1], 0, 0, bufs[0].nx * bufs[0].elem_size, 0, NULL,
                             done);
}

static void test_escape_hatch(void **state) {
  (void)state;
  static const tdm_opencl_variant copy_cl = {.enqueue = copy_enqueue};
  static const tdm_codelet copy = {
      .name = "copy", .nbuffers = 2, .modes = {TDM_R, TDM_W}, .opencl = &copy_cl};
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *x = array(5, 1), *y = array(0, 0);
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &copy, .handles = {hx, hy}}),
                   TDM_OK);
  saxpy(rt, &saxpy_gpu_only, hx, hy, 1.0f); /* then a kernel on the copy: y = 2x */
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 2 * x[i]);
  assert_int_equal(counters(rt).tasks, 2);
  tdm_handle_unregister(hx);
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(y);
  assert_int_equal(test_log_errors(&log), 0);
}

/* ---- device memory pressure ---------------------------------------------- */

/* Room for three of the nine vectors: every round must evict, dirty
 * vectors are written back, and the results are right. */
static void test_eviction(void **state) {
  (void)state;
  test_log log;
  memory_limit = 3 * N * sizeof(float);
  tdm_runtime *rt = device_runtime(&log, 1);
  memory_limit = 0;
  enum { V = 8, ROUNDS = 3 };
  float *x = array(1, 1), *ys[V];
  tdm_handle *hx, *hy[V];
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  for (int v = 0; v < V; v++) {
    ys[v] = array((float)v, 0);
    assert_int_equal(tdm_register_vector(rt, ys[v], N, sizeof(float), &hy[v]), TDM_OK);
  }
  for (int r = 0; r < ROUNDS; r++)
    for (int v = 0; v < V; v++)
      saxpy(rt, &saxpy_gpu_only, hx, hy[v], 1.0f);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  tdm_device_counters k = counters(rt);
  for (int v = 0; v < V; v++)
    assert_int_equal(tdm_handle_unregister(hy[v]), TDM_OK);
  printf("%llu evictions, %llu bytes in, %llu out\n", (unsigned long long)k.evictions,
         (unsigned long long)k.bytes_to_device, (unsigned long long)k.bytes_to_host);
  for (int v = 0; v < V; v++) {
    for (int i = 0; i < N; i++)
      if (ys[v][i] != (float)v + ROUNDS * x[i])
        fail_msg("y%d[%d] = %g, expected %g", v, i, (double)ys[v][i],
                 (double)((float)v + ROUNDS * x[i]));
    tdm_free(ys[v]);
  }
  assert_int_equal(k.tasks, V * ROUNDS);
  if (discrete) /* a shared device holds no memory of its own */
    assert_true(k.evictions >= (V - 2) * ROUNDS);
  else
    assert_int_equal(k.evictions, 0);
  tdm_handle_unregister(hx);
  tdm_runtime_destroy(rt);
  tdm_free(x);
  assert_int_equal(test_log_errors(&log), 0);
}

/* A buffer larger than the device may hold: a clear error, or the CPU. */
static void test_too_large(void **state) {
  (void)state;
  test_log log;
  memory_limit = N * sizeof(float) - 1;
  tdm_runtime *rt = device_runtime(&log, 1);
  memory_limit = 0;
  float *x = array(1, 0), *y = array(1, 0);
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  tdm_status st = tdm_submit(rt, &(tdm_task_desc){.codelet = &saxpy_gpu_only,
                                                  .handles = {hx, hy},
                                                  .args = &(float){1},
                                                  .args_size = sizeof(float)});
  if (discrete) {
    assert_int_equal(st, TDM_ERR_TOO_LARGE);
    assert_true(test_log_has(&log, "does not fit on device"));
  } else {
    assert_int_equal(st, TDM_OK); /* in host memory: no limit applies */
  }
  saxpy(rt, &saxpy_both, hx, hy, 1.0f); /* on the CPU when too large */
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_true(y[0] == (discrete ? 2.0f : 3.0f));
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(y);
}

/* ---- the on-disk program cache ------------------------------------------ */

/* Runs one saxpy (y = x + y, x = y = 1) with `cl` on the device in a new
 * runtime; returns y, which every element holds, and the log. */
static float saxpy_with(const tdm_codelet *cl, test_log *log) {
  tdm_runtime *rt = device_runtime(log, 1);
  float *x = array(1, 0), *y = array(1, 0);
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  saxpy(rt, cl, hx, hy, 1.0f);
  tdm_runtime_destroy(rt);
  float v = y[0];
  for (int i = 0; i < N; i++)
    assert_true(y[i] == v);
  tdm_free(x);
  tdm_free(y);
  return v;
}

static void one_saxpy(test_log *log) {
  assert_true(saxpy_with(&saxpy_gpu_only, log) == 2.0f);
}

/* The one entry of the (fresh) cache directory. */
static void the_entry_in(const char *dir, char *path, size_t size) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".clbin")) {
      snprintf(path, size, "%s/%s", dir, e->d_name);
      n++;
    }
  closedir(d);
  assert_int_equal(n, 1);
}

static void the_entry(char *path, size_t size) {
  the_entry_in(cache_dir, path, size);
}

/* ---- forged entries: a binary cache is code ------------------------------
 * An entry is "TDMCLBIN", u32 version, u32 key length, the key, u64 binary
 * size, u64 FNV-1a of the binary, the binary (backends/opencl/cache.c).
 * Anyone who can write an entry can make it valid: the key is no secret
 * and the checksum authenticates nothing. What keeps another user's code
 * out is that Tandem reads only entries nobody else could have written. */

/* The same kernel, name and arguments, that writes 666 everywhere. */
static const tdm_opencl_variant evil_cl = {
    .source = "__kernel void saxpy(__global const float *x, ulong nx,\n"
              "                    __global float *y, ulong ny, float a) {\n"
              "  y[get_global_id(0)] = 666.0f;\n"
              "}\n",
    .kernel = "saxpy"};
static const tdm_codelet evil = {
    .name = "evil", .nbuffers = 2, .modes = {TDM_R, TDM_RW}, .opencl = &evil_cl};

typedef struct entry_file {
  unsigned char *bytes;
  size_t size;
  size_t key_at, key_len, bin_at, bin_len;
} entry_file;

static entry_file read_entry(const char *path) {
  entry_file e = {0};
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  e.size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  e.bytes = malloc(e.size);
  assert_non_null(e.bytes);
  assert_int_equal(fread(e.bytes, 1, e.size, f), e.size);
  fclose(f);
  uint32_t klen;
  uint64_t blen;
  memcpy(&klen, e.bytes + 12, 4);
  e.key_at = 16;
  e.key_len = klen;
  memcpy(&blen, e.bytes + 16 + klen, 8);
  e.bin_at = 16 + klen + 16;
  e.bin_len = blen;
  assert_int_equal(e.bin_at + e.bin_len, e.size);
  return e;
}

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* A valid entry for `victim`'s key holding `code`'s binary, at path, with
 * the given mode. */
static void forge(const char *path, const entry_file *victim, const entry_file *code,
                  mode_t mode) {
  unlink(path);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  uint64_t blen = code->bin_len, h = fnv1a(code->bytes + code->bin_at, code->bin_len);
  fwrite(victim->bytes, 1, victim->key_at + victim->key_len, f); /* header and key */
  fwrite(&blen, 8, 1, f);
  fwrite(&h, 8, 1, f);
  fwrite(code->bytes + code->bin_at, 1, code->bin_len, f);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(path, mode), 0);
}

/* Fills *victim with the saxpy entry of cache_dir and *code with the
 * entry of the evil kernel, built in a directory of its own. */
static void victim_and_code(entry_file *victim, entry_file *code, char *path, size_t size) {
  test_log log;
  one_saxpy(&log);
  the_entry(path, size);
  *victim = read_entry(path);
  char keep[sizeof cache_dir], other[512];
  snprintf(keep, sizeof keep, "%s", cache_dir);
  snprintf(cache_dir, sizeof cache_dir, "%.100s-evil", keep);
  assert_true(saxpy_with(&evil, &log) == 666.0f);
  the_entry(other, sizeof other);
  *code = read_entry(other);
  test_remove_dir(cache_dir);
  snprintf(cache_dir, sizeof cache_dir, "%s", keep);
}

/* A forged entry of the user's own is run (that is what a binary cache
 * is); the same entry writable by others, or behind a link, is not. */
static void test_forged_entries(void **state) {
  (void)state;
  char sub[sizeof cache_dir], path[512], elsewhere[600];
  snprintf(sub, sizeof sub, "%s", cache_dir);
  if (snprintf(cache_dir, sizeof cache_dir, "%.100s/f", sub) < 0)
    fail();
  entry_file victim, code;
  victim_and_code(&victim, &code, path, sizeof path);
  test_log log;

  forge(path, &victim, &code, 0600);
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 666.0f); /* the threat is real */
  assert_true(test_log_has(&log, "from the cache"));

  forge(path, &victim, &code, 0666); /* anyone could have written it */
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 2.0f);
  assert_true(test_log_has(&log, "not reading"));
  assert_true(test_log_has(&log, "writable by others"));
  assert_true(test_log_has(&log, "OpenCL cache: wrote")); /* replaced */
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 2.0f);
  assert_true(test_log_has(&log, "from the cache"));

  snprintf(elsewhere, sizeof elsewhere, "%s.forged", sub);
  forge(elsewhere, &victim, &code, 0600);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(symlink(elsewhere, path), 0); /* a link to it */
  struct stat before;
  assert_int_equal(stat(elsewhere, &before), 0);
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 2.0f);
  assert_true(test_log_has(&log, "not reading"));
  assert_true(test_log_has(&log, "a symbolic link"));
  /* nor written through: the rebuilt program is not stored over it */
  assert_true(test_log_has(&log, "OpenCL cache: refusing to write"));
  assert_int_equal(stat(elsewhere, &st), 0);
  assert_int_equal(st.st_size, before.st_size);
  assert_int_equal(st.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  unlink(elsewhere);

  free(victim.bytes);
  free(code.bytes);
  test_remove_dir(cache_dir);
  snprintf(cache_dir, sizeof cache_dir, "%s", sub);
}

/* ---- a second user (as root: a child that drops to uid 65534) ---------- */

#define OTHER_UID 65534

static entry_file planted_victim, planted_code;
static char planted_dir[sizeof cache_dir], planted_name[64];

/* The other user: a cache directory of theirs, open to all, holding a
 * forged entry for the victim's program. */
static void plant(void) {
  char path[512];
  if (mkdir(planted_dir, 0777) != 0 || chmod(planted_dir, 0777) != 0)
    _exit(4);
  /* the entry's name is no secret: the hash of a key anyone can form */
  snprintf(path, sizeof path, "%s/%s", planted_dir, planted_name);
  forge(path, &planted_victim, &planted_code, 0644);
}

static void test_other_users_entries(void **state) {
  (void)state;
  char sub[sizeof cache_dir], path[512];
  snprintf(sub, sizeof sub, "%s", cache_dir);
  if (snprintf(cache_dir, sizeof cache_dir, "%.100s/u", sub) < 0)
    fail();
  victim_and_code(&planted_victim, &planted_code, path, sizeof path);
  snprintf(planted_name, sizeof planted_name, "%s", strrchr(path, '/') + 1);
  assert_int_equal(chmod(sub, 0777), 0); /* a shared directory, as /tmp */

  /* the other user's directory, as XDG_CACHE_HOME=/tmp would give */
  if (snprintf(planted_dir, sizeof planted_dir, "%.100s/theirs", sub) < 0)
    fail();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
      _exit(3);
    plant();
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char to[600];
  snprintf(to, sizeof to, "%s/%s", planted_dir, planted_name);
  struct stat st;
  assert_int_equal(stat(to, &st), 0);
  assert_int_equal(st.st_uid, OTHER_UID);
  char keep[sizeof cache_dir];
  snprintf(keep, sizeof keep, "%s", cache_dir);
  snprintf(cache_dir, sizeof cache_dir, "%s", planted_dir);
  test_log log;
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 2.0f);
  assert_true(test_log_has(&log, "cache: not using"));
  assert_true(test_log_has(&log, "owned by uid 65534"));
  assert_false(test_log_has(&log, "from the cache"));
  snprintf(cache_dir, sizeof cache_dir, "%s", keep);

  /* the other user's entry in the victim's own directory */
  assert_int_equal(unlink(path), 0);
  assert_int_equal(rename(to, path), 0);
  assert_int_equal(lchown(path, OTHER_UID, OTHER_UID), 0);
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 2.0f);
  assert_true(test_log_has(&log, "not reading"));
  assert_true(test_log_has(&log, "owned by uid 65534"));
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_uid, geteuid()); /* replaced by the victim's own */

  free(planted_victim.bytes);
  free(planted_code.bytes);
  test_remove_dir(cache_dir);
  rmdir(planted_dir);
  snprintf(cache_dir, sizeof cache_dir, "%s", sub);
}

static void test_program_cache(void **state) {
  (void)state;
  char sub[sizeof cache_dir], path[512];
  /* in a directory of its own, created on first use */
  snprintf(sub, sizeof sub, "%s", cache_dir);
  if (snprintf(cache_dir, sizeof cache_dir, "%.100s/c", sub) < 0)
    fail();
  test_log log;
  one_saxpy(&log);
  assert_true(test_log_has(&log, "OpenCL cache: wrote"));
  assert_false(test_log_has(&log, "from the cache"));
  struct stat st;
  assert_int_equal(stat(cache_dir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  the_entry(path, sizeof path);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  off_t full = st.st_size;

  /* the second run reuses it */
  one_saxpy(&log);
  assert_true(test_log_has(&log, "from the cache"));
  assert_false(test_log_has(&log, "OpenCL cache: wrote"));

  /* a corrupt entry is ignored, said, and replaced */
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, -10, SEEK_END), 0);
  int c = fgetc(f);
  assert_int_equal(fseek(f, -10, SEEK_END), 0);
  fputc(c ^ 0xff, f);
  fclose(f);
  one_saxpy(&log);
  assert_true(test_log_has(&log, "corrupt (checksum)"));
  assert_true(test_log_has(&log, "OpenCL cache: wrote"));
  one_saxpy(&log);
  assert_true(test_log_has(&log, "from the cache"));

  /* so is a truncated one */
  assert_int_equal(truncate(path, full / 2), 0);
  one_saxpy(&log);
  assert_true(test_log_has(&log, "truncated"));
  assert_true(test_log_has(&log, "OpenCL cache: wrote"));
  one_saxpy(&log);
  assert_true(test_log_has(&log, "from the cache"));
  assert_int_equal(test_log_errors(&log), 0);

  test_remove_dir(cache_dir); /* the entry and the performance models */
  snprintf(cache_dir, sizeof cache_dir, "%s", sub);
}

static void test_build_failure(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  static const tdm_opencl_variant broken = {
      .source = "__kernel void broken(__global float *y, ulong n) { y[0] = ; }\n",
      .kernel = "broken"};
  static const tdm_codelet only = {
      .name = "broken", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &broken};
  float *y = array(1, 0), *x = array(1, 0), *z = array(1, 0);
  tdm_handle *hy, *hx, *hz;
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, z, N, sizeof(float), &hz), TDM_OK);
  /* the build happens off this thread: the task ends with the failure */
  tdm_task *t;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &only, .handles = {hz}}, &t),
                   TDM_OK);
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  assert_int_equal(tdm_task_wait(t), TDM_ERR_BUILD);
  tdm_task_release(t);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  /* once the failure is known, a submission says so at once */
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &only, .handles = {hz}}),
                   TDM_ERR_BUILD);
  assert_int_equal(tdm_handle_unregister(hz), TDM_ERR_LOST); /* never written */
  /* the build log reached the log callback */
  assert_true(test_log_has(&log, "building kernel broken"));
  assert_true(test_log_has(&log, "build log:"));
  assert_true(test_log_has(&log, "error"));
  /* with a CPU variant the task runs there */
  static const tdm_codelet with_cpu = {.name = "broken with CPU",
                                       .cpu_fn = saxpy_cpu,
                                       .nbuffers = 2,
                                       .modes = {TDM_R, TDM_RW},
                                       .opencl = &broken};
  saxpy(rt, &with_cpu, hx, hy, 1.0f);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_true(y[0] == 2.0f);
  assert_true(test_log_has(&log, "the task runs on the CPU"));
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(y);
  tdm_free(z);
}

/* A misspelt kernel name: the error's name and the kernels the program
 * does define reach the log, and the task fails (its output untouched). */
static void test_kernel_name_hint(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  static const tdm_opencl_variant misspelt = {
      .source = "__kernel void brighten(__global float *y, ulong n) { y[0] = 1; }\n"
                "__kernel void contrast(__global float *y, ulong n) { y[0] = 2; }\n",
      .kernel = "brigthen"};
  static const tdm_codelet only = {
      .name = "misspelt", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &misspelt};
  float *y = array(5.0f, 0);
  tdm_handle *hy;
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &only, .handles = {hy}}), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  assert_true(test_log_has(&log, "CL_INVALID_KERNEL_NAME, error -46"));
  assert_true(test_log_has(&log, "the program defines no kernel brigthen; it defines"));
  assert_true(test_log_has(&log, "brighten"));
  assert_true(test_log_has(&log, "contrast"));
  assert_false(test_log_has(&log, "build log:")); /* empty: not shown */
  /* the failed write's version is lost; the memory keeps what it held */
  assert_int_equal(tdm_handle_unregister(hy), TDM_ERR_LOST);
  assert_true(y[0] == 5.0f && y[N - 1] == 5.0f);
  tdm_runtime_destroy(rt);
  tdm_free(y);
}

/* A kernel whose argument list is not what Tandem passes (it forgot the
 * vector's length and the by-value arguments): the error's name, the
 * count the kernel declares against the count passed, and the list
 * passed; the task fails, its output untouched. */
static void test_argument_hint(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  static const tdm_opencl_variant short_list = {
      .source = "__kernel void fill(__global float *y) { y[get_global_id(0)] = 1; }\n",
      .kernel = "fill"};
  static const tdm_codelet only = {
      .name = "short list", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &short_list};
  float *y = array(5.0f, 0);
  tdm_handle *hy;
  double scale = 2;
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &only, .handles = {hy},
                                                   .args = &scale, .args_size = sizeof scale}),
                   TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  assert_true(test_log_has(&log, "CL_INVALID_ARG_INDEX, error -49"));
  assert_true(test_log_has(&log, "kernel fill declares 1 arguments, Tandem passes 3"));
  char want[128];
  snprintf(want, sizeof want, "(__global T0 *v0 /* %d elements of 4 bytes */, ulong n0, "
           "struct args /* 8 bytes, by value */)", N);
  assert_true(test_log_has(&log, want));
  /* the failed write's version is lost; the memory keeps what it held */
  assert_int_equal(tdm_handle_unregister(hy), TDM_ERR_LOST);
  assert_true(y[0] == 5.0f && y[N - 1] == 5.0f);
  tdm_runtime_destroy(rt);
  tdm_free(y);
}

/* Vectors partitioned into pieces on a device: a kernel on each piece
 * sees a vector of its own (its buffer and length), the pieces' results
 * and the vector's before and after agree with the same arithmetic on
 * the host, whichever worker ran each piece; a piece cut again too. */
static void test_vector_pieces_on_device(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *x = array(1, 1), *y = array(2, 0.5f), *want = malloc(N * sizeof *want);
  assert_non_null(want);
  for (int i = 0; i < N; i++)
    want[i] = y[i];
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  /* the whole vectors, on the device: y there, and newer than the host */
  saxpy(rt, &saxpy_gpu_only, hx, hy, 1);
  for (int i = 0; i < N; i++)
    want[i] += x[i];
  const size_t piece = 1000; /* 5 pieces, the last of 96 */
  assert_int_equal(tdm_vector_partition(hx, piece, 0), TDM_OK);
  assert_int_equal(tdm_vector_partition(hy, piece, 0), TDM_OK);
  size_t n = 0;
  assert_int_equal(tdm_vector_pieces(hy, &n), TDM_OK);
  assert_int_equal(n, 5);
  for (size_t p = 0; p < n; p++) {
    bool device = p % 2 == 0;
    float a = device ? 2.0f : 3.0f;
    saxpy(rt, device ? &saxpy_gpu_only : &saxpy_cpu_only, tdm_vector_piece(hx, p),
          tdm_vector_piece(hy, p), a);
    for (size_t i = p * piece; i < N && i < (p + 1) * piece; i++)
      want[i] += a * x[i];
  }
  /* piece 0 of both, cut in pieces of 300: the second on the device */
  tdm_handle *x0 = tdm_vector_piece(hx, 0), *y0 = tdm_vector_piece(hy, 0);
  assert_int_equal(tdm_vector_partition(x0, 300, 0), TDM_OK);
  assert_int_equal(tdm_vector_partition(y0, 300, 0), TDM_OK);
  saxpy(rt, &saxpy_gpu_only, tdm_vector_piece(x0, 1), tdm_vector_piece(y0, 1), 5);
  for (int i = 300; i < 600; i++)
    want[i] += 5 * x[i];
  assert_int_equal(tdm_vector_unpartition(x0, 0), TDM_OK);
  assert_int_equal(tdm_vector_unpartition(y0, 0), TDM_OK);
  assert_int_equal(tdm_vector_unpartition(hx, 0), TDM_OK);
  assert_int_equal(tdm_vector_unpartition(hy, 0), TDM_OK);
  /* the whole again, on the device: it gathers what the pieces made */
  saxpy(rt, &saxpy_gpu_only, hx, hy, 1);
  for (int i = 0; i < N; i++)
    want[i] += x[i];
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  for (int i = 0; i < N; i++)
    if (y[i] != want[i])
      fail_msg("y[%d] = %g, expected %g", i, (double)y[i], (double)want[i]);
  assert_int_equal(test_log_errors(&log), 0);
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(y);
  free(want);
}

/* tdm_opencl_device: the device's id and the runtime's context, which a
 * program can use for its own OpenCL calls; none for a device not used;
 * bad numbers refused. */
static void test_opencl_device(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  int d = the_device(rt);
  cl_device_id id = NULL;
  cl_context ctx = NULL;
  assert_int_equal(tdm_opencl_device(rt, (unsigned)d, &id, &ctx), TDM_OK);
  assert_non_null(id);
  assert_non_null(ctx);
  /* the program's own buffer in the runtime's context, written and read
   * on a queue of its own */
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &err);
  assert_int_equal(err, CL_SUCCESS);
  cl_command_queue q = clCreateCommandQueue(ctx, id, 0, &err);
  assert_int_equal(err, CL_SUCCESS);
  int in[16], out[16] = {0};
  for (int i = 0; i < 16; i++)
    in[i] = i * 7;
  assert_int_equal(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, sizeof in, in, 0, NULL, NULL),
                   CL_SUCCESS);
  assert_int_equal(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL),
                   CL_SUCCESS);
  assert_memory_equal(in, out, sizeof in);
  clReleaseCommandQueue(q);
  clReleaseMemObject(m);
  unsigned errors = test_log_errors(&log);
  assert_int_equal(tdm_opencl_device(rt, 1000, &id, &ctx), TDM_ERR_INVALID_ARG);
  assert_true(test_log_errors(&log) > errors);
  assert_null(id);
  assert_int_equal(tdm_opencl_device(NULL, 0, &id, NULL), TDM_ERR_INVALID_ARG);
  tdm_runtime_destroy(rt);
  /* the CPU device not admitted: its id, no context */
  rt = device_runtime(&log, 0);
  assert_int_equal(tdm_opencl_device(rt, (unsigned)d, &id, &ctx), TDM_OK);
  assert_non_null(id);
  assert_null(ctx);
  tdm_runtime_destroy(rt);
}

static _Atomic int builds_done, build_status = 1;

static void on_built(void *data, tdm_status st) {
  (void)data;
  atomic_store(&build_status, st);
  atomic_fetch_add(&builds_done, 1);
}

/* The first submission of a codelet whose program is in no cache returns
 * at once: the program builds on the runtime's thread while the task
 * waits for it on the device. tdm_codelet_build builds ahead of time and
 * says when it is done. */
static void test_build_off_the_submitter(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  /* a source no cache holds: this run's own */
  static char source[256];
  snprintf(source, sizeof source,
           "/* %ld %d */ __kernel void twice(__global float *y, ulong n) {\n"
           "  y[get_global_id(0)] *= 2.0f;\n}\n",
           (long)time(NULL), (int)getpid());
  static tdm_opencl_variant twice_cl = {.kernel = "twice"};
  twice_cl.source = source;
  static const tdm_codelet twice = {
      .name = "twice", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &twice_cl};
  float *y = array(1, 1);
  tdm_handle *hy;
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  tdm_task *t;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &twice, .handles = {hy}}, &t),
                   TDM_OK);
  double t0 = now_s();
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  double submitted = now_s() - t0;
  assert_int_equal(tdm_task_wait(t), TDM_OK);
  double ended = now_s() - t0;
  tdm_task_release(t);
  printf("first submission of an uncached codelet: returned in %.3f ms, the task ended after "
         "%.0f ms (its build)\n", 1e3 * submitted, 1e3 * ended);
  assert_true(submitted < ended / 10); /* the build was not on this thread */
  assert_int_equal(tdm_handle_acquire(hy, TDM_R), TDM_OK);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 2 * (1 + (float)(i % 100)));
  assert_int_equal(tdm_handle_release(hy), TDM_OK);

  /* ahead of time: built (from the cache now), then a broken one, then
   * nothing to build */
  atomic_store(&builds_done, 0);
  assert_int_equal(tdm_codelet_build(rt, &twice, on_built, NULL), TDM_OK);
  for (int i = 0; i < 5000 && !atomic_load(&builds_done); i++)
    sleep_ms(1);
  assert_int_equal(atomic_load(&builds_done), 1);
  assert_int_equal(atomic_load(&build_status), TDM_OK);
  static const tdm_opencl_variant broken_cl = {.source = "__kernel void b( { }\n",
                                               .kernel = "b"};
  static const tdm_codelet broken = {.name = "b", .nbuffers = 1, .modes = {TDM_RW},
                                     .opencl = &broken_cl};
  assert_int_equal(tdm_codelet_build(rt, &broken, on_built, NULL), TDM_OK);
  for (int i = 0; i < 10000 && atomic_load(&builds_done) < 2; i++)
    sleep_ms(1);
  assert_int_equal(atomic_load(&builds_done), 2);
  assert_int_equal(atomic_load(&build_status), TDM_ERR_BUILD);
  assert_int_equal(tdm_codelet_build(rt, &saxpy_cpu_only, on_built, NULL), TDM_OK);
  assert_int_equal(atomic_load(&builds_done), 3); /* at once */
  assert_int_equal(atomic_load(&build_status), TDM_OK);
  assert_int_equal(tdm_codelet_build(NULL, &twice, on_built, NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_codelet_build(rt, NULL, on_built, NULL), TDM_ERR_INVALID_ARG);
  /* a build asked for and never waited for: destroy waits for it */
  static tdm_opencl_variant late_cl = {.kernel = "late"};
  static char late_src[128];
  snprintf(late_src, sizeof late_src, "/* %d */ __kernel void late(__global float *y, ulong n) {}\n",
           (int)getpid() + 1);
  late_cl.source = late_src;
  static const tdm_codelet late = {.name = "late", .nbuffers = 1, .modes = {TDM_RW},
                                   .opencl = &late_cl};
  assert_int_equal(tdm_codelet_build(rt, &late, on_built, NULL), TDM_OK);
  tdm_handle_unregister(hy);
  tdm_runtime_destroy(rt);
  assert_int_equal(atomic_load(&builds_done), 4); /* told before destroy returned */
  tdm_free(y);
}

static void test_no_device(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 0); /* PoCL not admitted */
  float *x = array(1, 0), *y = array(1, 0);
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  assert_int_equal(
      tdm_submit(rt, &(tdm_task_desc){.codelet = &saxpy_gpu_only, .handles = {hx, hy},
                                      .args = &(float){1}, .args_size = sizeof(float)}),
      TDM_ERR_NO_DEVICE);
  assert_true(test_log_has(&log, "no device is used"));
  saxpy(rt, &saxpy_both, hx, hy, 1.0f); /* runs on the CPU */
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_true(y[0] == 2.0f);
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(y);
}

static void test_two_devices_gemm(void **state) {
  (void)state;
  tiled_gemm(false, true);
}

static void test_two_devices_gemm_both_variants(void **state) {
  (void)state;
  tiled_gemm(true, true);
}

static void CL_CALLBACK note_status(cl_event e, cl_int status, void *data) {
  (void)e;
  atomic_store((_Atomic int *)data, (int)status);
}

/* A command that fails through its event (here a user event set to an
 * error status) still ends: tdm__cl_when_complete's callback comes, from
 * the watcher if the implementation never calls it (PoCL 3.1 does not),
 * once, with the error. */
/* ---- a failed writer across a partition or an unpartition ---------------- */

static const tdm_opencl_variant fill_cl = {
    .source = "__kernel void fill(__global float *m, ulong nx, ulong ny, ulong ld) {\n"
              "  m[get_global_id(0)] = 1.0f;\n"
              "}\n",
    .kernel = "fill"};
/* OpenCL only: where its launch fails there is nothing to retry it on */
static const tdm_codelet fill = {
    .name = "fill", .nbuffers = 1, .modes = {TDM_W}, .opencl = &fill_cl};

static _Atomic int look_outcome;

static void look_ended(void *data) {
  (void)data;
  atomic_store(&look_outcome, (int)tdm_callback_status());
}

/* Submits a CPU task reading h (`child`, counted in cb_children);
 * returns its outcome once ended, and in *waited what tdm_wait_all said
 * then. */
static int read_on_cpu(tdm_runtime *rt, tdm_handle *h, tdm_status *waited) {
  static const tdm_codelet cl = {.name = "look", .cpu_fn = child, .nbuffers = 1,
                                 .modes = {TDM_R}};
  atomic_store(&look_outcome, 1);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .handles = {h},
                                                  .callback = look_ended}),
                   TDM_OK);
  *waited = tdm_wait_all(rt);
  return atomic_load(&look_outcome);
}

/* A writer that failed, and had ended, before its handle was partitioned
 * (or, writing a tile, before the unpartition): the version it did not
 * produce is still missing on the other side. A reader of a tile (of the
 * matrix) is cancelled without running, and acquiring the matrix
 * reports the version lost. */
static void test_failed_writer_across_partitions(void **state) {
  (void)state;
  for (int tile_first = 0; tile_first < 2; tile_first++) {
    test_log log;
    tdm_runtime *rt = device_runtime(&log, 1);
    tdm__faults_set(rt, TDM_FAULT_LAUNCH, 1.0, 3); /* every launch fails */
    float *m = array(0, 0);
    tdm_handle *hm;
    assert_int_equal(tdm_register_matrix(rt, m, 8, N / 8, 8, sizeof(float), &hm), TDM_OK);
    reset_counts();
    tdm_status waited;
    if (!tile_first) { /* the matrix's writer fails, then tiles are read */
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &fill, .handles = {hm}}),
                       TDM_OK);
      assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
      assert_int_equal(tdm_matrix_partition(hm, N / 16, 8, 0), TDM_OK);
      assert_int_equal(read_on_cpu(rt, tdm_matrix_tile(hm, 0, 0), &waited), TDM_ERR_CANCELLED);
      assert_int_equal(tdm_matrix_unpartition(hm, 0), TDM_OK);
    } else { /* a tile's writer fails, then the matrix is read */
      assert_int_equal(tdm_matrix_partition(hm, N / 16, 8, 0), TDM_OK);
      assert_int_equal(
          tdm_submit(rt, &(tdm_task_desc){.codelet = &fill,
                                          .handles = {tdm_matrix_tile(hm, 1, 0)}}),
          TDM_OK);
      assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
      assert_int_equal(tdm_matrix_unpartition(hm, 0), TDM_OK);
      assert_int_equal(read_on_cpu(rt, hm, &waited), TDM_ERR_CANCELLED);
    }
    assert_int_equal(waited, TDM_ERR_TASK_FAILED); /* the cancellation, reported */
    assert_int_equal(atomic_load(&cb_children), 0); /* nothing read the missing version */
    assert_int_equal(tdm_handle_acquire(hm, TDM_R), TDM_ERR_LOST);
    assert_int_equal(tdm_handle_unregister(hm), TDM_ERR_LOST);
    tdm_runtime_destroy(rt);
    tdm_free(m);
  }
}

static void test_failed_event_calls_back(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  const cl_api *api = &rt->opencl->api;
  cl_int err = CL_SUCCESS;
  cl_event ok = api->CreateUserEvent(rt->opencl->contexts[the_device(rt)], &err);
  cl_event bad = api->CreateUserEvent(rt->opencl->contexts[the_device(rt)], &err);
  assert_non_null(ok);
  assert_non_null(bad);
  _Atomic int ok_status = 1, bad_status = 1;
  assert_true(tdm__cl_when_complete(rt, ok, note_status, &ok_status));
  assert_true(tdm__cl_when_complete(rt, bad, note_status, &bad_status));
  assert_int_equal(api->SetUserEventStatus(bad, CL_OUT_OF_RESOURCES), CL_SUCCESS);
  assert_int_equal(api->SetUserEventStatus(ok, CL_COMPLETE), CL_SUCCESS);
  for (int i = 0; i < 2000 && (atomic_load(&ok_status) == 1 || atomic_load(&bad_status) == 1);
       i++)
    usleep(1000);
  assert_int_equal(atomic_load(&ok_status), CL_COMPLETE);
  assert_int_equal(atomic_load(&bad_status), CL_OUT_OF_RESOURCES);
  api->ReleaseEvent(ok);
  api->ReleaseEvent(bad);
  tdm_runtime_destroy(rt);
}

/* Paused: a try already on the device ends (a CPU worker, parked, ends
 * it: it can be waited for); the next task is not launched until the
 * runtime is resumed, then runs where it was placed. */
static void test_pause_with_device(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *x = array(1, 1), *y = array(0, 0);
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  saxpy(rt, &saxpy_gpu_only, hx, hy, 1); /* builds the program */
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  float a = 2;
  tdm_task *t = NULL;
  tdm_task_desc d = {.codelet = &saxpy_gpu_only, .handles = {hx, hy}, .args = &a,
                     .args_size = sizeof a};
  assert_int_equal(tdm_task_create(rt, &d, &t), TDM_OK);
  assert_int_equal(tdm_task_submit(t), TDM_OK); /* launched by this thread */
  assert_int_equal(tdm_runtime_pause(rt), TDM_OK);
  assert_int_equal(tdm_task_wait(t), TDM_OK);
  tdm_task_release(t);
  uint64_t ran = counters(rt).tasks;
  assert_int_equal(ran, 2);
  saxpy(rt, &saxpy_gpu_only, hx, hy, 4);
  sleep_ms(50);
  assert_int_equal(counters(rt).tasks, ran); /* not launched */
  assert_int_equal(tdm_runtime_resume(rt), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(counters(rt).tasks, ran + 1);
  assert_int_equal(tdm_handle_acquire(hy, TDM_R), TDM_OK);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 7 * x[i]);
  assert_int_equal(tdm_handle_release(hy), TDM_OK);
  tdm_handle_unregister(hx);
  tdm_handle_unregister(hy);
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(y);
  assert_int_equal(test_log_errors(&log), 0);
}

static pthread_t loop_thread;
static _Atomic int pinned_ran, pinned_elsewhere;
static _Atomic float pinned_seen;

static void pinned_read(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  if (!pthread_equal(pthread_self(), loop_thread))
    atomic_store(&pinned_elsewhere, 1);
  atomic_store(&pinned_seen, ((const float *)b[0].ptr)[5]);
  atomic_fetch_add(&pinned_ran, 1);
}

/* A task pinned to the application's thread reading what a device wrote
 * (discrete: its copy home comes first, asynchronously) runs in
 * tdm_dispatch, on this thread, and reads the device's result. */
static void test_pinned_after_device(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  loop_thread = pthread_self();
  atomic_store(&pinned_ran, 0);
  atomic_store(&pinned_elsewhere, 0);
  float *x = array(1, 1), *y = array(0, 0);
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  static const tdm_codelet cl_read = {.name = "pinned read", .cpu_fn = pinned_read,
                                      .nbuffers = 1, .modes = {TDM_R}};
  int fd = tdm_runtime_event_fd(rt);
  for (int round = 0; round < 3; round++) {
    saxpy(rt, &saxpy_gpu_only, hx, hy, 2); /* y += 2x on the device */
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_read, .handles = {hy},
                                                     .flags = TDM_TASK_MAIN_THREAD}),
                     TDM_OK);
    double until = now_s() + 20;
    while (atomic_load(&pinned_ran) == round && now_s() < until) {
      struct pollfd p = {.fd = fd, .events = POLLIN};
      if (poll(&p, 1, 100) > 0)
        assert_true(tdm_dispatch(rt) >= 0);
    }
    assert_int_equal(atomic_load(&pinned_ran), round + 1);
    assert_true(atomic_load(&pinned_seen) == 2.0f * (float)(round + 1) * x[5]);
  }
  assert_int_equal(atomic_load(&pinned_elsewhere), 0);
  tdm_handle_unregister(hx);
  tdm_handle_unregister(hy);
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(y);
  assert_int_equal(test_log_errors(&log), 0);
}

/* A group of device tasks cancelled while they run: those not launched
 * never are, and the handle holds what the ones that ran made. */
static void test_cancel_device_group(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *x = array(1, 1), *y = array(0, 0);
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  saxpy(rt, &saxpy_gpu_only, hx, hy, 0); /* builds the program */
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  uint64_t before = counters(rt).tasks;
  tdm_group *g;
  assert_int_equal(tdm_group_create(rt, NULL, &g), TDM_OK);
  float a = 2;
  for (int i = 0; i < 40; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &saxpy_gpu_only,
                                                     .handles = {hx, hy}, .args = &a,
                                                     .args_size = sizeof a, .group = g}),
                     TDM_OK);
  assert_int_equal(tdm_group_cancel(g), TDM_OK);
  assert_int_equal(tdm_group_wait(g), TDM_ERR_CANCELLED);
  uint64_t ran = counters(rt).tasks - before;
  tdm_group_progress p = {.struct_size = sizeof p};
  assert_int_equal(tdm_group_get_progress(g, &p), TDM_OK);
  assert_int_equal(p.cancelled + ran, 40);
  assert_true(p.cancelled > 0);
  assert_int_equal(tdm_wait_all(rt), TDM_OK); /* asked for: not reported */
  tdm_group_release(g);
  tdm_handle_unregister(hx);
  /* home: the version the last task that ran made (LOST: a cancelled
   * task was to make a newer one) */
  tdm_status st = tdm_handle_unregister(hy);
  assert_true(st == TDM_OK || st == TDM_ERR_LOST);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 2.0f * (float)ran * x[i]);
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(y);
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3 || (strcmp(argv[1], "integrated") && strcmp(argv[1], "discrete")) ||
      (argc == 3 && strcmp(argv[2], "two-devices") && strcmp(argv[2], "two-users"))) {
    fprintf(stderr, "usage: test-opencl-run integrated|discrete [two-devices|two-users]\n");
    return 2;
  }
  discrete = !strcmp(argv[1], "discrete");
  bool users = argc == 3 && !strcmp(argv[2], "two-users");
  if (users && geteuid() != 0) {
    printf("needs root to act as a second user: skipped\n");
    return 77;
  }
  if (users && !test_other_user_can_write("/tmp", OTHER_UID)) {
    printf("uid %d cannot write in /tmp here (a path above it is closed): skipped\n",
           OTHER_UID);
    return 77;
  }
  bool two = argc == 3 && !users;
  snprintf(cache_dir, sizeof cache_dir, "/tmp/tandem-test-XXXXXX");
  if (!mkdtemp(cache_dir))
    return 1;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  unsigned ids[8];
  unsigned found = used_devices(rt, ids);
  tdm_runtime_destroy(rt);
  if (found < (two ? 2u : 1u)) {
    test_remove_dir(cache_dir);
    printf("not %s OpenCL CPU device%s here (install pocl-opencl-icd): skipped\n",
           two ? "two" : "an", two ? "s (POCL_DEVICES=\"pthread pthread\")" : "");
    return 77;
  }
  if (users) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_other_users_entries)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_remove_dir(cache_dir);
    return rc;
  }
  if (two) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_devices_readers),
        cmocka_unit_test(test_two_devices_gemm),
        cmocka_unit_test(test_two_devices_gemm_both_variants),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_remove_dir(cache_dir);
    return rc;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vector_add),
      cmocka_unit_test(test_saxpy_chain_alternating),
      cmocka_unit_test(test_device_chain),
      cmocka_unit_test(test_device_chain_home_at_destroy),
      cmocka_unit_test(test_both_variants),
      cmocka_unit_test(test_tiled_gemm),
      cmocka_unit_test(test_tiled_gemm_both_variants),
      cmocka_unit_test(test_escape_hatch),
      cmocka_unit_test(test_eviction),
      cmocka_unit_test(test_too_large),
      cmocka_unit_test(test_program_cache),
      cmocka_unit_test(test_forged_entries),
      cmocka_unit_test(test_build_failure),
      cmocka_unit_test(test_kernel_name_hint),
      cmocka_unit_test(test_argument_hint),
      cmocka_unit_test(test_opencl_device),
      cmocka_unit_test(test_vector_pieces_on_device),
      cmocka_unit_test(test_no_device),
      cmocka_unit_test(test_callbacks_on_failures),
      cmocka_unit_test(test_failed_event_calls_back),
      cmocka_unit_test(test_pause_with_device),
      cmocka_unit_test(test_build_off_the_submitter),
      cmocka_unit_test(test_pinned_after_device),
      cmocka_unit_test(test_cancel_device_group),
      cmocka_unit_test(test_failed_writer_across_partitions),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  test_remove_dir(cache_dir);
  return rc;
}
