/*
 * The placement policies (policy.h) driven by the runtime's threads.
 *
 * Classes: 0 .. ncpu-1 the CPU workers of each kind (one class where the
 * cores are all alike), then ncpu + k device worker k. A task that only
 * the CPU can run goes to the CPU workers' deques at once, as on a
 * machine without devices; a task that a device can run is placed by the
 * policy, which queues it here: on a device's queue (the backend's push),
 * on the CPU workers' deques, on a CPU kind's queue (hybrid chips), or on
 * the queue every worker takes from (rt_share, in shards).
 *
 * Execution times are measured for every task a device could run and fed
 * to the model (perfmodel.h), whose median forgets a device's old speed
 * once it drifts: a device that slows down gets less work. Models are
 * loaded from the cache directory at start and saved there at destroy.
 */
#include "core.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Placed tasks in priority order, under a lock of their own (a leaf):
 * those of the CPU workers of one kind (hybrid chips) that a thread not
 * one of them placed there, or a shard of the queue every worker takes
 * from (tasks a CPU worker or a device may run, whichever is free
 * first). From an aligned allocation. */
typedef struct locked_queue {
  _Alignas(TDM_CACHE_LINE) pthread_mutex_t lock;
  tdm_taskq q;
} locked_queue;

static void locked_put(tdm_runtime *rt, locked_queue *k, tdm_task *t) {
  TDM_PTHREAD(rt, pthread_mutex_lock(&k->lock));
  tdm__taskq_put(&k->q, t); /* its count seq_cst: before a wake-up's look */
  TDM_PTHREAD(rt, pthread_mutex_unlock(&k->lock));
}

static tdm_task *locked_pop(tdm_runtime *rt, locked_queue *k) {
  if (!atomic_load_explicit(&k->q.queued, memory_order_relaxed))
    return NULL;
  TDM_PTHREAD(rt, pthread_mutex_lock(&k->lock));
  tdm_task *t = tdm__taskq_pop(&k->q);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&k->lock));
  return t;
}

/* Makes the locks of v[*made .. n), counting them in *made: 0, or the
 * error of the one that failed. */
static int locks_init(locked_queue *v, unsigned n, unsigned *made) {
  int err = 0;
  while (*made < n && !(err = pthread_mutex_init(&v[*made].lock, NULL)))
    (*made)++;
  return err;
}

static void locks_free(locked_queue *v, unsigned made) {
  for (unsigned i = 0; i < made; i++)
    pthread_mutex_destroy(&v[i].lock);
  free(v);
}

/* CPU workers per shard of the shared queue, and the most shards. */
#define ANY_WORKERS 8
#define ANY_SHARDS 16

/* The scheduler of a runtime: the policies' state, and the runtime's
 * queues of CPU kinds and shared queue. */
struct rt_sched {
  tdm_sched s; /* first: rt->sched points at both */
  locked_queue *kq; /* per CPU kind, when ncpu > 1 */
  /* The shared queue, cut in shards of ANY_WORKERS CPU workers each, so
   * that no lock is taken by every worker (one shard up to 8 workers: the
   * same queue as one). A thread puts into its own shard and takes from
   * it first, then from the others in turn: priorities order each shard,
   * and the shards only roughly between them. */
  locked_queue *any;
  unsigned nany;
  _Atomic unsigned next_hint; /* for threads that are not CPU workers */
};

/* The shard the calling thread puts into and takes from first: a CPU
 * worker's by its number, another thread's (a device's, the
 * application's) by a number given on its first use. */
static _Thread_local unsigned any_hint;

static unsigned my_shard(const tdm_runtime *rt, struct rt_sched *x) {
  if (x->nany == 1)
    return 0;
  const tdm_worker *w = tdm__self_in(rt);
  if (w)
    return w->id / ANY_WORKERS % x->nany;
  if (!any_hint)
    any_hint = 1 + atomic_fetch_add_explicit(&x->next_hint, 1, memory_order_relaxed);
  return any_hint % x->nany;
}

static tdm_runtime *rt_of(const tdm_sched *s) {
  return s->rt;
}

/* The class of worker w (CPU workers first, then device workers). */
static unsigned class_of(const tdm_runtime *rt, unsigned w) {
  const tdm_sched *s = rt->sched;
  if (w >= rt->nworkers)
    return s->ncpu + (w - rt->nworkers);
  return s->ncpu > 1 ? rt->plan.kind_of[w] : 0;
}

/* ---- the driver ------------------------------------------------------------ */

