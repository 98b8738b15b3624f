/*
 * Data handles: registration, partitioning into tiles, host acquisition,
 * unregistration.
 *
 * A handle describes memory the application owns. What a handle carries
 * is its dependency state (task.c: the writers of its current contents
 * and their readers), and where devices hold its contents (coherence.c).
 *
 * Partitioning is asynchronous: each tile starts with a copy of the
 * matrix's dependency state, so a task on a tile waits for exactly the
 * tasks that touched the matrix before. Unpartitioning gives the matrix the
 * union of the tiles' states: a writer on the matrix then waits for every
 * writer and reader of every tile, a reader for every tile's writers.
 *
 * Acquisition is a node in the graph: a task of kind ACQUIRE, submitted
 * like any other on the handle, that becomes "ready" instead of being
 * queued; the host thread waits for that, and releasing the handle
 * finishes the node, which releases the tasks submitted after it.
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
#include "../internal.h"

#include <stdlib.h>
#include <string.h>

#define TDM_QUARANTINE 1024

static tdm_status hbad(const tdm_runtime *rt, tdm_status st, const char *what,
                       const char *why) {
  tdm__log(rt, TDM_LOG_ERROR, "%s: %s", what, why);
  return st;
}

tdm_status tdm__handle_check(tdm_runtime *rt, const tdm_handle *h, const char *what) {
  if (!h)
    return hbad(rt, TDM_ERR_INVALID_ARG, what, "NULL handle");
  uint32_t magic = atomic_load_explicit(&h->magic, memory_order_relaxed);
  if (magic == TDM_HANDLE_DEAD)
    return hbad(rt, TDM_ERR_STALE_HANDLE, what, "handle was unregistered");
  if (magic != TDM_HANDLE_MAGIC)
    return hbad(rt, TDM_ERR_INVALID_ARG, what, "not a Tandem handle");
  if (h->rt != rt)
    return hbad(rt, TDM_ERR_WRONG_RUNTIME, what, "handle belongs to another runtime");
  return TDM_OK;
}

/* The runtime of a handle the caller passed, after checking it looks like
 * one (NULL when it does not; nothing can be logged then). */
static tdm_runtime *runtime_of(const tdm_handle *h) {
  if (!h)
    return NULL;
  uint32_t magic = atomic_load_explicit(&h->magic, memory_order_relaxed);
  return magic == TDM_HANDLE_MAGIC || magic == TDM_HANDLE_DEAD ? h->rt : NULL;
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

/* A new handle: a tile of `parent` (which it references), or a
 * registration (parent NULL): NULL with *clash set to the span of a
 * registered handle it would share memory with. */
static tdm_handle *handle_new(tdm_runtime *rt, uint8_t kind, const tdm_buffer *buf,
                              tdm_handle *parent, tdm_range *clash) {
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
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->handles_lock));
  tdm_range *other = registration ? tdm__ranges_find(&rt->ranges, buf) : NULL;
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

static void drop_state(tdm_handle *h) {
  tdm__taskvec_release(&h->writers);
  tdm__taskvec_release(&h->readers);
}

/* Marks h dead and parks its registration reference in the quarantine.
 * The handle's state must have been dropped. */
static void quarantine(tdm_handle *h) {
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
    return rt ? hbad(rt, TDM_ERR_INVALID_ARG, what, "out is NULL") : TDM_ERR_INVALID_ARG;
  *out = NULL;
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, what);
  if (!buf->ptr || !buf->elem_size || !buf->nx || !buf->ny)
    return hbad(rt, TDM_ERR_INVALID_ARG, what, "NULL pointer or zero size");
  uintptr_t lo, hi;
  if (!tdm__buffer_span(buf, &lo, &hi))
    return hbad(rt, TDM_ERR_INVALID_ARG, what, "its size in bytes overflows");
  if (atomic_load(&rt->closing) && !tdm__self_in(rt))
    return hbad(rt, TDM_ERR_SHUTTING_DOWN, what, "the runtime is being destroyed");
  tdm_range clash = {0};
  tdm_handle *h = handle_new(rt, kind, buf, NULL, &clash);
  if (!h && clash.hi) {
    tdm__log(rt, TDM_LOG_ERROR,
             "%s: refused: bytes %p to %p overlap a registered handle (%p to %p); two "
             "handles over the same memory would race",
             what, (void *)lo, (void *)hi, (void *)clash.lo, (void *)clash.hi);
    return TDM_ERR_OVERLAP;
  }
  if (!h)
    return hbad(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
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
    return hbad(rt, TDM_ERR_INVALID_ARG, "tdm_register_matrix",
                "leading dimension smaller than the number of columns");
  }
  tdm_buffer b = {.ptr = ptr, .elem_size = elem_size, .nx = rows, .ny = cols, .ld = ld};
  return do_register(rt, TDM_HANDLE_MATRIX, &b, out, "tdm_register_matrix");
}

