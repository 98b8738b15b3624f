// bench-core's workloads with oneTBB, where meson found it: independent
// tasks with a task_group, dependencies with a flow graph whose edges are
// made by hand (oneTBB infers none from data). Each function returns the
// wall time of building and running its graph, as bench-core times
// Tandem's submissions and their run. oneTBB runs on `nthreads` threads,
// the waiting thread among them (its task_group::wait and
// graph::wait_for_all run tasks), as OpenMP's team does.
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "bench-core-tbb.h"

namespace {

using node = tbb::flow::continue_node<tbb::flow::continue_msg>;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<tbb::global_control> threads;
std::unique_ptr<tbb::task_arena> lone_arena; // bench_tbb_lone's

// A graph of n nodes, node i running body(i); make_edges(nodes) links
// them; the sources are started. Checks that every node ran.
template <typename Edges, typename Body> double run_graph(long n, Edges make_edges, Body body) {
  std::atomic<long> count{0};
  double t0 = now();
  tbb::flow::graph g;
  std::vector<node> nodes;
  nodes.reserve((size_t)n);
  for (long i = 0; i < n; i++)
    nodes.emplace_back(g, [&count, &body, i](const tbb::flow::continue_msg &) {
      body(i);
      count.fetch_add(1, std::memory_order_relaxed);
    });
  std::vector<bool> has_pred((size_t)n, false);
  make_edges(nodes, has_pred);
  for (long i = 0; i < n; i++)
    if (!has_pred[(size_t)i])
      nodes[(size_t)i].try_put(tbb::flow::continue_msg());
  g.wait_for_all();
  double t = now() - t0;
  long ran = count.load();
  if (ran != n)
    std::fprintf(stderr, "bench-core: oneTBB's graph ran %ld nodes of %ld\n", ran, n);
  return t;
}

// ... of empty nodes
template <typename Edges> double run_graph(long n, Edges make_edges) {
  return run_graph(n, make_edges, [](long) {});
}

void edge(std::vector<node> &nodes, std::vector<bool> &has_pred, long from, long to) {
  tbb::flow::make_edge(nodes[(size_t)from], nodes[(size_t)to]);
  has_pred[(size_t)to] = true;
}

} // namespace

