/* Dependency semantics: each hazard is ordered, readers overlap, explicit
 * dependencies order unrelated tasks, tasks may submit tasks, waiting for
 * one task and for all. */
#include "common.h"

#include "internal.h"

#include <stdbool.h>

/* A cell that tasks read and write, with a record of what they saw. */
typedef struct {
  _Atomic int value;
  _Atomic int seen[8];
} cell;

typedef struct {
  cell *c;
  int slot;     /* where to record what was read */
  int write;    /* value to write, if a writer */
  unsigned ms;  /* how long to take */
} op;

static void do_write(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const op *o = args;
  cell *c = b[0].ptr;
  sleep_ms(o->ms);
  atomic_store(&c->value, o->write);
}

static void do_read(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const op *o = args;
  cell *c = b[0].ptr;
  int before = atomic_load(&c->value);
  sleep_ms(o->ms);
  /* a reader that sees the value change under it was not protected */
  atomic_store(&c->seen[o->slot], atomic_load(&c->value) == before ? before : -1);
}

static const tdm_codelet cl_write = {.name = "write", .cpu_fn = do_write,
                                     .nbuffers = 1, .modes = {TDM_W}};
static const tdm_codelet cl_rw = {.name = "rw", .cpu_fn = do_write,
                                  .nbuffers = 1, .modes = {TDM_RW}};
static const tdm_codelet cl_read = {.name = "read", .cpu_fn = do_read,
                                    .nbuffers = 1, .modes = {TDM_R}};

static void submit_op(tdm_runtime *rt, const tdm_codelet *cl, tdm_handle *h, op o) {
  tdm_task_desc d = {.codelet = cl, .handles = {h}, .args = &o, .args_size = sizeof o};
  assert_int_equal(tdm_submit(rt, &d), TDM_OK);
}

static void test_read_after_write(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  cell c = {0};
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &c, 1, sizeof c, &h), TDM_OK);
  /* a slow writer, then a reader: the reader must see the write */
  submit_op(rt, &cl_write, h, (op){&c, 0, 42, 50});
  submit_op(rt, &cl_read, h, (op){&c, 0, 0, 0});
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&c.seen[0]), 42);
  tdm_runtime_destroy(rt);
}

static void test_write_after_read(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  cell c = {.value = 7};
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &c, 1, sizeof c, &h), TDM_OK);
  /* slow readers, then a writer: the readers must see 7 throughout */
  submit_op(rt, &cl_read, h, (op){&c, 0, 0, 50});
  submit_op(rt, &cl_read, h, (op){&c, 1, 0, 30});
  submit_op(rt, &cl_write, h, (op){&c, 0, 9, 0});
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&c.seen[0]), 7);
  assert_int_equal(atomic_load(&c.seen[1]), 7);
  assert_int_equal(atomic_load(&c.value), 9);
  tdm_runtime_destroy(rt);
}

static void test_write_after_write(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  cell c = {0};
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &c, 1, sizeof c, &h), TDM_OK);
  /* a slow W, a fast W, a slow RW, a fast W: the last submitted wins */
  submit_op(rt, &cl_write, h, (op){&c, 0, 1, 40});
  submit_op(rt, &cl_write, h, (op){&c, 0, 2, 0});
  submit_op(rt, &cl_rw, h, (op){&c, 0, 3, 30});
  submit_op(rt, &cl_write, h, (op){&c, 0, 4, 0});
  assert_int_equal(tdm_handle_unregister(h), TDM_OK); /* waits */
  assert_int_equal(atomic_load(&c.value), 4);
  tdm_runtime_destroy(rt);
}

/* Readers of the same version run at the same time: each waits (up to a
 * generous timeout) until the other has started. */
typedef struct {
  _Atomic int started;
  _Atomic int overlapped;
} meet;

static void meet_reader(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)n;
  meet *m = *(meet *const *)args;
  atomic_fetch_add(&m->started, 1);
  double end = now_s() + 10.0;
  while (atomic_load(&m->started) < 2 && now_s() < end)
    sleep_ms(1);
  if (atomic_load(&m->started) >= 2)
    atomic_fetch_add(&m->overlapped, 1);
}

