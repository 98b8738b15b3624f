/*
 * The OpenCL backend: tasks on OpenCL devices, and their data on the
 * devices' memory.
 *
 * Devices. Each device used has a logical worker (no thread): a queue of
 * tasks placed on it, an in-order compute queue and an in-order transfer
 * queue (so that the inputs of one task are copied while the kernel before
 * it runs), and at most `cap` tasks in flight. Whatever thread places a
 * task, or processes a completion, "pumps" the device: under the device's
 * lock it enqueues the transfers and the kernel of queued tasks, without
 * waiting for any of them. Completion arrives through OpenCL event
 * callbacks, which only push the task on the runtime's completion stack
 * and wake a CPU worker; CPU workers finish those tasks (releasing their
 * successors) and pump the device again. No thread ever blocks on a device
 * operation, except the application's own thread in the calls documented
 * as blocking (acquire, unregister, destroy) when data must come home.
 *
 * Memory nodes. Node 0 is host memory (the application's buffers). A
 * device with memory of its own (discrete) is node 1 + k for device worker
 * k, with a buffer per handle made by clCreateBuffer on first use. A device
 * sharing the host's memory (integrated, CPU device) works on node 0
 * itself, through a CL_MEM_USE_HOST_PTR buffer over the application's
 * memory: nothing is copied; after a kernel writes, a map/unmap of the
 * buffer makes its writes visible to the host where an implementation
 * caches (no bytes move on such devices).
 *
 * Coherence is the runtime's (runtime/data/coherence.c): it decides what
 * is copied, and the backend only makes buffers and copies for it, with
 * OpenCL events as completion tokens (memnode.c). A CPU task whose inputs
 * are not on the host has their copies started and is queued again when
 * they complete. Programs and which devices may run a task: programs.c.
 * This file: the devices' lifecycle, clocks and trace, and running tasks.
 */
#include "../driver.h"
#include "opencl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TDM_HAVE_OPENCL

/* Built without the OpenCL headers: no device is ever found, so this
 * table is never used. */
const tdm_backend tdm__opencl_backend = {
    .name = "OpenCL",
    .discover = tdm__opencl_claim,
    .release = tdm__opencl_close,
};

#else
#include "device.h"

enum { RUNNING, ENDED, ABANDONED };

/* What a task on a device keeps until its commands complete. */
typedef struct exec {
  cl_device *dev;
  tdm_task *t;
  struct exec *next; /* in dev->flight */
  /* RUNNING; ENDED: its completion came and was posted; ABANDONED: its
   * device was found hung and the watchdog ended it (cl_abandon), so a
   * completion that comes later is ignored. */
  _Atomic int state;
  /* Freed when both are done with it: its token's waiter, and its end
   * in cl_progress (one when no waiter was registered). */
  _Atomic int refs;
  /* The watchdog watches it (it is the first in flight); then the
   * `hang` fault may take its completion as never coming. */
  _Atomic bool watched;
  cl_tok *done;      /* the last command's token: settled once it and the
                        inputs' copies have, failed if any of them failed */
  cl_event kernel;   /* while recording: the kernel itself */
  uint64_t launched; /* when its commands were enqueued */
  /* Its kernel's predicted time there, s (an adaptive window's; < 0:
   * not known, or not adaptive). */
  double predicted;
  _Atomic cl_int status; /* a failure of its own (a hand-over not enqueued) */
  /* On a device working in host memory: what the task writes, as it
   * was, to undo a run that fails (tdm__task_snapshot). */
  void *before;
  /* Nonzero: it was not launched (cancelled, or the launch failed), and
   * ends with this status when its completion is taken, on a thread that
   * holds no lock and is not in the application's call. */
  tdm_status unlaunched;
} exec;

/* The offset from the device's profiling clock to the host's: an empty
 * command's end, read against the host clock once it is done (off by the
 * time the host takes to see it: microseconds). */
static void sync_clocks(cl_device *g) {
  const cl_api *api = api_of(g->rt);
  cl_event e = NULL;
  cl_ulong end = 0;
  cl_int st = CL_QUEUED;
  /* looked at for a second at most, not waited for: a device that never
   * completes it does not stop the runtime's creation */
  uint64_t deadline = tdm__now_ns() + 1000000000u;
  if (api->EnqueueMarkerWithWaitList(g->compute, 0, NULL, &e) == CL_SUCCESS &&
      api->Flush(g->compute) == CL_SUCCESS)
    while (api->GetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) ==
               CL_SUCCESS &&
           st != CL_COMPLETE && st >= 0 && tdm__now_ns() < deadline)
      tdm__sleep_until(tdm__now_ns() + 50000);
  if (st == CL_COMPLETE &&
      api->GetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) ==
          CL_SUCCESS)
    g->clock_offset = (int64_t)tdm__now_ns() - (int64_t)end;
  else
    tdm__log(g->rt, TDM_LOG_WARNING, "OpenCL: device %u: no profiling clock; its times in the "
             "trace are the host's",
             g->device);
  if (e)
    api->ReleaseEvent(e);
}

/* The host times of a completed command; false when unknown. */
static bool command_times(const cl_device *g, cl_event e, uint64_t *t0, uint64_t *t1) {
  const cl_api *api = api_of(g->rt);
  cl_ulong start = 0, end = 0;
  if (!e || api->GetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof start, &start,
                                       NULL) != CL_SUCCESS ||
      api->GetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) !=
          CL_SUCCESS)
    return false;
  *t0 = (uint64_t)((int64_t)start + g->clock_offset);
  *t1 = (uint64_t)((int64_t)end + g->clock_offset);
  return true;
}

static uint64_t cl_busy_ns(const tdm_runtime *rt, unsigned k) {
  return cl_of(rt)->dev ? atomic_load(&dev_of(rt, k)->busy_ns) : 0;
}

static void add_to_buf(void *data, const tdm_trace_event *e);

/* Reads the times of the copies that are done (all of them when `all`:
 * at destroy, or waiting for them) into g->copies. */
static void resolve_copies(cl_device *g) {
  const cl_api *api = api_of(g->rt);
  TDM_PTHREAD(g->rt, pthread_mutex_lock(&g->trace_lock));
  size_t keep = 0;
  for (size_t i = 0; i < g->npending; i++) {
    struct pending_copy *c = &g->pending[i];
    cl_int st = CL_QUEUED;
    api->GetEventInfo(c->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
    uint64_t t0, t1;
    if (st != CL_COMPLETE && st >= 0) {
      g->pending[keep++] = *c;
      continue;
    }
    if (st == CL_COMPLETE && command_times(g, c->ev, &t0, &t1)) {
      tdm_trace_event e = {.kind = c->to_device ? TDM_EV_TO_DEVICE : TDM_EV_TO_HOST,
                           .track = (uint16_t)(g->rt->nworkers + g->k),
                           .t0 = t0,
                           .t1 = t1,
                           .bytes = c->bytes};
      add_to_buf(&g->copies, &e);
    }
    api->ReleaseEvent(c->ev);
  }
  g->npending = keep;
  TDM_PTHREAD(g->rt, pthread_mutex_unlock(&g->trace_lock));
}

static void add_to_buf(void *data, const tdm_trace_event *e) {
  tdm_trace_buf *b = data;
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    tdm_trace_event *ev = realloc(b->ev, cap * sizeof *ev);
    if (!ev)
      return; /* lost: the trace says less */
    b->ev = ev;
    b->cap = cap;
  }
  b->ev[b->n++] = *e;
}

