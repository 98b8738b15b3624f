/*
 * Recorded graphs (tdm_graph_*): tasks recorded once, launched many
 * times, each launch as if they were submitted then (tandem.h).
 *
 * Recording runs task.c's dependency analysis on symbols: each handle a
 * graph names keeps, while recording, its last writer among the graph's
 * tasks (or none yet) and the graph's readers since. A recorded task's
 * edges to earlier recorded tasks are found then and kept by index; what
 * it must wait for outside the graph is kept as what it needs of the
 * handle's state at the launch: its writers (the task reads, or writes,
 * before any writer of the graph), its readers (it is the graph's first
 * writer of the handle). The state a launch leaves in each handle is
 * known too: the graph's last writer and its readers since, or, without
 * a writer in the graph, the handle's readers and the graph's.
 *
 * A launch makes every task first (nothing is linked: a failure frees
 * them), then, under the locks of the graph's handles (taken once, in
 * address order, not once per access), links the recorded edges with
 * plain stores (no task of the launch has been released: no other
 * thread sees them yet) and the edges to tasks outside with tdm__link_edge,
 * as a submission does; then it commits the handles' states, unlocks,
 * and releases each task's submitter count in recorded order. The work
 * per task is its making, its edges and its placement: no descriptor
 * checks, device preparation, sorting of its handles, locking or
 * scanning of handle lists.
 *
 * Graphs are what Taskflow's taskflows and CUDA graphs are to those
 * systems (built once, run many times); unlike them, a launch is ordered
 * with the submissions around it by the handles it names, which is
 * StarPU's sequential-task-flow model.
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>

/* What a recorded task needs of a handle's state at a launch (bits). */
enum {
  EXT_WRITERS = 1, /* waits for its writers */
  EXT_DATA = 2,    /* ... and reads their version (the edges are tagged) */
  EXT_READERS = 4  /* waits for its readers */
};
#define EXT_BITS 3

/* A growable array of 32-bit values. */
typedef struct u32vec {
  uint32_t *v;
  unsigned n, cap;
} u32vec;

static int u32_reserve(tdm_runtime *rt, u32vec *a, unsigned cap) {
  if (cap <= a->cap)
    return 0;
  unsigned c = a->cap ? a->cap : 4;
  while (c < cap)
    c *= 2;
  uint32_t *v = tdm__realloc(rt, a->v, c * sizeof *v);
  if (!v)
    return -1;
  a->v = v;
  a->cap = c;
  return 0;
}

typedef struct gnode {
  /* codelet, its own copy of the arguments, callback, priority, group
   * (a reference held), cost, flags; no handles */
  tdm_task_desc desc;
  /* the handles and modes in order, in a block of the node's own with
   * dhs and dmodes */
  tdm_desc_bufs bufs;
  /* distinct handles by address and their modes (with more than
   * TDM_MAX_BUFFERS buffers, a task keeps them: tdm_task_more.locked) */
  tdm_handle **dhs;
  unsigned *dmodes;
  unsigned nd;
  uint64_t dev_mask; /* the device preparation's, at recording */
  bool device_ok;
  u32vec preds;  /* recorded task index << 1 | 1 when it reads its version */
  u32vec xpreds; /* tdm_graph_depend's (for the one-by-one launch) */
  u32vec bound;  /* graph handle index << EXT_BITS | EXT_* */
} gnode;

typedef struct ghandle {
  tdm_handle *h;       /* a reference held */
  int64_t last_writer; /* the graph's last writer, -1 while none */
  u32vec readers;      /* the graph's readers since (or since the start) */
} ghandle;

struct tdm_graph {
  tdm_runtime *rt;
  struct tdm_graph *next, *prev; /* the runtime's graphs (groups_lock) */
  gnode *nodes;
  size_t n, cap;
  ghandle *hs;
  unsigned nh, caph;
  unsigned *slots; /* open addressing: handle -> 1 + index in hs; 0 empty */
  unsigned nslots;
  tdm_handle **locks; /* hs's handles by address, for nlocks of them */
  unsigned nlocks;
  /* a launch's tasks, and how many edges each has from outside (found
   * by reserve_all), then in all (link_all); room for cinst */
  tdm_task **inst;
  unsigned *nedges;
  size_t cinst;
  uint32_t *mark; /* recording: the last task that made each one a predecessor (+1) */
  /* some recorded task has predecessors from outside, or more edges than
   * a task holds inline: a launch looks at each task before linking */
  bool reserves;
  _Atomic bool launching;
};

