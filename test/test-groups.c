/*
 * Task groups (progress, throttled progress calls, waiting for a group
 * alone, cancelling from any thread) and the application's event loop
 * (the event descriptor wakes poll(), tdm_dispatch runs callbacks, group
 * progress and tasks pinned to the application's thread, in dependency
 * order). The cancel test checks, over many seeds, that cancelling a
 * random graph at a random moment leaves every handle as a sequential run
 * of the tasks that did run would.
 */
#include "common.h"

#include <poll.h>
#include <stdbool.h>

static tdm_runtime *make_with(unsigned nworkers, const char *sim) {
  return test_runtime_emulated(nworkers, sim, NULL);
}

static tdm_runtime *make(unsigned nworkers) {
  return make_with(nworkers, NULL);
}

static _Atomic int ran, started, gate;
static tdm_runtime *the_rt;
static tdm_group *the_group;

static void count(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  atomic_fetch_add(&ran, 1);
}

static void gated(const tdm_buffer *b, const void *args, size_t n) {
  atomic_fetch_add(&started, 1);
  while (!atomic_load(&gate))
    sleep_ms(1);
  count(b, args, n);
}

static void nap(const tdm_buffer *b, const void *args, size_t n) {
  sleep_ms(2);
  count(b, args, n);
}

/* Submits three counting tasks into the_group, then counts itself. */
static void spawner(const tdm_buffer *b, const void *args, size_t n) {
  static const tdm_codelet cl = {.name = "child", .cpu_fn = nap};
  for (int i = 0; i < 3; i++)
    if (tdm_submit(the_rt, &(tdm_task_desc){.codelet = &cl, .group = the_group, .cost = 0.5f}))
      abort();
  count(b, args, n);
}

static const tdm_codelet cl_count = {.name = "count", .cpu_fn = count};
static const tdm_codelet cl_gated = {.name = "gated", .cpu_fn = gated};
static const tdm_codelet cl_nap = {.name = "nap", .cpu_fn = nap};
static const tdm_codelet cl_spawner = {.name = "spawner", .cpu_fn = spawner};

static void reset(void) {
  atomic_store(&ran, 0);
  atomic_store(&started, 0);
  atomic_store(&gate, 0);
}

static tdm_group_progress progress_of(tdm_group *g) {
  tdm_group_progress p = {.struct_size = sizeof p};
  assert_int_equal(tdm_group_get_progress(g, &p), TDM_OK);
  return p;
}

/* Counts and costs are exact, tasks submitted from the group's tasks
 * included; tdm_group_wait waits for those too. */
static void test_progress_counts(void **state) {
  (void)state;
  tdm_runtime *rt = make(2);
  reset();
  the_rt = rt;
  tdm_group *g = NULL;
  assert_int_equal(tdm_group_create(rt, NULL, &g), TDM_OK);
  the_group = g;
  tdm_group_progress p = progress_of(g);
  assert_int_equal(p.submitted, 0);
  assert_int_equal(tdm_group_wait(g), TDM_OK); /* empty: at once */
  for (int i = 0; i < 20; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_spawner, .group = g,
                                                     .cost = (float)(1 + i % 3)}),
                     TDM_OK);
  assert_int_equal(tdm_group_wait(g), TDM_OK);
  assert_int_equal(atomic_load(&ran), 80); /* children included */
  p = progress_of(g);
  assert_int_equal(p.submitted, 80);
  assert_int_equal(p.ended, 80);
  assert_int_equal(p.failed, 0);
  assert_int_equal(p.cancelled, 0);
  assert_int_equal(p.cancel_requested, 0);
  /* 20 spawners weigh 1, 2, 3, ... (7 x 1 + 7 x 2 + 6 x 3 = 39), 60
   * children 0.5 each */
  assert_true(p.cost_submitted == 69.0);
  assert_true(p.cost_ended == 69.0);
  /* tasks outside the group are not counted */
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_count}), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(progress_of(g).submitted, 80);
  /* bad arguments */
  tdm_group_progress small = {.struct_size = 8};
  assert_int_equal(tdm_group_get_progress(g, &small), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_group_get_progress(NULL, &p), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_group_wait(NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_group_cancel(NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_group_create(NULL, NULL, &g), TDM_ERR_INVALID_ARG);
  tdm_group *bad = NULL;
  assert_int_equal(tdm_group_create(rt, &(tdm_group_desc){.progress_hz = -1}, &bad),
                   TDM_ERR_INVALID_ARG);
  assert_null(bad);
  tdm_group_release(the_group);
  tdm_group_release(NULL);
  tdm_runtime_destroy(rt);
}

/* A group of another runtime is refused; a group never released is freed
 * by destroy (LeakSanitizer would say otherwise). */
static void test_group_of_other_runtime(void **state) {
  (void)state;
  tdm_runtime *a = make(1), *b = make(1);
  tdm_group *g = NULL;
  assert_int_equal(tdm_group_create(a, &(tdm_group_desc){.name = "a"}, &g), TDM_OK);
  assert_int_equal(tdm_submit(b, &(tdm_task_desc){.codelet = &cl_count, .group = g}),
                   TDM_ERR_WRONG_RUNTIME);
  assert_int_equal(tdm_submit(a, &(tdm_task_desc){.codelet = &cl_count, .group = g}), TDM_OK);
  tdm_runtime_destroy(b);
  tdm_runtime_destroy(a);
}

/* tdm_group_wait waits for its group alone. */
static void test_wait_for_group_alone(void **state) {
  (void)state;
  tdm_runtime *rt = make(2);
  reset();
  tdm_group *slow, *quick;
  assert_int_equal(tdm_group_create(rt, NULL, &slow), TDM_OK);
  assert_int_equal(tdm_group_create(rt, NULL, &quick), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_gated, .group = slow}),
                   TDM_OK);
  for (int i = 0; i < 10; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_count, .group = quick}),
                     TDM_OK);
  assert_int_equal(tdm_group_wait(quick), TDM_OK);
  assert_int_equal(atomic_load(&ran), 10);
  assert_int_equal(progress_of(slow).ended, 0);
  atomic_store(&gate, 1);
  assert_int_equal(tdm_group_wait(slow), TDM_OK);
  assert_int_equal(atomic_load(&ran), 11);
  tdm_group_release(slow);
  tdm_group_release(quick);
  tdm_runtime_destroy(rt);
}

