/*
 * Coherence: which memory nodes hold the current contents of each handle,
 * and what must be copied for an access (coherence.c), and the memory of
 * each node with its accounting and eviction (memory.c).
 *
 * Node 0 is the host's memory (the application's buffers); node 1 + k is
 * device worker k's own memory, when it has one (a device that works in
 * host memory uses node 0). The state of a handle is the set of nodes
 * holding its current contents ("valid") and, per node, a replica: the
 * backend's buffer there and the completion token of the copy that filled
 * it. The protocol is MSI-like: an access that reads on node n makes n
 * valid (copying from the host; from a device, straight where the
 * backend copies between its devices (peer_copy) and that is quicker,
 * else through the host, which becomes valid too); a
 * write on n leaves n the only valid node. The task graph already orders
 * conflicting accesses, so the state may change when a task's commands are
 * issued, before they complete: a user of a node waits for its fill token.
 *
 * Tiles. A tile's contents are its matrix's until its first use: a new
 * tile has no valid node and takes its rectangle from its matrix then,
 * when the matrix's writers have all finished. After an unpartition, the
 * matrix's contents are in its tiles: its first use gathers them home.
 * Once a tile has taken its rectangle, the matrix's host memory is its
 * tiles' until that gather: nothing copies the whole matrix into it (a
 * copy that fails would write over rectangles the tiles hold, a copy
 * that lands over rectangles they wrote); a tile whose rectangle came
 * from a copy that failed takes it again from a device holding the
 * matrix, through memory aside.
 * A matrix and all its tiles (a family) share one lock, their root's, so
 * that these steps see a consistent state.
 *
 * This module is used with the backends' node operations (backend.h) by
 * the runtime's devices, and with simulated ones by the virtual-time
 * driver, so that the exact tests of virtual time run this same code.
 */
#ifndef TDM_COHERENCE_H
#define TDM_COHERENCE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../backends/backend.h"
#include "../support/spinlock.h"

typedef struct tdm_handle tdm_handle;
typedef struct tdm_runtime tdm_runtime;
typedef struct tdm_lrec tdm_lrec;

/* ---- sets of nodes -------------------------------------------------------- */

#define TDM_MAX_NODES 128 /* the host and up to 64 devices, with room */

typedef struct tdm_nodeset {
  uint64_t w[TDM_MAX_NODES / 64];
} tdm_nodeset;

static inline tdm_nodeset tdm__nodeset_of(unsigned n) {
  tdm_nodeset s = {{0}};
  s.w[n / 64] = UINT64_C(1) << (n % 64);
  return s;
}
static inline bool tdm__nodeset_has(const tdm_nodeset *s, unsigned n) {
  return (s->w[n / 64] >> (n % 64)) & 1;
}
static inline void tdm__nodeset_add(tdm_nodeset *s, unsigned n) {
  s->w[n / 64] |= UINT64_C(1) << (n % 64);
}
static inline void tdm__nodeset_del(tdm_nodeset *s, unsigned n) {
  s->w[n / 64] &= ~(UINT64_C(1) << (n % 64));
}
static inline bool tdm__nodeset_empty(const tdm_nodeset *s) {
  for (unsigned i = 0; i < TDM_MAX_NODES / 64; i++)
    if (s->w[i])
      return false;
  return true;
}
/* The lowest node of s at or after `from`, or -1. */
static inline int tdm__nodeset_next(const tdm_nodeset *s, unsigned from) {
  for (unsigned i = from / 64; i < TDM_MAX_NODES / 64; i++) {
    uint64_t w = s->w[i];
    if (i == from / 64)
      w &= ~UINT64_C(0) << (from % 64);
    if (w)
      return (int)(i * 64 + (unsigned)__builtin_ctzll(w));
  }
  return -1;
}
/* Whether n is the only node of s. */
static inline bool tdm__nodeset_only(const tdm_nodeset *s, unsigned n) {
  tdm_nodeset o = tdm__nodeset_of(n);
  for (unsigned i = 0; i < TDM_MAX_NODES / 64; i++)
    if (s->w[i] != o.w[i])
      return false;
  return true;
}

/* ---- tokens to wait for ----------------------------------------------------- */

