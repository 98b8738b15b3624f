/*
 * Data-parallel operations (tdm_parallel_submit): exact results over odd
 * and prime sizes, 1-D and 2-D, on the CPU workers alone, with emulated
 * devices sharing the host's memory and with memory of their own, and on
 * PoCL behaving as an integrated and as a discrete GPU (those cases
 * skipped without it); the plan's chunks; composition with tasks before
 * and after; groups, cancel and the statistics; bad descriptions.
 */
#include "common.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>

#include "internal.h" /* tdm__parallel_plan */
#include "tandem/opencl.h"

/* ---- kernels ------------------------------------------------------------- */

typedef struct {
  float a;
} saxpy_args;

/* y[i] = a * x[i] + y[i] + i (the global index, so that a chunk that
 * used the wrong offset is seen) */
static void saxpy_cpu(const tdm_buffer *b, const tdm_range *r, const void *args, size_t size) {
  assert_int_equal(size, sizeof(saxpy_args));
  float a = ((const saxpy_args *)args)->a;
  float *y = b[0].ptr;
  const float *x = b[1].ptr;
  size_t n = r->end[0] - r->begin[0];
  assert_int_equal(b[0].rows, n);
  for (size_t i = 0; i < n; i++)
    y[i] = a * x[i] + y[i] + (float)(r->begin[0] + i);
}

static const tdm_opencl_variant saxpy_cl = {
    .source = "__kernel void saxpy(__global float *y, ulong ny, __global const float *x,\n"
              "                    ulong nx, float a) {\n"
              "  size_t i = get_global_id(0) - get_global_offset(0);\n"
              "  y[i] = a * x[i] + y[i] + (float)get_global_id(0);\n"
              "}\n",
    .kernel = "saxpy"};
static const tdm_codelet saxpy = {.name = "par_saxpy",
                                  .nbuffers = 2,
                                  .modes = {TDM_RW, TDM_R},
                                  .opencl = &saxpy_cl};

/* 2-D: out[r][c] = sum of in's column c over rows r-1 .. r+1 (clamped),
 * + r * 1000 + c: in read whole, out split by rows */
static void blur_cpu(const tdm_buffer *b, const tdm_range *r, const void *args, size_t size) {
  (void)args, (void)size;
  const tdm_buffer *out = &b[0], *in = &b[1];
  assert_int_equal(out->cols, r->end[1]);
  for (size_t i = r->begin[0]; i < r->end[0]; i++)
    for (size_t c = r->begin[1]; c < r->end[1]; c++) {
      float s = 0;
      for (long d = -1; d <= 1; d++) {
        long rr = (long)i + d;
        if (rr >= 0 && rr < (long)in->rows)
          s += ((const float *)in->ptr)[(size_t)rr * in->ld + c];
      }
      ((float *)out->ptr)[(i - r->begin[0]) * out->ld + c] = s + (float)(i * 1000 + c);
    }
}

static const tdm_opencl_variant blur_cl = {
    .source =
        "__kernel void blur(__global float *out, ulong orows, ulong ocols, ulong old,\n"
        "                   __global const float *in, ulong rows, ulong cols, ulong ld) {\n"
        "  size_t c = get_global_id(0), i = get_global_id(1);\n"
        "  float s = 0;\n"
        "  for (long d = -1; d <= 1; d++) {\n"
        "    long rr = (long)i + d;\n"
        "    if (rr >= 0 && rr < (long)rows) s += in[rr * ld + c];\n"
        "  }\n"
        "  out[(i - get_global_offset(1)) * old + c] = s + (float)(i * 1000 + c);\n"
        "}\n",
    .kernel = "blur"};
static const tdm_codelet blur = {
    .name = "par_blur", .nbuffers = 2, .modes = {TDM_W, TDM_R}, .opencl = &blur_cl};

/* ---- machines -------------------------------------------------------------- */

enum machine { CPU_ONLY, SIM_SHARED, SIM_OWN, POCL_INTEGRATED, POCL_DISCRETE, NMACHINES };
static const char *machine_name[] = {"cpu", "emulated shared", "emulated own", "pocl integrated",
                                     "pocl discrete"};

/* This run's cache (models, programs): fresh, so that no earlier run's
 * models steer the placement. */
static char cache_dir[64];

/* What every runtime of these tests has: 2 CPU workers, not bound, the
 * environment ignored, the log into *log. */
static void base_config(tdm_config *cfg, test_log *log) {
  memset(log, 0, sizeof *log);
  pthread_mutex_init(&log->lock, NULL);
  tdm_config_init(cfg);
  cfg->ignore_env = 1;
  cfg->nworkers = 2;
  cfg->bind_workers = 0;
  cfg->log_fn = test_log_fn;
  cfg->log_data = log;
  cfg->cache_dir = cache_dir;
}

static tdm_runtime *machine(enum machine m, test_log *log, const char *scheduler) {
  tdm_config cfg;
  base_config(&cfg, log);
  cfg.scheduler = scheduler;
  switch (m) {
  case CPU_ONLY:
    cfg.devices = "none";
    break;
  case SIM_SHARED:
    cfg.sim = "igpu:speedup=12,memory=shared";
    cfg.sim_time_scale = 0;
    break;
  case SIM_OWN:
    cfg.sim = "gpu:speedup=10,latency=10us,bandwidth=10G";
    break;
  case POCL_INTEGRATED:
  case POCL_DISCRETE:
    cfg.opencl_cpu_devices = 1;
    cfg.device_memory = m == POCL_DISCRETE ? TDM_MEMORY_SEPARATE : TDM_MEMORY_SHARED;
    break;
  default:
    break;
  }
  tdm_runtime *rt = NULL;
  if (tdm_runtime_create(&cfg, &rt))
    return NULL;
  if (m >= POCL_INTEGRATED && tdm_runtime_nworkers(rt) == tdm_runtime_ncpu_workers(rt)) {
    tdm_runtime_destroy(rt); /* no OpenCL device here */
    printf("  %s: no such device here, skipped\n", machine_name[m]);
    return NULL;
  }
  return rt;
}

/* ---- the plan ---------------------------------------------------------------- */

