/*
 * Explicit dependencies between created tasks (tdm_task_depends_on), and
 * the check that they never form a cycle.
 *
 * Only tasks that are created and not yet submitted can lie on a cycle: a
 * submitted task depends only on tasks submitted before it. So the check
 * keeps the created tasks in a list in topological order (every explicit
 * dependency goes from an earlier task to a later one), with increasing
 * 64-bit labels to compare two positions in O(1), and maintains it as
 * dependencies are added, after Pearce and Kelly, "A dynamic topological
 * sort algorithm for directed acyclic graphs", ACM JEA 11 (2006), with the
 * two-way search of Haeupler et al., "Incremental cycle detection,
 * topological ordering, and strong component maintenance", ACM TALG 8
 * (2012):
 *  - a task joins the list at its end when it is created, so a dependency
 *    on a task created before (chains, lattices, any graph created from its
 *    sources on) already agrees with the order: nothing is searched;
 *  - otherwise (pred is after task) only the tasks between the two can
 *    change places. A forward search from `task` over its successors
 *    before pred, and a backward search from `pred` over its predecessors
 *    after task, advance in turn, one task each. Whichever finishes first
 *    decides: if it met the other end there is a cycle; if not, there is
 *    none, and the tasks it found move as a block, in their order, to just
 *    before `task` (backward) or just after `pred` (forward). Every other
 *    task keeps its place, and the order stays topological: a predecessor
 *    of the block outside it lies before `task`, a successor after `pred`.
 * The cost is that of the smaller search (twice, at most), in the part of
 * the graph between the two tasks: a chain created sinks first costs O(1)
 * an edge (the backward side is one task). Each search marks what it
 * visits (an epoch per search), so no task is visited twice.
 *
 * Labels: spaced tdm_order.gap (2^32) apart as tasks are appended; a block
 * moved into a gap takes evenly spaced labels in it. When a gap is too
 * small, the tasks around it get labels again, evenly spread over the
 * smallest aligned range of labels around it that is sparse enough (2^i
 * labels holding at most (4/3)^i tasks), after Bender, Cole, Demaine,
 * Farach-Colton and Zito, "Two simplified algorithms for maintaining
 * order in a list", ESA 2002: O(log n) labels given per move, amortized,
 * however the moves fall (a chain whose edges go against creation
 * order moves one task into the same place each time: relabelling the
 * whole list then made it quadratic). Tests make the gap tiny to
 * exercise it.
 *
 * Everything here runs under rt->deps_lock, which only the calls on
 * created tasks take (tdm_task_create, tdm_task_depends_on, the submit or
 * release of a created task): workers and tdm_submit never wait for it.
 */
#include "core.h"

#include <stdlib.h>


/* Gives every task of the list a label again, GAP apart, in order. */
static void relabel_all(tdm_order *g) {
  uint64_t label = g->gap;
  for (tdm_links *l = g->head; l; l = l->next, label += g->gap)
    l->label = label;
}

static void unlink_node(tdm_order *g, tdm_links *l) {
  if (l->prev)
    l->prev->next = l->next;
  else
    g->head = l->next;
  if (l->next)
    l->next->prev = l->prev;
  else
    g->tail = l->prev;
  l->prev = l->next = NULL;
}

/* Puts l after `after` (NULL: first) without labelling it. */
static void link_after(tdm_order *g, tdm_links *after, tdm_links *l) {
  l->prev = after;
  l->next = after ? after->next : g->head;
  if (l->next)
    l->next->prev = l;
  else
    g->tail = l;
  if (after)
    after->next = l;
  else
    g->head = l;
}

/* Labels the tasks from `first` on, `count` of them, evenly within the
 * labels (base, base + span) (span 0: 2^64). */
static void spread(tdm_links *first, uint64_t count, uint64_t base, uint64_t span) {
  uint64_t step = span ? span / (count + 1) : UINT64_MAX / (count + 1);
  tdm_links *l = first;
  for (uint64_t i = 0; i < count; i++, l = l->next)
    l->label = base + step * (i + 1);
}

