/*
 * Back-pressure (tdm_config.max_pending): a producer on a thread of the
 * application waits while the bound is reached, tdm_submit_try says so
 * instead, and code the runtime runs (a task, a completion callback) or
 * a thread holding an acquired handle is never held back: no deadlock.
 */
#include "common.h"

static _Atomic int gate;    /* tasks spin until it opens */
static _Atomic int ran;     /* tasks that ran */

static void gated(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  while (!atomic_load(&gate))
    sleep_ms(1);
  atomic_fetch_add(&ran, 1);
}

static const tdm_codelet cl_gated = {.name = "gated", .cpu_fn = gated};

static tdm_runtime *bounded(unsigned max_pending, unsigned nworkers) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = nworkers;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.devices = "none";
  cfg.max_pending = max_pending;
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  atomic_store(&gate, 0);
  atomic_store(&ran, 0);
  return rt;
}

typedef struct producer {
  tdm_runtime *rt;
  _Atomic int done;
  tdm_status st;
} producer;

static void *produce_one(void *arg) {
  producer *p = arg;
  p->st = tdm_submit(p->rt, &(tdm_task_desc){.codelet = &cl_gated});
  atomic_store(&p->done, 1);
  return NULL;
}

/* Four unfinished tasks of at most four: the fifth waits (tdm_submit) or
 * is refused (tdm_submit_try), until a task finishes. */
static void test_producer_waits(void **state) {
  (void)state;
  tdm_runtime *rt = bounded(4, 1);
  for (int i = 0; i < 4; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_gated}), TDM_OK);
  assert_int_equal(tdm_submit_try(rt, &(tdm_task_desc){.codelet = &cl_gated}),
                   TDM_ERR_WOULD_BLOCK);
  producer p = {.rt = rt};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, produce_one, &p), 0);
  sleep_ms(50);
  assert_int_equal(atomic_load(&p.done), 0); /* waiting for room */
  atomic_store(&gate, 1);
  assert_int_equal(wait_flag(&p.done, 10), 1);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(p.st, TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran), 5); /* the refused one never ran */
  assert_int_equal(tdm_submit_try(rt, &(tdm_task_desc){.codelet = &cl_gated}), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* A producer blocked for room when tdm_runtime_destroy is called is
 * refused at once (TDM_ERR_SHUTTING_DOWN), not when a task finishes: here
 * none can finish until the producer has been refused. */
static void *destroy_it(void *arg) {
  tdm_runtime_destroy(arg);
  return NULL;
}

static void test_destroy_refuses_blocked_producer(void **state) {
  (void)state;
  tdm_runtime *rt = bounded(2, 1);
  for (int i = 0; i < 2; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_gated}), TDM_OK);
  producer p = {.rt = rt};
  pthread_t th, destroyer;
  assert_int_equal(pthread_create(&th, NULL, produce_one, &p), 0);
  sleep_ms(50);
  assert_int_equal(atomic_load(&p.done), 0); /* waiting for room */
  assert_int_equal(pthread_create(&destroyer, NULL, destroy_it, rt), 0);
  int refused = wait_flag(&p.done, 5);
  atomic_store(&gate, 1); /* now the tasks, and the destroy, may end */
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(pthread_join(destroyer, NULL), 0);
  assert_int_equal(refused, 1);
  assert_int_equal(p.st, TDM_ERR_SHUTTING_DOWN);
  assert_int_equal(atomic_load(&ran), 2); /* the refused one never ran */
}

/* 0: no bound. */
static void test_unbounded(void **state) {
  (void)state;
  tdm_runtime *rt = bounded(0, 1);
  for (int i = 0; i < 100; i++)
    assert_int_equal(tdm_submit_try(rt, &(tdm_task_desc){.codelet = &cl_gated}), TDM_OK);
  atomic_store(&gate, 1);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran), 100);
  tdm_runtime_destroy(rt);
}

static tdm_runtime *the_rt;
static _Atomic int started, fanned, fan_worker;

static void blocker(const tdm_buffer *b, const void *args, size_t n) {
  atomic_store(&started, 1);
  gated(b, args, n);
}

