/*
 * A failing OpenCL driver for the tests: a loader that forwards each entry
 * point Tandem uses to the real loader (libOpenCL.so.1, opened with
 * dlopen) and makes one of them fail the way real drivers do. Tandem opens
 * it through tdm_config.opencl_library; the test opens the same file and
 * calls failcl_set, which reaches the same copy of it.
 *
 * failcl_set(entry, mode, onset, count): the calls onset .. onset+count-1
 * of `entry` (counted from 0 since this call; count 0: every call from
 * onset on) fail as `mode` says:
 *
 *   FAILCL_RETURN    the call returns CL_OUT_OF_RESOURCES and does
 *                    nothing (clCreateBuffer, clEnqueueMapBuffer: NULL
 *                    and that error);
 *   FAILCL_EVENT     the command does nothing (a marker stands in for it:
 *                    the queue keeps flowing) and its event ends with
 *                    CL_OUT_OF_RESOURCES: clGetEventInfo, clWaitForEvents
 *                    and its callbacks all say so; the commands that wait
 *                    for it run all the same;
 *   FAILCL_CALLBACK  the command does nothing; its event completes as if
 *                    it had worked (clGetEventInfo, clWaitForEvents), and
 *                    only its callbacks are told CL_OUT_OF_RESOURCES;
 *   FAILCL_STALL     the command does nothing and its event ends with
 *                    CL_OUT_OF_RESOURCES, which clGetEventInfo and
 *                    clWaitForEvents say, but no callback is called, and
 *                    the commands that wait for it never run (as PoCL
 *                    does with a failed command);
 *   FAILCL_NEVER     the command never completes, nor anything after it
 *                    in its queue.
 *
 * The commands: clEnqueueNDRangeKernel, clEnqueueWriteBuffer(Rect),
 * clEnqueueReadBuffer(Rect), clEnqueueCopyBuffer, clEnqueueMapBuffer, clEnqueueUnmapMemObject
 * (these two do their work, then their event fails as the mode says),
 * clEnqueueMarkerWithWaitList. clCreateBuffer and clSetEventCallback
 * fail as FAILCL_RETURN whatever the mode. failcl_calls() tells how many calls of the entry
 * were made since failcl_set, failcl_failed() how many were failed.
 */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS /* clCreateCommandQueue, which Tandem uses */
#include <CL/cl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "failing-opencl.h"

static void *real_lib;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void open_real(void) {
  real_lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!real_lib)
    fprintf(stderr, "failing-opencl: %s\n", dlerror());
}

typedef void (*any_fn)(void);

static any_fn real(const char *name) {
  pthread_once(&once, open_real);
  void *p = real_lib ? dlsym(real_lib, name) : NULL;
  any_fn f;
  memcpy(&f, &p, sizeof f);
  if (!p) {
    fprintf(stderr, "failing-opencl: no %s in the real loader\n", name);
    abort();
  }
  return f;
}

#define REAL(name) ((__typeof__(&name))real(#name))

/* ---- what fails ----------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char fail_entry[64];
static int fail_mode;
static unsigned fail_onset, fail_count;
static atomic_uint calls, failed;

void failcl_set(const char *entry, int mode, unsigned onset, unsigned count) {
  pthread_mutex_lock(&lock);
  snprintf(fail_entry, sizeof fail_entry, "%s", entry ? entry : "");
  fail_mode = mode;
  fail_onset = onset;
  fail_count = count;
  atomic_store(&calls, 0);
  atomic_store(&failed, 0);
  pthread_mutex_unlock(&lock);
}

unsigned failcl_calls(void) {
  return atomic_load(&calls);
}

unsigned failcl_failed(void) {
  return atomic_load(&failed);
}

/* The mode in which this call of `entry` fails; 0: it works. */
static int fails(const char *entry) {
  pthread_mutex_lock(&lock);
  int mode = 0;
  if (!strcmp(entry, fail_entry)) {
    unsigned n = atomic_fetch_add(&calls, 1);
    if (n >= fail_onset && (!fail_count || n - fail_onset < fail_count)) {
      mode = fail_mode;
      atomic_fetch_add(&failed, 1);
    }
  }
  pthread_mutex_unlock(&lock);
  return mode;
}

/* ---- the events it makes fail --------------------------------------------- */

typedef struct callback {
  void(CL_CALLBACK *fn)(cl_event, cl_int, void *);
  void *data;
  struct callback *next;
} callback;

/* An event this driver fails: `shown` is what the caller holds (a user
 * event for EVENT and STALL, the marker itself for CALLBACK), `stand_in`
 * the command that stood in for the failed one. */