static void cl_trace_collect(tdm_runtime *rt, void (*add)(void *, const tdm_trace_event *),
                            void *data) {
  const tdm_opencl *cl = cl_of(rt);
  for (unsigned i = 0; cl->dev && i < cl->n; i++) {
    cl_device *g = cl->dev[i];
    resolve_copies(g);
    TDM_PTHREAD(rt, pthread_mutex_lock(&g->trace_lock));
    for (size_t i = 0; i < g->copies.n; i++)
      add(data, &g->copies.ev[i]);
    TDM_PTHREAD(rt, pthread_mutex_unlock(&g->trace_lock));
  }
}

static tdm_status cl_start(tdm_runtime *rt) {
  tdm_opencl *cl = cl_of(rt);
  const tdm_attached *a = tdm__attached_of(rt, &tdm__opencl_backend);
  cl->first = a->first;
  cl->n = a->n;
  const cl_api *api = &cl->api;
  cl_device **all = tdm__calloc(rt, cl->n, sizeof *all);
  if (!all)
    return TDM_ERR_NO_MEMORY;
  cl->dev = all;
  for (unsigned k = cl->first; k < cl->first + cl->n; k++) {
    cl_device *g = tdm__calloc(rt, 1, sizeof *g);
    if (!g)
      return TDM_ERR_NO_MEMORY;
    all[k - cl->first] = g;
    unsigned d = rt->device_of[k];
    g->rt = rt;
    g->k = k;
    g->device = d;
    g->shared = rt->devices[d].shared_memory;
    g->ctx = cl->contexts[d];
    g->id = cl->ids[d];
    g->adaptive = !rt->cfg.device_tasks;
    g->cap = g->adaptive ? TDM_CL_WINDOW_MAX : rt->cfg.device_tasks;
    g->max_alloc = rt->devices[d].max_alloc;
    g->limit = rt->devices[d].global_mem ? rt->devices[d].global_mem : UINT64_MAX;
    if (rt->cfg.device_memory_limit && rt->cfg.device_memory_limit < g->limit)
      g->limit = rt->cfg.device_memory_limit;
    int err = pthread_mutex_init(&g->lock, NULL);
    if (!err && (err = pthread_mutex_init(&g->trace_lock, NULL)))
      pthread_mutex_destroy(&g->lock);
    if (err) {
      free(g);
      all[k - cl->first] = NULL;
      tdm__log(rt, TDM_LOG_ERROR, "pthread_mutex_init: %s", strerror(err));
      return TDM_ERR_SYSTEM;
    }
    cl_int e1 = CL_SUCCESS, e2 = CL_SUCCESS;
    /* recording: the device's own timestamps of each command */
    cl_command_queue_properties props = rt->recording ? CL_QUEUE_PROFILING_ENABLE : 0;
    g->compute = api->CreateCommandQueue(g->ctx, g->id, props, &e1);
    /* copies are always timed: they teach the link model */
    g->transfer = api->CreateCommandQueue(g->ctx, g->id, CL_QUEUE_PROFILING_ENABLE, &e2);
    if (!g->compute || !g->transfer) {
      tdm__log(rt, TDM_LOG_ERROR, "OpenCL: device %u (%s): no command queue (%s, error %d)",
               d, rt->devices[d].name, CL_ERR(e1 ? e1 : e2));
      return TDM_ERR_SYSTEM;
    }
    if (rt->recording)
      sync_clocks(g);
  }
  tdm_status st = tdm__tok_init(rt);
  if (!st)
    st = tdm__cl_watch_start(rt);
  if (!st)
    st = tdm__cl_builder_init(rt);
  if (st)
    return st;
  /* memory nodes: a device with memory of its own counts it */
  uint64_t limits[TDM_MAX_DEVICE_WORKERS];
  for (unsigned i = 0; i < cl->n; i++)
    limits[i] = all[i]->shared ? 0 : all[i]->limit;
  return tdm__nodes_add(&rt->nodes, &tdm__cl_node_ops, rt, cl->first, cl->n, limits);
}

static bool is_hung(const tdm_runtime *rt, unsigned k) {
  return atomic_load(&((tdm_runtime *)rt)->hung) >> k & 1;
}

/* Waits for every command and callback (the handles go next), except on
 * a device found hung: what it never completes is given up (a copy that
 * stalls now makes its device hung: tokens.c). */
static void cl_stop(tdm_runtime *rt) {
  const tdm_opencl *cl = cl_of(rt);
  if (!cl->dev)
    return;
  tdm__cl_builder_stop(rt); /* a build asked ahead of time may be going on */
  const cl_api *api = &cl->api;
  for (unsigned k = cl->first; k < cl->first + cl->n; k++) {
    cl_device *g = dev_of(rt, k);
    if (!g || !g->compute || !g->transfer)
      continue;
    if (!is_hung(rt, k)) {
      CL_CHECK(rt, api->Flush(g->compute), "clFlush");
      CL_CHECK(rt, api->Flush(g->transfer), "clFlush");
    }
    /* the callbacks of its commands: each settles a token */
    while (atomic_load(&g->events_pending) && !is_hung(rt, k))
      tdm__sleep_until(tdm__now_ns() + 100000);
    if (!is_hung(rt, k)) { /* all completed: these return at once */
      CL_CHECK(rt, api->Finish(g->compute), "clFinish");
      CL_CHECK(rt, api->Finish(g->transfer), "clFinish");
    }
  }
  tdm__cl_watch_stop(rt);
}

/* Frees the devices' state and the contexts. */
static void cl_release(tdm_runtime *rt) {
  tdm_opencl *cl = cl_of(rt);
  const cl_api *api = &cl->api;
  for (unsigned k = cl->first; cl->dev && k < cl->first + cl->n; k++) {
    cl_device *g = dev_of(rt, k);
    if (!g)
      continue;
    for (program *p = g->programs, *next; p; p = next) {
      next = p->next;
      if (p->kernel)
        api->ReleaseKernel(p->kernel);
      if (p->program)
        api->ReleaseProgram(p->program);
      free(p->params);
      free(p->declared);
      free(p->untold);
      free(p);
    }
    if (is_hung(rt, k) && atomic_load(&g->events_pending)) {
      /* a driver may block releasing a queue whose commands never end */
      tdm__log(rt, TDM_LOG_WARNING, "OpenCL: device %u is hung: its queues and the "
               "commands that never completed are left behind", g->device);
    } else {
      if (g->compute)
        api->ReleaseCommandQueue(g->compute);
      if (g->transfer)
        api->ReleaseCommandQueue(g->transfer);
    }
    double lat, bw;
    if (tdm__link_estimate(&g->link, &lat, &bw))
      tdm__log(rt, TDM_LOG_INFO, "OpenCL: device %u: link learnt from %u copies timed: "
               "latency %.1f us, bandwidth %.2f GB/s", g->device, g->link.n, lat * 1e6,
               bw / 1e9);
    else if (g->link.n)
      tdm__log(rt, TDM_LOG_INFO, "OpenCL: device %u: link not learnt from %u copies timed: "
               "too few sizes, or times that did not grow with size", g->device, g->link.n);
    for (size_t i = 0; i < g->npending; i++)
      api->ReleaseEvent(g->pending[i].ev);
    free(g->pending);
    free(g->copies.ev);
    pthread_mutex_destroy(&g->lock);
    pthread_mutex_destroy(&g->trace_lock);
    free(g);
  }
  free(cl->dev);
  cl->dev = NULL;
  tdm__tok_fini(rt);
  tdm__opencl_close(rt);
}