static void test_readers_overlap(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  int x = 0;
  meet m = {0};
  meet *pm = &m;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &h), TDM_OK);
  static const tdm_codelet cl = {.name = "meet", .cpu_fn = meet_reader,
                                 .nbuffers = 1, .modes = {TDM_R}};
  tdm_task_desc d = {.codelet = &cl, .handles = {h}, .args = &pm, .args_size = sizeof pm};
  assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&m.overlapped), 2);
  tdm_runtime_destroy(rt);
}

/* An explicit dependency orders tasks that share no data. */
static _Atomic int flag_a;
static _Atomic int b_saw;
static void task_a(const tdm_buffer *b, const void *args, size_t n) {
  (void)b; (void)args; (void)n;
  sleep_ms(50);
  atomic_store(&flag_a, 1);
}
static void task_b(const tdm_buffer *b, const void *args, size_t n) {
  (void)b; (void)args; (void)n;
  atomic_store(&b_saw, atomic_load(&flag_a));
}

static void test_explicit_dependency(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  static const tdm_codelet ca = {.name = "a", .cpu_fn = task_a},
                           cb = {.name = "b", .cpu_fn = task_b};
  tdm_task *a, *b;
  atomic_store(&flag_a, 0);
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &ca}, &a), TDM_OK);
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cb}, &b), TDM_OK);
  assert_int_equal(tdm_task_depends_on(b, a), TDM_OK);
  /* b cannot go before a is submitted */
  assert_int_equal(tdm_task_submit(b), TDM_ERR_DEP_NOT_SUBMITTED);
  assert_int_equal(tdm_task_submit(a), TDM_OK);
  assert_int_equal(tdm_task_submit(b), TDM_OK);
  assert_int_equal(tdm_task_wait(b), TDM_OK);
  assert_int_equal(atomic_load(&b_saw), 1);
  /* a dependency on a finished task is already satisfied */
  tdm_task *c;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cb}, &c), TDM_OK);
  assert_int_equal(tdm_task_depends_on(c, a), TDM_OK);
  assert_int_equal(tdm_task_submit(c), TDM_OK);
  assert_int_equal(tdm_task_wait(c), TDM_OK);
  /* a dependency on a task discarded unsubmitted no longer holds back */
  tdm_task *gone, *d;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &ca}, &gone), TDM_OK);
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cb}, &d), TDM_OK);
  assert_int_equal(tdm_task_depends_on(d, gone), TDM_OK);
  tdm_task_release(gone);
  assert_int_equal(tdm_task_submit(d), TDM_OK);
  assert_int_equal(tdm_task_wait(d), TDM_OK);
  tdm_task_release(d);
  tdm_task_release(a);
  tdm_task_release(b);
  tdm_task_release(c);
  tdm_runtime_destroy(rt);
}

/* Tasks that submit tasks: a binary tree of depth 12 built from inside
 * tasks, each leaf adding one. */
typedef struct {
  tdm_runtime *rt;
  _Atomic long *leaves;
  int depth;
} tree_args;

static void tree(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)n;
  tree_args a = *(const tree_args *)args;
  if (a.depth == 0) {
    atomic_fetch_add(a.leaves, 1);
    return;
  }
  static const tdm_codelet cl = {.name = "tree", .cpu_fn = tree};
  a.depth--;
  /* no cmocka assertion on a worker thread: a failed submit shows as
   * missing leaves */
  for (int i = 0; i < 2; i++)
    tdm_submit(a.rt, &(tdm_task_desc){.codelet = &cl, .args = &a, .args_size = sizeof a});
}

static void test_nested_submission(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(0, NULL);
  _Atomic long leaves = 0;
  tree_args a = {rt, &leaves, 12};
  static const tdm_codelet cl = {.name = "tree", .cpu_fn = tree};
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .args = &a,
                                                    .args_size = sizeof a}),
                   TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&leaves), 1 << 12);
  tdm_runtime_destroy(rt);
}

