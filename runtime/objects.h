/*
 * The runtime's objects: the layouts of a runtime, a task, a handle, a
 * group, a worker, and the small records in them. Layouts only, and
 * inline reads of them: every layer may read an object it is given, and
 * calls only the layers below its own (docs/ARCHITECTURE.md). Nothing
 * here is public: internal names are tdm__* or file-static.
 */
#ifndef TDM_OBJECTS_H
#define TDM_OBJECTS_H

#include "tandem.h"

#include <hwloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "../backends/backend.h"
#include "core/trace.h"
#include "data/coherence.h"
#include "platform/platform.h"
#include "sched/policy.h"
#include "support/support.h"

typedef struct tdm_sched tdm_sched;

/* A created task's place in the graph of explicit dependencies
 * (depgraph.c). */
typedef struct tdm_links {
  tdm_taskvec deps;  /* its explicit predecessors, a reference each */
  tdm_taskvec succs; /* created tasks that named it, a reference each */
  /* its place in the list of created tasks in topological order, and a
   * label that increases along the list */
  struct tdm_links *prev, *next;
  uint64_t label;
  uint64_t fmark, bmark; /* the last forward and backward searches here */
} tdm_links;
typedef struct tdm_order {
  tdm_links *head, *tail;
  uint64_t epoch; /* of the last search */
  uint64_t gap;   /* between labels given anew (2^32; a test seam) */
} tdm_order;

/* ---- tasks ------------------------------------------------------------ */

enum tdm_task_kind {
  TDM_TASK_CODELET = 0, /* runs on a worker */
  TDM_TASK_ACQUIRE = 1, /* a host acquisition: becomes ready, never queued */
  TDM_TASK_FREE = 2,    /* in the pool */
  TDM_TASK_LENT = 3     /* a slot of the pool lent (tdm__slot_lend) */
};

enum tdm_task_state {
  TDM_TS_CREATED = 0,
  TDM_TS_SUBMITTED = 1, /* waiting for predecessors */
  TDM_TS_READY = 2,     /* queued (or, for an acquisition, granted) */
  TDM_TS_DONE = 3
};

#define TDM_INLINE_EDGES 4
/* Bytes a slot of the task pool lends (tdm__slot_lend): past its first
 * line. Edges a slot holds when lent to a task with more than
 * TDM_INLINE_EDGES (tdm__edges_alloc). */
#define TDM_SLOT_ROOM 320
#define TDM_POOL_EDGES 20
#define TDM_MAX_RETRIES 100 /* tdm_config.retries */
#define TDM_MAX_DEVICE_WORKERS 64 /* bits of tdm_task.dev_mask */
/* A device that fails tdm_config.quarantine_failures tries (at most
 * TDM_MAX_QUARANTINE_FAILURES) within TDM_QUARANTINE_WINDOW_NS is taken
 * out of placement. */
#define TDM_MAX_QUARANTINE_FAILURES 16
/* tdm_config.lineage: the longest chain kept (a handle's nchain is a uint8_t). */
#define TDM_MAX_LINEAGE 255
#define TDM_QUARANTINE_WINDOW_NS 1000000000ull

/* Laid out so that a task without buffers or arguments touches two cache
 * lines: what every task uses comes first. */
