/*
 * The access modes that do not serialise: TDM_COMMUTE (any order, one at
 * a time) and TDM_REDUX (private lanes combined when the data is next
 * read). Each test would fail if the mode fell back to TDM_RW's order
 * (a task that must run first waits for one that comes later), or if
 * the exclusion or the combination were missing (lost updates, wrong
 * sums).
 */
#include "common.h"
#include "sum-words.h"

#include <math.h>
#include <stdbool.h>

/* ---- TDM_COMMUTE ------------------------------------------------------- */

/* A counter updated in place by a read, a pause and a write: two tasks
 * inside at once lose an update, and `inside` sees them. */
static _Atomic int inside[4], overlaps;

typedef struct {
  uint64_t add;
  unsigned pause_us;
  unsigned which[2]; /* the counters' slots in `inside` */
  _Atomic int *started; /* set when it starts (or NULL) */
  _Atomic int *gate;    /* it waits for this first (or NULL) */
} bump_args;

static void bump_one(uint64_t *v, unsigned which, const bump_args *a) {
  if (atomic_fetch_add(&inside[which], 1) != 0)
    atomic_fetch_add(&overlaps, 1);
  uint64_t x = *v;
  if (a->pause_us)
    usleep(a->pause_us);
  *v = x + a->add;
  atomic_fetch_sub(&inside[which], 1);
}

/* Buffer 0 (and 1, when there are two) commute; the last buffer, if
 * any beyond, is read. */
static void bump(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const bump_args *a = args;
  if (a->started)
    atomic_store(a->started, 1);
  if (a->gate)
    wait_flag(a->gate, 20);
  bump_one(b[0].ptr, a->which[0], a);
}

static void bump_two(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const bump_args *a = args;
  bump_one(b[0].ptr, a->which[0], a);
  bump_one(b[1].ptr, a->which[1], a);
}

static void read_into(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  *(uint64_t *)b[1].ptr = *(const uint64_t *)b[0].ptr;
}

static void gate_wait(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  _Atomic int *gate = *(_Atomic int *const *)args;
  wait_flag(gate, 20);
  (*(uint64_t *)b[0].ptr)++;
}

static const tdm_codelet commute_cl = {.name = "bump", .cpu_fn = bump, .nbuffers = 1,
                                       .modes = {TDM_COMMUTE}};
/* a commuting update that also reads a second handle */
static const tdm_codelet commute_read_cl = {.name = "bump-after", .cpu_fn = bump, .nbuffers = 2,
                                            .modes = {TDM_COMMUTE, TDM_R}};
static const tdm_codelet commute_two_cl = {.name = "bump2", .cpu_fn = bump_two, .nbuffers = 2,
                                           .modes = {TDM_COMMUTE, TDM_COMMUTE}};
static const tdm_codelet read_cl = {.name = "read", .cpu_fn = read_into, .nbuffers = 2,
                                    .modes = {TDM_R, TDM_W}};
static const tdm_codelet gate_cl = {.name = "gate", .cpu_fn = gate_wait, .nbuffers = 1,
                                    .modes = {TDM_RW}};

/* n words at p, registered with rt. */
static tdm_handle *words(tdm_runtime *rt, uint64_t *p, size_t n) {
  tdm_handle *h = NULL;
  assert_int_equal(tdm_register_vector(rt, p, n, sizeof *p, &h), TDM_OK);
  return h;
}

/* A task writing hg that waits until *gate is set: what reads hg
 * waits for the test. */
static void submit_gate(tdm_runtime *rt, tdm_handle *hg, _Atomic int *const *gate) {
  tdm_task_desc w = {.codelet = &gate_cl, .handles = {hg}, .args = gate, .args_size = sizeof *gate};
  assert_int_equal(tdm_submit(rt, &w), TDM_OK);
}

/* Many updates at once on 4 workers: none lost, none overlapping, and
 * a reader submitted after them sees them all. */
static void test_commute_exclusive(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  uint64_t v = 0, seen = 0;
  tdm_handle *hv, *hs;
  hv = words(rt, &v, 1);
  hs = words(rt, &seen, 1);
  atomic_store(&overlaps, 0);
  uint64_t want = 0;
  for (unsigned i = 0; i < 200; i++) {
    bump_args a = {.add = i * 7 + 1, .pause_us = i % 8 == 0 ? 50 : 0};
    want += a.add;
    tdm_task_desc d = {.codelet = &commute_cl, .handles = {hv}, .args = &a, .args_size = sizeof a};
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  }
  tdm_task_desc r = {.codelet = &read_cl, .handles = {hv, hs}};
  assert_int_equal(tdm_submit(rt, &r), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&overlaps), 0);
  assert_int_equal(seen, want);
  assert_int_equal(tdm_handle_unregister(hv), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hs), TDM_OK);
  assert_int_equal(v, want);
  tdm_runtime_destroy(rt);
}

