/*
 * What handles do with tasks: their dependency state (the writers of a
 * handle's current contents and their readers, held by reference), which
 * partitioning copies to each tile and unpartitioning joins back, and the
 * calls that wait for a handle's tasks or build one: host acquisition and
 * unregistration. Registration, tiles and where contents are live in
 * runtime/data/handles.c.
 *
 * Acquisition is a node in the graph: a task of kind ACQUIRE, submitted
 * like any other on the handle, that becomes "ready" instead of being
 * queued; the host thread waits for that, and releasing the handle
 * finishes the node, which releases the tasks submitted after it.
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>

static void drop_state(tdm_handle *h) {
  tdm__taskvec_release(&h->writers);
  tdm__taskvec_release(&h->readers);
  tdm__taskvec_release(&h->commuters);
}

void tdm__handle_settle(tdm_handle *h) {
  if (TDM_LIKELY(!(h->unusual & TDM__H_COMMUTERS)))
    return;
  /* each came after every writer and reader: they are the writers now */
  tdm__taskvec_release(&h->writers);
  tdm__taskvec_clear(&h->readers);
  tdm__taskvec_move(&h->writers, &h->commuters);
  h->unusual &= (uint8_t)~TDM__H_COMMUTERS;
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
 * column, ld 1): the same dependencies, coherence and device copies.
 * With rows_at (ni + 1 ascending row boundaries, from 0 to the rows),
 * tile row i is rows [rows_at[i], rows_at[i + 1]) instead. */
