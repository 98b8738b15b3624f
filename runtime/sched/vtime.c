/*
 * The virtual-time driver: the placement policies' tables (policy.h), run
 * on a simulated clock instead of threads, as StarPU runs its policies
 * on SimGrid's.
 *
 * The simulation follows the runtime's threads: a task whose last
 * predecessor ends is placed by the policy at that moment (tasks
 * released together in order of the user's priority, then of upward rank
 * as HEFT orders them: Topcuoglu, Hariri and Wu, IEEE TPDS 13(3), 2002);
 * a worker that becomes free takes, as the runtime's do, from its class's
 * queue, then from the shared queue, then what the policy's idle hook
 * finds. Each task then waits for its inputs (the coherence module
 * decides the copies, each taking latency + bytes / bandwidth on a link
 * that carries one copy at a time) and runs for its true duration.
 * Queues are in priority order, first in first out; the CPU workers share
 * one (the runtime gives each its own deque, newest first).
 *
 * The model is the runtime's (perfmodel.h), empty at the start as the
 * runtime's is without a saved file, so heft calibrates as it does on a
 * real machine. It learns the time each task took per second of one CPU
 * core's work (one "size" per codelet), when the task ends: a class that
 * slows down gets less work.
 */

#include "sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void codelet_key(unsigned codelet, char *buf, size_t size) {
  snprintf(buf, size, "c%u", codelet);
}

/* What the model knows of t's work (tdm_vt_task.model_time). */
static double model_time(const tdm_vt_task *t) {
  return t->model_time > 0 ? t->model_time : t->cpu_time;
}

/* The true duration of task t on class c starting at `at`. */
static double true_time(const tdm_vt_machine *m, const tdm_vt_task *t, unsigned c, double at) {
  const struct tdm_vt_class *k = &m->classes[c];
  double d = t->cpu_time / k->speedup[t->codelet];
  if (k->slow_at > 0 && at >= k->slow_at && k->slow_factor > 0)
    d *= k->slow_factor;
  return d;
}

/* ---- the simulation state ------------------------------------------------ */

typedef struct vt_state {
  tdm_sched s; /* first: the policies' scheduler; classes are the machine's */
  const tdm_vt_machine *m;
  const tdm_vt_graph *g;
  tdm_task *tasks;   /* per graph task: what the policies see of it */
  unsigned *left;    /* per task: predecessors not ended */
  unsigned *succ_at, *succ; /* task i's successors: succ[succ_at[i] .. succ_at[i + 1]) */
  struct tdm_perfmodel *own_model; /* the scheduler's, while it uses the caller's */
  double *rank;      /* per task: upward rank */
  unsigned nworkers;
  unsigned *class_of; /* per worker */
  tdm_task **running; /* per worker: its task, or NULL */
  double *free_at;    /* per worker: when its task ends */
  tdm_taskq queue[TDM_VT_MAX_CLASSES]; /* per class */
  tdm_taskq shared;
  unsigned placed;   /* tasks queued on a class so far */
  /* tasks only the CPU workers run: queued, running */
  unsigned cpu_only_queued, cpu_only_running;
  int releaser;      /* the device class whose task ended, or -1 */
  /* The data items, whose copies the coherence module decides (as for
   * the runtime's devices): a token is a time, the bits of a double. */
  tdm_handle *items;
  tdm_nodes nodes;
  double now;
  double link_free[TDM_VT_MAX_CLASSES][2]; /* per node: to it, from it */
  double port_free[TDM_VT_MAX_CLASSES][2]; /* copies between devices: the same */
  uint64_t bytes;
} vt_state;

static unsigned index_of(const vt_state *s, const tdm_task *t) {
  return (unsigned)(t - s->tasks);
}

/* ---- memory nodes on the simulated clock ---------------------------------- */

static double time_of(tdm_token t) {
  double d;
  memcpy(&d, &t, sizeof d);
  return d;
}

static tdm_token token_at(double d) {
  tdm_token t;
  memcpy(&t, &d, sizeof t);
  return t;
}

static double latest(const tdm_token *ts, unsigned n) {
  double t = 0;
  for (unsigned i = 0; i < n; i++)
    t = fmax(t, time_of(ts[i]));
  return t;
}

static char vt_memory; /* what a simulated buffer points at */

static void *vt_alloc(void *ctx, unsigned node, const tdm_buffer *b, size_t bytes) {
  (void)ctx;
  (void)node;
  (void)b;
  (void)bytes;
  return &vt_memory;
}