/* ---- progress calls ------------------------------------------------------ */

typedef struct calls {
  _Atomic int n, inside, overlapped;
  tdm_group_progress last;
  pthread_t thread; /* of the last call */
} calls;

static void on_progress(void *data, const tdm_group_progress *p) {
  calls *c = data;
  if (atomic_fetch_add(&c->inside, 1))
    atomic_store(&c->overlapped, 1);
  c->last = *p;
  c->thread = pthread_self();
  atomic_fetch_add(&c->n, 1);
  usleep(200); /* gives another call a chance to overlap, if it could */
  atomic_fetch_sub(&c->inside, 1);
}

/* At most progress_hz calls a second (plus the final ones), never two at
 * once, and the last shows the group whole. */
static void test_progress_calls_throttled(void **state) {
  (void)state;
  tdm_runtime *rt = make(3);
  reset();
  calls c = {0};
  tdm_group *g;
  tdm_group_desc d = {.struct_size = sizeof d, .name = "throttled", .progress_fn = on_progress,
                      .progress_data = &c, .progress_hz = 20};
  assert_int_equal(tdm_group_create(rt, &d, &g), TDM_OK);
  double t0 = now_s();
  for (int i = 0; i < 150; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_nap, .group = g}), TDM_OK);
  assert_int_equal(tdm_group_wait(g), TDM_OK);
  double took = now_s() - t0;
  /* the final call came before the wait returned */
  int n = atomic_load(&c.n);
  printf("%d progress calls in %.0f ms at 20 a second at most\n", n, 1e3 * took);
  assert_true(n >= 1);
  assert_true(n <= 2 + (int)(20 * took + 1)); /* one per 50 ms, and the final */
  assert_int_equal(atomic_load(&c.overlapped), 0);
  assert_int_equal(c.last.ended, 150);
  assert_int_equal(c.last.submitted, 150);
  tdm_group_release(g);
  tdm_runtime_destroy(rt);
}

/* No progress call comes after tdm_group_wait has returned: the data it
 * was given may go then (a call after it would read freed memory, which
 * ASan reports; and count as late here). Many short groups, each task
 * ending on any worker. */
typedef struct closing_calls {
  _Atomic int closed, n;
} closing_calls;

static _Atomic int late_calls;

static void on_progress_closing(void *data, const tdm_group_progress *p) {
  (void)p;
  closing_calls *c = data;
  usleep(50); /* a call that overlaps the wait's return, if it can */
  if (atomic_load(&c->closed))
    atomic_fetch_add(&late_calls, 1);
  atomic_fetch_add(&c->n, 1);
}

static void test_no_progress_after_wait(void **state) {
  (void)state;
  tdm_runtime *rt = make(3);
  atomic_store(&late_calls, 0);
  for (int round = 0; round < 200; round++) {
    closing_calls *c = calloc(1, sizeof *c);
    assert_non_null(c);
    tdm_group *g;
    tdm_group_desc d = {.struct_size = sizeof d, .progress_fn = on_progress_closing,
                        .progress_data = c, .progress_hz = 1e6};
    assert_int_equal(tdm_group_create(rt, &d, &g), TDM_OK);
    for (int i = 0; i < 1 + round % 7; i++)
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_count, .group = g}),
                       TDM_OK);
    assert_int_equal(tdm_group_wait(g), TDM_OK);
    atomic_store(&c->closed, 1);
    assert_true(atomic_load(&c->n) >= 1); /* the final call, at least */
    tdm_group_release(g);
    free(c);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&late_calls), 0);
  tdm_runtime_destroy(rt);
}