static void test_plan(void **state) {
  (void)state;
  static size_t sizes[5000], at[5001], slot_of[5000];
  /* every size, grain and speed: the chunks cover the range, none under
   * the grain unless the range is, at most max_chunks; the layout puts
   * each in a slot of its size, every slot used once */
  for (size_t rows = 1; rows < 400; rows += 7)
    for (size_t grain = 1; grain < 40; grain += 6)
      for (double units = 1; units < 30; units *= 2.5)
        for (unsigned probes = 0; probes < 7; probes += 3) {
          size_t n = tdm__parallel_plan(rows, grain, units, probes, 4096, sizes);
          assert_int_equal(n, tdm__parallel_plan(rows, grain, units, probes, 4096, NULL));
          assert_true(n >= 1);
          size_t sum = 0;
          for (size_t i = 0; i < n; i++) {
            sum += sizes[i];
            if (rows >= grain)
              assert_true(sizes[i] >= grain);
          }
          assert_int_equal(sum, rows);
          tdm__parallel_layout(sizes, n, at, slot_of);
          assert_int_equal(at[0], 0);
          assert_int_equal(at[n], rows);
          static bool used[5000];
          memset(used, 0, n);
          for (size_t i = 0; i < n; i++) {
            assert_true(slot_of[i] < n && !used[slot_of[i]]);
            used[slot_of[i]] = true;
            assert_int_equal(at[slot_of[i] + 1] - at[slot_of[i]], sizes[i]);
          }
          assert_true(tdm__parallel_plan(rows, grain, units, probes, 3, NULL) <= 3);
        }
  /* guided: the first chunk is rows / (K units), sizes never grow; the
   * first two chunks lie at the start and the middle of the range */
  size_t n = tdm__parallel_plan(100000, 1, 12, 0, 4096, sizes);
  size_t k12 = TDM_PARALLEL_GUIDED_K * 12;
  assert_int_equal(sizes[0], 100000 / k12 + (100000 % k12 != 0));
  for (size_t i = 1; i < n; i++)
    assert_true(sizes[i] <= sizes[i - 1]);
  assert_true(n > k12 && n < 40 * k12);
  tdm__parallel_layout(sizes, n, at, slot_of);
  assert_int_equal(at[slot_of[0]], 0);
  assert_true(at[slot_of[1]] > 30000 && at[slot_of[1]] < 70000);
  /* probes: the first chunks small */
  n = tdm__parallel_plan(100000, 1, 3, 6, 4096, sizes);
  for (size_t i = 0; i < 6; i++)
    assert_int_equal(sizes[i], 100000 / 192 + 1);
  assert_true(sizes[6] > 10 * sizes[0]);
}

/* ---- exact results ----------------------------------------------------------- */

/* SAXPY's data: x and y of n elements, registered, and the operation
 * over them (a = 2, both split), with `stats`. */
typedef struct saxpy_data {
  size_t n;
  float *x, *y;
  tdm_handle *hx, *hy;
  saxpy_args a;
  tdm_parallel_desc d;
} saxpy_data;

static void saxpy_setup(tdm_runtime *rt, size_t n, saxpy_data *s, tdm_parallel_stats *stats) {
  s->n = n;
  s->x = malloc(n * sizeof *s->x);
  s->y = malloc(n * sizeof *s->y);
  assert_true(s->x && s->y);
  for (size_t i = 0; i < n; i++) {
    s->x[i] = (float)(i % 97);
    s->y[i] = (float)(i % 13);
  }
  assert_int_equal(tdm_register_vector(rt, s->y, n, sizeof *s->y, &s->hy), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, s->x, n, sizeof *s->x, &s->hx), TDM_OK);
  s->a = (saxpy_args){2};
  s->d = (tdm_parallel_desc){.struct_size = sizeof s->d,
                             .codelet = &saxpy,
                             .cpu_fn = saxpy_cpu,
                             .range = {n, 0},
                             .handles = {s->hy, s->hx},
                             .split_mask = 3,
                             .args = &s->a,
                             .args_size = sizeof s->a,
                             .stats = stats};
}

/* The elements of y that are not SAXPY's result (a = 2). */
static int saxpy_wrong(const saxpy_data *s) {
  int wrong = 0;
  for (size_t i = 0; i < s->n; i++)
    if (s->y[i] != 2 * (float)(i % 97) + (float)(i % 13) + (float)i)
      wrong++;
  return wrong;
}

static void saxpy_free(saxpy_data *s) {
  free(s->x);
  free(s->y);
}

static int run_saxpy(tdm_runtime *rt, size_t n, size_t grain, bool cpu,
                     tdm_parallel_stats *stats) {
  saxpy_data s;
  saxpy_setup(rt, n, &s, stats);
  s.d.cpu_fn = cpu ? saxpy_cpu : NULL;
  s.d.grain = grain;
  tdm_task *end;
  assert_int_equal(tdm_parallel_submit(rt, &s.d, &end), TDM_OK);
  assert_int_equal(tdm_task_wait(end), TDM_OK);
  tdm_task_release(end);
  assert_int_equal(tdm_handle_unregister(s.hy), TDM_OK);
  assert_int_equal(tdm_handle_unregister(s.hx), TDM_OK);
  int wrong = saxpy_wrong(&s);
  saxpy_free(&s);
  return wrong;
}

static void test_saxpy_sizes(void **state) {
  (void)state;
  static const size_t sizes[] = {1, 2, 3, 7, 97, 1009, 4099, 65537, 262147};
  for (int m = 0; m < NMACHINES; m++) {
    test_log log;
    tdm_runtime *rt = machine((enum machine)m, &log, NULL);
    if (!rt)
      continue;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (size_t grain = 1; grain <= 64; grain *= 64) {
      for (int cpu = 1; cpu >= (m >= POCL_INTEGRATED ? 0 : 1); cpu--) {
        tdm_parallel_stats st = {.struct_size = sizeof st};
        int wrong = run_saxpy(rt, sizes[s], grain, cpu, &st);
        if (wrong)
          fail_msg("%s: saxpy over %zu (grain %zu%s): %d wrong", machine_name[m], sizes[s],
                   grain, cpu ? "" : ", devices only", wrong);
        if (getenv("TEST_VERBOSE"))
          printf("  %s n %zu grain %zu cpu %d: %u chunks, cpu %" PRIu64 "/%" PRIu64
                 " dev %" PRIu64 "/%" PRIu64 ", makespan %.3f ms tail %.3f ms\n",
                 machine_name[m], sizes[s], grain, cpu, st.chunks, st.class_chunks[0],
                 st.class_elements[0], st.class_chunks[1], st.class_elements[1],
                 1e3 * st.makespan, 1e3 * st.tail);
        if (!cpu) /* every chunk on the device, its kernel at its offset */
          assert_int_equal(st.class_elements[0], 0);
        else if (m >= POCL_INTEGRATED) /* on the CPU cores: not used unless named */
          assert_int_equal(st.class_elements[0], sizes[s]);
        uint64_t elements = 0, chunks = 0;
        for (unsigned c = 0; c < st.nclasses; c++)
          elements += st.class_elements[c], chunks += st.class_chunks[c];
        assert_int_equal(elements, sizes[s]);
        assert_int_equal(chunks, st.chunks);
        assert_int_equal(st.failed, 0);
        assert_true(st.chunks >= 1 && st.chunks <= sizes[s]);
      }
      }
    assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  }
}

