/*
 * Recorded graphs (tdm_graph_*). The differential test: two graphs of
 * random tasks over shared handles (random modes, 1 to 4 buffers, some
 * past TDM_MAX_BUFFERS, some explicit dependencies) are launched again
 * and again, interleaved with ordinary submissions on the same handles,
 * their arguments rebound now and then, and a handle acquired between
 * launches; the handles must hold, when acquired and at the end, what a
 * sequential run of the same sequence gives. Then what a launch promises
 * beside that: outcomes through recorded and outside edges, all or
 * nothing on error, back-pressure, arguments kept by a launch.
 */
#include "common.h"

#include <stdbool.h>
#include <stdlib.h>

#define NH 24
#define WORDS 4
#define MAX_WIDE 12
#define NREC 120  /* tasks recorded in each graph */
#define NLAUNCH 12

#include "steps.h"

/* A random task: its step, its handles (indices), its description. */
typedef struct {
  step s;
  unsigned h[MAX_WIDE];
  tdm_handle *dyn[MAX_WIDE];
  tdm_task_desc d;
} draw;

static void draw_task(uint64_t *rng, tdm_handle *const *hs, draw *x) {
  static const unsigned mode_of[3] = {TDM_R, TDM_W, TDM_RW};
  *rng = mix(*rng);
  bool is_wide = (*rng >> 40) % 12 == 0;
  memset(x, 0, sizeof *x);
  x->s.id = *rng;
  x->s.nbuf = is_wide ? TDM_MAX_BUFFERS + 1 + (unsigned)((*rng >> 44) % (MAX_WIDE - 8))
                      : 1 + (unsigned)(*rng % 4);
  unsigned code = 0;
  for (unsigned i = 0; i < x->s.nbuf; i++) {
    *rng = mix(*rng);
    unsigned m = (*rng >> 8) % 5; /* readers more often: groups of readers form */
    m = m < 3 ? 0 : m - 2;
    x->s.modes[i] = mode_of[m];
    x->h[i] = (unsigned)((*rng >> 20) % NH); /* repeats allowed */
    if (is_wide) {
      x->dyn[i] = hs[x->h[i]];
      wide_modes[i] = (tdm_access)mode_of[m];
    } else {
      x->d.handles[i] = hs[x->h[i]];
    }
    code = code * 3 + m;
  }
  x->d.codelet = is_wide ? &wide[x->s.nbuf] : &cls[x->s.nbuf - 1][code];
  x->d.dyn_handles = is_wide ? x->dyn : NULL;
  x->d.args = &x->s;
  x->d.args_size = sizeof x->s;
}

/* The sequential reference of one task. */
static void apply_ref(uint64_t ref[][WORDS], const step *s, const unsigned *h) {
  uint64_t *bufs[MAX_WIDE];
  for (unsigned i = 0; i < s->nbuf; i++)
    bufs[i] = ref[h[i]];
  apply(s, bufs);
}

/* A graph as recorded, for the reference: its tasks' steps (arguments
 * as rebound) and handles. */
typedef struct {
  tdm_graph *g;
  step s[NREC];
  unsigned h[NREC][MAX_WIDE];
} recorded;

static void record_graph(tdm_runtime *rt, recorded *r, uint64_t *rng, tdm_handle *const *hs) {
  assert_int_equal(tdm_graph_create(rt, &r->g), TDM_OK);
  for (size_t i = 0; i < NREC; i++) {
    draw x;
    draw_task(rng, hs, &x);
    size_t node = 99999;
    assert_int_equal(tdm_graph_add(r->g, &x.d, &node), TDM_OK);
    assert_int_equal(node, i);
    r->s[i] = x.s;
    memcpy(r->h[i], x.h, sizeof x.h);
    /* one in eight: an explicit dependency on an earlier task (it only
     * adds order: the sequential result stays) */
    *rng = mix(*rng);
    if (i > 0 && (*rng >> 50) % 8 == 0)
      assert_int_equal(tdm_graph_depend(r->g, i, (size_t)(*rng % i)), TDM_OK);
  }
  assert_int_equal(tdm_graph_size(r->g), NREC);
}