/* ---- cancel --------------------------------------------------------------- */

static _Atomic int reader_ran;

static void read_it(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  atomic_fetch_add(&reader_ran, 1);
}

/* Cancelled: the running task finishes, queued ones never start, later
 * submissions are cancelled, a reader of a cancelled task's output in no
 * group is cancelled too (and reported by tdm_wait_all); the handle keeps
 * the last version produced. */
static void test_cancel(void **state) {
  (void)state;
  tdm_runtime *rt = make(1);
  reset();
  atomic_store(&reader_ran, 0);
  long value = 7;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &value, 1, sizeof value, &h), TDM_OK);
  tdm_group *g;
  assert_int_equal(tdm_group_create(rt, NULL, &g), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_gated, .group = g}), TDM_OK);
  assert_int_equal(wait_flag(&started, 10), 1);
  for (int i = 0; i < 50; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_count, .group = g}),
                     TDM_OK);
  static const tdm_codelet cl_write = {.name = "write", .cpu_fn = count, .nbuffers = 1,
                                       .modes = {TDM_RW}};
  static const tdm_codelet cl_read = {.name = "read", .cpu_fn = read_it, .nbuffers = 1,
                                      .modes = {TDM_R}};
  assert_int_equal(
      tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_write, .handles = {h}, .group = g}),
      TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_read, .handles = {h}}),
                   TDM_OK);
  assert_int_equal(tdm_group_cancel(g), TDM_OK);
  assert_int_equal(tdm_group_cancel(g), TDM_OK); /* twice is once */
  atomic_store(&gate, 1);
  assert_int_equal(tdm_group_wait(g), TDM_ERR_CANCELLED);
  assert_int_equal(atomic_load(&ran), 1); /* the running one */
  tdm_group_progress p = progress_of(g);
  assert_int_equal(p.submitted, 52);
  assert_int_equal(p.ended, 52);
  assert_int_equal(p.cancelled, 51);
  assert_int_equal(p.cancel_requested, 1);
  /* after the cancel: cancelled at once */
  tdm_task *t;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_count, .group = g}, &t),
                   TDM_OK);
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  assert_int_equal(tdm_task_wait(t), TDM_ERR_CANCELLED);
  tdm_task_release(t);
  /* the reader, in no group, followed the outcome rules */
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  assert_int_equal(atomic_load(&reader_ran), 0);
  assert_int_equal(tdm_wait_all(rt), TDM_OK); /* reported once */
  assert_int_equal(tdm_handle_unregister(h), TDM_ERR_LOST);
  assert_int_equal(value, 7); /* the last version produced */
  tdm_group_release(g);
  tdm_runtime_destroy(rt);
}

/* What a cancel leaves is what the application asked for: the handle a
 * cancelled task was to write comes back TDM_ERR_LOST, and nothing is
 * logged above debug level, nor reported by tdm_wait_all. */
static void test_cancel_is_quiet(void **state) {
  (void)state;
  test_log log;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.ignore_env = 1;
  cfg.devices = "none";
  test_log_attach(&cfg, &log);
  cfg.log_level = TDM_LOG_INFO; /* all but debug */
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  unsigned said = test_log_count(&log); /* of its creation, at info level */
  reset();
  long value = 7;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &value, 1, sizeof value, &h), TDM_OK);
  tdm_group *g;
  assert_int_equal(tdm_group_create(rt, NULL, &g), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_gated, .group = g}), TDM_OK);
  assert_int_equal(wait_flag(&started, 10), 1);
  static const tdm_codelet cl_write = {.name = "write", .cpu_fn = count, .nbuffers = 1,
                                       .modes = {TDM_RW}};
  for (int i = 0; i < 5; i++)
    assert_int_equal(
        tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_write, .handles = {h}, .group = g}),
        TDM_OK);
  /* and the tiles of a partitioned matrix */
  long m[4 * 4] = {0};
  tdm_handle *hm;
  assert_int_equal(tdm_register_matrix(rt, m, 4, 4, 4, sizeof *m, &hm), TDM_OK);
  assert_int_equal(tdm_matrix_partition(hm, 2, 2, 0), TDM_OK);
  for (int i = 0; i < 4; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_write,
                                                     .handles = {tdm_matrix_tile(hm, i / 2, i % 2)},
                                                     .group = g}),
                     TDM_OK);
  assert_int_equal(tdm_group_cancel(g), TDM_OK);
  atomic_store(&gate, 1);
  assert_int_equal(tdm_group_wait(g), TDM_ERR_CANCELLED);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_ERR_LOST);
  assert_int_equal(value, 7);
  assert_int_equal(tdm_matrix_unpartition(hm, 0), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hm), TDM_ERR_LOST);
  tdm_group_release(g);
  if (test_log_count(&log) != said)
    fail_msg("logged after a cancel: %s", log.last);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
}