typedef struct fake {
  cl_event shown, stand_in;
  cl_event never; /* STALL: what the commands after it wait for instead */
  int mode;
  int done;           /* the failure was set (under lock) */
  callback *callbacks; /* EVENT: called at the failure (under lock) */
  struct fake *next;
} fake;

static fake *fakes; /* under lock; kept to the end (each holds its events) */

static fake *fake_of(cl_event e) {
  for (fake *f = fakes; f; f = f->next)
    if (f->shown == e)
      return f;
  return NULL;
}

/* The failure shows: its user event is set, its callbacks called. */
static void show_failure(fake *f) {
  REAL(clSetUserEventStatus)(f->shown, CL_OUT_OF_RESOURCES);
  pthread_mutex_lock(&lock);
  f->done = 1;
  callback *cbs = f->mode == FAILCL_EVENT ? f->callbacks : NULL;
  f->callbacks = NULL;
  pthread_mutex_unlock(&lock);
  for (callback *c = cbs, *next; c; c = next) {
    next = c->next;
    c->fn(f->shown, CL_OUT_OF_RESOURCES, c->data);
    free(c);
  }
}

/* Failures to show, shown on a thread of this driver's own: PoCL
 * crashes when a user event whose dependents it must fail is set from
 * one of its own callbacks, and a real failure comes from the device,
 * not from a callback either. */
static pthread_cond_t to_show_cond = PTHREAD_COND_INITIALIZER;
static struct to_show {
  fake *f;
  struct to_show *next;
} *to_show;

static void *shower(void *arg) {
  (void)arg;
  pthread_mutex_lock(&lock);
  for (;;) {
    while (!to_show)
      pthread_cond_wait(&to_show_cond, &lock);
    struct to_show *s = to_show;
    to_show = s->next;
    pthread_mutex_unlock(&lock);
    show_failure(s->f);
    free(s);
    pthread_mutex_lock(&lock);
  }
  return NULL;
}

static void start_shower(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, shower, NULL) == 0)
    pthread_detach(t);
}

/* The stand-in completed: the failure shows, soon. */
static void CL_CALLBACK stand_in_done(cl_event e, cl_int status, void *data) {
  (void)e;
  (void)status;
  static pthread_once_t started = PTHREAD_ONCE_INIT;
  pthread_once(&started, start_shower);
  struct to_show *s = malloc(sizeof *s);
  if (!s)
    abort();
  pthread_mutex_lock(&lock);
  *s = (struct to_show){data, to_show};
  to_show = s;
  pthread_cond_signal(&to_show_cond);
  pthread_mutex_unlock(&lock);
}

/* The wait list a command of the real driver gets: an EVENT failure's
 * user event becomes its stand-in, so that what waits for it runs; a
 * STALL failure's, a user event never set, so that it never runs (PoCL
 * would fail those commands, but crashes doing so now and then). */
static const cl_event *translate(cl_uint n, const cl_event *wl, cl_event *room) {
  if (!n || !wl)
    return wl;
  pthread_mutex_lock(&lock);
  for (cl_uint i = 0; i < n; i++) {
    fake *f = fake_of(wl[i]);
    room[i] = !f                         ? wl[i]
              : f->mode == FAILCL_EVENT ? f->stand_in
              : f->mode == FAILCL_STALL ? f->never
                                        : wl[i];
  }
  pthread_mutex_unlock(&lock);
  return room;
}

#define MAX_WAIT 64
#define TRANSLATE(n, wl)                                                                    \
  cl_event room_[MAX_WAIT];                                                                 \
  if ((n) > MAX_WAIT)                                                                       \
    return CL_INVALID_EVENT_WAIT_LIST;                                                      \
  wl = translate((n), (wl), room_)

/* Command `base` (it ran, or stood in for one that did not) fails as
 * `mode` says; *event, if asked for, gets what the caller is to see. */