/* Any order: the first update also reads a handle whose writer waits for
 * a gate; the second, submitted after it, must run meanwhile (in TDM_RW
 * it would wait for the first: the gate is opened only once it ran). */
static void test_commute_any_order(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  uint64_t v = 0, g = 0;
  tdm_handle *hv, *hg;
  hv = words(rt, &v, 1);
  hg = words(rt, &g, 1);
  _Atomic int gate = 0, second = 0;
  _Atomic int *gp = &gate;
  submit_gate(rt, hg, &gp);
  bump_args a1 = {.add = 1};
  tdm_task_desc d1 = {.codelet = &commute_read_cl, .handles = {hv, hg}, .args = &a1,
                      .args_size = sizeof a1};
  assert_int_equal(tdm_submit(rt, &d1), TDM_OK);
  bump_args a2 = {.add = 10, .started = &second};
  tdm_task_desc d2 = {.codelet = &commute_cl, .handles = {hv}, .args = &a2,
                      .args_size = sizeof a2};
  assert_int_equal(tdm_submit(rt, &d2), TDM_OK);
  int ran = wait_flag(&second, 10);
  atomic_store(&gate, 1);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_true(ran); /* the later update did not wait for the earlier */
  assert_int_equal(tdm_handle_unregister(hv), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hg), TDM_OK);
  assert_int_equal(v, 11);
  tdm_runtime_destroy(rt);
}

/* Tasks that commute on two handles at once, in both orders of naming,
 * beside tasks on one of them: no deadlock, no overlap, nothing lost;
 * an ordinary writer between runs orders them. */
static void test_commute_two_handles(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  uint64_t a = 0, b = 0, out = 0;
  tdm_handle *ha, *hb, *ho;
  ha = words(rt, &a, 1);
  hb = words(rt, &b, 1);
  ho = words(rt, &out, 1);
  atomic_store(&overlaps, 0);
  uint64_t wa = 0, wb = 0, rng = 7;
  for (unsigned i = 0; i < 600; i++) {
    rng = test_mix64(rng);
    bump_args x = {.add = rng % 1000, .pause_us = rng % 16 == 0 ? 20 : 0};
    tdm_task_desc d = {.args = &x, .args_size = sizeof x};
    switch (rng >> 40 & 3) {
    case 0:
      x.which[1] = 1;
      d.codelet = &commute_two_cl, d.handles[0] = ha, d.handles[1] = hb;
      wa += x.add, wb += x.add;
      break;
    case 1: /* the other order: the same two locks, taken by address */
      x.which[0] = 1;
      d.codelet = &commute_two_cl, d.handles[0] = hb, d.handles[1] = ha;
      wa += x.add, wb += x.add;
      break;
    case 2:
      d.codelet = &commute_cl, d.handles[0] = ha;
      wa += x.add;
      break;
    default:
      if (i % 50 == 0) { /* an ordinary access between runs: read a */
        d.codelet = &read_cl, d.handles[0] = ha, d.handles[1] = ho;
        d.args = NULL, d.args_size = 0;
      } else {
        x.which[0] = 1;
        d.codelet = &commute_cl, d.handles[0] = hb;
        wb += x.add;
      }
    }
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&overlaps), 0);
  assert_int_equal(tdm_handle_unregister(ha), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hb), TDM_OK);
  assert_int_equal(tdm_handle_unregister(ho), TDM_OK);
  assert_int_equal(a, wa);
  assert_int_equal(b, wb);
  tdm_runtime_destroy(rt);
}

/* A member of a run that ends without its update (its group cancelled)
 * makes the run's version lost: the reader after is cancelled, the
 * handle reported lost; the other members still run. */
