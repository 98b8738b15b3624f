/*
 * Data handles: registration, tiles, where their contents come home, and
 * their lifetime. What a handle carries is its dependency state (the
 * writers of its current contents and their readers: core/handles.c,
 * which also partitions, acquires and unregisters), and where devices
 * hold its contents (coherence.c).
 *
 * Partitioning is asynchronous: each tile starts with a copy of the
 * matrix's dependency state, so a task on a tile waits for exactly the
 * tasks that touched the matrix before. Unpartitioning gives the matrix the
 * union of the tiles' states: a writer on the matrix then waits for every
 * writer and reader of every tile, a reader for every tile's writers.
 *
 * Lifetime. A handle is referenced by its registration. Unregistering
 * waits for the handle's tasks, marks it dead and moves that reference to a
 * quarantine of the last TDM_QUARANTINE handles, so that using a stale
 * handle is reported (TDM_ERR_STALE_HANDLE) rather than touching freed
 * memory. Tasks do not reference registered handles (every task naming one
 * has finished when unregister returns, and a finished task no longer
 * touches its handles), which keeps the handle's cache line out of the
 * workers' hands. Tiles are different: unpartition does not wait, so each
 * task naming a tile holds a reference on it until the task is freed.
 */
#include "data.h"

#include <stdlib.h>
#include <string.h>

#define TDM_QUARANTINE 1024

tdm_status tdm__handle_check(tdm_runtime *rt, const tdm_handle *h, const char *what) {
  if (!h)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what, "NULL handle");
  uint32_t magic = atomic_load_explicit(&h->magic, memory_order_relaxed);
  if (magic == TDM_HANDLE_DEAD)
    return tdm__refuse(rt, TDM_ERR_STALE_HANDLE, what, "handle was unregistered");
  if (magic != TDM_HANDLE_MAGIC)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what, "not a Tandem handle");
  if (h->rt != rt)
    return tdm__refuse(rt, TDM_ERR_WRONG_RUNTIME, what, "handle belongs to another runtime");
  return TDM_OK;
}

tdm_runtime *tdm__handle_runtime(const tdm_handle *h) {
  if (!h)
    return NULL;
  uint32_t magic = atomic_load_explicit(&h->magic, memory_order_relaxed);
  return magic == TDM_HANDLE_MAGIC || magic == TDM_HANDLE_DEAD ? h->rt : NULL;
}

tdm_status tdm__handle_enter(const tdm_handle *h, const char *what, tdm_runtime **rt) {
  *rt = tdm__handle_runtime(h);
  if (!*rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(*rt, what);
  return tdm__handle_check(*rt, h, what);
}

void tdm__handles_lock(tdm_handle **hs, unsigned n) {
  for (unsigned i = 0; i < n; i++)
    tdm__spin_lock(&hs[i]->lock);
}

void tdm__handles_unlock(tdm_handle **hs, unsigned n) {
  for (unsigned i = n; i-- > 0;)
    tdm__spin_unlock(&hs[i]->lock);
}

/* ---- allocation and freeing -------------------------------------------- */

tdm_handle *tdm__handle_new(tdm_runtime *rt, uint8_t kind, const tdm_buffer *buf,
                            tdm_handle *parent, tdm_memrange *clash) {
  bool registration = !parent;
  tdm_handle *h = tdm__calloc(rt, 1, sizeof *h);
  if (!h)
    return NULL;
  atomic_init(&h->magic, TDM_HANDLE_MAGIC);
  atomic_init(&h->refs, 1);
  h->kind = kind;
  h->rt = rt;
  h->buf = *buf;
  /* a registration's contents are in host memory; where devices may
   * hold copies, a tile takes its matrix's when a task first uses it */
  tdm__coh_init(&h->coh, !parent || !rt->ndevice_workers, parent ? &parent->coh : NULL);
  h->parent = parent;
  tdm__taskvec_init(&h->writers);
  tdm__taskvec_init(&h->readers);
  tdm__taskvec_init(&h->commuters);
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->handles_lock));
  tdm_memrange *other = registration ? tdm__ranges_find(&rt->ranges, buf) : NULL;
  if (other) {
    *clash = *other; /* copied under the lock: the handle may go after */
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->handles_lock));
    free(h);
    return NULL;
  }
  if (registration)
    tdm__ranges_insert(&rt->ranges, &h->range, &h->buf);
  h->all_next = rt->all_handles;
  if (rt->all_handles)
    rt->all_handles->all_prev = h;
  rt->all_handles = h;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->handles_lock));
  return h;
}

