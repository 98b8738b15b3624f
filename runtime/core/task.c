/*
 * Tasks: creation, submission and the dependency graph, the public calls
 * on tasks. Their pool is pool.c; how a task ends, complete.c.
 *
 * Dependency tracking. Each handle remembers the tasks whose writes make its
 * current contents (writers) and the tasks that read those contents since
 * (readers). A task submitted with R waits for the writers and joins the
 * readers; with W or RW it waits for writers and readers, then becomes the
 * only writer. This gives read-after-write, write-after-read and
 * write-after-write in submission order, and lets readers of one version
 * run together. Explicit dependencies (tdm_task_depends_on) add edges.
 *
 * Submission runs in three phases so that nothing is half-done on error:
 *  1. lock the task's handles in address order; check them; collect the
 *     predecessors and allocate every edge and array slot the next phases
 *     need. Any failure returns here, with nothing changed.
 *  2. link: push one edge on each predecessor's successor list, unless the
 *     predecessor has finished meanwhile. The locked handles' lists keep
 *     the predecessors alive: no reference is taken.
 *  3. commit: update each handle's writers/readers; unlock.
 * The task's pending count starts at 1 for the submitter and gains one per
 * edge linked, so it cannot start before the submitter is done; the
 * submitter's final decrement schedules it if every predecessor has
 * already finished.
 *
 * Edges. A successor list is a lock-free LIFO of edges that live in the
 * successor task (inline for up to TDM_INLINE_EDGES predecessors). A
 * finishing task swaps TDM_CLOSED into its list head, then walks the edges
 * and decrements each successor's pending count; the one that reaches zero
 * schedules it. The next link is read before the decrement: once released,
 * the successor (and the edge inside it) may run, finish and be freed.
 *
 * Counting. rt->inflight counts the tasks submitted and not finished, for
 * tdm_wait_all. Workers subtract the tasks they finish in batches of
 * TDM_FLUSH_BATCH, and at once when they go idle while a thread waits or
 * before they park, so that a busy runtime does not bounce that counter's
 * cache line between cores on every task.

 */
#include "core.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- creation --------------------------------------------------------- */