/* A task that submits many independent tasks (a nested producer): the
 * other workers take them from its deque, several at a time when it holds
 * many (worker.c, steal_more); each runs exactly once. */
#define NESTED_N 100000
typedef struct {
  tdm_runtime *rt;
  _Atomic unsigned char *runs;
} producer_args;

static void count_run(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)n;
  const struct {
    _Atomic unsigned char *runs;
    long i;
  } *a = args;
  atomic_fetch_add(&a->runs[a->i], 1);
}

static void produce(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)n;
  const producer_args *p = args;
  static const tdm_codelet cl = {.name = "counted", .cpu_fn = count_run};
  for (long i = 0; i < NESTED_N; i++) {
    struct {
      _Atomic unsigned char *runs;
      long i;
    } a = {p->runs, i};
    /* no cmocka assertion on a worker: a failed submit shows as a task
     * that ran 0 times */
    tdm_submit(p->rt, &(tdm_task_desc){.codelet = &cl, .args = &a, .args_size = sizeof a});
  }
}

static void test_nested_producer(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  producer_args p = {rt, calloc(NESTED_N, 1)};
  assert_non_null(p.runs);
  static const tdm_codelet cl = {.name = "producer", .cpu_fn = produce};
  for (int round = 0; round < 3; round++) {
    memset((void *)p.runs, 0, NESTED_N);
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .args = &p,
                                                      .args_size = sizeof p}),
                     TDM_OK);
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    for (long i = 0; i < NESTED_N; i++)
      if (p.runs[i] != 1)
        fail_msg("round %d: task %ld ran %d times", round, i, (int)p.runs[i]);
  }
  free((void *)p.runs);
  tdm_runtime_destroy(rt);
}

/* A task with many predecessors: its edges past the few kept in the
 * task come from the task pool (up to TDM_POOL_EDGES) or the heap (more).
 * The predecessors are held at a gate until the task is submitted, so
 * that each needs its edge; the task must see every one of them done. */
typedef struct {
  _Atomic int open;
  _Atomic int done;
  _Atomic int seen; /* done, as the last task saw it */
} gate;

static void gated(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)n;
  gate *g = *(gate *const *)args;
  double end = now_s() + 10.0;
  while (!atomic_load(&g->open) && now_s() < end)
    sleep_ms(1);
  atomic_fetch_add(&g->done, 1);
}

static void last(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)n;
  gate *g = *(gate *const *)args;
  atomic_store(&g->seen, atomic_load(&g->done));
}

static void test_many_predecessors(void **state) {
  (void)state;
  static const unsigned counts[] = {4, 5, 19, 20, 21, 64};
  tdm_runtime *rt = test_runtime(4, NULL);
  double x = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &h), TDM_OK);
  static const tdm_codelet reader = {.name = "gated reader", .cpu_fn = gated,
                                     .nbuffers = 1, .modes = {TDM_R}};
  static const tdm_codelet writer = {.name = "writer", .cpu_fn = last,
                                     .nbuffers = 1, .modes = {TDM_W}};
  static const tdm_codelet plain = {.name = "gated", .cpu_fn = gated};
  static const tdm_codelet joiner = {.name = "join", .cpu_fn = last};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    unsigned n = counts[c];
    /* implicit: n readers of h, then a writer of h */
    gate g = {0};
    gate *gp = &g;
    for (unsigned i = 0; i < n; i++)
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &reader, .handles = {h},
                                                        .args = &gp, .args_size = sizeof gp}),
                       TDM_OK);
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &writer, .handles = {h},
                                                      .args = &gp, .args_size = sizeof gp}),
                     TDM_OK);
    atomic_store(&g.open, 1);
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    assert_int_equal(atomic_load(&g.seen), (int)n);

    /* explicit: a task that depends on n others */
    gate e = {0};
    gate *ep = &e;
    tdm_task *deps[64], *join;
    assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &joiner, .args = &ep,
                                                           .args_size = sizeof ep},
                                     &join),
                     TDM_OK);
    for (unsigned i = 0; i < n; i++) {
      assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &plain, .args = &ep,
                                                             .args_size = sizeof ep},
                                       &deps[i]),
                       TDM_OK);
      assert_int_equal(tdm_task_depends_on(join, deps[i]), TDM_OK);
      assert_int_equal(tdm_task_submit(deps[i]), TDM_OK);
    }
    assert_int_equal(tdm_task_submit(join), TDM_OK);
    atomic_store(&e.open, 1);
    assert_int_equal(tdm_task_wait(join), TDM_OK);
    assert_int_equal(atomic_load(&e.seen), (int)n);
    for (unsigned i = 0; i < n; i++)
      tdm_task_release(deps[i]);
    tdm_task_release(join);
  }
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* The callback runs after the task and before its successors. */
static _Atomic int order[3];
static _Atomic int order_n;
static void mark_task(const tdm_buffer *b, const void *args, size_t n) {
  (void)b; (void)n;
  order[atomic_fetch_add(&order_n, 1)] = *(const int *)args;
}
static void mark_cb(void *data) { order[atomic_fetch_add(&order_n, 1)] = (int)(intptr_t)data; }

