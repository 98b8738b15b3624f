/*
 * Completion tokens of the OpenCL backend: Tandem's own record of whether
 * a command, and everything it was ordered after, completed, and whether
 * any of it failed, however the driver said so.
 *
 * Drivers report a failed command in different ways: an error returned
 * by the call (the caller's), a negative status that clGetEventInfo,
 * clWaitForEvents and the event's callback all show, a negative status
 * that only the callback shows, and a failed event whose dependents
 * never run (PoCL) or run all the same on what the failed command left.
 * So a token does not ask the event at the time of use. It is settled
 * by the event's callback (the completion watcher's, watch.c, for
 * drivers that call none for a failed command), which is the one signal
 * every driver gives, and by the tokens it was made after: it completes
 * once they all have, and it has failed when any of them failed (as
 * OpenCL's CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST says, whether or
 * not the driver runs the dependents).
 *
 * Nothing waits forever: a device found hung settles every token of its
 * commands as failed (tdm__tok_fail_device), and a copy whose command
 * has not completed within its ceiling after it could start (the
 * watchdog's factor times the link model's time for it, at least the
 * watchdog's minimum) makes its device hung (tdm__tok_check, on the
 * watcher's thread). A command never waits for an event of another
 * context or for a token with no event of its own: such a token is
 * bridged by a user event that always completes successfully once the
 * token is settled, so that a failure never stalls a queue that a
 * driver would otherwise stop; the failure travels in the tokens.
 */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tok_waiter {
  void (*fn)(void *, cl_int);
  void *arg;
  struct tok_waiter *next;
} tok_waiter;

struct cl_tok {
  tdm_runtime *rt;
  cl_event ev;    /* the command's (a reference); NULL: a join */
  cl_context ctx; /* its context */
  int k;          /* the device worker whose queue runs it; -1: none */
  int copy;       /* TOK_COPY, TOK_PEER: a copy, watched for stalls; else 0 */
  uint64_t bytes; /* a copy's */
  _Atomic int refs;
  _Atomic int left;     /* parts not settled yet: its event, and each token before it */
  _Atomic int before;   /* tokens before it not settled yet */
  _Atomic bool ran;     /* its own command completed (successfully or not) */
  _Atomic cl_int status; /* CL_COMPLETE until a failure: the first one */
  /* under the lock */
  bool done;          /* settled: its waiters were called */
  uint64_t ready_at;  /* ns: when the tokens before it had settled */
  tok_waiter *waiters;
  cl_tok *prev, *next; /* the pending list, while not done */
};

struct cl_toks {
  pthread_mutex_t lock; /* a leaf lock: guards the tokens' fields marked so */
  pthread_cond_t cond;  /* broadcast when a token settles */
  cl_tok *pending;
  uint64_t progress[TDM_MAX_DEVICE_WORKERS]; /* ns: when a command there last settled */
  uint64_t copying[TDM_MAX_DEVICE_WORKERS];  /* bytes of copies there not settled */
  uint64_t checked;                          /* ns: the last stall check */
};

static struct cl_toks *toks_of(tdm_runtime *rt) {
  return cl_of(rt)->toks;
}

cl_tok *tdm__tok_of(tdm_token t) {
  return (cl_tok *)(uintptr_t)t;
}

tdm_token tdm__tok_token(cl_tok *t) {
  return (tdm_token)(uintptr_t)t;
}

tdm_status tdm__tok_init(tdm_runtime *rt) {
  struct cl_toks *s = tdm__calloc(rt, 1, sizeof *s);
  if (!s)
    return TDM_ERR_NO_MEMORY;
  int err = pthread_cond_init(&s->cond, NULL);
  if (!err && (err = pthread_mutex_init(&s->lock, NULL)))
    pthread_cond_destroy(&s->cond);
  if (err) {
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: completion tokens: %s", strerror(err));
    free(s);
    return TDM_ERR_SYSTEM;
  }
  cl_of(rt)->toks = s;
  return TDM_OK;
}

