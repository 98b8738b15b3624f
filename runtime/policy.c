/*
 * Placement policies on a simulated clock (see policy.h).
 *
 * HEFT follows Topcuoglu, Hariri and Wu, "Performance-effective and
 * low-complexity task scheduling for heterogeneous computing", IEEE TPDS
 * 13(3), 2002: tasks are ordered by upward rank (their mean execution time
 * plus the longest path of mean times to the end of the graph) and each
 * goes to the worker where it would finish earliest, counting the time
 * its inputs need to get there. Here a task is placed when it becomes
 * ready, in time order, so that the model has seen every duration that
 * ended before the decision, as the runtime will.
 *
 * The model is the runtime's (perfmodel.h), fed with the time each task
 * took per second of one CPU core's work (one "size" per codelet): its
 * median of the last observations, once calibrated, else the declared
 * speed-up. A spike moves a median by one rank, never the estimate as a
 * whole.
 */
#include "policy.h"

#include "internal.h"
#include "perfmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tdm__policy_name(tdm_policy p) {
  switch (p) {
  case TDM_POLICY_HEFT:
    return "heft";
  case TDM_POLICY_WS:
    return "ws";
  case TDM_POLICY_EAGER:
    return "eager";
  case TDM_POLICY_RANDOM:
    return "random";
  }
  return "unknown";
}

bool tdm__policy_parse(const char *name, tdm_policy *out) {
  static const tdm_policy all[] = {TDM_POLICY_HEFT, TDM_POLICY_WS, TDM_POLICY_EAGER,
                                   TDM_POLICY_RANDOM};
  for (unsigned i = 0; i < sizeof all / sizeof *all; i++)
    if (!strcmp(name, tdm__policy_name(all[i]))) {
      *out = all[i];
      return true;
    }
  return false;
}

int tdm__heft_pick(const tdm_choice *c, unsigned n, unsigned max_tries, bool *calibrating) {
  int best = -1, cal = -1;
  bool all_known = true;
  double best_end = INFINITY;
  for (unsigned i = 0; i < n; i++) {
    if (!c[i].calibrated) {
      all_known = false;
      if (c[i].trying < max_tries && (cal < 0 || c[i].trying < c[cal].trying))
        cal = (int)i;
    } else if (c[i].exec >= 0 && c[i].start + c[i].exec < best_end) {
      best_end = c[i].start + c[i].exec;
      best = (int)i;
    }
  }
  *calibrating = cal >= 0;
  if (cal >= 0)
    return cal;
  return all_known ? best : -1;
}

/* The model's names: codelet c is "c<c>", a class its name. */
static void codelet_key(unsigned codelet, char *buf, size_t size) {
  snprintf(buf, size, "c%u", codelet);
}

/* Seconds per second of a CPU core's work on class c. */
static double predicted_factor(const tdm_perfmodel *pm, const tdm_vt_machine *m,
                               unsigned codelet, unsigned c) {
  char key[16];
  codelet_key(codelet, key, sizeof key);
  bool calibrated = false;
  double f = tdm__model_predict(pm, key, 0, m->classes[c].name, &calibrated);
  return calibrated && f > 0 ? f : 1 / m->classes[c].speedup[codelet];
}

