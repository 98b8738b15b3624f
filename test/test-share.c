/*
 * Sharing the machine with an application: tdm_runtime_pause / resume
 * hold tasks back without losing any, tdm_runtime_set_active_workers
 * leaves cores to the application, and neither loses or repeats a task
 * while the work goes on; the CPU workers start a task of higher
 * priority before those queued of lower ones.
 */
#include "common.h"

static _Atomic int ran;      /* tasks that ran */
static _Atomic int started;  /* gated tasks that began */
static _Atomic int gate;     /* gated tasks spin until it opens */
static _Atomic int on_worker[64]; /* tasks run, per worker id */

static tdm_runtime *shared_rt; /* for the tasks that ask their worker */

static void count(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  int id = tdm_worker_id(shared_rt);
  if (id >= 0 && id < 64)
    atomic_fetch_add(&on_worker[id], 1);
  atomic_fetch_add(&ran, 1);
}

static void nap(const tdm_buffer *b, const void *args, size_t n) {
  count(b, args, n);
  sleep_ms(5);
}

static void gated(const tdm_buffer *b, const void *args, size_t n) {
  atomic_fetch_add(&started, 1);
  while (!atomic_load(&gate))
    sleep_ms(1);
  count(b, args, n);
}

static const tdm_codelet cl_count = {.name = "count", .cpu_fn = count};
static const tdm_codelet cl_nap = {.name = "nap", .cpu_fn = nap};
static const tdm_codelet cl_gated = {.name = "gated", .cpu_fn = gated};

static tdm_runtime *make(unsigned nworkers, const char *sim, test_log *log) {
  tdm_runtime *rt = test_runtime_emulated(nworkers, sim, log);
  atomic_store(&ran, 0);
  atomic_store(&started, 0);
  atomic_store(&gate, 0);
  for (int i = 0; i < 64; i++)
    atomic_store(&on_worker[i], 0);
  shared_rt = rt;
  return rt;
}

static void submit_n(tdm_runtime *rt, const tdm_codelet *cl, int n) {
  for (int i = 0; i < n; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = cl}), TDM_OK);
}

/* Paused: tasks submitted queue and none starts; resumed, all run once. */
static void test_pause_holds_tasks(void **state) {
  (void)state;
  tdm_runtime *rt = make(3, NULL, NULL);
  assert_int_equal(tdm_runtime_active_workers(rt), 3);
  assert_int_equal(tdm_runtime_pause(rt), TDM_OK);
  assert_int_equal(tdm_runtime_pause(rt), TDM_OK); /* twice is once */
  assert_int_equal(tdm_runtime_active_workers(rt), 0);
  submit_n(rt, &cl_count, 30);
  sleep_ms(60);
  assert_int_equal(atomic_load(&ran), 0);
  assert_int_equal(tdm_runtime_resume(rt), TDM_OK);
  assert_int_equal(tdm_runtime_active_workers(rt), 3);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran), 30);
  assert_int_equal(tdm_runtime_resume(rt), TDM_OK); /* running: nothing */
  submit_n(rt, &cl_count, 5);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran), 35);
  tdm_runtime_destroy(rt);
}

/* A task running when the runtime is paused ends (and can be waited
 * for while paused); the next one waits for the resume. */
static void test_pause_lets_running_task_end(void **state) {
  (void)state;
  tdm_runtime *rt = make(2, NULL, NULL);
  tdm_task *t = NULL;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_gated}, &t), TDM_OK);
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  assert_int_equal(wait_flag(&started, 10), 1);
  assert_int_equal(tdm_runtime_pause(rt), TDM_OK);
  atomic_store(&gate, 1);
  assert_int_equal(tdm_task_wait(t), TDM_OK);
  tdm_task_release(t);
  assert_int_equal(atomic_load(&ran), 1);
  submit_n(rt, &cl_count, 4);
  sleep_ms(40);
  assert_int_equal(atomic_load(&ran), 1);
  assert_int_equal(tdm_runtime_resume(rt), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran), 5);
  tdm_runtime_destroy(rt);
}

