/*
 * Memory nodes and the operations each one copies through. Node 0 is the
 * host's memory; node 1 + k is device worker k's. Each backend gives the
 * operations of its own devices' nodes (tdm__nodes_add), as StarPU
 * indexes its node operations by the kind of memory. With one backend the
 * coherence module calls its operations directly; with several, it calls
 * the multiplexer below, which passes each call on to the backend of the
 * node, or of the token: a token carries its backend in bits 56 to 62
 * (backends/backend.h), one plus the index of its way.
 *
 * Tokens of different backends meet in one call when a copy on one
 * device waits for a copy from another (through the host). No backend
 * can wait for another's token in its own queues: the multiplexer waits
 * for the foreign ones on the calling thread before passing the call on,
 * joins tokens of several backends by waiting for them, and declines
 * when_done for them (the caller then waits). Mixed backends are for
 * trying a machine, not for speed.
 */
#include "data.h"

#include <stdlib.h>
#include <string.h>

#define TAG_SHIFT 56
#define TAG_MASK (UINT64_C(0x7f) << TAG_SHIFT)
/* Tokens a call passes on from the stack (more: from the heap, or waited
 * for). */
#define ROOM (TDM_MAX_BUFFERS * 2 + 4)

int tdm__nodes_make(tdm_nodes *nodes, tdm_runtime *rt, unsigned n) {
  memset(nodes, 0, sizeof *nodes);
  nodes->rt = rt;
  nodes->keep_host = rt && rt->cfg.writeback;
  nodes->lineage_max = rt ? rt->cfg.lineage : 0;
  nodes->retries = rt ? rt->cfg.retries : 0;
  if (n > TDM_MAX_NODES) {
    tdm__log(rt, TDM_LOG_ERROR, "%u memory nodes: at most %d", n, TDM_MAX_NODES);
    return TDM_ERR_INVALID_ARG;
  }
  nodes->mem = tdm__calloc(rt, n, sizeof *nodes->mem);
  if (!nodes->mem)
    return TDM_ERR_NO_MEMORY;
  for (unsigned k = 1; k < n; k++) {
    int err = pthread_mutex_init(&nodes->mem[k].lock, NULL);
    if (err) {
      tdm__log(rt, TDM_LOG_ERROR, "pthread_mutex_init: %s", strerror(err));
      nodes->n = k; /* those made */
      tdm__nodes_fini(nodes);
      return TDM_ERR_SYSTEM;
    }
    nodes->n = k + 1;
  }
  nodes->n = n;
  return TDM_OK;
}

void tdm__nodes_fini(tdm_nodes *nodes) {
  for (unsigned k = 1; nodes->mem && k < nodes->n; k++)
    pthread_mutex_destroy(&nodes->mem[k].lock);
  free(nodes->mem);
  nodes->mem = NULL;
  nodes->n = 0;
}

static const tdm_node_ops mux_ops;

/* The index of the way of (ops, ctx), added if new (the coherence module
 * then calls them directly while they are the only ones, else the
 * multiplexer); -1 (logged) past TDM_MAX_BACKENDS. */
static int way_for(tdm_nodes *nodes, const tdm_node_ops *ops, void *ctx) {
  unsigned w = 0;
  while (w < nodes->nways && (nodes->ways[w].ops != ops || nodes->ways[w].ctx != ctx))
    w++;
  if (w < nodes->nways)
    return (int)w;
  if (w == TDM_MAX_BACKENDS) {
    tdm__log(nodes->rt, TDM_LOG_ERROR, "memory nodes: at most %d backends", TDM_MAX_BACKENDS);
    return -1;
  }
  nodes->ways[nodes->nways++] = (tdm_node_way){ops, ctx};
  nodes->ops = nodes->nways == 1 ? ops : &mux_ops;
  nodes->ctx = nodes->nways == 1 ? ctx : nodes;
  return (int)w;
}

int tdm__nodes_add(tdm_nodes *nodes, const tdm_node_ops *ops, void *ctx, unsigned first,
                   unsigned n, const uint64_t *limits) {
  if (1 + first + n > nodes->n) {
    tdm__log(nodes->rt, TDM_LOG_ERROR, "memory nodes %u to %u: only %u made", 1 + first,
             first + n, nodes->n);
    return TDM_ERR_INVALID_ARG;
  }
  int w = way_for(nodes, ops, ctx);
  if (w < 0)
    return TDM_ERR_INVALID_ARG;
  for (unsigned i = 0; i < n; i++) {
    tdm_memnode *m = &nodes->mem[1 + first + i];
    m->counted = limits[i] != 0;
    m->limit = limits[i];
    nodes->way_of[1 + first + i] = (uint8_t)w;
  }
  return TDM_OK;
}

int tdm__nodes_init(tdm_nodes *nodes, tdm_runtime *rt, const tdm_node_ops *ops, void *ctx,
                    unsigned n, const uint64_t *limits) {
  int st = tdm__nodes_make(nodes, rt, n);
  if (st)
    return st;
  if (n > 1)
    return tdm__nodes_add(nodes, ops, ctx, 0, n - 1, limits);
  way_for(nodes, ops, ctx); /* the first: cannot fail */
  return TDM_OK;
}

