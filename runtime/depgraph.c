/*
 * Explicit dependencies between created tasks (tdm_task_depends_on), and
 * the check that they never form a cycle.
 *
 * Only tasks that are created and not yet submitted can lie on a cycle: a
 * submitted task depends only on tasks submitted before it. So the check
 * keeps, for the created tasks that take part in explicit dependencies, a
 * topological order (tdm_links.ord: every edge goes from a smaller ord to
 * a larger one) and maintains it as edges are added, after Pearce and
 * Kelly, "A dynamic topological sort algorithm for directed acyclic
 * graphs", ACM JEA 11 (2006):
 *  - adding pred -> task when ord(pred) < ord(task) changes nothing: no
 *    cycle is possible, and nothing is searched. Tasks get their ord when
 *    they are created, in order, so a graph whose tasks depend on tasks
 *    created before them (chains, lattices, any graph a program creates
 *    from sources to sinks) never searches, whatever order its edges are
 *    added in;
 *  - otherwise the affected region lies between the two ords: a forward
 *    search from `task` over successors with ord below ord(pred) (finding
 *    pred there means a cycle), and a backward search from `pred` over
 *    predecessors with ord above ord(task); the tasks found are given the
 *    same ords again, those of pred's side first.
 * Each search marks what it visits (tdm_links.mark, with a new epoch per
 * search), so it is linear in the part of the graph it visits. That part
 * can still be large when tasks depend on tasks created after them: a
 * chain created sinks first costs O(n) per edge, O(n^2) in all (Pearce and
 * Kelly's bound is in the size of the affected region, not better).
 *
 * Everything here runs under rt->deps_lock, which only the calls on
 * created tasks take (tdm_task_depends_on, the submit of a created task,
 * tdm_task_release): workers and tdm_submit never wait for it.
 */
#include "internal.h"

#include <stdlib.h>

tdm_status tdm__graph_enter(tdm_runtime *rt, tdm_task *t) {
  tdm_links *l = tdm__malloc(rt, sizeof *l);
  if (!l)
    return TDM_ERR_NO_MEMORY;
  tdm__taskvec_init(&l->deps);
  tdm__taskvec_init(&l->succs);
  /* relaxed: only distinct values matter; every ord in use is below the
   * counter, as reordering only exchanges ords */
  l->ord = atomic_fetch_add_explicit(&rt->graph_ord, 1, memory_order_relaxed) + 1;
  l->mark = 0;
  t->links = l;
  return TDM_OK;
}

/* The links of a task that is still created, or NULL. Once a task is
 * submitted its links are gone (and the place holds its device state). */
static tdm_links *live(tdm_task *t) {
  return atomic_load(&t->state) == TDM_TS_CREATED ? t->links : NULL;
}

/* Visits, from `from`, the created tasks reached through succs (forward)
 * or deps (backward) whose ord lies strictly between lo and hi, appending
 * them to *seen. Returns 1 when `stop` is reached, -1 when out of memory,
 * 0 otherwise. */
static int search(tdm_runtime *rt, tdm_task *from, bool forward, uint64_t lo, uint64_t hi,
                  const tdm_task *stop, uint64_t epoch, tdm_taskvec *seen) {
  tdm_taskvec stack;
  tdm__taskvec_init(&stack);
  from->links->mark = epoch;
  int r = tdm__taskvec_push(rt, &stack, from) ? -1 : 0;
  while (!r && stack.n) {
    tdm_task *x = stack.items[--stack.n];
    if (tdm__taskvec_push(rt, seen, x)) {
      r = -1;
      break;
    }
    const tdm_taskvec *next = forward ? &x->links->succs : &x->links->deps;
    for (unsigned i = 0; i < next->n && !r; i++) {
      tdm_task *y = next->items[i];
      tdm_links *l = live(y);
      if (y == stop)
        r = 1;
      else if (l && l->mark != epoch && l->ord > lo && l->ord < hi) {
        l->mark = epoch;
        if (tdm__taskvec_push(rt, &stack, y))
          r = -1;
      }
    }
  }
  tdm__taskvec_free(&stack);
  return r;
}

static int by_ord(const void *a, const void *b) {
  uint64_t x = (*(tdm_task *const *)a)->links->ord, y = (*(tdm_task *const *)b)->links->ord;
  return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Gives the tasks of back (pred's side) then those of fwd (task's side)
 * the ords they hold between them, in that order. */
static int reorder(tdm_runtime *rt, tdm_taskvec *back, tdm_taskvec *fwd) {
  unsigned n = back->n + fwd->n;
  uint64_t *ords = tdm__malloc(rt, n * sizeof *ords);
  if (!ords)
    return -1;
  qsort(back->items, back->n, sizeof *back->items, by_ord);
  qsort(fwd->items, fwd->n, sizeof *fwd->items, by_ord);
  for (unsigned i = 0; i < back->n; i++)
    ords[i] = back->items[i]->links->ord;
  for (unsigned i = 0; i < fwd->n; i++)
    ords[back->n + i] = fwd->items[i]->links->ord;
  qsort(ords, n, sizeof *ords, cmp_u64);
  for (unsigned i = 0; i < n; i++)
    (i < back->n ? back->items[i] : fwd->items[i - back->n])->links->ord = ords[i];
  free(ords);
  return 0;
}

/* Makes room so that pred -> task can be added, or finds it would close
 * a cycle: TDM_OK, TDM_ERR_CYCLE or TDM_ERR_NO_MEMORY. */
static tdm_status place(tdm_runtime *rt, tdm_task *task, tdm_task *pred) {
  uint64_t lb = task->links->ord, ub = pred->links->ord;
  if (ub < lb)
    return TDM_OK;
  uint64_t epoch = ++rt->graph_epoch;
  tdm_taskvec fwd, back;
  tdm__taskvec_init(&fwd);
  tdm__taskvec_init(&back);
  int r = search(rt, task, true, 0, ub, pred, epoch, &fwd);
  if (!r)
    r = search(rt, pred, false, lb, UINT64_MAX, NULL, epoch, &back);
  if (!r)
    r = reorder(rt, &back, &fwd);
  tdm__taskvec_free(&fwd);
  tdm__taskvec_free(&back);
  return r > 0 ? TDM_ERR_CYCLE : r < 0 ? TDM_ERR_NO_MEMORY : TDM_OK;
}

tdm_status tdm__graph_add(tdm_runtime *rt, tdm_task *task, tdm_task *pred) {
  if (task == pred)
    return TDM_ERR_CYCLE;
  bool both = atomic_load(&pred->state) == TDM_TS_CREATED;
  tdm_status st = both ? place(rt, task, pred) : TDM_OK;
  if (st)
    return st;
  if (tdm__taskvec_push(rt, &task->links->deps, pred))
    return TDM_ERR_NO_MEMORY;
  if (both && tdm__taskvec_push(rt, &pred->links->succs, task)) {
    task->links->deps.n--;
    return TDM_ERR_NO_MEMORY;
  }
  tdm__task_ref(pred);
  if (both)
    tdm__task_ref(task);
  return TDM_OK;
}

void tdm__graph_drop(tdm_task *t, bool unref) {
  tdm_links *l = t->links;
  if (!l)
    return;
  t->links = NULL;
  void (*drop)(tdm_taskvec *) = unref ? tdm__taskvec_release : tdm__taskvec_free;
  drop(&l->deps);
  drop(&l->succs);
  free(l);
}
