/*
 * Tasks on a real OpenCL device: PoCL, admitted as a device, made to
 * behave as an integrated GPU (no copies) or as a discrete one (copies):
 *
 *   test-opencl-run integrated | discrete [two-devices]
 *
 * Vector add; a SAXPY chain alternating CPU and OpenCL tasks on the same
 * handles (coherence), submitted and recorded in a graph launched again
 * and again; byte counters (integrated: zero; discrete: exactly
 * what the graph needs); a device-only chain; tasks with both variants;
 * a tiled matrix multiply (device only, and mixed with the CPU);
 * accumulating kernels (TDM_REDUX, TDM_COMMUTE); a task
 * enqueueing its own commands; eviction under a small device-memory limit;
 * a buffer too large for the device; vector pieces; the OpenCL objects of
 * a device; an OpenCL-only task without a device; pausing; a task pinned
 * to the application's thread after a device's; two devices; device
 * chains that advance, and that destroy waits for, while every CPU
 * worker is busy. The program
 * cache: test-opencl-cache; failures: test-opencl-failures. Exits 77
 * (skip) where no OpenCL CPU device is installed.
 */
#include "opencl-fixture.h"

#include <poll.h>
#include <stdbool.h>

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

/* ---- two devices (PoCL with POCL_DEVICES="pthread pthread") -------------
 * As devices with memory of their own (discrete), the two share one
 * OpenCL context (tdm_config.opencl_peer): data moves between them
 * straight, and commands wait for each other's events. Working in the
 * host's memory, or with opencl_peer 0, each has its own context: data
 * moves between them through the host, and commands wait for events of
 * the other context through joined user events. Placement spreads tasks
 * over the devices by load, so the tests check results, and counts per
 * device that do not depend on which device ran what. */

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
  assert_int_equal(test_used_devices(rt, ids, 8), 2);
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

/* Chains x -> y -> z on two devices with memory of their own, placed at
 * random: a y written on one device and read on the other moves straight
 * between them when they share a context (opencl_peer), through the host
 * otherwise. Either way the results are exact; only x comes from the
 * host to a device when they share, and nothing moves between them when
 * they do not. */
static void test_two_devices_copy_between(void **state) {
  (void)state;
  if (!discrete)
    skip(); /* in the host's memory nothing is copied */
  for (int peer = 1; peer >= 0; peer--) {
    test_log log;
    tdm_runtime *rt = device_runtime_with(&log, 1, "random", peer);
    unsigned ids[8];
    assert_int_equal(test_used_devices(rt, ids, 8), 2);
    cl_context c0 = NULL, c1 = NULL;
    assert_int_equal(tdm_opencl_device(rt, ids[0], NULL, &c0), TDM_OK);
    assert_int_equal(tdm_opencl_device(rt, ids[1], NULL, &c1), TDM_OK);
    assert_int_equal(c0 == c1, peer);
    enum { T = 24 };
    float *x = array(1, 1), *ys[T], *zs[T];
    tdm_handle *hx, *hy[T], *hz[T];
    assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
    for (int t = 0; t < T; t++) {
      ys[t] = array(0, 0);
      zs[t] = array(0, 0);
      assert_int_equal(tdm_register_vector(rt, ys[t], N, sizeof(float), &hy[t]), TDM_OK);
      assert_int_equal(tdm_register_vector(rt, zs[t], N, sizeof(float), &hz[t]), TDM_OK);
      assert_int_equal(
          tdm_submit(rt, &(tdm_task_desc){.codelet = &scale, .handles = {hx, hy[t]}}), TDM_OK);
      assert_int_equal(
          tdm_submit(rt, &(tdm_task_desc){.codelet = &scale, .handles = {hy[t], hz[t]}}),
          TDM_OK);
    }
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    tdm_device_counters all = {0};
    for (int k = 0; k < 2; k++) {
      tdm_device_counters c = test_counters(rt, ids[k]);
      printf("opencl_peer %d, device %u: %llu tasks, %llu copies in (%llu bytes), %llu from "
             "the other device (%llu bytes)\n",
             peer, ids[k], (unsigned long long)c.tasks, (unsigned long long)c.copies_to_device,
             (unsigned long long)c.bytes_to_device, (unsigned long long)c.copies_from_devices,
             (unsigned long long)c.bytes_from_devices);
      all.tasks += c.tasks;
      all.bytes_to_device += c.bytes_to_device;
      all.copies_from_devices += c.copies_from_devices;
      all.bytes_from_devices += c.bytes_from_devices;
    }
    const uint64_t bytes = N * sizeof(float);
    assert_int_equal(all.tasks, 2 * T);
    if (peer) {
      assert_true(all.copies_from_devices > 0); /* (24 coin tosses) */
      assert_int_equal(all.bytes_from_devices, all.copies_from_devices * bytes);
      assert_true(all.bytes_to_device <= 2 * bytes); /* x, once per device */
    } else {
      assert_int_equal(all.copies_from_devices, 0);
      assert_true(all.bytes_to_device > 2 * bytes); /* ys through the host */
    }
    for (int t = 0; t < T; t++) {
      assert_int_equal(tdm_handle_unregister(hy[t]), TDM_OK);
      assert_int_equal(tdm_handle_unregister(hz[t]), TDM_OK);
      for (int i = 0; i < N; i++) {
        assert_true(ys[t][i] == 2 * x[i]);
        assert_true(zs[t][i] == 4 * x[i]);
      }
      tdm_free(ys[t]);
      tdm_free(zs[t]);
    }
    assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
    tdm_runtime_destroy(rt);
    tdm_free(x);
    assert_int_equal(test_log_errors(&log), 0);
  }
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
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
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
  run_end(rt, x, y);
  tdm_free(ref);
  assert_int_equal(test_log_errors(&log), 0);
}

