/*
 * How a task ends, wherever it ran: tdm__task_done records it (trace,
 * model, the policy's backlog), tries a failed device run again or takes
 * its outcome, calls its callback, and finish releases its successors
 * (cancelling those that read what it did not produce) and wakes its
 * waiters. A CPU worker runs a task here (tdm__task_execute), the
 * application's thread in tdm_dispatch (tdm__task_run_here).
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>

/* ---- completion ------------------------------------------------------- */

_Thread_local tdm_status tdm__callback_status TDM_TLS_MODEL = TDM_ERR_INVALID_ARG;
_Thread_local unsigned tdm__callback_worker TDM_TLS_MODEL;
_Thread_local uint64_t tdm__callback_t0 TDM_TLS_MODEL, tdm__callback_t1 TDM_TLS_MODEL;

void tdm__task_ended_badly(tdm_task *t, tdm_status status) {
  tdm_runtime *rt = t->rt;
  atomic_store_explicit(&t->outcome, status, memory_order_relaxed);
  if (t->kind != TDM_TASK_CODELET || (rt->verify && tdm__verify_internal(t)))
    return;
  const char *name = tdm__codelet_name(t);
  bool cancelled = status == TDM_ERR_CANCELLED;
  if (tdm__cancelled_by_group(t, status)) /* asked for: not a failure to report */
    return;
  /* a failure is logged where it happens, with its cause; a cancellation
   * follows from one and may come by the thousand */
  tdm__log(rt, TDM_LOG_DEBUG, "task %s %s (%s)", name, cancelled ? "cancelled" : "failed",
           tdm_status_name(status));
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->fail_lock));
  unsigned long *n = cancelled ? &rt->ncancelled : &rt->nfailed;
  if ((*n)++ == 0) {
    snprintf(cancelled ? rt->first_cancelled : rt->first_failed, sizeof rt->first_failed,
             "%s", name);
    if (!cancelled)
      rt->first_status = status;
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->fail_lock));
}

tdm_status tdm__report_failures(tdm_runtime *rt, const char *what) {
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->fail_lock));
  unsigned long failed = rt->nfailed, cancelled = rt->ncancelled, kernel = rt->nkernel;
  if (kernel) /* told with the failures, if any, or alone */
    tdm__log(rt, TDM_LOG_ERROR, "%s: %lu OpenCL variant%s disabled on a device since the last "
             "report, as %s kernel cannot be launched as written (the first: codelet %s; see "
             "the log)", what, kernel, kernel == 1 ? " was" : "s were",
             kernel == 1 ? "its" : "their", rt->first_kernel);
  rt->nkernel = 0;
  if (failed || cancelled) {
    char first[160] = "";
    if (failed)
      snprintf(first, sizeof first, "; the first failed: %s (%s)", rt->first_failed,
               tdm_status_name(rt->first_status));
    if (cancelled)
      snprintf(first + strlen(first), sizeof first - strlen(first),
               "; the first cancelled: %s", rt->first_cancelled);
    tdm__log(rt, TDM_LOG_ERROR, "%s: %lu task%s failed and %lu %s cancelled since the last "
             "report%s", what, failed, failed == 1 ? "" : "s", cancelled,
             cancelled == 1 ? "was" : "were", first);
    rt->nfailed = rt->ncancelled = 0;
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->fail_lock));
  if (failed || cancelled)
    return TDM_ERR_TASK_FAILED;
  if (kernel)
    return TDM_ERR_KERNEL;
  return rt->verify && tdm__verify_report_mismatches(rt, what) ? TDM_ERR_MISMATCH : TDM_OK;
}

tdm_status tdm_callback_status(void) {
  return tdm__callback_status;
}

/* The successors on data edges from e on: cancelled. */
static __attribute__((noinline, cold)) void cancel_readers(tdm_edge *e) {
  for (; e; e = e->next)
    if (tdm__edge_task(e->succ) != e->succ)
      atomic_store_explicit(&tdm__edge_task(e->succ)->outcome, TDM_ERR_CANCELLED,
                            memory_order_relaxed);
}

