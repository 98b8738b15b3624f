/*
 * Data-parallel operations in virtual time, shared by test-vtime and
 * bench-parallel: a range cut as tdm_parallel_submit cuts it
 * (tdm__parallel_plan), each chunk a task reading its part of an input
 * and writing its part of an output, regular (every element costs the
 * same) or irregular (an element's cost varies tenfold across the range,
 * as Mandelbrot rows do), on a machine given by its description. The
 * model knows a chunk by its size only (tdm_vt_task.model_time), as the
 * runtime's does. Header-only.
 */
#ifndef TDM_VT_PARALLEL_H
#define TDM_VT_PARALLEL_H

#include <math.h>

#include "core/core.h" /* tdm__parallel_plan */
#include "sched/perfmodel.h"
#include "vt-graphs.h"

#define VT_OP_ELEMENT 10e-9 /* seconds of one core per element, on average */
#define VT_OP_BYTES 4       /* bytes per element of the input and of the output */

/* Seconds of one core for elements [0, x) of a range of n: regular, or
 * 1 + 9 sin^2(pi i / n) times a base that keeps the average at
 * VT_OP_ELEMENT (from 1 to 10 times the base: the middle costs most). */
static inline double vt_op_cost(size_t x, size_t n, bool irregular) {
  if (!irregular)
    return VT_OP_ELEMENT * (double)x;
  double base = VT_OP_ELEMENT / 5.5, u = (double)x, N = (double)n;
  return base * (u + 9 * (u / 2 - N * sin(2 * M_PI * u / N) / (4 * M_PI)));
}

/* Builds the operation into b, cut for `units` workers' speed with
 * `grain`: its chunks' number. */
static inline unsigned vt_operation(builder *b, size_t n, size_t grain, double units,
                                    unsigned probes, bool irregular) {
  static size_t sizes[VT_MAX_DATA / 2], at[VT_MAX_DATA / 2 + 1], slot_of[VT_MAX_DATA / 2];
  b->ntasks = b->ndata = 0;
  size_t nc = tdm__parallel_plan(n, grain, units, probes, VT_MAX_DATA / 2, sizes);
  tdm__parallel_layout(sizes, nc, at, slot_of);
  for (size_t i = 0; i < nc; i++) { /* in the order the runtime gives them out */
    size_t len = sizes[i], lo = at[slot_of[i]];
    unsigned items[2] = {data(b, len * VT_OP_BYTES), data(b, len * VT_OP_BYTES)};
    uint8_t modes[2] = {TDM_R, TDM_W};
    unsigned id = task(b, 0, vt_op_cost(lo + len, n, irregular) - vt_op_cost(lo, n, irregular),
                       2, items, modes);
    b->tasks[id].model_time = VT_OP_ELEMENT * (double)len;
  }
  return (unsigned)nc;
}

/* The static split, for comparison: one chunk per worker, of the range
 * in proportion to the worker's speed (its class's speed-up), each
 * pinned to its class (codelet 1 + c runs on class c alone). */
static inline unsigned vt_operation_static(builder *b, tdm_vt_machine *m, size_t n,
                                           bool irregular) {
  b->ntasks = b->ndata = 0;
  double speed = 0;
  for (unsigned c = 0; c < m->nclasses; c++)
    speed += m->classes[c].workers * m->classes[c].speedup[0];
  size_t lo = 0;
  unsigned w = 0, total = 0;
  for (unsigned c = 0; c < m->nclasses; c++)
    total += m->classes[c].workers;
  for (unsigned c = 0; c < m->nclasses && c + 1 < 8; c++) {
    for (unsigned k = 0; k < m->nclasses; k++)
      m->classes[k].speedup[1 + c] = k == c ? m->classes[c].speedup[0] : 0;
    for (unsigned i = 0; i < m->classes[c].workers; i++, w++) {
      size_t len = w + 1 == total ? n - lo
                                  : (size_t)((double)n * m->classes[c].speedup[0] / speed);
      unsigned items[2] = {data(b, len * VT_OP_BYTES), data(b, len * VT_OP_BYTES)};
      uint8_t modes[2] = {TDM_R, TDM_W};
      unsigned id = task(b, 1 + c,
                         vt_op_cost(lo + len, n, irregular) - vt_op_cost(lo, n, irregular), 2,
                         items, modes);
      b->tasks[id].model_time = VT_OP_ELEMENT * (double)len;
      lo += len;
    }
  }
  return w;
}

