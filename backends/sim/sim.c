/*
 * Emulated devices (tdm_config.sim): accelerators that do not exist, for
 * trying placement on machines one does not have and for testing it on
 * machines without a GPU.
 *
 * Each emulated device is a device worker with a thread of its own and a
 * queue. Its thread takes a task, waits for the copies of the task's
 * inputs (latency + bytes / bandwidth each, one at a time per direction
 * of its link), runs the task's CPU variant, and then waits until the
 * modelled time has passed: the CPU variant's duration divided by the
 * device's speed-up for that codelet (times slow_factor once slow_at has
 * passed). Every modelled duration is multiplied by the machine's time
 * scale, and CPU workers stretch their tasks by the same factor
 * (task.c), so that a device faster than a core can be emulated with
 * cores: with a scale of 2 x the largest speed-up, an emulated device
 * spends at most half its time actually computing.
 *
 * Data never moves: the application's memory holds it all along, and the
 * coherence state is kept as for real devices (bit 1 + k of a handle's
 * `valid` for a device with memory of its own), so that copies happen,
 * and take their time, exactly where a real device would need them. A
 * CPU task whose inputs are "on" a device waits for their copies home on
 * its own worker (a real device's copies would not hold a CPU worker up:
 * this is pessimistic for CPU tasks that follow device tasks).
 */
#include "../../runtime/internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sim_dev {
  tdm_runtime *rt;
  unsigned k;
  struct tdm_vt_class decl; /* as declared: name, speed-ups, slowdown */
  bool shared;
  double latency, bandwidth; /* s, bytes/s (emulated time) */
  pthread_t thread;
  bool started;
  /* Lock order: a device's lock, the scheduler's, handle locks, link
   * locks (a leaf). */
  pthread_mutex_t lock; /* guards the queue, stop, idle */
  pthread_cond_t cond;
  tdm_devq q;
  bool stop, idle;
  pthread_mutex_t link_lock;
  uint64_t link_free[2]; /* ns: when the link is free to the device, to the host */
  _Atomic uint64_t tasks, to_device, to_host, copies_to_device, copies_to_host, busy_ns;
} sim_dev;

#define SIM_KINDS 8

struct tdm_sim {
  unsigned n;
  sim_dev *dev;
  uint64_t t0; /* creation: slow_at counts from here */
  /* CPU workers of kind i run as declared by a class "cpu.i" */
  bool has_kind[SIM_KINDS];
  struct tdm_vt_class kind[SIM_KINDS];
};

static _Thread_local sim_dev *self;

/* nanosleep wakes up tens of microseconds late: it sleeps until a little
 * before, and the rest passes yielding the core (emulated durations of a
 * few hundred microseconds stay within a few percent). */
#define SLEEP_SLACK_NS 80000

void tdm__sleep_until(uint64_t until) {
  for (;;) {
    uint64_t now = tdm__now_ns();
    if (now >= until)
      return;
    uint64_t d = until - now;
    if (d <= SLEEP_SLACK_NS) {
      sched_yield();
      continue;
    }
    d -= SLEEP_SLACK_NS;
    struct timespec ts = {.tv_sec = (time_t)(d / 1000000000u), .tv_nsec = (long)(d % 1000000000u)};
    nanosleep(&ts, NULL); /* interrupted: the loop sleeps the rest */
  }
}

static double class_speedup(const struct tdm_vt_class *c, const tdm_task *t) {
  const char *name = t->cl->name;
  for (unsigned i = 0; name && i < c->nnamed; i++)
    if (!strcmp(c->named[i].name, name))
      return c->named[i].speedup;
  return c->speedup[0];
}

static double speedup_of(const sim_dev *d, const tdm_task *t) {
  return class_speedup(&d->decl, t);
}

uint64_t tdm__sim_t0(const tdm_runtime *rt) {
  return rt->sim ? rt->sim->t0 : 0;
}

double tdm__sim_cpu_factor(const tdm_runtime *rt, unsigned worker, const tdm_task *t) {
  const tdm_sim *s = rt->sim;
  unsigned kind = rt->plan.kind_of ? rt->plan.kind_of[worker] : 0;
  double speed = 1;
  if (s && kind < SIM_KINDS && s->has_kind[kind]) {
    speed = class_speedup(&s->kind[kind], t);
    if (!(speed > 0))
      speed = 1; /* 0 for a core makes no sense: as a core */
  }
  return rt->time_scale / speed;
}