static void test_blur_2d(void **state) {
  (void)state;
  static const size_t shapes[][2] = {{1, 1}, {3, 5}, {31, 17}, {257, 131}, {509, 7}};
  for (int m = 0; m < NMACHINES; m++) {
    test_log log;
    tdm_runtime *rt = machine((enum machine)m, &log, NULL);
    if (!rt)
      continue;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      size_t rows = shapes[s][0], cols = shapes[s][1], ld = cols + 3;
      float *in = malloc(rows * ld * sizeof *in), *out = calloc(rows * ld, sizeof *out);
      for (size_t i = 0; i < rows * ld; i++)
        in[i] = (float)(i % 31);
      tdm_handle *ho, *hi;
      assert_int_equal(tdm_register_matrix(rt, out, ld, rows, cols, sizeof *out, &ho), TDM_OK);
      assert_int_equal(tdm_register_matrix(rt, in, ld, rows, cols, sizeof *in, &hi), TDM_OK);
      tdm_parallel_desc d = {.codelet = &blur,
                             .cpu_fn = blur_cpu,
                             .range = {rows, cols},
                             .handles = {ho, hi},
                             .split_mask = 1,
                             /* PoCL, on the CPU cores, is used when named */
                             .device_mask = m >= POCL_INTEGRATED ? 1 : 0};
      assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_OK);
      assert_int_equal(tdm_wait_all(rt), TDM_OK);
      assert_int_equal(tdm_handle_unregister(ho), TDM_OK);
      assert_int_equal(tdm_handle_unregister(hi), TDM_OK);
      for (size_t i = 0; i < rows; i++)
        for (size_t c = 0; c < cols; c++) {
          float e = (float)(i * 1000 + c);
          for (long dd = -1; dd <= 1; dd++) {
            long rr = (long)i + dd;
            if (rr >= 0 && rr < (long)rows)
              e += in[(size_t)rr * ld + c];
          }
          if (out[i * ld + c] != e)
            fail_msg("%s: blur %zux%zu: (%zu, %zu) is %g, not %g", machine_name[m], rows, cols,
                     i, c, out[i * ld + c], e);
        }
      for (size_t i = 0; i < rows; i++) /* past the columns: untouched */
        for (size_t c = cols; c < ld; c++)
          assert_true(out[i * ld + c] == 0);
      free(in), free(out);
    }
    assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  }
}

/* ---- in the graph -------------------------------------------------------------- */

static void add_one_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)args, (void)size;
  float *y = b[0].ptr;
  for (size_t i = 0; i < b[0].rows; i++)
    y[i] += 1;
}
static const tdm_codelet add_one = {
    .name = "par_add_one", .cpu_fn = add_one_cpu, .nbuffers = 1, .modes = {TDM_RW}};
static void times_two_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)args, (void)size;
  float *y = b[0].ptr;
  for (size_t i = 0; i < b[0].rows; i++)
    y[i] *= 2;
}
static const tdm_codelet times_two = {
    .name = "par_times_two", .cpu_fn = times_two_cpu, .nbuffers = 1, .modes = {TDM_RW}};

/* task, operation, task, operation, task on one vector: each step sees the
 * one before whole */
static void test_between_tasks(void **state) {
  (void)state;
  for (int m = 0; m < NMACHINES; m++) {
    test_log log;
    tdm_runtime *rt = machine((enum machine)m, &log, NULL);
    if (!rt)
      continue;
    size_t n = 10007;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++)
      x[i] = (float)(i % 5), y[i] = (float)(i % 3);
    tdm_handle *hy, *hx;
    assert_int_equal(tdm_register_vector(rt, y, n, sizeof *y, &hy), TDM_OK);
    assert_int_equal(tdm_register_vector(rt, x, n, sizeof *x, &hx), TDM_OK);
    saxpy_args a = {1};
    tdm_parallel_desc d = {.codelet = &saxpy,
                           .cpu_fn = saxpy_cpu,
                           .range = {n},
                           .handles = {hy, hx},
                           .split_mask = 3,
                           .args = &a,
                           .args_size = sizeof a,
                           .grain = 100,
                           .device_mask = m >= POCL_INTEGRATED ? 1 : 0};
    tdm_task_desc t1 = {.codelet = &add_one, .handles = {hy}};
    tdm_task_desc t2 = {.codelet = &times_two, .handles = {hy}};
    assert_int_equal(tdm_submit(rt, &t1), TDM_OK);
    assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_OK);
    assert_int_equal(tdm_submit(rt, &t2), TDM_OK);
    assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_OK);
    assert_int_equal(tdm_submit(rt, &t1), TDM_OK);
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
    assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
    for (size_t i = 0; i < n; i++) {
      float v = (float)(i % 3) + 1;
      v = v + (float)(i % 5) + (float)i;
      v *= 2;
      v = v + (float)(i % 5) + (float)i;
      v += 1;
      if (y[i] != v)
        fail_msg("%s: element %zu is %g, not %g", machine_name[m], i, y[i], v);
    }
    free(x), free(y);
    assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  }
}

/* A group's progress counts the operation's elements; cancelled before
 * it could start (a task it waits for is held), the operation ends
 * cancelled and its output is lost; the statistics count no chunk. */
static _Atomic int gate;
static void held_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)b, (void)args, (void)size;
  while (!atomic_load(&gate))
    usleep(1000);
}
static const tdm_codelet held = {
    .name = "par_held", .cpu_fn = held_cpu, .nbuffers = 1, .modes = {TDM_RW}};

static void test_group_progress_and_cancel(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = machine(CPU_ONLY, &log, NULL);
  size_t n = 5003;
  float *x = calloc(n, sizeof *x), *y = calloc(n, sizeof *y);
  tdm_handle *hy, *hx;
  assert_int_equal(tdm_register_vector(rt, y, n, sizeof *y, &hy), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, x, n, sizeof *x, &hx), TDM_OK);
  tdm_group *g;
  assert_int_equal(tdm_group_create(rt, NULL, &g), TDM_OK);
  saxpy_args a = {1};
  tdm_parallel_stats st = {.struct_size = sizeof st};
  tdm_parallel_desc d = {.codelet = &saxpy,
                         .cpu_fn = saxpy_cpu,
                         .range = {n},
                         .handles = {hy, hx},
                         .split_mask = 3,
                         .args = &a,
                         .args_size = sizeof a,
                         .grain = 64,
                         .group = g,
                         .stats = &st};
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_OK);
  assert_int_equal(tdm_group_wait(g), TDM_OK);
  tdm_group_progress p = {.struct_size = sizeof p};
  assert_int_equal(tdm_group_get_progress(g, &p), TDM_OK);
  assert_int_equal(p.submitted, st.chunks + 1); /* and the last node */
  /* (a task's cost is kept to about 3 significant digits) */
  assert_true(p.cost_ended > 0.99 * (double)n && p.cost_ended < 1.01 * (double)n);
  assert_true(p.cost_ended == p.cost_submitted);
  tdm_group_release(g);

  /* cancelled while it waits for a held task */
  atomic_store(&gate, 0);
  assert_int_equal(tdm_group_create(rt, NULL, &g), TDM_OK);
  tdm_task_desc h = {.codelet = &held, .handles = {hy}};
  assert_int_equal(tdm_submit(rt, &h), TDM_OK);
  d.group = g;
  tdm_task *end;
  assert_int_equal(tdm_parallel_submit(rt, &d, &end), TDM_OK);
  assert_int_equal(tdm_group_cancel(g), TDM_OK);
  atomic_store(&gate, 1);
  assert_int_equal(tdm_task_wait(end), TDM_ERR_CANCELLED);
  tdm_task_release(end);
  assert_int_equal(st.failed, st.chunks);
  assert_int_equal(st.class_chunks[0], 0);
  tdm_group_wait(g);
  tdm_group_release(g);
  assert_int_equal(tdm_handle_acquire(hy, TDM_R), TDM_ERR_LOST);
  assert_int_equal(tdm_handle_unregister(hy), TDM_ERR_LOST);
  assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
  tdm_wait_all(rt);
  free(x), free(y);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
}

/* ---- reductions ---------------------------------------------------------------- */

