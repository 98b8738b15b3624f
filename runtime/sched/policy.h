/*
 * Placement policies, as tables, and the two drivers that run them: the
 * runtime's threads (core/place.c) and a simulated clock (vtime.c).
 *
 * A policy decides which kind of worker ("class": the CPU workers of one
 * kind, or a device) runs a ready task that a device could run, from the
 * performance model's predictions (perfmodel.h) and the time its inputs
 * need to get there. It makes no thread or clock calls: it asks its
 * driver (tdm_sched_driver) for facts and to queue tasks, so the same
 * table runs in real time and in virtual time, calibration included, as
 * StarPU runs its real policies on SimGrid's clock. Each policy is one
 * file (heft.c, ws.c, eager.c, random.c); what several share is in
 * policy.c.
 */
#ifndef TDM_POLICY_H
#define TDM_POLICY_H

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem.h"

/* The policies by number (tdm__policies[]), in the order of their names
 * in tandem.h; the first is the default. */
typedef enum tdm_policy {
  TDM_POLICY_HEFT = 0, /* earliest estimated finish, transfers included */
  TDM_POLICY_WS,       /* work stealing: the releasing worker's queue, thieves */
  TDM_POLICY_EAGER,    /* one queue: the first worker free takes the head */
  TDM_POLICY_RANDOM,   /* a random worker that can run it */
  TDM_NPOLICIES
} tdm_policy;

const char *tdm__policy_name(tdm_policy p);
/* "heft", "ws", "eager" or "random" into *out; false for anything else. */
bool tdm__policy_parse(const char *name, tdm_policy *out);

struct tdm_task;
struct tdm_perfmodel;
typedef struct tdm_sched tdm_sched;

/* What a policy asks of the driver that runs it. Classes are numbered
 * 0 .. ncpu-1 for the CPU workers (one class per kind of core), then one
 * per device. Any thread may call any of them: the scheduler has no lock
 * of its own. */
typedef struct tdm_sched_driver {
  /* Whether class c can run t (it has workers, and t a variant for it). */
  bool (*runs)(const tdm_sched *s, unsigned c, const struct tdm_task *t);
  /* The model's prediction for t on class c: seconds, or < 0 when none;
   * *calibrated whether to trust it. */
  double (*predict)(const tdm_sched *s, const struct tdm_task *t, unsigned c, bool *calibrated);
  /* Teaches the model that t took `seconds` on class c; true if the
   * model changed. */
  bool (*observe)(tdm_sched *s, const struct tdm_task *t, unsigned c, double seconds);
  /* Seconds that t's inputs need to reach class c's memory. */
  double (*transfer)(const tdm_sched *s, unsigned c, const struct tdm_task *t);
  /* The device class the calling worker belongs to, or -1 (a CPU worker,
   * the application's thread): where a task was released. */
  int (*current)(const tdm_sched *s);
  /* Queues t on class c. */
  void (*send)(tdm_sched *s, struct tdm_task *t, unsigned c);
  /* Queues t for the CPU workers, the releasing one first if it is one. */
  void (*to_cpu)(tdm_sched *s, struct tdm_task *t);
  /* The queue every class takes from: put at the tail (wake: tell the
   * devices), take the head. */
  void (*share)(tdm_sched *s, struct tdm_task *t, bool wake);
  struct tdm_task *(*take_shared)(tdm_sched *s);
  /* The last task queued on device class `from` if want(t, data) agrees
   * (called with that queue's lock held), else NULL. */
  struct tdm_task *(*take)(tdm_sched *s, unsigned from, bool (*want)(struct tdm_task *, void *),
                           void *data);
  /* A task from the CPU workers' queues that class c can run, or NULL. */
  struct tdm_task *(*steal_cpu)(tdm_sched *s, unsigned c);
  /* The oldest task queued for the CPU workers, if want(t, data) takes
   * it (its share of the backlog moved by want); NULL otherwise. Looks
   * only while data-parallel operations' chunks wait (the runtime's
   * deques are taken from, and a task not wanted goes back). */
  struct tdm_task *(*take_cpu)(tdm_sched *s, bool (*want)(struct tdm_task *, void *),
                               void *data);
  /* Tells the devices that work may be waiting for them. */
  void (*kick_devices)(tdm_sched *s);
  /* Tasks only the CPU workers can run, which no policy places: how many
   * wait in their queues and how many run now (may be NULL: none
   * counted). The runtime's counts are a moment's sums of per-thread
   * counters, not a snapshot. */
  void (*cpu_only)(const tdm_sched *s, unsigned *queued, unsigned *running);
  /* Seconds of copies already queued on device class c's link, the
   * busier way (0 for the CPU classes); may be NULL: not known, 0. */
  double (*link_busy)(const tdm_sched *s, unsigned c);
} tdm_sched_driver;

