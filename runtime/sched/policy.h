/*
 * Heterogeneous placement policies, and a driver that runs them on a
 * simulated clock (policy.c).
 *
 * The policies decide which worker runs a ready task, from predictions of
 * execution times per kind of worker ("class": a CPU kind, a device) and
 * of transfer times per link. They make no thread or clock calls: a driver
 * tells them the time. The virtual-time driver here runs a whole task
 * graph in simulated time, every task and copy taking its modelled
 * duration, so that a schedule is computed deterministically in a
 * fraction of a second, for machines we do not have and for exact tests.
 * (The runtime's threads will drive the same policies in real time.)
 */
#ifndef TDM_POLICY_H
#define TDM_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem.h"

typedef enum tdm_policy {
  TDM_POLICY_HEFT = 0, /* earliest estimated finish, transfers included */
  TDM_POLICY_WS,       /* work stealing: the releasing worker's queue, thieves */
  TDM_POLICY_EAGER,    /* one queue: the first worker free takes the head */
  TDM_POLICY_RANDOM    /* a random worker that can run it */
} tdm_policy;

const char *tdm__policy_name(tdm_policy p);
/* "heft", "ws", "eager" or "random" into *out; false for anything else. */
bool tdm__policy_parse(const char *name, tdm_policy *out);

/* The placement decision both drivers share (the runtime's threads in
 * sched.c, the simulated clock here): for a ready task, one candidate
 * per worker or class that can run it. */
typedef struct tdm_choice {
  double start;    /* s from now: when it could start there (the worker
                      free, its inputs there) */
  double exec;     /* predicted execution time, s; < 0: unknown */
  bool calibrated; /* the prediction is to be trusted */
  unsigned trying; /* calibration tries in flight there */
} tdm_choice;

/* heft: the index of the candidate where the task would finish first
 * (start + exec). While some candidate is not calibrated, the task is a
 * calibration try instead: the uncalibrated candidate with the fewest
 * tries in flight, if it has fewer than max_tries (*calibrating set);
 * if none has room, -1: not known yet where (the caller shares the task
 * with every kind of worker). */
int tdm__heft_pick(const tdm_choice *c, unsigned n, unsigned max_tries, bool *calibrating);

#define TDM_VT_MAX_CLASSES 16
/* The ranges of a machine description's numbers (tdm__vt_parse_machine). */
#define TDM_VT_MAX_VALUE 1e15
#define TDM_VT_MIN_SPEEDUP 1e-3
#define TDM_VT_MAX_SPEEDUP 1e5
#define TDM_VT_MAX_TIME 1e3
#define TDM_VT_MIN_BANDWIDTH 1e3
#define TDM_VT_MAX_BANDWIDTH 1e15
#define TDM_VT_MAX_BUFFERS TDM_MAX_BUFFERS

/* A machine: workers of classes; each class works in one memory node
 * (0: the host's; a node > 0 is a device's own memory, linked to the
 * host by a latency and a bandwidth). */
typedef struct tdm_vt_machine {
  unsigned nclasses;
  struct tdm_vt_class {
    char name[32];
    unsigned workers;
    unsigned node;
    /* speed-up over one CPU core, per codelet (codelet c uses speedup[c];
     * 0: cannot run it); the simulated truth */
    double speedup[8];
    /* from `slow_at` seconds on, the class runs `slow_factor` times
     * slower (a GPU throttling); 0: never */
    double slow_at, slow_factor;
    /* parsed without a list of codelets: the CODELET=X settings as
     * given, by name */
    unsigned nnamed;
    struct tdm_vt_named {
      char name[32];
      double speedup;
    } named[8];
  } classes[TDM_VT_MAX_CLASSES];
  unsigned nnodes;
  double latency[TDM_VT_MAX_CLASSES];   /* s, node n <-> host */
  double bandwidth[TDM_VT_MAX_CLASSES]; /* bytes/s */
} tdm_vt_machine;

