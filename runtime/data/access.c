/*
 * A task's buffers where it runs: the coherence steps of a task on a
 * device or on the CPU workers, and of the host's own accesses (acquire,
 * unregister, destroy). The backends call these; none of them touches a
 * handle's coherence state itself.
 */
#include "data.h"

#include <limits.h>
#include <sched.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>

/* One try of tdm__task_pin: false, nothing pinned, when a buffer does not
 * fit (*busy: other threads held buffers in the way). */
static bool pin_once(tdm_runtime *rt, tdm_task *t, unsigned slot, void **mems, bool *busy) {
  const tdm_nodes *nodes = &rt->nodes;
  tdm_handle *const *hs = tdm__task_handles(t);
  for (unsigned i = 0; i < t->nbuf; i++) {
    tdm_handle *h = hs[i];
    tdm__coh_lock(&h->coh);
    /* pinned under the family's lock: no one evicts it in between */
    mems[i] = tdm__mem_get(nodes, h, slot, busy);
    if (mems[i])
      tdm__mem_pin(nodes, h, slot, 1);
    tdm__coh_unlock(&h->coh);
    if (!mems[i]) {
      tdm__task_unpin(rt, t, slot, i);
      return false;
    }
  }
  return true;
}

bool tdm__task_pin(tdm_runtime *rt, tdm_task *t, unsigned slot, void **mems) {
  bool busy;
  while (!pin_once(rt, t, slot, mems, &busy)) {
    if (!busy)
      return false;
    sched_yield(); /* others hold buffers in the way for a moment; we hold no lock */
  }
  return true;
}

bool tdm__task_fits(const tdm_runtime *rt, const tdm_task *t, unsigned slot) {
  const tdm_memnode *m = &rt->nodes.mem[slot];
  uint64_t total = 0;
  tdm_handle *const *hs = tdm__task_handles(t);
  for (unsigned i = 0; i < t->nbuf && m->counted; i++)
    total += tdm__coh_bytes(hs[i]);
  return total <= m->limit || !m->counted;
}

void tdm__task_unpin(tdm_runtime *rt, tdm_task *t, unsigned slot, unsigned n) {
  tdm_handle *const *hs = tdm__task_handles(t);
  for (unsigned i = 0; i < n; i++)
    tdm__mem_pin(&rt->nodes, hs[i], slot, -1);
}

/* An access to h on node (tdm__coh_access, its lock taken here). A
 * version only a failed device held is made again by its lineage, then
 * the access tried once more, unless `replay` is false; depth: replays
 * under way on this thread. */
static bool access_replaying(tdm_runtime *rt, tdm_handle *h, unsigned node, unsigned mode,
                             uint32_t gen, tdm_tokens *w, bool *unkept, bool replay,
                             unsigned depth) {
  for (unsigned tries = 0;; tries++) {
    tdm__coh_lock(&h->coh);
    bool ok = tdm__coh_access(&rt->nodes, h, node, mode, gen, w, unkept);
    tdm__coh_unlock(&h->coh);
    tdm_handle *lost = tdm__coh_take_replay();
    bool again = !ok && lost && replay && tries < 2 && tdm__lineage_replay(rt, lost, depth);
    if (lost)
      tdm__handle_unref(lost);
    if (!again)
      return ok;
  }
}

/* One access of t: h in `mode`, after `gen` gathers. */
static bool access_one(tdm_runtime *rt, tdm_task *t, tdm_handle *h, unsigned node,
                       unsigned mode, uint32_t gen, tdm_tokens *w, bool replay) {
  bool unkept = false;
  bool ok = access_replaying(rt, h, node, mode, gen, w, &unkept, replay, 0);
  if (unkept) /* a failed run of t could not be undone */
    t->unkept = true;
  return ok;
}

/* Whether t, on a device with memory of its own, writes more than one
 * handle while lineage is on: a replay of it for one of them needs the
 * versions it replaced of the others. */
