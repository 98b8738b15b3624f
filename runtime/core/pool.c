/*
 * The task pool. Tasks come from slabs of TDM_SLAB_TASKS. A worker keeps
 * its own free list (no locking); other threads share a cache of their
 * own; both refill from, and workers give back to, the runtime's shared
 * stack of batches under a spinlock. At destroy the slabs go at once,
 * after freeing what live tasks own outside them. A task is freed when
 * its last reference goes (tdm__task_unref).
 */
#include "core.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define TDM_SLAB_TASKS 256
#define TDM_WORKER_CACHE_MAX 1024
#define TDM_BATCH 128

/* Every task is six cache lines on 64-bit machines (the first two touched
 * by every task): a field added must fit in the room left. */
_Static_assert(sizeof(void *) != 8 || sizeof(tdm_task) <= 6 * TDM_CACHE_LINE,
               "tdm_task grew past six cache lines");

/* ---- pool ------------------------------------------------------------- */

/* The shared pool is a stack of batches of exactly TDM_BATCH free tasks
 * (linked by pool_next; batches by the first task's batch_next), so that
 * taking or giving back a batch costs O(1) under the lock. */

/* Cuts a new slab into batches on the shared stack. Called with pool_lock
 * held; returns -1 when out of memory. */
static int new_slab(tdm_runtime *rt) {
  if (rt->nslabs == rt->slabs_cap) {
    size_t cap = rt->slabs_cap ? 2 * rt->slabs_cap : 16;
    void **slabs = tdm__realloc(rt, rt->slabs, cap * sizeof *slabs);
    if (!slabs)
      return -1;
    rt->slabs = slabs;
    rt->slabs_cap = cap;
  }
  tdm_task *slab = tdm__aligned_alloc(rt, TDM_CACHE_LINE, TDM_SLAB_TASKS * sizeof *slab);
  if (!slab)
    return -1;
  rt->slabs[rt->nslabs++] = slab;
  for (unsigned i = 0; i < TDM_SLAB_TASKS; i++) {
    slab[i].kind = TDM_TASK_FREE;
    slab[i].pool_next = (i + 1) % TDM_BATCH ? &slab[i + 1] : NULL;
  }
  for (unsigned i = 0; i < TDM_SLAB_TASKS; i += TDM_BATCH) {
    slab[i].batch_next = rt->pool_free;
    rt->pool_free = &slab[i];
  }
  return 0;
}

/* Takes a batch of TDM_BATCH tasks from the shared stack (or a new slab);
 * NULL when out of memory. */
static tdm_task *take_batch(tdm_runtime *rt) {
  tdm__spin_lock(&rt->pool_lock);
  if (!rt->pool_free)
    new_slab(rt);
  tdm_task *batch = rt->pool_free;
  if (batch)
    rt->pool_free = batch->batch_next;
  tdm__spin_unlock(&rt->pool_lock);
  return batch;
}

TDM_ALWAYS_INLINE static void pool_put(tdm_runtime *rt, tdm_task *t) {
  tdm_worker *w = tdm__self_in(rt);
  t->kind = TDM_TASK_FREE;
  if (!w) {
    tdm__spin_lock(&rt->ext_lock);
    t->pool_next = rt->ext_free;
    rt->ext_free = t;
    tdm__spin_unlock(&rt->ext_lock);
    return;
  }
  t->pool_next = w->free_tasks;
  w->free_tasks = t;
  if (++w->nfree < TDM_WORKER_CACHE_MAX)
    return;
  /* Give a batch back so that the submitting threads find it. */
  tdm_task *first = w->free_tasks, *last = first;
  for (unsigned i = 1; i < TDM_BATCH; i++)
    last = last->pool_next;
  w->free_tasks = last->pool_next;
  w->nfree -= TDM_BATCH;
  last->pool_next = NULL;
  tdm__spin_lock(&rt->pool_lock);
  first->batch_next = rt->pool_free;
  rt->pool_free = first;
  tdm__spin_unlock(&rt->pool_lock);
}

/* A free slot of the pool, its fields as they were left; NULL when out of
 * memory. */
/* The next free task of the other threads' shared cache, refilled in a
 * batch when empty; NULL when out of memory. ext_lock held. */
