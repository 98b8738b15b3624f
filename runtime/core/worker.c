/*
 * Workers: where ready tasks wait, how idle workers find them, and how they
 * sleep.
 *
 * Queues. Each worker owns a Chase–Lev deque (deque.h). A task made ready by
 * a worker (a successor it released, a task submitted from inside a task)
 * goes to that worker's deque: the owner pops the newest (its data is warm
 * in cache), thieves steal the oldest. A task made ready by any other thread
 * goes to the runtime's injection stack, a lock-free LIFO that workers empty
 * in one exchange: the worker that empties it runs the oldest task and
 * pushes the others on its deque, where the other workers can steal them.
 *
 * Priorities: three bands, by the sign of tdm_task_desc.priority, each
 * with its deque per worker and its injection stack, looked at from the
 * highest: a task above 0 starts before any at 0, which starts before
 * any below 0, and within a band work stealing keeps its order and its
 * locality (as Taskflow's executor keeps a queue per priority level per
 * worker). Until a task outside the normal band is queued (rt->banded),
 * workers look at the normal band only.
 *
 * Finding work, in order: own deque, injection stack, then stealing, nearest
 * victims first (topology.c); from a deque holding many tasks a thief takes
 * up to half onto its own (steal-half, as in Hendler and Shavit,
 * "Non-Blocking Steal-Half Work Queues", PODC 2002, though one steal at a
 * time here), so that a task producing many others feeds the idle workers
 * in batches rather than one contended steal per task. A worker that
 * finds nothing polls for cfg.spin_us microseconds (tasks often come in
 * bursts, and waking a parked thread costs tens of microseconds) and then
 * parks on a condition variable, so an idle runtime burns no CPU.
 *
 * Waking. A parking worker increments nsleeping, then looks at every queue
 * once more before it waits; a thread that makes work available publishes
 * it, then reads nsleeping. With seq_cst on both sides (a Dekker pattern),
 * either the parking worker sees the work or the publisher sees the
 * sleeper. The publisher then claims one sleeper (decrements nsleeping and
 * posts a wakeup under park_lock), so a burst of pushes wakes each sleeper
 * once, not once per push; the cost of publishing while nobody sleeps is
 * one fence and one load.
 *
 * Benching (tdm_runtime_pause, tdm_runtime_set_active_workers). A worker
 * whose id is not below run_limit takes no task: it waits on bench_cond,
 * apart from the parked workers (a publisher's wake-up goes to a worker
 * that can run the work). It looks at the limit before each task and
 * again once it took one, which it hands back (to its deque, where the
 * active workers steal it) if the limit changed meanwhile: a task
 * submitted after a pause returned never starts before the resume. The
 * tasks a benched worker left on its deque are stolen as any are.
 */
#include "core.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* cannot fail with this clock */
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool tdm__idle_step(uint64_t *deadline, unsigned spin_us) {
  if (!spin_us)
    return false;
  uint64_t now = monotonic_ns();
  if (!*deadline)
    *deadline = now + 1000ull * spin_us;
  else if (now >= *deadline)
    return false;
  sched_yield();
  return true;
}

_Thread_local tdm_worker *tdm__self TDM_TLS_MODEL;

/* Wakes a sleeper if there is one. The caller has published work with a
 * seq_cst operation (or fence) just before: then either this load sees the
 * sleeper, or the sleeper's last look at the queues sees the work (it
 * registers in nsleeping with seq_cst before looking: see park). */
static void wake_if_sleeping(tdm_runtime *rt) {
  if (atomic_load(&rt->nsleeping) <= 0)
    return;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->park_lock));
  if (atomic_load_explicit(&rt->nsleeping, memory_order_relaxed) > 0) {
    atomic_fetch_sub_explicit(&rt->nsleeping, 1, memory_order_relaxed);
    rt->wakeups++;
    TDM_PTHREAD(rt, pthread_cond_signal(&rt->park_cond));
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->park_lock));
}

static void wake_one(tdm_runtime *rt) {
  /* seq_cst: orders the (release) publication before the load */
  tdm__fence_seq_cst();
  wake_if_sleeping(rt);
}

void tdm__wake_all(tdm_runtime *rt) {
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->park_lock));
  TDM_PTHREAD(rt, pthread_cond_broadcast(&rt->park_cond));
  TDM_PTHREAD(rt, pthread_cond_broadcast(&rt->bench_cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->park_lock));
}