/* A placement policy. Every entry but `name` and `place` may be NULL. */
typedef struct tdm_policy_ops {
  const char *name;
  /* Once, when a driver starts it. */
  void (*init)(tdm_sched *s);
  /* A ready task that some device can run: queue it through the driver. */
  void (*place)(tdm_sched *s, struct tdm_task *t);
  /* A task that class c took from the shared queue: true if the policy
   * queued it somewhere now (predictions known since it was shared). */
  bool (*reconsider)(tdm_sched *s, struct tdm_task *t);
  /* An idle CPU class c / device class c with nothing queued for it: a
   * task to run, taken from elsewhere, or NULL. */
  struct tdm_task *(*idle_cpu)(tdm_sched *s, unsigned c);
  struct tdm_task *(*idle_device)(tdm_sched *s, unsigned c);
  /* t ended on class c, after `seconds` (< 0: it failed). */
  void (*done)(tdm_sched *s, struct tdm_task *t, unsigned c, double seconds);
  /* Work appeared in the CPU workers' deques. */
  void (*work_shown)(tdm_sched *s);
} tdm_policy_ops;

extern const tdm_policy_ops tdm__policy_heft, tdm__policy_ws, tdm__policy_eager,
    tdm__policy_random;
extern const tdm_policy_ops *const tdm__policies[TDM_NPOLICIES];

/* Kinds of CPU core the scheduler tells apart (hybrid chips); more are
 * one class. */
#define TDM_SCHED_MAX_CPU_CLASSES 8

/* A kind of worker, as the policies see it. What changes as tasks are
 * placed and end is atomic: placements and completions on any threads
 * read and update it without a lock (two placements at once may both see
 * a class free and choose it: a heuristic's race, not an error). */
typedef struct tdm_sclass {
  char name[160];     /* the model's name for it */
  unsigned workers;   /* 0: none (never chosen) */
  /* predicted seconds placed here, not finished (never below 0) */
  _Atomic double backlog;
  _Atomic unsigned calibrating; /* tasks placed here to calibrate, not finished */
  /* Its queue starts a task's copies when the task is queued (a device
   * with memory of its own): they overlap the work queued before it. */
  bool prefetches;
} tdm_sclass;

/* A scheduler: a policy, its driver, the classes and the model. */
struct tdm_sched {
  const tdm_policy_ops *policy;
  const tdm_sched_driver *drv;
  void *ctx; /* the driver's */
  struct tdm_runtime *rt; /* the runtime whose threads drive it; NULL in virtual time */
  unsigned ncpu, nclasses;
  tdm_sclass *cls;
  /* Read and taught on any thread (perfmodel.c: lock-free predictions,
   * observations locked per codelet and class). */
  struct tdm_perfmodel *model;
  _Atomic bool dirty; /* the model learnt something */
  _Atomic uint64_t rng;
  /* The model's time for a task only the CPU workers run, averaged over
   * their classes by workers (tdm__sched_cpu_only_wait); stale: to be
   * read from the model again; <= 0: not known yet. */
  _Atomic double cpu_only_time;
  _Atomic bool cpu_only_stale;
};

/* Class k's backlog in seconds; seconds added to it (< 0: taken away,
 * down to 0 at most). */
static inline double tdm__sched_backlog(const tdm_sclass *k) {
  return atomic_load_explicit(&((tdm_sclass *)k)->backlog, memory_order_relaxed);
}
static inline void tdm__sched_backlog_add(tdm_sclass *k, double seconds) {
  double was = atomic_load_explicit(&k->backlog, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(&k->backlog, &was, fmax(0, was + seconds),
                                                memory_order_relaxed, memory_order_relaxed))
    ;
}