static void vt_free(void *ctx, unsigned node, void *mem) {
  (void)ctx;
  (void)node;
  (void)mem;
}

/* The link node n's copies go over. */
static unsigned link_of(const tdm_vt_machine *m, unsigned node) {
  unsigned l = m->link_of[node];
  return l && l < m->nnodes ? l : node;
}

/* A copy starts when its inputs are there, the link is free and the
 * decision is made; it takes latency + bytes / bandwidth. */
static bool vt_copy(void *ctx, unsigned node, bool to_node, const tdm_copy *c,
                    const tdm_token *after, unsigned nafter, tdm_token *done) {
  vt_state *s = ctx;
  uint64_t bytes = (uint64_t)c->host->nx * c->host->ny * c->host->elem_size;
  unsigned l = link_of(s->m, node);
  double *link = &s->link_free[l][to_node ? 0 : 1];
  double t0 = fmax(fmax(latest(after, nafter), *link), s->now);
  double t = t0 + s->m->latency[l] + (double)bytes / s->m->bandwidth[l];
  *link = t;
  s->bytes += bytes;
  *done = token_at(t);
  return true;
}

/* Straight between device nodes behind one link (a PCIe switch) that
 * both have a peer bandwidth: the larger latency, the smaller bandwidth;
 * the shared link stays free. Devices behind different links copy
 * through the host: peer traffic through a root complex takes both links
 * anyway, and the host's copy, which its later readers use, would be
 * lost. */
static double vt_peer_time(void *ctx, unsigned from, unsigned to, uint64_t bytes) {
  const vt_state *s = ctx;
  const tdm_vt_machine *m = s->m;
  if (!from || !to || m->peer[from] <= 0 || m->peer[to] <= 0 ||
      link_of(m, from) != link_of(m, to))
    return -1;
  return fmax(m->latency[from], m->latency[to]) +
         (double)bytes / fmin(m->peer[from], m->peer[to]);
}

/* A copy between devices holds each one's port (its end of the switch,
 * one copy at a time each way). */
static bool vt_peer_copy(void *ctx, unsigned from, unsigned to, void *from_mem, void *to_mem,
                         size_t bytes, const tdm_token *after, unsigned nafter,
                         tdm_token *done) {
  (void)from_mem;
  (void)to_mem;
  vt_state *s = ctx;
  double d = vt_peer_time(ctx, from, to, bytes);
  if (d < 0)
    return false;
  double t = fmax(fmax(latest(after, nafter), s->now),
                  fmax(s->port_free[from][1], s->port_free[to][0])) +
             d;
  s->port_free[from][1] = s->port_free[to][0] = t;
  s->bytes += bytes;
  *done = token_at(t);
  return true;
}

static tdm_token vt_join(void *ctx, const tdm_token *ts, unsigned n) {
  (void)ctx;
  return token_at(latest(ts, n));
}

static bool vt_retain(void *ctx, tdm_token t) {
  (void)ctx;
  (void)t;
  return true;
}

static void vt_release(void *ctx, tdm_token t) {
  (void)ctx;
  (void)t;
}

static bool vt_test(void *ctx, tdm_token t) {
  (void)ctx;
  (void)t;
  return true;
}

static void vt_wait(void *ctx, const tdm_token *ts, unsigned n) {
  (void)ctx;
  (void)ts;
  (void)n;
}

static double vt_link_time(void *ctx, unsigned node, uint64_t bytes) {
  const vt_state *s = ctx;
  unsigned l = link_of(s->m, node);
  return s->m->latency[l] + (double)bytes / s->m->bandwidth[l];
}

static double vt_link_wait(void *ctx, unsigned node, bool to_node) {
  const vt_state *s = ctx;
  return fmax(0, s->link_free[link_of(s->m, node)][to_node ? 0 : 1] - s->now);
}

static const tdm_node_ops vt_node_ops = {
    .alloc = vt_alloc,
    .free = vt_free,
    .copy = vt_copy,
    .join = vt_join,
    .retain = vt_retain,
    .release = vt_release,
    .test = vt_test,
    .wait = vt_wait,
    .link_time = vt_link_time,
    .link_wait = vt_link_wait,
    .peer_time = vt_peer_time,
    .peer_copy = vt_peer_copy,
};