static cl_int fail_through_event(cl_command_queue q, cl_event base, int mode, cl_event *event) {
  cl_context ctx = NULL;
  cl_int err = REAL(clGetCommandQueueInfo)(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
  fake *f = calloc(1, sizeof *f);
  if (err != CL_SUCCESS || !f) {
    free(f);
    return err != CL_SUCCESS ? err : CL_OUT_OF_HOST_MEMORY;
  }
  f->mode = mode;
  f->stand_in = base;
  if (mode == FAILCL_CALLBACK) {
    f->shown = base;
  } else {
    if (mode == FAILCL_STALL && !(f->never = REAL(clCreateUserEvent)(ctx, &err))) {
      free(f);
      return err;
    }
    f->shown = REAL(clCreateUserEvent)(ctx, &err);
    if (!f->shown) {
      free(f);
      return err;
    }
  }
  REAL(clRetainEvent)(f->shown); /* the table's, and its stand-in's */
  if (f->shown != base)
    REAL(clRetainEvent)(base);
  pthread_mutex_lock(&lock);
  f->next = fakes;
  fakes = f;
  pthread_mutex_unlock(&lock);
  if (mode != FAILCL_CALLBACK)
    REAL(clSetEventCallback)(base, CL_COMPLETE, stand_in_done, f);
  if (event) {
    REAL(clRetainEvent)(f->shown);
    *event = f->shown;
  }
  return CL_SUCCESS;
}

/* A command that stands in for a failed one: a marker after what it
 * waits for; for NEVER, also after a user event never set. */
static cl_int stand_in(cl_command_queue q, cl_uint n, const cl_event *wl, int mode,
                       cl_event *event) {
  cl_event all[MAX_WAIT + 1], marker = NULL;
  cl_int err = CL_SUCCESS;
  if (n > MAX_WAIT)
    return CL_INVALID_EVENT_WAIT_LIST;
  for (cl_uint i = 0; i < n; i++)
    all[i] = wl[i];
  if (mode == FAILCL_NEVER) {
    cl_context ctx = NULL;
    err = REAL(clGetCommandQueueInfo)(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
    cl_event never = err == CL_SUCCESS ? REAL(clCreateUserEvent)(ctx, &err) : NULL;
    if (!never)
      return err;
    all[n++] = never; /* never set, never released */
  }
  err = REAL(clEnqueueMarkerWithWaitList)(q, n, n ? all : NULL, &marker);
  if (err != CL_SUCCESS)
    return err;
  if (mode == FAILCL_NEVER) {
    if (event)
      *event = marker;
    else
      REAL(clReleaseEvent)(marker);
    return CL_SUCCESS;
  }
  err = fail_through_event(q, marker, mode, event);
  REAL(clReleaseEvent)(marker);
  return err;
}

/* ---- commands ----------------------------------------------------------- */

/* What a command that does nothing when it fails does first: its wait
 * list translated, then, when this call is to fail, the failure. */
#define FAIL_AS_ASKED(q, n, wl, event)                                                      \
  int mode = fails(__func__);                                                               \
  TRANSLATE(n, wl);                                                                         \
  if (mode == FAILCL_RETURN)                                                                \
    return CL_OUT_OF_RESOURCES;                                                             \
  if (mode)                                                                                 \
    return stand_in(q, n, wl, mode, event)

cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *off,
                              const size_t *global, const size_t *local, cl_uint n,
                              const cl_event *wl, cl_event *event) {
  FAIL_AS_ASKED(q, n, wl, event);
  return REAL(clEnqueueNDRangeKernel)(q, k, dims, off, global, local, n, wl, event);
}

cl_int clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t off,
                            size_t size, const void *ptr, cl_uint n, const cl_event *wl,
                            cl_event *event) {
  FAIL_AS_ASKED(q, n, wl, event);
  return REAL(clEnqueueWriteBuffer)(q, m, blocking, off, size, ptr, n, wl, event);
}

cl_int clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t off,
                           size_t size, void *ptr, cl_uint n, const cl_event *wl,
                           cl_event *event) {
  FAIL_AS_ASKED(q, n, wl, event);
  return REAL(clEnqueueReadBuffer)(q, m, blocking, off, size, ptr, n, wl, event);
}

cl_int clEnqueueWriteBufferRect(cl_command_queue q, cl_mem m, cl_bool blocking,
                                const size_t *bo, const size_t *ho, const size_t *region,
                                size_t brp, size_t bsp, size_t hrp, size_t hsp, const void *ptr,
                                cl_uint n, const cl_event *wl, cl_event *event) {
  FAIL_AS_ASKED(q, n, wl, event);
  return REAL(clEnqueueWriteBufferRect)(q, m, blocking, bo, ho, region, brp, bsp, hrp, hsp, ptr,
                                        n, wl, event);
}

cl_int clEnqueueReadBufferRect(cl_command_queue q, cl_mem m, cl_bool blocking, const size_t *bo,
                               const size_t *ho, const size_t *region, size_t brp, size_t bsp,
                               size_t hrp, size_t hsp, void *ptr, cl_uint n, const cl_event *wl,
                               cl_event *event) {
  FAIL_AS_ASKED(q, n, wl, event);
  return REAL(clEnqueueReadBufferRect)(q, m, blocking, bo, ho, region, brp, bsp, hrp, hsp, ptr,
                                       n, wl, event);
}

