/* Coherence of handles across memory nodes: see coherence.h. */
#include "data.h"

#include <stdlib.h>
#include <string.h>

size_t tdm__coh_bytes(const tdm_handle *h) {
  return h->buf.nx * h->buf.ny * h->buf.elem_size;
}

size_t tdm__coh_span(const tdm_handle *h) {
  const tdm_buffer *b = &h->buf;
  return b->nx ? ((b->nx - 1) * b->ld + b->ny) * b->elem_size : 0;
}

void tdm__coh_init(tdm_coh *c, bool on_host, tdm_coh *parent) {
  atomic_init(&c->root_lock.locked, 0);
  c->family = parent ? parent->family : &c->root_lock;
  memset(&c->valid, 0, sizeof c->valid);
  if (on_host)
    c->valid = tdm__nodeset_of(0);
  c->rep = NULL;
  c->gather = NULL;
  c->gathers = 0;
  c->born = parent ? parent->gathers : 0;
  c->lent = 0;
  c->parts = NULL;
  c->nparts = 0;
  c->written = false;
  c->ver = 0;
  c->host_ver = on_host ? 0 : TDM_NO_VERSION;
  c->chain_base = 0;
  c->chain_fresh = false;
  c->nchain = 0;
  c->damaged = c->writing = c->host_writing = false;
  c->chain = NULL;
  c->pins = NULL;
  c->npins = c->pins_cap = 0;
}

void tdm__coh_partitioned(tdm_handle *h, tdm_handle **tiles, size_t n) {
  tdm__coh_lock(&h->coh);
  h->coh.parts = tiles;
  h->coh.nparts = n;
  tdm__coh_unlock(&h->coh);
}

void tdm__coh_unpartitioned(tdm_handle *h, tdm_gather *g) {
  tdm__coh_lock(&h->coh);
  h->coh.parts = NULL;
  h->coh.nparts = 0;
  g->seq = ++h->coh.gathers;
  g->older = h->coh.gather; /* not done yet: done first */
  h->coh.gather = g;
  tdm__coh_unlock(&h->coh);
}

void tdm__coh_lock(tdm_coh *c) {
  tdm__spin_lock(c->family);
}

bool tdm__coh_trylock(tdm_coh *c) {
  return tdm__spin_trylock(c->family);
}

void tdm__coh_unlock(tdm_coh *c) {
  tdm__spin_unlock(c->family);
}

/* ---- tokens ------------------------------------------------------------------ */

tdm_token tdm__token_hold(const tdm_nodes *nodes, tdm_token t) {
  if (t && !nodes->ops->retain(nodes->ctx, t)) {
    nodes->ops->wait(nodes->ctx, &t, 1); /* no reference to keep: complete it is, then */
    return 0;
  }
  return t;
}

/* Adds t (a new reference) to w. If w cannot grow, waits for all it
 * holds and t instead: slower, never wrong. */
static void wait_add(const tdm_nodes *nodes, tdm_tokens *w, tdm_token t) {
  if (!t)
    return;
  if (w->n == w->cap) {
    unsigned cap = 2 * w->cap;
    tdm_token *v = tdm__malloc(nodes->rt, cap * sizeof *v);
    if (!v) {
      nodes->ops->wait(nodes->ctx, w->v, w->n);
      nodes->ops->wait(nodes->ctx, &t, 1);
      tdm__tokens_release(nodes, w);
      return;
    }
    memcpy(v, w->v, w->n * sizeof *v);
    if (w->v != w->inline_v)
      free(w->v);
    w->v = v;
    w->cap = cap;
  }
  if ((t = tdm__token_hold(nodes, t)))
    w->v[w->n++] = t;
}

void tdm__tokens_release(const tdm_nodes *nodes, tdm_tokens *w) {
  const tdm_node_ops *ops = w->way ? nodes->ways[w->way - 1].ops : nodes->ops;
  void *ctx = w->way ? nodes->ways[w->way - 1].ctx : nodes->ctx;
  for (unsigned i = 0; i < w->n; i++)
    ops->release(ctx, w->v[i]);
  if (w->v != w->inline_v)
    free(w->v);
  tdm__tokens_init(w);
}

/* ---- state -------------------------------------------------------------------- */

bool tdm__coh_replicas(const tdm_nodes *nodes, tdm_handle *h) {
  if (!h->coh.rep)
    h->coh.rep = tdm__calloc(nodes->rt, nodes->n, sizeof *h->coh.rep);
  if (!h->coh.rep)
    tdm__log(nodes->rt, TDM_LOG_ERROR, "out of memory for a handle's device copies");
  return h->coh.rep != NULL;
}

/* The fill token of node n becomes t (taken over). */
static void set_fill(const tdm_nodes *nodes, tdm_handle *h, unsigned n, tdm_token t) {
  tdm_replica *r = &h->coh.rep[n];
  if (r->fill)
    nodes->ops->release(nodes->ctx, r->fill);
  r->fill = t;
}

static tdm_token fill_of(const tdm_handle *h, unsigned n) {
  return h->coh.rep ? h->coh.rep[n].fill : 0;
}

/* The host's memory of h now holds version v (TDM_NO_VERSION: none),
 * or is about to: a version a lineage record reads is first copied aside.
 * A tile's rectangle is part of its matrix's memory, which holds no
 * version of the matrix from then on. */
static void host_changes(const tdm_nodes *nodes, tdm_handle *h) {
  for (tdm_handle *x = h; x; x = x->parent)
    if (x->coh.npins)
      tdm__lineage_keep(nodes, x);
}

static void host_holds(const tdm_nodes *nodes, tdm_handle *h, uint32_t v) {
  if (h->coh.host_ver != v)
    host_changes(nodes, h);
  h->coh.host_ver = v;
  for (tdm_handle *p = h->parent; p; p = p->parent)
    p->coh.host_ver = TDM_NO_VERSION;
}

/* A write in the host's memory is under way: it holds no version until
 * the write is recorded, and no copy lands there (host_writing). */
static void host_writes(const tdm_nodes *nodes, tdm_handle *h) {
  host_holds(nodes, h, TDM_NO_VERSION);
  h->coh.host_writing = true;
}

/* The handle make_valid found unreadable where it is, which its lineage
 * can make again (referenced), until tdm__coh_take_replay. */
static _Thread_local tdm_handle *replay_wanted;

static void want_replay(tdm_handle *h) {
  if (!replay_wanted) {
    tdm__handle_ref(h);
    replay_wanted = h;
  }
}

tdm_handle *tdm__coh_take_replay(void) {
  tdm_handle *h = replay_wanted;
  replay_wanted = NULL;
  return h;
}

/* Whether device node n's device is out of placement or hung: what it
 * holds is not to be counted on. */