/* The SAXPY chain recorded once (device and CPU steps alternating) and
 * launched four times, its scale factors rebound between launches: every
 * step sees the one before wherever it ran; the device ran its steps
 * of every launch, and (discrete) y went there before each of them and
 * came home before each CPU step, x once. */
static void test_recorded_graph(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *x = array(1, 1), *y = array(3, 1), *ref = array(3, 1);
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
  atomic_store(&cpu_runs, 0);
  tdm_graph *g;
  assert_int_equal(tdm_graph_create(rt, &g), TDM_OK);
  const int steps = 4, launches = 4;
  float a = 2.0f;
  for (int s = 0; s < steps; s++)
    assert_int_equal(tdm_graph_add(g, &(tdm_task_desc){.codelet = s % 2 ? &saxpy_cpu_only
                                                                         : &saxpy_gpu_only,
                                                       .handles = {hx, hy},
                                                       .args = &a,
                                                       .args_size = sizeof a},
                                   NULL),
                     TDM_OK);
  for (int l = 0; l < launches; l++) {
    float al = (float)(l + 1);
    for (int s = 0; s < steps; s++)
      assert_int_equal(tdm_graph_set_args(g, (size_t)s, &al, sizeof al), TDM_OK);
    assert_int_equal(tdm_graph_launch(g), TDM_OK);
    for (int s = 0; s < steps; s++)
      for (int i = 0; i < N; i++)
        ref[i] = al * x[i] + ref[i];
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  tdm_device_counters k = counters(rt);
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
  for (int i = 0; i < N; i++)
    if (y[i] != ref[i])
      fail_msg("y[%d] = %g, expected %g", i, (double)y[i], (double)ref[i]);
  assert_int_equal(k.tasks, launches * steps / 2);
  assert_int_equal(atomic_load(&cpu_runs), launches * steps / 2);
  const uint64_t bytes = N * sizeof(float);
  assert_int_equal(k.bytes_to_device, discrete ? (1 + launches * steps / 2) * bytes : 0);
  assert_int_equal(k.bytes_to_host, discrete ? (launches * steps / 2) * bytes : 0);
  tdm_graph_destroy(g);
  run_end(rt, x, y);
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
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
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

static void test_device_chain(void **state) {
  (void)state;
  device_chain(false);
}

static void test_device_chain_home_at_destroy(void **state) {
  (void)state;
  device_chain(true);
}

/* Both CPU workers in tasks that spin until a chain of device-only tasks
 * is done (5 s at most): the chain still advances, its completions ended
 * by the watcher (they would otherwise wait for a CPU worker, and the
 * spinning tasks time out); its result is right. */
static _Atomic int spinning, chain_done, spin_timed_out, end_wait = -1, end_dispatch = -1;
static tdm_runtime *chain_rt;

static void spin_until_chain(const tdm_buffer *b, const void *args, size_t size) {
  (void)b;
  (void)args;
  (void)size;
  atomic_fetch_add(&spinning, 1);
  double end = now_s() + 5;
  while (!atomic_load(&chain_done) && now_s() < end)
    ;
  if (!atomic_load(&chain_done))
    atomic_store(&spin_timed_out, 1);
}

static const tdm_codelet spinner = {.name = "spinner", .cpu_fn = spin_until_chain};

/* On the completions' watcher (every CPU worker spins): blocking calls
 * refused there as on a worker. */
static void chain_ended(void *data) {
  (void)data;
  atomic_store(&end_wait, tdm_wait_all(chain_rt));
  atomic_store(&end_dispatch, tdm_dispatch(chain_rt));
  atomic_store(&chain_done, 1);
}

/* A runtime on PoCL whose every CPU worker spins until chain_done. */
static tdm_runtime *busy_runtime(test_log *log) {
  tdm_runtime *rt = device_runtime(log, 1);
  chain_rt = rt;
  atomic_store(&spinning, 0);
  atomic_store(&chain_done, 0);
  atomic_store(&spin_timed_out, 0);
  unsigned ncpu = tdm_runtime_ncpu_workers(rt);
  for (unsigned i = 0; i < ncpu; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &spinner}), TDM_OK);
  while (atomic_load(&spinning) < (int)ncpu) /* every CPU worker in one */
    sleep_ms(1);
  return rt;
}