static bool several_outputs(const tdm_runtime *rt, const tdm_task *t, unsigned node) {
  if (!node || !rt->nodes.lineage_max)
    return false;
  tdm_handle *const *hs = tdm__task_handles(t);
  const uint8_t *modes = tdm__task_modes(t);
  tdm_handle *one = NULL;
  for (unsigned i = 0; i < t->nbuf; i++)
    if (modes[i] & TDM_W) {
      if (one && hs[i] != one)
        return true;
      one = hs[i];
    }
  return false;
}

/* tdm__task_access, each access's mode with `more` (TDM_HOST_LATER). */
static bool task_access(tdm_runtime *rt, tdm_task *t, unsigned node, tdm_tokens *w,
                        bool replay, unsigned more) {
  bool ok = true;
  const tdm_task_more *m = t->more;
  uint64_t copied = t->chunk ? tdm__coh_copied() : 0;
  /* such versions come home first where only devices hold them */
  unsigned keep = several_outputs(rt, t, node) ? TDM_KEEP_REPLACED : 0;
  if (t->kind == TDM_TASK_CODELET && t->codelet->cpu_fn)
    keep |= TDM_REPLAYABLE;
  keep |= more;
  for (unsigned i = 0; m && i < m->nlocked && ok; i++) /* distinct already */
    ok = access_one(rt, t, m->locked[i], node, m->lock_modes[i] | keep, m->gens[i], w, replay);
  for (unsigned i = 0; !m && i < t->nbuf && ok; i++) {
    tdm_handle *h = t->handles[i];
    /* a handle named twice is one access, in both modes */
    unsigned mode = t->modes[i];
    bool first = true;
    for (unsigned j = 0; j < t->nbuf; j++)
      if (t->handles[j] == h) {
        first &= j >= i;
        mode |= t->modes[j];
      }
    if (first)
      ok = access_one(rt, t, h, node, mode | keep, t->gens[i], w, replay);
  }
  tdm__coh_reap(&rt->nodes);
  if (t->chunk) { /* what its operation moved */
    tdm_chunk_tail c = tdm__chunk_tail(t);
    if (c.moved)
      atomic_fetch_add_explicit(c.moved, tdm__coh_copied() - copied, memory_order_relaxed);
  }
  return ok;
}

bool tdm__task_access(tdm_runtime *rt, tdm_task *t, unsigned slot, unsigned node,
                      tdm_tokens *w, bool replay) {
  bool ok = task_access(rt, t, node, w, replay, 0);
  tdm__tokens_for(&rt->nodes, slot, w); /* its backend's own tokens */
  return ok;
}

void tdm__task_prefetch(tdm_runtime *rt, tdm_task *t, unsigned node) {
  tdm_tokens w;
  tdm__tokens_init(&w);
  task_access(rt, t, node, &w, false, TDM_HOST_LATER);
  tdm__tokens_release(&rt->nodes, &w);
}

/* Slot i of t writes its handle, and is the first slot that does (a
 * handle named twice is one write). */
static bool first_write(tdm_handle *const *hs, const uint8_t *modes, unsigned i) {
  if (!(modes[i] & TDM_W))
    return false;
  for (unsigned j = 0; j < i; j++)
    if (hs[j] == hs[i] && (modes[j] & TDM_W))
      return false;
  return true;
}

void tdm__task_written(tdm_runtime *rt, tdm_task *t, unsigned slot, unsigned node,
                       tdm_token done) {
  const tdm_nodes *nodes = &rt->nodes;
  done = tdm__token_from(nodes, slot, done); /* the backend's token as the nodes' */
  tdm_handle *const *hs = tdm__task_handles(t);
  const uint8_t *modes = tdm__task_modes(t);
  tdm_lrec *rec = node && nodes->lineage_max ? tdm__lineage_record(rt, t) : NULL;
  for (unsigned i = 0; i < t->nbuf; i++) {
    if (!first_write(hs, modes, i))
      continue;
    tdm_handle *h = hs[i];
    tdm_token mine = tdm__token_hold(nodes, done);
    tdm__coh_lock(&h->coh);
    tdm__coh_written(nodes, h, node, mine, rec, tdm__slots_have(hs, modes, t->nbuf, i, TDM_R));
    tdm__coh_unlock(&h->coh);
  }
  if (rec) /* the chains hold it */
    tdm__lineage_unref(nodes, rec);
  t->issued = node != 0;
}