tdm_status tdm_handle_buffer(const tdm_handle *h, tdm_buffer *out) {
  tdm_runtime *rt = runtime_of(h);
  if (!rt || !out)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_handle_buffer");
  tdm_status st = tdm__handle_check(rt, h, "tdm_handle_buffer");
  if (st)
    return st;
  *out = h->buf;
  return TDM_OK;
}

/* ---- partitioning ------------------------------------------------------ */

static int copy_refs(tdm_runtime *rt, tdm_taskvec *dst, const tdm_taskvec *src) {
  for (unsigned i = 0; i < src->n; i++) {
    tdm_task *t = src->items[i];
    /* acquire: a finished task needs no edge, but its writes (and its
     * outcome) must be visible to the tasks that will not wait for it.
     * One that failed stays: a task reading what it did not produce is
     * cancelled, and the version is reported lost, on either side. */
    if (atomic_load_explicit(&t->state, memory_order_acquire) == TDM_TS_DONE &&
        !atomic_load_explicit(&t->outcome, memory_order_relaxed))
      continue; /* finished: nothing to wait for */
    if (tdm__taskvec_push(rt, dst, t))
      return -1;
    tdm__task_ref(t);
  }
  return 0;
}

/* A matrix into tiles, or a vector into pieces (tiles of tile_rows
 * elements and one column, as a vector's geometry is: nx elements of one
 * column, ld 1): the same dependencies, coherence and device copies. */
