/*
 * Allocation failures: a scenario that touches every kind of allocation a
 * running runtime makes (tasks, large arguments, edges, dependency lists,
 * reader lists, handles, tiles, the buffers of a task with more than
 * TDM_MAX_BUFFERS) is run again and again, the k-th
 * allocation failing in run k, until a run sees no failure. In every run,
 * the call that hit the failure returns TDM_ERR_NO_MEMORY with a log
 * message, every other call succeeds, and the data holds exactly the
 * effects of the calls that succeeded. The sanitizer runs check that
 * nothing leaks.
 */
#include "common.h"

#include "internal.h"

typedef struct {
  char pad[100]; /* larger than TDM_INLINE_ARGS: a separate allocation */
} big_args;

static void inc(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  ((long *)b[0].ptr)[0]++;
}

static void look(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
}

static const tdm_codelet cl_inc = {.name = "inc", .cpu_fn = inc, .nbuffers = 1, .modes = {TDM_RW}};
static const tdm_codelet cl_look = {.name = "look", .cpu_fn = look,
                                    .nbuffers = 1, .modes = {TDM_R}};
/* A wide task: buffer 0 incremented, the nine others read. */
static const tdm_access wide_modes[10] = {TDM_RW, TDM_R, TDM_R, TDM_R, TDM_R,
                                          TDM_R,  TDM_R, TDM_R, TDM_R, TDM_R};
static const tdm_codelet cl_wide = {.name = "wide", .cpu_fn = inc, .nbuffers = 10,
                                    .dyn_modes = wide_modes};

typedef struct {
  unsigned nomem;  /* calls that returned TDM_ERR_NO_MEMORY */
} tally;

/* Counts an allowed failure; anything else must be TDM_OK. Returns
 * whether the call succeeded. */
static int ok(tally *t, tdm_status st) {
  if (st == TDM_ERR_NO_MEMORY) {
    t->nomem++;
    return 0;
  }
  assert_int_equal(st, TDM_OK);
  return 1;
}

static int submit_inc(tally *t, tdm_runtime *rt, tdm_handle *h) {
  big_args a = {{0}};
  return ok(t, tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_inc, .handles = {h},
                                                .args = &a, .args_size = sizeof a}));
}

/* Runs the scenario with the k-th allocation failing; returns whether a
 * failure was injected. */
static int scenario(long k) {
  test_log log;
  tdm_runtime *rt = test_runtime(2, &log);
  long v[4] = {0}, expect[4] = {0}, xv = 0;
  long m[8 * 8] = {0}, expect_tile = 0;
  tdm_handle *h[4], *hm, *x = NULL;
  for (int i = 0; i < 4; i++)
    assert_int_equal(tdm_register_vector(rt, &v[i], 1, sizeof(long), &h[i]), TDM_OK);
  assert_int_equal(tdm_register_matrix(rt, m, 8, 8, 8, sizeof(long), &hm), TDM_OK);
  tally t = {0};
  unsigned errors0 = test_log_errors(&log);

  tdm__fail_allocation(rt, k);
  if (!ok(&t, tdm_register_vector(rt, &xv, 1, sizeof xv, &x)))
    x = NULL;
  for (int i = 0; i < 300; i++) /* past one slab of tasks */
    expect[i % 4] += submit_inc(&t, rt, h[i % 4]);
  for (int i = 0; i < 10; i++) /* readers, then a writer with 10 edges */
    ok(&t, tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_look, .handles = {h[0]}}));
  expect[0] += submit_inc(&t, rt, h[0]);
  tdm_handle *wide[10] = {h[3], h[0], h[1], h[2], h[0], h[1], h[2], h[0], h[1], h[2]};
  expect[3] += ok(&t, tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_wide, .dyn_handles = wide}));

  tdm_task *a = NULL, *b = NULL;
  tdm_task_desc d = {.codelet = &cl_inc, .handles = {h[1]}};
  ok(&t, tdm_task_create(rt, &d, &a));
  ok(&t, tdm_task_create(rt, &d, &b));
  if (a && b && ok(&t, tdm_task_depends_on(b, a)) && ok(&t, tdm_task_submit(a))) {
    expect[1]++;
    expect[1] += ok(&t, tdm_task_submit(b));
  }
  tdm_task_release(a);
  tdm_task_release(b);

  int partitioned = ok(&t, tdm_matrix_partition(hm, 4, 4, 0));
  if (partitioned) {
    expect_tile += submit_inc(&t, rt, tdm_matrix_tile(hm, 0, 0));
    partitioned = !ok(&t, tdm_matrix_unpartition(hm, 0));
  }
  if (ok(&t, tdm_handle_acquire(h[2], TDM_RW))) {
    v[2] += 1000;
    expect[2] += 1000;
    assert_int_equal(tdm_handle_release(h[2]), TDM_OK);
  }
  int injected = atomic_load(&rt->faults.alloc_countdown) < 0;
  tdm__fail_allocation(rt, -1);

  /* exactly the injected failure surfaced, and it was logged */
  assert_int_equal(t.nomem, injected ? 1 : 0);
  if (injected)
    assert_true(test_log_errors(&log) > errors0);

  if (partitioned)
    assert_int_equal(tdm_matrix_unpartition(hm, 0), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(tdm_handle_unregister(h[i]), TDM_OK);
    assert_int_equal(v[i], expect[i]);
  }
  assert_int_equal(tdm_handle_unregister(hm), TDM_OK);
  assert_int_equal(m[0], expect_tile);
  if (x)
    assert_int_equal(tdm_handle_unregister(x), TDM_OK);
  tdm_runtime_destroy(rt);
  return injected;
}

static void test_every_allocation_failure_is_reported(void **state) {
  (void)state;
  long k = 0;
  while (scenario(k))
    if (++k > 5000)
      fail_msg("the scenario never ran out of allocations to fail");
  print_message("%ld allocations failed in turn\n", k);
  /* the scenario makes dozens of allocations: all of them were tried */
  assert_true(k > 10);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_allocation_failure_is_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