/* SUM of doubles over a vector (1-D) or a matrix (2-D): the CPU
 * function adds its rows into element 0 of its partial values; the
 * kernel sums each work-group's elements in local memory. Integer values:
 * every split gives the sum exactly. */
static void vsum_cpu(const tdm_buffer *b, const tdm_range *r, const void *args, size_t size) {
  (void)args, (void)size;
  double s = 0;
  for (size_t i = 0; i < r->end[0] - r->begin[0]; i++)
    for (size_t c = 0; c < b[0].cols; c++)
      s += ((const double *)b[0].ptr)[i * b[0].ld + c];
  ((double *)b[1].ptr)[0] += s;
}

static const tdm_opencl_variant vsum_cl = {
    .source = "__kernel void vsum(__global const double *x, ulong nx,\n"
              "                   __global double *partial, ulong slots) {\n"
              "  __local double s[64];\n"
              "  size_t l = get_local_id(0), i = get_global_id(0) - get_global_offset(0);\n"
              "  s[l] = i < nx ? x[i] : 0.0;\n"
              "  barrier(CLK_LOCAL_MEM_FENCE);\n"
              "  for (size_t k = 32; k > 0; k >>= 1) {\n"
              "    if (l < k) s[l] += s[l + k];\n"
              "    barrier(CLK_LOCAL_MEM_FENCE);\n"
              "  }\n"
              "  if (l == 0) partial[get_group_id(0)] = s[0];\n"
              "}\n",
    .kernel = "vsum"};
static const tdm_codelet vsum = {
    .name = "par_vsum", .nbuffers = 1, .modes = {TDM_R}, .opencl = &vsum_cl};

static const tdm_opencl_variant msum_cl = {
    .source = "__kernel void msum(__global const double *m, ulong rows, ulong cols, ulong ld,\n"
              "                   __global double *partial, ulong slots) {\n"
              "  __local double s[64];\n"
              "  size_t l = get_local_id(0), c = get_global_id(0);\n"
              "  size_t r = get_global_id(1) - get_global_offset(1);\n"
              "  s[l] = c < cols ? m[r * ld + c] : 0.0;\n"
              "  barrier(CLK_LOCAL_MEM_FENCE);\n"
              "  for (size_t k = 32; k > 0; k >>= 1) {\n"
              "    if (l < k) s[l] += s[l + k];\n"
              "    barrier(CLK_LOCAL_MEM_FENCE);\n"
              "  }\n"
              "  if (l == 0)\n"
              "    partial[get_group_id(0) + get_group_id(1) * get_num_groups(0)] = s[0];\n"
              "}\n",
    .kernel = "msum"};
static const tdm_codelet msum = {
    .name = "par_msum", .nbuffers = 1, .modes = {TDM_R}, .opencl = &msum_cl};

/* MIN and MAX of floats. */
static void vmin_cpu(const tdm_buffer *b, const tdm_range *r, const void *args, size_t size) {
  (void)args, (void)size;
  float *acc = b[1].ptr;
  for (size_t i = 0; i < r->end[0] - r->begin[0]; i++) {
    float v = ((const float *)b[0].ptr)[i];
    acc[0] = v < acc[0] ? v : acc[0];
  }
}
static void vmax_cpu(const tdm_buffer *b, const tdm_range *r, const void *args, size_t size) {
  (void)args, (void)size;
  float *acc = b[1].ptr;
  for (size_t i = 0; i < r->end[0] - r->begin[0]; i++) {
    float v = ((const float *)b[0].ptr)[i];
    acc[0] = v > acc[0] ? v : acc[0];
  }
}
static const tdm_codelet vfloat = {.name = "par_vfloat", .nbuffers = 1, .modes = {TDM_R}};

/* A user reduction that is associative but not commutative: the product
 * of 2x2 matrices modulo 2^32, element i's being [[i % 7 + 1, 1], [1, 0]]:
 * the partial values must be combined in the order of the range. */
typedef struct {
  uint32_t a, b, c, d;
} mat2;
static const mat2 mat_one = {1, 0, 0, 1};
static void mat_mul(void *acc, const void *value) {
  mat2 x, y;
  memcpy(&x, acc, sizeof x);
  memcpy(&y, value, sizeof y);
  mat2 z = {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c,
            x.c * y.b + x.d * y.d};
  memcpy(acc, &z, sizeof z);
}
static mat2 mat_of(size_t i) {
  return (mat2){(uint32_t)(i % 7 + 1), 1, 1, 0};
}
static void vprod_cpu(const tdm_buffer *b, const tdm_range *r, const void *args, size_t size) {
  (void)b, (void)args, (void)size;
  mat2 p = mat_one;
  for (size_t i = r->begin[0]; i < r->end[0]; i++) {
    mat2 m = mat_of(i);
    mat_mul(&p, &m);
  }
  mat_mul(b[1].ptr, &p);
}
static const tdm_codelet vprod = {.name = "par_vprod", .nbuffers = 1, .modes = {TDM_R}};

/* One reduction over h (range n x cols) into a fresh result: its status
 * and the value in out (vsize bytes). */
static tdm_status reduce_once(tdm_runtime *rt, const tdm_codelet *cl, tdm_range_fn fn,
                              tdm_handle *h, size_t n, size_t cols, tdm_reduce_op op,
                              tdm_elem_type type, size_t vsize, uint64_t device_mask,
                              void *out) {
  unsigned char value[64] = {0};
  tdm_handle *res;
  assert_int_equal(tdm_register_vector(rt, value, 1, vsize, &res), TDM_OK);
  tdm_parallel_desc d = {.codelet = cl,
                         .cpu_fn = fn,
                         .range = {n, cols},
                         .handles = {h},
                         .split_mask = 1,
                         .reduce = op,
                         .reduce_type = type,
                         .reduce_size = vsize,
                         .combine = op == TDM_REDUCE_USER ? mat_mul : NULL,
                         .identity = op == TDM_REDUCE_USER ? &mat_one : NULL,
                         .result = res,
                         .device_mask = device_mask};
  tdm_task *end;
  tdm_status st = tdm_parallel_submit(rt, &d, &end);
  if (!st) {
    st = tdm_task_wait(end);
    tdm_task_release(end);
  }
  tdm_status un = tdm_handle_unregister(res);
  memcpy(out, value, vsize);
  return st ? st : un;
}

