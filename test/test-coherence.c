/*
 * The coherence state machine alone (runtime/data/coherence.c), checked
 * against a reference model: every sequence of events up to a small
 * length, and long random ones, over a matrix on the host and two device
 * nodes whose memories are real arrays. Events: read or write a handle on
 * a node, evict a device node, partition the matrix into two tiles or
 * unpartition it. After each read the node must hold exactly the current
 * contents; completion tokens are counted, so that one released twice or
 * never is caught too. Copies land as late as they may: only when a
 * token that depends on them is waited for, else at the end of the
 * sequence, so that a copy nobody waits for (a write-back whose token was
 * dropped) lands over newer contents and is caught by the final check.
 */
#include "common.h"

#include "../runtime/internal.h"

#include <stdlib.h>
#include <string.h>

#define ROWS 4
#define COLS 3
#define LD 5
#define NNODES 3
#define MAXTOK 4096

/* ---- node operations on plain memory -------------------------------------- */

static int refs[MAXTOK]; /* per token: references held */
static unsigned ntok;
static unsigned copies;

/* What a token stands for until it has run: a copy, or a join of tokens. */
typedef struct {
  bool pending;
  bool failed; /* it did not land (nor does what comes after it) */
  bool join;
  bool to_node;
  tdm_buffer host;
  void *mem;
  size_t pitch;
  void *from; /* a copy between devices: from here into mem, bytes of it */
  size_t bytes;
  unsigned nafter;
  tdm_token after[16];
} pending_op;
static pending_op ops_of[MAXTOK];
/* With failing_ops: the copy that fails, counting from 1 as they start
 * (0: none). */
static unsigned fail_at;
/* Copies land as soon as they start, as an emulated device's do. */
static bool land_at_once;
static char seq_text[256]; /* the events of the sequence, for messages */
/* Memory freed while a copy may still use it: freed at the end. */
static void *freed[4096];
static unsigned nfreed;

static tdm_token new_token(void) {
  assert_true(ntok + 1 < MAXTOK);
  refs[++ntok] = 1;
  ops_of[ntok].pending = false;
  ops_of[ntok].failed = false;
  ops_of[ntok].from = NULL;
  return ntok;
}

/* Runs t's copy now, after what it depends on. */
static void land(tdm_token t) {
  pending_op *o = &ops_of[t];
  if (!o->pending)
    return;
  o->pending = false;
  for (unsigned i = 0; i < o->nafter; i++) {
    land(o->after[i]);
    o->failed |= ops_of[o->after[i]].failed;
  }
  if (o->from) { /* between two devices' packed buffers */
    if (o->failed)
      memset(o->mem, 0xa5, o->bytes);
    else
      memcpy(o->mem, o->from, o->bytes);
    return;
  }
  for (size_t r = 0; !o->join && r < o->host.nx; r++) {
    uint64_t *host = (uint64_t *)o->host.ptr + r * o->host.ld;
    uint64_t *dev = (uint64_t *)((char *)o->mem + r * o->pitch);
    if (o->failed) /* as the emulated devices: what it wrote is garbage */
      memset(o->to_node ? dev : host, 0xa5, o->host.ny * sizeof *host);
    else
      memcpy(o->to_node ? dev : host, o->to_node ? host : dev, o->host.ny * sizeof *host);
  }
}

static tdm_token later(const tdm_token *after, unsigned nafter, bool join) {
  tdm_token t = new_token();
  pending_op *o = &ops_of[t];
  assert_true(nafter <= sizeof o->after / sizeof o->after[0]);
  o->pending = true;
  o->join = join;
  o->nafter = nafter;
  memcpy(o->after, after, nafter * sizeof *after);
  return t;
}

static void *node_alloc(void *ctx, unsigned node, const tdm_buffer *b, size_t bytes) {
  (void)ctx;
  (void)node;
  (void)b;
  return calloc(1, bytes);
}

static void node_free(void *ctx, unsigned node, void *mem) {
  (void)ctx;
  (void)node;
  assert_true(nfreed < sizeof freed / sizeof freed[0]);
  freed[nfreed++] = mem; /* a copy not landed yet may read or write it */
}

static void use(tdm_token t) {
  assert_true(t > 0 && t <= ntok);
  assert_true(refs[t] > 0); /* not released already */
}

static bool node_copy(void *ctx, unsigned node, bool to_node, const tdm_copy *c,
                      const tdm_token *after, unsigned nafter, tdm_token *done) {
  (void)ctx;
  assert_true(node > 0 && node < NNODES);
  for (unsigned i = 0; i < nafter; i++)
    use(after[i]);
  copies++;
  *done = later(after, nafter, false);
  pending_op *o = &ops_of[*done];
  if (fail_at && --fail_at == 0) /* as a copy that fails once started */
    o->failed = true;
  o->to_node = to_node;
  o->host = *c->host;
  o->mem = c->mem;
  o->pitch = c->pitch;
  if (land_at_once)
    land(*done);
  return true;
}

/* Copies between the two devices: each on a link of its own to the
 * host, and straight between them at that speed. */
static unsigned peer_copies;

static double node_peer_time(void *ctx, unsigned from, unsigned to, uint64_t bytes) {
  (void)ctx;
  assert_true(from > 0 && from < NNODES && to > 0 && to < NNODES && from != to);
  return 1e-6 + (double)bytes * 1e-9;
}

