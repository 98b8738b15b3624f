/*
 * <tandem/glib.h> in real GLib main loops: tasks pinned to the loop's
 * thread, callbacks on dispatch and group progress arrive there, each
 * once, on the default context and on a context of the application's
 * own; a wait called from a loop callback while a pinned task is queued
 * runs it instead of waiting forever; a NULL runtime gives no source.
 */
#include "common.h"

#include <tandem/glib.h>

#define TASKS 40

static pthread_t loop_thread;
static _Atomic int pinned_ran, callbacks, off_loop, final_progress;
static int want; /* what ends a loop: pinned_ran + callbacks */

static void note_thread(void) {
  if (!pthread_equal(pthread_self(), loop_thread))
    atomic_store(&off_loop, 1);
}

static void pinned(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  note_thread();
  ++*(long *)b[0].ptr;
  atomic_fetch_add(&pinned_ran, 1);
}

static void worker_step(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  ++*(long *)b[0].ptr;
}

static void on_done(void *data) {
  (void)data;
  note_thread();
  atomic_fetch_add(&callbacks, 1);
}

static void on_progress(void *data, const tdm_group_progress *p) {
  (void)data;
  note_thread();
  if (p->ended == p->submitted && p->submitted == 2 * TASKS)
    atomic_fetch_add(&final_progress, 1);
}

static const tdm_codelet cl_pinned = {.name = "pinned", .cpu_fn = pinned, .nbuffers = 1,
                                      .modes = {TDM_RW}};
static const tdm_codelet cl_worker = {.name = "worker", .cpu_fn = worker_step, .nbuffers = 1,
                                      .modes = {TDM_RW}};

static tdm_runtime *runtime(void) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.devices = "none";
  cfg.ignore_env = 1;
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  return rt;
}

/* A chain on *v, worker and pinned steps in turn, each with a callback on
 * dispatch, in group g. */
static void submit_chain(tdm_runtime *rt, tdm_handle *h, tdm_group *g) {
  for (int i = 0; i < 2 * TASKS; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = i % 2 ? &cl_pinned : &cl_worker,
                                                     .handles = {h},
                                                     .group = g,
                                                     .callback = on_done,
                                                     .flags = TDM_TASK_CALLBACK_ON_DISPATCH |
                                                              (i % 2 ? TDM_TASK_MAIN_THREAD
                                                                     : 0)}),
                     TDM_OK);
}

static void reset(void) {
  loop_thread = pthread_self();
  atomic_store(&pinned_ran, 0);
  atomic_store(&callbacks, 0);
  atomic_store(&off_loop, 0);
  atomic_store(&final_progress, 0);
  want = TASKS + 2 * TASKS;
}

static gboolean check_done(gpointer loop) {
  if (atomic_load(&pinned_ran) + atomic_load(&callbacks) >= want &&
      atomic_load(&final_progress))
    g_main_loop_quit(loop);
  return G_SOURCE_CONTINUE;
}

static gboolean give_up(gpointer loop) {
  g_main_loop_quit(loop);
  return G_SOURCE_REMOVE;
}

/* Runs a loop on `context` until the chain's pinned steps, callbacks and
 * final progress have all arrived (10 s at most). */
static void run_loop(GMainContext *context) {
  GMainLoop *loop = g_main_loop_new(context, FALSE);
  GSource *poll = g_timeout_source_new(1), *limit = g_timeout_source_new(10000);
  g_source_set_callback(poll, check_done, loop, NULL);
  g_source_set_callback(limit, give_up, loop, NULL);
  g_source_attach(poll, context);
  g_source_attach(limit, context);
  g_main_loop_run(loop);
  g_source_destroy(poll);
  g_source_destroy(limit);
  g_source_unref(poll);
  g_source_unref(limit);
  g_main_loop_unref(loop);
}

/* The chain in a group with progress on dispatch, run by a loop on
 * `context` (attached to it beforehand): everything arrives there, once. */
static void chain_on(tdm_runtime *rt, GMainContext *context) {
  long v = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &v, 1, sizeof v, &h), TDM_OK);
  tdm_group *g;
  tdm_group_desc d = {.progress_fn = on_progress, .progress_on_dispatch = 1, .progress_hz = 1000};
  assert_int_equal(tdm_group_create(rt, &d, &g), TDM_OK);
  submit_chain(rt, h, g);
  run_loop(context);
  assert_int_equal(tdm_group_wait(g), TDM_OK);
  assert_int_equal(atomic_load(&pinned_ran), TASKS);
  assert_int_equal(atomic_load(&callbacks), 2 * TASKS);
  assert_int_equal(atomic_load(&final_progress), 1);
  assert_int_equal(atomic_load(&off_loop), 0);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(v, 2 * TASKS);
  tdm_group_release(g);
}

static void test_default_context(void **state) {
  (void)state;
  assert_null(tdm_glib_source_new(NULL));
  assert_int_equal(tdm_glib_attach(NULL, NULL), 0);
  tdm_runtime *rt = runtime();
  reset();
  guint id = tdm_glib_attach(rt, NULL);
  assert_true(id > 0);
  chain_on(rt, NULL);
  assert_true(g_source_remove(id));
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
}

/* A context of the application's own, iterated by a loop on it. */
static void test_own_context(void **state) {
  (void)state;
  tdm_runtime *rt = runtime();
  reset();
  GMainContext *context = g_main_context_new();
  GSource *s = tdm_glib_source_new(rt);
  assert_non_null(s);
  assert_string_equal(g_source_get_name(s), "tandem");
  assert_true(g_source_attach(s, context) > 0);
  chain_on(rt, context);
  g_source_destroy(s);
  g_source_unref(s);
  g_main_context_unref(context);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
}

/* From a loop callback (not inside tdm_dispatch), a wait for work that
 * includes pinned tasks: they run in the wait, on this thread. */
static tdm_runtime *waiting_rt;
static tdm_handle *waiting_h;
static _Atomic int waited = -1;

static gboolean wait_in_callback(gpointer loop) {
  for (int i = 0; i < 6; i++)
    if (tdm_submit(waiting_rt, &(tdm_task_desc){.codelet = i % 2 ? &cl_pinned : &cl_worker,
                                                .handles = {waiting_h},
                                                .flags = i % 2 ? TDM_TASK_MAIN_THREAD : 0}))
      abort();
  atomic_store(&waited, tdm_wait_all(waiting_rt));
  g_main_loop_quit(loop);
  return G_SOURCE_REMOVE;
}

static void test_wait_in_loop_callback(void **state) {
  (void)state;
  tdm_runtime *rt = runtime();
  reset();
  guint id = tdm_glib_attach(rt, NULL);
  long v = 0;
  assert_int_equal(tdm_register_vector(rt, &v, 1, sizeof v, &waiting_h), TDM_OK);
  waiting_rt = rt;
  GMainLoop *loop = g_main_loop_new(NULL, FALSE);
  g_idle_add(wait_in_callback, loop);
  g_main_loop_run(loop);
  g_main_loop_unref(loop);
  assert_int_equal(atomic_load(&waited), TDM_OK);
  assert_int_equal(atomic_load(&pinned_ran), 3);
  assert_int_equal(atomic_load(&off_loop), 0);
  assert_int_equal(tdm_handle_unregister(waiting_h), TDM_OK);
  assert_int_equal(v, 6);
  assert_true(g_source_remove(id));
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default_context),
      cmocka_unit_test(test_own_context),
      cmocka_unit_test(test_wait_in_loop_callback),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
