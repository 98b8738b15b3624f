/*
 * Differential test of data coherence: random tasks over matrices that are
 * partitioned into tiles and unpartitioned as the run goes (with emulated
 * devices, one of them a vector partitioned into pieces), with host acquisitions
 * that read (and check) or modify the data, on devices with memory of
 * their own. Each task mixes every element it reads into every element it
 * writes with a function of its number, so one stale element anywhere
 * changes the result. The data must equal a sequential run of the same
 * submissions, at every check on the way and at the end; and every run of
 * a task (a try, or a replay by lineage) checks that the buffers it reads
 * are the sequential run's (a digest of each, made at submission), so
 * that a wrong read is seen where it happens.
 *
 * Modes: "sim" (two emulated devices with memory of their own, every
 * policy, and with a small memory limit: evictions), "discrete" and
 * "integrated" (PoCL behaving as either, tasks with a CPU and an OpenCL
 * variant; SKIP without an OpenCL CPU device), "two" (two discrete PoCL
 * devices, one of them lost during each run), "mixed" (a discrete PoCL
 * device and an emulated GPU in one runtime). One task in four, when
 * enough tiles exist, is wide: WIDE distinct buffers, past
 * TDM_MAX_BUFFERS. With injected device faults (launches, and runs that
 * fail after writing, 1 in 16 each; and, without partitions, copies
 * between a device and the host, 1 in 64), retries and writeback, or
 * retries and lineage (what only a failed device held made again): the
 * same results, every task done.
 */
#include "common.h"
#include "internal.h" /* the device fault seam */

#ifdef TEST_WITH_OPENCL
#include "tandem/opencl.h"
#endif

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NMAT 3

#define ROWS 12
#define COLS 12
#define LD 13 /* rows apart: copies are rectangles */
#define MAXB 3
#define WIDE 10 /* buffers of a wide task */

typedef struct {
  uint64_t id;
  uint32_t nbuf;
  uint32_t modes[WIDE];
  /* a digest of each buffer it reads, as the sequential run has it */
  uint64_t digest[WIDE];
} step;

static uint64_t digest(const tdm_buffer *b) {
  uint64_t acc = 0;
  for (size_t r = 0; r < b->nx; r++)
    for (size_t c = 0; c < b->ny; c++)
      acc = test_mix64(acc ^ ((const uint64_t *)b->ptr)[r * b->ld + c]);
  return acc;
}

/* Runs (on any thread, by a try or a replay) whose inputs were not the
 * sequential run's: the first wrong read, where it happened, rather than
 * its consequence later. */
static _Atomic unsigned wrong_inputs;

static uint64_t mix(uint64_t x) {
  return test_mix64(x);
}

/* Reads every element of the R buffers, then writes every element of the
 * W buffers. */
static void apply(const step *s, const tdm_buffer *b) {
  uint64_t acc = mix(s->id);
  for (unsigned i = 0; i < s->nbuf; i++)
    if (s->modes[i] & TDM_R)
      for (size_t r = 0; r < b[i].nx; r++)
        for (size_t c = 0; c < b[i].ny; c++)
          acc = mix(acc ^ ((const uint64_t *)b[i].ptr)[r * b[i].ld + c]);
  for (unsigned i = 0; i < s->nbuf; i++)
    if (s->modes[i] & TDM_W)
      for (size_t r = 0; r < b[i].nx; r++)
        for (size_t c = 0; c < b[i].ny; c++)
          ((uint64_t *)b[i].ptr)[r * b[i].ld + c] = mix(acc + i * 1000003u + r * b[i].ny + c);
}

/* Wide tasks submitted, and run by their CPU variant (the rest ran on an
 * OpenCL device). */
static unsigned wide_submitted;
static _Atomic unsigned wide_on_cpu;

static void run_step(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const step *s = args;
  for (unsigned i = 0; i < s->nbuf; i++)
    if ((s->modes[i] & TDM_R) && digest(&b[i]) != s->digest[i]) {
      fprintf(stderr, "step %llx: buffer %u is not what the sequential run reads\n",
              (unsigned long long)s->id, i);
      atomic_fetch_add(&wrong_inputs, 1);
    }
  if (s->nbuf == WIDE)
    atomic_fetch_add(&wide_on_cpu, 1);
  apply(args, b);
}