static bool gone(const tdm_nodes *nodes, unsigned n) {
  tdm_runtime *rt = nodes->rt;
  if (!rt || !n)
    return false;
  uint64_t out = atomic_load_explicit(&rt->quarantined, memory_order_relaxed) |
                 atomic_load_explicit(&rt->hung, memory_order_relaxed);
  return out >> (n - 1) & 1;
}

/* What a write into node n's memory comes after: the copy still writing
 * it, if any. A copy that failed is forgotten instead (complete, and
 * what it wrote is no version: waiting for it would fail the write), and
 * n no longer counts as holding the version where another node holds it
 * (the copy may have failed during this very access: one bringing home a
 * version a lineage record reads, before a write on the host). Where n
 * was the only holder, that version is lost: the write replaces it (if
 * the write fails, its readers are cancelled and the handle reports
 * TDM_ERR_LOST). */
static tdm_token before_write(const tdm_nodes *nodes, tdm_handle *h, unsigned n) {
  tdm__coh_drop_failed(nodes, h, n);
  if (tdm__coh_fill_failed(nodes, h, n)) {
    set_fill(nodes, h, n, 0);
    /* What the failed copy left in the host's memory is no version: with
     * the token gone, nothing else would say so (lineage read it as the
     * version the host held before: wrong results reported right). */
    if (n == 0)
      h->coh.host_ver = TDM_NO_VERSION;
  }
  return fill_of(h, n);
}

/* What a copy from node `from` to node `to` comes after: what wrote the
 * source, and what still writes the target. Returns how many (<= 2). */
static unsigned fills_of(const tdm_nodes *nodes, tdm_handle *h, unsigned from, unsigned to,
                         tdm_token *out) {
  unsigned n = 0;
  if (fill_of(h, from))
    out[n++] = fill_of(h, from);
  if (before_write(nodes, h, to))
    out[n++] = fill_of(h, to);
  return n;
}

/* The bytes of the copies this thread issued (tdm__coh_copied). */
static _Thread_local uint64_t copied;

uint64_t tdm__coh_copied(void) {
  return copied;
}

/* Copies the elements host describes between the host and their packed
 * buffer `mem` on node. */
static bool copy_whole(const tdm_nodes *nodes, const tdm_buffer *host, unsigned node,
                       bool to_node, void *mem, const tdm_token *after, unsigned nafter,
                       tdm_token *done) {
  tdm_copy c = {.host = host, .mem = mem, .pitch = host->ny * host->elem_size};
  bool ok = nodes->ops->copy(nodes->ctx, node, to_node, &c, after, nafter, done);
  if (ok)
    copied += (uint64_t)host->nx * c.pitch;
  return ok;
}

static bool make_valid(const tdm_nodes *nodes, tdm_handle *h, unsigned node, tdm_tokens *w);
static bool settle(const tdm_nodes *nodes, tdm_handle *h);
static bool settle_upto(const tdm_nodes *nodes, tdm_handle *h, uint32_t gen);

static int home_source(const tdm_nodes *nodes, tdm_handle *h);

/* h's rectangle of its matrix p's elements `whole` (packed) into h's host
 * memory. */
static void rectangle_of(tdm_handle *h, const tdm_handle *p, const unsigned char *whole) {
  size_t es = p->buf.elem_size, row = h->buf.ny * es;
  size_t at = (size_t)((const char *)h->buf.ptr - (const char *)p->buf.ptr) / es;
  const unsigned char *from = whole + (at / p->buf.ld * p->buf.ny + at % p->buf.ld) * es;
  for (size_t r = 0; r < h->buf.nx; r++)
    memcpy((unsigned char *)h->buf.ptr + r * h->buf.ld * es, from + r * p->buf.ny * es, row);
}

/* p's current version from a device holding it, packed, in new memory
 * (the caller frees it), waited for (the family's lock held: rare, after
 * a copy failed); NULL when it could not come. */
static unsigned char *home_aside(const tdm_nodes *nodes, tdm_handle *p) {
  int src = home_source(nodes, p);
  if (src <= 0)
    return NULL;
  size_t bytes = tdm__coh_bytes(p);
  unsigned char *whole = tdm__malloc(nodes->rt, bytes ? bytes : 1);
  if (!whole)
    return NULL;
  tdm_buffer aside = p->buf;
  aside.ptr = whole;
  aside.ld = aside.ny;
  tdm_token e = 0, after = fill_of(p, (unsigned)src);
  bool ok = copy_whole(nodes, &aside, (unsigned)src, false, p->coh.rep[src].mem, &after,
                       after ? 1 : 0, &e);
  if (ok && e) {
    nodes->ops->wait(nodes->ctx, &e, 1);
    ok = !(nodes->ops->failed && nodes->ops->failed(nodes->ctx, e));
    nodes->ops->release(nodes->ctx, e);
  }
  if (!ok) {
    free(whole);
    return NULL;
  }
  return whole;
}

/* Tile h takes its rectangle from a device holding its matrix p, whose
 * host memory p's tiles hold. */
static bool take_aside(const tdm_nodes *nodes, tdm_handle *h, tdm_handle *p) {
  unsigned char *whole = home_aside(nodes, p);
  if (!whole)
    return false;
  host_changes(nodes, h);
  rectangle_of(h, p, whole);
  free(whole);
  return true;
}

/* The tiles holding h's host memory (h->coh.lent set). */
static tdm_handle **lent_tiles(const tdm_handle *h, size_t *n) {
  for (const tdm_gather *g = h->coh.gather; g; g = g->older)
    if (g->seq == h->coh.lent) {
      *n = g->n;
      return g->tiles;
    }
  *n = h->coh.nparts;
  return h->coh.parts;
}

/* Whether every copy of h failed: none holds a version. */
static bool all_failed(const tdm_nodes *nodes, const tdm_handle *h) {
  for (int n = tdm__nodeset_next(&h->coh.valid, 0); n >= 0;
       n = tdm__nodeset_next(&h->coh.valid, (unsigned)n + 1))
    if (!tdm__coh_fill_failed(nodes, h, (unsigned)n))
      return false;
  return !tdm__nodeset_empty(&h->coh.valid);
}

/* Tile t holds nothing of its own again (its copies complete): its next
 * use takes its rectangle from its matrix. */
static void untaken(const tdm_nodes *nodes, tdm_handle *t) {
  for (int n = tdm__nodeset_next(&t->coh.valid, 0); n >= 0;
       n = tdm__nodeset_next(&t->coh.valid, (unsigned)n + 1))
    set_fill(nodes, t, (unsigned)n, 0);
  t->coh.valid = (tdm_nodeset){{0}};
}

