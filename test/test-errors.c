/* Every bad input returns its own status and logs a message; nothing
 * crashes and nothing leaks (the sanitizer runs check the latter). */
#include "common.h"

#include "internal.h"

static void noop(const tdm_buffer *b, const void *a, size_t n) { (void)b; (void)a; (void)n; }
static const tdm_codelet cl_r = {.name = "r", .cpu_fn = noop, .nbuffers = 1, .modes = {TDM_R}};
static const tdm_codelet cl_none = {.name = "none", .cpu_fn = noop};

/* Expects `call` to return `status` and to log one more error. */
#define EXPECT_ERR(log, status, call)                                          \
  do {                                                                         \
    unsigned before_ = test_log_errors(log);                                   \
    assert_int_equal((call), (status));                                        \
    assert_true(test_log_errors(log) > before_);                               \
  } while (0)

static void test_status_table(void **state) {
  (void)state;
  static const tdm_status all[] = {
#define XX(name, value, msg) TDM_##name,
      TDM_STATUS_MAP(XX)
#undef XX
  };
  size_t n = sizeof all / sizeof all[0];
  for (size_t i = 0; i < n; i++) {
    assert_string_not_equal(tdm_strerror(all[i]), "unknown status");
    for (size_t j = 0; j < i; j++) {
      assert_int_not_equal(all[i], all[j]);
      assert_string_not_equal(tdm_strerror(all[i]), tdm_strerror(all[j]));
      assert_string_not_equal(tdm_status_name(all[i]), tdm_status_name(all[j]));
    }
  }
  assert_string_equal(tdm_strerror((tdm_status)12345), "unknown status");
  assert_string_equal(tdm_status_name(TDM_ERR_CYCLE), "ERR_CYCLE");
}

static void test_bad_config(void **state) {
  (void)state;
  tdm_runtime *rt = (tdm_runtime *)1;
  assert_int_equal(tdm_runtime_create(NULL, NULL), TDM_ERR_INVALID_ARG);
  tdm_config cfg;
  memset(&cfg, 0, sizeof cfg); /* never initialised: struct_size 0 */
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_INVALID_ARG);
  assert_null(rt);
  test_log log;
  tdm_config_init(&cfg);
  cfg.flags = 1;
  test_log_attach(&cfg, &log);
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_runtime_create(&cfg, &rt));
}

static void test_null_pointers(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(2, &log);
  int x;
  tdm_handle *h;
  assert_int_equal(tdm_submit(NULL, &(tdm_task_desc){.codelet = &cl_none}), TDM_ERR_INVALID_ARG);
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_submit(rt, NULL));
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_submit(rt, &(tdm_task_desc){0}));
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_r}));
  /* which codelet and buffer */
  assert_true(test_log_has(&log, "tdm_submit: codelet r, buffer 0: NULL handle"));
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_none, .args_size = 4}));
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_register_vector(rt, NULL, 4, 4, &h));
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_register_vector(rt, &x, 0, 4, &h));
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_register_vector(rt, &x, 1, 4, NULL));
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_register_matrix(rt, &x, 1, 1, 2, 4, &h));
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_none}, NULL));
  assert_int_equal(tdm_register_vector(NULL, &x, 1, 4, &h), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_handle_unregister(NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_handle_acquire(NULL, TDM_R), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_handle_release(NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_task_submit(NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_task_wait(NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_task_depends_on(NULL, NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_wait_all(NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_matrix_partition(NULL, 1, 1, 0), TDM_ERR_INVALID_ARG);
  assert_null(tdm_matrix_tile(NULL, 0, 0));
  tdm_runtime_destroy(rt);
}

static void test_too_many_buffers_and_bad_modes(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(2, &log);
  int x;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &h), TDM_OK);
  tdm_codelet many = {.name = "many", .cpu_fn = noop,
                      .nbuffers = TDM_MAX_TASK_BUFFERS + 1, .modes = {TDM_R}};
  EXPECT_ERR(&log, TDM_ERR_TOO_MANY_BUFFERS,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &many, .handles = {h}}));
  /* past TDM_MAX_BUFFERS, the modes and handles come in arrays */
  many.nbuffers = TDM_MAX_BUFFERS + 1;
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &many, .handles = {h}}));
  assert_true(test_log_has(&log, "dyn_modes"));
  tdm_access modes[TDM_MAX_BUFFERS + 1];
  tdm_handle *hs[TDM_MAX_BUFFERS + 1];
  for (int i = 0; i <= TDM_MAX_BUFFERS; i++) {
    modes[i] = TDM_R;
    hs[i] = h;
  }
  many.dyn_modes = modes;
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &many, .handles = {h}}));
  assert_true(test_log_has(&log, "dyn_handles"));
  hs[3] = NULL;
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &many, .dyn_handles = hs}));
  hs[3] = h;
  modes[5] = (tdm_access)0;
  EXPECT_ERR(&log, TDM_ERR_INVALID_MODE,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &many, .dyn_handles = hs}));
  modes[5] = TDM_RW;
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &many, .dyn_handles = hs}),
                   TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  tdm_codelet bad_mode = {.name = "bad", .cpu_fn = noop, .nbuffers = 1, .modes = {(tdm_access)0}};
  EXPECT_ERR(&log, TDM_ERR_INVALID_MODE,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &bad_mode, .handles = {h}}));
  bad_mode.modes[0] = (tdm_access)7;
  EXPECT_ERR(&log, TDM_ERR_INVALID_MODE,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &bad_mode, .handles = {h}}));
  EXPECT_ERR(&log, TDM_ERR_INVALID_MODE, tdm_handle_acquire(h, (tdm_access)9));
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* The version the library reports is the header's, written once. */
static void test_version(void **state) {
  (void)state;
  unsigned major = 99, minor = 99, patch = 99;
  const char *v = tdm_version(&major, &minor, &patch);
  assert_string_equal(v, TDM_VERSION);
  assert_int_equal(major, TDM_VERSION_MAJOR);
  assert_int_equal(minor, TDM_VERSION_MINOR);
  assert_int_equal(patch, TDM_VERSION_PATCH);
  assert_int_equal(TDM_VERSION_NUMBER, major * 10000 + minor * 100 + patch);
  char text[32];
  snprintf(text, sizeof text, "%u.%u.%u", major, minor, patch);
  assert_string_equal(v, text);
  assert_ptr_equal(tdm_version(NULL, NULL, NULL), v);
}

