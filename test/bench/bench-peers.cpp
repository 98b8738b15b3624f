// Tandem beside the runtimes a C or C++ program would otherwise take, on
// what each can express, side by side in one process, rounds interleaved:
//
//   build/test/bench/bench-peers [--quick]      (tools/dev.sh peers)
//
//   (a) independent empty tasks submitted from one thread, then waited for
//   (b) a chain: each task reads and writes the one datum the previous
//       wrote (Tandem and StarPU infer the order from the data; oneTBB
//       needs the edges built by hand, in a flow graph; GThreadPool has no
//       dependencies at all)
//   (c) one task on an idle runtime, from submission to the wait's return
//       (median of many, 2 ms idle before each)
//   (d) creating and destroying the runtime (or pool, arena)
//
// Peers: oneTBB (task_group, flow graph, task_arena), GLib's GThreadPool,
// StarPU (starpu_task_insert, with the data's implicit dependencies), each
// built in where meson found it. Every runtime gets the machine's cores
// (its default), no OpenCL device and no GPU: the CPU side alone. Printed:
// for each workload, each peer's median over the rounds and the median of
// the per-round ratios peer/Tandem (above 1: Tandem is faster). Where a
// peer's figure means something else, the page that quotes it says so
// (docs/why.md): oneTBB's task_group::wait runs the task on the waiting
// thread itself, and its arenas share one process-wide pool of threads.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <tandem.h>
#include <unistd.h>