/* Finishes t; w: the calling worker of t's runtime, or NULL. */
static void finish(tdm_task *t, tdm_worker *w) {
  tdm_runtime *rt = t->rt;
  if (TDM_UNLIKELY(t->commute)) /* before it is DONE: its handles may go then */
    tdm__commute_give(t);
  /* acq_rel: our writes (the task's results) are released to successors;
   * acquire the edges they pushed */
  tdm_edge *e = atomic_exchange_explicit(&t->succ_head, TDM_CLOSED, memory_order_acq_rel);
  atomic_store(&t->state, TDM_TS_DONE);
  /* ended without its results: whoever reads them is cancelled (before
   * the release below publishes it) */
  if (TDM_UNLIKELY(atomic_load_explicit(&t->outcome, memory_order_relaxed) != TDM_OK))
    cancel_readers(e);
  while (e) {
    tdm_edge *next = e->next; /* before the successor can be freed */
    tdm__task_release_pending(tdm__edge_task(e->succ));
    e = next;
  }
  /* seq_cst (the store of state above) pairs with the waiter's increment */
  if (atomic_load(&t->waiters))
    tdm__wake_waiters(rt);
  if (TDM_UNLIKELY(t->group))
    tdm__group_ended(t);
  if (t->kind == TDM_TASK_CODELET) {
    /* Workers count their finished tasks locally and subtract them from
     * inflight in batches; inflight stays above zero meanwhile, which
     * only delays wait_all: an idle worker flushes as soon as a thread
     * waits, and always before it parks (worker.c). */
    if (!w)
      tdm__sub_inflight(rt, 1);
    else if (++w->unflushed >= TDM_FLUSH_BATCH)
      tdm__flush_finished(w);
  }
  tdm__task_unref(t);
}

void tdm__task_finish(tdm_task *t) {
  finish(t, tdm__self_in(t->rt));
}

/* A failed try of t on `worker`, counted and logged: t is placed again
 * (the backlog there shrinks; nothing learnt). */
static void place_again(tdm_task *t, unsigned worker) {
  tdm_runtime *rt = t->rt;
  if (tdm__sched_timed(t))
    tdm__sched_done(t, worker, -1);
  t->sched_cls = -1;
  atomic_fetch_add_explicit(&rt->nretries, 1, memory_order_relaxed);
  tdm__place(rt, t);
}

/* t's inputs came home for a CPU worker, or failed to (tdm__host_ready):
 * it runs, or ends, where it was. */
static void fetched(void *arg, int status) {
  tdm_task *t = arg;
  if (status < 0)
    tdm__host_not_home(t, status);
  if (t->main_thread)
    tdm__dispatch_task(t->rt, t);
  else
    tdm__schedule(t->rt, t);
}

/* t's inputs did not come home for a CPU worker (tdm__host_ready): the
 * copies that failed are forgotten, and t is placed again when tries
 * remain (true). */
static bool retry_home(tdm_task *t, unsigned worker) {
  tdm_runtime *rt = t->rt;
  t->homeless = false;
  tdm__task_drop_failed(rt, t, false);
  if (t->tries >= rt->cfg.retries)
    return false;
  t->tries++;
  tdm__log(rt, TDM_LOG_WARNING, "task %s: its inputs are fetched again (retry %u of %u)",
           tdm__codelet_name(t), t->tries, rt->cfg.retries);
  atomic_store_explicit(&t->outcome, TDM_OK, memory_order_relaxed);
  place_again(t, worker);
  return true;
}

/* t failed on device worker `worker` with status: placed again, on a
 * kind of worker that has not failed it, when tries remain (true). Its
 * inputs are as they were: what a failed run wrote was dropped
 * (tdm__task_write_failed), a failed launch wrote nothing, copies that
 * failed on their way are forgotten here. */
static bool retry(tdm_task *t, unsigned worker, tdm_status status) {
  tdm_runtime *rt = t->rt;
  if (status == TDM_ERR_CANCELLED || t->kind != TDM_TASK_CODELET)
    return false;
  if (worker < rt->nworkers)
    return t->homeless && retry_home(t, worker);
  unsigned k = worker - rt->nworkers;
  tdm__task_drop_failed(rt, t, tdm__device_node(rt, k) == 0);
  tdm__device_failed(rt, k, status); /* may take the device out of placement */
  uint64_t bit = UINT64_C(1) << k;
  if (t->tries >= rt->cfg.retries || t->spoiled || !tdm__task_runs_without(t, bit))
    return false;
  tdm__task_lose_devices(t, bit);
  t->tries++;
  tdm__log(rt, TDM_LOG_WARNING,
           "task %s failed on device %u (%s): tried again elsewhere (retry %u of %u)",
           tdm__codelet_name(t), k, tdm_status_name(status), t->tries, rt->cfg.retries);
  t->unkept = false;
  place_again(t, worker);
  return true;
}

/* The end of a task (see tdm__task_done); w: the calling worker of t's
 * runtime, or NULL. Inlined into the CPU workers' path. */
