/*
 * The data layer: handles and the memory they describe. Registration,
 * tiles and lifetime (handles.c), the registered memory (ranges.c), where
 * contents are and every copy (coherence.c, coherence.h), each node's
 * memory and its eviction (memory.c), a task's buffers where it runs
 * (access.c), the chains of device writes that lineage replays
 * (lineage.c). It calls the platform and support layers.
 */
#ifndef TDM_DATA_H
#define TDM_DATA_H

#include "../objects.h"
#include "../platform/platform.h"
#include "coherence.h"

/* ---- registered memory (ranges.c) ----------------------------------------- */

/* [*lo, *hi): the bytes from b's first element to the end of its last row;
 * false when that overflows. */
bool tdm__buffer_span(const tdm_buffer *b, uintptr_t *lo, uintptr_t *hi);
/* A registered range sharing a byte with b (exactly: rows that interleave
 * do not count), or NULL. */
tdm_memrange *tdm__ranges_find(const tdm_ranges *t, const tdm_buffer *b);
/* Adds x, the range of b (whose span does not overflow); removes it. */
void tdm__ranges_insert(tdm_ranges *t, tdm_memrange *x, const tdm_buffer *b);
void tdm__ranges_remove(tdm_ranges *t, tdm_memrange *x);

/* ---- handles (handles.c) --------------------------------------------------- */

/* Checks that h can be named by a task of rt (magic, runtime); logs why
 * not. Checks needing the handle's lock are made at submission. */
tdm_status tdm__handle_check(tdm_runtime *rt, const tdm_handle *h,
                             const char *what);
/* Locks n distinct handles, sorted by address: every thread locks in
 * that order, so submitters cannot deadlock. */
void tdm__handles_lock(tdm_handle **hs, unsigned n);
void tdm__handles_unlock(tdm_handle **hs, unsigned n);
void tdm__handles_destroy(tdm_runtime *rt);
/* Brings every registered handle's contents home (at destroy). */
void tdm__handles_home(tdm_runtime *rt);
static inline void tdm__handle_ref(tdm_handle *h) {
  /* relaxed: as for tasks */
  atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
}
void tdm__handle_unref(tdm_handle *h);

/* The runtime of a handle the caller passed, after checking it looks like
 * one (NULL when it does not; nothing can be logged then). */
tdm_runtime *tdm__handle_runtime(const tdm_handle *h);
/* The prologue of a public call on a handle: *rt its runtime, then the
 * fork guard and tdm__handle_check; TDM_ERR_INVALID_ARG (not logged)
 * when h is not a handle at all. */
tdm_status tdm__handle_enter(const tdm_handle *h, const char *what, tdm_runtime **rt);
/* A new handle: a tile of `parent` (which it references), or a
 * registration (parent NULL): NULL with *clash set to the span of a
 * registered handle it would share memory with. */
tdm_handle *tdm__handle_new(tdm_runtime *rt, uint8_t kind, const tdm_buffer *buf,
                            tdm_handle *parent, tdm_memrange *clash);
/* Marks h dead and parks its registration reference in the quarantine of
 * the last unregistered handles (its dependency state dropped before). */
void tdm__handle_quarantine(tdm_handle *h);

/* ---- a task's buffers where it runs (access.c) ----------------------------- */

/* data/access.c: a task's buffers where it runs. Slot 1 + k is device k's
 * buffers (in its own memory, or over host memory for a device working
 * there); node is where it works (tdm__device_node). */
/* Makes t's buffers in `slot` and pins them (mems[i]), waiting a moment
 * while other threads hold buffers in the way; false, none pinned, when
 * they do not fit beside the pinned ones. */
bool tdm__task_pin(tdm_runtime *rt, tdm_task *t, unsigned slot, void **mems);
/* Whether t's buffers fit in `slot`'s memory at all (nothing else there). */
bool tdm__task_fits(const tdm_runtime *rt, const tdm_task *t, unsigned slot);
void tdm__task_unpin(tdm_runtime *rt, tdm_task *t, unsigned slot, unsigned n);
/* t's accesses on `node` for device node `slot` (1 + device worker k,
 * working in its own memory or in the host's): copies started, what to
 * wait for added to w (tokens of that device's backend);
 * false when a copy could not be made (logged). `replay`: a version that
 * only a failed device held may be made again here by its lineage, which
 * runs CPU variants on this thread (the caller holds no lock). */