static void test_commute_member_cancelled(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  uint64_t v = 0, g = 0, seen = 0;
  tdm_handle *hv, *hg, *hs;
  hv = words(rt, &v, 1);
  hg = words(rt, &g, 1);
  hs = words(rt, &seen, 1);
  tdm_group *grp;
  assert_int_equal(tdm_group_create(rt, NULL, &grp), TDM_OK);
  _Atomic int gate = 0;
  _Atomic int *gp = &gate;
  submit_gate(rt, hg, &gp);
  bump_args a = {.add = 1};
  tdm_task_desc d1 = {.codelet = &commute_read_cl, .handles = {hv, hg}, .args = &a,
                      .args_size = sizeof a, .group = grp};
  assert_int_equal(tdm_submit(rt, &d1), TDM_OK);
  tdm_task_desc d2 = {.codelet = &commute_cl, .handles = {hv}, .args = &a, .args_size = sizeof a};
  assert_int_equal(tdm_submit(rt, &d2), TDM_OK);
  tdm_task_desc r = {.codelet = &read_cl, .handles = {hv, hs}};
  assert_int_equal(tdm_submit(rt, &r), TDM_OK);
  assert_int_equal(tdm_group_cancel(grp), TDM_OK);
  atomic_store(&gate, 1);
  tdm_wait_all(rt); /* the cancelled reader is reported */
  assert_int_equal(seen, 0);  /* the reader did not run */
  assert_int_equal(v, 1);     /* the other member did */
  assert_int_equal(tdm_handle_unregister(hv), TDM_ERR_LOST);
  assert_int_equal(tdm_handle_unregister(hg), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hs), TDM_ERR_LOST); /* its writer was cancelled */
  tdm_group_release(grp);
  tdm_runtime_destroy(rt);
}

/* ---- TDM_REDUX --------------------------------------------------------- */

#define WORDS 4

typedef struct {
  uint64_t add[WORDS];
  _Atomic int *started, *gate; /* (or NULL) */
} acc_args;

static void accumulate(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const acc_args *a = args;
  if (a->started)
    atomic_store(a->started, 1);
  if (a->gate)
    wait_flag(a->gate, 20);
  uint64_t *v = b[0].ptr;
  for (int i = 0; i < WORDS; i++)
    v[i] += a->add[i];
}

static const tdm_codelet acc_cl = {.name = "acc", .cpu_fn = accumulate, .nbuffers = 1,
                                   .modes = {TDM_REDUX}};

static void set_sum(tdm_handle *h, unsigned copies) {
  tdm_reduction r = sum_words(copies);
  assert_int_equal(tdm_handle_set_reduction(h, &r), TDM_OK);
}

/* Parallel: the second accumulation (lane 1) runs while the first (lane
 * 0) waits for it; the sums are exact, read by a task, an acquisition,
 * and after unregistration. */
