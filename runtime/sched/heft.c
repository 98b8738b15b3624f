/*
 * heft: a ready task goes to the class where it would finish earliest:
 * when it could start there (the class's backlog: predicted seconds of
 * the work placed there and not finished, over its workers, plus on the
 * CPU workers their share of the tasks only they run, which no policy
 * places: tdm__sched_cpu_only_wait; and the time
 * its inputs need to get there, behind the copies already on the link:
 * the later of the two on a device whose queue fetches inputs while the
 * work before runs, their sum elsewhere) + its predicted execution time
 * (Topcuoglu, Hariri and Wu, "Performance-
 * effective and low-complexity task scheduling for heterogeneous
 * computing", IEEE TPDS 13(3), 2002, as StarPU's dmda applies it at run
 * time). While a class has not run a codelet at a size
 * TDM_MODEL_CALIBRATION times, the task goes there instead (calibration
 * on line); while every class that could calibrate has its tries in
 * flight, the task is shared with every worker and placed later, when a
 * worker takes it and the predictions are known.
 *
 * Dynamic correction: an idle CPU worker or device takes the last task
 * queued on a device when it would finish earlier itself, transfers
 * included, looking at the most loaded device first; a CPU worker not
 * from a device whose link is behind by more than the task's time on it
 * (policy.c, worth_taking). An idle device also takes the oldest chunk
 * of a data-parallel operation queued for the CPU workers, by the same
 * rule.
 */
#include "sched.h"

#include <limits.h>
#include <math.h>

#define MAX_CLASSES (TDM_MAX_DEVICE_WORKERS + TDM_SCHED_MAX_CPU_CLASSES)

/* The class where t finishes first, a class to calibrate, or UINT_MAX:
 * not known yet where. */
static unsigned choose(tdm_sched *s, tdm_task *t, const double *move, double *predicted,
                       bool *calib) {
  tdm_choice c[MAX_CLASSES];
  unsigned cls[MAX_CLASSES], n = 0;
  double known = -1;
  /* the CPU workers are busy with tasks no policy placed too */
  double others = s->ncpu ? tdm__sched_cpu_only_wait(s) : 0;
  for (unsigned k = 0; k < s->nclasses && k < MAX_CLASSES; k++) {
    if (move[k] < 0)
      continue; /* cannot run it */
    bool ok = false;
    double p = s->drv->predict(s, t, k, &ok);
    if (p >= 0)
      known = p;
    cls[n] = k;
    /* the worker free, and the inputs there: at once where the queue
     * fetches them while the work before runs, after it elsewhere */
    double wait = tdm__sched_backlog(&s->cls[k]) / s->cls[k].workers + (k < s->ncpu ? others : 0);
    c[n++] = (tdm_choice){.start = s->cls[k].prefetches ? fmax(wait, move[k]) : wait + move[k],
                          .exec = p,
                          .calibrated = ok && p >= 0,
                          .trying = atomic_load_explicit(&s->cls[k].calibrating,
                                                         memory_order_relaxed)};
  }
  int i = tdm__heft_pick(c, n, TDM_MODEL_CALIBRATION, calib);
  if (i < 0)
    return UINT_MAX;
  /* a calibration try counts as the time known elsewhere, if any */
  *predicted = c[i].exec >= 0 ? c[i].exec : known >= 0 ? known : TDM_SCHED_UNKNOWN_TIME;
  return cls[i];
}

bool tdm__heft_place(tdm_sched *s, tdm_task *t) {
  double move[MAX_CLASSES];
  for (unsigned k = 0; k < s->nclasses && k < MAX_CLASSES; k++)
    move[k] = s->drv->runs(s, k, t) ? s->drv->transfer(s, k, t) : -1;
  double predicted = 0;
  bool calib = false;
  unsigned c = choose(s, t, move, &predicted, &calib);
  if (c != UINT_MAX) {
    t->sched_cls = (int8_t)c;
    t->sched_predicted = (float)predicted;
    t->sched_calib = calib;
    tdm__sched_backlog_add(&s->cls[c], predicted);
    if (calib)
      atomic_fetch_add_explicit(&s->cls[c].calibrating, 1, memory_order_relaxed);
  }
  if (c == UINT_MAX)
    return false;
  s->drv->send(s, t, c);
  return true;
}

static void place(tdm_sched *s, tdm_task *t) {
  if (!tdm__heft_place(s, t))
    s->drv->share(s, t, true);
}

static tdm_task *idle(tdm_sched *s, unsigned c) {
  return tdm__policy_take_queued(s, c, false);
}

/* An idle device: a task queued on another device, else a chunk queued
 * for the CPU workers (an operation's tail: a core's model that overrated
 * it, or a chunk costlier than its size says, would leave the device
 * idle while the cores work through theirs). */
static tdm_task *idle_device(tdm_sched *s, unsigned c) {
  tdm_task *t = tdm__policy_take_queued(s, c, false);
  return t ? t : tdm__policy_take_cpu_chunk(s, c);
}

const tdm_policy_ops tdm__policy_heft = {
    .name = "heft",
    .place = place,
    .reconsider = tdm__heft_place,
    .idle_cpu = idle,
    .idle_device = idle_device,
    .done = tdm__policy_release,
};