/* Cancelled from one of its own tasks. */
static void cancel_own(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  tdm_group_cancel(the_group);
  atomic_fetch_add(&ran, 1);
}

static void test_cancel_from_task(void **state) {
  (void)state;
  tdm_runtime *rt = make(1);
  reset();
  static const tdm_codelet cl_cancel = {.name = "cancel", .cpu_fn = cancel_own};
  assert_int_equal(tdm_group_create(rt, NULL, &the_group), TDM_OK);
  long v = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &v, 1, sizeof v, &h), TDM_OK);
  static const tdm_codelet cl_rw = {.name = "rw", .cpu_fn = count, .nbuffers = 1,
                                    .modes = {TDM_RW}};
  static const tdm_codelet cl_rw_cancel = {.name = "rw-cancel", .cpu_fn = cancel_own,
                                           .nbuffers = 1, .modes = {TDM_RW}};
  /* a chain: the second cancels the group, the rest never run */
  assert_int_equal(
      tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_rw, .handles = {h}, .group = the_group}),
      TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_rw_cancel, .handles = {h},
                                                   .group = the_group}),
                   TDM_OK);
  for (int i = 0; i < 10; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_rw, .handles = {h},
                                                     .group = the_group}),
                     TDM_OK);
  (void)cl_cancel;
  assert_int_equal(tdm_group_wait(the_group), TDM_ERR_CANCELLED);
  assert_int_equal(atomic_load(&ran), 2);
  assert_int_equal(progress_of(the_group).cancelled, 10);
  assert_int_equal(tdm_wait_all(rt), TDM_OK); /* asked for: not reported */
  tdm_handle_unregister(h);
  tdm_group_release(the_group);
  tdm_runtime_destroy(rt);
}

/* ---- cancel at random moments of random graphs ---------------------------- */

enum { NH = 6, NT = 160, LEN = 4 };

typedef struct step {
  int id;
  int nin;
  int in[2];
  int out;
  int overwrite; /* TDM_W instead of TDM_RW */
} step;

static step steps[NT];
static _Atomic int did[NT];

/* out = mix(out (unless overwritten), inputs, id) */
static void apply(const step *s, long *out, const long *const *in) {
  for (int k = 0; k < LEN; k++) {
    uint64_t x = s->overwrite ? 0 : (uint64_t)out[k];
    for (int j = 0; j < s->nin; j++)
      x = x * 31 + (uint64_t)in[j][k];
    out[k] = (long)test_mix64(x ^ (uint64_t)(s->id * 977 + k));
  }
}

static void run_step(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const step *s = args;
  atomic_store(&did[s->id], 1);
  const long *in[2] = {s->nin > 0 ? b[1].ptr : NULL, s->nin > 1 ? b[2].ptr : NULL};
  apply(s, b[0].ptr, in);
  if (s->id % 7 == 0)
    usleep(100);
}

static const tdm_codelet cl_step[2][3] = {
    {{.name = "s", .cpu_fn = run_step, .nbuffers = 1, .modes = {TDM_RW}},
     {.name = "s", .cpu_fn = run_step, .nbuffers = 2, .modes = {TDM_RW, TDM_R}},
     {.name = "s", .cpu_fn = run_step, .nbuffers = 3, .modes = {TDM_RW, TDM_R, TDM_R}}},
    {{.name = "s", .cpu_fn = run_step, .nbuffers = 1, .modes = {TDM_W}},
     {.name = "s", .cpu_fn = run_step, .nbuffers = 2, .modes = {TDM_W, TDM_R}},
     {.name = "s", .cpu_fn = run_step, .nbuffers = 3, .modes = {TDM_W, TDM_R, TDM_R}}}};

/* Cancelling at a random moment of a random graph (some tasks in another
 * group, not cancelled, reading results of the cancelled one), on the CPU
 * workers, then with an emulated device: every handle holds what the
 * sequential run of the tasks that ran gives. */
