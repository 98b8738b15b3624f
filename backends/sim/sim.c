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
 * (runtime/core/complete.c), so that a device faster than a core can be emulated with
 * cores: with a scale of 2 x the largest speed-up, an emulated device
 * spends at most half its time actually computing.
 *
 * Memory. A device sharing the host's memory works on the application's
 * buffers. A device with memory of its own (memory=own) is a memory node
 * of its own: its buffers are real (host memory set apart for it), and
 * the coherence module (runtime/data/coherence.c) copies data to and from
 * them exactly where a real device would need it; each copy also takes
 * its modelled time on the device's link, one at a time per direction.
 * Tasks run on those copies, so a coherence error shows as a wrong
 * result on every machine. With tdm_config.device_memory_limit the
 * device's memory is that large and copies are evicted to make room. A
 * CPU task whose inputs are on a device waits for their copies home on
 * its own worker (a real device's copies would not hold a CPU worker up:
 * this is pessimistic for CPU tasks that follow device tasks).
 */
#include "../driver.h"
#include "sim.h"

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
  double peer; /* bytes/s straight to and from other devices with one; 0: none */
  pthread_t thread;
  bool started;
  /* Lock order: a device's lock, the scheduler's, handle locks, link
   * locks (a leaf). */
  pthread_mutex_t lock; /* guards the queue, stop, idle */
  pthread_cond_t cond;
  tdm_taskq q;
  bool stop, idle;
  /* A try that hangs (the `hang` fault) until the watchdog abandons it
   * (sim_abandon takes it), with its undo snapshot; abandoned: taken. */
  tdm_task *hanging;
  void *hanging_before;
  bool abandoned;
  pthread_mutex_t link_lock;
  uint64_t link_free[2]; /* ns: when the link is free to the device, to the host */
  _Atomic uint64_t tasks, to_device, to_host, copies_to_device, copies_to_host, busy_ns;
  _Atomic uint64_t from_devices, copies_from_devices;
} sim_dev;

#define SIM_KINDS 8

typedef struct tdm_sim tdm_sim;
struct tdm_sim {
  unsigned first, n; /* its device workers: first .. first + n - 1 */
  sim_dev *dev;      /* device worker first + i is dev[i] */
  /* Emulated machines run `time_scale` times slower than real ones (see
   * tdm_config.sim): CPU tasks take that many times their real time. */
  double time_scale;
  uint64_t t0; /* creation: slow_at counts from here */
  /* CPU workers of kind i run as declared by a class "cpu.i" */
  bool has_kind[SIM_KINDS];
  struct tdm_vt_class kind[SIM_KINDS];
};

static _Thread_local sim_dev *self;



static double class_speedup(const struct tdm_vt_class *c, const tdm_task *t) {
  const char *name = t->codelet->name;
  for (unsigned i = 0; name && i < c->nnamed; i++)
    if (!strcmp(c->named[i].name, name))
      return c->named[i].speedup;
  return c->speedup[0];
}

static double speedup_of(const sim_dev *d, const tdm_task *t) {
  return class_speedup(&d->decl, t);
}

static tdm_sim *sim_of(const tdm_runtime *rt) {
  return tdm__state_of(rt, &tdm__sim_backend);
}

/* Device worker k, one of the emulator's. */
static sim_dev *dev_of(const tdm_runtime *rt, unsigned k) {
  tdm_sim *s = sim_of(rt);
  return &s->dev[k - s->first];
}

uint64_t tdm__sim_t0(const tdm_runtime *rt) {
  const tdm_sim *s = sim_of(rt);
  return s ? s->t0 : 0;
}