static const char *const what_add = "tdm_graph_add";
static const char *const what_launch = "tdm_graph_launch";

/* ---- handles ------------------------------------------------------------ */

static unsigned slot_of(const tdm_handle *h, unsigned nslots) {
  /* Fibonacci hashing of the address */
  return (unsigned)(((uint64_t)(uintptr_t)h * 0x9e3779b97f4a7c15ull) >> 32) & (nslots - 1);
}

/* Enters hs[i] in a table of nslots slots (where it is not). */
static void slot_put(unsigned *slots, unsigned nslots, const tdm_handle *h, unsigned i) {
  unsigned s = slot_of(h, nslots);
  while (slots[s])
    s = (s + 1) & (nslots - 1);
  slots[s] = i + 1;
}

/* Rebuilds the table for hs[0 .. nh-1] in nslots slots (a power of two
 * above 2 nh); -1: out of memory, the old one kept. */
static int rehash(tdm_graph *g, unsigned nslots) {
  unsigned *slots = tdm__calloc(g->rt, nslots, sizeof *slots);
  if (!slots)
    return -1;
  for (unsigned i = 0; i < g->nh; i++)
    slot_put(slots, nslots, g->hs[i].h, i);
  free(g->slots);
  g->slots = slots;
  g->nslots = nslots;
  return 0;
}

/* The index of h among the graph's handles, added (a reference taken)
 * if new; -1: out of memory. */
static int64_t handle_index(tdm_graph *g, tdm_handle *h) {
  if (g->nslots) {
    for (unsigned s = slot_of(h, g->nslots); g->slots[s]; s = (s + 1) & (g->nslots - 1))
      if (g->hs[g->slots[s] - 1].h == h)
        return g->slots[s] - 1;
  }
  if (g->nh == g->caph) {
    unsigned cap = g->caph ? 2 * g->caph : 8;
    ghandle *hs = tdm__realloc(g->rt, g->hs, cap * sizeof *hs);
    if (!hs)
      return -1;
    g->hs = hs;
    g->caph = cap;
  }
  if (2 * (g->nh + 1) > g->nslots && rehash(g, g->nslots ? 2 * g->nslots : 16))
    return -1;
  unsigned i = g->nh++;
  g->hs[i] = (ghandle){.h = h, .last_writer = -1};
  tdm__handle_ref(h);
  slot_put(g->slots, g->nslots, h, i);
  return i;
}

/* Forgets the handles added from index nh on (a recording that failed). */
static void handles_truncate(tdm_graph *g, unsigned nh) {
  if (nh == g->nh)
    return;
  for (unsigned i = nh; i < g->nh; i++) {
    free(g->hs[i].readers.v);
    tdm__handle_unref(g->hs[i].h);
  }
  g->nh = nh;
  memset(g->slots, 0, g->nslots * sizeof *g->slots);
  for (unsigned i = 0; i < g->nh; i++)
    slot_put(g->slots, g->nslots, g->hs[i].h, i);
}

/* ---- creation and recording ------------------------------------------- */

tdm_status tdm_graph_create(tdm_runtime *rt, tdm_graph **out) {
  if (out)
    *out = NULL;
  if (!rt || !out)
    return rt ? tdm__refuse(rt, TDM_ERR_INVALID_ARG, "tdm_graph_create", "out is NULL")
              : TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_graph_create");
  tdm_graph *g = tdm__calloc(rt, 1, sizeof *g);
  if (!g)
    return tdm__refuse(rt, TDM_ERR_NO_MEMORY, "tdm_graph_create", "out of memory");
  g->rt = rt;
  atomic_init(&g->launching, false);
  tdm__spin_lock(&rt->groups_lock);
  g->next = rt->graphs;
  if (rt->graphs)
    rt->graphs->prev = g;
  rt->graphs = g;
  tdm__spin_unlock(&rt->groups_lock);
  *out = g;
  return TDM_OK;
}