/* "cpu.N": the kind N of CPU core, or -1. */
static int kind_class(const char *name) {
  if (strncmp(name, "cpu.", 4) || !name[4])
    return -1;
  char *end;
  long n = strtol(name + 4, &end, 10);
  return *end || n < 0 || n >= SIM_KINDS ? -1 : (int)n;
}

/* ---- setup ------------------------------------------------------------ */

tdm_status tdm__sim_setup(tdm_runtime *rt, const char *text) {
  tdm_vt_machine m;
  char err[160];
  if (tdm__vt_parse_machine(text, NULL, 0, &m, err, sizeof err)) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_create: sim=\"%s\": %s", text, err);
    return TDM_ERR_INVALID_ARG;
  }
  unsigned n = 0;
  for (unsigned c = 0; c < m.nclasses; c++) {
    const char *name = m.classes[c].name;
    if (!strncmp(name, "cpu", 3) && (!name[3] || name[3] == '.')) {
      int kind = kind_class(name);
      if (kind < 0 || (unsigned)kind >= rt->plan.nkinds) {
        tdm__log(rt, TDM_LOG_ERROR,
                 "tdm_runtime_create: sim=\"%s\": \"%s\": the CPU workers are the "
                 "machine's; cpu.N declares the speed of its kind N of core (this machine "
                 "has %u %s: 0%s)",
                 text, name, rt->plan.nkinds, rt->plan.nkinds == 1 ? "kind" : "kinds",
                 rt->plan.nkinds == 1 ? "" : " to nkinds-1");
        return TDM_ERR_INVALID_ARG;
      }
      continue;
    }
    n += m.classes[c].workers;
  }
  if (n > TDM_MAX_DEVICE_WORKERS) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_create: sim: %u devices, at most %d", n,
             TDM_MAX_DEVICE_WORKERS);
    return TDM_ERR_INVALID_ARG;
  }
  tdm_sim *s = calloc(1, sizeof *s);
  rt->devices = calloc(n ? n : 1, sizeof *rt->devices);
  rt->device_of = calloc(n ? n : 1, sizeof *rt->device_of);
  if (!s || !rt->devices || !rt->device_of) {
    free(s);
    return TDM_ERR_NO_MEMORY;
  }
  s->dev = calloc(n ? n : 1, sizeof *s->dev);
  if (!s->dev) {
    free(s);
    return TDM_ERR_NO_MEMORY;
  }
  rt->sim = s;
  s->t0 = tdm__now_ns();
  /* the time scale: as asked, else twice the largest speed-up */
  double top = 1;
  for (unsigned c = 0; c < m.nclasses; c++) {
    int kind = kind_class(m.classes[c].name);
    if (kind >= 0) {
      s->has_kind[kind] = true;
      s->kind[kind] = m.classes[c];
    }
    top = fmax(top, m.classes[c].speedup[0]);
    for (unsigned i = 0; i < m.classes[c].nnamed; i++)
      top = fmax(top, m.classes[c].named[i].speedup);
  }
  rt->time_scale = rt->cfg.sim_time_scale ? rt->cfg.sim_time_scale : 2 * top;
  for (unsigned c = 0; c < m.nclasses; c++) {
    const struct tdm_vt_class *cls = &m.classes[c];
    if (kind_class(cls->name) >= 0)
      continue; /* a kind of core, not a device */
    for (unsigned w = 0; w < cls->workers; w++) {
      unsigned k = s->n++;
      sim_dev *d = &s->dev[k];
      d->rt = rt;
      d->k = k;
      d->decl = *cls;
      d->shared = cls->node == 0;
      d->latency = m.latency[cls->node];
      d->bandwidth = m.bandwidth[cls->node];
      tdm_device_record *r = &rt->devices[k];
      if (cls->workers > 1)
        snprintf(r->name, sizeof r->name, "%s.%u", cls->name, w);
      else
        snprintf(r->name, sizeof r->name, "%s", cls->name);
      snprintf(r->platform_name, sizeof r->platform_name, "Tandem emulation");
      snprintf(r->vendor, sizeof r->vendor, "Tandem");
      snprintf(r->driver_version, sizeof r->driver_version, "%d.%d.%d", TDM_VERSION_MAJOR,
               TDM_VERSION_MINOR, TDM_VERSION_PATCH);
      snprintf(r->version, sizeof r->version, "emulated");
      r->cls = TDM_DEVICE_EMULATED;
      snprintf(r->reason, sizeof r->reason, "declared by tdm_config.sim / TANDEM_SIM");
      r->duplicate_of = -1;
      r->numa_node = -1;
      r->used = true;
      r->shared_memory = d->shared;
      r->context_ok = true;
      if (d->shared)
        snprintf(r->memory_reason, sizeof r->memory_reason, "declared: memory=shared");
      else
        snprintf(r->memory_reason, sizeof r->memory_reason,
                 "declared: memory=own, latency %g s, bandwidth %g bytes/s", d->latency,
                 d->bandwidth);
      int len = snprintf(r->usage, sizeof r->usage, "used: speed-up %g", cls->speedup[0]);
      for (unsigned i = 0; i < cls->nnamed && len > 0 && (size_t)len < sizeof r->usage; i++)
        len += snprintf(r->usage + len, sizeof r->usage - (size_t)len, ", %s %g",
                        cls->named[i].name, cls->named[i].speedup);
      r->worker = (int)(rt->nworkers + k);
      rt->device_of[k] = k;
    }
  }
  rt->ndevices = n;
  rt->ndevice_workers = n;
  tdm__log(rt, TDM_LOG_INFO, "%u emulated devices, time scale %g", n, rt->time_scale);
  if (!n)
    rt->ndevices = 0;
  return TDM_OK;
}