static double sim_cpu_factor(const tdm_runtime *rt, unsigned worker, const tdm_task *t) {
  const tdm_sim *s = sim_of(rt);
  unsigned kind = rt->plan.kind_of ? rt->plan.kind_of[worker] : 0;
  double speed = 1;
  if (s && kind < SIM_KINDS && s->has_kind[kind]) {
    speed = class_speedup(&s->kind[kind], t);
    if (!(speed > 0))
      speed = 1; /* 0 for a core makes no sense: as a core */
  }
  return s ? s->time_scale / speed : 1;
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

/* The devices m declares (classes other than cpu.N, whose N must be a
 * kind of core of this machine); TDM_ERR_INVALID_ARG, logged, if there is
 * a bad one or too many: as an error, or where the description is
 * TANDEM_SIM's, as a warning that it is ignored. */
static tdm_status count_devices(const tdm_runtime *rt, const char *text,
                                const tdm_vt_machine *m, unsigned *n) {
  tdm_log_level level = rt->sim_from_env ? TDM_LOG_WARNING : TDM_LOG_ERROR;
  const char *what = rt->sim_from_env ? "ignoring TANDEM_SIM" : "tdm_runtime_create: sim";
  *n = 0;
  for (unsigned c = 0; c < m->nclasses; c++) {
    const char *name = m->classes[c].name;
    if (!strncmp(name, "cpu", 3) && (!name[3] || name[3] == '.')) {
      int kind = kind_class(name);
      if (kind < 0 || (unsigned)kind >= rt->plan.nkinds) {
        tdm__log(rt, level,
                 "%s=\"%s\": \"%s\": the CPU workers are the "
                 "machine's; cpu.N declares the speed of its kind N of core (this machine "
                 "has %u %s: 0%s)",
                 what, text, name, rt->plan.nkinds, rt->plan.nkinds == 1 ? "kind" : "kinds",
                 rt->plan.nkinds == 1 ? "" : " to nkinds-1");
        return TDM_ERR_INVALID_ARG;
      }
      continue;
    }
    *n += m->classes[c].workers;
  }
  if (rt->ndevice_workers + *n > TDM_MAX_DEVICE_WORKERS) {
    tdm__log(rt, level, "%s: %u devices%s, at most %d", what, *n,
             rt->ndevice_workers ? " beside OpenCL's" : "", TDM_MAX_DEVICE_WORKERS);
    return TDM_ERR_INVALID_ARG;
  }
  return TDM_OK;
}

/* What tdm_runtime_device reports of emulated device d, the w-th of its
 * class. */
static void describe(tdm_device_record *r, const sim_dev *d, unsigned w) {
  const struct tdm_vt_class *cls = &d->decl;
  if (cls->workers > 1)
    snprintf(r->name, sizeof r->name, "%s.%u", cls->name, w);
  else
    snprintf(r->name, sizeof r->name, "%s", cls->name);
  snprintf(r->platform_name, sizeof r->platform_name, "Tandem emulation");
  snprintf(r->vendor, sizeof r->vendor, "Tandem");
  snprintf(r->driver_version, sizeof r->driver_version, "%s", TDM_VERSION);
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
             "declared: memory=own, latency %g s, bandwidth %g bytes/s%s", d->latency,
             d->bandwidth, d->peer > 0 ? ", copies to and from other devices" : "");
  int len = snprintf(r->usage, sizeof r->usage, "used: speed-up %g", cls->speedup[0]);
  for (unsigned i = 0; i < cls->nnamed && len > 0 && (size_t)len < sizeof r->usage; i++)
    len += snprintf(r->usage + len, sizeof r->usage - (size_t)len, ", %s %g",
                    cls->named[i].name, cls->named[i].speedup);
}

/* Emulated devices when tdm_config.sim asks for them, after the devices
 * of the backends asked before (OpenCL's, with "+opencl"); the backends
 * after it are asked too. */