/* ---- completions ---------------------------------------------------------- */

/* t's completion is ready for cl_progress. */
static void post_completion(tdm_runtime *rt, tdm_task *t) {
  tdm_opencl *cl = cl_of(rt);
  tdm_task *head = atomic_load_explicit(&cl->completions, memory_order_relaxed);
  if (!head) /* (the watcher reads it only while some completion waits) */
    atomic_store_explicit(&cl->completions_since, tdm__now_ns(), memory_order_relaxed);
  do
    t->pool_next = head;
  while (!atomic_compare_exchange_weak(&cl->completions, &head, t));
  tdm__wake_for_completion(rt);
  tdm__cl_watch_wake(rt); /* posted from outside a watched callback */
}

static void exec_unref(exec *x) {
  if (atomic_fetch_sub(&x->refs, 1) == 1)
    free(x);
}

/* x's token settled: its commands completed, and its inputs' copies;
 * status < 0 if any of them failed, however the driver said so. */
static void exec_settled(void *data, cl_int status) {
  exec *x = data;
  tdm_runtime *rt = x->dev->rt;
  if (status < 0)
    atomic_store(&x->status, status);
  int running = RUNNING;
  /* the hang fault: as if this completion never came */
  bool lost = atomic_load(&x->watched) && tdm__fault(rt, TDM_FAULT_HANG, x->dev->k) ==
                                              TDM_ERR_SYSTEM;
  if (!lost && atomic_compare_exchange_strong(&x->state, &running, ENDED))
    post_completion(rt, x->t);
  exec_unref(x);
}

/* Device worker k is hung: its tries in flight end (cl_progress undoes
 * them); completions that come later are ignored (on_complete). */
static void cl_abandon(tdm_runtime *rt, unsigned k) {
  cl_device *g = dev_of(rt, k);
  /* first: a thread may wait for one of them under g->lock */
  tdm__tok_fail_device(rt, k);
  TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
  /* under the lock: an exec leaves the list (and may be freed) under it */
  for (exec *x = g->flight; x; x = x->next) {
    int running = RUNNING;
    if (atomic_compare_exchange_strong(&x->state, &running, ABANDONED))
      post_completion(rt, x->t);
  }
  g->flight = g->flight_tail = NULL;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
}

/* x, launched on g, joins the tries in flight there; the first one is
 * watched from its launch. g->lock held. */
static void fly(cl_device *g, exec *x) {
  x->next = NULL;
  if (g->flight_tail) {
    g->flight_tail->next = x;
  } else {
    g->flight = x;
    atomic_store(&x->watched, tdm__watch(g->rt, g->k, x->t, x->launched));
  }
  g->flight_tail = x;
}

/* x's completion was taken: it leaves the tries in flight; the next one
 * runs from now, watched. g->lock held. */
static void land(cl_device *g, exec *x, uint64_t now) {
  exec **at = &g->flight, *prev = NULL;
  while (*at && *at != x) {
    prev = *at;
    at = &(*at)->next;
  }
  if (!*at)
    return; /* abandoned: the list was emptied */
  bool first = at == &g->flight;
  *at = x->next;
  if (g->flight_tail == x)
    g->flight_tail = prev;
  if (!first)
    return;
  exec *next = g->flight;
  bool hung = atomic_load_explicit(&g->rt->hung, memory_order_relaxed) >> g->k & 1;
  if (next && !hung)
    atomic_store(&next->watched, tdm__watch(g->rt, g->k, next->t, now));
  else
    tdm__watch(g->rt, g->k, NULL, 0);
}

static void pump(cl_device *g);

/* The status of a failed command: the device is gone for errors that
 * say so, else a failure of this command. */
static tdm_status status_of(cl_int err) {
  return err == CL_DEVICE_NOT_AVAILABLE || err == CL_INVALID_CONTEXT ||
                 err == CL_INVALID_COMMAND_QUEUE || err == CL_INVALID_DEVICE
             ? TDM_ERR_DEVICE_LOST
             : TDM_ERR_SYSTEM;
}

/* t's commands on its device completed: what they took, then the task. */
static void completed(tdm_runtime *rt, tdm_task *t) {
  const cl_api *api = api_of(rt);
  exec *x = t->dx;
  t->dx = NULL;
  cl_device *g = x->dev;
  tdm_status unlaunched = x->unlaunched;
  if (unlaunched) { /* nothing of it ran there: its end only */
    exec_unref(x);
    tdm__task_done(t, rt->nworkers + g->k, unlaunched, 0, 0);
    return;
  }
  bool abandoned = atomic_load(&x->state) == ABANDONED;
  cl_int status = abandoned ? CL_DEVICE_NOT_AVAILABLE : atomic_load(&x->status);
  tdm_status fault = status >= 0 ? tdm__fault(rt, TDM_FAULT_COMPLETE, g->k) : TDM_OK;
  if (fault) /* as the device would say it */
    status = fault == TDM_ERR_DEVICE_LOST ? CL_DEVICE_NOT_AVAILABLE : CL_OUT_OF_RESOURCES;
  if (status < 0) { /* what it wrote there is no version */
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: codelet %s on device %u %s (%s, error %d)",
             tdm__codelet_name(t), g->device,
             abandoned ? "abandoned: the device is hung" : "failed", CL_ERR(status));
    tdm__task_write_failed(rt, t, node_of(g), x->before);
    x->before = NULL;
    /* its commands given up before they ended (a hung device): a kernel
     * Tandem cannot stop may still write the host's memory, over a
     * retry's results, so the task fails (told) */
    if (g->shared && !tdm__tok_ran(x->done))
      t->spoiled = true;
  } else {
    tdm__task_write_back(rt, t, node_of(g));
  }
  free(x->before);
  tdm__tok_release(x->done);
  tdm__task_unpin(rt, t, 1 + g->k, t->nbuf);
  atomic_fetch_add_explicit(&g->tasks, 1, memory_order_relaxed);
  uint64_t now = tdm__now_ns(), t0, t1;
  TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
  g->inflight--;
  land(g, x, now);
  if (!command_times(g, x->kernel, &t0, &t1)) {
    /* in-order queue: it ran after its launch and the one before */
    t0 = x->launched > g->last_done ? x->launched : g->last_done;
    t1 = now > t0 ? now : t0;
  }
  atomic_fetch_add_explicit(&g->busy_ns, t1 - t0, memory_order_relaxed);
  g->last_done = now;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
  if (x->kernel)
    api->ReleaseEvent(x->kernel);
  exec_unref(x);
  tdm__task_done(t, rt->nworkers + g->k, status < 0 ? status_of(status) : TDM_OK, t0, t1);
}

/* seq_cst: a worker's look before it parks or benches pairs with the
 * push's (see tdm__wake_for_completion). */