void tdm__sim_free(tdm_runtime *rt) {
  if (!rt->sim)
    return;
  free(rt->sim->dev);
  free(rt->sim);
  rt->sim = NULL;
}

/* ---- copies ------------------------------------------------------------- */

/* Books a copy of `bytes` over d's link (to_device or to the host), to
 * start no earlier than `after` (ns); returns when it ends. */
static uint64_t book_copy(sim_dev *d, bool to_device, uint64_t bytes, uint64_t after) {
  tdm_runtime *rt = d->rt;
  double seconds = rt->time_scale * (d->latency + (double)bytes / d->bandwidth);
  uint64_t now = tdm__now_ns();
  TDM_PTHREAD(rt, pthread_mutex_lock(&d->link_lock));
  uint64_t start = d->link_free[!to_device];
  if (start < now)
    start = now;
  if (start < after)
    start = after;
  uint64_t end = start + tdm__ns_of(seconds);
  d->link_free[!to_device] = end;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&d->link_lock));
  atomic_fetch_add_explicit(to_device ? &d->to_device : &d->to_host, bytes,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(to_device ? &d->copies_to_device : &d->copies_to_host, 1,
                            memory_order_relaxed);
  if (rt->recording)
    tdm__trace_add(rt, &(tdm_trace_event){.kind = to_device ? TDM_EV_TO_DEVICE : TDM_EV_TO_HOST,
                                          .track = (uint16_t)(rt->nworkers + d->k),
                                          .t0 = start,
                                          .t1 = end,
                                          .bytes = bytes});
  return end;
}

static uint64_t bytes_of(const tdm_handle *h) {
  return (uint64_t)h->buf.nx * h->buf.ny * h->buf.elem_size;
}

/* Settles what a matrix or tile holds before its first use here (h->lock
 * held): a tile not yet used is where its matrix is; a matrix after an
 * unpartition is where its tiles are, brought home. Returns when the
 * copies home end (0: none). */
static uint64_t settle(tdm_handle *h) {
  tdm_runtime *rt = h->rt;
  uint64_t ready = 0;
  if (h->gather) {
    for (size_t i = 0; i < h->ngather; i++) {
      tdm_handle *t = h->gather[i];
      tdm__spin_lock(&t->lock);
      uint32_t v = t->valid;
      tdm__spin_unlock(&t->lock);
      if (v && !(v & 1u)) {
        uint64_t end = book_copy(&rt->sim->dev[__builtin_ctz(v) - 1], false, bytes_of(t), 0);
        ready = end > ready ? end : ready;
      }
      tdm__handle_unref(t);
    }
    free(h->gather);
    h->gather = NULL;
    h->ngather = 0;
    h->valid = 1;
  }
  if (!h->valid)
    h->valid = h->parent ? h->parent->valid : 1u;
  if (!h->valid)
    h->valid = 1;
  return ready;
}