static tdm_status bad(tdm_runtime *rt, tdm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static tdm_status bad(tdm_runtime *rt, tdm_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tdm__vlog(rt->cfg.log_fn, rt->cfg.log_data, rt->cfg.log_level, TDM_LOG_ERROR, fmt, ap);
  va_end(ap);
  return st;
}

/* Adds delta (+1 or -1) to the "created tasks naming this handle" count of
 * each of t's buffers: unregister refuses a handle while it is not 0. */
static void count_unsubmitted(tdm_task *t, int delta) {
  for (unsigned i = 0; i < t->nbuf; i++) {
    tdm_handle *h = tdm__task_handles(t)[i];
    tdm__spin_lock(&h->lock);
    h->unsubmitted += (unsigned)delta;
    tdm__spin_unlock(&h->lock);
  }
}

/* Fields added to tdm_codelet and tdm_task_desc after their first
 * version: read only when the caller's struct_size says they are there
 * (0: this version's layout). */
#define TDM_HAS_FIELD(p, type, field)                                          \
  (!(p)->struct_size || (p)->struct_size >= offsetof(type, field) + sizeof((p)->field))

/* The sizes of the first versions (0.1): up to `opencl` and `priority`. */
#define CODELET_V1 (offsetof(tdm_codelet, opencl) + sizeof(void *))
#define DESC_V1 (offsetof(tdm_task_desc, priority) + sizeof(int))


/* The task's flags and group, set (rare: out of the common path). */
static __attribute__((noinline, cold)) tdm_status check_extras(tdm_runtime *rt,
                                                              const tdm_task_desc *desc,
                                                              const char *what) {
  const tdm_codelet *cl = desc->codelet;
  const char *name = tdm__name_or(cl->name);
  const unsigned known = TDM_TASK_MAIN_THREAD | TDM_TASK_CALLBACK_ON_DISPATCH | TDM_TASK_CPU_ONLY;
  if ((desc->flags & ~known) ||
      ((desc->flags & (TDM_TASK_MAIN_THREAD | TDM_TASK_CPU_ONLY)) && !cl->cpu_fn))
    return bad(rt, TDM_ERR_INVALID_ARG, "%s: flags 0x%x of codelet %s: %s", what, desc->flags,
               name, (desc->flags & ~known) ? "unknown flags"
                                            : "TDM_TASK_MAIN_THREAD and TDM_TASK_CPU_ONLY need a "
                                              "CPU variant");
  if (desc->group && desc->group->rt != rt)
    return bad(rt, TDM_ERR_WRONG_RUNTIME, "%s: task %s names a group of another runtime", what,
               name);
  return TDM_OK;
}

static __attribute__((noinline, cold)) void build_extras(tdm_task *t,
                                                        const tdm_task_desc *desc) {
  if (desc->flags) {
    t->main_thread = (desc->flags & TDM_TASK_MAIN_THREAD) != 0;
    t->callback_on_dispatch = (desc->flags & TDM_TASK_CALLBACK_ON_DISPATCH) != 0;
    t->cpu_only_flag = (desc->flags & TDM_TASK_CPU_ONLY) != 0;
    if (t->main_thread)
      atomic_store(&t->rt->pinned, true);
  }
  tdm_group *g = desc->group;
  if (g) {
    t->group = g;
    tdm__group_joined(t);
    t->cost = tdm__cost_pack(desc->cost > 0 && desc->cost < 1e30f ? desc->cost : 1);
    long p = (long)t->priority + g->priority; /* saturated */
    t->priority = p > INT_MAX ? INT_MAX : p < INT_MIN ? INT_MIN : (int)p;
  }
}

/* Checks desc (its sizes, buffers, modes, handles); fills *b. */
tdm_status tdm__desc_check(tdm_runtime *rt, const tdm_task_desc *desc, const char *what,
                          tdm_desc_bufs *b) {
  if (!desc || !desc->codelet)
    return bad(rt, TDM_ERR_INVALID_ARG, "%s: NULL task description or codelet", what);
  const tdm_codelet *cl = desc->codelet;
  size_t ds = desc->struct_size;
  if (TDM_UNLIKELY(ds) && ds < DESC_V1)
    return bad(rt, TDM_ERR_INVALID_ARG, "%s: tdm_task_desc.struct_size %zu: 0 or at least %zu",
               what, ds, (size_t)DESC_V1);
  /* the fields for groups and dispatch: in the caller's layout (0: this
   * one), and set */
  if (TDM_UNLIKELY(ds ? ds >= sizeof *desc && (desc->group || desc->flags)
                      : ((uintptr_t)desc->group | desc->flags) != 0)) {
    b->extras = true;
    tdm_status st = check_extras(rt, desc, what);
    if (st)
      return st;
  }
  if (cl->struct_size && cl->struct_size < CODELET_V1)
    return bad(rt, TDM_ERR_INVALID_ARG, "%s: tdm_codelet.struct_size %zu: 0 or at least %zu",
               what, cl->struct_size, (size_t)CODELET_V1);
#define name tdm__name_or(cl->name) /* for the messages only */
  if (cl->nbuffers > TDM_MAX_TASK_BUFFERS)
    return bad(rt, TDM_ERR_TOO_MANY_BUFFERS, "%s: codelet %s has %u buffers, at most %d allowed",
               what, name, cl->nbuffers, TDM_MAX_TASK_BUFFERS);
  b->n = cl->nbuffers;
  b->modes = cl->modes;
  b->handles = desc->handles;
  if (b->n > TDM_MAX_BUFFERS) {
    b->modes = TDM_HAS_FIELD(cl, tdm_codelet, dyn_modes) ? cl->dyn_modes : NULL;
    b->handles = TDM_HAS_FIELD(desc, tdm_task_desc, dyn_handles) ? desc->dyn_handles : NULL;
    if (!b->modes || !b->handles)
      return bad(rt, TDM_ERR_INVALID_ARG,
                 "%s: codelet %s has %u buffers, more than %d: its dyn_modes and the task's "
                 "dyn_handles must give them (%s is NULL)",
                 what, name, b->n, TDM_MAX_BUFFERS, b->modes ? "dyn_handles" : "dyn_modes");
  }
  if (desc->args_size && !desc->args)
    return bad(rt, TDM_ERR_INVALID_ARG, "%s: args_size > 0 but args is NULL (codelet %s)",
               what, name);

  for (unsigned i = 0; i < b->n; i++) {
    tdm_access m = b->modes[i];
    if (TDM_UNLIKELY((unsigned)m - TDM_R > TDM_RW - TDM_R) && m != TDM_COMMUTE &&
        m != TDM_REDUX)
      return bad(rt, TDM_ERR_INVALID_MODE, "%s: codelet %s, buffer %u: invalid access mode %d",
                 what, name, i, (int)m);
    const tdm_handle *h = b->handles[i];
    if (TDM_UNLIKELY(!h || atomic_load_explicit(&h->magic, memory_order_relaxed) !=
                               TDM_HANDLE_MAGIC || h->rt != rt)) { /* which buffer */
      char where[160];
      snprintf(where, sizeof where, "%s: codelet %s, buffer %u", what, name, i);
      tdm_status st = tdm__handle_check(rt, h, where);
      if (st)
        return st;
    }
    if (TDM_UNLIKELY(m == TDM_REDUX) && !h->redux)
      return bad(rt, TDM_ERR_INVALID_MODE,
                 "%s: codelet %s, buffer %u: TDM_REDUX names a handle without a reduction "
                 "(tdm_handle_set_reduction)", what, name, i);
  }
  return TDM_OK;
#undef name
}

/* One block for the buffers of a task with more than TDM_MAX_BUFFERS:
 * the arrays of tdm_task_more after it, pointers first. */
static tdm_task_more *more_new(tdm_runtime *rt, unsigned n) {
  size_t ptrs = 3 * n * sizeof(void *), bufs = n * sizeof(tdm_buffer);
  size_t ints = n * (sizeof(uint32_t) + sizeof(unsigned)), bytes = 2 * n;
  size_t head = (sizeof(tdm_task_more) + 15) & ~(size_t)15;
  unsigned char *p = tdm__malloc(rt, head + bufs + ptrs + ints + bytes);
  if (!p)
    return NULL;
  tdm_task_more *m = (tdm_task_more *)(void *)p;
  p += head; /* tdm_buffer first: the strictest alignment */
  m->bufs = (tdm_buffer *)(void *)p;
  p += bufs;
  m->handles = (tdm_handle **)(void *)p;
  m->locked = m->handles + n;
  m->mems = (void **)(m->locked + n);
  p += ptrs;
  m->gens = (uint32_t *)(void *)p;
  m->lock_modes = (unsigned *)(m->gens + n);
  p += ints;
  m->modes = p;
  m->tiles = p + n;
  return m;
}

/* t's buffers from b. A task holds a tile, which unpartition does not
 * wait for, but not a registered handle: unregister waits for the
 * handle's tasks, and a finished task no longer touches its handles (the
 * mask tells which are tiles without reading the handle then). */
static void set_buffers(tdm_task *t, const tdm_desc_bufs *b) {
  tdm_task_more *m = t->more;
  t->nbuf = (uint16_t)b->n;
  unsigned all = 0; /* every mode's bits */
  if (!m) {
    for (unsigned i = 0; i < b->n; i++) {
      tdm_handle *h = t->handles[i] = b->handles[i];
      all |= t->modes[i] = (uint8_t)b->modes[i];
      if (h->parent) {
        t->tile_mask |= (uint8_t)(1u << i);
        tdm__handle_ref(h);
      }
    }
  } else {
    for (unsigned i = 0; i < b->n; i++) {
      tdm_handle *h = m->handles[i] = b->handles[i];
      all |= m->modes[i] = (uint8_t)b->modes[i];
      m->tiles[i] = h->parent != NULL;
      if (h->parent)
        tdm__handle_ref(h);
    }
  }
  if (TDM_UNLIKELY(all & (TDM__COMMUTES | TDM_REDUX))) {
    t->commute = (all & TDM__COMMUTES) != 0;
    t->redux = (all & TDM_REDUX) != 0;
  }
}

/* t (just allocated) made from desc, whose buffers are b (checked), as
 * far as the description says: not yet prepared for devices, nor
 * counted, nor in the graph. TDM_ERR_NO_MEMORY (logged) when out of
 * memory: the caller drops t. */
TDM_ALWAYS_INLINE static tdm_status fill_task(tdm_task *t, const tdm_task_desc *desc,
                                              const tdm_desc_bufs *b, const char *what) {
  tdm_runtime *rt = t->rt;
  const tdm_codelet *cl = desc->codelet;
  if (desc->args_size > TDM_INLINE_ARGS)
    t->args = tdm__malloc(rt, desc->args_size);
  else if (desc->args_size)
    t->args = t->inline_args;
  bool more_failed = b->n > TDM_MAX_BUFFERS && !(t->more = more_new(rt, b->n));
  if ((desc->args_size && !t->args) || more_failed)
    return bad(rt, TDM_ERR_NO_MEMORY, "%s: out of memory for the %s of %s", what,
               more_failed ? "buffers" : "arguments", tdm__name_or(cl->name));
  if (desc->args_size)
    memcpy(t->args, desc->args, desc->args_size);
  t->args_size = desc->args_size;
  t->codelet = cl;
  set_buffers(t, b);
  t->callback = desc->callback;
  t->callback_data = desc->callback_data;
  t->priority = desc->priority;
  t->device_ok = false;
  t->sched_cls = -1; /* (sched_calib: cleared by tdm__task_alloc) */
  if (TDM_UNLIKELY(b->extras))
    build_extras(t, desc);
  return TDM_OK;
}

tdm_status tdm__task_fill(tdm_task *t, const tdm_task_desc *desc, const tdm_desc_bufs *b,
                          const char *what) {
  return fill_task(t, desc, b, what);
}

/* The rest of task_build_as, desc checked (its buffers b). */
TDM_ALWAYS_INLINE static tdm_status build_from(tdm_runtime *rt, const tdm_task_desc *desc,
                                               const tdm_desc_bufs *b, bool user_ref, bool chunk,
                                               tdm_task **out, const char *what) {
  const tdm_codelet *cl = desc->codelet;
  tdm_task *t = tdm__task_alloc(rt);
  if (!t)
    return bad(rt, TDM_ERR_NO_MEMORY, "%s: out of memory for task %s", what,
               tdm__name_or(cl->name));
  tdm_status st = fill_task(t, desc, b, what);
  if (st) {
    tdm__task_unref(t); /* its buffers not set: nothing to undo */
    return st;
  }
  t->chunk = chunk;
  if (rt->recording)
    t->trace_id = atomic_fetch_add_explicit(&rt->next_task_id, 1, memory_order_relaxed) + 1;
  /* a task pinned to the application's thread, or to the CPU workers,
   * runs its CPU variant */
  if ((cl->opencl || rt->ndevice_workers) && !t->main_thread && !t->cpu_only_flag &&
      (st = tdm__device_prepare(rt, t, what))) {
    tdm__task_unref(t);
    return st;
  }
  if (user_ref && tdm__graph_enter(rt, t)) {
    tdm__task_unref(t);
    return bad(rt, TDM_ERR_NO_MEMORY, "%s: out of memory for task %s", what,
               tdm__name_or(cl->name));
  }
  t->user_ref = user_ref;
  if (user_ref)
    count_unsubmitted(t, +1);
  *out = t;
  return TDM_OK;
}

tdm_status tdm__task_build(tdm_runtime *rt, const tdm_task_desc *desc, const tdm_desc_bufs *b,
                           bool user_ref, const char *what, tdm_task **out) {
  return build_from(rt, desc, b, user_ref, false, out, what);
}

static tdm_status task_build_as(tdm_runtime *rt, const tdm_task_desc *desc, bool user_ref,
                                bool chunk, tdm_task **out, const char *what) {
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, what);
  tdm_desc_bufs b = {0, NULL, NULL, false};
  tdm_status st = tdm__desc_check(rt, desc, what, &b);
  return st ? st : build_from(rt, desc, &b, user_ref, chunk, out, what);
}

