/* The lower bound of a task graph's makespan on a machine (policy.h). */
#include "policy.h"

#include "../internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double tdm__vt_lower_bound(const tdm_vt_machine *m, const tdm_vt_graph *g) {
  unsigned n = g->ntasks;
  /* critical path at the fastest class: by a topological sweep (the
   * graphs given here list predecessors before their successors, else
   * the sweep repeats until stable) */
  double *finish = calloc(n ? n : 1, sizeof *finish);
  if (!finish)
    return 0;
  double cp = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (unsigned i = 0; i < n; i++) {
      const tdm_vt_task *t = &g->tasks[i];
      double best = INFINITY;
      for (unsigned c = 0; c < m->nclasses; c++)
        if (m->classes[c].workers && m->classes[c].speedup[t->codelet] > 0)
          best = fmin(best, t->cpu_time / m->classes[c].speedup[t->codelet]);
      double begin = 0;
      for (unsigned k = 0; k < t->ndeps; k++)
        begin = fmax(begin, finish[t->deps[k]]);
      if (begin + best > finish[i] + 1e-15) {
        finish[i] = begin + best;
        changed = true;
      }
    }
  }
  for (unsigned i = 0; i < n; i++)
    cp = fmax(cp, finish[i]);
  free(finish);

  /* area: the fractional assignment of the work that finishes first.
   * Classes whose speed-ups are in the same ratio for every codelet used
   * (identical GPUs, or one GPU twice as fast) act as one pool of
   * capacity. One pool: total work over total speed. Two pools: the best
   * split (the second pool takes the tasks it speeds up most, as much as
   * fits). More: the weaker bound of each task at its fastest over all
   * workers. */
  unsigned used[8] = {0};
  for (unsigned i = 0; i < n; i++)
    used[g->tasks[i].codelet] = 1;
  unsigned pool_of[TDM_VT_MAX_CLASSES], ref[TDM_VT_MAX_CLASSES], npools = 0;
  double cap[TDM_VT_MAX_CLASSES] = {0}; /* workers x speed against the pool's reference */
  for (unsigned c = 0; c < m->nclasses; c++) {
    if (!m->classes[c].workers)
      continue;
    unsigned p;
    double ratio = 0;
    for (p = 0; p < npools; p++) {
      const struct tdm_vt_class *a = &m->classes[c], *r = &m->classes[ref[p]];
      bool same = true;
      ratio = -1;
      for (unsigned k = 0; k < 8 && same; k++) {
        if (!used[k])
          continue;
        if (r->speedup[k] == 0 || a->speedup[k] == 0) {
          same = r->speedup[k] == a->speedup[k];
          continue;
        }
        double q = a->speedup[k] / r->speedup[k];
        if (ratio < 0)
          ratio = q;
        else if (fabs(q - ratio) > 1e-12 * ratio)
          same = false;
      }
      if (same && ratio > 0)
        break;
    }
    if (p == npools) {
      ref[npools++] = c;
      ratio = 1;
    }
    pool_of[c] = p;
    cap[p] += m->classes[c].workers * ratio;
  }
  (void)pool_of;
  /* the time a task takes at its pool's reference speed */
#define POOL_TIME(t, p)                                                                       (m->classes[ref[p]].speedup[(t)->codelet] > 0                                                    ? (t)->cpu_time / m->classes[ref[p]].speedup[(t)->codelet]                                  : INFINITY)
  double area = 0;
  if (npools == 1) {
    double work = 0;
    for (unsigned i = 0; i < n; i++)
      work += POOL_TIME(&g->tasks[i], 0);
    area = work / cap[0];
  } else if (npools == 2) {
    unsigned *idx = malloc((n ? n : 1) * sizeof *idx);
    double *adv = malloc((n ? n : 1) * sizeof *adv);
    if (idx && adv) {
      for (unsigned i = 0; i < n; i++) {
        idx[i] = i;
        adv[i] = POOL_TIME(&g->tasks[i], 0) / POOL_TIME(&g->tasks[i], 1);
      }
      for (unsigned i = 1; i < n; i++) /* by advantage of pool 1, descending */
        for (unsigned j = i; j > 0 && adv[idx[j - 1]] < adv[idx[j]]; j--) {
          unsigned x = idx[j];
          idx[j] = idx[j - 1];
          idx[j - 1] = x;
        }
      double lo = 0, hi = 0;
      for (unsigned i = 0; i < n; i++)
        hi += fmin(POOL_TIME(&g->tasks[i], 0), POOL_TIME(&g->tasks[i], 1));
      hi /= fmin(cap[0], cap[1]); /* everything on the smaller pool: an upper end */
      for (int it = 0; it < 100; it++) {
        double T = 0.5 * (lo + hi), room1 = cap[1] * T, need0 = 0;
        for (unsigned a = 0; a < n; a++) {
          const tdm_vt_task *t = &g->tasks[idx[a]];
          double t1 = POOL_TIME(t, 1), t0 = POOL_TIME(t, 0);
          if (t1 <= room1) {
            room1 -= t1;
          } else if (isfinite(t1) && room1 > 0) { /* split the boundary task */
            need0 += (1 - room1 / t1) * t0;
            room1 = 0;
          } else {
            need0 += t0;
          }
        }
        if (need0 <= cap[0] * T)
          hi = T;
        else
          lo = T;
      }
      area = hi;
    }
    free(idx);
    free(adv);
  } else {
    unsigned workers = 0;
    double work = 0;
    for (unsigned c = 0; c < m->nclasses; c++)
      workers += m->classes[c].workers;
    for (unsigned i = 0; i < n; i++) {
      double best = INFINITY;
      for (unsigned c = 0; c < m->nclasses; c++)
        if (m->classes[c].workers && m->classes[c].speedup[g->tasks[i].codelet] > 0)
          best = fmin(best, g->tasks[i].cpu_time / m->classes[c].speedup[g->tasks[i].codelet]);
      work += best;
    }
    area = workers ? work / workers : 0;
  }
#undef POOL_TIME
  return fmax(cp, area);
}

/* ---- machine descriptions -------------------------------------------------- */