static void test_callback_and_task_wait(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  int x;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &h), TDM_OK);
  static const tdm_codelet cl = {.name = "mark", .cpu_fn = mark_task,
                                 .nbuffers = 1, .modes = {TDM_RW}};
  int one = 1, three = 3;
  tdm_task *t1, *t2;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl, .handles = {h},
      .args = &one, .args_size = sizeof one, .callback = mark_cb, .callback_data = (void *)2}, &t1), TDM_OK);
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl, .handles = {h},
      .args = &three, .args_size = sizeof three}, &t2), TDM_OK);
  assert_int_equal(tdm_task_submit(t1), TDM_OK);
  assert_int_equal(tdm_task_submit(t2), TDM_OK);
  assert_int_equal(tdm_task_wait(t2), TDM_OK);
  assert_int_equal(atomic_load(&order_n), 3);
  assert_int_equal(order[0], 1);
  assert_int_equal(order[1], 2);
  assert_int_equal(order[2], 3);
  tdm_task_release(t1);
  tdm_task_release(t2);
  tdm_runtime_destroy(rt);
}

/* Arguments are copied at submit: changing the caller's copy afterwards
 * has no effect; large arguments too. */
typedef struct { char bytes[300]; } big;
static void check_big(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  const big *g = args;
  int *ok = b[0].ptr;
  *ok = n == sizeof(big) && g->bytes[0] == 'a' && g->bytes[299] == 'z';
}

static void test_args_copied(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  int ok = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &ok, 1, sizeof ok, &h), TDM_OK);
  static const tdm_codelet cl = {.name = "big", .cpu_fn = check_big,
                                 .nbuffers = 1, .modes = {TDM_W}};
  /* hold the handle so the task cannot start before we scribble */
  assert_int_equal(tdm_handle_acquire(h, TDM_RW), TDM_OK);
  big g;
  memset(&g, 'a', sizeof g);
  g.bytes[299] = 'z';
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .handles = {h},
                                                    .args = &g, .args_size = sizeof g}),
                   TDM_OK);
  memset(&g, 0, sizeof g);
  assert_int_equal(tdm_handle_release(h), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(ok, 1);
  tdm_runtime_destroy(rt);
}

/* ---- the cycle check ---------------------------------------------------- */

enum { GN = 48 };
static _Atomic int run_order[GN];
static _Atomic int run_clock;

static void record_run(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)n;
  atomic_store(&run_order[*(const int *)args], atomic_fetch_add(&run_clock, 1));
}

/* Does `from` reach `to` through the accepted edges (dep[x][y]: x depends
 * on y) of tasks still alive? */
static bool reaches(bool dep[GN][GN], const bool *alive, int from, int to) {
  bool seen[GN] = {false};
  int stack[GN], n = 0;
  stack[n++] = from;
  seen[from] = true;
  while (n) {
    int x = stack[--n];
    if (x == to)
      return true;
    for (int y = 0; y < GN; y++)
      if (dep[x][y] && alive[y] && !seen[y]) {
        seen[y] = true;
        stack[n++] = y;
      }
  }
  return false;
}

