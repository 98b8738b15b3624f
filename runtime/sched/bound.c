/* The lower bound of a task graph's makespan on a machine (policy.h). */

#include "sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fastest time of t on any class with workers. */
static double fastest(const tdm_vt_machine *m, const tdm_vt_task *t) {
  double best = INFINITY;
  for (unsigned c = 0; c < m->nclasses; c++)
    if (m->classes[c].workers && m->classes[c].speedup[t->codelet] > 0)
      best = fmin(best, t->cpu_time / m->classes[c].speedup[t->codelet]);
  return best;
}

/* The critical path, each task at its fastest class, by a topological
 * sweep (the graphs given here list predecessors before their
 * successors, else the sweep repeats until stable); 0 without memory. */
static double critical_path(const tdm_vt_machine *m, const tdm_vt_graph *g) {
  unsigned n = g->ntasks;
  double *finish = calloc(n ? n : 1, sizeof *finish), cp = 0;
  if (!finish)
    return 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (unsigned i = 0; i < n; i++) {
      const tdm_vt_task *t = &g->tasks[i];
      double begin = 0;
      for (unsigned k = 0; k < t->ndeps; k++)
        begin = fmax(begin, finish[t->deps[k]]);
      if (begin + fastest(m, t) > finish[i] + 1e-15) {
        finish[i] = begin + fastest(m, t);
        changed = true;
      }
    }
  }
  for (unsigned i = 0; i < n; i++)
    cp = fmax(cp, finish[i]);
  free(finish);
  return cp;
}

/* Classes whose speed-ups are in the same ratio for every codelet used
 * (identical GPUs, or one GPU twice as fast) act as one pool of capacity:
 * the pools' reference classes in ref, their capacity (workers x speed
 * against the reference) in cap; returns how many. */
typedef struct pools {
  unsigned n;
  unsigned ref[TDM_VT_MAX_CLASSES];
  double cap[TDM_VT_MAX_CLASSES];
} pools;

/* a's speed over r's, the same for every codelet used; 0 if not. */
static double same_ratio(const struct tdm_vt_class *a, const struct tdm_vt_class *r,
                         const bool *used) {
  double ratio = -1;
  for (unsigned k = 0; k < 8; k++) {
    if (!used[k])
      continue;
    if (r->speedup[k] == 0 || a->speedup[k] == 0) {
      if (r->speedup[k] != a->speedup[k])
        return 0;
      continue;
    }
    double q = a->speedup[k] / r->speedup[k];
    if (ratio < 0)
      ratio = q;
    else if (fabs(q - ratio) > 1e-12 * ratio)
      return 0;
  }
  return ratio > 0 ? ratio : 0;
}

static void find_pools(const tdm_vt_machine *m, const tdm_vt_graph *g, pools *p) {
  bool used[8] = {false};
  for (unsigned i = 0; i < g->ntasks; i++)
    used[g->tasks[i].codelet] = true;
  p->n = 0;
  for (unsigned c = 0; c < m->nclasses; c++) {
    if (!m->classes[c].workers)
      continue;
    unsigned k;
    double ratio = 0;
    for (k = 0; k < p->n && !ratio; k++)
      ratio = same_ratio(&m->classes[c], &m->classes[p->ref[k]], used);
    if (ratio) {
      k--; /* the pool it joins */
    } else {
      k = p->n++;
      p->ref[k] = c;
      p->cap[k] = 0;
      ratio = 1;
    }
    p->cap[k] += m->classes[c].workers * ratio;
  }
}

/* The time t takes at pool k's reference speed. */
static double pool_time(const tdm_vt_machine *m, const pools *p, unsigned k,
                        const tdm_vt_task *t) {
  double s = m->classes[p->ref[k]].speedup[t->codelet];
  return s > 0 ? t->cpu_time / s : INFINITY;
}

/* A task and pool 1's advantage on it. */
typedef struct by_adv {
  double adv;
  unsigned idx;
} by_adv;

static int adv_descending(const void *a, const void *b) {
  const by_adv *x = a, *y = b;
  if (x->adv != y->adv)
    return x->adv < y->adv ? 1 : -1;
  return (x->idx > y->idx) - (x->idx < y->idx); /* stable: the same split every run */
}

/* Two pools: the best split, found by bisection on the makespan T: pool
 * 1 takes the tasks it speeds up most, as much as fits in T (the
 * boundary task split), pool 0 the rest; 0 without memory. */
