/*
 * The boundary between the runtime and its device backends.
 *
 * A backend provides memory-node operations (here) used by the coherence
 * module (runtime/data/coherence.h): allocate a buffer on a node, free it,
 * copy between a node and the host returning a completion token, and
 * test, wait for, retain and release tokens. A token is the backend's own
 * (an OpenCL event, an emulated completion time); 0 is "nothing to wait
 * for". The coherence module decides what is copied; backends only move
 * bytes.
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
  /* Calls fn(arg, status) once all of ts are complete (status < 0 when
   * one failed), from any thread; false when it cannot (the caller waits
   * instead). May be NULL. */
  bool (*when_done)(void *ctx, const tdm_token *ts, unsigned n, void (*fn)(void *, int),
                    void *arg);
  /* Predicted seconds of a copy of `bytes` between the host and `node`. */
  double (*link_time)(void *ctx, unsigned node, uint64_t bytes);
} tdm_node_ops;

#endif