/* h's version, packed in `whole`, goes into the rectangles of its host
 * memory that its tiles (which hold that memory: lent) do not hold: those
 * of tiles not taken yet, or taken through a copy that failed (and not
 * written since). Each of those tiles holds it from then on, valid on the
 * host alone, as if it had taken it then; the copies into them land first
 * (waited for: rare). The other tiles' rectangles are left alone: their
 * readers may be reading them, their writers writing. *unchanged: no tile
 * was written since it took its rectangle, nor is being written (h's host
 * memory then holds its version whole).
 * False when a tile is partitioned itself, or out of memory. */
static bool fill_tiles(const tdm_nodes *nodes, tdm_handle *h, const unsigned char *whole,
                       bool *unchanged) {
  size_t n;
  tdm_handle **tiles = lent_tiles(h, &n);
  if (!tiles)
    return false;
  *unchanged = true;
  for (size_t k = 0; k < n; k++) {
    const tdm_coh *c = &tiles[k]->coh;
    if (c->lent || c->gather)
      return false;
    *unchanged &= !c->written && !c->writing && !c->host_writing;
  }
  host_changes(nodes, h);
  for (size_t k = 0; k < n; k++) {
    tdm_handle *t = tiles[k];
    tdm_coh *c = &t->coh;
    if (c->written || c->writing || c->host_writing ||
        (tdm__nodeset_has(&c->valid, 0) && !tdm__coh_fill_failed(nodes, t, 0)))
      continue; /* its own version (or one on its way), or its copy of this one */
    if (!tdm__coh_replicas(nodes, t))
      return false;
    for (int i = tdm__nodeset_next(&c->valid, 0); i >= 0;
         i = tdm__nodeset_next(&c->valid, (unsigned)i + 1))
      if (fill_of(t, (unsigned)i))
        nodes->ops->wait(nodes->ctx, &c->rep[i].fill, 1);
    host_changes(nodes, t);
    rectangle_of(t, h, whole);
    untaken(nodes, t);
    set_fill(nodes, t, 0, 0);
    c->valid = tdm__nodeset_of(0);
    c->host_ver = c->ver; /* its matrix's, the same memory */
  }
  return true;
}

/* h's contents come home while its tiles hold its host memory: possible
 * while no tile was written (a reader of h from before its partition
 * retried: the tiles' writers come after it). Its version comes home
 * aside, and goes into the rectangles of the tiles not holding theirs
 * (fill_tiles). */
static bool restore(const tdm_nodes *nodes, tdm_handle *h) {
  size_t n;
  tdm_handle **tiles = lent_tiles(h, &n);
  bool ok = tiles != NULL, unchanged = false;
  for (size_t k = 0; k < n && ok; k++)
    ok = !tiles[k]->coh.written;
  unsigned char *whole = ok ? home_aside(nodes, h) : NULL;
  ok = whole && fill_tiles(nodes, h, whole, &unchanged);
  free(whole);
  if (!ok)
    tdm__log(nodes->rt, TDM_LOG_WARNING, "a partitioned matrix's contents cannot come home: "
                                         "its tiles hold its memory");
  return ok;
}

/* A tile not used yet takes its rectangle of its matrix's contents: the
 * matrix's writers have finished (the tile's first user waited for them)
 * and nothing changes the matrix's contents while it is partitioned. The
 * matrix comes home whole first if only a device holds it: a copy that
 * stays on the device alone could later be evicted, written back over
 * what the tiles wrote since. From the first tile that takes it to the
 * gather after the partition, the matrix's host memory is its tiles'
 * (`lent`): a tile finding it not valid there (a copy home failed) takes
 * its rectangle through memory aside instead. The tile is valid on the
 * host. */
static bool inherit(const tdm_nodes *nodes, tdm_handle *h) {
  tdm_handle *p = h->parent;
  if (!settle_upto(nodes, p, h->coh.born))
    return false;
  tdm__coh_drop_failed(nodes, p, 0); /* a copy home that failed holds no version */
  if (!tdm__coh_replicas(nodes, h))
    return false;
  if (!tdm__nodeset_has(&p->coh.valid, 0)) {
    bool ok;
    if (p->coh.lent) { /* taken now, landed: nothing to wait for */
      ok = take_aside(nodes, h, p);
    } else {
      tdm_tokens pw;
      tdm__tokens_init(&pw);
      ok = make_valid(nodes, p, 0, &pw);
      tdm__tokens_release(nodes, &pw);
    }
    if (!ok)
      return false;
  }
  /* what still lands in its matrix's host memory, which is its own */
  tdm_token e =
      tdm__nodeset_has(&p->coh.valid, 0) ? tdm__token_hold(nodes, fill_of(p, 0)) : 0;
  p->coh.lent = h->coh.born + 1; /* the seq of the gather that ends it */
  h->coh.valid = tdm__nodeset_of(0);
  h->coh.host_ver = h->coh.ver; /* its matrix's, the same memory */
  set_fill(nodes, h, 0, e);
  return true;
}

static void only_on(tdm_handle *h, unsigned node);

/* Waits for the copies home of g's tiles (their tokens in w, the
 * family's lock held: rare, a gather); a tile whose copy failed is
 * copied again from where it is (nodes->retries times). False when
 * one never landed: the gather is tried again on the next use. */
static bool tiles_landed(const tdm_nodes *nodes, tdm_gather *g, const tdm_tokens *w) {
  nodes->ops->wait(nodes->ctx, w->v, w->n);
  for (size_t k = 0; k < g->n; k++) {
    tdm_handle *t = g->tiles[k];
    for (unsigned tries = 0; tdm__coh_fill_failed(nodes, t, 0); tries++) {
      tdm__coh_drop_failed(nodes, t, 0); /* the device holding it stays */
      if (tries == nodes->retries || tdm__nodeset_has(&t->coh.valid, 0))
        return false; /* (the host was its only holder: nothing to copy) */
      tdm_tokens again;
      tdm__tokens_init(&again);
      bool ok = make_valid(nodes, t, 0, &again);
      nodes->ops->wait(nodes->ctx, again.v, again.n);
      tdm__tokens_release(nodes, &again);
      if (!ok)
        return false;
    }
  }
  return true;
}

/* After an unpartition the matrix's contents are in its old tiles: its
 * first use (the first access submitted after the unpartition) brings
 * them home, after those of an earlier unpartition not gathered yet. The
 * tiles' writers have all finished then, their readers may not have. A
 * tile never used holds nothing of its own: its rectangle is the
 * matrix's still, brought home from where the matrix is. */