typedef struct tdm_task {
  /* -- line 0 -- */
  /* Predecessors not yet finished, plus one held by the submitter until
   * all edges are in place, so the task cannot start half-linked. */
  _Atomic int32_t pending;
  /* References: the runtime's while submitted and unfinished, the user's
   * (tdm_task_create), one per handle state and dependency list naming it. */
  _Atomic int32_t refs;
  _Atomic uint32_t state;
  /* Nonzero while a thread waits in tdm_task_wait or an acquisition. */
  _Atomic uint32_t waiters;
  uint8_t kind;
  uint8_t tile_mask; /* buffers that are tiles (held by reference; <= 8 buffers) */
  uint16_t nbuf;     /* past TDM_MAX_BUFFERS, the buffers are in `more` */
  /* Set at its creation (or before its submission, by the thread that
   * made it), read only then (a byte of its own: the threads
   * that end a task write the bits of others while the watchdog reads
   * these). chunk: a chunk of a data-parallel operation (core/parallel.c),
   * whose arguments end with a tdm_chunk_tail that devices do not get.
   * no_cpu: the CPU workers do not run it though its codelet has a CPU
   * variant (a chunk of an operation that keeps them out, or one bound to
   * its device by a static split), unless cpu_fallback and no device is
   * left to it (tdm__task_cpu_ok). commute: a buffer is TDM_COMMUTE (it
   * takes the handles' exclusion when ready, core/commute.c); redux: a
   * buffer is TDM_REDUX, not yet bound to its lane (until its submission). */
  bool user_ref : 1, chunk : 1, no_cpu : 1, cpu_fallback : 1, commute : 1, redux : 1;
  bool cpu_only_flag : 1; /* TDM_TASK_CPU_ONLY: never prepared for devices */
  bool device_ok; /* may run on a device (a backend's prepare) */
  /* Where the scheduler placed it (0: the CPU workers, 1 + k: device k;
   * -1: not placed by a model) and the execution time it predicted. */
  int8_t sched_cls;
  bool sched_calib : 1; /* placed there to calibrate the model */
  /* Only the CPU workers run it, and the scheduler's counts of such
   * tasks have it (place.c: tdm__cpu_only_*): as ready, and as started.
   * (Bits: written in turn by the threads that place, run and end it.) */
  bool cpu_counted : 1, cpu_started : 1;
  uint8_t modes[TDM_MAX_BUFFERS];
  tdm_runtime *rt;
  const tdm_codelet *codelet;
  /* Successors: a lock-free list of edges pushed by the tasks that depend
   * on this one. Finishing swaps in TDM_CLOSED: a dependent that then
   * finds TDM_CLOSED knows this task has finished and does not wait. */
  _Atomic(struct tdm_edge *) succ_head;
  /* This task's own incoming edges (one per predecessor), allocated before
   * it is linked, so that linking cannot fail half-way. */
  struct tdm_edge *edges;

  /* -- line 1 -- */
  tdm_task_callback callback;
  void *callback_data;
  void *args;
  size_t args_size;
  struct tdm_task *pool_next;  /* free list and injection stack link */
  union {
    struct tdm_task *batch_next; /* free, in the shared pool: next batch */
    struct tdm_group *group;     /* allocated: its group (holding a reference), or NULL */
  };
  union {
    /* Explicit dependencies while created (depgraph.c); allocated on
     * first use, NULL otherwise, and NULL again once submitted. */
    tdm_links *links;
    /* Once ready: while its commands run on a device, or its inputs come
     * home (backends/opencl/device.c); NULL otherwise. */
    void *dx;
  };
  /* Its number in the trace and the graph. Valid only while rt->recording
   * (set for every task then), not touched otherwise. */
  uint64_t trace_id;
  float sched_predicted; /* seconds, see sched_cls */
  /* How it ended: TDM_OK until then; TDM_ERR_CANCELLED, stored by a
   * predecessor whose version it reads and which ended without producing
   * it (before that predecessor's release of pending publishes it), or by
   * the submitter; the failure status of its try otherwise. Final once
   * state is DONE. */
  _Atomic int32_t outcome;
  uint64_t dev_mask;     /* bit k: device worker k can run it (device_ok) */
  int priority;          /* tdm_task_desc.priority */
  /* While devices are used: each handle's unpartitions at submission,
   * the gathers its access comes after (data/coherence.h). In the room
   * left on this line: the task stays six lines long. */
  uint32_t gens[TDM_MAX_BUFFERS];
  uint8_t tries; /* failed runs so far (tdm_config.retries) */
  /* It writes, on a device, a version the host's memory does not hold
   * (access.c), and a run of it failed there: that version is gone, and
   * it cannot be tried again. */
  /* (Bits: one try of a task runs at a time, the only writer of them.) */
  bool unkept : 1, spoiled : 1;
  /* A try on the host failed: its inputs did not come home (access.c),
   * it did not run; it may be tried again. */
  bool homeless : 1;
  /* Its writes on a device were issued (tdm__task_written), undone if
   * the try fails. */
  bool issued : 1;
  /* Set at its creation (tdm_task_desc.flags): it runs only in
   * tdm_dispatch; its callback runs there. */
  bool main_thread : 1, callback_on_dispatch : 1;
  /* In the dispatch queue for its callback (it ended), not to run. */
  bool dispatch_ended : 1;
  /* Its edges are a slot of the pool (tdm__edges_alloc), not the heap's.
   * Set at its submission, read when it is freed. */
  bool edges_pooled : 1;

  /* tdm_task_desc.cost in a group (1 when not given), as a bfloat16 (the
   * float's upper half, rounded: about 3 significant digits) for want of
   * room on this line; tdm__cost_of reads it. */
  uint16_t cost;
  /* A task with more than TDM_MAX_BUFFERS buffers: all of them, in a
   * block of their own (handles, modes and gens above are not used). */
  struct tdm_task_more *more;

  /* -- the rest, used by tasks that have buffers, arguments, edges -- */
  _Alignas(TDM_CACHE_LINE) tdm_handle *handles[TDM_MAX_BUFFERS];
  struct tdm_edge {
    struct tdm_task *succ;
    struct tdm_edge *next;
  } inline_edges[TDM_INLINE_EDGES];
  _Alignas(16) unsigned char inline_args[TDM_INLINE_ARGS];
} tdm_task;

/* What a chunk of a data-parallel operation carries past the caller's
 * arguments (tdm_task.chunk): its range and the operation's CPU
 * function. Read with tdm__chunk_tail (the arguments are not aligned for
 * it). */