static inline void task_done(tdm_task *t, tdm_worker *w, unsigned worker, tdm_status status,
                             uint64_t t0, uint64_t t1) {
  tdm_runtime *rt = t->rt;
  if (status && retry(t, worker, status))
    return;
  if (status)
    tdm__task_ended_badly(t, status);
  else if (rt->recording && !t->main_thread) /* not on a worker's track */
    tdm__trace_task(rt, t, worker, t0, t1);
  if (rt->sched) { /* the backlogs shrink; the model learns a success */
    if (TDM_UNLIKELY(t->cpu_counted))
      tdm__cpu_only_ended(t, w);
    if (t->device_ok)
      tdm__sched_done(t, worker, status ? -1 : 1e-9 * (double)(t1 - t0));
  }
  if (t->callback) {
    if (TDM_UNLIKELY(t->callback_on_dispatch)) {
      /* on the application's thread; queued before the end is counted,
       * so that whoever waits for the task, then dispatches, runs it */
      tdm__task_ref(t);
      t->dispatch_ended = true;
      tdm__dispatch_task(rt, t);
      finish(t, w);
      return;
    }
    tdm__callback_status = status;
    tdm__callback_worker = worker;
    tdm__callback_t0 = t0;
    tdm__callback_t1 = t1;
    TDM_USER_CODE(t->callback(t->callback_data));
    tdm__callback_status = TDM_ERR_INVALID_ARG;
  }
  finish(t, w);
}

void tdm__task_done(tdm_task *t, unsigned worker, tdm_status status, uint64_t t0,
                    uint64_t t1) {
  task_done(t, tdm__self_in(t->rt), worker, status, t0, t1);
}

/* A task's CPU variant, on the buffers given (NULL: its handles' own,
 * the application's memory in place), or a device's copies. */
void tdm__cpu_run(const tdm_task *t, const tdm_buffer *bufs) {
  const tdm_codelet *cl = t->codelet;
  if (!cl->cpu_fn)
    return;
  tdm_buffer room[TDM_MAX_BUFFERS];
  if (!bufs) {
    /* (the task's own room past TDM_MAX_BUFFERS: it runs once at a time) */
    tdm_buffer *own = tdm__task_views(t, room);
    tdm_handle *const *hs = tdm__task_handles(t);
    for (unsigned i = 0; i < t->nbuf; i++)
      own[i] = hs[i]->buf;
    bufs = own;
  }
  cl->cpu_fn(bufs, t->args, t->args_size);
}

/* A pinned task's CPU function runs on this thread (tdm_dispatch): as
 * tdm_worker.running. */
static _Thread_local tdm_task *pinned_running TDM_TLS_MODEL;

/* Runs t's CPU variant on its own buffers, as its run on *running (a
 * worker's, or pinned_running): false when the function deferred the
 * task's end (tdm_task_defer), which tdm_deferred_end then makes. */
TDM_ALWAYS_INLINE static bool run_own(tdm_task *t, tdm_task **running) {
  *running = t;
  tdm__cpu_run(t, NULL);
  tdm_task *r = *running;
  *running = NULL;
  return r != NULL;
}

tdm_deferred *tdm_task_defer(void) {
  tdm_worker *w = tdm__self;
  tdm_task **running = w && w->running ? &w->running : &pinned_running;
  tdm_task *t = *running;
  if (!t) {
    if (w) /* (a worker's thread: a callback, or a second call) */
      tdm__log(w->rt, TDM_LOG_ERROR, "tdm_task_defer: not in a task's CPU function, or called "
               "twice in one run: nothing deferred");
    return NULL;
  }
  *running = NULL;
  return (tdm_deferred *)(void *)t;
}

tdm_status tdm_deferred_end(tdm_deferred *d, tdm_status status) {
  if (!d)
    return TDM_ERR_INVALID_ARG;
  tdm_task *t = (tdm_task *)(void *)d;
  tdm_status st = TDM_OK;
  if (status > 0) {
    tdm__log(t->rt, TDM_LOG_ERROR, "tdm_deferred_end: status %d is not a tdm_status: task %s "
             "ends failed", (int)status, tdm__codelet_name(t));
    status = st = TDM_ERR_INVALID_ARG;
  }
  if (!status && t->rt->ndevice_workers)
    tdm__host_written(t);
  /* worker 0 for what task_done passes on: a CPU task is not tried again
   * for a failure of its own */
  task_done(t, tdm__self_in(t->rt), 0, status, 0, 0);
  return st;
}

/* Runs t on CPU worker w, timed: for the trace or the statistics, for
 * the scheduler's model (a task a device could run, or a sample of those
 * only the CPU workers run), or to stretch it on an emulated machine. */