/* One seed on rt: the handles must match the sequential run whenever
 * acquired and at the end. */
static void one_seed(tdm_runtime *rt, uint64_t seed) {
  static uint64_t data[NH][WORDS], ref[NH][WORDS];
  for (int h = 0; h < NH; h++)
    for (int w = 0; w < WORDS; w++)
      data[h][w] = ref[h][w] = mix(seed * 1000 + (uint64_t)(h * WORDS + w));
  tdm_handle *hs[NH];
  for (int h = 0; h < NH; h++)
    assert_int_equal(tdm_register_vector(rt, data[h], WORDS, sizeof(uint64_t), &hs[h]), TDM_OK);
  uint64_t rng = seed;
  static recorded graphs[2];
  for (int k = 0; k < 2; k++)
    record_graph(rt, &graphs[k], &rng, hs);
  for (int l = 0; l < NLAUNCH; l++) {
    recorded *r = &graphs[l % 3 == 2]; /* A, A, B, A, A, B ... */
    rng = mix(rng);
    if (rng % 3 == 0) { /* arguments rebound: new mixing for one task */
      size_t i = (rng >> 8) % NREC;
      r->s[i].id = mix(rng);
      assert_int_equal(tdm_graph_set_args(r->g, i, &r->s[i], sizeof r->s[i]), TDM_OK);
    }
    assert_int_equal(tdm_graph_launch(r->g), TDM_OK);
    for (size_t i = 0; i < NREC; i++)
      apply_ref(ref, &r->s[i], r->h[i]);
    /* ordinary submissions on the same handles between launches */
    unsigned extra = (unsigned)((rng >> 16) % 12);
    for (unsigned e = 0; e < extra; e++) {
      draw x;
      draw_task(&rng, hs, &x);
      assert_int_equal(tdm_submit(rt, &x.d), TDM_OK);
      apply_ref(ref, &x.s, x.h);
    }
    if (l % 4 == 1) { /* the host reads a handle between launches */
      unsigned h = (unsigned)((rng >> 24) % NH);
      assert_int_equal(tdm_handle_acquire(hs[h], TDM_R), TDM_OK);
      for (int w = 0; w < WORDS; w++)
        if (data[h][w] != ref[h][w])
          fail_msg("seed %llu, launch %d: acquired handle %u word %d differs",
                   (unsigned long long)seed, l, h, w);
      assert_int_equal(tdm_handle_release(hs[h]), TDM_OK);
    }
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  for (int h = 0; h < NH; h++)
    assert_int_equal(tdm_handle_unregister(hs[h]), TDM_OK);
  for (int h = 0; h < NH; h++)
    for (int w = 0; w < WORDS; w++)
      if (data[h][w] != ref[h][w])
        fail_msg("seed %llu: handle %d word %d differs (%llx, want %llx)",
                 (unsigned long long)seed, h, w, (unsigned long long)data[h][w],
                 (unsigned long long)ref[h][w]);
  for (int k = 0; k < 2; k++)
    tdm_graph_destroy(graphs[k].g);
}

static void test_graph_matches_sequential(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL); /* more workers than cores: more interleavings */
  for (uint64_t seed = 1; seed <= 10; seed++)
    one_seed(rt, seed);
  tdm_runtime_destroy(rt);
}

static void test_graph_one_worker(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(1, NULL);
  for (uint64_t seed = 20; seed <= 23; seed++)
    one_seed(rt, seed);
  tdm_runtime_destroy(rt);
}

/* Emulated devices, with memory of their own and sharing the host's:
 * recorded tasks go there too, and their data comes back. */
static void test_graph_devices(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime_emulated(
      2, "gpu:speedup=4,latency=2us,bandwidth=8G;igpu:speedup=2,memory=shared", NULL);
  for (uint64_t seed = 30; seed <= 35; seed++)
    one_seed(rt, seed);
  tdm_device_counters c0 = test_counters(rt, 0), c1 = test_counters(rt, 1);
  assert_true(c0.tasks > 0 && c1.tasks > 0); /* recorded or not: some ran there */
  tdm_runtime_destroy(rt);
}

