/*
 * Task groups: counts of a piece of work's tasks, waiting for it alone,
 * cancelling it, and a throttled progress callback.
 *
 * A group is counted at each submission into it (before the task can
 * end, so a task that submits into its own group counts the new one
 * first) and at each end (in finish, after the task's callback and the
 * release of its successors): `pending` reaching 0 means idle. Cancelling
 * sets a flag that a task reads as it is about to start
 * (tdm__task_outcome_at_start): a task not started ends cancelled, and
 * the outcome rules (complete.c) cancel what reads its results, in any group.
 */
#include "core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void add_cost(_Atomic double *sum, double x) {
  double old = atomic_load_explicit(sum, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(sum, &old, old + x, memory_order_relaxed,
                                                memory_order_relaxed))
    ;
}

tdm_status tdm_group_create(tdm_runtime *rt, const tdm_group_desc *desc, tdm_group **out) {
  if (out)
    *out = NULL;
  if (!rt || !out)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_group_create");
  tdm_group_desc d = {0};
  if (desc) {
    if (desc->struct_size && desc->struct_size < sizeof *desc) {
      tdm__log(rt, TDM_LOG_ERROR, "tdm_group_create: tdm_group_desc.struct_size %zu: 0 or at "
               "least %zu", desc->struct_size, sizeof *desc);
      return TDM_ERR_INVALID_ARG;
    }
    d = *desc;
  }
  if (!(d.progress_hz >= 0)) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_group_create: progress_hz %g: 0 (10 a second) or more",
             d.progress_hz);
    return TDM_ERR_INVALID_ARG;
  }
  tdm_group *g = tdm__calloc(rt, 1, sizeof *g);
  if (!g) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_group_create: out of memory");
    return TDM_ERR_NO_MEMORY;
  }
  g->rt = rt;
  atomic_init(&g->refs, 1);
  g->priority = d.priority;
  g->progress_fn = d.progress_fn;
  g->progress_data = d.progress_data;
  g->interval_ns = (uint64_t)(1e9 / (d.progress_hz > 0 ? d.progress_hz : 10));
  g->on_dispatch = d.progress_on_dispatch != 0;
  snprintf(g->name, sizeof g->name, "%s", tdm__name_or(d.name));
  tdm__spin_lock(&rt->groups_lock);
  g->next = rt->groups;
  if (rt->groups)
    rt->groups->prev = g;
  rt->groups = g;
  tdm__spin_unlock(&rt->groups_lock);
  *out = g;
  return TDM_OK;
}

static void group_free(tdm_group *g) {
  tdm_runtime *rt = g->rt;
  tdm__spin_lock(&rt->groups_lock);
  if (g->prev)
    g->prev->next = g->next;
  else
    rt->groups = g->next;
  if (g->next)
    g->next->prev = g->prev;
  tdm__spin_unlock(&rt->groups_lock);
  free(g);
}

void tdm__group_unref(tdm_group *g) {
  /* acq_rel: the last owner sees the others' writes before freeing */
  if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1)
    group_free(g);
}

void tdm__groups_free(tdm_runtime *rt) {
  while (rt->groups)
    group_free(rt->groups);
}

void tdm_group_release(tdm_group *g) {
  if (!g || tdm__forked(g->rt))
    return;
  tdm__group_unref(g);
}

void tdm__group_joined(tdm_task *t) {
  atomic_fetch_add_explicit(&t->group->refs, 1, memory_order_relaxed);
}

void tdm__group_submitted(tdm_task *t) {
  tdm_group *g = t->group;
  /* seq_cst: counted before the task (and so before the task that
   * submitted it, if in the group) can end; pairs with tdm_group_wait */
  atomic_fetch_add(&g->pending, 1);
  atomic_fetch_add_explicit(&g->submitted, 1, memory_order_relaxed);
  add_cost(&g->cost_submitted, tdm__cost_of(t));
  if (atomic_load_explicit(&g->cancel, memory_order_relaxed)) /* before anyone can run it */
    atomic_store_explicit(&t->outcome, TDM_ERR_CANCELLED, memory_order_relaxed);
}

tdm_status tdm_group_get_progress(const tdm_group *g, tdm_group_progress *p) {
  if (!g || !p || p->struct_size < sizeof *p)
    return TDM_ERR_INVALID_ARG;
  /* ended first: a task counted there had its group's submissions
   * counted before it ended, so ended <= submitted */
  p->ended = atomic_load(&g->ended);
  p->submitted = atomic_load(&g->submitted);
  p->failed = atomic_load_explicit(&g->failed, memory_order_relaxed);
  p->cancelled = atomic_load_explicit(&g->cancelled, memory_order_relaxed);
  p->cost_ended = atomic_load(&g->cost_ended);
  p->cost_submitted = atomic_load(&g->cost_submitted);
  p->cancel_requested = atomic_load_explicit(&g->cancel, memory_order_relaxed);
  return TDM_OK;
}