static bool rt_runs(const tdm_sched *s, unsigned c, const tdm_task *t) {
  if (c < s->ncpu) /* or it ends there without running (no device left) */
    return tdm__task_cpu_ok(t) || atomic_load_explicit(&t->outcome, memory_order_relaxed);
  uint64_t out = atomic_load_explicit(&rt_of(s)->quarantined, memory_order_relaxed);
  return ((t->dev_mask & ~out) >> (c - s->ncpu)) & 1;
}

/* The model's name for t: its codelet's, and its footprint when not 0
 * (tdm_codelet.footprint) as "NAME#FOOTPRINT"; in buf when it needs
 * room. */
static const char *model_key(const tdm_sched *s, const tdm_task *t, char *buf, size_t size) {
  uint64_t fp = tdm__task_footprint(s->rt, t);
  if (!fp)
    return tdm__codelet_name(t);
  snprintf(buf, size, "%s#%016" PRIx64, tdm__codelet_name(t), fp);
  return buf;
}

/* A chunk of a data-parallel operation is known by its elements, its
 * time taken as proportional to them (perfmodel.h's linear model); a
 * task by its bytes. */
static double rt_predict(const tdm_sched *s, const tdm_task *t, unsigned c, bool *calibrated) {
  char key[TDM_MODEL_NAME_MAX];
  const char *name = model_key(s, t, key, sizeof key);
  if (TDM_UNLIKELY(t->chunk))
    return tdm__model_predict_linear(s->model, name, tdm__chunk_elements(t), s->cls[c].name,
                                     calibrated);
  return tdm__model_predict(s->model, name, tdm__task_bytes(t), s->cls[c].name, calibrated);
}

static bool rt_observe(tdm_sched *s, const tdm_task *t, unsigned c, double seconds) {
  char key[TDM_MODEL_NAME_MAX];
  const char *name = model_key(s, t, key, sizeof key);
  if (TDM_UNLIKELY(t->chunk))
    return tdm__model_observe_linear(s->model, name, tdm__chunk_elements(t), s->cls[c].name,
                                     seconds);
  return tdm__model_observe(s->model, name, tdm__task_bytes(t), s->cls[c].name, seconds);
}

/* The memory node class c works in. */
static unsigned node_of_class(const tdm_sched *s, unsigned c) {
  return c < s->ncpu ? 0 : tdm__device_node(rt_of(s), c - s->ncpu);
}

static double rt_link_busy(const tdm_sched *s, unsigned c) {
  return tdm__link_busy(&rt_of(s)->nodes, node_of_class(s, c));
}

static double rt_transfer(const tdm_sched *s, unsigned c, const tdm_task *t) {
  return tdm__transfer_time(&rt_of(s)->nodes, node_of_class(s, c), t);
}

int tdm__device_current(const tdm_runtime *rt) {
  for (unsigned i = 0; i < rt->nattached; i++) {
    int k = rt->attached[i].n ? rt->attached[i].ops->current(rt) : -1;
    if (k >= 0)
      return k;
  }
  return -1;
}

static int rt_current(const tdm_sched *s) {
  int k = tdm__device_current(rt_of(s));
  return k >= 0 ? (int)s->ncpu + k : -1;
}

static void drain(tdm_runtime *rt, unsigned k);

/* A device's queue; or CPU workers of one kind: the calling worker's
 * deque if it is one of them, else their kind's queue. */
static void rt_send(tdm_sched *s, tdm_task *t, unsigned c) {
  tdm_runtime *rt = rt_of(s);
  if (c >= s->ncpu) {
    unsigned k = c - s->ncpu;
    tdm__backend_of(rt, k)->push(rt, k, t);
    /* Quarantined meanwhile, its queue drained before t came: drained
     * again. A read-modify-write reads the newest mask: quarantine's
     * fetch_or comes after it, and then sees t queued, or before it, and
     * this sees the device out. */
    if (TDM_UNLIKELY(atomic_fetch_or(&rt->quarantined, 0) & (UINT64_C(1) << k)))
      drain(rt, k);
    return;
  }
  tdm_worker *w = tdm__self_in(rt);
  if (s->ncpu == 1 || (w && class_of(rt, w->id) == c)) {
    tdm__schedule(rt, t);
    return;
  }
  locked_put(rt, &((struct rt_sched *)s)->kq[c], t);
  tdm__wake_for_completion(rt); /* a sleeping worker, of any kind */
}

static void rt_to_cpu(tdm_sched *s, tdm_task *t) {
  tdm__schedule(rt_of(s), t);
}

static void rt_kick_devices(tdm_sched *s) {
  tdm_runtime *rt = rt_of(s);
  for (unsigned k = 0; k < rt->ndevice_workers; k++)
    tdm__backend_of(rt, k)->kick(rt, k);
}