/* The verification mode and a trace launch one by one: the same results. */
static void test_graph_verified_and_traced(void **state) {
  (void)state;
  char dir[256], path[300];
  test_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/trace.json", dir);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.sim = "gpu:speedup=4,latency=2us,bandwidth=8G";
  cfg.sim_time_scale = 1;
  cfg.scheduler = "random";
  cfg.verify = "*:0.5";
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  for (uint64_t seed = 40; seed <= 41; seed++)
    one_seed(rt, seed);
  tdm_verify_counts vc = {.struct_size = sizeof vc};
  assert_int_equal(tdm_runtime_verify_counts(rt, &vc), TDM_OK);
  assert_true(vc.compared > 0);
  assert_int_equal(vc.mismatched, 0);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);

  cfg.sim = NULL;
  cfg.verify = NULL;
  cfg.scheduler = NULL;
  cfg.devices = "none";
  cfg.trace_path = path;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  one_seed(rt, 42);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  assert_true(ftell(f) > 1000); /* the launches' tasks are in it */
  fclose(f);
  test_remove_dir(dir);
}

/* ---- outcomes ------------------------------------------------------------ */

static _Atomic int gate_open;
static void wait_gate(const tdm_buffer *b, const void *args, size_t n) {
  (void)b, (void)args, (void)n;
  while (!atomic_load(&gate_open))
    sleep_ms(1);
}
static void write_one(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  *(int *)b[0].ptr = *(const int *)args;
}
static void copy_one(const tdm_buffer *b, const void *args, size_t n) {
  (void)args, (void)n;
  *(int *)b[1].ptr = *(const int *)b[0].ptr + 1;
}
static void note_status(void *data) {
  atomic_store((_Atomic int *)data, (int)tdm_callback_status());
}

static const tdm_codelet gate_cl = {.name = "gate", .cpu_fn = wait_gate, .nbuffers = 1,
                                    .modes = {TDM_RW}};
static const tdm_codelet write_cl = {.name = "write", .cpu_fn = write_one, .nbuffers = 1,
                                     .modes = {TDM_W}};
static const tdm_codelet rw_cl = {.name = "rw", .cpu_fn = write_one, .nbuffers = 1,
                                  .modes = {TDM_RW}};
static const tdm_codelet copy_cl = {.name = "copy", .cpu_fn = copy_one, .nbuffers = 2,
                                    .modes = {TDM_R, TDM_W}};

/* A writer before the launch cancelled: the launch's reader of its
 * version is cancelled (an edge from outside, tagged), and what reads
 * that reader's output (a recorded edge) too; a recorded task that only
 * overwrites is not. A recorded task in a cancelled group: its reader
 * in the graph is cancelled, through a recorded edge. */
