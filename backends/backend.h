/*
 * What a backend provides: a tdm_backend (below), listed in tdm__backends
 * (backends/backends.c), which the runtime asks in order to discover
 * devices; the first backend that claims the runtime drives its device
 * workers. Its state lives behind rt->backend, opaque to the core.
 *
 * The backend also provides memory-node operations (tdm_node_ops) used by
 * the coherence module (runtime/data/coherence.h): allocate a buffer on a
 * node, free it, copy between a node and the host returning a completion
 * token, and test, wait for, retain and release tokens. A token is the
 * backend's own (an OpenCL completion record, an emulated completion
 * time); 0 is "nothing to wait for". The coherence module decides what is
 * copied; backends only move bytes.
 *
 * What a backend may call in the runtime is backends/driver.h, the one
 * runtime header a backend includes.
 */
#ifndef TDM_BACKEND_H
#define TDM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem.h"

typedef uint64_t tdm_token;

/* One copy between a handle's elements in host memory and a buffer on a
 * node holding them packed (row after row, `pitch` bytes apart). */
typedef struct tdm_copy {
  const tdm_buffer *host;
  void *mem;
  size_t pitch;
} tdm_copy;

typedef struct tdm_node_ops {
  /* A buffer of `bytes` on node `node` for elements of host buffer b (a
   * device working in host memory may use b's memory itself); NULL when
   * it cannot be made (out of room: the caller may make room and retry). */
  void *(*alloc)(void *ctx, unsigned node, const tdm_buffer *b, size_t bytes);
  void (*free)(void *ctx, unsigned node, void *mem);
  /* Starts copying between the host and node `node` (to_node: host to
   * node), after the tokens after[0 .. nafter-1]; *done gets the copy's
   * token (a reference). False when it could not be started (logged). */
  bool (*copy)(void *ctx, unsigned node, bool to_node, const tdm_copy *c,
               const tdm_token *after, unsigned nafter, tdm_token *done);
  /* A new token complete when all of ts are (a reference; 0 when n is 0);
   * may wait for them instead, returning 0. */
  tdm_token (*join)(void *ctx, const tdm_token *ts, unsigned n);
  /* Another reference to t (false: none could be taken); drops one. */
  bool (*retain)(void *ctx, tdm_token t);
  void (*release)(void *ctx, tdm_token t);
  /* Whether t is complete; blocks until all of ts are. */
  bool (*test)(void *ctx, tdm_token t);
  void (*wait)(void *ctx, const tdm_token *ts, unsigned n);
  /* Whether t completed with an error: the copy did not land, nor did
   * anything ordered after it (a command after a failed one does not
   * run, as OpenCL terminates the commands waiting on a failed event).
   * NULL: tokens never fail. */
  bool (*failed)(void *ctx, tdm_token t);
  /* Calls fn(arg, status) once all of ts are complete (status < 0 when
   * one failed), from any thread; false when it cannot (the caller waits
   * instead). May be NULL. */
  bool (*when_done)(void *ctx, const tdm_token *ts, unsigned n, void (*fn)(void *, int),
                    void *arg);
  /* Predicted seconds of a copy of `bytes` between the host and `node`. */
  double (*link_time)(void *ctx, unsigned node, uint64_t bytes);
} tdm_node_ops;

typedef struct tdm_runtime tdm_runtime;
typedef struct tdm_task tdm_task;
struct tdm_trace_event;
struct tdm_device_counters;

typedef struct tdm_backend {
  const char *name; /* for messages: "OpenCL", "emulated" */
  /* Finds this backend's devices (rt->devices records, rt->device_of,
   * rt->ndevice_workers). *claims: the runtime is this backend's (it was
   * asked for, or it is the last resort), and no backend after it is
   * asked; it may still have found no device. TDM_OK, or why the runtime
   * cannot start (logged). */
  tdm_status (*discover)(tdm_runtime *rt, bool *claims);
  /* Frees what discover and start made, memory nodes included (at
   * destroy, after stop and after the handles are gone); NULL: nothing. */
  void (*release)(tdm_runtime *rt);
  /* Starts the device workers (after the CPU workers). Stop: no task runs
   * or ends on a device any more, no command or callback is in flight
   * (the handles go next, while the memory nodes are still there). */
  tdm_status (*start)(tdm_runtime *rt);
  void (*stop)(tdm_runtime *rt);
  /* At submission: which devices may run t (t->dev_mask, t->device_ok when
   * any may); TDM_OK, or why a task that can only run on a device
   * cannot (logged). */
  tdm_status (*prepare)(tdm_runtime *rt, tdm_task *t, const char *what);
  /* The device worker the calling thread is, or -1. */
  int (*current)(const tdm_runtime *rt);
  /* Queues t on device k, which starts it when it has room. */
  void (*push)(tdm_runtime *rt, unsigned k, tdm_task *t);
  /* Takes back the task queued last on device k, not started, if `want`
   * accepts it (called under the device's lock; may be NULL); or NULL.
   * Cheap when nothing is queued (no lock taken). */
  tdm_task *(*take)(tdm_runtime *rt, unsigned k, bool (*want)(tdm_task *, void *),
                    void *data);
  /* Device k may take work from the shared queue or from others now. */
  void (*kick)(tdm_runtime *rt, unsigned k);
  /* Ends the tasks whose device work completed; false if none. May be
   * NULL (devices that end their tasks on threads of their own). */
  bool (*progress)(tdm_runtime *rt);
  /* Device events of the trace not recorded as they happened (may be
   * NULL). */
  void (*trace_collect)(tdm_runtime *rt, void (*add)(void *, const struct tdm_trace_event *),
                        void *data);
  uint64_t (*busy_ns)(const tdm_runtime *rt, unsigned k);
  void (*counters)(const tdm_runtime *rt, unsigned k, struct tdm_device_counters *c);
  /* An emulated machine: how many times its real duration task t takes
   * on CPU worker `worker` (the CPU workers stretch their tasks by it);
   * NULL: the real machine. */
  double (*cpu_factor)(const tdm_runtime *rt, unsigned worker, const tdm_task *t);
  /* Device k is hung (the watchdog found a try past its deadline;
   * rt->hung has it, so nothing more starts there): the tries in flight
   * there end failed with TDM_ERR_DEVICE_LOST, undone as failed runs, on
   * threads that hold no lock; a completion of one of them that comes
   * later is ignored. Called on the watchdog's thread. */
  void (*abandon)(tdm_runtime *rt, unsigned k);
  /* tdm_codelet_build: builds cl's programs on every device, calls
   * done(data, status) once all are built (may be NULL: nothing to
   * build). */
  void (*build)(tdm_runtime *rt, const tdm_codelet *cl, tdm_build_fn done, void *data);
} tdm_backend;

/* The backends, in the order they are asked; NULL-terminated
 * (backends/backends.c). */
extern const tdm_backend *const tdm__backends[];

#endif