#ifdef TEST_WITH_OPENCL
/* The same on a device: one work-item does it all. */
static const char kernel_source[] =
    "ulong mix(ulong x) {\n"
    "  x += 0x9e3779b97f4a7c15UL;\n"
    "  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9UL;\n"
    "  x = (x ^ (x >> 27)) * 0x94d049bb133111ebUL;\n"
    "  return x ^ (x >> 31);\n"
    "}\n"
    "typedef struct { ulong id; uint nbuf; uint modes[10]; } task_step;\n"
    "void body(global ulong **p, ulong *nx, ulong *ny, ulong *ld, task_step s) {\n"
    "  ulong acc = mix(s.id);\n"
    "  for (uint i = 0; i < s.nbuf; i++)\n"
    "    if (s.modes[i] & 1)\n"
    "      for (ulong r = 0; r < nx[i]; r++)\n"
    "        for (ulong c = 0; c < ny[i]; c++)\n"
    "          acc = mix(acc ^ p[i][r * ld[i] + c]);\n"
    "  for (uint i = 0; i < s.nbuf; i++)\n"
    "    if (s.modes[i] & 2)\n"
    "      for (ulong r = 0; r < nx[i]; r++)\n"
    "        for (ulong c = 0; c < ny[i]; c++)\n"
    "          p[i][r * ld[i] + c] = mix(acc + i * 1000003UL + r * ny[i] + c);\n"
    "}\n"
    "#define B(k) global ulong *p##k, ulong nx##k, ulong ny##k, ulong ld##k\n"
    "kernel void step1(B(0), task_step s) {\n"
    "  global ulong *p[1] = {p0}; ulong nx[1] = {nx0}, ny[1] = {ny0}, ld[1] = {ld0};\n"
    "  body(p, nx, ny, ld, s);\n"
    "}\n"
    "kernel void step2(B(0), B(1), task_step s) {\n"
    "  global ulong *p[2] = {p0, p1};\n"
    "  ulong nx[2] = {nx0, nx1}, ny[2] = {ny0, ny1}, ld[2] = {ld0, ld1};\n"
    "  body(p, nx, ny, ld, s);\n"
    "}\n"
    "kernel void step3(B(0), B(1), B(2), task_step s) {\n"
    "  global ulong *p[3] = {p0, p1, p2};\n"
    "  ulong nx[3] = {nx0, nx1, nx2}, ny[3] = {ny0, ny1, ny2}, ld[3] = {ld0, ld1, ld2};\n"
    "  body(p, nx, ny, ld, s);\n"
    "}\n"
    "kernel void step10(B(0), B(1), B(2), B(3), B(4), B(5), B(6), B(7), B(8), B(9),\n"
    "                   task_step s) {\n"
    "  global ulong *p[10] = {p0, p1, p2, p3, p4, p5, p6, p7, p8, p9};\n"
    "  ulong nx[10] = {nx0, nx1, nx2, nx3, nx4, nx5, nx6, nx7, nx8, nx9};\n"
    "  ulong ny[10] = {ny0, ny1, ny2, ny3, ny4, ny5, ny6, ny7, ny8, ny9};\n"
    "  ulong ld[10] = {ld0, ld1, ld2, ld3, ld4, ld5, ld6, ld7, ld8, ld9};\n"
    "  body(p, nx, ny, ld, s);\n"
    "}\n";

static void one_item(const tdm_buffer *bufs, const void *args, size_t args_size, unsigned *dims,
                     size_t global[3], size_t local[3]) {
  (void)bufs;
  (void)args;
  (void)args_size;
  (void)local;
  *dims = 1;
  global[0] = 1;
}

static tdm_opencl_variant variants[MAXB] = {
    {.source = kernel_source, .kernel = "step1", .work_size = one_item},
    {.source = kernel_source, .kernel = "step2", .work_size = one_item},
    {.source = kernel_source, .kernel = "step3", .work_size = one_item},
};
static tdm_opencl_variant wide_variant = {.source = kernel_source, .kernel = "step10",
                                          .work_size = one_item};
#endif

/* A codelet per (nbuf, modes): code is the modes as base-3 digits. */
static tdm_codelet cls[MAXB][27];
/* Wide tasks: their modes are read at submission, from wide_modes. */
static tdm_codelet wide;
static tdm_access wide_modes[WIDE];

static void init_codelets(bool opencl) {
  static const tdm_access mode_of[3] = {TDM_R, TDM_W, TDM_RW};
  for (unsigned nbuf = 1; nbuf <= MAXB; nbuf++) {
    unsigned ncodes = 1;
    for (unsigned i = 0; i < nbuf; i++)
      ncodes *= 3;
    for (unsigned code = 0; code < ncodes; code++) {
      tdm_codelet *cl = &cls[nbuf - 1][code];
      cl->name = "coherence-step";
      cl->cpu_fn = run_step;
#ifdef TEST_WITH_OPENCL
      cl->opencl = opencl ? &variants[nbuf - 1] : NULL;
#else
      (void)opencl;
#endif
      cl->nbuffers = nbuf;
      for (unsigned i = 0, c = code; i < nbuf; i++, c /= 3)
        cl->modes[nbuf - 1 - i] = mode_of[c % 3];
    }
  }
  wide = (tdm_codelet){.name = "coherence-wide", .cpu_fn = run_step, .nbuffers = WIDE,
                       .dyn_modes = wide_modes};
#ifdef TEST_WITH_OPENCL
  wide.opencl = opencl ? &wide_variant : NULL;
#endif
}

/* ---- one run ------------------------------------------------------------- */

/* With emulated devices (which run the CPU variant: no kernel's argument
 * list to match), the last "matrix" is a vector of VEC elements,
 * partitioned into pieces. */
#define VEC (ROWS * COLS)
static bool vectors;

typedef struct {
  tdm_runtime *rt;
  uint64_t rng;
  uint64_t *data[NMAT], *ref[NMAT];
  tdm_handle *mat[NMAT];
  bool parted[NMAT];
  size_t tr[NMAT], tc[NMAT]; /* tiles (a vector's: pieces x 1) */
  unsigned checks;
} run;