static void rt_share(tdm_sched *s, tdm_task *t, bool wake) {
  tdm_runtime *rt = rt_of(s);
  struct rt_sched *x = (struct rt_sched *)s;
  locked_put(rt, &x->any[my_shard(rt, x)], t);
  tdm__wake_sleeper(rt);
  if (wake)
    rt_kick_devices(s);
}

/* The first task of the caller's shard, else of the others in turn. */
static tdm_task *any_take(tdm_runtime *rt, struct rt_sched *x) {
  unsigned own = my_shard(rt, x);
  for (unsigned i = 0; i < x->nany; i++) {
    tdm_task *t = locked_pop(rt, &x->any[(own + i) % x->nany]);
    if (t)
      return t;
  }
  return NULL;
}


/* A task from the shared queue; one whose devices were all taken out of
 * placement meanwhile, and that the CPU cannot run, ends with
 * TDM_ERR_NO_DEVICE on the CPU worker that took it (rather than going
 * round the workers for ever). */
static tdm_task *rt_take_shared(tdm_sched *s) {
  tdm_runtime *rt = rt_of(s);
  tdm_task *t = any_take(rt, (struct rt_sched *)s);
  uint64_t out = atomic_load_explicit(&rt->quarantined, memory_order_relaxed);
  if (t && t->device_ok && TDM_UNLIKELY(t->dev_mask & out))
    tdm__task_without(rt, t, out);
  return t;
}

static tdm_task *rt_take(tdm_sched *s, unsigned from, bool (*want)(tdm_task *, void *),
                         void *data) {
  tdm_runtime *rt = rt_of(s);
  unsigned k = from - s->ncpu;
  return tdm__backend_of(rt, k)->take(rt, k, want, data);
}

/* The chunk of a data-parallel operation queued for the CPU workers
 * that want takes, while there are chunks: from the kind queues (their
 * newest; heft fills them when there are several kinds of core), then
 * the oldest of a deque (stolen: one not wanted goes back, to the
 * injection stack). */
static tdm_task *rt_take_cpu(tdm_sched *s, bool (*want)(tdm_task *, void *), void *data) {
  tdm_runtime *rt = rt_of(s);
  if (atomic_load_explicit(&rt->op_chunks, memory_order_relaxed) <= 0)
    return NULL;
  for (unsigned c = 0; s->ncpu > 1 && c < s->ncpu; c++) {
    locked_queue *k = &((struct rt_sched *)s)->kq[c];
    tdm_task *t = tdm__taskq_take(rt, &k->q, &k->lock, want, data);
    if (t)
      return t;
  }
  for (unsigned i = 0; i < rt->nworkers; i++) {
    tdm_task *t = tdm__steal_from(rt, i);
    if (!t)
      continue;
    if (want(t, data))
      return t;
    tdm__schedule(rt, t);
    return NULL;
  }
  return NULL;
}

/* A task from the CPU workers' deques; one this device cannot run goes
 * back to the CPU workers. */
static tdm_task *rt_steal_cpu(tdm_sched *s, unsigned c) {
  tdm_runtime *rt = rt_of(s);
  for (unsigned i = 0; i < rt->nworkers; i++) {
    tdm_task *t = tdm__steal_from(rt, i);
    if (!t)
      continue;
    if (t->device_ok && rt_runs(s, c, t))
      return t;
    tdm__schedule(rt, t);
    return NULL;
  }
  return NULL;
}

/* ---- tasks only the CPU workers run ------------------------------------------ */

/* Adds one to the calling thread's count: its worker's (mine, written by
 * that worker only: no locked instruction), else (NULL) the count of the
 * threads that are not workers. */
static void count_one(_Atomic uint64_t *mine, _Atomic uint64_t *others) {
  if (mine)
    tdm__count(mine, 1);
  else
    atomic_fetch_add_explicit(others, 1, memory_order_relaxed);
}

void tdm__cpu_only_ready(tdm_runtime *rt, tdm_task *t) {
  t->cpu_counted = true;
  if (!atomic_load_explicit(&rt->cpu_only_seen, memory_order_relaxed))
    atomic_store_explicit(&rt->cpu_only_seen, true, memory_order_relaxed);
  tdm_worker *w = tdm__self_in(rt);
  count_one(w ? &w->cpu_only_in : NULL, &rt->cpu_only_in);
  tdm__schedule(rt, t); /* the CPU workers' (a cancelled one ends there) */
}

bool tdm__cpu_only_start(tdm_worker *w, tdm_task *t) {
  if (!t->cpu_started) {
    t->cpu_started = true;
    tdm__count(&w->cpu_only_started, 1);
  }
  return w->cpu_only_runs++ % TDM_SCHED_CPU_ONLY_SAMPLE == 0;
}

void tdm__cpu_only_ran(tdm_worker *w, double seconds) {
  tdm_runtime *rt = w->rt;
  tdm__sched_cpu_only_ran(rt->sched, class_of(rt, w->id), seconds);
}