/* The k tasks that follow `after` (NULL: the first k; `end` the task
 * after them) found no room in their gap: the tasks around them get
 * labels again, over the smallest aligned range about `after`'s label
 * that is sparse enough (Bender et al.: see above). */
static void make_room(tdm_order *g, tdm_links *after, unsigned k, tdm_links *end) {
  uint64_t anchor = after ? after->label : 0;
  double most = 1; /* (4/3)^i */
  for (unsigned i = 1; i < 64; i++) {
    most *= 4.0 / 3.0;
    uint64_t span = UINT64_C(1) << i, base = anchor & ~(span - 1);
    if ((double)k + 1 > most)
      continue;
    uint64_t count = k;
    tdm_links *first = after ? after->next : g->head;
    /* those before it in the range, `after` included */
    for (tdm_links *l = after; l && l->label >= base && (double)count < most; l = l->prev) {
      count++;
      first = l;
    }
    for (tdm_links *l = end; l && l->label - base < span && (double)count < most; l = l->next)
      count++;
    if ((double)count + 1 > most)
      continue; /* too dense: a larger range */
    spread(first, count, base, span);
    return;
  }
  relabel_all(g); /* the whole space is dense: evenly, gap apart */
}

/* Labels the k tasks that now follow `after` (NULL: the first k), within
 * the gap up to the task after them. */
TDM_ALWAYS_INLINE static void label_block(tdm_order *g, tdm_links *after, unsigned k) {
  tdm_links *first = after ? after->next : g->head, *end = first;
  for (unsigned i = 0; i < k; i++)
    end = end->next;
  uint64_t lo = after ? after->label : 0, hi = end ? end->label : UINT64_MAX;
  uint64_t step, gap = g->gap;
  bool small = k < (1u << 30); /* gap * (k + 1) does not overflow */
  if (!end && small && lo <= UINT64_MAX - gap * ((uint64_t)k + 1))
    step = gap; /* at the end: as appended (every tdm_task_create) */
  else if (!after && small && hi > gap * ((uint64_t)k + 1))
    lo = hi - gap * ((uint64_t)k + 1), step = gap; /* at the start: likewise */
  else
    step = (hi - lo) / ((uint64_t)k + 1); /* between: evenly */
  if (step == 0 || hi - lo <= k) {
    make_room(g, after, k, end);
    return;
  }
  tdm_links *l = first;
  for (unsigned i = 0; i < k; i++, l = l->next)
    l->label = lo + step * (i + 1);
}

tdm_status tdm__graph_enter(tdm_runtime *rt, tdm_task *t) {
  tdm_links *l = tdm__slot_lend(rt);
  if (!l) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_task_create: out of memory");
    return TDM_ERR_NO_MEMORY;
  }
  tdm__taskvec_init(&l->deps);
  tdm__taskvec_init(&l->succs);
  l->fmark = l->bmark = 0;
  tdm__spin_lock(&rt->deps_lock);
  link_after(&rt->graph, rt->graph.tail, l);
  label_block(&rt->graph, l->prev, 1);
  tdm__spin_unlock(&rt->deps_lock);
  t->links = l;
  return TDM_OK;
}

/* The links of a task that is still created, or NULL. Once a task is
 * submitted its links are gone (and the place holds its device state). */
static tdm_links *live(tdm_task *t) {
  return atomic_load(&t->state) == TDM_TS_CREATED ? t->links : NULL;
}

/* One of the two searches. */
typedef struct {
  bool forward;       /* over succs, else over deps */
  const tdm_task *to; /* the other end: reaching it means a cycle */
  uint64_t lo, hi;    /* visits labels strictly between */
  tdm_taskvec stack, seen;
} search;

static int search_start(tdm_runtime *rt, search *s, tdm_task *from, uint64_t epoch) {
  tdm__taskvec_init(&s->stack);
  tdm__taskvec_init(&s->seen);
  if (s->forward)
    from->links->fmark = epoch;
  else
    from->links->bmark = epoch;
  return tdm__taskvec_push(rt, &s->stack, from) ? -1 : 0;
}