static tdm_status task_build(tdm_runtime *rt, const tdm_task_desc *desc, bool user_ref,
                             tdm_task **out, const char *what) {
  return task_build_as(rt, desc, user_ref, false, out, what);
}

/* ---- submission ------------------------------------------------------- */

/* Predecessors gathered in phase 1. No references are taken: they stay
 * alive, held by the locked handles' lists or by the task's explicit
 * dependency list, until they are linked. */
typedef struct {
  tdm_task **items;
  unsigned n, cap;
  uint64_t seen; /* filter of the items (preds_add) */
  tdm_task *local[32];
  /* While recording the graph: the predecessors already finished, which
   * need no edge but are dependencies all the same. */
  bool record;
  tdm_task **done;
  unsigned ndone, capdone;
  /* A predecessor whose version t reads has already ended without
   * producing it: t is cancelled (it is linked all the same). */
  bool cancel;
} pred_list;

static void record_done(pred_list *p, tdm_task *t) {
  for (unsigned i = 0; i < p->ndone; i++)
    if (p->done[i] == t)
      return;
  if (p->ndone == p->capdone) {
    unsigned cap = p->capdone ? 2 * p->capdone : 8;
    tdm_task **d = realloc(p->done, cap * sizeof *d);
    if (!d)
      return; /* the graph misses a dependency: only the record suffers */
    p->done = d;
    p->capdone = cap;
  }
  p->done[p->ndone++] = t;
}

/* preds_add of a predecessor that has finished: no edge; t is cancelled
 * when it reads a version that predecessor did not produce. */
static __attribute__((noinline)) void pred_done(pred_list *p, tdm_task *t, bool data) {
  if (data && atomic_load_explicit(&t->outcome, memory_order_relaxed))
    p->cancel = true;
  if (p->record)
    record_done(p, t);
}