void tdm__cpu_only_ended(tdm_task *t, tdm_worker *w) {
  tdm_runtime *rt = t->rt;
  if (!t->cpu_started) /* cancelled, or its inputs not home: it never ran */
    count_one(w ? &w->cpu_only_started : NULL, &rt->cpu_only_started);
  count_one(w ? &w->cpu_only_out : NULL, &rt->cpu_only_out);
}

/* The CPU-only tasks queued and running: the sums of every thread's
 * counts, read again at each placement on a machine of up to 16 workers,
 * every eighth beyond (lock held). */
static void rt_cpu_only(const tdm_sched *s, unsigned *queued, unsigned *running) {
  tdm_runtime *rt = rt_of(s);
  *queued = *running = 0;
  if (!atomic_load_explicit(&rt->cpu_only_seen, memory_order_relaxed))
    return;
  if (rt->nworkers <= 16 ||
      atomic_fetch_add_explicit(&rt->cpu_only_reads, 1, memory_order_relaxed) % 8 == 0) {
    uint64_t in = atomic_load_explicit(&rt->cpu_only_in, memory_order_relaxed);
    uint64_t started = atomic_load_explicit(&rt->cpu_only_started, memory_order_relaxed);
    uint64_t out = atomic_load_explicit(&rt->cpu_only_out, memory_order_relaxed);
    for (unsigned i = 0; i < rt->nworkers; i++) {
      tdm_worker *w = &rt->workers[i];
      in += atomic_load_explicit(&w->cpu_only_in, memory_order_relaxed);
      started += atomic_load_explicit(&w->cpu_only_started, memory_order_relaxed);
      out += atomic_load_explicit(&w->cpu_only_out, memory_order_relaxed);
    }
    /* read one after another while they change: never below zero */
    uint64_t q = in > started ? in - started : 0, r = started > out ? started - out : 0;
    q = q < UINT32_MAX ? q : UINT32_MAX;
    r = r < UINT32_MAX ? r : UINT32_MAX;
    atomic_store_explicit(&rt->cpu_only_sums, q << 32 | r, memory_order_relaxed);
  }
  uint64_t sums = atomic_load_explicit(&rt->cpu_only_sums, memory_order_relaxed);
  *queued = (unsigned)(sums >> 32);
  *running = (unsigned)(sums & UINT32_MAX);
}

static const tdm_sched_driver rt_driver = {
    .runs = rt_runs,
    .predict = rt_predict,
    .observe = rt_observe,
    .transfer = rt_transfer,
    .current = rt_current,
    .send = rt_send,
    .to_cpu = rt_to_cpu,
    .share = rt_share,
    .take_shared = rt_take_shared,
    .take = rt_take,
    .steal_cpu = rt_steal_cpu,
    .take_cpu = rt_take_cpu,
    .kick_devices = rt_kick_devices,
    .cpu_only = rt_cpu_only,
    .link_busy = rt_link_busy,
};

/* ---- what the runtime's threads call ------------------------------------------ */

tdm_task *tdm__sched_take_kind(tdm_worker *w, bool others) {
  tdm_runtime *rt = w->rt;
  tdm_sched *s = rt->sched;
  if (!s || s->ncpu == 1)
    return NULL;
  unsigned own = class_of(rt, w->id);
  for (unsigned i = 0; i < (others ? s->ncpu : 1); i++) {
    tdm_task *t = locked_pop(rt, &((struct rt_sched *)s)->kq[(own + i) % s->ncpu]);
    if (t)
      return t;
  }
  return NULL;
}

bool tdm__sched_queued(const tdm_runtime *rt) {
  const tdm_sched *s = rt->sched;
  if (!s)
    return false;
  const struct rt_sched *x = (const struct rt_sched *)s;
  for (unsigned i = 0; i < x->nany; i++)
    if (atomic_load(&x->any[i].q.queued))
      return true;
  for (unsigned c = 0; x->kq && c < s->ncpu; c++)
    if (atomic_load(&x->kq[c].q.queued))
      return true;
  return false;
}

tdm_task *tdm__sched_take_shared(tdm_runtime *rt, unsigned worker) {
  return rt->sched ? tdm__sched_shared(rt->sched, class_of(rt, worker)) : NULL;
}

void tdm__task_without(tdm_runtime *rt, tdm_task *t, uint64_t out) {
  if (!tdm__task_lose_devices(t, out) &&
      !atomic_load_explicit(&t->outcome, memory_order_relaxed)) {
    tdm__log(rt, TDM_LOG_ERROR, "codelet %s: no device left that can run it",
             tdm__codelet_name(t));
    atomic_store_explicit(&t->outcome, TDM_ERR_NO_DEVICE, memory_order_relaxed);
  }
}

