/*
 * The OpenCL backend's memory-node operations (backends/backend.h), what
 * runtime/data/coherence.c asks of OpenCL: buffers on a device, copies
 * between a device's buffer and the host, and events as completion
 * tokens. A command can only wait for events of its own context, and
 * each device has a context of its own: events of another context, or
 * several at once, are joined into a user event of the right context.
 */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_device *gpu_of_node(const tdm_runtime *rt, unsigned node) {
  return gpus(rt)[node - 1];
}

void tdm__cl_release_all(const cl_api *api, waitlist *w) {
  for (unsigned i = 0; i < w->n; i++)
    api->ReleaseEvent(w->ev[i]);
  w->n = 0;
}

/* ---- joining events ------------------------------------------------------
 * A command can only wait for events of its own context, and each device
 * has a context of its own. An event of another context, or several events
 * at once, are turned into a user event of the right context that a
 * callback completes when they all have. */

typedef struct join {
  _Atomic int left;
  _Atomic cl_int status;
  cl_event user; /* NULL: call fn instead */
  void (*fn)(void *, int);
  void *arg;
  /* copies: a late callback must not reach into a runtime being freed */
  cl_int (*SetUserEventStatus)(cl_event, cl_int);
  cl_int (*ReleaseEvent)(cl_event);
} join;

static void CL_CALLBACK join_one(cl_event e, cl_int status, void *data) {
  (void)e;
  join *j = data;
  if (status < 0)
    atomic_store(&j->status, status);
  if (atomic_fetch_sub(&j->left, 1) != 1)
    return;
  cl_int st = atomic_load(&j->status);
  if (j->user) {
    j->SetUserEventStatus(j->user, st < 0 ? st : CL_COMPLETE);
    j->ReleaseEvent(j->user);
  } else {
    j->fn(j->arg, st < 0 ? (int)st : 0);
  }
  free(j);
}

/* Registers j's callback on each of evs (j->left set to n first). */
static void join_all(tdm_runtime *rt, join *j, const cl_event *evs, unsigned n) {
  const cl_api *api = api_of(rt);
  atomic_init(&j->left, (int)n);
  atomic_init(&j->status, CL_COMPLETE);
  j->SetUserEventStatus = api->SetUserEventStatus;
  j->ReleaseEvent = api->ReleaseEvent;
  for (unsigned i = 0; i < n; i++)
    if (!tdm__cl_when_complete(rt, evs[i], join_one, j)) {
      CL_CHECK(rt, api->WaitForEvents(1, &evs[i]), "clWaitForEvents");
      join_one(evs[i], CL_COMPLETE, j);
    }
}

/* A new event of context ctx that completes when all of evs have (NULL
 * when none is given, or on failure, after waiting for them here). */
static cl_event join_events(tdm_runtime *rt, cl_context ctx, const cl_event *evs, unsigned n) {
  const cl_api *api = api_of(rt);
  if (!n)
    return NULL;
  cl_int err = CL_SUCCESS;
  join *j = tdm__calloc(rt, 1, sizeof *j);
  cl_event user = j ? api->CreateUserEvent(ctx, &err) : NULL;
  if (!user || api->RetainEvent(user) != CL_SUCCESS) {
    tdm__log(rt, TDM_LOG_WARNING, "OpenCL: cannot join events (%s, error %d): waiting for them",
             CL_ERR(err));
    for (unsigned i = 0; i < n; i++)
      CL_CHECK(rt, api->WaitForEvents(1, &evs[i]), "clWaitForEvents");
    if (user)
      api->SetUserEventStatus(user, CL_COMPLETE);
    free(j);
    return user;
  }
  j->user = user;
  join_all(rt, j, evs, n);
  return user;
}

static cl_context context_of(const cl_api *api, cl_event e) {
  cl_context c = NULL;
  if (api->GetEventInfo(e, CL_EVENT_CONTEXT, sizeof c, &c, NULL) != CL_SUCCESS)
    return NULL;
  return c;
}

/* Adds e to w, for a command of context ctx. */
static void wait_for(tdm_runtime *rt, cl_context ctx, waitlist *w, cl_event e) {
  const cl_api *api = api_of(rt);
  if (!e)
    return;
  if (w->n == sizeof w->ev / sizeof w->ev[0]) { /* full: fold it into one */
    cl_event all = join_events(rt, ctx, w->ev, w->n);
    tdm__cl_release_all(api, w);
    if (all)
      w->ev[w->n++] = all;
  }
  if (context_of(api, e) != ctx) {
    cl_event bridged = join_events(rt, ctx, &e, 1);
    if (bridged)
      w->ev[w->n++] = bridged;
  } else if (api->RetainEvent(e) == CL_SUCCESS) {
    w->ev[w->n++] = e;
  }
}

void tdm__cl_waitlist_of(tdm_runtime *rt, cl_context ctx, waitlist *w, const tdm_token *ts,
                         unsigned n) {
  w->n = 0;
  for (unsigned i = 0; i < n; i++)
    wait_for(rt, ctx, w, ev_of(ts[i]));
}