static void test_reductions(void **state) {
  (void)state;
  static const size_t sizes[] = {1, 7, 64, 65, 1009, 65537, 262147};
  for (int m = 0; m < NMACHINES; m++) {
    test_log log;
    tdm_runtime *rt = machine((enum machine)m, &log, NULL);
    if (!rt)
      continue;
    bool pocl = m >= POCL_INTEGRATED;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t n = sizes[k];
      double *x = malloc(n * sizeof *x);
      float *f = malloc(n * sizeof *f);
      double want = 0;
      float lo = INFINITY, hi = -INFINITY;
      mat2 prod = mat_one;
      for (size_t i = 0; i < n; i++) {
        x[i] = (double)(i % 1000);
        want += x[i];
        f[i] = (float)((i * 7919) % 10007) - 5000.0f;
        lo = f[i] < lo ? f[i] : lo;
        hi = f[i] > hi ? f[i] : hi;
        mat2 mi = mat_of(i);
        mat_mul(&prod, &mi);
      }
      tdm_handle *hx, *hf;
      assert_int_equal(tdm_register_vector(rt, x, n, sizeof *x, &hx), TDM_OK);
      assert_int_equal(tdm_register_vector(rt, f, n, sizeof *f, &hf), TDM_OK);
      double got = -1;
      /* beside the CPU workers; on PoCL also its kernel alone */
      assert_int_equal(reduce_once(rt, &vsum, vsum_cpu, hx, n, 0, TDM_REDUCE_SUM,
                                   TDM_ELEM_DOUBLE, 8, pocl ? 1 : 0, &got),
                       TDM_OK);
      if (got != want)
        fail_msg("%s: sum over %zu is %.17g, not %.17g", machine_name[m], n, got, want);
      if (pocl) {
        got = -1;
        assert_int_equal(reduce_once(rt, &vsum, NULL, hx, n, 0, TDM_REDUCE_SUM,
                                     TDM_ELEM_DOUBLE, 8, 0, &got),
                         TDM_OK);
        if (got != want)
          fail_msg("%s: the kernel's sum over %zu is %.17g, not %.17g", machine_name[m], n,
                   got, want);
      }
      float fl = 0, fh = 0;
      assert_int_equal(reduce_once(rt, &vfloat, vmin_cpu, hf, n, 0, TDM_REDUCE_MIN,
                                   TDM_ELEM_FLOAT, 4, 0, &fl),
                       TDM_OK);
      assert_int_equal(reduce_once(rt, &vfloat, vmax_cpu, hf, n, 0, TDM_REDUCE_MAX,
                                   TDM_ELEM_FLOAT, 4, 0, &fh),
                       TDM_OK);
      assert_true(fl == lo && fh == hi);
      mat2 p;
      assert_int_equal(reduce_once(rt, &vprod, vprod_cpu, hx, n, 0, TDM_REDUCE_USER,
                                   TDM_ELEM_BYTES, sizeof p, 0, &p),
                       TDM_OK);
      if (memcmp(&p, &prod, sizeof p))
        fail_msg("%s: the ordered product over %zu differs: combined out of order", machine_name[m],
                 n);
      assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
      assert_int_equal(tdm_handle_unregister(hf), TDM_OK);
      free(x), free(f);
    }
    /* 2-D: a matrix's sum, ld past its columns */
    static const size_t shapes[][2] = {{1, 1}, {3, 65}, {257, 131}, {61, 7}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
      size_t rows = shapes[k][0], cols = shapes[k][1], ld = cols + 5;
      double *a = malloc(rows * ld * sizeof *a), want = 0;
      for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < ld; c++) {
          a[r * ld + c] = c < cols ? (double)((r * 31 + c) % 100) : 1e9; /* past: not summed */
          want += c < cols ? a[r * ld + c] : 0;
        }
      tdm_handle *ha;
      assert_int_equal(tdm_register_matrix(rt, a, ld, rows, cols, sizeof *a, &ha), TDM_OK);
      for (int alone = 0; alone <= (pocl ? 1 : 0); alone++) {
        double got = -1;
        assert_int_equal(reduce_once(rt, &msum, alone ? NULL : vsum_cpu, ha, rows, cols,
                                     TDM_REDUCE_SUM, TDM_ELEM_DOUBLE, 8, pocl ? 1 : 0, &got),
                         TDM_OK);
        if (got != want)
          fail_msg("%s: 2-D sum %zux%zu%s is %.17g, not %.17g", machine_name[m], rows, cols,
                   alone ? " (kernel)" : "", got, want);
      }
      assert_int_equal(tdm_handle_unregister(ha), TDM_OK);
      free(a);
    }
    assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  }
}

/* A reduction described wrongly is refused, said why. */
static void test_reduction_refused(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = machine(CPU_ONLY, &log, NULL);
  double x[10] = {0}, r1[1], r2[2];
  tdm_handle *hx, *h1, *h2;
  assert_int_equal(tdm_register_vector(rt, x, 10, sizeof *x, &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, r1, 1, sizeof *r1, &h1), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, r2, 2, sizeof *r2, &h2), TDM_OK);
  tdm_parallel_desc ok = {.codelet = &vsum, .cpu_fn = vsum_cpu, .range = {10}, .handles = {hx},
                          .split_mask = 1, .reduce = TDM_REDUCE_SUM,
                          .reduce_type = TDM_ELEM_DOUBLE, .result = h1};
  tdm_parallel_desc d = ok;
  d.result = NULL;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.result = h2; /* two values */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.reduce_type = TDM_ELEM_FLOAT; /* a double result */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.reduce = TDM_REDUCE_USER, d.reduce_size = 8; /* no combine, no identity */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  assert_true(test_log_has(&log, "combine and identity"));
  d = ok, d.reduce = (tdm_reduce_op)9;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.result = hx; /* one of the handles */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_parallel_submit(rt, &ok, NULL), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h1), TDM_OK);
  assert_true(r1[0] == 0);
  assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h2), TDM_OK);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
}

/* ---- failures ------------------------------------------------------------------ */

/* Chunks whose runs fail on an emulated device with memory of its own are
 * tried again, each only on its rows: the result is exact and the
 * operation done. Without retries, the operation ends cancelled (its
 * failed chunks failed, told), and what it writes is lost: never a
 * result reported done with rows missing. */
/* base_config with an emulated device that fails as `faults` says, the
 * failures retried `retries` times, the device kept in use. */
static void faults_config(tdm_config *cfg, test_log *log, const char *sim, const char *faults,
                          unsigned retries) {
  base_config(cfg, log);
  cfg->sim = sim;
  cfg->faults = faults;
  cfg->retries = retries;
  cfg->quarantine_failures = 0;
}

