/*
 * The dispatch queue: what the application asked to run on its own thread
 * (tasks pinned there, completion callbacks, group progress calls) waits
 * here until that thread calls tdm_dispatch, and an eventfd (Linux)
 * becomes readable while it is not empty, so that an event loop (poll,
 * GLib's GMainLoop, Qt's QSocketNotifier, libuv's uv_poll) wakes up for it.
 *
 * Tasks queue by their pool_next link (free while they are not in any
 * other queue), groups by their own; both hold a reference while queued.
 * A task queued for its callback (dispatch_ended) is queued before its
 * end is counted (complete.c), so that a thread that waits for it and then
 * dispatches finds the callback.
 * The eventfd is signalled once per batch of posts: `signalled` (under
 * dispatch_lock) says a write is due or done and not yet read, and
 * tdm_dispatch reads the fd empty under the lock before it takes the
 * queue, so that a post after that read is signalled again.
 */
#include "core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Under dispatch_lock: whether the caller must write to the eventfd
 * (after the lock) for what it just queued. */
static bool due(tdm_runtime *rt) {
  if (rt->signalled || rt->event_fd < 0)
    return false;
  rt->signalled = true;
  return true;
}

static void signal_fd(tdm_runtime *rt) {
  uint64_t one = 1;
  /* EAGAIN: the counter is full, readable anyway */
  if (write(rt->event_fd, &one, sizeof one) < 0 && errno != EAGAIN)
    tdm__log(rt, TDM_LOG_ERROR, "dispatch: write to its eventfd failed: %s", strerror(errno));
}

void tdm__dispatch_task(tdm_runtime *rt, tdm_task *t) {
  t->pool_next = NULL; /* the reference it holds goes with it */
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->dispatch_lock));
  if (rt->dq_tail)
    rt->dq_tail->pool_next = t;
  else
    rt->dq_head = t;
  rt->dq_tail = t;
  rt->dq_pinned += !t->dispatch_ended;
  bool signal = due(rt), wake = rt->dwaiting && !t->dispatch_ended;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->dispatch_lock));
  if (signal)
    signal_fd(rt);
  if (wake) /* a wait of the dispatching thread is blocked: it dispatches it */
    tdm__wake_waiters(rt);
}

void tdm__dispatch_progress(tdm_group *g) {
  tdm_runtime *rt = g->rt;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->dispatch_lock));
  bool signal = false;
  if (!g->dposted) { /* one call shows the latest counts */
    g->dposted = true;
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    g->dnext = rt->dg_head;
    rt->dg_head = g;
    signal = due(rt);
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->dispatch_lock));
  if (signal)
    signal_fd(rt);
}

int tdm_runtime_event_fd(tdm_runtime *rt) {
  if (!rt || tdm__forked(rt))
    return -1;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->dispatch_lock));
  bool signal = false;
  if (rt->event_fd < 0) {
    rt->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (rt->event_fd < 0)
      tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_event_fd: eventfd failed: %s", strerror(errno));
    else if (rt->dq_head || rt->dg_head) /* queued before */
      signal = due(rt);
  }
  int fd = rt->event_fd;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->dispatch_lock));
  if (signal)
    signal_fd(rt);
  return fd;
}

_Thread_local const tdm_runtime *tdm__dispatch_of TDM_TLS_MODEL;

/* A number of the calling thread's own, never given to another thread of
 * the process (a thread's address or pthread_t may be a dead thread's). */
static _Thread_local uintptr_t thread_mark TDM_TLS_MODEL;
static _Atomic uintptr_t marks_given;

uintptr_t tdm__thread_mark(void) {
  if (TDM_UNLIKELY(!thread_mark))
    thread_mark = atomic_fetch_add_explicit(&marks_given, 1, memory_order_relaxed) + 1;
  return thread_mark;
}

