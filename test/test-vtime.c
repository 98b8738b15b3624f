/*
 * Placement policies in virtual time (runtime/sched/vtime.c), exactly: every
 * task and copy takes its modelled duration, so the schedules and these
 * assertions are deterministic.
 *
 *  - 2 CPU cores and an emulated discrete GPU, 10x a core for gemm and
 *    0.5x for small: HEFT puts at least 80% of the gemm tasks on the GPU
 *    and 80% of the small ones on the CPUs;
 *  - a tiled GEMM and a tiled Cholesky finish within 1.25x of the lower
 *    bound (critical path, and work over speed);
 *  - two GPUs share the work in proportion to their speeds;
 *  - a GPU that slows down mid-run gets fewer tasks afterwards;
 *  - every policy respects the lower bound and is deterministic;
 *  - the policies are the runtime's tables: heft calibrates each class
 *    before it trusts it (and not again with the model of a first run),
 *    ws's idle devices steal from the CPU workers;
 *  - a device's queue fetches its tasks' inputs ahead; GPUs behind one
 *    link share its time;
 *  - the reference schedule (the whole graph known) is exact on a small
 *    graph and above the bound; at 16x16 tiles heft is within 1.10 of
 *    the bound calibrated and 1.25 on a first run wherever the reference
 *    is within 1.10, from 2 cores to 64 cores + 8 GPUs.
 */
#include "common.h"

#include <math.h>

#include "sched/perfmodel.h"
#include "vt-parallel.h"

/* 2 CPU cores (class 0) and one discrete GPU (class 1, node 1). */
static tdm_vt_machine cpus_and_gpu(void) {
  tdm_vt_machine m;
  memset(&m, 0, sizeof m);
  m.nclasses = 2;
  m.nnodes = 2;
  m.classes[0] = (struct tdm_vt_class){.name = "cpu", .workers = 2, .node = 0};
  m.classes[1] = (struct tdm_vt_class){.name = "gpu", .workers = 1, .node = 1};
  for (int k = 0; k < 8; k++)
    m.classes[0].speedup[k] = 1;
  m.classes[1].speedup[GEMM] = 10;
  m.classes[1].speedup[SMALL] = 0.5;
  m.classes[1].speedup[POTRF] = 2;
  m.classes[1].speedup[TRSM] = 8;
  m.classes[1].speedup[SYRK] = 8;
  m.latency[1] = 10e-6;
  m.bandwidth[1] = 10e9;
  return m;
}

static builder b; /* large: static */

static tdm_vt_result run(const tdm_vt_machine *m, tdm_policy p) {
  tdm_vt_graph g = graph(&b);
  tdm_vt_result r;
  assert_int_equal(tdm__vt_run(m, &g, p, 42, &r), TDM_OK);
  return r;
}

static void test_gemm_goes_to_the_gpu_small_stays(void **state) {
  (void)state;
  tdm_vt_machine m = cpus_and_gpu();
  memset(&b, 0, sizeof b);
  /* 100 gemm and 100 small tasks, independent, interleaved */
  for (int i = 0; i < 100; i++) {
    unsigned x = data(&b, 1 << 20), y = data(&b, 1 << 20);
    task(&b, GEMM, 10e-3, 2, (unsigned[]){x, y}, (uint8_t[]){TDM_R, TDM_W});
    unsigned u = data(&b, 1 << 16), v = data(&b, 1 << 16);
    task(&b, SMALL, 1e-3, 2, (unsigned[]){u, v}, (uint8_t[]){TDM_R, TDM_W});
  }
  tdm_vt_result r = run(&m, TDM_POLICY_HEFT);
  printf("gemm: %u on the GPU, %u on CPUs; small: %u on the GPU, %u on CPUs; %.1f ms\n",
         r.codelet_class[GEMM][1], r.codelet_class[GEMM][0], r.codelet_class[SMALL][1],
         r.codelet_class[SMALL][0], r.makespan * 1e3);
  assert_true(r.codelet_class[GEMM][1] >= 80);
  assert_true(r.codelet_class[SMALL][0] >= 80);
  tdm__vt_result_free(&r);
}

static void check_bound(const char *what, unsigned nt, void (*make)(builder *, unsigned)) {
  tdm_vt_machine m = cpus_and_gpu();
  make(&b, nt);
  tdm_vt_graph g = graph(&b);
  double lb = tdm__vt_lower_bound(&m, &g);
  for (int p = TDM_POLICY_HEFT; p <= TDM_POLICY_RANDOM; p++) {
    tdm_vt_result r = run(&m, (tdm_policy)p);
    printf("%s %ux%u tiles (%u tasks), %-6s: makespan %.1f ms, lower bound %.1f ms, ratio "
           "%.3f; on the GPU %u, on CPUs %u, %llu bytes moved\n",
           what, nt, nt, b.ntasks, tdm__policy_name((tdm_policy)p), r.makespan * 1e3, lb * 1e3,
           r.makespan / lb, r.tasks_per_class[1], r.tasks_per_class[0],
           (unsigned long long)r.bytes_moved);
    assert_true(r.makespan >= lb * (1 - 1e-9)); /* a bound no schedule beats */
    if (p == TDM_POLICY_HEFT)
      assert_true(r.makespan <= 1.25 * lb);
    /* every task once, after its predecessors, on a worker that can run it */
    for (unsigned i = 0; i < b.ntasks; i++)
      for (unsigned k = 0; k < b.tasks[i].ndeps; k++)
        assert_true(r.start[i] >= r.end[b.tasks[i].deps[k]] - 1e-12);
    tdm__vt_result_free(&r);
  }
}