static void test_failing_chunks(void **state) {
  (void)state;
  for (unsigned retries = 3;; retries = 0) {
    test_log log;
    tdm_config cfg;
    /* one core 20 times slower than the device, which takes chunks as it
     * frees up (eager): it takes most (the emulated machine 1000 times
     * slower than this one, so that a chunk's time, not the emulator's
     * overhead, decides: on a loaded machine at the default scale the
     * core took 18 of 20); every 2nd launch there fails, and every 3rd
     * run fails after writing */
    faults_config(&cfg, &log, "gpu:speedup=20,latency=10us,bandwidth=10G",
                  "launch:nth=2;run:nth=3", retries);
    cfg.nworkers = 1;
    cfg.sim_time_scale = 1000;
    cfg.scheduler = "eager";
    cfg.writeback = 1;
    tdm_runtime *rt;
    assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
    tdm_parallel_stats st = {.struct_size = sizeof st};
    saxpy_data s;
    saxpy_setup(rt, 200003, &s, &st);
    s.d.grain = 512;
    tdm_task *end;
    assert_int_equal(tdm_parallel_submit(rt, &s.d, &end), TDM_OK);
    tdm_status got = tdm_task_wait(end);
    tdm_task_release(end);
    uint64_t tried_again = atomic_load(&rt->nretries);
    printf("  retries %u: %s, %u chunks, %llu done on the device, %llu failed, %llu tries "
           "again\n",
           retries, tdm_status_name(got), st.chunks, (unsigned long long)st.class_chunks[1],
           (unsigned long long)st.failed, (unsigned long long)tried_again);
    tdm_status un = tdm_handle_unregister(s.hy);
    assert_int_equal(tdm_handle_unregister(s.hx), TDM_OK);
    if (retries) {
      assert_int_equal(got, TDM_OK);
      assert_int_equal(un, TDM_OK);
      assert_true(st.class_chunks[1] > 0);
      assert_true(tried_again > 0); /* faults were met, and the chunks tried again */
      assert_int_equal(st.failed, 0);
      assert_int_equal(saxpy_wrong(&s), 0);
    } else {
      assert_int_equal(got, TDM_ERR_CANCELLED); /* a chunk failed: told */
      assert_true(st.failed > 0);
      assert_int_equal(un, TDM_ERR_LOST);
    }
    /* a reduction too: exact when retried, its result lost without */
    double *x = malloc(s.n * sizeof *x), sum = 0, total = -1;
    for (size_t i = 0; i < s.n; i++)
      sum += x[i] = (double)(i % 100);
    tdm_handle *hx;
    assert_int_equal(tdm_register_vector(rt, x, s.n, sizeof *x, &hx), TDM_OK);
    tdm_status r = reduce_once(rt, &vsum, vsum_cpu, hx, s.n, 0, TDM_REDUCE_SUM,
                               TDM_ELEM_DOUBLE, 8, 0, &total);
    printf("  retries %u, a reduction: %s\n", retries, tdm_status_name(r));
    if (retries) {
      assert_int_equal(r, TDM_OK);
      assert_true(total == sum);
    } else {
      /* the last node cancelled, or (no chunk of it failed) done */
      assert_true(r == TDM_OK ? total == sum : r == TDM_ERR_CANCELLED);
    }
    assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
    free(x);
    tdm_wait_all(rt);
    saxpy_free(&s);
    assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
    if (!retries)
      break;
  }
}

/* y as saxpy_setup left it, written on the host through an acquisition
 * (a device may hold its current version). */
static void saxpy_reset(saxpy_data *s) {
  assert_int_equal(tdm_handle_acquire(s->hy, TDM_W), TDM_OK);
  for (size_t i = 0; i < s->n; i++)
    s->y[i] = (float)(i % 13);
  assert_int_equal(tdm_handle_release(s->hy), TDM_OK);
}

/* One SAXPY over s (set up with saxpy_setup) with these flags and
 * shares: the status of its last node; the handles unregistered. */
static tdm_status saxpy_with(tdm_runtime *rt, saxpy_data *s, unsigned flags, double cpu_share,
                             double device_share) {
  s->d.flags = flags;
  s->d.shares[0] = cpu_share;
  s->d.shares[1] = device_share;
  tdm_task *end;
  assert_int_equal(tdm_parallel_submit(rt, &s->d, &end), TDM_OK);
  tdm_status got = tdm_task_wait(end);
  tdm_task_release(end);
  return got;
}

/* The CPU workers kept out (TDM_PARALLEL_NO_CPU, with a CPU function
 * that an emulated device runs) and the static split: each class gets
 * exactly its share, in one chunk per worker, with the right result; a
 * device's chunk that fails goes to the CPU workers, unless they are
 * kept out; the bytes an operation moved. */
static void test_static_and_devices_only(void **state) {
  (void)state;
  static const size_t sizes[] = {1, 7, 1009, 65537};
  for (int m = 0; m < NMACHINES; m++) {
    test_log log;
    tdm_runtime *rt = machine((enum machine)m, &log, NULL);
    if (!rt)
      continue;
    bool dev = m != CPU_ONLY, own = m == SIM_OWN || m == POCL_DISCRETE;
    /* PoCL, on the CPU cores, takes chunks only when named */
    uint64_t mask = m >= POCL_INTEGRATED ? 1 : 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t n = sizes[k];
      tdm_parallel_stats st = {.struct_size = sizeof st};
      saxpy_data s;
      /* devices only */
      saxpy_setup(rt, n, &s, &st);
      s.d.device_mask = mask;
      if (!dev) {
        s.d.flags = TDM_PARALLEL_NO_CPU;
        assert_int_equal(tdm_parallel_submit(rt, &s.d, NULL), TDM_ERR_NO_DEVICE);
        assert_true(test_log_has(&log, "the CPU workers may not"));
      } else {
        assert_int_equal(saxpy_with(rt, &s, TDM_PARALLEL_NO_CPU, 0, 0), TDM_OK);
        assert_int_equal(st.class_elements[0], 0);
        assert_int_equal(st.class_elements[1], n);
        /* a fresh vector's rows went to a device of its own once each, x's and y's;
         * a device sharing the host's memory copies nothing */
        assert_int_equal(st.bytes_moved, own ? 2 * n * sizeof(float) : 0);
        assert_int_equal(st.class_bytes[1], st.bytes_moved);
        /* the CPU workers alone next: y (written there) comes home, x (read) is home */
        assert_int_equal(saxpy_with(rt, &s, TDM_PARALLEL_NO_DEVICES, 0, 0), TDM_OK);
        assert_int_equal(st.class_elements[0], n);
        assert_int_equal(st.bytes_moved, own ? n * sizeof(float) : 0);
        assert_int_equal(st.class_bytes[0], st.bytes_moved);
      }
      assert_int_equal(tdm_handle_unregister(s.hy), TDM_OK);
      assert_int_equal(tdm_handle_unregister(s.hx), TDM_OK);
      if (dev) { /* y got SAXPY twice: once more by hand, as the check wants once */
        for (size_t i = 0; i < n; i++)
          s.y[i] -= 2 * (float)(i % 97) + (float)i;
        assert_int_equal(saxpy_wrong(&s), 0);
      }
      saxpy_free(&s);

      /* static: a quarter to the CPU workers (an eighth each), the rest to the device */
      saxpy_setup(rt, n, &s, &st);
      s.d.device_mask = mask;
      assert_int_equal(saxpy_with(rt, &s, TDM_PARALLEL_STATIC, 1, dev ? 3 : 0), TDM_OK);
      size_t cpu_rows = dev ? (size_t)llround((double)n / 4) : n;
      size_t first = dev ? (size_t)llround((double)n / 8) : (size_t)llround((double)n / 2);
      assert_int_equal(st.class_elements[0], cpu_rows);
      assert_int_equal(st.class_chunks[0], (first > 0) + (cpu_rows > first));
      if (dev) {
        assert_int_equal(st.class_elements[1], n - cpu_rows);
        assert_int_equal(st.class_chunks[1], n > cpu_rows);
      }
      assert_int_equal(st.chunks, st.class_chunks[0] + st.class_chunks[1]);
      assert_int_equal(st.failed, 0);
      /* by speed (a device the models cannot predict counts as 16 workers):
       * one chunk per worker, every element once */
      saxpy_reset(&s);
      assert_int_equal(saxpy_with(rt, &s, TDM_PARALLEL_STATIC, 0, 0), TDM_OK);
      assert_true(st.chunks <= 2u + dev);
      assert_int_equal(st.class_elements[0] + st.class_elements[1], n);
      if (dev && !mask && n >= 1009) /* the (emulated, faster) device's share the larger */
        assert_true(st.class_elements[1] > st.class_elements[0]);
      /* static, the device's alone */
      if (dev) {
        saxpy_reset(&s);
        assert_int_equal(saxpy_with(rt, &s, TDM_PARALLEL_STATIC | TDM_PARALLEL_NO_CPU, 0, 1),
                         TDM_OK);
        assert_int_equal(st.chunks, 1);
        assert_int_equal(st.class_elements[1], n);
      }
      assert_int_equal(tdm_handle_unregister(s.hy), TDM_OK);
      assert_int_equal(tdm_handle_unregister(s.hx), TDM_OK);
      if (saxpy_wrong(&s))
        fail_msg("%s, %zu elements: %d wrong after static splits", machine_name[m], n,
                 saxpy_wrong(&s));
      saxpy_free(&s);
    }
    assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  }

  /* the other placement policies keep the bounds too */
  static const char *const policies[] = {"ws", "eager", "random"};
  for (unsigned p = 0; p < 3; p++) {
    test_log log;
    tdm_runtime *rt = machine(SIM_OWN, &log, policies[p]);
    assert_non_null(rt);
    tdm_parallel_stats st = {.struct_size = sizeof st};
    saxpy_data s;
    saxpy_setup(rt, 4099, &s, &st);
    assert_int_equal(saxpy_with(rt, &s, TDM_PARALLEL_NO_CPU, 0, 0), TDM_OK);
    assert_int_equal(st.class_elements[1], 4099);
    saxpy_reset(&s);
    assert_int_equal(saxpy_with(rt, &s, TDM_PARALLEL_STATIC, 1, 3), TDM_OK);
    assert_int_equal(st.class_elements[0], 1025);
    assert_int_equal(st.class_elements[1], 4099 - 1025);
    assert_int_equal(tdm_handle_unregister(s.hy), TDM_OK);
    assert_int_equal(tdm_handle_unregister(s.hx), TDM_OK);
    assert_int_equal(saxpy_wrong(&s), 0);
    saxpy_free(&s);
    assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  }

  /* every launch on the device fails: its static chunk is done by the CPU
   * workers; kept out of them, it fails and the operation says so */
  for (int keep_out = 0; keep_out < 2; keep_out++) {
    test_log log;
    tdm_config cfg;
    faults_config(&cfg, &log, "gpu:speedup=10,latency=10us,bandwidth=10G", "launch:nth=1", 3);
    tdm_runtime *rt;
    assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
    tdm_parallel_stats st = {.struct_size = sizeof st};
    saxpy_data s;
    saxpy_setup(rt, 10007, &s, &st);
    tdm_status got = saxpy_with(
        rt, &s, TDM_PARALLEL_STATIC | (keep_out ? TDM_PARALLEL_NO_CPU : 0), !keep_out, 1);
    tdm_status un = tdm_handle_unregister(s.hy);
    assert_int_equal(tdm_handle_unregister(s.hx), TDM_OK);
    if (!keep_out) {
      assert_int_equal(got, TDM_OK);
      assert_int_equal(un, TDM_OK);
      assert_int_equal(st.class_elements[0], 10007);
      assert_int_equal(st.class_chunks[0], 3); /* two its own, one the device's */
      assert_int_equal(st.failed, 0);
      assert_int_equal(saxpy_wrong(&s), 0);
    } else {
      assert_int_equal(got, TDM_ERR_CANCELLED);
      assert_int_equal(st.failed, 1);
      assert_int_equal(st.class_elements[0], 0);
      assert_int_equal(un, TDM_ERR_LOST);
    }
    saxpy_free(&s);
    assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  }
}