/* Random edges between created tasks, added in any order of creation and
 * with tasks discarded on the way: each is refused exactly when it would
 * close a cycle (checked against a search of the accepted graph); then
 * the tasks, submitted in an order their dependencies allow, run after
 * every task they depend on. */
static void cycle_check_random(uint64_t gap) {
  tdm_runtime *rt = test_runtime(2, NULL);
  rt->graph.gap = gap;
  static const tdm_codelet cl = {.name = "node", .cpu_fn = record_run};
  uint64_t rng = 0x2545f4914f6cdd1dull;
  for (int round = 0; round < 20; round++) {
    tdm_task *t[GN];
    bool dep[GN][GN] = {{false}}, alive[GN], submitted[GN] = {false};
    for (int i = 0; i < GN; i++) {
      assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl, .args = &i,
                                                            .args_size = sizeof i},
                                       &t[i]),
                       TDM_OK);
      alive[i] = true;
      atomic_store(&run_order[i], -1);
    }
    unsigned refused = 0;
    for (int e = 0; e < 6 * GN; e++) {
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      int a = (int)(rng % GN), b = (int)((rng >> 20) % GN);
      if (rng % 97 == 0 && alive[a]) { /* now and then a task is discarded */
        tdm_task_release(t[a]);
        alive[a] = false;
        continue;
      }
      if (!alive[a] || !alive[b])
        continue;
      bool cycle = reaches(dep, alive, b, a); /* a would wait for b */
      tdm_status st = tdm_task_depends_on(t[a], t[b]);
      assert_int_equal(st, cycle ? TDM_ERR_CYCLE : TDM_OK);
      if (!cycle)
        dep[a][b] = true;
      refused += cycle;
    }
    assert_true(refused > 0); /* the graphs are dense enough to try cycles */
    /* the labels the check keeps follow its order (those given again
     * around a gap too small included) */
    for (tdm_links *l = rt->graph.head; l && l->next; l = l->next)
      assert_true(l->label < l->next->label);
    /* submit in waves: a task whose alive dependencies are all submitted */
    for (int done = 0, progress = 1; progress;) {
      progress = 0;
      for (int i = 0; i < GN; i++) {
        if (!alive[i] || submitted[i])
          continue;
        bool ready = true;
        for (int j = 0; j < GN; j++)
          ready = ready && !(dep[i][j] && alive[j] && !submitted[j]);
        if (ready) {
          assert_int_equal(tdm_task_submit(t[i]), TDM_OK);
          submitted[i] = true;
          progress = 1;
          done++;
        }
      }
    }
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    for (int i = 0; i < GN; i++) {
      if (!alive[i])
        continue;
      assert_true(submitted[i]); /* acyclic: every task could go */
      for (int j = 0; j < GN; j++)
        if (dep[i][j] && alive[j])
          assert_true(atomic_load(&run_order[j]) < atomic_load(&run_order[i]));
      tdm_task_release(t[i]);
    }
  }
  tdm_runtime_destroy(rt);
}

static void test_cycle_check_random(void **state) {
  (void)state;
  cycle_check_random(UINT64_C(1) << 32);
}

/* The same with labels 2 apart: the order's labels are given again and
 * again (a seam: 2^32 apart, that is rare). */
static void test_cycle_check_random_relabelling(void **state) {
  (void)state;
  cycle_check_random(2);
}

/* A long chain and a 2-wide lattice of created tasks (the shapes that took
 * exponential or quadratic time before the check kept an order), created
 * from the sources or from the sinks: accepted, closing them is refused,
 * and every task runs after the tasks of the layer before. Their timings
 * are in bench-checks. */
enum { LEN = 20000 };
static _Atomic bool node_done[LEN];
static _Atomic int order_broken;
static int lattice_width;