static _Atomic int ran_sized; /* tasks run concurrently */
static void sized(const tdm_buffer *b, const void *args, size_t n) {
  (void)b; (void)args; (void)n;
  atomic_fetch_add(&ran_sized, 1);
}

/* struct_size of the structures read through the caller's pointer: 0,
 * the size of this version's structure (or more), or of the first
 * version's run; less is refused. */
static void test_struct_sizes(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(2, &log);
  tdm_codelet cl = {.name = "sized", .cpu_fn = sized};
  atomic_store(&ran_sized, 0);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl}), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.struct_size = sizeof(tdm_task_desc),
                                                    .codelet = &cl}),
                   TDM_OK);
  cl.struct_size = sizeof cl;
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl}), TDM_OK);
  cl.struct_size = sizeof cl + 64; /* a newer header's: its new fields ignored */
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl}), TDM_OK);
  /* a program compiled with the first version's structures: the fields
   * added since (dyn_modes, dyn_handles) read as NULL, not past its end */
  struct {
    tdm_codelet cl;
    char poison[16];
  } v1;
  memset(&v1, 0xff, sizeof v1); /* what lies past the old structure */
  v1.cl.struct_size = offsetof(tdm_codelet, opencl) + sizeof(void *);
  v1.cl.name = "sized";
  v1.cl.cpu_fn = sized;
  v1.cl.nbuffers = 0;
  v1.cl.opencl = NULL;
  struct {
    tdm_task_desc d;
    char poison[16];
  } d1;
  memset(&d1, 0xff, sizeof d1);
  d1.d.struct_size = offsetof(tdm_task_desc, priority) + sizeof(int);
  d1.d.codelet = &v1.cl;
  d1.d.args = NULL;
  d1.d.args_size = 0;
  d1.d.callback = NULL;
  d1.d.priority = 0;
  assert_int_equal(tdm_submit(rt, &d1.d), TDM_OK);
  v1.cl.nbuffers = TDM_MAX_BUFFERS + 1; /* no dyn_modes in that version */
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_submit(rt, &d1.d));
  assert_true(test_log_has(&log, "dyn_modes"));
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran_sized), 5);
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG,
             tdm_submit(rt, &(tdm_task_desc){.struct_size = 8, .codelet = &cl}));
  cl.struct_size = 8;
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_submit(rt, &(tdm_task_desc){.codelet = &cl}));
  assert_true(test_log_has(&log, "struct_size"));
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran_sized), 5);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  assert_int_equal(tdm_runtime_destroy(NULL), TDM_OK);
}

static void test_foreign_and_stale_handles(void **state) {
  (void)state;
  test_log log, log2;
  tdm_runtime *rt = test_runtime(2, &log), *other = test_runtime(1, &log2);
  int x, y;
  tdm_handle *h, *foreign;
  assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &h), TDM_OK);
  assert_int_equal(tdm_register_vector(other, &y, 1, sizeof y, &foreign), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_WRONG_RUNTIME,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_r, .handles = {foreign}}));
  assert_true(test_log_has(&log, "codelet r, buffer 0: handle belongs to another runtime"));
  tdm_task *t1, *t2;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_none}, &t1), TDM_OK);
  assert_int_equal(tdm_task_create(other, &(tdm_task_desc){.codelet = &cl_none}, &t2), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_WRONG_RUNTIME, tdm_task_depends_on(t1, t2));
  tdm_task_release(t1);
  tdm_task_release(t2);

  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_STALE_HANDLE,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_r, .handles = {h}}));
  EXPECT_ERR(&log, TDM_ERR_STALE_HANDLE, tdm_handle_unregister(h));
  EXPECT_ERR(&log, TDM_ERR_STALE_HANDLE, tdm_handle_acquire(h, TDM_R));
  tdm_buffer b;
  EXPECT_ERR(&log, TDM_ERR_STALE_HANDLE, tdm_handle_buffer(h, &b));
  tdm_runtime_destroy(rt);
  tdm_runtime_destroy(other);
}