static void test_cancel_random_graphs(void **state) {
  (void)state;
  int ran_total = 0;
  uint64_t on_device = 0;
  for (uint64_t seed = 1; seed <= 24; seed++) {
    /* the second half with an emulated device */
    tdm_runtime *rt = make_with(2, seed > 12 ? "gpu:latency=10us,bandwidth=1G" : NULL);
    long data[NH][LEN], model[NH][LEN];
    tdm_handle *h[NH];
    for (int i = 0; i < NH; i++) {
      for (int k = 0; k < LEN; k++)
        data[i][k] = model[i][k] = (long)(i * 100 + k);
      assert_int_equal(tdm_register_vector(rt, data[i], LEN, sizeof(long), &h[i]), TDM_OK);
    }
    tdm_group *g, *other;
    assert_int_equal(tdm_group_create(rt, NULL, &g), TDM_OK);
    assert_int_equal(tdm_group_create(rt, NULL, &other), TDM_OK);
    uint64_t x = test_mix64(seed);
    for (int i = 0; i < NT; i++) {
      step *s = &steps[i];
      x = test_mix64(x);
      s->id = i;
      s->out = (int)(x % NH);
      s->nin = (int)((x >> 8) % 3);
      for (int j = 0; j < s->nin; j++) {
        do
          s->in[j] = (int)((x >> (16 + 8 * j)) % NH);
        while (s->in[j] == s->out && ((x = test_mix64(x)), 1));
      }
      if (s->nin == 2 && s->in[0] == s->in[1])
        s->nin = 1;
      s->overwrite = (x >> 40) % 5 == 0;
      atomic_store(&did[i], 0);
      tdm_task_desc d = {.codelet = &cl_step[s->overwrite][s->nin],
                         .handles = {h[s->out]},
                         .args = s,
                         .args_size = sizeof *s,
                         /* a quarter in another group, which is not cancelled */
                         .group = (x >> 44) % 4 == 0 ? other : g};
      for (int j = 0; j < s->nin; j++)
        d.handles[1 + j] = h[s->in[j]];
      assert_int_equal(tdm_submit(rt, &d), TDM_OK);
    }
    usleep((useconds_t)((x >> 50) % 3000));
    assert_int_equal(tdm_group_cancel(g), TDM_OK);
    tdm_status gs = tdm_group_wait(g);
    assert_true(gs == TDM_ERR_CANCELLED);
    tdm_wait_all(rt); /* tasks of `other` reading cancelled results: reported */
    /* the sequential run of the tasks that ran */
    int nran = 0;
    for (int i = 0; i < NT; i++) {
      if (!atomic_load(&did[i]))
        continue;
      nran++;
      const long *in[2] = {steps[i].nin > 0 ? model[steps[i].in[0]] : NULL,
                           steps[i].nin > 1 ? model[steps[i].in[1]] : NULL};
      apply(&steps[i], model[steps[i].out], in);
    }
    for (int i = 0; i < NH; i++) {
      tdm_status st = tdm_handle_unregister(h[i]);
      assert_true(st == TDM_OK || st == TDM_ERR_LOST);
      for (int k = 0; k < LEN; k++)
        if (data[i][k] != model[i][k])
          fail_msg("seed %llu: handle %d differs from the sequential run of the %d tasks that "
                   "ran", (unsigned long long)seed, i, nran);
    }
    tdm_group_progress p = progress_of(g);
    assert_int_equal(p.ended, p.submitted);
    if (getenv("TDM_TEST_VERBOSE"))
      printf("seed %llu: %d of %d tasks ran, %llu of the group's cancelled\n",
             (unsigned long long)seed, nran, NT, (unsigned long long)p.cancelled);
    ran_total += nran;
    if (seed > 12) {
      tdm_device_counters dc = {.struct_size = sizeof dc};
      assert_int_equal(tdm_runtime_device_counters(rt, 0, &dc), TDM_OK);
      on_device += dc.tasks;
    }
    tdm_group_release(g);
    tdm_group_release(other);
    tdm_runtime_destroy(rt);
  }
  /* the cancels came at moments where part of the work had run */
  assert_true(ran_total > 0 && ran_total < 24 * NT);
  printf("%llu tasks ran on the emulated device\n", (unsigned long long)on_device);
  assert_true(on_device > 0);
}

/* ---- the event loop --------------------------------------------------------- */

static pthread_t main_thread;
static _Atomic int on_main, off_main, cb_status = 99;
static long chain_log[8];
static _Atomic int chain_n;

static void on_done(void *data) {
  (void)data;
  atomic_fetch_add(pthread_equal(pthread_self(), main_thread) ? &on_main : &off_main, 1);
  atomic_store(&cb_status, tdm_callback_status());
}

static int readable(int fd, int timeout_ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int n = poll(&p, 1, timeout_ms);
  return n > 0 && (p.revents & POLLIN);
}

/* A callback asked on dispatch: the descriptor wakes poll(), tdm_dispatch
 * runs it on this thread, after which the descriptor is quiet. */