static void test_tiled_gemm_near_the_bound(void **state) {
  (void)state;
  check_bound("tiled GEMM", 6, tiled_gemm);
}

static void test_tiled_cholesky_near_the_bound(void **state) {
  (void)state;
  check_bound("tiled Cholesky", 8, tiled_cholesky);
}

static void test_two_gpus_share_by_speed(void **state) {
  (void)state;
  tdm_vt_machine m;
  memset(&m, 0, sizeof m);
  m.nclasses = 3;
  m.nnodes = 3;
  m.classes[0] = (struct tdm_vt_class){.name = "cpu", .workers = 0, .node = 0};
  m.classes[1] = (struct tdm_vt_class){.name = "fast gpu", .workers = 1, .node = 1};
  m.classes[2] = (struct tdm_vt_class){.name = "slow gpu", .workers = 1, .node = 2};
  m.classes[0].speedup[GEMM] = 1;
  m.classes[1].speedup[GEMM] = 12;
  m.classes[2].speedup[GEMM] = 4;
  for (int n = 1; n < 3; n++) {
    m.latency[n] = 10e-6;
    m.bandwidth[n] = 10e9;
  }
  memset(&b, 0, sizeof b);
  for (int i = 0; i < 200; i++) {
    unsigned x = data(&b, 1 << 16), y = data(&b, 1 << 16);
    task(&b, GEMM, 10e-3, 2, (unsigned[]){x, y}, (uint8_t[]){TDM_R, TDM_W});
  }
  tdm_vt_result r = run(&m, TDM_POLICY_HEFT);
  double share = (double)r.tasks_per_class[1] / 200;
  printf("fast GPU %u tasks, slow GPU %u (speeds 12 and 4: 75%% expected), %.1f ms, bound "
         "%.1f ms\n",
         r.tasks_per_class[1], r.tasks_per_class[2], r.makespan * 1e3,
         tdm__vt_lower_bound(&m, &(tdm_vt_graph){b.ntasks, b.tasks, b.ndata, b.bytes}) * 1e3);
  assert_true(fabs(share - 0.75) <= 0.03);
  /* two GPUs of proportional speeds make one pool in the bound */
  assert_true(r.makespan >=
              tdm__vt_lower_bound(&m, &(tdm_vt_graph){b.ntasks, b.tasks, b.ndata, b.bytes}) *
                  (1 - 1e-9));
  tdm__vt_result_free(&r);
}

/* 8 independent chains of 40 gemm tasks: decisions spread over time. The
 * GPU becomes 8 times slower at 40 ms: the model learns it and the GPU's
 * share of what starts afterwards drops. */
static void test_slowed_gpu_gets_less(void **state) {
  (void)state;
  tdm_vt_machine m = cpus_and_gpu();
  m.classes[1].slow_at = 40e-3;
  m.classes[1].slow_factor = 8;
  memset(&b, 0, sizeof b);
  for (int c = 0; c < 8; c++) {
    unsigned x = data(&b, 1 << 16), y = data(&b, 1 << 16);
    for (int i = 0; i < 40; i++)
      task(&b, GEMM, 5e-3, 2, (unsigned[]){x, y}, (uint8_t[]){TDM_R, TDM_RW});
  }
  tdm_vt_result r = run(&m, TDM_POLICY_HEFT);
  unsigned before[2] = {0, 0}, after[2] = {0, 0};
  const double settle = 60e-3; /* a few observations to learn from */
  for (unsigned i = 0; i < b.ntasks; i++) {
    unsigned c = r.worker[i] >= 2; /* workers 0-1 CPUs, 2 the GPU */
    if (r.start[i] < m.classes[1].slow_at)
      before[c]++;
    else if (r.start[i] >= settle)
      after[c]++;
  }
  double share_before = (double)before[1] / (before[0] + before[1]);
  double share_after = (double)after[1] / (after[0] + after[1]);
  printf("GPU share of tasks: %.2f before slowing down, %.2f after (%u and %u tasks)\n",
         share_before, share_after, before[0] + before[1], after[0] + after[1]);
  assert_true(share_before > 0.5);
  assert_true(share_after < share_before / 2);
  tdm__vt_result_free(&r);
}