static void lattice_node(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)n;
  int k = *(const int *)args, layer = k / lattice_width;
  for (int j = 0; layer > 0 && j < lattice_width; j++)
    if (!atomic_load(&node_done[(layer - 1) * lattice_width + j]))
      atomic_store(&order_broken, 1);
  atomic_store(&node_done[k], true);
}

static void test_long_chain_and_lattice(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  static const tdm_codelet cl = {.name = "node", .cpu_fn = lattice_node};
  static tdm_task *t[LEN]; /* node k of the graph */
  for (int shape = 0; shape < 4; shape++) {
    int width = shape % 2 ? 2 : 1, n = LEN / width * width;
    bool sinks_first = shape >= 2;
    lattice_width = width;
    atomic_store(&order_broken, 0);
    for (int i = 0; i < n; i++) {
      int k = sinks_first ? n - 1 - i : i;
      atomic_store(&node_done[k], false);
      assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl, .args = &k,
                                                            .args_size = sizeof k},
                                       &t[k]),
                       TDM_OK);
    }
    for (int k = width; k < n; k++)
      for (int j = 0; j < width; j++)
        assert_int_equal(tdm_task_depends_on(t[k], t[(k / width - 1) * width + j]), TDM_OK);
    /* closing the graph on itself is refused */
    assert_int_equal(tdm_task_depends_on(t[0], t[n - 1]), TDM_ERR_CYCLE);
    for (int k = 0; k < n; k++)
      assert_int_equal(tdm_task_submit(t[k]), TDM_OK);
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    assert_int_equal(atomic_load(&order_broken), 0);
    for (int k = 0; k < n; k++) {
      assert_true(atomic_load(&node_done[k]));
      tdm_task_release(t[k]);
    }
  }
  tdm_runtime_destroy(rt);
}

/* ---- deferred ends ------------------------------------------------------ */

/* A deferred task's end, made by a thread of the test after a pause:
 * the value it writes then is the task's output. */
typedef struct {
  tdm_deferred *d;
  int64_t *out;
  int64_t value;
  tdm_status status;
} ender;

static void *end_later(void *arg) {
  ender *e = arg;
  sleep_ms(30);
  *e->out = e->value;
  tdm_deferred_end(e->d, e->status);
  free(e);
  return NULL;
}

typedef struct {
  int64_t value;
  tdm_status status;
  bool now; /* ended from the function itself */
} defer_args;

static void start_and_defer(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const defer_args *a = args;
  tdm_deferred *d = tdm_task_defer();
  assert_non_null(d);
  assert_null(tdm_task_defer()); /* once a run */
  if (a->now) {
    *(int64_t *)b[0].ptr = a->value;
    tdm_deferred_end(d, a->status);
    return;
  }
  ender *e = malloc(sizeof *e);
  assert_non_null(e);
  *e = (ender){d, b[0].ptr, a->value, a->status};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, end_later, e), 0);
  pthread_detach(th);
}

static void copy_plus_one(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  *(int64_t *)b[1].ptr = *(const int64_t *)b[0].ptr + 1;
}

static const tdm_codelet defer_cl = {.name = "defer", .cpu_fn = start_and_defer, .nbuffers = 1,
                                     .modes = {TDM_W}};
static const tdm_codelet defer_pinned_cl = {.name = "defer-pinned", .cpu_fn = start_and_defer,
                                            .nbuffers = 1, .modes = {TDM_W}};
static const tdm_codelet plus_one_cl = {.name = "plus-one", .cpu_fn = copy_plus_one,
                                        .nbuffers = 2, .modes = {TDM_R, TDM_W}};

/* One deferred writer and a reader after it, on rt: the reader sees what
 * the end wrote, or is cancelled when the end says the task failed. */