typedef struct tdm_chunk_tail {
  tdm_range range;
  tdm_range_fn fn;
  unsigned dims;  /* 1 or 2 */
  unsigned group; /* with a reduction: its work-group size (its last buffer: its partial
                     values); else 0 */
  _Atomic uint64_t *moved; /* the bytes copied so that it could run (data/access.c) */
} tdm_chunk_tail;

/* The footprint of a chunk whose codelet has no footprint function:
 * "parchunk" in ASCII, so that its model shows as NAME#7061726368756e6b. */
#define TDM_CHUNK_FOOTPRINT UINT64_C(0x7061726368756e6b)

/* The arguments of t that its codelet's variants get: a chunk's without
 * its tail. */
static inline size_t tdm__task_args_size(const tdm_task *t) {
  return t->chunk ? t->args_size - sizeof(tdm_chunk_tail) : t->args_size;
}
static inline tdm_chunk_tail tdm__chunk_tail(const tdm_task *t) {
  tdm_chunk_tail c;
  memcpy(&c, (const unsigned char *)t->args + t->args_size - sizeof c, sizeof c);
  return c;
}
/* A chunk's elements: its rows times its columns. */
static inline uint64_t tdm__chunk_elements(const tdm_task *t) {
  tdm_chunk_tail c = tdm__chunk_tail(t);
  return (uint64_t)(c.range.end[0] - c.range.begin[0]) * (c.range.end[1] - c.range.begin[1]);
}

/* Whether the CPU workers may run t. */
static inline bool tdm__task_cpu_ok(const tdm_task *t) {
  return t->codelet->cpu_fn && (!t->no_cpu || (t->cpu_fallback && !t->dev_mask));
}
/* Whether t has somewhere to run without the devices `gone` (device
 * worker bits): another device, or the CPU workers. */
static inline bool tdm__task_runs_without(const tdm_task *t, uint64_t gone) {
  return (t->dev_mask & ~gone) || (t->codelet->cpu_fn && (!t->no_cpu || t->cpu_fallback));
}
/* The devices `gone` no longer run t: tdm__task_runs_without. */
static inline bool tdm__task_lose_devices(tdm_task *t, uint64_t gone) {
  t->dev_mask &= ~gone;
  t->device_ok = t->dev_mask != 0;
  return t->device_ok || tdm__task_cpu_ok(t);
}

/* The bit of TDM_COMMUTE beyond TDM_RW's. */
#define TDM__COMMUTES 8u
#define TDM__H_LANES 1u     /* tdm_handle.unusual */
#define TDM__H_COMMUTERS 2u

typedef struct tdm_edge tdm_edge;
#define TDM_CLOSED ((tdm_edge *)(uintptr_t)1)

/* A data edge: the successor reads a version the predecessor produces,
 * and is cancelled when the predecessor ends without producing it (an
 * edge that only orders, a write after a read or a write over a write, is
 * not). Marked in the low bit of the task pointer (tasks are aligned). */
static inline tdm_task *tdm__edge_tag(tdm_task *t) {
  return (tdm_task *)((uintptr_t)t | 1u);
}
static inline tdm_task *tdm__edge_task(tdm_task *t) {
  return (tdm_task *)((uintptr_t)t & ~(uintptr_t)1u);
}

/* The buffers of a task with more than TDM_MAX_BUFFERS of them (StarPU's
 * dyn_handles), one allocation made at creation: nothing past it can
 * fail for want of room. */
typedef struct tdm_task_more {
  tdm_handle **handles; /* nbuf of each */
  uint8_t *modes;
  uint8_t *tiles;        /* 1: a tile, held by reference */
  /* Set at submission: its distinct handles by address (nlocked), their
   * modes together, and each one's gathers count (tdm_task.gens). */
  unsigned nlocked;
  tdm_handle **locked;
  unsigned *lock_modes;
  uint32_t *gens;
  tdm_buffer *bufs;      /* room for the views a backend passes */
  void **mems;           /* and for its buffers on a node */
} tdm_task_more;

/* A task's handles and modes, wherever they are. */
static inline tdm_handle *const *tdm__task_handles(const tdm_task *t) {
  return t->nbuf <= TDM_MAX_BUFFERS ? t->handles : t->more->handles;
}
static inline const uint8_t *tdm__task_modes(const tdm_task *t) {
  return t->nbuf <= TDM_MAX_BUFFERS ? t->modes : t->more->modes;
}
/* Room for a backend's views of t's buffers and its node buffers: the
 * caller's arrays of TDM_MAX_BUFFERS, or the task's own past that. */
static inline tdm_buffer *tdm__task_views(const tdm_task *t, tdm_buffer *room) {
  return t->nbuf <= TDM_MAX_BUFFERS ? room : t->more->bufs;
}
static inline void **tdm__task_mems(const tdm_task *t, void **room) {
  return t->nbuf <= TDM_MAX_BUFFERS ? room : t->more->mems;
}

