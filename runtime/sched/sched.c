/*
 * Placement of ready tasks between the CPU workers and the devices, in
 * real time (the policies of policy.h, driven by the runtime's threads).
 *
 * Classes: 0 is the CPU workers, 1 + k device worker k. A task that only
 * the CPU can run goes to the CPU workers' deques at once, as on a machine
 * without devices. A task that a device can run is placed by the policy:
 *
 *   heft   the class where it would finish earliest: the class's backlog
 *          (predicted seconds of the work placed there and not finished,
 *          over its workers) + the time its inputs need to get there + its
 *          predicted execution time (Topcuoglu, Hariri and Wu, IEEE TPDS
 *          13(3), 2002, as StarPU's dmda applies it at run time). While a
 *          class has not run a codelet at a size CALIBRATION times, the
 *          task goes there instead (calibration on line).
 *   ws     where it was released: a device's queue when a device finished
 *          its predecessor, else the CPU workers' deques; idle devices and
 *          CPU workers take queued tasks from each other.
 *   eager  one queue that CPU workers and devices take from, first come.
 *   random a random worker that can run it.
 *
 * Dynamic correction (heft, ws): an idle CPU worker takes back the last
 * task queued on a device when it would finish earlier on the CPU, an
 * idle device one queued on another device when it would finish earlier
 * there (transfers included). Execution times are measured for every
 * task a device could run and fed to the model (perfmodel.h), whose
 * median forgets a device's old speed once it drifts: a device that slows
 * down gets less work. Models are loaded from the cache directory at
 * start and saved there at destroy.
 */
#include "../internal.h"
#include "perfmodel.h"
#include "policy.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_FILE "perfmodel-v1.txt"
#define UNKNOWN_TIME 1e-3 /* s: the backlog a task of unknown duration adds */

typedef struct sclass {
  char name[160]; /* the model's name for it */
  unsigned workers;
  double backlog;     /* predicted seconds placed, not finished */
  unsigned calibrating; /* tasks placed here to calibrate, not finished */
} sclass;

/* CPU workers of one kind (hybrid chips): the tasks placed on them by a
 * thread that is not one of them. Its lock is a leaf. */
typedef struct kind_queue {
  pthread_mutex_t lock;
  tdm_devq q;
} kind_queue;

#define MAX_CPU_CLASSES 8

struct tdm_sched {
  tdm_policy policy;
  /* Classes: 0 .. ncpu-1 the CPU workers of each kind (one class where
   * the cores are all alike), then ncpu + k device worker k. */
  unsigned ncpu;
  kind_queue *kq; /* per CPU kind, when ncpu > 1 */
  pthread_mutex_t lock; /* guards all below */
  tdm_perfmodel *model;
  bool dirty;
  unsigned nclasses;
  sclass *cls;
  uint64_t rng;
};

static const char *codelet_name(const tdm_task *t) {
  return t->codelet->name ? t->codelet->name : "(unnamed)";
}

/* Device k's class. */
static unsigned dev_cls(const tdm_sched *s, unsigned k) {
  return s->ncpu + k;
}

/* The class of worker w (CPU workers first, then device workers). */
static unsigned class_of(const tdm_runtime *rt, unsigned w) {
  const tdm_sched *s = rt->sched;
  if (w >= rt->nworkers)
    return dev_cls(s, w - rt->nworkers);
  return s->ncpu > 1 ? rt->plan.kind_of[w] : 0;
}

/* Whether class c can run t. */
static bool runs(tdm_runtime *rt, unsigned c, const tdm_task *t) {
  const tdm_sched *s = rt->sched;
  if (c < s->ncpu)
    return t->codelet->cpu_fn != NULL;
  return (t->dev_mask >> (c - s->ncpu)) & 1;
}

/* The model's prediction for t on class c (lock held): seconds, or < 0;
 * *calibrated whether to trust it. */
static double predict(tdm_sched *s, const tdm_task *t, unsigned c, bool *calibrated) {
  return tdm__model_predict(s->model, codelet_name(t), tdm__task_bytes(t), s->cls[c].name,
                            calibrated);
}

static double transfer(tdm_runtime *rt, unsigned c, const tdm_task *t) {
  unsigned ncpu = rt->sched->ncpu;
  return tdm__transfer_time(rt, c < ncpu ? UINT_MAX : c - ncpu, t);
}