/* Makes s with nclasses classes (named and counted by the caller) and an
 * empty model, logging to rt (may be NULL); NULL-safe tdm__sched_fini
 * undoes it. Returns TDM_OK or TDM_ERR_NO_MEMORY. */
tdm_status tdm__sched_init(tdm_sched *s, struct tdm_runtime *rt, tdm_policy p,
                           const tdm_sched_driver *drv, void *ctx, unsigned ncpu,
                           unsigned nclasses, uint64_t seed);
void tdm__sched_fini(tdm_sched *s);

/* What the drivers call. A ready task: the CPU workers if no device can
 * run it, else the policy's choice. */
void tdm__sched_place(tdm_sched *s, struct tdm_task *t, bool device_ok);
/* The next task from the shared queue for an idle worker of class c (the
 * policy reconsiders a few first), or NULL. */
struct tdm_task *tdm__sched_shared(tdm_sched *s, unsigned c);
/* An idle worker of class c: the policy's idle_cpu or idle_device. */
struct tdm_task *tdm__sched_idle(tdm_sched *s, unsigned c);
/* t ended on class c after `seconds` (< 0: failed): the policy's account
 * and, for a success, the model. */
void tdm__sched_finished(tdm_sched *s, struct tdm_task *t, unsigned c, double seconds);

/* Tasks only the CPU workers can run do not pass through a policy (no
 * model lookup, no lock on their path), so the CPU classes' backlogs do
 * not hold them. Their durations are learnt from a sample of them (every
 * one in virtual time; in the runtime one in TDM_SCHED_CPU_ONLY_SAMPLE
 * per worker, the first included), as one record of the model under this
 * name per CPU class: the median of the last ones seen. */
#define TDM_SCHED_CPU_ONLY "(cpu-only tasks)"
#define TDM_SCHED_CPU_ONLY_SAMPLE 32
/* A CPU-only task ran for `seconds` on CPU class c: the model learns it. */
void tdm__sched_cpu_only_ran(tdm_sched *s, unsigned c, double seconds);
/* The seconds that the CPU-only tasks queued and running keep each CPU
 * worker busy, on average: (queued + running / 2) times their learnt
 * time, over the CPU workers (a running one is half done, on average);
 * 0 while none are counted or their time is not known. */
double tdm__sched_cpu_only_wait(tdm_sched *s);

/* Shared by the policies (policy.c). */
#define TDM_SCHED_UNKNOWN_TIME 1e-3 /* s: the backlog a task of unknown duration adds */
/* heft's placement: the class where t would finish first, or a class to
 * calibrate; false when no prediction is known yet (t stays with the
 * caller). */
bool tdm__heft_place(tdm_sched *s, struct tdm_task *t);
/* Takes t's share out of its class's backlog, and its calibration try
 * (lock held): the `done` of the policies that use tdm__heft_place. */
void tdm__policy_release(tdm_sched *s, struct tdm_task *t, unsigned c, double seconds);
/* For idle class `to`: the last task queued on another device that it
 * should run instead (always: take it whenever it can run it; else only
 * when it would finish earlier here, transfers included), its share of
 * the backlog moved along; NULL if none. */
struct tdm_task *tdm__policy_take_queued(tdm_sched *s, unsigned to, bool always);
/* For idle device `to`: the oldest chunk of a data-parallel operation
 * queued for the CPU workers, when it would finish it, transfers
 * included, before the CPU workers' backlog per worker is through (as a
 * task queued on a device is taken back); NULL otherwise. */
struct tdm_task *tdm__policy_take_cpu_chunk(tdm_sched *s, unsigned to);
uint64_t tdm__sched_random(tdm_sched *s); /* any thread */

/* The choice heft makes for a ready task, among one candidate per class
 * that can run it (tdm__heft_place; the tests call it alone). */
typedef struct tdm_choice {
  double start;    /* s from now: when it could start there (the worker
                      free, its inputs there) */
  double exec;     /* predicted execution time, s; < 0: unknown */
  bool calibrated; /* the prediction is to be trusted */
  unsigned trying; /* calibration tries in flight there */
} tdm_choice;

/* heft: the index of the candidate where the task would finish first
 * (start + exec). While some candidate is not calibrated, the task is a
 * calibration try instead: the uncalibrated candidate with the fewest
 * tries in flight, if it has fewer than max_tries (*calibrating set);
 * if none has room, -1: not known yet where (the caller shares the task
 * with every kind of worker). */