static bool is_vector(unsigned m) {
  return vectors && m == NMAT - 1;
}

/* Element e of handle m's memory, counting a matrix's row by row. */
static size_t element(unsigned m, size_t e) {
  return is_vector(m) ? e : e / COLS * LD + e % COLS;
}

static uint64_t next(run *r) {
  return r->rng = mix(r->rng);
}

/* The reference's buffer for handle h (the same place in ref). */
static tdm_buffer ref_of(run *r, unsigned m, tdm_handle *h) {
  tdm_buffer b;
  assert_int_equal(tdm_handle_buffer(h, &b), TDM_OK);
  b.ptr = r->ref[m] + ((uint64_t *)b.ptr - r->data[m]);
  return b;
}

/* A random handle of matrix m: the matrix, or one of its tiles. */
static tdm_handle *pick(run *r, unsigned m) {
  if (!r->parted[m])
    return r->mat[m];
  size_t i = next(r) % r->tr[m], j = next(r) % r->tc[m];
  return is_vector(m) ? tdm_vector_piece(r->mat[m], i) : tdm_matrix_tile(r->mat[m], i, j);
}

/* Handles to draw from: the tiles of partitioned matrices, the others. */
static size_t distinct_handles(const run *r) {
  size_t n = 0;
  for (unsigned m = 0; m < NMAT; m++)
    n += r->parted[m] ? r->tr[m] * r->tc[m] : 1;
  return n;
}

static void submit_task(run *r) {
  static const unsigned mode_of[3] = {TDM_R, TDM_W, TDM_RW};
  bool is_wide = next(r) % 4 == 0 && distinct_handles(r) >= 2 * WIDE;
  step s = {.id = next(r), .nbuf = is_wide ? WIDE : 1 + (uint32_t)(next(r) % MAXB)};
  tdm_task_desc d = {0};
  tdm_handle *hs[WIDE];
  tdm_buffer refs[WIDE];
  unsigned code = 0;
  for (unsigned i = 0; i < s.nbuf; i++) {
    tdm_handle *h;
    unsigned m;
    bool again;
    do { /* distinct handles */
      m = (unsigned)(next(r) % NMAT);
      h = pick(r, m);
      again = false;
      for (unsigned j = 0; j < i; j++)
        again |= hs[j] == h;
    } while (again);
    unsigned x = (unsigned)(next(r) % 5); /* readers more often */
    unsigned k = x < 2 ? 0 : x - 2 > 2 ? 2 : x - 2;
    s.modes[i] = mode_of[k];
    code = code * 3 + k;
    hs[i] = h;
    if (is_wide)
      wide_modes[i] = (tdm_access)mode_of[k];
    else
      d.handles[i] = h;
    refs[i] = ref_of(r, m, h);
  }
  d.codelet = is_wide ? &wide : &cls[s.nbuf - 1][code];
  wide_submitted += is_wide;
  d.dyn_handles = is_wide ? hs : NULL;
  for (unsigned i = 0; i < s.nbuf; i++)
    s.digest[i] = digest(&refs[i]);
  d.args = &s;
  d.args_size = sizeof s;
  assert_int_equal(tdm_submit(r->rt, &d), TDM_OK);
  apply(&s, refs); /* the sequential reference */
}

static void compare(run *r, unsigned m, const char *when) {
  for (size_t e = 0; e < ROWS * COLS; e++) {
    size_t k = element(m, e);
    if (r->data[m][k] != r->ref[m][k])
      fail_msg("%s: %s %u element %zu is stale or wrong: %llx, expected %llx", when,
               is_vector(m) ? "vector" : "matrix", m, e, (unsigned long long)r->data[m][k],
               (unsigned long long)r->ref[m][k]);
  }
  r->checks++;
}

/* The host reads (and checks) or modifies an unpartitioned matrix. */
static void host_access(run *r, unsigned m) {
  bool write = next(r) % 2;
  assert_int_equal(tdm_handle_acquire(r->mat[m], write ? TDM_RW : TDM_R), TDM_OK);
  compare(r, m, "acquired");
  if (write) {
    uint64_t v = next(r);
    for (int k = 0; k < 5; k++) {
      size_t e = element(m, (size_t)(next(r) % (ROWS * COLS)));
      r->data[m][e] = r->ref[m][e] = v + (uint64_t)k;
    }
  }
  assert_int_equal(tdm_handle_release(r->mat[m]), TDM_OK);
}