static bool cl_ended(const tdm_runtime *rt) {
  return atomic_load(&cl_of(rt)->completions) != NULL;
}

static bool cl_progress(tdm_runtime *rt);

bool tdm__cl_completions_waiting(const tdm_runtime *rt) {
  return atomic_load_explicit(&cl_of(rt)->completions, memory_order_relaxed) != NULL;
}

void tdm__cl_progress_late(tdm_runtime *rt, uint64_t late_ns) {
  tdm_opencl *cl = cl_of(rt);
  if (tdm__cl_completions_waiting(rt) &&
      tdm__now_ns() - atomic_load_explicit(&cl->completions_since, memory_order_relaxed) >=
          late_ns)
    cl_progress(rt);
}

void tdm__cl_pump_windows(tdm_runtime *rt) {
  tdm_opencl *cl = cl_of(rt);
  for (unsigned k = cl->first; k < cl->first + cl->n; k++) {
    cl_device *g = dev_of(rt, k);
    if (!g->adaptive)
      continue;
    TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
    bool flying = g->inflight > 0;
    TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
    if (flying)
      pump(g);
  }
}

static bool cl_progress(tdm_runtime *rt) {
  tdm_opencl *cl = cl_of(rt);
  if (!atomic_load_explicit(&cl->completions, memory_order_relaxed))
    return false;
  tdm_task *t = atomic_exchange_explicit(&cl->completions, NULL, memory_order_acquire);
  if (!t)
    return false;
  bool pumped[TDM_MAX_DEVICE_WORKERS] = {false};
  while (t) {
    tdm_task *next = t->pool_next;
    pumped[((exec *)t->dx)->dev->k] = true;
    completed(rt, t);
    t = next;
  }
  for (unsigned k = cl->first; k < cl->first + cl->n; k++)
    if (pumped[k])
      pump(dev_of(rt, k));
  return true;
}

/* ---- running a task on a device ----------------------------------------- */

static cl_int set_args(const cl_api *api, cl_kernel kernel, const tdm_task *t,
                       const cl_mem *mems, bool shared) {
  cl_uint a = 0;
  cl_int err = CL_SUCCESS;
  tdm_handle *const *hs = tdm__task_handles(t);
  bool pointers = tdm__cl_flags(t->codelet->opencl) & TDM_OPENCL_POINTERS;
  for (unsigned i = 0; i < t->nbuf && err == CL_SUCCESS; i++) {
    const tdm_buffer *b = &hs[i]->buf;
    err = api->SetKernelArg(kernel, a++, sizeof(cl_mem), &mems[i]);
    if (pointers) {
      continue;
    } else if (hs[i]->kind == TDM_HANDLE_VECTOR) {
      cl_ulong n = b->nx;
      if (err == CL_SUCCESS)
        err = api->SetKernelArg(kernel, a++, sizeof n, &n);
    } else {
      /* a device with memory of its own holds the elements packed */
      cl_ulong dims[3] = {b->nx, b->ny, shared ? b->ld : b->ny};
      for (int d = 0; d < 3 && err == CL_SUCCESS; d++)
        err = api->SetKernelArg(kernel, a++, sizeof dims[d], &dims[d]);
    }
  }
  size_t args_size = tdm__task_args_size(t); /* a chunk's tail is not the kernel's */
  if (err == CL_SUCCESS && args_size)
    err = api->SetKernelArg(kernel, a++, args_size, t->args);
  return err;
}

static void default_work_size(const tdm_buffer *b, bool vector, unsigned *dims, size_t *global) {
  if (vector) {
    *dims = 1;
    global[0] = b->nx;
  } else {
    *dims = 2;
    global[0] = b->ny;
    global[1] = b->nx;
  }
}

/* The arguments Tandem passes a codelet's kernel, as a C parameter list
 * (set_args' order), into out: for the hint when the kernel's own list
 * differs. Returns how many there are. */
static unsigned describe_args(const tdm_task *t, bool shared, char *out, size_t n) {
  tdm_handle *const *hs = tdm__task_handles(t);
  bool pointers = tdm__cl_flags(t->codelet->opencl) & TDM_OPENCL_POINTERS;
  size_t at = 0;
  unsigned count = tdm__task_args_size(t) != 0;
#define PUT(...)                                                               \
  do {                                                                         \
    int w = snprintf(at < n ? out + at : NULL, at < n ? n - at : 0, __VA_ARGS__); \
    at += w > 0 ? (size_t)w : 0;                                               \
  } while (0)
  PUT("(");
  for (unsigned i = 0; i < t->nbuf; i++) {
    const tdm_buffer *b = &hs[i]->buf;
    count += pointers ? 1 : hs[i]->kind == TDM_HANDLE_VECTOR ? 2 : 4;
    if (pointers)
      PUT("%s__global T%u *%c%u /* %zu x %zu elements of %zu bytes */", i ? ", " : "", i,
          hs[i]->kind == TDM_HANDLE_VECTOR ? 'v' : 'm', i, b->rows, b->cols, b->elem_size);
    else if (hs[i]->kind == TDM_HANDLE_VECTOR)
      PUT("%s__global T%u *v%u /* %zu elements of %zu bytes */, ulong n%u", i ? ", " : "", i,
          i, b->nx, b->elem_size, i);
    else
      PUT("%s__global T%u *m%u /* %zu x %zu elements of %zu bytes */, ulong rows%u, "
          "ulong cols%u, ulong ld%u /* %zu */",
          i ? ", " : "", i, i, b->nx, b->ny, b->elem_size, i, i, i, shared ? b->ld : b->ny);
  }
  if (tdm__task_args_size(t))
    PUT("%sstruct args /* %zu bytes, by value */", t->nbuf ? ", " : "",
        tdm__task_args_size(t));
  PUT(")");
#undef PUT
  if (at >= n && n > 4)
    strcpy(out + n - 4, "...");
  return count;
}

/* Whether err, from setting up or enqueueing a kernel (or from an
 * enqueue function), says that the program is wrong, not the device: its
 * parameters do not take what it was given, or its work size cannot be
 * launched. Such an error disables the variant on that device (disable)
 * and never counts as the device failing. */
static bool programming_error(cl_int err) {
  switch (err) {
  case CL_INVALID_ARG_INDEX:
  case CL_INVALID_ARG_SIZE:
  case CL_INVALID_ARG_VALUE:
  case CL_INVALID_KERNEL_ARGS:
  case CL_INVALID_MEM_OBJECT:
  case CL_INVALID_SAMPLER:
  case CL_INVALID_WORK_DIMENSION:
  case CL_INVALID_WORK_GROUP_SIZE:
  case CL_INVALID_WORK_ITEM_SIZE:
  case CL_INVALID_GLOBAL_OFFSET:
  case CL_INVALID_GLOBAL_WORK_SIZE:
    return true;
  default:
    return false;
  }
}

/* p's variant cannot run on g as written: disabled there (its status
 * TDM_ERR_KERNEL: what is placed here goes elsewhere, later submissions
 * leave g out), logged once with `why`, and kept to be told to the
 * application outside g's lock (tdm__cl_unbuildable). g->lock held. */