static void test_graph_outcomes(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  int a = 0, b = 0, c = 0;
  tdm_handle *ha, *hb, *hc;
  assert_int_equal(tdm_register_vector(rt, &a, 1, sizeof a, &ha), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, &b, 1, sizeof b, &hb), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, &c, 1, sizeof c, &hc), TDM_OK);
  tdm_group *doomed;
  assert_int_equal(tdm_group_create(rt, NULL, &doomed), TDM_OK);

  _Atomic int st[4];
  for (int i = 0; i < 4; i++)
    atomic_init(&st[i], 99);
  tdm_graph *g;
  assert_int_equal(tdm_graph_create(rt, &g), TDM_OK);
  /* 0: b = a + 1 (reads what is before the launch) */
  tdm_task_desc d0 = {.codelet = &copy_cl, .handles = {ha, hb}, .callback = note_status,
                      .callback_data = &st[0]};
  assert_int_equal(tdm_graph_add(g, &d0, NULL), TDM_OK);
  /* 1: c = b + 1 (reads task 0's output) */
  tdm_task_desc d1 = {.codelet = &copy_cl, .handles = {hb, hc}, .callback = note_status,
                      .callback_data = &st[1]};
  assert_int_equal(tdm_graph_add(g, &d1, NULL), TDM_OK);
  /* 2: a = 7, overwriting (not cancelled) */
  int seven = 7;
  tdm_task_desc d2 = {.codelet = &write_cl, .handles = {ha}, .args = &seven,
                      .args_size = sizeof seven, .callback = note_status,
                      .callback_data = &st[2]};
  assert_int_equal(tdm_graph_add(g, &d2, NULL), TDM_OK);

  /* before the launch: a gate on a, then a writer of a in the doomed group */
  tdm_task_desc gate = {.codelet = &gate_cl, .handles = {ha}};
  atomic_store(&gate_open, 0);
  assert_int_equal(tdm_submit(rt, &gate), TDM_OK);
  int five = 5;
  tdm_task_desc w = {.codelet = &rw_cl, .handles = {ha}, .args = &five, .args_size = sizeof five,
                     .group = doomed};
  assert_int_equal(tdm_submit(rt, &w), TDM_OK);
  assert_int_equal(tdm_graph_launch(g), TDM_OK);
  assert_int_equal(tdm_group_cancel(doomed), TDM_OK);
  atomic_store(&gate_open, 1);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  assert_int_equal(atomic_load(&st[0]), TDM_ERR_CANCELLED);
  assert_int_equal(atomic_load(&st[1]), TDM_ERR_CANCELLED);
  assert_int_equal(atomic_load(&st[2]), TDM_OK);
  assert_int_equal(tdm_handle_acquire(ha, TDM_R), TDM_OK);
  assert_int_equal(a, 7);
  assert_int_equal(tdm_handle_release(ha), TDM_OK);

  /* The same graph launched again: all run (b = 8, c = 9). */
  assert_int_equal(tdm_graph_launch(g), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&st[0]), TDM_OK);
  assert_int_equal(atomic_load(&st[1]), TDM_OK);
  assert_int_equal(tdm_handle_acquire(hc, TDM_R), TDM_OK);
  assert_int_equal(b, 8);
  assert_int_equal(c, 9);
  assert_int_equal(tdm_handle_release(hc), TDM_OK);

  /* A recorded task in a cancelled group; its recorded reader cancelled. */
  tdm_graph *g2;
  assert_int_equal(tdm_graph_create(rt, &g2), TDM_OK);
  atomic_store(&gate_open, 0);
  tdm_task_desc gate_b = {.codelet = &gate_cl, .handles = {hb}};
  tdm_group *later;
  assert_int_equal(tdm_group_create(rt, NULL, &later), TDM_OK);
  tdm_task_desc wb = {.codelet = &rw_cl, .handles = {hb}, .args = &five, .args_size = sizeof five,
                      .group = later, .callback = note_status, .callback_data = &st[3]};
  assert_int_equal(tdm_graph_add(g2, &wb, NULL), TDM_OK);
  assert_int_equal(tdm_graph_add(g2, &d1, NULL), TDM_OK); /* c = b + 1 */
  assert_int_equal(tdm_submit(rt, &gate_b), TDM_OK);
  assert_int_equal(tdm_graph_launch(g2), TDM_OK);
  assert_int_equal(tdm_group_cancel(later), TDM_OK);
  atomic_store(&gate_open, 1);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  assert_int_equal(atomic_load(&st[3]), TDM_ERR_CANCELLED);
  assert_int_equal(atomic_load(&st[1]), TDM_ERR_CANCELLED);
  assert_int_equal(tdm_group_wait(later), TDM_ERR_CANCELLED);
  tdm_group_release(later);
  tdm_group_release(doomed);
  tdm_graph_destroy(g2);
  tdm_graph_destroy(g);
  assert_int_equal(tdm_handle_unregister(ha), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hb), TDM_ERR_LOST); /* its last writer cancelled */
  assert_int_equal(tdm_handle_unregister(hc), TDM_ERR_LOST);
  tdm_runtime_destroy(rt);
}

/* A task before the launch that a recorded task waits for through two
 * handles, reading its version through one only (it wrote a, read b;
 * the recorded task reads a, writes b): one edge, which carries the
 * version, so that the writer's cancellation cancels the recorded task,
 * whichever handle comes first (both address orders). */
static const tdm_codelet rw_r_cl = {.name = "rw-r", .cpu_fn = write_one, .nbuffers = 2,
                                    .modes = {TDM_RW, TDM_R}};