static uint64_t next_random(uint64_t *x) {
  /* xorshift64 (Marsaglia, 2003) */
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Sends t to class c, which the scheduler counts as predicted. CPU
 * workers of one kind: the calling worker's deque if it is one of them,
 * else their kind's queue. */
static void send(tdm_runtime *rt, tdm_task *t, unsigned c) {
  tdm_sched *s = rt->sched;
  if (c >= s->ncpu) {
    rt->dev->push(rt, c - s->ncpu, t);
    return;
  }
  tdm_worker *w = tdm__self_in(rt);
  if (s->ncpu == 1 || (w && class_of(rt, w->id) == c)) {
    tdm__schedule(rt, t);
    return;
  }
  TDM_PTHREAD(rt, pthread_mutex_lock(&s->kq[c].lock));
  tdm__devq_put(&s->kq[c].q, t);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&s->kq[c].lock));
  tdm__wake_for_completion(rt); /* a sleeping worker, of any kind */
}

tdm_task *tdm__sched_take_kind(tdm_worker *w, bool others) {
  tdm_runtime *rt = w->rt;
  tdm_sched *s = rt->sched;
  if (!s || s->ncpu == 1)
    return NULL;
  unsigned own = class_of(rt, w->id);
  for (unsigned i = 0; i < (others ? s->ncpu : 1); i++) {
    unsigned c = (own + i) % s->ncpu;
    kind_queue *k = &s->kq[c];
    if (!atomic_load_explicit(&k->q.queued, memory_order_relaxed))
      continue;
    TDM_PTHREAD(rt, pthread_mutex_lock(&k->lock));
    tdm_task *t = tdm__devq_pop(&k->q);
    TDM_PTHREAD(rt, pthread_mutex_unlock(&k->lock));
    if (t)
      return t;
  }
  return NULL;
}

bool tdm__sched_queued(const tdm_runtime *rt) {
  const tdm_sched *s = rt->sched;
  for (unsigned c = 0; s && s->kq && c < s->ncpu; c++)
    if (atomic_load(&s->kq[c].q.queued))
      return true;
  return false;
}

/* heft: the class where t finishes first (tdm__heft_pick, shared with
 * the simulated clock), a class to calibrate, or UINT_MAX: not known yet
 * where (lock held). */
static unsigned heft_choose(tdm_runtime *rt, tdm_sched *s, tdm_task *t, double *predicted,
                            bool *calib) {
  tdm_choice c[TDM_MAX_DEVICE_WORKERS + MAX_CPU_CLASSES];
  unsigned cls[TDM_MAX_DEVICE_WORKERS + MAX_CPU_CLASSES], n = 0;
  double known = -1;
  for (unsigned k = 0; k < s->nclasses; k++) {
    if (!runs(rt, k, t))
      continue;
    bool ok = false;
    double p = predict(s, t, k, &ok);
    if (p >= 0)
      known = p;
    cls[n] = k;
    c[n++] = (tdm_choice){.start = s->cls[k].backlog / s->cls[k].workers + transfer(rt, k, t),
                          .exec = p,
                          .calibrated = ok && p >= 0,
                          .trying = s->cls[k].calibrating};
  }
  int i = tdm__heft_pick(c, n, TDM_MODEL_CALIBRATION, calib);
  if (i < 0)
    return UINT_MAX;
  /* a calibration try counts as the time known elsewhere, if any */
  *predicted = c[i].exec >= 0 ? c[i].exec : known >= 0 ? known : UNKNOWN_TIME;
  return cls[i];
}

/* heft: places t by its predictions; false when they are not known yet
 * (t stays with the caller). */
static bool heft_place(tdm_runtime *rt, tdm_task *t) {
  tdm_sched *s = rt->sched;
  double predicted = 0;
  bool calib = false;
  TDM_PTHREAD(rt, pthread_mutex_lock(&s->lock));
  unsigned c = heft_choose(rt, s, t, &predicted, &calib);
  if (c != UINT_MAX) {
    s->cls[c].backlog += predicted;
    s->cls[c].calibrating += calib;
    t->sched_cls = (int8_t)c;
    t->sched_predicted = (float)predicted;
    t->sched_calib = calib;
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&s->lock));
  if (c == UINT_MAX)
    return false;
  send(rt, t, c);
  return true;
}