/* One active worker of four runs (nearly) everything: a worker that was
 * looking for work when the count changed may take one task more. All
 * four again: more than one runs. */
static void test_active_workers(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = make(4, NULL, &log);
  assert_int_equal(tdm_runtime_set_active_workers(rt, 0), TDM_ERR_INVALID_ARG);
  assert_true(test_log_has(&log, "tdm_runtime_set_active_workers: 0 is not in 1 .. 4"));
  assert_int_equal(tdm_runtime_set_active_workers(rt, 5), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_runtime_set_active_workers(NULL, 1), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_runtime_pause(NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_runtime_resume(NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_runtime_active_workers(NULL), 0);
  assert_int_equal(tdm_runtime_active_workers(rt), 4);

  assert_int_equal(tdm_runtime_set_active_workers(rt, 1), TDM_OK);
  assert_int_equal(tdm_runtime_active_workers(rt), 1);
  submit_n(rt, &cl_nap, 40);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran), 40);
  int others = 0;
  for (int i = 1; i < 4; i++)
    others += atomic_load(&on_worker[i]);
  assert_true(others <= 3);
  assert_true(atomic_load(&on_worker[0]) >= 37);

  /* paused and resumed: the count is kept */
  assert_int_equal(tdm_runtime_pause(rt), TDM_OK);
  assert_int_equal(tdm_runtime_active_workers(rt), 0);
  assert_int_equal(tdm_runtime_resume(rt), TDM_OK);
  assert_int_equal(tdm_runtime_active_workers(rt), 1);

  assert_int_equal(tdm_runtime_set_active_workers(rt, 4), TDM_OK);
  for (int i = 0; i < 4; i++)
    atomic_store(&on_worker[i], 0);
  submit_n(rt, &cl_nap, 40);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  int used = 0;
  for (int i = 0; i < 4; i++)
    used += atomic_load(&on_worker[i]) > 0;
  assert_true(used >= 2);
  assert_int_equal(atomic_load(&ran), 80);
  tdm_runtime_destroy(rt);
}

/* ---- changes under load ----------------------------------------------- */

enum { NCOUNTERS = 8 };

typedef struct add_args {
  int children; /* tasks this one submits, each adding 1 to counter 0 */
} add_args;

static tdm_handle *counters[NCOUNTERS];
static const tdm_codelet cl_add;

/* counter += 1, and the children it was asked to submit */
static void add(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const add_args *a = args;
  (*(long *)b[0].ptr)++;
  for (int i = 0; a && i < a->children; i++) {
    tdm_task_desc d = {.codelet = &cl_add, .handles = {counters[0]}};
    if (tdm_submit(shared_rt, &d) != TDM_OK)
      abort();
  }
  atomic_fetch_add(&ran, 1);
}

static const tdm_codelet cl_add = {
    .name = "add", .cpu_fn = add, .nbuffers = 1, .modes = {TDM_RW}};

typedef struct controller {
  tdm_runtime *rt;
  _Atomic int stop;
  uint64_t seed;
  unsigned nworkers;
  unsigned changes;
} controller;

/* Pauses, resumes and changes the active count at random moments. */
static void *control(void *arg) {
  controller *c = arg;
  uint64_t x = c->seed;
  while (!atomic_load(&c->stop)) {
    x = test_mix64(x);
    switch (x % 4) {
    case 0:
      if (tdm_runtime_pause(c->rt) != TDM_OK)
        abort();
      break;
    case 1:
      if (tdm_runtime_resume(c->rt) != TDM_OK)
        abort();
      break;
    default:
      if (tdm_runtime_set_active_workers(c->rt, 1 + (unsigned)(x >> 8) % c->nworkers) != TDM_OK)
        abort();
    }
    c->changes++;
    usleep((useconds_t)(50 + (x >> 20) % 400));
  }
  return NULL;
}