cl_int clEnqueueCopyBuffer(cl_command_queue q, cl_mem from, cl_mem to, size_t from_off,
                           size_t to_off, size_t size, cl_uint n, const cl_event *wl,
                           cl_event *event) {
  FAIL_AS_ASKED(q, n, wl, event);
  return REAL(clEnqueueCopyBuffer)(q, from, to, from_off, to_off, size, n, wl, event);
}

cl_int clEnqueueMarkerWithWaitList(cl_command_queue q, cl_uint n, const cl_event *wl,
                                   cl_event *event) {
  FAIL_AS_ASKED(q, n, wl, event);
  return REAL(clEnqueueMarkerWithWaitList)(q, n, wl, event);
}

/* Map and unmap do their work; then their event fails as the mode says. */
void *clEnqueueMapBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, cl_map_flags flags,
                         size_t off, size_t size, cl_uint n, const cl_event *wl, cl_event *event,
                         cl_int *errcode) {
  int mode = fails(__func__);
  cl_event room[MAX_WAIT];
  if (n > MAX_WAIT) {
    if (errcode)
      *errcode = CL_INVALID_EVENT_WAIT_LIST;
    return NULL;
  }
  wl = translate(n, wl, room);
  if (mode == FAILCL_RETURN) {
    if (errcode)
      *errcode = CL_OUT_OF_RESOURCES;
    return NULL;
  }
  cl_event done = NULL;
  void *p = REAL(clEnqueueMapBuffer)(q, m, blocking, flags, off, size, n, wl, &done, errcode);
  if (!p || !mode) {
    if (event)
      *event = done;
    else if (done)
      REAL(clReleaseEvent)(done);
    return p;
  }
  cl_int err = stand_in(q, 1, &done, mode, event);
  REAL(clReleaseEvent)(done);
  if (errcode)
    *errcode = err;
  return err == CL_SUCCESS ? p : NULL;
}

cl_int clEnqueueUnmapMemObject(cl_command_queue q, cl_mem m, void *p, cl_uint n,
                               const cl_event *wl, cl_event *event) {
  int mode = fails(__func__);
  TRANSLATE(n, wl);
  if (mode == FAILCL_RETURN)
    return CL_OUT_OF_RESOURCES;
  cl_event done = NULL;
  cl_int err = REAL(clEnqueueUnmapMemObject)(q, m, p, n, wl, mode ? &done : event);
  if (err != CL_SUCCESS || !mode)
    return err;
  err = stand_in(q, 1, &done, mode, event);
  REAL(clReleaseEvent)(done);
  return err;
}

cl_mem clCreateBuffer(cl_context c, cl_mem_flags flags, size_t size, void *host, cl_int *err) {
  if (fails(__func__)) {
    if (err)
      *err = CL_OUT_OF_RESOURCES;
    return NULL;
  }
  return REAL(clCreateBuffer)(c, flags, size, host, err);
}

/* ---- events ------------------------------------------------------------- */

typedef struct lie {
  void(CL_CALLBACK *fn)(cl_event, cl_int, void *);
  void *data;
} lie;

static void CL_CALLBACK lying(cl_event e, cl_int status, void *data) {
  lie *l = data;
  l->fn(e, status < 0 ? status : CL_OUT_OF_RESOURCES, l->data);
  free(l);
}