/* Data items as handles: d bytes in one row, valid on the host. */
static bool items_new(vt_state *s) {
  const tdm_vt_graph *g = s->g;
  s->items = calloc(g->ndata ? g->ndata : 1, sizeof *s->items);
  uint64_t limits[TDM_VT_MAX_CLASSES];
  for (unsigned k = 0; k + 1 < s->m->nnodes; k++)
    limits[k] = UINT64_MAX;
  if (!s->items || tdm__nodes_init(&s->nodes, NULL, &vt_node_ops, s, s->m->nnodes, limits))
    return false;
  for (unsigned d = 0; d < g->ndata; d++) {
    tdm_handle *h = &s->items[d];
    h->buf = (tdm_buffer){.elem_size = 1, .nx = 1, .ny = g->bytes[d], .ld = g->bytes[d]};
    tdm__coh_init(&h->coh, true, NULL);
  }
  return true;
}

static void items_free(vt_state *s) {
  for (unsigned d = 0; s->items && s->nodes.n && d < s->g->ndata; d++)
    tdm__coh_forget(&s->nodes, &s->items[d], false);
  tdm__nodes_fini(&s->nodes);
  free(s->items);
}

/* ---- graph order ------------------------------------------------------- */

/* Each task's successors, from the predecessors the graph lists
 * (checked in range): false without memory. */
static bool successors(vt_state *v) {
  const tdm_vt_graph *g = v->g;
  unsigned n = g->ntasks, edges = 0;
  v->succ_at = calloc(n + 1, sizeof *v->succ_at);
  if (!v->succ_at)
    return false;
  for (unsigned i = 0; i < n; i++)
    for (unsigned k = 0; k < g->tasks[i].ndeps; k++) {
      v->succ_at[g->tasks[i].deps[k] + 1]++;
      edges++;
    }
  for (unsigned i = 0; i < n; i++)
    v->succ_at[i + 1] += v->succ_at[i];
  unsigned *fill = calloc(n ? n : 1, sizeof *fill);
  v->succ = malloc((edges ? edges : 1) * sizeof *v->succ);
  if (!fill || !v->succ) {
    free(fill);
    return false;
  }
  for (unsigned i = 0; i < n; i++) /* successors in the order of the tasks */
    for (unsigned k = 0; k < g->tasks[i].ndeps; k++) {
      unsigned u = g->tasks[i].deps[k];
      v->succ[v->succ_at[u] + fill[u]++] = i;
    }
  free(fill);
  return true;
}

/* Upward rank of each task (mean time over the workers that can run it,
 * plus the largest rank among its successors), by a reverse topological
 * order; false on a cycle or without memory. */
static bool upward_ranks(const vt_state *v, double *rank) {
  const tdm_vt_machine *m = v->m;
  const tdm_vt_graph *g = v->g;
  unsigned n = g->ntasks;
  unsigned *order = malloc((n ? n : 1) * sizeof *order);
  unsigned *indeg = calloc(n ? n : 1, sizeof *indeg);
  bool ok = order && indeg;
  for (unsigned i = 0; ok && i < n; i++)
    indeg[i] = g->tasks[i].ndeps;
  /* Kahn's algorithm for a topological order */
  unsigned head = 0, tail = 0;
  for (unsigned i = 0; ok && i < n; i++)
    if (!indeg[i])
      order[tail++] = i;
  while (ok && head < tail) {
    unsigned u = order[head++];
    for (unsigned e = v->succ_at[u]; e < v->succ_at[u + 1]; e++)
      if (--indeg[v->succ[e]] == 0)
        order[tail++] = v->succ[e];
  }
  ok = ok && tail == n;
  for (unsigned i = n; ok && i-- > 0;) {
    unsigned u = order[i];
    double best = 0;
    for (unsigned e = v->succ_at[u]; e < v->succ_at[u + 1]; e++)
      best = fmax(best, rank[v->succ[e]]);
    /* (by what the model knows of the task, as the runtime's priorities) */
    const tdm_vt_task *t = &g->tasks[u];
    double known = t->cpu_time > 0 ? model_time(t) / t->cpu_time : 1;
    rank[u] = tdm__vt_mean_time(m, t) * known + best;
  }
  free(order);
  free(indeg);
  return ok;
}

/* ---- ready tasks ----------------------------------------------------------- */

/* Whether task a goes before task b when both are ready at once: the
 * user's priority, then the upward rank (the critical path first). */