/* When the copy that filled h's node `node` ends (h->lock held). */
static uint64_t *ready_of(tdm_handle *h, unsigned node) {
  if (!h->rep)
    h->rep = calloc(1 + h->rt->ndevice_workers, sizeof *h->rep);
  return h->rep ? &h->rep[node].ready_ns : NULL;
}

static uint64_t later(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}

/* Makes h valid on node `node` (h->lock held): books the copies, through
 * the host from a device holding it. Returns when the contents are there
 * (0: already). */
static uint64_t make_valid(tdm_handle *h, unsigned node) {
  tdm_runtime *rt = h->rt;
  uint64_t ready = settle(h), *r;
  if (h->valid & (1u << node))
    return later(ready, (r = ready_of(h, node)) ? *r : 0);
  if (!(h->valid & 1u)) {
    unsigned src = (unsigned)__builtin_ctz(h->valid);
    ready = later(ready, (r = ready_of(h, src)) ? *r : 0);
    ready = book_copy(&rt->sim->dev[src - 1], false, bytes_of(h), ready);
    h->valid |= 1u;
    if ((r = ready_of(h, 0)))
      *r = ready;
  } else {
    ready = later(ready, (r = ready_of(h, 0)) ? *r : 0);
  }
  if (node) {
    ready = book_copy(&rt->sim->dev[node - 1], true, bytes_of(h), ready);
    h->valid |= 1u << node;
    if ((r = ready_of(h, node)))
      *r = ready;
  }
  return ready;
}

/* After a task wrote h on `node`: the only valid node (h->lock held). */
static void written(tdm_handle *h, unsigned node) {
  h->valid = 1u << node;
  uint64_t *r = ready_of(h, node);
  if (r)
    *r = 0;
}

/* After t ran on `node`: what it wrote lives there only. */
static void outputs_on(tdm_task *t, unsigned node) {
  for (unsigned i = 0; i < t->nbuf; i++) {
    if (!(t->modes[i] & TDM_W))
      continue;
    tdm_handle *h = t->handles[i];
    tdm__spin_lock(&h->lock);
    written(h, node);
    tdm__spin_unlock(&h->lock);
  }
}

/* The inputs of t on node `node`: their copies booked (placement starts
 * them at once: prefetch). Returns when they are all there. */
static uint64_t fetch(tdm_task *t, unsigned node) {
  uint64_t ready = 0;
  for (unsigned i = 0; i < t->nbuf; i++) {
    tdm_handle *h = t->handles[i];
    tdm__spin_lock(&h->lock);
    uint64_t r = (t->modes[i] & TDM_R) ? make_valid(h, node) : settle(h);
    tdm__spin_unlock(&h->lock);
    ready = later(ready, r);
  }
  return ready;
}

static unsigned node_of(const sim_dev *d) {
  return d->shared ? 0 : 1 + d->k;
}

/* ---- the device's thread ------------------------------------------------ */

static void run(sim_dev *d, tdm_task *t) {
  tdm_runtime *rt = d->rt;
  unsigned node = node_of(d);
  tdm__sleep_until(fetch(t, node)); /* booked at placement, if placed here */
  uint64_t x0 = tdm__now_ns();
  tdm__cpu_run(t);
  uint64_t ran = tdm__now_ns() - x0;
  double factor = rt->time_scale / speedup_of(d, t);
  if (d->decl.slow_at > 0 && d->decl.slow_factor > 0 &&
      (double)(x0 - rt->sim->t0) >= d->decl.slow_at * rt->time_scale * 1e9)
    factor *= d->decl.slow_factor;
  tdm__sleep_until(x0 + tdm__ns_of((double)ran * 1e-9 * factor));
  uint64_t x1 = tdm__now_ns();
  outputs_on(t, node);
  atomic_fetch_add_explicit(&d->tasks, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&d->busy_ns, x1 - x0, memory_order_relaxed);
  tdm__trace_task(rt, t, rt->nworkers + d->k, x0, x1);
  tdm__sched_done(t, rt->nworkers + d->k, 1e-9 * (double)(x1 - x0));
  if (t->callback)
    t->callback(t->callback_data);
  tdm__task_finish(t);
}

