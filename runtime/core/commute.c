/*
 * Commutative accesses (TDM_COMMUTE): the tasks that name a handle so,
 * one after another, may run in any order but never two at once. Their
 * dependencies (task.c) make each wait only for the accesses before the
 * run of them, and the next other access wait for all of them; this file
 * keeps them apart while they run.
 *
 * A handle's exclusion is taken when such a task becomes ready, before
 * it is placed, and given back when it ends (retries included): a task
 * waiting for it is in no queue, so no worker or device ever holds a task
 * it cannot start. A task naming several such handles takes them all at
 * once or none, under their locks in address order, so no two tasks can
 * each hold what the other waits for. One that finds a handle held joins
 * that handle's waiters (first come, first served, linked through
 * pool_next, free while a task is neither queued nor pooled); the task
 * that gives a handle back tries its waiters in turn until one takes it
 * or none is left. StarPU offers the same access (STARPU_COMMUTE).
 */
#include "core.h"

/* t's distinct handles and their modes, by address: the caller's room
 * for a task of few buffers; a task of many keeps them (set at its
 * submission). How many. */
static unsigned handles_of(const tdm_task *t, tdm_handle **room, unsigned *mroom,
                           tdm_handle ***hs, unsigned **modes) {
  if (t->more) {
    *hs = t->more->locked;
    *modes = t->more->lock_modes;
    return t->more->nlocked;
  }
  *hs = room;
  *modes = mroom;
  return tdm__task_unique_handles(t, room, mroom);
}

bool tdm__commute_take(tdm_task *t) {
  tdm_handle *room[TDM_MAX_BUFFERS], **hs;
  unsigned mroom[TDM_MAX_BUFFERS], *modes;
  unsigned n = handles_of(t, room, mroom, &hs, &modes);
  for (unsigned i = 0; i < n; i++)
    if (modes[i] & TDM__COMMUTES)
      tdm__spin_lock(&hs[i]->lock);
  tdm_handle *held = NULL;
  for (unsigned i = 0; i < n && !held; i++)
    if ((modes[i] & TDM__COMMUTES) && hs[i]->commute_owner && hs[i]->commute_owner != t)
      held = hs[i];
  if (!held) {
    for (unsigned i = 0; i < n; i++)
      if (modes[i] & TDM__COMMUTES)
        hs[i]->commute_owner = t;
  } else {
    t->pool_next = NULL;
    if (held->commute_tail)
      held->commute_tail->pool_next = t;
    else
      held->commute_head = t;
    held->commute_tail = t;
  }
  for (unsigned i = n; i-- > 0;)
    if (modes[i] & TDM__COMMUTES)
      tdm__spin_unlock(&hs[i]->lock);
  return !held;
}

/* The first task waiting for h's exclusion, if h is free (its lock held). */
static tdm_task *next_waiting(tdm_handle *h) {
  tdm_task *w = h->commute_owner ? NULL : h->commute_head;
  if (w && !(h->commute_head = w->pool_next))
    h->commute_tail = NULL;
  return w;
}

void tdm__commute_give(tdm_task *t) {
  tdm_handle *room[TDM_MAX_BUFFERS], **hs;
  unsigned mroom[TDM_MAX_BUFFERS], *modes;
  unsigned n = handles_of(t, room, mroom, &hs, &modes);
  for (unsigned i = 0; i < n; i++) {
    if (!(modes[i] & TDM__COMMUTES))
      continue;
    tdm_handle *h = hs[i];
    tdm__spin_lock(&h->lock);
    bool held = h->commute_owner == t; /* (not when it ended before it was ready) */
    if (held)
      h->commute_owner = NULL;
    tdm_task *w = held ? next_waiting(h) : NULL;
    tdm__spin_unlock(&h->lock);
    /* A waiter that cannot take all it needs waits again, for h or for
     * another: the next is tried, until one holds h or none is left. */
    while (w) {
      if (tdm__commute_take(w)) {
        tdm__place(w->rt, w);
        break;
      }
      tdm__spin_lock(&h->lock);
      w = next_waiting(h);
      tdm__spin_unlock(&h->lock);
    }
  }
}