static void test_chain_while_cpus_busy(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = busy_runtime(&log);
  float *x = array(1, 0), *y = array(0, 0);
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
  enum { L = 10 };
  double t0 = now_s();
  for (int i = 0; i < L; i++) {
    float a = 1;
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &saxpy_gpu_only,
                                                     .handles = {hx, hy},
                                                     .args = &a,
                                                     .args_size = sizeof a,
                                                     .callback = i == L - 1 ? chain_ended : NULL}),
                     TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  printf("a chain of %d device tasks with every CPU worker busy: %.1f ms\n", L,
         1e3 * (now_s() - t0));
  assert_false(atomic_load(&spin_timed_out));
  assert_int_equal(atomic_load(&end_wait), TDM_ERR_IN_TASK);
  assert_int_equal(atomic_load(&end_dispatch), TDM_ERR_IN_TASK);
  assert_true(test_log_has(&log, "a thread of the same runtime runs"));
  tdm_handle_unregister(hx);
  tdm_handle_unregister(hy);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == L * x[i]);
  run_end(rt, x, y);
  assert_int_equal(test_log_errors(&log), 2); /* the two refusals */
}

/* The same busy CPU workers, a chain that each step's callback extends
 * (on the watcher), and tdm_runtime_destroy called after the first
 * step: the steps submitted while it waits are accepted, the graph runs
 * whole, as from a worker. */
static _Atomic int steps;
static tdm_handle *step_x, *step_y;

static void next_step(void *data) {
  (void)data;
  if (atomic_fetch_add(&steps, 1) + 1 >= 10) {
    atomic_store(&chain_done, 1);
    return;
  }
  float a = 1;
  if (tdm_submit(chain_rt, &(tdm_task_desc){.codelet = &saxpy_gpu_only,
                                            .handles = {step_x, step_y},
                                            .args = &a,
                                            .args_size = sizeof a,
                                            .callback = next_step}) != TDM_OK)
    atomic_store(&chain_done, 1); /* cut: the count says so */
}

