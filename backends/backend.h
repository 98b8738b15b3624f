/*
 * What a backend provides: a tdm_backend (below), listed in tdm__backends
 * (backends/backends.c), which the runtime asks in order to discover
 * devices; every backend that finds some drives its own device workers,
 * beside the others (emulated devices beside OpenCL's: tdm_config.sim's
 * "+opencl"). Its state is its own (tdm__state_of), opaque to the core.
 *
 * The backend also provides memory-node operations (tdm_node_ops) used by
 * the coherence module (runtime/data/coherence.h): allocate a buffer on a
 * node, free it, copy between a node and the host returning a completion
 * token, and test, wait for, retain and release tokens. A token is the
 * backend's own (an OpenCL completion record, an emulated completion
 * time); 0 is "nothing to wait for", and bits 56 to 62 stay clear: when
 * several backends share a runtime, the memory nodes mark there whose
 * token it is (runtime/data/nodes.c). The coherence module decides what is
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

/* The most backends a runtime holds at once (tdm__backends). */
#define TDM_MAX_BACKENDS 4

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
  /* Predicted seconds until the link between the host and `node` has
   * carried the copies already started on it that way (to_node: from the
   * host to node; else home), 0: free now; a copy started now that way
   * waits that long first. May be NULL: not known, taken as 0. */
  double (*link_wait)(void *ctx, unsigned node, bool to_node);
  /* Device-to-device copies, for a backend whose devices can copy
   * between their memories without the host (two GPUs in one OpenCL
   * context; GPUs behind one PCIe switch). Both may be NULL: every copy
   * between devices goes through the host.
   * peer_time: predicted seconds of a copy of `bytes` from device node
   * `from` straight into device node `to`; < 0 when those two cannot
   * (then it goes through the host).
   * peer_copy: starts copying `bytes` (packed) from `from_mem` on node
   * `from` into `to_mem` on node `to`, after the tokens after[0 ..
   * nafter-1]; *done gets its token (a reference), which fails when the
   * copy failed or one it came after did. False when it could not be
   * started (logged; the caller goes through the host instead). */
  double (*peer_time)(void *ctx, unsigned from, unsigned to, uint64_t bytes);
  bool (*peer_copy)(void *ctx, unsigned from, unsigned to, void *from_mem, void *to_mem,
                    size_t bytes, const tdm_token *after, unsigned nafter, tdm_token *done);
} tdm_node_ops;

typedef struct tdm_runtime tdm_runtime;
typedef struct tdm_task tdm_task;
struct tdm_trace_event;
struct tdm_device_counters;

/* Every operation must be given unless its comment says it may be NULL. */
typedef struct tdm_backend {
  const char *name; /* for messages: "OpenCL", "emulated" */
  /* Finds this backend's devices: appends their records to rt->devices
   * (rt->ndevices on) and gives each one it uses a device worker,
   * numbered on from rt->ndevice_workers (rt->device_of; at most
   * TDM_MAX_DEVICE_WORKERS in all). *state: its own, found again with
   * tdm__state_of, until release. It takes part when it made a state or
   * found devices. *last: no backend after it is asked. TDM_OK, or why
   * the runtime cannot start (logged). */
  tdm_status (*discover)(tdm_runtime *rt, void **state, bool *last);
  /* Frees what discover and start made (at destroy, after stop, after
   * the handles and the memory nodes are gone); NULL: nothing. */
  void (*release)(tdm_runtime *rt);
  /* Starts its device workers (after the CPU workers), their memory
   * nodes given their operations (tdm__nodes_add). Stop: no task runs or
   * ends on its devices any more, no command or callback is in flight
   * (the handles go next, while the memory nodes are still there). */
  tdm_status (*start)(tdm_runtime *rt);
  void (*stop)(tdm_runtime *rt);
  /* At submission: sets the bits of t->dev_mask of its devices that may
   * run t, others untouched; TDM_OK, or why none of them can (logged; the
   * runtime reports it when no other backend's device can run t either
   * and t has no CPU variant). */
  tdm_status (*prepare)(tdm_runtime *rt, tdm_task *t, const char *what);
  /* The device worker the calling thread is, if it is one of its own, or
   * -1. */
  int (*current)(const tdm_runtime *rt);
  /* Queues t on its device k, which starts it when it has room. */
  void (*push)(tdm_runtime *rt, unsigned k, tdm_task *t);
  /* Takes back the task queued last on device k, not started, if `want`
   * accepts it (called under the device's lock; may be NULL); or NULL.
   * Cheap when nothing is queued (no lock taken). */
  tdm_task *(*take)(tdm_runtime *rt, unsigned k, bool (*want)(tdm_task *, void *),
                    void *data);
  /* Device k may take work from the shared queue or from others now. */
  void (*kick)(tdm_runtime *rt, unsigned k);
  /* Ends the tasks whose device work completed; false if none. Ended:
   * whether such tasks wait (cheap, any thread). Both NULL for devices
   * that end their tasks on threads of their own. */
  bool (*progress)(tdm_runtime *rt);
  bool (*ended)(const tdm_runtime *rt);
  /* Device events of the trace not recorded as they happened (may be
   * NULL). */
  void (*trace_collect)(tdm_runtime *rt, void (*add)(void *, const struct tdm_trace_event *),
                        void *data);
  uint64_t (*busy_ns)(const tdm_runtime *rt, unsigned k);
  void (*counters)(const tdm_runtime *rt, unsigned k, struct tdm_device_counters *c);
  /* An emulated machine: how many times its real duration task t takes
   * on CPU worker `worker` (the CPU workers stretch their tasks by it);
   * NULL: the real machine. At most one backend of a runtime has it. */
  double (*cpu_factor)(const tdm_runtime *rt, unsigned worker, const tdm_task *t);
  /* Device k is hung (the watchdog found a try past its deadline;
   * rt->hung has it, so nothing more starts there): the tries in flight
   * there end failed with TDM_ERR_DEVICE_LOST, undone as failed runs, on
   * threads that hold no lock; a completion of one of them that comes
   * later is ignored. Called on the watchdog's thread. NULL: its tries
   * are never watched (tdm__watch not called). */
  void (*abandon)(tdm_runtime *rt, unsigned k);
  /* tdm_codelet_build: builds cl's programs on every one of its devices,
   * calls done(data, status) once all are built (NULL: nothing to build;
   * one backend of a runtime builds: the first that can). */
  void (*build)(tdm_runtime *rt, const tdm_codelet *cl, tdm_build_fn done, void *data);
} tdm_backend;

/* The backends, in the order they are asked; NULL-terminated
 * (backends/backends.c). */
extern const tdm_backend *const tdm__backends[];

#endif