/* A task graph: task i runs codelet `codelet` for `cpu_time` seconds on
 * one CPU core, accessing data items in modes; `deps` are its
 * predecessors (the tests give them explicitly, as the runtime infers
 * them from the accesses). */
typedef struct tdm_vt_task {
  unsigned codelet;
  double cpu_time;
  unsigned nbuf;
  unsigned data[TDM_VT_MAX_BUFFERS];
  uint8_t modes[TDM_VT_MAX_BUFFERS]; /* TDM_R, TDM_W, TDM_RW */
  unsigned ndeps;
  const unsigned *deps;
  /* The user's priority: among tasks ready at the same moment, a higher
   * one is placed first; equal ones by upward rank. Default 0. */
  int priority;
} tdm_vt_task;

typedef struct tdm_vt_graph {
  unsigned ntasks;
  const tdm_vt_task *tasks;
  unsigned ndata;
  const uint64_t *bytes; /* per data item */
} tdm_vt_graph;

typedef struct tdm_vt_result {
  double makespan;
  unsigned tasks_per_class[TDM_VT_MAX_CLASSES];
  /* per codelet and class */
  unsigned codelet_class[8][TDM_VT_MAX_CLASSES];
  uint64_t bytes_moved;
  /* per task: the worker (a global index, classes in order) and times */
  unsigned *worker;
  double *start, *end;
} tdm_vt_result;

/* Runs graph g on machine m under policy p in simulated time. The
 * policies predict with a model that starts from the declared speeds and
 * learns from the durations it sees (the runtime's performance model,
 * perfmodel.h: the median of the last observations per codelet and
 * class, trusted once calibrated), so that a class that slows
 * down gets less work. `seed` drives random choices. Fills *r (the arrays
 * are malloc'd, r->worker etc.; free with tdm__vt_result_free). Returns
 * TDM_OK, TDM_ERR_INVALID_ARG (a task no class can run, a cycle, bad
 * indices) or TDM_ERR_NO_MEMORY. */
tdm_status tdm__vt_run(const tdm_vt_machine *m, const tdm_vt_graph *g, tdm_policy p,
                       uint64_t seed, tdm_vt_result *r);
void tdm__vt_result_free(tdm_vt_result *r);

/* Parses a machine description:
 *
 *   machine := class (';' class)*
 *   class   := name ':' setting (',' setting)*   (or just name)
 *   setting := workers=N          workers of the class (default 1)
 *            | memory=shared|own  the host's memory, or its own node
 *                                 (default: shared for a class named
 *                                 "cpu", own otherwise)
 *            | speedup=X          over one CPU core, for every codelet
 *                                 (default 1)
 *            | CODELET=X          for one codelet (its name in `codelets`)
 *            | latency=T          link latency: T in s, ms, us or ns
 *            | bandwidth=B        bytes per second, k M G T (powers of 1000)
 *            | slow_at=T, slow_factor=X   slows down from T on
 *
 * e.g. "cpu:workers=2;gpu:speedup=10,small=0.5,latency=10us,bandwidth=10G".
 * Ranges (anything outside is refused, so that no product of them
 * overflows): speed-ups and slow_factor from 1e-3 to 1e5 (a codelet's may
 * also be 0), times up to 1000 s, bandwidths from 1 kB/s to 1e15 B/s.
 * With codelets NULL, any other key is a codelet's name, kept in the
 * class's `named` list (at most 8, names up to 31 characters).
 * Returns TDM_OK, or TDM_ERR_INVALID_ARG with what is wrong in err. */
tdm_status tdm__vt_parse_machine(const char *text, const char *const *codelets,
                                 unsigned ncodelets, tdm_vt_machine *m, char *err,
                                 size_t err_size);

/* The lower bound of g's makespan on m: the larger of the critical path
 * (each task at its fastest class, transfers free) and the area bound
 * (the work spread over all workers at their speeds, as a fractional
 * assignment would). */
double tdm__vt_lower_bound(const tdm_vt_machine *m, const tdm_vt_graph *g);

#endif