/* Pushes the chain first .. (its last pool_next link) on band b's
 * injection stack. */
static void inject_chain(tdm_runtime *rt, unsigned b, tdm_task *first) {
  tdm_task *last = first;
  while (last->pool_next)
    last = last->pool_next;
  tdm_task *head = atomic_load_explicit(&rt->inject[b], memory_order_relaxed);
  do {
    last->pool_next = head;
    /* seq_cst: releases the tasks' contents to the worker that takes the
     * stack, and serves as the publication wake_if_sleeping needs */
  } while (!atomic_compare_exchange_weak_explicit(
      &rt->inject[b], &head, first, memory_order_seq_cst, memory_order_relaxed));
}

/* The band of a task of priority p (not 0), noting that bands are used.
 * Relaxed: a worker that finds the flag late finds the task on its next
 * look (the wake-up that follows comes after a seq_cst publication). */
static unsigned banded(tdm_runtime *rt, int p) {
  if (!atomic_load_explicit(&rt->banded, memory_order_relaxed))
    atomic_store(&rt->banded, true);
  return tdm__band(p);
}

/* tdm__schedule of t into band b (a constant in the usual call). */
static inline void schedule_in(tdm_runtime *rt, tdm_task *t, unsigned b) {
  tdm_worker *w = tdm__self_in(rt);
  if (w && tdm__deque_push(&w->deques[b], t) == 0) {
    wake_one(rt);
    return;
  }
  /* not a worker of rt, or its deque could not grow */
  t->pool_next = NULL;
  inject_chain(rt, b, t);
  wake_if_sleeping(rt);
}

void tdm__schedule_chain(tdm_runtime *rt, tdm_task *first) {
  tdm_worker *w = tdm__self_in(rt);
  if (w) {
    while (first) {
      tdm_task *next = first->pool_next; /* pushed, it may run and go at once */
      if (tdm__deque_push(&w->deques[TDM_BAND_NORMAL], first) != 0)
        break;
      first = next;
    }
    if (!first) {
      wake_one(rt);
      return;
    }
  }
  /* not a worker of rt, or its deque could not grow: one exchange */
  inject_chain(rt, TDM_BAND_NORMAL, first);
  wake_if_sleeping(rt);
}

void tdm__schedule(tdm_runtime *rt, tdm_task *t) {
  if (TDM_UNLIKELY(t->priority))
    schedule_in(rt, t, banded(rt, t->priority));
  else
    schedule_in(rt, t, TDM_BAND_NORMAL);
}

static tdm_task *take_injected(tdm_worker *w, unsigned b) {
  tdm_runtime *rt = w->rt;
  /* relaxed: a cheap look before the exchange */
  if (!atomic_load_explicit(&rt->inject[b], memory_order_relaxed))
    return NULL;
  /* acquire: pairs with the release CAS in inject_chain */
  tdm_task *t = atomic_exchange_explicit(&rt->inject[b], NULL, memory_order_acquire);
  if (!t)
    return NULL;
  /* The stack holds the newest first: push all but the oldest, which we
   * run now. */
  unsigned pushed = 0;
  while (t->pool_next) {
    tdm_task *next = t->pool_next;
    if (tdm__deque_push(&w->deques[b], t) != 0) {
      inject_chain(rt, b, t); /* out of memory: leave the rest for later */
      t = NULL;
      break;
    }
    pushed++;
    t = next;
  }
  if (pushed) {
    wake_one(rt);
    if (rt->sched) /* ws: idle devices may take some */
      tdm__sched_work_shown(rt);
  }
  return t;
}

void tdm__flush_finished(tdm_worker *w) {
  unsigned n = w->unflushed;
  w->unflushed = 0;
  tdm__sub_inflight(w->rt, n);
}

#define TDM_STEAL_MAX 32

static uint64_t next_random(tdm_worker *w) {
  /* xorshift64 (Marsaglia, 2003) */
  uint64_t x = w->rng;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return w->rng = x;
}

/* After a won steal from d: when d still holds many tasks, takes up to
 * half of them (at most TDM_STEAL_MAX) onto this worker's own deque, so
 * that a worker fed by another's producer task runs them from its own
 * deque instead of stealing each (nested producers). One steal at a time:
 * a Chase–Lev owner pops without a CAS, so a thief cannot claim a range
 * with one. Stops at the first lost race (or empty deque). */
