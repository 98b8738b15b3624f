/*
 * What the placement policies share (policy.h): their table and names,
 * the scheduler both drivers make, and the steps several policies take:
 * accounting a task's predicted time to its class, and an idle class
 * taking a task queued on a device.
 */

#include "sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const tdm_policy_ops *const tdm__policies[TDM_NPOLICIES] = {
    [TDM_POLICY_HEFT] = &tdm__policy_heft,
    [TDM_POLICY_WS] = &tdm__policy_ws,
    [TDM_POLICY_EAGER] = &tdm__policy_eager,
    [TDM_POLICY_RANDOM] = &tdm__policy_random,
};

const char *tdm__policy_name(tdm_policy p) {
  return (unsigned)p < TDM_NPOLICIES ? tdm__policies[p]->name : "unknown";
}

bool tdm__policy_parse(const char *name, tdm_policy *out) {
  for (unsigned i = 0; i < TDM_NPOLICIES; i++)
    if (!strcmp(name, tdm__policies[i]->name)) {
      *out = (tdm_policy)i;
      return true;
    }
  return false;
}

tdm_status tdm__sched_init(tdm_sched *s, tdm_runtime *rt, tdm_policy p,
                           const tdm_sched_driver *drv, void *ctx, unsigned ncpu,
                           unsigned nclasses, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->rt = rt;
  s->policy = tdm__policies[(unsigned)p < TDM_NPOLICIES ? p : TDM_POLICY_HEFT];
  s->drv = drv;
  s->ctx = ctx;
  s->ncpu = ncpu;
  s->nclasses = nclasses;
  atomic_init(&s->rng, seed ? seed : 0x9e3779b97f4a7c15ull);
  atomic_init(&s->cpu_only_stale, true);
  atomic_init(&s->cpu_only_time, 0.0);
  atomic_init(&s->dirty, false);
  s->cls = calloc(nclasses ? nclasses : 1, sizeof *s->cls);
  s->model = tdm__model_new();
  if (!s->cls || !s->model) {
    tdm__model_free(s->model);
    free(s->cls);
    s->cls = NULL;
    s->model = NULL;
    return TDM_ERR_NO_MEMORY;
  }
  if (s->policy->init)
    s->policy->init(s);
  return TDM_OK;
}

void tdm__sched_fini(tdm_sched *s) {
  if (!s->cls)
    return;
  tdm__model_free(s->model);
  free(s->cls);
  s->cls = NULL;
  s->model = NULL;
}

void tdm__sched_place(tdm_sched *s, tdm_task *t, bool device_ok) {
  t->sched_cls = -1;
  t->sched_calib = false;
  if (device_ok)
    s->policy->place(s, t);
  else
    s->drv->to_cpu(s, t);
}

void tdm__sched_cpu_only_ran(tdm_sched *s, unsigned c, double seconds) {
  if (c >= s->ncpu || !(seconds >= 0))
    return;
  if (tdm__model_observe(s->model, TDM_SCHED_CPU_ONLY, 0, s->cls[c].name, seconds)) {
    atomic_store_explicit(&s->dirty, true, memory_order_relaxed);
    atomic_store_explicit(&s->cpu_only_stale, true, memory_order_relaxed);
  }
}

double tdm__sched_cpu_only_wait(tdm_sched *s) {
  unsigned queued = 0, running = 0;
  if (s->drv->cpu_only)
    s->drv->cpu_only(s, &queued, &running);
  if (!queued && !running)
    return 0;
  unsigned workers = 0;
  for (unsigned c = 0; c < s->ncpu; c++)
    workers += s->cls[c].workers;
  /* a mean over the classes that know, by workers; two threads may both
   * compute it, alike */
  if (atomic_exchange_explicit(&s->cpu_only_stale, false, memory_order_relaxed)) {
    double sum = 0;
    unsigned known = 0;
    for (unsigned c = 0; c < s->ncpu; c++) {
      double p = tdm__model_predict(s->model, TDM_SCHED_CPU_ONLY, 0, s->cls[c].name, NULL);
      if (p >= 0 && s->cls[c].workers) {
        sum += p * s->cls[c].workers;
        known += s->cls[c].workers;
      }
    }
    atomic_store_explicit(&s->cpu_only_time, known ? sum / known : -1, memory_order_relaxed);
  }
  double each = atomic_load_explicit(&s->cpu_only_time, memory_order_relaxed);
  if (!(each > 0) || !workers)
    return 0;
  return ((double)queued + 0.5 * (double)running) * each / workers;
}

tdm_task *tdm__sched_shared(tdm_sched *s, unsigned c) {
  /* a few reconsidered at a time: the caller has work to do */
  for (unsigned tries = 0; tries < 16; tries++) {
    tdm_task *t = s->drv->take_shared(s);
    if (!t)
      return NULL;
    if (s->policy->reconsider && s->policy->reconsider(s, t))
      continue;
    if (s->drv->runs(s, c, t))
      return t;
    s->drv->share(s, t, false); /* another kind of worker will take it */
    return NULL;
  }
  return NULL;
}

tdm_task *tdm__sched_idle(tdm_sched *s, unsigned c) {
  tdm_task *(*idle)(tdm_sched *, unsigned) =
      c < s->ncpu ? s->policy->idle_cpu : s->policy->idle_device;
  return idle ? idle(s, c) : NULL;
}

