/*
 * Lineage: what a device task wrote can be made again on the host.
 *
 * Tandem changes buffers in place, and a version a device computed
 * lives in that device's memory alone until something brings it home.
 * Rather than copying every such version home as soon as it is made
 * (tdm_config.writeback), each handle keeps the chain of device writes
 * since the version its host memory holds: for each, a record of the
 * task (its CPU variant, arguments, handles, and the version of each
 * handle it read). When the only copy of the current version cannot be
 * read (its device was lost, is hung or out of placement, a copy from it
 * cannot start, or a failed run wrote over it), the chain is replayed on
 * the host: from the host's copy of the version it started from, each
 * task's CPU variant runs again on copies of its inputs, each at the
 * version it read, and the result becomes the host's copy.
 *
 * An input is found at the version a record names in its handle's host
 * memory, or as that handle's current version, brought home (made again
 * by its own lineage if need be). Where neither holds (the version was
 * overwritten since, the handle unregistered, a task without a CPU
 * variant, a chain longer than kept), the lineage is gone and the
 * version is reported lost, as without it. A chain is bounded
 * (tdm_config.lineage): a device write that would make it longer first
 * brings the version it replaces home, and the chain starts again.
 *
 * The idea is that of resilient distributed datasets (Zaharia et al.,
 * "Resilient Distributed Datasets", NSDI 2012): recompute lost data from
 * the operations that made it instead of replicating it.
 */
#include "data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Replays nested in one another (an input made again for a replay). */
#define MAX_DEPTH 8

struct tdm_lrec {
  _Atomic int refs; /* one per chain holding it, and its maker's */
  tdm_lrec *next_free;
  char name[48];
  tdm_cpu_fn cpu_fn;
  unsigned nbuf;
  size_t args_size;
  void *args;
  tdm_handle **hs;  /* each referenced */
  uint32_t *vers;   /* the version of each it read (or replaced) */
  uint8_t *modes;   /* with PINNED: this slot's handle pins its version */
};

#define PINNED 0x80

tdm_pin *tdm__lineage_pin(const tdm_handle *h, uint32_t v) {
  for (unsigned i = 0; i < h->coh.npins; i++)
    if (h->coh.pins[i].ver == v)
      return &h->coh.pins[i];
  return NULL;
}

/* The family's lock held: a record reads version v of h. */
static bool pin(tdm_runtime *rt, tdm_handle *h, uint32_t v) {
  tdm_coh *c = &h->coh;
  tdm_pin *p = tdm__lineage_pin(h, v);
  if (!p) {
    if (c->npins == c->pins_cap) {
      unsigned cap = c->pins_cap ? 2u * c->pins_cap : 4u;
      tdm_pin *more = cap <= UINT16_MAX ? tdm__realloc(rt, c->pins, cap * sizeof *more) : NULL;
      if (!more)
        return false;
      c->pins = more;
      c->pins_cap = (uint16_t)cap;
    }
    p = &c->pins[c->npins++];
    *p = (tdm_pin){.ver = v};
  }
  p->count++;
  return true;
}

/* No lock held: a record no longer reads version v of h. */
static void unpin(tdm_handle *h, uint32_t v) {
  tdm__coh_lock(&h->coh);
  tdm_coh *c = &h->coh;
  tdm_pin *p = tdm__lineage_pin(h, v);
  void *copy = NULL;
  if (p && !--p->count) {
    copy = p->copy;
    *p = c->pins[--c->npins];
  }
  tdm__coh_unlock(&h->coh);
  free(copy);
}

/* Whether slot i of r reads (writes) its handle: any slot naming it. */
static bool slot_reads(const tdm_lrec *r, unsigned i) {
  return tdm__slots_have(r->hs, r->modes, r->nbuf, i, TDM_R);
}
static bool writes(const tdm_lrec *r, unsigned i) {
  return tdm__slots_have(r->hs, r->modes, r->nbuf, i, TDM_W);
}

static size_t round_up(size_t n) {
  size_t a = _Alignof(max_align_t);
  return (n + a - 1) / a * a;
}