/* Tasks that add 1 to counters (one chain of dependencies per counter),
 * some submitting more from inside, while another thread pauses,
 * resumes and changes the active count: every task runs once. */
static void test_changes_under_load(void **state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 4; seed++) {
    tdm_runtime *rt = make(4, NULL, NULL);
    long values[NCOUNTERS] = {0};
    for (int i = 0; i < NCOUNTERS; i++)
      assert_int_equal(tdm_register_vector(rt, &values[i], 1, sizeof(long), &counters[i]),
                       TDM_OK);
    controller c = {.rt = rt, .seed = seed * 7919, .nworkers = 4};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, control, &c), 0);
    long want[NCOUNTERS] = {0};
    uint64_t x = seed;
    int tasks = 0;
    for (int i = 0; i < 3000; i++) {
      x = test_mix64(x);
      int k = (int)(x % NCOUNTERS);
      add_args a = {.children = (x >> 16) % 16 == 0 ? 3 : 0};
      tdm_task_desc d = {.codelet = &cl_add, .handles = {counters[k]}, .args = &a,
                         .args_size = sizeof a};
      /* submitting may wait for room while paused: the controller resumes */
      assert_int_equal(tdm_submit(rt, &d), TDM_OK);
      want[k]++;
      want[0] += a.children;
      tasks += 1 + a.children;
      if (i % 500 == 0)
        sleep_ms(2);
    }
    atomic_store(&c.stop, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(tdm_runtime_resume(rt), TDM_OK);
    assert_int_equal(tdm_runtime_set_active_workers(rt, 4), TDM_OK);
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    assert_int_equal(atomic_load(&ran), tasks);
    for (int i = 0; i < NCOUNTERS; i++) {
      assert_int_equal(tdm_handle_unregister(counters[i]), TDM_OK);
      assert_int_equal(values[i], want[i]);
    }
    assert_true(c.changes > 10);
    tdm_runtime_destroy(rt);
  }
}

/* An emulated device starts nothing while paused either. */
static void test_pause_holds_device(void **state) {
  (void)state;
  tdm_runtime *rt = make(1, "gpu:speedup=1,memory=shared", NULL);
  assert_int_equal(tdm_runtime_pause(rt), TDM_OK);
  submit_n(rt, &cl_count, 40);
  sleep_ms(60);
  assert_int_equal(atomic_load(&ran), 0);
  assert_int_equal(tdm_runtime_resume(rt), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran), 40);
  tdm_device_counters dc = {.struct_size = sizeof dc};
  assert_int_equal(tdm_runtime_device_counters(rt, 0, &dc), TDM_OK);
  assert_true(dc.tasks > 0); /* the device had its share, after the resume */
  tdm_runtime_destroy(rt);
}

/* Destroying a paused runtime runs what was queued. */
static void test_destroy_while_paused(void **state) {
  (void)state;
  tdm_runtime *rt = make(2, NULL, NULL);
  assert_int_equal(tdm_runtime_pause(rt), TDM_OK);
  submit_n(rt, &cl_count, 10);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  assert_int_equal(atomic_load(&ran), 10);
}

/* ---- priorities on the CPU workers --------------------------------------- */

static _Atomic int next_rank;
static int ranks[10001]; /* per task: the order it started in */

static void ranked(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)n;
  int i = *(const int *)args;
  ranks[i] = atomic_fetch_add(&next_rank, 1);
  double until = now_s() + 20e-6; /* a little work */
  while (now_s() < until)
    ;
}

static const tdm_codelet cl_ranked = {.name = "ranked", .cpu_fn = ranked};

static void submit_ranked(tdm_runtime *rt, int i, int priority) {
  tdm_task_desc d = {.codelet = &cl_ranked, .args = &i, .args_size = sizeof i,
                     .priority = priority};
  assert_int_equal(tdm_submit(rt, &d), TDM_OK);
}

static _Atomic int produced;

/* Submits tasks 0 .. 9,999 at priority -1 from inside a task: they land
 * on its worker's deque, newest first for that worker. */