static bool gather(const tdm_nodes *nodes, tdm_handle *h) {
  tdm_gather *g = h->coh.gather;
  h->coh.gather = g->older;
  if (h->coh.gather && !gather(nodes, h)) {
    h->coh.gather = g; /* tried again on the next use */
    return false;
  }
  h->coh.gather = NULL; /* the tiles see the matrix's state before them */
  tdm_tokens w;
  tdm__tokens_init(&w);
  bool ok = true;
  for (size_t k = 0; k < g->n && ok; k++) {
    tdm_handle *t = g->tiles[k];
    ok = settle(nodes, t);
    /* an earlier copy home that failed (a writeback's) is no version:
     * forgotten, so that the tile comes home from the device holding it
     * (tiles_landed tries again only the copies made here) */
    if (ok && nodes->ops->failed)
      tdm__coh_drop_failed(nodes, t, 0);
    ok = ok && make_valid(nodes, t, 0, &w);
  }
  /* Where copies can fail, they have landed before the tiles die (else a
   * copy that failed would lose the matrix's version): nothing is left
   * to wait for. */
  if (ok && nodes->ops->failed && w.n) {
    ok = tiles_landed(nodes, g, &w);
    tdm__tokens_release(nodes, &w);
    tdm__tokens_init(&w);
  }
  if (!ok) {
    tdm__tokens_release(nodes, &w);
    g->older = NULL;
    h->coh.gather = g;
    return false;
  }
  /* Unless a tile was written, the matrix holds the version it held
   * before its partition, where it held it: its copies stay valid (a
   * reader from before the partition may still read one of them, and
   * nothing is to be copied into it). */
  bool changed = false;
  for (size_t k = 0; k < g->n; k++)
    changed |= g->tiles[k]->coh.written;
  /* The tiles are dead: nothing writes them any more, and they go once
   * their readers are done, released by tdm__coh_reap. Their copies on
   * devices hold their last version still, which those readers (tasks
   * submitted before the unpartition, which need not have started) read:
   * they stay valid. Dropped, a reader placed on such a device would copy
   * the version into the buffer another reader reads there at that
   * moment, and a copy that fails would leave it garbage under that
   * reader. Each tile is valid on the host too (copied home, landed,
   * above), so an eviction drops those copies and never writes one back
   * over the matrix's memory, which later writers change. */
  for (size_t k = 0; k < g->n; k++) {
    tdm__nodeset_add(&g->tiles[k]->coh.valid, 0);
    g->tiles[k]->coh.written = true;
    /* its memory is the matrix's from here (which it does not change) */
    if (g->tiles[k]->coh.npins)
      tdm__lineage_keep(nodes, g->tiles[k]);
    g->tiles[k]->coh.host_ver = TDM_NO_VERSION;
    tdm__lineage_drop(nodes, g->tiles[k], true);
  }
  if (h->coh.lent == g->seq) /* the tiles gave its host memory back */
    h->coh.lent = 0;
  /* Unchanged, but no longer valid on the host (its copy there failed
   * while the tiles held its memory): the tiles, each valid there, hold
   * its version in its host memory, rectangle by rectangle. That memory
   * is the version's, valid: a copy home into it (an eviction's, a
   * reader's) would write under the tiles' readers, which may still be
   * reading it, and a copy that failed would leave them garbage. */
  bool assembled = !changed && !tdm__nodeset_has(&h->coh.valid, 0);
  tdm_token all = w.n && (changed || assembled) ? nodes->ops->join(nodes->ctx, w.v, w.n) : 0;
  tdm__tokens_release(nodes, &w);
  if (assembled) {
    tdm__nodeset_add(&h->coh.valid, 0);
    host_holds(nodes, h, h->coh.ver);
    if (h->coh.rep) /* (it has: another node holds it) */
      set_fill(nodes, h, 0, all);
    else if (all)
      nodes->ops->release(nodes->ctx, all);
    all = 0; /* taken over */
  }
  /* g may go from here */
  tdm_nodes *mn = (tdm_nodes *)nodes; /* the reap list is its one mutable part */
  g->older = atomic_load_explicit(&mn->reap, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(&mn->reap, &g->older, g, memory_order_release,
                                                memory_order_relaxed))
    ;
  if (changed)
    tdm__coh_written(nodes, h, 0, all, NULL, true);
  return true;
}

/* Frees g and those older, releasing their tiles (not at destroy, when
 * every handle goes anyway). No family lock held: a tile may go. */
static void gather_free(tdm_gather *g, bool release) {
  while (g) {
    tdm_gather *older = g->older;
    for (size_t k = 0; k < g->n && release; k++)
      tdm__handle_unref(g->tiles[k]);
    free(g->tiles);
    free(g);
    g = older;
  }
}

void tdm__coh_reap(tdm_nodes *nodes) {
  tdm__lineage_reap(nodes);
  /* relaxed first: nothing to do is the common case */
  if (!atomic_load_explicit(&nodes->reap, memory_order_relaxed))
    return;
  gather_free(atomic_exchange_explicit(&nodes->reap, NULL, memory_order_acquire), true);
  tdm__lineage_reap(nodes); /* the tiles' records */
}

/* A matrix still to gather, a tile still to take from its matrix: done. */
static bool settle(const tdm_nodes *nodes, tdm_handle *h) {
  return settle_upto(nodes, h, UINT32_MAX);
}

/* As settle, gathering only the tiles of unpartitions up to `gen`: a tile
 * made before a later unpartition of its matrix takes the matrix's
 * contents from before it (that unpartition's tiles, the tile among them,
 * may still be in use). */
static bool settle_upto(const tdm_nodes *nodes, tdm_handle *h, uint32_t gen) {
  tdm_gather **link = &h->coh.gather;
  while (*link && (*link)->seq > gen)
    link = &(*link)->older;
  tdm_gather *old = *link;
  if (old) {
    tdm_gather *newer = h->coh.gather;
    *link = NULL; /* split: the newer ones wait */
    h->coh.gather = old;
    bool ok = gather(nodes, h);
    tdm_gather *left = h->coh.gather; /* NULL once done */
    if (newer != old) {
      *link = left;
      h->coh.gather = newer;
    }
    if (!ok)
      return false;
  }
  /* A tile that nothing wrote since it took its rectangle, through a
   * copy of its matrix that failed (and the copies made from it): taken
   * again. */
  if (h->parent && !h->coh.written && all_failed(nodes, h))
    untaken(nodes, h);
  if (tdm__nodeset_empty(&h->coh.valid)) {
    if (h->parent)
      return inherit(nodes, h);
    h->coh.valid = tdm__nodeset_of(0);
    host_holds(nodes, h, h->coh.ver);
  }
  return true;
}

/* The device node h comes home from: one holding it whose copy did not
 * fail (those whose copy failed are forgotten, the last holder stays),
 * one whose device is still working first. -1 when lineage is to make
 * the version again instead (want_replay): the holders' copy is
 * damaged, or only devices that are gone hold it, or when nothing can
 * bring it home. */