static void steal_more(tdm_worker *w, tdm_deque *d, unsigned b) {
  int64_t n = tdm__deque_size(d) / 2;
  if (n < 2)
    return;
  if (n > TDM_STEAL_MAX)
    n = TDM_STEAL_MAX;
  tdm_deque *own = &w->deques[b];
  int64_t tried = 0, won = 0;
  while (tried < n) {
    tried++;
    tdm_task *t = tdm__deque_steal(d);
    if (!t)
      break;
    won++;
    if (tdm__deque_push(own, t) != 0) { /* out of memory: elsewhere */
      tdm__schedule(w->rt, t);
      break;
    }
  }
  tdm__count(&w->steals_tried, (uint64_t)tried);
  tdm__count(&w->steals_won, (uint64_t)won);
}

static tdm_task *steal(tdm_worker *w, unsigned b) {
  tdm_runtime *rt = w->rt;
  const tdm_worker_plan *p = &rt->plan;
  const unsigned *victims = p->victims[w->id];
  unsigned start = 0;
  for (unsigned g = 0; g < p->ngroups[w->id]; g++) {
    unsigned end = p->group_end[w->id][g];
    unsigned n = end - start;
    unsigned r = (unsigned)(next_random(w) % n);
    for (unsigned k = 0; k < n; k++) {
      tdm_deque *d = &rt->workers[victims[start + (r + k) % n]].deques[b];
      if (tdm__deque_size(d) == 0)
        continue; /* cheap look; steal's fence only when worth it */
      tdm__count(&w->steals_tried, 1);
      tdm_task *t = tdm__deque_steal(d);
      if (t) {
        tdm__count(&w->steals_won, 1);
        steal_more(w, d, b);
        return t;
      }
    }
    start = end;
  }
  return NULL;
}

void tdm__wake_sleeper(tdm_runtime *rt) {
  wake_if_sleeping(rt);
}

void tdm__wake_for_completion(tdm_runtime *rt) {
  wake_if_sleeping(rt);
  /* paused: a benched worker ends it (bench). seq_cst: the completion
   * was published with seq_cst; pairs with bench's increment */
  if (atomic_load(&rt->nbenched) > 0 && atomic_load(&rt->run_limit) == 0) {
    TDM_PTHREAD(rt, pthread_mutex_lock(&rt->park_lock));
    TDM_PTHREAD(rt, pthread_cond_signal(&rt->bench_cond));
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->park_lock));
  }
}

/* A task of band b from this worker's deque or the injection stack. */
static inline tdm_task *take_own(tdm_worker *w, unsigned b) {
  tdm_task *t = NULL;
  /* a look at the size first: pop costs a full fence even when empty */
  if (tdm__deque_size(&w->deques[b]) > 0)
    t = tdm__deque_pop(&w->deques[b]);
  return t ? t : take_injected(w, b);
}

/* A task of band b: take_own's, or another worker's. */
static tdm_task *find_in_band(tdm_worker *w, unsigned b) {
  tdm_task *t = take_own(w, b);
  return t ? t : steal(w, b);
}

static tdm_task *find_work(tdm_worker *w) {
  tdm_task *t = NULL;
  tdm_runtime *rt = w->rt;
  /* finished device tasks first: their successors land on our deque.
   * acquire: the devices are started (runtime.c) */
  bool devices = rt->ndevice_workers && atomic_load_explicit(&rt->devices_ready,
                                                             memory_order_acquire);
  if (devices)
    tdm__device_progress(rt);
  /* relaxed: see tdm__schedule */
  bool banded = atomic_load_explicit(&rt->banded, memory_order_relaxed);
  if (TDM_UNLIKELY(banded) && (t = find_in_band(w, TDM_BAND_HIGH)))
    return t;
  /* the normal band: as find_in_band, the devices' queues (in priority
   * order already) before stealing */
  t = take_own(w, TDM_BAND_NORMAL);
  if (!t && devices) /* placed on this kind of core by another thread */
    t = tdm__sched_take_kind(w, false);
  if (!t && devices)
    t = tdm__sched_take_shared(rt, w->id);
  if (!t)
    t = steal(w, TDM_BAND_NORMAL);
  if (!t && banded)
    t = find_in_band(w, TDM_BAND_LOW);
  if (!t && devices) /* a task waiting on a device, if worth it */
    t = tdm__sched_idle_cpu(w);
  return t;
}