static bool node_peer_copy(void *ctx, unsigned from, unsigned to, void *from_mem, void *to_mem,
                           size_t bytes, const tdm_token *after, unsigned nafter,
                           tdm_token *done) {
  (void)ctx;
  assert_true(from > 0 && from < NNODES && to > 0 && to < NNODES && from != to);
  assert_non_null(from_mem);
  assert_non_null(to_mem);
  for (unsigned i = 0; i < nafter; i++)
    use(after[i]);
  copies++;
  peer_copies++;
  *done = later(after, nafter, false);
  pending_op *o = &ops_of[*done];
  if (fail_at && --fail_at == 0)
    o->failed = true;
  o->from = from_mem;
  o->mem = to_mem;
  o->bytes = bytes;
  if (land_at_once)
    land(*done);
  return true;
}

static tdm_token node_join(void *ctx, const tdm_token *ts, unsigned n) {
  (void)ctx;
  for (unsigned i = 0; i < n; i++)
    use(ts[i]);
  return n ? later(ts, n, true) : 0;
}

static bool node_retain(void *ctx, tdm_token t) {
  (void)ctx;
  use(t);
  refs[t]++;
  return true;
}

static void node_release(void *ctx, tdm_token t) {
  (void)ctx;
  use(t);
  refs[t]--;
}

static bool node_test(void *ctx, tdm_token t) {
  (void)ctx;
  use(t);
  return !ops_of[t].pending;
}

static void node_wait(void *ctx, const tdm_token *ts, unsigned n) {
  (void)ctx;
  for (unsigned i = 0; i < n; i++) {
    use(ts[i]);
    land(ts[i]);
  }
}

static bool node_failed(void *ctx, tdm_token t) {
  (void)ctx;
  use(t);
  return ops_of[t].failed && !ops_of[t].pending; /* known once it completed */
}

static double node_link_time(void *ctx, unsigned node, uint64_t bytes) {
  (void)ctx;
  (void)node;
  return 1e-6 + (double)bytes * 1e-9;
}

#define MODEL_OPS                                                                          \
  .alloc = node_alloc, .free = node_free, .copy = node_copy, .join = node_join,            \
  .retain = node_retain, .release = node_release, .test = node_test, .wait = node_wait,    \
  .link_time = node_link_time

static const tdm_node_ops ops = {MODEL_OPS};
/* The same, with copies that can fail (fail_at). */
static const tdm_node_ops failing_ops = {MODEL_OPS, .failed = node_failed};
/* The same two, with copies between the devices. */
#define PEER_OPS .peer_time = node_peer_time, .peer_copy = node_peer_copy
static const tdm_node_ops peer_ops = {MODEL_OPS, PEER_OPS};
static const tdm_node_ops failing_peer_ops = {MODEL_OPS, .failed = node_failed, PEER_OPS};

/* ---- the model ------------------------------------------------------------- */

typedef struct {
  tdm_runtime *rt; /* for handles, partitions and their tiles */
  tdm_nodes nodes;
  uint64_t data[ROWS * LD];
  uint64_t truth[ROWS * LD]; /* the current contents, element by element */
  uint64_t version;
  tdm_handle *m;
  bool parted;
  tdm_handle *all[64]; /* every tile made, to forget them here */
  unsigned nall;
} world;

/* The handles an event may name now: the matrix, or its two tiles. */
static unsigned handles(world *w, tdm_handle **hs) {
  if (!w->parted) {
    hs[0] = w->m;
    return 1;
  }
  hs[0] = tdm_matrix_tile(w->m, 0, 0);
  hs[1] = tdm_matrix_tile(w->m, 1, 0);
  return 2;
}

/* Element (r, c) of h on node: the host's memory or the node's copy. */
static uint64_t *at(tdm_handle *h, unsigned node, size_t r, size_t c) {
  if (node == 0)
    return (uint64_t *)h->buf.ptr + r * h->buf.ld + c;
  return (uint64_t *)h->coh.rep[node].mem + r * h->buf.ny + c;
}

static size_t offset(world *w, tdm_handle *h) {
  return (size_t)((uint64_t *)h->buf.ptr - w->data);
}

/* One try of an access: false when it could not be made or a copy it
 * waited for failed (then, as a task's try that failed, the copies that
 * failed are forgotten where another node holds h, and a write prepared
 * is over). */
static bool attempt(world *w, tdm_handle *h, unsigned node, unsigned mode) {
  tdm_tokens ts;
  tdm__tokens_init(&ts);
  tdm__coh_lock(&h->coh);
  bool ok = node == 0 || tdm__mem_get(&w->nodes, h, node, NULL) != NULL;
  ok = ok && tdm__coh_access(&w->nodes, h, node, mode, UINT32_MAX, &ts, NULL);
  tdm__coh_unlock(&h->coh);
  ops.wait(NULL, ts.v, ts.n); /* as a task waits for its inputs */
  for (unsigned i = 0; i < ts.n; i++)
    ok &= !ops_of[ts.v[i]].failed;
  tdm__tokens_release(&w->nodes, &ts);
  tdm__coh_lock(&h->coh);
  if (!ok)
    tdm__coh_try_failed(&w->nodes, h, mode, node == 0);
  tdm__coh_unlock(&h->coh);
  tdm__coh_reap(&w->nodes);
  return ok;
}

static void prepare(world *w, tdm_handle *h, unsigned node, unsigned mode) {
  assert_true(attempt(w, h, node, mode));
}

static void read_on(world *w, tdm_handle *h, unsigned node) {
  prepare(w, h, node, TDM_R);
  size_t off = offset(w, h);
  for (size_t r = 0; r < h->buf.nx; r++)
    for (size_t c = 0; c < h->buf.ny; c++)
      if (*at(h, node, r, c) != w->truth[off + r * LD + c])
        fail_msg("node %u holds a stale element (%zu, %zu) of a %zux%zu handle", node, r, c,
                 h->buf.nx, h->buf.ny);
}