static bool before(const tdm_vt_graph *g, const double *rank, unsigned a, unsigned b) {
  if (g->tasks[a].priority != g->tasks[b].priority)
    return g->tasks[a].priority > g->tasks[b].priority;
  return rank[a] > rank[b];
}

void tdm__vt_result_free(tdm_vt_result *r) {
  free(r->worker);
  free(r->start);
  free(r->end);
  r->worker = NULL;
  r->start = r->end = NULL;
}

/* ---- the policies' driver ---------------------------------------------------- */

static vt_state *vt_of(const tdm_sched *s) {
  return (vt_state *)(uintptr_t)s;
}

static const tdm_vt_task *graph_task(const tdm_sched *s, const tdm_task *t) {
  const vt_state *v = vt_of(s);
  return &v->g->tasks[index_of(v, t)];
}

static bool vt_runs(const tdm_sched *s, unsigned c, const tdm_task *t) {
  const struct tdm_vt_class *k = &vt_of(s)->m->classes[c];
  return k->workers && k->speedup[graph_task(s, t)->codelet] > 0;
}

/* The model learns seconds per second of a CPU core's work; for a task
 * known by its size (model_time: a data-parallel operation's chunk), as
 * the runtime learns a chunk's (core/place.c): per nanosecond of one
 * core's work, the ratio of sums (perfmodel.h's linear model). */
static uint64_t vt_units(const tdm_vt_task *t) {
  double ns = t->model_time * 1e9;
  return ns >= 1 ? (uint64_t)ns : 1;
}

static double vt_predict(const tdm_sched *s, const tdm_task *t, unsigned c, bool *calibrated) {
  const tdm_vt_task *vt = graph_task(s, t);
  char key[16];
  codelet_key(vt->codelet, key, sizeof key);
  if (vt->model_time > 0)
    return tdm__model_predict_linear(s->model, key, vt_units(vt), s->cls[c].name, calibrated);
  double f = tdm__model_predict(s->model, key, 0, s->cls[c].name, calibrated);
  return f < 0 ? f : f * vt->cpu_time;
}

static bool vt_observe(tdm_sched *s, const tdm_task *t, unsigned c, double seconds) {
  const tdm_vt_task *vt = graph_task(s, t);
  char key[16];
  codelet_key(vt->codelet, key, sizeof key);
  if (vt->model_time > 0)
    return tdm__model_observe_linear(s->model, key, vt_units(vt), s->cls[c].name, seconds);
  return vt->cpu_time > 0 &&
         tdm__model_observe(s->model, key, 0, s->cls[c].name, seconds / vt->cpu_time);
}

static double vt_transfer(const tdm_sched *s, unsigned c, const tdm_task *t) {
  const vt_state *v = vt_of(s);
  return tdm__transfer_time(&v->nodes, v->m->classes[c].node, t);
}

static double vt_link_busy(const tdm_sched *s, unsigned c) {
  const vt_state *v = vt_of(s);
  return tdm__link_busy(&v->nodes, v->m->classes[c].node);
}

static int vt_current(const tdm_sched *s) {
  return vt_of(s)->releaser;
}

/* t's inputs start moving to node now, as a device's queue prefetches
 * them (backends/sim: sim_push); the latest of their arrivals. */
static double fetch(vt_state *v, const tdm_task *t, unsigned node) {
  const tdm_vt_task *vt = &v->g->tasks[index_of(v, t)];
  double at = v->now;
  for (unsigned k = 0; k < vt->nbuf; k++) {
    if (!(vt->modes[k] & TDM_R))
      continue;
    tdm_tokens ts;
    tdm__tokens_init(&ts);
    /* cannot fail: simulated buffers always fit, copies always start */
    tdm__coh_access(&v->nodes, &v->items[vt->data[k]], node, TDM_R, UINT32_MAX, &ts, NULL);
    at = fmax(at, latest(ts.v, ts.n));
    tdm__tokens_release(&v->nodes, &ts);
  }
  return at;
}

static void vt_send(tdm_sched *s, tdm_task *t, unsigned c) {
  vt_state *v = vt_of(s);
  unsigned node = v->m->classes[c].node;
  if (node)
    fetch(v, t, node);
  tdm__taskq_put(&v->queue[c], t);
  v->placed++;
}

static void vt_to_cpu(tdm_sched *s, tdm_task *t) {
  vt_send(s, t, 0);
}

