/*
 * The OpenCL backend's memory-node operations (backends/backend.h), what
 * runtime/data/coherence.c asks of OpenCL: buffers on a device, copies
 * between a device's buffer and the host, and completion tokens
 * (tokens.c) that settle as their commands' events do and fail however
 * the driver reports a failure.
 */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_device *dev_of_node(const tdm_runtime *rt, unsigned node) {
  return dev_of(rt, node - 1);
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

/* A copy completed: its profiled time teaches the link model. */
void tdm__cl_copy_timed(cl_device *g, cl_event e, uint64_t bytes) {
  const cl_api *api = api_of(g->rt);
  cl_ulong t0 = 0, t1 = 0;
  if (api->GetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL) ==
          CL_SUCCESS &&
      api->GetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) ==
          CL_SUCCESS &&
      t1 > t0) {
    TDM_PTHREAD(g->rt, pthread_mutex_lock(&g->trace_lock));
    tdm__link_observe(&g->link, bytes, 1e-9 * (double)(t1 - t0));
    TDM_PTHREAD(g->rt, pthread_mutex_unlock(&g->trace_lock));
  }
}

static void count_copy(cl_device *g, bool to_device, size_t bytes, cl_event e) {
  atomic_fetch_add_explicit(to_device ? &g->to_device : &g->to_host, bytes,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(to_device ? &g->copies_to_device : &g->copies_to_host, 1,
                            memory_order_relaxed);
  if (!g->rt->cfg.trace_path || !e)
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
  cl_device *g = dev_of_node(rt, node);
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

/* A copy into or out of g's memory, on its transfer queue: what every
 * copy goes through. `what` names it for messages ("host to device 1");
 * enqueue(arg, w, &e) enqueues it after the events of w; `kind`: TOK_COPY
 * (between the host and g: to_node says which way) or TOK_PEER (into g
 * from another device). */
typedef cl_int (*enqueue_fn)(const cl_api *api, cl_command_queue q, const void *arg,
                             const waitlist *w, cl_event *e);

static bool start_copy(tdm_runtime *rt, cl_device *g, const char *what, size_t bytes, int kind,
                       bool to_node, enqueue_fn enqueue, const void *arg,
                       const tdm_token *after, unsigned nafter, tdm_token *done) {
  const cl_api *api = api_of(rt);
  /* An injected fault fails the enqueue, not the copy's event: PoCL 3.1
   * never runs, nor fails, a command enqueued after an event it waits
   * for failed, and the queue stalls behind it. */
  tdm_status fault = tdm__fault(rt, TDM_FAULT_COPY, g->k);
  if (fault) {
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: %s, %zu bytes: injected fault (%s)", what, bytes,
             tdm_status_name(fault));
    return false;
  }
  cl_tok *tok = tdm__tok_alloc(rt);
  if (!tok)
    return false;
  waitlist w;
  if (!tdm__cl_waitlist_of(rt, g->ctx, &w, after, nafter)) {
    /* what it would copy is not there: a command after a failed one may
     * never run (PoCL stalls its queue) */
    tdm__cl_release_all(api, &w);
    tdm__tok_release(tok);
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: %s, %zu bytes: not started, what it waits for failed",
             what, bytes);
    return false;
  }
  cl_event e = NULL;
  cl_int err = enqueue(api, g->transfer, arg, &w, &e);
  tdm__cl_release_all(api, &w);
  if (err != CL_SUCCESS || !e) {
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: %s, %zu bytes: %s, error %d", what, bytes, CL_ERR(err));
    tdm__tok_release(tok);
    return false;
  }
  CL_CHECK(rt, api->Flush(g->transfer), "clFlush");
  if (kind == TOK_COPY) {
    count_copy(g, to_node, bytes, e);
  } else {
    atomic_fetch_add_explicit(&g->from_devices, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->copies_from_devices, 1, memory_order_relaxed);
  }
  /* a copy between devices is watched as a copy, but does not teach the
   * model of the host's link */
  tdm__tok_start(tok, e, g->ctx, (int)g->k, kind, bytes, after, nafter);
  *done = tdm__tok_token(tok);
  return true;
}

typedef struct host_copy {
  bool to_node;
  cl_mem mem;
  const tdm_copy *c;
} host_copy;

static cl_int enqueue_host_copy(const cl_api *api, cl_command_queue q, const void *arg,
                                const waitlist *w, cl_event *e) {
  const host_copy *h = arg;
  return copy_rect(api, q, h->to_node, h->mem, h->c, w, e);
}

static bool node_copy(void *ctx, unsigned node, bool to_node, const tdm_copy *c,
                      const tdm_token *after, unsigned nafter, tdm_token *done) {
  tdm_runtime *rt = ctx;
  cl_device *g = dev_of_node(rt, node);
  char what[48];
  snprintf(what, sizeof what, "%s device %u", to_node ? "host to" : "to host from", g->device);
  host_copy h = {to_node, (cl_mem)c->mem, c};
  return start_copy(rt, g, what, c->host->nx * c->host->ny * c->host->elem_size, TOK_COPY,
                    to_node, enqueue_host_copy, &h, after, nafter, done);
}

