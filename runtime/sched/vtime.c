/*
 * The virtual-time driver: placement policies on a simulated clock (see
 * policy.h).
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

#include "../internal.h"
#include "perfmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct vt_state {
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
} vt_state;

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
  vt_state *s = ctx;
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
  const vt_state *s = ctx;
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

/* When data d could be on `node`, if asked at `now`: what the copies
 * tdm__coh_access would make take, without making them. */
static double arrival_estimate(vt_state *s, unsigned d, unsigned node, double now) {
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
static double start_time(vt_state *s, const tdm_vt_task *t, unsigned w, double now, bool commit) {
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

static double predicted_time(vt_state *s, const tdm_vt_task *t, unsigned w) {
  return t->cpu_time * predicted_factor(s->md, s->m, t->codelet, s->class_of[w]);
}

static bool can_run(const vt_state *s, const tdm_vt_task *t, unsigned w) {
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
  vt_state s;
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