static void test_event_fd_and_callbacks(void **state) {
  (void)state;
  tdm_runtime *rt = make(2);
  main_thread = pthread_self();
  atomic_store(&on_main, 0);
  atomic_store(&off_main, 0);
  int fd = tdm_runtime_event_fd(rt);
  assert_true(fd >= 0);
  assert_int_equal(tdm_runtime_event_fd(rt), fd);
  assert_int_equal(tdm_runtime_event_fd(NULL), -1);
  assert_false(readable(fd, 0));
  assert_int_equal(tdm_dispatch(rt), 0);
  assert_int_equal(tdm_dispatch(NULL), TDM_ERR_INVALID_ARG);
  for (int i = 0; i < 5; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_count, .callback = on_done,
                                                     .flags = TDM_TASK_CALLBACK_ON_DISPATCH}),
                     TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_true(readable(fd, 0)); /* queued before the wait returned */
  assert_int_equal(tdm_dispatch(rt), 5);
  assert_int_equal(atomic_load(&on_main), 5);
  assert_int_equal(atomic_load(&off_main), 0);
  assert_int_equal(atomic_load(&cb_status), TDM_OK);
  assert_false(readable(fd, 0));
  /* unknown flags, or a pinned task without a CPU variant, are refused */
  /* still queued at destroy: run there, on this thread */
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_count, .callback = on_done,
                                                     .flags = TDM_TASK_CALLBACK_ON_DISPATCH}),
                     TDM_OK);
  static const tdm_codelet no_cpu = {.name = "none"};
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_count, .flags = 8}),
                   TDM_ERR_INVALID_ARG);
  assert_int_equal(
      tdm_submit(rt, &(tdm_task_desc){.codelet = &no_cpu, .flags = TDM_TASK_MAIN_THREAD}),
      TDM_ERR_INVALID_ARG);
  assert_int_equal(
      tdm_submit(rt, &(tdm_task_desc){.codelet = &no_cpu, .flags = TDM_TASK_CPU_ONLY}),
      TDM_ERR_INVALID_ARG);
  tdm_runtime_destroy(rt);
  assert_int_equal(atomic_load(&on_main), 8);
  assert_int_equal(atomic_load(&off_main), 0);
}

static void chain_step(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  long *v = b[0].ptr;
  int which = *(const int *)args;
  int here = pthread_equal(pthread_self(), main_thread);
  /* the pinned steps (odd) on this thread, the others on workers */
  if ((which % 2 == 1) != (here != 0))
    atomic_store(&off_main, 1);
  *v = *v * 10 + which;
  chain_log[atomic_fetch_add(&chain_n, 1) & 7] = which;
}

static const tdm_codelet cl_chain = {
    .name = "chain", .cpu_fn = chain_step, .nbuffers = 1, .modes = {TDM_RW}};

/* A chain worker, pinned, worker, pinned, ... on one handle: the pinned
 * steps run in tdm_dispatch on this thread, every step in order. */
static void test_pinned_tasks_in_order(void **state) {
  (void)state;
  tdm_runtime *rt = make(2);
  main_thread = pthread_self();
  atomic_store(&off_main, 0);
  atomic_store(&chain_n, 0);
  long v = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &v, 1, sizeof v, &h), TDM_OK);
  int fd = tdm_runtime_event_fd(rt);
  tdm_task *last = NULL;
  for (int i = 1; i <= 6; i++) {
    tdm_task_desc d = {.codelet = &cl_chain, .handles = {h}, .args = &i, .args_size = sizeof i,
                       .flags = i % 2 ? TDM_TASK_MAIN_THREAD : 0};
    if (i == 6)
      assert_int_equal(tdm_task_create(rt, &d, &last), TDM_OK);
    if (i == 6)
      assert_int_equal(tdm_task_submit(last), TDM_OK);
    else
      assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  }
  double until = now_s() + 10;
  while (atomic_load(&chain_n) < 6 && now_s() < until)
    if (readable(fd, 100))
      assert_true(tdm_dispatch(rt) >= 0);
  assert_int_equal(tdm_task_wait(last), TDM_OK);
  tdm_task_release(last);
  assert_int_equal(atomic_load(&chain_n), 6);
  assert_int_equal(atomic_load(&off_main), 0);
  for (int i = 0; i < 6; i++)
    assert_int_equal(chain_log[i], i + 1);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(v, 123456);
  /* pinned tasks never dispatched: destroy runs them */
  long w = 0;
  assert_int_equal(tdm_register_vector(rt, &w, 1, sizeof w, &h), TDM_OK);
  int one = 1;
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_chain, .handles = {h},
                                                   .args = &one, .args_size = sizeof one,
                                                   .flags = TDM_TASK_MAIN_THREAD}),
                   TDM_OK);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  assert_int_equal(w, 1);
}

static _Atomic int waited_thread_ok = 1;
static void pinned_step(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  bool pinned = args && *(const int *)args;
  if (pinned && !pthread_equal(pthread_self(), main_thread))
    atomic_store(&waited_thread_ok, 0);
  ++*(long *)b[0].ptr;
}

/* Waits on the dispatching thread (the creator, before any dispatch; the
 * last to dispatch after) for work that includes tasks pinned to it:
 * tdm_wait_all, tdm_group_wait and tdm_task_wait run them meanwhile,
 * there, instead of waiting forever. */