/* preds_add when p is full: it grows (-1: out of memory). */
static __attribute__((noinline)) int preds_grow(pred_list *p, tdm_task *tagged) {
  unsigned cap = p->cap * 2;
  tdm_runtime *rt = tdm__edge_task(tagged)->rt;
  tdm_task **items = p->items == p->local ? tdm__malloc(rt, cap * sizeof *items)
                                          : tdm__realloc(rt, p->items, cap * sizeof *items);
  if (!items)
    return -1;
  if (p->items == p->local)
    memcpy(items, p->local, sizeof p->local);
  p->items = items;
  p->cap = cap;
  p->items[p->n++] = tagged;
  return 0;
}

/* Adds t to p; data: the task being submitted reads a version t
 * produces (its edge is tagged TDM_EDGE_DATA). Inlined: it runs for
 * every predecessor of every task, its rarer cases out of line. */
TDM_ALWAYS_INLINE static int preds_add(pred_list *p, tdm_task *t, bool data) {
  /* acquire: if it has finished, its effects (and outcome) are visible and
   * no edge is needed */
  if (atomic_load_explicit(&t->state, memory_order_acquire) == TDM_TS_DONE) {
    if (data || p->record)
      pred_done(p, t, data);
    return 0;
  }
  tdm_task *tagged = data ? tdm__edge_tag(t) : t;
  /* The same predecessor often comes through several handles (a stencil
   * point wrote one neighbour and read another): one edge is enough. A
   * bit per predecessor, by its address (Fibonacci hashing), says which
   * may be there already (a Bloom filter of one hash): the scan runs
   * only for those, so that a task with many predecessors does not pay
   * for every pair. The scan is bounded so that a writer after thousands
   * of readers stays linear; duplicates past it are harmless. */
  uint64_t bit = 1ull << (((uint64_t)(uintptr_t)t * 0x9e3779b97f4a7c15ull) >> 58);
  if (p->seen & bit) {
    tdm_task **items = p->items;
    for (unsigned i = 0, n = p->n < 16 ? p->n : 16; i < n; i++)
      if (tdm__edge_task(items[i]) == t) {
        if (data)
          items[i] = tagged;
        return 0;
      }
  }
  p->seen |= bit;
  if (TDM_UNLIKELY(p->n == p->cap))
    return preds_grow(p, tagged);
  p->items[p->n++] = tagged;
  return 0;
}

static void preds_free(pred_list *p) {
  if (p->items != p->local)
    free(p->items);
  if (p->done)
    free(p->done);
}

/* Room in r (a list of h's, its lock held) for k more, the tasks that
 * finished dropped first; those that failed are kept where they made a
 * version (commuters): whoever reads it must see that it is lost. */
static int list_room(tdm_handle *h, tdm_taskvec *r, unsigned k, bool keep_failed) {
  unsigned n = 0;
  for (unsigned i = 0; i < r->n; i++) {
    tdm_task *x = r->items[i];
    /* acquire: as in preds_add, dropping a finished task must not drop
     * the ordering its finish provides */
    if (atomic_load_explicit(&x->state, memory_order_acquire) == TDM_TS_DONE &&
        !(keep_failed && atomic_load_explicit(&x->outcome, memory_order_relaxed)))
      tdm__task_unref(x);
    else
      r->items[n++] = x;
  }
  r->n = n;
  if (n + k <= r->cap)
    return 0;
  /* grown as tdm__taskvec_push grows it, or to what is asked */
  return tdm__taskvec_reserve(h->rt, r, 2 * r->cap > n + k ? 2 * r->cap : n + k);
}

int tdm__readers_room(tdm_handle *h, unsigned k) {
  return list_room(h, &h->readers, k, false);
}

/* Phase 1 for a TDM_COMMUTE access of h by t's submission: after h's
 * writers (whose version it reads) and readers, as a writer, but not
 * after the tasks that commute with it; room for it among them. */
static __attribute__((noinline)) int commute_reserve(tdm_handle *h, pred_list *preds) {
  for (unsigned k = 0; k < h->writers.n; k++)
    if (preds_add(preds, h->writers.items[k], true))
      return -1;
  for (unsigned k = 0; k < h->readers.n; k++)
    if (preds_add(preds, h->readers.items[k], false))
      return -1;
  return h->commuters.n < h->commuters.cap ? 0 : list_room(h, &h->commuters, 1, true);
}

/* Wakes every thread blocked in a wait (they share one condition and
 * each checks its own condition again). */
void tdm__wake_waiters(tdm_runtime *rt) {
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->wait_lock));
  TDM_PTHREAD(rt, pthread_cond_broadcast(&rt->wait_cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->wait_lock));
}

void tdm__sub_inflight(tdm_runtime *rt, int64_t n) {
  /* seq_cst: pairs with wait_all's seq_cst increment of nwaiters, and a
   * blocked submitter's of nblocked */
  int64_t left = atomic_fetch_sub(&rt->inflight, n) - n;
  if ((left == 0 && atomic_load(&rt->nwaiters) > 0) ||
      (left < (int64_t)rt->cfg.max_pending && atomic_load(&rt->nblocked) > 0))
    tdm__wake_waiters(rt);
}

_Thread_local unsigned tdm__in_user_code TDM_TLS_MODEL;
_Thread_local const struct tdm_runtime *tdm__event_of TDM_TLS_MODEL;
_Thread_local const struct tdm_runtime *tdm__locked_of TDM_TLS_MODEL;
_Thread_local int tdm__acquired_here TDM_TLS_MODEL;

/* Back-pressure (tdm_config.max_pending), when as many tasks are
 * unfinished (room_now false): TDM_OK when there is room for one more
 * task, after waiting for it if `wait`; TDM_ERR_WOULD_BLOCK otherwise.
 * Only a thread of the application waits: not a worker, nor code the
 * runtime runs, nor a thread holding an acquired handle (the tasks that
 * would make room may wait for them), nor a fork's child (whose workers
 * are the parent's). */