/* Into the queue every kind of worker takes from. */
static void share(tdm_runtime *rt, tdm_task *t) {
  tdm__any_put(rt, t);
  for (unsigned k = 0; k < rt->ndevice_workers; k++)
    rt->dev->kick(rt, k);
}

tdm_task *tdm__sched_take_shared(tdm_runtime *rt, unsigned worker) {
  tdm_sched *s = rt->sched;
  if (!s)
    return NULL;
  unsigned cls = class_of(rt, worker);
  /* heft: tasks shared while their times were unknown are placed by
   * their predictions once known (a few at a time: the caller has work
   * to do) */
  for (unsigned tries = 0; tries < 16; tries++) {
    tdm_task *t = tdm__any_take(rt);
    if (!t)
      return NULL;
    if (s->policy == TDM_POLICY_HEFT && heft_place(rt, t))
      continue;
    if (runs(rt, cls, t))
      return t;
    tdm__any_put(rt, t); /* another kind of worker will take it */
    return NULL;
  }
  return NULL;
}

void tdm__place(tdm_runtime *rt, tdm_task *t) {
  tdm_sched *s = rt->sched;
  t->sched_cls = -1;
  t->sched_calib = false;
  if (!t->device_ok || !s) {
    tdm__schedule(rt, t);
    return;
  }
  switch (s->policy) {
  case TDM_POLICY_EAGER:
    if (!t->codelet->cpu_fn)
      break; /* OpenCL only: heft's choice among the devices */
    share(rt, t);
    return;
  case TDM_POLICY_WS: {
    int k = rt->dev->current(rt);
    if (k >= 0 && runs(rt, dev_cls(s, (unsigned)k), t)) {
      rt->dev->push(rt, (unsigned)k, t);
    } else if (t->codelet->cpu_fn) {
      tdm__schedule(rt, t);
      for (unsigned j = 0; j < rt->ndevice_workers; j++)
        rt->dev->kick(rt, j);
    } else {
      break; /* OpenCL only: heft's choice among the devices */
    }
    return;
  }
  case TDM_POLICY_RANDOM: {
    unsigned n = 0, pick;
    TDM_PTHREAD(rt, pthread_mutex_lock(&s->lock));
    for (unsigned c = 0; c < s->nclasses; c++)
      if (runs(rt, c, t))
        n += s->cls[c].workers;
    pick = (unsigned)(next_random(&s->rng) % (n ? n : 1));
    TDM_PTHREAD(rt, pthread_mutex_unlock(&s->lock));
    for (unsigned c = 0; c < s->nclasses; c++) {
      if (!runs(rt, c, t))
        continue;
      if (pick < s->cls[c].workers) {
        send(rt, t, c);
        return;
      }
      pick -= s->cls[c].workers;
    }
    tdm__schedule(rt, t); /* not reached: a device_ok task runs somewhere */
    return;
  }
  case TDM_POLICY_HEFT:
    break;
  }
  if (!heft_place(rt, t))
    share(rt, t);
}

/* Takes t's share out of the backlog of the class it was placed on, and
 * its calibration try (lock held). */
static void release(tdm_sched *s, tdm_task *t) {
  if (t->sched_cls >= 0) {
    sclass *c = &s->cls[t->sched_cls];
    c->backlog = fmax(0, c->backlog - t->sched_predicted);
    if (t->sched_calib && c->calibrating)
      c->calibrating--;
  }
  t->sched_cls = -1;
  t->sched_calib = false;
}

/* Moves t's share of the backlog from its class to class c (lock held). */
static void move_to(tdm_sched *s, tdm_task *t, unsigned c, double predicted) {
  release(s, t);
  t->sched_cls = (int8_t)c;
  t->sched_predicted = (float)predicted;
  s->cls[c].backlog += predicted;
}

typedef struct steal_ctx {
  tdm_runtime *rt;
  unsigned to;   /* the idle class */
  unsigned from; /* the class queued on */
} steal_ctx;

/* Whether the idle class x->to should run t rather than let it wait on
 * x->from; if so, t's share of the backlog moves with it. Called under
 * the device's lock, which comes before the scheduler's. */