void tdm__device_quarantine(tdm_runtime *rt, unsigned k, const char *why) {
  uint64_t bit = UINT64_C(1) << k;
  if (atomic_fetch_or(&rt->quarantined, bit) & bit)
    return; /* already */
  unsigned d = rt->device_of[k];
  tdm_device_record *r = &rt->devices[d];
  snprintf(r->quarantine_reason, sizeof r->quarantine_reason, "%s", why);
  atomic_store(&r->quarantined, true);
  tdm__log(rt, TDM_LOG_WARNING, "device %u (%s) taken out of placement: %s", d, r->name, why);
  if (rt->cfg.device_event_fn)
    TDM_EVENT_CODE(rt, rt->cfg.device_event_fn(rt->cfg.device_event_data, d, why));
  drain(rt, k); /* see rt_send */
}

/* What waits on device k, out of placement, goes elsewhere. */
static void drain(tdm_runtime *rt, unsigned k) {
  for (tdm_task *t; (t = tdm__backend_of(rt, k)->take(rt, k, NULL, NULL));) {
    if (tdm__sched_timed(t)) /* its backlog there goes */
      tdm__sched_done(t, rt->nworkers + k, -1);
    tdm__task_without(rt, t, UINT64_C(1) << k);
    t->sched_cls = -1;
    tdm__place(rt, t);
  }
}

void tdm__device_failed(tdm_runtime *rt, unsigned k, tdm_status status) {
  if (status == TDM_ERR_DEVICE_LOST) {
    tdm__device_quarantine(rt, k, "it stopped working (TDM_ERR_DEVICE_LOST)");
    return;
  }
  unsigned n = rt->cfg.quarantine_failures;
  if (!n)
    return;
  uint64_t now = tdm__now_ns();
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->fail_lock));
  uint64_t *at = rt->failed_at[k];
  memmove(at + 1, at, (n - 1) * sizeof *at); /* newest first */
  at[0] = now;
  uint64_t oldest = at[n - 1];
  bool out = oldest && now - oldest <= TDM_QUARANTINE_WINDOW_NS;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->fail_lock));
  if (out) {
    char why[96];
    snprintf(why, sizeof why, "%u failed tries within %.1f s (the last: %s)", n,
             1e-9 * (double)TDM_QUARANTINE_WINDOW_NS,
             tdm_status_name(status));
    tdm__device_quarantine(rt, k, why);
  }
}

double tdm__sched_predict_on(tdm_runtime *rt, const tdm_task *t, unsigned k, bool *calibrated) {
  *calibrated = false;
  tdm_sched *s = rt->sched;
  if (!s)
    return -1;
  unsigned c = class_of(rt, rt->nworkers + k);
  /* placed there by heft on a calibrated prediction: that one (no model
   * lookup on a device's way to run a task) */
  if (t->sched_cls == (int)c && !t->sched_calib && t->sched_predicted > 0) {
    *calibrated = true;
    return t->sched_predicted;
  }
  return rt_predict(s, t, c, calibrated);
}

double tdm__sched_speed_units(tdm_runtime *rt, const tdm_task *t, uint64_t dev_mask, bool cpu,
                              unsigned *unknown, double *each) {
  tdm_sched *s = rt->sched;
  unsigned ncpu_workers = tdm_runtime_active_workers(rt);
  *unknown = 0;
  for (unsigned k = 0; each && k < rt->ndevice_workers; k++)
    each[k] = 0;
  if (!s)
    return cpu ? ncpu_workers : 0;
  /* one CPU worker's time: the fastest kind's with a prediction */
  double one = -1;
  bool cpu_known = false;
  for (unsigned c = 0; c < s->ncpu; c++) {
    bool calibrated = false;
    double p = s->cls[c].workers ? rt_predict(s, t, c, &calibrated) : -1;
    cpu_known = cpu_known || calibrated;
    if (p > 0 && calibrated && (one < 0 || p < one))
      one = p;
  }
  double units = cpu ? ncpu_workers : 0;
  *unknown = cpu && !cpu_known;
  uint64_t out = atomic_load_explicit(&rt->quarantined, memory_order_relaxed);
  bool seen[TDM_MAX_DEVICE_WORKERS + TDM_SCHED_MAX_CPU_CLASSES] = {false};
  for (unsigned k = 0; k < rt->ndevice_workers && k < 64; k++) {
    if (!((dev_mask & t->dev_mask & ~out) >> k & 1))
      continue;
    bool calibrated = false;
    unsigned c = class_of(rt, rt->nworkers + k);
    double p = rt_predict(s, t, c, &calibrated);
    bool known = one > 0 && p > 0 && calibrated;
    double u = known ? one / p : TDM_PARALLEL_UNKNOWN_UNITS;
    units += u;
    if (each)
      each[k] = u;
    if (!calibrated && !seen[c]) /* (classes of one name share a model) */
      (*unknown)++;
    seen[c] = true;
  }
  return units;
}