static tdm_status sim_discover(tdm_runtime *rt, void **state, bool *last) {
  const char *text = rt->cfg.sim;
  (void)last;
  if (!text)
    return TDM_OK;
  tdm_vt_machine m;
  char err[160];
  if (tdm__vt_parse_machine(text, NULL, 0, &m, err, sizeof err)) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_create: sim=\"%s\": %s", text, err);
    return TDM_ERR_INVALID_ARG;
  }
  unsigned n;
  tdm_status st = count_devices(rt, text, &m, &n);
  if (st && rt->sim_from_env)
    return TDM_OK; /* the environment never stops a program: no emulated device */
  if (st)
    return st;
  unsigned base = rt->ndevices; /* its records after the others' */
  tdm_sim *s = tdm__calloc(rt, 1, sizeof *s);
  if (!s)
    return TDM_ERR_NO_MEMORY;
  *state = s;
  s->first = rt->ndevice_workers;
  s->dev = tdm__calloc(rt, n ? n : 1, sizeof *s->dev);
  tdm_device_record *recs = tdm__realloc(rt, rt->devices, (base + n + 1) * sizeof *recs);
  if (recs)
    rt->devices = recs;
  unsigned *of = tdm__realloc(rt, rt->device_of, (s->first + n + 1) * sizeof *of);
  if (of)
    rt->device_of = of;
  if (!s->dev || !recs || !of)
    return TDM_ERR_NO_MEMORY; /* sim_release frees s */
  memset(rt->devices + base, 0, n * sizeof *rt->devices);
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
  s->time_scale = rt->cfg.sim_time_scale ? rt->cfg.sim_time_scale : 2 * top;
  for (unsigned c = 0; c < m.nclasses; c++) {
    const struct tdm_vt_class *cls = &m.classes[c];
    if (kind_class(cls->name) >= 0)
      continue; /* a kind of core, not a device */
    for (unsigned w = 0; w < cls->workers; w++) {
      unsigned i = s->n++, k = s->first + i;
      sim_dev *d = &s->dev[i];
      *d = (sim_dev){.rt = rt, .k = k, .decl = *cls, .shared = cls->node == 0,
                     .latency = m.latency[cls->node], .bandwidth = m.bandwidth[cls->node],
                     .peer = m.peer[cls->node]};
      describe(&rt->devices[base + i], d, w);
      rt->devices[base + i].worker = (int)(rt->nworkers + k);
      rt->device_of[k] = base + i;
    }
  }
  rt->ndevices = base + n;
  rt->ndevice_workers = s->first + n;
  tdm__log(rt, TDM_LOG_INFO, "%u emulated devices, time scale %g", n, s->time_scale);
  return TDM_OK;
}

static void sim_release(tdm_runtime *rt) {
  tdm_sim *s = sim_of(rt);
  if (!s)
    return;
  free(s->dev);
  free(s);
}

/* ---- copies ------------------------------------------------------------- */

/* Books a copy of `bytes` over d's link (to_device or to the host), to
 * start no earlier than `after` (ns); returns when it ends. */