/* What the model says of m's speed, in units of one CPU core (class 0),
 * as the runtime's tdm__sched_speed_units: a class it cannot predict
 * counts as one worker each. */
static inline double vt_op_units(const tdm_vt_machine *m, const struct tdm_perfmodel *model,
                                 unsigned *unknown) {
  /* (the model knows a chunk per nanosecond of one core's work: vtime.c) */
  uint64_t one_ms = 1000000;
  bool cal = false;
  double one = model ? tdm__model_predict_linear(model, "c0", one_ms, m->classes[0].name, &cal)
                     : -1;
  double units = m->classes[0].workers;
  *unknown = !cal && m->classes[0].workers;
  one = cal ? one : -1;
  for (unsigned c = 1; c < m->nclasses; c++) {
    cal = false;
    double p =
        model ? tdm__model_predict_linear(model, "c0", one_ms, m->classes[c].name, &cal) : -1;
    units += m->classes[c].workers *
             (one > 0 && p > 0 && cal ? one / p : TDM_PARALLEL_UNKNOWN_UNITS);
    *unknown += !cal;
  }
  return units;
}

/* One run's figures: makespan, its ratio to the bound (the work over the
 * machine's speed: each class at its speed-up, every worker busy), the
 * share of the work each class did against its share of the speed, and
 * the tail (the first class to finish its last chunk, to the end). */
typedef struct vt_op_figures {
  unsigned chunks;
  double makespan, bound, ratio;
  double share[TDM_VT_MAX_CLASSES], ideal[TDM_VT_MAX_CLASSES];
  double worst_share; /* the largest |share - ideal| */
  double tail;
} vt_op_figures;

static inline tdm_status vt_op_run(const tdm_vt_machine *m0, builder *b, size_t n,
                                   size_t grain, bool irregular, bool fixed,
                                   tdm_perfmodel *model, vt_op_figures *out) {
  memset(out, 0, sizeof *out);
  tdm_vt_machine mm = *m0, *m = &mm;
  if (fixed) {
    out->chunks = vt_operation_static(b, m, n, irregular);
  } else {
    unsigned unknown;
    double units = vt_op_units(m, model, &unknown);
    out->chunks = vt_operation(b, n, grain, units, unknown * TDM_MODEL_CALIBRATION, irregular);
  }
  tdm_vt_graph g = graph(b);
  tdm_vt_result r;
  tdm_status st = tdm__vt_run_model(m, &g, TDM_POLICY_HEFT, 42, model, &r);
  if (st)
    return st;
  double speed = 0, work = vt_op_cost(n, n, irregular);
  for (unsigned c = 0; c < m->nclasses; c++)
    speed += m->classes[c].workers * m->classes[c].speedup[0];
  out->makespan = r.makespan;
  out->bound = work / speed;
  out->ratio = r.makespan / out->bound;
  double done[TDM_VT_MAX_CLASSES] = {0}, last[TDM_VT_MAX_CLASSES] = {0};
  for (unsigned i = 0; i < g.ntasks; i++) {
    unsigned w = r.worker[i], c = 0;
    for (unsigned k = 0; c < m->nclasses && w >= k + m->classes[c].workers; c++)
      k += m->classes[c].workers;
    done[c] += g.tasks[i].cpu_time;
    last[c] = fmax(last[c], r.end[i]);
  }
  double first_end = r.makespan;
  for (unsigned c = 0; c < m->nclasses; c++) {
    out->share[c] = done[c] / work;
    out->ideal[c] = m->classes[c].workers * m->classes[c].speedup[0] / speed;
    out->worst_share = fmax(out->worst_share, fabs(out->share[c] - out->ideal[c]));
    if (done[c] > 0)
      first_end = fmin(first_end, last[c]);
  }
  out->tail = r.makespan - first_end;
  tdm__vt_result_free(&r);
  return TDM_OK;
}

/* The adaptive split, as tdm_parallel_submit cuts it. */
static inline tdm_status vt_op_run_once(const tdm_vt_machine *m, builder *b, size_t n,
                                        size_t grain, bool irregular, tdm_perfmodel *model,
                                        vt_op_figures *out) {
  return vt_op_run(m, b, n, grain, irregular, false, model, out);
}

#endif