static int home_source(const tdm_nodes *nodes, tdm_handle *h) {
  bool replays = tdm__lineage_replays(nodes, h);
  if (h->coh.damaged) {
    if (replays)
      want_replay(h);
    return -1;
  }
  int src = -1;
  for (int n = tdm__nodeset_next(&h->coh.valid, 1); n >= 0;
       n = tdm__nodeset_next(&h->coh.valid, (unsigned)n + 1)) {
    tdm__coh_drop_failed(nodes, h, (unsigned)n);
    if (tdm__nodeset_has(&h->coh.valid, (unsigned)n) &&
        (src < 0 || (gone(nodes, (unsigned)src) && !gone(nodes, (unsigned)n))))
      src = n;
  }
  if (src > 0 && gone(nodes, (unsigned)src) && replays) {
    want_replay(h);
    return -1;
  }
  return src;
}

/* The device node a copy of h into device node `node` comes straight
 * from (the nodes' peer_copy), when one can and it is quicker than
 * through the host: a holder whose copy did not fail, whose device is
 * not gone, the quickest. -1: through the host (which holds h, or
 * decides where it comes home from: home_source). */
static int peer_source(const tdm_nodes *nodes, tdm_handle *h, unsigned node) {
  const tdm_node_ops *o = nodes->ops;
  if (!o->peer_copy || !o->peer_time || h->coh.damaged || h->coh.writing ||
      tdm__nodeset_has(&h->coh.valid, 0))
    return -1;
  uint64_t bytes = tdm__coh_bytes(h);
  int src = -1;
  double best = 0;
  for (int n = tdm__nodeset_next(&h->coh.valid, 1); n >= 0;
       n = tdm__nodeset_next(&h->coh.valid, (unsigned)n + 1)) {
    tdm__coh_drop_failed(nodes, h, (unsigned)n); /* (not the last holder) */
    if (!tdm__nodeset_has(&h->coh.valid, (unsigned)n) || gone(nodes, (unsigned)n) ||
        tdm__coh_fill_failed(nodes, h, (unsigned)n))
      continue;
    double s = o->peer_time(nodes->ctx, (unsigned)n, node, bytes);
    if (s >= 0 && (src < 0 || s < best)) {
      src = n;
      best = s;
    }
  }
  if (src > 0 && best >= o->link_time(nodes->ctx, (unsigned)src, bytes) +
                             o->link_time(nodes->ctx, node, bytes))
    return -1;
  return src;
}

/* Device node `node` gets h's version straight from device node src
 * (*e: the copy's token). The copy reads src's memory after what fills
 * it, and writes node's after what still writes there. Nothing else
 * waits for it to have read src: a writer on src comes after h's
 * readers, the task this copy is for among them, and a copy it reads
 * torn makes no version (the write leaves src the only holder); an
 * eviction of src frees a buffer the backend keeps until its commands
 * are done. False when it could not start (the caller goes through the
 * host). */
static bool copy_peer(const tdm_nodes *nodes, tdm_handle *h, unsigned src, unsigned node,
                      tdm_token *e) {
  void *mem = tdm__mem_get(nodes, h, node, NULL);
  if (!mem)
    return false;
  tdm_token after[2];
  unsigned n = fills_of(nodes, h, src, node, after);
  bool ok = nodes->ops->peer_copy(nodes->ctx, src, node, h->coh.rep[src].mem, mem,
                                  tdm__coh_bytes(h), after, n, e);
  if (ok)
    copied += tdm__coh_bytes(h);
  return ok;
}

/* Makes `node` valid for h (settled), adding to w what a user waits for;
 * from another device straight when `straight` and the nodes can. */
static bool make_valid_from(const tdm_nodes *nodes, tdm_handle *h, unsigned node,
                            tdm_tokens *w, bool straight);

static bool make_valid(const tdm_nodes *nodes, tdm_handle *h, unsigned node, tdm_tokens *w) {
  return make_valid_from(nodes, h, node, w, true);
}

static bool make_valid_from(const tdm_nodes *nodes, tdm_handle *h, unsigned node,
                            tdm_tokens *w, bool straight) {
  /* (a damaged copy is the version's holder until it is made again) */
  if (tdm__nodeset_has(&h->coh.valid, node) && !h->coh.damaged) {
    wait_add(nodes, w, fill_of(h, node));
    return true;
  }
  if (!tdm__coh_replicas(nodes, h))
    return false;
  tdm_token e = 0;
  int src;
  /* after what fills the source, and what still writes the target */
  if (node == 0) { /* from a device holding it */
    if (h->coh.lent) { /* not over its tiles' rectangles: landed, e stays 0 */
      if (!restore(nodes, h))
        return false;
    } else {
      src = home_source(nodes, h);
      if (src < 0)
        return false;
      tdm_token after[2];
      unsigned n = fills_of(nodes, h, (unsigned)src, 0, after);
      host_changes(nodes, h);
      if (!copy_whole(nodes, &h->buf, (unsigned)src, false, h->coh.rep[src].mem, after, n,
                      &e)) {
        if (tdm__lineage_replays(nodes, h))
          want_replay(h);
        return false;
      }
    }
    host_holds(nodes, h, h->coh.ver);
  } else if (!(straight && (src = peer_source(nodes, h, node)) > 0 &&
                 copy_peer(nodes, h, (unsigned)src, node, &e))) { /* through the host */
    tdm_tokens before;
    tdm__tokens_init(&before);
    wait_add(nodes, &before, before_write(nodes, h, node));
    bool home = make_valid(nodes, h, 0, &before);
    void *mem = home ? tdm__mem_get(nodes, h, node, NULL) : NULL;
    bool ok = mem && copy_whole(nodes, &h->buf, node, true, mem, before.v, before.n, &e);
    tdm__tokens_release(nodes, &before);
    if (!ok) {
      if (home && !mem)
        tdm__log(nodes->rt, TDM_LOG_ERROR, "no room for %zu bytes on memory node %u",
                 tdm__coh_bytes(h), node);
      return false;
    }
  }
  tdm__nodeset_add(&h->coh.valid, node);
  set_fill(nodes, h, node, e);
  wait_add(nodes, w, e);
  return true;
}