int tdm__heft_pick(const tdm_choice *c, unsigned n, unsigned max_tries, bool *calibrating);

/* ---- virtual time (vtime.c) ---------------------------------------------- */

#define TDM_VT_MAX_CLASSES 16
/* The ranges of a machine description's numbers (tdm__vt_parse_machine). */
#define TDM_VT_MAX_VALUE 1e15
#define TDM_VT_MIN_SPEEDUP 1e-3
#define TDM_VT_MAX_SPEEDUP 1e5
#define TDM_VT_MAX_TIME 1e3
#define TDM_VT_MIN_BANDWIDTH 1e3
#define TDM_VT_MAX_BANDWIDTH 1e15
#define TDM_VT_MAX_BUFFERS TDM_MAX_BUFFERS

/* A machine: workers of classes; each class works in one memory node
 * (0: the host's; a node > 0 is a device's own memory, linked to the
 * host by a latency and a bandwidth). */
typedef struct tdm_vt_machine {
  unsigned nclasses;
  struct tdm_vt_class {
    char name[32];
    unsigned workers;
    unsigned node;
    /* speed-up over one CPU core, per codelet (codelet c uses speedup[c];
     * 0: cannot run it); the simulated truth */
    double speedup[8];
    /* from `slow_at` seconds on, the class runs `slow_factor` times
     * slower (a GPU throttling); 0: never */
    double slow_at, slow_factor;
    /* parsed without a list of codelets: the CODELET=X settings as
     * given, by name */
    unsigned nnamed;
    struct tdm_vt_named {
      char name[32];
      double speedup;
    } named[8];
  } classes[TDM_VT_MAX_CLASSES];
  unsigned nnodes;
  double latency[TDM_VT_MAX_CLASSES];   /* s, node n <-> host */
  double bandwidth[TDM_VT_MAX_CLASSES]; /* bytes/s */
  /* 0: node n has a link of its own; else the node whose link it shares
   * (two GPUs behind one PCIe switch): one copy at a time each way over
   * both, at that link's latency and bandwidth */
  unsigned link_of[TDM_VT_MAX_CLASSES];
  /* bytes/s of copies straight between node n and another device node
   * with one (GPUs that copy peer to peer); 0: through the host. Such a
   * copy takes the larger latency and the smaller of the two. In virtual
   * time, only between nodes behind one link (a switch), which it leaves
   * free (vtime.c); emulated devices, each on its own link, copy so
   * between any two with peer= (backends/sim). */
  double peer[TDM_VT_MAX_CLASSES];
} tdm_vt_machine;

/* A task graph: task i runs codelet `codelet` for `cpu_time` seconds on
 * one CPU core, accessing data items in modes; `deps` are its
 * predecessors (the tests give them explicitly, as the runtime infers
 * them from the accesses). */
typedef struct tdm_vt_task {
  unsigned codelet;
  double cpu_time;
  unsigned nbuf;
  unsigned data[TDM_VT_MAX_BUFFERS];
  uint8_t modes[TDM_VT_MAX_BUFFERS]; /* TDM_R, TDM_W, TDM_RW */
  unsigned ndeps;
  const unsigned *deps;
  /* The user's priority: among tasks ready at the same moment, a higher
   * one is placed first; equal ones by upward rank. Default 0. */
  int priority;
  /* What the model knows of the task's work, in seconds of one CPU core
   * (the runtime's models know a task by its size, not by what its data
   * makes it cost: a chunk of an irregular operation); 0: cpu_time. */
  double model_time;
} tdm_vt_task;

typedef struct tdm_vt_graph {
  unsigned ntasks;
  const tdm_vt_task *tasks;
  unsigned ndata;
  const uint64_t *bytes; /* per data item */
} tdm_vt_graph;

typedef struct tdm_vt_result {
  double makespan;
  unsigned tasks_per_class[TDM_VT_MAX_CLASSES];
  /* per codelet and class */
  unsigned codelet_class[8][TDM_VT_MAX_CLASSES];
  uint64_t bytes_moved;
  /* per task: the worker (a global index, classes in order) and times */
  unsigned *worker;
  double *start, *end;
} tdm_vt_result;