static double two_pool_area(const tdm_vt_machine *m, const tdm_vt_graph *g, const pools *p) {
  unsigned n = g->ntasks, *idx = malloc((n ? n : 1) * sizeof *idx);
  by_adv *adv = malloc((n ? n : 1) * sizeof *adv);
  double lo = 0, hi = 0;
  if (!idx || !adv) {
    free(idx);
    free(adv);
    return 0;
  }
  for (unsigned i = 0; i < n; i++) {
    adv[i] = (by_adv){pool_time(m, p, 0, &g->tasks[i]) / pool_time(m, p, 1, &g->tasks[i]), i};
    hi += fmin(pool_time(m, p, 0, &g->tasks[i]), pool_time(m, p, 1, &g->tasks[i]));
  }
  if (n) /* by advantage of pool 1, descending */
    qsort(adv, n, sizeof *adv, adv_descending);
  for (unsigned i = 0; i < n; i++)
    idx[i] = adv[i].idx;
  hi /= fmin(p->cap[0], p->cap[1]); /* everything on the smaller pool: an upper end */
  for (int it = 0; it < 100; it++) {
    double T = 0.5 * (lo + hi), room1 = p->cap[1] * T, need0 = 0;
    for (unsigned a = 0; a < n; a++) {
      const tdm_vt_task *t = &g->tasks[idx[a]];
      double t1 = pool_time(m, p, 1, t), t0 = pool_time(m, p, 0, t);
      if (t1 <= room1) {
        room1 -= t1;
      } else if (isfinite(t1) && room1 > 0) { /* split the boundary task */
        need0 += (1 - room1 / t1) * t0;
        room1 = 0;
      } else {
        need0 += t0;
      }
    }
    if (need0 <= p->cap[0] * T)
      hi = T;
    else
      lo = T;
  }
  free(idx);
  free(adv);
  return hi;
}

/* The area bound: the fractional assignment of the work that finishes
 * first. One pool: total work over total speed; two: the best split;
 * more: the weaker bound of each task at its fastest over all workers.
 * Its kind in *kind. */
static double area_bound(const tdm_vt_machine *m, const tdm_vt_graph *g, const char **kind) {
  pools p;
  find_pools(m, g, &p);
  *kind = p.n == 1 ? "area, one pool" : p.n == 2 ? "area, two pools" : "area, all workers";
  if (p.n == 2)
    return two_pool_area(m, g, &p);
  double work = 0;
  if (p.n == 1) {
    for (unsigned i = 0; i < g->ntasks; i++)
      work += pool_time(m, &p, 0, &g->tasks[i]);
    return work / p.cap[0];
  }
  unsigned workers = 0;
  for (unsigned c = 0; c < m->nclasses; c++)
    workers += m->classes[c].workers;
  for (unsigned i = 0; i < g->ntasks; i++)
    work += fastest(m, &g->tasks[i]);
  return workers ? work / workers : 0;
}

tdm_vt_bound tdm__vt_bound(const tdm_vt_machine *m, const tdm_vt_graph *g) {
  tdm_vt_bound b = {.critical_path = critical_path(m, g)};
  b.area = area_bound(m, g, &b.by);
  if (b.critical_path >= b.area)
    b.by = "critical path";
  b.bound = fmax(b.critical_path, b.area);
  return b;
}

double tdm__vt_lower_bound(const tdm_vt_machine *m, const tdm_vt_graph *g) {
  return tdm__vt_bound(m, g).bound;
}

/* ---- a reference schedule ------------------------------------------------------ */

double tdm__vt_mean_time(const tdm_vt_machine *m, const tdm_vt_task *t) {
  double sum = 0;
  unsigned n = 0;
  for (unsigned c = 0; c < m->nclasses; c++)
    if (m->classes[c].workers && m->classes[c].speedup[t->codelet] > 0) {
      sum += m->classes[c].workers * t->cpu_time / m->classes[c].speedup[t->codelet];
      n += m->classes[c].workers;
    }
  return n ? sum / n : 0;
}

typedef struct by_rank {
  double rank;
  unsigned idx, pos; /* the task, its place in a topological order */
} by_rank;

static int rank_descending(const void *a, const void *b) {
  const by_rank *x = a, *y = b;
  if (x->rank != y->rank)
    return x->rank < y->rank ? 1 : -1;
  return (x->pos > y->pos) - (x->pos < y->pos); /* a predecessor first, even at rank 0 */
}

