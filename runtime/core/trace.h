/*
 * What ran where and when: trace events, the statistics they add up to,
 * the submitted graph. Recording is off unless tdm_config.trace_path,
 * dag_path or stats asks for it; then each worker appends to a buffer of
 * its own, other threads to a shared one, and everything is written out
 * at destroy or when tdm_trace_flush asks (trace.c).
 */
#ifndef TDM_TRACE_H
#define TDM_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "../support/spinlock.h"

enum tdm_trace_kind {
  TDM_EV_TASK = 1,     /* a task ran on a CPU worker or a device: track = worker */
  TDM_EV_IDLE = 2,     /* a CPU worker looked for work */
  TDM_EV_PARKED = 3,   /* a CPU worker slept */
  TDM_EV_TO_DEVICE = 4, /* a copy host to device k (track = k's worker) */
  TDM_EV_TO_HOST = 5,  /* a copy device k to host */
  TDM_EV_EDGE = 6,     /* task id depends on task id2 (submitted graph) */
  TDM_EV_SUBMIT = 7,   /* task id submitted (its codelet, for the graph) */
  TDM_EV_PAUSE = 8,    /* marks (tdm_trace_mark): the application paused the runtime, */
  TDM_EV_RESUME = 9,   /* resumed it, */
  TDM_EV_CANCEL = 10   /* cancelled a group (its name; count: its tasks not ended) */
};

/* A task's track when it ran on the application's thread (tdm_dispatch):
 * written as a track of its own, after the workers' and the copies'. */
#define TDM_TRACK_APP UINT16_MAX

typedef struct tdm_trace_event {
  uint8_t kind;
  uint16_t track;
  /* id2: a task's: the elements of a data-parallel operation's chunk
   * (its rows lo .. hi), 0 for other tasks */
  uint64_t id, id2;
  uint64_t lo, hi;
  uint64_t t0, t1; /* CLOCK_MONOTONIC ns */
  uint64_t bytes;
  const char *name; /* the codelet's name (its storage outlives the runtime) */
} tdm_trace_event;

/* What the application did, at time t: rare, and with a name of its own
 * (a group's, which does not outlive the group). */
typedef struct tdm_trace_mark {
  uint8_t kind;
  uint64_t t, count;
  char name[64];
} tdm_trace_mark;

typedef struct tdm_trace_marks {
  tdm_spinlock lock;
  tdm_trace_mark *v;
  size_t n, cap;
} tdm_trace_marks;

typedef struct tdm_trace_buf {
  _Atomic int lock; /* a flush may read it while its worker appends */
  tdm_trace_event *ev;
  size_t n, cap;
} tdm_trace_buf;

#endif