static bool worth_taking(tdm_task *t, void *data) {
  steal_ctx *x = data;
  tdm_runtime *rt = x->rt;
  tdm_sched *s = rt->sched;
  if (!runs(rt, x->to, t))
    return false;
  TDM_PTHREAD(rt, pthread_mutex_lock(&s->lock));
  bool ok = false;
  double here = predict(s, t, x->to, &ok);
  bool take;
  if (s->policy == TDM_POLICY_WS) {
    take = true;
    if (here < 0)
      here = t->sched_predicted;
  } else {
    /* t, queued last on `from`, waits for the rest of its backlog */
    double there = s->cls[x->from].backlog / s->cls[x->from].workers;
    take = here >= 0 && ok && here + transfer(rt, x->to, t) < there;
  }
  if (take)
    move_to(s, t, x->to, here);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&s->lock));
  return take;
}

static tdm_task *take_for(tdm_runtime *rt, unsigned to) {
  tdm_sched *s = rt->sched;
  if (!s || (s->policy != TDM_POLICY_HEFT && s->policy != TDM_POLICY_WS))
    return NULL;
  for (unsigned j = 0; j < rt->ndevice_workers; j++) {
    if (dev_cls(s, j) == to)
      continue;
    steal_ctx x = {.rt = rt, .to = to, .from = dev_cls(s, j)};
    tdm_task *t = rt->dev->take(rt, j, worth_taking, &x);
    if (t)
      return t;
  }
  return NULL;
}

tdm_task *tdm__sched_idle_cpu(tdm_worker *w) {
  tdm_task *t = take_for(w->rt, class_of(w->rt, w->id));
  /* tasks queued for other kinds of core: never left waiting while a
   * core is idle */
  return t ? t : tdm__sched_take_kind(w, true);
}

tdm_task *tdm__sched_idle_device(tdm_runtime *rt, unsigned k) {
  tdm_sched *s = rt->sched;
  tdm_task *t = take_for(rt, dev_cls(s, k));
  if (t || !s || s->policy != TDM_POLICY_WS)
    return t;
  /* ws: the CPU workers' deques too; a task this device cannot run goes
   * back to the CPU workers */
  for (unsigned i = 0; i < rt->nworkers; i++) {
    t = tdm__deque_steal(&rt->workers[i].deque);
    if (!t)
      continue;
    if (t->device_ok && runs(rt, dev_cls(s, k), t))
      return t;
    tdm__schedule(rt, t);
    return NULL;
  }
  return NULL;
}

void tdm__sched_work_shown(tdm_runtime *rt) {
  if (rt->sched->policy == TDM_POLICY_WS)
    for (unsigned k = 0; k < rt->ndevice_workers; k++)
      rt->dev->kick(rt, k);
}

void tdm__sched_done(tdm_task *t, unsigned worker, double seconds) {
  tdm_runtime *rt = t->rt;
  tdm_sched *s = rt->sched;
  if (!s)
    return;
  unsigned cls = class_of(rt, worker);
  TDM_PTHREAD(rt, pthread_mutex_lock(&s->lock));
  release(s, t);
  if (cls < s->nclasses && seconds >= 0 &&
      tdm__model_observe(s->model, codelet_name(t), tdm__task_bytes(t), s->cls[cls].name,
                         seconds))
    s->dirty = true;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&s->lock));
}