static void producer(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  for (int i = 0; i < 10000; i++) {
    tdm_task_desc d = {.codelet = &cl_ranked, .args = &i, .args_size = sizeof i,
                       .priority = -1};
    if (tdm_submit(shared_rt, &d) != TDM_OK)
      abort();
  }
  atomic_store(&produced, 1);
}

static const tdm_codelet cl_producer = {.name = "producer", .cpu_fn = producer};

/* A task of priority 1 queued between 5,000 and 5,000 more of priority 0
 * (while paused) is the first a worker takes (without bands: about the
 * 9,950th); one of priority 0 queued behind 10,000 of priority -1 that a
 * task made ready on the only worker (on its deque, which it would empty
 * first) starts before most of them. */
static void test_priority_overtakes_queued(void **state) {
  (void)state;
  tdm_runtime *rt = make(2, NULL, NULL);
  atomic_store(&next_rank, 0);
  assert_int_equal(tdm_runtime_pause(rt), TDM_OK);
  for (int i = 0; i < 10000; i++) {
    if (i == 5000)
      submit_ranked(rt, 10000, 1);
    submit_ranked(rt, i, 0);
  }
  assert_int_equal(tdm_runtime_resume(rt), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&next_rank), 10001);
  printf("priority 1 behind 5,000 of priority 0: started %d-th\n", ranks[10000] + 1);
  assert_true(ranks[10000] < 2); /* the first a worker took */

  tdm_runtime_destroy(rt);

  /* one worker: it would take from its own deque first */
  rt = make(1, NULL, NULL);
  atomic_store(&next_rank, 0);
  atomic_store(&produced, 0);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_producer}), TDM_OK);
  assert_int_equal(wait_flag(&produced, 30), 1);
  submit_ranked(rt, 10000, 0);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&next_rank), 10001);
  printf("priority 0 behind 10,000 of priority -1: started %d-th\n", ranks[10000] + 1);
  assert_true(ranks[10000] < 5000); /* without bands: last */
  tdm_runtime_destroy(rt);
}

static _Atomic int order[8];
static _Atomic int norder;

static void note(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)n;
  atomic_store(&order[atomic_fetch_add(&norder, 1) & 7], *(const int *)args);
}

static const tdm_codelet cl_note = {.name = "note", .cpu_fn = note};

static void submit_note(int which, int priority) {
  tdm_task_desc d = {.codelet = &cl_note, .args = &which, .args_size = sizeof which,
                     .priority = priority};
  if (tdm_submit(shared_rt, &d) != TDM_OK)
    abort();
}

/* Submits, from inside a task: 3 at 7, 1 at -1, 5 at 2, 2 at 0, 4 at 7. */
static void parent(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  submit_note(3, 7);
  submit_note(1, -1);
  submit_note(5, 2);
  submit_note(2, 0);
  submit_note(4, 7);
}

static const tdm_codelet cl_parent = {.name = "parent", .cpu_fn = parent};

/* One worker: the tasks a task made ready run by band, high first, and
 * within a band newest first (the worker's own deque, as without
 * priorities: not ordered by value). */
static void test_priority_bands_keep_deque_order(void **state) {
  (void)state;
  tdm_runtime *rt = make(1, NULL, NULL);
  atomic_store(&norder, 0);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_parent}), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&norder), 5);
  const int want[5] = {4, 5, 3, 2, 1}; /* without bands: 4, 2, 5, 1, 3 */
  for (int i = 0; i < 5; i++)
    assert_int_equal(atomic_load(&order[i]), want[i]);
  tdm_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pause_holds_tasks),
      cmocka_unit_test(test_pause_lets_running_task_end),
      cmocka_unit_test(test_active_workers),
      cmocka_unit_test(test_changes_under_load),
      cmocka_unit_test(test_pause_holds_device),
      cmocka_unit_test(test_destroy_while_paused),
      cmocka_unit_test(test_priority_overtakes_queued),
      cmocka_unit_test(test_priority_bands_keep_deque_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