double tdm__sched_predict_elsewhere(tdm_runtime *rt, const tdm_task *t, unsigned k) {
  tdm_sched *s = rt->sched;
  if (!s)
    return -1;
  unsigned mine = class_of(rt, rt->nworkers + k);
  double most = -1;
  for (unsigned c = 0; c < s->nclasses; c++) {
    bool calibrated = false;
    double p = c != mine ? rt_predict(s, t, c, &calibrated) : -1;
    if (calibrated && p > most)
      most = p;
  }
  return most;
}

void tdm__place(tdm_runtime *rt, tdm_task *t) {
  if (TDM_UNLIKELY(t->main_thread)) { /* runs (or ends) in tdm_dispatch */
    tdm__dispatch_task(rt, t);
    return;
  }
  if (t->device_ok) {
    uint64_t out = atomic_load_explicit(&rt->quarantined, memory_order_relaxed);
    if (TDM_UNLIKELY(t->dev_mask & out))
      tdm__task_without(rt, t, out);
    if (TDM_UNLIKELY(rt->verify)) /* devices whose variant gave wrong results */
      tdm__verify_mask(rt, t);
  } else if (rt->sched && !t->cpu_counted) { /* in no class's backlog */
    tdm__cpu_only_ready(rt, t); /* counted, then queued as below */
    return;
  }
  /* the CPU workers' (no call through the tables); a cancelled task ends
   * on one of them without running */
  if (!t->device_ok || !rt->sched || atomic_load_explicit(&t->outcome, memory_order_relaxed)) {
    tdm__schedule(rt, t);
    return;
  }
  tdm__sched_place(rt->sched, t, true);
}

tdm_task *tdm__sched_idle_cpu(tdm_worker *w) {
  tdm_runtime *rt = w->rt;
  tdm_task *t = rt->sched ? tdm__sched_idle(rt->sched, class_of(rt, w->id)) : NULL;
  /* tasks queued for other kinds of core: never left waiting while a
   * core is idle */
  return t ? t : tdm__sched_take_kind(w, true);
}

tdm_task *tdm__sched_idle_device(tdm_runtime *rt, unsigned k) {
  return rt->sched ? tdm__sched_idle(rt->sched, rt->sched->ncpu + k) : NULL;
}

void tdm__sched_work_shown(tdm_runtime *rt) {
  tdm_sched *s = rt->sched;
  if (s->policy->work_shown)
    s->policy->work_shown(s);
}

void tdm__sched_done(tdm_task *t, unsigned worker, double seconds) {
  tdm_runtime *rt = t->rt;
  if (rt->sched)
    tdm__sched_finished(rt->sched, t, class_of(rt, worker), seconds);
}

/* ---- start and stop ------------------------------------------------------------ */

/* The classes' names (the model's) and workers. */
static void name_classes(tdm_runtime *rt, tdm_sched *s) {
  for (unsigned c = 0; c < s->ncpu; c++) {
    tdm_sclass *k = &s->cls[c];
    if (s->ncpu == 1) {
      snprintf(k->name, sizeof k->name, "cpu");
      k->workers = rt->nworkers;
      continue;
    }
    tdm_cpu_kind_info ki = {.struct_size = sizeof ki};
    const char *kind = tdm_runtime_cpu_kind(rt, c, &ki) == TDM_OK ? ki.name : NULL;
    snprintf(k->name, sizeof k->name, "cpu:%s", kind && *kind ? kind : "");
    if (!kind || !*kind) /* unnamed kinds: by rank */
      snprintf(k->name, sizeof k->name, "cpu:kind%u", c);
    for (unsigned w = 0; w < rt->nworkers; w++)
      k->workers += rt->plan.kind_of[w] == c;
    if (!k->workers)
      k->workers = 1; /* no worker of this kind: its queue is emptied by the others */
  }
  for (unsigned k = 0; k < rt->ndevice_workers; k++) {
    const tdm_device_record *d = &rt->devices[rt->device_of[k]];
    tdm_sclass *c = &s->cls[s->ncpu + k];
    snprintf(c->name, sizeof c->name, "%s:%s", tdm__backend_of(rt, k)->name, d->name);
    c->workers = 1;
    /* copies start when a task is queued (emulated devices) or enters
     * the device's window (OpenCL), while the work before it runs */
    c->prefetches = true;
  }
}