static void test_destroy_while_device_chain_grows(void **state) {
  (void)state;
  test_log log;
  atomic_store(&steps, 0);
  tdm_runtime *rt = busy_runtime(&log);
  float *x = array(1, 0), *y = array(0, 0);
  step_x = vector_of(rt, x);
  step_y = vector_of(rt, y);
  float a = 1;
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &saxpy_gpu_only,
                                                   .handles = {step_x, step_y},
                                                   .args = &a,
                                                   .args_size = sizeof a,
                                                   .callback = next_step}),
                   TDM_OK);
  run_end(rt, x, y); /* destroy: waits for the whole chain, brings y home */
  printf("steps run with destroy waiting: %d of 10\n", atomic_load(&steps));
  assert_int_equal(atomic_load(&steps), 10);
  assert_false(atomic_load(&spin_timed_out));
  assert_int_equal(test_log_errors(&log), 0);
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

/* ---- accesses that do not serialise -------------------------------------- */

static const tdm_opencl_variant acc_cl = {
    .source = "__kernel void acc(__global float *y, ulong ny, float k) {\n"
              "  y[get_global_id(0)] += k;\n"
              "}\n"
              "__kernel void zero(__global float *y, ulong ny) {\n"
              "  y[get_global_id(0)] = 0;\n"
              "}\n",
    .kernel = "acc"};
static const tdm_opencl_variant zero_cl = {.source = acc_cl.source, .kernel = "zero"};
static void zero_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  memset(b[0].ptr, 0, b[0].nx * sizeof(float));
}
static void add_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  float *y = b[0].ptr;
  const float *x = b[1].ptr;
  for (size_t i = 0; i < b[0].nx; i++)
    y[i] += x[i];
}
static const tdm_codelet acc_redux = {
    .name = "acc (redux)", .nbuffers = 1, .modes = {TDM_REDUX}, .opencl = &acc_cl};
static const tdm_codelet acc_commute = {
    .name = "acc (commute)", .nbuffers = 1, .modes = {TDM_COMMUTE}, .opencl = &acc_cl};
static const tdm_codelet zero_both = {
    .name = "zero", .cpu_fn = zero_cpu, .nbuffers = 1, .modes = {TDM_W}, .opencl = &zero_cl};
static const tdm_codelet add_cpu_only = {
    .name = "add", .cpu_fn = add_cpu, .nbuffers = 2, .modes = {TDM_RW, TDM_R}};

/* Kernels that accumulate into a vector, TDM_REDUX (lanes on the
 * device, combined on the CPU) and TDM_COMMUTE: every update counted
 * once, read by the host between rounds and at the end. */
static void test_modes_on_device(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *r = array(1, 1), *c = array(2, 1), *r0 = array(1, 1), *c0 = array(2, 1);
  tdm_handle *hr = vector_of(rt, r), *hc = vector_of(rt, c);
  tdm_reduction sum = {.init = &zero_both, .combine = &add_cpu_only, .copies = 3};
  assert_int_equal(tdm_handle_set_reduction(hr, &sum), TDM_OK);
  float total = 0;
  for (int round = 0; round < 3; round++) {
    for (int t = 0; t < 20; t++) {
      float k = (float)(round * 20 + t + 1);
      total += k;
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &acc_redux, .handles = {hr},
                                                       .args = &k, .args_size = sizeof k}),
                       TDM_OK);
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &acc_commute, .handles = {hc},
                                                       .args = &k, .args_size = sizeof k}),
                       TDM_OK);
    }
    assert_int_equal(tdm_handle_acquire(hr, TDM_R), TDM_OK);
    assert_int_equal(tdm_handle_acquire(hc, TDM_R), TDM_OK);
    for (int i = 0; i < N; i++) {
      assert_true(r[i] == r0[i] + total);
      assert_true(c[i] == c0[i] + total);
    }
    assert_int_equal(tdm_handle_release(hr), TDM_OK);
    assert_int_equal(tdm_handle_release(hc), TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  tdm_device_counters k = counters(rt);
  assert_true(k.tasks >= 120); /* every update ran there */
  tdm_handle_unregister(hr);
  tdm_handle_unregister(hc);
  tdm_runtime_destroy(rt);
  tdm_free(r);
  tdm_free(c);
  tdm_free(r0);
  tdm_free(c0);
  assert_int_equal(test_log_errors(&log), 0);
}