static void node_free(gnode *nd, bool refs) {
  if (refs && nd->desc.group)
    tdm__group_unref(nd->desc.group);
  free((void *)nd->desc.args);
  free((void *)nd->bufs.handles); /* and the other arrays, in the same block */
  free(nd->preds.v);
  free(nd->xpreds.v);
  free(nd->bound.v);
}

/* refs: drops the references to handles and groups (not at teardown,
 * where they go with the runtime). */
static void graph_free(tdm_graph *g, bool refs) {
  tdm_runtime *rt = g->rt;
  for (size_t i = 0; i < g->n; i++)
    node_free(&g->nodes[i], refs);
  for (unsigned i = 0; i < g->nh; i++) {
    free(g->hs[i].readers.v);
    if (refs)
      tdm__handle_unref(g->hs[i].h);
  }
  free(g->nodes);
  free(g->hs);
  free(g->slots);
  free(g->locks);
  free(g->inst);
  free(g->nedges);
  free(g->mark);
  tdm__spin_lock(&rt->groups_lock);
  if (g->prev)
    g->prev->next = g->next;
  else
    rt->graphs = g->next;
  if (g->next)
    g->next->prev = g->prev;
  tdm__spin_unlock(&rt->groups_lock);
  free(g);
}

void tdm_graph_destroy(tdm_graph *g) {
  if (!g)
    return;
  if (tdm__forked(g->rt)) {
    tdm__forked_error(g->rt, "tdm_graph_destroy");
    return;
  }
  graph_free(g, true);
}

void tdm__graphs_free(tdm_runtime *rt) {
  while (rt->graphs)
    graph_free(rt->graphs, false);
}

size_t tdm_graph_size(const tdm_graph *g) {
  return g ? g->n : 0;
}

/* nd's own copy of its handles and modes in order, and room for its
 * distinct handles and their modes; -1: out of memory. */
static int node_buffers(tdm_runtime *rt, gnode *nd, const tdm_desc_bufs *b) {
  unsigned n = b->n;
  size_t bytes = n * (2 * sizeof(tdm_handle *) + sizeof(tdm_access) + sizeof(unsigned));
  unsigned char *p = tdm__malloc(rt, bytes ? bytes : 1);
  if (!p)
    return -1;
  tdm_handle **handles = (tdm_handle **)(void *)p;
  nd->dhs = handles + n;
  tdm_access *modes = (tdm_access *)(void *)(nd->dhs + n);
  nd->dmodes = (unsigned *)(void *)(modes + n);
  memcpy(handles, b->handles, n * sizeof *handles);
  memcpy(modes, b->modes, n * sizeof *modes);
  nd->bufs = (tdm_desc_bufs){n, modes, handles, b->extras};
  return 0;
}

/* Adds recorded task p to nd's (task i's) predecessors, once; data: i
 * reads a version p produces. Room reserved. */
static void add_pred(tdm_graph *g, gnode *nd, size_t i, size_t p, bool data) {
  if (g->mark[p] == i + 1) { /* already: a data edge wins */
    for (unsigned k = 0; k < nd->preds.n; k++)
      if (nd->preds.v[k] >> 1 == p)
        nd->preds.v[k] |= data;
    return;
  }
  g->mark[p] = (uint32_t)(i + 1);
  nd->preds.v[nd->preds.n++] = (uint32_t)(p << 1 | data);
}