void tdm__sched_finished(tdm_sched *s, tdm_task *t, unsigned c, double seconds) {
  if (s->policy->done)
    s->policy->done(s, t, c, seconds);
  if (c < s->nclasses && seconds >= 0 && s->drv->observe(s, t, c, seconds))
    atomic_store_explicit(&s->dirty, true, memory_order_relaxed);
}

uint64_t tdm__sched_random(tdm_sched *s) {
  /* xorshift64 (Marsaglia, 2003), each draw its own step */
  uint64_t x = atomic_load_explicit(&s->rng, memory_order_relaxed), y;
  do {
    y = x;
    y ^= y << 13;
    y ^= y >> 7;
    y ^= y << 17;
  } while (!atomic_compare_exchange_weak_explicit(&s->rng, &x, y, memory_order_relaxed,
                                                  memory_order_relaxed));
  return y;
}

void tdm__policy_release(tdm_sched *s, tdm_task *t, unsigned c, double seconds) {
  (void)c;
  (void)seconds;
  if (t->sched_cls >= 0) {
    tdm_sclass *k = &s->cls[t->sched_cls];
    tdm__sched_backlog_add(k, -t->sched_predicted);
    if (t->sched_calib)
      atomic_fetch_sub_explicit(&k->calibrating, 1, memory_order_relaxed);
  }
  t->sched_cls = -1;
  t->sched_calib = false;
}

typedef struct take_ctx {
  tdm_sched *s;
  unsigned to;   /* the idle class */
  unsigned from; /* the class queued on */
  bool always;
} take_ctx;

/* Whether the idle class x->to should run t rather than let it wait on
 * x->from; if so, t's share of the backlog moves with it. */
static bool worth_taking(tdm_task *t, void *data) {
  take_ctx *x = data;
  tdm_sched *s = x->s;
  if (!s->drv->runs(s, x->to, t))
    return false;
  double move = x->always ? 0 : s->drv->transfer(s, x->to, t);
  bool ok = false;
  double here = s->drv->predict(s, t, x->to, &ok);
  bool take = x->always;
  if (take && here < 0)
    here = t->sched_predicted;
  if (!take) {
    /* t, queued last on `from`, waits for the rest of its backlog */
    const tdm_sclass *from = &s->cls[x->from];
    take = here >= 0 && ok && here + move < tdm__sched_backlog(from) / from->workers;
    /* Not by a core from a device whose link is behind by more than the
     * task's time on the core: its inputs, on their way to the device,
     * would come home over that link, and its output likely go back;
     * the link, not the device, is what the work waits for there (the
     * stencil on GPUs sharing a link per pair: 1.136 -> 1.082). */
    if (take && x->to < s->ncpu && s->drv->link_busy &&
        s->drv->link_busy(s, x->from) > here)
      take = false;
  }
  if (take) { /* (t is queued, under its queue's lock: not released meanwhile) */
    tdm__policy_release(s, t, x->from, -1);
    t->sched_cls = (int8_t)x->to;
    t->sched_predicted = (float)here;
    tdm__sched_backlog_add(&s->cls[x->to], here);
  }
  return take;
}

tdm_task *tdm__policy_take_queued(tdm_sched *s, unsigned to, bool always) {
  /* The most loaded device first (its backlog per worker): where a task
   * waits longest, and not always the first devices, which a fixed order
   * robbed most (on 64 cores + 8 GPUs, the first GPUs half idle). */
  unsigned from[TDM_MAX_DEVICE_WORKERS], n = 0;
  double load[TDM_MAX_DEVICE_WORKERS];
  for (unsigned c = s->ncpu; c < s->nclasses && n < TDM_MAX_DEVICE_WORKERS; c++)
    if (c != to && s->cls[c].workers) {
      from[n] = c;
      load[n++] = tdm__sched_backlog(&s->cls[c]) / s->cls[c].workers;
    }
  while (n) {
    unsigned i = 0;
    for (unsigned j = 1; j < n; j++)
      if (load[j] > load[i])
        i = j;
    take_ctx x = {.s = s, .to = to, .from = from[i], .always = always};
    tdm_task *t = s->drv->take(s, from[i], worth_taking, &x);
    if (t)
      return t;
    from[i] = from[--n];
    load[i] = load[n];
  }
  return NULL;
}

static bool chunk_worth_taking(tdm_task *t, void *data) {
  return t->chunk && worth_taking(t, data);
}

tdm_task *tdm__policy_take_cpu_chunk(tdm_sched *s, unsigned to) {
  if (!s->drv->take_cpu || !s->cls[0].workers)
    return NULL;
  /* (one class of CPU worker: the deques; several: their kind queues,
   * which heft's placement fills, each with its backlog) */
  take_ctx x = {.s = s, .to = to, .from = 0, .always = false};
  return s->drv->take_cpu(s, chunk_worth_taking, &x);
}

int tdm__heft_pick(const tdm_choice *c, unsigned n, unsigned max_tries, bool *calibrating) {
  int best = -1, cal = -1;
  bool all_known = true;
  double best_end = INFINITY;
  for (unsigned i = 0; i < n; i++) {
    if (!c[i].calibrated) {
      all_known = false;
      if (c[i].trying < max_tries && (cal < 0 || c[i].trying < c[cal].trying))
        cal = (int)i;
    } else if (c[i].exec >= 0 && c[i].start + c[i].exec < best_end) {
      best_end = c[i].start + c[i].exec;
      best = (int)i;
    }
  }
  *calibrating = cal >= 0;
  if (cal >= 0)
    return cal;
  return all_known ? best : -1;
}