bool tdm__coh_access(const tdm_nodes *nodes, tdm_handle *h, unsigned node, unsigned mode,
                     uint32_t gen, tdm_tokens *w, bool *unkept) {
  if (!settle_upto(nodes, h, gen))
    return false;
  /* With keep_host, a write on the host that does not read keeps the
   * version it replaces as well (copied home, below), so that a try that
   * fails before it runs (an input's copy failed) leaves it in place;
   * a copy home that failed does not count as kept. */
  if (!(mode & TDM_R))
    tdm__coh_drop_failed(nodes, h, node);
  /* A copy home that failed before a write on a device is no input of
   * it: had it stayed, a run that fails after writing would be taken for
   * one that never started (a copy home it waited for failed:
   * tdm__coh_write_failed), and what it wrote for the version before it.
   * Forgotten where another node holds h, it leaves the host no version,
   * and the version comes home below if lineage cannot make it again. */
  if ((mode & TDM_W) && node)
    tdm__coh_drop_failed(nodes, h, 0);
  /* A version a lineage record reads, which only devices hold, comes
   * home before a write replaces it (which waits for that copy). */
  if ((mode & TDM_W) && !tdm__nodeset_has(&h->coh.valid, 0) &&
      (((mode & TDM_KEEP_REPLACED) && (mode & TDM_R)) ||
       ((mode & TDM_REPLAYABLE) && (mode & TDM_R) && node && nodes->lineage_max &&
        !tdm__lineage_replays(nodes, h)) ||
       (h->coh.npins && tdm__lineage_pin(h, h->coh.ver))) &&
      !make_valid(nodes, h, 0, w))
    return false;
  bool keep = node == 0 && nodes->keep_host && !(mode & TDM_R);
  if ((mode & TDM_R) || (keep && !tdm__nodeset_has(&h->coh.valid, 0))) {
    /* A read-write on a device takes the version through the host, which
     * then keeps it should the write fail (below), unless lineage makes
     * it again: a device it came from straight is not valid any more once
     * the write is issued. */
    bool straight = !(mode & TDM_W) || tdm__lineage_replays(nodes, h);
    if (!make_valid_from(nodes, h, node, w, straight))
      return false;
  } else { /* what writes the node's memory lands first, valid or not */
    wait_add(nodes, w, before_write(nodes, h, node));
  }
  /* A write on a device: the version it replaces stays in the host's
   * memory until the write is known to have succeeded, so that a run
   * that fails can be undone and tried again (tdm__coh_write_failed),
   * when the host's copy is current; with keep_host, by a copy home
   * first (which the write waits for). Otherwise *unkept is set. */
  if ((mode & TDM_W) && node) {
    h->coh.writing = true;
    /* Nor before a copy home still landing, which may read this node's
     * memory: an eviction's or a replay's is not ordered by the task
     * graph (one a host task asked for is: a writer comes after it).
     * One that failed (as it started, say) is waited for too: the run
     * then never starts, and tdm__coh_write_failed may take this node's
     * copy for the version still (home_waited, below). */
    if (tdm__nodeset_has(&h->coh.valid, 0))
      wait_add(nodes, w, fill_of(h, 0));
    if (nodes->keep_host && !make_valid(nodes, h, 0, w))
      return false;
    /* Its lineage is as long as kept: the version it replaces comes home
     * first (which the write waits for), and the chain starts again. */
    if (nodes->lineage_max && h->coh.nchain >= nodes->lineage_max && (mode & TDM_R) &&
        !make_valid(nodes, h, 0, w))
      return false;
    if ((mode & TDM_R) && !tdm__nodeset_has(&h->coh.valid, 0) && unkept)
      *unkept = true;
    /* each copy into the host's memory made valid above is waited for */
    h->coh.home_waited = tdm__nodeset_has(&h->coh.valid, 0);
  }
  /* A write makes its node the only valid one when it is done
   * (tdm__coh_written), not before: a try that fails, before it runs or
   * while, leaves the version it was given where it was (its node's copy
   * intact when it did not run, the host's kept as above when it did, the
   * devices' copies when a write on the host replaced without reading a
   * version only they hold). Meanwhile no copy is written back over what
   * is being written: the task graph has finished the other users, a
   * device node written is pinned, and no other node is the only valid
   * one (an eviction writes back only the only copy), or the host is
   * written (host_writing: an eviction keeps the only copy). */
  if ((mode & TDM_W) && node == 0 && !(mode & TDM_HOST_LATER))
    host_writes(nodes, h);
  return true;
}

/* node is the only valid node of h. Every node keeps its fill token,
 * valid or not: a copy into a node's memory may still be running (a
 * write-back that an eviction started, a copy home), and whatever writes
 * that memory next waits for it (tdm__coh_access, make_valid). */
static void only_on(tdm_handle *h, unsigned node) {
  h->coh.valid = tdm__nodeset_of(node);
  h->coh.written = true;
}

void tdm__coh_written(const tdm_nodes *nodes, tdm_handle *h, unsigned node, tdm_token done,
                      tdm_lrec *rec, bool reads) {
  if (!h->coh.rep && done && !tdm__coh_replicas(nodes, h)) {
    nodes->ops->wait(nodes->ctx, &done, 1);
    nodes->ops->release(nodes->ctx, done);
    done = 0;
  }
  h->coh.ver++;
  h->coh.damaged = h->coh.writing = h->coh.host_writing = false;
  if (node == 0) {
    host_holds(nodes, h, h->coh.ver);
    tdm__lineage_drop(nodes, h, true);
  } else if (nodes->lineage_max) {
    tdm__lineage_append(nodes, h, rec, reads);
  }
  only_on(h, node);
  if (h->coh.rep)
    set_fill(nodes, h, node, done);
}

bool tdm__coh_write_back(const tdm_nodes *nodes, tdm_handle *h) {
  if (tdm__nodeset_has(&h->coh.valid, 0))
    return true;
  tdm_tokens w;
  tdm__tokens_init(&w);
  bool ok = make_valid(nodes, h, 0, &w);
  tdm__tokens_release(nodes, &w);
  return ok;
}

void tdm__coh_host_restored(const tdm_nodes *nodes, tdm_handle *h) {
  if (tdm__coh_fill_failed(nodes, h, 0))
    set_fill(nodes, h, 0, 0);
}

bool tdm__coh_fill_failed(const tdm_nodes *nodes, const tdm_handle *h, unsigned node) {
  tdm_token f = fill_of(h, node);
  return f && nodes->ops->failed && nodes->ops->failed(nodes->ctx, f);
}

bool tdm__coh_write_failed(const tdm_nodes *nodes, tdm_handle *h, unsigned node, bool issued) {
  if (issued) { /* the version it made is not: its count and record go */
    tdm__lineage_pop(nodes, h);
    h->coh.ver--;
  }
  h->coh.writing = false;
  /* The version before, whatever was written. A copy home the run
   * waited for failed: it never started, and this node's copy is the
   * version. A copy home that failed otherwise holds no version: the
   * run may have written over the only copy. */
  bool home_failed = tdm__coh_fill_failed(nodes, h, 0);
  if (home_failed && h->coh.home_waited) {
    h->coh.valid = tdm__nodeset_of(node);
    return true;
  }
  if (home_failed)
    h->coh.host_ver = TDM_NO_VERSION;
  if (h->coh.host_ver == h->coh.ver) {
    h->coh.valid = tdm__nodeset_of(0);
    return true;
  }
  /* Only devices held it, and the run may have written over it: its
   * lineage makes it again, or it is lost. */
  bool replays = tdm__lineage_replays(nodes, h);
  h->coh.valid = tdm__nodeset_of(replays ? node : 0);
  h->coh.damaged = replays;
  return replays;
}