static const tdm_codelet r_w_cl = {.name = "r-w", .cpu_fn = copy_one, .nbuffers = 2,
                                   .modes = {TDM_R, TDM_W}};

static void test_graph_outcome_through_two_handles(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  int cells[2] = {0, 0};
  tdm_handle *h[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(tdm_register_vector(rt, &cells[i], 1, sizeof(int), &h[i]), TDM_OK);
  for (int order = 0; order < 2; order++) {
    tdm_handle *a = h[order], *b = h[1 - order];
    tdm_group *doomed;
    assert_int_equal(tdm_group_create(rt, NULL, &doomed), TDM_OK);
    _Atomic int st;
    atomic_init(&st, 99);
    tdm_graph *g;
    assert_int_equal(tdm_graph_create(rt, &g), TDM_OK);
    tdm_task_desc n = {.codelet = &r_w_cl, .handles = {a, b}, .callback = note_status,
                       .callback_data = &st};
    assert_int_equal(tdm_graph_add(g, &n, NULL), TDM_OK);
    atomic_store(&gate_open, 0);
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &gate_cl, .handles = {a}}),
                     TDM_OK);
    int one = 1;
    tdm_task_desc x = {.codelet = &rw_r_cl, .handles = {a, b}, .args = &one,
                       .args_size = sizeof one, .group = doomed};
    assert_int_equal(tdm_submit(rt, &x), TDM_OK);
    assert_int_equal(tdm_graph_launch(g), TDM_OK);
    assert_int_equal(tdm_group_cancel(doomed), TDM_OK);
    atomic_store(&gate_open, 1);
    assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
    assert_int_equal(atomic_load(&st), TDM_ERR_CANCELLED);
    tdm_graph_destroy(g);
    tdm_group_release(doomed);
  }
  tdm_runtime_destroy(rt);
}

/* ---- errors and edges ------------------------------------------------------- */

static _Atomic int runs;
static void count_run(const tdm_buffer *b, const void *args, size_t n) {
  (void)b, (void)args, (void)n;
  atomic_fetch_add(&runs, 1);
}
static const tdm_codelet count_cl = {.name = "count", .cpu_fn = count_run, .nbuffers = 1,
                                     .modes = {TDM_RW}};
static const tdm_codelet none_cl = {.name = "none", .cpu_fn = count_run};