static void test_redux_parallel_and_exact(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  uint64_t v[WORDS] = {5, 6, 7, 8}, seen = 0;
  tdm_handle *hv, *hs;
  hv = words(rt, v, WORDS);
  hs = words(rt, &seen, 1);
  set_sum(hv, 2);
  _Atomic int second = 0;
  acc_args a1 = {{1, 0, 0, 0}, NULL, &second}; /* waits for the second */
  acc_args a2 = {{0, 2, 0, 0}, &second, NULL};
  tdm_task_desc d = {.codelet = &acc_cl, .handles = {hv}, .args = &a1, .args_size = sizeof a1};
  assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  d.args = &a2;
  assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  uint64_t want[WORDS] = {6, 8, 7, 8};
  for (unsigned i = 0; i < 500; i++) {
    acc_args a = {{i, 2 * i, 3 * i + 1, 1}, NULL, NULL};
    for (int k = 0; k < WORDS; k++)
      want[k] += a.add[k];
    d.args = &a;
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  }
  /* a reader: word 0 of the combined sum */
  tdm_task_desc r = {.codelet = &read_cl, .handles = {hv, hs}};
  assert_int_equal(tdm_submit(rt, &r), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_true(atomic_load(&second));
  assert_int_equal(seen, want[0]);
  /* more, then an acquisition combines them */
  acc_args a3 = {{1, 1, 1, 1}, NULL, NULL};
  d.args = &a3;
  assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  for (int k = 0; k < WORDS; k++)
    want[k] += 1;
  assert_int_equal(tdm_handle_acquire(hv, TDM_R), TDM_OK);
  for (int k = 0; k < WORDS; k++)
    assert_int_equal(v[k], want[k]);
  assert_int_equal(tdm_handle_release(hv), TDM_OK);
  /* and unregistration */
  assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  for (int k = 0; k < WORDS; k++)
    want[k] += 1;
  assert_int_equal(tdm_handle_unregister(hv), TDM_OK);
  for (int k = 0; k < WORDS; k++)
    assert_int_equal(v[k], want[k]);
  assert_int_equal(tdm_handle_unregister(hs), TDM_OK);
  tdm_runtime_destroy(rt);
}

/* An accumulation that ends without its update (its group cancelled)
 * makes its lane's version lost, so the combination is cancelled and the
 * handle's version lost: an acquisition says so, nothing is read as a
 * result. An overwrite (TDM_W) makes a version again, and later
 * accumulations count from it. */
static const tdm_codelet acc_after_cl = {.name = "acc-after", .cpu_fn = accumulate,
                                         .nbuffers = 2, .modes = {TDM_REDUX, TDM_R}};

static void test_redux_member_cancelled(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(2, NULL);
  uint64_t v[WORDS] = {0}, g = 0;
  tdm_handle *h, *hg;
  h = words(rt, v, WORDS);
  hg = words(rt, &g, 1);
  set_sum(h, 2);
  tdm_group *grp;
  assert_int_equal(tdm_group_create(rt, NULL, &grp), TDM_OK);
  _Atomic int gate = 0;
  _Atomic int *gp = &gate;
  submit_gate(rt, hg, &gp);
  acc_args a = {{1, 1, 1, 1}, NULL, NULL};
  tdm_task_desc d1 = {.codelet = &acc_after_cl, .handles = {h, hg}, .args = &a,
                      .args_size = sizeof a, .group = grp}; /* lane 0, after the gate */
  assert_int_equal(tdm_submit(rt, &d1), TDM_OK);
  tdm_task_desc d2 = {.codelet = &acc_cl, .handles = {h}, .args = &a, .args_size = sizeof a};
  assert_int_equal(tdm_submit(rt, &d2), TDM_OK); /* lane 1 */
  assert_int_equal(tdm_group_cancel(grp), TDM_OK);
  atomic_store(&gate, 1);
  assert_int_equal(tdm_handle_acquire(h, TDM_R), TDM_ERR_LOST);
  tdm_wait_all(rt);
  /* overwritten: a version again */
  assert_int_equal(tdm_handle_acquire(h, TDM_W), TDM_OK);
  memset(v, 0, sizeof v);
  assert_int_equal(tdm_handle_release(h), TDM_OK);
  for (int i = 0; i < 5; i++)
    assert_int_equal(tdm_submit(rt, &d2), TDM_OK);
  assert_int_equal(tdm_handle_acquire(h, TDM_R), TDM_OK);
  for (int k = 0; k < WORDS; k++)
    assert_int_equal(v[k], 5);
  assert_int_equal(tdm_handle_release(h), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hg), TDM_OK);
  tdm_group_release(grp);
  tdm_runtime_destroy(rt);
}

/* The combination is not idempotent (the tree adds lanes into one
 * another): it must run once. Emulated devices that fail a tenth of
 * their runs, tried again elsewhere, and the verification mode (which
 * runs a device's task a second time) must neither run it twice: each
 * read is the exact count or TDM_ERR_LOST, never another count. */
static void count_one(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  *(uint64_t *)b[0].ptr += 1;
}
static const tdm_codelet one_cl = {.name = "one", .cpu_fn = count_one, .nbuffers = 1,
                                   .modes = {TDM_REDUX}};

static void counts_once(const char *faults, const char *verify, unsigned seeds) {
  for (unsigned seed = 1; seed <= seeds; seed++) {
    char spec[64];
    snprintf(spec, sizeof spec, "%s;seed=%u", faults ? faults : "", seed);
    tdm_config c;
    tdm_config_init(&c);
    c.ignore_env = 1;
    c.nworkers = 2;
    c.bind_workers = 0;
    test_log_if_asked(&c);
    c.sim = "a:speedup=2,memory=shared;b:speedup=2,latency=1us,bandwidth=1G";
    c.sim_time_scale = 1;
    c.scheduler = "random";
    c.faults = faults ? spec : NULL;
    c.verify = verify;
    c.retries = 1;
    c.quarantine_failures = 0;
    tdm_runtime *rt;
    assert_int_equal(tdm_runtime_create(&c, &rt), TDM_OK);
    uint64_t v = 0;
    tdm_handle *h = words(rt, &v, 1);
    set_sum(h, 4);
    for (int round = 0; round < 4; round++) {
      if (tdm_handle_acquire(h, TDM_W) == TDM_OK) {
        v = 0;
        assert_int_equal(tdm_handle_release(h), TDM_OK);
      }
      tdm_task_desc d = {.codelet = &one_cl, .handles = {h}};
      for (int k = 0; k < 20; k++)
        assert_int_equal(tdm_submit(rt, &d), TDM_OK);
      tdm_status st = tdm_handle_acquire(h, TDM_R);
      if (st == TDM_OK) {
        if (v != 20)
          fail_msg("seed %u round %d: %llu counted, 20 submitted, reported OK", seed, round,
                   (unsigned long long)v);
        assert_int_equal(tdm_handle_release(h), TDM_OK);
      } else {
        assert_int_equal(st, TDM_ERR_LOST);
      }
    }
    tdm_wait_all(rt);
    tdm_handle_unregister(h);
    tdm_runtime_destroy(rt);
  }
}