/* A handle unregistered while a created task names it: the task's
 * submission then fails. And unregister refused while it is in use. */
static void test_unregister_busy_handle(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(2, &log);
  float m[16], m2[16];
  tdm_handle *h, *mat;
  assert_int_equal(tdm_register_vector(rt, m, 16, sizeof(float), &h), TDM_OK);
  assert_int_equal(tdm_register_matrix(rt, m2, 4, 4, 4, sizeof(float), &mat), TDM_OK);
  /* named by a created, unsubmitted task */
  tdm_task *t;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_r, .handles = {h}}, &t),
                   TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_BUSY, tdm_handle_unregister(h));
  tdm_task_release(t); /* discarded: the handle is free again */
  /* a created task naming the handle twice, then submitted: free again */
  static const tdm_codelet cl_twice = {.name = "twice", .cpu_fn = noop,
                                       .nbuffers = 2, .modes = {TDM_R, TDM_RW}};
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_twice, .handles = {h, h}}, &t),
                   TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_BUSY, tdm_handle_unregister(h));
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  assert_int_equal(tdm_task_wait(t), TDM_OK);
  tdm_task_release(t);
  /* acquired by the host */
  assert_int_equal(tdm_handle_acquire(h, TDM_R), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_BUSY, tdm_handle_unregister(h));
  EXPECT_ERR(&log, TDM_ERR_BUSY, tdm_handle_acquire(h, TDM_R));
  assert_int_equal(tdm_handle_release(h), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_NOT_ACQUIRED, tdm_handle_release(h));
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  /* partitioned, and a tile */
  assert_int_equal(tdm_matrix_partition(mat, 2, 2, 0), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_BUSY, tdm_handle_unregister(mat));
  EXPECT_ERR(&log, TDM_ERR_BUSY, tdm_handle_unregister(tdm_matrix_tile(mat, 1, 1)));
  EXPECT_ERR(&log, TDM_ERR_PARTITIONED,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_r, .handles = {mat}}));
  EXPECT_ERR(&log, TDM_ERR_PARTITIONED, tdm_matrix_partition(mat, 2, 2, 0));
  tdm_handle *tile = tdm_matrix_tile(mat, 0, 0);
  assert_int_equal(tdm_matrix_unpartition(mat, 0), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_NOT_PARTITIONED, tdm_matrix_unpartition(mat, 0));
  EXPECT_ERR(&log, TDM_ERR_STALE_HANDLE,
             tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_r, .handles = {tile}}));
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_matrix_partition(mat, 0, 2, 0));
  assert_int_equal(tdm_handle_unregister(mat), TDM_OK);
  tdm_runtime_destroy(rt);
}

static void test_cycles_refused(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(2, &log);
  tdm_task *a, *b, *c;
  tdm_task_desc d = {.codelet = &cl_none};
  assert_int_equal(tdm_task_create(rt, &d, &a), TDM_OK);
  assert_int_equal(tdm_task_create(rt, &d, &b), TDM_OK);
  assert_int_equal(tdm_task_create(rt, &d, &c), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_CYCLE, tdm_task_depends_on(a, a));
  assert_int_equal(tdm_task_depends_on(b, a), TDM_OK);
  assert_int_equal(tdm_task_depends_on(c, b), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_CYCLE, tdm_task_depends_on(a, b));
  EXPECT_ERR(&log, TDM_ERR_CYCLE, tdm_task_depends_on(a, c));
  /* the refused edges were not added: submission in order works */
  assert_int_equal(tdm_task_submit(a), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_ALREADY_SUBMITTED, tdm_task_submit(a));
  EXPECT_ERR(&log, TDM_ERR_ALREADY_SUBMITTED, tdm_task_depends_on(a, c));
  EXPECT_ERR(&log, TDM_ERR_DEP_NOT_SUBMITTED, tdm_task_submit(c));
  assert_int_equal(tdm_task_submit(b), TDM_OK);
  assert_int_equal(tdm_task_submit(c), TDM_OK);
  assert_int_equal(tdm_task_wait(c), TDM_OK);
  tdm_task *never;
  assert_int_equal(tdm_task_create(rt, &d, &never), TDM_OK);
  EXPECT_ERR(&log, TDM_ERR_INVALID_ARG, tdm_task_wait(never));
  tdm_task_release(never);
  tdm_task_release(a);
  tdm_task_release(b);
  tdm_task_release(c);
  tdm_runtime_destroy(rt);
}

/* Blocking calls from a task are refused. */
typedef struct {
  tdm_runtime *rt;
  tdm_handle *h;
  _Atomic int wait_all, acquire, unregister, destroy;
} in_task;

static void blocking_inside(const tdm_buffer *b, const void *args, size_t n) {
  (void)b; (void)n;
  in_task *s = *(in_task *const *)args;
  atomic_store(&s->wait_all, tdm_wait_all(s->rt));
  atomic_store(&s->acquire, tdm_handle_acquire(s->h, TDM_R));
  atomic_store(&s->unregister, tdm_handle_unregister(s->h));
  atomic_store(&s->destroy, tdm_runtime_destroy(s->rt)); /* refused, logged */
}

