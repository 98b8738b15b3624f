/*
 * The memory of each node: a device's own memory holds buffers counted
 * against a limit and kept in least-recently-used order. To make room,
 * the least recently used buffers that no task in flight uses are
 * dropped; one that holds the only current copy is written back to the
 * host first, and dropped once that copy has landed (tdm__coh_evict). A
 * device working in host memory keeps a buffer per handle over the
 * application's memory: nothing is counted.
 */
#include "data.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

static void lru_unlink(tdm_memnode *m, tdm_replica *r) {
  if (r->lru_prev)
    r->lru_prev->lru_next = r->lru_next;
  else
    m->lru_head = r->lru_next;
  if (r->lru_next)
    r->lru_next->lru_prev = r->lru_prev;
  else
    m->lru_tail = r->lru_prev;
  r->lru_prev = r->lru_next = NULL;
}

static void lru_append(tdm_memnode *m, tdm_replica *r) {
  r->lru_prev = m->lru_tail;
  r->lru_next = NULL;
  if (m->lru_tail)
    m->lru_tail->lru_next = r;
  else
    m->lru_head = r;
  m->lru_tail = r;
}

/* Frees r's buffer (node's lock held). */
static void release(const tdm_nodes *nodes, unsigned node, tdm_replica *r) {
  tdm_memnode *m = &nodes->mem[node];
  nodes->ops->free(nodes->ctx, node, r->mem);
  r->mem = NULL;
  m->used -= r->bytes;
  lru_unlink(m, r);
}

/* A buffer of `bytes` for h on node (1 + device worker k), through the
 * fault seam (an injected failure: as a device out of memory). */
static void *alloc_on(const tdm_nodes *nodes, tdm_handle *h, unsigned node, size_t bytes) {
  if (nodes->rt && tdm__fault(nodes->rt, TDM_FAULT_ALLOC, node - 1))
    return NULL;
  return nodes->ops->alloc(nodes->ctx, node, &h->buf, bytes);
}

enum { FITS, FULL, BUSY };

/* Drops unpinned buffers, least recently used first, until `need` more
 * bytes fit under the limit (all it may when need is 0). `self`'s family
 * lock is held by the caller; others' are only tried (lock order).
 * Returns FITS, FULL (what is left is pinned) or BUSY (a buffer could not
 * be looked at: its family was locked by another thread; or its copy
 * home is still landing). Node's lock held. */
static int make_room(const tdm_nodes *nodes, unsigned node, size_t need,
                     const tdm_handle *self) {
  tdm_memnode *m = &nodes->mem[node];
  tdm_replica *r = m->lru_head;
  bool busy = false;
  uint64_t soon = 0; /* bytes whose copy home is landing: room to come */
  while (r && (need == 0 || m->used - soon + need > m->limit)) {
    tdm_replica *next = r->lru_next;
    tdm_handle *h = r->owner;
    bool ours = h->coh.family == self->coh.family;
    if (r->pins) {
      r = next;
      continue;
    }
    if (ours || tdm__coh_trylock(&h->coh)) {
      int e = tdm__coh_evict(nodes, h, node);
      if (e == TDM_EVICTED) {
        release(nodes, node, r);
        atomic_fetch_add_explicit(&m->evictions, 1, memory_order_relaxed);
      }
      if (e == TDM_EVICT_LATER) { /* its copy home is landing */
        busy = true;
        soon += r->bytes;
      }
      if (!ours)
        tdm__coh_unlock(&h->coh);
    } else {
      busy = true;
    }
    r = next;
  }
  return need == 0 || m->used + need <= m->limit ? FITS : busy ? BUSY : FULL;
}

void *tdm__mem_get(const tdm_nodes *nodes, tdm_handle *h, unsigned node, bool *busy) {
  if (busy)
    *busy = false;
  if (!tdm__coh_replicas(nodes, h))
    return NULL;
  tdm_replica *r = &h->coh.rep[node];
  tdm_memnode *m = &nodes->mem[node];
  if (!m->counted) { /* host memory: nothing counted, nothing evicted */
    if (!r->mem)
      r->mem = alloc_on(nodes, h, node, tdm__coh_span(h));
    return r->mem;
  }
  TDM_PTHREAD(nodes->rt, pthread_mutex_lock(&m->lock));
  if (r->mem) { /* the most recently used now */
    lru_unlink(m, r);
    lru_append(m, r);
  } else {
    size_t size = tdm__coh_bytes(h);
    int room;
    /* a buffer in the way whose family another thread holds: that thread
     * may want this node's lock, so let it go and look again a few times;
     * then the caller lets go of its own family (the other thread may be
     * waiting for room here too) and tries again */
    for (unsigned tries = 0; (room = make_room(nodes, node, size, h)) == BUSY && tries < 64;
         tries++) {
      TDM_PTHREAD(nodes->rt, pthread_mutex_unlock(&m->lock));
      sched_yield();
      TDM_PTHREAD(nodes->rt, pthread_mutex_lock(&m->lock));
    }
    if (room == BUSY && busy)
      *busy = true;
    if (room == FITS) {
      r->mem = alloc_on(nodes, h, node, size);
      if (!r->mem) { /* fuller than counted: drop all it may, once */
        make_room(nodes, node, 0, h);
        r->mem = alloc_on(nodes, h, node, size);
      }
    }
    if (r->mem) {
      r->owner = h;
      r->bytes = size;
      m->used += size;
      lru_append(m, r);
    }
  }
  void *mem = r->mem;
  TDM_PTHREAD(nodes->rt, pthread_mutex_unlock(&m->lock));
  return mem;
}

void tdm__mem_pin(const tdm_nodes *nodes, tdm_handle *h, unsigned node, int delta) {
  tdm_memnode *m = &nodes->mem[node];
  if (!m->counted)
    return;
  TDM_PTHREAD(nodes->rt, pthread_mutex_lock(&m->lock));
  tdm_replica *r = &h->coh.rep[node];
  r->pins = (unsigned)((int)r->pins + delta);
  TDM_PTHREAD(nodes->rt, pthread_mutex_unlock(&m->lock));
}

void tdm__mem_drop(const tdm_nodes *nodes, tdm_handle *h, unsigned node) {
  tdm_memnode *m = &nodes->mem[node];
  tdm_replica *r = &h->coh.rep[node];
  if (!m->counted) {
    if (r->mem)
      nodes->ops->free(nodes->ctx, node, r->mem);
    r->mem = NULL;
    return;
  }
  TDM_PTHREAD(nodes->rt, pthread_mutex_lock(&m->lock));
  if (r->mem)
    release(nodes, node, r);
  TDM_PTHREAD(nodes->rt, pthread_mutex_unlock(&m->lock));
}

void tdm__mem_usage(const tdm_nodes *nodes, unsigned node, uint64_t *used, uint64_t *limit,
                    uint64_t *evictions) {
  tdm_memnode *m = &nodes->mem[node];
  TDM_PTHREAD(nodes->rt, pthread_mutex_lock(&m->lock));
  *used = m->used;
  *limit = m->limit;
  TDM_PTHREAD(nodes->rt, pthread_mutex_unlock(&m->lock));
  *evictions = atomic_load_explicit(&m->evictions, memory_order_relaxed);
}