static void test_redux_combined_once(void **state) {
  (void)state;
  counts_once("run:p=0.1", NULL, 30);
  counts_once(NULL, "*:1", 5);
}

/* Floating point: the same submissions give the same bits, however many
 * workers run them and wherever (emulated devices), and those of the
 * documented order (lanes in submission order, then the tree). */
static void f_zero(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  *(double *)b[0].ptr = 0;
}
static void f_add(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  *(double *)b[0].ptr += *(const double *)b[1].ptr;
}
static void f_acc(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  *(double *)b[0].ptr += *(const double *)args;
}
static const tdm_codelet fzero_cl = {.name = "f_zero", .cpu_fn = f_zero, .nbuffers = 1,
                                     .modes = {TDM_W}};
static const tdm_codelet fadd_cl = {.name = "f_add", .cpu_fn = f_add, .nbuffers = 2,
                                    .modes = {TDM_RW, TDM_R}};
static const tdm_codelet facc_cl = {.name = "f_acc", .cpu_fn = f_acc, .nbuffers = 1,
                                    .modes = {TDM_REDUX}};

#define FTASKS 1000
#define FLANES 5

static double term(unsigned i) {
  return 1.0 / (1.0 + i) * (i % 3 ? 1e-9 : 1e9) * (i % 2 ? -1 : 1);
}

static double fsum_on(tdm_runtime *rt) {
  double x = 1.5;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &h), TDM_OK);
  tdm_reduction r = {.init = &fzero_cl, .combine = &fadd_cl, .copies = FLANES};
  assert_int_equal(tdm_handle_set_reduction(h, &r), TDM_OK);
  for (unsigned i = 0; i < FTASKS; i++) {
    double t = term(i);
    tdm_task_desc d = {.codelet = &facc_cl, .handles = {h}, .args = &t, .args_size = sizeof t};
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  }
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  return x;
}

static void test_redux_deterministic(void **state) {
  (void)state;
  double lane[FLANES] = {0};
  for (unsigned i = 0; i < FTASKS; i++)
    lane[i % FLANES] += term(i);
  for (unsigned s = 1; s < FLANES; s *= 2)
    for (unsigned i = 0; i + s < FLANES; i += 2 * s)
      lane[i] += lane[i + s];
  double want = 1.5 + lane[0];
  unsigned workers[] = {1, 3, 4};
  for (unsigned k = 0; k < 3; k++) {
    tdm_runtime *rt = test_runtime(workers[k], NULL);
    double got = fsum_on(rt);
    tdm_runtime_destroy(rt);
    assert_memory_equal(&got, &want, sizeof got);
  }
  tdm_runtime *rt = test_runtime_emulated(2, "own:speedup=2,latency=1us,bandwidth=1G;shared:speedup=0.5,memory=shared", NULL);
  double got = fsum_on(rt);
  tdm_runtime_destroy(rt);
  assert_memory_equal(&got, &want, sizeof got);
}

/* Accumulations between ordinary accesses of every kind, tasks made
 * with tdm_task_create and submitted later, a task that names the
 * handle twice, and one that reads it while accumulating into it; the
 * runtime destroyed with lanes open: its memory holds them. */
static void twice(const tdm_buffer *b, const void *args, size_t n) {
  accumulate(b, args, n);
  accumulate(b + 1, args, n);
}
static void read_and_acc(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  uint64_t *acc = b[0].ptr;
  const uint64_t *in = b[1].ptr;
  acc[3] += in[0]; /* what was combined before it */
}
static void double_words(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  uint64_t *v = b[0].ptr;
  for (int i = 0; i < WORDS; i++)
    v[i] *= 2;
}
static const tdm_codelet twice_cl = {.name = "twice", .cpu_fn = twice, .nbuffers = 2,
                                     .modes = {TDM_REDUX, TDM_REDUX}};
