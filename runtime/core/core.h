/*
 * The core layer: the runtime's lifecycle (runtime.c) and configuration
 * (config.c), tasks: their pool (pool.c), creation and submission
 * (task.c), end (complete.c) and explicit dependencies (depgraph.c), the
 * handles' dependency state, acquisitions and unregistration
 * (handles.c), workers, parking and pausing (worker.c), placement on the
 * runtime's threads and the next task for a device (place.c), the
 * watchdog (watchdog.c), groups (group.c), recorded graphs (graph.c),
 * the application's thread's queue (dispatch.c), verification
 * (verify.c), the trace and the run's summary (trace.c). It calls every
 * layer below, and the backends only through their tables
 * (backends/backend.h).
 */
#ifndef TDM_CORE_H
#define TDM_CORE_H

#include "../objects.h"
#include "../sched/sched.h"
#include "trace.h"

/* Drops the references v holds and frees its storage (pool.c). */
void tdm__taskvec_release(tdm_taskvec *v);
/* Configuration (config.c). The i-th TANDEM_* variable Tandem reads,
 * NULL past the last. Env: the environment over rt->cfg. Copy: rt keeps
 * the configuration's strings, cfg points at them (free: frees them).
 * Check: the values, after the environment; TDM_ERR_INVALID_ARG, logged,
 * when one is wrong. */
const char *tdm__env_name(size_t i);
void tdm__config_env(tdm_runtime *rt);
tdm_status tdm__config_copy(tdm_runtime *rt);
void tdm__config_free(tdm_runtime *rt);
tdm_status tdm__config_check(tdm_runtime *rt);

/* ---- groups (group.c) and the dispatch queue (dispatch.c) ----------------- */

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
/* What tells the calling thread from others (tdm_runtime.dispatcher). */
uintptr_t tdm__thread_mark(void);
/* Whether the calling thread is rt's dispatching thread: its waits run
 * what is queued for it meanwhile (tdm__wait_dispatching), since what
 * they wait for may be a task pinned to it. */
static inline bool tdm__waits_dispatching(const tdm_runtime *rt) {
  return atomic_load_explicit(&rt->dispatcher, memory_order_relaxed) == tdm__thread_mark();
}
/* Waits until done(arg), dispatching what is queued for this thread
 * meanwhile. The caller counts itself among the waiters that completions
 * wake (wait_cond) before the call, and uncounts itself after. */
void tdm__wait_dispatching(tdm_runtime *rt, bool (*done)(const void *), const void *arg);
/* Runs a task pinned to the application's thread, in tdm_dispatch. */
void tdm__task_run_here(tdm_task *t);



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
/* One round of polling while idle or waiting: sched_yield, so that a
 * thread sharing the core (a submitter, a waiter, the worker it woke)
 * runs at once. A first phase of pause instructions (288, 7.5 us on this
 * machine's EPYC, twice that where a pause takes 140 cycles) kept such a
 * thread off the core that long: a lone task's round trip 31.5 us
 * against 26.4 without it, a chain 226 ns a task against 154 (medians of
 * 5 interleaved runs of bench-core --quick). Returns false, time to
 * block, once spin_us have passed; *deadline starts at 0. */
bool tdm__idle_step(uint64_t *deadline, unsigned spin_us);
void *tdm__worker_main(void *arg);
/* Makes a ready task runnable: on the calling worker's deque, or on the
 * injection stack for other threads; wakes a sleeper if any. */
void tdm__schedule(tdm_runtime *rt, tdm_task *t);
/* tdm__schedule of a chain of ready tasks of priority 0 (linked by
 * pool_next), which tdm__place would schedule: at once on the injection
 * stack (one exchange), or the calling worker's deque; one wake-up. */
void tdm__schedule_chain(tdm_runtime *rt, tdm_task *first);
void tdm__wake_all(tdm_runtime *rt);
/* The oldest task of CPU worker `worker`'s deque of the highest band that
 * has one (a thief's end), or NULL. */
tdm_task *tdm__steal_from(tdm_runtime *rt, unsigned worker);
/* Whether the runtime is paused: devices start no task (tdm__devq_next
 * gives none); tdm_runtime_resume kicks them. */