tdm_task *tdm__steal_from(tdm_runtime *rt, unsigned worker) {
  tdm_worker *v = &rt->workers[worker];
  for (unsigned b = 0; b < TDM_BANDS; b++) {
    if (tdm__deque_size(&v->deques[b]) == 0)
      continue;
    tdm_task *t = tdm__deque_steal(&v->deques[b]);
    if (t)
      return t;
  }
  return NULL;
}

static bool any_work(tdm_runtime *rt) {
  if (tdm__device_ended(rt))
    return true;
  for (unsigned b = 0; b < TDM_BANDS; b++)
    if (atomic_load(&rt->inject[b]))
      return true;
  if (atomic_load_explicit(&rt->devices_ready, memory_order_acquire) && tdm__sched_queued(rt))
    return true;
  for (unsigned i = 0; i < rt->nworkers; i++)
    for (unsigned b = 0; b < TDM_BANDS; b++)
      if (tdm__deque_size(&rt->workers[i].deques[b]) > 0)
        return true;
  return false;
}

static void park(tdm_worker *w) {
  tdm_runtime *rt = w->rt;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->park_lock));
  /* seq_cst (and the fence): nsleeping is visible before we look at the
   * queues; pairs with the publication before wake_if_sleeping */
  atomic_fetch_add(&rt->nsleeping, 1);
  tdm__fence_seq_cst();
  if (atomic_load(&rt->stop) || any_work(rt)) {
    atomic_fetch_sub_explicit(&rt->nsleeping, 1, memory_order_relaxed);
  } else {
    while (rt->wakeups == 0 && !atomic_load(&rt->stop))
      TDM_PTHREAD(rt, pthread_cond_wait(&rt->park_cond, &rt->park_lock));
    if (rt->wakeups > 0)
      rt->wakeups--; /* the waker already took us off nsleeping */
    else
      atomic_fetch_sub_explicit(&rt->nsleeping, 1, memory_order_relaxed);
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->park_lock));
}

/* ---- sharing the machine ------------------------------------------------ */

/* Whether worker w may take a task (run_limit: see tdm_runtime). Relaxed:
 * a worker that reads an old limit takes one task more or less. */
static bool may_run(const tdm_worker *w) {
  return w->id < atomic_load_explicit(&w->rt->run_limit, memory_order_relaxed);
}

/* Worker w is out of run_limit: it waits until it is back in. Work it
 * left on its deque, or a wake-up meant for an active worker that it took
 * (park), goes on to a sleeping active worker. While the runtime is
 * paused, benched workers end the devices' completions (their tasks
 * ran: what they make ready queues). */
static void bench(tdm_worker *w) {
  tdm_runtime *rt = w->rt;
  if (w->unflushed)
    tdm__flush_finished(w);
  tdm__fence_seq_cst();
  if (any_work(rt))
    wake_if_sleeping(rt);
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->park_lock));
  /* seq_cst: before the look at the completions; pairs with
   * tdm__wake_for_completion */
  atomic_fetch_add(&rt->nbenched, 1);
  tdm__fence_seq_cst();
  while (!may_run(w) && !atomic_load(&rt->stop)) {
    if (tdm__device_ended(rt) && atomic_load(&rt->run_limit) == 0) {
      TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->park_lock));
      tdm__device_progress(rt);
      if (w->unflushed)
        tdm__flush_finished(w);
      TDM_PTHREAD(rt, pthread_mutex_lock(&rt->park_lock));
      continue;
    }
    TDM_PTHREAD(rt, pthread_cond_wait(&rt->bench_cond, &rt->park_lock));
  }
  atomic_fetch_sub(&rt->nbenched, 1);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->park_lock));
}

bool tdm__devices_paused(const tdm_runtime *rt) {
  return atomic_load_explicit(&rt->run_limit, memory_order_relaxed) == 0;
}

/* Sets rt->paused (unless `paused` is -1) or rt->active (unless `active`
 * is 0), run_limit from them, and wakes what may now run. */
