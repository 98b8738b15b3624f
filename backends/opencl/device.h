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

#include "tandem/opencl.h"

/* ---- per device --------------------------------------------------------- */

/* A codelet variant's program on one device. Built on the builder's
 * thread (programs.c): until then `building` (under the device's lock);
 * program, kernel and status are the builder's until it clears it, and
 * `built` is set after (read without the lock by build waiters). */
/* What a kernel declares of one parameter (as far as the driver says):
 * PARAM_OTHER is what Tandem never passes (an image, a sampler...). */
enum { PARAM_UNKNOWN, PARAM_POINTER, PARAM_LOCAL, PARAM_VALUE, PARAM_OTHER };
typedef struct param {
  uint8_t kind;
  uint8_t size;    /* a PARAM_VALUE of a built-in type; 0: unknown (a struct) */
  uint8_t pointee; /* a PARAM_POINTER's elements, when of a built-in type; else 0 */
  bool integer;    /* a scalar integer type */
  char type[24];   /* its type, for messages */
} param;

typedef struct program {
  const struct tdm_opencl_variant *variant;
  char name[64]; /* the codelet's, for the log */
  cl_program program;
  cl_kernel kernel;
  tdm_status status;
  bool building;
  _Atomic bool built;
  /* Its kernel's parameters, once built: nparams of them, params (NULL
   * where none, or no memory), and as C text, for messages. */
  unsigned nparams;
  param *params;
  char *declared;
  /* Why its variant was disabled (status TDM_ERR_KERNEL), to be told to
   * the application once, outside the device's lock (tdm__cl_unbuildable). */
  char *untold;
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
  tdm_taskq q; /* tasks placed here, not yet launched */
  tdm_taskq unbuilt; /* tasks placed here whose program is being built */
  /* Tasks launched and not ended, and how many may be (the window):
   * tdm_config.device_tasks, or, adaptive (its 0), as many as the
   * copies need up to TDM_CL_WINDOW_MAX (device.c: window_more). */
  unsigned inflight, cap;
  bool adaptive;
  /* Launched tasks whose completion was not taken yet, in launch order
   * (the compute queue's: the first runs, the others wait behind it);
   * the watchdog watches the first (device.c). */
  struct exec *flight, *flight_tail;
  program *programs;
  /* its memory's size (counted and evicted by runtime/data/memory.c) */
  uint64_t limit, max_alloc;
  _Atomic uint64_t tasks, to_device, to_host, copies_to_device, copies_to_host;
  _Atomic uint64_t from_devices, copies_from_devices; /* straight from another's memory */
  /* Busy time: kernels' profiled durations when recording, else the time
   * from a task's launch (or the previous completion) to its completion. */
  _Atomic uint64_t busy_ns;
  uint64_t last_done; /* under lock */
  /* Recording: host time = device time + clock_offset; copies whose
   * times are not read yet (under trace_lock), and those read. */
  int64_t clock_offset;
  /* The link, learnt from the copies' profiled times (under trace_lock),
   * and how many of its commands' callbacks are still to come (tokens.c). */
  tdm_link_model link;
  _Atomic unsigned events_pending; /* commands whose callback is still to come */
  pthread_mutex_t trace_lock; /* a leaf lock: guards the two below */
  struct pending_copy {
    cl_event ev;
    bool to_device;
    uint64_t bytes;
  } *pending;
  size_t npending, cap_pending;
  tdm_trace_buf copies;
};

/* A variant's flags: 0 where its struct_size predates them. */
static inline unsigned tdm__cl_flags(const struct tdm_opencl_variant *v) {
  size_t need = offsetof(struct tdm_opencl_variant, flags) + sizeof v->flags;
  return !v->struct_size || v->struct_size >= need ? v->flags : 0;
}

/* Device worker k's device, one of the backend's. */
static inline cl_device *dev_of(const tdm_runtime *rt, unsigned k) {
  const tdm_opencl *cl = cl_of(rt);
  return cl->dev[k - cl->first];
}