/* at_destroy: every handle goes, in any order, and nothing runs. */
static void handle_free_memory(tdm_handle *h, bool at_destroy) {
  tdm__handle_forget(h, !at_destroy);
  tdm__taskvec_free(&h->writers);
  tdm__taskvec_free(&h->readers);
  tdm__taskvec_free(&h->commuters);
  free(h->tiles);
  tdm_handle *parent = h->parent;
  free(h);
  if (parent && !at_destroy)
    tdm__handle_unref(parent);
}

void tdm__handle_unref(tdm_handle *h) {
  /* acq_rel: as for tasks */
  if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) != 1)
    return;
  tdm_runtime *rt = h->rt;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->handles_lock));
  if (h->all_prev)
    h->all_prev->all_next = h->all_next;
  else
    rt->all_handles = h->all_next;
  if (h->all_next)
    h->all_next->all_prev = h->all_prev;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->handles_lock));
  handle_free_memory(h, false);
}

/* At destroy: every task has finished and the task pool is about to be
 * freed wholesale, so handles are freed without dropping task references. */
void tdm__handles_home(tdm_runtime *rt) {
  if (!rt->ndevice_workers)
    return;
  /* Registered handles, not partitioned (their tiles hold the contents).
   * Collected first: bringing a matrix home may release tiles, which
   * takes handles_lock. The workers are idle: nothing else changes them. */
  size_t n = 0;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->handles_lock));
  for (tdm_handle *h = rt->all_handles; h; h = h->all_next)
    n++;
  tdm_handle **hs = malloc((n ? n : 1) * sizeof *hs);
  n = 0;
  for (tdm_handle *h = rt->all_handles; h && hs; h = h->all_next)
    if (atomic_load(&h->magic) == TDM_HANDLE_MAGIC && !h->tiles) {
      tdm__handle_ref(h);
      hs[n++] = h;
    }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->handles_lock));
  if (!hs) {
    tdm__log(rt, TDM_LOG_ERROR, "out of memory: device copies may not come home");
    return;
  }
  for (size_t i = 0; i < n; i++) {
    tdm__handle_home(hs[i], false); /* logged when it fails */
    tdm__handle_unref(hs[i]);
  }
  free(hs);
}

void tdm__handles_destroy(tdm_runtime *rt) {
  if (rt->nodes.n) /* gathered tiles first, while every handle is there */
    tdm__coh_reap(&rt->nodes);
  tdm_handle *h = rt->all_handles;
  while (h) {
    tdm_handle *next = h->all_next;
    handle_free_memory(h, true);
    h = next;
  }
  rt->all_handles = NULL;
  rt->ranges.root = NULL;
  rt->quarantine_head = rt->quarantine_tail = NULL;
  rt->nquarantine = 0;
}

void tdm__handle_quarantine(tdm_handle *h) {
  tdm_runtime *rt = h->rt;
  tdm_handle *evict = NULL;
  atomic_store(&h->magic, TDM_HANDLE_DEAD);
  h->quarantine_next = NULL;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->handles_lock));
  if (h->range.buf) /* the memory is the application's again */
    tdm__ranges_remove(&rt->ranges, &h->range);
  if (rt->quarantine_tail)
    rt->quarantine_tail->quarantine_next = h;
  else
    rt->quarantine_head = h;
  rt->quarantine_tail = h;
  if (++rt->nquarantine > TDM_QUARANTINE) {
    evict = rt->quarantine_head;
    rt->quarantine_head = evict->quarantine_next;
    rt->nquarantine--;
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->handles_lock));
  if (evict)
    tdm__handle_unref(evict);
}

/* ---- registration ------------------------------------------------------ */