/* A write prepared on node runs: new contents, recorded. */
static void written_on(world *w, tdm_handle *h, unsigned node) {
  size_t off = offset(w, h);
  w->version++;
  for (size_t r = 0; r < h->buf.nx; r++)
    for (size_t c = 0; c < h->buf.ny; c++)
      *at(h, node, r, c) = w->truth[off + r * LD + c] = w->version * 1000 + r * LD + c;
  tdm__coh_lock(&h->coh);
  tdm__coh_written(&w->nodes, h, node, node ? new_token() : 0, NULL, true);
  tdm__coh_unlock(&h->coh);
}

static void write_on(world *w, tdm_handle *h, unsigned node) {
  prepare(w, h, node, TDM_W);
  written_on(w, h, node);
}

/* Drops every copy on a device node, as the memory manager would. */
static void evict(world *w, unsigned node) {
  tdm_handle *hs[2];
  unsigned n = handles(w, hs);
  tdm_handle *list[3] = {w->m, n > 1 ? hs[0] : NULL, n > 1 ? hs[1] : NULL};
  for (unsigned i = 0; i < 3; i++) {
    tdm_handle *h = list[i];
    if (!h || !h->coh.rep || !h->coh.rep[node].mem)
      continue;
    tdm__coh_lock(&h->coh);
    int e;
    /* a copy home that is landing: asked again once it landed */
    while ((e = tdm__coh_evict(&w->nodes, h, node)) == TDM_EVICT_LATER)
      for (unsigned n = 0; n < NNODES; n++)
        land(h->coh.rep[n].fill);
    assert_int_equal(e, TDM_EVICTED);
    tdm__mem_drop(&w->nodes, h, node);
    tdm__coh_unlock(&h->coh);
  }
}

static void partition(world *w) {
  assert_int_equal(tdm_matrix_partition(w->m, 2, COLS, 0), TDM_OK);
  w->parted = true;
  tdm_handle *hs[2];
  handles(w, hs);
  assert_true(w->nall + 2 <= sizeof w->all / sizeof w->all[0]);
  w->all[w->nall++] = hs[0];
  w->all[w->nall++] = hs[1];
}

/* Event e of the alphabet: 0-5 read (handle e/3, node e%3), 6-11 write,
 * 12-13 evict node 1 or 2, 14 partition or unpartition. */
#define NEVENTS 15

/* Event e in words, for messages (before it happens). */
static const char *event_name(world *w, unsigned e) {
  static char buf[48];
  if (e < 12)
    snprintf(buf, sizeof buf, "%s(%s%u,node%u)", e < 6 ? "read" : "write",
             w->parted ? "tile" : "matrix", w->parted ? (e % 6) / 3 : 0, e % 3);
  else if (e < 14)
    snprintf(buf, sizeof buf, "evict(node%u)", 1 + (e - 12));
  else
    snprintf(buf, sizeof buf, "%s", w->parted ? "unpartition" : "partition");
  return buf;
}

static void event(world *w, unsigned e) {
  tdm_handle *hs[2];
  unsigned n = handles(w, hs);
  if (e < 12) {
    tdm_handle *h = hs[(e % 6) / 3 % n];
    if (e < 6)
      read_on(w, h, e % 3);
    else
      write_on(w, h, e % 3);
  } else if (e < 14) {
    evict(w, 1 + (e - 12));
  } else if (w->parted) {
    assert_int_equal(tdm_matrix_unpartition(w->m, 0), TDM_OK);
    w->parted = false;
  } else {
    partition(w);
  }
}

static void begin(world *w) {
  memset(refs, 0, sizeof refs);
  ntok = 0;
  nfreed = 0;
  seq_text[0] = 0;
  w->version = 0;
  w->parted = false;
  w->nall = 0;
  for (size_t i = 0; i < ROWS * LD; i++)
    w->data[i] = w->truth[i] = i;
  assert_int_equal(tdm_register_matrix(w->rt, w->data, LD, ROWS, COLS, sizeof(uint64_t), &w->m),
                   TDM_OK);
}

/* The end: everything read back home, state dropped, tokens balanced. */
static void end(world *w) {
  if (w->parted) {
    assert_int_equal(tdm_matrix_unpartition(w->m, 0), TDM_OK);
    w->parted = false;
  }
  read_on(w, w->m, 0);
  /* every copy lands, the newest first (each after what it comes
   * after): none may change what the host holds now */
  for (tdm_token t = ntok; t >= 1; t--)
    land(t);
  for (size_t r = 0; r < ROWS; r++)
    for (size_t c = 0; c < COLS; c++)
      if (w->data[r * LD + c] != w->truth[r * LD + c])
        fail_msg("a copy that landed late overwrote element (%zu, %zu) of the host%s", r, c, seq_text);
  /* nor of a device still holding the version */
  for (unsigned n = 1; n < NNODES && !w->m->coh.damaged; n++)
    for (size_t r = 0; r < ROWS && tdm__nodeset_has(&w->m->coh.valid, n); r++)
      for (size_t c = 0; c < COLS; c++)
        if (*at(w->m, n, r, c) != w->truth[r * LD + c])
          fail_msg("a copy that landed late overwrote element (%zu, %zu) of node %u%s", r, c,
                   n, seq_text);
  for (unsigned i = 0; i < w->nall; i++)
    tdm__coh_forget(&w->nodes, w->all[i], true);
  tdm__coh_forget(&w->nodes, w->m, true);
  tdm__coh_reap(&w->nodes);
  for (unsigned t = 1; t <= ntok; t++)
    if (refs[t] != 0)
      fail_msg("token %u: %d references left", t, refs[t]);
  for (unsigned i = 0; i < nfreed; i++)
    free(freed[i]);
  nfreed = 0;
  assert_int_equal(tdm_handle_unregister(w->m), TDM_OK);
}