static void *device_main(void *arg) {
  sim_dev *d = arg;
  tdm_runtime *rt = d->rt;
  self = d;
  TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
  for (;;) {
    tdm_task *t = tdm__devq_next(rt, d->k, &d->q, &d->lock);
    if (t) {
      TDM_PTHREAD(rt, pthread_mutex_unlock(&d->lock));
      run(d, t);
      TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
      continue;
    }
    if (d->stop)
      break;
    if (d->q.head)
      continue; /* pushed while the lock was dropped */
    d->idle = true;
    TDM_PTHREAD(rt, pthread_cond_wait(&d->cond, &d->lock));
    d->idle = false;
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&d->lock));
  return NULL;
}

/* ---- the ops ------------------------------------------------------------- */

static void sim_kick(tdm_runtime *rt, unsigned k) {
  sim_dev *d = &rt->sim->dev[k];
  TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
  if (d->idle)
    TDM_PTHREAD(rt, pthread_cond_signal(&d->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&d->lock));
}

static void sim_push(tdm_runtime *rt, unsigned k, tdm_task *t) {
  sim_dev *d = &rt->sim->dev[k];
  fetch(t, node_of(d)); /* its inputs start moving now */
  TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
  tdm__devq_put(&d->q, t);
  unsigned queued = d->q.queued;
  if (d->idle)
    TDM_PTHREAD(rt, pthread_cond_signal(&d->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&d->lock));
  if (queued > 1) { /* work waits here: idle workers may want it */
    for (unsigned j = 0; j < rt->sim->n; j++)
      if (j != k)
        sim_kick(rt, j);
    tdm__wake_for_completion(rt);
  }
}

static tdm_task *sim_take(tdm_runtime *rt, unsigned k, bool (*want)(tdm_task *, void *),
                          void *data) {
  sim_dev *d = &rt->sim->dev[k];
  return tdm__devq_take(rt, &d->q, &d->lock, want, data);
}

static int sim_current(const tdm_runtime *rt) {
  return self && self->rt == rt ? (int)self->k : -1;
}

static double sim_transfer_time(tdm_runtime *rt, unsigned k, const tdm_task *t) {
  unsigned node = k == UINT_MAX ? 0 : node_of(&rt->sim->dev[k]);
  double s = 0;
  for (unsigned i = 0; i < t->nbuf; i++) {
    if (!(t->modes[i] & TDM_R))
      continue;
    tdm_handle *h = t->handles[i];
    tdm__spin_lock(&h->lock);
    uint32_t valid = h->valid;
    tdm__spin_unlock(&h->lock);
    if (!valid || (valid & (1u << node)))
      continue;
    double bytes = (double)bytes_of(h);
    if (!(valid & 1u)) {
      const sim_dev *src = &rt->sim->dev[__builtin_ctz(valid) - 1];
      s += src->latency + bytes / src->bandwidth;
    }
    if (node)
      s += rt->sim->dev[k].latency + bytes / rt->sim->dev[k].bandwidth;
  }
  return s * rt->time_scale;
}

static tdm_status sim_prepare(tdm_runtime *rt, tdm_task *t, const char *what) {
  t->gpu_ok = false;
  t->dev_mask = 0;
  if (!t->cl->cpu_fn) {
    tdm__log(rt, TDM_LOG_ERROR,
             "%s: codelet %s has no CPU variant: emulated devices run CPU variants", what,
             t->cl->name ? t->cl->name : "(unnamed)");
    return TDM_ERR_NO_DEVICE;
  }
  for (unsigned k = 0; k < rt->sim->n; k++)
    if (speedup_of(&rt->sim->dev[k], t) > 0)
      t->dev_mask |= 1ull << k;
  t->gpu_ok = t->dev_mask != 0;
  return TDM_OK;
}

static bool sim_host_ready(tdm_task *t) {
  tdm__sleep_until(fetch(t, 0));
  return true;
}

static void sim_host_written(tdm_task *t) {
  outputs_on(t, 0);
}