/* A growing list of tokens (each a reference) that an access waits for. */
typedef struct tdm_tokens {
  tdm_token *v;
  unsigned n, cap;
  /* 0: the nodes' tokens; else they were given to a backend as its own:
   * 1 + the index of its way (tdm__tokens_for, nodes.c) */
  unsigned way;
  tdm_token inline_v[8];
} tdm_tokens;

static inline void tdm__tokens_init(tdm_tokens *w) {
  w->v = w->inline_v;
  w->n = 0;
  w->way = 0;
  w->cap = sizeof w->inline_v / sizeof w->inline_v[0];
}
struct tdm_nodes;
/* Drops the references w holds and empties it. */
void tdm__tokens_release(const struct tdm_nodes *nodes, tdm_tokens *w);
/* A new reference to t, or 0 after waiting for t when none can be taken
 * (0 for 0). */
tdm_token tdm__token_hold(const struct tdm_nodes *nodes, tdm_token t);

/* ---- the nodes of a runtime ---------------------------------------------------- */

typedef struct tdm_replica tdm_replica;

/* A node's memory (memory.c): buffers counted against a limit and kept in
 * least-recently-used order; under `lock`, a leaf lock (only family locks
 * are tried under it, never waited for). */
typedef struct tdm_memnode {
  pthread_mutex_t lock;
  bool counted;        /* a device's own memory: accounted, evictable */
  uint64_t used, limit;
  tdm_replica *lru_head, *lru_tail;
  _Atomic uint64_t evictions;
} tdm_memnode;

/* The operations of the nodes of one backend (nodes.c). */
typedef struct tdm_node_way {
  const tdm_node_ops *ops;
  void *ctx; /* the backend's, passed to ops */
} tdm_node_way;

typedef struct tdm_nodes {
  /* What the coherence module calls: the one backend's operations, or,
   * when several backends share the nodes, the multiplexer of nodes.c
   * (ctx: the nodes), which passes each call on to the node's backend. */
  const tdm_node_ops *ops;
  void *ctx;
  tdm_node_way ways[TDM_MAX_BACKENDS];
  unsigned nways;
  uint8_t way_of[TDM_MAX_NODES]; /* each node's, an index in ways */
  unsigned n;            /* nodes: 1 + device workers */
  tdm_memnode *mem;      /* per node; [0], the host's, unused */
  tdm_runtime *rt;       /* for messages and allocations; may be NULL */
  /* tdm_config.writeback: before a device writes a handle, the host's
   * copy is made current (tdm__coh_access). */
  bool keep_host;
  /* Gathers done, whose tiles are released outside family locks
   * (tdm__coh_reap). */
  _Atomic(struct tdm_gather *) reap;
  /* tdm_config.lineage: the longest chain of device writes a handle
   * keeps to replay (lineage.c); 0: none kept. */
  unsigned lineage_max;
  /* tdm_config.retries: how often a copy a gather needs is made again
   * after it failed. */
  unsigned retries;
  /* Lineage records no chain holds any more, freed outside family locks
   * (tdm__coh_reap): freeing one releases handles. */
  _Atomic(tdm_lrec *) lfree;
} tdm_nodes;

/* Memory nodes (nodes.c). Make: nodes 0 .. n-1, none with operations
 * yet. Add: device workers first .. first + n - 1 copy through ops (ctx
 * passed to them); limits[i]: the bytes of node 1 + first + i (0: a
 * device working in host memory, nothing counted). Init: both, one
 * backend for every node. TDM_OK, TDM_ERR_INVALID_ARG, TDM_ERR_NO_MEMORY
 * or TDM_ERR_SYSTEM (logged). */
int tdm__nodes_make(tdm_nodes *nodes, tdm_runtime *rt, unsigned n);
int tdm__nodes_add(tdm_nodes *nodes, const tdm_node_ops *ops, void *ctx, unsigned first,
                   unsigned n, const uint64_t *limits);
int tdm__nodes_init(tdm_nodes *nodes, tdm_runtime *rt, const tdm_node_ops *ops,
                    void *ctx, unsigned n, const uint64_t *limits);
void tdm__nodes_fini(tdm_nodes *nodes);
/* Between the nodes' tokens and a backend's own, for the backend of
 * device node `slot` (1 + its device worker), when several share the
 * nodes (nothing to do otherwise): w's tokens become its own (those of
 * another backend waited for and released); a token of its own becomes
 * the nodes'. */