static void setup_world_with(world *w, const tdm_node_ops *o) {
  memset(w, 0, sizeof *w);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  /* devices, so that tiles take their contents when first used; the
   * model's own nodes stand for them */
  cfg.sim = "a:latency=1us,bandwidth=1G;b:latency=1us,bandwidth=1G";
  cfg.sim_time_scale = 1;
  assert_int_equal(tdm_runtime_create(&cfg, &w->rt), TDM_OK);
  uint64_t limits[NNODES - 1] = {UINT64_MAX, UINT64_MAX};
  assert_int_equal(tdm__nodes_init(&w->nodes, NULL, o, NULL, NNODES, limits), TDM_OK);
}

static void setup_world(world *w) {
  setup_world_with(w, &ops);
}

static void teardown_world(world *w) {
  tdm__nodes_fini(&w->nodes);
  tdm_runtime_destroy(w->rt);
}

/* state: the node operations (NULL: ops). */
static void test_every_sequence(void **state) {
  static world w;
  setup_world_with(&w, *state ? *state : &ops);
  unsigned peers = peer_copies;
  const unsigned len = 5;
  unsigned long total = 1, runs = 0;
  for (unsigned i = 0; i < len; i++)
    total *= NEVENTS;
  for (unsigned long s = 0; s < total; s++) {
    begin(&w);
    for (unsigned long x = s, i = 0; i < len; i++, x /= NEVENTS) {
      snprintf(seq_text + strlen(seq_text), sizeof seq_text - strlen(seq_text), " %s",
               event_name(&w, (unsigned)(x % NEVENTS)));
      event(&w, (unsigned)(x % NEVENTS));
    }
    end(&w);
    runs++;
  }
  printf("%lu sequences of %u events, %u copies\n", runs, len, copies);
  /* with copies between devices, some went straight */
  assert_int_equal(peer_copies > peers, *state == &peer_ops);
  teardown_world(&w);
}

static void test_long_random_sequences(void **state) {
  static world w;
  setup_world_with(&w, *state ? *state : &ops);
  uint64_t x = 88172645463325252ull;
  for (unsigned s = 0; s < 20000; s++) {
    begin(&w);
    for (unsigned i = 0; i < 24; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      event(&w, (unsigned)(x % NEVENTS));
    }
    end(&w);
  }
  teardown_world(&w);
}

/* Long random sequences with copies between devices, where copies fail:
 * before an event, one of its first two copies fails now and then. A
 * read or write whose copy failed is tried again, as a task's try would
 * be, and must then hold the current contents; an eviction whose copy
 * home failed keeps the buffer. Every read sees the version, and the end
 * finds the host's memory current. */
static void test_random_sequences_copies_fail(void **state) {
  (void)state;
  static world w;
  setup_world_with(&w, &failing_peer_ops);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  unsigned failed = 0, peers = peer_copies;
  for (unsigned s = 0; s < 5000; s++) {
    begin(&w);
    for (unsigned i = 0; i < 24; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      unsigned e = (unsigned)(x % NEVENTS);
      fail_at = (x >> 32) % 5 == 0 ? 1 + (unsigned)(x >> 40) % 2 : 0;
      tdm_handle *hs[2];
      unsigned n = handles(&w, hs);
      if (e < 12) {
        tdm_handle *h = hs[(e % 6) / 3 % n];
        unsigned node = e % 3, mode = e < 6 ? TDM_R : TDM_W;
        if (!attempt(&w, h, node, mode)) {
          failed++;
          fail_at = 0;
        }
        if (mode == TDM_R)
          read_on(&w, h, node); /* (tried again when the first failed) */
        else
          write_on(&w, h, node);
      } else if (e < 14) {
        unsigned node = 1 + (e - 12);
        tdm_handle *list[3] = {w.m, n > 1 ? hs[0] : NULL, n > 1 ? hs[1] : NULL};
        for (unsigned k = 0; k < 3; k++) {
          tdm_handle *h = list[k];
          if (!h || !h->coh.rep || !h->coh.rep[node].mem)
            continue;
          tdm__coh_lock(&h->coh);
          int r;
          while ((r = tdm__coh_evict(&w.nodes, h, node)) == TDM_EVICT_LATER)
            for (unsigned m = 0; m < NNODES; m++)
              land(h->coh.rep[m].fill);
          if (r == TDM_EVICTED)
            tdm__mem_drop(&w.nodes, h, node);
          tdm__coh_unlock(&h->coh);
        }
      } else {
        event(&w, e);
      }
      fail_at = 0;
    }
    end(&w);
  }
  printf("%u accesses tried again after a copy failed\n", failed);
  assert_true(failed > 100);
  assert_true(peer_copies - peers > 1000);
  teardown_world(&w);
}

/* A version only device 1 holds, read on device 2: one copy, straight
 * between the devices; the host stays invalid until it reads. When that
 * copy fails, the read's try fails, device 2 holds nothing, device 1
 * still the version, and the try again copies straight again. */