static void test_graph_errors(void **state) {
  (void)state;
  test_log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tdm_runtime *rt = test_runtime(2, &log);
  int x[64] = {0}, y = 0;
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, 64, sizeof x[0], &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, &y, 1, sizeof y, &hy), TDM_OK);
  tdm_graph *g = NULL;
  assert_int_equal(tdm_graph_create(NULL, &g), TDM_ERR_INVALID_ARG);
  assert_null(g);
  assert_int_equal(tdm_graph_create(rt, NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_graph_create(rt, &g), TDM_OK);
  assert_int_equal(tdm_graph_launch(g), TDM_OK); /* empty: nothing */
  assert_int_equal(tdm_graph_launch(NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_graph_add(NULL, NULL, NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_graph_add(g, NULL, NULL), TDM_ERR_INVALID_ARG);
  tdm_task_desc bad = {.codelet = &count_cl}; /* a NULL handle */
  assert_int_equal(tdm_graph_add(g, &bad, NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_graph_size(g), 0);
  tdm_task_desc dx = {.codelet = &count_cl, .handles = {hx}};
  tdm_task_desc dy = {.codelet = &count_cl, .handles = {hy}};
  assert_int_equal(tdm_graph_add(g, &dx, NULL), TDM_OK);
  assert_int_equal(tdm_graph_add(g, &dy, NULL), TDM_OK);
  assert_int_equal(tdm_graph_depend(g, 1, 1), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_graph_depend(g, 0, 1), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_graph_depend(g, 2, 0), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_graph_depend(NULL, 1, 0), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_graph_set_args(g, 2, NULL, 0), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_graph_set_args(g, 0, NULL, 4), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_graph_size(g), 2);
  assert_int_equal(tdm_graph_size(NULL), 0);

  /* all or nothing: a partitioned handle, then an unregistered one */
  atomic_store(&runs, 0);
  assert_int_equal(tdm_vector_partition(hx, 16, 0), TDM_OK);
  assert_int_equal(tdm_graph_launch(g), TDM_ERR_PARTITIONED);
  assert_true(test_log_has(&log, "partitioned"));
  assert_int_equal(tdm_vector_unpartition(hx, 0), TDM_OK);
  assert_int_equal(tdm_graph_launch(g), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&runs), 2);
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  assert_int_equal(tdm_graph_launch(g), TDM_ERR_STALE_HANDLE);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&runs), 2); /* the task on hx did not run either */
  assert_int_equal(tdm_graph_add(g, &dy, NULL), TDM_ERR_STALE_HANDLE);
  tdm_graph_destroy(g);

  /* tasks without buffers, and explicit order alone */
  assert_int_equal(tdm_graph_create(rt, &g), TDM_OK);
  tdm_task_desc dn = {.codelet = &none_cl};
  for (int i = 0; i < 100; i++)
    assert_int_equal(tdm_graph_add(g, &dn, NULL), TDM_OK);
  atomic_store(&runs, 0);
  for (int l = 0; l < 50; l++)
    assert_int_equal(tdm_graph_launch(g), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&runs), 5000);
  tdm_graph_destroy(g);
  tdm_graph_destroy(NULL);
  assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
  /* a graph left at destroy is freed with the runtime (no leak) */
  assert_int_equal(tdm_graph_create(rt, &g), TDM_OK);
  assert_int_equal(tdm_graph_add(g, &dn, NULL), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* Explicit dependencies order tasks that share no handle: a chain of
 * tasks, each appending its number to a log only the chain writes. */
static _Atomic int order_log[64];
static _Atomic int order_n;
static void append_index(const tdm_buffer *b, const void *args, size_t n) {
  (void)b, (void)n;
  sleep_ms(((*(const int *)args) % 3 == 0) ? 1 : 0); /* give others a chance */
  atomic_store(&order_log[atomic_fetch_add(&order_n, 1)], *(const int *)args);
}

static void test_graph_explicit_chain(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  static const tdm_codelet cl = {.name = "append", .cpu_fn = append_index};
  tdm_graph *g;
  assert_int_equal(tdm_graph_create(rt, &g), TDM_OK);
  for (int i = 0; i < 32; i++) {
    tdm_task_desc d = {.codelet = &cl, .args = &i, .args_size = sizeof i};
    assert_int_equal(tdm_graph_add(g, &d, NULL), TDM_OK);
    if (i)
      assert_int_equal(tdm_graph_depend(g, (size_t)i, (size_t)i - 1), TDM_OK);
  }
  for (int round = 0; round < 2; round++) {
    atomic_store(&order_n, 0);
    assert_int_equal(tdm_graph_launch(g), TDM_OK);
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    assert_int_equal(atomic_load(&order_n), 32);
    for (int i = 0; i < 32; i++)
      assert_int_equal(atomic_load(&order_log[i]), i);
  }
  tdm_graph_destroy(g);
  tdm_runtime_destroy(rt);
}

/* Arguments: a launch keeps those it was made with; set_args applies to
 * the next. Back-pressure: a launch larger than max_pending still runs. */
static void add_arg(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  *(long *)b[0].ptr += *(const long *)args;
}

static void test_graph_args_and_pressure(void **state) {
  (void)state;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.devices = "none";
  cfg.max_pending = 16;
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  static const tdm_codelet cl = {.name = "add", .cpu_fn = add_arg, .nbuffers = 1,
                                 .modes = {TDM_RW}};
  long sum = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &sum, 1, sizeof sum, &h), TDM_OK);
  tdm_graph *g;
  assert_int_equal(tdm_graph_create(rt, &g), TDM_OK);
  long one = 1;
  tdm_task_desc d = {.codelet = &cl, .handles = {h}, .args = &one, .args_size = sizeof one};
  for (int i = 0; i < 100; i++) /* more than max_pending */
    assert_int_equal(tdm_graph_add(g, &d, NULL), TDM_OK);
  /* big arguments (past the inline room), rebound between launches */
  char big[512] = {0};
  long thousand = 1000;
  memcpy(big, &thousand, sizeof thousand);
  assert_int_equal(tdm_graph_set_args(g, 99, big, sizeof big), TDM_OK);
  assert_int_equal(tdm_graph_launch(g), TDM_OK); /* 99 + 1000 */
  long million = 1000000;
  memcpy(big, &million, sizeof million);
  assert_int_equal(tdm_graph_set_args(g, 99, big, sizeof big), TDM_OK);
  assert_int_equal(tdm_graph_set_args(g, 0, &million, sizeof million), TDM_OK);
  assert_int_equal(tdm_graph_launch(g), TDM_OK); /* 98 + 2 000 000 */
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_acquire(h, TDM_R), TDM_OK);
  assert_int_equal(sum, 99 + 1000 + 98 + 2000000);
  assert_int_equal(tdm_handle_release(h), TDM_OK);
  tdm_graph_destroy(g);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* Launched from tasks, while the application submits on the same
 * handle: the additions all land (no lost update), in any order. */