static const tdm_codelet read_acc_cl = {.name = "read-acc", .cpu_fn = read_and_acc,
                                        .nbuffers = 2, .modes = {TDM_REDUX, TDM_R}};
static const tdm_codelet double_cl = {.name = "double", .cpu_fn = double_words, .nbuffers = 1,
                                      .modes = {TDM_RW}};

static void test_redux_mixed(void **state) {
  (void)state;
  uint64_t v[WORDS] = {1, 1, 1, 1}, want[WORDS] = {1, 1, 1, 1};
  tdm_runtime *rt = test_runtime(3, NULL);
  tdm_handle *h;
  h = words(rt, v, WORDS);
  set_sum(h, 0);
  tdm_task *made[8];
  acc_args a = {{1, 2, 3, 4}, NULL, NULL};
  for (unsigned round = 0; round < 8; round++) {
    tdm_task_desc d = {.codelet = &acc_cl, .handles = {h}, .args = &a, .args_size = sizeof a};
    for (unsigned i = 0; i < 10; i++)
      assert_int_equal(tdm_submit(rt, &d), TDM_OK);
    assert_int_equal(tdm_task_create(rt, &d, &made[round]), TDM_OK);
    tdm_task_desc t2 = {.codelet = &twice_cl, .handles = {h, h}, .args = &a,
                        .args_size = sizeof a};
    assert_int_equal(tdm_submit(rt, &t2), TDM_OK);
    for (int k = 0; k < WORDS; k++)
      want[k] += 12 * a.add[k];
    /* reads the sum so far (word 0), adds it to word 3 */
    tdm_task_desc ra = {.codelet = &read_acc_cl, .handles = {h, h}};
    assert_int_equal(tdm_submit(rt, &ra), TDM_OK);
    want[3] += want[0];
    if (round % 2) {
      tdm_task_desc dd = {.codelet = &double_cl, .handles = {h}};
      assert_int_equal(tdm_submit(rt, &dd), TDM_OK);
      for (int k = 0; k < WORDS; k++)
        want[k] *= 2;
    }
    /* the created task, submitted now: it accumulates now */
    assert_int_equal(tdm_task_submit(made[round]), TDM_OK);
    for (int k = 0; k < WORDS; k++)
      want[k] += a.add[k];
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  for (unsigned round = 0; round < 8; round++)
    tdm_task_release(made[round]);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK); /* the lanes combined first */
  for (int k = 0; k < WORDS; k++)
    assert_int_equal(v[k], want[k]);
}

/* The verification mode: commuting and accumulating tasks give the
 * same results (accumulations are not compared, updates are), and a
 * verified task whose submission combines lanes (the runtime submits
 * the combination while the mode's lock is held) neither waits for
 * itself nor keeps inputs from before the combination. */
static void test_modes_verified(void **state) {
  (void)state;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.verify = "*:1";
  cfg.sim = "own:speedup=2,latency=1us,bandwidth=1G";
  cfg.sim_time_scale = 1;
  cfg.scheduler = "random";
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  uint64_t v[WORDS] = {0}, c = 0, seen[10] = {0};
  tdm_handle *h, *hc, *hs;
  h = words(rt, v, WORDS);
  hc = words(rt, &c, 1);
  assert_int_equal(tdm_register_vector(rt, seen, 10, sizeof seen[0], &hs), TDM_OK);
  assert_int_equal(tdm_vector_partition(hs, 1, 0), TDM_OK);
  set_sum(h, 3);
  acc_args a = {{1, 2, 3, 4}, NULL, NULL};
  bump_args b = {.add = 3};
  uint64_t want[WORDS] = {0}, want_seen[10];
  for (unsigned i = 0; i < 100; i++) {
    tdm_task_desc d = {.codelet = &acc_cl, .handles = {h}, .args = &a, .args_size = sizeof a};
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
    for (int k = 0; k < WORDS; k++)
      want[k] += a.add[k];
    tdm_task_desc e = {.codelet = &commute_cl, .handles = {hc}, .args = &b,
                       .args_size = sizeof b};
    assert_int_equal(tdm_submit(rt, &e), TDM_OK);
    if (i % 10 == 9) { /* verified readers: the lanes combined before them */
      tdm_task_desc dd = {.codelet = &double_cl, .handles = {h}};
      assert_int_equal(tdm_submit(rt, &dd), TDM_OK);
      for (int k = 0; k < WORDS; k++)
        want[k] *= 2;
      tdm_task_desc r = {.codelet = &read_cl, .handles = {h, tdm_vector_piece(hs, i / 10)}};
      assert_int_equal(tdm_submit(rt, &r), TDM_OK);
      want_seen[i / 10] = want[0];
    }
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_vector_unpartition(hs, 0), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hs), TDM_OK);
  for (unsigned k = 0; k < 10; k++)
    assert_int_equal(seen[k], want_seen[k]);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hc), TDM_OK);
  for (int k = 0; k < WORDS; k++)
    assert_int_equal(v[k], want[k]);
  assert_int_equal(c, 300);
  tdm_verify_counts vc = {.struct_size = sizeof vc};
  assert_int_equal(tdm_runtime_verify_counts(rt, &vc), TDM_OK);
  print_message("verified: sampled %llu compared %llu mismatched %llu\n", (unsigned long long)vc.sampled, (unsigned long long)vc.compared, (unsigned long long)vc.mismatched);
  assert_int_equal(vc.mismatched, 0);
  tdm_runtime_destroy(rt);
}