static void test_copy_between_devices(void **state) {
  (void)state;
  static world w;
  setup_world_with(&w, &failing_peer_ops);
  for (unsigned fail = 0; fail < 2; fail++) {
    begin(&w);
    write_on(&w, w.m, 1);
    unsigned before = copies, peers = peer_copies;
    fail_at = fail;
    if (fail) {
      assert_false(attempt(&w, w.m, 2, TDM_R));
      assert_int_equal(fail_at, 0);
      assert_false(tdm__nodeset_has(&w.m->coh.valid, 2));
      assert_true(tdm__nodeset_has(&w.m->coh.valid, 1));
    }
    read_on(&w, w.m, 2);
    assert_int_equal(copies - before, 1 + fail);
    assert_int_equal(peer_copies - peers, 1 + fail);
    assert_false(tdm__nodeset_has(&w.m->coh.valid, 0));
    assert_true(tdm__nodeset_has(&w.m->coh.valid, 1));
    read_on(&w, w.m, 0); /* from one of them */
    assert_int_equal(copies - before, 2 + fail);
    end(&w);
  }
  teardown_world(&w);
}

/* A matrix's copy on a device stays valid across a partition whose tiles
 * were only read: reading it there again copies nothing (a task from
 * before the partition may still be reading that copy). A tile written
 * makes it stale: the next read there copies the matrix again. */
static void test_unwritten_tiles_keep_copies(void **state) {
  (void)state;
  static world w;
  setup_world(&w);
  for (unsigned written = 0; written < 2; written++) {
    begin(&w);
    read_on(&w, w.m, 1);
    partition(&w);
    tdm_handle *hs[2] = {NULL, NULL};
    assert_int_equal(handles(&w, hs), 2);
    read_on(&w, hs[0], 2);
    read_on(&w, hs[1], 0);
    if (written)
      write_on(&w, hs[1], 0);
    assert_int_equal(tdm_matrix_unpartition(w.m, 0), TDM_OK);
    w.parted = false;
    unsigned before = copies;
    read_on(&w, w.m, 1);
    assert_int_equal(copies - before, written ? 1 : 0);
    end(&w);
  }
  teardown_world(&w);
}

/* A copy home an eviction started (not ordered by the task graph) may
 * still be reading a device's copy when a task writes that copy: the
 * write waits for it. Here the run fails and is undone, so the host's
 * memory, where the copy landed, holds the version again: had the copy
 * landed after the run, it would hold what the failed run wrote. */
static void test_write_waits_for_eviction_copy(void **state) {
  (void)state;
  static world w;
  setup_world(&w);
  begin(&w);
  write_on(&w, w.m, 1); /* node 1 holds the only copy */
  tdm_handle *h = w.m;
  tdm__coh_lock(&h->coh);
  assert_int_equal(tdm__coh_evict(&w.nodes, h, 1), TDM_EVICT_LATER); /* its copy home starts */
  tdm__coh_unlock(&h->coh);
  prepare(&w, h, 1, TDM_RW); /* lands what the write comes after */
  for (size_t r = 0; r < h->buf.nx; r++) /* a run that fails halfway */
    for (size_t c = 0; c < h->buf.ny; c++)
      *at(h, 1, r, c) = 0xbad;
  tdm__coh_lock(&h->coh);
  assert_true(tdm__coh_write_failed(&w.nodes, h, 1, false));
  tdm__coh_unlock(&h->coh);
  read_on(&w, h, 0);
  end(&w);
  teardown_world(&w);
}

/* An unpartitioned matrix whose tiles only devices hold gathers them on
 * its first use; a copy home that fails there is made again from the
 * tile's device (the tile still holds its version), not left as the
 * matrix's contents: the read sees every tile's writes. */
static void test_gather_copy_fails(void **state) {
  (void)state;
  static world w;
  setup_world_with(&w, &failing_ops);
  w.nodes.retries = 1;
  for (unsigned which = 1; which <= 2; which++) { /* the first copy fails, or the second */
    begin(&w);
    partition(&w);
    tdm_handle *hs[2] = {NULL, NULL};
    assert_int_equal(handles(&w, hs), 2);
    write_on(&w, hs[0], 1);
    write_on(&w, hs[1], 2);
    assert_int_equal(tdm_matrix_unpartition(w.m, 0), TDM_OK);
    w.parted = false;
    unsigned before = copies;
    fail_at = which;
    read_on(&w, w.m, 0);
    assert_int_equal(fail_at, 0);     /* it failed */
    assert_int_equal(copies - before, 3); /* and was made again */
    end(&w);
  }
  teardown_world(&w);
}

/* A tile that only a device holds, whose copy home (a writeback's, an
 * eviction's) failed, comes home from that device when its matrix
 * gathers it, also without retries (nodes->retries 0): the failed copy is
 * no version, and the gather's copy does not come after it. Before, the
 * gather took the failed copy for its own and gave up: the matrix's
 * version reported lost where a device held it. */
static void test_gather_after_failed_copy_home(void **state) {
  (void)state;
  static world w;
  setup_world_with(&w, &failing_ops);
  w.nodes.retries = 0;
  begin(&w);
  partition(&w);
  tdm_handle *hs[2] = {NULL, NULL};
  assert_int_equal(handles(&w, hs), 2);
  write_on(&w, hs[0], 1);
  tdm__coh_lock(&hs[0]->coh);
  fail_at = 1;
  assert_int_equal(tdm__coh_evict(&w.nodes, hs[0], 1), TDM_EVICT_LATER); /* home, failing */
  tdm__coh_unlock(&hs[0]->coh);
  land(hs[0]->coh.rep[0].fill);
  assert_int_equal(fail_at, 0);
  assert_int_equal(tdm_matrix_unpartition(w.m, 0), TDM_OK);
  w.parted = false;
  read_on(&w, w.m, 0);
  end(&w);
  teardown_world(&w);
}