static __attribute__((noinline, cold)) tdm_status room_for_one(tdm_runtime *rt, bool wait) {
  int64_t max = rt->cfg.max_pending;
  if (tdm__self_in(rt) || tdm__in_user_code || tdm__acquired_here > 0 || tdm__forked(rt))
    return TDM_OK;
  if (!wait)
    return TDM_ERR_WOULD_BLOCK;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->wait_lock));
  /* seq_cst: pairs with tdm__sub_inflight (Dekker); nwaiters makes idle
   * workers count what they finished at once */
  atomic_fetch_add(&rt->nblocked, 1);
  atomic_fetch_add(&rt->nwaiters, 1);
  while (atomic_load(&rt->inflight) >= max && !atomic_load(&rt->closing))
    TDM_PTHREAD(rt, pthread_cond_wait(&rt->wait_cond, &rt->wait_lock));
  atomic_fetch_sub(&rt->nwaiters, 1);
  bool closed = atomic_load(&rt->closing);
  if (!closed)
    atomic_fetch_sub(&rt->nblocked, 1);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->wait_lock));
  if (!closed)
    return TDM_OK;
  /* tdm_runtime_destroy woke us: still counted in
   * nblocked, which it waits to see at 0 before it frees anything */
  tdm__log(rt, TDM_LOG_ERROR, "submit refused: the runtime is being destroyed");
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->wait_lock));
  atomic_fetch_sub(&rt->nblocked, 1);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->wait_lock));
  return TDM_ERR_SHUTTING_DOWN;
}

void tdm__submit_wait_unblocked(tdm_runtime *rt) {
  for (;;) {
    TDM_PTHREAD(rt, pthread_mutex_lock(&rt->wait_lock));
    int64_t n = atomic_load(&rt->nblocked);
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->wait_lock));
    if (n <= 0)
      return;
    usleep(100);
  }
}

typedef struct handle_mode {
  tdm_handle *h;
  unsigned mode;
} handle_mode;

static int by_address(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const handle_mode *)a)->h, y = (uintptr_t)((const handle_mode *)b)->h;
  return x < y ? -1 : x > y;
}

/* The distinct handles of n (handles, modes), sorted by address, with
 * their modes together: one insertion sort, a handle named twice merged
 * as it is met (for a few handles, fewer steps than finding the repeats
 * first, and than qsort's calls). */
TDM_ALWAYS_INLINE static unsigned unique_few(tdm_handle *const *handles,
                                             const uint8_t *bufmodes, unsigned nbuf,
                                             tdm_handle **hs, unsigned *modes) {
  unsigned n = 0;
  for (unsigned i = 0; i < nbuf; i++) {
    tdm_handle *h = handles[i];
    unsigned m = bufmodes[i], j = n;
    while (j > 0 && (uintptr_t)hs[j - 1] > (uintptr_t)h)
      j--;
    if (j > 0 && hs[j - 1] == h) {
      modes[j - 1] |= m;
      continue;
    }
    for (unsigned k = n; k > j; k--) {
      hs[k] = hs[k - 1];
      modes[k] = modes[k - 1];
    }
    hs[j] = h;
    modes[j] = m;
    n++;
  }
  return n;
}

/* Past UNIQUE_FEW buffers: sorted by address, then the repeats merged
 * (O(n log n); the room is the task's own, pairs in its views' room). */
#define UNIQUE_FEW 32
static unsigned unique_many(const tdm_task *t, tdm_handle **hs, unsigned *modes) {
  handle_mode *pairs = (handle_mode *)(void *)t->more->bufs; /* unused until it runs */
  _Static_assert(sizeof(handle_mode) <= sizeof(tdm_buffer), "a pair fits in a view's room");
  for (unsigned i = 0; i < t->nbuf; i++)
    pairs[i] = (handle_mode){t->more->handles[i], t->more->modes[i]};
  qsort(pairs, t->nbuf, sizeof *pairs, by_address);
  unsigned n = 0;
  for (unsigned i = 0; i < t->nbuf; i++) {
    if (n && hs[n - 1] == pairs[i].h) {
      modes[n - 1] |= pairs[i].mode;
      continue;
    }
    hs[n] = pairs[i].h;
    modes[n++] = pairs[i].mode;
  }
  return n;
}

/* Distinct handles of t with their combined modes, sorted by address. */
TDM_ALWAYS_INLINE static unsigned unique_handles(const tdm_task *t, tdm_handle **hs,
                                                 unsigned *modes) {
  if (t->nbuf <= TDM_MAX_BUFFERS)
    return unique_few(t->handles, t->modes, t->nbuf, hs, modes);
  if (t->nbuf <= UNIQUE_FEW)
    return unique_few(t->more->handles, t->more->modes, t->nbuf, hs, modes);
  return unique_many(t, hs, modes);
}

unsigned tdm__task_unique_handles(const tdm_task *t, tdm_handle **hs, unsigned *modes) {
  return unique_handles(t, hs, modes);
}

/* The submission of t, in steps (tdm__task_submit); the hot ones are
 * inlined into it, as they were written there. */

/* Its explicit dependencies, which must all have been submitted, into
 * preds (deps_lock held when t was created by tdm_task_create). */
static tdm_status explicit_preds(tdm_task *t, pred_list *preds) {
  tdm_task **deps = t->links ? t->links->deps.items : NULL;
  unsigned ndeps = t->links ? t->links->deps.n : 0;
  for (unsigned i = 0; i < ndeps; i++)
    if (atomic_load(&deps[i]->state) == TDM_TS_CREATED) {
      tdm__log(t->rt, TDM_LOG_ERROR, "submit of %s refused: it depends on a task not submitted yet",
               tdm__codelet_name(t));
      return TDM_ERR_DEP_NOT_SUBMITTED;
    }
  for (unsigned i = 0; i < ndeps; i++)
    if (preds_add(preds, deps[i], true)) /* what it needs is not known */
      return TDM_ERR_NO_MEMORY;
  return TDM_OK;
}

/* Phase 1, the handles locked: checks them, adds the tasks t must follow
 * to preds, reserves t's place among the readers, and its edges. Nothing
 * is changed that a failure must undo but the reservations. */