/* The end of t's run on device node `node` for each handle it writes,
 * under its family's lock: undone (failed; false when a version it
 * replaced is lost) or, succeeded, copied home (false when a copy could
 * not start). */
static bool end_writes(tdm_runtime *rt, tdm_task *t, unsigned node, bool failed) {
  tdm_handle *const *hs = tdm__task_handles(t);
  const uint8_t *modes = tdm__task_modes(t);
  bool ok = true;
  for (unsigned i = 0; i < t->nbuf; i++) {
    if (!first_write(hs, modes, i))
      continue;
    /* a version it replaced without reading is not its input */
    bool reads = tdm__slots_have(hs, modes, t->nbuf, i, TDM_R);
    tdm__coh_lock(&hs[i]->coh);
    if (failed)
      ok &= tdm__coh_write_failed(&rt->nodes, hs[i], node, t->issued) || !reads;
    else
      ok &= tdm__coh_write_back(&rt->nodes, hs[i]);
    tdm__coh_unlock(&hs[i]->coh);
  }
  return ok;
}

void tdm__task_write_back(tdm_runtime *rt, tdm_task *t, unsigned node) {
  if (!node || !rt->nodes.keep_host)
    return;
  if (!end_writes(rt, t, node, false))
    tdm__log(rt, TDM_LOG_WARNING,
             "codelet %s: a version it wrote could not start home: it stays on device "
             "node %u alone (its lineage makes it again if need be)",
             tdm__codelet_name(t), node);
  tdm_handle *lost = tdm__coh_take_replay(); /* made again when next used */
  if (lost)
    tdm__handle_unref(lost);
  tdm__coh_reap(&rt->nodes);
}

static size_t copy_written(const tdm_task *t, unsigned char *room, bool to_room);

void tdm__task_write_failed(tdm_runtime *rt, tdm_task *t, unsigned node, void *before) {
  if (!node) { /* it wrote the host's memory: put back what was there */
    if (before)
      copy_written(t, before, false);
    free(before);
    tdm_handle *const *hs = tdm__task_handles(t);
    const uint8_t *modes = tdm__task_modes(t);
    for (unsigned i = 0; i < t->nbuf && rt->nodes.ops; i++) {
      if (!first_write(hs, modes, i))
        continue;
      tdm__coh_lock(&hs[i]->coh);
      tdm__coh_host_restored(&rt->nodes, hs[i]);
      tdm__coh_unlock(&hs[i]->coh);
    }
    return;
  }
  /* a version it replaced lived on devices only, and its lineage cannot
   * make it again */
  if (!end_writes(rt, t, node, true) && t->unkept)
    t->spoiled = true;
  t->issued = false;
  tdm__coh_reap(&rt->nodes);
}

void tdm__task_drop_failed(tdm_runtime *rt, tdm_task *t, bool in_host) {
  if (!rt->nodes.n)
    return;
  tdm_handle *const *hs = tdm__task_handles(t);
  const uint8_t *modes = tdm__task_modes(t);
  for (unsigned i = 0; i < t->nbuf; i++) {
    unsigned mode = 0; /* a handle named twice: in both modes */
    for (unsigned j = 0; j < t->nbuf; j++)
      if (hs[j] == hs[i])
        mode |= modes[j];
    tdm__coh_lock(&hs[i]->coh);
    tdm__coh_try_failed(&rt->nodes, hs[i], mode, in_host);
    tdm__coh_unlock(&hs[i]->coh);
  }
}

/* Copies the rows of each buffer t writes between the host and `room`,
 * packed (to_room: into it; room NULL: only counts the bytes). */