static tdm_status partition(tdm_handle *h, size_t tile_rows, size_t tile_cols, unsigned flags,
                            uint8_t kind, const char *what) {
  tdm_runtime *rt = runtime_of(h);
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, what);
  tdm_status st = tdm__handle_check(rt, h, what);
  if (st)
    return st;
  if (h->kind != kind || !tile_rows || !tile_cols || flags)
    return hbad(rt, TDM_ERR_INVALID_ARG, what,
                kind == TDM_HANDLE_MATRIX ? "needs a matrix, nonzero tile sizes and flags 0"
                                          : "needs a vector, a nonzero piece size and flags 0");
  size_t ni = (h->buf.nx + tile_rows - 1) / tile_rows;
  size_t nj = (h->buf.ny + tile_cols - 1) / tile_cols;
  tdm_handle **tiles = tdm__calloc(rt, ni * nj, sizeof *tiles);
  if (!tiles)
    return hbad(rt, TDM_ERR_NO_MEMORY, what, "out of memory");

  tdm__spin_lock(&h->lock);
  if (atomic_load(&h->magic) != TDM_HANDLE_MAGIC)
    st = hbad(rt, TDM_ERR_STALE_HANDLE, what, "handle was unregistered");
  else if (h->tiles)
    st = hbad(rt, TDM_ERR_PARTITIONED, what, "already partitioned");
  else if (h->acquired)
    st = hbad(rt, TDM_ERR_BUSY, what, "handle is acquired by the host");
  for (size_t i = 0; i < ni && !st; i++)
    for (size_t j = 0; j < nj && !st; j++) {
      size_t r0 = i * tile_rows, c0 = j * tile_cols;
      tdm_buffer b = h->buf;
      b.ptr = (char *)h->buf.ptr + (r0 * h->buf.ld + c0) * h->buf.elem_size;
      b.nx = h->buf.nx - r0 < tile_rows ? h->buf.nx - r0 : tile_rows;
      b.ny = h->buf.ny - c0 < tile_cols ? h->buf.ny - c0 : tile_cols;
      tdm_handle *tile = handle_new(rt, kind, &b, h, NULL);
      if (!tile) {
        st = hbad(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
        break;
      }
      tdm__handle_ref(h); /* the tile's */
      tiles[i * nj + j] = tile;
      if (copy_refs(rt, &tile->writers, &h->writers) || copy_refs(rt, &tile->readers, &h->readers))
        st = hbad(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
    }
  if (!st) {
    h->tiles = tiles;
    h->tile_rows = ni;
    h->tile_cols = nj;
    if (rt->ndevice_workers)
      tdm__coh_partitioned(h, tiles, ni * nj);
  }
  tdm__spin_unlock(&h->lock);
  if (st) {
    for (size_t k = 0; k < ni * nj; k++)
      if (tiles[k]) {
        drop_state(tiles[k]);
        atomic_store(&tiles[k]->magic, TDM_HANDLE_DEAD);
        tdm__handle_unref(tiles[k]);
      }
    free(tiles);
  }
  return st;
}

tdm_status tdm_matrix_partition(tdm_handle *h, size_t tile_rows, size_t tile_cols,
                                unsigned flags) {
  return partition(h, tile_rows, tile_cols, flags, TDM_HANDLE_MATRIX, "tdm_matrix_partition");
}

tdm_status tdm_vector_partition(tdm_handle *h, size_t piece, unsigned flags) {
  return partition(h, piece, 1, flags, TDM_HANDLE_VECTOR, "tdm_vector_partition");
}

/* The grid of a partitioned handle (a vector's: n x 1). */
static tdm_status grid(const tdm_handle *h, size_t *tile_rows_out, size_t *tile_cols_out,
                       const char *what) {
  tdm_runtime *rt = runtime_of(h);
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
    return hbad(rt, TDM_ERR_NOT_PARTITIONED, what, "not partitioned");
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
  tdm_runtime *rt = runtime_of(h);
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

static int cmp_address(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)*(tdm_handle *const *)a, y = (uintptr_t)*(tdm_handle *const *)b;
  return (x > y) - (x < y);
}

/* Joins a matrix's tiles or a vector's pieces (kind) back. */
static tdm_status unpartition(tdm_handle *h, unsigned flags, uint8_t kind, const char *what) {
  tdm_runtime *rt = runtime_of(h);
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, what);
  tdm_status st = tdm__handle_check(rt, h, what);
  if (st)
    return st;
  if (flags)
    return hbad(rt, TDM_ERR_INVALID_ARG, what, "flags must be 0");
  if (h->kind != kind)
    return hbad(rt, TDM_ERR_INVALID_ARG, what,
                kind == TDM_HANDLE_MATRIX ? "not a matrix (a vector's pieces join with "
                                            "tdm_vector_unpartition)"
                                          : "not a vector (a matrix's tiles join with "
                                            "tdm_matrix_unpartition)");
  /* The tiles array cannot change under us without the parent's lock,
   * but we must lock the parent together with its tiles, in address
   * order: read the array under the parent's lock first. */
  tdm__spin_lock(&h->lock);
  tdm_handle **tiles = h->tiles;
  size_t n = h->tile_rows * h->tile_cols;
  tdm__spin_unlock(&h->lock);
  if (!tiles)
    return hbad(rt, TDM_ERR_NOT_PARTITIONED, what, "not partitioned");

  /* Where devices may hold the tiles' contents, the matrix gathers them
   * on its first use (data/coherence.c): the tiles stay alive. */
  bool keep = rt->ndevice_workers != 0;
  tdm_gather *g = keep ? tdm__malloc(rt, sizeof *g) : NULL;
  tdm_handle **locks = keep && !g ? NULL : tdm__malloc(rt, (n + 1) * sizeof *locks);
  if (!locks) {
    free(g);
    return hbad(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
  }
  locks[0] = h;
  memcpy(locks + 1, tiles, n * sizeof *tiles);
  qsort(locks, n + 1, sizeof *locks, cmp_address);
  for (size_t i = 0; i <= n; i++) /* in address order, as tdm__handles_lock */
    tdm__spin_lock(&locks[i]->lock);

  tdm_taskvec writers, readers;
  tdm__taskvec_init(&writers);
  tdm__taskvec_init(&readers);
  if (h->tiles != tiles)
    st = hbad(rt, TDM_ERR_NOT_PARTITIONED, what, "unpartitioned concurrently");
  for (size_t k = 0; k < n && !st; k++) {
    tdm_handle *t = tiles[k];
    if (t->acquired || t->tiles || t->unsubmitted)
      st = hbad(rt, TDM_ERR_BUSY, what,
                "a tile is acquired, partitioned or named by an unsubmitted task");
    else if (copy_refs(rt, &writers, &t->writers) || copy_refs(rt, &readers, &t->readers))
      st = hbad(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
  }
  if (!st) {
    drop_state(h);
    tdm__taskvec_move(&h->writers, &writers);
    tdm__taskvec_move(&h->readers, &readers);
    h->tiles = NULL;
    h->tile_rows = h->tile_cols = 0;
    for (size_t k = 0; k < n; k++)
      atomic_store(&tiles[k]->magic, TDM_HANDLE_DEAD);
    if (keep) { /* under the lock: a partition made after sees it */
      for (size_t k = 0; k < n; k++)
        tdm__handle_ref(tiles[k]);
      g->tiles = tiles;
      g->n = n;
      tdm__coh_unpartitioned(h, g);
    }
  }
  for (size_t i = n + 1; i-- > 0;)
    tdm__spin_unlock(&locks[i]->lock);
  free(locks);
  if (st) {
    free(g);
    tdm__taskvec_release(&writers);
    tdm__taskvec_release(&readers);
    return st;
  }
  for (size_t k = 0; k < n; k++) {
    drop_state(tiles[k]);
    quarantine(tiles[k]);
  }
  if (!keep)
    free(tiles);
  return TDM_OK;
}

tdm_status tdm_matrix_unpartition(tdm_handle *h, unsigned flags) {
  return unpartition(h, flags, TDM_HANDLE_MATRIX, "tdm_matrix_unpartition");
}

tdm_status tdm_vector_unpartition(tdm_handle *h, unsigned flags) {
  return unpartition(h, flags, TDM_HANDLE_VECTOR, "tdm_vector_unpartition");
}

/* ---- host access --------------------------------------------------------- */

/* Ends h's acquisition, if any: its task finishes (the tasks after it may
 * run) and the acquirer's reference goes. False when h was not acquired. */
static bool end_acquisition(tdm_handle *h) {
  tdm__spin_lock(&h->lock);
  tdm_task *t = h->acquired;
  h->acquired = NULL;
  tdm__spin_unlock(&h->lock);
  if (!t)
    return false;
  tdm__task_finish(t);
  tdm__task_unref(t); /* the acquirer's reference */
  return true;
}

tdm_status tdm_handle_acquire(tdm_handle *h, tdm_access mode) {
  static const char what[] = "tdm_handle_acquire";
  tdm_runtime *rt = runtime_of(h);
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, what);
  tdm_status st = tdm__check_blocking(rt, what);
  if (!st)
    st = tdm__handle_check(rt, h, what);
  if (st)
    return st;
  if (mode != TDM_R && mode != TDM_W && mode != TDM_RW)
    return hbad(rt, TDM_ERR_INVALID_MODE, what, "invalid access mode");
  tdm_task *t = tdm__task_alloc(rt);
  if (!t)
    return hbad(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
  t->kind = TDM_TASK_ACQUIRE;
  t->nbuf = 1;
  t->handles[0] = h;
  t->modes[0] = (uint8_t)mode;
  if (h->parent) { /* as in task_build */
    t->tile_mask = 1;
    tdm__handle_ref(h);
  }

  tdm__spin_lock(&h->lock);
  if (h->acquired)
    st = hbad(rt, TDM_ERR_BUSY, what, "handle is already acquired");
  else if (h->tiles)
    st = hbad(rt, TDM_ERR_PARTITIONED, what, "handle is partitioned");
  else
    h->acquired = t;
  tdm__spin_unlock(&h->lock);
  if (!st) {
    st = tdm__task_submit(t, false);
    if (st) {
      tdm__spin_lock(&h->lock);
      h->acquired = NULL;
      tdm__spin_unlock(&h->lock);
    }
  }
  if (st) {
    tdm__task_unref(t);
    return st;
  }
  tdm__task_wait_state(t, TDM_TS_READY);
  if (atomic_load_explicit(&t->outcome, memory_order_relaxed)) {
    /* the version it would read was never produced: not acquired; what
     * reads after this acquisition is cancelled as it would have been */
    end_acquisition(h);
    return hbad(rt, TDM_ERR_LOST, what,
                "a task writing the handle failed or was cancelled: not acquired");
  }
  /* the host holds it from here: its contents come home */
  if (!tdm__handle_home(h, (mode & TDM_W) != 0)) {
    end_acquisition(h);
    return hbad(rt, TDM_ERR_LOST, what,
                "its contents could not be copied home from a device: not acquired");
  }
  tdm__acquired_here++; /* this thread's submissions go past the bound */
  return TDM_OK;
}

tdm_status tdm_handle_release(tdm_handle *h) {
  tdm_runtime *rt = runtime_of(h);
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_handle_release");
  tdm_status st = tdm__handle_check(rt, h, "tdm_handle_release");
  if (st)
    return st;
  if (!end_acquisition(h))
    return hbad(rt, TDM_ERR_NOT_ACQUIRED, "tdm_handle_release", "handle is not acquired");
  tdm__acquired_here--;
  return TDM_OK;
}

tdm_status tdm_handle_unregister(tdm_handle *h) {
  static const char what[] = "tdm_handle_unregister";
  tdm_runtime *rt = runtime_of(h);
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, what);
  tdm_status st = tdm__check_blocking(rt, what);
  if (!st)
    st = tdm__handle_check(rt, h, what);
  if (st)
    return st;
  tdm__spin_lock(&h->lock);
  if (atomic_load(&h->magic) != TDM_HANDLE_MAGIC)
    st = hbad(rt, TDM_ERR_STALE_HANDLE, what, "handle was unregistered");
  else if (h->acquired)
    st = hbad(rt, TDM_ERR_BUSY, what, "handle is acquired by the host");
  else if (h->tiles)
    st = hbad(rt, TDM_ERR_BUSY, what, "handle is partitioned");
  else if (h->parent)
    st = hbad(rt, TDM_ERR_BUSY, what, "handle is a tile: unpartition its matrix");
  else if (h->unsubmitted)
    st = hbad(rt, TDM_ERR_BUSY, what, "a created, unsubmitted task names the handle");
  tdm_taskvec writers, readers;
  tdm__taskvec_init(&writers);
  tdm__taskvec_init(&readers);
  if (!st) {
    /* dead from now on: later submissions fail */
    atomic_store(&h->magic, TDM_HANDLE_DEAD);
    tdm__taskvec_move(&writers, &h->writers);
    tdm__taskvec_move(&readers, &h->readers);
  }
  tdm__spin_unlock(&h->lock);
  if (st)
    return st;
  /* Readers were submitted after the writers and waited for them: but
   * writers alone may be pending when there are no readers. Wait for all. */
  bool lost = false; /* the newest version was never produced */
  for (unsigned i = 0; i < writers.n; i++) {
    tdm__task_wait_state(writers.items[i], TDM_TS_DONE);
    lost |= atomic_load_explicit(&writers.items[i]->outcome, memory_order_relaxed) != TDM_OK;
  }
  for (unsigned i = 0; i < readers.n; i++)
    tdm__task_wait_state(readers.items[i], TDM_TS_DONE);
  tdm__taskvec_release(&writers);
  tdm__taskvec_release(&readers);
  /* the latest contents go home, and the device buffers go */
  bool home = tdm__handle_home(h, false);
  tdm__handle_forget(h, true);
  quarantine(h);
  if (!home)
    return hbad(rt, TDM_ERR_LOST, what,
                "its newest version could not be copied home from a device: its memory "
                "does not hold it");
  return lost ? hbad(rt, TDM_ERR_LOST, what,
                     "a task writing the handle failed or was cancelled: its memory holds "
                     "the last version produced")
              : TDM_OK;
}

void tdm__release_acquisitions(tdm_runtime *rt) {
  for (;;) {
    tdm_handle *found = NULL;
    /* No handle lock is taken under handles_lock: submitters take them in
     * the other order (freeing a task may free a tile). */
    TDM_PTHREAD(rt, pthread_mutex_lock(&rt->handles_lock));
    for (tdm_handle *h = rt->all_handles; h && !found; h = h->all_next)
      if (atomic_load(&h->acquired)) {
        found = h;
        tdm__handle_ref(h);
      }
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->handles_lock));
    if (!found)
      return;
    tdm__log(rt, TDM_LOG_WARNING,
             "tdm_runtime_destroy: a handle was still acquired; releasing it");
    tdm_handle_release(found);
    tdm__handle_unref(found);
  }
}