static void test_blocking_calls_in_task(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(2, &log);
  int x;
  in_task s = {.rt = rt};
  in_task *ps = &s;
  assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &s.h), TDM_OK);
  static const tdm_codelet cl = {.name = "blocking", .cpu_fn = blocking_inside};
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .args = &ps, .args_size = sizeof ps}),
                   TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(s.wait_all, TDM_ERR_IN_TASK);
  assert_int_equal(s.acquire, TDM_ERR_IN_TASK);
  assert_int_equal(s.unregister, TDM_ERR_IN_TASK);
  assert_int_equal(s.destroy, TDM_ERR_IN_TASK);
  assert_true(test_log_errors(&log) >= 4);
  tdm_runtime_destroy(rt);
}

/* Blocking calls from what tdm_dispatch runs on the application's thread
 * (a task pinned there, a callback on dispatch) are refused too: they
 * would wait for the thread they run on; destroy would free the runtime
 * under the tdm_dispatch that called them. */
typedef struct {
  tdm_runtime *rt;
  tdm_task *other;
  tdm_group *group;
  _Atomic int ran, wait_all, task_wait, group_wait, destroy, callback_destroy;
} on_main;

static void pinned_body(const tdm_buffer *b, const void *args, size_t n) {
  (void)b; (void)n;
  on_main *s = *(on_main *const *)args;
  atomic_store(&s->wait_all, tdm_wait_all(s->rt));
  atomic_store(&s->task_wait, tdm_task_wait(s->other));
  atomic_store(&s->group_wait, tdm_group_wait(s->group));
  atomic_store(&s->destroy, tdm_runtime_destroy(s->rt));
  atomic_store(&s->ran, 1);
}

static void destroy_on_dispatch(void *data) {
  on_main *s = data;
  atomic_store(&s->callback_destroy, tdm_runtime_destroy(s->rt));
}

static void test_blocking_calls_on_dispatch(void **state) {
  (void)state;
  test_log log;
  on_main s = {.rt = test_runtime(2, &log)};
  on_main *ps = &s;
  assert_int_equal(tdm_group_create(s.rt, NULL, &s.group), TDM_OK);
  /* a task the pinned one would wait for: it waits for the pinned one */
  static const tdm_codelet cl = {.name = "pinned", .cpu_fn = pinned_body};
  tdm_task *pinned;
  assert_int_equal(tdm_task_create(s.rt, &(tdm_task_desc){.codelet = &cl, .args = &ps,
                                                          .args_size = sizeof ps,
                                                          .flags = TDM_TASK_MAIN_THREAD,
                                                          .group = s.group},
                                   &pinned),
                   TDM_OK);
  assert_int_equal(tdm_task_create(s.rt, &(tdm_task_desc){.codelet = &cl_none, .group = s.group,
                                                          .callback = destroy_on_dispatch,
                                                          .callback_data = &s,
                                                          .flags = TDM_TASK_CALLBACK_ON_DISPATCH},
                                   &s.other),
                   TDM_OK);
  assert_int_equal(tdm_task_depends_on(s.other, pinned), TDM_OK);
  assert_int_equal(tdm_task_submit(pinned), TDM_OK);
  assert_int_equal(tdm_task_submit(s.other), TDM_OK);
  double end = now_s() + 30;
  while (!atomic_load(&s.callback_destroy) && now_s() < end)
    if (tdm_dispatch(s.rt) <= 0)
      sleep_ms(1);
  assert_int_equal(atomic_load(&s.ran), 1);
  assert_int_equal(atomic_load(&s.wait_all), TDM_ERR_IN_TASK);
  assert_int_equal(atomic_load(&s.task_wait), TDM_ERR_IN_TASK);
  assert_int_equal(atomic_load(&s.group_wait), TDM_ERR_IN_TASK);
  assert_int_equal(atomic_load(&s.destroy), TDM_ERR_IN_TASK);
  assert_int_equal(atomic_load(&s.callback_destroy), TDM_ERR_IN_TASK);
  assert_true(test_log_has(&log, "tdm_dispatch runs"));
  /* the runtime is whole: it runs more, and goes when asked from outside */
  assert_int_equal(tdm_task_wait(s.other), TDM_OK);
  assert_int_equal(tdm_submit(s.rt, &(tdm_task_desc){.codelet = &cl_none}), TDM_OK);
  assert_int_equal(tdm_group_wait(s.group), TDM_OK);
  assert_int_equal(tdm_wait_all(s.rt), TDM_OK);
  tdm_task_release(pinned);
  tdm_task_release(s.other);
  tdm_group_release(s.group);
  assert_int_equal(tdm_runtime_destroy(s.rt), TDM_OK);
}

/* Submissions from other threads are refused once destroy has begun;
 * tasks already running may still submit, and their children run. */
typedef struct {
  tdm_runtime *rt;
  _Atomic int release, child_ran, child_status;
} closing;