static size_t copy_written(const tdm_task *t, unsigned char *room, bool to_room) {
  tdm_handle *const *hs = tdm__task_handles(t);
  const uint8_t *modes = tdm__task_modes(t);
  size_t at = 0;
  for (unsigned i = 0; i < t->nbuf; i++) {
    if (!(modes[i] & TDM_W))
      continue;
    if (room)
      tdm__coh_host_rows(hs[i], room + at, !to_room);
    at += tdm__coh_bytes(hs[i]);
  }
  return at;
}

void *tdm__task_snapshot(tdm_runtime *rt, const tdm_task *t, bool *ok) {
  size_t bytes = copy_written(t, NULL, true);
  *ok = true;
  if (!bytes)
    return NULL;
  unsigned char *room = tdm__malloc(rt, bytes);
  if (!room) {
    tdm__log(rt, TDM_LOG_ERROR, "out of memory for a copy of %zu bytes a device task writes",
             bytes);
    *ok = false;
    return NULL;
  }
  copy_written(t, room, true);
  return room;
}

/* ---- the host's side -------------------------------------------------------- */

void tdm__host_not_home(tdm_task *t, int status) {
  tdm__log(t->rt, TDM_LOG_ERROR,
           "codelet %s: bringing its inputs home failed (status %d); it did not run",
           tdm__codelet_name(t), status);
  t->homeless = true;
  atomic_store_explicit(&t->outcome, TDM_ERR_SYSTEM, memory_order_relaxed);
}

/* Whether one of ts completed with an error. */
static bool any_failed(const tdm_nodes *nodes, const tdm_token *ts, unsigned n) {
  for (unsigned i = 0; i < n && nodes->ops->failed; i++)
    if (nodes->ops->failed(nodes->ctx, ts[i]))
      return true;
  return false;
}

bool tdm__host_ready(tdm_task *t, void (*fetched)(void *, int)) {
  tdm_runtime *rt = t->rt;
  const tdm_nodes *nodes = &rt->nodes;
  tdm_tokens w;
  tdm__tokens_init(&w);
  if (!task_access(rt, t, 0, &w, true, TDM_HOST_LATER))
    tdm__host_not_home(t, -1);
  unsigned n = 0; /* those still running */
  bool failed = false;
  for (unsigned i = 0; i < w.n; i++) {
    if (nodes->ops->test(nodes->ctx, w.v[i])) {
      failed |= any_failed(nodes, &w.v[i], 1);
      nodes->ops->release(nodes->ctx, w.v[i]);
    } else {
      w.v[n++] = w.v[i];
    }
  }
  w.n = n;
  bool ready = true;
  if (n && !(nodes->ops->when_done &&
             nodes->ops->when_done(nodes->ctx, w.v, n, fetched, t))) {
    nodes->ops->wait(nodes->ctx, w.v, n); /* cannot wait asynchronously */
    failed |= any_failed(nodes, w.v, n);
  } else if (n) {
    ready = false; /* queued again by `fetched` */
  }
  tdm__tokens_release(nodes, &w);
  if (failed && !atomic_load_explicit(&t->outcome, memory_order_relaxed))
    tdm__host_not_home(t, -1);
  if (ready && !atomic_load_explicit(&t->outcome, memory_order_relaxed)) {
    /* it runs now: what it writes in the host's memory holds no version
     * until then */
    tdm_handle *const *hs = tdm__task_handles(t);
    const uint8_t *modes = tdm__task_modes(t);
    for (unsigned i = 0; i < t->nbuf; i++) {
      if (!(modes[i] & TDM_W))
        continue;
      tdm__coh_lock(&hs[i]->coh);
      tdm_token landing = tdm__coh_host_writing(nodes, hs[i]);
      tdm__coh_unlock(&hs[i]->coh);
      if (landing) { /* rare: an eviction's copy home started meanwhile */
        nodes->ops->wait(nodes->ctx, &landing, 1);
        nodes->ops->release(nodes->ctx, landing);
      }
    }
  }
  return ready;
}

void tdm__host_written(tdm_task *t) {
  tdm__task_written(t->rt, t, 0, 0, 0);
}