static void disable(cl_device *g, program *p, const tdm_task *t, const char *why) {
  tdm_runtime *rt = g->rt;
  char list[640];
  unsigned passed = describe_args(t, g->shared, list, sizeof list);
  const char *kernel = t->codelet->opencl->enqueue ? "(its enqueue function)"
                                                   : t->codelet->opencl->kernel;
  char msg[1536];
  if (t->codelet->opencl->enqueue)
    snprintf(msg, sizeof msg, "%s", why);
  else if (p->declared)
    snprintf(msg, sizeof msg, "%s; the kernel declares (%s); Tandem passes %s", why, p->declared,
             list);
  else
    snprintf(msg, sizeof msg, "%s; the kernel declares %u parameters; Tandem passes %u: %s", why,
             p->nparams, passed, list);
  p->status = TDM_ERR_KERNEL;
  tdm__log(rt, TDM_LOG_ERROR, "OpenCL: codelet %s, kernel %s, on device %u (%s): %s; its OpenCL "
           "variant is disabled on this device (TDM_ERR_KERNEL), which goes on running other "
           "codelets",
           tdm__codelet_name(t), kernel, g->device, rt->devices[g->device].name, msg);
  free(p->untold);
  size_t len = strlen(msg) + 1;
  p->untold = tdm__malloc(rt, len);
  if (p->untold)
    memcpy(p->untold, msg, len);
}

/* What Tandem passes a parameter: a buffer's pointer (elements of
 * `elem` bytes), a ulong (a shape), or the task's by-value arguments. */
enum { PASS_POINTER, PASS_ULONG, PASS_ARGS };

/* A parameter of p's kernel against what Tandem passes there (`bytes`:
 * the elements' size of a buffer, the by-value arguments' size); why not,
 * into why. */
static bool param_fits(const program *p, unsigned i, int pass, size_t bytes, const char *what,
                       char *why, size_t n) {
  const param *pa = &p->params[i];
  if (pa->kind == PARAM_UNKNOWN)
    return true;
  if (pa->kind == PARAM_OTHER) {
    snprintf(why, n, "parameter %u is a %s, which Tandem never passes (it passes %s there)", i,
             pa->type, what);
    return false;
  }
  if (pass == PASS_POINTER && pa->kind != PARAM_POINTER) {
    snprintf(why, n, "parameter %u (%s) is not a __global or __constant pointer, where Tandem "
             "passes %s", i, pa->type, what);
    return false;
  }
  if (pass == PASS_POINTER && pa->pointee && (pa->pointee > bytes || bytes % pa->pointee)) {
    snprintf(why, n, "parameter %u points to %u-byte elements (%s), where Tandem passes %s, of "
             "%zu-byte elements", i, pa->pointee, pa->type, what, bytes);
    return false;
  }
  if (pass != PASS_POINTER && pa->kind != PARAM_VALUE) {
    snprintf(why, n, "parameter %u is a %s pointer, where Tandem passes %s (by value)", i,
             pa->kind == PARAM_LOCAL ? "__local" : "__global", what);
    return false;
  }
  if (pass == PASS_ULONG && pa->size && (pa->size != 8 || !pa->integer)) {
    snprintf(why, n, "parameter %u is a %s (%u bytes), where Tandem passes %s (8 bytes)", i,
             pa->type, pa->size, what);
    return false;
  }
  if (pass == PASS_ARGS && pa->size && pa->size != bytes) {
    snprintf(why, n, "parameter %u takes %u bytes, where Tandem passes %s (%zu bytes)", i,
             pa->size, what, bytes);
    return false;
  }
  return true;
}

/* Whether p's kernel declares parameters that take t's arguments (their
 * count always; their kinds and sizes where the driver reported them);
 * why not, into why. */
static bool args_fit(const program *p, const tdm_task *t, char *why, size_t n) {
  if (!p->params && p->nparams) /* nothing known */
    return true;
  tdm_handle *const *hs = tdm__task_handles(t);
  bool pointers = tdm__cl_flags(t->codelet->opencl) & TDM_OPENCL_POINTERS;
  static const char *const shape[] = {"the rows", "the columns", "the ld"};
  unsigned at = 0;
  char what[96];
  for (unsigned i = 0; i < t->nbuf; i++) {
    bool vector = hs[i]->kind == TDM_HANDLE_VECTOR;
    unsigned values = pointers ? 0 : vector ? 1 : 3;
    if (at + 1 + values > p->nparams)
      break; /* the count says it */
    snprintf(what, sizeof what, "buffer %u's data", i);
    if (!param_fits(p, at++, PASS_POINTER, hs[i]->buf.elem_size, what, why, n))
      return false;
    for (unsigned v = 0; v < values; v++) {
      snprintf(what, sizeof what, "a ulong, %s of buffer %u", vector ? "the count" : shape[v], i);
      if (!param_fits(p, at++, PASS_ULONG, 8, what, why, n))
        return false;
    }
  }
  unsigned expected = describe_args(t, false, NULL, 0); /* the count alone */
  if (expected != p->nparams) {
    snprintf(why, n, "its kernel declares %u parameters where Tandem passes %u", p->nparams,
             expected);
    return false;
  }
  if (tdm__task_args_size(t) && !param_fits(p, at, PASS_ARGS, tdm__task_args_size(t),
                                            "the task's by-value arguments", why, n))
    return false;
  return true;
}

/* What launch did: LAUNCHED (or ended it), RETRY (no room yet), FAILED
 * (stage's), UNBUILT (its program is still building: it waits in
 * g->unbuilt), NOT_HERE (its program did not build here: it goes
 * elsewhere). */
enum { LAUNCHED, RETRY, FAILED, UNBUILT, NOT_HERE };

/* Waits for the tokens of ts to settle; whether one failed. */
static bool settle_all(const tdm_tokens *ts) {
  bool failed = false;
  for (unsigned i = 0; i < ts->n; i++) {
    cl_tok *tok = tdm__tok_of(ts->v[i]);
    tdm__tok_wait(tok);
    failed |= tok && tdm__tok_status(tok) < 0;
  }
  return failed;
}

/* Makes t's buffers on g (pinned) and starts the copies of its inputs,
 * into mems, bufs (as the kernel sees them), ts (their tokens: what the
 * kernel comes after) and w (what the kernel's command waits for).
 * RETRY, nothing done, when they do not fit until tasks in flight
 * finish. */
static int stage(cl_device *g, tdm_task *t, cl_mem *mems, tdm_buffer *bufs, tdm_tokens *ts,
                 waitlist *w, tdm_status *why) {
  tdm_runtime *rt = g->rt;
  const char *name = tdm__codelet_name(t);
  *why = TDM_ERR_SYSTEM;
  if (!tdm__task_pin(rt, t, 1 + g->k, (void **)mems)) {
    if (g->inflight) /* room comes back as they finish */
      return RETRY;
    *why = TDM_ERR_TOO_LARGE;
    tdm__log(rt, TDM_LOG_ERROR,
             "OpenCL: codelet %s: its buffers do not fit in device %u's memory (limit %llu "
             "bytes)",
             name, g->device, (unsigned long long)g->limit);
    return FAILED;
  }
  tdm_handle *const *hs = tdm__task_handles(t);
  for (unsigned i = 0; i < t->nbuf; i++) {
    bufs[i] = hs[i]->buf;
    if (!g->shared) /* the device holds the elements packed */
      bufs[i].ld = bufs[i].ny;
  }
  bool ok = tdm__task_access(rt, t, 1 + g->k, node_of(g), ts, false);
  if (ok && !tdm__cl_waitlist_of(rt, g->ctx, w, ts->v, ts->n)) {
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: codelet %s on device %u: a copy of its inputs failed",
             name, g->device);
    ok = false;
  }
  if (!ok) { /* the copies it started read memory that a retry may write */
    settle_all(ts);
    tdm__tokens_release(&rt->nodes, ts);
    tdm__task_unpin(rt, t, 1 + g->k, t->nbuf);
    return FAILED;
  }
  return LAUNCHED;
}