extern "C" {

void bench_tbb_init(int nthreads) {
  threads = std::make_unique<tbb::global_control>(
      tbb::global_control::max_allowed_parallelism, (size_t)nthreads);
}

void bench_tbb_fini(void) {
  lone_arena.reset();
  threads.reset();
}

double bench_tbb_independent(int nthreads, long n) {
  (void)nthreads;
  double t0 = now();
  tbb::task_group g;
  for (long i = 0; i < n; i++)
    g.run([] {});
  g.wait();
  return now() - t0;
}

double bench_tbb_nested(int nthreads, long n) {
  (void)nthreads;
  double t0 = now();
  tbb::task_group g;
  g.run([&g, n] {
    for (long i = 0; i < n; i++)
      g.run([] {});
  });
  g.wait();
  return now() - t0;
}

double bench_tbb_chain(int nthreads, long n) {
  (void)nthreads;
  return run_graph(n, [n](std::vector<node> &nodes, std::vector<bool> &has_pred) {
    for (long i = 1; i < n; i++)
      edge(nodes, has_pred, i - 1, i);
  });
}

double bench_tbb_fan(int nthreads, long rounds, int fan) {
  (void)nthreads;
  long per = fan + 1; // a writer, then its readers
  return run_graph(rounds * per, [rounds, per](std::vector<node> &nodes,
                                               std::vector<bool> &has_pred) {
    for (long k = 0; k < rounds; k++) {
      long w = k * per;
      for (long i = 1; i < per; i++) {
        edge(nodes, has_pred, w, w + i); // reader after its writer
        if (k + 1 < rounds)
          edge(nodes, has_pred, w + i, w + per); // the next writer after it
      }
    }
  });
}

double bench_tbb_wide(int nthreads, long steps, int width, int k) {
  (void)nthreads;
  // the edges bench-core's Tandem and OpenMP versions infer, the same at
  // every step (so found once, before the clock starts): task i of step
  // s reads i .. i+k-1 (mod width) of step s-1's outputs, and overwrites
  // its own output of step s-2, which the tasks of step s-1 that read it
  // must have finished reading
  std::vector<std::vector<long>> preds((size_t)width);
  for (long i = 0; i < width; i++)
    for (long m = 0; m < width; m++) {
      bool wrote = false, read = false;
      for (long j = 0; j < k; j++) {
        wrote = wrote || (i + j) % width == m;
        read = read || (m + j) % width == i;
      }
      if (wrote || read)
        preds[(size_t)i].push_back(m);
    }
  return run_graph(steps * width, [steps, width, &preds](std::vector<node> &nodes,
                                                         std::vector<bool> &has_pred) {
    for (long s = 1; s < steps; s++)
      for (long i = 0; i < width; i++)
        for (long m : preds[(size_t)i])
          edge(nodes, has_pred, (s - 1) * width + m, s * width + i);
  });
}

double bench_tbb_stencil(int nthreads, int width, long steps, long iters,
                         double (*busy)(long, double), double *grid) {
  (void)nthreads;
  // grid: two rows of width values; task i of step t (from 1) reads l, i
  // and r of row (t - 1) % 2 and writes i of row t % 2; it comes after
  // those three of step t - 1 (which also read what it overwrites)
  auto body = [width, iters, busy, grid](long k) {
    long t = k / width + 1, i = k % width;
    long l = i > 0 ? i - 1 : i, r = i + 1 < width ? i + 1 : i;
    const double *prev = grid + ((t - 1) % 2) * width;
    grid[(t % 2) * width + i] = busy(iters, (prev[l] + prev[i] + prev[r]) / 3.0);
  };
  return run_graph(steps * width, [steps, width](std::vector<node> &nodes,
                                                 std::vector<bool> &has_pred) {
    for (long t = 1; t < steps; t++)
      for (long i = 0; i < width; i++) {
        long l = i > 0 ? i - 1 : i, r = i + 1 < width ? i + 1 : i;
        edge(nodes, has_pred, (t - 1) * width + l, t * width + i);
        if (i != l)
          edge(nodes, has_pred, (t - 1) * width + i, t * width + i);
        if (r != i)
          edge(nodes, has_pred, (t - 1) * width + r, t * width + i);
      }
  }, body);
}

double bench_tbb_lone(int nthreads) {
  // As Tandem's lone task (tdm_task_wait blocks; a worker runs the
  // task): enqueued into an arena, which a worker thread runs, the
  // caller blocked on a condition variable meanwhile (task_group::wait
  // would run the task on the caller)
  if (!lone_arena) // no slot kept for the caller; as many workers as oneTBB starts
    lone_arena = std::make_unique<tbb::task_arena>(std::max(1, nthreads - 1), 0);
  tbb::task_arena &arena = *lone_arena;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  double t0 = now();
  arena.enqueue([&] {
    std::lock_guard<std::mutex> lock(m);
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return done; });
  return now() - t0;
}

double bench_tbb_start_stop(int nthreads) {
  // oneTBB's scheduler made and ended whole: its worker threads started
  // (a parallel run wakes them) and joined (tbb::finalize)
  double t0 = now();
  tbb::task_scheduler_handle handle{tbb::attach{}};
  {
    tbb::task_arena arena(nthreads);
    arena.execute([nthreads] {
      tbb::task_group g;
      for (int i = 0; i < nthreads; i++)
        g.run([] {});
      g.wait();
    });
  }
  bool ended = tbb::finalize(handle, std::nothrow);
  return ended ? now() - t0 : -1;
}

} // extern "C"