/* ---- data handles ----------------------------------------------------- */

#define TDM_HANDLE_MAGIC 0x54444d48u /* "TDMH" */
#define TDM_HANDLE_DEAD 0x64656164u  /* "dead" */

enum tdm_handle_kind { TDM_HANDLE_VECTOR = 1, TDM_HANDLE_MATRIX = 2 };

/* The bytes a registered handle spans, in the runtime's interval tree of
 * registered memory (ranges.c). */
typedef struct tdm_memrange {
  uintptr_t lo, hi; /* [lo, hi) */
  uintptr_t max_hi; /* the largest hi in this subtree */
  uint32_t prio;
  struct tdm_memrange *left, *right;
  const tdm_buffer *buf; /* the handle's; NULL when not in the tree */
} tdm_memrange;
typedef struct tdm_ranges {
  tdm_memrange *root;
  uint64_t rng; /* treap priorities; nonzero */
} tdm_ranges;

struct tdm_handle {
  _Atomic uint32_t magic;
  /* References: one while registered (then one while in quarantine), and
   * for a tile one per task naming it, until that task is freed. The
   * struct is freed when they are all gone. */
  _Atomic int32_t refs;
  uint8_t kind;
  /* What a submission must look at besides its writers and readers
   * (one test for both; under `lock`): TDM__H_LANES, lanes of its
   * reduction were used since they were last combined (core/reduce.c:
   * an access of another mode combines them first; written under the
   * runtime's redux_lock too, so readable under either); TDM__H_COMMUTERS,
   * tasks commute on it (commuters below). */
  uint8_t unusual;
  tdm_runtime *rt;
  tdm_buffer buf;
  tdm_spinlock lock; /* guards everything below */
  /* Dependency state: the tasks whose writes are the current contents
   * (normally one; several after an unpartition) and the readers of those
   * contents. A reader waits for the writers; a writer waits for both. */
  tdm_taskvec writers;
  tdm_taskvec readers;
  /* The tasks naming it TDM_COMMUTE since the writers and readers above
   * (each came after all of those); the next other access settles them
   * as the writers (tdm__handle_settle). */
  tdm_taskvec commuters;
  /* Their exclusion (core/commute.c): the task that holds it, and those
   * ready and waiting for it, linked by pool_next. */
  tdm_task *commute_owner, *commute_head, *commute_tail;
  /* Its reduction (tdm_handle_set_reduction; core/reduce.c), or NULL. */
  struct tdm_redux *redux;
  /* The host acquisition node, if any. Written under `lock`; atomic so
   * that destroy can scan handles without taking their locks (it holds
   * handles_lock, which submitters take while holding handle locks). */
  _Atomic(tdm_task *) acquired;
  unsigned unsubmitted;  /* created tasks naming this handle */
  tdm_handle *parent;    /* tile of a partitioned matrix */
  tdm_handle **tiles;    /* when partitioned */
  size_t tile_rows, tile_cols;
  /* Every handle not yet freed is on the runtime's list (handles_lock). */
  tdm_handle *all_prev, *all_next;
  /* Its memory in rt->ranges while registered, not for a tile
   * (handles_lock). */
  tdm_memrange range;
  tdm_handle *quarantine_next;
  /* Where the contents are (data/coherence.h), under the family's lock. */
  tdm_coh coh;
};

/* ---- groups (group.c) -------------------------------------------------- */

struct tdm_group {
  tdm_runtime *rt;
  struct tdm_group *next, *prev; /* the runtime's groups (groups_lock) */
  /* The application's reference, and one per task that names it. */
  _Atomic int refs;
  /* Tasks submitted and not ended: 0 when idle (tdm_group_wait). A task
   * submitting another into the group counts it before it ends itself. */
  _Atomic int64_t pending;
  _Atomic uint64_t submitted, ended, failed, cancelled;
  _Atomic double cost_submitted, cost_ended;
  _Atomic bool cancel;
  _Atomic int waiters; /* threads in tdm_group_wait */
  /* Threads between a task's end and the end of its progress call: the
   * group is not idle for tdm_group_wait until they are done, so that no
   * progress call comes after it returned. */
  _Atomic int ending;
  int priority;
  /* Progress: calls at most every interval_ns (last_ns: the last one);
   * `want` counts requests, `calling` is held by the thread calling (or
   * posting to the dispatch queue), which calls again while requests
   * came meanwhile. */
  tdm_progress_fn progress_fn;
  void *progress_data;
  uint64_t interval_ns;
  bool on_dispatch;
  _Atomic uint64_t last_ns;
  _Atomic unsigned want;
  _Atomic bool calling;
  /* What the last call showed (the caller's: the holder of `calling`, or
   * tdm_dispatch's thread), and whether there was one. */
  tdm_group_progress shown;
  bool any_shown;
  /* In the dispatch queue (dispatch_lock): its link, and whether it is
   * there. */
  struct tdm_group *dnext;
  bool dposted;
  char name[64];
};