static void one_seed(tdm_runtime *rt, uint64_t seed, unsigned steps) {
  static const size_t tiles[][2] = {{4, 4}, {6, 12}, {12, 5}, {3, 7}, {5, 5}};
  static const size_t pieces[] = {16, 50, 7, VEC, VEC / 5};
  run r = {.rt = rt, .rng = seed};
  for (unsigned m = 0; m < NMAT; m++) {
    r.data[m] = tdm_malloc(ROWS * LD * sizeof(uint64_t));
    r.ref[m] = malloc(ROWS * LD * sizeof(uint64_t));
    assert_non_null(r.data[m]);
    assert_non_null(r.ref[m]);
    for (int e = 0; e < ROWS * LD; e++)
      r.data[m][e] = r.ref[m][e] = mix(seed * 7919 + (uint64_t)(m * ROWS * LD + e));
    if (is_vector(m))
      assert_int_equal(tdm_register_vector(rt, r.data[m], VEC, sizeof(uint64_t), &r.mat[m]),
                       TDM_OK);
    else
      assert_int_equal(tdm_register_matrix(rt, r.data[m], LD, ROWS, COLS, sizeof(uint64_t),
                                           &r.mat[m]),
                       TDM_OK);
  }
  for (unsigned n = 0; n < steps; n++) {
    unsigned m = (unsigned)(next(&r) % NMAT), what = (unsigned)(next(&r) % 20);
    if (what < 14) {
      submit_task(&r);
    } else if (what < 16 && !r.parted[m] && is_vector(m)) {
      size_t p = pieces[next(&r) % (sizeof pieces / sizeof pieces[0])];
      assert_int_equal(tdm_vector_partition(r.mat[m], p, 0), TDM_OK);
      assert_int_equal(tdm_vector_pieces(r.mat[m], &r.tr[m]), TDM_OK);
      assert_int_equal(r.tr[m], (VEC + p - 1) / p);
      r.tc[m] = 1;
      r.parted[m] = true;
    } else if (what < 16 && !r.parted[m]) {
      const size_t *t = tiles[next(&r) % (sizeof tiles / sizeof tiles[0])];
      assert_int_equal(tdm_matrix_partition(r.mat[m], t[0], t[1], 0), TDM_OK);
      assert_int_equal(tdm_matrix_tiles(r.mat[m], &r.tr[m], &r.tc[m]), TDM_OK);
      r.parted[m] = true;
    } else if (what < 18 && r.parted[m]) {
      assert_int_equal(is_vector(m) ? tdm_vector_unpartition(r.mat[m], 0)
                                    : tdm_matrix_unpartition(r.mat[m], 0),
                       TDM_OK);
      r.parted[m] = false;
    } else if (!r.parted[m]) {
      host_access(&r, m);
    }
  }
  for (unsigned m = 0; m < NMAT; m++) {
    if (r.parted[m])
      assert_int_equal(is_vector(m) ? tdm_vector_unpartition(r.mat[m], 0)
                                    : tdm_matrix_unpartition(r.mat[m], 0),
                       TDM_OK);
    assert_int_equal(tdm_handle_unregister(r.mat[m]), TDM_OK);
    compare(&r, m, "unregistered");
    tdm_free(r.data[m]);
    free(r.ref[m]);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_exchange(&wrong_inputs, 0), 0); /* every run read the right data */
}

/* ---- configurations ------------------------------------------------------ */

typedef struct {
  const char *sim;    /* emulated devices, or NULL: OpenCL */
  bool discrete;      /* OpenCL: PoCL as a discrete device */
  uint64_t limit;     /* device memory limit, 0: none */
  const char *policy;
  bool faults;        /* device faults injected, retried */
  /* copies between the devices and the host fail too */
  bool copies;
  /* copies fail, nothing else, and no write-back: what a device wrote
   * stays there alone until it is needed or evicted */
  bool copies_only;
  /* with copies_only: devices are taken out of placement after failures,
   * as by default (lineage makes again what they alone held) */
  bool quarantine;
  /* tdm_config.faults: a device stops working, or hangs; then a device
   * must be quarantined with a reason that contains `reason` */
  const char *lost, *reason;
  /* with faults: no write-back; what only a device held is made again by
   * its lineage */
  bool lineage;
  /* PoCL (discrete) and an emulated GPU in one runtime (tdm_config.sim's
   * "+opencl"): both must run tasks */
  bool mixed;
} setup;


static tdm_runtime *make(const setup *s, char *dir, size_t size) {
  test_temp_dir(dir, size);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.cache_dir = dir;
  cfg.scheduler = s->policy;
  cfg.device_memory_limit = s->limit;
  cfg.log_fn = test_log_to_stderr; /* what went wrong, if anything */
  cfg.log_level = TDM_LOG_WARNING;
  if (s->sim) {
    cfg.sim = s->sim;
    cfg.sim_time_scale = 1;
  } else {
    cfg.opencl_cpu_devices = 1;
    cfg.device_memory = s->discrete ? TDM_MEMORY_SEPARATE : TDM_MEMORY_SHARED;
  }
  if (s->mixed) {
    cfg.sim = "gpu:speedup=10,latency=5us,bandwidth=4G;+opencl";
    cfg.sim_time_scale = 1;
  }
  cfg.faults = s->lost;
  /* tries that hang are found soon; the limits stay far past what a
   * task here takes, even under a sanitizer (a try abandoned while it
   * still runs on a device in host memory could write after its undo) */
  cfg.watchdog_min = 0.5;
  cfg.watchdog_uncalibrated = 1;
  if (s->copies_only) { /* a try fails before it runs: tried again */
    cfg.retries = 8;
    cfg.quarantine_failures = s->quarantine ? 3 : 0;
    test_log_if_asked(&cfg);
  }
  if (s->faults) { /* every failed run undone and tried again elsewhere */
    /* enough that every task ends done: a try on a device fails about
     * one time in five, one on the CPU workers (its inputs' copies home)
     * one in twenty */
    cfg.retries = 6;
    cfg.writeback = !s->lineage;
    cfg.quarantine_failures = 0; /* the devices stay in use, failing */
    /* each failure is logged: expected here (TEST_LOG=1 shows them) */
    test_log_if_asked(&cfg);
  }
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  if (s->copies_only)
    tdm__faults_set(rt, TDM_FAULT_COPY, 1.0 / 16, 19);
  if (s->faults) {
    tdm__faults_set(rt, TDM_FAULT_LAUNCH, 1.0 / 16, 11);
    tdm__faults_set(rt, TDM_FAULT_COMPLETE, 1.0 / 16, 13);
    if (s->copies)
      tdm__faults_set(rt, TDM_FAULT_COPY, 1.0 / 64, 17);
  }
  return rt;
}