bool tdm__devices_paused(const tdm_runtime *rt);
/* Subtracts the worker's unflushed finished tasks from rt->inflight. */
void tdm__flush_finished(tdm_worker *w);

/* pool.c */
tdm_task *tdm__task_alloc(tdm_runtime *rt);
/* Up to n tasks as tdm__task_alloc makes them, into out, taking the
 * shared cache's lock once; how many (fewer: out of memory). */
size_t tdm__task_alloc_many(tdm_runtime *rt, tdm_task **out, size_t n);
/* Room for t's n incoming edges past its inline ones: a slot of the pool
 * when they fit in one (TDM_POOL_EDGES), so that a task with a few more
 * predecessors costs no malloc and free; the heap's otherwise. Sets
 * t->edges (and edges_pooled); false when out of memory. */
bool tdm__edges_alloc(tdm_task *t, unsigned n);
/* TDM_SLOT_ROOM bytes (aligned to a cache line) in a slot of the task
 * pool, for what lives and dies with tasks and is made as often (edges,
 * a created task's links): cheaper than the heap's; NULL when out of
 * memory. Given back with tdm__slot_return (any thread); at destroy the
 * slabs go with what they lent. */
void *tdm__slot_lend(tdm_runtime *rt);
void tdm__slot_return(tdm_runtime *rt, void *room);
void tdm__task_unref(tdm_task *t);
static inline void tdm__task_ref(tdm_task *t) {
  /* relaxed: taking a reference needs no ordering, only releasing does */
  atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}
/* Drops the references v holds; keeps its storage. */
void tdm__taskvec_clear(tdm_taskvec *v);

/* task.c */
/* Wakes every thread blocked in a wait (they share one condition and
 * each checks its own condition again). */
void tdm__wake_waiters(tdm_runtime *rt);

/* Runs t on worker w (the calling thread). */
void tdm__task_execute(tdm_task *t, tdm_worker *w);
/* t's footprint for the performance model (tdm_codelet.footprint): its
 * codelet's function of its views and arguments (called as code of the
 * application under a lock), else its buffers' shapes; 0: the codelet's
 * name alone. */
uint64_t tdm__task_footprint(tdm_runtime *rt, const tdm_task *t);
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
/* Whether this thread is between tdm__verify_before and _after (holding
 * the mode's lock): the runtime's own submissions then skip the mode. */
bool tdm__verify_held(const tdm_runtime *rt);
/* Logs its counts (TANDEM_STATS). */
void tdm__verify_report(tdm_runtime *rt);
/* Whether devices' results were replaced by the CPU variant's since the
 * last report (logged, saying where, for `what`). */
bool tdm__verify_report_mismatches(tdm_runtime *rt, const char *what);
/* The devices whose variant of t's codelet the verification mode took
 * out (repeated mismatches) no longer run t: t->dev_mask. */
void tdm__verify_mask(tdm_runtime *rt, tdm_task *t);
/* The devices `out` (device worker bits: out of placement, or wrong for
 * its codelet) no longer run t: the CPU workers, or no one (it fails:
 * TDM_ERR_NO_DEVICE, ended by a CPU worker). */
void tdm__task_without(tdm_runtime *rt, tdm_task *t, uint64_t out);
/* TDM_ERR_TASK_FAILED, with a message naming what, when codelet tasks
 * failed or were cancelled since the last report; resets the counts. */
tdm_status tdm__report_failures(tdm_runtime *rt, const char *what);
/* Subtracts n from rt->inflight; wakes wait_all at zero. */
void tdm__sub_inflight(tdm_runtime *rt, int64_t n);
/* Blocks until t reaches `state` (READY or DONE). */
void tdm__task_wait_state(tdm_task *t, uint32_t state);
void tdm__pool_destroy(tdm_runtime *rt);
tdm_status tdm__check_blocking(const tdm_runtime *rt, const char *what);
/* Loads the topology the config names, or TANDEM_SYNTHETIC_TOPOLOGY /
 * TANDEM_TOPOLOGY_XML's, which is ignored with a warning when it does not
 * load (config.c). */
