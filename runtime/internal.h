/* Internal declarations shared by the runtime's files. Nothing here is
 * public: internal names are tdm__* or file-static. */
#ifndef TDM_INTERNAL_H
#define TDM_INTERNAL_H

#include "tandem.h"

#include <hwloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "core/deque.h"
#include "support/spinlock.h"
#include "data/coherence.h"
#include "../backends/backend.h"
#include "platform/devices.h"
#include "sched/policy.h"
#include "support/trace.h"

typedef struct tdm_sched tdm_sched;

/* ---- small utilities -------------------------------------------------- */

/* A growable array of task references (inline room for two). */
typedef struct tdm_taskvec {
  struct tdm_task **items;
  unsigned n, cap;
  struct tdm_task *inline_items[2];
} tdm_taskvec;

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
typedef struct tdm_graph {
  tdm_links *head, *tail;
  uint64_t epoch; /* of the last search */
  uint64_t gap;   /* between labels given anew (2^32; a test seam) */
} tdm_graph;

void tdm__taskvec_init(tdm_taskvec *v);
int tdm__taskvec_push(tdm_runtime *rt, tdm_taskvec *v, struct tdm_task *t);
void tdm__taskvec_free(tdm_taskvec *v);
/* Drops the references v holds (task.c) and frees its storage. */
void tdm__taskvec_release(tdm_taskvec *v);
/* Moves src's contents to dst (which must be empty); src becomes empty. */
void tdm__taskvec_move(tdm_taskvec *dst, tdm_taskvec *src);

/* ---- memory ------------------------------------------------------------ */

/* The allocations a running runtime makes go through these, so that tests
 * can make one of them fail (tdm__fail_allocation) and check that every
 * call then reports TDM_ERR_NO_MEMORY cleanly, as SQLite's fault-injection
 * seams do. */
void *tdm__malloc(tdm_runtime *rt, size_t size);
void *tdm__calloc(tdm_runtime *rt, size_t n, size_t size);
void *tdm__realloc(tdm_runtime *rt, void *p, size_t size);
void *tdm__aligned_alloc(tdm_runtime *rt, size_t align, size_t size);
/* Zeroed memory aligned to `align` (a power of two), for structs with
 * _Alignas members (calloc promises 16 bytes only); free() frees it. Not
 * a fault-injection seam: the runtime and its workers are made with it. */
void *tdm__zalloc_aligned(size_t align, size_t size);
/* Test seam: the allocation after the next `n` ones fails (n = 0: the next
 * one); a negative n disarms. */
void tdm__fail_allocation(tdm_runtime *rt, long n);

/* Device faults, injected where a backend launches a task and where it
 * learns that the task's commands completed (the task fails there as if
 * the device had reported an error), where it copies between a device
 * and the host (the copy is started and completes with an error, its
 * bytes not landed, as a device reports it through the copy's event),
 * and where the memory module allocates a buffer on a device (none is
 * made, as when the device is out of memory); and where a try that the
 * watchdog watches starts (its completion never comes: a hung device,
 * see watchdog.c). */
enum {
  TDM_FAULT_LAUNCH,
  TDM_FAULT_COMPLETE,
  TDM_FAULT_COPY,
  TDM_FAULT_ALLOC,
  TDM_FAULT_HANG,
  TDM_NFAULTS
};
/* Test seam: from now on each operation of that kind fails with
 * probability p (0 disarms), drawn from a sequence seeded with seed. */
void tdm__faults_set(tdm_runtime *rt, unsigned kind, double p, uint64_t seed);
/* Whether this operation of that kind on device worker k fails: TDM_OK,
 * TDM_ERR_SYSTEM (injected), or TDM_ERR_DEVICE_LOST (its device was made
 * to stop working, or is hung); logged. */
tdm_status tdm__fault(tdm_runtime *rt, unsigned kind, unsigned k);
/* Arms the faults tdm_config.faults describes (NULL: none): TDM_OK, or
 * TDM_ERR_INVALID_ARG with a message naming the bad term. */
tdm_status tdm__faults_parse(tdm_runtime *rt, const char *spec);

/* FNV-1a over n bytes, continuing from h (TDM_FNV_OFFSET to start). */
#define TDM_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t tdm__fnv1a(const void *data, size_t n, uint64_t h);
/* The median of v[0 .. n-1], n > 0; sorts v. */
double tdm__median(double *v, unsigned n);
/* ---- files (files.c: what is trusted and how files are written) ------- */

/* Tandem's cache directory (compiled programs, performance models), open,
 * or -1 when there is none to use: tdm_config.cache_dir, else
 * $XDG_CACHE_HOME/tandem, else $HOME/.cache/tandem, created (mode 0700)
 * if missing, and used only if it belongs to this user and no one else
 * may write to it (else logged once). Opened on first use, kept until
 * destroy (tdm__cache_close). */
int tdm__cache_fd(tdm_runtime *rt);
/* The cache directory's path, malloc'd: `dir` (tdm_config.cache_dir) when
 * set, else $XDG_CACHE_HOME/tandem, else $HOME/.cache/tandem; NULL when
 * none. */
char *tdm__cache_path(const char *dir);
void tdm__cache_close(tdm_runtime *rt);
/* Opens `name` (relative to dirfd) for reading if nobody but this user
 * could have written it: a regular file, not a link, owned by this user,
 * not writable by group or others. -1 when it is missing (quietly) or
 * untrusted (logged, `what` naming the file's use). rt may be NULL. */
int tdm__open_trusted(const tdm_runtime *rt, int dirfd, const char *name, const char *what);

/* A file being written: a new file under a unique name beside its final
 * name, renamed over it by tdm__out_commit. */