tdm_lrec *tdm__lineage_record(tdm_runtime *rt, const tdm_task *t) {
  const tdm_codelet *cl = t->codelet;
  if (!rt->nodes.lineage_max || t->kind != TDM_TASK_CODELET || !cl->cpu_fn)
    return NULL;
  size_t n = t->nbuf;
  size_t at_hs = round_up(sizeof(tdm_lrec)), at_args = round_up(at_hs + n * sizeof(tdm_handle *));
  size_t at_vers = round_up(at_args + t->args_size), at_modes = at_vers + n * sizeof(uint32_t);
  unsigned char *block = tdm__malloc(rt, at_modes + n);
  if (!block) {
    tdm__log(rt, TDM_LOG_WARNING, "out of memory for a lineage record: versions it makes "
                                  "cannot be made again");
    return NULL;
  }
  tdm_lrec *r = (tdm_lrec *)block;
  atomic_init(&r->refs, 1);
  r->next_free = NULL;
  snprintf(r->name, sizeof r->name, "%s", tdm__name_or(cl->name));
  r->cpu_fn = cl->cpu_fn;
  r->nbuf = (unsigned)n;
  r->args_size = t->args_size;
  r->hs = (tdm_handle **)(block + at_hs);
  r->args = block + at_args;
  r->vers = (uint32_t *)(block + at_vers);
  r->modes = block + at_modes;
  if (t->args_size)
    memcpy(r->args, t->args, t->args_size);
  tdm_handle *const *hs = tdm__task_handles(t);
  const uint8_t *modes = tdm__task_modes(t);
  unsigned outputs = 0; /* distinct handles it writes */
  for (size_t i = 0; i < n; i++) {
    r->hs[i] = hs[i];
    r->modes[i] = modes[i];
  }
  for (size_t i = 0; i < n; i++) {
    bool first = true;
    for (size_t j = 0; j < i; j++)
      first &= hs[j] != hs[i];
    outputs += first && writes(r, (unsigned)i);
  }
  for (size_t i = 0; i < n; i++) {
    tdm_handle *h = hs[i];
    tdm__handle_ref(h);
    bool first = true;
    for (size_t j = 0; j < i; j++)
      first &= hs[j] != h;
    /* Its inputs' versions are kept (pinned) while it may be replayed:
     * those it does not write, and, when it writes several handles, the
     * versions it replaced (a replay for one of them needs the others'). */
    bool keep = first && slot_reads(r, (unsigned)i) && (!writes(r, (unsigned)i) || outputs > 1);
    /* what t read: no writer of h comes before t ends */
    tdm__coh_lock(&h->coh);
    r->vers[i] = h->coh.ver;
    if (keep && pin(rt, h, r->vers[i])) {
      r->modes[i] |= PINNED;
      tdm__coh_keep_gathered(&rt->nodes, h, r->vers[i]);
    }
    tdm__coh_unlock(&h->coh);
  }
  return r;
}

static void rec_free(tdm_lrec *r, bool release) {
  for (unsigned i = 0; i < r->nbuf && release; i++) {
    if (r->modes[i] & PINNED)
      unpin(r->hs[i], r->vers[i]);
    tdm__handle_unref(r->hs[i]);
  }
  free(r);
}

/* Drops a reference; the last one queues r to be freed (release) or
 * frees it now without releasing its handles. */
static void rec_unref(const tdm_nodes *nodes, tdm_lrec *r, bool release) {
  if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
    return;
  if (!release) {
    rec_free(r, false);
    return;
  }
  tdm_nodes *mn = (tdm_nodes *)nodes; /* the free list is a mutable part */
  r->next_free = atomic_load_explicit(&mn->lfree, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(&mn->lfree, &r->next_free, r,
                                                memory_order_release, memory_order_relaxed))
    ;
}

void tdm__lineage_unref(const tdm_nodes *nodes, tdm_lrec *r) {
  rec_unref(nodes, r, true);
}