static void child(const tdm_buffer *b, const void *args, size_t n) {
  (void)b; (void)n;
  atomic_store(&(*(closing *const *)args)->child_ran, 1);
}

static void gate(const tdm_buffer *b, const void *args, size_t n) {
  (void)b; (void)n;
  closing *c = *(closing *const *)args;
  wait_flag(&c->release, 30.0);
  static const tdm_codelet cl = {.name = "child", .cpu_fn = child};
  atomic_store(&c->child_status,
               tdm_submit(c->rt, &(tdm_task_desc){.codelet = &cl, .args = &c, .args_size = sizeof c}));
}

static void *destroyer(void *arg) {
  tdm_runtime_destroy(arg);
  return NULL;
}

static void test_submit_after_destroy_began(void **state) {
  (void)state;
  test_log log;
  closing c = {.rt = test_runtime(2, &log), .child_status = 99};
  closing *pc = &c;
  static const tdm_codelet cl = {.name = "gate", .cpu_fn = gate};
  assert_int_equal(tdm_submit(c.rt, &(tdm_task_desc){.codelet = &cl, .args = &pc, .args_size = sizeof pc}),
                   TDM_OK);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, destroyer, c.rt), 0);
  /* destroy is waiting for the gate task: our submissions start failing */
  tdm_status st = TDM_OK;
  double end = now_s() + 30.0;
  while (st == TDM_OK && now_s() < end) {
    st = tdm_submit(c.rt, &(tdm_task_desc){.codelet = &cl_none});
    if (st == TDM_OK)
      sleep_ms(1);
  }
  assert_int_equal(st, TDM_ERR_SHUTTING_DOWN);
  assert_true(test_log_errors(&log) >= 1);
  int x;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(c.rt, &x, 1, sizeof x, &h), TDM_ERR_SHUTTING_DOWN);
  atomic_store(&c.release, 1);
  pthread_join(th, NULL);
  assert_int_equal(c.child_status, TDM_OK);
  assert_int_equal(c.child_ran, 1);
}

/* Numeric environment variables that are blank, signed, padded, not a
 * number or absurd are ignored with a warning that names the variable;
 * good ones are taken. */