tdm_status tdm__config_topology(tdm_runtime *rt);
/* TDM_ERR_IN_TASK (logged) when the caller runs under one of rt's device
 * locks (an enqueue or work-size function): for calls that take one. */
__attribute__((cold)) tdm_status tdm__refuse_locked(const tdm_runtime *rt, const char *what);
static inline tdm_status tdm__check_unlocked(const tdm_runtime *rt, const char *what) {
  return TDM_UNLIKELY(tdm__locked_of == rt) ? tdm__refuse_locked(rt, what) : TDM_OK;
}

/* What a task description says of its buffers: modes and handles, in
 * place or in the caller's arrays past TDM_MAX_BUFFERS. */
typedef struct tdm_desc_bufs {
  unsigned n;
  const tdm_access *modes;
  tdm_handle *const *handles;
  /* the caller's layout has the fields added for groups and dispatch,
   * and they are set */
  bool extras;
} tdm_desc_bufs;
/* Checks desc (its sizes, buffers, modes, handles) as `what` (logged);
 * fills *b. */
tdm_status tdm__desc_check(tdm_runtime *rt, const tdm_task_desc *desc, const char *what,
                           tdm_desc_bufs *b);
/* A task just allocated (t) made what desc with the buffers b (checked)
 * describes: arguments copied, group joined; not prepared for devices
 * (t->dev_mask: none), not in the graph of created tasks, not counted
 * as naming its handles. TDM_ERR_NO_MEMORY, logged: the caller then
 * drops t (tdm__task_unref). */
tdm_status tdm__task_fill(tdm_task *t, const tdm_task_desc *desc, const tdm_desc_bufs *b,
                          const char *what);
/* A task built from desc with the buffers b (checked) as tdm_submit
 * (user_ref false) or tdm_task_create (true) builds one: prepared for
 * devices; the same errors, logged as `what`. */
tdm_status tdm__task_build(tdm_runtime *rt, const tdm_task_desc *desc, const tdm_desc_bufs *b,
                           bool user_ref, const char *what, tdm_task **out);
/* The distinct handles of a built task with their combined modes, sorted
 * by address (the order their locks are taken in): how many; hs and
 * modes have room for its buffers. */
unsigned tdm__task_unique_handles(const tdm_task *t, tdm_handle **hs, unsigned *modes);
/* Room in h's readers (its lock held) for k more: the readers that
 * finished dropped first (-1: out of memory). tdm__reserve_readers looks
 * first whether there is room. */
int tdm__readers_room(tdm_handle *h, unsigned k);
static inline int tdm__reserve_readers(tdm_handle *h, unsigned k) {
  return h->readers.n + k <= h->readers.cap ? 0 : tdm__readers_room(h, k);
}
/* h's lock held: the tasks naming it TDM_COMMUTE since its writers, if
 * any, become its writers, for an access of another mode, or a call that
 * reads its state (handles.c). */
void tdm__handle_settle(tdm_handle *h);
/* Commutative accesses (commute.c). t (t->commute) is ready: true when it
 * took the exclusion of each handle it names TDM_COMMUTE (or already held
 * it); false: it waits for one of them and is placed when given it.
 * tdm__commute_give: t ends, it gives back what it holds. */
bool tdm__commute_take(tdm_task *t);
void tdm__commute_give(tdm_task *t);
/* Reductions (reduce.c). tdm__task_submit of a task naming a handle
 * TDM_REDUX (t->redux): each such buffer bound to its lane, whose init
 * task comes first, and t submitted. The lanes of h combined into it
 * (nothing when none was used since): for an access of another mode, for
 * unregistration or partitioning; those of every handle (at destroy);
 * what is left freed (a handle unregistered; at teardown). Statuses as
 * tdm__task_submit's. */
#define TDM__FLUSH ((tdm_status)1) /* check_and_reserve: bind or combine first */
tdm_status tdm__redux_submit(tdm_task *t, bool give_ref);
tdm_status tdm__redux_flush(tdm_handle *h);
tdm_status tdm__redux_flush_task(tdm_task *t);
void tdm__redux_flush_all(tdm_runtime *rt);
void tdm__redux_free(tdm_handle *h, bool at_destroy);
/* A task built from desc and submitted as the runtime's own (init and
 * combination tasks): no wait for room; verified in that mode. */