/* One worker, tasks ready together: the user's priority first, then the
 * critical path (upward rank), under heft and eager alike. */
static void test_priorities(void **state) {
  (void)state;
  tdm_vt_machine m;
  memset(&m, 0, sizeof m);
  m.nclasses = 1;
  m.nnodes = 1;
  m.classes[0] = (struct tdm_vt_class){.name = "cpu", .workers = 1, .node = 0};
  m.classes[0].speedup[GEMM] = 1;
  static const unsigned after0[] = {0};
  tdm_vt_task t[4] = {
      {.codelet = GEMM, .cpu_time = 1},                          /* a chain head... */
      {.codelet = GEMM, .cpu_time = 1, .ndeps = 1, .deps = after0}, /* ...and its tail */
      {.codelet = GEMM, .cpu_time = 1},                          /* alone */
      {.codelet = GEMM, .cpu_time = 1, .priority = 5},           /* alone, urgent */
  };
  for (int p = TDM_POLICY_HEFT; p <= TDM_POLICY_EAGER; p += TDM_POLICY_EAGER) {
    tdm_vt_result r;
    assert_int_equal(tdm__vt_run(&m, &(tdm_vt_graph){4, t, 0, NULL}, (tdm_policy)p, 1, &r),
                     TDM_OK);
    assert_true(r.start[3] == 0); /* the urgent one first */
    assert_true(r.start[0] == 1); /* then the head of the longer path */
    assert_true(r.start[2] > r.start[0]);
    tdm__vt_result_free(&r);
  }
}

/* The model starts empty, as the runtime's does without a saved file:
 * heft sends TDM_MODEL_CALIBRATION tries to each class, even to CPU cores
 * a thousand times slower than the GPU, then the rest to the GPU. */
static void test_heft_calibrates(void **state) {
  (void)state;
  tdm_vt_machine m = cpus_and_gpu();
  m.classes[1].speedup[GEMM] = 1000;
  memset(&b, 0, sizeof b);
  for (int i = 0; i < 30; i++) {
    unsigned x = data(&b, 1 << 10);
    task(&b, GEMM, 10e-3, 1, (unsigned[]){x}, (uint8_t[]){TDM_RW});
  }
  tdm_vt_result r = run(&m, TDM_POLICY_HEFT);
  printf("heft, model empty at start: %u tasks on the CPUs, %u on the GPU, %.2f ms\n",
         r.codelet_class[GEMM][0], r.codelet_class[GEMM][1], r.makespan * 1e3);
  assert_int_equal(r.codelet_class[GEMM][0], TDM_MODEL_CALIBRATION);
  assert_int_equal(r.codelet_class[GEMM][1], 30 - TDM_MODEL_CALIBRATION);
  /* the last calibration try ends at 20 ms: two rounds on two cores */
  assert_true(fabs(r.makespan - 20e-3) < 1e-9);
  tdm__vt_result_free(&r);
  /* a second run with what the first learnt (a model file kept): no
   * tries, everything on the GPU */
  tdm_perfmodel *model = tdm__model_new();
  assert_non_null(model);
  tdm_vt_graph g = graph(&b);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(tdm__vt_run_model(&m, &g, TDM_POLICY_HEFT, 42, model, &r), TDM_OK);
    printf("run %d with the model kept: %u tasks on the CPUs, %u on the GPU, %.2f ms\n", k + 1,
           r.codelet_class[GEMM][0], r.codelet_class[GEMM][1], r.makespan * 1e3);
    assert_int_equal(r.codelet_class[GEMM][0], k ? 0 : TDM_MODEL_CALIBRATION);
    assert_true(k ? r.makespan < 1e-3 : fabs(r.makespan - 20e-3) < 1e-9);
    tdm__vt_result_free(&r);
  }
  tdm__model_free(model);
}

/* 2 cores and a GPU as fast as a core; 20 tasks only the cores can run
 * (50 ms each: 500 ms of the two cores) and 20 either can (10 ms), all
 * ready at once. The cores' CPU-only work is in no policy's backlog;
 * counted (tdm__sched_cpu_only_wait, its time learnt by a first run),
 * heft leaves the cores to it and gives the GPU the others: 500 ms, the
 * bound. Not counted, it sent 13 of the 20 to the busy cores: 570 ms. */