void tdm__tok_fini(tdm_runtime *rt) {
  struct cl_toks *s = cl_of(rt) ? toks_of(rt) : NULL;
  if (!s)
    return;
  if (s->pending) /* a hung device's: their callbacks may still come */
    tdm__log(rt, TDM_LOG_WARNING, "OpenCL: commands of a hung device never completed: "
             "their records are left behind");
  else {
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
  }
  cl_of(rt)->toks = NULL;
}

cl_tok *tdm__tok_alloc(tdm_runtime *rt) {
  cl_tok *t = tdm__calloc(rt, 1, sizeof *t);
  if (t) {
    t->rt = rt;
    t->k = -1;
    atomic_init(&t->refs, 1);
    atomic_init(&t->status, CL_COMPLETE);
  } else {
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: out of memory for a command's record");
  }
  return t;
}

void tdm__tok_retain(cl_tok *t) {
  atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}

void tdm__tok_release(cl_tok *t) {
  if (!t || atomic_fetch_sub(&t->refs, 1) != 1)
    return;
  const cl_api *api = api_of(t->rt);
  if (t->ev)
    api->ReleaseEvent(t->ev);
  free(t);
}

static void fail_with(cl_tok *t, cl_int st) {
  cl_int ok = CL_COMPLETE;
  if (st < 0)
    atomic_compare_exchange_strong(&t->status, &ok, st);
}

/* t is settled (or made so: `force` < 0, a hung device): its waiters run,
 * with its status. Once. */
static void finish(cl_tok *t, cl_int force) {
  struct cl_toks *s = toks_of(t->rt);
  fail_with(t, force);
  TDM_PTHREAD(t->rt, pthread_mutex_lock(&s->lock));
  if (t->done) {
    TDM_PTHREAD(t->rt, pthread_mutex_unlock(&s->lock));
    return;
  }
  t->done = true;
  if (t->prev)
    t->prev->next = t->next;
  else if (s->pending == t)
    s->pending = t->next;
  if (t->next)
    t->next->prev = t->prev;
  t->prev = t->next = NULL;
  if (t->k >= 0 && atomic_load(&t->ran))
    s->progress[t->k] = tdm__now_ns();
  if (t->copy && t->k >= 0)
    s->copying[t->k] -= t->bytes;
  tok_waiter *w = t->waiters;
  t->waiters = NULL;
  TDM_PTHREAD(t->rt, pthread_cond_broadcast(&s->cond));
  TDM_PTHREAD(t->rt, pthread_mutex_unlock(&s->lock));
  cl_int st = atomic_load(&t->status);
  while (w) {
    tok_waiter *next = w->next;
    w->fn(w->arg, st);
    free(w);
    w = next;
  }
}

/* One part of t settled with status st. */
static void settle(cl_tok *t, cl_int st, bool own) {
  fail_with(t, st);
  if (own)
    atomic_store(&t->ran, true);
  else if (atomic_fetch_sub(&t->before, 1) == 1) {
    struct cl_toks *s = toks_of(t->rt);
    TDM_PTHREAD(t->rt, pthread_mutex_lock(&s->lock));
    t->ready_at = tdm__now_ns();
    TDM_PTHREAD(t->rt, pthread_mutex_unlock(&s->lock));
  }
  if (atomic_fetch_sub(&t->left, 1) == 1)
    finish(t, CL_COMPLETE);
}

/* The command's event completed (status < 0: failed), as its callback,
 * or the watcher, says. */
static void CL_CALLBACK event_settled(cl_event e, cl_int status, void *data) {
  cl_tok *t = data;
  tdm_runtime *rt = t->rt;
  int k = t->k;
  if (TDM_UNLIKELY(rt->blind_to_events))
    status = CL_COMPLETE; /* the tests' mutation */
  if (t->copy == TOK_COPY && status == CL_COMPLETE && k >= 0) /* over the link */
    tdm__cl_copy_timed(dev_of(rt, k), e, t->bytes);
  settle(t, status < 0 ? status : CL_COMPLETE, true);
  tdm__tok_release(t);
  if (k >= 0) /* last: the device's record may go once none is pending */
    atomic_fetch_sub(&dev_of(rt, k)->events_pending, 1);
}