/* A matrix only node `holder` holds is partitioned; the first access to
 * tile `tile` (mode) fails, as the matrix's copy home for it fails; hs
 * gets the two tiles. */
static void home_failed_for_tile(world *w, unsigned holder, unsigned tile, unsigned mode,
                                 tdm_handle *hs[2]) {
  setup_world_with(w, &failing_ops);
  begin(w);
  write_on(w, w->m, holder);
  partition(w);
  assert_int_equal(handles(w, hs), 2);
  fail_at = 1;
  assert_false(attempt(w, hs[tile], 0, mode)); /* the matrix's copy home failed */
  assert_int_equal(fail_at, 0);
}

/* A matrix only a device holds is partitioned; the copy home its first
 * tile's first use (a write in the host's memory) starts fails, and the
 * write is tried again. The other tile then takes its rectangle from the
 * device through memory aside (a copy of the whole matrix home would
 * write over the first tile's), and an eviction of the matrix's copy,
 * the last one held, does not copy it home over the tiles either. */
static void test_tile_taken_after_failed_copy(void **state) {
  (void)state;
  static world w;
  tdm_handle *hs[2] = {NULL, NULL};
  home_failed_for_tile(&w, 1, 1, TDM_W, hs);
  write_on(&w, hs[1], 0);
  read_on(&w, hs[0], 0);
  read_on(&w, hs[1], 0);
  tdm__coh_lock(&w.m->coh);
  assert_int_equal(tdm__coh_evict(&w.nodes, w.m, 1), TDM_EVICT_NOT);
  tdm__coh_unlock(&w.m->coh);
  read_on(&w, hs[1], 0);
  assert_int_equal(tdm_matrix_unpartition(w.m, 0), TDM_OK);
  w.parted = false;
  end(&w); /* the matrix read home, and every copy landed */
  teardown_world(&w);
}

/* A matrix only a device holds is partitioned; its copy home for the
 * first tile fails, the tiles take their rectangles through memory
 * aside, and are only read. After the unpartition the matrix is
 * unchanged, and its host memory holds its version, assembled by the
 * tiles: the gather makes it valid there. Copying it home again (as the
 * first use of the matrix on another device did) would write into the
 * memory the tiles' readers may still be reading, and a copy that failed
 * there would leave them garbage (test-coherence-dag saw such reads). */
static void test_unwritten_tiles_assemble_the_host(void **state) {
  (void)state;
  static world w;
  tdm_handle *hs[2] = {NULL, NULL};
  home_failed_for_tile(&w, 1, 0, TDM_R, hs);
  read_on(&w, hs[0], 0);
  read_on(&w, hs[1], 0);
  assert_int_equal(tdm_matrix_unpartition(w.m, 0), TDM_OK);
  w.parted = false;
  unsigned before = copies;
  read_on(&w, w.m, 2); /* the gather, then from the host to node 2 */
  assert_int_equal(copies - before, 1);
  assert_true(tdm__nodeset_has(&w.m->coh.valid, 0));
  end(&w);
  teardown_world(&w);
}

/* A reader of the matrix from before its partition runs after a tile
 * took its rectangle through a copy home that failed, and is tried
 * again: the matrix comes home aside, into the rectangles the tiles do
 * not hold (the tile whose copy failed takes its rectangle again), and
 * the reader reads the matrix's version. */
static void test_reader_before_partition_retried(void **state) {
  (void)state;
  static world w;
  tdm_handle *hs[2] = {NULL, NULL};
  home_failed_for_tile(&w, 2, 0, TDM_R, hs);
  assert_false(attempt(&w, w.m, 0, TDM_R)); /* the same failed copy */
  read_on(&w, w.m, 0);
  read_on(&w, hs[0], 0);
  read_on(&w, hs[1], 1);
  write_on(&w, hs[0], 0);
  assert_int_equal(tdm_matrix_unpartition(w.m, 0), TDM_OK);
  w.parted = false;
  end(&w);
  teardown_world(&w);
}

/* A write in the host's memory that does not read the handle replaces a
 * version only a device holds, and its try fails (another of its inputs
 * did not arrive): the device still holds the version, and the host reads
 * it, whatever the try left in the host's memory. While the write is
 * under way, an eviction does not copy the device's copy home over it.
 * (The write dropped the device's copy when it was prepared: a write that
 * failed for good left the host's older contents as the handle's, which
 * tdm_handle_unregister reported as the last version produced.) A CPU
 * task's write is announced only when it surely runs (TDM_HOST_LATER):
 * an eviction in between copies the version home, and the write waits
 * for that copy to land before it writes. */
static void test_failed_host_write_keeps_device_version(void **state) {
  (void)state;
  static world w;
  setup_world_with(&w, &failing_ops);
  begin(&w);
  tdm_handle *h = w.m;
  write_on(&w, h, 1); /* node 1 holds the only copy */
  prepare(&w, h, 0, TDM_W);
  tdm__coh_lock(&h->coh);
  assert_int_equal(tdm__coh_evict(&w.nodes, h, 1), TDM_EVICT_NOT);
  for (size_t r = 0; r < h->buf.nx; r++) /* a run that failed halfway, not undone */
    for (size_t c = 0; c < h->buf.ny; c++)
      *at(h, 0, r, c) = 0xbad;
  tdm__coh_try_failed(&w.nodes, h, TDM_W, false);
  tdm__coh_unlock(&h->coh);
  read_on(&w, h, 0); /* node 1's version */

  write_on(&w, h, 2); /* node 2 holds the only copy */
  prepare(&w, h, 0, TDM_W | TDM_HOST_LATER);
  tdm__coh_lock(&h->coh);
  assert_int_equal(tdm__coh_evict(&w.nodes, h, 2), TDM_EVICT_LATER); /* a copy home starts */
  tdm_token landing = tdm__coh_host_writing(&w.nodes, h);
  tdm__coh_unlock(&h->coh);
  assert_true(landing != 0);
  ops.wait(NULL, &landing, 1);
  ops.release(NULL, landing);
  written_on(&w, h, 0); /* had the copy landed later, end() would see it */
  end(&w);
  teardown_world(&w);
}