static void test_environment_values(void **state) {
  (void)state;
  static const struct {
    const char *name, *value;
  } bad[] = {
      {"TANDEM_NWORKERS", ""},
      {"TANDEM_NWORKERS", " "},
      {"TANDEM_NWORKERS", "-1"},
      {"TANDEM_NWORKERS", " -1"},
      {"TANDEM_NWORKERS", "+3"},
      {"TANDEM_NWORKERS", "3 "},
      {"TANDEM_NWORKERS", "1e3"},
      {"TANDEM_NWORKERS", "4097"},
      {"TANDEM_NWORKERS", "99999999999999999999999"},
      {"TANDEM_SPIN_US", "-5"},
      {"TANDEM_STATS", "2"},
      {"TANDEM_BIND", ""},
      {"TANDEM_DEVICE_TASKS", "0x10"},
      {"TANDEM_DEVICE_MEMORY_LIMIT", " -1"},
      {"TANDEM_DEVICE_MEMORY_LIMIT", "-1"},
      {"TANDEM_DEVICE_MEMORY_LIMIT", ""},
      {"TANDEM_DEVICE_MEMORY_LIMIT", "18446744073709551615"},
      {"TANDEM_DEVICE_MEMORY_LIMIT", "1048577G"},
      {"TANDEM_DEVICE_MEMORY_LIMIT", "64T"},
      {"TANDEM_SIM_SCALE", ""},
      {"TANDEM_SIM_SCALE", " 2"},
      {"TANDEM_SIM_SCALE", "inf"},
      {"TANDEM_SIM_SCALE", "nan"},
      {"TANDEM_SIM_SCALE", "1e400"},
      {"TANDEM_WATCHDOG", ""},
      {"TANDEM_WATCHDOG", "on"},
      {"TANDEM_WATCHDOG", "-1"},
      {"TANDEM_WATCHDOG", "50,1"},
      {"TANDEM_WATCHDOG", "50,1h"},
      {"TANDEM_WATCHDOG", "50,,1s"},
      {"TANDEM_WATCHDOG", "50,1s,2s,3s"},
      {"TANDEM_WATCHDOG", "1e7"},
      {"TANDEM_LINEAGE", "256"},
      {"TANDEM_LINEAGE", "-1"},
      {"TANDEM_LINEAGE", "off"},
      {"TANDEM_WORKER_NICE", ""},
      {"TANDEM_WORKER_NICE", "-1"},
      {"TANDEM_WORKER_NICE", "20"},
      {"TANDEM_WORKER_NICE", " 5"},
      {"TANDEM_WORKER_NICE", "idle2"},
      {"TANDEM_MAX_PENDING", "-1"},
      {"TANDEM_MAX_PENDING", "4294967296"},
      /* what tdm_runtime_create parses: the config's value would fail it */
      {"TANDEM_SIM", "gpu:speedup=x"},
      {"TANDEM_SIM", "gpu:colour=1"},
      {"TANDEM_SIM", "+opencl;gpu:speedup=2;"},
      {"TANDEM_SIM", "cpu.7:speedup=2"}, /* no kind 7 of core: found later */
      {"TANDEM_SIM", ";"},
      {"TANDEM_SIM", "+opencl;;"},
      {"TANDEM_SYNTHETIC_TOPOLOGY", "garbage"},
      {"TANDEM_SYNTHETIC_TOPOLOGY", "pack:100000 pu:100000"},
      {"TANDEM_TOPOLOGY_XML", "/nonexistent.xml"},
      {"TANDEM_FAULTS", "launch:p=2"},
      {"TANDEM_FAULTS", "device=0"},
      {"TANDEM_VERIFY", "twice:2"},
      {"TANDEM_VERIFY", "twice"},
  };
  unsigned cores = 0;
  for (size_t i = 0; i <= sizeof bad / sizeof bad[0]; i++) {
    if (i < sizeof bad / sizeof bad[0])
      assert_int_equal(setenv(bad[i].name, bad[i].value, 1), 0);
    test_log log;
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.bind_workers = 0;
    cfg.devices = "none";
    test_log_attach(&cfg, &log);
    tdm_runtime *rt = NULL;
    assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
    if (i == sizeof bad / sizeof bad[0]) { /* none set: the default */
      assert_int_equal(tdm_runtime_ncpu_workers(rt), cores);
      tdm_runtime_destroy(rt);
      break;
    }
    char want[128];
    snprintf(want, sizeof want, "ignoring %s=\"%s\"", bad[i].name, bad[i].value);
    if (!test_log_has(&log, want))
      fail_msg("%s=\"%s\": no warning (log: %s)", bad[i].name, bad[i].value, log.all);
    assert_int_equal(rt->cfg.device_memory_limit, 0);
    assert_true(rt->cfg.sim_time_scale == 0);
    assert_true(rt->cfg.watchdog_factor == 50 && rt->cfg.watchdog_min == 1 &&
                rt->cfg.watchdog_uncalibrated == 10);
    assert_int_equal(rt->cfg.lineage, 16);
    assert_int_equal(rt->cfg.worker_nice, 0);
    assert_int_equal(rt->cfg.max_pending, 1u << 16);
    assert_int_equal(rt->ndevice_workers, 0);
    assert_null(rt->verify);
    assert_int_equal(rt->faults.nlost, 0);
    if (!cores)
      cores = tdm_runtime_ncpu_workers(rt);
    assert_int_equal(tdm_runtime_ncpu_workers(rt), cores); /* not taken */
    tdm_runtime_destroy(rt);
    unsetenv(bad[i].name);
  }
  /* good values are taken */
  setenv("TANDEM_DEVICE_MEMORY_LIMIT", "64M", 1);
  setenv("TANDEM_NWORKERS", "3", 1);
  setenv("TANDEM_SIM_SCALE", "2.5", 1);
  setenv("TANDEM_WATCHDOG", "20,100ms,2s", 1);
  setenv("TANDEM_LINEAGE", "0", 1);
  setenv("TANDEM_MAX_PENDING", "0", 1);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.bind_workers = 0;
  cfg.devices = "none";
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  assert_int_equal(rt->cfg.device_memory_limit, 64u << 20);
  assert_int_equal(tdm_runtime_ncpu_workers(rt), 3);
  assert_true(rt->cfg.sim_time_scale == 2.5);
  assert_true(rt->cfg.watchdog_factor == 20 && rt->cfg.watchdog_min == 0.1 &&
              rt->cfg.watchdog_uncalibrated == 2);
  assert_int_equal(rt->cfg.lineage, 0);
  assert_int_equal(rt->cfg.max_pending, 0);
  tdm_runtime_destroy(rt);
  setenv("TANDEM_WATCHDOG", "off", 1);
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  assert_true(rt->cfg.watchdog_factor == 0 && rt->cfg.watchdog_uncalibrated == 0);
  tdm_runtime_destroy(rt);
  unsetenv("TANDEM_DEVICE_MEMORY_LIMIT");
  unsetenv("TANDEM_NWORKERS");
  unsetenv("TANDEM_SIM_SCALE");
  unsetenv("TANDEM_WATCHDOG");
  unsetenv("TANDEM_LINEAGE");
  unsetenv("TANDEM_MAX_PENDING");
  /* and through the config: a limit beyond 2^50 is refused */
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.device_memory_limit = (UINT64_C(1) << 50) + 1;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_INVALID_ARG);
  /* a chain longer than a handle can count is refused */
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.lineage = 256;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_INVALID_ARG);
  /* so are watchdog settings out of 0 to 1e6 */
  const double nan = __builtin_nan("");
  for (unsigned i = 0; i < 3; i++) {
    tdm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.bind_workers = 0;
    cfg.devices = "none";
    test_log log;
    test_log_attach(&cfg, &log);
    *(i == 0 ? &cfg.watchdog_factor : i == 1 ? &cfg.watchdog_min : &cfg.watchdog_uncalibrated) =
        i == 1 ? nan : i == 0 ? -1 : 2e6;
    assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_INVALID_ARG);
    assert_true(test_log_has(&log, "watchdog_factor, watchdog_min"));
  }
}