static uint64_t book_copy(sim_dev *d, bool to_device, uint64_t bytes, uint64_t after) {
  tdm_runtime *rt = d->rt;
  double seconds = sim_of(rt)->time_scale * (d->latency + (double)bytes / d->bandwidth);
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

/* ---- memory-node operations ----------------------------------------------
 * A device with memory of its own has real buffers in host memory, and
 * its copies really copy (at once), so that a task on it sees exactly
 * what coherence gave it; the modelled time of a copy is its token: when
 * it ends (tdm__now_ns), 0 for none, with FAILED set when it failed. A
 * copy that fails (an injected fault, or one that comes after a failed
 * copy, as OpenCL terminates the commands after a failed one) writes a
 * poison pattern instead of the bytes, so that whatever would read it
 * as a version shows a wrong result. */
#define FAILED (UINT64_C(1) << 63)

static void *node_alloc(void *ctx, unsigned node, const tdm_buffer *b, size_t bytes) {
  (void)node;
  (void)b;
  return tdm__malloc(ctx, bytes ? bytes : 1);
}

static void node_free(void *ctx, unsigned node, void *mem) {
  (void)ctx;
  (void)node;
  free(mem);
}

/* The end of the last of ts (ns), with FAILED if one failed. */
static tdm_token latest(const tdm_token *ts, unsigned n) {
  tdm_token t = 0, failed = 0;
  for (unsigned i = 0; i < n; i++) {
    t = (ts[i] & ~FAILED) > t ? ts[i] & ~FAILED : t;
    failed |= ts[i] & FAILED;
  }
  return t | failed;
}

static bool node_copy(void *ctx, unsigned node, bool to_node, const tdm_copy *c,
                      const tdm_token *after, unsigned nafter, tdm_token *done) {
  tdm_runtime *rt = ctx;
  const tdm_buffer *b = c->host;
  size_t row = b->ny * b->elem_size;
  tdm_token before = latest(after, nafter);
  tdm_status fault = tdm__fault(rt, TDM_FAULT_COPY, node - 1);
  if (fault == TDM_ERR_DEVICE_LOST)
    return false; /* a device that is gone starts nothing */
  tdm_token failed = (before & FAILED) || fault ? FAILED : 0;
  for (size_t r = 0; r < b->nx; r++) {
    char *host = (char *)b->ptr + r * b->ld * b->elem_size;
    char *dev = (char *)c->mem + r * c->pitch;
    if (failed)
      memset(to_node ? dev : host, 0xa5, row);
    else
      memcpy(to_node ? dev : host, to_node ? host : dev, row);
  }
  *done = book_copy(dev_of(rt, node - 1), to_node, (uint64_t)b->nx * row,
                    before & ~FAILED) |
          failed;
  return true;
}

/* Straight between two devices that both declared peer=: the larger
 * latency, the smaller bandwidth. */
static double peer_seconds(const sim_dev *a, const sim_dev *b, uint64_t bytes) {
  return fmax(a->latency, b->latency) + (double)bytes / fmin(a->peer, b->peer);
}

static double node_peer_time(void *ctx, unsigned from, unsigned to, uint64_t bytes) {
  const tdm_runtime *rt = ctx;
  const sim_dev *a = dev_of(rt, from - 1), *b = dev_of(rt, to - 1);
  if (a->shared || b->shared || a->peer <= 0 || b->peer <= 0)
    return -1;
  return sim_of(rt)->time_scale * peer_seconds(a, b, bytes);
}

/* A copy between devices takes the source's link out and the target's
 * in, one copy at a time on each (their locks in device order: leaves). */
static bool node_peer_copy(void *ctx, unsigned from, unsigned to, void *from_mem, void *to_mem,
                           size_t bytes, const tdm_token *after, unsigned nafter,
                           tdm_token *done) {
  tdm_runtime *rt = ctx;
  sim_dev *a = dev_of(rt, from - 1), *b = dev_of(rt, to - 1);
  if (node_peer_time(ctx, from, to, bytes) < 0)
    return false;
  tdm_token before = latest(after, nafter);
  tdm_status fault = tdm__fault(rt, TDM_FAULT_COPY, to - 1);
  if (fault == TDM_ERR_DEVICE_LOST)
    return false;
  tdm_token failed = (before & FAILED) || fault ? FAILED : 0;
  if (failed)
    memset(to_mem, 0xa5, bytes);
  else
    memcpy(to_mem, from_mem, bytes);
  uint64_t now = tdm__now_ns();
  sim_dev *first = a->k < b->k ? a : b, *second = a->k < b->k ? b : a;
  TDM_PTHREAD(rt, pthread_mutex_lock(&first->link_lock));
  TDM_PTHREAD(rt, pthread_mutex_lock(&second->link_lock));
  uint64_t start = now;
  if (start < (before & ~FAILED))
    start = before & ~FAILED;
  if (start < a->link_free[1])
    start = a->link_free[1];
  if (start < b->link_free[0])
    start = b->link_free[0];
  uint64_t end = start + tdm__ns_of(sim_of(rt)->time_scale * peer_seconds(a, b, bytes));
  a->link_free[1] = b->link_free[0] = end;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&second->link_lock));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&first->link_lock));
  atomic_fetch_add_explicit(&b->from_devices, bytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->copies_from_devices, 1, memory_order_relaxed);
  if (rt->recording)
    tdm__trace_add(rt, &(tdm_trace_event){.kind = TDM_EV_TO_DEVICE,
                                          .track = (uint16_t)(rt->nworkers + b->k),
                                          .t0 = start,
                                          .t1 = end,
                                          .bytes = bytes});
  *done = end | failed;
  return true;
}