/* A reduction whose partial values cannot come home from the device (the
 * third copy: x to the device, the partial values to it, then home):
 * tried again, the result is exact; not tried again, the operation ends
 * with the failure, not done, and its result is lost. */
static void test_reduction_home_fails(void **state) {
  (void)state;
  for (unsigned retries = 2;; retries = 0) {
    test_log log;
    tdm_config cfg;
    faults_config(&cfg, &log, "gpu:speedup=10,latency=10us,bandwidth=10G", "copy:nth=3",
                  retries);
    cfg.writeback = 0;
    tdm_runtime *rt;
    assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
    size_t n = 1000;
    double x[1000], sum = 0, value = -1;
    for (size_t i = 0; i < n; i++)
      sum += x[i] = (double)(i % 10);
    tdm_handle *hx, *res;
    assert_int_equal(tdm_register_vector(rt, x, n, sizeof *x, &hx), TDM_OK);
    assert_int_equal(tdm_register_vector(rt, &value, 1, sizeof value, &res), TDM_OK);
    tdm_parallel_desc d = {.codelet = &vsum,
                           .cpu_fn = vsum_cpu,
                           .range = {n},
                           .handles = {hx},
                           .split_mask = 1,
                           .grain = n, /* one chunk */
                           .flags = TDM_PARALLEL_NO_CPU,
                           .reduce = TDM_REDUCE_SUM,
                           .reduce_type = TDM_ELEM_DOUBLE,
                           .result = res};
    tdm_task *end;
    assert_int_equal(tdm_parallel_submit(rt, &d, &end), TDM_OK);
    tdm_status got = tdm_task_wait(end);
    tdm_task_release(end);
    tdm_status un = tdm_handle_unregister(res);
    printf("  retries %u: %s, result %s\n", retries, tdm_status_name(got), tdm_status_name(un));
    if (retries) {
      assert_int_equal(got, TDM_OK);
      assert_int_equal(un, TDM_OK);
      assert_true(value == sum);
      assert_true(atomic_load(&rt->faults.injected) > 0); /* the copy failed, and was made again */
    } else {
      assert_true(got != TDM_OK && got != TDM_ERR_CANCELLED);
      assert_int_equal(un, TDM_ERR_LOST);
      assert_true(value == -1); /* never written */
    }
    assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
    tdm_wait_all(rt);
    assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
    if (!retries)
      break;
  }
}

/* The verification mode on PoCL: a kernel that is wrong on some rows is
 * caught chunk by chunk, each compared with the CPU function over its
 * own range; the CPU function's results replace the device's, and
 * tdm_wait_all says so once. */
static const tdm_opencl_variant wrong_cl = {
    .source = "__kernel void wrong(__global float *y, ulong ny, __global const float *x,\n"
              "                    ulong nx, float a) {\n"
              "  size_t i = get_global_id(0) - get_global_offset(0);\n"
              "  y[i] = a * x[i] + y[i] + (float)get_global_id(0);\n"
              "  if (get_global_id(0) % 1000 == 7) y[i] += 1;\n"
              "}\n",
    .kernel = "wrong"};
static const tdm_codelet wrong = {
    .name = "par_wrong", .nbuffers = 2, .modes = {TDM_RW, TDM_R}, .opencl = &wrong_cl};