cl_int clSetEventCallback(cl_event e, cl_int type, void(CL_CALLBACK *fn)(cl_event, cl_int, void *),
                          void *data) {
  if (fails(__func__))
    return CL_OUT_OF_RESOURCES;
  pthread_mutex_lock(&lock);
  fake *f = fake_of(e);
  int mode = f ? f->mode : 0;
  if (mode == FAILCL_EVENT && !f->done) { /* called at the failure */
    callback *c = malloc(sizeof *c);
    if (!c) {
      pthread_mutex_unlock(&lock);
      return CL_OUT_OF_HOST_MEMORY;
    }
    *c = (callback){fn, data, f->callbacks};
    f->callbacks = c;
    pthread_mutex_unlock(&lock);
    return CL_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  if (mode == FAILCL_EVENT) { /* failed already */
    fn(e, CL_OUT_OF_RESOURCES, data);
    return CL_SUCCESS;
  }
  if (mode == FAILCL_STALL)
    return CL_SUCCESS; /* never called */
  if (mode == FAILCL_CALLBACK) {
    lie *l = malloc(sizeof *l);
    if (!l)
      return CL_OUT_OF_HOST_MEMORY;
    *l = (lie){fn, data};
    cl_int err = REAL(clSetEventCallback)(e, type, lying, l);
    if (err != CL_SUCCESS)
      free(l);
    return err;
  }
  return REAL(clSetEventCallback)(e, type, fn, data);
}

/* ---- the rest: forwarded ------------------------------------------------ */

#define FORWARD(ret, name, params, args)                                                    \
  ret name params {                                                                         \
    return REAL(name) args;                                                                 \
  }

FORWARD(cl_int, clGetPlatformIDs, (cl_uint n, cl_platform_id *p, cl_uint *np), (n, p, np))
FORWARD(cl_int, clGetPlatformInfo,
        (cl_platform_id p, cl_platform_info i, size_t s, void *v, size_t *r), (p, i, s, v, r))
FORWARD(cl_int, clGetDeviceIDs,
        (cl_platform_id p, cl_device_type t, cl_uint n, cl_device_id *d, cl_uint *nd),
        (p, t, n, d, nd))
FORWARD(cl_int, clGetDeviceInfo, (cl_device_id d, cl_device_info i, size_t s, void *v, size_t *r),
        (d, i, s, v, r))
FORWARD(cl_context, clCreateContext,
        (const cl_context_properties *p, cl_uint n, const cl_device_id *d,
         void(CL_CALLBACK *fn)(const char *, const void *, size_t, void *), void *data,
         cl_int *e),
        (p, n, d, fn, data, e))
FORWARD(cl_int, clReleaseContext, (cl_context c), (c))
FORWARD(cl_int, clRetainContext, (cl_context c), (c))
FORWARD(cl_command_queue, clCreateCommandQueue,
        (cl_context c, cl_device_id d, cl_command_queue_properties p, cl_int *e), (c, d, p, e))
FORWARD(cl_int, clReleaseCommandQueue, (cl_command_queue q), (q))
FORWARD(cl_program, clCreateProgramWithSource,
        (cl_context c, cl_uint n, const char **s, const size_t *l, cl_int *e), (c, n, s, l, e))
FORWARD(cl_int, clBuildProgram,
        (cl_program p, cl_uint n, const cl_device_id *d, const char *o,
         void(CL_CALLBACK *fn)(cl_program, void *), void *data),
        (p, n, d, o, fn, data))
FORWARD(cl_int, clGetProgramBuildInfo,
        (cl_program p, cl_device_id d, cl_program_build_info i, size_t s, void *v, size_t *r),
        (p, d, i, s, v, r))
FORWARD(cl_int, clReleaseProgram, (cl_program p), (p))
FORWARD(cl_kernel, clCreateKernel, (cl_program p, const char *n, cl_int *e), (p, n, e))
FORWARD(cl_int, clReleaseKernel, (cl_kernel k), (k))
FORWARD(cl_int, clSetKernelArg, (cl_kernel k, cl_uint i, size_t s, const void *v), (k, i, s, v))
FORWARD(cl_int, clGetKernelInfo, (cl_kernel k, cl_kernel_info i, size_t s, void *v, size_t *r),
        (k, i, s, v, r))
FORWARD(cl_int, clReleaseMemObject, (cl_mem m), (m))
FORWARD(cl_int, clRetainEvent, (cl_event e), (e))
FORWARD(cl_int, clReleaseEvent, (cl_event e), (e))
FORWARD(cl_int, clWaitForEvents, (cl_uint n, const cl_event *e), (n, e))
FORWARD(cl_int, clGetEventInfo, (cl_event e, cl_event_info i, size_t s, void *v, size_t *r),
        (e, i, s, v, r))
FORWARD(cl_event, clCreateUserEvent, (cl_context c, cl_int *e), (c, e))
FORWARD(cl_int, clSetUserEventStatus, (cl_event e, cl_int s), (e, s))
FORWARD(cl_program, clCreateProgramWithBinary,
        (cl_context c, cl_uint n, const cl_device_id *d, const size_t *l,
         const unsigned char **b, cl_int *st, cl_int *e),
        (c, n, d, l, b, st, e))
FORWARD(cl_int, clGetProgramInfo, (cl_program p, cl_program_info i, size_t s, void *v, size_t *r),
        (p, i, s, v, r))
FORWARD(cl_int, clGetEventProfilingInfo,
        (cl_event e, cl_profiling_info i, size_t s, void *v, size_t *r), (e, i, s, v, r))
FORWARD(cl_int, clFlush, (cl_command_queue q), (q))
FORWARD(cl_int, clFinish, (cl_command_queue q), (q))
