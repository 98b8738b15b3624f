/*
 * The one runtime header a backend includes: the layouts it reads (a
 * runtime, a task, the device records: runtime/objects.h), the support
 * layer (messages, the allocation seam, injected faults, the clock,
 * files: runtime/support/support.h), what it provides (backends/backend.h)
 * and, below, exactly the functions of the layers above support that a
 * backend calls, each with why. A new call from a backend is added here
 * first; tools/check-layers fails on a backend that calls anything else
 * of the runtime or includes another runtime header. The declarations
 * repeat those of the layers' headers, with which the compiler checks
 * that they agree (runtime/internal.h includes both).
 *
 * Device worker k (worker id nworkers + k) drives device record
 * device_of[k]. Memory node 0 is the host's; device k's own memory, if it
 * has any, is node 1 + k. A device's "slot" is 1 + k always: where its
 * buffers for a task are kept (over the host's memory for a device
 * working there, whose node is 0).
 *
 * A backend's life (backends/sim/sim.c is the smallest example):
 *  - discover: append a record per device to rt->devices (zeroed, then
 *    name, vendor, cls, reason, shared_memory and memory_reason, used,
 *    usage, worker = nworkers + k, duplicate_of = -1, numa_node = -1) and
 *    k to rt->device_of for each device it drives, k numbered on from
 *    rt->ndevice_workers; set *state. Its settings come through
 *    tdm_config; an environment variable of its own is added to the list
 *    in runtime/core/config.c (and docs/environment.md), else it is
 *    warned about as unknown.
 *  - start: tdm__nodes_add(&rt->nodes, its node ops, ctx, first, n,
 *    limits): device workers first .. first + n - 1, limits[i] the bytes
 *    of device first + i's own memory, 0 for a device working in the
 *    host's (then it needs no copies, and its node ops only see slots).
 *  - push: tdm__taskq_put under its lock, then start what it can; a
 *    device in its own memory may tdm__task_prefetch its inputs.
 *  - to start a task: tdm__taskq_next under its lock (it may drop and
 *    take the lock again; NULL: nothing to start now, empty or paused);
 *    tdm__task_outcome_at_start (nonzero: end it with that status at
 *    once, t0 = t1 = 0); on its own memory tdm__task_pin its slot;
 *    tdm__task_access (the tokens in w are its own, released with
 *    tdm__tokens_release once waited for; `replay`: lineage may run CPU
 *    variants on this thread to make a lost input again); run it after
 *    they complete (application code under TDM_USER_CODE);
 *    tdm__task_written with its completion token; tdm__task_write_back;
 *    tdm__task_unpin; tdm__task_done with the times it ran
 *    (tdm__now_ns). A failed run: tdm__task_write_failed before
 *    unpinning (tdm__task_snapshot beforehand for a device in the host's
 *    memory), then tdm__task_done with the status.
 *  - tdm__wake_for_completion: a CPU worker should look (its progress, or
 *    work queued that idle workers may take).
 */
#ifndef TDM_DRIVER_H
#define TDM_DRIVER_H

#include "../runtime/objects.h"
#include "../runtime/sched/perfmodel.h"
#include "../runtime/support/support.h"
#include "backend.h"

/* ---- platform (runtime/platform) ---------------------------------------- */

/* A class of device's name, for its messages (public: tandem.h). */
const char *tdm_device_class_name(tdm_device_class c);

/* Discovery classifies, deduplicates and chooses the records it fills
 * (devices.h), and places a device near its CPUs (platform.h). */
void tdm__classify_device(tdm_device_record *d);
void tdm__dedupe_devices(tdm_device_record *d, unsigned n);
void tdm__select_devices(tdm_device_record *d, unsigned n, const tdm_device_selection *sel);
int tdm__nearest_numa(hwloc_topology_t topo, hwloc_const_cpuset_t set);

/* ---- data (runtime/data) ------------------------------------------------- */

/* Its devices' memory nodes copy through its operations: given at start
 * (nodes.c). */
int tdm__nodes_add(tdm_nodes *nodes, const tdm_node_ops *ops, void *ctx, unsigned first,
                   unsigned n, const uint64_t *limits);
/* Staging a task on its node: its buffers made, pinned and filled, what
 * to wait for; the run's writes recorded, undone, or sent home
 * (data.h). */
bool tdm__task_pin(tdm_runtime *rt, tdm_task *t, unsigned slot, void **mems);
bool tdm__task_fits(const tdm_runtime *rt, const tdm_task *t, unsigned slot);
void tdm__task_unpin(tdm_runtime *rt, tdm_task *t, unsigned slot, unsigned n);
bool tdm__task_access(tdm_runtime *rt, tdm_task *t, unsigned slot, unsigned node,
                      tdm_tokens *w, bool replay);