void tdm__coh_drop_failed(const tdm_nodes *nodes, tdm_handle *h, unsigned node) {
  if (!tdm__nodeset_has(&h->coh.valid, node) || tdm__nodeset_only(&h->coh.valid, node) ||
      !tdm__coh_fill_failed(nodes, h, node))
    return;
  tdm__nodeset_del(&h->coh.valid, node);
  set_fill(nodes, h, node, 0); /* complete: nothing writes that memory */
  if (node == 0) /* what the failed copy left there is no version */
    h->coh.host_ver = TDM_NO_VERSION;
}

int tdm__coh_evict(const tdm_nodes *nodes, tdm_handle *h, unsigned node) {
  tdm_replica *r = &h->coh.rep[node];
  bool landing = false, failed = false;
  if (h->coh.damaged && tdm__nodeset_has(&h->coh.valid, node))
    return TDM_EVICT_NOT; /* no version to copy home: lineage makes it again */
  if (tdm__nodeset_has(&h->coh.valid, node)) {
    /* another holder whose copy landed lets it go; one whose copy failed
     * is forgotten (the version stays here) */
    bool landed = false;
    for (int n = tdm__nodeset_next(&h->coh.valid, 0); n >= 0 && !landed;
         n = tdm__nodeset_next(&h->coh.valid, n + 1)) {
      if ((unsigned)n == node)
        continue;
      /* complete first, then failed or not: a copy that completes
       * between the two questions is not taken as landed */
      tdm_token f = fill_of(h, (unsigned)n);
      if (f && !nodes->ops->test(nodes->ctx, f)) {
        landing = true;
      } else if (tdm__coh_fill_failed(nodes, h, (unsigned)n)) {
        tdm__coh_drop_failed(nodes, h, (unsigned)n);
        failed = true;
      } else {
        landed = true;
      }
    }
    if (!landed && !landing) { /* the only copy: home first */
      /* not this time: the copy home failed; nor from a fill that failed
       * (no version; some implementations never run a copy after it); nor
       * over the rectangles of tiles holding the host's memory, nor over
       * that memory while a write there is under way (the version stays
       * here until it succeeded). A failed copy still writing the host is
       * not waited for (fills_of) */
      if (failed || tdm__coh_fill_failed(nodes, h, node) || h->coh.lent || h->coh.host_writing)
        return TDM_EVICT_NOT;
      tdm_token e = 0, after[2];
      unsigned n = fills_of(nodes, h, node, 0, after);
      host_changes(nodes, h);
      if (!copy_whole(nodes, &h->buf, node, false, r->mem, after, n, &e))
        return TDM_EVICT_NOT;
      host_holds(nodes, h, h->coh.ver);
      tdm__nodeset_add(&h->coh.valid, 0);
      set_fill(nodes, h, 0, e);
      return TDM_EVICT_LATER;
    }
    if (!landed)
      return TDM_EVICT_LATER;
  }
  tdm__nodeset_del(&h->coh.valid, node);
  set_fill(nodes, h, node, 0);
  return TDM_EVICTED;
}

double tdm__coh_estimate(const tdm_nodes *nodes, const tdm_handle *h, unsigned node,
                         unsigned *home) {
  /* a tile not used yet is where its matrix is; a matrix to gather comes
   * home first (counted as there) */
  const tdm_handle *x = h;
  while (tdm__nodeset_empty(&x->coh.valid) && x->parent)
    x = x->parent;
  tdm_nodeset v = x->coh.valid;
  if (x->coh.gather || tdm__nodeset_empty(&v))
    v = tdm__nodeset_of(0);
  if (tdm__nodeset_has(&v, node))
    return 0;
  const tdm_node_ops *o = nodes->ops;
  uint64_t bytes = tdm__coh_bytes(h);
  double s = 0;
  if (!tdm__nodeset_has(&v, 0)) {
    unsigned from = (unsigned)tdm__nodeset_next(&v, 1);
    s += o->link_time(nodes->ctx, from, bytes);
    /* or straight from there (as peer_source chooses, roughly: the first
     * holder) */
    double p = node && o->peer_time ? o->peer_time(nodes->ctx, from, node, bytes) : -1;
    if (p >= 0 && p < s + o->link_time(nodes->ctx, node, bytes))
      return p;
    if (home)
      *home = from;
  }
  if (node)
    s += o->link_time(nodes->ctx, node, bytes);
  return s;
}

void tdm__coh_forget(const tdm_nodes *nodes, tdm_handle *h, bool lock) {
  if (!h->coh.rep && !h->coh.gather && !h->coh.chain && !h->coh.pins)
    return;
  if (lock)
    tdm__coh_lock(&h->coh);
  tdm_gather *g = h->coh.gather;
  h->coh.gather = NULL;
  tdm_replica *rep = h->coh.rep;
  for (unsigned k = 0; rep && k < nodes->n; k++) {
    if (rep[k].fill)
      nodes->ops->release(nodes->ctx, rep[k].fill);
    rep[k].fill = 0;
    if (k)
      tdm__mem_drop(nodes, h, k);
  }
  h->coh.rep = NULL;
  tdm__lineage_drop(nodes, h, lock); /* at destroy, its handles go too */
  tdm_lrec **chain = h->coh.chain;
  h->coh.chain = NULL;
  /* Versions records still read stay (copied aside: the memory is the
   * application's from here), until those records go; at destroy, all
   * go. */
  if (lock && h->coh.npins)
    tdm__lineage_keep(nodes, h);
  h->coh.host_ver = TDM_NO_VERSION;
  tdm_pin *pins = h->coh.pins;
  unsigned npins = h->coh.npins, kept = 0;
  for (unsigned i = 0; i < npins; i++) {
    if (lock && pins[i].count)
      pins[kept++] = pins[i];
    else
      free(pins[i].copy);
  }
  h->coh.npins = (uint16_t)kept;
  if (!kept) {
    h->coh.pins = NULL;
    h->coh.pins_cap = 0;
  }
  if (lock)
    tdm__coh_unlock(&h->coh);
  free(chain);
  if (!kept)
    free(pins);
  free(rep);
  gather_free(g, lock); /* not under the lock: a tile may go */
}

/* ---- the host's memory, for lineage (no lock held) ---------------------------- */

void tdm__coh_host_rows(const tdm_handle *h, void *packed, bool to_host) {
  const tdm_buffer *b = &h->buf;
  size_t row = b->ny * b->elem_size;
  for (size_t r = 0; r < b->nx; r++) {
    unsigned char *host = (unsigned char *)b->ptr + r * b->ld * b->elem_size;
    unsigned char *mine = (unsigned char *)packed + r * row;
    memcpy(to_host ? host : mine, to_host ? mine : host, row);
  }
}