/* Enqueues t's kernel (or its enqueue function) after w; *done its event. */
static cl_int enqueue(cl_device *g, tdm_task *t, const cl_mem *mems, const tdm_buffer *bufs,
                      const waitlist *w, cl_event *done) {
  const cl_api *api = api_of(g->rt);
  program *p = tdm__cl_program_of(g, t->codelet);
  const tdm_opencl_variant *v = t->codelet->opencl;
  if (!p || p->status)
    return CL_BUILD_PROGRAM_FAILURE;
  if (v->enqueue) {
    cl_event ready = NULL;
    cl_int err = w->n ? api->EnqueueMarkerWithWaitList(g->compute, w->n, w->ev, &ready)
                      : CL_SUCCESS;
    if (ready)
      api->ReleaseEvent(ready);
    if (err == CL_SUCCESS)
      TDM_LOCKED_CODE(g->rt, err = v->enqueue(g->compute, (cl_mem *)mems, bufs, t->args, t->args_size,
                                     done));
    return err;
  }
  unsigned dims = 0;
  size_t global[3] = {1, 1, 1}, local[3] = {0, 0, 0}, offset[3] = {0, 0, 0};
  if (t->chunk) { /* a data-parallel operation's chunk: its range (tandem.h) */
    tdm_chunk_tail c = tdm__chunk_tail(t);
    dims = c.dims;
    size_t rows = c.range.end[0] - c.range.begin[0];
    global[0] = dims == 2 ? c.range.end[1] : rows;
    global[1] = dims == 2 ? rows : 1;
    offset[dims == 2 ? 1 : 0] = c.range.begin[0];
    if (c.group) { /* a reduction: work-groups of c.group along dimension 0 */
      global[0] = (global[0] + c.group - 1) / c.group * c.group;
      local[0] = c.group;
      local[1] = local[2] = 1;
    }
  } else if (v->work_size)
    TDM_LOCKED_CODE(g->rt, v->work_size(bufs, t->args, t->args_size, &dims, global, local));
  else if (t->nbuf)
    default_work_size(&bufs[0], tdm__task_handles(t)[0]->kind == TDM_HANDLE_VECTOR, &dims,
                      global);
  else
    dims = 1;
  if (dims < 1 || dims > 3)
    return CL_INVALID_WORK_DIMENSION;
  for (unsigned d = 0; d < dims; d++)
    if (!global[d]) /* OpenCL 2.1 runs nothing and says success: no work is no task */
      return CL_INVALID_GLOBAL_WORK_SIZE;
  cl_int err = set_args(api, p->kernel, t, mems, g->shared);
  if (err == CL_SUCCESS)
    err = api->EnqueueNDRangeKernel(g->compute, p->kernel, dims, t->chunk ? offset : NULL, global,
                                    local[0] ? local : NULL, w->n, w->n ? w->ev : NULL, done);
  return err;
}

/* Command e of g's compute queue (its reference taken over), after the
 * one *done stands for, becomes *done through t, a token not started. */
static void chain(cl_device *g, cl_tok *t, cl_event e, cl_tok **done) {
  tdm_token before = tdm__tok_token(*done);
  tdm__tok_start(t, e, g->ctx, (int)g->k, 0, 0, &before, 1);
  tdm__tok_release(*done);
  *done = t;
}

/* On a device working in host memory, a map/unmap of each written buffer
 * after the kernel (event *last) hands its writes to the host where an
 * implementation caches; *done becomes the last one's token, *last its
 * event. False when one of them could not be enqueued (logged): the try
 * fails. */
static bool hand_over(cl_device *g, tdm_task *t, const cl_mem *mems, cl_tok **done,
                      cl_event *last) {
  tdm_runtime *rt = g->rt;
  const cl_api *api = api_of(rt);
  tdm_handle *const *hs = tdm__task_handles(t);
  const uint8_t *modes = tdm__task_modes(t);
  for (unsigned i = 0; i < t->nbuf && g->shared; i++) {
    if (!(modes[i] & TDM_W))
      continue;
    cl_int merr = CL_SUCCESS, uerr = CL_SUCCESS;
    cl_event mapped = NULL, unmapped = NULL;
    cl_tok *tm = tdm__tok_alloc(rt), *tu = tm ? tdm__tok_alloc(rt) : NULL;
    void *ptr = tu ? api->EnqueueMapBuffer(g->compute, mems[i], CL_FALSE,
                                           CL_MAP_READ | CL_MAP_WRITE, 0, tdm__coh_span(hs[i]),
                                           1, last, &mapped, &merr)
                   : NULL;
    if (ptr && mapped)
      uerr = api->EnqueueUnmapMemObject(g->compute, mems[i], ptr, 1, &mapped, &unmapped);
    if (mapped) { /* its token, so that its failure counts */
      chain(g, tm, mapped, done);
      tm = NULL;
    }
    if (unmapped) {
      if (api->RetainEvent(unmapped) == CL_SUCCESS) {
        api->ReleaseEvent(*last);
        *last = unmapped;
      }
      chain(g, tu, unmapped, done);
      tu = NULL;
    }
    tdm__tok_release(tm);
    tdm__tok_release(tu);
    if (!ptr || !mapped || uerr != CL_SUCCESS || !unmapped) {
      tdm__log(rt, TDM_LOG_ERROR, "OpenCL: the map of a written buffer failed (%s, error %d)",
               CL_ERR(ptr && mapped ? uerr : merr ? merr : CL_OUT_OF_HOST_MEMORY));
      return false;
    }
  }
  return true;
}

/* An enqueue function that failed may have enqueued commands before it
 * did: on a device working in host memory those write the application's
 * memory, so the try is undone (x->before put back) once they have
 * ended, which a marker after them says. g->lock held, as for the waits
 * of the other failure paths (a hung device ends the wait). */
static void undo_enqueue_function(cl_device *g, tdm_task *t, exec *x) {
  tdm_runtime *rt = g->rt;
  const cl_api *api = api_of(rt);
  cl_event m = NULL;
  cl_tok *tok = tdm__tok_alloc(rt);
  if (tok && api->EnqueueMarkerWithWaitList(g->compute, 0, NULL, &m) == CL_SUCCESS && m) {
    tdm__tok_start(tok, m, g->ctx, (int)g->k, 0, 0, NULL, 0); /* m is its now */
    CL_CHECK(rt, api->Flush(g->compute), "clFlush");
    tdm__tok_wait(tok);
  } else {
    CL_CHECK(rt, api->Finish(g->compute), "clFinish");
  }
  tdm__tok_release(tok);
  tdm__task_write_failed(rt, t, 0, x->before); /* frees it */
  x->before = NULL;
}