static void sim_handle_home(tdm_handle *h, bool will_write) {
  tdm__spin_lock(&h->lock);
  uint64_t ready = make_valid(h, 0);
  if (will_write)
    written(h, 0);
  tdm__spin_unlock(&h->lock);
  tdm__sleep_until(ready);
}

static void sim_handle_forget(tdm_handle *h) {
  free(h->rep);
  h->rep = NULL;
  for (size_t i = 0; i < h->ngather; i++)
    tdm__handle_unref(h->gather[i]);
  free(h->gather);
  h->gather = NULL;
  h->ngather = 0;
}

static uint64_t sim_busy_ns(const tdm_runtime *rt, unsigned k) {
  return atomic_load(&rt->sim->dev[k].busy_ns);
}

static void sim_counters(const tdm_runtime *rt, unsigned k, tdm_device_counters *c) {
  const sim_dev *d = &rt->sim->dev[k];
  c->tasks = atomic_load(&d->tasks);
  c->bytes_to_device = atomic_load(&d->to_device);
  c->bytes_to_host = atomic_load(&d->to_host);
  c->copies_to_device = atomic_load(&d->copies_to_device);
  c->copies_to_host = atomic_load(&d->copies_to_host);
}

static void sim_stop(tdm_runtime *rt) {
  tdm_sim *s = rt->sim;
  if (!s)
    return;
  for (unsigned k = 0; k < s->n; k++) {
    sim_dev *d = &s->dev[k];
    if (!d->started)
      continue;
    TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
    d->stop = true;
    TDM_PTHREAD(rt, pthread_cond_signal(&d->cond));
    TDM_PTHREAD(rt, pthread_mutex_unlock(&d->lock));
    int err = pthread_join(d->thread, NULL);
    if (err)
      tdm__log(rt, TDM_LOG_ERROR, "pthread_join(emulated device %u): %s", k, strerror(err));
    d->started = false;
  }
  for (unsigned k = 0; k < s->n; k++) {
    pthread_cond_destroy(&s->dev[k].cond);
    pthread_mutex_destroy(&s->dev[k].lock);
    pthread_mutex_destroy(&s->dev[k].link_lock);
  }
}

static tdm_status sim_start(tdm_runtime *rt) {
  tdm_sim *s = rt->sim;
  for (unsigned k = 0; k < s->n; k++) {
    sim_dev *d = &s->dev[k];
    int err = pthread_mutex_init(&d->lock, NULL);
    if (!err && (err = pthread_cond_init(&d->cond, NULL)))
      pthread_mutex_destroy(&d->lock);
    if (!err && (err = pthread_mutex_init(&d->link_lock, NULL))) {
      pthread_cond_destroy(&d->cond);
      pthread_mutex_destroy(&d->lock);
    }
    if (err) {
      tdm__log(rt, TDM_LOG_ERROR, "emulated device %u: %s", k, strerror(err));
      for (unsigned j = 0; j < k; j++) { /* those made so far */
        pthread_cond_destroy(&s->dev[j].cond);
        pthread_mutex_destroy(&s->dev[j].lock);
        pthread_mutex_destroy(&s->dev[j].link_lock);
      }
      s->n = k;
      rt->ndevice_workers = k;
      return TDM_ERR_SYSTEM;
    }
  }
  for (unsigned k = 0; k < s->n; k++) {
    sim_dev *d = &s->dev[k];
    int err = pthread_create(&d->thread, NULL, device_main, d);
    if (err) {
      tdm__log(rt, TDM_LOG_ERROR, "could not start emulated device %u: %s", k, strerror(err));
      return TDM_ERR_SYSTEM; /* teardown stops those started */
    }
    d->started = true;
  }
  return TDM_OK;
}

const tdm_device_ops tdm__sim_ops = {
    .name = "emulated",
    .start = sim_start,
    .stop = sim_stop,
    .prepare = sim_prepare,
    .push = sim_push,
    .take = sim_take,
    .kick = sim_kick,
    .current = sim_current,
    .transfer_time = sim_transfer_time,
    .progress = NULL,
    .host_ready = sim_host_ready,
    .host_written = sim_host_written,
    .handle_home = sim_handle_home,
    .handle_forget = sim_handle_forget,
    .trace_collect = NULL,
    .busy_ns = sim_busy_ns,
    .counters = sim_counters,
};