/* ---- the adaptive window ------------------------------------------------ */

/* A kernel that takes long on PoCL (iters steps of a generator), and a
 * CPU variant that takes none: the CPU workers are far faster. Both add
 * 1 to x[0] (the kernel 2 only if the generator hit 0: never). */
static const tdm_opencl_variant slow_cl = {
    .source = "__kernel void slow(__global ulong *x, ulong nx, ulong iters) {\n"
              "  ulong acc = iters;\n"
              "  for (ulong i = 0; i < iters; i++)\n"
              "    acc = acc * 6364136223846793005UL + 1442695040888963407UL;\n"
              "  x[0] += 1 + (acc == 0);\n"
              "}\n",
    .kernel = "slow"};

static void slow_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  ((uint64_t *)b[0].ptr)[0] += 1;
}

/* One name, one model: the device-only one calibrates the device. */
static const tdm_codelet slow_gpu_only = {
    .name = "slow", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &slow_cl};
static const tdm_codelet slow_both = {
    .name = "slow", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &slow_cl, .cpu_fn = slow_cpu};

#define SLOW_ITERS 20000000ull

/* n tasks of cl, each on a vector of one element of its own, under eager
 * (the first free worker, CPU core or device, takes the next task):
 * checked; returns how many the device ran. */
static unsigned slow_tasks(tdm_runtime *rt, const tdm_codelet *cl, unsigned n) {
  uint64_t *v[64];
  tdm_handle *h[64];
  uint64_t before = counters(rt).tasks, iters = SLOW_ITERS;
  assert_true(n <= 64);
  for (unsigned i = 0; i < n; i++) {
    v[i] = tdm_malloc(sizeof(uint64_t));
    assert_non_null(v[i]);
    v[i][0] = 0;
    assert_int_equal(tdm_register_vector(rt, v[i], 1, sizeof(uint64_t), &h[i]), TDM_OK);
  }
  for (unsigned i = 0; i < n; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = cl, .handles = {h[i]},
                                                     .args = &iters, .args_size = sizeof iters}),
                     TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  for (unsigned i = 0; i < n; i++) {
    assert_int_equal(tdm_handle_unregister(h[i]), TDM_OK);
    assert_int_equal(v[i][0], 1);
    tdm_free(v[i]);
  }
  return (unsigned)(counters(rt).tasks - before);
}

/* Under eager, a slow device takes the shared queue's head whenever its
 * window has room. With the window fixed at 4 (device_tasks 4), it takes
 * 4 tasks at once and the graph ends when the last of them does; the
 * adaptive window (device_tasks 0, the default) launches the next task
 * only when the device would otherwise run dry, so the fast CPU workers
 * take the rest meanwhile: the device runs 1 or 2, not 4. (A first batch
 * of device-only tasks calibrates the device: a window knows nothing of
 * a task whose time there is unknown, and is as deep as allowed.) */
static double window_run(unsigned device_tasks, unsigned *on_device) {
  test_log log;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.cache_dir = cache_dir;
  cfg.ignore_env = 1;
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.opencl_cpu_devices = 1;
  cfg.device_memory = discrete ? TDM_MEMORY_SEPARATE : TDM_MEMORY_SHARED;
  cfg.scheduler = "eager";
  cfg.device_tasks = device_tasks;
  test_log_attach(&cfg, &log);
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  assert_int_equal(slow_tasks(rt, &slow_gpu_only, 4), 4);
  double t0 = now_s();
  *on_device = slow_tasks(rt, &slow_both, 40);
  double took = now_s() - t0;
  tdm_runtime_destroy(rt);
  assert_int_equal(test_log_errors(&log), 0);
  return took;
}