static void deferred_pair(tdm_runtime *rt, defer_args a, const tdm_codelet *cl,
                          unsigned flags) {
  int64_t x = 0, y = 0;
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, &y, 1, sizeof y, &hy), TDM_OK);
  tdm_task_desc d = {.codelet = cl, .handles = {hx}, .args = &a, .args_size = sizeof a,
                     .flags = flags};
  assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  tdm_task_desc r = {.codelet = &plus_one_cl, .handles = {hx, hy}};
  assert_int_equal(tdm_submit(rt, &r), TDM_OK);
  if (flags & TDM_TASK_MAIN_THREAD)
    while (tdm_dispatch(rt) == 0)
      sleep_ms(1);
  tdm_status st = tdm_wait_all(rt);
  assert_int_equal(st, a.status ? TDM_ERR_TASK_FAILED : TDM_OK);
  assert_int_equal(tdm_handle_unregister(hx), a.status ? TDM_ERR_LOST : TDM_OK);
  assert_int_equal(tdm_handle_unregister(hy), a.status ? TDM_ERR_LOST : TDM_OK);
  if (!a.status) {
    assert_int_equal(x, a.value);
    assert_int_equal(y, a.value + 1);
  } else {
    assert_int_equal(y, 0); /* the reader was cancelled */
  }
}

static void test_deferred_end(void **state) {
  (void)state;
  assert_null(tdm_task_defer()); /* not in a task */
  assert_int_equal(tdm_deferred_end(NULL, TDM_OK), TDM_ERR_INVALID_ARG);
  tdm_runtime *rt = test_runtime(2, NULL);
  deferred_pair(rt, (defer_args){41, TDM_OK, false}, &defer_cl, 0);
  deferred_pair(rt, (defer_args){42, TDM_OK, true}, &defer_cl, 0);
  deferred_pair(rt, (defer_args){43, TDM_ERR_SYSTEM, false}, &defer_cl, 0);
  deferred_pair(rt, (defer_args){44, TDM_OK, false}, &defer_pinned_cl, TDM_TASK_MAIN_THREAD);
  tdm_runtime_destroy(rt);
  /* the reader on an emulated device with memory of its own: the host's
   * version, written before the end, is what goes there */
  rt = test_runtime_emulated(2, "gpu:speedup=4,latency=2us,bandwidth=8G", NULL);
  for (int i = 0; i < 4; i++)
    deferred_pair(rt, (defer_args){45 + i, TDM_OK, i % 2 == 0}, &defer_cl, TDM_TASK_CPU_ONLY);
  tdm_runtime_destroy(rt);
}

/* ---- functions idle workers call ----------------------------------------------- */

/* A task that defers its end and leaves the token for an idle function
 * (as libtandem-mpi's requests are found complete by idle workers). */
static _Atomic(tdm_deferred *) parked;
static _Atomic int idle_calls, idle_inside, idle_overlaps;
static int64_t *parked_out;

static void defer_to_idle(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  parked_out = b[0].ptr;
  atomic_store(&parked, tdm_task_defer());
}

static void idle_fn(void *data) {
  if (atomic_fetch_add(&idle_inside, 1))
    atomic_fetch_add(&idle_overlaps, 1);
  atomic_fetch_add(&idle_calls, 1);
  tdm_deferred *d = atomic_exchange(&parked, NULL);
  if (d) {
    *parked_out = *(const int64_t *)data;
    tdm_deferred_end(d, TDM_OK);
  }
  atomic_fetch_sub(&idle_inside, 1);
}

static void nothing_fn(void *data) {
  (void)data;
}

/* From an idle function, adding or removing one is refused (the worker
 * holds the list: it would wait for itself). */
static _Atomic int refused_inside;
static tdm_runtime *inside_rt;

static void meddling_fn(void *data) {
  (void)data;
  if (tdm_runtime_add_idle_fn(inside_rt, nothing_fn, NULL) == TDM_ERR_IN_TASK &&
      tdm_runtime_remove_idle_fn(inside_rt, meddling_fn, NULL) == TDM_ERR_IN_TASK)
    atomic_fetch_add(&refused_inside, 1);
}

/* A task on its own, waited for: the workers go idle after it. */
static void one_task(tdm_runtime *rt) {
  int64_t z = 0;
  tdm_handle *hz;
  assert_int_equal(tdm_register_vector(rt, &z, 1, sizeof z, &hz), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &plus_one_cl,
                                                   .handles = {hz, hz}}), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hz), TDM_OK);
}