/* Refusals, each with its status and nothing run. */
static void test_modes_refused(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(1, &log);
  uint64_t v[WORDS] = {0}, m[16] = {0};
  tdm_handle *h, *hm;
  h = words(rt, v, WORDS);
  assert_int_equal(tdm_register_matrix(rt, m, 4, 4, 4, sizeof m[0], &hm), TDM_OK);
  acc_args a = {{1, 1, 1, 1}, NULL, NULL};
  tdm_task_desc d = {.codelet = &acc_cl, .handles = {h}, .args = &a, .args_size = sizeof a};
  assert_int_equal(tdm_submit(rt, &d), TDM_ERR_INVALID_MODE); /* no reduction */
  assert_true(test_log_has(&log, "without a reduction"));
  tdm_reduction good = sum_words(0), bad = good;
  bad.init = good.combine;
  assert_int_equal(tdm_handle_set_reduction(h, &bad), TDM_ERR_INVALID_ARG);
  bad = good;
  bad.combine = good.init;
  assert_int_equal(tdm_handle_set_reduction(h, &bad), TDM_ERR_INVALID_ARG);
  bad = sum_words(65);
  assert_int_equal(tdm_handle_set_reduction(h, &bad), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_handle_set_reduction(h, NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_handle_set_reduction(NULL, &bad), TDM_ERR_INVALID_ARG);
  set_sum(h, 2);
  tdm_reduction again = sum_words(0);
  assert_int_equal(tdm_handle_set_reduction(h, &again), TDM_ERR_BUSY);
  assert_int_equal(tdm_handle_acquire(h, TDM_REDUX), TDM_ERR_INVALID_MODE);
  assert_int_equal(tdm_handle_acquire(h, TDM_COMMUTE), TDM_ERR_INVALID_MODE);
  /* a tile has no reduction of its own */
  assert_int_equal(tdm_matrix_partition(hm, 2, 2, 0), TDM_OK);
  assert_int_equal(tdm_handle_set_reduction(tdm_matrix_tile(hm, 0, 0), &again),
                   TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_matrix_unpartition(hm, 0), TDM_OK);
  /* not recorded */
  tdm_graph *g;
  assert_int_equal(tdm_graph_create(rt, &g), TDM_OK);
  assert_int_equal(tdm_graph_add(g, &d, NULL), TDM_ERR_INVALID_MODE);
  bump_args b = {.add = 1};
  tdm_task_desc e = {.codelet = &commute_cl, .handles = {h}, .args = &b, .args_size = sizeof b};
  assert_int_equal(tdm_graph_add(g, &e, NULL), TDM_ERR_INVALID_MODE);
  assert_int_equal(tdm_graph_size(g), 0);
  tdm_graph_destroy(g);
  /* an unknown mode */
  tdm_codelet odd = {.name = "odd", .cpu_fn = accumulate, .nbuffers = 1, .modes = {5}};
  d.codelet = &odd;
  assert_int_equal(tdm_submit(rt, &d), TDM_ERR_INVALID_MODE);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hm), TDM_OK);
  for (int k = 0; k < WORDS; k++)
    assert_int_equal(v[k], 0);
  tdm_runtime_destroy(rt);
}

/* A matrix accumulated into (lanes of its shape, combined into its
 * rows with their ld), then partitioned: its tiles see the sums. */