TDM_ALWAYS_INLINE static tdm_status check_and_reserve(tdm_task *t, tdm_handle **hs,
                                                      const unsigned *modes, unsigned nh,
                                                      pred_list *preds) {
  tdm_runtime *rt = t->rt;
  tdm_status st = TDM_OK;
  for (unsigned i = 0; i < nh && !st; i++) {
    tdm_handle *h = hs[i];
    if (atomic_load_explicit(&h->magic, memory_order_relaxed) != TDM_HANDLE_MAGIC) {
      st = TDM_ERR_STALE_HANDLE;
      tdm__log(rt, TDM_LOG_ERROR, "submit of %s refused: a handle was unregistered",
               tdm__codelet_name(t));
    } else if (h->tiles) {
      st = TDM_ERR_PARTITIONED;
      tdm__log(rt, TDM_LOG_ERROR, "submit of %s refused: a handle is partitioned (use its tiles)",
               tdm__codelet_name(t));
    } else {
      if (TDM_UNLIKELY(h->unusual | (modes[i] & (TDM__COMMUTES | TDM_REDUX)))) {
        /* its reduction's lanes are combined first; a TDM_REDUX buffer
         * is bound to a lane first (tdm__task_submit) */
        if ((h->unusual & TDM__H_LANES) || (modes[i] & TDM_REDUX)) {
          st = TDM__FLUSH;
          continue;
        }
        if (modes[i] & TDM__COMMUTES) {
          st = commute_reserve(h, preds) ? TDM_ERR_NO_MEMORY : TDM_OK;
          continue;
        }
        tdm__handle_settle(h); /* the run of commuting tasks ends here */
      }
      /* it reads what the writers produce; it only comes after readers */
      for (unsigned k = 0; k < h->writers.n && !st; k++)
        if (preds_add(preds, h->writers.items[k], modes[i] & TDM_R))
          st = TDM_ERR_NO_MEMORY;
      if (modes[i] & TDM_W) {
        for (unsigned k = 0; k < h->readers.n && !st; k++)
          if (preds_add(preds, h->readers.items[k], false))
            st = TDM_ERR_NO_MEMORY;
      } else if (!st && tdm__reserve_readers(h, 1)) {
        st = TDM_ERR_NO_MEMORY;
      }
    }
  }
  if (!st && preds->n > TDM_INLINE_EDGES && !tdm__edges_alloc(t, preds->n))
    st = TDM_ERR_NO_MEMORY;
  return st;
}

/* While recording: the graph as submitted, finished predecessors too. */
static void record_submit(tdm_task *t, const pred_list *preds) {
  tdm_runtime *rt = t->rt;
  tdm__trace_add(rt, &(tdm_trace_event){.kind = TDM_EV_SUBMIT, .id = t->trace_id,
                                        .name = t->codelet->name});
  for (unsigned i = 0; i < preds->n + preds->ndone; i++) {
    tdm_task *p = i < preds->n ? tdm__edge_task(preds->items[i]) : preds->done[i - preds->n];
    if (p->kind == TDM_TASK_CODELET) /* not a host acquisition */
      tdm__trace_add(rt, &(tdm_trace_event){.kind = TDM_EV_EDGE, .id = t->trace_id,
                                            .id2 = p->trace_id});
  }
}

/* Phase 3, the handles locked: t is the writer, or a reader, of each. */
TDM_ALWAYS_INLINE static void commit(tdm_task *t, tdm_handle **hs, const unsigned *modes,
                                     unsigned nh, bool give_ref) {
  if (!give_ref)
    tdm__task_ref(t); /* the runtime's, until it finishes */
  for (unsigned i = 0; i < nh; i++) {
    tdm_handle *h = hs[i];
    tdm__task_ref(t);
    if (TDM_UNLIKELY(modes[i] & TDM__COMMUTES)) {
      h->commuters.items[h->commuters.n++] = t; /* reserved above */
      h->unusual |= TDM__H_COMMUTERS;
    } else if (modes[i] & TDM_W) {
      tdm__taskvec_clear(&h->writers);
      tdm__taskvec_clear(&h->readers);
      h->writers.items[h->writers.n++] = t; /* inline room: cannot fail */
    } else {
      h->readers.items[h->readers.n++] = t; /* reserved above */
    }
  }
  tdm_handle *const *ths = tdm__task_handles(t);
  if (t->more) { /* its distinct handles, and the gathers they come after */
    t->more->nlocked = nh;
    for (unsigned i = 0; i < nh; i++)
      t->more->gens[i] = hs[i]->coh.gathers;
  } else if (t->rt->ndevice_workers) { /* the gathers its accesses come after */
    for (unsigned i = 0; i < t->nbuf; i++)
      t->gens[i] = ths[i]->coh.gathers;
  }
  /* undo task_build's count, once per buffer as it was made (a handle
   * named twice counts twice); every one of these handles is locked */
  if (t->user_ref)
    for (unsigned i = 0; i < t->nbuf; i++)
      ths[i]->unsubmitted--;
}

/* tdm__task_submit that found a handle with a reduction to bind or
 * combine first (TDM__FLUSH), undone as if it had not begun. */
static __attribute__((noinline, cold)) tdm_status submit_after_flush(tdm_task *t,
                                                                     bool give_ref) {
  if (t->redux) /* its buffers bound to lanes, it comes back */
    return tdm__redux_submit(t, give_ref);
  tdm_status st = tdm__redux_flush_task(t); /* lanes combined, it is tried again */
  return st ? st : tdm__task_submit(t, give_ref);
}