tdm_status tdm__submit_internal(tdm_runtime *rt, const tdm_task_desc *desc, const char *what);
/* Recorded graphs (graph.c): frees those left, at teardown (their
 * handles and groups go with the runtime's). */
void tdm__graphs_free(tdm_runtime *rt);

/* Submits t (created, all checks done but those needing handle locks).
 * Used for codelet tasks and host acquisitions alike. give_ref: the
 * caller's reference becomes the runtime's (on success only). */
tdm_status tdm__task_submit(tdm_task *t, bool give_ref);
/* A chunk of a data-parallel operation (tdm_task.chunk), created as
 * tdm_task_create creates a task (the caller holds a reference), and its
 * submission, verified when the runtime verifies, without waiting for
 * room; tdm__submit_wait_room waits for room as tdm_submit does (TDM_OK, or
 * TDM_ERR_SHUTTING_DOWN when the runtime is being destroyed meanwhile). */
tdm_status tdm__chunk_create(tdm_runtime *rt, const tdm_task_desc *desc, tdm_task **out);
tdm_status tdm__submit_created(tdm_task *t);
tdm_status tdm__submit_wait_room(tdm_runtime *rt);
/* At tdm_runtime_destroy, once closing is set and the waiters woken
 * (tdm__wake_waiters: a thread blocked for room then returns
 * TDM_ERR_SHUTTING_DOWN): waits until no such thread is left inside. */
void tdm__submit_wait_unblocked(tdm_runtime *rt);

/* ---- handles' tasks (handles.c) -------------------------------------------- */

/* Releases every handle the host still holds (at destroy). */
void tdm__release_acquisitions(tdm_runtime *rt);
/* Partitions h by whole rows (a vector by elements): tile i is rows
 * [rows_at[i], rows_at[i + 1]), n tiles (rows_at from 0 to the rows), as
 * tdm_matrix_partition does; and joins them back, as
 * tdm_matrix_unpartition does. */
tdm_status tdm__partition_rows(tdm_handle *h, const size_t *rows_at, size_t n, const char *what);
tdm_status tdm__unpartition_rows(tdm_handle *h, const char *what);

/* ---- data-parallel operations (parallel.c) --------------------------------- */

/* The chunks of a range of `rows` (guided self-scheduling over `units`
 * workers' speed, none under `grain`, at most max_chunks; first `probes`
 * small chunks, for the classes whose models calibrate): their number,
 * and their sizes in the order they are given out when sizes is not
 * NULL. */
size_t tdm__parallel_plan(size_t rows, size_t grain, double units, unsigned probes,
                          size_t max_chunks, size_t *sizes);
/* Where the plan's chunks (sizes[0 .. n-1], in the order they are given
 * out) lie in the range: slot_of[k] is chunk k's slot, whose rows are
 * [at[slot], at[slot + 1]) (at: n + 1 ascending boundaries). */
void tdm__parallel_layout(const size_t *sizes, size_t n, size_t *at, size_t *slot_of);
/* Frees the codelets the operations made (at destroy). */
void tdm__parallel_free(tdm_runtime *rt);
/* In units of one CPU worker's speed, what the workers that may run t
 * (the CPU workers when `cpu`, and the devices of dev_mask) do together
 * by the models (TDM_PARALLEL_UNKNOWN_UNITS for a device it cannot
 * predict); *unknown: the classes among them whose model is not
 * calibrated for t; each (NULL, or rt->ndevice_workers entries): each
 * device worker's part (0 for those not counted). */
#define TDM_PARALLEL_UNKNOWN_UNITS 16.0
/* A chunk is what is left over this many times the machine's speed
 * (guided self-scheduling's is 1; 2 and 3 gave the irregular range of
 * bench-parallel 1.51 and 1.21 of the bound on 2 cores + a 10x GPU,
 * calibrated, 4 gives 1.13, and in real time shorter idle tails). */
#define TDM_PARALLEL_GUIDED_K 4
double tdm__sched_speed_units(tdm_runtime *rt, const tdm_task *t, uint64_t dev_mask, bool cpu,
                              unsigned *unknown, double *each);