static void test_verified_chunks(void **state) {
  (void)state;
  test_log log;
  tdm_config cfg;
  base_config(&cfg, &log);
  cfg.opencl_cpu_devices = 1;
  cfg.scheduler = "eager";
  cfg.verify = "par_wrong:1";
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  if (tdm_runtime_nworkers(rt) == tdm_runtime_ncpu_workers(rt)) {
    tdm_runtime_destroy(rt);
    skip(); /* no OpenCL device */
  }
  tdm_parallel_stats st = {.struct_size = sizeof st};
  saxpy_data s;
  saxpy_setup(rt, 100003, &s, &st);
  s.d.codelet = &wrong;
  s.d.device_mask = 1; /* PoCL, on the CPU cores: named */
  assert_int_equal(tdm_parallel_submit(rt, &s.d, NULL), TDM_OK);
  tdm_status all = tdm_wait_all(rt);
  tdm_verify_counts vc = {.struct_size = sizeof vc};
  assert_int_equal(tdm_runtime_verify_counts(rt, &vc), TDM_OK);
  printf("  %llu chunks on the device, %llu verified, %llu mismatched; tdm_wait_all: %s\n",
         (unsigned long long)st.class_chunks[1], (unsigned long long)vc.compared,
         (unsigned long long)vc.mismatched, tdm_status_name(all));
  assert_int_equal(tdm_handle_unregister(s.hy), TDM_OK);
  assert_int_equal(tdm_handle_unregister(s.hx), TDM_OK);
  /* the CPU function's results wherever it ran: no wrong device chunk kept */
  assert_int_equal(saxpy_wrong(&s), 0);
  if (st.class_chunks[1]) { /* a chunk ran there: caught */
    assert_true(vc.mismatched > 0);
    assert_int_equal(all, TDM_ERR_MISMATCH);
  }
  saxpy_free(&s);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
}

/* ---- the trace ----------------------------------------------------------------- */

/* Each chunk's event in the trace has its rows and its elements: they
 * cover the range once. */
static void test_trace_rows(void **state) {
  (void)state;
  char path[] = "/tmp/tandem-parallel-trace-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  test_log log;
  tdm_config cfg;
  base_config(&cfg, &log);
  cfg.devices = "none";
  cfg.trace_path = path;
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  size_t n = 30011;
  tdm_parallel_stats st = {.struct_size = sizeof st};
  assert_int_equal(run_saxpy(rt, n, 7, true, &st), 0);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK); /* writes the trace */
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  static char text[1 << 20];
  size_t len = fread(text, 1, sizeof text - 1, f);
  text[len] = 0;
  fclose(f);
  unlink(path);
  static bool seen[30011];
  unsigned chunks = 0;
  uint64_t elements = 0;
  for (const char *p = text; (p = strstr(p, "\"rows\":[")); p++) {
    unsigned long long lo, hi, e;
    assert_int_equal(sscanf(p, "\"rows\":[%llu,%llu],\"elements\":%llu", &lo, &hi, &e), 3);
    assert_true(lo < hi && hi <= n);
    assert_int_equal(e, hi - lo);
    for (unsigned long long i = lo; i < hi; i++) {
      assert_false(seen[i]);
      seen[i] = true;
    }
    chunks++;
    elements += e;
  }
  assert_int_equal(chunks, st.chunks);
  assert_int_equal(elements, n);
}

/* ---- bad descriptions ------------------------------------------------------------ */

static void test_bad_descriptions(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = machine(CPU_ONLY, &log, NULL);
  float v[10] = {0}, u[10] = {0}, m[20] = {0};
  tdm_handle *hv, *hu, *hw, *hm;
  assert_int_equal(tdm_register_vector(rt, v, 10, sizeof *v, &hv), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, u, 10, sizeof *u, &hu), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, m, 8, sizeof *m, &hw), TDM_OK);
  assert_int_equal(tdm_register_matrix(rt, m + 8, 4, 3, 4, sizeof *m, &hm), TDM_OK);
  saxpy_args a = {1};
  tdm_parallel_desc ok = {.codelet = &saxpy,
                          .cpu_fn = saxpy_cpu,
                          .range = {10},
                          .handles = {hv, hu},
                          .split_mask = 1,
                          .args = &a,
                          .args_size = sizeof a};
  tdm_parallel_desc d;
  assert_int_equal(tdm_parallel_submit(NULL, &ok, NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_parallel_submit(rt, NULL, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.range[0] = 0; /* empty */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.range[0] = 9; /* not the vector's length */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  assert_true(test_log_has(&log, "split buffer 0 has 10 x 1 elements"));
  d = ok, d.split_mask = 0;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.split_mask = 4; /* not a buffer of the codelet */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.split_mask = 2; /* handle 0 written whole by every chunk */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  assert_true(test_log_has(&log, "read only"));
  d = ok, d.handles[1] = hv, d.split_mask = 3; /* one handle split twice */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.handles[1] = hv; /* split, and given whole */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  assert_true(test_log_has(&log, "both split and given whole"));
  d = ok, d.flags = 8;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.handles[1] = NULL;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.range[0] = 3, d.range[1] = 4, d.handles[0] = hm, d.handles[1] = hw;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_OK); /* a matrix's rows */
  d.range[1] = 5; /* not its columns */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.range[0] = 8, d.range[1] = 2, d.handles[0] = hw; /* a vector for a 2-D range */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.cpu_fn = NULL; /* no CPU function and no device */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_NO_DEVICE);
  d = ok, d.struct_size = 8;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  /* shares: only static, finite, not negative, for classes that take chunks */
  d = ok, d.shares[0] = 1; /* not static */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.flags = TDM_PARALLEL_STATIC, d.shares[0] = -1;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.flags = TDM_PARALLEL_STATIC, d.shares[0] = NAN;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.flags = TDM_PARALLEL_STATIC, d.shares[0] = INFINITY;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.flags = TDM_PARALLEL_STATIC, d.shares[0] = 1, d.shares[1] = 1; /* no device */
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  assert_true(test_log_has(&log, "shares[1] > 0 for device 0, which takes no chunk"));
  d = ok, d.flags = TDM_PARALLEL_NO_DEVICES | TDM_PARALLEL_NO_CPU;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_ERR_INVALID_ARG);
  d = ok, d.flags = TDM_PARALLEL_STATIC | TDM_PARALLEL_NO_DEVICES, d.shares[0] = 2;
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_OK); /* the CPU workers' alone */
  /* partitioned by the application */
  assert_int_equal(tdm_vector_partition(hv, 5, 0), TDM_OK);
  assert_int_equal(tdm_parallel_submit(rt, &ok, NULL), TDM_ERR_PARTITIONED);
  assert_int_equal(tdm_vector_unpartition(hv, 0), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hv), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hu), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hw), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hm), TDM_OK);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan),
      cmocka_unit_test(test_saxpy_sizes),
      cmocka_unit_test(test_blur_2d),
      cmocka_unit_test(test_between_tasks),
      cmocka_unit_test(test_reductions),
      cmocka_unit_test(test_reduction_refused),
      cmocka_unit_test(test_group_progress_and_cancel),
      cmocka_unit_test(test_failing_chunks),
      cmocka_unit_test(test_static_and_devices_only),
      cmocka_unit_test(test_reduction_home_fails),
      cmocka_unit_test(test_verified_chunks),
      cmocka_unit_test(test_trace_rows),
      cmocka_unit_test(test_bad_descriptions),
  };
  test_temp_dir(cache_dir, sizeof cache_dir);
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  test_remove_dir(cache_dir);
  return rc;
}