static void test_wait_on_dispatching_thread(void **state) {
  (void)state;
  tdm_runtime *rt = make(2);
  main_thread = pthread_self();
  static const tdm_codelet cl_step = {.name = "step", .cpu_fn = pinned_step, .nbuffers = 1,
                                      .modes = {TDM_RW}};
  long v = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &v, 1, sizeof v, &h), TDM_OK);
  tdm_group *g;
  assert_int_equal(tdm_group_create(rt, NULL, &g), TDM_OK);
  /* a chain on h: worker, pinned, worker, pinned... */
  static const int yes = 1;
  for (int i = 0; i < 16; i++) {
    if (i == 8)
      assert_int_equal(tdm_wait_all(rt), TDM_OK);
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_step, .handles = {h},
                                                     .flags = i % 2 ? TDM_TASK_MAIN_THREAD : 0,
                                                     .args = i % 2 ? &yes : NULL,
                                                     .args_size = i % 2 ? sizeof yes : 0,
                                                     .group = g}),
                     TDM_OK);
  }
  assert_int_equal(tdm_group_wait(g), TDM_OK);
  tdm_task *t;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_step, .handles = {h},
                                                        .flags = TDM_TASK_MAIN_THREAD,
                                                        .args = &yes, .args_size = sizeof yes},
                                   &t),
                   TDM_OK);
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  assert_int_equal(tdm_task_wait(t), TDM_OK);
  tdm_task_release(t);
  /* a pinned writer, then unregister: it waits for it here too */
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_step, .handles = {h},
                                                   .flags = TDM_TASK_MAIN_THREAD,
                                                   .args = &yes, .args_size = sizeof yes}),
                   TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(v, 18);
  assert_int_equal(atomic_load(&waited_thread_ok), 1);
  tdm_group_release(g);
  tdm_runtime_destroy(rt);
}

static void dispatch_in_task(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  atomic_store(&cb_status, tdm_dispatch(the_rt));
}

/* Group progress on the dispatch thread; tdm_dispatch refused in a task. */
static void test_progress_on_dispatch(void **state) {
  (void)state;
  tdm_runtime *rt = make(2);
  the_rt = rt;
  main_thread = pthread_self();
  reset();
  calls c = {0};
  tdm_group *g;
  tdm_group_desc d = {.progress_fn = on_progress, .progress_data = &c,
                      .progress_on_dispatch = 1};
  assert_int_equal(tdm_group_create(rt, &d, &g), TDM_OK);
  for (int i = 0; i < 40; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_nap, .group = g}), TDM_OK);
  int fd = tdm_runtime_event_fd(rt);
  double until = now_s() + 10;
  while (c.last.ended != 40 && now_s() < until)
    if (readable(fd, 100))
      tdm_dispatch(rt);
  assert_int_equal(c.last.ended, 40);
  assert_true(pthread_equal(c.thread, main_thread));
  static const tdm_codelet cl_dispatch = {.name = "dispatch", .cpu_fn = dispatch_in_task};
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_dispatch}), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&cb_status), TDM_ERR_IN_TASK);
  tdm_group_release(g);
  tdm_runtime_destroy(rt);
}

/* ---- the final progress call comes once --------------------------------- */

#define ONCE_TASKS 60
static _Atomic int finals, calls_made;

static void count_finals(void *data, const tdm_group_progress *p) {
  (void)data;
  atomic_fetch_add(&calls_made, 1);
  if (p->submitted == ONCE_TASKS && p->ended == ONCE_TASKS)
    atomic_fetch_add(&finals, 1);
}

/* The case that showed the final counts twice: a dispatch that runs the
 * group's last task, pinned to this thread, then the progress call it
 * took (which reads the final counts); the last task's end posted
 * another call meanwhile, which the next dispatch would make again. */
static void test_final_progress_after_pinned(void **state) {
  (void)state;
  tdm_runtime *rt = make(2);
  reset();
  atomic_store(&finals, 0);
  atomic_store(&calls_made, 0);
  tdm_group *g;
  tdm_group_desc d = {.progress_fn = count_finals, .progress_hz = 1e9,
                      .progress_on_dispatch = 1};
  assert_int_equal(tdm_group_create(rt, &d, &g), TDM_OK);
  int fd = tdm_runtime_event_fd(rt);
  for (int i = 0; i < ONCE_TASKS - 1; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_count, .group = g}),
                     TDM_OK);
  while (atomic_load(&ran) < ONCE_TASKS - 1)
    sleep_ms(1);
  sleep_ms(20); /* their ends posted a progress call */
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_count, .group = g,
                                                   .flags = TDM_TASK_MAIN_THREAD}),
                   TDM_OK);
  assert_true(readable(fd, 1000));
  assert_int_equal(tdm_dispatch(rt), 2); /* the pinned task, then the progress call */
  assert_int_equal(atomic_load(&finals), 1);
  while (tdm_dispatch(rt) > 0)
    ;
  assert_int_equal(tdm_group_wait(g), TDM_OK);
  tdm_group_release(g);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  assert_int_equal(atomic_load(&finals), 1);
}