void tdm__task_prefetch(tdm_runtime *rt, tdm_task *t, unsigned node);
void tdm__task_written(tdm_runtime *rt, tdm_task *t, unsigned slot, unsigned node,
                       tdm_token done);
void tdm__task_write_failed(tdm_runtime *rt, tdm_task *t, unsigned node, void *before);
void tdm__task_write_back(tdm_runtime *rt, tdm_task *t, unsigned node);
void *tdm__task_snapshot(tdm_runtime *rt, const tdm_task *t, bool *ok);
/* The tokens a staging gave to wait for: made empty, released once
 * waited (coherence.h). */
static inline void tdm__tokens_init(tdm_tokens *w);
void tdm__tokens_release(const struct tdm_nodes *nodes, tdm_tokens *w);
/* A buffer's packed size, its memory's use: for sizing and counters
 * (coherence.h). */
size_t tdm__coh_bytes(const tdm_handle *h);
size_t tdm__coh_span(const tdm_handle *h);
void tdm__mem_usage(const tdm_nodes *nodes, unsigned node, uint64_t *used, uint64_t *limit,
                    uint64_t *evictions);
/* Predicted seconds to bring a task's inputs to a node, behind the
 * copies on its link: an adaptive window's look ahead (data.h). */
double tdm__transfer_time(const tdm_nodes *nodes, unsigned node, const tdm_task *t);

/* ---- scheduling (runtime/sched) ----------------------------------------- */

/* Its queue of placed tasks, under its device's lock (sched.h). */
void tdm__taskq_put(tdm_taskq *q, tdm_task *t);
void tdm__taskq_put_first(tdm_taskq *q, tdm_task *t);
tdm_task *tdm__taskq_pop(tdm_taskq *q);
/* Its links' models, learnt from its copies (perfmodel.h). */
void tdm__link_observe(tdm_link_model *l, uint64_t bytes, double seconds);
bool tdm__link_estimate(const tdm_link_model *l, double *latency, double *bandwidth);
double tdm__link_predict(const tdm_link_model *l, uint64_t bytes);
/* An emulated machine's description (policy.h). */
tdm_status tdm__vt_parse_machine(const char *text, const char *const *codelets,
                                 unsigned ncodelets, tdm_vt_machine *m, char *err,
                                 size_t err_size);

/* ---- core (runtime/core) ------------------------------------------------- */

/* The next task for device k, and one taken back from its queue
 * (core.h). */
tdm_task *tdm__taskq_next(tdm_runtime *rt, unsigned k, tdm_taskq *q, pthread_mutex_t *lock);
tdm_task *tdm__taskq_take(tdm_runtime *rt, tdm_taskq *q, pthread_mutex_t *lock,
                          bool (*want)(tdm_task *, void *), void *data);
/* Whether the runtime is paused: a device starts nothing. */
bool tdm__devices_paused(const tdm_runtime *rt);
/* A task placed again (its program built), or refused by device k. */
void tdm__place(tdm_runtime *rt, tdm_task *t);
void tdm__device_refused(tdm_runtime *rt, unsigned k, tdm_task *t, tdm_status status);
/* Codelet `codelet`'s variant was disabled on device k as a programming
 * error (`status`, `why`): the application is told. Once per variant and
 * device; no lock held. */
void tdm__kernel_disabled(tdm_runtime *rt, unsigned k, const char *codelet, tdm_status status,
                          const char *why);
/* The one way a task ends, with its status. */
void tdm__task_done(tdm_task *t, unsigned worker, tdm_status status, uint64_t t0,
                    uint64_t t1);
/* A CPU worker should call the backend's progress. */
void tdm__wake_for_completion(tdm_runtime *rt);
/* The model's time for t on device k (*calibrated: to be trusted), or
 * < 0: an adaptive window's measure of the work in flight (core.h). */
double tdm__sched_predict_on(tdm_runtime *rt, const tdm_task *t, unsigned k, bool *calibrated);
/* The watchdog: the try a device runs now; a device found hung. */
bool tdm__watch(tdm_runtime *rt, unsigned k, const tdm_task *t, uint64_t since);
void tdm__device_hung(tdm_runtime *rt, unsigned k, const char *why);
/* An emulated device runs a task's CPU variant on its copies. */
void tdm__cpu_run(const tdm_task *t, const tdm_buffer *bufs);
/* A trace event recorded as it happens (an emulated copy). */
void tdm__trace_add(tdm_runtime *rt, const tdm_trace_event *e);

#endif