static inline tdm_task *ext_pop(tdm_runtime *rt) {
  if (!rt->ext_free)
    rt->ext_free = take_batch(rt);
  tdm_task *t = rt->ext_free;
  if (t)
    rt->ext_free = t->pool_next;
  return t;
}

static inline tdm_task *pool_take(tdm_runtime *rt) {
  tdm_worker *w = tdm__self_in(rt);
  tdm_task *t;
  if (w) {
    if (!w->free_tasks) {
      w->free_tasks = take_batch(rt);
      w->nfree = w->free_tasks ? TDM_BATCH : 0;
    }
    t = w->free_tasks;
    if (!t)
      return NULL;
    w->free_tasks = t->pool_next;
    w->nfree--;
  } else {
    /* Other threads share a cache of their own, refilled in batches, so
     * that a thread submitting many tasks seldom touches the lock the
     * workers use. */
    tdm__spin_lock(&rt->ext_lock);
    t = ext_pop(rt);
    tdm_task *next = rt->ext_free;
    /* The free tasks were last written by the workers that ran them:
     * fetch the next one's two hot lines for writing while this one is
     * filled, instead of stalling on both misses in turn. */
    if (t && next) {
      __builtin_prefetch(next, 1);
      __builtin_prefetch((char *)next + TDM_CACHE_LINE, 1);
    }
    tdm__spin_unlock(&rt->ext_lock);
  }
  return t;
}

/* A free slot made a new task: the fields every task starts with. */
TDM_ALWAYS_INLINE static void task_init(tdm_runtime *rt, tdm_task *t) {
  atomic_init(&t->pending, 1);
  atomic_init(&t->refs, 1);
  atomic_init(&t->state, TDM_TS_CREATED);
  atomic_init(&t->waiters, 0);
  atomic_init(&t->outcome, TDM_OK);
  atomic_init(&t->succ_head, NULL);
  t->kind = TDM_TASK_CODELET;
  t->tries = 0;
  t->unkept = t->spoiled = t->homeless = t->issued = false;
  t->main_thread = t->callback_on_dispatch = t->dispatch_ended = false;
  t->sched_calib = t->cpu_counted = t->cpu_started = false;
  t->nbuf = 0;
  t->tile_mask = 0;
  t->more = NULL;
  t->user_ref = false;
  t->chunk = t->no_cpu = t->cpu_fallback = t->commute = t->redux = t->cpu_only_flag = false;
  t->rt = rt;
  t->codelet = NULL;
  t->edges = t->inline_edges;
  t->edges_pooled = false;
  t->links = NULL; /* and dx, which shares its place */
  t->callback = NULL;
  t->callback_data = NULL;
  t->args = NULL;
  t->args_size = 0;
  t->pool_next = NULL;
  t->group = NULL; /* batch_next's place */
  t->device_ok = false;
  if (rt->recording)
    t->trace_id = 0; /* codelet tasks get theirs at build */
}

tdm_task *tdm__task_alloc(tdm_runtime *rt) {
  tdm_task *t = pool_take(rt);
  if (t)
    task_init(rt, t);
  return t;
}

size_t tdm__task_alloc_many(tdm_runtime *rt, tdm_task **out, size_t n) {
  size_t got = 0;
  tdm_worker *w = tdm__self_in(rt);
  if (w) {
    for (; got < n && (out[got] = pool_take(rt)); got++)
      ;
  } else { /* the shared cache's lock once, not once a task */
    tdm__spin_lock(&rt->ext_lock);
    for (; got < n && (out[got] = ext_pop(rt)); got++)
      ;
    tdm__spin_unlock(&rt->ext_lock);
  }
  for (size_t i = 0; i < got; i++)
    task_init(rt, out[i]);
  return got;
}

/* A slot lent (tdm__slot_lend) starts its room at this offset: its first
 * line keeps the slot's kind (TDM_TASK_LENT), so that the slabs can be
 * told apart. */
#define LENT_OFFSET TDM_CACHE_LINE
_Static_assert(TDM_POOL_EDGES * sizeof(struct tdm_edge) <= TDM_SLOT_ROOM &&
                   TDM_SLOT_ROOM <= sizeof(tdm_task) - LENT_OFFSET &&
                   offsetof(tdm_task, kind) < LENT_OFFSET,
               "a slot lends TDM_SLOT_ROOM bytes past its kind");