static void before_settled(void *arg, cl_int status) {
  cl_tok *t = arg;
  settle(t, status, false);
  tdm__tok_release(t);
}

bool tdm__tok_when(cl_tok *t, void (*fn)(void *, cl_int), void *arg) {
  struct cl_toks *s = toks_of(t->rt);
  tok_waiter *w = tdm__malloc(t->rt, sizeof *w);
  if (!w)
    return false;
  *w = (tok_waiter){fn, arg, NULL};
  TDM_PTHREAD(t->rt, pthread_mutex_lock(&s->lock));
  bool done = t->done;
  if (!done) {
    w->next = t->waiters;
    t->waiters = w;
  }
  TDM_PTHREAD(t->rt, pthread_mutex_unlock(&s->lock));
  if (done) {
    fn(arg, atomic_load(&t->status));
    free(w);
  }
  return true;
}

/* t waits for the tokens before it: each settles a part of it. */
static void after_all(cl_tok *t, const tdm_token *before, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    cl_tok *b = tdm__tok_of(before[i]);
    if (!b) {
      settle(t, CL_COMPLETE, false);
      continue;
    }
    tdm__tok_retain(t);
    if (!tdm__tok_when(b, before_settled, t)) { /* no room to wait: wait here */
      tdm__tok_wait(b);
      before_settled(t, atomic_load(&b->status));
    }
  }
}

/* Common start: t goes on the pending list with its parts counted. */
static void start(cl_tok *t, unsigned nbefore) {
  struct cl_toks *s = toks_of(t->rt);
  atomic_init(&t->left, (int)nbefore + (t->ev ? 1 : 0) + 1); /* + 1: until started */
  atomic_init(&t->before, (int)nbefore + 1);
  TDM_PTHREAD(t->rt, pthread_mutex_lock(&s->lock));
  t->ready_at = tdm__now_ns();
  t->next = s->pending;
  if (t->next)
    t->next->prev = t;
  s->pending = t;
  if (t->copy && t->k >= 0) /* (t->k, copy and bytes are set before) */
    s->copying[t->k] += t->bytes;
  TDM_PTHREAD(t->rt, pthread_mutex_unlock(&s->lock));
}

uint64_t tdm__tok_copying(tdm_runtime *rt, unsigned k) {
  struct cl_toks *s = toks_of(rt);
  if (!s)
    return 0;
  TDM_PTHREAD(rt, pthread_mutex_lock(&s->lock));
  uint64_t bytes = s->copying[k];
  TDM_PTHREAD(rt, pthread_mutex_unlock(&s->lock));
  return bytes;
}

void tdm__tok_start(cl_tok *t, cl_event e, cl_context ctx, int k, int copy, uint64_t bytes,
                    const tdm_token *before, unsigned nbefore) {
  const cl_api *api = api_of(t->rt);
  t->ev = e;
  t->ctx = ctx;
  t->k = k;
  t->copy = copy;
  t->bytes = bytes;
  start(t, nbefore);
  after_all(t, before, nbefore);
  if (e) {
    tdm__tok_retain(t);
    if (k >= 0)
      atomic_fetch_add(&dev_of(t->rt, k)->events_pending, 1);
    if (!tdm__cl_when_complete(t->rt, e, event_settled, t)) {
      tdm__log(t->rt, TDM_LOG_WARNING,
               "OpenCL: no completion callback for a command: waiting for it here");
      /* looked at, not waited for: a device found hung ends the wait */
      cl_int st = CL_QUEUED, err;
      while ((err = api->GetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st,
                                      NULL)) == CL_SUCCESS &&
             st != CL_COMPLETE && st >= 0 && !(k >= 0 && atomic_load(&t->rt->hung) >> k & 1))
        tdm__sleep_until(tdm__now_ns() + 100000);
      event_settled(e, err != CL_SUCCESS ? err : st < 0 ? st : st == CL_COMPLETE
                                                              ? CL_COMPLETE
                                                              : CL_DEVICE_NOT_AVAILABLE,
                    t);
    }
  }
  settle(t, CL_COMPLETE, false); /* started */
}