static tdm_token node_join(void *ctx, const tdm_token *ts, unsigned n) {
  (void)ctx;
  return latest(ts, n);
}

static bool node_retain(void *ctx, tdm_token t) {
  (void)ctx;
  (void)t;
  return true;
}

static void node_release(void *ctx, tdm_token t) {
  (void)ctx;
  (void)t;
}

static bool node_test(void *ctx, tdm_token t) {
  (void)ctx;
  return tdm__now_ns() >= (t & ~FAILED);
}

static void node_wait(void *ctx, const tdm_token *ts, unsigned n) {
  (void)ctx;
  tdm__sleep_until(latest(ts, n) & ~FAILED);
}

static bool node_failed(void *ctx, tdm_token t) {
  return (t & FAILED) && node_test(ctx, t);
}

static double node_link_time(void *ctx, unsigned node, uint64_t bytes) {
  const tdm_runtime *rt = ctx;
  const sim_dev *d = dev_of(rt, node - 1);
  return sim_of(rt)->time_scale * (d->latency + (double)bytes / d->bandwidth);
}

static double node_link_wait(void *ctx, unsigned node, bool to_node) {
  const tdm_runtime *rt = ctx;
  sim_dev *d = dev_of(rt, node - 1);
  uint64_t now = tdm__now_ns();
  TDM_PTHREAD(rt, pthread_mutex_lock(&d->link_lock));
  uint64_t free_at = d->link_free[!to_node];
  TDM_PTHREAD(rt, pthread_mutex_unlock(&d->link_lock));
  return free_at > now ? 1e-9 * (double)(free_at - now) : 0;
}

static const tdm_node_ops sim_node_ops = {
    .alloc = node_alloc,
    .free = node_free,
    .copy = node_copy,
    .join = node_join,
    .retain = node_retain,
    .release = node_release,
    .test = node_test,
    .wait = node_wait,
    .failed = node_failed,
    .when_done = NULL, /* a CPU task waits for its inputs on its worker */
    .link_time = node_link_time,
    .link_wait = node_link_wait,
    .peer_time = node_peer_time,
    .peer_copy = node_peer_copy,
};

static unsigned node_of(const sim_dev *d) {
  return d->shared ? 0 : 1 + d->k;
}

/* ---- the device's thread ------------------------------------------------ */

/* Whether a task's inputs start moving to d when it is queued there;
 * with a memory limit, when it runs (a prefetch could find no room). */
static bool prefetched(const sim_dev *d) {
  return !d->rt->cfg.device_memory_limit || d->shared;
}

/* The `hang` fault: t's completion never comes. The device's thread
 * waits until the runtime stops, as a device that stopped answering
 * does; the watchdog meanwhile abandons t (sim_abandon ends it: undone,
 * tried elsewhere). True if it did: t is no longer this thread's. */
static bool hang(sim_dev *d, tdm_task *t, void *before) {
  tdm_runtime *rt = d->rt;
  TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
  d->hanging = t;
  d->hanging_before = before;
  while (!d->stop)
    TDM_PTHREAD(rt, pthread_cond_wait(&d->cond, &d->lock));
  bool gone = d->abandoned;
  d->hanging = NULL;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&d->lock));
  return gone;
}

static void sim_abandon(tdm_runtime *rt, unsigned k) {
  sim_dev *d = dev_of(rt, k);
  TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
  tdm_task *t = d->abandoned ? NULL : d->hanging;
  void *before = d->hanging_before;
  d->abandoned = t != NULL;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&d->lock));
  if (!t) /* only slow: it ends as it will */
    return;
  tdm__log(rt, TDM_LOG_ERROR, "emulated device %u: codelet %s abandoned", k,
           tdm__codelet_name(t));
  tdm__task_write_failed(rt, t, node_of(d), before);
  if (!d->shared)
    tdm__task_unpin(rt, t, 1 + k, t->nbuf);
  tdm__task_done(t, rt->nworkers + k, TDM_ERR_DEVICE_LOST, 0, 0);
}