typedef struct tdm_outfile {
  FILE *f;             /* write the contents here */
  int dirfd;           /* the directory the file goes in */
  bool own_dir;        /* dirfd was opened for this file */
  tdm_log_level level; /* of the messages on failure */
  const char *what;
  char *name;          /* final name, in dirfd */
  char tmp[256];       /* temporary name, in dirfd; empty when none */
} tdm_outfile;
/* Starts writing `path` (relative to dirfd: AT_FDCWD for a path of the
 * user's). The temporary file is created with O_EXCL | O_NOFOLLOW and
 * `mode` (less the umask); a final name that exists and is not a regular
 * file (a link, a device, a directory) is refused. False, logged at
 * `level` with `what`, on failure. rt may be NULL. */
bool tdm__out_open(const tdm_runtime *rt, tdm_outfile *o, int dirfd, const char *path,
                   mode_t mode, tdm_log_level level, const char *what);
/* Closes the file and renames it into place; false (logged, the temporary
 * file removed, the old file left) on any write error. */
bool tdm__out_commit(const tdm_runtime *rt, tdm_outfile *o);
/* Gives up: closes and removes the temporary file. */
void tdm__out_abort(tdm_outfile *o);

/* Configuration text (runtime.c). A count: decimal digits and nothing
 * else (no sign, no space), at most max. Bytes: the same with an optional
 * k, M or G suffix (powers of 1024), at most max in all. */
bool tdm__parse_count(const char *s, uint64_t max, uint64_t *out);
bool tdm__parse_bytes(const char *s, uint64_t max, uint64_t *out);
/* A time: a number from 0 with the unit s, ms or us, at most max seconds,
 * into *out (seconds). */
bool tdm__parse_seconds(const char *s, double max, double *out);

/* The largest device memory limit taken (tdm_config.device_memory_limit,
 * TANDEM_DEVICE_MEMORY_LIMIT): 1 PiB, beyond any device. */
#define TDM_MAX_MEMORY_LIMIT (UINT64_C(1) << 50)

/* Seconds to nanoseconds, saturating (negative or NaN: 0; beyond about
 * 146 years: that), so that modelled times never overflow a conversion. */
static inline uint64_t tdm__ns_of(double seconds) {
  const double most = 4.6e18;
  double ns = seconds * 1e9;
  return ns > 0 ? (ns < most ? (uint64_t)ns : (uint64_t)most) : 0;
}

/* ---- fork --------------------------------------------------------------- */

/* fork()s seen by this process: a handler registered with pthread_atfork
 * at the first tdm_runtime_create adds one in each child. A runtime whose
 * fork_generation differs was made by a parent: its threads do not exist
 * here, so every call on it fails with TDM_ERR_FORKED rather than wait
 * for them. Process-wide by nature: fork is. */
extern _Atomic unsigned tdm__fork_generation;
/* relaxed: written once, in the child, before any other thread exists */
#define tdm__forked(rt)                                                        \
  (atomic_load_explicit(&tdm__fork_generation, memory_order_relaxed) !=        \
   (rt)->fork_generation)
/* Logs that `what` was called on a parent's runtime; TDM_ERR_FORKED. */
tdm_status tdm__forked_error(const tdm_runtime *rt, const char *what);
#define TDM_FORK_GUARD(rt, what)                                               \
  do {                                                                         \
    if (tdm__forked(rt))                                                       \
      return tdm__forked_error((rt), (what));                                  \
  } while (0)

/* ---- logging ---------------------------------------------------------- */