static void ok_task(const tdm_buffer *b, const void *a, size_t n) {
  (void)b;
  (void)a;
  (void)n;
}

static _Atomic unsigned events;
static char event_why[128];

static void on_event(void *data, unsigned device, const char *why) {
  (void)data;
  assert_int_equal(device, 0);
  snprintf(event_why, sizeof event_why, "%s", why);
  atomic_fetch_add(&events, 1);
}

static void set_faults(tdm_config *cfg, const char *spec) {
  cfg->faults = spec;
}

/* tdm_config.faults and TANDEM_FAULTS: malformed terms refused, saying
 * which; good ones armed: every emulated launch fails, every task is
 * retried on the CPU workers and ends done, and after three failures the
 * device is quarantined (said once, and in tdm_device_info). */
/* A TANDEM_* variable Tandem does not read is reported, with the closest
 * one it does where a few letters differ; the ones it reads are not. */
static void test_unknown_environment(void **state) {
  (void)state;
  static const struct {
    const char *name, *says;
  } cases[] = {
      {"TANDEM_STAT", "unknown setting TANDEM_STAT: did you mean TANDEM_STATS?"},
      {"TANDEM_LOGLEVEL", "unknown setting TANDEM_LOGLEVEL: did you mean TANDEM_LOG_LEVEL?"},
      {"TANDEM_NWORKRES", "unknown setting TANDEM_NWORKRES: did you mean TANDEM_NWORKERS?"},
      {"TANDEM_XYZZY", "unknown setting TANDEM_XYZZY: not a Tandem variable"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    assert_int_equal(setenv(cases[i].name, "1", 1), 0);
  assert_int_equal(setenv("TANDEM_SPIN_US", "60", 1), 0);
  test_log log;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.devices = "none";
  test_log_attach(&cfg, &log);
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (!test_log_has(&log, cases[i].says))
      fail_msg("no \"%s\" (log: %s)", cases[i].says, log.all);
  assert_false(test_log_has(&log, "TANDEM_SPIN_US"));
  assert_int_equal(rt->cfg.spin_us, 60);
  tdm_runtime_destroy(rt);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    unsetenv(cases[i].name);
  unsetenv("TANDEM_SPIN_US");
}

/* What a run of tdm_runtime_create and destroy printed on standard error,
 * with cfg (NULL: the defaults) and the environment as it is. */
static char *stderr_of_runtime(const tdm_config *cfg) {
  fflush(stderr);
  int saved = dup(2);
  FILE *f = tmpfile();
  assert_true(saved >= 0 && f);
  assert_true(dup2(fileno(f), 2) == 2);
  tdm_runtime *rt = NULL;
  tdm_status st = tdm_runtime_create(cfg, &rt);
  tdm_runtime_destroy(rt);
  fflush(stderr);
  assert_true(dup2(saved, 2) == 2);
  close(saved);
  assert_int_equal(st, TDM_OK);
  long n = ftell(f);
  assert_true(n >= 0);
  char *text = calloc(1, (size_t)n + 1);
  assert_non_null(text);
  rewind(f);
  assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return text;
}

/* Without a log callback, the environment asking for messages sends them
 * to standard error ("tandem: " first); with one, or with no TANDEM_*
 * variable set, nothing is printed. */
static void test_messages_on_stderr(void **state) {
  (void)state;
  /* whatever the test's own environment holds */
  for (size_t i = 0; tdm__env_name(i); i++)
    unsetenv(tdm__env_name(i));
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.devices = "none";
  char *quiet = stderr_of_runtime(&cfg);
  assert_string_equal(quiet, "");
  free(quiet);
  setenv("TANDEM_STATS", "1", 1);
  char *stats = stderr_of_runtime(&cfg);
  if (!strstr(stats, "tandem: runtime started:") || !strstr(stats, "tandem: stats: CPU worker 0"))
    fail_msg("stderr: %s", stats);
  free(stats);
  unsetenv("TANDEM_STATS");
  setenv("TANDEM_LOG_LEVEL", "debug", 1);
  setenv("TANDEM_NWORKERS", "many", 1);
  char *bad = stderr_of_runtime(&cfg);
  if (!strstr(bad, "tandem: warning: ignoring TANDEM_NWORKERS=\"many\"") ||
      !strstr(bad, "tandem: runtime stopping"))
    fail_msg("stderr: %s", bad);
  free(bad);
  /* a program with its callback keeps every message */
  test_log log;
  test_log_attach(&cfg, &log);
  char *kept = stderr_of_runtime(&cfg);
  assert_string_equal(kept, "");
  free(kept);
  assert_true(test_log_has(&log, "ignoring TANDEM_NWORKERS=\"many\""));
  /* and ignore_env means no environment at all */
  tdm_config_init(&cfg);
  cfg.devices = "none";
  cfg.ignore_env = 1;
  char *ignored = stderr_of_runtime(&cfg);
  assert_string_equal(ignored, "");
  free(ignored);
  unsetenv("TANDEM_LOG_LEVEL");
  unsetenv("TANDEM_NWORKERS");
}

/* docs/environment.md describes every variable Tandem reads, and only
 * those. */
static void test_environment_documented(void **state) {
  (void)state;
  FILE *f = fopen(TDM_SOURCE_DIR "/docs/environment.md", "r");
  assert_non_null(f);
  char line[4096];
  unsigned rows = 0, names = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "| `TANDEM_", 10))
      continue;
    char *end = strchr(line + 3, '`');
    assert_non_null(end);
    *end = 0;
    bool known = false;
    for (size_t i = 0; tdm__env_name(i); i++)
      known |= !strcmp(line + 3, tdm__env_name(i));
    if (!known)
      fail_msg("docs/environment.md describes %s, which Tandem does not read", line + 3);
    rows++;
  }
  fclose(f);
  for (; tdm__env_name(names); names++)
    ;
  if (rows != names)
    fail_msg("docs/environment.md has %u rows for %u variables", rows, names);
}