tdm_status tdm_graph_add(tdm_graph *g, const tdm_task_desc *desc, size_t *node) {
  if (!g)
    return TDM_ERR_INVALID_ARG;
  tdm_runtime *rt = g->rt;
  TDM_FORK_GUARD(rt, what_add);
  tdm_desc_bufs b = {0, NULL, NULL, false};
  tdm_status st = tdm__desc_check(rt, desc, what_add, &b);
  if (st)
    return st;
  for (unsigned k = 0; k < b.n; k++)
    if (b.modes[k] == TDM_COMMUTE || b.modes[k] == TDM_REDUX)
      return tdm__refuse(rt, TDM_ERR_INVALID_MODE, what_add,
                         "TDM_COMMUTE and TDM_REDUX are not recorded (submit such tasks)");
  if (g->n >= UINT32_MAX / 2)
    return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_add, "too many tasks in one graph");

  /* Room first (nothing changes on failure), then the analysis. */
  size_t i = g->n;
  unsigned nh0 = g->nh;
  gnode nd;
  memset(&nd, 0, sizeof nd);
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 16;
    gnode *nodes = tdm__realloc(rt, g->nodes, cap * sizeof *nodes);
    uint32_t *mark = nodes ? tdm__realloc(rt, g->mark, cap * sizeof *mark) : NULL;
    if (nodes)
      g->nodes = nodes;
    if (!mark)
      return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_add, "out of memory");
    g->mark = mark;
    memset(mark + g->cap, 0, (cap - g->cap) * sizeof *mark);
    g->cap = cap;
  }
  if (node_buffers(rt, &nd, &b))
    return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_add, "out of memory");
  /* The task as tdm_submit builds it: where it may run (and the errors
   * there), and its distinct handles, as a submission finds them. */
  tdm_task *probe;
  if ((st = tdm__task_build(rt, desc, &b, false, what_add, &probe))) {
    node_free(&nd, false);
    return st;
  }
  nd.dev_mask = probe->dev_mask;
  nd.device_ok = probe->device_ok;
  nd.nd = tdm__task_unique_handles(probe, nd.dhs, nd.dmodes);
  tdm__task_unref(probe);
  nd.desc.codelet = desc->codelet;
  if (desc->args_size) {
    void *args = tdm__malloc(rt, desc->args_size);
    if (!args)
      goto nomem;
    memcpy(args, desc->args, desc->args_size);
    nd.desc.args = args;
    nd.desc.args_size = desc->args_size;
  }
  nd.desc.callback = desc->callback;
  nd.desc.callback_data = desc->callback_data;
  nd.desc.priority = desc->priority;
  if (b.extras) {
    nd.desc.group = desc->group;
    nd.desc.cost = desc->cost;
    nd.desc.flags = desc->flags;
  }
  unsigned npreds = 0;
  int64_t gi[TDM_MAX_TASK_BUFFERS];
  for (unsigned k = 0; k < nd.nd; k++) {
    if ((gi[k] = handle_index(g, nd.dhs[k])) < 0)
      goto nomem;
    ghandle *gh = &g->hs[gi[k]];
    npreds += 1 + ((nd.dmodes[k] & TDM_W) ? gh->readers.n : 0);
    if (!(nd.dmodes[k] & TDM_W) && u32_reserve(rt, &gh->readers, gh->readers.n + 1))
      goto nomem;
  }
  if (u32_reserve(rt, &nd.preds, npreds) || u32_reserve(rt, &nd.bound, nd.nd))
    goto nomem;

  /* as task.c's check_and_reserve and commit do with tasks */
  for (unsigned k = 0; k < nd.nd; k++) {
    ghandle *gh = &g->hs[gi[k]];
    unsigned m = nd.dmodes[k], ext = 0;
    if (gh->last_writer >= 0)
      add_pred(g, &nd, i, (size_t)gh->last_writer, (m & TDM_R) != 0);
    else
      ext = EXT_WRITERS | ((m & TDM_R) ? EXT_DATA : 0);
    if (m & TDM_W) {
      for (unsigned r = 0; r < gh->readers.n; r++)
        add_pred(g, &nd, i, gh->readers.v[r], false);
      if (gh->last_writer < 0)
        ext |= EXT_READERS;
      gh->last_writer = (int64_t)i;
      gh->readers.n = 0;
    } else {
      gh->readers.v[gh->readers.n++] = (uint32_t)i;
    }
    if (ext)
      nd.bound.v[nd.bound.n++] = (uint32_t)gi[k] << EXT_BITS | ext;
  }
  if (nd.desc.group)
    atomic_fetch_add_explicit(&nd.desc.group->refs, 1, memory_order_relaxed);
  g->reserves |= nd.bound.n || nd.preds.n > TDM_INLINE_EDGES;
  g->nodes[i] = nd;
  g->n++;
  if (node)
    *node = i;
  return TDM_OK;

nomem:
  handles_truncate(g, nh0);
  node_free(&nd, false);
  return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_add, "out of memory");
}