/* A write on the host that does not read the handle, whose version a
 * lineage record reads (pinned here by hand) and only a device holds:
 * the version comes home first, and that copy fails, complete at once
 * (as an emulated device's copies). The try fails, and the device still
 * holds the version: the host is not valid. (The write's preparation
 * forgot the failed copy, so that the host stayed valid with what the
 * copy wrote, which the next read took as the version, and which
 * tdm_handle_unregister left as the last version produced.) */
static void test_pinned_version_home_fails(void **state) {
  (void)state;
  static world w;
  setup_world_with(&w, &failing_ops);
  begin(&w);
  tdm_handle *h = w.m;
  write_on(&w, h, 1); /* node 1 holds the only copy */
  tdm__coh_lock(&h->coh);
  h->coh.pins = calloc(1, sizeof *h->coh.pins);
  assert_non_null(h->coh.pins);
  h->coh.pins[0] = (tdm_pin){.ver = h->coh.ver, .count = 1};
  h->coh.npins = h->coh.pins_cap = 1;
  tdm__coh_unlock(&h->coh);
  land_at_once = true;
  fail_at = 1;
  assert_false(attempt(&w, h, 0, TDM_W));
  land_at_once = false;
  assert_int_equal(fail_at, 0); /* the copy home failed */
  assert_false(tdm__nodeset_has(&h->coh.valid, 0));
  read_on(&w, h, 0); /* node 1's version */
  tdm__coh_lock(&h->coh);
  free(h->coh.pins[0].copy);
  free(h->coh.pins);
  h->coh.pins = NULL;
  h->coh.npins = h->coh.pins_cap = 0;
  tdm__coh_unlock(&h->coh);
  end(&w);
  teardown_world(&w);
}

/* The matrix's version 1 on node 1 alone, whose copy home (an
 * eviction's) failed and landed. */
static tdm_handle *home_failed_by_eviction(world *w) {
  setup_world_with(w, &failing_ops);
  begin(w);
  tdm_handle *h = w->m;
  write_on(w, h, 1);
  tdm__coh_lock(&h->coh);
  fail_at = 1;
  assert_int_equal(tdm__coh_evict(&w->nodes, h, 1), TDM_EVICT_LATER); /* home, failing */
  tdm__coh_unlock(&h->coh);
  land(h->coh.rep[0].fill);
  assert_int_equal(fail_at, 0);
  return h;
}

/* A copy home that failed leaves no version in the host's memory, even
 * once its token is forgotten: a version only node 1 holds starts home
 * (an eviction) and that copy fails; node 1 then writes a newer version
 * (not waiting for the failed copy), and a write on the host forgets the
 * failed token. The host's memory must not count as holding the older
 * version: lineage read it as such (the garbage the copy left) and
 * replayed tasks on it, a wrong result reported as success. */
static void test_failed_copy_home_forgotten(void **state) {
  (void)state;
  static world w;
  tdm_handle *h = home_failed_by_eviction(&w);
  uint32_t v1 = h->coh.ver;
  write_on(&w, h, 1); /* version 2 on node 1; the failed copy not waited for */
  prepare(&w, h, 0, TDM_W | TDM_HOST_LATER); /* forgets the failed token */
  uint64_t got[ROWS * COLS];
  assert_int_equal(tdm__coh_host_read(&w.nodes, h, v1, got), 0);
  written_on(&w, h, 0);
  end(&w);
  teardown_world(&w);
}

/* Lineage reads a matrix's version a record read, which only a device
 * holds, while its tiles hold its host memory and one of them was
 * written: from the device, aside (a copy home would go over the
 * written tile; it was refused, and the version reported lost). */
static void test_lineage_reads_device_while_lent(void **state) {
  (void)state;
  static world w;
  tdm_handle *hs[2] = {NULL, NULL};
  home_failed_for_tile(&w, 2, 0, TDM_W, hs);
  uint64_t before[ROWS * COLS], got[ROWS * COLS];
  for (size_t r = 0; r < ROWS; r++)
    for (size_t c = 0; c < COLS; c++)
      before[r * COLS + c] = w.truth[r * LD + c];
  write_on(&w, hs[0], 0);
  assert_true(tdm__coh_device_read(&w.nodes, w.m, w.m->coh.ver, got));
  assert_memory_equal(got, before, sizeof got);
  assert_false(tdm__coh_device_read(&w.nodes, w.m, w.m->coh.ver - 1, got)); /* not held */
  read_on(&w, hs[0], 0); /* the tile's write, in place */
  end(&w);
  teardown_world(&w);
}

/* A version only node 1 holds; its copy home fails (an eviction's);
 * then a write on node 1 that reads it runs, writes, and fails. The
 * failed copy home was no input of that run: the run wrote over the only
 * copy, and without lineage the version is lost (told), never node 1's
 * memory taken for it. (It was: the run was taken for one that never
 * started, as when a copy home it waited for fails, and its result was
 * read as the version before it: a wrong result reported right.) */