/* ---- the trace (trace.c) ---------------------------------------------------- */

/* Records e in the calling worker's buffer, or the shared one. */
void tdm__trace_add(tdm_runtime *rt, const tdm_trace_event *e);
/* When recording: task t ran on worker `worker` from t0 to t1 (ns). */
void tdm__trace_task(tdm_runtime *rt, const tdm_task *t, unsigned worker, uint64_t t0,
                     uint64_t t1);
/* When tracing: the application's `kind` of act (TDM_EV_PAUSE, _RESUME,
 * _CANCEL), now, with a name and a count. */
void tdm__trace_mark(tdm_runtime *rt, uint8_t kind, const char *name, uint64_t count);
/* Writes the trace and the graph files asked for (destroy, flush). */
tdm_status tdm__trace_write(tdm_runtime *rt);
/* At destroy: the statistics summary through the log, when asked. */
void tdm__trace_finish(tdm_runtime *rt);


/* ---- devices ----------------------------------------------------------------- */

/* Device worker k (worker id nworkers + k) drives device record
 * device_of[k]. Memory node 0 is the host's; device k's own memory, if it
 * has any, is node 1 + k. */
/* Each backend with devices ends the tasks whose device work completed
 * (its progress); whether any did. */
static inline bool tdm__device_progress(tdm_runtime *rt) {
  bool any = false;
  for (unsigned i = 0; i < rt->nattached; i++)
    if (rt->attached[i].n && rt->attached[i].ops->progress)
      any |= rt->attached[i].ops->progress(rt);
  return any;
}
/* Whether tasks whose device work completed wait for a CPU worker's
 * tdm__device_progress (cheap, any thread). */
static inline bool tdm__device_ended(const tdm_runtime *rt) {
  for (unsigned i = 0; i < rt->nattached; i++)
    if (rt->attached[i].n && rt->attached[i].ops->ended && rt->attached[i].ops->ended(rt))
      return true;
  return false;
}
/* Which devices may run t (t->dev_mask, t->device_ok), by every
 * backend's prepare: TDM_OK, or why a task that can only run on a device
 * cannot (logged). */
tdm_status tdm__device_prepare(tdm_runtime *rt, tdm_task *t, const char *what);
/* The device worker the calling thread is (a backend's thread), or -1. */
int tdm__device_current(const tdm_runtime *rt);

/* ---- placement on the runtime's threads (place.c) ---------------------------- */

/* Sends a ready codelet task where it will run, by the runtime's policy. */
void tdm__place(tdm_runtime *rt, tdm_task *t);
/* Device k cannot run t (its program did not build there): placed
 * elsewhere, or ends with `status` when nothing else can run it. */
void tdm__device_refused(tdm_runtime *rt, unsigned k, tdm_task *t, tdm_status status);
/* A codelet's variant disabled on device k as a programming error: counted
 * for tdm_wait_all's report, and tdm_config.kernel_event_fn told. */
void tdm__kernel_disabled(tdm_runtime *rt, unsigned k, const char *codelet, tdm_status status,
                          const char *why);
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
/* Tasks only the CPU workers run, while a scheduler places others: no
 * policy places them, so the scheduler counts them (queued, running) for
 * the CPU workers' backlog, and learns their time from a sample
 * (sched/policy.h, TDM_SCHED_CPU_ONLY). Ready (once: t->cpu_counted;
 * then queued for the CPU workers);
 * started by worker w (true: time this run, and tell
 * tdm__cpu_only_ran); ended, on worker w or another thread (w NULL). */
void tdm__cpu_only_ready(tdm_runtime *rt, tdm_task *t);
bool tdm__cpu_only_start(tdm_worker *w, tdm_task *t);
void tdm__cpu_only_ran(tdm_worker *w, double seconds);
void tdm__cpu_only_ended(tdm_task *t, tdm_worker *w);
/* Whether t's duration should be measured (the scheduler learns it). */
static inline bool tdm__sched_timed(const tdm_task *t) {
  return t->device_ok && t->rt->sched;
}
tdm_status tdm__sched_start(tdm_runtime *rt);
void tdm__sched_stop(tdm_runtime *rt);