void tdm__log(const tdm_runtime *rt, tdm_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The i-th TANDEM_* variable Tandem reads (runtime.c's list), NULL past
 * the last. */
const char *tdm__env_name(size_t i);
void tdm__log_stderr(void *data, tdm_log_level level, const char *msg);
void tdm__vlog(tdm_log_fn fn, void *data, tdm_log_level max,
               tdm_log_level level, const char *fmt, va_list ap);

/* Calls a pthread function whose failure can only come from a bug (an
 * invalid or corrupted object): logs it, and goes on. */
/* Names the calling thread (printf-style, cut to 15 characters: what
 * `top -H`, `perf` and debuggers show, e.g. "tandem-cpu3"); a failure is
 * logged as a warning. */
void tdm__name_thread(const tdm_runtime *rt, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define TDM_PTHREAD(rt, call)                                                  \
  do {                                                                         \
    int tdm__err = (call);                                                     \
    if (tdm__err)                                                              \
      tdm__log((rt), TDM_LOG_ERROR, "%s failed: error %d (%s:%d)", #call,      \
               tdm__err, __FILE__, __LINE__);                                  \
  } while (0)

/* ---- topology and worker placement (topology.c) ------------------------ */

/* How many leaves and objects a synthetic description makes: the arities
 * (a number at the start of a level, or after "type:") multiplied level
 * by level, ignoring attributes in parentheses; saturating. */
void tdm__synthetic_size(const char *s, uint64_t *leaves, uint64_t *objects);

/* Where each worker runs and whom it steals from, computed from an hwloc
 * topology. Kept separate from thread creation so that tests can check it
 * on synthetic topologies. */
typedef struct tdm_worker_plan {
  unsigned nworkers;
  unsigned ncores;          /* usable cores found */
  hwloc_bitmap_t usable;    /* the PUs they have that the process may use */
  hwloc_bitmap_t *cpusets;  /* per worker: where to bind (owned) */
  unsigned *core_of;        /* per worker: index of its core in [0,ncores) */
  unsigned *core_logical;   /* per worker: hwloc logical index of its core */
  /* Victims of worker w: victims[w][0 .. nworkers-2], nearest first.
   * group_end[w][k] is the end (exclusive) of the k-th group of equally
   * near victims; ngroups[w] groups. */
  unsigned **victims;
  unsigned **group_end;
  unsigned *ngroups;
  /* CPU kinds (hybrid chips: efficiency and performance cores), from
   * hwloc's cpukinds, ranked as hwloc ranks them: 0 is the most energy
   * efficient. kind_of[w] is the kind of worker w's core; nkinds is 1
   * where the machine reports no kinds. */
  unsigned nkinds;
  unsigned *kind_of;
} tdm_worker_plan;

/* Loads the topology of this machine, a synthetic one (synthetic != NULL)
 * or an XML one (xml != NULL).
 * Returns TDM_OK or TDM_ERR_TOPOLOGY (logged). */
tdm_status tdm__topology_load(const tdm_runtime *rt, const char *synthetic,
                              const char *xml, hwloc_topology_t *out);
/* nworkers 0: one per usable core. Returns TDM_OK, TDM_ERR_TOPOLOGY (no
 * usable core) or TDM_ERR_NO_MEMORY. */
tdm_status tdm__plan_workers(const tdm_runtime *rt, hwloc_topology_t topo,
                             unsigned nworkers, tdm_worker_plan *plan);
void tdm__plan_free(tdm_worker_plan *plan);
/* OS index of the one NUMA node whose CPUs intersect `set`, or -1 when
 * none or several do. */
int tdm__nearest_numa(hwloc_topology_t topo, hwloc_const_cpuset_t set);

/* ---- tasks ------------------------------------------------------------ */

enum tdm_task_kind {
  TDM_TASK_CODELET = 0, /* runs on a worker */
  TDM_TASK_ACQUIRE = 1, /* a host acquisition: becomes ready, never queued */
  TDM_TASK_FREE = 2     /* in the pool */
};

enum tdm_task_state {
  TDM_TS_CREATED = 0,
  TDM_TS_SUBMITTED = 1, /* waiting for predecessors */
  TDM_TS_READY = 2,     /* queued (or, for an acquisition, granted) */
  TDM_TS_DONE = 3
};

#define TDM_INLINE_EDGES 4
#define TDM_MAX_RETRIES 100 /* tdm_config.retries */
#define TDM_MAX_DEVICE_WORKERS 64 /* bits of tdm_task.dev_mask */
/* A device that fails tdm_config.quarantine_failures tries (at most
 * TDM_MAX_QUARANTINE_FAILURES) within TDM_QUARANTINE_WINDOW_NS is taken
 * out of placement. */
#define TDM_MAX_QUARANTINE_FAILURES 16
/* tdm_config.lineage: the longest chain kept (a handle's nchain is a uint8_t). */
#define TDM_MAX_LINEAGE 255
#define TDM_MAX_LOST 8 /* device=D:lost_at=T terms of tdm_config.faults */
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
  bool user_ref;
  bool device_ok; /* may run on a device (a backend's prepare) */
  /* Where the scheduler placed it (0: the CPU workers, 1 + k: device k;
   * -1: not placed by a model) and the execution time it predicted. */
  int8_t sched_cls;
  bool sched_calib; /* placed there to calibrate the model */
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
typedef struct tdm_range {
  uintptr_t lo, hi; /* [lo, hi) */
  uintptr_t max_hi; /* the largest hi in this subtree */
  uint32_t prio;
  struct tdm_range *left, *right;
  const tdm_buffer *buf; /* the handle's; NULL when not in the tree */
} tdm_range;
typedef struct tdm_ranges {
  tdm_range *root;
  uint64_t rng; /* treap priorities; nonzero */
} tdm_ranges;
/* [*lo, *hi): the bytes from b's first element to the end of its last row;
 * false when that overflows. */
bool tdm__buffer_span(const tdm_buffer *b, uintptr_t *lo, uintptr_t *hi);
/* A registered range sharing a byte with b (exactly: rows that interleave
 * do not count), or NULL. */
tdm_range *tdm__ranges_find(const tdm_ranges *t, const tdm_buffer *b);
/* Adds x, the range of b (whose span does not overflow); removes it. */
void tdm__ranges_insert(tdm_ranges *t, tdm_range *x, const tdm_buffer *b);
void tdm__ranges_remove(tdm_ranges *t, tdm_range *x);

struct tdm_handle {
  _Atomic uint32_t magic;
  /* References: one while registered (then one while in quarantine), and
   * for a tile one per task naming it, until that task is freed. The
   * struct is freed when they are all gone. */
  _Atomic int32_t refs;
  uint8_t kind;
  tdm_runtime *rt;
  tdm_buffer buf;
  tdm_spinlock lock; /* guards everything below */
  /* Dependency state: the tasks whose writes are the current contents
   * (normally one; several after an unpartition) and the readers of those
   * contents. A reader waits for the writers; a writer waits for both. */
  tdm_taskvec writers;
  tdm_taskvec readers;
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
  tdm_range range;
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

/* A task of group t->group was built (t holds a reference), submitted
 * (counted; cancelled if the group is), ended (counted, progress). */
void tdm__group_joined(tdm_task *t);
void tdm__group_submitted(tdm_task *t);
void tdm__group_ended(tdm_task *t);
void tdm__group_unref(tdm_group *g);
/* Frees the groups left (runtime teardown). */
void tdm__groups_free(tdm_runtime *rt);
/* Calls g's progress_fn with its progress now, on this thread. */
void tdm__group_progress_call(tdm_group *g);

/* dispatch.c: queues for tdm_dispatch a ready task pinned to the
 * application's thread, or an ended task whose callback runs there (the
 * reference it holds goes with it); g's progress call. */
void tdm__dispatch_task(tdm_runtime *rt, tdm_task *t);
void tdm__dispatch_progress(tdm_group *g);
void tdm__dispatch_close(tdm_runtime *rt);
/* Runs a task pinned to the application's thread, in tdm_dispatch. */
void tdm__task_run_here(tdm_task *t);

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
  /* Free tasks this worker may hand out without locking. */
  tdm_task *free_tasks;
  unsigned nfree;
  /* Tasks finished here and not yet subtracted from rt->inflight. */
  unsigned unflushed;
  /* Statistics (trace.c): written by this worker only (tdm__count),
   * read by anyone. Times only while rt->timing. */
  _Atomic uint64_t tasks_run, busy_ns, idle_ns, parked_ns, steals_tried, steals_won;
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

struct tdm_runtime {
  tdm_config cfg;
  char *synthetic; /* cfg.synthetic_topology points here */
  char *xml;       /* cfg.topology_xml points here */
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
  /* The dispatch queue (dispatch.c), under dispatch_lock: tasks, groups,
   * the eventfd (-1 until asked for) and whether it was signalled. */
  pthread_mutex_t dispatch_lock;
  tdm_task *dq_head, *dq_tail;
  struct tdm_group *dg_head;
  int event_fd;
  bool signalled;
  _Atomic bool dispatching; /* a thread is in tdm_dispatch */
  _Atomic bool pinned;      /* a task pinned to the application's thread was created */
  tdm_spinlock pool_lock;
  tdm_task *pool_free;
  /* The free tasks of threads that are not workers. */
  _Alignas(TDM_CACHE_LINE) tdm_spinlock ext_lock;
  tdm_task *ext_free;
  void **slabs;
  size_t nslabs, slabs_cap;

  /* Explicit-dependency graph edits (rare) are serialised. */
  pthread_mutex_t deps_lock;
  tdm_graph graph; /* created tasks in order (depgraph.c), under deps_lock */

  /* Every handle not yet freed (for destroy), and the recently
   * unregistered ones, kept alive so that a stale use is detected. */
  pthread_mutex_t handles_lock;
  tdm_handle *all_handles;
  tdm_ranges ranges; /* the memory of registered handles */
  tdm_handle *quarantine_head, *quarantine_tail;
  size_t nquarantine;

  /* OpenCL devices (devices.h, backends/opencl/probe.c): what was found, what is used.
   * Device worker k (worker id nworkers + k) drives device_of[k]. */
  struct tdm_opencl *opencl;
  tdm_platform_record *platforms;
  unsigned nplatforms;
  tdm_device_record *devices;
  unsigned ndevices;
  tdm_status opencl_status;
  char opencl_summary[256];
  tdm_device_selection selection;
  char *devices_text; /* cfg.devices points here */
  char *opencl_library; /* cfg.opencl_library points here */
  char *cache_dir;      /* cfg.cache_dir points here */
  char *app;            /* cfg.app points here */
  char *model_file;     /* the application's models in the cache (tdm__model_file) */
  pthread_mutex_t cache_lock; /* guards the two below */
  bool cache_tried;           /* tdm__cache_fd looked for the directory */
  int cache_fd;               /* the directory, open; -1: none */
  unsigned ndevice_workers;
  unsigned *device_of;
  const tdm_backend *claimed; /* the backend whose runtime this is, or NULL */
  const tdm_backend *dev;     /* the same, when it has device workers */
  /* Every CPU task is timed: recording, timing, or an emulated machine
   * whose CPU tasks are stretched (cpu_stretch, its backend's
   * cpu_factor, else NULL). Set before the workers start. */
  bool time_cpu_tasks;
  double (*cpu_stretch)(const tdm_runtime *rt, unsigned worker, const tdm_task *t);
  void *backend;              /* its state, opaque here */
  tdm_nodes nodes;            /* memory nodes, set up by it (none: n 0) */
  /* Set once the devices are started, after the CPU workers (whose
   * idle rounds look at the devices only from then on). */
  _Atomic bool devices_ready;
  char *sim_text;            /* cfg.sim points here */
  /* Emulated machines run `time_scale` times slower than real ones (see
   * tdm_config.sim): CPU tasks take that many times their real time. */
  double time_scale;
  tdm_policy policy;         /* cfg.scheduler */
  struct tdm_sched *sched;   /* placement policy and models (sched.c) */
  /* Tasks whose device commands completed, pushed by OpenCL's callbacks
   * (a Treiber stack through pool_next), finished by CPU workers. */
  _Alignas(TDM_CACHE_LINE) _Atomic(tdm_task *) completions;
  /* Ready tasks that a CPU worker or a device may run, whichever is free
   * first (a FIFO through pool_next). */
  pthread_mutex_t any_lock;
  tdm_task *any_head, *any_tail;
  _Atomic unsigned any_n;

  /* What tdm_runtime_machine and friends report (machine.c). */
  struct tdm_machine *machine;

  /* Recording (trace.c): tracing, the graph, or statistics asked for;
   * timing: task and idle times measured. */
  bool recording, timing;
  char *trace_path, *dag_path; /* cfg.trace_path, cfg.dag_path point here */
  _Atomic uint64_t next_task_id;
  uint64_t trace_t0; /* creation time: the trace's zero */
  tdm_trace_buf trace_shared; /* threads that are not workers */
  pthread_mutex_t trace_lock; /* one flush at a time */

  /* Codelet tasks that failed or were cancelled since tdm_wait_all last
   * reported them (task.c), and the first of each, for its message. */
  pthread_mutex_t fail_lock;
  unsigned long nfailed, ncancelled;
  tdm_status first_status;
  char first_failed[64], first_cancelled[64];

  bool mutexes_ready;
  unsigned fork_generation; /* tdm__fork_generation at creation */
  pid_t pid;                /* the creating process, for messages */
  _Atomic long alloc_countdown; /* see tdm__fail_allocation; -1: off */
  /* see tdm__fault: the probabilities as fractions of 2^32 (0: off) */
  _Atomic uint32_t fault_p[TDM_NFAULTS];
  _Atomic uint64_t fault_draws;
  uint64_t fault_nth[TDM_NFAULTS]; /* 0: off; else every nth fails */
  /* Devices (records) made to stop working at a time after creation, or
   * at their `after`th launch (0: by time). */
  struct {
    unsigned device;
    uint64_t at_ns, after;
    _Atomic uint64_t launches;
  } lost[TDM_MAX_LOST];
  unsigned nlost;
  _Atomic uint64_t lost_said; /* bit i: lost[i] was logged */
  /* Device workers taken out of placement (bit k: device worker k), and
   * the times of each one's last failures (sched.c, under fail_lock). */
  _Atomic uint64_t quarantined;
  uint64_t failed_at[TDM_MAX_DEVICE_WORKERS][TDM_MAX_QUARANTINE_FAILURES];
  _Atomic uint64_t fault_count[TDM_NFAULTS];
  _Atomic uint64_t faults_injected; /* every kind, for tests */
  _Atomic uint64_t nretries; /* tries of failed tasks placed again (task.c) */
  _Atomic uint64_t nreplayed; /* tasks run again by lineage (lineage.c) */
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

/* A helper split out of a hot function for reading, kept inlined. */
#if defined(__GNUC__)
#define TDM_ALWAYS_INLINE __attribute__((always_inline)) inline
#define TDM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TDM_LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define TDM_ALWAYS_INLINE inline
#define TDM_UNLIKELY(x) (x)
#endif

/* The worker the calling thread is, or NULL. */
/* Initial-exec: the variable is in the static TLS block, read with one
 * instruction instead of a call to __tls_get_addr (the default for shared
 * libraries); it is asked on every submit and completion. A library that
 * is dlopen()ed may still use it: glibc keeps room in the static block
 * for such small variables. */
#if defined(__GNUC__)
#define TDM_TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#define TDM_TLS_MODEL
#endif
extern _Thread_local tdm_worker *tdm__self TDM_TLS_MODEL;

static inline tdm_worker *tdm__self_in(const tdm_runtime *rt) {
  tdm_worker *w = tdm__self;
  return (w && w->rt == rt) ? w : NULL;
}

/* depgraph.c */
/* Gives a task being created (tdm_task_create) its place in the graph, at
 * the end of the order; takes deps_lock. */
tdm_status tdm__graph_enter(tdm_runtime *rt, tdm_task *t);
/* The rest under deps_lock. */
/* Adds pred to task's explicit dependencies (a reference held), unless
 * that would form a cycle (TDM_ERR_CYCLE) or memory runs out. task is
 * created; pred may have been submitted. */
tdm_status tdm__graph_add(tdm_runtime *rt, tdm_task *task, tdm_task *pred);
/* Drops a task's links (it is submitted or discarded) and, when `unref`,
 * the references they hold (not at runtime destroy: every task goes). */
void tdm__graph_drop_links(tdm_runtime *rt, tdm_task *t, bool unref);
static inline void tdm__graph_drop(tdm_runtime *rt, tdm_task *t, bool unref) {
  if (t->links) /* most tasks never had explicit dependencies */
    tdm__graph_drop_links(rt, t, unref);
}

/* worker.c */
/* One round of polling while idle or waiting: for the first rounds a short
 * growing pause (polling hard would steal the cache lines of the threads
 * producing work), then sched_yield (a worker may share its core with a
 * submitting thread; yielding lets that thread run). Returns false, time
 * to block, once spin_us have passed; *deadline starts at 0. */
bool tdm__idle_step(unsigned round, uint64_t *deadline, unsigned spin_us);
void *tdm__worker_main(void *arg);
/* Makes a ready task runnable: on the calling worker's deque, or on the
 * injection stack for other threads; wakes a sleeper if any. */
void tdm__schedule(tdm_runtime *rt, tdm_task *t);
void tdm__wake_all(tdm_runtime *rt);
/* The oldest task of CPU worker `worker`'s deque of the highest band that
 * has one (a thief's end), or NULL. */
tdm_task *tdm__steal_from(tdm_runtime *rt, unsigned worker);
/* Whether the runtime is paused: devices start no task (tdm__devq_next
 * gives none); tdm_runtime_resume kicks them. */
bool tdm__devices_paused(const tdm_runtime *rt);
/* Subtracts the worker's unflushed finished tasks from rt->inflight. */
void tdm__flush_finished(tdm_worker *w);

/* task.c */
tdm_task *tdm__task_alloc(tdm_runtime *rt);
void tdm__task_unref(tdm_task *t);
static inline void tdm__task_ref(tdm_task *t) {
  /* relaxed: taking a reference needs no ordering, only releasing does */
  atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}
/* Runs t on worker w (the calling thread). */
void tdm__task_execute(tdm_task *t, tdm_worker *w);
/* The bytes of the elements of a task's buffers (for the trace). */
uint64_t tdm__task_bytes(const tdm_task *t);
/* Finishes t: releases successors, wakes waiters, drops the runtime's
 * reference. Used for codelet tasks and host acquisitions alike. */
void tdm__task_finish(tdm_task *t);
/* The end of a codelet task, wherever it ran (a CPU worker, a device):
 * it ran on worker `worker` (a CPU worker's id, or nworkers + k for
 * device k) from t0 to t1 (tdm__now_ns) with `status` (TDM_OK, or why it
 * did not run: its outputs are unchanged then). Records it in the trace
 * and the model when it succeeded, calls its callback, finishes it. The
 * one way a backend ends a task. */
void tdm__task_done(tdm_task *t, unsigned worker, tdm_status status, uint64_t t0,
                    uint64_t t1);
/* A try failed on device worker k with status (not a cancellation):
 * counted; at tdm_config.quarantine_failures within the window, the
 * device is quarantined: out of placement, its queued tasks placed
 * again. */
void tdm__device_failed(tdm_runtime *rt, unsigned k, tdm_status status);
/* Takes device worker k out of placement at once, saying why (logged,
 * tdm_device_info, tdm_config.device_event_fn); nothing if it is out. */
void tdm__device_quarantine(tdm_runtime *rt, unsigned k, const char *why);
/* The model's prediction for t on device worker k (seconds, < 0: none),
 * and whether it is calibrated. */
double tdm__sched_predict_on(tdm_runtime *rt, const tdm_task *t, unsigned k, bool *calibrated);
/* The longest calibrated prediction for t on the classes other than
 * device worker k's (seconds; < 0: none). */
double tdm__sched_predict_elsewhere(tdm_runtime *rt, const tdm_task *t, unsigned k);

/* The watchdog for hung devices (watchdog.c, tdm_config.watchdog_*).
 * Started with the devices when it watches anything, stopped before
 * them. A backend tells it, for device worker k, the try that runs
 * there now (the oldest in flight) and since when; NULL when none. It
 * returns whether that try is watched: then a try still running at its
 * deadline makes the device hung (rt->hung): quarantined, and the
 * backend's abandon op ends its tries. */
tdm_status tdm__watchdog_start(tdm_runtime *rt);
void tdm__watchdog_stop(tdm_runtime *rt);
bool tdm__watch(tdm_runtime *rt, unsigned k, const tdm_task *t, uint64_t since);
/* Device worker k is hung (said `why`): rt->hung has it, it is
 * quarantined, and its backend abandons its tries (once; any thread
 * holding no runtime lock). */
void tdm__device_hung(tdm_runtime *rt, unsigned k, const char *why);
/* Records that t ended with `status` (failed, or cancelled) for
 * tdm_wait_all's report, and logs it. */
void tdm__task_ended_badly(tdm_task *t, tdm_status status);
/* While a completion callback runs on this thread: its task's outcome
 * (tdm_callback_status), and the worker it ran on (a CPU worker's id, or
 * nworkers + k for device k). */
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
/* Handles this thread acquired and has not released yet (any runtime). */
extern _Thread_local int tdm__acquired_here TDM_TLS_MODEL;
extern _Thread_local tdm_status tdm__callback_status TDM_TLS_MODEL;
extern _Thread_local unsigned tdm__callback_worker TDM_TLS_MODEL;

/* The verification mode (verify.c). Parse: rt->verify from the
 * specification (NULL or empty: off); TDM_ERR_INVALID_ARG, logged, when
 * malformed. Before a task is submitted while it is on: takes the
 * submission lock and, if the task is sampled, submits the task that
 * keeps its read-write inputs and wraps its callback; returns what
 * tdm__verify_after needs (NULL: not sampled). After: submits the
 * comparison when the task was submitted, and releases the lock. */
tdm_status tdm__verify_parse(tdm_runtime *rt, const char *spec);
void tdm__verify_free(tdm_runtime *rt);
void *tdm__verify_before(tdm_task *t);
void tdm__verify_after(tdm_runtime *rt, void *rec, tdm_task *t, bool submitted);
/* The verification mode's own tasks (not counted as the application's). */
bool tdm__verify_internal(const tdm_task *t);
/* Logs its counts (TANDEM_STATS). */
void tdm__verify_report(tdm_runtime *rt);
/* Whether devices' results were replaced by the CPU variant's since the
 * last report (logged, saying where, for `what`). */
bool tdm__verify_report_mismatches(tdm_runtime *rt, const char *what);
/* The devices whose variant of t's codelet the verification mode took
 * out (repeated mismatches) no longer run t: t->dev_mask. */
void tdm__verify_mask(tdm_runtime *rt, tdm_task *t);
/* TDM_ERR_TASK_FAILED, with a message naming what, when codelet tasks
 * failed or were cancelled since the last report; resets the counts. */
tdm_status tdm__report_failures(tdm_runtime *rt, const char *what);
/* Subtracts n from rt->inflight; wakes wait_all at zero. */
void tdm__sub_inflight(tdm_runtime *rt, int64_t n);
/* Blocks until t reaches `state` (READY or DONE). */
void tdm__task_wait_state(tdm_task *t, uint32_t state);
void tdm__pool_destroy(tdm_runtime *rt);
tdm_status tdm__check_blocking(const tdm_runtime *rt, const char *what);

/* Submits t (created, all checks done but those needing handle locks).
 * Used for codelet tasks and host acquisitions alike. give_ref: the
 * caller's reference becomes the runtime's (on success only). */
tdm_status tdm__task_submit(tdm_task *t, bool give_ref);

/* data/handles.c */
/* Checks that h can be named by a task of rt (magic, runtime); logs why
 * not. Checks needing the handle's lock are made at submission. */
tdm_status tdm__handle_check(tdm_runtime *rt, const tdm_handle *h,
                             const char *what);
/* Locks n distinct handles, sorted by address: every thread locks in
 * that order, so submitters cannot deadlock. */
void tdm__handles_lock(tdm_handle **hs, unsigned n);
void tdm__handles_unlock(tdm_handle **hs, unsigned n);
void tdm__handles_destroy(tdm_runtime *rt);
/* Brings every registered handle's contents home (at destroy). */
void tdm__handles_home(tdm_runtime *rt);
/* Releases every handle the host still holds (at destroy). */
void tdm__release_acquisitions(tdm_runtime *rt);
static inline void tdm__handle_ref(tdm_handle *h) {
  /* relaxed: as for tasks */
  atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
}
void tdm__handle_unref(tdm_handle *h);

/* machine.c: describes the machine once the workers are planned and the
 * devices chosen; frees that description. */
tdm_status tdm__machine_describe(tdm_runtime *rt);
void tdm__machine_free(tdm_runtime *rt);

/* trace.c */
uint64_t tdm__now_ns(void);
/* Records e in the calling worker's buffer, or the shared one. */
void tdm__trace_add(tdm_runtime *rt, const tdm_trace_event *e);
/* When recording: task t ran on worker `worker` from t0 to t1 (ns). */
void tdm__trace_task(tdm_runtime *rt, const tdm_task *t, unsigned worker, uint64_t t0,
                     uint64_t t1);
/* Writes the trace and the graph files asked for (destroy, flush). */
tdm_status tdm__trace_write(tdm_runtime *rt);
/* At destroy: the statistics summary through the log, when asked. */
void tdm__trace_finish(tdm_runtime *rt);

/* ---- devices (backends/backend.h) ------------------------------------- */

/* Device worker k (worker id nworkers + k) drives device record
 * device_of[k]. Memory node 0 is the host's; device k's own memory, if it
 * has any, is node 1 + k. */

/* backends/sim, for tests: when the emulated devices' clock started
 * (tdm__now_ns; slow_at counts from there), 0 without emulated devices. */
uint64_t tdm__sim_t0(const tdm_runtime *rt);
/* Sleeps the calling thread until tdm__now_ns() reaches `until`. */
void tdm__sleep_until(uint64_t until);

/* data/access.c: a task's buffers where it runs. Slot 1 + k is device k's
 * buffers (in its own memory, or over host memory for a device working
 * there); node is where it works (tdm__device_node). */
/* Makes t's buffers in `slot` and pins them (mems[i]), waiting a moment
 * while other threads hold buffers in the way; false, none pinned, when
 * they do not fit beside the pinned ones. */
bool tdm__task_pin(tdm_runtime *rt, tdm_task *t, unsigned slot, void **mems);
/* Whether t's buffers fit in `slot`'s memory at all (nothing else there). */
bool tdm__task_fits(const tdm_runtime *rt, const tdm_task *t, unsigned slot);
void tdm__task_unpin(tdm_runtime *rt, tdm_task *t, unsigned slot, unsigned n);
/* t's accesses on `node`: copies started, what to wait for added to w;
 * false when a copy could not be made (logged). `replay`: a version that
 * only a failed device held may be made again here by its lineage, which
 * runs CPU variants on this thread (the caller holds no lock). */
bool tdm__task_access(tdm_runtime *rt, tdm_task *t, unsigned node, tdm_tokens *w, bool replay);
/* Starts the copies of t's inputs to node, where t is queued to run
 * (it may yet run elsewhere: nothing is announced written, nothing
 * replayed). */
void tdm__task_prefetch(tdm_runtime *rt, tdm_task *t, unsigned node);
/* t's writes were made on node, complete at `done` (the caller keeps its
 * reference; 0: complete). */
void tdm__task_written(tdm_runtime *rt, tdm_task *t, unsigned node, tdm_token done);
/* t ran on node and failed: what it wrote is undone. On a device with
 * memory of its own (node > 0), the buffers it writes hold no version
 * there; the host's copy, which tdm__task_access kept current for a
 * write on a device when it could (else the task is spoiled: not tried
 * again), holds the version t was given. Call it before unpinning t there
 * (an eviction must not write the failed run back). On a device working
 * in host memory (node 0), `before`, tdm__task_snapshot's copy, is put
 * back and freed. A task that fails before it runs needs nothing undone:
 * its inputs are as they were, and what it only writes is made valid when
 * written. */
void tdm__task_write_failed(tdm_runtime *rt, tdm_task *t, unsigned node, void *before);
/* t's run on node succeeded (its writes recorded): with
 * tdm_config.writeback, what it wrote on a device with memory of its own
 * starts its way home (cheap otherwise). A copy that cannot start leaves
 * that version on the device alone (logged): the run is not undone, as
 * the copies that did start are already bringing the new versions over
 * the ones a retry would need. */
void tdm__task_write_back(tdm_runtime *rt, tdm_task *t, unsigned node);
/* A try of t failed (any reason): tdm__coh_try_failed for each of its
 * handles (the copies whose copy failed no longer count as versions, its
 * writes' preparations are over); a try on a device working in host
 * memory (in_host) did not change what it read and wrote there (not run,
 * or undone). Cold path. */
void tdm__task_drop_failed(tdm_runtime *rt, tdm_task *t, bool in_host);
/* For a device working in host memory: a copy of the buffers t writes,
 * from which tdm__task_write_failed undoes a run that failed; NULL when t
 * writes nothing (*ok true) or there was no memory for it (*ok false,
 * logged). Free it with free() once the run succeeded. */
void *tdm__task_snapshot(tdm_runtime *rt, const tdm_task *t, bool *ok);
/* The node device k works in: 1 + k (its own memory) or 0. */
unsigned tdm__device_node(const tdm_runtime *rt, unsigned k);
/* Before a CPU task runs: true when its inputs are on the host; else
 * their copies are started and the task is queued again once they
 * complete. After it ran: its outputs live on the host only. */
bool tdm__host_ready(tdm_task *t);
void tdm__host_written(tdm_task *t);
/* Blocking: brings h's contents home (acquire, unregister, destroy);
 * will_write: the host is about to write, device copies become stale. A
 * copy that fails is tried again (tdm_config.retries times); false when
 * none landed (logged): the host's memory does not hold h's version. */
bool tdm__handle_home(tdm_handle *h, bool will_write);
/* tdm__handle_home of h's current version as it is, for a lineage
 * replay (`depth` of them nested): a matrix's tiles still to gather stay
 * so (gathering belongs to its next user, after the tiles' writers); its
 * copy home is ordered as an eviction's is. h must not be a tile not yet
 * taken from its matrix (which would take its matrix's contents). */
bool tdm__handle_home_as_is(tdm_handle *h, unsigned depth);
/* Releases h's device buffers (lock: see tdm__coh_forget). */
void tdm__handle_forget(tdm_handle *h, bool lock);
/* Predicted seconds to bring t's inputs to `node` now (0: there), by the
 * nodes' link times (the runtime's, or virtual time's). */
double tdm__transfer_time(const tdm_nodes *nodes, unsigned node, const tdm_task *t);
static inline bool tdm__device_progress(tdm_runtime *rt) {
  return rt->dev && rt->dev->progress && rt->dev->progress(rt);
}
tdm_status tdm__device_prepare(tdm_runtime *rt, tdm_task *t, const char *what);

/* ---- scheduling (sched.c) ----------------------------------------------- */

/* Sends a ready codelet task where it will run, by the runtime's policy. */
void tdm__place(tdm_runtime *rt, tdm_task *t);
/* Device k cannot run t (its program did not build there): placed
 * elsewhere, or ends with `status` when nothing else can run it. */
void tdm__device_refused(tdm_runtime *rt, unsigned k, tdm_task *t, tdm_status status);
/* From the queue every kind of worker takes from, a task that worker
 * `worker` (a CPU worker's id, or nworkers + k for device k) can run; or
 * NULL. Under heft, tasks
 * shared while their execution times were unknown are placed by their
 * predictions instead, once known. */
tdm_task *tdm__sched_take_shared(tdm_runtime *rt, unsigned worker);
/* A CPU worker of a hybrid chip: a task placed on its kind of core by
 * another thread; others: of any kind. NULL if none. */
tdm_task *tdm__sched_take_kind(tdm_worker *w, bool others);
/* Whether tasks wait in the kinds' queues (before a worker parks). */
bool tdm__sched_queued(const tdm_runtime *rt);
/* An idle CPU worker: a task queued on a device that would finish
 * earlier on the CPU (heft, ws), taken back for w to run; or NULL. */
tdm_task *tdm__sched_idle_cpu(tdm_worker *w);
/* A device worker is idle: a task for it from the other devices' queues,
 * when it would finish earlier here; or NULL. */
tdm_task *tdm__sched_idle_device(tdm_runtime *rt, unsigned k);
/* Tasks were pushed on a CPU worker's deque: under ws, idle devices are
 * told (they take from the deques). */
void tdm__sched_work_shown(tdm_runtime *rt);
/* t finished on worker `worker` (a CPU worker's id, or nworkers + k for
 * device k) after `seconds` of execution: the model of its kind of
 * worker learns, the backlog shrinks. */
void tdm__sched_done(tdm_task *t, unsigned worker, double seconds);
/* Whether t's duration should be measured (the scheduler learns it). */
static inline bool tdm__sched_timed(const tdm_task *t) {
  return t->device_ok && t->rt->sched;
}
tdm_status tdm__sched_start(tdm_runtime *rt);
void tdm__sched_stop(tdm_runtime *rt);

/* worker.c: the queue shared by CPU workers and devices */
void tdm__any_put(tdm_runtime *rt, tdm_task *t);
tdm_task *tdm__any_take(tdm_runtime *rt);
/* Into a queue linked through pool_next (*head .. *tail): after the
 * tasks of the same or a higher priority, before the others. */
void tdm__queue_put(tdm_task **head, tdm_task **tail, tdm_task *t);

/* The tasks placed on a device and not started, in priority order (each
 * backend guards one with its device's lock; `queued` may be read
 * without it). */
typedef struct tdm_devq {
  tdm_task *head, *tail;
  _Atomic unsigned queued;
} tdm_devq;
/* Lock held: puts t in its place; puts t first (a task that could not
 * start yet); takes the first, or NULL. */
void tdm__devq_put(tdm_devq *q, tdm_task *t);
void tdm__devq_put_first(tdm_devq *q, tdm_task *t);
tdm_task *tdm__devq_pop(tdm_devq *q);
/* The next task for device k: the first of q, else (the lock dropped
 * meanwhile) one from the shared queue, else one waiting elsewhere that
 * would finish earlier on k (sched.c). Lock held. */
tdm_task *tdm__devq_next(tdm_runtime *rt, unsigned k, tdm_devq *q, pthread_mutex_t *lock);
/* Lock not held: takes the last task of q, not started, if `want`
 * accepts it (called under the lock), else NULL; cheap when q is empty. */
tdm_task *tdm__devq_take(tdm_runtime *rt, tdm_devq *q, pthread_mutex_t *lock,
                         bool (*want)(tdm_task *, void *), void *data);
/* The same, lock held (or a queue no other thread sees). */
tdm_task *tdm__devq_take_last(tdm_devq *q, bool (*want)(tdm_task *, void *), void *data);
/* Wakes a worker to finish completed device tasks (any thread). */
void tdm__wake_for_completion(tdm_runtime *rt);

/* backends/cpu */
/* Runs t's CPU variant on bufs (NULL: its handles' own buffers). */
void tdm__cpu_run(const tdm_task *t, const tdm_buffer *bufs);

#endif