static inline const cl_api *api_of(const tdm_runtime *rt) {
  return &cl_of(rt)->api;
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
/* Whether completions wait to be ended; ends them (device.c's
 * cl_progress, as a CPU worker would) when the oldest has waited late_ns
 * or more: no CPU worker came between its tasks meanwhile. */
bool tdm__cl_completions_waiting(const tdm_runtime *rt);
void tdm__cl_progress_late(tdm_runtime *rt, uint64_t late_ns);
/* The devices with an adaptive window and tasks in flight launch what
 * the window lets in now (the watcher's tick: the work in flight shrank
 * since the last look). */
void tdm__cl_pump_windows(tdm_runtime *rt);
/* An adaptive window's most tasks in flight. */
#define TDM_CL_WINDOW_MAX 8
/* A completion was posted: the watcher, asleep with nothing pending,
 * looks again (it ends it if no CPU worker does). */
void tdm__cl_watch_wake(tdm_runtime *rt);
/* The watcher's thread, started with the devices, stopped once every
 * command has finished; it also ends the completions that no CPU worker
 * ended within a tick (tdm__cl_progress_late). */
tdm_status tdm__cl_watch_start(tdm_runtime *rt);
void tdm__cl_watch_stop(tdm_runtime *rt);

/* ---- memnode.c ---- */

/* A copy completed: its profiled time teaches g's link model. */
void tdm__cl_copy_timed(cl_device *g, cl_event e, uint64_t bytes);

/* ---- tokens.c ---- */

/* A completion token: a command, and the tokens it was ordered after.
 * Settled once its event's callback came (or the watcher's, watch.c) and
 * those tokens settled; failed if any of them failed, however the driver
 * said so; settled as failed at once when its device is found hung. */
typedef struct cl_tok cl_tok;
cl_tok *tdm__tok_of(tdm_token t);
tdm_token tdm__tok_token(cl_tok *t);
tdm_status tdm__tok_init(tdm_runtime *rt);
void tdm__tok_fini(tdm_runtime *rt);
/* A token not started yet (one reference, the caller's), made before
 * its command is enqueued so that no command goes without one; NULL
 * when out of memory (logged). Released unstarted, it is freed. */
cl_tok *tdm__tok_alloc(tdm_runtime *rt);
/* t stands for command e (its reference taken over) of context ctx on
 * device worker k's queues (-1: none), ordered after the tokens
 * before[0 .. n-1]; `copy`: a copy of `bytes`, between the host and the
 * device (TOK_COPY: its time teaches the link's model) or from another
 * device (TOK_PEER), watched for stalls either way; else 0. */
enum { TOK_COPY = 1, TOK_PEER = 2 };
void tdm__tok_start(cl_tok *t, cl_event e, cl_context ctx, int k, int copy, uint64_t bytes,
                    const tdm_token *before, unsigned n);
/* A token settled when all of ts are (a reference), or 0 after waiting
 * for them here when none can be made. */
tdm_token tdm__tok_join(tdm_runtime *rt, const tdm_token *ts, unsigned n);
void tdm__tok_retain(cl_tok *t);
void tdm__tok_release(cl_tok *t);
/* Settled; its status: CL_COMPLETE, or the first failure seen (which
 * may show before it is settled). */
bool tdm__tok_done(cl_tok *t);
cl_int tdm__tok_status(const cl_tok *t);
/* Its own command's event has completed (successfully or not), as its
 * callback said: it will not run any more. */
bool tdm__tok_ran(const cl_tok *t);
/* Blocks until t settles (a hung device settles its tokens). */
void tdm__tok_wait(cl_tok *t);
/* Calls fn(arg, status) once t settles: at once, on this thread, if it
 * has; else on the thread that settles it. False: no memory. */
bool tdm__tok_when(cl_tok *t, void (*fn)(void *, cl_int), void *arg);
/* Device worker k is hung: its tokens not settled settle as failed. */
void tdm__tok_fail_device(tdm_runtime *rt, unsigned k);
/* A copy that has not completed within its ceiling after it could
 * start makes its device hung (on the watcher's thread). */
void tdm__tok_check(tdm_runtime *rt);
/* Bytes of the copies started on device worker k's transfer queue (both
 * ways: one in-order queue) that have not settled. */
uint64_t tdm__tok_copying(tdm_runtime *rt, unsigned k);

/* What a command waits for, retained. */
typedef struct waitlist {
  cl_event ev[2 * TDM_MAX_BUFFERS];
  unsigned n;
} waitlist;
void tdm__cl_release_all(const cl_api *api, waitlist *w);
/* w becomes what a command of context ctx waits for tokens ts by: their
 * events, bridges for tokens of another context or with no event of
 * their own (user events that always complete, once the token settles),
 * nothing for a settled one; past w's room, the rest joined into one.
 * Never blocks. False (w empty) when one of them failed already (the
 * command would run on what a failed one left, and a driver may never
 * run it), or a wait could not be made (logged). */
bool tdm__cl_waitlist_of(tdm_runtime *rt, cl_context ctx, waitlist *w, const tdm_token *ts,
                         unsigned n);

extern const tdm_node_ops tdm__cl_node_ops;

#endif