static void test_adaptive_window(void **state) {
  (void)state;
  unsigned fixed, adaptive;
  double t_fixed = window_run(4, &fixed);
  double t_adaptive = window_run(0, &adaptive);
  printf("40 tasks, eager: window of 4: %u on the device, %.1f ms; adaptive: %u, %.1f ms\n",
         fixed, 1e3 * t_fixed, adaptive, 1e3 * t_adaptive);
  assert_true(fixed >= 3); /* the test sees what a fixed window costs */
  assert_true(adaptive <= 2);
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
  unsigned ids[8], ndev = test_used_devices(rt, ids, 8);
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
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &copy, .handles = {hx, hy}}),
                   TDM_OK);
  saxpy(rt, &saxpy_gpu_only, hx, hy, 1.0f); /* then a kernel on the copy: y = 2x */
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 2 * x[i]);
  assert_int_equal(counters(rt).tasks, 2);
  tdm_handle_unregister(hx);
  run_end(rt, x, y);
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
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
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
  run_end(rt, x, y);
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
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
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
  run_end(rt, x, y);
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

static void test_no_device(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 0); /* PoCL not admitted */
  float *x = array(1, 0), *y = array(1, 0);
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
  assert_int_equal(
      tdm_submit(rt, &(tdm_task_desc){.codelet = &saxpy_gpu_only, .handles = {hx, hy},
                                      .args = &(float){1}, .args_size = sizeof(float)}),
      TDM_ERR_NO_DEVICE);
  /* and why: what discovery found */
  assert_true(test_log_has(&log, "no device is used (device 0 ("));
  assert_true(test_log_has(&log, "not used: an OpenCL CPU device runs on the cores"));
  saxpy(rt, &saxpy_both, hx, hy, 1.0f); /* runs on the CPU */
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_true(y[0] == 2.0f);
  run_end(rt, x, y);
}

static void test_two_devices_gemm(void **state) {
  (void)state;
  tiled_gemm(false, true);
}

static void test_two_devices_gemm_both_variants(void **state) {
  (void)state;
  tiled_gemm(true, true);
}

/* Paused: a try already on the device ends (a CPU worker, parked, ends
 * it: it can be waited for); the next task is not launched until the
 * runtime is resumed, then runs where it was placed. */
static void test_pause_with_device(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  float *x = array(1, 1), *y = array(0, 0);
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
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
  run_end(rt, x, y);
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
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
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
  run_end(rt, x, y);
  assert_int_equal(test_log_errors(&log), 0);
}


int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vector_add),
      cmocka_unit_test(test_saxpy_chain_alternating),
      cmocka_unit_test(test_recorded_graph),
      cmocka_unit_test(test_device_chain),
      cmocka_unit_test(test_device_chain_home_at_destroy),
      cmocka_unit_test(test_chain_while_cpus_busy),
      cmocka_unit_test(test_destroy_while_device_chain_grows),
      cmocka_unit_test(test_both_variants),
      cmocka_unit_test(test_modes_on_device),
      cmocka_unit_test(test_adaptive_window),
      cmocka_unit_test(test_tiled_gemm),
      cmocka_unit_test(test_tiled_gemm_both_variants),
      cmocka_unit_test(test_escape_hatch),
      cmocka_unit_test(test_eviction),
      cmocka_unit_test(test_too_large),
      cmocka_unit_test(test_opencl_device),
      cmocka_unit_test(test_vector_pieces_on_device),
      cmocka_unit_test(test_no_device),
      cmocka_unit_test(test_pause_with_device),
      cmocka_unit_test(test_pinned_after_device),
  };
  const struct CMUnitTest two[] = {
      cmocka_unit_test(test_two_devices_readers),
      cmocka_unit_test(test_two_devices_copy_between),
      cmocka_unit_test(test_two_devices_gemm),
      cmocka_unit_test(test_two_devices_gemm_both_variants),
  };
  return opencl_fixture_main(argc, argv, "test-opencl-run", tests, sizeof tests / sizeof *tests,
                             two, sizeof two / sizeof *two, NULL, 0);
}