static inline uint16_t tdm__cost_pack(float c) {
  uint32_t u;
  memcpy(&u, &c, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}
static inline double tdm__cost_of(const tdm_task *t) {
  uint32_t u = (uint32_t)t->cost << 16;
  float c;
  memcpy(&c, &u, sizeof c);
  return c;
}

/* The tasks placed on a device, a kind of CPU core or a simulated worker
 * and not started, in priority order (sched/queue.c; each owner guards
 * its own; `queued` may be read without the lock). */
typedef struct tdm_taskq {
  tdm_task *head, *tail;
  _Atomic unsigned queued;
} tdm_taskq;

/* ---- workers and runtime ---------------------------------------------- */

/* CPU workers honour task priorities by band: every task of a higher
 * band is taken before any of a lower one; within a band, work stealing's
 * order (worker.c). Device queues order by the exact value. */
enum { TDM_BAND_HIGH, TDM_BAND_NORMAL, TDM_BAND_LOW, TDM_BANDS };

static inline unsigned tdm__band(int priority) {
  return priority > 0 ? TDM_BAND_HIGH : priority < 0 ? TDM_BAND_LOW : TDM_BAND_NORMAL;
}

typedef struct tdm_worker {
  /* first: their fields are cache-line aligned. One per band. */
  tdm_deque deques[TDM_BANDS];
  tdm_runtime *rt;
  unsigned id;
  pthread_t thread;
  bool started;
  uint64_t rng;
  /* The task whose CPU function runs here, NULL otherwise and once it
   * deferred its end (tdm_task_defer; complete.c). */
  tdm_task *running;
  /* Free tasks this worker may hand out without locking. */
  tdm_task *free_tasks;
  unsigned nfree;
  /* Tasks finished here and not yet subtracted from rt->inflight. */
  unsigned unflushed;
  /* Tasks only the CPU workers run (place.c, tdm__cpu_only_*), made
   * ready, started and ended by this worker: written by it only
   * (tdm__count), summed by the scheduler. runs: its CPU-only tasks so
   * far, to time one in TDM_SCHED_CPU_ONLY_SAMPLE. */
  _Atomic uint64_t cpu_only_in, cpu_only_started, cpu_only_out;
  unsigned cpu_only_runs;
  /* Statistics (trace.c): written by this worker only (tdm__count),
   * read by anyone. Times only while rt->timing. */
  _Atomic uint64_t tasks_run, busy_ns, idle_ns, parked_ns, steals_tried, steals_won;
  /* When it began to sleep (parked, or benched by a pause), 0 while it is
   * not: a trace written meanwhile shows the sleep so far. Timing only. */
  _Atomic uint64_t asleep_from;
  tdm_trace_buf trace;
} tdm_worker;

/* Adds n to a counter only its owner writes: a plain load and store, no
 * locked instruction. */
static inline void tdm__count(_Atomic uint64_t *c, uint64_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                        memory_order_relaxed);
}

/* Finished tasks a worker counts before it updates rt->inflight. */
#define TDM_FLUSH_BATCH 32

/* The strings of tdm_config a runtime keeps a copy of (config.c). */
#define TDM_CONFIG_COPIES 9

/* A backend taking part in a runtime: it drives device workers
 * first .. first + n - 1 (none, when it only keeps state: OpenCL's
 * loader for tdm_opencl_device). */
typedef struct tdm_attached {
  const tdm_backend *ops;
  void *state; /* its own: set by its discover, read by tdm__state_of */
  unsigned first, n;
} tdm_attached;

struct tdm_runtime {
  tdm_config cfg;
  /* The configuration's strings, copied: cfg's fields point here. */
  char *copies[TDM_CONFIG_COPIES];
  hwloc_topology_t topo;
  bool bind;
  tdm_worker_plan plan;
  unsigned nworkers;
  tdm_worker *workers;

  /* Tasks submitted from threads that are not workers of this runtime,
   * or released there: a lock-free LIFO (Treiber stack) that workers empty
   * at once with an exchange, which is immune to ABA. */
  _Alignas(TDM_CACHE_LINE) _Atomic(tdm_task *) inject[TDM_BANDS]; /* by band */

  /* Parking. A worker that found no work registers in nsleeping, checks
   * the queues once more, and waits on park_cond; whoever makes work
   * available checks nsleeping after publishing it and wakes one sleeper,
   * claiming it (so a burst of pushes wakes each sleeper once). Both sides
   * use seq_cst so that one of them sees the other (Dekker). */
  _Alignas(TDM_CACHE_LINE) _Atomic int nsleeping;
  int wakeups; /* guarded by park_lock */
  pthread_mutex_t park_lock;
  pthread_cond_t park_cond;
  _Atomic bool stop;