static void test_cpu_only_work_counted(void **state) {
  (void)state;
  tdm_vt_machine m = cpus_and_gpu();
  m.classes[1].speedup[SMALL] = 0; /* SMALL: CPU-only here */
  m.classes[1].speedup[GEMM] = 1;
  memset(&b, 0, sizeof b);
  for (int i = 0; i < 20; i++) {
    unsigned x = data(&b, 1 << 10), y = data(&b, 1 << 10);
    task(&b, SMALL, 50e-3, 1, (unsigned[]){x}, (uint8_t[]){TDM_RW});
    task(&b, GEMM, 10e-3, 1, (unsigned[]){y}, (uint8_t[]){TDM_RW});
  }
  tdm_vt_graph g = graph(&b);
  double lb = tdm__vt_lower_bound(&m, &g);
  assert_true(fabs(lb - 0.5) < 1e-9);
  tdm_perfmodel *model = tdm__model_new();
  assert_non_null(model);
  tdm_vt_result r;
  for (int k = 0; k < 2; k++) {
    assert_int_equal(tdm__vt_run_model(&m, &g, TDM_POLICY_HEFT, 42, model, &r), TDM_OK);
    printf("%s run: %.1f ms (bound %.1f); the others: %u on the cores, %u on the GPU\n",
           k ? "calibrated" : "first", r.makespan * 1e3, lb * 1e3, r.codelet_class[GEMM][0],
           r.codelet_class[GEMM][1]);
    assert_int_equal(r.codelet_class[SMALL][0], 20);
    if (k) { /* at most one on the cores: they end with the rest */
      assert_true(r.codelet_class[GEMM][0] <= 1);
      assert_true(r.makespan <= 1.02 * lb);
    }
    tdm__vt_result_free(&r);
  }
  bool calibrated = false;
  assert_true(tdm__model_predict(model, TDM_SCHED_CPU_ONLY, 0, "cpu", &calibrated) > 0);
  assert_true(calibrated);
  tdm__model_free(model);
}

/* A GPU alone and n independent tasks, each reading 10 MB of its own
 * (1 ms over the link) and running 2 ms: calibrated, the GPU's queue
 * fetches the inputs of the tasks queued there while it runs the first,
 * so only the first copy is not hidden (as the emulated devices'
 * queues prefetch). With a second GPU behind the same link, the copies
 * queue on it: 20 ms of copies where each GPU had 10. */
static double gpus_on_links(unsigned gpus, bool shared) {
  tdm_vt_machine m;
  memset(&m, 0, sizeof m);
  m.nclasses = 1 + gpus;
  m.nnodes = 1 + gpus;
  m.classes[0] = (struct tdm_vt_class){.name = "cpu", .workers = 0, .node = 0};
  m.classes[0].speedup[GEMM] = 1;
  for (unsigned k = 1; k <= gpus; k++) {
    m.classes[k] = (struct tdm_vt_class){.name = "gpu", .workers = 1, .node = k};
    m.classes[k].speedup[GEMM] = 5;
    m.latency[k] = 0;
    m.bandwidth[k] = 10e9;
    m.link_of[k] = shared ? 1 : 0;
  }
  memset(&b, 0, sizeof b);
  for (unsigned i = 0; i < 10 * gpus; i++) {
    unsigned x = data(&b, 10000000), y = data(&b, 1);
    task(&b, GEMM, 10e-3, 2, (unsigned[]){x, y}, (uint8_t[]){TDM_R, TDM_W});
  }
  tdm_perfmodel *model = tdm__model_new();
  assert_non_null(model);
  tdm_vt_graph g = graph(&b);
  tdm_vt_result r;
  double makespan = 0;
  for (int k = 0; k < 2; k++) { /* calibrated in the second */
    assert_int_equal(tdm__vt_run_model(&m, &g, TDM_POLICY_HEFT, 42, model, &r), TDM_OK);
    makespan = r.makespan;
    tdm__vt_result_free(&r);
  }
  tdm__model_free(model);
  printf("%u GPU(s), %s: %.3f ms\n", gpus, shared ? "one link" : "a link each",
         makespan * 1e3);
  return makespan;
}

static void test_queue_prefetches_links_shared(void **state) {
  (void)state;
  /* 1 ms for the first copy, then 10 tasks of 2 ms back to back */
  assert_true(fabs(gpus_on_links(1, false) - 21e-3) < 1e-9);
  assert_true(fabs(gpus_on_links(2, false) - 21e-3) < 1e-9);
  /* one link for two GPUs: 20 copies of 1 ms in a row, the last task
   * after the last copy */
  assert_true(fabs(gpus_on_links(2, true) - 22e-3) < 1e-9);
}

/* The reference (tdm__vt_reference): HEFT knowing the whole graph, copies
 * free. Exact on a small graph, and never below the lower bound. */