static tdm_status set_limit(tdm_runtime *rt, int paused, unsigned active, const char *what) {
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, what);
  if (tdm__check_unlocked(rt, what)) /* it kicks the devices */
    return TDM_ERR_IN_TASK;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->park_lock));
  if (paused >= 0 && rt->paused != (paused != 0)) /* the trace shows changes */
    tdm__trace_mark(rt, paused ? TDM_EV_PAUSE : TDM_EV_RESUME, NULL, 0);
  if (paused >= 0)
    rt->paused = paused;
  if (active)
    rt->active = active;
  unsigned before = atomic_load_explicit(&rt->run_limit, memory_order_relaxed);
  unsigned limit = rt->paused ? 0 : rt->active;
  atomic_store(&rt->run_limit, limit);
  if (limit > before)
    TDM_PTHREAD(rt, pthread_cond_broadcast(&rt->bench_cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->park_lock));
  if (before == 0 && limit > 0) /* the devices start what waits for them */
    for (unsigned k = 0; k < rt->ndevice_workers; k++)
      tdm__backend_of(rt, k)->kick(rt, k);
  return TDM_OK;
}

tdm_status tdm_runtime_pause(tdm_runtime *rt) {
  return set_limit(rt, 1, 0, "tdm_runtime_pause");
}

tdm_status tdm_runtime_resume(tdm_runtime *rt) {
  return set_limit(rt, 0, 0, "tdm_runtime_resume");
}

tdm_status tdm_runtime_set_active_workers(tdm_runtime *rt, unsigned n) {
  if (rt && !tdm__forked(rt) && (n == 0 || n > rt->nworkers)) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_set_active_workers: %u is not in 1 .. %u "
             "(tdm_runtime_pause stops them all)", n, rt->nworkers);
    return TDM_ERR_INVALID_ARG;
  }
  return set_limit(rt, -1, n, "tdm_runtime_set_active_workers");
}

unsigned tdm_runtime_active_workers(const tdm_runtime *rt) {
  /* run_limit is paused ? 0 : active, set under park_lock */
  return rt && !tdm__forked(rt) ? atomic_load(&rt->run_limit) : 0;
}

/* Counts, and traces, a period without work that began at `from`. */
static void idle_period(tdm_worker *w, uint8_t kind, uint64_t from) {
  uint64_t to = tdm__now_ns();
  tdm__count(kind == TDM_EV_IDLE ? &w->idle_ns : &w->parked_ns, to - from);
  if (w->rt->cfg.trace_path)
    tdm__trace_add(w->rt, &(tdm_trace_event){.kind = kind, .track = (uint16_t)w->id,
                                             .t0 = from, .t1 = to});
}

/* tdm_config.worker_nice for the calling worker: its nice value (Linux
 * keeps one per thread) or SCHED_IDLE; lowering needs no privilege. */
static void lower_priority(tdm_runtime *rt, unsigned id) {
  int nice = rt->cfg.worker_nice;
  if (nice == TDM_WORKERS_IDLE) {
    struct sched_param sp = {.sched_priority = 0};
    int err = pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    if (err)
      tdm__log(rt, TDM_LOG_WARNING, "worker %u: SCHED_IDLE refused (error %d): it runs as it is",
               id, err);
  } else if (nice && setpriority(PRIO_PROCESS, (id_t)gettid(), nice) < 0) {
    tdm__log(rt, TDM_LOG_WARNING, "worker %u: nice value %d refused (%s): it runs as it is",
             id, nice, strerror(errno));
  }
}

/* ---- what idle workers call (tdm_runtime_add_idle_fn) ---------------------- */

/* The thread is calling idle functions (and holds idle_lock): adding or
 * removing one there would wait for itself. */
static _Thread_local bool in_idle_fn TDM_TLS_MODEL;

/* One idle worker at a time calls them; the others go on looking. */
static void call_idle_fns(tdm_runtime *rt) {
  if (pthread_mutex_trylock(&rt->idle_lock))
    return;
  in_idle_fn = true;
  for (int i = 0; i < atomic_load_explicit(&rt->nidle_fns, memory_order_relaxed); i++)
    TDM_USER_CODE(rt->idle_fns[i].fn(rt->idle_fns[i].data));
  in_idle_fn = false;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->idle_lock));
}