tdm_status tdm_graph_depend(tdm_graph *g, size_t node, size_t pred) {
  static const char what[] = "tdm_graph_depend";
  if (!g)
    return TDM_ERR_INVALID_ARG;
  tdm_runtime *rt = g->rt;
  TDM_FORK_GUARD(rt, what);
  if (node >= g->n || pred >= node)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what,
                       node >= g->n ? "no such recorded task"
                                    : "the predecessor must be recorded before the task");
  gnode *nd = &g->nodes[node];
  for (unsigned k = 0; k < nd->xpreds.n; k++)
    if (nd->xpreds.v[k] == pred)
      return TDM_OK;
  if (u32_reserve(rt, &nd->preds, nd->preds.n + 1) ||
      u32_reserve(rt, &nd->xpreds, nd->xpreds.n + 1))
    return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
  nd->xpreds.v[nd->xpreds.n++] = (uint32_t)pred;
  for (unsigned k = 0; k < nd->preds.n; k++)
    if (nd->preds.v[k] >> 1 == pred) {
      nd->preds.v[k] |= 1; /* an explicit dependency reads its outcome */
      return TDM_OK;
    }
  nd->preds.v[nd->preds.n++] = (uint32_t)(pred << 1 | 1);
  g->reserves |= nd->preds.n > TDM_INLINE_EDGES;
  return TDM_OK;
}

tdm_status tdm_graph_set_args(tdm_graph *g, size_t node, const void *args, size_t args_size) {
  static const char what[] = "tdm_graph_set_args";
  if (!g)
    return TDM_ERR_INVALID_ARG;
  tdm_runtime *rt = g->rt;
  TDM_FORK_GUARD(rt, what);
  if (node >= g->n || (args_size && !args))
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what,
                       node >= g->n ? "no such recorded task" : "args_size > 0 but args is NULL");
  void *copy = NULL;
  if (args_size) {
    if (!(copy = tdm__malloc(rt, args_size)))
      return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
    memcpy(copy, args, args_size);
  }
  gnode *nd = &g->nodes[node];
  free((void *)nd->desc.args);
  nd->desc.args = copy;
  nd->desc.args_size = args_size;
  return TDM_OK;
}

/* ---- launching ------------------------------------------------------------ */

/* In the verification mode or while recording a trace: the recorded
 * tasks created, linked by their explicit dependencies and submitted one
 * by one, as the application would (their handles order them). */
static tdm_status launch_each(tdm_graph *g) {
  tdm_runtime *rt = g->rt;
  tdm_status st = TDM_OK;
  size_t made = 0, sent = 0;
  for (; made < g->n && !st; made++)
    st = tdm__task_build(rt, &g->nodes[made].desc, &g->nodes[made].bufs, true, what_launch,
                         &g->inst[made]);
  if (st)
    made--;
  for (size_t i = 0; i < made && !st; i++)
    for (unsigned k = 0; k < g->nodes[i].xpreds.n && !st; k++)
      st = tdm_task_depends_on(g->inst[i], g->inst[g->nodes[i].xpreds.v[k]]);
  for (; sent < made && !st; sent++)
    st = tdm__submit_created(g->inst[sent]);
  if (st && sent)
    tdm__log(rt, TDM_LOG_ERROR, "%s: refused after %zu of its %zu tasks were submitted (%s)",
             what_launch, sent - 1, g->n, tdm_status_name(st));
  for (size_t i = 0; i < made; i++)
    tdm_task_release(g->inst[i]);
  return st;
}

/* The handles by address, for locking (when handles were added). */
static int sort_locks(tdm_graph *g) {
  if (g->nlocks == g->nh)
    return 0;
  tdm_handle **locks = tdm__realloc(g->rt, g->locks, g->nh * sizeof *locks);
  if (!locks)
    return -1;
  g->locks = locks;
  for (unsigned i = 0; i < g->nh; i++) { /* insertion: once per new handle */
    tdm_handle *h = g->hs[i].h;
    unsigned j = i;
    while (j > 0 && (uintptr_t)locks[j - 1] > (uintptr_t)h) {
      locks[j] = locks[j - 1];
      j--;
    }
    locks[j] = h;
  }
  g->nlocks = g->nh;
  return 0;
}