static void brief(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  usleep(50);
}

/* Many short runs, each a group of short tasks with frequent progress
 * calls, every fourth task pinned to this thread (so that a dispatch
 * runs tasks before the progress calls it took), cancelled half way in
 * every other run, with progress calls on the dispatching thread or on
 * the workers: the call showing the final counts comes exactly once,
 * whether the run ends in the loop or in tdm_runtime_destroy. */
static void test_final_progress_once(void **state) {
  (void)state;
  static const tdm_codelet cl_brief = {.name = "brief", .cpu_fn = brief};
  for (int run = 0; run < 160; run++) {
    bool on_dispatch = run % 2, cancel = run % 4 >= 2;
    tdm_runtime *rt = make(2);
    atomic_store(&finals, 0);
    atomic_store(&calls_made, 0);
    tdm_group *g;
    tdm_group_desc d = {.progress_fn = count_finals, .progress_hz = 100000,
                        .progress_on_dispatch = on_dispatch};
    assert_int_equal(tdm_group_create(rt, &d, &g), TDM_OK);
    int fd = tdm_runtime_event_fd(rt);
    for (int i = 0; i < ONCE_TASKS; i++) {
      if (cancel && i == ONCE_TASKS / 2)
        assert_int_equal(tdm_group_cancel(g), TDM_OK);
      tdm_task_desc t = {.codelet = &cl_brief, .group = g,
                         .flags = i % 4 == 3 ? TDM_TASK_MAIN_THREAD : 0};
      assert_int_equal(tdm_submit(rt, &t), TDM_OK);
      if (i % 8 == 0 && readable(fd, 0))
        assert_true(tdm_dispatch(rt) >= 0);
    }
    double until = now_s() + 10;
    bool last_run = run % 3 == 0; /* else the last dispatch is tdm_runtime_destroy's */
    while (progress_of(g).ended < ONCE_TASKS && now_s() < until)
      if (readable(fd, 1))
        assert_true(tdm_dispatch(rt) >= 0);
    assert_true(tdm_group_wait(g) == (cancel ? TDM_ERR_CANCELLED : TDM_OK));
    while (last_run && tdm_dispatch(rt) > 0)
      ;
    tdm_group_release(g);
    assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
    if (atomic_load(&finals) != 1)
      fail_msg("run %d (%s, %s): %d final calls of %d", run,
               on_dispatch ? "on dispatch" : "on workers", cancel ? "cancelled" : "whole",
               atomic_load(&finals), atomic_load(&calls_made));
  }
}

/* TDM_TASK_CPU_ONLY: beside emulated devices that take half the tasks
 * (random placement), flagged tasks run on the CPU workers only. */
static tdm_runtime *where_rt;
static _Atomic int on_device;
static void note_worker(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  if (tdm_worker_id(where_rt) >= (int)tdm_runtime_ncpu_workers(where_rt))
    atomic_fetch_add(&on_device, 1);
}

static void test_cpu_only_flag(void **state) {
  (void)state;
  static const tdm_codelet cl = {.name = "where", .cpu_fn = note_worker};
  where_rt = test_runtime_emulated(2, "gpu:speedup=4,latency=2us,bandwidth=8G;igpu:speedup=2,"
                                      "memory=shared", NULL);
  for (unsigned flags = 0; flags <= TDM_TASK_CPU_ONLY; flags += TDM_TASK_CPU_ONLY) {
    atomic_store(&on_device, 0);
    for (int i = 0; i < 200; i++)
      assert_int_equal(tdm_submit(where_rt, &(tdm_task_desc){.codelet = &cl, .flags = flags}),
                       TDM_OK);
    assert_int_equal(tdm_wait_all(where_rt), TDM_OK);
    if (flags)
      assert_int_equal(atomic_load(&on_device), 0);
    else
      assert_true(atomic_load(&on_device) > 0); /* the devices do take such tasks */
  }
  tdm_runtime_destroy(where_rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_progress_counts),
      cmocka_unit_test(test_group_of_other_runtime),
      cmocka_unit_test(test_wait_for_group_alone),
      cmocka_unit_test(test_progress_calls_throttled),
      cmocka_unit_test(test_no_progress_after_wait),
      cmocka_unit_test(test_cancel),
      cmocka_unit_test(test_cancel_is_quiet),
      cmocka_unit_test(test_cancel_from_task),
      cmocka_unit_test(test_cancel_random_graphs),
      cmocka_unit_test(test_event_fd_and_callbacks),
      cmocka_unit_test(test_cpu_only_flag),
      cmocka_unit_test(test_pinned_tasks_in_order),
      cmocka_unit_test(test_progress_on_dispatch),
      cmocka_unit_test(test_wait_on_dispatching_thread),
      cmocka_unit_test(test_final_progress_after_pinned),
      cmocka_unit_test(test_final_progress_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