static void test_faults_specification(void **state) {
  (void)state;
  static const char *const bad[] = {
      "launch",          "launch:p=2",   "launch:p=-0.1",  "launch:p=",  "launch:p=0.5x",
      "launch:nth=0",    "launch:nth=x", "launch:q=1",     "copy:p=1.5", "alloc:nth=0", "hang:p=1.1",
      "seed=x",          "seed=-1",      "launch:p=0.1;x", ":p=1",       "run:nth=1;;device=1:lost",
      "device=x:lost_at=1ms", "device=0:lost_at=1", "device=0:lost_at=-1ms",
      "device=64:lost_at=1ms", "device=0:lost_at=1h", "device=0",
      "device=0:lost_after=0", "device=0:lost_after=x", "device=0:lost_after=-1",
      "device=0:lost_after=",
  };
  test_refused(bad, sizeof bad / sizeof bad[0], set_faults, "faults: bad term");
  setenv("TANDEM_FAULTS", "launch:nth=1;run:p=0;seed=9", 1);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.bind_workers = 0;
  cfg.nworkers = 1;
  cfg.sim = "gpu:speedup=100,memory=shared";
  cfg.sim_time_scale = 1;
  cfg.scheduler = "random"; /* half the tasks go to the device */
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  cfg.cache_dir = dir; /* the model it saves */
  cfg.device_event_fn = on_event;
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  unsetenv("TANDEM_FAULTS");
  static const tdm_codelet cl = {.name = "ok", .cpu_fn = ok_task};
  for (int i = 0; i < 200; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl}), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  tdm_device_counters c = {.struct_size = sizeof c};
  assert_int_equal(tdm_runtime_device_counters(rt, 0, &c), TDM_OK);
  assert_int_equal(c.tasks, 0); /* every launch there failed */
  assert_true(atomic_load(&rt->nretries) >= 3);
  tdm_device_info d = {.struct_size = sizeof d};
  assert_int_equal(tdm_runtime_device(rt, 0, &d), TDM_OK);
  assert_int_equal(d.quarantined, 1);
  assert_string_equal(d.quarantine_reason, event_why);
  assert_int_equal(atomic_load(&events), 1);
  /* a caller built before the field existed still gets the rest */
  tdm_device_info old = {.struct_size = offsetof(tdm_device_info, worker) + sizeof(int)};
  assert_int_equal(tdm_runtime_device(rt, 0, &old), TDM_OK);
  assert_int_equal(old.worker, d.worker);
  /* counters: the first version of the struct ended at evictions; its
   * callers get those fields and nothing written past them; less is
   * refused */
  size_t first = offsetof(tdm_device_counters, evictions) + sizeof c.evictions;
  _Alignas(tdm_device_counters) unsigned char buf[sizeof c + 16];
  memset(buf, 0x5a, sizeof buf);
  tdm_device_counters *oldc = (tdm_device_counters *)(void *)buf;
  oldc->struct_size = first;
  assert_int_equal(tdm_runtime_device_counters(rt, 0, oldc), TDM_OK);
  assert_int_equal(oldc->tasks, c.tasks);
  for (size_t i = first; i < sizeof buf; i++)
    assert_int_equal(buf[i], 0x5a);
  oldc->struct_size = first - 1;
  assert_int_equal(tdm_runtime_device_counters(rt, 0, oldc), TDM_ERR_INVALID_ARG);
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
  /* too many failures to wait for is refused */
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.quarantine_failures = 17;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_faults_specification),
      cmocka_unit_test(test_status_table),
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_struct_sizes),
      cmocka_unit_test(test_bad_config),
      cmocka_unit_test(test_environment_values),
      cmocka_unit_test(test_null_pointers),
      cmocka_unit_test(test_too_many_buffers_and_bad_modes),
      cmocka_unit_test(test_foreign_and_stale_handles),
      cmocka_unit_test(test_unregister_busy_handle),
      cmocka_unit_test(test_cycles_refused),
      cmocka_unit_test(test_blocking_calls_in_task),
      cmocka_unit_test(test_blocking_calls_on_dispatch),
      cmocka_unit_test(test_submit_after_destroy_began),
      cmocka_unit_test(test_unknown_environment),
      cmocka_unit_test(test_messages_on_stderr),
      cmocka_unit_test(test_environment_documented),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