/* Makes the launch's tasks; on failure, none is left. */
static tdm_status make_all(tdm_graph *g) {
  tdm_runtime *rt = g->rt;
  size_t n = g->n;
  size_t got = tdm__task_alloc_many(rt, g->inst, n); /* the slots in one go */
  tdm_status st = TDM_OK;
  if (got < n)
    st = tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_launch, "out of memory for its tasks");
  for (size_t i = 0; i < got && !st; i++) {
    tdm_task *t = g->inst[i];
    const gnode *nd = &g->nodes[i];
    if ((st = tdm__task_fill(t, &nd->desc, &nd->bufs, what_launch)))
      break;
    t->device_ok = nd->device_ok;
    t->dev_mask = nd->dev_mask;
    if (t->more) {
      t->more->nlocked = nd->nd;
      memcpy(t->more->locked, nd->dhs, nd->nd * sizeof *nd->dhs);
      memcpy(t->more->lock_modes, nd->dmodes, nd->nd * sizeof *nd->dmodes);
    }
  }
  if (st)
    for (size_t i = 0; i < got; i++)
      tdm__task_unref(g->inst[i]);
  else
    memset(g->nedges, 0, n * sizeof *g->nedges);
  return st;
}

/* Adds x (tagged when the task reads its version) to its predecessors
 * from outside the launch, e[0 .. *k) so far (their succ fields hold the
 * predecessors meanwhile), once: a task before the launch often comes
 * through several handles (it wrote one and read another), and an edge
 * more is an atomic more on its way to t. The same filter as task.c's
 * preds_add: a bit per predecessor by its address (Fibonacci hashing),
 * the scan only when the bit is set, and bounded (a repeat past it is
 * harmless). */
static inline void outside_pred(tdm_edge *e, unsigned *k, uint64_t *seen, tdm_task *x,
                                bool data) {
  uint64_t bit = 1ull << (((uint64_t)(uintptr_t)x * 0x9e3779b97f4a7c15ull) >> 58);
  if (*seen & bit)
    for (unsigned j = 0, end = *k < 16 ? *k : 16; j < end; j++)
      if (tdm__edge_task(e[j].succ) == x) {
        if (data)
          e[j].succ = tdm__edge_tag(x);
        return;
      }
  *seen |= bit;
  e[(*k)++].succ = data ? tdm__edge_tag(x) : x;
}

/* The tasks before the launch that recorded task nd's accesses wait for,
 * by the handles' states now, each once, into e[0 .. returned) (their
 * succ fields; tagged as tdm__link_edge takes them). Under the locks:
 * the same every time until they are released. */
static unsigned outside_preds(const tdm_graph *g, const gnode *nd, tdm_edge *e) {
  unsigned k = 0;
  uint64_t seen = 0;
  for (unsigned j = 0; j < nd->bound.n; j++) {
    uint32_t b = nd->bound.v[j];
    const tdm_handle *h = g->hs[b >> EXT_BITS].h;
    if (b & EXT_WRITERS)
      for (unsigned w = 0; w < h->writers.n; w++)
        outside_pred(e, &k, &seen, h->writers.items[w], (b & EXT_DATA) != 0);
    if (b & EXT_READERS)
      for (unsigned r = 0; r < h->readers.n; r++)
        outside_pred(e, &k, &seen, h->readers.items[r], false);
  }
  return k;
}

/* The most of them, before removing repeats. */
static unsigned outside_bound(const tdm_graph *g, const gnode *nd) {
  unsigned n = 0;
  for (unsigned k = 0; k < nd->bound.n; k++) {
    uint32_t b = nd->bound.v[k];
    const tdm_handle *h = g->hs[b >> EXT_BITS].h;
    n += ((b & EXT_WRITERS) ? h->writers.n : 0) + ((b & EXT_READERS) ? h->readers.n : 0);
  }
  return n;
}

/* Under the handles' locks: each handle usable, the readers that
 * finished dropped, room for the launch's readers, each task's edges. */