typedef struct {
  tdm_graph *g;
} launcher_args;
static void launch_from_task(const tdm_buffer *b, const void *args, size_t n) {
  (void)b, (void)n;
  const launcher_args *a = args;
  assert_int_equal(tdm_graph_launch(a->g), TDM_OK);
}

static void test_graph_launched_by_tasks(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(3, NULL);
  static const tdm_codelet add = {.name = "add", .cpu_fn = add_arg, .nbuffers = 1,
                                  .modes = {TDM_RW}};
  static const tdm_codelet launcher = {.name = "launcher", .cpu_fn = launch_from_task};
  long sum = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &sum, 1, sizeof sum, &h), TDM_OK);
  tdm_graph *g[4];
  long one = 1;
  for (int k = 0; k < 4; k++) {
    assert_int_equal(tdm_graph_create(rt, &g[k]), TDM_OK);
    tdm_task_desc d = {.codelet = &add, .handles = {h}, .args = &one, .args_size = sizeof one};
    for (int i = 0; i < 50; i++)
      assert_int_equal(tdm_graph_add(g[k], &d, NULL), TDM_OK);
  }
  /* each graph launched by one task at a time: chained launchers */
  tdm_graph *lg;
  assert_int_equal(tdm_graph_create(rt, &lg), TDM_OK);
  for (int k = 0; k < 4; k++) {
    launcher_args a = {g[k]};
    tdm_task_desc d = {.codelet = &launcher, .args = &a, .args_size = sizeof a};
    for (int r = 0; r < 10; r++) {
      size_t node;
      assert_int_equal(tdm_graph_add(lg, &d, &node), TDM_OK);
      if (r)
        assert_int_equal(tdm_graph_depend(lg, node, node - 1), TDM_OK);
    }
  }
  assert_int_equal(tdm_graph_launch(lg), TDM_OK);
  tdm_task_desc d = {.codelet = &add, .handles = {h}, .args = &one, .args_size = sizeof one};
  for (int i = 0; i < 300; i++)
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_acquire(h, TDM_R), TDM_OK);
  assert_int_equal(sum, 4 * 10 * 50 + 300);
  assert_int_equal(tdm_handle_release(h), TDM_OK);
  for (int k = 0; k < 4; k++)
    tdm_graph_destroy(g[k]);
  tdm_graph_destroy(lg);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  tdm_runtime_destroy(rt);
}

int main(void) {
  init_codelets();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graph_matches_sequential),
      cmocka_unit_test(test_graph_one_worker),
      cmocka_unit_test(test_graph_devices),
      cmocka_unit_test(test_graph_verified_and_traced),
      cmocka_unit_test(test_graph_outcomes),
      cmocka_unit_test(test_graph_outcome_through_two_handles),
      cmocka_unit_test(test_graph_errors),
      cmocka_unit_test(test_graph_explicit_chain),
      cmocka_unit_test(test_graph_args_and_pressure),
      cmocka_unit_test(test_graph_launched_by_tasks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