tdm_status tdm_runtime_add_idle_fn(tdm_runtime *rt, void (*fn)(void *data), void *data) {
  if (!rt || !fn)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_runtime_add_idle_fn");
  if (in_idle_fn)
    return tdm__refuse(rt, TDM_ERR_IN_TASK, "tdm_runtime_add_idle_fn",
                       "called from an idle function (which holds the list)");
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->idle_lock));
  int n = atomic_load_explicit(&rt->nidle_fns, memory_order_relaxed);
  if (n < TDM_MAX_IDLE_FNS) {
    rt->idle_fns[n].fn = fn;
    rt->idle_fns[n].data = data;
    atomic_store(&rt->nidle_fns, n + 1);
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->idle_lock));
  if (n == TDM_MAX_IDLE_FNS)
    return tdm__refuse(rt, TDM_ERR_BUSY, "tdm_runtime_add_idle_fn",
                       "as many functions as TDM_MAX_IDLE_FNS are called already");
  return TDM_OK;
}

tdm_status tdm_runtime_remove_idle_fn(tdm_runtime *rt, void (*fn)(void *data), void *data) {
  if (!rt || !fn)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_runtime_remove_idle_fn");
  if (in_idle_fn)
    return tdm__refuse(rt, TDM_ERR_IN_TASK, "tdm_runtime_remove_idle_fn",
                       "called from an idle function (it would wait for itself)");
  /* (the lock waits for a worker calling them to be done) */
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->idle_lock));
  int n = atomic_load_explicit(&rt->nidle_fns, memory_order_relaxed), i = 0;
  while (i < n && !(rt->idle_fns[i].fn == fn && rt->idle_fns[i].data == data))
    i++;
  if (i < n) {
    for (; i + 1 < n; i++)
      rt->idle_fns[i] = rt->idle_fns[i + 1];
    atomic_store(&rt->nidle_fns, n - 1);
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->idle_lock));
  return i < n ? TDM_OK : TDM_ERR_INVALID_ARG;
}

void *tdm__worker_main(void *arg) {
  tdm_worker *w = arg;
  tdm_runtime *rt = w->rt;
  tdm__self = w;
  tdm__name_thread(rt, "tandem-cpu%u", w->id);
  lower_priority(rt, w->id);
  if (rt->bind &&
      hwloc_set_cpubind(rt->topo, rt->plan.cpusets[w->id], HWLOC_CPUBIND_THREAD) < 0) {
    char buf[128];
    hwloc_bitmap_snprintf(buf, sizeof buf, rt->plan.cpusets[w->id]);
    tdm__log(rt, TDM_LOG_WARNING, "worker %u: could not bind to cpuset %s; running unbound",
             w->id, buf);
  }
  for (;;) {
    tdm_task *t = find_work(w);
    /* Idle: poll giving the core away between looks (tdm__idle_step), as
     * a worker may share its core with a thread that is submitting or
     * waiting, and park once cfg.spin_us have passed. */
    uint64_t deadline = 0;
    uint64_t idle_from = !t && rt->timing ? tdm__now_ns() : 0;
    while (!t) {
      /* before the core goes to another thread (a waiter, maybe): one
       * that waits sees its tasks counted. seq_cst: pairs with
       * wait_all's increment (Dekker): a waiter that arrived sees our
       * flush, or we see it */
      if (w->unflushed && atomic_load(&rt->nwaiters))
        tdm__flush_finished(w);
      if (atomic_load_explicit(&rt->nidle_fns, memory_order_relaxed))
        call_idle_fns(rt);
      if (!tdm__idle_step(&deadline, rt->cfg.spin_us) || !may_run(w))
        break;
      t = find_work(w);
    }
    if (idle_from)
      idle_period(w, TDM_EV_IDLE, idle_from);
    if (t) {
      /* Out of run_limit: the task goes back. One submitted after a
       * pause returned is never started: it was published after
       * run_limit changed, so taking it made the change visible here. */
      if (TDM_UNLIKELY(!may_run(w)) && !atomic_load(&rt->stop)) {
        tdm__schedule(rt, t);
        bench(w);
        continue;
      }
      tdm__task_execute(t, w);
      continue;
    }
    if (w->unflushed)
      tdm__flush_finished(w);
    if (atomic_load(&rt->stop))
      break;
    /* benched by a pause, or parked: asleep either way */
    uint64_t asleep = rt->timing ? tdm__now_ns() : 0;
    atomic_store_explicit(&w->asleep_from, asleep, memory_order_relaxed);
    if (!may_run(w))
      bench(w);
    else
      park(w);
    atomic_store_explicit(&w->asleep_from, 0, memory_order_relaxed);
    if (asleep)
      idle_period(w, TDM_EV_PARKED, asleep);
  }
  tdm__self = NULL;
  return NULL;
}