void tdm__tokens_for(const tdm_nodes *nodes, unsigned slot, tdm_tokens *w);
tdm_token tdm__token_from(const tdm_nodes *nodes, unsigned slot, tdm_token t);

/* ---- a handle's state --------------------------------------------------------- */

struct tdm_replica {
  void *mem;      /* the backend's buffer on this node, or NULL */
  tdm_token fill; /* the copy that filled this node (a reference), or 0 */
  /* memory.c, under the node's lock: buffers by use, the tasks in flight
   * using this one (not evicted meanwhile), its size */
  tdm_replica *lru_prev, *lru_next;
  tdm_handle *owner;
  unsigned pins;
  size_t bytes;
};

typedef struct tdm_coh {
  /* A root handle's: guards the coherence state of the family (the
   * handle and its tiles, theirs). A tile's `family` points at it. */
  tdm_spinlock root_lock;
  tdm_spinlock *family;
  tdm_nodeset valid; /* empty: a tile not yet taken from its matrix */
  tdm_replica *rep;  /* per node, allocated when a device first needs it */
  /* After an unpartition, while devices are used: the tiles whose
   * contents the matrix gathers on its first use (after those of an
   * earlier unpartition not gathered yet, `older`). */
  struct tdm_gather *gather;
  /* Unpartitions so far (the last gather's seq); for a tile, its
   * matrix's when it was made: the gathers its contents come after. */
  uint32_t gathers, born;
  /* A matrix whose host memory its tiles hold: the seq of the gather
   * that gives it back (that of the unpartition after the partition
   * whose tiles took their rectangles), 0 when no tile took any. The
   * matrix's contents come home then into memory aside, never over its
   * tiles' rectangles (coherence.c, inherit). */
  uint32_t lent;
  /* A matrix partitioned while devices are used: its tiles (NULL after
   * the unpartition: its gather has them). */
  tdm_handle **parts;
  size_t nparts;
  /* Written since it was made (only_on); for a tile, whether its
   * matrix's contents changed through it. */
  bool written;
  /* Lineage (lineage.c). `ver` counts the writes issued: the current
   * version's number. `host_ver`: the version the host's memory holds,
   * current or not (TDM_NO_VERSION: none, e.g. while the host writes it
   * or after a copy home failed). `chain`: device writes, oldest first
   * (nchain of them, each record referenced), that made versions
   * chain_base + 1 .. chain_base + nchain from version chain_base (which
   * the first of them read, unless `chain_fresh`: it wrote the whole
   * handle); replaying them on the host makes the current version again
   * when a device that alone held it is lost. */
  uint32_t ver, host_ver, chain_base;
  bool chain_fresh;
  uint8_t nchain;
  /* The only holders' copy is not the version: a failed run wrote over
   * it (its lineage replays it). */
  bool damaged;
  /* A write on a device was prepared and has not been recorded
   * (tdm__coh_written) or undone yet: that device's copy may be changing
   * (a replay does not read it). */
  bool writing;
  /* That write waits for the host's copy (valid there when it was
   * prepared): if that copy fails, the run never starts. */
  bool home_waited;
  /* The same for a write in the host's memory (tdm__coh_host_writing,
   * or an access there without TDM_HOST_LATER), until it is recorded or
   * its try failed (tdm__coh_try_failed): the other nodes' copies stay
   * the version until then, and none is copied home over what is being
   * written (an eviction keeps the only one; a replay neither reads the
   * version nor installs it). */
  bool host_writing;
  tdm_lrec **chain;
  /* Versions of it that lineage records read (npins of them, the
   * records counted): one the host's memory holds is copied aside before
   * that memory changes, and a device write does not replace one that
   * only devices hold before it came home (lineage.c). */
  struct tdm_pin *pins;
  uint16_t npins, pins_cap;
} tdm_coh;

typedef struct tdm_pin {
  uint32_t ver, count;
  void *copy; /* its elements, packed, once the host's memory changed; or NULL */
} tdm_pin;

#define TDM_NO_VERSION UINT32_MAX

typedef struct tdm_gather {
  tdm_handle **tiles; /* each referenced */
  size_t n;
  uint32_t seq;
  struct tdm_gather *older;
} tdm_gather;