void tdm__wait_dispatching(tdm_runtime *rt, bool (*done)(const void *), const void *arg) {
  /* Poll a little first, as every wait does: short work then costs no
   * wake-up (a pinned task waits that long at most) */
  uint64_t deadline = 0;
  while (!done(arg) && tdm__idle_step(&deadline, rt->cfg.spin_us))
    ;
  while (!done(arg)) {
    /* Only a pinned task can hold up a wait (callbacks and progress calls
     * come after what they follow is counted as ended): one queued
     * makes it dispatch, unless another thread does (against the rules,
     * but then that thread runs it). Else blocked until a completion or
     * a pinned task's post wakes it: the post checks dwaiting under
     * dispatch_lock and wakes under wait_lock, which this thread holds
     * from its look at the queue to its wait. */
    TDM_PTHREAD(rt, pthread_mutex_lock(&rt->wait_lock));
    TDM_PTHREAD(rt, pthread_mutex_lock(&rt->dispatch_lock));
    bool pinned = rt->dq_pinned && !atomic_load(&rt->dispatching);
    rt->dwaiting += !pinned;
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->dispatch_lock));
    if (pinned) {
      TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->wait_lock));
      tdm_dispatch(rt);
      continue;
    }
    if (!done(arg))
      TDM_PTHREAD(rt, pthread_cond_wait(&rt->wait_cond, &rt->wait_lock));
    TDM_PTHREAD(rt, pthread_mutex_lock(&rt->dispatch_lock));
    rt->dwaiting--;
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->dispatch_lock));
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->wait_lock));
  }
}

int tdm_dispatch(tdm_runtime *rt) {
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_dispatch");
  if (tdm__self_in(rt) || TDM_UNLIKELY(tdm__thread_of == rt)) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_dispatch called from a task or a callback the runtime "
             "runs: it runs on the application's thread");
    return TDM_ERR_IN_TASK;
  }
  if (TDM_UNLIKELY(tdm__locked_of == rt))
    return tdm__refuse_locked(rt, "tdm_dispatch");
  if (TDM_UNLIKELY(tdm__event_of == rt)) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_dispatch called from an event or build callback of the "
             "same runtime: it could deadlock");
    return TDM_ERR_IN_TASK;
  }
  if (atomic_exchange(&rt->dispatching, true)) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_dispatch: already running on another thread (or nested)");
    return TDM_ERR_INVALID_ARG;
  }
  atomic_store_explicit(&rt->dispatcher, tdm__thread_mark(), memory_order_relaxed);
  /* What is queued now; what it queues in turn (a pinned successor) waits
   * for the next call, so that the event loop keeps turning. */
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->dispatch_lock));
  if (rt->event_fd >= 0 && rt->signalled) {
    uint64_t n;
    if (read(rt->event_fd, &n, sizeof n) < 0 && errno != EAGAIN)
      tdm__log(rt, TDM_LOG_ERROR, "tdm_dispatch: read of its eventfd failed: %s",
               strerror(errno));
  }
  rt->signalled = false;
  tdm_task *tasks = rt->dq_head;
  rt->dq_head = rt->dq_tail = NULL;
  rt->dq_pinned = 0;
  tdm_group *groups = rt->dg_head;
  rt->dg_head = NULL;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->dispatch_lock));
  const tdm_runtime *outer = tdm__dispatch_of; /* another runtime's, maybe */
  tdm__dispatch_of = rt;
  int ran = 0;
  while (tasks) {
    tdm_task *t = tasks;
    tasks = t->pool_next;
    if (t->dispatch_ended) {
      tdm__callback_status = atomic_load_explicit(&t->outcome, memory_order_relaxed);
      tdm__callback_worker = UINT32_MAX;
      TDM_USER_CODE(t->callback(t->callback_data));
      tdm__callback_status = TDM_ERR_INVALID_ARG;
      tdm__task_unref(t);
    } else {
      tdm__task_run_here(t);
    }
    ran++;
  }
  while (groups) {
    tdm_group *g = groups;
    /* Its link is read before its post is undone: a post after that
     * links it into the next batch (dnext rewritten), and shows counts
     * later than those this call reads. */
    TDM_PTHREAD(rt, pthread_mutex_lock(&rt->dispatch_lock));
    groups = g->dnext;
    g->dposted = false;
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->dispatch_lock));
    tdm__group_progress_call(g);
    tdm__group_unref(g);
    ran++;
  }
  tdm__dispatch_of = outer;
  atomic_store(&rt->dispatching, false);
  return ran;
}

void tdm__dispatch_close(tdm_runtime *rt) {
  if (rt->event_fd >= 0)
    close(rt->event_fd);
  rt->event_fd = -1;
}