static void free_sched(struct rt_sched *x, unsigned nlocks, unsigned nany) {
  locks_free(x->kq, nlocks);
  locks_free(x->any, nany);
  tdm__sched_fini(&x->s);
  free(x);
}

tdm_status tdm__sched_start(tdm_runtime *rt) {
  if (!rt->ndevice_workers)
    return TDM_OK;
  struct rt_sched *x = calloc(1, sizeof *x);
  if (!x)
    return TDM_ERR_NO_MEMORY;
  unsigned ncpu = rt->plan.nkinds > 1 && rt->plan.nkinds <= TDM_SCHED_MAX_CPU_CLASSES ? rt->plan.nkinds : 1;
  tdm_status st = tdm__sched_init(&x->s, rt, rt->policy, &rt_driver, x, ncpu,
                                  ncpu + rt->ndevice_workers,
                                  0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)rt);
  if (st) {
    free(x);
    return st;
  }
  unsigned nlocks = 0, nany = 0;
  int err = 0;
  unsigned shards = (rt->nworkers + ANY_WORKERS - 1) / ANY_WORKERS;
  shards = shards < 1 ? 1 : shards > ANY_SHARDS ? ANY_SHARDS : shards;
  x->kq = ncpu > 1 ? tdm__zalloc_aligned(_Alignof(locked_queue), ncpu * sizeof *x->kq) : NULL;
  x->any = tdm__zalloc_aligned(_Alignof(locked_queue), shards * sizeof *x->any);
  if ((ncpu > 1 && !x->kq) || !x->any) {
    free_sched(x, 0, 0);
    return TDM_ERR_NO_MEMORY;
  }
  atomic_init(&x->next_hint, 0);
  if (x->kq)
    err = locks_init(x->kq, ncpu, &nlocks);
  if (!err)
    err = locks_init(x->any, shards, &nany);
  x->nany = nany;
  if (err) {
    tdm__log(rt, TDM_LOG_ERROR, "pthread_mutex_init: %s", strerror(err));
    free_sched(x, nlocks, nany);
    return TDM_ERR_SYSTEM;
  }
  tdm_sched *s = &x->s;
  name_classes(rt, s);
  int dir = tdm__cache_fd(rt);
  if (dir >= 0)
    tdm__model_load(s->model, dir, rt->model_file, rt); /* a bad file is logged and ignored */
  rt->sched = s;
  tdm__log(rt, TDM_LOG_INFO,
           "placement policy %s between %u CPU workers (%u %s) and %u devices",
           s->policy->name, rt->nworkers, s->ncpu, s->ncpu == 1 ? "kind" : "kinds",
           rt->ndevice_workers);
  return TDM_OK;
}

void tdm__sched_stop(tdm_runtime *rt) {
  tdm_sched *s = rt->sched;
  if (!s)
    return;
  int dir = atomic_load(&s->dirty) ? tdm__cache_fd(rt) : -1;
  if (dir >= 0)
    tdm__model_save(s->model, dir, rt->model_file, rt);
  struct rt_sched *x = (struct rt_sched *)s;
  free_sched(x, s->ncpu > 1 ? s->ncpu : 0, x->nany);
  rt->sched = NULL;
}

tdm_status tdm__device_prepare(tdm_runtime *rt, tdm_task *t, const char *what) {
  /* a device's lock is taken below, and when it is placed there */
  tdm_status locked = tdm__check_unlocked(rt, what);
  if (TDM_UNLIKELY(locked))
    return locked;
  t->device_ok = false;
  t->sched_cls = -1;
  t->dev_mask = 0;
  tdm_status st = TDM_OK;
  for (unsigned i = 0; i < rt->nattached; i++) {
    if (!rt->attached[i].n)
      continue;
    tdm_status s = rt->attached[i].ops->prepare(rt, t, what);
    if (s == TDM_ERR_INVALID_ARG) /* the task is wrong, wherever it would run */
      return s;
    if (s && !st)
      st = s;
  }
  if (t->dev_mask) { /* some device runs it: another's refusal does not matter */
    t->device_ok = true;
    return TDM_OK;
  }
  if (st || !t->codelet->opencl || t->codelet->cpu_fn)
    return st;
  /* why: what discovery found and why it was not used */
  char why[512];
  if (rt->selection.none)
    snprintf(why, sizeof why, "devices=\"none\"");
  else if (!rt->ndevices)
    snprintf(why, sizeof why, "OpenCL: %s", rt->opencl_report.summary);
  else
    snprintf(why, sizeof why, "device 0 (%s): %s%s", rt->devices[0].name, rt->devices[0].usage,
             rt->ndevices > 1 ? "; tandem-info says why for each" : "");
  tdm__log(rt, TDM_LOG_ERROR, "%s: codelet %s has only an OpenCL variant and no device is used "
           "(%s)", what, tdm__codelet_name(t), why);
  return TDM_ERR_NO_DEVICE;
}