static void vt_share(tdm_sched *s, tdm_task *t, bool wake) {
  (void)wake; /* idle workers look at every change */
  tdm__taskq_put(&vt_of(s)->shared, t);
}

static tdm_task *vt_take_shared(tdm_sched *s) {
  return tdm__taskq_pop(&vt_of(s)->shared);
}

static tdm_task *vt_take(tdm_sched *s, unsigned from, bool (*want)(tdm_task *, void *),
                         void *data) {
  return tdm__taskq_take_last(&vt_of(s)->queue[from], want, data);
}

/* The first task of the CPU workers' queue, if class c can run it (as
 * the runtime's devices steal the oldest task of a deque). */
static tdm_task *vt_steal_cpu(tdm_sched *s, unsigned c) {
  tdm_taskq *q = &vt_of(s)->queue[0];
  return q->head && vt_runs(s, c, q->head) ? tdm__taskq_pop(q) : NULL;
}

/* The CPU workers' oldest queued task, if `want` takes it. */
static tdm_task *vt_take_cpu(tdm_sched *s, bool (*want)(tdm_task *, void *), void *data) {
  tdm_taskq *q = &vt_of(s)->queue[0];
  return q->head && want(q->head, data) ? tdm__taskq_pop(q) : NULL;
}

static void vt_kick_devices(tdm_sched *s) {
  (void)s; /* idle workers look at every change */
}

static void vt_cpu_only(const tdm_sched *s, unsigned *queued, unsigned *running) {
  const vt_state *v = vt_of(s);
  *queued = v->cpu_only_queued;
  *running = v->cpu_only_running;
}

static const tdm_sched_driver vt_driver = {
    .runs = vt_runs,
    .predict = vt_predict,
    .observe = vt_observe,
    .transfer = vt_transfer,
    .current = vt_current,
    .send = vt_send,
    .to_cpu = vt_to_cpu,
    .share = vt_share,
    .take_shared = vt_take_shared,
    .take = vt_take,
    .steal_cpu = vt_steal_cpu,
    .take_cpu = vt_take_cpu,
    .kick_devices = vt_kick_devices,
    .cpu_only = vt_cpu_only,
    .link_busy = vt_link_busy,
};

/* ---- the simulation ---------------------------------------------------------- */

static bool device_ok(const vt_state *v, const tdm_task *t) {
  for (unsigned c = 1; c < v->m->nclasses; c++)
    if (vt_runs(&v->s, c, t))
      return true;
  return false;
}

/* Places the tasks of ready[0..n) (released by a worker of class
 * `releaser`, or -1: at the start), in priority and rank order. */
static void place_ready(vt_state *v, unsigned *ready, unsigned n, int releaser) {
  for (unsigned i = 1; i < n; i++) /* insertion sort: a few at a time */
    for (unsigned j = i; j > 0 && before(v->g, v->rank, ready[j], ready[j - 1]); j--) {
      unsigned x = ready[j];
      ready[j] = ready[j - 1];
      ready[j - 1] = x;
    }
  v->releaser = releaser >= 1 ? releaser : -1;
  for (unsigned i = 0; i < n; i++) {
    tdm_task *t = &v->tasks[ready[i]];
    bool ok = device_ok(v, t);
    t->cpu_counted = !ok; /* as the runtime marks them: counted till they end */
    v->cpu_only_queued += !ok;
    tdm__sched_place(&v->s, t, ok);
  }
  v->releaser = -1;
}

/* Worker w starts t now: when its inputs are there, for its true time. */
static void start(vt_state *v, unsigned w, tdm_task *t, tdm_vt_result *r) {
  unsigned i = index_of(v, t), c = v->class_of[w];
  const tdm_vt_task *vt = &v->g->tasks[i];
  unsigned node = v->m->classes[c].node;
  double at = fetch(v, t, node);
  double end = at + true_time(v->m, vt, c, at);
  if (t->cpu_counted) {
    v->cpu_only_queued--;
    v->cpu_only_running++;
  }
  for (unsigned k = 0; k < vt->nbuf; k++)
    if (vt->modes[k] & TDM_W)
      tdm__coh_written(&v->nodes, &v->items[vt->data[k]], node, token_at(end), NULL, true);
  v->running[w] = t;
  v->free_at[w] = end;
  r->worker[i] = w;
  r->start[i] = at;
  r->end[i] = end;
  r->makespan = fmax(r->makespan, end);
  r->tasks_per_class[c]++;
  r->codelet_class[vt->codelet][c]++;
}