static tdm_status reserve_all(tdm_graph *g) {
  tdm_runtime *rt = g->rt;
  for (unsigned i = 0; i < g->nh; i++) {
    ghandle *gh = &g->hs[i];
    tdm_handle *h = gh->h;
    if (atomic_load_explicit(&h->magic, memory_order_relaxed) != TDM_HANDLE_MAGIC)
      return tdm__refuse(rt, TDM_ERR_STALE_HANDLE, what_launch, "a handle was unregistered");
    if (h->tiles)
      return tdm__refuse(rt, TDM_ERR_PARTITIONED, what_launch,
                         "a handle is partitioned (record its tiles)");
    if (h->unusual & TDM__H_LANES)
      return tdm__refuse(rt, TDM_ERR_BUSY, what_launch,
                         "a task named a handle TDM_REDUX while the graph was launched");
    tdm__handle_settle(h); /* tasks commuting on it: its writers now */
    /* the readers that finished dropped (fewer edges), and room for the
     * launch's beside those left (more than needed where the graph writes
     * the handle: its readers then replace them) */
    if (tdm__readers_room(h, gh->readers.n))
      return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_launch, "out of memory");
  }
  /* Each task's predecessors from outside, found now into its edges past
   * the recorded ones (nedges: how many, 0 from make_all), linked by
   * link_all. */
  for (size_t i = 0; g->reserves && i < g->n; i++) {
    const gnode *nd = &g->nodes[i];
    tdm_task *t = g->inst[i];
    unsigned n = nd->preds.n, most = nd->bound.n ? outside_bound(g, nd) : 0, out = 0;
    if (n + most <= TDM_INLINE_EDGES) {
      out = most ? outside_preds(g, nd, t->edges + n) : 0;
    } else if (most <= 32) { /* how many once repeats are out: fewer edges to make room for */
      tdm_edge room[32];
      out = outside_preds(g, nd, room);
      if (n + out > TDM_INLINE_EDGES && !tdm__edges_alloc(t, n + out))
        return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_launch, "out of memory");
      memcpy(t->edges + n, room, out * sizeof *room);
    } else {
      if (!tdm__edges_alloc(t, n + most))
        return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_launch, "out of memory");
      out = outside_preds(g, nd, t->edges + n);
    }
    g->nedges[i] = out;
  }
  return TDM_OK;
}

/* Under the locks, nothing can fail from here: the edges, then the
 * handles' new states. */
static void link_all(tdm_graph *g) {
  bool devices = g->rt->ndevice_workers != 0;
  for (size_t i = 0; i < g->n; i++) {
    const gnode *nd = &g->nodes[i];
    tdm_task *t = g->inst[i];
    /* release: as a submission does (tdm_task_depends_on's check) */
    atomic_store_explicit(&t->state, TDM_TS_SUBMITTED, memory_order_release);
    unsigned k = 0;
    /* the recorded edges: no task of the launch runs yet, and no other
     * thread sees them (their release publishes these stores) */
    for (; k < nd->preds.n; k++) {
      uint32_t p = nd->preds.v[k];
      tdm_task *pt = g->inst[p >> 1];
      tdm_edge *e = &t->edges[k];
      e->succ = (p & 1) ? tdm__edge_tag(t) : t;
      e->next = atomic_load_explicit(&pt->succ_head, memory_order_relaxed);
      atomic_store_explicit(&pt->succ_head, e, memory_order_relaxed);
    }
    /* before the edges from outside: their tasks may end at once */
    if (k)
      atomic_store_explicit(&t->pending, 1 + (int32_t)k, memory_order_relaxed);
    /* those from outside, found by reserve_all (their succ fields) */
    for (unsigned end = k + g->nedges[i]; k < end; k++)
      tdm__link_edge(t->edges[k].succ, t, &t->edges[k]); /* read before it is written */
    g->nedges[i] = k;
    if (TDM_UNLIKELY(t->group))
      tdm__group_submitted(t);
    /* the gathers each access comes after (data/coherence.h) */
    if (t->more)
      for (unsigned j = 0; j < t->more->nlocked; j++)
        t->more->gens[j] = t->more->locked[j]->coh.gathers;
    else if (devices)
      for (unsigned j = 0; j < t->nbuf; j++)
        t->gens[j] = t->handles[j]->coh.gathers;
  }
  /* the states the launch leaves, as task.c's commit */
  for (unsigned i = 0; i < g->nh; i++) {
    const ghandle *gh = &g->hs[i];
    tdm_handle *h = gh->h;
    if (gh->last_writer >= 0) {
      tdm__taskvec_clear(&h->writers);
      tdm__taskvec_clear(&h->readers);
      tdm_task *w = g->inst[gh->last_writer];
      tdm__task_ref(w);
      h->writers.items[h->writers.n++] = w; /* inline room */
    }
    for (unsigned r = 0; r < gh->readers.n; r++) {
      tdm_task *x = g->inst[gh->readers.v[r]];
      tdm__task_ref(x);
      h->readers.items[h->readers.n++] = x; /* reserved */
    }
  }
}