tdm_status tdm_codelet_build(tdm_runtime *rt, const tdm_codelet *cl, tdm_build_fn done,
                             void *data) {
  if (!rt || !cl)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_codelet_build");
  if (tdm__check_unlocked(rt, "tdm_codelet_build"))
    return TDM_ERR_IN_TASK;
  const tdm_backend *b = NULL;
  for (unsigned i = 0; i < rt->nattached && !b; i++)
    if (rt->attached[i].n && rt->attached[i].ops->build)
      b = rt->attached[i].ops;
  if (b && cl->opencl)
    b->build(rt, cl, done, data);
  else if (done) /* nothing to build */
    TDM_EVENT_CODE(rt, done(data, TDM_OK));
  return TDM_OK;
}

/* Device k cannot run t (its program did not build there): t goes
 * elsewhere, or fails with `status` when nothing else can run it. */
void tdm__device_refused(tdm_runtime *rt, unsigned k, tdm_task *t, tdm_status status) {
  if (tdm__sched_timed(t)) /* its backlog there goes */
    tdm__sched_done(t, rt->nworkers + k, -1);
  if (!tdm__task_lose_devices(t, UINT64_C(1) << k) &&
      !atomic_load_explicit(&t->outcome, memory_order_relaxed))
    atomic_store_explicit(&t->outcome, status, memory_order_relaxed);
  t->sched_cls = -1;
  tdm__place(rt, t);
}

void tdm__kernel_disabled(tdm_runtime *rt, unsigned k, const char *codelet, tdm_status status,
                          const char *why) {
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->fail_lock));
  if (rt->nkernel++ == 0)
    snprintf(rt->first_kernel, sizeof rt->first_kernel, "%s", codelet);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->fail_lock));
  if (rt->cfg.kernel_event_fn)
    TDM_EVENT_CODE(rt, rt->cfg.kernel_event_fn(rt->cfg.kernel_event_data, codelet, rt->device_of[k],
                                          status, why));
}

tdm_status tdm_runtime_device_counters(const tdm_runtime *rt, unsigned device,
                                       tdm_device_counters *out) {
  if (!rt || !out)
    return TDM_ERR_INVALID_ARG;
  /* the first version of the struct ended at evictions */
  size_t least = offsetof(tdm_device_counters, evictions) + sizeof out->evictions;
  if (out->struct_size < least) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_device_counters: struct_size %zu: at least %zu",
             out->struct_size, least);
    return TDM_ERR_INVALID_ARG;
  }
  TDM_FORK_GUARD(rt, "tdm_runtime_device_counters");
  if (device >= rt->ndevices) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_device_counters: no device %u", device);
    return TDM_ERR_INVALID_ARG;
  }
  size_t room = out->struct_size;
  tdm_device_counters c = {.struct_size = room};
  int w = rt->devices[device].worker;
  if (w >= 0) {
    unsigned k = (unsigned)w - rt->nworkers;
    tdm__backend_of(rt, k)->counters(rt, k, &c);
  }
  c.struct_size = room;
  memcpy(out, &c, room < sizeof c ? room : sizeof c);
  return TDM_OK;
}

/* ---- the next task for a device ------------------------------------------ */

tdm_task *tdm__taskq_next(tdm_runtime *rt, unsigned k, tdm_taskq *q, pthread_mutex_t *lock) {
  if (TDM_UNLIKELY(tdm__devices_paused(rt)))
    return NULL; /* set_limit kicks the device on resume */
  tdm_task *t = tdm__taskq_pop(q);
  if (t)
    return t;
  TDM_PTHREAD(rt, pthread_mutex_unlock(lock));
  t = tdm__sched_take_shared(rt, rt->nworkers + k);
  if (!t)
    t = tdm__sched_idle_device(rt, k);
  TDM_PTHREAD(rt, pthread_mutex_lock(lock));
  if (t && TDM_UNLIKELY(tdm__devices_paused(rt))) { /* paused meanwhile: kept for the resume */
    tdm__taskq_put(q, t);
    t = NULL;
  }
  return t;
}

tdm_task *tdm__taskq_take(tdm_runtime *rt, tdm_taskq *q, pthread_mutex_t *lock,
                          bool (*want)(tdm_task *, void *), void *data) {
  if (!atomic_load_explicit(&q->queued, memory_order_relaxed))
    return NULL;
  TDM_PTHREAD(rt, pthread_mutex_lock(lock));
  tdm_task *t = tdm__taskq_take_last(q, want, data);
  TDM_PTHREAD(rt, pthread_mutex_unlock(lock));
  return t;
}