/* t, which g did not launch, ends with `why` from cl_progress: its
 * callback, or its retry's placement, never runs under g->lock nor in the
 * application's call that made it ready (tdm_submit). */
static void unlaunched(cl_device *g, tdm_task *t, exec *x, tdm_status why) {
  x->dev = g;
  x->unlaunched = why;
  t->dx = x;
  post_completion(g->rt, t);
}

/* Enqueues t's transfers and kernel on g; g->lock held. Returns RETRY,
 * with nothing done, when its buffers do not fit on the device until
 * tasks in flight finish; UNBUILT or NOT_HERE, nothing done, when its
 * program is building or did not build here. A task it does not launch
 * (cancelled, or its launch failed: logged, its outputs untouched) ends
 * through cl_progress (unlaunched). */
static int launch(cl_device *g, tdm_task *t) {
  tdm_runtime *rt = g->rt;
  program *p = NULL;
  if (!tdm__task_outcome_at_start(t)) {
    p = tdm__cl_program_of(g, t->codelet);
    if (p && p->building)
      return UNBUILT;
    if (p && p->status)
      return NOT_HERE;
    char why[256];
    if (p && !t->codelet->opencl->enqueue && !args_fit(p, t, why, sizeof why)) {
      disable(g, p, t, why);
      return NOT_HERE;
    }
  }
  const cl_api *api = api_of(rt);
  const char *name = tdm__codelet_name(t);
  /* past TDM_MAX_BUFFERS, the task's own room (cl_mem is a pointer) */
  cl_mem mems_room[TDM_MAX_BUFFERS], *mems = t->more ? (cl_mem *)t->more->mems : mems_room;
  tdm_buffer bufs_room[TDM_MAX_BUFFERS], *bufs = tdm__task_views(t, bufs_room);
  waitlist w = {.n = 0};
  tdm_tokens ts;
  tdm__tokens_init(&ts);
  exec *x = tdm__calloc(rt, 1, sizeof *x);
  /* the kernel's token, before anything is enqueued */
  cl_tok *done = x ? tdm__tok_alloc(rt) : NULL;
  if (x)
    atomic_init(&x->refs, 1);
  tdm_status why = TDM_ERR_NO_MEMORY;
  int st = FAILED;
  tdm_status cancelled = tdm__task_outcome_at_start(t);
  if (cancelled && x) { /* cancelled, or taken from a CPU worker's deque: it ends */
    tdm__tok_release(done);
    unlaunched(g, t, x, cancelled);
    return LAUNCHED;
  }
  if (!x || !done)
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: out of memory launching codelet %s", name);
  else if ((why = tdm__fault(rt, TDM_FAULT_LAUNCH, g->k)))
    ; /* as an enqueue that failed before staging */
  else
    st = stage(g, t, mems, bufs, &ts, &w, &why);
  if (st == RETRY) {
    tdm__tok_release(done);
    free(x);
    return RETRY;
  }
  if (st == LAUNCHED && g->shared) { /* its writes land in host memory */
    bool kept = true;
    /* what the host has is not what it will run on until its inputs land
     * (they come from other devices: their tokens, never an event wait
     * that a failed command would make endless) */
    bool failed = settle_all(&ts);
    if (failed)
      tdm__log(rt, TDM_LOG_ERROR, "OpenCL: codelet %s: its inputs did not arrive", name);
    else
      x->before = tdm__task_snapshot(rt, t, &kept);
    if (!kept || failed) {
      tdm__cl_release_all(api, &w);
      tdm__tokens_release(&rt->nodes, &ts);
      tdm__task_unpin(rt, t, 1 + g->k, t->nbuf);
      why = kept ? TDM_ERR_SYSTEM : TDM_ERR_NO_MEMORY;
      st = FAILED;
    }
  }
  cl_event ev = NULL;
  if (st == LAUNCHED) {
    cl_int err = enqueue(g, t, mems, bufs, &w, &ev);
    tdm__cl_release_all(api, &w);
    if (err == CL_SUCCESS && !ev) {
      tdm__log(rt, TDM_LOG_ERROR, "OpenCL: codelet %s: its enqueue function gave no event",
               name);
      err = CL_INVALID_EVENT;
    }
    cl_int evst = CL_QUEUED;
    if (err == CL_SUCCESS && t->codelet->opencl->enqueue &&
        api->GetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof evst, &evst, NULL) ==
            CL_SUCCESS &&
        evst < 0) { /* an enqueue function's event failed already: what waits on it would not run */
      tdm__log(rt, TDM_LOG_ERROR, "OpenCL: codelet %s: its enqueue function's event had failed "
               "already (%s, error %d)", name, CL_ERR(evst));
      err = evst;
    }
    /* an enqueue function's positive return is no OpenCL status at all */
    bool wrong = err != CL_SUCCESS && p &&
                 (programming_error(err) || (t->codelet->opencl->enqueue && err > 0));
    if (wrong) {
      char msg[160];
      snprintf(msg, sizeof msg, "%s (%s, error %d)",
               t->codelet->opencl->enqueue ? "its enqueue function returned an error that says "
                                             "its arguments or work size are wrong"
                                           : "the driver refused to launch it",
               CL_ERR(err));
      disable(g, p, t, msg);
    } else if (err != CL_SUCCESS) {
      tdm__log(rt, TDM_LOG_ERROR, "OpenCL: codelet %s on device %u: enqueue failed (%s, error %d)",
               name, g->device, CL_ERR(err));
    }
    if (err != CL_SUCCESS) {
      if (ev)
        api->ReleaseEvent(ev);
      if (g->shared && t->codelet->opencl->enqueue && x->before)
        undo_enqueue_function(g, t, x);
      /* the copies it started read memory that a retry may write */
      settle_all(&ts);
      tdm__tokens_release(&rt->nodes, &ts);
      tdm__task_unpin(rt, t, 1 + g->k, t->nbuf);
      why = err == CL_BUILD_PROGRAM_FAILURE ? TDM_ERR_BUILD : status_of(err);
      st = FAILED;
    }
    if (wrong) { /* not the device's failure: placed again without it */
      tdm__tok_release(done);
      free(x->before);
      free(x);
      return NOT_HERE;
    }
  }
  if (st == FAILED) { /* it ends, so that the graph goes on */
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: codelet %s did not run; its outputs are unchanged",
             name);
    tdm__tok_release(done);
    if (x) {
      free(x->before); /* it did not run */
      x->before = NULL;
      unlaunched(g, t, x, why);
    } else { /* no room to post it: ended here, not under the lock */
      TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
      tdm__task_done(t, rt->nworkers + g->k, cancelled ? cancelled : why, 0, 0);
      TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
    }
    return LAUNCHED;
  }
  x->launched = tdm__now_ns();
  x->predicted = -1;
  if (g->adaptive) {
    bool calibrated = false;
    double p = tdm__sched_predict_on(rt, t, g->k, &calibrated); /* takes no lock */
    x->predicted = calibrated ? p : -1;
  }
  if (rt->recording && api->RetainEvent(ev) == CL_SUCCESS)
    x->kernel = ev; /* before a map/unmap follows it */
  /* the kernel comes after its inputs' copies: their failure is its */
  cl_event last = api->RetainEvent(ev) == CL_SUCCESS ? ev : NULL;
  tdm__tok_start(done, ev, g->ctx, (int)g->k, 0, 0, ts.v, ts.n);
  tdm__tokens_release(&rt->nodes, &ts);
  if (last && !hand_over(g, t, mems, &done, &last))
    atomic_store(&x->status, CL_MAP_FAILURE);
  else if (!last && g->shared)
    atomic_store(&x->status, CL_OUT_OF_HOST_MEMORY); /* no map can follow it */
  if (last)
    api->ReleaseEvent(last);
  /* the new state: written buffers live on this node only */
  tdm__task_written(rt, t, 1 + g->k, node_of(g), tdm__tok_token(done));
  x->dev = g;
  x->t = t;
  x->done = done;
  t->dx = x;
  g->inflight++;
  fly(g, x);
  atomic_store(&x->refs, 2); /* and the token's waiter */
  if (!tdm__tok_when(done, exec_settled, x)) {
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: out of memory: waiting here for codelet %s", name);
    tdm__tok_wait(done);
    exec_settled(x, tdm__tok_status(done));
  }
  CL_CHECK(rt, api->Flush(g->compute), "clFlush");
  return LAUNCHED;
}