static __attribute__((noinline)) void run_timed(tdm_task *t, tdm_worker *w, bool sample) {
  tdm_runtime *rt = t->rt;
  uint64_t t0 = tdm__now_ns();
  if (!run_own(t, &w->running))
    return; /* (its time is not the function's: nothing learnt) */
  uint64_t t1 = tdm__now_ns();
  if (rt->cpu_stretch) { /* an emulated machine is slower than this one */
    double stretched = (double)(t1 - t0) * 1e-9 * rt->cpu_stretch(rt, w->id, t);
    tdm__sleep_until(t0 + tdm__ns_of(stretched));
    t1 = tdm__now_ns();
  }
  if (rt->timing) /* the statistics measure times only when asked */
    tdm__count(&w->busy_ns, t1 - t0);
  if (sample)
    tdm__cpu_only_ran(w, 1e-9 * (double)(t1 - t0));
  if (rt->ndevice_workers)
    tdm__host_written(t);
  task_done(t, w, w->id, TDM_OK, t0, t1);
}

void tdm__task_execute(tdm_task *t, tdm_worker *w) {
  tdm_runtime *rt = t->rt;
  /* cancelled, or its inputs could not be brought home: it ends here */
  tdm_status failed = tdm__task_outcome_at_start(t);
  if (!failed && rt->ndevice_workers) {
    if (!tdm__host_ready(t, fetched))
      return; /* its inputs are coming home; it is queued again then */
    failed = atomic_load_explicit(&t->outcome, memory_order_relaxed);
    /* one in a few of the tasks only the CPU workers run, while devices
     * take others: the scheduler learns how long they keep them busy */
    if (!failed && t->cpu_counted && tdm__cpu_only_start(w, t)) {
      tdm__count(&w->tasks_run, 1);
      run_timed(t, w, true);
      return;
    }
  }
  if (TDM_UNLIKELY(failed)) {
    task_done(t, w, w->id, failed, 0, 0);
    return;
  }
  tdm__count(&w->tasks_run, 1);
  if (rt->time_cpu_tasks || tdm__sched_timed(t) || t->chunk) {
    run_timed(t, w, false);
    return;
  }
  if (TDM_UNLIKELY(!run_own(t, &w->running)))
    return;
  if (rt->ndevice_workers)
    tdm__host_written(t);
  task_done(t, w, w->id, TDM_OK, 0, 0);
}

void tdm__task_run_here(tdm_task *t) {
  tdm_runtime *rt = t->rt;
  tdm_status failed = tdm__task_outcome_at_start(t);
  if (!failed && rt->ndevice_workers) {
    if (!tdm__host_ready(t, fetched))
      return; /* its inputs are coming home; it is queued here again then */
    failed = atomic_load_explicit(&t->outcome, memory_order_relaxed);
  }
  if (!failed) {
    /* a submission from it never waits for room: the tasks that would
     * make room may wait for this thread */
    uint64_t t0 = rt->recording ? tdm__now_ns() : 0;
    bool ended;
    TDM_USER_CODE(ended = run_own(t, &pinned_running));
    if (!ended)
      return;
    if (t0) /* on the application's track */
      tdm__trace_task(rt, t, TDM_TRACK_APP, t0, tdm__now_ns());
    if (rt->ndevice_workers)
      tdm__host_written(t);
  }
  /* worker 0 for what task_done passes on (a retry of a task whose
   * inputs did not come home places it again: here) */
  task_done(t, NULL, 0, failed, 0, 0);
}

typedef struct awaited {
  tdm_task *t;
  uint32_t state;
} awaited;

static bool reached(const void *arg) {
  const awaited *a = arg;
  return atomic_load_explicit(&a->t->state, memory_order_acquire) >= a->state;
}

void tdm__task_wait_state(tdm_task *t, uint32_t state) {
  tdm_runtime *rt = t->rt;
  if (tdm__waits_dispatching(rt)) { /* what it waits for may be pinned here */
    atomic_fetch_add(&t->waiters, 1);
    tdm__wait_dispatching(rt, reached, &(awaited){t, state});
    atomic_fetch_sub(&t->waiters, 1);
    return;
  }
  /* Poll a little before blocking, as tdm_wait_all does. acquire: the
   * task's effects are visible once we see its state. */
  uint64_t deadline = 0;
  while (atomic_load_explicit(&t->state, memory_order_acquire) < state &&
         tdm__idle_step(&deadline, rt->cfg.spin_us))
    ;
  if (atomic_load_explicit(&t->state, memory_order_acquire) >= state)
    return;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->wait_lock));
  atomic_fetch_add(&t->waiters, 1);
  while (atomic_load(&t->state) < state)
    TDM_PTHREAD(rt, pthread_cond_wait(&rt->wait_cond, &rt->wait_lock));
  atomic_fetch_sub(&t->waiters, 1);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->wait_lock));
}