/* ---- the multiplexer ------------------------------------------------------ */

static const tdm_node_way *way_of_node(const tdm_nodes *nodes, unsigned node) {
  return &nodes->ways[nodes->way_of[node]];
}

/* The way a token of the multiplexer's came from (t != 0), and that
 * way. */
static unsigned way_of_token(tdm_token t) {
  return (unsigned)((t & TAG_MASK) >> TAG_SHIFT) - 1;
}
static const tdm_node_way *token_way(const void *nodes, tdm_token t) {
  return &((const tdm_nodes *)nodes)->ways[way_of_token(t)];
}

static tdm_token own(tdm_token t) {
  return t & ~TAG_MASK;
}

/* Way w's token t as the multiplexer's: *out; false (logged, *out 0,
 * t waited for) when t uses the bits that say whose it is. */
static bool tagged(const tdm_nodes *nodes, unsigned w, tdm_token t, tdm_token *out) {
  *out = 0;
  if (!(t & TAG_MASK)) {
    *out = t ? t | (tdm_token)(w + 1) << TAG_SHIFT : 0;
    return true;
  }
  tdm__log(nodes->rt, TDM_LOG_ERROR,
           "memory nodes: a token of the backend of way %u uses bits 56 to 62", w);
  nodes->ways[w].ops->wait(nodes->ways[w].ctx, &t, 1);
  return false;
}

/* tagged, for a reference of way w's that the multiplexer owns. */
static tdm_token tagged_own(const tdm_nodes *nodes, unsigned w, tdm_token t) {
  tdm_token out;
  if (!tagged(nodes, w, t, &out))
    nodes->ways[w].ops->release(nodes->ways[w].ctx, t);
  return out;
}

static void *mux_alloc(void *ctx, unsigned node, const tdm_buffer *b, size_t bytes) {
  const tdm_node_way *w = way_of_node(ctx, node);
  return w->ops->alloc(w->ctx, node, b, bytes);
}

static void mux_free(void *ctx, unsigned node, void *mem) {
  const tdm_node_way *w = way_of_node(ctx, node);
  w->ops->free(w->ctx, node, mem);
}

static void wait_one(const tdm_nodes *nodes, tdm_token t) {
  const tdm_node_way *w = token_way(nodes, t);
  tdm_token o = own(t);
  w->ops->wait(w->ctx, &o, 1);
}

/* after[0 .. nafter-1] as way w's own, in list (ROOM of them, else from
 * the heap: *list changed, freed by the caller); other backends' waited
 * for here. How many, or -1 when out of memory. */
static int own_list(const tdm_nodes *nodes, unsigned w, const tdm_token *after,
                    unsigned nafter, tdm_token **list) {
  if (nafter > ROOM && !(*list = tdm__malloc(nodes->rt, nafter * sizeof **list)))
    return -1;
  int n = 0;
  for (unsigned i = 0; i < nafter; i++) {
    if (!after[i])
      continue;
    if (way_of_token(after[i]) == w)
      (*list)[n++] = own(after[i]);
    else /* another backend's: waited for here */
      wait_one(nodes, after[i]);
  }
  return n;
}

static bool mux_copy(void *ctx, unsigned node, bool to_node, const tdm_copy *c,
                     const tdm_token *after, unsigned nafter, tdm_token *done) {
  const tdm_nodes *nodes = ctx;
  unsigned w = nodes->way_of[node];
  tdm_token mine[ROOM] = {0}, *list = mine;
  int n = own_list(nodes, w, after, nafter, &list);
  if (n < 0)
    return false;
  tdm_token t = 0;
  const tdm_node_way *way = &nodes->ways[w];
  bool ok = way->ops->copy(way->ctx, node, to_node, c, list, (unsigned)n, &t);
  if (list != mine)
    free(list);
  *done = ok ? tagged_own(nodes, w, t) : 0;
  return ok && (*done || !t);
}

/* Between the devices of one backend only. */
static double mux_peer_time(void *ctx, unsigned from, unsigned to, uint64_t bytes) {
  const tdm_nodes *nodes = ctx;
  const tdm_node_way *w = way_of_node(nodes, to);
  if (nodes->way_of[from] != nodes->way_of[to] || !w->ops->peer_time || !w->ops->peer_copy)
    return -1;
  return w->ops->peer_time(w->ctx, from, to, bytes);
}

static bool mux_peer_copy(void *ctx, unsigned from, unsigned to, void *from_mem, void *to_mem,
                          size_t bytes, const tdm_token *after, unsigned nafter,
                          tdm_token *done) {
  const tdm_nodes *nodes = ctx;
  unsigned w = nodes->way_of[to];
  const tdm_node_way *way = &nodes->ways[w];
  if (nodes->way_of[from] != w || !way->ops->peer_copy)
    return false;
  tdm_token mine[ROOM] = {0}, *list = mine;
  int n = own_list(nodes, w, after, nafter, &list);
  if (n < 0)
    return false;
  tdm_token t = 0;
  bool ok = way->ops->peer_copy(way->ctx, from, to, from_mem, to_mem, bytes, list,
                                (unsigned)n, &t);
  if (list != mine)
    free(list);
  *done = ok ? tagged_own(nodes, w, t) : 0;
  return ok && (*done || !t);
}