void tdm__lineage_reap(tdm_nodes *nodes) {
  /* relaxed first: nothing to do is the common case */
  while (atomic_load_explicit(&nodes->lfree, memory_order_relaxed)) {
    tdm_lrec *r = atomic_exchange_explicit(&nodes->lfree, NULL, memory_order_acquire);
    while (r) { /* releasing a handle may free a tile, and its chain */
      tdm_lrec *next = r->next_free;
      rec_free(r, true);
      r = next;
    }
  }
}

void tdm__lineage_drop(const tdm_nodes *nodes, tdm_handle *h, bool release) {
  tdm_coh *c = &h->coh;
  for (unsigned i = 0; i < c->nchain; i++)
    rec_unref(nodes, c->chain[i], release);
  c->nchain = 0;
}

void tdm__lineage_pop(const tdm_nodes *nodes, tdm_handle *h) {
  tdm_coh *c = &h->coh;
  if (c->nchain && c->chain_base + c->nchain == c->ver)
    rec_unref(nodes, c->chain[--c->nchain], true);
}

void tdm__lineage_append(const tdm_nodes *nodes, tdm_handle *h, tdm_lrec *rec, bool reads) {
  tdm_coh *c = &h->coh;
  uint32_t before = c->ver - 1; /* the version rec's write replaced */
  bool from_host = c->host_ver == before && !tdm__coh_fill_failed(nodes, h, 0);
  bool fresh = !reads || from_host; /* a new chain starts */
  bool follows = c->nchain && c->chain_base + c->nchain == before &&
                 c->nchain < nodes->lineage_max;
  if (!rec || (!fresh && !follows)) {
    tdm__lineage_drop(nodes, h, true); /* gone: nothing replays it */
    return;
  }
  if (fresh) {
    tdm__lineage_drop(nodes, h, true);
    c->chain_base = before;
    c->chain_fresh = !reads;
  }
  if (!c->chain) {
    c->chain = tdm__malloc(nodes->rt, nodes->lineage_max * sizeof *c->chain);
    if (!c->chain) {
      tdm__log(nodes->rt, TDM_LOG_WARNING, "out of memory for a handle's lineage");
      return;
    }
  }
  atomic_fetch_add_explicit(&rec->refs, 1, memory_order_relaxed);
  c->chain[c->nchain++] = rec;
}

bool tdm__lineage_replays(const tdm_nodes *nodes, const tdm_handle *h) {
  const tdm_coh *c = &h->coh;
  return c->nchain && c->chain_base + c->nchain == c->ver &&
         (c->chain_fresh || (c->host_ver == c->chain_base && !tdm__coh_fill_failed(nodes, h, 0)));
}

/* ---- replay ------------------------------------------------------------------ */


/* h's elements, packed, at version v into out: from the host's memory,
 * or a copy of it made when that memory changed, or h's current version
 * brought home (made again if need be). Once home, h may be written
 * again before it is read: then the copy aside has it. A replay runs
 * outside the order of the task graph: it brings nothing home that would
 * change what h's next user sees. */
static bool fetch(tdm_runtime *rt, tdm_handle *h, uint32_t v, void *out, unsigned depth) {
  const tdm_nodes *nodes = &rt->nodes;
  for (unsigned tries = 0;; tries++) {
    if (tdm__coh_host_read(nodes, h, v, out))
      return true;
    tdm__coh_lock(&h->coh);
    tdm_pin *p = tdm__lineage_pin(h, v);
    /* Brought home, the current version only where that changes nothing
     * else: as it is (a matrix's tiles still to gather stay so: the gather
     * belongs to its next user, after the tiles' writers), not a tile not
     * yet taken from its matrix (which could gather the matrix's older
     * tiles), nor while a device or the host writes it (a copy there may
     * be half-written; one home would land over the host's write). */
    bool kept = p && p->copy,
         current = h->coh.ver == v && !tdm__nodeset_empty(&h->coh.valid) &&
                   !h->coh.writing && !h->coh.host_writing;
    if (kept) /* copied aside when the host's memory changed */
      memcpy(out, p->copy, tdm__coh_bytes(h));
    tdm__coh_unlock(&h->coh);
    if (kept)
      return true;
    /* where its tiles hold its host memory, read from a device aside */
    if (current && tdm__coh_device_read(nodes, h, v, out))
      return true;
    if (!current || tries == 2 || !tdm__handle_home_as_is(h, depth + 1))
      return false;
  }
}