#ifdef BENCH_HAVE_TBB
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>
#endif
#ifdef BENCH_HAVE_GLIB
#include <glib.h>
#endif
#ifdef BENCH_HAVE_STARPU
#include <starpu.h>
#endif

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void idle(unsigned ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// ---- Tandem -----------------------------------------------------------------

void noop(const tdm_buffer *, const void *, size_t) {}
void bump(const tdm_buffer *b, const void *, size_t) {
  ++*static_cast<long *>(b[0].ptr);
}

tdm_runtime *tandem_new() {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.devices = "none";
  cfg.ignore_env = 1;
  tdm_runtime *rt = nullptr;
  if (tdm_runtime_create(&cfg, &rt) != TDM_OK) {
    std::fprintf(stderr, "bench-peers: tdm_runtime_create failed\n");
    std::exit(1);
  }
  return rt;
}

const tdm_codelet cl_noop = {0, "noop", noop, 0, {}, nullptr, nullptr, {}, nullptr};
const tdm_codelet cl_bump = {0, "bump", bump, 1, {TDM_RW}, nullptr, nullptr, {}, nullptr};

double tandem_independent(tdm_runtime *rt, int n) {
  tdm_task_desc d{};
  d.codelet = &cl_noop;
  double t0 = now();
  for (int i = 0; i < n; i++)
    tdm_submit(rt, &d);
  tdm_wait_all(rt);
  return (now() - t0) / n;
}

double tandem_chain(tdm_runtime *rt, int n) {
  long v = 0;
  tdm_handle *h;
  tdm_register_vector(rt, &v, 1, sizeof v, &h);
  tdm_task_desc d{};
  d.codelet = &cl_bump;
  d.handles[0] = h;
  double t0 = now();
  for (int i = 0; i < n; i++)
    tdm_submit(rt, &d);
  tdm_wait_all(rt);
  double t = (now() - t0) / n;
  tdm_handle_unregister(h);
  if (v != n)
    std::fprintf(stderr, "bench-peers: Tandem's chain made %ld, not %d\n", v, n);
  return t;
}

double tandem_lone(tdm_runtime *rt, int n) {
  std::vector<double> t;
  tdm_task_desc d{};
  d.codelet = &cl_noop;
  for (int i = 0; i < n; i++) {
    idle(2);
    tdm_task *task;
    double t0 = now();
    tdm_task_create(rt, &d, &task);
    tdm_task_submit(task);
    tdm_task_wait(task);
    t.push_back(now() - t0);
    tdm_task_release(task);
  }
  return median(t);
}

double tandem_create(int n) {
  std::vector<double> t;
  for (int i = 0; i < n; i++) {
    double t0 = now();
    tdm_runtime_destroy(tandem_new());
    t.push_back(now() - t0);
  }
  return median(t);
}

// ---- oneTBB -------------------------------------------------------------------

#ifdef BENCH_HAVE_TBB
double tbb_independent(int n) {
  tbb::task_group g;
  double t0 = now();
  for (int i = 0; i < n; i++)
    g.run([] {});
  g.wait();
  return (now() - t0) / n;
}

double tbb_chain(int n) {
  long v = 0;
  double t0 = now();
  tbb::flow::graph g;
  std::vector<tbb::flow::continue_node<tbb::flow::continue_msg>> nodes;
  nodes.reserve((size_t)n);
  for (int i = 0; i < n; i++) {
    nodes.emplace_back(g, [&v](const tbb::flow::continue_msg &) { ++v; });
    if (i)
      tbb::flow::make_edge(nodes[(size_t)i - 1], nodes[(size_t)i]);
  }
  nodes[0].try_put(tbb::flow::continue_msg());
  g.wait_for_all();
  double t = (now() - t0) / n;
  if (v != n)
    std::fprintf(stderr, "bench-peers: oneTBB's chain made %ld, not %d\n", v, n);
  return t;
}

double tbb_lone(int n) {
  std::vector<double> t;
  tbb::task_group g;
  for (int i = 0; i < n; i++) {
    idle(2);
    double t0 = now();
    g.run([] {});
    g.wait();
    t.push_back(now() - t0);
  }
  return median(t);
}

double tbb_create(int n) {
  std::vector<double> t;
  for (int i = 0; i < n; i++) {
    double t0 = now();
    tbb::task_arena a;
    a.initialize();
    a.execute([] {});
    a.terminate();
    t.push_back(now() - t0);
  }
  return median(t);
}
#endif

// ---- GLib's GThreadPool -----------------------------------------------------------

#ifdef BENCH_HAVE_GLIB
struct pool_count {
  GMutex lock;
  GCond cond;
  long left;
};

void pool_fn(gpointer data, gpointer user) {
  (void)data;
  auto *c = static_cast<pool_count *>(user);
  g_mutex_lock(&c->lock);
  if (--c->left == 0)
    g_cond_signal(&c->cond);
  g_mutex_unlock(&c->lock);
}

GThreadPool *pool_new(pool_count *c) {
  g_mutex_init(&c->lock);
  g_cond_init(&c->cond);
  return g_thread_pool_new(pool_fn, c, (gint)std::thread::hardware_concurrency(), FALSE,
                           nullptr);
}

void pool_wait(pool_count *c) {
  g_mutex_lock(&c->lock);
  while (c->left)
    g_cond_wait(&c->cond, &c->lock);
  g_mutex_unlock(&c->lock);
}

double glib_independent(GThreadPool *p, pool_count *c, int n) {
  c->left = n;
  double t0 = now();
  for (int i = 0; i < n; i++)
    g_thread_pool_push(p, GINT_TO_POINTER(1), nullptr);
  pool_wait(c);
  return (now() - t0) / n;
}

double glib_lone(GThreadPool *p, pool_count *c, int n) {
  std::vector<double> t;
  for (int i = 0; i < n; i++) {
    idle(2);
    double t0 = now();
    c->left = 1;
    g_thread_pool_push(p, GINT_TO_POINTER(1), nullptr);
    pool_wait(c);
    t.push_back(now() - t0);
  }
  return median(t);
}

double glib_create(int n) {
  std::vector<double> t;
  for (int i = 0; i < n; i++) {
    pool_count c;
    double t0 = now();
    GThreadPool *p = pool_new(&c);
    c.left = 1;
    g_thread_pool_push(p, GINT_TO_POINTER(1), nullptr); // its threads start
    pool_wait(&c);
    g_thread_pool_free(p, FALSE, TRUE);
    t.push_back(now() - t0);
  }
  return median(t);
}
#endif

// ---- StarPU -------------------------------------------------------------------------

#ifdef BENCH_HAVE_STARPU
void sp_noop(void **buffers, void *arg) {
  (void)buffers;
  (void)arg;
}
void sp_bump(void **buffers, void *arg) {
  (void)arg;
  ++*reinterpret_cast<long *>(STARPU_VECTOR_GET_PTR(buffers[0]));
}
starpu_codelet sp_cl_noop, sp_cl_bump;

void starpu_up() {
  setenv("STARPU_SILENT", "1", 1);
  setenv("STARPU_CALIBRATE", "0", 1);
  starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncuda = 0;
  conf.nopencl = 0;
  if (starpu_init(&conf) != 0) {
    std::fprintf(stderr, "bench-peers: starpu_init failed\n");
    std::exit(1);
  }
}

double starpu_independent(int n) {
  double t0 = now();
  for (int i = 0; i < n; i++)
    starpu_task_insert(&sp_cl_noop, 0);
  starpu_task_wait_for_all();
  return (now() - t0) / n;
}

double starpu_chain(int n) {
  long v = 0;
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&v, 1, sizeof v);
  double t0 = now();
  for (int i = 0; i < n; i++)
    starpu_task_insert(&sp_cl_bump, STARPU_RW, h, 0);
  starpu_task_wait_for_all();
  double t = (now() - t0) / n;
  starpu_data_unregister(h);
  if (v != n)
    std::fprintf(stderr, "bench-peers: StarPU's chain made %ld, not %d\n", v, n);
  return t;
}