/* One try of tdm__handle_home, after `gen` gathers. */
static bool home_once(tdm_handle *h, bool will_write, uint32_t gen, unsigned depth) {
  tdm_runtime *rt = h->rt;
  const tdm_nodes *nodes = &rt->nodes;
  tdm_tokens w;
  tdm__tokens_init(&w);
  tdm__coh_lock(&h->coh);
  tdm__coh_drop_failed(nodes, h, 0); /* an earlier copy home that failed */
  tdm__coh_unlock(&h->coh);
  bool ok = access_replaying(rt, h, 0, TDM_R, gen, &w, NULL, true, depth);
  tdm__coh_reap(&rt->nodes);
  nodes->ops->wait(nodes->ctx, w.v, w.n);
  ok = ok && !any_failed(nodes, w.v, w.n);
  tdm__tokens_release(nodes, &w);
  tdm__coh_lock(&h->coh);
  if (ok && will_write)
    tdm__coh_written(nodes, h, 0, 0, NULL, true);
  else if (!ok) /* a copy home that failed is forgotten: tried again */
    tdm__coh_drop_failed(nodes, h, 0);
  tdm__coh_unlock(&h->coh);
  return ok;
}

static bool home_at(tdm_handle *h, bool will_write, uint32_t gen, unsigned depth) {
  tdm_runtime *rt = h->rt;
  if (!rt->nodes.n)
    return true;
  for (unsigned tries = 0; tries <= rt->cfg.retries; tries++) {
    if (home_once(h, will_write, gen, depth))
      return true;
    tdm__log(rt, TDM_LOG_WARNING, "a handle's contents could not be brought home (try %u of %u)",
             tries + 1, rt->cfg.retries + 1);
  }
  tdm__log(rt, TDM_LOG_ERROR, "a handle's contents could not be brought home");
  return false;
}

bool tdm__handle_home(tdm_handle *h, bool will_write) {
  return home_at(h, will_write, UINT32_MAX, 0);
}

bool tdm__handle_home_as_is(tdm_handle *h, unsigned depth) {
  return home_at(h, false, 0, depth); /* no gather: seq 1 and up */
}

void tdm__handle_forget(tdm_handle *h, bool lock) {
  if (h->rt->nodes.n)
    tdm__coh_forget(&h->rt->nodes, h, lock);
}

unsigned tdm__device_node(const tdm_runtime *rt, unsigned k) {
  return rt->nodes.mem[1 + k].counted ? 1 + k : 0;
}

double tdm__link_busy(const tdm_nodes *nodes, unsigned node) {
  if (!node || !nodes->ops->link_wait)
    return 0;
  return fmax(nodes->ops->link_wait(nodes->ctx, node, true),
              nodes->ops->link_wait(nodes->ctx, node, false));
}

double tdm__transfer_time(const tdm_nodes *nodes, unsigned node, const tdm_task *t) {
  double s = 0, home_wait = 0;
  unsigned asked = 0; /* the device whose link home was looked at last */
  tdm_handle *const *hs = tdm__task_handles(t);
  const uint8_t *modes = tdm__task_modes(t);
  for (unsigned i = 0; i < t->nbuf; i++) {
    if (!(modes[i] & TDM_R))
      continue;
    tdm_handle *h = hs[i];
    tdm__coh_lock(&h->coh);
    unsigned from = 0;
    s += tdm__coh_estimate(nodes, h, node, &from);
    tdm__coh_unlock(&h->coh);
    /* copies home queue behind those already on their device's link
     * home: the longest such wait (links work side by side), asked once
     * per device in a row (inputs mostly come from one) */
    if (from && from != asked && nodes->ops->link_wait) {
      home_wait = fmax(home_wait, nodes->ops->link_wait(nodes->ctx, from, false));
      asked = from;
    }
  }
  /* copies to a device queue behind those already on its link */
  if (s > 0 && node && nodes->ops->link_wait)
    s += nodes->ops->link_wait(nodes->ctx, node, true);
  return s + home_wait;
}