tdm_status tdm__task_submit(tdm_task *t, bool give_ref) {
  tdm_runtime *rt = t->rt;
  /* Count the task before looking at `closing`: destroy sets closing and
   * then waits for inflight, so either it waits for us or we see it
   * closing (seq_cst on both sides). */
  atomic_fetch_add(&rt->inflight, 1);
  /* (a task of the runtime's, wherever it runs, may still submit: a
   * running graph is not cut) */
  if (atomic_load(&rt->closing) && tdm__thread_of != rt) {
    tdm__sub_inflight(rt, 1);
    tdm__log(rt, TDM_LOG_ERROR, "submit of %s refused: the runtime is being destroyed",
             tdm__codelet_name(t));
    return TDM_ERR_SHUTTING_DOWN;
  }

  tdm_status st = TDM_OK;
  pred_list preds; /* no initialiser: it would zero the local array */
  preds.items = preds.local;
  preds.n = 0;
  preds.seen = 0;
  preds.cap = sizeof preds.local / sizeof preds.local[0];
  preds.record = rt->recording && t->trace_id;
  preds.done = NULL;
  preds.ndone = preds.capdone = 0;
  preds.cancel = false;
  tdm_handle *hs_room[TDM_MAX_BUFFERS], **hs = t->more ? t->more->locked : hs_room;
  unsigned modes_room[TDM_MAX_BUFFERS], *modes = t->more ? t->more->lock_modes : modes_room;
  unsigned nh = unique_handles(t, hs, modes);

  /* Explicit dependencies: all must have been submitted. Tasks the user
   * holds may be reached by tdm_task_depends_on's search, so their
   * dependency list is read and emptied under deps_lock. */
  if (t->user_ref)
    tdm__spin_lock(&rt->deps_lock);
  if (t->links && (st = explicit_preds(t, &preds)))
    goto unlock_deps;

  /* Phase 1: check and reserve under the handles' locks. */
  tdm__handles_lock(hs, nh);
  st = check_and_reserve(t, hs, modes, nh, &preds);
  if (st) {
    if (st == TDM_ERR_NO_MEMORY)
      tdm__log(rt, TDM_LOG_ERROR, "submit of %s: out of memory", tdm__codelet_name(t));
    tdm__handles_unlock(hs, nh);
    goto unlock_deps;
  }

  /* Phase 2: link, still under the locks. From here on nothing can fail.
   * The submitter's pending count keeps t from starting meanwhile. */
  /* release: a task that names t as a dependency sees it submitted */
  atomic_store_explicit(&t->state, TDM_TS_SUBMITTED, memory_order_release);
  for (unsigned i = 0; i < preds.n; i++)
    tdm__link_edge(preds.items[i], t, &t->edges[i]);
  if (rt->recording && t->trace_id)
    record_submit(t, &preds);
  if (preds.cancel) /* before anyone can run it */
    atomic_store_explicit(&t->outcome, TDM_ERR_CANCELLED, memory_order_relaxed);
  if (TDM_UNLIKELY(t->group))
    tdm__group_submitted(t);

  /* Phase 3: commit. */
  commit(t, hs, modes, nh, give_ref);
  tdm__handles_unlock(hs, nh);
  tdm__graph_drop(t->rt, t, true);
  if (t->user_ref)
    tdm__spin_unlock(&rt->deps_lock);

  /* A host acquisition is not work: wait_all does not wait for it. */
  if (t->kind == TDM_TASK_ACQUIRE)
    tdm__sub_inflight(rt, 1);

  if (preds.n == 0)
    tdm__task_ready(t); /* nobody else can see the count: no atomic needed */
  else
    tdm__task_release_pending(t);
  preds_free(&preds);
  return TDM_OK;

unlock_deps:
  if (t->user_ref)
    tdm__spin_unlock(&rt->deps_lock);
  preds_free(&preds);
  tdm__sub_inflight(rt, 1);
  return TDM_UNLIKELY(st == TDM__FLUSH) ? submit_after_flush(t, give_ref) : st;
}

/* ---- public API ------------------------------------------------------- */

/* tdm__task_submit in the verification mode (verify.c), whose own tasks
 * are submitted inside it. */
static __attribute__((noinline, cold)) tdm_status submit_verified(tdm_task *t, bool give_ref) {
  if (tdm__verify_internal(t))
    return tdm__task_submit(t, give_ref);
  void *verified = tdm__verify_before(t);
  tdm_status st = tdm__task_submit(t, give_ref);
  tdm__verify_after(t->rt, verified, t, st == TDM_OK);
  return st;
}

static __attribute__((noinline, cold)) tdm_status build_verified(tdm_runtime *rt,
                                                                 const tdm_task_desc *desc) {
  tdm_task *t;
  tdm_status st = task_build(rt, desc, false, &t, "tdm_submit");
  if (!st && (st = submit_verified(t, true)))
    tdm__task_unref(t);
  return st;
}

tdm_status tdm__submit_internal(tdm_runtime *rt, const tdm_task_desc *desc, const char *what) {
  if (TDM_UNLIKELY(rt->verify) && !tdm__verify_held(rt))
    return build_verified(rt, desc);
  tdm_task *t;
  tdm_status st = task_build(rt, desc, false, &t, what);
  if (!st && (st = tdm__task_submit(t, true)))
    tdm__task_unref(t);
  return st;
}

/* Whether fewer than cfg.max_pending tasks are unfinished (or there is
 * no bound): the common case, inline. */
static inline bool room_now(const tdm_runtime *rt) {
  unsigned max = rt->cfg.max_pending;
  return atomic_load_explicit(&rt->inflight, memory_order_relaxed) < (int64_t)max || !max;
}

/* tdm_submit and tdm_submit_try. */
static inline tdm_status submit(tdm_runtime *rt, const tdm_task_desc *desc, bool wait) {
  if (TDM_UNLIKELY(rt && !room_now(rt))) {
    tdm_status st = room_for_one(rt, wait);
    if (st)
      return st;
  }
  if (TDM_UNLIKELY(rt && rt->verify)) /* before: nothing to keep across the calls */
    return build_verified(rt, desc);
  tdm_task *t;
  tdm_status st = task_build(rt, desc, false, &t, "tdm_submit");
  if (st)
    return st;
  st = tdm__task_submit(t, true); /* the builder's reference becomes the
                                    runtime's */
  if (st)
    tdm__task_unref(t);
  return st;
}

tdm_status tdm_submit(tdm_runtime *rt, const tdm_task_desc *desc) {
  return submit(rt, desc, true);
}

tdm_status tdm_submit_try(tdm_runtime *rt, const tdm_task_desc *desc) {
  return submit(rt, desc, false);
}

tdm_status tdm_task_create(tdm_runtime *rt, const tdm_task_desc *desc, tdm_task **out) {
  if (!out)
    return rt ? bad(rt, TDM_ERR_INVALID_ARG, "%s: out is NULL", "tdm_task_create")
              : TDM_ERR_INVALID_ARG;
  *out = NULL;
  return task_build(rt, desc, true, out, "tdm_task_create");
}