double starpu_lone(int n) {
  std::vector<double> t;
  for (int i = 0; i < n; i++) {
    idle(2);
    double t0 = now();
    starpu_task_insert(&sp_cl_noop, 0);
    starpu_task_wait_for_all();
    t.push_back(now() - t0);
  }
  return median(t);
}

double starpu_create(int n) {
  std::vector<double> t;
  for (int i = 0; i < n; i++) {
    double t0 = now();
    starpu_up();
    starpu_shutdown();
    t.push_back(now() - t0);
  }
  return median(t);
}
#endif

// ---- the table -------------------------------------------------------------------------

struct row {
  std::string peer;
  std::vector<double> t, ratio; // per round: time, time / Tandem's
};

void show(const char *what, const char *unit, double scale, std::vector<row> &rows) {
  std::printf("\n%s\n", what);
  std::printf("  %-42s %12s %14s\n", "runtime", unit, "peer / Tandem");
  for (auto &r : rows) {
    if (r.t.empty())
      continue;
    double m = median(r.t) * scale;
    if (r.peer.rfind("Tandem", 0) == 0)
      std::printf("  %-42s %12.3g %14s\n", r.peer.c_str(), m, "1");
    else
      std::printf("  %-42s %12.3g %14.3g\n", r.peer.c_str(), m, median(r.ratio));
  }
}

} // namespace