tdm_token tdm__tok_join(tdm_runtime *rt, const tdm_token *ts, unsigned n) {
  cl_tok *t = tdm__tok_alloc(rt);
  if (!t) {
    for (unsigned i = 0; i < n; i++) /* no record: complete they are, then */
      tdm__tok_wait(tdm__tok_of(ts[i]));
    return 0;
  }
  /* a record of no command of its own: each of ts, not yet settled,
   * holds it through its waiter until it settles */
  tdm__tok_start(t, NULL, NULL, -1, 0, 0, ts, n);
  return tdm__tok_token(t);
}

bool tdm__tok_done(cl_tok *t) {
  struct cl_toks *s = toks_of(t->rt);
  TDM_PTHREAD(t->rt, pthread_mutex_lock(&s->lock));
  bool done = t->done;
  TDM_PTHREAD(t->rt, pthread_mutex_unlock(&s->lock));
  return done;
}

bool tdm__tok_ran(const cl_tok *t) {
  return atomic_load(&((cl_tok *)t)->ran);
}

cl_int tdm__tok_status(const cl_tok *t) {
  return atomic_load(&((cl_tok *)t)->status);
}

void tdm__tok_wait(cl_tok *t) {
  if (!t)
    return;
  struct cl_toks *s = toks_of(t->rt);
  TDM_PTHREAD(t->rt, pthread_mutex_lock(&s->lock));
  while (!t->done)
    TDM_PTHREAD(t->rt, pthread_cond_wait(&s->cond, &s->lock));
  TDM_PTHREAD(t->rt, pthread_mutex_unlock(&s->lock));
}

/* ---- what a command waits for ------------------------------------------- */

typedef struct bridge {
  cl_event user;
  cl_int (*SetUserEventStatus)(cl_event, cl_int);
  cl_int (*ReleaseEvent)(cl_event);
} bridge;

static void bridge_done(void *arg, cl_int status) {
  (void)status; /* the failure travels in the tokens, never in a queue */
  bridge *b = arg;
  b->SetUserEventStatus(b->user, CL_COMPLETE);
  b->ReleaseEvent(b->user);
  free(b);
}

void tdm__cl_release_all(const cl_api *api, waitlist *w) {
  for (unsigned i = 0; i < w->n; i++)
    api->ReleaseEvent(w->ev[i]);
  w->n = 0;
}

/* Adds to w what a command of context ctx waits for t by: nothing if t
 * settled, its event if t has one of ctx, else a bridge. False when it
 * cannot (no user event: logged). */
static bool add_wait(tdm_runtime *rt, cl_context ctx, waitlist *w, cl_tok *t) {
  const cl_api *api = api_of(rt);
  if (tdm__tok_done(t))
    return true;
  if (t->ev && t->ctx == ctx) {
    if (w->n == sizeof w->ev / sizeof w->ev[0] || api->RetainEvent(t->ev) != CL_SUCCESS)
      return false;
    w->ev[w->n++] = t->ev;
    return true;
  }
  if (w->n == sizeof w->ev / sizeof w->ev[0])
    return false;
  cl_int err = CL_SUCCESS;
  bridge *b = tdm__malloc(rt, sizeof *b);
  cl_event user = b ? api->CreateUserEvent(ctx, &err) : NULL;
  if (!user || api->RetainEvent(user) != CL_SUCCESS) {
    if (user) {
      api->SetUserEventStatus(user, CL_COMPLETE);
      api->ReleaseEvent(user);
    }
    free(b);
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: a command cannot wait for another device's (no "
             "user event: %s, error %d)", CL_ERR(err));
    return false;
  }
  *b = (bridge){user, api->SetUserEventStatus, api->ReleaseEvent};
  w->ev[w->n++] = user;
  if (!tdm__tok_when(t, bridge_done, b)) {
    bridge_done(b, CL_COMPLETE);
    return false;
  }
  return true;
}