/* Runs t's CPU variant on the device's memory: TDM_OK, or why it did not
 * run or failed (its outputs as they were). *x0, *ran: when and how long
 * it ran. A run fails when a completion fault is injected: what it wrote
 * is undone (in host memory, from a copy made before it ran). *gone: it
 * hung and was abandoned (t is not to be touched). */
static tdm_status execute(sim_dev *d, tdm_task *t, uint64_t *x0, uint64_t *ran, bool *gone) {
  tdm_runtime *rt = d->rt;
  unsigned node = node_of(d), slot = 1 + d->k;
  void *mems_room[TDM_MAX_BUFFERS], **mems = tdm__task_mems(t, mems_room);
  tdm_buffer bufs_room[TDM_MAX_BUFFERS], *bufs = tdm__task_views(t, bufs_room);
  tdm_handle *const *hs = tdm__task_handles(t);
  if (!d->shared && !tdm__task_pin(rt, t, slot, mems))
    return TDM_ERR_TOO_LARGE;
  tdm_tokens w;
  tdm__tokens_init(&w);
  bool staged = tdm__task_access(rt, t, slot, node, &w, true);
  tdm_token landed = latest(w.v, w.n);
  tdm__sleep_until(landed & ~FAILED); /* booked at placement, if placed here */
  tdm__tokens_release(&rt->nodes, &w);
  if (!staged || (landed & FAILED)) { /* not run on what it has: it fails */
    tdm__log(rt, TDM_LOG_ERROR, "emulated device %u: an input's copy failed", d->k);
    if (!d->shared)
      tdm__task_unpin(rt, t, slot, t->nbuf);
    return TDM_ERR_SYSTEM;
  }
  for (unsigned i = 0; i < t->nbuf; i++) {
    bufs[i] = hs[i]->buf;
    if (!d->shared) { /* the elements packed in the device's buffer */
      bufs[i].ptr = mems[i];
      bufs[i].ld = bufs[i].ny;
    }
  }
  bool kept = true;
  void *before = d->shared ? tdm__task_snapshot(rt, t, &kept) : NULL;
  if (!kept)
    return TDM_ERR_NO_MEMORY; /* nothing ran */
  *x0 = tdm__now_ns();
  bool watched = tdm__watch(rt, d->k, t, *x0);
  TDM_USER_CODE(tdm__cpu_run(t, bufs)); /* not a worker's thread */
  *ran = tdm__now_ns() - *x0;
  tdm_status fault = tdm__fault(rt, TDM_FAULT_COMPLETE, d->k);
  if (!fault && watched && tdm__fault(rt, TDM_FAULT_HANG, d->k) == TDM_ERR_SYSTEM &&
      (*gone = hang(d, t, before)))
    return TDM_ERR_DEVICE_LOST;
  if (fault) { /* undone, before it is unpinned */
    tdm__task_write_failed(rt, t, node, before);
  } else {
    free(before);
    tdm__task_written(rt, t, slot, node, 0);
    tdm__task_write_back(rt, t, node);
  }
  if (!d->shared)
    tdm__task_unpin(rt, t, slot, t->nbuf);
  return fault;
}