/* The adaptive window (tdm_config.device_tasks 0). A task launched has
 * its copies and kernel enqueued: no faster idle worker can take it back
 * any more. So the next task is launched only when the device would
 * otherwise run dry before its inputs are there: when the predicted work
 * still in flight is no more than its inputs' copy time (behind those on
 * the link) plus WINDOW_SLACK_S (a watcher's tick, which looks again,
 * and a launch). A slow device keeps one task in flight and the next
 * within the idle workers' reach until shortly before it is needed; a
 * fast one behind a slow link as many as hide the copies, up to
 * TDM_CL_WINDOW_MAX. While the device's time for a task in flight is not
 * known (not calibrated there), the window is that maximum. */
#define WINDOW_SLACK_S 3e-3

/* Predicted seconds of work left in flight on g, or < 0 when not known
 * (lock held). The first runs since its launch or the last end. */
static double flight_left(const cl_device *g, uint64_t now) {
  double left = 0;
  const exec *first = NULL;
  for (const exec *x = g->flight; x; x = x->next) {
    if (atomic_load_explicit(&x->state, memory_order_relaxed) != RUNNING)
      continue; /* its end came */
    if (x->predicted < 0)
      return -1;
    if (!first)
      first = x;
    left += x->predicted;
  }
  if (first) {
    uint64_t since = first->launched > g->last_done ? first->launched : g->last_done;
    double ran = now > since ? 1e-9 * (double)(now - since) : 0;
    left -= ran < first->predicted ? ran : first->predicted;
  }
  return left;
}

/* Whether g's window takes one more task now (lock held). */
static bool window_more(cl_device *g) {
  if (g->inflight >= g->cap)
    return false;
  if (!g->adaptive || !g->inflight)
    return true;
  double left = flight_left(g, tdm__now_ns());
  if (left < 0)
    return true;
  /* the next one's copies; one from the shared queue: none counted */
  const tdm_task *next = g->q.head;
  double copy = next ? tdm__transfer_time(&g->rt->nodes, node_of(g), next) : 0;
  return left <= copy + WINDOW_SLACK_S;
}

static void pump(cl_device *g) {
  tdm_runtime *rt = g->rt;
  tdm_task *away = NULL;
  TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
  while (window_more(g)) {
    tdm_task *t = tdm__taskq_next(rt, g->k, &g->q, &g->lock);
    if (!t)
      break;
    if (g->inflight >= g->cap) { /* filled while the lock was dropped */
      tdm__taskq_put(&g->q, t);
      break;
    }
    int st = launch(g, t);
    if (st == RETRY) { /* first in line once room comes back */
      tdm__taskq_put_first(&g->q, t);
      break;
    }
    if (st == UNBUILT) { /* the builder puts it back in line (programs.c) */
      tdm__taskq_put(&g->unbuilt, t);
    } else if (st == NOT_HERE) {
      t->pool_next = away;
      away = t;
    }
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
  for (tdm_task *t = away, *next; t; t = next) {
    next = t->pool_next;
    tdm__cl_unbuildable(g, t);
  }
}

void tdm__cl_unbuildable(cl_device *g, tdm_task *t) {
  tdm_runtime *rt = g->rt;
  TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
  program *p = tdm__cl_program_of(g, t->codelet);
  tdm_status st = p && p->status ? p->status : TDM_ERR_BUILD;
  char *untold = p ? p->untold : NULL;
  if (p)
    p->untold = NULL;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
  tdm__log(rt, TDM_LOG_DEBUG, "OpenCL: codelet %s cannot run on device %u (%s): placed again",
           tdm__codelet_name(t), g->device, tdm_status_name(st));
  if (untold) /* the first task to find it so: the application is told */
    tdm__kernel_disabled(rt, g->k, tdm__codelet_name(t), st, untold);
  free(untold);
  tdm__device_refused(rt, g->k, t, st);
}

/* ---- what the scheduler asks ------------------------------------------- */

static void cl_push(tdm_runtime *rt, unsigned k, tdm_task *t) {
  cl_device *g = dev_of(rt, k);
  TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
  tdm__taskq_put(&g->q, t);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
  pump(g);
}

static tdm_task *cl_take(tdm_runtime *rt, unsigned k, bool (*want)(tdm_task *, void *),
                         void *data) {
  cl_device *g = dev_of(rt, k);
  return tdm__taskq_take(rt, &g->q, &g->lock, want, data);
}

static void cl_kick(tdm_runtime *rt, unsigned k) {
  pump(dev_of(rt, k));
}

static int cl_current(const tdm_runtime *rt) {
  (void)rt;
  return -1; /* devices have no thread of their own */
}

static void cl_counters(const tdm_runtime *rt, unsigned k, tdm_device_counters *c) {
  cl_device *g = dev_of(rt, k);
  c->tasks = atomic_load(&g->tasks);
  c->bytes_to_device = atomic_load(&g->to_device);
  c->bytes_to_host = atomic_load(&g->to_host);
  c->copies_to_device = atomic_load(&g->copies_to_device);
  c->copies_to_host = atomic_load(&g->copies_to_host);
  c->bytes_from_devices = atomic_load(&g->from_devices);
  c->copies_from_devices = atomic_load(&g->copies_from_devices);
  uint64_t used, limit;
  if (!g->shared)
    tdm__mem_usage(&rt->nodes, 1 + k, &used, &limit, &c->evictions);
}

const tdm_backend tdm__opencl_backend = {
    .name = "OpenCL",
    .discover = tdm__opencl_claim,
    .release = cl_release,
    .start = cl_start,
    .stop = cl_stop,
    .build = tdm__cl_build,
    .prepare = tdm__cl_prepare,
    .push = cl_push,
    .take = cl_take,
    .kick = cl_kick,
    .current = cl_current,
    .progress = cl_progress,
    .ended = cl_ended,
    .trace_collect = cl_trace_collect,
    .busy_ns = cl_busy_ns,
    .counters = cl_counters,
    .abandon = cl_abandon,
};

#endif