/* Copies between the host and buffer m as c says. */
static cl_int copy_rect(const cl_api *api, cl_command_queue q, bool to_device, cl_mem m,
                        const tdm_copy *c, const waitlist *w, cl_event *e) {
  const tdm_buffer *b = c->host;
  static const size_t zero[3] = {0, 0, 0};
  size_t region[3] = {b->ny * b->elem_size, b->nx, 1};
  size_t bytes = b->nx * b->ny * b->elem_size;
  if (b->ld == b->ny) /* both sides contiguous */
    return to_device ? api->EnqueueWriteBuffer(q, m, CL_FALSE, 0, bytes, b->ptr, w->n,
                                               w->n ? w->ev : NULL, e)
                     : api->EnqueueReadBuffer(q, m, CL_FALSE, 0, bytes, b->ptr, w->n,
                                              w->n ? w->ev : NULL, e);
  size_t host_pitch = b->ld * b->elem_size;
  return to_device
             ? api->EnqueueWriteBufferRect(q, m, CL_FALSE, zero, zero, region, c->pitch, 0,
                                           host_pitch, 0, b->ptr, w->n, w->n ? w->ev : NULL, e)
             : api->EnqueueReadBufferRect(q, m, CL_FALSE, zero, zero, region, c->pitch, 0,
                                          host_pitch, 0, b->ptr, w->n, w->n ? w->ev : NULL, e);
}

typedef struct timed_copy {
  cl_device *g;
  uint64_t bytes;
} timed_copy;

/* A copy completed: its profiled time teaches the link model. */
static void CL_CALLBACK copy_timed(cl_event e, cl_int status, void *data) {
  timed_copy *c = data;
  cl_device *g = c->g;
  const cl_api *api = api_of(g->rt);
  cl_ulong t0 = 0, t1 = 0;
  if (status == CL_COMPLETE &&
      api->GetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL) ==
          CL_SUCCESS &&
      api->GetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) ==
          CL_SUCCESS &&
      t1 > t0) {
    TDM_PTHREAD(g->rt, pthread_mutex_lock(&g->trace_lock));
    tdm__link_observe(&g->link, c->bytes, 1e-9 * (double)(t1 - t0));
    TDM_PTHREAD(g->rt, pthread_mutex_unlock(&g->trace_lock));
  }
  free(c);
  atomic_fetch_sub(&g->timing_copies, 1); /* last: g may go once it is 0 */
}

static void count_copy(cl_device *g, bool to_device, size_t bytes, cl_event e) {
  atomic_fetch_add_explicit(to_device ? &g->to_device : &g->to_host, bytes,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(to_device ? &g->copies_to_device : &g->copies_to_host, 1,
                            memory_order_relaxed);
  timed_copy *c = e ? tdm__malloc(g->rt, sizeof *c) : NULL;
  if (c) {
    *c = (timed_copy){g, bytes};
    atomic_fetch_add(&g->timing_copies, 1);
    if (!tdm__cl_when_complete(g->rt, e, copy_timed, c)) {
      atomic_fetch_sub(&g->timing_copies, 1);
      free(c);
    }
  }
  if (!g->rt->trace_path || !e)
    return;
  const cl_api *api = api_of(g->rt);
  TDM_PTHREAD(g->rt, pthread_mutex_lock(&g->trace_lock));
  if (g->npending == g->cap_pending) {
    size_t cap = g->cap_pending ? 2 * g->cap_pending : 64;
    struct pending_copy *p = tdm__realloc(g->rt, g->pending, cap * sizeof *p);
    if (p) {
      g->pending = p;
      g->cap_pending = cap;
    }
  }
  if (g->npending < g->cap_pending && api->RetainEvent(e) == CL_SUCCESS)
    g->pending[g->npending++] = (struct pending_copy){e, to_device, bytes};
  TDM_PTHREAD(g->rt, pthread_mutex_unlock(&g->trace_lock));
}

static void *node_alloc(void *ctx, unsigned node, const tdm_buffer *b, size_t bytes) {
  tdm_runtime *rt = ctx;
  cl_device *g = gpu_of_node(rt, node);
  const cl_api *api = api_of(rt);
  cl_int err = CL_SUCCESS;
  cl_mem m;
  if (g->shared) /* the application's memory itself, first element to last */
    m = api->CreateBuffer(g->ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, b->ptr, &err);
  else /* the elements packed */
    m = api->CreateBuffer(g->ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (!m)
    tdm__log(rt, err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES
                     ? TDM_LOG_DEBUG
                     : TDM_LOG_WARNING,
             "OpenCL: device %u: no buffer of %zu bytes (%s, error %d)", g->device, bytes,
             CL_ERR(err));
  return m;
}

static void node_free(void *ctx, unsigned node, void *mem) {
  (void)node;
  api_of(ctx)->ReleaseMemObject((cl_mem)mem);
}

static bool node_copy(void *ctx, unsigned node, bool to_node, const tdm_copy *c,
                      const tdm_token *after, unsigned nafter, tdm_token *done) {
  tdm_runtime *rt = ctx;
  cl_device *g = gpu_of_node(rt, node);
  const cl_api *api = api_of(rt);
  size_t bytes = c->host->nx * c->host->ny * c->host->elem_size;
  /* An injected fault fails the enqueue, not the copy's event: PoCL 3.1
   * never runs, nor fails, a command enqueued after an event it waits
   * for failed, and the queue stalls behind it. */
  tdm_status fault = tdm__fault(rt, TDM_FAULT_COPY, g->k);
  if (fault) {
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: %s device %u, %zu bytes: injected fault (%s)",
             to_node ? "host to" : "to host from", g->device, bytes, tdm_status_name(fault));
    return false;
  }
  waitlist w;
  tdm__cl_waitlist_of(rt, g->ctx, &w, after, nafter);
  cl_event e = NULL;
  cl_int err = copy_rect(api, g->transfer, to_node, (cl_mem)c->mem, c, &w, &e);
  tdm__cl_release_all(api, &w);
  if (err != CL_SUCCESS) {
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: %s device %u, %zu bytes: %s, error %d",
             to_node ? "host to" : "to host from", g->device, bytes, CL_ERR(err));
    return false;
  }
  api->Flush(g->transfer);
  count_copy(g, to_node, bytes, e);
  *done = token_of(e);
  return true;
}