/* Whether ts are all of one way, none 0; *w gets it. */
static bool one_way(const tdm_token *ts, unsigned n, unsigned *w) {
  for (unsigned i = 0; i < n; i++)
    if (!ts[i] || way_of_token(ts[i]) != way_of_token(ts[0]))
      return false;
  *w = n ? way_of_token(ts[0]) : 0;
  return true;
}

static bool mux_retain(void *ctx, tdm_token t) {
  if (!t)
    return true;
  const tdm_node_way *w = token_way(ctx, t);
  return w->ops->retain(w->ctx, own(t));
}

static bool mux_failed(void *ctx, tdm_token t) {
  if (!t)
    return false;
  const tdm_node_way *w = token_way(ctx, t);
  return w->ops->failed && w->ops->failed(w->ctx, own(t));
}

static void mux_wait(void *ctx, const tdm_token *ts, unsigned n) {
  for (unsigned i = 0; i < n; i++)
    if (ts[i])
      wait_one(ctx, ts[i]);
}

static tdm_token mux_join(void *ctx, const tdm_token *ts, unsigned n) {
  const tdm_nodes *nodes = ctx;
  unsigned w;
  if (n && n <= ROOM && one_way(ts, n, &w)) {
    tdm_token mine[ROOM] = {0};
    for (unsigned i = 0; i < n; i++)
      mine[i] = own(ts[i]);
    const tdm_node_way *way = &nodes->ways[w];
    return tagged_own(nodes, w, way->ops->join(way->ctx, mine, n)); /* 0: waited for */
  }
  /* several backends': waited for; a failed one stands for them all */
  mux_wait(ctx, ts, n);
  for (unsigned i = 0; i < n; i++)
    if (mux_failed(ctx, ts[i]) && mux_retain(ctx, ts[i]))
      return ts[i];
  return 0;
}

static void mux_release(void *ctx, tdm_token t) {
  if (!t)
    return;
  const tdm_node_way *w = token_way(ctx, t);
  w->ops->release(w->ctx, own(t));
}

static bool mux_test(void *ctx, tdm_token t) {
  if (!t)
    return true;
  const tdm_node_way *w = token_way(ctx, t);
  return w->ops->test(w->ctx, own(t));
}

static bool mux_when_done(void *ctx, const tdm_token *ts, unsigned n, void (*fn)(void *, int),
                          void *arg) {
  const tdm_nodes *nodes = ctx;
  unsigned w;
  if (!n || n > ROOM || !one_way(ts, n, &w) || !nodes->ways[w].ops->when_done)
    return false; /* the caller waits */
  tdm_token mine[ROOM] = {0};
  for (unsigned i = 0; i < n; i++)
    mine[i] = own(ts[i]);
  return nodes->ways[w].ops->when_done(nodes->ways[w].ctx, mine, n, fn, arg);
}

static double mux_link_time(void *ctx, unsigned node, uint64_t bytes) {
  const tdm_node_way *w = way_of_node(ctx, node);
  return w->ops->link_time(w->ctx, node, bytes);
}

static double mux_link_wait(void *ctx, unsigned node, bool to_node) {
  const tdm_node_way *w = way_of_node(ctx, node);
  return w->ops->link_wait ? w->ops->link_wait(w->ctx, node, to_node) : 0;
}

void tdm__tokens_for(const tdm_nodes *nodes, unsigned slot, tdm_tokens *w) {
  if (nodes->nways < 2 || w->way)
    return;
  unsigned way = nodes->way_of[slot], n = 0;
  for (unsigned i = 0; i < w->n; i++) {
    if (w->v[i] && way_of_token(w->v[i]) == way) {
      w->v[n++] = own(w->v[i]);
    } else if (w->v[i]) { /* another backend's: waited for here */
      wait_one(nodes, w->v[i]);
      mux_release((void *)nodes, w->v[i]);
    }
  }
  w->n = n;
  w->way = way + 1;
}

tdm_token tdm__token_from(const tdm_nodes *nodes, unsigned slot, tdm_token t) {
  if (nodes->nways < 2)
    return t;
  tdm_token out;
  tagged(nodes, nodes->way_of[slot], t, &out); /* 0 (waited for) when it cannot be */
  return out;
}

static const tdm_node_ops mux_ops = {
    .alloc = mux_alloc,
    .free = mux_free,
    .copy = mux_copy,
    .join = mux_join,
    .retain = mux_retain,
    .release = mux_release,
    .test = mux_test,
    .wait = mux_wait,
    .failed = mux_failed,
    .when_done = mux_when_done,
    .link_time = mux_link_time,
    .link_wait = mux_link_wait,
    .peer_time = mux_peer_time,
    .peer_copy = mux_peer_copy,
};