static tdm_token node_join(void *ctx, const tdm_token *ts, unsigned n) {
  return n ? tdm__tok_join(ctx, ts, n) : 0;
}

static bool node_retain(void *ctx, tdm_token t) {
  (void)ctx;
  tdm__tok_retain(tdm__tok_of(t));
  return true;
}

static void node_release(void *ctx, tdm_token t) {
  (void)ctx;
  tdm__tok_release(tdm__tok_of(t));
}

static bool node_test(void *ctx, tdm_token t) {
  (void)ctx;
  return tdm__tok_done(tdm__tok_of(t));
}

/* Failed, however the driver said so: see tokens.c. */
static bool node_failed(void *ctx, tdm_token t) {
  (void)ctx;
  cl_tok *tok = tdm__tok_of(t);
  return tdm__tok_done(tok) && tdm__tok_status(tok) < 0;
}

static void node_wait(void *ctx, const tdm_token *ts, unsigned n) {
  (void)ctx;
  for (unsigned i = 0; i < n; i++)
    tdm__tok_wait(tdm__tok_of(ts[i]));
}

typedef struct when {
  void (*fn)(void *, int);
  void *arg;
  cl_tok *all;
} when;

static void when_settled(void *data, cl_int status) {
  when *w = data;
  cl_tok *all = w->all;
  w->fn(w->arg, status < 0 ? (int)status : 0);
  free(w);
  tdm__tok_release(all);
}

static bool node_when_done(void *ctx, const tdm_token *ts, unsigned n, void (*fn)(void *, int),
                           void *arg) {
  tdm_runtime *rt = ctx;
  when *w = tdm__malloc(rt, sizeof *w);
  cl_tok *all = w ? tdm__tok_of(tdm__tok_join(rt, ts, n)) : NULL;
  if (!all) {
    free(w);
    return false;
  }
  *w = (when){fn, arg, all};
  if (!tdm__tok_when(all, when_settled, w)) {
    free(w);
    tdm__tok_release(all);
    return false;
  }
  return true;
}

/* Until the link model has seen copies of two sizes: a PCIe-like link,
 * 10 us and 8 GB/s. */
#define CL_LATENCY 10e-6
#define CL_BANDWIDTH 8e9

static double node_link_time(void *ctx, unsigned node, uint64_t bytes) {
  cl_device *g = dev_of_node(ctx, node);
  TDM_PTHREAD(g->rt, pthread_mutex_lock(&g->trace_lock));
  double s = tdm__link_predict(&g->link, bytes);
  TDM_PTHREAD(g->rt, pthread_mutex_unlock(&g->trace_lock));
  return s >= 0 ? s : CL_LATENCY + (double)bytes / CL_BANDWIDTH;
}

/* The copies queued on the device's transfer queue before a new one
 * (both ways share it, one after the other: the same either way), at
 * the link's predicted speed. */
static double node_link_wait(void *ctx, unsigned node, bool to_node) {
  (void)to_node;
  cl_device *g = dev_of_node(ctx, node);
  uint64_t bytes = tdm__tok_copying(g->rt, g->k);
  return bytes ? node_link_time(ctx, node, bytes) : 0;
}

/* Between two devices with memory of their own in one context
 * (probe.c: share_contexts): the slower of the two links, one hop. */
static double node_peer_time(void *ctx, unsigned from, unsigned to, uint64_t bytes) {
  tdm_runtime *rt = ctx;
  const cl_device *a = dev_of_node(rt, from), *b = dev_of_node(rt, to);
  if (a->shared || b->shared || a->ctx != b->ctx || !api_of(rt)->EnqueueCopyBuffer)
    return -1;
  double s = node_link_time(ctx, from, bytes), t = node_link_time(ctx, to, bytes);
  return s > t ? s : t;
}

typedef struct peer_copy {
  cl_mem from, to;
  size_t bytes;
} peer_copy;

static cl_int enqueue_peer_copy(const cl_api *api, cl_command_queue q, const void *arg,
                                const waitlist *w, cl_event *e) {
  const peer_copy *p = arg;
  return api->EnqueueCopyBuffer(q, p->from, p->to, 0, 0, p->bytes, w->n, w->n ? w->ev : NULL,
                                e);
}

/* On the target's transfer queue, after what it waits for (events of
 * either device: one context). */
static bool node_peer_copy(void *ctx, unsigned from, unsigned to, void *from_mem, void *to_mem,
                           size_t bytes, const tdm_token *after, unsigned nafter,
                           tdm_token *done) {
  tdm_runtime *rt = ctx;
  cl_device *a = dev_of_node(rt, from), *g = dev_of_node(rt, to);
  if (a->ctx != g->ctx || !api_of(rt)->EnqueueCopyBuffer)
    return false;
  char what[48];
  snprintf(what, sizeof what, "device %u to device %u", a->device, g->device);
  peer_copy p = {(cl_mem)from_mem, (cl_mem)to_mem, bytes};
  return start_copy(rt, g, what, bytes, TOK_PEER, true, enqueue_peer_copy, &p, after, nafter,
                    done);
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
    .link_wait = node_link_wait,
    .peer_time = node_peer_time,
    .peer_copy = node_peer_copy,
};