static uint64_t peer_copies; /* copies straight between devices: all runs */
static bool opencl_discrete;
static bool opencl_two; /* two PoCL devices */


/* The tasks the devices ran, and their evictions; by_kind[0] and [1]
 * get the tasks emulated devices and OpenCL ones ran added. */
static unsigned device_tasks(tdm_runtime *rt, uint64_t *evictions, uint64_t by_kind[2]) {
  unsigned ids[TDM_MAX_DEVICE_WORKERS], n = 0;
  unsigned used = test_used_devices(rt, ids, TDM_MAX_DEVICE_WORKERS);
  *evictions = 0;
  for (unsigned i = 0; i < used; i++) {
    tdm_device_counters c = test_counters(rt, ids[i]);
    tdm_device_info d = {.struct_size = sizeof d};
    assert_int_equal(tdm_runtime_device(rt, ids[i], &d), TDM_OK);
    by_kind[d.device_class == TDM_DEVICE_EMULATED ? 0 : 1] += c.tasks;
    n += (unsigned)c.tasks;
    *evictions += c.evictions;
    peer_copies += c.copies_from_devices;
  }
  return n;
}

/* Runs nseeds seeds of `steps` steps; adds the tasks the devices ran, the
 * evictions and the wide tasks to *totals. */
static uint64_t retried;  /* tries placed again after a fault, all runs */
static uint64_t replayed; /* tasks run again by lineage, all runs */
static unsigned stopped;  /* devices that stopped as told (setup.lost), all runs */
static uint64_t kind_tasks[2]; /* tasks on emulated devices, on OpenCL ones: all runs */

static void with(const setup *s, uint64_t first, unsigned nseeds, unsigned steps,
                 uint64_t totals[3]) {
  char dir[64];
  tdm_runtime *rt = make(s, dir, sizeof dir);
  vectors = s->sim != NULL;
  wide_submitted = 0;
  atomic_store(&wide_on_cpu, 0);
  for (uint64_t seed = first; seed < first + nseeds; seed++)
    one_seed(rt, seed, steps);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  /* every copy settles, so no device's link keeps copies counted as
   * queued (placement adds them to a task's transfer time): a count
   * that leaked would keep work away from that device for good */
  for (unsigned n = 1; rt->nodes.ops->link_wait && n < rt->nodes.n; n++) {
    double until = now_s() + 10;
    while ((rt->nodes.ops->link_wait(rt->nodes.ctx, n, true) > 0 ||
            rt->nodes.ops->link_wait(rt->nodes.ctx, n, false) > 0) &&
           now_s() < until)
      sleep_ms(1);
    assert_true(rt->nodes.ops->link_wait(rt->nodes.ctx, n, true) == 0);
    assert_true(rt->nodes.ops->link_wait(rt->nodes.ctx, n, false) == 0);
  }
  uint64_t evictions;
  unsigned on_devices = device_tasks(rt, &evictions, kind_tasks);
  if (s->lost) { /* it stopped working: out of placement, said once */
    for (unsigned k = 0; k < 2; k++) {
      tdm_device_info d = {.struct_size = sizeof d};
      if (tdm_runtime_device(rt, k, &d) == TDM_OK)
        stopped += d.quarantined && strstr(d.quarantine_reason, s->reason);
    }
  }
  retried += atomic_load(&rt->nretries);
  replayed += atomic_load(&rt->nreplayed);
  printf("%s %s%s: %u seeds, %u tasks on devices, %llu evictions, %u wide tasks (%u by the CPU "
         "variant)\n",
         s->mixed ? "PoCL and emulated" : s->sim ? "emulated" : s->discrete ? "discrete"
                                                                      : "integrated",
         s->policy,
         s->limit ? " (memory limit)" : "", nseeds, on_devices, (unsigned long long)evictions,
         wide_submitted, atomic_load(&wide_on_cpu));
  totals[0] += on_devices;
  totals[1] += evictions;
  totals[2] += wide_submitted;
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
}