/* The idle workers call it (one at a time): it ends deferred tasks,
 * their readers follow; removed, it is called no more; 8 at most. */
static void test_idle_fns(void **state) {
  (void)state;
  static const tdm_codelet park_cl = {.name = "park", .cpu_fn = defer_to_idle, .nbuffers = 1,
                                      .modes = {TDM_W}};
  tdm_runtime *rt = test_runtime(2, NULL);
  int64_t value = 70;
  assert_int_equal(tdm_runtime_add_idle_fn(NULL, idle_fn, &value), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_runtime_add_idle_fn(rt, NULL, &value), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_runtime_remove_idle_fn(rt, idle_fn, &value), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_runtime_add_idle_fn(rt, idle_fn, &value), TDM_OK);
  for (int round = 0; round < 50; round++) {
    int64_t x = 0, y = 0;
    tdm_handle *hx, *hy;
    assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &hx), TDM_OK);
    assert_int_equal(tdm_register_vector(rt, &y, 1, sizeof y, &hy), TDM_OK);
    value = 70 + round;
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &park_cl, .handles = {hx}}),
                     TDM_OK);
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &plus_one_cl,
                                                     .handles = {hx, hy}}), TDM_OK);
    assert_int_equal(tdm_wait_all(rt), TDM_OK); /* (only an idle worker ends it) */
    assert_int_equal(y, 70 + round + 1);
    assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
    assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  }
  assert_int_equal(atomic_load(&idle_overlaps), 0);
  /* up to TDM_MAX_IDLE_FNS, then refused */
  static int slots[TDM_MAX_IDLE_FNS];
  for (int i = 1; i < TDM_MAX_IDLE_FNS; i++)
    assert_int_equal(tdm_runtime_add_idle_fn(rt, nothing_fn, &slots[i]), TDM_OK);
  assert_int_equal(tdm_runtime_add_idle_fn(rt, nothing_fn, &slots[0]), TDM_ERR_BUSY);
  for (int i = 1; i < TDM_MAX_IDLE_FNS; i++)
    assert_int_equal(tdm_runtime_remove_idle_fn(rt, nothing_fn, &slots[i]), TDM_OK);
  /* removed: no worker calls it again */
  assert_int_equal(tdm_runtime_remove_idle_fn(rt, idle_fn, &value), TDM_OK);
  int calls = atomic_load(&idle_calls);
  assert_true(calls >= 50);
  for (int i = 0; i < 20; i++) {
    one_task(rt);
  }
  sleep_ms(2);
  assert_int_equal(atomic_load(&idle_calls), calls);
  inside_rt = rt;
  assert_int_equal(tdm_runtime_add_idle_fn(rt, meddling_fn, NULL), TDM_OK);
  for (int i = 0; i < 200 && !atomic_load(&refused_inside); i++) {
    one_task(rt);
  }
  assert_true(atomic_load(&refused_inside) > 0);
  assert_int_equal(tdm_runtime_remove_idle_fn(rt, meddling_fn, NULL), TDM_OK);
  tdm_runtime_destroy(rt); /* (joins the workers: none stuck) */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_after_write),
      cmocka_unit_test(test_write_after_read),
      cmocka_unit_test(test_write_after_write),
      cmocka_unit_test(test_readers_overlap),
      cmocka_unit_test(test_explicit_dependency),
      cmocka_unit_test(test_nested_submission),
      cmocka_unit_test(test_nested_producer),
      cmocka_unit_test(test_many_predecessors),
      cmocka_unit_test(test_callback_and_task_wait),
      cmocka_unit_test(test_args_copied),
      cmocka_unit_test(test_cycle_check_random),
      cmocka_unit_test(test_cycle_check_random_relabelling),
      cmocka_unit_test(test_long_chain_and_lattice),
      cmocka_unit_test(test_deferred_end),
      cmocka_unit_test(test_idle_fns),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