/* Runs r's CPU variant again, h's elements (at r's version of them) in
 * `mine`, which it updates; its other handles on copies at the versions
 * r read (a written one's result dropped). */
static bool rerun(tdm_runtime *rt, const tdm_lrec *r, tdm_handle *h, unsigned char *mine,
                  unsigned depth) {
  bool ok = true;
  tdm_buffer *views = tdm__calloc(rt, r->nbuf, sizeof *views);
  unsigned char **own = tdm__calloc(rt, r->nbuf, sizeof *own);
  for (unsigned i = 0; i < r->nbuf && views && own && ok; i++) {
    tdm_handle *x = r->hs[i];
    views[i] = x->buf;
    views[i].ld = x->buf.ny;
    unsigned j = 0;
    while (r->hs[j] != x)
      j++;
    if (x == h) {
      views[i].ptr = mine;
    } else if (j < i) { /* named twice: one copy */
      views[i].ptr = views[j].ptr;
    } else {
      size_t bytes = tdm__coh_bytes(x);
      own[i] = tdm__calloc(rt, 1, bytes ? bytes : 1);
      ok = own[i] && (!slot_reads(r, i) || fetch(rt, x, r->vers[i], own[i], depth));
      if (own[i] && !ok)
        tdm__log(rt, TDM_LOG_ERROR,
                 "lineage: codelet %s: the version of its buffer %u it read (%u) is no longer "
                 "held",
                 r->name, i, (unsigned)r->vers[i]);
      views[i].ptr = own[i];
    }
  }
  ok = ok && views && own;
  if (ok)
    TDM_USER_CODE(r->cpu_fn(views, r->args, r->args_size));
  for (unsigned i = 0; own && i < r->nbuf; i++)
    free(own[i]);
  free(own);
  free(views);
  return ok;
}

bool tdm__lineage_replay(tdm_runtime *rt, tdm_handle *h, unsigned depth) {
  tdm_nodes *nodes = &rt->nodes;
  tdm_lrec *chain[256];
  tdm__coh_lock(&h->coh);
  bool can = depth < MAX_DEPTH && tdm__lineage_replays(nodes, h);
  unsigned n = can ? h->coh.nchain : 0;
  uint32_t base = h->coh.chain_base, target = h->coh.ver;
  bool fresh = h->coh.chain_fresh;
  for (unsigned i = 0; i < n; i++) {
    chain[i] = h->coh.chain[i];
    atomic_fetch_add_explicit(&chain[i]->refs, 1, memory_order_relaxed);
  }
  tdm__coh_unlock(&h->coh);
  if (!can) {
    tdm__log(rt, TDM_LOG_ERROR,
             "lineage: a version only a failed device held cannot be made again (%s)",
             depth >= MAX_DEPTH ? "too many replays nested" : "no chain of writes reaches it");
    return false;
  }
  size_t bytes = tdm__coh_bytes(h);
  unsigned char *mine = tdm__calloc(rt, 1, bytes ? bytes : 1);
  bool ok = mine && (fresh || tdm__coh_host_read(nodes, h, base, mine));
  for (unsigned i = 0; i < n && ok; i++)
    ok = rerun(rt, chain[i], h, mine, depth);
  ok = ok && tdm__coh_host_install(nodes, h, target, mine);
  free(mine);
  for (unsigned i = 0; i < n; i++)
    rec_unref(nodes, chain[i], true);
  tdm__lineage_reap(nodes);
  if (ok) {
    atomic_fetch_add_explicit(&rt->nreplayed, n, memory_order_relaxed);
    tdm__log(rt, TDM_LOG_WARNING,
             "lineage: a version only a failed device held was made again on the host "
             "(%u task%s replayed)",
             n, n == 1 ? "" : "s");
  } else {
    tdm__log(rt, TDM_LOG_ERROR, "lineage: a version only a failed device held could not be "
                                "made again: it is lost");
  }
  return ok;
}