  /* Tasks submitted and not finished, less those finished on workers and
   * not yet flushed (TDM_FLUSH_BATCH); wait_all waits for 0. */
  _Alignas(TDM_CACHE_LINE) _Atomic int64_t inflight;

  /* Read on every submit or idle round, written rarely: a line apart. */
  _Alignas(TDM_CACHE_LINE) _Atomic int nwaiters; /* threads in wait_all, or blocked */
  _Atomic int nblocked; /* submitters waiting for room (cfg.max_pending) */
  _Atomic bool closing;                          /* destroy has begun */
  /* Functions the idle CPU workers call (tdm_runtime_add_idle_fn): their
   * count, read each idle round; the list under idle_lock, which a worker
   * takes with trylock to call them (one worker at a time) and removal
   * takes to wait for the worker calling them. */
  _Atomic int nidle_fns;
  pthread_mutex_t idle_lock;
  struct {
    void (*fn)(void *);
    void *data;
  } idle_fns[TDM_MAX_IDLE_FNS];
  /* Sharing the machine (tdm_runtime_pause, tdm_runtime_set_active_workers):
   * a CPU worker whose id is run_limit or more takes no task and waits on
   * bench_cond (under park_lock, nbenched of them); 0 while paused, when
   * the devices start no task either. Read by each worker once per task. */
  _Atomic unsigned run_limit;
  /* Set once a task of a band other than normal was queued for the CPU
   * workers: until then they look at the normal band only. */
  _Atomic bool banded;
  _Atomic int nbenched;
  unsigned active; /* the CPU workers that run when not paused (park_lock) */
  bool paused;     /* park_lock */
  pthread_cond_t bench_cond;
  pthread_mutex_t wait_lock; /* for all blocking waits */
  pthread_cond_t wait_cond;

  /* Task pool: slabs, and a shared free list for non-worker threads and
   * for balancing the workers' lists. */
  tdm_spinlock groups_lock;
  struct tdm_group *groups; /* every group not yet freed */
  struct tdm_graph *graphs; /* every recorded graph not yet freed (core/graph.c) */
  /* The codelets data-parallel operations made, kept until destroy
   * (core/parallel.c), under groups_lock. */
  struct tdm_op_codelet *op_codelets;
  /* Reductions' partial values whose operation ended: their handles
   * unregistered, and their memory freed, at the next operation (from
   * the application's thread) or at destroy (core/parallel.c), under
   * groups_lock. */
  struct tdm_op_scratch *op_scratch;
  /* Their chunks submitted and not ended: while there are some, an idle
   * device looks for one queued for the CPU workers (heft). */
  _Atomic int64_t op_chunks;
  /* The dispatch queue (dispatch.c), under dispatch_lock: tasks, groups,
   * the eventfd (-1 until asked for) and whether it was signalled. */
  pthread_mutex_t dispatch_lock;
  tdm_task *dq_head, *dq_tail;
  struct tdm_group *dg_head;
  int event_fd;
  bool signalled;
  _Atomic bool dispatching; /* a thread is in tdm_dispatch */
  /* The thread that dispatches (tdm__thread_mark's): the last to call
   * tdm_dispatch, or the creator before any call. Its waits dispatch. */
  _Atomic uintptr_t dispatcher;
  unsigned dwaiting; /* its waits blocked now (dispatch_lock): a post wakes them */
  unsigned dq_pinned; /* pinned tasks in the queue (dispatch_lock) */
  _Atomic bool pinned;      /* a task pinned to the application's thread was created */
  tdm_spinlock pool_lock;
  tdm_task *pool_free;
  /* The free tasks of threads that are not workers. */
  _Alignas(TDM_CACHE_LINE) tdm_spinlock ext_lock;
  tdm_task *ext_free;
  void **slabs;
  size_t nslabs, slabs_cap;

  /* Explicit-dependency graph edits are serialised: a spin lock (it
   * yields when held long, as by a cycle search), four of them a task
   * made by tdm_task_create, where a mutex cost a chain 12% more. */
  tdm_spinlock deps_lock;
  /* Reductions (core/reduce.c): binding tasks to lanes and combining
   * lanes, one thread at a time, so that each lane's tasks and its
   * combination come in one order. */
  tdm_spinlock redux_lock;
  tdm_order graph; /* created tasks in order (depgraph.c), under deps_lock */

  /* Every handle not yet freed (for destroy), and the recently
   * unregistered ones, kept alive so that a stale use is detected. */
  pthread_mutex_t handles_lock;
  tdm_handle *all_handles;
  tdm_ranges ranges; /* the memory of registered handles */
  tdm_handle *quarantine_head, *quarantine_tail;
  size_t nquarantine;

