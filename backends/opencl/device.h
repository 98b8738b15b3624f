/*
 * The OpenCL backend's own declarations, shared by its files: device.c
 * (devices, their queues, launching and ending tasks), programs.c
 * (programs, the binary cache's keys, which devices may run a task) and
 * memnode.c (the memory-node operations: buffers, copies, events as
 * tokens). Internal.
 */
#ifndef TDM_BACKEND_OPENCL_DEVICE_H
#define TDM_BACKEND_OPENCL_DEVICE_H

#include "cl.h"
#include "../../runtime/sched/perfmodel.h"

#include "tandem/opencl.h"

/* ---- per device --------------------------------------------------------- */

/* A codelet variant's program on one device. Built on the builder's
 * thread (programs.c): until then `building` (under the device's lock);
 * program, kernel and status are the builder's until it clears it, and
 * `built` is set after (read without the lock by build waiters). */
typedef struct program {
  const struct tdm_opencl_variant *variant;
  char name[64]; /* the codelet's, for the log */
  cl_program program;
  cl_kernel kernel;
  tdm_status status;
  bool building;
  _Atomic bool built;
  struct program *next;
} program;

typedef struct cl_device cl_device;
struct cl_device {
  tdm_runtime *rt;
  unsigned k;      /* device worker k */
  unsigned device; /* its device record */
  bool shared;     /* works in host memory */
  cl_context ctx;
  cl_device_id id;
  cl_command_queue compute, transfer;
  pthread_mutex_t lock; /* guards all below */
  tdm_devq q; /* tasks placed here, not yet launched */
  tdm_devq unbuilt; /* tasks placed here whose program is being built */
  unsigned inflight, cap;
  /* Launched tasks whose completion was not taken yet, in launch order
   * (the compute queue's: the first runs, the others wait behind it);
   * the watchdog watches the first (device.c). */
  struct exec *flight, *flight_tail;
  program *programs;
  /* its memory's size (counted and evicted by runtime/data/memory.c) */
  uint64_t limit, max_alloc;
  _Atomic uint64_t tasks, to_device, to_host, copies_to_device, copies_to_host;
  /* Busy time: kernels' profiled durations when recording, else the time
   * from a task's launch (or the previous completion) to its completion. */
  _Atomic uint64_t busy_ns;
  uint64_t last_done; /* under lock */
  /* Recording: host time = device time + clock_offset; copies whose
   * times are not read yet (under trace_lock), and those read. */
  int64_t clock_offset;
  /* The link, learnt from the copies' profiled times (under trace_lock),
   * and the copies whose times are still to come (callbacks pending). */
  tdm_link_model link;
  _Atomic unsigned timing_copies;
  pthread_mutex_t trace_lock; /* a leaf lock: guards the two below */
  struct pending_copy {
    cl_event ev;
    bool to_device;
    uint64_t bytes;
  } *pending;
  size_t npending, cap_pending;
  tdm_trace_buf copies;
};

/* The backend's state: device worker k's record. */
static inline cl_device **gpus(const tdm_runtime *rt) {
  return rt->backend;
}

static inline const cl_api *api_of(const tdm_runtime *rt) {
  return &rt->opencl->api;
}

#define CL_CHECK(rt, call, what)                                                          \
  do {                                                                                    \
    cl_int cl_err_ = (call);                                                              \
    if (cl_err_ != CL_SUCCESS)                                                            \
      tdm__log((rt), TDM_LOG_ERROR, "OpenCL: %s failed: error %d", (what), (int)cl_err_);  \
  } while (0)

static inline unsigned node_of(const cl_device *g) {
  return g->shared ? 0 : 1 + g->k;
}

/* ---- programs.c ---- */

/* The program of `codelet`'s variant on device g; on first use it is
 * queued for the builder's thread (building until then). Called with
 * g->lock held. */
program *tdm__cl_program_of(cl_device *g, const tdm_codelet *codelet);
/* The builder: made and started with the devices; stop joins it
 * (builds not begun fail). */
tdm_status tdm__cl_builder_init(tdm_runtime *rt);
void tdm__cl_builder_stop(tdm_runtime *rt);
/* The backend's build (backends/backend.h). */
void tdm__cl_build(tdm_runtime *rt, const tdm_codelet *cl, tdm_build_fn done, void *data);
/* Device g cannot run t: its program did not build there (device.c). */
void tdm__cl_unbuildable(cl_device *g, tdm_task *t);
/* The backend's prepare (backends/backend.h). */
tdm_status tdm__cl_prepare(tdm_runtime *rt, tdm_task *t, const char *what);

/* ---- watch.c ---- */

/* Calls fn(e, status, data) once e completes, successfully or not, from
 * any thread (clSetEventCallback for CL_COMPLETE, with a watcher for the
 * implementations that never call back for a failed command). False when
 * it cannot: the caller waits instead. */
bool tdm__cl_when_complete(tdm_runtime *rt, cl_event e,
                           void(CL_CALLBACK *fn)(cl_event, cl_int, void *), void *data);
/* The watcher's thread, started with the devices, stopped once every
 * command has finished. */
tdm_status tdm__cl_watch_start(tdm_runtime *rt);
void tdm__cl_watch_stop(tdm_runtime *rt);

/* ---- memnode.c ---- */

/* Completion tokens are events. */
static inline cl_event ev_of(tdm_token t) {
  return (cl_event)(uintptr_t)t;
}
static inline tdm_token token_of(cl_event e) {
  return (tdm_token)(uintptr_t)e;
}

/* What a command waits for, retained; folded into one joined event when
 * full. */
typedef struct waitlist {
  cl_event ev[2 * TDM_MAX_BUFFERS];
  unsigned n;
} waitlist;
void tdm__cl_release_all(const cl_api *api, waitlist *w);
/* w becomes tokens ts as events of context ctx (others bridged). */
void tdm__cl_waitlist_of(tdm_runtime *rt, cl_context ctx, waitlist *w, const tdm_token *ts,
                         unsigned n);

extern const tdm_node_ops tdm__cl_node_ops;

#endif