#define TWO_OWN "a:speedup=2,latency=1us,bandwidth=1G;b:speedup=1.5,latency=2us,bandwidth=2G"
/* The same two, copying straight between each other. */
#define TWO_PEER                                                                           \
  "a:speedup=2,latency=1us,bandwidth=1G,peer=4G;b:speedup=1.5,latency=2us,bandwidth=2G,"   \
  "peer=4G"

static const char *const policies[] = {"heft", "ws", "eager", "random"};

static void test_cpu_only(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  for (uint64_t seed = 1; seed <= 8; seed++)
    one_seed(rt, seed, 400);
  tdm_runtime_destroy(rt);
}

/* Every policy; the devices must have taken part (some policy may keep a
 * run on the CPU) and, with a memory limit, memory must have run short. */
static void every_policy(const setup *base, uint64_t first, unsigned nseeds, unsigned steps) {
  uint64_t totals[3] = {0, 0, 0};
  retried = replayed = peer_copies = 0;
  stopped = 0;
  for (unsigned p = 0; p < 4; p++) {
    setup s = *base;
    s.policy = policies[p];
    with(&s, first + 100 * p, nseeds, steps, totals);
  }
  assert_true(totals[0] > 0);
  if (base->faults || base->copies_only) /* the faults were met, and overcome */
    assert_true(retried > 0);
  assert_true(totals[2] > 0); /* the wide path was taken (wide tasks take tiles) */
  if (base->limit)
    assert_true(totals[1] > 0);
  /* a device stopped (in some run: one placement may send a device too
   * few tasks for a loss at its Nth launch) */
  if (base->lost)
    assert_true(stopped > 0);
  if (base->faults)
    printf("%llu tries placed again, %llu tasks replayed by lineage\n",
           (unsigned long long)retried, (unsigned long long)replayed);
  /* devices that copy between each other did (emulated ones declared
   * so, two PoCL devices with memory of their own: one context), others
   * never. Not always: with write-back (faults without lineage) the host
   * holds nearly every version, and a device lost early leaves none to
   * copy to. */
  printf("%llu copies between devices\n", (unsigned long long)peer_copies);
  bool peers = base->sim ? strstr(base->sim, "peer=") != NULL : opencl_two && base->discrete;
  if (!peers)
    assert_int_equal(peer_copies, 0);
  else if (!base->lost && (!base->faults || base->lineage))
    assert_true(peer_copies > 0);
}

static void test_emulated_every_policy(void **state) {
  (void)state;
  every_policy(&(setup){.sim = TWO_OWN}, 1000, 8, 400);
}

static void test_emulated_evictions(void **state) {
  (void)state;
  /* room for three matrices on each device: copies are dropped and come
   * back as tasks need them */
  every_policy(&(setup){.sim = TWO_OWN, .limit = 3 * ROWS * COLS * 8}, 2000, 4, 400);
}

/* Devices too small for the whole matrices (600 bytes: a matrix is
 * 1,152): tasks on them run on the CPU workers, tasks on tiles may run on
 * the devices; never a task skipped. */
static void test_emulated_memory_too_small(void **state) {
  (void)state;
  every_policy(&(setup){.sim = TWO_OWN, .limit = 600}, 2500, 4, 400);
}

/* Forty devices with memory of their own: nodes past the 32nd and 64th
 * bits of a word (the set of valid nodes once was 32 bits wide). */
static void test_emulated_forty_devices(void **state) {
  (void)state;
  uint64_t totals[3] = {0, 0, 0};
  with(&(setup){.sim = "gpu:workers=40,speedup=2,latency=1us,bandwidth=1G", .policy = "eager"},
       5000, 3, 300, totals);
  assert_true(totals[0] > 0);
}

/* Device faults on both emulated devices, every policy: retried on the
 * other device or the CPU variant, the results are the sequential run's. */
static void test_emulated_faults(void **state) {
  (void)state;
  every_policy(&(setup){.sim = TWO_OWN, .faults = true}, 6000, 3, 400);
}

/* Without write-back: a failed run that replaced a version only a device
 * held is undone by making that version again (lineage). */
static void test_emulated_faults_lineage(void **state) {
  (void)state;
  every_policy(&(setup){.sim = TWO_OWN, .faults = true, .lineage = true}, 6100, 3, 400);
}

/* One of two emulated devices with memory of their own stops working
 * at its 8th launch in each run, without write-back: what it alone held
 * (tiles, matrices, partitioned or gathered) is made again by lineage,
 * with the sequential run's results. */
static void test_emulated_lost_lineage(void **state) {
  (void)state;
  every_policy(&(setup){.sim = TWO_OWN, .faults = true, .lineage = true,
                        .lost = "device=0:lost_after=8", .reason = "stopped working"},
               6200, 3, 400);
}

/* With copies failing too, matrices partitioned or not. */
static void test_emulated_copy_faults(void **state) {
  (void)state;
  every_policy(&(setup){.sim = TWO_OWN, .faults = true, .copies = true}, 6500, 3, 400);
}

/* Copies failing (one in sixteen) while memory runs short, without
 * write-back: an evicted buffer that holds the only copy is dropped only
 * once its copy home has landed (a copy home that fails leaves it the
 * version's holder; dropped at once, the version would be lost). */