bool tdm__cl_waitlist_of(tdm_runtime *rt, cl_context ctx, waitlist *w, const tdm_token *ts,
                         unsigned n) {
  const unsigned room = sizeof w->ev / sizeof w->ev[0];
  w->n = 0;
  bool ok = true;
  unsigned direct = n <= room ? n : room - 1; /* the rest joined into one */
  for (unsigned i = 0; i < n && ok; i++) {
    cl_tok *t = tdm__tok_of(ts[i]);
    if (t && tdm__tok_status(t) < 0) {
      tdm__log(rt, TDM_LOG_DEBUG, "OpenCL: a command is not enqueued: what it waits for "
               "failed (%s, error %d)", CL_ERR(tdm__tok_status(t)));
      ok = false; /* nothing after it can be right, and a driver may stall */
    } else if (t && i < direct) {
      ok = add_wait(rt, ctx, w, t);
    }
  }
  if (ok && direct < n) {
    cl_tok *rest = tdm__tok_of(tdm__tok_join(rt, ts + direct, n - direct));
    ok = rest && add_wait(rt, ctx, w, rest);
    tdm__tok_release(rest);
  }
  if (!ok)
    tdm__cl_release_all(api_of(rt), w);
  return ok;
}

/* ---- hung devices and stalled copies ---------------------------------- */

void tdm__tok_fail_device(tdm_runtime *rt, unsigned k) {
  struct cl_toks *s = toks_of(rt);
  if (!s)
    return;
  for (;;) {
    cl_tok *found = NULL;
    TDM_PTHREAD(rt, pthread_mutex_lock(&s->lock));
    for (cl_tok *t = s->pending; t && !found; t = t->next)
      if (t->k == (int)k) {
        found = t;
        tdm__tok_retain(t);
      }
    TDM_PTHREAD(rt, pthread_mutex_unlock(&s->lock));
    if (!found)
      return;
    finish(found, CL_DEVICE_NOT_AVAILABLE);
    tdm__tok_release(found);
  }
}

#define CHECK_EVERY_NS 10000000 /* 10 ms */

void tdm__tok_check(tdm_runtime *rt) {
  struct cl_toks *s = toks_of(rt);
  double factor = rt->cfg.watchdog_factor;
  if (!s || !(factor > 0))
    return;
  uint64_t now = tdm__now_ns();
  int stalled = -1;
  double ran = 0, limit = 0;
  uint64_t bytes = 0;
  TDM_PTHREAD(rt, pthread_mutex_lock(&s->lock));
  if (now - s->checked >= CHECK_EVERY_NS) {
    s->checked = now;
    for (cl_tok *t = s->pending; t && stalled < 0; t = t->next) {
      if (!t->copy || t->k < 0 || atomic_load(&t->ran) || atomic_load(&t->before) ||
          atomic_load(&rt->hung) >> t->k & 1)
        continue;
      uint64_t since = t->ready_at > s->progress[t->k] ? t->ready_at : s->progress[t->k];
      double l = factor * rt->nodes.ops->link_time(rt->nodes.ctx, 1 + (unsigned)t->k, t->bytes);
      if (l < rt->cfg.watchdog_min)
        l = rt->cfg.watchdog_min;
      if (now > since && 1e-9 * (double)(now - since) > l) {
        stalled = t->k;
        ran = 1e-9 * (double)(now - since);
        limit = l;
        bytes = t->bytes;
      }
    }
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&s->lock));
  if (stalled < 0)
    return;
  char why[200];
  snprintf(why, sizeof why, "hung: a copy of %llu bytes did not complete in %.3g s (limit %.3g s)",
           (unsigned long long)bytes, ran, limit);
  tdm__device_hung(rt, (unsigned)stalled, why);
}