bool tdm__task_access(tdm_runtime *rt, tdm_task *t, unsigned slot, unsigned node,
                      tdm_tokens *w, bool replay);
/* Starts the copies of t's inputs to node, where t is queued to run
 * (it may yet run elsewhere: nothing is announced written, nothing
 * replayed). */
void tdm__task_prefetch(tdm_runtime *rt, tdm_task *t, unsigned node);
/* t's writes were made on node, complete at `done` (the caller keeps its
 * reference; 0: complete), a token of the backend of device node `slot`
 * (0 for the host's run). */
void tdm__task_written(tdm_runtime *rt, tdm_task *t, unsigned slot, unsigned node,
                       tdm_token done);
/* t ran on node and failed: what it wrote is undone. On a device with
 * memory of its own (node > 0), the buffers it writes hold no version
 * there; the host's copy, which tdm__task_access kept current for a
 * write on a device when it could (else the task is spoiled: not tried
 * again), holds the version t was given. Call it before unpinning t there
 * (an eviction must not write the failed run back). On a device working
 * in host memory (node 0), `before`, tdm__task_snapshot's copy, is put
 * back and freed. A task that fails before it runs needs nothing undone:
 * its inputs are as they were, and what it only writes is made valid when
 * written. */
void tdm__task_write_failed(tdm_runtime *rt, tdm_task *t, unsigned node, void *before);
/* t's run on node succeeded (its writes recorded): with
 * tdm_config.writeback, what it wrote on a device with memory of its own
 * starts its way home (cheap otherwise). A copy that cannot start leaves
 * that version on the device alone (logged): the run is not undone, as
 * the copies that did start are already bringing the new versions over
 * the ones a retry would need. */
void tdm__task_write_back(tdm_runtime *rt, tdm_task *t, unsigned node);
/* A try of t failed (any reason): tdm__coh_try_failed for each of its
 * handles (the copies whose copy failed no longer count as versions, its
 * writes' preparations are over); a try on a device working in host
 * memory (in_host) did not change what it read and wrote there (not run,
 * or undone). Cold path. */
void tdm__task_drop_failed(tdm_runtime *rt, tdm_task *t, bool in_host);
/* For a device working in host memory: a copy of the buffers t writes,
 * from which tdm__task_write_failed undoes a run that failed; NULL when t
 * writes nothing (*ok true) or there was no memory for it (*ok false,
 * logged). Free it with free() once the run succeeded. */
void *tdm__task_snapshot(tdm_runtime *rt, const tdm_task *t, bool *ok);
/* The node device k works in: 1 + k (its own memory) or 0. */
unsigned tdm__device_node(const tdm_runtime *rt, unsigned k);
/* Before a CPU task runs: true when its inputs are on the host; else
 * their copies are started and fetched(t, status) is called once they
 * complete (status < 0: one failed), which queues t again. After it ran:
 * its outputs live on the host only. */
bool tdm__host_ready(tdm_task *t, void (*fetched)(void *, int));
/* t cannot run on the host: its inputs did not come home (status: why).
 * This try fails (tdm__task_execute ends it, or tries it again), its
 * outputs as they were. */
void tdm__host_not_home(tdm_task *t, int status);
void tdm__host_written(tdm_task *t);
/* Blocking: brings h's contents home (acquire, unregister, destroy);
 * will_write: the host is about to write, device copies become stale. A
 * copy that fails is tried again (tdm_config.retries times); false when
 * none landed (logged): the host's memory does not hold h's version. */
bool tdm__handle_home(tdm_handle *h, bool will_write);
/* tdm__handle_home of h's current version as it is, for a lineage
 * replay (`depth` of them nested): a matrix's tiles still to gather stay
 * so (gathering belongs to its next user, after the tiles' writers); its
 * copy home is ordered as an eviction's is. h must not be a tile not yet
 * taken from its matrix (which would take its matrix's contents). */
bool tdm__handle_home_as_is(tdm_handle *h, unsigned depth);
/* Releases h's device buffers (lock: see tdm__coh_forget). */
void tdm__handle_forget(tdm_handle *h, bool lock);
/* Predicted seconds to bring t's inputs to `node` now (0: there), by the
 * nodes' link times (the runtime's, or virtual time's). */
double tdm__transfer_time(const tdm_nodes *nodes, unsigned node, const tdm_task *t);
/* Seconds of copies already queued on device node `node`'s link, the
 * busier way (0 for the host's node, or not known). */
double tdm__link_busy(const tdm_nodes *nodes, unsigned node);

#endif