tdm_status tdm__sched_start(tdm_runtime *rt) {
  if (!rt->ndevice_workers)
    return TDM_OK;
  tdm_sched *s = calloc(1, sizeof *s);
  if (!s)
    return TDM_ERR_NO_MEMORY;
  s->policy = rt->policy;
  s->ncpu = rt->plan.nkinds > 1 && rt->plan.nkinds <= MAX_CPU_CLASSES ? rt->plan.nkinds : 1;
  s->nclasses = s->ncpu + rt->ndevice_workers;
  s->cls = calloc(s->nclasses, sizeof *s->cls);
  s->kq = s->ncpu > 1 ? calloc(s->ncpu, sizeof *s->kq) : NULL;
  s->model = tdm__model_new();
  s->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)rt;
  int err = 0;
  if (s->cls && s->model && (s->ncpu == 1 || s->kq)) {
    unsigned nlocks = 0;
    bool lock_made = !(err = pthread_mutex_init(&s->lock, NULL));
    while (!err && s->kq && nlocks < s->ncpu &&
           !(err = pthread_mutex_init(&s->kq[nlocks].lock, NULL)))
      nlocks++;
    if (err) { /* undo what was made */
      for (unsigned i = 0; i < nlocks; i++)
        pthread_mutex_destroy(&s->kq[i].lock);
      if (lock_made)
        pthread_mutex_destroy(&s->lock);
    }
  }
  if (err || !s->cls || !s->model || (s->ncpu > 1 && !s->kq)) {
    if (err)
      tdm__log(rt, TDM_LOG_ERROR, "pthread_mutex_init: %s", strerror(err));
    tdm__model_free(s->model);
    free(s->kq);
    free(s->cls);
    free(s);
    return err ? TDM_ERR_SYSTEM : TDM_ERR_NO_MEMORY;
  }
  for (unsigned c = 0; c < s->ncpu; c++) {
    if (s->ncpu == 1) {
      snprintf(s->cls[c].name, sizeof s->cls[c].name, "cpu");
      s->cls[c].workers = rt->nworkers;
      continue;
    }
    tdm_cpu_kind_info ki = {.struct_size = sizeof ki};
    const char *kind = tdm_runtime_cpu_kind(rt, c, &ki) == TDM_OK ? ki.name : NULL;
    snprintf(s->cls[c].name, sizeof s->cls[c].name, "cpu:%s", kind && *kind ? kind : "");
    if (!kind || !*kind) /* unnamed kinds: by rank */
      snprintf(s->cls[c].name, sizeof s->cls[c].name, "cpu:kind%u", c);
    for (unsigned w = 0; w < rt->nworkers; w++)
      s->cls[c].workers += rt->plan.kind_of[w] == c;
    if (!s->cls[c].workers)
      s->cls[c].workers = 1; /* no worker of this kind: never chosen */
  }
  for (unsigned k = 0; k < rt->ndevice_workers; k++) {
    const tdm_device_record *d = &rt->devices[rt->device_of[k]];
    sclass *c = &s->cls[dev_cls(s, k)];
    snprintf(c->name, sizeof c->name, "%s:%s", rt->dev->name, d->name);
    c->workers = 1;
  }
  int dir = tdm__cache_fd(rt);
  if (dir >= 0)
    tdm__model_load(s->model, dir, MODEL_FILE, rt); /* a bad file is logged and ignored */
  rt->sched = s;
  tdm__log(rt, TDM_LOG_INFO,
           "placement policy %s between %u CPU workers (%u %s) and %u devices",
           tdm__policy_name(s->policy), rt->nworkers, s->ncpu,
           s->ncpu == 1 ? "kind" : "kinds", rt->ndevice_workers);
  return TDM_OK;
}

void tdm__sched_stop(tdm_runtime *rt) {
  tdm_sched *s = rt->sched;
  if (!s)
    return;
  int dir = s->dirty ? tdm__cache_fd(rt) : -1;
  if (dir >= 0)
    tdm__model_save(s->model, dir, MODEL_FILE, rt);
  tdm__model_free(s->model);
  pthread_mutex_destroy(&s->lock);
  for (unsigned c = 0; s->kq && c < s->ncpu; c++)
    pthread_mutex_destroy(&s->kq[c].lock);
  free(s->kq);
  free(s->cls);
  free(s);
  rt->sched = NULL;
}

tdm_status tdm__device_prepare(tdm_runtime *rt, tdm_task *t, const char *what) {
  t->device_ok = false;
  t->sched_cls = -1;
  if (rt->dev)
    return rt->dev->prepare(rt, t, what);
  if (!t->codelet->opencl || t->codelet->cpu_fn)
    return TDM_OK;
  tdm__log(rt, TDM_LOG_ERROR, "%s: codelet %s has only an OpenCL variant and no device is used",
           what, codelet_name(t));
  return TDM_ERR_NO_DEVICE;
}

tdm_status tdm_runtime_device_counters(const tdm_runtime *rt, unsigned device,
                                       tdm_device_counters *out) {
  if (!rt || !out || out->struct_size < sizeof *out)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_runtime_device_counters");
  if (device >= rt->ndevices) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_device_counters: no device %u", device);
    return TDM_ERR_INVALID_ARG;
  }
  size_t room = out->struct_size;
  tdm_device_counters c = {.struct_size = room};
  int w = rt->devices[device].worker;
  if (w >= 0 && rt->dev)
    rt->dev->counters(rt, (unsigned)w - rt->nworkers, &c);
  c.struct_size = room;
  memcpy(out, &c, sizeof c);
  return TDM_OK;
}