/* Classic HEFT (Topcuoglu, Hariri and Wu, IEEE TPDS 13(3), 2002, without
 * insertion) with the whole graph known ahead and the true times: tasks
 * in order of upward rank (mean time over the workers that can run them,
 * plus the largest rank of a successor), each on the worker where it
 * finishes first, copies free. A schedule that exists, so the best one
 * without copies is no longer. */
double tdm__vt_reference(const tdm_vt_machine *m, const tdm_vt_graph *g) {
  unsigned n = g->ntasks, nw = 0;
  for (unsigned c = 0; c < m->nclasses; c++)
    nw += m->classes[c].workers;
  if (!n || !nw)
    return 0;
  unsigned *cls = malloc(nw * sizeof *cls), *order = malloc(n * sizeof *order);
  unsigned *indeg = calloc(n, sizeof *indeg), *succ_at = calloc(n + 1, sizeof *succ_at);
  double *mean = malloc(n * sizeof *mean), *finish = calloc(n, sizeof *finish);
  double *avail = calloc(nw, sizeof *avail);
  by_rank *rank = malloc(n * sizeof *rank);
  unsigned edges = 0;
  for (unsigned i = 0; i < n; i++)
    edges += g->tasks[i].ndeps;
  unsigned *succ = malloc((edges ? edges : 1) * sizeof *succ), *fill = calloc(n, sizeof *fill);
  double makespan = 0;
  if (!cls || !order || !indeg || !succ_at || !mean || !finish || !avail || !rank || !succ ||
      !fill)
    goto out;
  for (unsigned c = 0, w = 0; c < m->nclasses; c++)
    for (unsigned k = 0; k < m->classes[c].workers; k++)
      cls[w++] = c;
  for (unsigned i = 0; i < n; i++)
    for (unsigned k = 0; k < g->tasks[i].ndeps; k++)
      succ_at[g->tasks[i].deps[k] + 1]++;
  for (unsigned i = 0; i < n; i++)
    succ_at[i + 1] += succ_at[i];
  for (unsigned i = 0; i < n; i++)
    for (unsigned k = 0; k < g->tasks[i].ndeps; k++) {
      unsigned u = g->tasks[i].deps[k];
      succ[succ_at[u] + fill[u]++] = i;
    }
  /* a topological order (Kahn), then the ranks from the end */
  unsigned head = 0, tail = 0;
  for (unsigned i = 0; i < n; i++)
    if (!(indeg[i] = g->tasks[i].ndeps))
      order[tail++] = i;
  while (head < tail) {
    unsigned u = order[head++];
    for (unsigned e = succ_at[u]; e < succ_at[u + 1]; e++)
      if (--indeg[succ[e]] == 0)
        order[tail++] = succ[e];
  }
  if (tail != n) /* a cycle */
    goto out;
  for (unsigned i = 0; i < n; i++)
    mean[i] = tdm__vt_mean_time(m, &g->tasks[i]);
  for (unsigned o = n; o-- > 0;) {
    unsigned u = order[o];
    double best = 0;
    for (unsigned e = succ_at[u]; e < succ_at[u + 1]; e++)
      best = fmax(best, rank[succ[e]].rank);
    rank[u] = (by_rank){mean[u] + best, u, o};
  }
  qsort(rank, n, sizeof *rank, rank_descending); /* predecessors first */
  for (unsigned o = 0; o < n; o++) {
    unsigned i = rank[o].idx;
    const tdm_vt_task *t = &g->tasks[i];
    double ready = 0, best = INFINITY;
    for (unsigned k = 0; k < t->ndeps; k++)
      ready = fmax(ready, finish[t->deps[k]]);
    unsigned bw = nw;
    for (unsigned w = 0; w < nw; w++) {
      double sp = m->classes[cls[w]].speedup[t->codelet];
      if (sp > 0 && fmax(avail[w], ready) + t->cpu_time / sp < best) {
        best = fmax(avail[w], ready) + t->cpu_time / sp;
        bw = w;
      }
    }
    if (bw == nw) { /* no worker runs it */
      makespan = 0;
      goto out;
    }
    avail[bw] = finish[i] = best;
    makespan = fmax(makespan, best);
  }
out:
  free(cls);
  free(order);
  free(indeg);
  free(succ_at);
  free(mean);
  free(finish);
  free(avail);
  free(rank);
  free(succ);
  free(fill);
  return makespan;
}

/* ---- machine descriptions -------------------------------------------------- */