static void test_reference(void **state) {
  (void)state;
  tdm_vt_machine m = cpus_and_gpu();
  /* a -> b on the GPU (1 + 0.5 ms), c alone on a core (3 ms): 3 ms */
  unsigned dep = 0;
  tdm_vt_task t[3] = {
      {.codelet = GEMM, .cpu_time = 10e-3},
      {.codelet = GEMM, .cpu_time = 5e-3, .ndeps = 1, .deps = &dep},
      {.codelet = SMALL, .cpu_time = 3e-3},
  };
  tdm_vt_graph g = {3, t, 0, NULL};
  assert_true(fabs(tdm__vt_reference(&m, &g) - 3e-3) < 1e-12);
  t[2].cpu_time = 0.5e-3; /* now the chain: 1.5 ms */
  assert_true(fabs(tdm__vt_reference(&m, &g) - 1.5e-3) < 1e-12);
  unsigned cyc[2][1] = {{1}, {0}};
  tdm_vt_task c2[2] = {{.codelet = GEMM, .cpu_time = 1e-3, .ndeps = 1, .deps = cyc[0]},
                       {.codelet = GEMM, .cpu_time = 1e-3, .ndeps = 1, .deps = cyc[1]}};
  assert_true(tdm__vt_reference(&m, &(tdm_vt_graph){2, c2, 0, NULL}) == 0);
  for (size_t k = 0; k < VT_NMACHINES; k++) {
    tdm_vt_machine vm = vt_machine(&vt_machines[k]);
    for (size_t i = 0; i < VT_NGRAPHS; i++) {
      vt_graphs[i].build(&b, 6);
      tdm_vt_graph bg = graph(&b);
      assert_true(tdm__vt_reference(&vm, &bg) >= tdm__vt_bound(&vm, &bg).bound * (1 - 1e-9));
    }
  }
}

/* Copies between devices: a tile written on one GPU (gemm runs only
 * there) and read on another (small only there). Two GPUs behind one
 * link (a switch) that both copy peer to peer: one copy straight between
 * them, at the peer bandwidth; behind different links, or without
 * peer: through the host, two copies over the links. */
static void test_copies_between_gpus(void **state) {
  (void)state;
  tdm_vt_machine m;
  memset(&m, 0, sizeof m);
  m.nclasses = 3;
  m.nnodes = 3;
  m.classes[0] = (struct tdm_vt_class){.name = "cpu", .workers = 1, .node = 0};
  m.classes[1] = (struct tdm_vt_class){.name = "a", .workers = 1, .node = 1};
  m.classes[2] = (struct tdm_vt_class){.name = "b", .workers = 1, .node = 2};
  m.classes[1].speedup[GEMM] = m.classes[2].speedup[SMALL] = 10;
  for (unsigned n = 1; n < 3; n++) {
    m.latency[n] = 10e-6;
    m.bandwidth[n] = 10e9;
  }
  memset(&b, 0, sizeof b);
  unsigned x = data(&b, 10000000);
  task(&b, GEMM, 10e-3, 1, (unsigned[]){x}, (uint8_t[]){TDM_W});
  task(&b, SMALL, 10e-3, 1, (unsigned[]){x}, (uint8_t[]){TDM_R});
  /* (peer, shared link): makespan, bytes */
  const struct {
    double peer;
    unsigned link_of;
    double makespan;
    uint64_t bytes;
  } cases[] = {
      {0, 0, 1e-3 + 2 * (10e-6 + 1e-3) + 1e-3, 20000000}, /* through the host */
      {20e9, 0, 1e-3 + 2 * (10e-6 + 1e-3) + 1e-3, 20000000}, /* own links: the same */
      {0, 1, 1e-3 + 2 * (10e-6 + 1e-3) + 1e-3, 20000000}, /* one link, no peer */
      {20e9, 1, 1e-3 + 10e-6 + 0.5e-3 + 1e-3, 10000000}, /* one link, peer */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    m.peer[1] = m.peer[2] = cases[i].peer;
    m.link_of[2] = cases[i].link_of;
    tdm_vt_result r = run(&m, TDM_POLICY_HEFT);
    printf("peer %g, link of b %u: %.4f ms, %llu bytes\n", cases[i].peer, cases[i].link_of,
           r.makespan * 1e3, (unsigned long long)r.bytes_moved);
    assert_true(fabs(r.makespan - cases[i].makespan) < 1e-12);
    assert_int_equal(r.bytes_moved, cases[i].bytes);
    tdm__vt_result_free(&r);
  }
}

/* The yardstick of bench-sched at 16x16 tiles: where a schedule knowing
 * the whole graph (the reference) gets within 1.10 of the bound, the
 * graph has the parallel work the machine needs, and heft, placing each
 * task as it becomes ready, gets within 1.10 too once calibrated and
 * within 1.25 on a first run; and never worse than the machine without
 * its CPU cores or without its other workers. (The stencil on 64
 * cores + 8 GPUs sharing a link per pair was the last to miss, at
 * 1.165, its links busy: the cores took tasks back from GPUs over
 * them.) */
static double run_on(const tdm_vt_machine *m, const tdm_vt_graph *g, tdm_perfmodel *model) {
  tdm_vt_result r;
  assert_int_equal(tdm__vt_run_model(m, g, TDM_POLICY_HEFT, 42, model, &r), TDM_OK);
  double makespan = r.makespan;
  tdm__vt_result_free(&r);
  return makespan;
}

/* Taking back: the stencil at 16x16 on 64 cores + 8 GPUs with a link
 * each, calibrated: the idle cores take tasks back from the most loaded
 * GPU first, so every GPU stays about as busy as the others. (Looking at
 * the GPUs in a fixed order robbed the first ones: GPUs 0 to 3 were
 * busy 50 to 68% of the time, 4 to 7 96 to 99%.) */