/* Runs only on the CPU worker: the emulated device cannot (blocker=0). */
static const tdm_codelet cl_blocker = {.name = "blocker", .cpu_fn = blocker};

static void fan_out(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  atomic_store(&fan_worker, tdm_worker_id(the_rt));
  for (int i = 0; i < 50; i++) /* past the bound: never waits here */
    assert_int_equal(tdm_submit(the_rt, &(tdm_task_desc){.codelet = &cl_gated}), TDM_OK);
}

static const tdm_codelet cl_fan_out = {.name = "fan-out", .cpu_fn = fan_out};

static void submit_from_callback(void *data) {
  (void)data;
  for (int i = 0; i < 20; i++)
    assert_int_equal(tdm_submit(the_rt, &(tdm_task_desc){.codelet = &cl_gated}), TDM_OK);
  atomic_store(&fanned, 1);
}

/* A task and its completion callback submit past the bound (3) while the
 * tasks they submit cannot finish (the gate is shut): they would
 * deadlock if they waited for room. They run on an emulated device's
 * thread (not a worker: the one CPU worker is held by a task the device
 * cannot run), so only the mark on code the runtime runs lets them
 * through. */
static void test_runtime_code_never_waits(void **state) {
  (void)state;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.sim = "d:blocker=0,latency=1us,bandwidth=1G";
  cfg.scheduler = "eager";
  cfg.max_pending = 3;
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  the_rt = rt;
  atomic_store(&gate, 0);
  atomic_store(&ran, 0);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_blocker}), TDM_OK);
  assert_int_equal(wait_flag(&started, 10), 1);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_fan_out,
                                                   .callback = submit_from_callback}),
                   TDM_OK);
  int through = wait_flag(&fanned, 10); /* the gate still shut */
  atomic_store(&gate, 1);
  assert_int_equal(through, 1);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_true(atomic_load(&fan_worker) >= 1); /* the device's worker id */
  assert_int_equal(atomic_load(&ran), 1 + 50 + 20);
  tdm_runtime_destroy(rt);
}

static void add_one(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  ((uint64_t *)b[0].ptr)[0]++;
}

static const tdm_codelet cl_add = {
    .name = "add", .cpu_fn = add_one, .nbuffers = 1, .modes = {TDM_RW}};

/* A thread holding an acquired handle submits tasks on it past the bound
 * (3): they wait for its release, which would never come if it waited
 * for room. */
static void test_holder_of_an_acquisition_never_waits(void **state) {
  (void)state;
  tdm_runtime *rt = bounded(3, 1);
  uint64_t v = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &v, 1, sizeof v, &h), TDM_OK);
  assert_int_equal(tdm_handle_acquire(h, TDM_RW), TDM_OK);
  for (int i = 0; i < 10; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {h}}),
                     TDM_OK);
  assert_int_equal(tdm_handle_release(h), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(v, 10);
  /* released: this thread is held back again */
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_gated}), TDM_OK);
  assert_int_equal(tdm_submit_try(rt, &(tdm_task_desc){.codelet = &cl_gated}),
                   TDM_ERR_WOULD_BLOCK);
  atomic_store(&gate, 1);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* Many producers, a small bound: every task runs once, none is lost
 * between a wake-up and a submission. */
static void *produce_many(void *arg) {
  producer *p = arg;
  for (int i = 0; i < 2000 && !p->st; i++)
    p->st = tdm_submit(p->rt, &(tdm_task_desc){.codelet = &cl_gated});
  return NULL;
}

static void test_many_producers(void **state) {
  (void)state;
  tdm_runtime *rt = bounded(8, 2);
  atomic_store(&gate, 1);
  producer p[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    p[i] = (producer){.rt = rt};
    assert_int_equal(pthread_create(&th[i], NULL, produce_many, &p[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(p[i].st, TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran), 8000);
  tdm_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_producer_waits),
      cmocka_unit_test(test_destroy_refuses_blocked_producer),
      cmocka_unit_test(test_unbounded),
      cmocka_unit_test(test_runtime_code_never_waits),
      cmocka_unit_test(test_holder_of_an_acquisition_never_waits),
      cmocka_unit_test(test_many_producers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