/* Idle workers take work, as the runtime's threads do, until none finds
 * any: their class's queue, the shared queue, the policy's idle hook. */
static void dispatch(vt_state *v, tdm_vt_result *r) {
  for (bool again = true; again;) {
    again = false;
    unsigned placed = v->placed;
    for (unsigned w = 0; w < v->nworkers; w++) {
      if (v->running[w])
        continue;
      unsigned c = v->class_of[w];
      tdm_task *t = tdm__taskq_pop(&v->queue[c]);
      if (!t)
        t = tdm__sched_shared(&v->s, c);
      if (!t)
        t = tdm__sched_idle(&v->s, c);
      if (t) {
        start(v, w, t, r);
        again = true;
      }
    }
    again = again || v->placed != placed; /* a reconsidered task queued */
  }
}

/* Worker w's task ends now: the policy and the model learn it, and the
 * tasks it released are placed. */
static void finish(vt_state *v, unsigned w, const tdm_vt_result *r, unsigned *ready) {
  tdm_task *t = v->running[w];
  unsigned i = index_of(v, t), c = v->class_of[w], n = 0;
  v->running[w] = NULL;
  if (!t->cpu_counted) {
    tdm__sched_finished(&v->s, t, c, r->end[i] - r->start[i]);
  } else { /* every one learnt: the runtime samples them */
    v->cpu_only_running--;
    tdm__sched_cpu_only_ran(&v->s, c, r->end[i] - r->start[i]);
  }
  for (unsigned e = v->succ_at[i]; e < v->succ_at[i + 1]; e++)
    if (--v->left[v->succ[e]] == 0)
      ready[n++] = v->succ[e];
  place_ready(v, ready, n, (int)c);
}

/* The simulation proper: false if tasks are left that no worker takes
 * (not reached: every task was checked to run somewhere). */
static bool simulate(vt_state *v, tdm_vt_result *r, unsigned *ready) {
  unsigned n = 0, ended = 0;
  for (unsigned i = 0; i < v->g->ntasks; i++)
    if (!v->left[i])
      ready[n++] = i;
  place_ready(v, ready, n, -1);
  for (;;) {
    dispatch(v, r);
    unsigned next = v->nworkers; /* the first to end */
    for (unsigned w = 0; w < v->nworkers; w++)
      if (v->running[w] && (next == v->nworkers || v->free_at[w] < v->free_at[next]))
        next = w;
    if (next == v->nworkers)
      return ended == v->g->ntasks;
    v->now = v->free_at[next];
    for (unsigned w = 0; w < v->nworkers; w++)
      if (v->running[w] && v->free_at[w] == v->now) {
        finish(v, w, r, ready);
        ended++;
      }
  }
}

/* Whether the graph's tasks are well formed (indices, a class to run
 * each); the tasks the policies see made from them. */
static bool check_tasks(vt_state *v) {
  const tdm_vt_graph *g = v->g;
  for (unsigned i = 0; i < g->ntasks; i++) {
    const tdm_vt_task *vt = &g->tasks[i];
    tdm_task *t = &v->tasks[i];
    if (vt->codelet >= 8 || vt->nbuf > TDM_VT_MAX_BUFFERS)
      return false;
    bool runnable = false;
    for (unsigned c = 0; c < v->m->nclasses; c++)
      runnable = runnable || vt_runs(&v->s, c, t);
    for (unsigned k = 0; k < vt->nbuf; k++) {
      if (vt->data[k] >= g->ndata)
        return false;
      t->handles[k] = &v->items[vt->data[k]];
      t->modes[k] = vt->modes[k];
    }
    /* known by its size: a data-parallel operation's chunk, as the
     * policies see one (no tail: the driver's model reads the graph) */
    t->chunk = vt->model_time > 0;
    for (unsigned k = 0; k < vt->ndeps; k++)
      if (vt->deps[k] >= g->ntasks)
        return false;
    if (!runnable)
      return false;
    t->nbuf = (uint8_t)vt->nbuf;
    t->priority = vt->priority;
    t->sched_cls = -1;
    v->left[i] = vt->ndeps;
  }
  return true;
}

/* The machine's classes as the scheduler's: class 0 the CPU workers. The
 * model knows a class by its name, as the runtime's knows a device by its
 * own: classes of one name share what is learnt. */