  /* Devices (platform/devices.h), as the backends' discoveries found
   * them: the platforms (OpenCL's), every device's record, what is used.
   * Device worker k (worker id nworkers + k) drives device_of[k]. */
  tdm_platform_record *platforms;
  unsigned nplatforms;
  tdm_device_record *devices;
  unsigned ndevices;
  tdm_opencl_report opencl_report; /* for tdm_machine_info */
  tdm_device_selection selection;
  char *model_file;     /* the application's models in the cache (tdm__model_file) */
  pthread_mutex_t cache_lock; /* guards the two below */
  bool cache_tried;           /* tdm__cache_fd looked for the directory */
  int cache_fd;               /* the directory, open; -1: none */
  unsigned ndevice_workers;
  unsigned *device_of;
  /* The backends that take part (tdm__backends asked in order; each
   * drives device workers first .. first + n - 1), and device worker k's
   * (an index in attached). */
  tdm_attached attached[TDM_MAX_BACKENDS];
  unsigned nattached;
  bool sim_beside_opencl; /* tdm_config.sim's "+opencl" */
  bool sim_from_env;      /* tdm_config.sim is TANDEM_SIM's: a bad one is ignored */
  /* A topology the environment named (TANDEM_SYNTHETIC_TOPOLOGY or
   * _XML: its name), in place of the config's (kept: a bad one is
   * ignored, creation uses the config's). During creation only. */
  const char *topology_env, *cfg_synthetic, *cfg_xml;
  uint8_t attached_of[TDM_MAX_DEVICE_WORKERS];
  /* Every CPU task is timed: recording, timing, or an emulated machine
   * whose CPU tasks are stretched (cpu_stretch, its backend's
   * cpu_factor, else NULL). Set before the workers start. */
  bool time_cpu_tasks;
  double (*cpu_stretch)(const tdm_runtime *rt, unsigned worker, const tdm_task *t);
  tdm_nodes nodes;            /* memory nodes, each backend's through its ops */
  /* Set once the devices are started, after the CPU workers (whose
   * idle rounds look at the devices only from then on). */
  _Atomic bool devices_ready;
  tdm_policy policy;         /* cfg.scheduler */
  struct tdm_sched *sched;   /* placement policy and models (core/place.c) */

  /* What tdm_runtime_machine and friends report (machine.c). */
  struct tdm_machine *machine;

  /* Recording (trace.c): tracing, the graph, or statistics asked for;
   * timing: task and idle times measured. */
  bool recording, timing;
  _Atomic uint64_t next_task_id;
  uint64_t trace_t0; /* creation time: the trace's zero */
  tdm_trace_buf trace_shared; /* threads that are not workers */
  tdm_trace_marks trace_marks; /* pause, resume, cancel */
  pthread_mutex_t trace_lock; /* one flush at a time */

  /* Codelet tasks that failed or were cancelled since tdm_wait_all last
   * reported them (complete.c), and the first of each, for its message. */
  pthread_mutex_t fail_lock;
  unsigned long nfailed, ncancelled, nkernel;
  tdm_status first_status;
  char first_failed[64], first_cancelled[64], first_kernel[64];

  bool mutexes_ready;
  unsigned fork_generation; /* tdm__fork_generation at creation */
  pid_t pid;                /* the creating process, for messages */
  tdm_faults faults; /* injected (support/faults.c) */
  /* Device workers taken out of placement (bit k: device worker k), and
   * the times of each one's last failures (core/place.c, under fail_lock). */
  _Atomic uint64_t quarantined;
  uint64_t failed_at[TDM_MAX_DEVICE_WORKERS][TDM_MAX_QUARANTINE_FAILURES];
  _Atomic uint64_t nretries; /* tries of failed tasks placed again (complete.c) */
  _Atomic uint64_t nreplayed; /* tasks run again by lineage (lineage.c) */
  /* Tasks only the CPU workers run, counted while a scheduler places
   * work (place.c): seen once any was; the counts of threads that are
   * not workers; the last sums read, refreshed every few placements on a
   * machine of many workers: queued << 32 | running, and the reads. */
  _Atomic bool cpu_only_seen;
  _Atomic uint64_t cpu_only_in, cpu_only_started, cpu_only_out;
  _Atomic uint64_t cpu_only_sums;
  _Atomic unsigned cpu_only_reads;
  /* The watchdog (watchdog.c; NULL: off), and the device workers it
   * found hung (bit k): nothing more starts there (tdm__fault). */
  struct tdm_watchdog *watchdog;
  _Atomic uint64_t hung;
  struct tdm_verify *verify; /* tdm_config.verify (verify.c); NULL: off */
  /* A mutation for the tests (test-driver-faults): the OpenCL backend
   * takes every command's event as successful, whatever its status, so
   * that the tests show they catch what that would cost. */
  bool blind_to_events;
};

/* Backend b's part in rt, or NULL when it takes none; its state. */
static inline const tdm_attached *tdm__attached_of(const tdm_runtime *rt,
                                                   const tdm_backend *b) {
  for (unsigned i = 0; i < rt->nattached; i++)
    if (rt->attached[i].ops == b)
      return &rt->attached[i];
  return NULL;
}
static inline void *tdm__state_of(const tdm_runtime *rt, const tdm_backend *b) {
  const tdm_attached *a = tdm__attached_of(rt, b);
  return a ? a->state : NULL;
}