static void test_emulated_copy_faults_evictions(void **state) {
  (void)state;
  /* room for two of the three matrices */
  every_policy(&(setup){.sim = TWO_OWN, .copies_only = true, .limit = 2 * ROWS * COLS * 8},
               6800, 3, 400);
}

/* Devices that copy straight between each other, copies failing (one
 * in sixteen), memory short, no write-back: a copy between devices that
 * fails leaves the source the holder and is made again; an evicted
 * buffer whose version another device holds goes without a copy home. */
static void test_emulated_peer_copy_faults(void **state) {
  (void)state;
  every_policy(&(setup){.sim = TWO_PEER, .copies_only = true, .limit = 2 * ROWS * COLS * 8},
               6900, 8, 400);
}

/* The same devices, runs and copies failing, without write-back: a
 * failed run that replaced a version only a device held is undone by
 * lineage, whichever device the version came from. */
static void test_emulated_peer_faults_lineage(void **state) {
  (void)state;
  every_policy(&(setup){.sim = TWO_PEER, .faults = true, .copies = true, .lineage = true},
               7000, 8, 400);
}

/* Runs and copies failing, without write-back, copies through the host:
 * a copy home that failed before a run that then failed after writing
 * is not taken for an input of that run (what it wrote was read as the
 * version before it). */
static void test_emulated_faults_copies_lineage(void **state) {
  (void)state;
  every_policy(&(setup){.sim = TWO_OWN, .faults = true, .copies = true, .lineage = true},
               7000, 8, 400);
}

/* Copies failing (one in sixteen), devices taken out of placement after
 * three failures as by default, no write-back: what a device alone held
 * is made again by lineage, from versions the host's memory holds, and
 * every run's results are the sequential run's. A matrix made again while
 * its tiles hold its host memory goes into the rectangles they do not
 * hold (it was refused, and reported lost, in about one run in twenty).
 * (The garbage a failed copy home left there, once read by lineage as the
 * version from before, is caught by test-coherence's
 * test_failed_copy_home_forgotten; these random graphs did not meet it.) */
static void test_emulated_copy_faults_quarantine(void **state) {
  (void)state;
  every_policy(&(setup){.sim = TWO_OWN, .copies_only = true, .quarantine = true}, 7100, 8, 400);
}


static void test_opencl_copy_faults(void **state) {
  (void)state;
  if (!opencl_discrete)
    skip(); /* a device in host memory copies nothing */
  every_policy(&(setup){.discrete = true, .faults = true, .copies = true}, 7500, 2, 300);
}

/* Copies failing while PoCL's memory runs short, without write-back. */
static void test_opencl_copy_faults_evictions(void **state) {
  (void)state;
  if (!opencl_discrete)
    skip(); /* a device in host memory copies nothing */
  every_policy(&(setup){.discrete = true, .copies_only = true, .limit = 2 * ROWS * COLS * 8},
               7700, 2, 300);
}

static void test_opencl_faults(void **state) {
  (void)state;
  every_policy(&(setup){.discrete = opencl_discrete, .faults = true}, 7000, 2, 300);
}

/* Two PoCL devices behaving as discrete GPUs (POCL_DEVICES="pthread
 * pthread"), one of which stops working 30 ms into each run: the other
 * and the CPU workers take over, with the results of the sequential run
 * (every policy; device faults, retries and eager write-back as in
 * test_opencl_faults). */
static void test_opencl_one_of_two_lost(void **state) {
  (void)state;
  if (!opencl_two)
    skip();
  every_policy(&(setup){.discrete = true, .faults = true, .lost = "device=0:lost_at=30ms",
                        .reason = "stopped working"},
               8000, 2, 300);
}

/* Tries whose completion never comes (the `hang` fault): the watchdog
 * finds the device hung, it is quarantined, its tries in flight are
 * abandoned (undone, run elsewhere; completions that come later are
 * ignored), and the results are the sequential run's; on one PoCL
 * device (discrete or integrated) or two. */
static void test_opencl_hung(void **state) {
  (void)state;
  every_policy(&(setup){.discrete = opencl_discrete, .faults = true, .lost = "hang:nth=3",
                        .reason = "hung: codelet"},
               8500, 2, 300);
}

/* As test_opencl_one_of_two_lost and test_opencl_hung, without
 * write-back: lineage makes again what the lost or hung device alone
 * held (an OpenCL device leaves the replay to the next try, elsewhere). */
static void test_opencl_one_of_two_lost_lineage(void **state) {
  (void)state;
  if (!opencl_two)
    skip();
  every_policy(&(setup){.discrete = true, .faults = true, .lineage = true,
                        .lost = "device=0:lost_at=30ms", .reason = "stopped working"},
               8100, 2, 300);
}

static void test_opencl_hung_lineage(void **state) {
  (void)state;
  every_policy(&(setup){.discrete = opencl_discrete, .faults = true, .lineage = true,
                        .lost = "hang:nth=3", .reason = "hung: codelet"},
               8600, 2, 300);
}