static tdm_token node_join(void *ctx, const tdm_token *ts, unsigned n) {
  tdm_runtime *rt = ctx;
  const cl_api *api = api_of(rt);
  if (!n)
    return 0;
  if (n == 1)
    return api->RetainEvent(ev_of(ts[0])) == CL_SUCCESS ? ts[0] : 0;
  cl_event *evs = tdm__malloc(rt, n * sizeof *evs);
  if (!evs) {
    for (unsigned i = 0; i < n; i++)
      CL_CHECK(rt, api->WaitForEvents(1, &(cl_event){ev_of(ts[i])}), "clWaitForEvents");
    return 0;
  }
  for (unsigned i = 0; i < n; i++)
    evs[i] = ev_of(ts[i]);
  cl_event all = join_events(rt, context_of(api, evs[0]), evs, n);
  free(evs);
  return token_of(all);
}

static bool node_retain(void *ctx, tdm_token t) {
  return api_of(ctx)->RetainEvent(ev_of(t)) == CL_SUCCESS;
}

static void node_release(void *ctx, tdm_token t) {
  api_of(ctx)->ReleaseEvent(ev_of(t));
}

static bool node_test(void *ctx, tdm_token t) {
  cl_int st = CL_QUEUED;
  return api_of(ctx)->GetEventInfo(ev_of(t), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st,
                                   NULL) == CL_SUCCESS &&
         (st == CL_COMPLETE || st < 0);
}

static bool node_failed(void *ctx, tdm_token t) {
  cl_int st = CL_QUEUED;
  return api_of(ctx)->GetEventInfo(ev_of(t), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st,
                                   NULL) == CL_SUCCESS &&
         st < 0;
}

static void node_wait(void *ctx, const tdm_token *ts, unsigned n) {
  for (unsigned i = 0; i < n; i++) /* one at a time: their contexts differ */
    CL_CHECK((tdm_runtime *)ctx,
             api_of(ctx)->WaitForEvents(1, &(cl_event){ev_of(ts[i])}), "clWaitForEvents");
}

static bool node_when_done(void *ctx, const tdm_token *ts, unsigned n, void (*fn)(void *, int),
                           void *arg) {
  tdm_runtime *rt = ctx;
  join *j = tdm__calloc(rt, 1, sizeof *j);
  cl_event *evs = j ? tdm__malloc(rt, n * sizeof *evs) : NULL;
  if (!evs) {
    free(j);
    return false;
  }
  for (unsigned i = 0; i < n; i++)
    evs[i] = ev_of(ts[i]);
  j->fn = fn;
  j->arg = arg;
  join_all(rt, j, evs, n);
  free(evs);
  return true;
}

/* Until the link model has seen copies of two sizes: a PCIe-like link,
 * 10 us and 8 GB/s. */
#define CL_LATENCY 10e-6
#define CL_BANDWIDTH 8e9

static double node_link_time(void *ctx, unsigned node, uint64_t bytes) {
  cl_device *g = gpu_of_node(ctx, node);
  TDM_PTHREAD(g->rt, pthread_mutex_lock(&g->trace_lock));
  double s = tdm__link_predict(&g->link, bytes);
  TDM_PTHREAD(g->rt, pthread_mutex_unlock(&g->trace_lock));
  return s >= 0 ? s : CL_LATENCY + (double)bytes / CL_BANDWIDTH;
}

const tdm_node_ops tdm__cl_node_ops = {
    .alloc = node_alloc,
    .free = node_free,
    .copy = node_copy,
    .join = node_join,
    .retain = node_retain,
    .release = node_release,
    .test = node_test,
    .wait = node_wait,
    .failed = node_failed,
    .when_done = node_when_done,
    .link_time = node_link_time,
};