_Static_assert(sizeof(tdm_links) <= TDM_SLOT_ROOM, "a created task's links fit in a slot");

void *tdm__slot_lend(tdm_runtime *rt) {
  tdm_task *slot = pool_take(rt);
  if (!slot)
    return NULL;
  slot->kind = TDM_TASK_LENT;
  return (char *)slot + LENT_OFFSET;
}

void tdm__slot_return(tdm_runtime *rt, void *room) {
  pool_put(rt, (tdm_task *)(void *)((char *)room - LENT_OFFSET));
}

bool tdm__edges_alloc(tdm_task *t, unsigned n) {
  tdm_runtime *rt = t->rt;
  void *room = n <= TDM_POOL_EDGES ? tdm__slot_lend(rt) : NULL;
  if (room) {
    t->edges = room;
    t->edges_pooled = true;
    return true;
  }
  struct tdm_edge *e = tdm__malloc(rt, n * sizeof *e);
  if (!e)
    return false;
  t->edges = e;
  return true;
}

/* Out of line: pool_put stays inlined where every task goes. */
static __attribute__((noinline)) void free_edges(tdm_task *t, bool destroying) {
  if (!t->edges_pooled)
    free(t->edges);
  else if (!destroying)
    tdm__slot_return(t->rt, t->edges);
  t->edges = t->inline_edges;
  t->edges_pooled = false;
}

/* Frees what a task owns outside its slab (not the references it holds:
 * at destroy every task goes at once, and the slabs with them). */
static void free_task_memory(tdm_task *t, bool destroying) {
  tdm__graph_drop(t->rt, t, false);
  if (t->args != t->inline_args)
    free(t->args);
  if (t->edges != t->inline_edges)
    free_edges(t, destroying);
  if (t->more) {
    free(t->more);
    t->more = NULL;
  }
}

void tdm__pool_destroy(tdm_runtime *rt) {
  /* Tasks still referenced (by a handle that was never unregistered, or
   * by the application) own heap memory: free it, then the slabs (what
   * a task owns may be a slot of another slab). */
  for (size_t i = 0; i < rt->nslabs; i++) {
    tdm_task *slab = rt->slabs[i];
    for (unsigned k = 0; k < TDM_SLAB_TASKS; k++)
      if (slab[k].kind != TDM_TASK_FREE && slab[k].kind != TDM_TASK_LENT)
        free_task_memory(&slab[k], true);
  }
  for (size_t i = 0; i < rt->nslabs; i++)
    free(rt->slabs[i]);
  free(rt->slabs);
  rt->slabs = NULL;
  rt->nslabs = rt->slabs_cap = 0;
  rt->pool_free = NULL;
  rt->ext_free = NULL;
}


void tdm__taskvec_clear(tdm_taskvec *v) {
  for (unsigned i = 0; i < v->n; i++)
    tdm__task_unref(v->items[i]);
  v->n = 0;
}

void tdm__taskvec_release(tdm_taskvec *v) {
  tdm__taskvec_clear(v);
  tdm__taskvec_free(v);
}

/* What a task being freed holds by reference: tiles, its group. */
static __attribute__((noinline)) void drop_references(tdm_task *t) {
  for (unsigned m = t->tile_mask; m; m &= m - 1) /* the tiles it holds */
    tdm__handle_unref(t->handles[__builtin_ctz(m)]);
  if (t->more)
    for (unsigned i = 0; i < t->nbuf; i++)
      if (t->more->tiles[i])
        tdm__handle_unref(t->more->handles[i]);
  if (t->group) {
    tdm__group_unref(t->group);
    t->group = NULL;
  }
}

void tdm__task_unref(tdm_task *t) {
  /* acq_rel: the last owner sees every other owner's writes before freeing */
  if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
    return;
  if (t->tile_mask || ((uintptr_t)t->more | (uintptr_t)t->group))
    drop_references(t);
  tdm__graph_drop(t->rt, t, true); /* free_task_memory's finds none left */
  free_task_memory(t, false);
  pool_put(t->rt, t);
}