/* Takes one task off the stack and pushes its unvisited neighbours in
 * range. 1: the other end is a neighbour (a cycle); -1: out of memory;
 * 0 otherwise (the search is over when its stack is empty). */
static int search_step(tdm_runtime *rt, search *s, uint64_t epoch) {
  tdm_task *x = s->stack.items[--s->stack.n];
  if (tdm__taskvec_push(rt, &s->seen, x))
    return -1;
  const tdm_taskvec *next = s->forward ? &x->links->succs : &x->links->deps;
  for (unsigned i = 0; i < next->n; i++) {
    tdm_task *y = next->items[i];
    tdm_links *l = live(y);
    if (y == s->to)
      return 1;
    uint64_t *mark = l ? (s->forward ? &l->fmark : &l->bmark) : NULL;
    if (mark && *mark != epoch && l->label > s->lo && l->label < s->hi) {
      *mark = epoch;
      if (tdm__taskvec_push(rt, &s->stack, y))
        return -1;
    }
  }
  return 0;
}

static int by_label(const void *a, const void *b) {
  uint64_t x = (*(tdm_task *const *)a)->links->label;
  uint64_t y = (*(tdm_task *const *)b)->links->label;
  return (x > y) - (x < y);
}

/* Moves the tasks s found, in their order, to just before `task`
 * (backward) or just after `pred` (forward). */
static void move_block(tdm_order *g, search *s, tdm_task *task, tdm_task *pred) {
  qsort(s->seen.items, s->seen.n, sizeof *s->seen.items, by_label);
  for (unsigned i = 0; i < s->seen.n; i++)
    unlink_node(g, s->seen.items[i]->links);
  tdm_links *after = s->forward ? pred->links : task->links->prev;
  for (unsigned i = 0; i < s->seen.n; i++) {
    link_after(g, after, s->seen.items[i]->links);
    after = s->seen.items[i]->links;
  }
  label_block(g, s->forward ? pred->links : s->seen.items[0]->links->prev, s->seen.n);
}

/* Makes the order agree with pred -> task, or finds that this dependency
 * would close a cycle: TDM_OK, TDM_ERR_CYCLE or TDM_ERR_NO_MEMORY. */
static tdm_status place(tdm_runtime *rt, tdm_task *task, tdm_task *pred) {
  uint64_t lb = task->links->label, ub = pred->links->label;
  if (ub < lb)
    return TDM_OK;
  uint64_t epoch = ++rt->graph.epoch;
  search f = {.forward = true, .to = pred, .lo = lb, .hi = ub};
  search b = {.forward = false, .to = task, .lo = lb, .hi = ub};
  int r = search_start(rt, &f, task, epoch);
  if (!r)
    r = search_start(rt, &b, pred, epoch);
  search *done = NULL;
  while (!r && !done) {
    if (!f.stack.n)
      done = &f;
    else if (!b.stack.n)
      done = &b;
    else if (!(r = search_step(rt, &f, epoch)))
      r = search_step(rt, &b, epoch);
  }
  if (!r)
    move_block(&rt->graph, done, task, pred);
  tdm__taskvec_free(&f.stack);
  tdm__taskvec_free(&f.seen);
  tdm__taskvec_free(&b.stack);
  tdm__taskvec_free(&b.seen);
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

void tdm__graph_drop_links(tdm_runtime *rt, tdm_task *t, bool unref) {
  tdm_links *l = t->links;
  t->links = NULL;
  if (unref) /* else the runtime is being destroyed: the list goes too */
    unlink_node(&rt->graph, l);
  void (*drop)(tdm_taskvec *) = unref ? tdm__taskvec_release : tdm__taskvec_free;
  drop(&l->deps);
  drop(&l->succs);
  if (unref)
    tdm__slot_return(rt, l);
}
