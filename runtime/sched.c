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
#include "internal.h"
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

struct tdm_sched {
  tdm_policy policy;
  pthread_mutex_t lock; /* guards all below */
  tdm_perfmodel *model;
  bool dirty;
  unsigned nclasses;
  sclass *cls;
  uint64_t rng;
};

static const char *codelet_name(const tdm_task *t) {
  return t->cl->name ? t->cl->name : "(unnamed)";
}

/* Whether class c can run t. */
static bool runs(tdm_runtime *rt, unsigned c, const tdm_task *t) {
  (void)rt;
  if (c == 0)
    return t->cl->cpu_fn != NULL;
  return (t->dev_mask >> (c - 1)) & 1;
}

/* The model's prediction for t on class c (lock held): seconds, or < 0;
 * *calibrated whether to trust it. */
static double predict(tdm_sched *s, const tdm_task *t, unsigned c, bool *calibrated) {
  return tdm__model_predict(s->model, codelet_name(t), tdm__task_bytes(t), s->cls[c].name,
                            calibrated);
}

static double transfer(tdm_runtime *rt, unsigned c, const tdm_task *t) {
  return rt->dev->transfer_time(rt, c ? c - 1 : UINT_MAX, t);
}

static uint64_t next_random(uint64_t *x) {
  /* xorshift64 (Marsaglia, 2003) */
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Sends t to class c, which the scheduler counts as predicted. */
static void send(tdm_runtime *rt, tdm_task *t, unsigned c) {
  if (c == 0)
    tdm__schedule(rt, t);
  else
    rt->dev->push(rt, c - 1, t);
}

/* heft: the class where t finishes first (tdm__heft_pick, shared with
 * the simulated clock), a class to calibrate, or UINT_MAX: not known yet
 * where (lock held). */
static unsigned heft_choose(tdm_runtime *rt, tdm_sched *s, tdm_task *t, double *predicted,
                            bool *calib) {
  tdm_choice c[TDM_MAX_DEVICE_WORKERS + 1];
  unsigned cls[TDM_MAX_DEVICE_WORKERS + 1], n = 0;
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

tdm_task *tdm__sched_take_shared(tdm_runtime *rt, unsigned cls) {
  tdm_sched *s = rt->sched;
  /* heft: tasks shared while their times were unknown are placed by
   * their predictions once known (a few at a time: the caller has work
   * to do) */
  for (unsigned tries = 0; tries < 16; tries++) {
    tdm_task *t = tdm__any_take(rt);
    if (!t)
      return NULL;
    if (s && s->policy == TDM_POLICY_HEFT && heft_place(rt, t))
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
  if (!t->gpu_ok || !s) {
    tdm__schedule(rt, t);
    return;
  }
  switch (s->policy) {
  case TDM_POLICY_EAGER:
    if (!t->cl->cpu_fn)
      break; /* OpenCL only: heft's choice among the devices */
    share(rt, t);
    return;
  case TDM_POLICY_WS: {
    int k = rt->dev->current(rt);
    if (k >= 0 && runs(rt, 1 + (unsigned)k, t)) {
      rt->dev->push(rt, (unsigned)k, t);
    } else if (t->cl->cpu_fn) {
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
    tdm__schedule(rt, t); /* not reached: a gpu_ok task runs somewhere */
    return;
  }
  case TDM_POLICY_HEFT:
    break;
  }
  if (!heft_place(rt, t))
    share(rt, t);
}

/* Moves t's share of the backlog from its class to class c (lock held). */
static void move_to(tdm_sched *s, tdm_task *t, unsigned c, double predicted) {
  if (t->sched_cls >= 0) {
    sclass *from = &s->cls[t->sched_cls];
    from->backlog = fmax(0, from->backlog - t->sched_predicted);
    if (t->sched_calib && from->calibrating)
      from->calibrating--;
  }
  t->sched_calib = false;
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
    if (1 + j == to)
      continue;
    steal_ctx x = {.rt = rt, .to = to, .from = 1 + j};
    tdm_task *t = rt->dev->take(rt, j, worth_taking, &x);
    if (t)
      return t;
  }
  return NULL;
}

tdm_task *tdm__sched_idle_cpu(tdm_worker *w) {
  return take_for(w->rt, 0);
}

tdm_task *tdm__sched_idle_device(tdm_runtime *rt, unsigned k) {
  tdm_task *t = take_for(rt, 1 + k);
  tdm_sched *s = rt->sched;
  if (t || !s || s->policy != TDM_POLICY_WS)
    return t;
  /* ws: the CPU workers' deques too; a task this device cannot run goes
   * back to the CPU workers */
  for (unsigned i = 0; i < rt->nworkers; i++) {
    t = tdm_deque_steal(&rt->workers[i].deque);
    if (!t)
      continue;
    if (t->gpu_ok && runs(rt, 1 + k, t))
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

void tdm__sched_done(tdm_task *t, unsigned cls, double seconds) {
  tdm_runtime *rt = t->rt;
  tdm_sched *s = rt->sched;
  if (!s)
    return;
  TDM_PTHREAD(rt, pthread_mutex_lock(&s->lock));
  if (t->sched_cls >= 0) {
    sclass *c = &s->cls[t->sched_cls];
    c->backlog = fmax(0, c->backlog - t->sched_predicted);
    if (t->sched_calib && c->calibrating)
      c->calibrating--;
    t->sched_cls = -1;
  }
  if (cls < s->nclasses && seconds >= 0 &&
      tdm__model_observe(s->model, codelet_name(t), tdm__task_bytes(t), s->cls[cls].name,
                         seconds))
    s->dirty = true;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&s->lock));
}

static bool model_path(const tdm_runtime *rt, char *buf, size_t size) {
  char dir[4000];
  if (!tdm__cache_dir(rt, dir, sizeof dir))
    return false;
  int n = snprintf(buf, size, "%s/" MODEL_FILE, dir);
  return n > 0 && (size_t)n < size;
}

tdm_status tdm__sched_start(tdm_runtime *rt) {
  if (!rt->ndevice_workers)
    return TDM_OK;
  tdm_sched *s = calloc(1, sizeof *s);
  if (!s)
    return TDM_ERR_NO_MEMORY;
  s->policy = rt->policy;
  s->nclasses = 1 + rt->ndevice_workers;
  s->cls = calloc(s->nclasses, sizeof *s->cls);
  s->model = tdm__model_new();
  s->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)rt;
  int err = pthread_mutex_init(&s->lock, NULL);
  if (err || !s->cls || !s->model) {
    if (!err)
      pthread_mutex_destroy(&s->lock);
    else
      tdm__log(rt, TDM_LOG_ERROR, "pthread_mutex_init: %s", strerror(err));
    tdm__model_free(s->model);
    free(s->cls);
    free(s);
    return err ? TDM_ERR_SYSTEM : TDM_ERR_NO_MEMORY;
  }
  snprintf(s->cls[0].name, sizeof s->cls[0].name, "cpu");
  s->cls[0].workers = rt->nworkers;
  for (unsigned k = 0; k < rt->ndevice_workers; k++) {
    const tdm_device_record *d = &rt->devices[rt->device_of[k]];
    snprintf(s->cls[1 + k].name, sizeof s->cls[1 + k].name, "%s:%s", rt->dev->name, d->name);
    s->cls[1 + k].workers = 1;
  }
  char path[4096];
  if (model_path(rt, path, sizeof path))
    tdm__model_load(s->model, path, rt); /* a bad file is logged and ignored */
  rt->sched = s;
  tdm__log(rt, TDM_LOG_INFO, "placement policy %s between %u CPU workers and %u devices",
           tdm__policy_name(s->policy), rt->nworkers, rt->ndevice_workers);
  return TDM_OK;
}

void tdm__sched_stop(tdm_runtime *rt) {
  tdm_sched *s = rt->sched;
  if (!s)
    return;
  char path[4096];
  if (s->dirty && model_path(rt, path, sizeof path))
    tdm__model_save(s->model, path, rt);
  tdm__model_free(s->model);
  pthread_mutex_destroy(&s->lock);
  free(s->cls);
  free(s);
  rt->sched = NULL;
}

tdm_status tdm__gpu_prepare(tdm_runtime *rt, tdm_task *t, const char *what) {
  t->gpu_ok = false;
  t->sched_cls = -1;
  if (rt->dev)
    return rt->dev->prepare(rt, t, what);
  if (!t->cl->opencl || t->cl->cpu_fn)
    return TDM_OK;
  tdm__log(rt, TDM_LOG_ERROR, "%s: codelet %s has only an OpenCL variant and no device is used",
           what, codelet_name(t));
  return TDM_ERR_NO_DEVICE;
}

tdm_status tdm_runtime_device_counters(const tdm_runtime *rt, unsigned device,
                                       tdm_device_counters *out) {
  if (!rt || !out || out->struct_size < sizeof *out)
    return TDM_ERR_INVALID_ARG;
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