/* A registered handle (on_host) or a new tile (its parent's family; the
 * parent's dependency lock held, as for tdm__coh_unpartitioned). */
void tdm__coh_init(tdm_coh *c, bool on_host, tdm_coh *parent);
/* h was partitioned into tiles[0 .. n-1] (kept until h's next
 * unpartition). h's dependency lock held. */
void tdm__coh_partitioned(tdm_handle *h, tdm_handle **tiles, size_t n);
/* h was unpartitioned: its first use gathers the tiles of g (g->tiles,
 * g->n set; each referenced). h's dependency lock held. */
void tdm__coh_unpartitioned(tdm_handle *h, tdm_gather *g);
void tdm__coh_lock(tdm_coh *c);
bool tdm__coh_trylock(tdm_coh *c);
void tdm__coh_unlock(tdm_coh *c);

/* The rest with the family's lock held. */

/* A failed run in the host's memory (a device working there) was undone:
 * the memory holds what it held before, and the run's token, failed,
 * no longer stands for it. Family lock held. */
void tdm__coh_host_restored(const tdm_nodes *nodes, tdm_handle *h);

/* Prepares an access to h on `node` in `mode`: a read makes the node
 * valid (copies started); a write alone settles a tile still to take from
 * its matrix and a matrix still to gather (else those would later
 * overwrite what is written). `gen`: h's unpartitions when the access was
 * submitted (UINT32_MAX: all), the gathers it comes after; a later
 * unpartition's tiles may still be in use. Adds to w what the access must
 * wait for. False when a copy could not be made (logged); w holds what
 * was added. */
bool tdm__coh_access(const tdm_nodes *nodes, tdm_handle *h, unsigned node, unsigned mode,
                     uint32_t gen, tdm_tokens *w, bool *unkept);
/* After tdm__coh_access failed (no lock held): a handle whose version
 * could not be read where it is and which its lineage can make again
 * (tdm__lineage_replay), referenced (tdm__handle_unref); or NULL. The
 * access's handle, or a tile it gathers, or the matrix a tile takes its
 * contents from. Per thread; taken after every access. */
tdm_handle *tdm__coh_take_replay(void);
/* With mode, for a read-write on a device where only devices hold the
 * version it replaces: that version comes home first (the write waits
 * for the copy) when TDM_KEEP_REPLACED (the writer's lineage record reads
 * it and may be replayed for another of its outputs), or when
 * TDM_REPLAYABLE (the writer can be recorded: it has a CPU variant) and
 * no lineage makes that version again, so that a failed run of it can
 * always be undone. */
#define TDM_KEEP_REPLACED 0x100u
#define TDM_REPLAYABLE 0x200u
/* With mode, for a write on the host: the host's memory is announced
 * changing later (tdm__coh_host_writing), when the write surely runs
 * there; a CPU task whose inputs are still on their way may yet run on a
 * device. Without it, from this access. */
#define TDM_HOST_LATER 0x400u
/* The family's lock held: the host's memory of h is about to be written
 * (it holds no version until the write is done, and no copy lands there
 * meanwhile). Returns a copy still landing there that the write must
 * wait for first (a reference, to release), or 0. */
tdm_token tdm__coh_host_writing(const tdm_nodes *nodes, tdm_handle *h);
/* A try that used h in `mode` failed (before it ran, or it ran and what
 * it wrote was undone): the copies of h whose copy failed, on any node,
 * no longer count as versions (tdm__coh_drop_failed), so that the next
 * use fetches them again; a write's preparation is over (the version it
 * was to replace is where it was); a try on the host's memory (in_host:
 * a device working there) left the version it read there, if any. */
void tdm__coh_try_failed(const tdm_nodes *nodes, tdm_handle *h, unsigned mode, bool in_host);
/* A write on `node`, complete at token `done` (taken over; 0 when done
 * already): node becomes the only valid one. On a device node, `rec`
 * (may be NULL: the lineage breaks) is the writing task's lineage record,
 * `reads` whether it read h. */
void tdm__coh_written(const tdm_nodes *nodes, tdm_handle *h, unsigned node, tdm_token done,
                      tdm_lrec *rec, bool reads);