static tdm_status vt_new(vt_state *v, const tdm_vt_machine *m, const tdm_vt_graph *g,
                         tdm_policy p, uint64_t seed, tdm_vt_result *r) {
  memset(v, 0, sizeof *v);
  v->m = m;
  v->g = g;
  v->releaser = -1;
  for (unsigned c = 0; c < m->nclasses; c++) {
    if (m->classes[c].node >= m->nnodes)
      return TDM_ERR_INVALID_ARG;
    v->nworkers += m->classes[c].workers;
  }
  tdm_status st = tdm__sched_init(&v->s, NULL, p, &vt_driver, v, 1, m->nclasses, seed);
  if (st)
    return st;
  for (unsigned c = 0; c < m->nclasses; c++) {
    snprintf(v->s.cls[c].name, sizeof v->s.cls[c].name, "%s", m->classes[c].name);
    v->s.cls[c].workers = m->classes[c].workers;
    v->s.cls[c].prefetches = m->classes[c].node != 0; /* vt_send */
  }
  size_t n = g->ntasks ? g->ntasks : 1, nw = v->nworkers ? v->nworkers : 1;
  v->tasks = tdm__zalloc_aligned(TDM_CACHE_LINE, n * sizeof *v->tasks);
  v->left = calloc(n, sizeof *v->left);
  v->rank = calloc(n, sizeof *v->rank);
  v->class_of = calloc(nw, sizeof *v->class_of);
  v->running = calloc(nw, sizeof *v->running);
  v->free_at = calloc(nw, sizeof *v->free_at);
  r->worker = calloc(n, sizeof *r->worker);
  r->start = calloc(n, sizeof *r->start);
  r->end = calloc(n, sizeof *r->end);
  if (!v->tasks || !v->left || !v->rank || !v->class_of || !v->running || !v->free_at ||
      !r->worker || !r->start || !r->end || !items_new(v))
    return TDM_ERR_NO_MEMORY;
  for (unsigned c = 0, w = 0; c < m->nclasses; c++)
    for (unsigned k = 0; k < m->classes[c].workers; k++)
      v->class_of[w++] = c;
  if (!check_tasks(v))
    return TDM_ERR_INVALID_ARG;
  if (!successors(v))
    return TDM_ERR_NO_MEMORY;
  if (!upward_ranks(v, v->rank))
    return TDM_ERR_INVALID_ARG; /* a cycle (or no memory for the sweep) */
  return TDM_OK;
}

static void vt_free_state(vt_state *v) {
  items_free(v);
  if (v->own_model) /* the caller's goes back, with what it learnt */
    v->s.model = v->own_model;
  tdm__sched_fini(&v->s);
  free(v->tasks);
  free(v->left);
  free(v->succ_at);
  free(v->succ);
  free(v->rank);
  free(v->class_of);
  free(v->running);
  free(v->free_at);
}

tdm_status tdm__vt_run_model(const tdm_vt_machine *m, const tdm_vt_graph *g, tdm_policy p,
                             uint64_t seed, struct tdm_perfmodel *model, tdm_vt_result *r) {
  memset(r, 0, sizeof *r);
  if (!m->nclasses || m->nclasses > TDM_VT_MAX_CLASSES || m->nnodes > TDM_VT_MAX_CLASSES ||
      !m->nnodes || (unsigned)p >= TDM_NPOLICIES)
    return TDM_ERR_INVALID_ARG;
  vt_state v;
  tdm_status st = vt_new(&v, m, g, p, seed, r);
  if (model && v.s.model) {
    v.own_model = v.s.model;
    v.s.model = model;
  }
  unsigned *ready = st ? NULL : malloc((g->ntasks ? g->ntasks : 1) * sizeof *ready);
  if (!st && !ready)
    st = TDM_ERR_NO_MEMORY;
  if (!st && !simulate(&v, r, ready))
    st = TDM_ERR_INVALID_ARG;
  r->bytes_moved = v.bytes;
  free(ready);
  vt_free_state(&v);
  if (st)
    tdm__vt_result_free(r);
  return st;
}

tdm_status tdm__vt_run(const tdm_vt_machine *m, const tdm_vt_graph *g, tdm_policy p,
                       uint64_t seed, tdm_vt_result *r) {
  return tdm__vt_run_model(m, g, p, seed, NULL, r);
}