static void test_take_back_spread(void **state) {
  (void)state;
  const vt_machine_def *d = NULL;
  for (size_t k = 0; k < VT_NMACHINES; k++)
    if (vt_machines[k].dgpus == 8 && vt_machines[k].per_link == 1)
      d = &vt_machines[k];
  assert_non_null(d);
  tdm_vt_machine m = vt_machine(d);
  stencil(&b, 16);
  tdm_vt_graph g = graph(&b);
  tdm_perfmodel *model = tdm__model_new();
  assert_non_null(model);
  tdm_vt_result r;
  for (int k = 0; k < 2; k++) { /* calibrated in the second */
    if (k)
      tdm__vt_result_free(&r);
    assert_int_equal(tdm__vt_run_model(&m, &g, TDM_POLICY_HEFT, 42, model, &r), TDM_OK);
  }
  double busy[8] = {0}, least = 1, most = 0;
  for (unsigned i = 0; i < g.ntasks; i++)
    if (r.worker[i] >= d->cpus)
      busy[r.worker[i] - d->cpus] += r.end[i] - r.start[i];
  for (unsigned k = 0; k < 8; k++) {
    least = fmin(least, busy[k] / r.makespan);
    most = fmax(most, busy[k] / r.makespan);
  }
  printf("GPUs busy %.1f%% to %.1f%% of %.1f ms\n", 100 * least, 100 * most, 1e3 * r.makespan);
  assert_true(most - least < 0.10);
  tdm__vt_result_free(&r);
  tdm__model_free(model);
}

static void test_targets(void **state) {
  (void)state;
  unsigned judged = 0;
  for (size_t i = 0; i < VT_NGRAPHS; i++) {
    const vt_graph_def *gd = &vt_graphs[i];
    gd->build(&b, 16);
    tdm_vt_graph g = graph(&b);
    for (size_t k = 0; k < VT_NMACHINES; k++) {
      const vt_machine_def *d = &vt_machines[k];
      tdm_vt_machine m = vt_machine(d);
      double lb = tdm__vt_bound(&m, &g).bound, ref = tdm__vt_reference(&m, &g);
      tdm_perfmodel *model = tdm__model_new();
      assert_non_null(model);
      double first = run_on(&m, &g, model), calibrated = run_on(&m, &g, model);
      tdm__model_free(model);
      /* the machine with one side idle: no CPU cores, or nothing else */
      tdm_vt_machine cpus = m, others = m;
      cpus.nclasses = 1;
      others.classes[0].workers = 0;
      double alone = run_on(&cpus, &g, NULL);
      if (m.nclasses > 1)
        alone = fmin(alone, run_on(&others, &g, NULL));
      printf("%-17s 16x16, %-38s first %.3f, calibrated %.3f, reference %.3f, one side "
             "alone %.3f\n",
             gd->name, d->name, first / lb, calibrated / lb, ref / lb, alone / lb);
      assert_true(calibrated <= alone * (1 + 1e-9));
      if (ref > 1.10 * lb)
        continue; /* too little parallel work for the machine to judge */
      judged++;
      assert_true(calibrated <= 1.10 * lb);
      assert_true(first <= 1.25 * lb);
    }
  }
  assert_true(judged >= 31); /* of 36 */
}

/* A data-parallel operation (tdm_parallel_submit's cut, heft's
 * placement): calibrated, on 2 cores + an integrated GPU (3x) and on 2
 * cores + a discrete GPU (10x, 10 GB/s), a regular range is split within
 * 5 points of each class's share of the speed and ends within 1.10 of the
 * bound (the work over the machine's speed), an irregular one (an
 * element's cost from 1 to 10 times the base) within 1.20; a first run
 * (the model empty: probes first) within 1.35. */
static void test_parallel_split(void **state) {
  (void)state;
  static const char *const machines[] = {
      "cpu:workers=2;igpu:speedup=3,memory=shared",
      "cpu:workers=2;gpu:speedup=10,latency=10us,bandwidth=10G"};
  for (size_t k = 0; k < 2; k++) {
    tdm_vt_machine m;
    char err[128];
    assert_int_equal(tdm__vt_parse_machine(machines[k], NULL, 0, &m, err, sizeof err), TDM_OK);
    for (int irregular = 0; irregular < 2; irregular++) {
      tdm_perfmodel *model = tdm__model_new();
      assert_non_null(model);
      vt_op_figures first, cal;
      assert_int_equal(vt_op_run_once(&m, &b, (size_t)1 << 22, 1024, irregular, model, &first),
                       TDM_OK);
      assert_int_equal(vt_op_run_once(&m, &b, (size_t)1 << 22, 1024, irregular, model, &cal),
                       TDM_OK);
      tdm__model_free(model);
      printf("%-55s %-9s first %.3f (%u chunks), calibrated %.3f (%u chunks), worst share "
             "off by %.1f points\n",
             machines[k], irregular ? "irregular" : "regular", first.ratio, first.chunks,
             cal.ratio, cal.chunks, 100 * cal.worst_share);
      assert_true(cal.ratio <= (irregular ? 1.20 : 1.10));
      if (!irregular)
        assert_true(cal.worst_share <= 0.05);
      assert_true(first.ratio <= 1.35);
    }
  }
}