/* A write on device node `node` (not the host) failed: its memory there
 * holds no version; the host's, kept by tdm__coh_access, is the valid
 * one. Unless the copy home that kept it failed: then the write, which
 * came after that copy, never ran, and the node's copy is still the
 * version before. `issued`: tdm__coh_written was called for it (undone
 * here). When the host did not hold the version before (unkept), its
 * lineage makes it again if it can: true; false when it cannot (the
 * version is lost). */
bool tdm__coh_write_failed(const tdm_nodes *nodes, tdm_handle *h, unsigned node, bool issued);
/* keep_host: a write on a device succeeded; its version is copied home
 * now (not waited for), so that losing the device loses nothing. False
 * when the copy could not be started (logged). */
bool tdm__coh_write_back(const tdm_nodes *nodes, tdm_handle *h);
/* Whether the copy that filled h's memory on `node` failed (complete). */
bool tdm__coh_fill_failed(const tdm_nodes *nodes, const tdm_handle *h, unsigned node);
/* A try that used h on `node` failed, maybe because a copy into node
 * failed: if it did, node no longer holds h's version (fetched again by
 * the next access). Unless node was the only one holding it: that
 * version is lost (node stays its holder, every read of it failing). */
void tdm__coh_drop_failed(const tdm_nodes *nodes, tdm_handle *h, unsigned node);
/* Predicted seconds to make h valid on `node`, by the nodes' link_time
 * (copies between the host and a device node) and peer_time (between
 * two devices); *home (may be NULL) gets the device node it would come
 * home from, if it comes home (else untouched). */
double tdm__coh_estimate(const tdm_nodes *nodes, const tdm_handle *h, unsigned node,
                         unsigned *home);
/* Forgets h's replicas (their buffers freed) and a gather not done (its
 * tiles released), taking the family's lock when `lock` (not at destroy,
 * when handles go in any order and nothing runs). */
void tdm__coh_forget(const tdm_nodes *nodes, tdm_handle *h, bool lock);
/* Releases the tiles of the gathers done (no family lock held). */
void tdm__coh_reap(tdm_nodes *nodes);
/* Makes h's per-node replicas if it has none yet; false when out of
 * memory (logged). */
bool tdm__coh_replicas(const tdm_nodes *nodes, tdm_handle *h);

/* h's bytes on a device (elements packed: a tile's rows one after the
 * other) and the span of its elements in host memory. */
size_t tdm__coh_bytes(const tdm_handle *h);
/* The bytes of the copies the calling thread has issued (between the
 * host and devices, and from device to device), since it started. */
uint64_t tdm__coh_copied(void);
size_t tdm__coh_span(const tdm_handle *h);
/* h's elements between the host's memory and `packed` (tdm__coh_bytes of
 * them, row after row; to_host: into the host's memory). */
void tdm__coh_host_rows(const tdm_handle *h, void *packed, bool to_host);

/* ---- memory (memory.c), the family's lock held ------------------------------- */

/* h's buffer on `node`, made on first use (making room in the node's
 * memory); the most recently used one after. NULL when it cannot be made
 * now: *busy (may be NULL) tells that other threads held buffers in the
 * way, and that trying again with no family lock held may succeed. */
void *tdm__mem_get(const tdm_nodes *nodes, tdm_handle *h, unsigned node, bool *busy);
/* Adds delta to the pins of h's buffer on node (a pinned buffer is not
 * evicted). The family's lock need not be held. */
void tdm__mem_pin(const tdm_nodes *nodes, tdm_handle *h, unsigned node, int delta);
/* Frees h's buffer on node, if any, and counts it no more. */
void tdm__mem_drop(const tdm_nodes *nodes, tdm_handle *h, unsigned node);
/* Bytes counted on node, its limit, evictions so far. */
void tdm__mem_usage(const tdm_nodes *nodes, unsigned node, uint64_t *used, uint64_t *limit,
                    uint64_t *evictions);

/* coherence.c, for memory.c: makes room by dropping h's replica on node
 * (its lock held). The replica goes only once another node holds the
 * version, landed: the only current copy is first copied home, and the
 * replica is kept until that copy has landed (a copy that fails is
 * forgotten; the replica stays the version's holder). TDM_EVICTED: it
 * may go; TDM_EVICT_LATER: a copy elsewhere is still landing (ask again);
 * TDM_EVICT_NOT: no copy could be made, or the last one failed. */