/* Runs graph g on machine m under policy p in simulated time. The
 * policies predict with a model that starts from the declared speeds and
 * learns from the durations it sees (the runtime's performance model,
 * perfmodel.h: the median of the last observations per codelet and
 * class, trusted once calibrated), so that a class that slows
 * down gets less work. `seed` drives random choices. Fills *r (the arrays
 * are malloc'd, r->worker etc.; free with tdm__vt_result_free). Returns
 * TDM_OK, TDM_ERR_INVALID_ARG (a task no class can run, a cycle, bad
 * indices) or TDM_ERR_NO_MEMORY. */
tdm_status tdm__vt_run(const tdm_vt_machine *m, const tdm_vt_graph *g, tdm_policy p,
                       uint64_t seed, tdm_vt_result *r);
void tdm__vt_result_free(tdm_vt_result *r);
/* The same, with the model `model` instead of an empty one (NULL: an
 * empty one): the run starts from what it knows and leaves in it what it
 * learnt, so that a second run is a calibrated one, as a program's is
 * with a model file from an earlier run. */
tdm_status tdm__vt_run_model(const tdm_vt_machine *m, const tdm_vt_graph *g, tdm_policy p,
                             uint64_t seed, struct tdm_perfmodel *model, tdm_vt_result *r);

/* Parses a machine description:
 *
 *   machine := class (';' class)*
 *   class   := name ':' setting (',' setting)*   (or just name)
 *   setting := workers=N          workers of the class (default 1)
 *            | memory=shared|own  the host's memory, or its own node
 *                                 (default: shared for a class named
 *                                 "cpu", own otherwise)
 *            | speedup=X          over one CPU core, for every codelet
 *                                 (default 1)
 *            | CODELET=X          for one codelet (its name in `codelets`)
 *            | latency=T          link latency: T in s, ms, us or ns
 *            | bandwidth=B        bytes per second, k M G T (powers of 1000)
 *            | peer=B             copies straight to and from the other
 *                                 devices with peer= at B bytes per second
 *                                 (the smaller of the two), not through
 *                                 the host
 *            | slow_at=T, slow_factor=X   slows down from T on
 *
 * e.g. "cpu:workers=2;gpu:speedup=10,small=0.5,latency=10us,bandwidth=10G".
 * Ranges (anything outside is refused, so that no product of them
 * overflows): speed-ups and slow_factor from 1e-3 to 1e5 (a codelet's may
 * also be 0), times up to 1000 s, bandwidths from 1 kB/s to 1e15 B/s.
 * With codelets NULL, any other key is a codelet's name, kept in the
 * class's `named` list (at most 8, names up to 31 characters).
 * Returns TDM_OK, or TDM_ERR_INVALID_ARG with what is wrong in err. */
tdm_status tdm__vt_parse_machine(const char *text, const char *const *codelets,
                                 unsigned ncodelets, tdm_vt_machine *m, char *err,
                                 size_t err_size);

/* The lower bound of g's makespan on m: the larger of the critical path
 * (each task at its fastest class, transfers free) and the area bound
 * (the work spread over all workers at their speeds, as a fractional
 * assignment would). */
double tdm__vt_lower_bound(const tdm_vt_machine *m, const tdm_vt_graph *g);
/* The same bound, with its two parts and which one bounds: "critical
 * path" (each task at its fastest class), or the area bound's kind ("one
 * pool", "two pools" (the best fractional split), "all workers" (each
 * task at its fastest over every worker: a weaker bound, for three pools
 * or more)). */
typedef struct tdm_vt_bound {
  double bound, critical_path, area;
  const char *by;
} tdm_vt_bound;
tdm_vt_bound tdm__vt_bound(const tdm_vt_machine *m, const tdm_vt_graph *g);
/* t's mean time over m's workers that can run it (HEFT's weight of a
 * task); 0 when none can. */
double tdm__vt_mean_time(const tdm_vt_machine *m, const tdm_vt_task *t);
/* A reference: the makespan of a static list schedule that knows the
 * whole graph and the true times ahead (HEFT as Topcuoglu et al. give
 * it), copies free; the best schedule without copies lies between the
 * bound and it. 0 on a cycle, a task no worker runs, or no memory. */
double tdm__vt_reference(const tdm_vt_machine *m, const tdm_vt_graph *g);

#endif