int main(int argc, char **argv) {
  bool quick = argc > 1 && !std::strcmp(argv[1], "--quick");
  int rounds = quick ? 3 : 5, n_ind = quick ? 20000 : 200000, n_chain = quick ? 20000 : 100000,
      n_lone = quick ? 50 : 200, n_create = quick ? 5 : 20;
  std::printf("bench-peers: %d rounds interleaved; (a) %d independent tasks, (b) a chain of %d, "
              "(c) %d lone tasks, (d) %d creations; %u cores\n",
              rounds, n_ind, n_chain, n_lone, n_create, std::thread::hardware_concurrency());
#ifdef BENCH_HAVE_STARPU
  sp_cl_noop.cpu_funcs[0] = sp_noop;
  sp_cl_noop.nbuffers = 0;
  sp_cl_bump.cpu_funcs[0] = sp_bump;
  sp_cl_bump.nbuffers = 1;
  sp_cl_bump.modes[0] = STARPU_RW;
#endif
  enum { TANDEM, TBB, GLIB, STARPU, NPEERS };
  const char *names[NPEERS] = {"Tandem", "oneTBB", "GLib GThreadPool", "StarPU"};
  const char *how[4][NPEERS] = {
      {"Tandem (tdm_submit)", "oneTBB (task_group)", "GLib GThreadPool (push)",
       "StarPU (starpu_task_insert)"},
      {"Tandem (RW on one handle)", "oneTBB (flow graph, edges by hand)", "",
       "StarPU (STARPU_RW on one handle)"},
      {"Tandem (create, submit, wait)", "oneTBB (task_group run, wait)",
       "GLib GThreadPool (push, cond wait)", "StarPU (insert, wait_for_all)"},
      {"Tandem (tdm_runtime_create, _destroy)", "oneTBB (task_arena initialize, terminate)",
       "GLib GThreadPool (new, free)", "StarPU (starpu_init, _shutdown)"}};
  std::vector<row> rows[4];
  for (int w = 0; w < 4; w++)
    for (int p = 0; p < NPEERS; p++)
      rows[w].push_back(row{how[w][p], {}, {}});
  bool have[NPEERS] = {true, false, false, false};
#ifdef BENCH_HAVE_TBB
  have[TBB] = true;
#endif
#ifdef BENCH_HAVE_GLIB
  have[GLIB] = true;
#endif
#ifdef BENCH_HAVE_STARPU
  have[STARPU] = true;
#endif
  for (int p = 1; p < NPEERS; p++)
    if (!have[p])
      std::printf("(%s: not built in; install it and run meson again)\n", names[p]);
  for (int r = 0; r < rounds; r++) {
    // each peer alone on the machine in its turn: the others' threads idle
    double t[4][NPEERS] = {};
    {
      tdm_runtime *rt = tandem_new();
      tandem_independent(rt, n_ind / 10); // warm
      t[0][TANDEM] = tandem_independent(rt, n_ind);
      t[1][TANDEM] = tandem_chain(rt, n_chain);
      t[2][TANDEM] = tandem_lone(rt, n_lone);
      tdm_runtime_destroy(rt);
      t[3][TANDEM] = tandem_create(n_create);
    }
#ifdef BENCH_HAVE_TBB
    tbb_independent(n_ind / 10);
    t[0][TBB] = tbb_independent(n_ind);
    t[1][TBB] = tbb_chain(n_chain);
    t[2][TBB] = tbb_lone(n_lone);
    t[3][TBB] = tbb_create(n_create);
#endif
#ifdef BENCH_HAVE_GLIB
    {
      pool_count c;
      GThreadPool *p = pool_new(&c);
      glib_independent(p, &c, n_ind / 10);
      t[0][GLIB] = glib_independent(p, &c, n_ind);
      t[2][GLIB] = glib_lone(p, &c, n_lone);
      g_thread_pool_free(p, FALSE, TRUE);
      t[3][GLIB] = glib_create(n_create);
    }
#endif
#ifdef BENCH_HAVE_STARPU
    starpu_up();
    int sp_n = n_ind / 10; // StarPU's tasks cost microseconds: fewer of them
    starpu_independent(sp_n / 10);
    t[0][STARPU] = starpu_independent(sp_n);
    t[1][STARPU] = starpu_chain(n_chain / 10);
    t[2][STARPU] = starpu_lone(n_lone);
    starpu_shutdown();
    t[3][STARPU] = starpu_create(quick ? 2 : 3);
#endif
    for (int w = 0; w < 4; w++)
      for (int p = 0; p < NPEERS; p++)
        if (t[w][p] > 0) {
          rows[w][(size_t)p].t.push_back(t[w][p]);
          rows[w][(size_t)p].ratio.push_back(t[w][p] / t[w][TANDEM]);
        }
  }
  show("(a) independent empty tasks, submitted from one thread", "ns/task", 1e9, rows[0]);
  show("(b) a chain: each task reads and writes what the previous wrote", "ns/task", 1e9,
       rows[1]);
  std::printf("  (GLib GThreadPool: no dependencies; a chain is the program's to build)\n");
  show("(c) one task on an idle runtime: submit to wait's return (median)", "us", 1e6, rows[2]);
  show("(d) create and destroy (median)", "ms", 1e3, rows[3]);
  return 0;
}