enum { TDM_EVICTED, TDM_EVICT_LATER, TDM_EVICT_NOT };
int tdm__coh_evict(const tdm_nodes *nodes, tdm_handle *h, unsigned node);

/* Some of a task's n slots naming the handle of slot i has one of `mode`'s
 * bits (a handle may be named twice). */
static inline bool tdm__slots_have(tdm_handle *const *hs, const uint8_t *modes, unsigned n,
                                   unsigned i, unsigned mode) {
  for (unsigned j = 0; j < n; j++)
    if (hs[j] == hs[i] && (modes[j] & mode))
      return true;
  return false;
}

/* ---- lineage (lineage.c) ---------------------------------------------------- */

/* A record of task t, which is writing on a device, to replay it (its CPU
 * variant, arguments, handles and the version of each it read); NULL
 * when it has no CPU variant, lineage is off, or out of memory. Takes
 * each handle's family lock in turn: none held. */
tdm_lrec *tdm__lineage_record(tdm_runtime *rt, const struct tdm_task *t);
/* Drops a reference taken by tdm__lineage_record (none held: no chain
 * took it). */
void tdm__lineage_unref(const tdm_nodes *nodes, tdm_lrec *r);
/* The family's lock held: h's chain records the write of `rec` on a
 * device, the new version (tdm__coh_written). */
void tdm__lineage_append(const tdm_nodes *nodes, tdm_handle *h, tdm_lrec *rec, bool reads);
/* The family's lock held: h's chain is dropped; its records, when no
 * other chain holds them, are freed later (tdm__lineage_reap), or at
 * once without releasing their handles unless `release` (at destroy,
 * when every handle goes). */
void tdm__lineage_drop(const tdm_nodes *nodes, tdm_handle *h, bool release);
/* The family's lock held: the last record of h's chain goes, if it made
 * the current version (a write that failed). */
void tdm__lineage_pop(const tdm_nodes *nodes, tdm_handle *h);
/* The family's lock held: whether h's chain makes its current version
 * again from what the host holds. */
bool tdm__lineage_replays(const tdm_nodes *nodes, const tdm_handle *h);
/* No lock held: makes h's current version again in the host's memory by
 * replaying its chain with the CPU variants (valid on the host after);
 * false when it cannot (logged). `depth`: replays under way on this
 * thread (an input of a record may need one of its own). */
bool tdm__lineage_replay(tdm_runtime *rt, tdm_handle *h, unsigned depth);
/* No lock held: h's elements, packed, into out from the host's memory
 * when it holds version v (1), after what still writes it landed; 0 when
 * it does not hold v. */
int tdm__coh_host_read(const tdm_nodes *nodes, tdm_handle *h, uint32_t v, void *out);
/* No lock held: h's elements, packed, into out from a device holding
 * its current version v, while its tiles hold its host memory (where a
 * copy home cannot go once a tile was written); false otherwise. */
bool tdm__coh_device_read(const tdm_nodes *nodes, tdm_handle *h, uint32_t v, void *out);
/* No lock held: `in` (h's elements, packed) is h's version v, made
 * again: into the host's memory, valid there alone, unless h was written
 * since (false). */
bool tdm__coh_host_install(const tdm_nodes *nodes, tdm_handle *h, uint32_t v, const void *in);
/* The family's lock held: h's pin of version v (a record reads it), or
 * NULL. */
tdm_pin *tdm__lineage_pin(const tdm_handle *h, uint32_t v);
/* The family's lock held, before the host's memory of h changes: the
 * version it holds, when a record reads it, is copied aside (after what
 * still writes it landed, waited for; coherence.c). */
void tdm__lineage_keep(const tdm_nodes *nodes, tdm_handle *h);
/* The family's lock held: h, a tile its matrix gathered (whose memory
 * is the matrix's from then, which a writer of the matrix changes only
 * once the tile's readers are done), is read at version v by a record
 * made now: the host's memory holds v (the gather brought it home), and
 * is copied aside now (once that copy has landed: waited for). */
void tdm__coh_keep_gathered(const tdm_nodes *nodes, tdm_handle *h, uint32_t v);
/* Frees the records no chain holds (no family lock held). */
void tdm__lineage_reap(tdm_nodes *nodes);

#endif