static void test_opencl_faults_lineage(void **state) {
  (void)state;
  every_policy(&(setup){.discrete = opencl_discrete, .faults = true, .lineage = true}, 7100, 2,
               300);
}

static void test_opencl_every_policy(void **state) {
  (void)state;
  every_policy(&(setup){.discrete = opencl_discrete}, 3000, 6, 300);
}

static void test_opencl_evictions(void **state) {
  (void)state;
  if (!opencl_discrete)
    skip(); /* a device in host memory counts nothing */
  every_policy(&(setup){.discrete = true, .limit = 3 * ROWS * COLS * 8}, 4000, 2, 300);
}

/* A real device (PoCL, behaving as a discrete GPU) and an emulated GPU
 * ten times as fast as a core, in one runtime: each memory node copies
 * through its own backend's operations, and a copy between the two goes
 * through the host. Every policy; the results are the sequential run's,
 * and both kinds of device ran tasks. */
static void test_mixed_every_policy(void **state) {
  (void)state;
  kind_tasks[0] = kind_tasks[1] = 0;
  every_policy(&(setup){.discrete = true, .mixed = true}, 9000, 4, 300);
  printf("emulated device: %llu tasks, PoCL: %llu tasks\n",
         (unsigned long long)kind_tasks[0], (unsigned long long)kind_tasks[1]);
  assert_true(kind_tasks[0] > 0);
  assert_true(kind_tasks[1] > 0);
}

/* The same with injected faults, retries and write-back. */
static void test_mixed_faults(void **state) {
  (void)state;
  kind_tasks[0] = kind_tasks[1] = 0;
  every_policy(&(setup){.discrete = true, .mixed = true, .faults = true}, 9500, 2, 300);
  assert_true(kind_tasks[0] > 0);
  assert_true(kind_tasks[1] > 0);
}

static bool have_opencl_devices(bool discrete, unsigned want) {
  char dir[64];
  tdm_runtime *rt = make(&(setup){.discrete = discrete, .policy = "eager"}, dir, sizeof dir);
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  unsigned n = mi.device_workers;
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
  return n >= want;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "sim";
  if (getenv("TEST_FILTER")) /* e.g. "*lineage*": only those */
    cmocka_set_test_filter(getenv("TEST_FILTER"));
  if (!strcmp(mode, "sim")) {
    init_codelets(false);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_only),
        cmocka_unit_test(test_emulated_every_policy),
        cmocka_unit_test(test_emulated_evictions),
        cmocka_unit_test(test_emulated_memory_too_small),
        cmocka_unit_test(test_emulated_forty_devices),
        cmocka_unit_test(test_emulated_faults),
        cmocka_unit_test(test_emulated_faults_lineage),
        cmocka_unit_test(test_emulated_lost_lineage),
        cmocka_unit_test(test_emulated_copy_faults),
        cmocka_unit_test(test_emulated_copy_faults_evictions),
        cmocka_unit_test(test_emulated_copy_faults_quarantine),
        cmocka_unit_test(test_emulated_peer_copy_faults),
        cmocka_unit_test(test_emulated_peer_faults_lineage),
        cmocka_unit_test(test_emulated_faults_copies_lineage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
  }
#ifndef TEST_WITH_OPENCL
  printf("built without OpenCL: skipped\n");
  return 77;
#endif
  bool mixed = !strcmp(mode, "mixed");
  opencl_two = !strcmp(mode, "two");
  opencl_discrete = opencl_two || mixed || !strcmp(mode, "discrete");
  if (opencl_two) /* PoCL makes two devices of the CPU (before it starts) */
    setenv("POCL_DEVICES", "pthread pthread", 0);
  init_codelets(true);
  if (!have_opencl_devices(opencl_discrete, opencl_two ? 2 : 1)) {
    printf("no OpenCL CPU device here (install pocl-opencl-icd), or not two: skipped\n");
    return 77;
  }
  if (mixed) {
    const struct CMUnitTest both[] = {
        cmocka_unit_test(test_mixed_every_policy),
        cmocka_unit_test(test_mixed_faults),
    };
    return cmocka_run_group_tests(both, NULL, NULL);
  }
  if (opencl_two) {
    const struct CMUnitTest two[] = {
        cmocka_unit_test(test_opencl_every_policy),
        cmocka_unit_test(test_opencl_one_of_two_lost),
        cmocka_unit_test(test_opencl_one_of_two_lost_lineage),
        /* copies between the two (one context) failing too */
        cmocka_unit_test(test_opencl_copy_faults),
        cmocka_unit_test(test_opencl_copy_faults_evictions),
        cmocka_unit_test(test_opencl_hung),
        cmocka_unit_test(test_opencl_hung_lineage),
    };
    return cmocka_run_group_tests(two, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_opencl_every_policy),
      cmocka_unit_test(test_opencl_evictions),
      cmocka_unit_test(test_opencl_faults),
      cmocka_unit_test(test_opencl_faults_lineage),
      cmocka_unit_test(test_opencl_copy_faults),
      cmocka_unit_test(test_opencl_copy_faults_evictions),
      cmocka_unit_test(test_opencl_hung),
      cmocka_unit_test(test_opencl_hung_lineage),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