/* ws: tasks released by the application go to the CPU workers' queue;
 * the idle GPU steals from it (its idle_device hook), so it runs some. */
static void test_ws_devices_steal(void **state) {
  (void)state;
  tdm_vt_machine m = cpus_and_gpu();
  m.classes[0].workers = 1;
  memset(&b, 0, sizeof b);
  for (int i = 0; i < 10; i++) {
    unsigned x = data(&b, 1 << 10);
    task(&b, GEMM, 10e-3, 1, (unsigned[]){x}, (uint8_t[]){TDM_RW});
  }
  tdm_vt_result r = run(&m, TDM_POLICY_WS);
  printf("ws: %u tasks on the CPU, %u stolen by the GPU\n", r.codelet_class[GEMM][0],
         r.codelet_class[GEMM][1]);
  assert_int_equal(r.codelet_class[GEMM][0] + r.codelet_class[GEMM][1], 10);
  assert_true(r.codelet_class[GEMM][1] >= 8); /* 10x faster, takes most */
  assert_true(r.codelet_class[GEMM][0] >= 1); /* the CPU worker took the first */
  tdm__vt_result_free(&r);
}

/* Machine descriptions: the example of policy.h, and each kind of
 * mistake refused with what is wrong. */
/* The decision both drivers share. */
static void test_heft_pick(void **state) {
  (void)state;
  bool cal;
  /* earliest finish, not earliest start nor fastest */
  tdm_choice a[] = {{.start = 0, .exec = 5, .calibrated = true},
                    {.start = 3, .exec = 1, .calibrated = true},
                    {.start = 1, .exec = 4, .calibrated = true}};
  assert_int_equal(tdm__heft_pick(a, 3, 3, &cal), 1);
  assert_false(cal);
  /* an uncalibrated candidate with room takes the task, fewest tries first */
  tdm_choice b[] = {{.start = 0, .exec = 1, .calibrated = true},
                    {.start = 9, .exec = -1, .calibrated = false, .trying = 2},
                    {.start = 9, .exec = -1, .calibrated = false, .trying = 1}};
  assert_int_equal(tdm__heft_pick(b, 3, 3, &cal), 2);
  assert_true(cal);
  /* no room left to calibrate: not known yet where */
  b[1].trying = b[2].trying = 3;
  assert_int_equal(tdm__heft_pick(b, 3, 3, &cal), -1);
  assert_false(cal);
  assert_int_equal(tdm__heft_pick(b, 0, 3, &cal), -1);
}