/* The next task for device k: the first of q, else (the lock dropped
 * meanwhile) one from the shared queue, else one waiting elsewhere that
 * would finish earlier on k. Lock held. */
tdm_task *tdm__taskq_next(tdm_runtime *rt, unsigned k, tdm_taskq *q, pthread_mutex_t *lock);
/* Lock not held: takes the last task of q, not started, if `want`
 * accepts it (called under the lock), else NULL; cheap when q is empty. */
tdm_task *tdm__taskq_take(tdm_runtime *rt, tdm_taskq *q, pthread_mutex_t *lock,
                          bool (*want)(tdm_task *, void *), void *data);

/* t became ready (its last predecessor ended, or its submitter let go):
 * an acquisition is granted, a codelet task placed. */
static inline void tdm__task_ready(tdm_task *t) {
  if (t->kind == TDM_TASK_ACQUIRE) {
    /* Once READY is seen, the acquirer may release the task and free it:
     * a reference keeps it while we look at its waiters. */
    tdm__task_ref(t);
    atomic_store(&t->state, TDM_TS_READY);
    /* seq_cst above pairs with the waiter's seq_cst increment (Dekker) */
    if (atomic_load(&t->waiters))
      tdm__wake_waiters(t->rt);
    tdm__task_unref(t);
    return;
  }
  atomic_store_explicit(&t->state, TDM_TS_READY, memory_order_relaxed);
  if (TDM_UNLIKELY(t->commute) && !tdm__commute_take(t))
    return; /* placed when the exclusion it waits for is given to it */
  tdm__place(t->rt, t);
}

/* One predecessor of t, or its submitter, less: ready at none. */
static inline void tdm__task_release_pending(tdm_task *t) {
  /* acq_rel: the releasing predecessors' writes happen before the task
   * runs on whichever thread drops the count to zero */
  if (atomic_fetch_sub_explicit(&t->pending, 1, memory_order_acq_rel) == 1)
    tdm__task_ready(t);
}

/* Links the edge e (t's own) from a predecessor to succ, counted in
 * succ's pending; tagged: the predecessor, tagged (tdm__edge_tag) when
 * succ reads a version it produces. A predecessor that has finished
 * gets no edge (succ is cancelled if it read what that one failed to
 * produce). The caller keeps the predecessor alive and holds one count
 * of succ's pending (task.c, graph.c). */
static inline void tdm__link_edge(tdm_task *tagged, tdm_task *succ, tdm_edge *e) {
  tdm_task *pred = tdm__edge_task(tagged);
  e->succ = tagged == pred ? succ : tdm__edge_tag(succ);
  /* count the edge first: pred may finish as soon as it is visible */
  atomic_fetch_add_explicit(&succ->pending, 1, memory_order_relaxed);
  tdm_edge *head = atomic_load_explicit(&pred->succ_head, memory_order_acquire);
  do {
    if (head == TDM_CLOSED) {
      /* pred finished: its writes and outcome are visible (acquire), no
       * wait needed. Cannot reach zero: the submitter still holds one
       * count. */
      if (tagged != pred && atomic_load_explicit(&pred->outcome, memory_order_relaxed))
        atomic_store_explicit(&succ->outcome, TDM_ERR_CANCELLED, memory_order_relaxed);
      atomic_fetch_sub_explicit(&succ->pending, 1, memory_order_relaxed);
      return;
    }
    e->next = head;
    /* release: the edge's contents are visible to the finishing pred;
     * acquire on failure: see TDM_CLOSED's happens-before as above */
  } while (!atomic_compare_exchange_weak_explicit(
      &pred->succ_head, &head, e, memory_order_release, memory_order_acquire));
}

/* A sleeping CPU worker woken, if any: after work was published with a
 * seq_cst write (worker.c). */
void tdm__wake_sleeper(tdm_runtime *rt);
/* Wakes a worker to finish completed device tasks (any thread). */
void tdm__wake_for_completion(tdm_runtime *rt);

/* Runs t's CPU variant on bufs (NULL: its handles' own buffers; complete.c). */
void tdm__cpu_run(const tdm_task *t, const tdm_buffer *bufs);

#endif