static void test_failed_run_after_failed_copy_home(void **state) {
  (void)state;
  static world w;
  tdm_handle *h = home_failed_by_eviction(&w);
  prepare(&w, h, 1, TDM_RW);
  for (size_t r = 0; r < ROWS; r++) /* the run writes, then fails */
    for (size_t c = 0; c < COLS; c++)
      *at(h, 1, r, c) = 0xdeadu;
  tdm__coh_lock(&h->coh);
  bool kept = tdm__coh_write_failed(&w.nodes, h, 1, false);
  tdm__coh_unlock(&h->coh);
  assert_false(kept);
  assert_false(tdm__nodeset_has(&h->coh.valid, 1) && !h->coh.damaged);
  write_on(&w, h, 0); /* a version made afresh */
  end(&w);
  teardown_world(&w);
}

/* Lineage makes the version of a matrix only a device held, while its
 * tiles hold its host memory (the matrix's copy home for a tile's first
 * use failed): it goes into the rectangles the tiles do not hold, whose
 * tiles take it from there (no copy), and into none other: `junk` in
 * rows [0, junk_rows) of what is installed must land nowhere. (Refused
 * while the tiles held that memory, the version was reported lost.) */
static void install_while_lent(world *w, tdm_handle *hs[2], size_t junk_rows) {
  uint64_t made[ROWS * COLS];
  for (size_t r = 0; r < ROWS; r++)
    for (size_t c = 0; c < COLS; c++)
      made[r * COLS + c] = r < junk_rows ? 0xdeadu : w->truth[r * LD + c];
  assert_true(w->m->coh.lent != 0);
  assert_false(tdm__nodeset_has(&w->m->coh.valid, 0));
  assert_true(tdm__coh_host_install(&w->nodes, w->m, w->m->coh.ver, made));
  unsigned before = copies;
  read_on(w, hs[1], 0);
  read_on(w, hs[0], 0);
  assert_int_equal(copies, before);
}

/* No tile written: the matrix holds its version on the host again, and a
 * reader of it from before the partition reads it there. */
static void test_lineage_install_while_lent(void **state) {
  (void)state;
  static world w;
  tdm_handle *hs[2] = {NULL, NULL};
  home_failed_for_tile(&w, 2, 0, TDM_R, hs);
  assert_false(attempt(&w, w.m, 0, TDM_R)); /* the same failed copy, forgotten */
  install_while_lent(&w, hs, 0);
  assert_true(tdm__nodeset_has(&w.m->coh.valid, 0));
  unsigned before = copies;
  read_on(&w, w.m, 0);
  assert_int_equal(copies, before);
  write_on(&w, hs[1], 1);
  end(&w);
  teardown_world(&w);
}

/* The first tile written since (its rectangle through memory aside): the
 * other tile takes its rectangle from what lineage made, the written
 * one keeps its own, and the matrix is not valid on the host. */
static void test_lineage_install_after_tile_written(void **state) {
  (void)state;
  static world w;
  tdm_handle *hs[2] = {NULL, NULL};
  home_failed_for_tile(&w, 2, 0, TDM_W, hs);
  write_on(&w, hs[0], 0);
  install_while_lent(&w, hs, 2);
  assert_false(tdm__nodeset_has(&w.m->coh.valid, 0));
  end(&w);
  teardown_world(&w);
}

static void test_nodeset_past_64(void **state) {
  (void)state;
  tdm_nodeset s = tdm__nodeset_of(0);
  for (unsigned n = 1; n < TDM_MAX_NODES; n += 7)
    tdm__nodeset_add(&s, n);
  for (unsigned n = 0; n < TDM_MAX_NODES; n++)
    assert_int_equal(tdm__nodeset_has(&s, n), n == 0 || n % 7 == 1);
  assert_int_equal(tdm__nodeset_next(&s, 1), 1);
  assert_int_equal(tdm__nodeset_next(&s, 65), 71);
  tdm_nodeset one = tdm__nodeset_of(100);
  assert_true(tdm__nodeset_only(&one, 100));
  assert_false(tdm__nodeset_only(&one, 36)); /* 100 - 64: another word */
  tdm__nodeset_del(&one, 100);
  assert_true(tdm__nodeset_empty(&one));
  assert_int_equal(tdm__nodeset_next(&one, 0), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nodeset_past_64),
      cmocka_unit_test(test_every_sequence),
      cmocka_unit_test_prestate(test_every_sequence, (void *)&peer_ops),
      cmocka_unit_test(test_long_random_sequences),
      cmocka_unit_test_prestate(test_long_random_sequences, (void *)&peer_ops),
      cmocka_unit_test(test_random_sequences_copies_fail),
      cmocka_unit_test(test_copy_between_devices),
      cmocka_unit_test(test_unwritten_tiles_keep_copies),
      cmocka_unit_test(test_write_waits_for_eviction_copy),
      cmocka_unit_test(test_gather_copy_fails),
      cmocka_unit_test(test_gather_after_failed_copy_home),
      cmocka_unit_test(test_tile_taken_after_failed_copy),
      cmocka_unit_test(test_reader_before_partition_retried),
      cmocka_unit_test(test_unwritten_tiles_assemble_the_host),
      cmocka_unit_test(test_failed_host_write_keeps_device_version),
      cmocka_unit_test(test_pinned_version_home_fails),
      cmocka_unit_test(test_failed_copy_home_forgotten),
      cmocka_unit_test(test_failed_run_after_failed_copy_home),
      cmocka_unit_test(test_lineage_install_while_lent),
      cmocka_unit_test(test_lineage_reads_device_while_lent),
      cmocka_unit_test(test_lineage_install_after_tile_written),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