static void test_parse_machine(void **state) {
  (void)state;
  static const char *const names[] = {"gemm", "small", "potrf", "trsm", "syrk"};
  tdm_vt_machine m;
  char err[128] = "";
  assert_int_equal(tdm__vt_parse_machine("cpu:workers=2;gpu:speedup=10,small=0.5,latency=10us,"
                                         "bandwidth=10G;igpu:memory=shared,speedup=3,"
                                         "slow_at=40ms,slow_factor=8",
                                         names, 5, &m, err, sizeof err),
                   TDM_OK);
  assert_int_equal(m.nclasses, 3);
  assert_string_equal(m.classes[0].name, "cpu");
  assert_int_equal(m.classes[0].workers, 2);
  assert_int_equal(m.classes[0].node, 0);
  assert_true(m.classes[1].speedup[GEMM] == 10 && m.classes[1].speedup[SMALL] == 0.5);
  assert_int_equal(m.classes[1].node, 1);
  assert_true(fabs(m.latency[1] - 10e-6) < 1e-15 && m.bandwidth[1] == 10e9);
  assert_int_equal(m.classes[2].node, 0); /* shared: the host's memory */
  assert_true(fabs(m.classes[2].slow_at - 0.04) < 1e-12 && m.classes[2].slow_factor == 8);
  assert_int_equal(m.nnodes, 2);
  /* the machine runs */
  tiled_gemm(&b, 4);
  tdm_vt_result r;
  assert_int_equal(tdm__vt_run(&m, &(tdm_vt_graph){b.ntasks, b.tasks, b.ndata, b.bytes},
                               TDM_POLICY_HEFT, 1, &r),
                   TDM_OK);
  tdm__vt_result_free(&r);
  static const struct {
    const char *text, *says;
  } bad[] = {
      {"", "empty"},
      {"gpu:speedup=10", "bandwidth"},
      {"cpu:workers=two", "workers=two"},
      {"cpu:cores=2", "unknown setting \"cores\""},
      {"cpu:workers", "not key=value"},
      {":workers=2", "without a name"},
      {"gpu:latency=10parsecs,bandwidth=1G", "a time"},
      {"gpu:bandwidth=fast", "bytes per second"},
      {"cpu:memory=both", "shared or own"},
      {"cpu:speedup=-1", "positive"},
      {"gpu:speedup=1e308,memory=shared", "from 0.001 to 100000"},
      {"gpu:speedup=inf,memory=shared", "from 0.001 to 100000"},
      {"gpu:gemm=1e6,memory=shared", "0 (cannot run it) or a speed-up"},
      {"gpu:latency=1e300s,bandwidth=1G", "up to 1000 s"},
      {"gpu:latency=2000s,bandwidth=1G", "up to 1000 s"},
      {"gpu:bandwidth=1e-300", "from 1000 to"},
      {"gpu:bandwidth=2000T", "from 1000 to"},
      {"gpu:memory=shared,slow_at=1s,slow_factor=1e9", "slow_factor"},
      {"cpu:workers=1e300", "workers"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    assert_int_equal(tdm__vt_parse_machine(bad[i].text, names, 5, &m, err, sizeof err),
                     TDM_ERR_INVALID_ARG);
    if (!strstr(err, bad[i].says))
      fail_msg("\"%s\": the message \"%s\" does not say \"%s\"", bad[i].text, err,
               bad[i].says);
  }
}

static void test_deterministic_and_bad_input(void **state) {
  (void)state;
  tdm_vt_machine m = cpus_and_gpu();
  tiled_cholesky(&b, 5);
  tdm_vt_graph g = graph(&b);
  for (int p = TDM_POLICY_HEFT; p <= TDM_POLICY_RANDOM; p++) {
    tdm_vt_result r1, r2;
    assert_int_equal(tdm__vt_run(&m, &g, (tdm_policy)p, 7, &r1), TDM_OK);
    assert_int_equal(tdm__vt_run(&m, &g, (tdm_policy)p, 7, &r2), TDM_OK);
    assert_memory_equal(r1.worker, r2.worker, b.ntasks * sizeof *r1.worker);
    assert_true(r1.makespan == r2.makespan);
    tdm__vt_result_free(&r1);
    tdm__vt_result_free(&r2);
  }
  /* no such policy, a task nobody can run, a cycle, a bad data index */
  tdm_vt_result r;
  assert_int_equal(tdm__vt_run(&m, &g, TDM_NPOLICIES, 1, &r), TDM_ERR_INVALID_ARG);
  m.classes[0].speedup[SMALL] = 0;
  m.classes[1].speedup[SMALL] = 0;
  tdm_vt_task t = {.codelet = SMALL, .cpu_time = 1};
  assert_int_equal(tdm__vt_run(&m, &(tdm_vt_graph){1, &t, 0, NULL}, TDM_POLICY_HEFT, 1, &r),
                   TDM_ERR_INVALID_ARG);
  unsigned d0[] = {1}, d1[] = {0};
  tdm_vt_task cyc[2] = {{.codelet = GEMM, .cpu_time = 1, .ndeps = 1, .deps = d0},
                        {.codelet = GEMM, .cpu_time = 1, .ndeps = 1, .deps = d1}};
  assert_int_equal(tdm__vt_run(&m, &(tdm_vt_graph){2, cyc, 0, NULL}, TDM_POLICY_HEFT, 1, &r),
                   TDM_ERR_INVALID_ARG);
  tdm_vt_task bad = {.codelet = GEMM, .cpu_time = 1, .nbuf = 1, .data = {5}};
  uint64_t one = 1;
  assert_int_equal(tdm__vt_run(&m, &(tdm_vt_graph){1, &bad, 1, &one}, TDM_POLICY_HEFT, 1, &r),
                   TDM_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_goes_to_the_gpu_small_stays),
      cmocka_unit_test(test_tiled_gemm_near_the_bound),
      cmocka_unit_test(test_tiled_cholesky_near_the_bound),
      cmocka_unit_test(test_two_gpus_share_by_speed),
      cmocka_unit_test(test_slowed_gpu_gets_less),
      cmocka_unit_test(test_priorities),
      cmocka_unit_test(test_heft_pick),
      cmocka_unit_test(test_heft_calibrates),
      cmocka_unit_test(test_queue_prefetches_links_shared),
      cmocka_unit_test(test_cpu_only_work_counted),
      cmocka_unit_test(test_reference),
      cmocka_unit_test(test_copies_between_gpus),
      cmocka_unit_test(test_take_back_spread),
      cmocka_unit_test(test_targets),
      cmocka_unit_test(test_parallel_split),
      cmocka_unit_test(test_ws_devices_steal),
      cmocka_unit_test(test_parse_machine),
      cmocka_unit_test(test_deterministic_and_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