static void mzero(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  for (size_t r = 0; r < b[0].nx; r++)
    memset((uint64_t *)b[0].ptr + r * b[0].ld, 0, b[0].ny * sizeof(uint64_t));
}
static void madd(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  for (size_t r = 0; r < b[0].nx; r++)
    for (size_t c = 0; c < b[0].ny; c++)
      ((uint64_t *)b[0].ptr)[r * b[0].ld + c] += ((const uint64_t *)b[1].ptr)[r * b[1].ld + c];
}
static void macc(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  uint64_t k = *(const uint64_t *)args;
  for (size_t r = 0; r < b[0].nx; r++)
    for (size_t c = 0; c < b[0].ny; c++)
      ((uint64_t *)b[0].ptr)[r * b[0].ld + c] += k * (r * 10 + c);
}
static void tile_sum(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  uint64_t s = 0;
  for (size_t r = 0; r < b[0].nx; r++)
    for (size_t c = 0; c < b[0].ny; c++)
      s += ((const uint64_t *)b[0].ptr)[r * b[0].ld + c];
  *(uint64_t *)b[1].ptr = s;
}

static void test_redux_matrix_then_tiles(void **state) {
  (void)state;
  static const tdm_codelet mz = {.name = "mzero", .cpu_fn = mzero, .nbuffers = 1,
                                 .modes = {TDM_W}};
  static const tdm_codelet ma = {.name = "madd", .cpu_fn = madd, .nbuffers = 2,
                                 .modes = {TDM_RW, TDM_R}};
  static const tdm_codelet mc = {.name = "macc", .cpu_fn = macc, .nbuffers = 1,
                                 .modes = {TDM_REDUX}};
  static const tdm_codelet ts = {.name = "tile-sum", .cpu_fn = tile_sum, .nbuffers = 2,
                                 .modes = {TDM_R, TDM_W}};
  tdm_runtime *rt = test_runtime(3, NULL);
  uint64_t m[4][6] = {{0}}, sums[4] = {0}; /* 4 x 3 used, ld 6 */
  tdm_handle *h, *hs;
  assert_int_equal(tdm_register_matrix(rt, m, 6, 4, 3, sizeof m[0][0], &h), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, sums, 4, sizeof sums[0], &hs), TDM_OK);
  tdm_reduction r = {.init = &mz, .combine = &ma, .copies = 3};
  assert_int_equal(tdm_handle_set_reduction(h, &r), TDM_OK);
  uint64_t total = 0;
  for (uint64_t k = 1; k <= 40; k++) {
    tdm_task_desc d = {.codelet = &mc, .handles = {h}, .args = &k, .args_size = sizeof k};
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
    total += k;
  }
  assert_int_equal(tdm_matrix_partition(h, 2, 3, 0), TDM_OK); /* 2 tiles of 2 x 3 */
  tdm_handle *piece[2];
  assert_int_equal(tdm_vector_partition(hs, 1, 0), TDM_OK);
  for (unsigned t = 0; t < 2; t++) {
    piece[t] = tdm_vector_piece(hs, t);
    tdm_task_desc d = {.codelet = &ts, .handles = {tdm_matrix_tile(h, t, 0), piece[t]}};
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_vector_unpartition(hs, 0), TDM_OK);
  assert_int_equal(tdm_matrix_unpartition(h, 0), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hs), TDM_OK);
  for (size_t i = 0; i < 4; i++)
    for (size_t c = 0; c < 6; c++)
      assert_int_equal(m[i][c], c < 3 ? total * (i * 10 + c) : 0); /* past ld's columns: untouched */
  assert_int_equal(sums[0], total * (0 + 1 + 2 + 10 + 11 + 12));
  assert_int_equal(sums[1], total * (20 + 21 + 22 + 30 + 31 + 32));
  tdm_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_commute_exclusive),
      cmocka_unit_test(test_commute_any_order),
      cmocka_unit_test(test_commute_two_handles),
      cmocka_unit_test(test_commute_member_cancelled),
      cmocka_unit_test(test_redux_parallel_and_exact),
      cmocka_unit_test(test_redux_member_cancelled),
      cmocka_unit_test(test_redux_combined_once),
      cmocka_unit_test(test_redux_deterministic),
      cmocka_unit_test(test_redux_mixed),
      cmocka_unit_test(test_modes_verified),
      cmocka_unit_test(test_modes_refused),
      cmocka_unit_test(test_redux_matrix_then_tiles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