static void run(sim_dev *d, tdm_task *t) {
  tdm_runtime *rt = d->rt;
  uint64_t x0, ran;
  const char *name = tdm__codelet_name(t);
  tdm_status cancelled = tdm__task_outcome_at_start(t);
  if (cancelled) { /* cancelled, or taken from a CPU worker's deque: it ends here */
    tdm__task_done(t, rt->nworkers + d->k, cancelled, 0, 0);
    return;
  }
  tdm_status fault = tdm__fault(rt, TDM_FAULT_LAUNCH, d->k);
  if (fault) { /* nothing ran, nothing written */
    tdm__log(rt, TDM_LOG_ERROR, "emulated device %u: codelet %s: launch failed", d->k, name);
    tdm__task_done(t, rt->nworkers + d->k, fault, 0, 0);
    return;
  }
  x0 = ran = 0;
  bool gone = false;
  tdm_status st = execute(d, t, &x0, &ran, &gone);
  if (gone)
    return; /* ended by the watchdog (sim_abandon) */
  if (st == TDM_ERR_TOO_LARGE)
    tdm__log(rt, TDM_LOG_ERROR,
             "emulated device %u: codelet %s: its buffers do not fit in its memory; it did "
             "not run, its outputs are unchanged",
             d->k, name);
  if (st && !x0) { /* it did not run */
    tdm__task_done(t, rt->nworkers + d->k, st, 0, 0);
    return;
  }
  double factor = sim_of(rt)->time_scale / speedup_of(d, t);
  if (d->decl.slow_at > 0 && d->decl.slow_factor > 0 &&
      (double)(x0 - sim_of(rt)->t0) >= d->decl.slow_at * sim_of(rt)->time_scale * 1e9)
    factor *= d->decl.slow_factor;
  tdm__sleep_until(x0 + tdm__ns_of((double)ran * 1e-9 * factor));
  tdm__watch(rt, d->k, NULL, 0);
  uint64_t x1 = tdm__now_ns();
  atomic_fetch_add_explicit(&d->tasks, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&d->busy_ns, x1 - x0, memory_order_relaxed);
  if (st) /* it ran, and wrote, but failed: undone in execute */
    tdm__log(rt, TDM_LOG_ERROR, "emulated device %u: codelet %s: its run failed", d->k, name);
  tdm__task_done(t, rt->nworkers + d->k, st, x0, x1);
}

static void *device_main(void *arg) {
  sim_dev *d = arg;
  tdm_runtime *rt = d->rt;
  self = d;
  tdm__name_thread(rt, "tandem-dev%u", d->k);
  TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
  for (;;) {
    tdm_task *t = tdm__taskq_next(rt, d->k, &d->q, &d->lock);
    if (t) {
      TDM_PTHREAD(rt, pthread_mutex_unlock(&d->lock));
      run(d, t);
      TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
      continue;
    }
    if (d->stop)
      break;
    if (d->q.head && !tdm__devices_paused(rt))
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
  sim_dev *d = dev_of(rt, k);
  TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
  if (d->idle)
    TDM_PTHREAD(rt, pthread_cond_signal(&d->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&d->lock));
}

static void sim_push(tdm_runtime *rt, unsigned k, tdm_task *t) {
  sim_dev *d = dev_of(rt, k);
  if (prefetched(d))
    tdm__task_prefetch(rt, t, node_of(d)); /* its inputs start moving */
  TDM_PTHREAD(rt, pthread_mutex_lock(&d->lock));
  tdm__taskq_put(&d->q, t);
  unsigned queued = d->q.queued;
  if (d->idle)
    TDM_PTHREAD(rt, pthread_cond_signal(&d->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&d->lock));
  if (queued > 1) { /* work waits here: idle workers may want it */
    const tdm_sim *s = sim_of(rt);
    for (unsigned j = s->first; j < s->first + s->n; j++)
      if (j != k)
        sim_kick(rt, j);
    tdm__wake_for_completion(rt);
  }
}

static tdm_task *sim_take(tdm_runtime *rt, unsigned k, bool (*want)(tdm_task *, void *),
                          void *data) {
  sim_dev *d = dev_of(rt, k);
  return tdm__taskq_take(rt, &d->q, &d->lock, want, data);
}

static int sim_current(const tdm_runtime *rt) {
  return self && self->rt == rt ? (int)self->k : -1;
}

static tdm_status sim_prepare(tdm_runtime *rt, tdm_task *t, const char *what) {
  if (!t->codelet->cpu_fn) {
    tdm__log(rt, TDM_LOG_ERROR,
             "%s: codelet %s has no CPU variant: emulated devices run CPU variants", what,
             tdm__codelet_name(t));
    return TDM_ERR_NO_DEVICE;
  }
  /* a device whose memory cannot hold the task's buffers never gets it
   * (it would have to skip the task) */
  const tdm_sim *s = sim_of(rt);
  for (unsigned i = 0; i < s->n; i++)
    if (speedup_of(&s->dev[i], t) > 0 && tdm__task_fits(rt, t, 1 + s->first + i))
      t->dev_mask |= 1ull << (s->first + i);
  return TDM_OK;
}

static uint64_t sim_busy_ns(const tdm_runtime *rt, unsigned k) {
  return atomic_load(&dev_of(rt, k)->busy_ns);
}

static void sim_counters(const tdm_runtime *rt, unsigned k, tdm_device_counters *c) {
  const sim_dev *d = dev_of(rt, k);
  c->tasks = atomic_load(&d->tasks);
  c->bytes_to_device = atomic_load(&d->to_device);
  c->bytes_to_host = atomic_load(&d->to_host);
  c->copies_to_device = atomic_load(&d->copies_to_device);
  c->copies_to_host = atomic_load(&d->copies_to_host);
  c->bytes_from_devices = atomic_load(&d->from_devices);
  c->copies_from_devices = atomic_load(&d->copies_from_devices);
  uint64_t used, limit;
  if (!d->shared)
    tdm__mem_usage(&rt->nodes, 1 + k, &used, &limit, &c->evictions);
}

static void sim_stop(tdm_runtime *rt) {
  tdm_sim *s = sim_of(rt);
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
      tdm__log(rt, TDM_LOG_ERROR, "pthread_join(emulated device %u): %s", d->k, strerror(err));
    d->started = false;
  }
  for (unsigned k = 0; k < s->n; k++) {
    pthread_cond_destroy(&s->dev[k].cond);
    pthread_mutex_destroy(&s->dev[k].lock);
    pthread_mutex_destroy(&s->dev[k].link_lock);
  }
}