/* The submitter's count of each task, in recorded order; a task released
 * may run and end at once: nothing of it is read after. The tasks ready
 * at once that tdm__place would schedule on the CPU workers go there
 * together (one exchange on the injection stack, one wake-up). */
static void release_all(tdm_graph *g) {
  tdm_runtime *rt = g->rt;
  tdm_task *chain = NULL;
  for (size_t i = 0; i < g->n; i++) {
    tdm_task *t = g->inst[i];
    if (g->nedges[i]) {
      tdm__task_release_pending(t);
    } else if (!t->device_ok && !rt->sched && !t->priority && !t->main_thread &&
               !atomic_load_explicit(&t->outcome, memory_order_relaxed)) {
      atomic_store_explicit(&t->state, TDM_TS_READY, memory_order_relaxed);
      t->pool_next = chain; /* the newest first, as pushed one by one */
      chain = t;
    } else {
      tdm__task_ready(t); /* nobody else can see its count */
    }
  }
  if (chain)
    tdm__schedule_chain(rt, chain);
}

tdm_status tdm_graph_launch(tdm_graph *g) {
  if (!g)
    return TDM_ERR_INVALID_ARG;
  tdm_runtime *rt = g->rt;
  TDM_FORK_GUARD(rt, what_launch);
  tdm_status st = tdm__check_unlocked(rt, what_launch); /* placing may lock a device */
  if (st)
    return st;
  if (atomic_exchange_explicit(&g->launching, true, memory_order_acquire))
    return tdm__refuse(rt, TDM_ERR_BUSY, what_launch,
                       "the graph is being launched by another thread");
  size_t n = g->n;
  if (!n)
    goto out;
  if (g->cinst < n) {
    tdm_task **inst = tdm__realloc(rt, g->inst, n * sizeof *inst);
    if (inst)
      g->inst = inst;
    unsigned *nedges = inst ? tdm__realloc(rt, g->nedges, n * sizeof *nedges) : NULL;
    if (!nedges) {
      st = tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_launch, "out of memory");
      goto out;
    }
    g->nedges = nedges;
    g->cinst = n;
  }
  if (sort_locks(g)) {
    st = tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_launch, "out of memory");
    goto out;
  }
  for (unsigned i = 0; i < g->nh; i++) /* reductions' lanes combined first */
    if (g->locks[i]->redux && (st = tdm__redux_flush(g->locks[i])))
      goto out;
  if ((st = tdm__submit_wait_room(rt)))
    goto out;
  if (TDM_UNLIKELY(rt->verify || rt->recording)) {
    st = launch_each(g);
    goto out;
  }
  /* counted before `closing` is looked at, as tdm__task_submit does */
  atomic_fetch_add(&rt->inflight, (int64_t)n);
  if (atomic_load(&rt->closing) && tdm__thread_of != rt) {
    tdm__sub_inflight(rt, (int64_t)n);
    st = tdm__refuse(rt, TDM_ERR_SHUTTING_DOWN, what_launch, "the runtime is being destroyed");
    goto out;
  }
  if ((st = make_all(g))) {
    tdm__sub_inflight(rt, (int64_t)n);
    goto out;
  }
  tdm__handles_lock(g->locks, g->nh);
  if ((st = reserve_all(g))) {
    tdm__handles_unlock(g->locks, g->nh);
    for (size_t i = 0; i < n; i++)
      tdm__task_unref(g->inst[i]);
    tdm__sub_inflight(rt, (int64_t)n);
    goto out;
  }
  link_all(g);
  tdm__handles_unlock(g->locks, g->nh);
  release_all(g);
out:
  atomic_store_explicit(&g->launching, false, memory_order_release);
  return st;
}