static void observe(tdm_perfmodel *pm, const tdm_vt_machine *m, unsigned codelet, unsigned c,
                    double factor) {
  char key[16];
  codelet_key(codelet, key, sizeof key);
  tdm__model_observe(pm, key, 0, m->classes[c].name, factor);
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

typedef struct sim {
  const tdm_vt_machine *m;
  const tdm_vt_graph *g;
  unsigned nworkers;
  unsigned *class_of;  /* per worker */
  double *free_at;     /* per worker */
  /* The data items, whose copies the coherence module decides (as for
   * the runtime's devices): a token is a time, the bits of a double. */
  tdm_handle *items;
  tdm_nodes nodes;
  double now; /* of the decision being made */
  double link_free[TDM_VT_MAX_CLASSES][2]; /* per node: to it, from it */
  tdm_perfmodel *md;
  uint64_t bytes;
  tdm_choice *choices;    /* per worker: heft's candidates */
  unsigned *choice_worker; /* and their workers */
} sim;

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

/* A copy starts when its inputs are there, the link is free and the
 * decision is made; it takes latency + bytes / bandwidth. */
static bool vt_copy(void *ctx, unsigned node, bool to_node, const tdm_copy *c,
                    const tdm_token *after, unsigned nafter, tdm_token *done) {
  sim *s = ctx;
  uint64_t bytes = (uint64_t)c->host->nx * c->host->ny * c->host->elem_size;
  double *link = &s->link_free[node][to_node ? 0 : 1];
  double t0 = fmax(fmax(latest(after, nafter), *link), s->now);
  double t = t0 + s->m->latency[node] + (double)bytes / s->m->bandwidth[node];
  *link = t;
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
  const sim *s = ctx;
  return s->m->latency[node] + (double)bytes / s->m->bandwidth[node];
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
};

/* Data items as handles: d bytes in one row, valid on the host. */
static bool items_new(sim *s) {
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

static void items_free(sim *s) {
  for (unsigned d = 0; s->items && s->nodes.n && d < s->g->ndata; d++)
    tdm__coh_forget(&s->nodes, &s->items[d], false);
  tdm__nodes_fini(&s->nodes);
  free(s->items);
}

/* When data d could be on `node`, if asked at `now`: what the copies
 * tdm__coh_access would make take, without making them. */
static double arrival_estimate(sim *s, unsigned d, unsigned node, double now) {
  const tdm_vt_machine *m = s->m;
  const tdm_handle *h = &s->items[d];
  const tdm_nodeset *v = &h->coh.valid;
  double ready0 = h->coh.rep ? time_of(h->coh.rep[0].fill) : 0;
  if (tdm__nodeset_has(v, node))
    return h->coh.rep ? time_of(h->coh.rep[node].fill) : 0;
  double bytes = (double)tdm__coh_bytes(h), at_host = ready0;
  if (!tdm__nodeset_has(v, 0)) { /* from a device holding it, through the host */
    unsigned src = (unsigned)tdm__nodeset_next(v, 1);
    double t0 = fmax(fmax(time_of(h->coh.rep[src].fill), s->link_free[src][1]), now);
    at_host = t0 + m->latency[src] + bytes / m->bandwidth[src];
  }
  if (node == 0)
    return at_host;
  double t0 = fmax(fmax(at_host, s->link_free[node][0]), now);
  return t0 + m->latency[node] + bytes / m->bandwidth[node];
}

/* When task t could start on worker w, decided at `now` (its inputs there,
 * the worker free); commit: make the copies. */
static double start_time(sim *s, const tdm_vt_task *t, unsigned w, double now, bool commit) {
  unsigned node = s->m->classes[s->class_of[w]].node;
  double st = fmax(now, s->free_at[w]);
  s->now = now;
  for (unsigned i = 0; i < t->nbuf; i++) {
    if (!(t->modes[i] & TDM_R))
      continue;
    if (!commit) {
      st = fmax(st, arrival_estimate(s, t->data[i], node, now));
      continue;
    }
    tdm_tokens ts;
    tdm__tokens_init(&ts);
    /* cannot fail: simulated buffers always fit, copies always start */
    tdm__coh_access(&s->nodes, &s->items[t->data[i]], node, TDM_R, UINT32_MAX, &ts);
    st = fmax(st, latest(ts.v, ts.n));
    tdm__tokens_release(&s->nodes, &ts);
  }
  return st;
}

static double predicted_time(sim *s, const tdm_vt_task *t, unsigned w) {
  return t->cpu_time * predicted_factor(s->md, s->m, t->codelet, s->class_of[w]);
}

static bool can_run(const sim *s, const tdm_vt_task *t, unsigned w) {
  return s->m->classes[s->class_of[w]].speedup[t->codelet] > 0;
}

/* ---- graph order ------------------------------------------------------- */

/* Upward rank of each task (mean time over the workers that can run it,
 * plus the largest rank among its successors), by a reverse topological
 * order; false on a cycle. */
static bool upward_ranks(const tdm_vt_machine *m, const tdm_vt_graph *g, double *rank,
                         unsigned nworkers, const unsigned *class_of) {
  unsigned n = g->ntasks;
  unsigned *nsucc = calloc(n, sizeof *nsucc), *order = malloc(n * sizeof *order);
  unsigned *indeg = calloc(n, sizeof *indeg);
  bool ok = nsucc && order && indeg;
  for (unsigned i = 0; ok && i < n; i++)
    indeg[i] = g->tasks[i].ndeps;
  /* Kahn's algorithm for a topological order */
  unsigned head = 0, tail = 0;
  for (unsigned i = 0; ok && i < n; i++)
    if (!indeg[i])
      order[tail++] = i;
  /* successors by scanning (graphs here are small) */
  while (ok && head < tail) {
    unsigned u = order[head++];
    for (unsigned v = 0; v < n; v++)
      for (unsigned k = 0; k < g->tasks[v].ndeps; k++)
        if (g->tasks[v].deps[k] == u && --indeg[v] == 0)
          order[tail++] = v;
  }
  ok = ok && tail == n;
  for (unsigned i = n; ok && i-- > 0;) {
    unsigned u = order[i];
    const tdm_vt_task *t = &g->tasks[u];
    double sum = 0;
    unsigned cnt = 0;
    for (unsigned w = 0; w < nworkers; w++) {
      double sp = m->classes[class_of[w]].speedup[t->codelet];
      if (sp > 0) {
        sum += t->cpu_time / sp;
        cnt++;
      }
    }
    double best = 0;
    for (unsigned v = 0; v < n; v++)
      for (unsigned k = 0; k < g->tasks[v].ndeps; k++)
        if (g->tasks[v].deps[k] == u && rank[v] > best)
          best = rank[v];
    rank[u] = (cnt ? sum / cnt : 0) + best;
  }
  free(nsucc);
  free(order);
  free(indeg);
  return ok;
}

/* ---- the driver ----------------------------------------------------------- */

/* Whether task a goes before task b when both are ready at once: the
 * user's priority, then the upward rank (the critical path first). */
static bool before(const tdm_vt_graph *g, const double *rank, unsigned a, unsigned b) {
  if (g->tasks[a].priority != g->tasks[b].priority)
    return g->tasks[a].priority > g->tasks[b].priority;
  return rank[a] > rank[b];
}

static uint64_t next_random(uint64_t *x) {
  /* xorshift64 (Marsaglia, 2003) */
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

void tdm__vt_result_free(tdm_vt_result *r) {
  free(r->worker);
  free(r->start);
  free(r->end);
  r->worker = NULL;
  r->start = r->end = NULL;
}

tdm_status tdm__vt_run(const tdm_vt_machine *m, const tdm_vt_graph *g, tdm_policy p,
                       uint64_t seed, tdm_vt_result *r) {
  memset(r, 0, sizeof *r);
  if (!m->nclasses || m->nclasses > TDM_VT_MAX_CLASSES || m->nnodes > TDM_VT_MAX_CLASSES ||
      !m->nnodes)
    return TDM_ERR_INVALID_ARG;
  sim s;
  memset(&s, 0, sizeof s);
  s.m = m;
  s.g = g;
  for (unsigned c = 0; c < m->nclasses; c++) {
    if (m->classes[c].node >= m->nnodes)
      return TDM_ERR_INVALID_ARG;
    s.nworkers += m->classes[c].workers;
  }
  unsigned n = g->ntasks;
  s.class_of = malloc(s.nworkers * sizeof *s.class_of);
  s.md = tdm__model_new();
  s.choices = malloc(s.nworkers * sizeof *s.choices);
  s.choice_worker = malloc(s.nworkers * sizeof *s.choice_worker);
  s.free_at = calloc(s.nworkers, sizeof *s.free_at);
  double *rank = calloc(n ? n : 1, sizeof *rank), *ready = calloc(n ? n : 1, sizeof *ready);
  unsigned *left = calloc(n ? n : 1, sizeof *left);
  bool *placed = calloc(n ? n : 1, sizeof *placed);
  r->worker = calloc(n ? n : 1, sizeof *r->worker);
  r->start = calloc(n ? n : 1, sizeof *r->start);
  r->end = calloc(n ? n : 1, sizeof *r->end);
  /* for ws: the worker whose queue holds each ready task */
  unsigned *queue_of = calloc(n ? n : 1, sizeof *queue_of);
  tdm_status st = TDM_OK;
  if (!s.class_of || !s.md || !s.choices || !s.choice_worker || !s.free_at || !items_new(&s) ||
      !rank || !ready || !left || !placed || !r->worker || !r->start || !r->end || !queue_of) {
    st = TDM_ERR_NO_MEMORY;
    goto out;
  }
  for (unsigned c = 0, w = 0; c < m->nclasses; c++)
    for (unsigned k = 0; k < m->classes[c].workers; k++)
      s.class_of[w++] = c;
  for (unsigned i = 0; i < n; i++) {
    const tdm_vt_task *t = &g->tasks[i];
    bool runnable = false;
    for (unsigned w = 0; w < s.nworkers && !runnable; w++)
      runnable = can_run(&s, t, w);
    bool bad = !runnable || t->codelet >= 8 || t->nbuf > TDM_VT_MAX_BUFFERS;
    for (unsigned k = 0; k < t->nbuf && !bad; k++)
      bad = t->data[k] >= g->ndata;
    for (unsigned k = 0; k < t->ndeps && !bad; k++)
      bad = t->deps[k] >= n;
    if (bad) {
      st = TDM_ERR_INVALID_ARG;
      goto out;
    }
    left[i] = t->ndeps;
  }
  if (!upward_ranks(m, g, rank, s.nworkers, s.class_of)) {
    st = TDM_ERR_INVALID_ARG; /* a cycle */
    goto out;
  }
  /* observations become known when the task ends: fed to the model in
   * time order before each decision */
  unsigned *by_end = malloc((n ? n : 1) * sizeof *by_end);
  if (!by_end) {
    st = TDM_ERR_NO_MEMORY;
    goto out;
  }
  unsigned nended = 0, nfed = 0;
  uint64_t rng = seed ? seed : 0x9e3779b97f4a7c15ull;
  for (unsigned done = 0; done < n; done++) {
    /* the next decision: for heft and random the ready task with the
     * earliest ready time (then the highest rank); for eager and ws the
     * pairing of a worker and a ready task that can start first */
    unsigned pick = n, wpick = 0;
    double now = INFINITY;
    if (p == TDM_POLICY_HEFT || p == TDM_POLICY_RANDOM) {
      for (unsigned i = 0; i < n; i++)
        if (!placed[i] && !left[i] &&
            (ready[i] < now || (ready[i] == now && pick < n && before(g, rank, i, pick)))) {
          pick = i;
          now = ready[i];
        }
    } else {
      for (unsigned w = 0; w < s.nworkers; w++) {
        unsigned best = n;
        double when = INFINITY;
        bool own = false;
        for (unsigned i = 0; i < n; i++) {
          if (placed[i] || left[i] || !can_run(&s, &g->tasks[i], w))
            continue;
          double t = fmax(ready[i], s.free_at[w]);
          /* ws: among tasks available at the same moment, its own queue's
           * newest first, then the oldest of others'; eager: the oldest */
          bool mine = p == TDM_POLICY_WS && queue_of[i] == w;
          bool better = t < when ||
                        (t == when && best < n &&
                         (p == TDM_POLICY_WS ? (mine && !own) || (mine == own && (mine ? ready[i] > ready[best] : ready[i] < ready[best]))
                                             : ready[i] < ready[best] ||
                                                   (ready[i] == ready[best] && before(g, rank, i, best))));
          if (better) {
            best = i;
            when = t;
            own = mine;
          }
        }
        if (best < n && when < now) {
          now = when;
          pick = best;
          wpick = w;
        }
      }
    }
    if (pick == n) {
      st = TDM_ERR_INVALID_ARG;
      break;
    }
    /* feed the model what ended before now */
    while (nfed < nended && r->end[by_end[nfed]] <= now) {
      unsigned i = by_end[nfed++];
      const tdm_vt_task *t = &g->tasks[i];
      if (t->cpu_time > 0)
        observe(s.md, m, t->codelet, s.class_of[r->worker[i]],
                (r->end[i] - r->start[i]) / t->cpu_time);
    }
    const tdm_vt_task *t = &g->tasks[pick];
    if (p == TDM_POLICY_HEFT) {
      /* the model starts from the declared speeds: always calibrated */
      tdm_choice *c = s.choices;
      unsigned nc = 0;
      for (unsigned w = 0; w < s.nworkers; w++)
        if (can_run(&s, t, w)) {
          s.choice_worker[nc] = w;
          c[nc++] = (tdm_choice){.start = start_time(&s, t, w, now, false) - now,
                                 .exec = predicted_time(&s, t, w),
                                 .calibrated = true};
        }
      bool calibrating;
      wpick = s.choice_worker[tdm__heft_pick(c, nc, 0, &calibrating)];
    } else if (p == TDM_POLICY_RANDOM) {
      unsigned ok = 0;
      for (unsigned w = 0; w < s.nworkers; w++)
        ok += can_run(&s, t, w);
      unsigned k = (unsigned)(next_random(&rng) % ok);
      for (unsigned w = 0; w < s.nworkers; w++)
        if (can_run(&s, t, w) && k-- == 0) {
          wpick = w;
          break;
        }
    }
    double start = start_time(&s, t, wpick, now, true);
    double end = start + true_time(m, t, s.class_of[wpick], start);
    s.free_at[wpick] = end;
    unsigned node = m->classes[s.class_of[wpick]].node;
    for (unsigned k = 0; k < t->nbuf; k++)
      if (t->modes[k] & TDM_W)
        tdm__coh_written(&s.nodes, &s.items[t->data[k]], node, token_at(end));
    placed[pick] = true;
    r->worker[pick] = wpick;
    r->start[pick] = start;
    r->end[pick] = end;
    /* keep by_end sorted by end time (insertion: graphs here are small) */
    unsigned j = nended++;
    while (j > nfed && r->end[by_end[j - 1]] > end) {
      by_end[j] = by_end[j - 1];
      j--;
    }
    by_end[j] = pick;
    if (end > r->makespan)
      r->makespan = end;
    unsigned c = s.class_of[wpick];
    r->tasks_per_class[c]++;
    r->codelet_class[t->codelet][c]++;
    /* release the successors: ready when their last predecessor ends */
    for (unsigned v = 0; v < n; v++)
      for (unsigned k = 0; k < g->tasks[v].ndeps; k++)
        if (g->tasks[v].deps[k] == pick) {
          left[v]--;
          if (end > ready[v]) {
            ready[v] = end;
            queue_of[v] = wpick; /* ws: the releasing worker's queue */
          }
        }
  }
  r->bytes_moved = s.bytes;
  free(by_end);
out:
  free(s.class_of);
  tdm__model_free(s.md);
  free(s.choices);
  free(s.choice_worker);
  free(s.free_at);
  items_free(&s);
  free(rank);
  free(ready);
  free(left);
  free(placed);
  free(queue_of);
  if (st)
    tdm__vt_result_free(r);
  return st;
}

/* ---- the lower bound ------------------------------------------------------- */

double tdm__vt_lower_bound(const tdm_vt_machine *m, const tdm_vt_graph *g) {
  unsigned n = g->ntasks;
  /* critical path at the fastest class: by a topological sweep (the
   * graphs given here list predecessors before their successors, else
   * the sweep repeats until stable) */
  double *finish = calloc(n ? n : 1, sizeof *finish);
  if (!finish)
    return 0;
  double cp = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (unsigned i = 0; i < n; i++) {
      const tdm_vt_task *t = &g->tasks[i];
      double best = INFINITY;
      for (unsigned c = 0; c < m->nclasses; c++)
        if (m->classes[c].workers && m->classes[c].speedup[t->codelet] > 0)
          best = fmin(best, t->cpu_time / m->classes[c].speedup[t->codelet]);
      double begin = 0;
      for (unsigned k = 0; k < t->ndeps; k++)
        begin = fmax(begin, finish[t->deps[k]]);
      if (begin + best > finish[i] + 1e-15) {
        finish[i] = begin + best;
        changed = true;
      }
    }
  }
  for (unsigned i = 0; i < n; i++)
    cp = fmax(cp, finish[i]);
  free(finish);

  /* area: the fractional assignment of the work that finishes first.
   * Classes whose speed-ups are in the same ratio for every codelet used
   * (identical GPUs, or one GPU twice as fast) act as one pool of
   * capacity. One pool: total work over total speed. Two pools: the best
   * split (the second pool takes the tasks it speeds up most, as much as
   * fits). More: the weaker bound of each task at its fastest over all
   * workers. */
  unsigned used[8] = {0};
  for (unsigned i = 0; i < n; i++)
    used[g->tasks[i].codelet] = 1;
  unsigned pool_of[TDM_VT_MAX_CLASSES], ref[TDM_VT_MAX_CLASSES], npools = 0;
  double cap[TDM_VT_MAX_CLASSES] = {0}; /* workers x speed against the pool's reference */
  for (unsigned c = 0; c < m->nclasses; c++) {
    if (!m->classes[c].workers)
      continue;
    unsigned p;
    double ratio = 0;
    for (p = 0; p < npools; p++) {
      const struct tdm_vt_class *a = &m->classes[c], *r = &m->classes[ref[p]];
      bool same = true;
      ratio = -1;
      for (unsigned k = 0; k < 8 && same; k++) {
        if (!used[k])
          continue;
        if (r->speedup[k] == 0 || a->speedup[k] == 0) {
          same = r->speedup[k] == a->speedup[k];
          continue;
        }
        double q = a->speedup[k] / r->speedup[k];
        if (ratio < 0)
          ratio = q;
        else if (fabs(q - ratio) > 1e-12 * ratio)
          same = false;
      }
      if (same && ratio > 0)
        break;
    }
    if (p == npools) {
      ref[npools++] = c;
      ratio = 1;
    }
    pool_of[c] = p;
    cap[p] += m->classes[c].workers * ratio;
  }
  (void)pool_of;
  /* the time a task takes at its pool's reference speed */
#define POOL_TIME(t, p)                                                                       (m->classes[ref[p]].speedup[(t)->codelet] > 0                                                    ? (t)->cpu_time / m->classes[ref[p]].speedup[(t)->codelet]                                  : INFINITY)
  double area = 0;
  if (npools == 1) {
    double work = 0;
    for (unsigned i = 0; i < n; i++)
      work += POOL_TIME(&g->tasks[i], 0);
    area = work / cap[0];
  } else if (npools == 2) {
    unsigned *idx = malloc((n ? n : 1) * sizeof *idx);
    double *adv = malloc((n ? n : 1) * sizeof *adv);
    if (idx && adv) {
      for (unsigned i = 0; i < n; i++) {
        idx[i] = i;
        adv[i] = POOL_TIME(&g->tasks[i], 0) / POOL_TIME(&g->tasks[i], 1);
      }
      for (unsigned i = 1; i < n; i++) /* by advantage of pool 1, descending */
        for (unsigned j = i; j > 0 && adv[idx[j - 1]] < adv[idx[j]]; j--) {
          unsigned x = idx[j];
          idx[j] = idx[j - 1];
          idx[j - 1] = x;
        }
      double lo = 0, hi = 0;
      for (unsigned i = 0; i < n; i++)
        hi += fmin(POOL_TIME(&g->tasks[i], 0), POOL_TIME(&g->tasks[i], 1));
      hi /= fmin(cap[0], cap[1]); /* everything on the smaller pool: an upper end */
      for (int it = 0; it < 100; it++) {
        double T = 0.5 * (lo + hi), room1 = cap[1] * T, need0 = 0;
        for (unsigned a = 0; a < n; a++) {
          const tdm_vt_task *t = &g->tasks[idx[a]];
          double t1 = POOL_TIME(t, 1), t0 = POOL_TIME(t, 0);
          if (t1 <= room1) {
            room1 -= t1;
          } else if (isfinite(t1) && room1 > 0) { /* split the boundary task */
            need0 += (1 - room1 / t1) * t0;
            room1 = 0;
          } else {
            need0 += t0;
          }
        }
        if (need0 <= cap[0] * T)
          hi = T;
        else
          lo = T;
      }
      area = hi;
    }
    free(idx);
    free(adv);
  } else {
    unsigned workers = 0;
    double work = 0;
    for (unsigned c = 0; c < m->nclasses; c++)
      workers += m->classes[c].workers;
    for (unsigned i = 0; i < n; i++) {
      double best = INFINITY;
      for (unsigned c = 0; c < m->nclasses; c++)
        if (m->classes[c].workers && m->classes[c].speedup[g->tasks[i].codelet] > 0)
          best = fmin(best, g->tasks[i].cpu_time / m->classes[c].speedup[g->tasks[i].codelet]);
      work += best;
    }
    area = workers ? work / workers : 0;
  }
#undef POOL_TIME
  return fmax(cp, area);
}

/* ---- machine descriptions -------------------------------------------------- */

/* A number with an optional unit suffix: *scale per unit as given. Values
 * beyond TDM_VT_MAX_VALUE are refused: nothing real is that large, and
 * the emulated devices multiply them into nanosecond counts. */
static bool number(const char *s, size_t len, const char *const *units, const double *scales,
                   double *out) {
  char buf[64];
  if (!len || len >= sizeof buf)
    return false;
  memcpy(buf, s, len);
  buf[len] = 0;
  char *end;
  double v = strtod(buf, &end);
  if (end == buf || !(v >= 0) || !isfinite(v))
    return false;
  if (!*end) {
    *out = v;
    return v <= TDM_VT_MAX_VALUE;
  }
  for (unsigned i = 0; units && units[i]; i++)
    if (!strcmp(end, units[i])) {
      *out = v * scales[i];
      return v <= TDM_VT_MAX_VALUE;
    }
  return false;
}

/* Whether x lies in [lo, hi]: the documented range of a setting. */
static bool within(double x, double lo, double hi) {
  return x >= lo && x <= hi;
}

tdm_status tdm__vt_parse_machine(const char *text, const char *const *codelets,
                                 unsigned ncodelets, tdm_vt_machine *m, char *err,
                                 size_t err_size) {
  static const char *const times[] = {"s", "ms", "us", "ns", NULL};
  static const double time_scale[] = {1, 1e-3, 1e-6, 1e-9};
  static const char *const rates[] = {"k", "M", "G", "T", NULL};
  static const double rate_scale[] = {1e3, 1e6, 1e9, 1e12};
  memset(m, 0, sizeof *m);
  m->nnodes = 1;
#define BAD(...) return (snprintf(err, err_size, __VA_ARGS__), TDM_ERR_INVALID_ARG)
  if (!text || !*text)
    BAD("an empty machine");
  const char *p = text;
  while (*p) {
    size_t clen = strcspn(p, ";");
    const char *end = p + clen, *colon = memchr(p, ':', clen);
    size_t nlen = colon ? (size_t)(colon - p) : clen;
    if (!nlen)
      BAD("a class without a name at \"%.20s\"", p);
    if (m->nclasses == TDM_VT_MAX_CLASSES)
      BAD("more than %d classes", TDM_VT_MAX_CLASSES);
    struct tdm_vt_class *c = &m->classes[m->nclasses++];
    if (nlen >= sizeof c->name)
      BAD("class name \"%.*s\" longer than %zu characters", (int)nlen, p, sizeof c->name - 1);
    memcpy(c->name, p, nlen);
    c->workers = 1;
    /* "cpu", and "cpu.N" (a kind of core, for emulated machines), work in
     * the host's memory */
    bool is_cpu = (nlen == 3 && !strncmp(p, "cpu", 3)) || (nlen > 4 && !strncmp(p, "cpu.", 4)),
         shared = is_cpu;
    for (int k = 0; k < 8; k++)
      c->speedup[k] = 1;
    double latency = 0, bandwidth = 0;
    for (const char *q = colon ? colon + 1 : end; q < end;) {
      size_t slen = strcspn(q, ",;");
      if (q + slen > end)
        slen = (size_t)(end - q);
      const char *eq = memchr(q, '=', slen);
      if (!eq)
        BAD("\"%.*s\" is not key=value", (int)slen, q);
      size_t klen = (size_t)(eq - q), vlen = slen - klen - 1;
      const char *v = eq + 1;
      double x = 0;
#define KEY(k) (klen == strlen(k) && !strncmp(q, k, klen))
      if (KEY("workers")) {
        if (!number(v, vlen, NULL, NULL, &x) || x != floor(x) || x > 4096)
          BAD("workers=%.*s: a whole number up to 4096", (int)vlen, v);
        c->workers = (unsigned)x;
      } else if (KEY("memory")) {
        if (vlen == 6 && !strncmp(v, "shared", 6))
          shared = true;
        else if (vlen == 3 && !strncmp(v, "own", 3))
          shared = false;
        else
          BAD("memory=%.*s: shared or own", (int)vlen, v);
      } else if (KEY("speedup")) {
        if (!number(v, vlen, NULL, NULL, &x) ||
            !within(x, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP))
          BAD("speedup=%.*s: a positive number from %g to %g", (int)vlen, v,
              TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP);
        for (int k = 0; k < 8; k++)
          c->speedup[k] = x;
      } else if (KEY("latency") || KEY("slow_at")) {
        if (!number(v, vlen, times, time_scale, &x) || x > TDM_VT_MAX_TIME)
          BAD("%.*s=%.*s: a time (s, ms, us, ns) up to %g s", (int)klen, q, (int)vlen, v,
              TDM_VT_MAX_TIME);
        if (KEY("latency"))
          latency = x;
        else
          c->slow_at = x;
      } else if (KEY("bandwidth")) {
        if (!number(v, vlen, rates, rate_scale, &x) ||
            !within(x, TDM_VT_MIN_BANDWIDTH, TDM_VT_MAX_BANDWIDTH))
          BAD("bandwidth=%.*s: bytes per second (k, M, G, T) from %g to %g", (int)vlen, v,
              TDM_VT_MIN_BANDWIDTH, TDM_VT_MAX_BANDWIDTH);
        bandwidth = x;
      } else if (KEY("slow_factor")) {
        if (!number(v, vlen, NULL, NULL, &x) ||
            !within(x, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP))
          BAD("slow_factor=%.*s: a positive number from %g to %g", (int)vlen, v,
              TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP);
        c->slow_factor = x;
      } else if (!codelets) {
        if (c->nnamed == 8)
          BAD("class %s: more than 8 codelet speed-ups", c->name);
        if (klen >= sizeof c->named[0].name)
          BAD("codelet name \"%.*s\" longer than %zu characters", (int)klen, q,
              sizeof c->named[0].name - 1);
        if (!number(v, vlen, NULL, NULL, &x) ||
            (x != 0 && !within(x, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP)))
          BAD("%.*s=%.*s: 0 (cannot run it) or a speed-up from %g to %g", (int)klen, q,
              (int)vlen, v, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP);
        memcpy(c->named[c->nnamed].name, q, klen);
        c->named[c->nnamed++].speedup = x;
      } else {
        unsigned k;
        for (k = 0; k < ncodelets && k < 8 && !KEY(codelets[k]); k++)
          ;
        if (k == ncodelets || k == 8)
          BAD("unknown setting \"%.*s\"", (int)klen, q);
        if (!number(v, vlen, NULL, NULL, &x) ||
            (x != 0 && !within(x, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP)))
          BAD("%.*s=%.*s: 0 (cannot run it) or a speed-up from %g to %g", (int)klen, q,
              (int)vlen, v, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP);
        c->speedup[k] = x;
      }
#undef KEY
      q += slen + 1;
    }
    if (!shared) {
      if (m->nnodes == TDM_VT_MAX_CLASSES)
        BAD("too many memory nodes");
      if (bandwidth <= 0)
        BAD("class %s has memory of its own: give its link's bandwidth", c->name);
      c->node = m->nnodes;
      m->latency[m->nnodes] = latency;
      m->bandwidth[m->nnodes] = bandwidth;
      m->nnodes++;
    }
    p = *end ? end + 1 : end;
  }
#undef BAD
  return TDM_OK;
}