static tdm_status sim_start(tdm_runtime *rt) {
  tdm_sim *s = sim_of(rt);
  uint64_t limits[TDM_MAX_DEVICE_WORKERS];
  for (unsigned k = 0; k < s->n; k++)
    limits[k] = s->dev[k].shared ? 0
                : rt->cfg.device_memory_limit ? rt->cfg.device_memory_limit
                                              : UINT64_MAX;
  tdm_status st = tdm__nodes_add(&rt->nodes, &sim_node_ops, rt, s->first, s->n, limits);
  if (st)
    return st;
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
      tdm__log(rt, TDM_LOG_ERROR, "emulated device %u: %s", d->k, strerror(err));
      for (unsigned j = 0; j < k; j++) { /* those made so far */
        pthread_cond_destroy(&s->dev[j].cond);
        pthread_mutex_destroy(&s->dev[j].lock);
        pthread_mutex_destroy(&s->dev[j].link_lock);
      }
      s->n = k;
      rt->ndevice_workers = s->first + k; /* the emulator's come last */
      return TDM_ERR_SYSTEM;
    }
  }
  for (unsigned k = 0; k < s->n; k++) {
    sim_dev *d = &s->dev[k];
    int err = pthread_create(&d->thread, NULL, device_main, d);
    if (err) {
      tdm__log(rt, TDM_LOG_ERROR, "could not start emulated device %u: %s", d->k, strerror(err));
      return TDM_ERR_SYSTEM; /* teardown stops those started */
    }
    d->started = true;
  }
  return TDM_OK;
}

const tdm_backend tdm__sim_backend = {
    .name = "emulated",
    .discover = sim_discover,
    .release = sim_release,
    .cpu_factor = sim_cpu_factor,
    .start = sim_start,
    .stop = sim_stop,
    .prepare = sim_prepare,
    .push = sim_push,
    .take = sim_take,
    .kick = sim_kick,
    .current = sim_current,
    .progress = NULL,
    .trace_collect = NULL,
    .busy_ns = sim_busy_ns,
    .counters = sim_counters,
    .abandon = sim_abandon,
};