static tdm_status partition_at(tdm_handle *h, size_t tile_rows, size_t tile_cols,
                               const size_t *rows_at, size_t ni, unsigned flags, uint8_t kind,
                               const char *what) {
  tdm_runtime *rt;
  tdm_status st = tdm__handle_enter(h, what, &rt);
  if (st)
    return st;
  if (h->kind != kind || !tile_rows || !tile_cols || flags)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what,
                       kind == TDM_HANDLE_MATRIX
                           ? "needs a matrix, nonzero tile sizes and flags 0"
                           : "needs a vector, a nonzero piece size and flags 0");
  if (!rows_at)
    ni = (h->buf.nx + tile_rows - 1) / tile_rows;
  else if (rows_at[0] != 0 || rows_at[ni] != h->buf.nx)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what, "row boundaries do not span the rows");
  size_t nj = (h->buf.ny + tile_cols - 1) / tile_cols;
  if (h->redux && (st = tdm__redux_flush(h))) /* its tiles get what the lanes hold */
    return st;
  tdm_handle **tiles = tdm__calloc(rt, ni * nj, sizeof *tiles);
  if (!tiles)
    return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what, "out of memory");

  tdm__spin_lock(&h->lock);
  if (atomic_load(&h->magic) != TDM_HANDLE_MAGIC)
    st = tdm__refuse(rt, TDM_ERR_STALE_HANDLE, what, "handle was unregistered");
  else if (h->unusual & TDM__H_LANES)
    st = tdm__refuse(rt, TDM_ERR_BUSY, what, "a task named it TDM_REDUX meanwhile");
  else if (h->tiles)
    st = tdm__refuse(rt, TDM_ERR_PARTITIONED, what, "already partitioned");
  else if (h->acquired)
    st = tdm__refuse(rt, TDM_ERR_BUSY, what, "handle is acquired by the host");
  for (size_t i = 0; i < ni && !st; i++)
    for (size_t j = 0; j < nj && !st; j++) {
      size_t r0 = rows_at ? rows_at[i] : i * tile_rows, c0 = j * tile_cols;
      size_t nr = rows_at ? rows_at[i + 1] - r0 : tile_rows;
      tdm_buffer b = h->buf;
      b.ptr = (char *)h->buf.ptr + (r0 * h->buf.ld + c0) * h->buf.elem_size;
      b.nx = h->buf.nx - r0 < nr ? h->buf.nx - r0 : nr;
      b.ny = h->buf.ny - c0 < tile_cols ? h->buf.ny - c0 : tile_cols;
      tdm_handle *tile = tdm__handle_new(rt, kind, &b, h, NULL);
      if (!tile) {
        st = tdm__refuse(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
        break;
      }
      tdm__handle_ref(h); /* the tile's */
      tiles[i * nj + j] = tile;
      tdm__handle_settle(h); /* (its lock held) */
      if (copy_refs(rt, &tile->writers, &h->writers) || copy_refs(rt, &tile->readers, &h->readers))
        st = tdm__refuse(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
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
  return partition_at(h, tile_rows, tile_cols, NULL, 0, flags, TDM_HANDLE_MATRIX,
                      "tdm_matrix_partition");
}

tdm_status tdm_vector_partition(tdm_handle *h, size_t piece, unsigned flags) {
  return partition_at(h, piece, 1, NULL, 0, flags, TDM_HANDLE_VECTOR, "tdm_vector_partition");
}

tdm_status tdm__partition_rows(tdm_handle *h, const size_t *rows_at, size_t n, const char *what) {
  return partition_at(h, 1, h->kind == TDM_HANDLE_MATRIX ? h->buf.ny : 1, rows_at, n, 0, h->kind,
                      what);
}

/* The grid of a partitioned handle (a vector's: n x 1). */
static int cmp_address(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)*(tdm_handle *const *)a, y = (uintptr_t)*(tdm_handle *const *)b;
  return (x > y) - (x < y);
}

/* Joins a matrix's tiles or a vector's pieces (kind) back. */
static tdm_status unpartition(tdm_handle *h, unsigned flags, uint8_t kind, const char *what) {
  tdm_runtime *rt;
  tdm_status st = tdm__handle_enter(h, what, &rt);
  if (st)
    return st;
  if (flags)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what, "flags must be 0");
  if (h->kind != kind)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what,
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
    return tdm__refuse(rt, TDM_ERR_NOT_PARTITIONED, what, "not partitioned");

  /* Where devices may hold the tiles' contents, the matrix gathers them
   * on its first use (data/coherence.c): the tiles stay alive. */
  bool keep = rt->ndevice_workers != 0;
  tdm_gather *g = keep ? tdm__malloc(rt, sizeof *g) : NULL;
  tdm_handle **locks = keep && !g ? NULL : tdm__malloc(rt, (n + 1) * sizeof *locks);
  if (!locks) {
    free(g);
    return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
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
    st = tdm__refuse(rt, TDM_ERR_NOT_PARTITIONED, what, "unpartitioned concurrently");
  for (size_t k = 0; k < n && !st; k++) {
    tdm_handle *t = tiles[k];
    tdm__handle_settle(t);
    if (t->acquired || t->tiles || t->unsubmitted)
      st = tdm__refuse(rt, TDM_ERR_BUSY, what,
                       "a tile is acquired, partitioned or named by an unsubmitted task");
    else if (copy_refs(rt, &writers, &t->writers) || copy_refs(rt, &readers, &t->readers))
      st = tdm__refuse(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
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
    tdm__handle_quarantine(tiles[k]);
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

tdm_status tdm__unpartition_rows(tdm_handle *h, const char *what) {
  return unpartition(h, 0, h->kind, what);
}

/* ---- host access --------------------------------------------------------- */

/* tdm__handle_enter for a call that may block: the blocking check (a
 * task's or a callback's thread may not) comes before the handle's. */
static tdm_status enter_blocking(const tdm_handle *h, const char *what, tdm_runtime **rt) {
  *rt = tdm__handle_runtime(h);
  if (!*rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(*rt, what);
  tdm_status st = tdm__check_blocking(*rt, what);
  return st ? st : tdm__handle_check(*rt, h, what);
}

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
  tdm_runtime *rt;
  tdm_status st = enter_blocking(h, what, &rt);
  if (st)
    return st;
  if (mode != TDM_R && mode != TDM_W && mode != TDM_RW)
    return tdm__refuse(rt, TDM_ERR_INVALID_MODE, what, "invalid access mode");
  tdm_task *t = tdm__task_alloc(rt);
  if (!t)
    return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what, "out of memory");
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
    st = tdm__refuse(rt, TDM_ERR_BUSY, what, "handle is already acquired");
  else if (h->tiles)
    st = tdm__refuse(rt, TDM_ERR_PARTITIONED, what, "handle is partitioned");
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
    return tdm__refuse(rt, TDM_ERR_LOST, what,
                       "a task writing the handle failed or was cancelled: not acquired");
  }
  /* the host holds it from here: its contents come home */
  if (!tdm__handle_home(h, (mode & TDM_W) != 0)) {
    end_acquisition(h);
    return tdm__refuse(rt, TDM_ERR_LOST, what,
                       "its contents could not be copied home from a device: not acquired");
  }
  tdm__acquired_here++; /* this thread's submissions go past the bound */
  return TDM_OK;
}

tdm_status tdm_handle_release(tdm_handle *h) {
  tdm_runtime *rt;
  tdm_status st = tdm__handle_enter(h, "tdm_handle_release", &rt);
  if (st)
    return st;
  if (!end_acquisition(h))
    return tdm__refuse(rt, TDM_ERR_NOT_ACQUIRED, "tdm_handle_release", "handle is not acquired");
  tdm__acquired_here--;
  return TDM_OK;
}

tdm_status tdm_handle_unregister(tdm_handle *h) {
  static const char what[] = "tdm_handle_unregister";
  tdm_runtime *rt;
  tdm_status st = enter_blocking(h, what, &rt);
  if (st)
    return st;
  if (h->redux && (st = tdm__redux_flush(h))) /* what its reduction holds comes first */
    return st;
  tdm__spin_lock(&h->lock);
  if (atomic_load(&h->magic) != TDM_HANDLE_MAGIC)
    st = tdm__refuse(rt, TDM_ERR_STALE_HANDLE, what, "handle was unregistered");
  else if (h->unusual & TDM__H_LANES)
    st = tdm__refuse(rt, TDM_ERR_BUSY, what, "a task named it TDM_REDUX meanwhile");
  else if (h->acquired)
    st = tdm__refuse(rt, TDM_ERR_BUSY, what, "handle is acquired by the host");
  else if (h->tiles)
    st = tdm__refuse(rt, TDM_ERR_BUSY, what, "handle is partitioned");
  else if (h->parent)
    st = tdm__refuse(rt, TDM_ERR_BUSY, what, "handle is a tile: unpartition its matrix");
  else if (h->unsubmitted)
    st = tdm__refuse(rt, TDM_ERR_BUSY, what, "a created, unsubmitted task names the handle");
  tdm_taskvec writers, readers;
  tdm__taskvec_init(&writers);
  tdm__taskvec_init(&readers);
  if (!st) {
    /* dead from now on: later submissions fail */
    atomic_store(&h->magic, TDM_HANDLE_DEAD);
    tdm__handle_settle(h);
    tdm__taskvec_move(&writers, &h->writers);
    tdm__taskvec_move(&readers, &h->readers);
  }
  tdm__spin_unlock(&h->lock);
  if (st)
    return st;
  /* Readers were submitted after the writers and waited for them: but
   * writers alone may be pending when there are no readers. Wait for all. */
  bool lost = false; /* the newest version was never produced */
  bool asked = true;  /* only because the application cancelled its writers */
  for (unsigned i = 0; i < writers.n; i++) {
    tdm__task_wait_state(writers.items[i], TDM_TS_DONE);
    int32_t outcome = atomic_load_explicit(&writers.items[i]->outcome, memory_order_relaxed);
    lost |= outcome != TDM_OK;
    asked &= outcome == TDM_OK || tdm__cancelled_by_group(writers.items[i], outcome);
  }
  for (unsigned i = 0; i < readers.n; i++)
    tdm__task_wait_state(readers.items[i], TDM_TS_DONE);
  tdm__taskvec_release(&writers);
  tdm__taskvec_release(&readers);
  /* the latest contents go home, and the device buffers go */
  bool home = tdm__handle_home(h, false);
  tdm__handle_forget(h, true);
  tdm__redux_free(h, false);
  tdm__handle_quarantine(h);
  if (!home)
    return tdm__refuse(rt, TDM_ERR_LOST, what,
                       "its newest version could not be copied home from a device: its memory "
                       "does not hold it");
  if (lost && asked) { /* what the application asked for: not an error */
    tdm__log(rt, TDM_LOG_DEBUG, "%s: a task writing the handle was cancelled (tdm_group_cancel): "
             "its memory holds the last version produced", what);
    return TDM_ERR_LOST;
  }
  return lost ? tdm__refuse(rt, TDM_ERR_LOST, what,
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