void tdm__group_progress_call(tdm_group *g) {
  tdm_group_progress p = {.struct_size = sizeof p};
  tdm_group_get_progress(g, &p);
  /* A call that would show what the last one showed is not made: a
   * throttled call may have read the final counts before the final
   * request, which would show them again (from tdm_runtime_destroy's
   * dispatch, say). So each state, the final one included, comes once. */
  const tdm_group_progress *s = &g->shown;
  if (g->any_shown && p.ended == s->ended && p.submitted == s->submitted &&
      p.failed == s->failed && p.cancelled == s->cancelled &&
      p.cancel_requested == s->cancel_requested)
    return;
  g->shown = p;
  g->any_shown = true;
  TDM_USER_CODE(g->progress_fn(g->progress_data, &p));
}

/* A progress call is due (final: the group became idle). The thread that
 * holds `calling` calls (or posts the call to the dispatch queue) until
 * no request came during its call, so the last state is always shown and
 * never two calls run at once. */
static void progress(tdm_group *g, bool final) {
  uint64_t now = tdm__now_ns();
  uint64_t last = atomic_load_explicit(&g->last_ns, memory_order_relaxed);
  if (!final && (now - last < g->interval_ns ||
                 !atomic_compare_exchange_strong(&g->last_ns, &last, now)))
    return;
  if (final)
    atomic_store_explicit(&g->last_ns, now, memory_order_relaxed);
  /* seq_cst (the increment and the exchange): a holder that releases
   * `calling` then sees this request, or this thread takes `calling` */
  atomic_fetch_add(&g->want, 1);
  while (!atomic_exchange(&g->calling, true)) {
    unsigned seen = atomic_load(&g->want);
    if (g->on_dispatch)
      tdm__dispatch_progress(g); /* the call runs in tdm_dispatch */
    else
      tdm__group_progress_call(g);
    atomic_store(&g->calling, false);
    if (atomic_load(&g->want) == seen)
      break;
  }
}

void tdm__group_ended(tdm_task *t) {
  tdm_group *g = t->group;
  int32_t outcome = atomic_load_explicit(&t->outcome, memory_order_relaxed);
  if (outcome == TDM_ERR_CANCELLED)
    atomic_fetch_add_explicit(&g->cancelled, 1, memory_order_relaxed);
  else if (outcome)
    atomic_fetch_add_explicit(&g->failed, 1, memory_order_relaxed);
  add_cost(&g->cost_ended, tdm__cost_of(t));
  atomic_fetch_add(&g->ended, 1);
  /* seq_cst, all three: a waiter that sees pending at 0 sees `ending`
   * counted until the progress call below has returned; pairs with
   * tdm_group_wait's increment of waiters */
  atomic_fetch_add(&g->ending, 1);
  bool idle = atomic_fetch_sub(&g->pending, 1) == 1;
  if (g->progress_fn)
    progress(g, idle);
  bool last = atomic_fetch_sub(&g->ending, 1) == 1;
  if (last && !atomic_load(&g->pending) && atomic_load(&g->waiters))
    tdm__wake_waiters(g->rt);
}

tdm_status tdm_group_cancel(tdm_group *g) {
  if (!g)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(g->rt, "tdm_group_cancel");
  /* read first: once the flag is up, its queued tasks end at once */
  int64_t not_ended = atomic_load(&g->pending);
  if (!atomic_exchange(&g->cancel, true)) {
    tdm__log(g->rt, TDM_LOG_DEBUG, "group %s cancelled", g->name);
    tdm__trace_mark(g->rt, TDM_EV_CANCEL, g->name, (uint64_t)not_ended);
  }
  return TDM_OK;
}

/* Tasks of g not ended, or a progress call of an ended one not returned. */
static bool busy(tdm_group *g) {
  return atomic_load(&g->pending) || atomic_load(&g->ending);
}

static bool idle(const void *g) {
  return !busy((tdm_group *)g);
}

tdm_status tdm_group_wait(tdm_group *g) {
  if (!g)
    return TDM_ERR_INVALID_ARG;
  tdm_runtime *rt = g->rt;
  TDM_FORK_GUARD(rt, "tdm_group_wait");
  tdm_status st = tdm__check_blocking(rt, "tdm_group_wait");
  if (st)
    return st;
  if (tdm__waits_dispatching(rt)) { /* what it waits for may be pinned here */
    atomic_fetch_add(&g->waiters, 1);
    tdm__wait_dispatching(rt, idle, g);
    atomic_fetch_sub(&g->waiters, 1);
  }
  uint64_t deadline = 0;
  while (busy(g) && tdm__idle_step(&deadline, rt->cfg.spin_us))
    ;
  if (busy(g)) {
    TDM_PTHREAD(rt, pthread_mutex_lock(&rt->wait_lock));
    atomic_fetch_add(&g->waiters, 1);
    while (busy(g))
      TDM_PTHREAD(rt, pthread_cond_wait(&rt->wait_cond, &rt->wait_lock));
    atomic_fetch_sub(&g->waiters, 1);
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->wait_lock));
  }
  if (atomic_load(&g->cancel))
    return TDM_ERR_CANCELLED;
  return atomic_load(&g->failed) || atomic_load(&g->cancelled) ? TDM_ERR_TASK_FAILED : TDM_OK;
}