/* The family's lock held: when a copy still writes h's host memory, the
 * lock is let go until it has landed (true: the caller looks again). */
static bool host_landing(const tdm_nodes *nodes, tdm_handle *h) {
  tdm_token f = fill_of(h, 0);
  if (!f || nodes->ops->test(nodes->ctx, f))
    return false;
  f = tdm__token_hold(nodes, f);
  tdm__coh_unlock(&h->coh);
  if (f) {
    nodes->ops->wait(nodes->ctx, &f, 1);
    nodes->ops->release(nodes->ctx, f);
  }
  return true;
}

int tdm__coh_host_read(const tdm_nodes *nodes, tdm_handle *h, uint32_t v, void *out) {
  do
    tdm__coh_lock(&h->coh);
  while (h->coh.host_ver == v && !tdm__coh_fill_failed(nodes, h, 0) && host_landing(nodes, h));
  bool held = h->coh.host_ver == v && !tdm__coh_fill_failed(nodes, h, 0);
  if (held)
    tdm__coh_host_rows(h, out, false);
  tdm__coh_unlock(&h->coh);
  return held;
}

bool tdm__coh_device_read(const tdm_nodes *nodes, tdm_handle *h, uint32_t v, void *out) {
  bool asked = replay_wanted != NULL;
  tdm__coh_lock(&h->coh);
  bool ok = h->coh.ver == v && h->coh.lent && !h->coh.damaged && !h->coh.writing &&
            !tdm__nodeset_has(&h->coh.valid, 0);
  unsigned char *whole = ok ? home_aside(nodes, h) : NULL;
  ok = whole != NULL;
  if (ok)
    memcpy(out, whole, tdm__coh_bytes(h));
  tdm__coh_unlock(&h->coh);
  free(whole);
  /* a device gone: not asked here (the caller's lineage is what makes it) */
  tdm_handle *lost = asked ? NULL : tdm__coh_take_replay();
  if (lost)
    tdm__handle_unref(lost);
  return ok;
}

bool tdm__coh_host_install(const tdm_nodes *nodes, tdm_handle *h, uint32_t v, const void *in) {
  /* not over a copy still writing there */
  do
    tdm__coh_lock(&h->coh);
  while (h->coh.ver == v && !tdm__nodeset_has(&h->coh.valid, 0) && host_landing(nodes, h));
  /* Written since: what was made is not current. Or made again by
   * another thread (and maybe written since through a tile: a matrix's
   * memory is its tiles'). */
  bool ok = h->coh.ver == v;
  /* not over a write under way there */
  if (ok && !tdm__nodeset_has(&h->coh.valid, 0) && h->coh.host_writing)
    ok = false;
  if (ok && !tdm__nodeset_has(&h->coh.valid, 0) && (ok = tdm__coh_replicas(nodes, h))) {
    /* Where its tiles hold that memory, only into the rectangles they do
     * not hold; whole when none was written since it took its rectangle
     * (else the tiles not taken yet take theirs from here, and the
     * version has no other use: its readers came before the tiles'
     * writers). */
    bool whole = true;
    if (h->coh.lent) {
      ok = fill_tiles(nodes, h, in, &whole);
    } else {
      host_holds(nodes, h, v); /* (a version kept aside first) */
      tdm__coh_host_rows(h, (void *)in, true);
    }
    if (ok && whole) {
      host_holds(nodes, h, v);
      set_fill(nodes, h, 0, 0);
      h->coh.valid = tdm__nodeset_of(0);
      h->coh.damaged = false;
      tdm__lineage_drop(nodes, h, true);
    }
  }
  tdm__coh_unlock(&h->coh);
  return ok;
}

/* Copies the host's memory of h aside as its version v, when a record
 * reads v and nothing holds a copy of it yet, after what still writes
 * that memory (rare: a copy home still landing). */
static void keep_version(const tdm_nodes *nodes, tdm_handle *h, uint32_t v) {
  tdm_pin *p = tdm__lineage_pin(h, v);
  if (!p || p->copy || v == TDM_NO_VERSION || tdm__coh_fill_failed(nodes, h, 0))
    return;
  tdm_token f = fill_of(h, 0);
  if (f && !nodes->ops->test(nodes->ctx, f))
    nodes->ops->wait(nodes->ctx, &f, 1);
  if (tdm__coh_fill_failed(nodes, h, 0))
    return;
  size_t bytes = tdm__coh_bytes(h);
  p->copy = tdm__malloc(nodes->rt, bytes ? bytes : 1);
  if (!p->copy) {
    tdm__log(nodes->rt, TDM_LOG_WARNING,
             "out of memory for a version lineage needs: what reads it cannot be made again");
    return;
  }
  tdm__coh_host_rows(h, p->copy, false);
}

void tdm__coh_try_failed(const tdm_nodes *nodes, tdm_handle *h, unsigned mode, bool in_host) {
  /* a copy into the node it ran on, home on its way there, or into the
   * node it came from */
  for (int n = 0; n >= 0; n = tdm__nodeset_next(&h->coh.valid, (unsigned)n + 1))
    tdm__coh_drop_failed(nodes, h, (unsigned)n);
  if (!(mode & TDM_W))
    return;
  h->coh.writing = h->coh.host_writing = false;
  /* In the host's memory, it did not run, or what it wrote was put back:
   * that memory holds what it held before, the version if the host held
   * it (valid there, its copy landed). */
  if (in_host && tdm__nodeset_has(&h->coh.valid, 0) && !tdm__coh_fill_failed(nodes, h, 0))
    h->coh.host_ver = h->coh.ver;
}

tdm_token tdm__coh_host_writing(const tdm_nodes *nodes, tdm_handle *h) {
  host_writes(nodes, h);
  /* A copy home that started after the write's access (an eviction's,
   * before host_writing) lands first. */
  tdm_token f = fill_of(h, 0);
  return f && !nodes->ops->test(nodes->ctx, f) ? tdm__token_hold(nodes, f) : 0;
}

void tdm__lineage_keep(const tdm_nodes *nodes, tdm_handle *h) {
  keep_version(nodes, h, h->coh.host_ver);
}

void tdm__coh_keep_gathered(const tdm_nodes *nodes, tdm_handle *h, uint32_t v) {
  if (h->parent && h->coh.host_ver == TDM_NO_VERSION && h->coh.ver == v &&
      tdm__nodeset_has(&h->coh.valid, 0) &&
      atomic_load_explicit(&h->magic, memory_order_relaxed) == TDM_HANDLE_DEAD)
    keep_version(nodes, h, v);
}