/* The backend that drives device worker k. */
static inline const tdm_backend *tdm__backend_of(const tdm_runtime *rt, unsigned k) {
  return rt->attached[rt->attached_of[k]].ops;
}

/* The worker the calling thread is, or NULL. */
extern _Thread_local tdm_worker *tdm__self TDM_TLS_MODEL;

static inline tdm_worker *tdm__self_in(const tdm_runtime *rt) {
  tdm_worker *w = tdm__self;
  return (w && w->rt == rt) ? w : NULL;
}

/* Depth of the application's code the runtime runs on this thread (a
 * task's function, a completion callback, an OpenCL enqueue function,
 * a device event callback): a submission there never waits for room.
 * TDM_USER_CODE brackets such a call. */
extern _Thread_local unsigned tdm__in_user_code TDM_TLS_MODEL;
/* The runtime whose tdm_dispatch runs on this thread now (its pinned
 * tasks and callbacks), or NULL. */
extern _Thread_local const tdm_runtime *tdm__dispatch_of TDM_TLS_MODEL;
#define TDM_USER_CODE(call)                                                    \
  do {                                                                         \
    tdm__in_user_code++;                                                       \
    call;                                                                      \
    tdm__in_user_code--;                                                       \
  } while (0)
/* Code of the application that a runtime calls on a thread where a
 * blocking call could deadlock it (an event callback, a build callback,
 * an enqueue function or work-size function: TDM_EVENT_CODE), and the
 * runtime whose device lock this thread holds meanwhile (an enqueue or
 * work-size function: TDM_LOCKED_CODE), so that the calls that would
 * wait, or take that lock, refuse (TDM_ERR_IN_TASK). */
extern _Thread_local const struct tdm_runtime *tdm__event_of TDM_TLS_MODEL;
extern _Thread_local const struct tdm_runtime *tdm__locked_of TDM_TLS_MODEL;
#define TDM_EVENT_CODE(rt, call)                                               \
  do {                                                                         \
    const struct tdm_runtime *tdm_was_ = tdm__event_of;                         \
    tdm__event_of = (rt);                                                      \
    TDM_USER_CODE(call);                                                       \
    tdm__event_of = tdm_was_;                                                  \
  } while (0)
#define TDM_LOCKED_CODE(rt, call)                                              \
  do {                                                                         \
    const struct tdm_runtime *tdm_held_ = tdm__locked_of;                       \
    tdm__locked_of = (rt);                                                     \
    TDM_EVENT_CODE(rt, call);                                                  \
    tdm__locked_of = tdm_held_;                                                \
  } while (0)
/* Handles this thread acquired and has not released yet (any runtime). */
extern _Thread_local int tdm__acquired_here TDM_TLS_MODEL;
extern _Thread_local tdm_status tdm__callback_status TDM_TLS_MODEL;
extern _Thread_local unsigned tdm__callback_worker TDM_TLS_MODEL;
/* In a callback: when the try that ended ran (tdm__now_ns), 0 when not
 * timed. */
extern _Thread_local uint64_t tdm__callback_t0 TDM_TLS_MODEL, tdm__callback_t1 TDM_TLS_MODEL;

/* t's outcome as it is about to start: a cancelled group cancels it. */
static inline int32_t tdm__task_outcome_at_start(tdm_task *t) {
  int32_t s = atomic_load_explicit(&t->outcome, memory_order_relaxed);
  if (__builtin_expect(t->group != NULL, 0) && !s &&
      atomic_load_explicit(&t->group->cancel, memory_order_relaxed)) {
    s = TDM_ERR_CANCELLED;
    atomic_store_explicit(&t->outcome, s, memory_order_relaxed);
  }
  return s;
}

/* Whether t ended cancelled by its group's tdm_group_cancel (not a
 * failure to report). */
static inline bool tdm__cancelled_by_group(const tdm_task *t, int32_t status) {
  return status == TDM_ERR_CANCELLED && t->group &&
         atomic_load_explicit(&t->group->cancel, memory_order_relaxed);
}

/* t's codelet's name, for messages (tdm__name_or). */
static inline const char *tdm__codelet_name(const tdm_task *t) {
  return tdm__name_or(t->codelet ? t->codelet->name : NULL);
}

/* The bytes of the elements of a task's buffers (the trace, the
 * models). */
static inline uint64_t tdm__task_bytes(const tdm_task *t) {
  uint64_t n = 0;
  tdm_handle *const *hs = tdm__task_handles(t);
  for (unsigned i = 0; i < t->nbuf; i++) {
    const tdm_buffer *b = &hs[i]->buf;
    n += (uint64_t)b->nx * b->ny * b->elem_size;
  }
  return n;
}

#endif