tdm_status tdm_task_depends_on(tdm_task *task, tdm_task *pred) {
  if (!task || !pred)
    return task ? bad(task->rt, TDM_ERR_INVALID_ARG, "%s: NULL task",
                      "tdm_task_depends_on")
                : TDM_ERR_INVALID_ARG;
  tdm_runtime *rt = task->rt;
  TDM_FORK_GUARD(rt, "tdm_task_depends_on");
  if (pred->rt != rt)
    return bad(rt, TDM_ERR_WRONG_RUNTIME, "%s: the tasks belong to different runtimes",
               "tdm_task_depends_on");
  tdm_status st = TDM_ERR_ALREADY_SUBMITTED;
  tdm__spin_lock(&rt->deps_lock);
  if (atomic_load(&task->state) == TDM_TS_CREATED)
    st = tdm__graph_add(rt, task, pred);
  tdm__spin_unlock(&rt->deps_lock);
  if (st == TDM_ERR_ALREADY_SUBMITTED)
    tdm__log(rt, TDM_LOG_ERROR, "tdm_task_depends_on: the task was already submitted");
  else if (st == TDM_ERR_CYCLE)
    tdm__log(rt, TDM_LOG_ERROR,
             "tdm_task_depends_on: refused, the dependency would form a cycle");
  else if (st)
    tdm__log(rt, TDM_LOG_ERROR, "tdm_task_depends_on: out of memory");
  return st;
}

tdm_status tdm__chunk_create(tdm_runtime *rt, const tdm_task_desc *desc, tdm_task **out) {
  *out = NULL;
  return task_build_as(rt, desc, true, true, out, "tdm_parallel_submit");
}

tdm_status tdm__submit_created(tdm_task *t) {
  return TDM_UNLIKELY(t->rt->verify) ? submit_verified(t, false) : tdm__task_submit(t, false);
}

tdm_status tdm__submit_wait_room(tdm_runtime *rt) {
  return room_now(rt) ? TDM_OK : room_for_one(rt, true);
}

tdm_status tdm_task_submit(tdm_task *task) {
  if (!task)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(task->rt, "tdm_task_submit");
  if (tdm__check_unlocked(task->rt, "tdm_task_submit")) /* placing it may lock a device */
    return TDM_ERR_IN_TASK;
  if (atomic_load(&task->state) != TDM_TS_CREATED)
    return bad(task->rt, TDM_ERR_ALREADY_SUBMITTED, "%s: task already submitted",
               "tdm_task_submit");
  tdm_status st = tdm__submit_wait_room(task->rt);
  return st ? st : tdm__submit_created(task);
}

tdm_status tdm_task_wait(tdm_task *task) {
  if (!task)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(task->rt, "tdm_task_wait");
  tdm_status st = tdm__check_blocking(task->rt, "tdm_task_wait");
  if (st)
    return st;
  if (atomic_load(&task->state) == TDM_TS_CREATED)
    return bad(task->rt, TDM_ERR_INVALID_ARG, "%s: the task was never submitted",
               "tdm_task_wait");
  tdm__task_wait_state(task, TDM_TS_DONE);
  return atomic_load_explicit(&task->outcome, memory_order_relaxed); /* seen DONE: final */
}

void tdm_task_release(tdm_task *task) {
  if (!task)
    return;
  tdm_runtime *rt = task->rt;
  if (tdm__forked(rt)) {
    tdm__forked_error(rt, "tdm_task_release");
    return;
  }
  tdm__spin_lock(&rt->deps_lock);
  bool created = atomic_load(&task->state) == TDM_TS_CREATED;
  if (created) {
    /* discarded unsubmitted: it no longer holds its handles or deps;
     * state DONE lets tasks that named it as a dependency be submitted */
    tdm__graph_drop(task->rt, task, true);
    atomic_store(&task->state, TDM_TS_DONE);
  }
  tdm__spin_unlock(&rt->deps_lock);
  if (created)
    count_unsubmitted(task, -1);
  tdm__task_unref(task);
}

/* ---- footprints --------------------------------------------------------- */

/* A buffer's shape class: 0 for a vector or a square matrix, else its
 * rows over columns as a power of two (rounded, within +-31). */
static int shape_class(const tdm_buffer *b) {
  if (b->nx <= 1 || b->ny <= 1)
    return 0;
  double r = log2((double)b->nx / (double)b->ny);
  return (int)fmax(-31, fmin(31, lround(r)));
}

uint64_t tdm__task_footprint(tdm_runtime *rt, const tdm_task *t) {
  const tdm_codelet *cl = t->codelet;
  tdm_handle *const *hs = tdm__task_handles(t);
  bool has_fn = cl && (!cl->struct_size || cl->struct_size >= offsetof(tdm_codelet, footprint) +
                                                                   sizeof cl->footprint) &&
                cl->footprint;
  if (has_fn) {
    tdm_buffer room[TDM_MAX_BUFFERS] = {{0}};
    tdm_buffer *views = t->nbuf <= TDM_MAX_BUFFERS ? room : malloc(t->nbuf * sizeof *views);
    if (!views)
      return 0; /* the codelet's name alone, for want of memory */
    for (unsigned i = 0; i < t->nbuf; i++)
      views[i] = hs[i]->buf;
    uint64_t fp = 0;
    TDM_LOCKED_CODE(rt, fp = cl->footprint(views, t->nbuf, t->args, tdm__task_args_size(t)));
    if (views != room)
      free(views);
    return fp;
  }
  /* the chunks of an operation, of every size and shape, share one model
   * (along whose sizes, in elements, it scales), apart from the codelet's
   * tasks (whose sizes are bytes) */
  if (t->chunk)
    return TDM_CHUNK_FOOTPRINT;
  /* the shapes: FNV-1a (Fowler, Noll and Vo) over each buffer's element
   * size and shape class, where one is neither a vector nor square */
  uint64_t h = 14695981039346656037ull;
  bool plain = true;
  for (unsigned i = 0; i < t->nbuf; i++) {
    int c = shape_class(&hs[i]->buf);
    plain = plain && !c;
    h = (h ^ (uint64_t)hs[i]->buf.elem_size) * 1099511628211ull;
    h = (h ^ (uint64_t)(c + 32)) * 1099511628211ull;
  }
  return plain ? 0 : h | 1;
}