static tdm_status do_register(tdm_runtime *rt, uint8_t kind, const tdm_buffer *buf,
                              tdm_handle **out, const char *what) {
  if (!out)
    return rt ? tdm__refuse(rt, TDM_ERR_INVALID_ARG, what, "out is NULL") : TDM_ERR_INVALID_ARG;
  *out = NULL;
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, what);
  if (!buf->ptr || !buf->elem_size || !buf->nx || !buf->ny)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what, "NULL pointer or zero size");
  uintptr_t lo, hi;
  if (!tdm__buffer_span(buf, &lo, &hi))
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what, "its size in bytes overflows");
  if (atomic_load(&rt->closing) && !tdm__self_in(rt))
    return tdm__refuse(rt, TDM_ERR_SHUTTING_DOWN, what, "the runtime is being destroyed");
  tdm_memrange clash = {0};
  tdm_handle *h = tdm__handle_new(rt, kind, buf, NULL, &clash);
  if (!h && clash.hi) {
    tdm__log(rt, TDM_LOG_ERROR,
             "%s: refused: bytes %p to %p overlap a registered handle (%p to %p); two "
             "handles over the same memory would race",
             what, (void *)lo, (void *)hi, (void *)clash.lo, (void *)clash.hi);
    return TDM_ERR_OVERLAP;
  }
  if (!h)
    return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
  *out = h;
  return TDM_OK;
}

tdm_status tdm_register_vector(tdm_runtime *rt, void *ptr, size_t count,
                               size_t elem_size, tdm_handle **out) {
  tdm_buffer b = {.ptr = ptr, .elem_size = elem_size, .nx = count, .ny = 1, .ld = 1};
  return do_register(rt, TDM_HANDLE_VECTOR, &b, out, "tdm_register_vector");
}

tdm_status tdm_register_matrix(tdm_runtime *rt, void *ptr, size_t ld, size_t rows,
                               size_t cols, size_t elem_size, tdm_handle **out) {
  if (rt && ld < cols) {
    if (out)
      *out = NULL;
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, "tdm_register_matrix",
                       "leading dimension smaller than the number of columns");
  }
  tdm_buffer b = {.ptr = ptr, .elem_size = elem_size, .nx = rows, .ny = cols, .ld = ld};
  return do_register(rt, TDM_HANDLE_MATRIX, &b, out, "tdm_register_matrix");
}

tdm_status tdm_handle_buffer(const tdm_handle *h, tdm_buffer *out) {
  tdm_runtime *rt = tdm__handle_runtime(h);
  if (!rt || !out)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_handle_buffer");
  tdm_status st = tdm__handle_check(rt, h, "tdm_handle_buffer");
  if (st)
    return st;
  *out = h->buf;
  return TDM_OK;
}

static tdm_status grid(const tdm_handle *h, size_t *tile_rows_out, size_t *tile_cols_out,
                       const char *what) {
  tdm_runtime *rt = tdm__handle_runtime(h);
  if (!rt || !tile_rows_out || !tile_cols_out)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, what);
  tdm_status st = tdm__handle_check(rt, h, what);
  if (st)
    return st;
  tdm_handle *mh = (tdm_handle *)h; /* the lock is not part of the value */
  tdm__spin_lock(&mh->lock);
  bool partitioned = h->tiles != NULL;
  *tile_rows_out = h->tile_rows;
  *tile_cols_out = h->tile_cols;
  tdm__spin_unlock(&mh->lock);
  if (!partitioned)
    return tdm__refuse(rt, TDM_ERR_NOT_PARTITIONED, what, "not partitioned");
  return TDM_OK;
}

tdm_status tdm_matrix_tiles(const tdm_handle *h, size_t *tile_rows_out,
                            size_t *tile_cols_out) {
  return grid(h, tile_rows_out, tile_cols_out, "tdm_matrix_tiles");
}

tdm_status tdm_vector_pieces(const tdm_handle *h, size_t *count) {
  size_t cols;
  return grid(h, count, &cols, "tdm_vector_pieces");
}

/* Tile (i, j) of a partitioned handle, or NULL. */
static tdm_handle *tile_at(const tdm_handle *h, size_t i, size_t j, const char *what) {
  tdm_runtime *rt = tdm__handle_runtime(h);
  if (!rt || (tdm__forked(rt) && tdm__forked_error(rt, what)) || tdm__handle_check(rt, h, what))
    return NULL;
  tdm_handle *mh = (tdm_handle *)h, *tile = NULL;
  tdm__spin_lock(&mh->lock);
  if (h->tiles && i < h->tile_rows && j < h->tile_cols)
    tile = h->tiles[i * h->tile_cols + j];
  tdm__spin_unlock(&mh->lock);
  return tile;
}

tdm_handle *tdm_matrix_tile(const tdm_handle *h, size_t i, size_t j) {
  return tile_at(h, i, j, "tdm_matrix_tile");
}

tdm_handle *tdm_vector_piece(const tdm_handle *h, size_t i) {
  return tile_at(h, i, 0, "tdm_vector_piece");
}

