/*
 * Completion callbacks that always come. An OpenCL implementation may
 * never call a callback registered on an event whose command failed:
 * PoCL 3.1 calls none, neither for a user event set to an error status
 * nor for the commands that waited on it and failed with it (the OpenCL
 * specification says a callback registered for CL_COMPLETE is called for
 * an error status too). A task or a copy that failed that way would
 * never end, and tdm_wait_all would wait forever. So each callback is
 * registered here: a watcher thread looks, every WATCH_NS while callbacks
 * are pending, at the events whose callback has not come, and calls it
 * itself for those that failed. The first of the implementation's call
 * and the watcher's runs the callback; the other does nothing.
 *
 * The watcher also ends the devices' completions that wait for a CPU
 * worker (they come between their tasks) when none came within LATE_NS:
 * with every CPU worker in a long task, a device's successors are
 * released and its next commands enqueued within a tick, on this thread,
 * which sleeps between ticks and reserves no core.
 */
#include "device.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WATCH_NS 2000000 /* 2 ms */
#define LATE_NS 500000   /* a completion no CPU worker took in 0.5 ms */

typedef struct watched {
  cl_event e; /* a reference */
  void(CL_CALLBACK *fn)(cl_event, cl_int, void *);
  void *data;
  const cl_api *api;
  _Atomic int claimed;   /* fn was called, or is being called */
  _Atomic int came;      /* the implementation's callback returned */
  struct watched *next;  /* under the watch's lock */
} watched;

struct cl_watch {
  tdm_runtime *rt;
  pthread_mutex_t lock; /* guards all below; a leaf lock */
  pthread_cond_t cond;
  watched *head;  /* callbacks pending */
  watched *given; /* called by the watcher; freed at the end */
  bool stop;
  _Atomic bool asleep; /* in its untimed wait: a completion posted wakes it */
  pthread_t thread;
};

static void CL_CALLBACK came(cl_event e, cl_int status, void *arg) {
  watched *w = arg;
  /* A callback registered on an event that had failed already may say
   * CL_COMPLETE (PoCL does, for a user event an enqueue function gave):
   * the event's own status has the last word. */
  cl_int own = CL_COMPLETE;
  if (status == CL_COMPLETE &&
      w->api->GetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof own, &own,
                                  NULL) == CL_SUCCESS &&
      own < 0)
    status = own;
  if (!atomic_exchange(&w->claimed, 1))
    w->fn(e, status, w->data);
  atomic_store_explicit(&w->came, 1, memory_order_release); /* last: w may go */
}

/* Frees the entries whose callback came; collects into *failed those
 * whose event failed and whose callback nobody called yet (claimed for
 * the caller, who calls them without the lock). Lock held. */
static void sweep(struct cl_watch *cw, watched **failed) {
  const cl_api *api = api_of(cw->rt);
  for (watched **link = &cw->head; *link;) {
    watched *w = *link;
    cl_int st = CL_QUEUED;
    if (atomic_load_explicit(&w->came, memory_order_acquire)) {
      *link = w->next;
      api->ReleaseEvent(w->e);
      free(w);
      continue;
    }
    if (!atomic_load(&w->claimed) &&
        api->GetEventInfo(w->e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) ==
            CL_SUCCESS &&
        st < 0 && !atomic_exchange(&w->claimed, 1)) {
      *link = w->next;
      w->next = *failed; /* called, then kept until the end (`given`) */
      *failed = w;
      continue;
    }
    link = &w->next;
  }
}

static void *watch_main(void *arg) {
  struct cl_watch *cw = arg;
  tdm_runtime *rt = cw->rt;
  const cl_api *api = api_of(rt);
  tdm__name_thread(rt, "tandem-clwatch");
  TDM_PTHREAD(rt, pthread_mutex_lock(&cw->lock));
  while (!cw->stop) {
    if (!cw->head) {
      /* seq_cst, with tdm__cl_watch_wake's: a completion posted after
       * the look below finds it asleep, and wakes it */
      atomic_store(&cw->asleep, true);
      if (!tdm__cl_completions_waiting(rt)) {
        TDM_PTHREAD(rt, pthread_cond_wait(&cw->cond, &cw->lock));
        atomic_store(&cw->asleep, false);
        continue;
      }
      atomic_store(&cw->asleep, false);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WATCH_NS;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    int err = pthread_cond_timedwait(&cw->cond, &cw->lock, &ts);
    if (err && err != ETIMEDOUT)
      tdm__log(rt, TDM_LOG_ERROR, "pthread_cond_timedwait: %s", strerror(err));
    watched *failed = NULL;
    sweep(cw, &failed);
    TDM_PTHREAD(rt, pthread_mutex_unlock(&cw->lock));
    tdm__tok_check(rt); /* copies that stall */
    /* completions no CPU worker took (all in long tasks): ended here, so
     * that a device's successors and its next tasks do not wait for them */
    tdm__cl_progress_late(rt, LATE_NS);
    /* adaptive windows: the work in flight shrank, the next may go */
    tdm__cl_pump_windows(rt);
    for (watched *w = failed; w; w = w->next) {
      cl_int st = CL_QUEUED;
      api->GetEventInfo(w->e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
      tdm__log(rt, TDM_LOG_DEBUG, "OpenCL: a command failed (%s, error %d) without its callback",
               CL_ERR(st));
      w->fn(w->e, st < 0 ? st : CL_OUT_OF_RESOURCES, w->data);
    }
    TDM_PTHREAD(rt, pthread_mutex_lock(&cw->lock));
    while (failed) { /* the implementation's callback may still come */
      watched *next = failed->next;
      failed->next = cw->given;
      cw->given = failed;
      failed = next;
    }
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&cw->lock));
  return NULL;
}

void tdm__cl_watch_wake(tdm_runtime *rt) {
  struct cl_watch *cw = cl_of(rt)->watch;
  if (!cw || !atomic_load(&cw->asleep))
    return;
  TDM_PTHREAD(rt, pthread_mutex_lock(&cw->lock));
  TDM_PTHREAD(rt, pthread_cond_signal(&cw->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&cw->lock));
}

bool tdm__cl_when_complete(tdm_runtime *rt, cl_event e,
                           void(CL_CALLBACK *fn)(cl_event, cl_int, void *), void *data) {
  const cl_api *api = api_of(rt);
  struct cl_watch *cw = cl_of(rt)->watch;
  watched *w = cw ? tdm__calloc(rt, 1, sizeof *w) : NULL;
  if (!w || api->RetainEvent(e) != CL_SUCCESS) {
    free(w);
    return api->SetEventCallback(e, CL_COMPLETE, fn, data) == CL_SUCCESS;
  }
  *w = (watched){.e = e, .fn = fn, .data = data, .api = api};
  TDM_PTHREAD(rt, pthread_mutex_lock(&cw->lock));
  bool idle = !cw->head;
  w->next = cw->head;
  cw->head = w;
  if (idle)
    TDM_PTHREAD(rt, pthread_cond_signal(&cw->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&cw->lock));
  /* on the list first: the callback may come at once */
  if (api->SetEventCallback(e, CL_COMPLETE, came, w) != CL_SUCCESS) {
    atomic_store(&w->claimed, 1); /* the caller does without (false) */
    atomic_store_explicit(&w->came, 1, memory_order_release);
    return false;
  }
  return true;
}

tdm_status tdm__cl_watch_start(tdm_runtime *rt) {
  struct cl_watch *cw = tdm__calloc(rt, 1, sizeof *cw);
  if (!cw)
    return TDM_ERR_NO_MEMORY;
  cw->rt = rt;
  int err = pthread_mutex_init(&cw->lock, NULL);
  if (!err && (err = pthread_cond_init(&cw->cond, NULL)))
    pthread_mutex_destroy(&cw->lock);
  if (!err && (err = pthread_create(&cw->thread, NULL, watch_main, cw))) {
    pthread_cond_destroy(&cw->cond);
    pthread_mutex_destroy(&cw->lock);
  }
  if (err) {
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: the completion watcher could not start: %s",
             strerror(err));
    free(cw);
    return TDM_ERR_SYSTEM;
  }
  cl_of(rt)->watch = cw;
  return TDM_OK;
}

void tdm__cl_watch_stop(tdm_runtime *rt) {
  struct cl_watch *cw = cl_of(rt) ? cl_of(rt)->watch : NULL;
  if (!cw)
    return;
  TDM_PTHREAD(rt, pthread_mutex_lock(&cw->lock));
  cw->stop = true;
  TDM_PTHREAD(rt, pthread_cond_signal(&cw->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&cw->lock));
  int err = pthread_join(cw->thread, NULL);
  if (err)
    tdm__log(rt, TDM_LOG_ERROR, "pthread_join(OpenCL watcher): %s", strerror(err));
  /* Every command has finished (cl_stop), but on a hung device: a
   * callback still to come is one the implementation does not make, or
   * makes late; a little while for the late ones, then they are given
   * up: claimed, so that a callback that comes after the runtime is
   * gone calls nothing, and left behind (the implementation holds it). */
  const cl_api *api = api_of(rt);
  uint64_t deadline = tdm__now_ns() + 50000000;
  for (unsigned l = 0; l < 2; l++)
    for (watched *w = l ? cw->given : cw->head, *next; w; w = next) {
      next = w->next;
      while (!atomic_load_explicit(&w->came, memory_order_acquire) && tdm__now_ns() < deadline)
        tdm__sleep_until(tdm__now_ns() + 100000);
      /* the watcher's own (l = 1) were called already; the others are
       * claimed here unless the implementation is calling them now */
      if (!atomic_load_explicit(&w->came, memory_order_acquire) &&
          (l || !atomic_exchange(&w->claimed, 1))) {
        tdm__log(rt, TDM_LOG_DEBUG, "OpenCL: a command never completed: given up");
        continue; /* its callback may still come: it finds w claimed */
      }
      while (!atomic_load_explicit(&w->came, memory_order_acquire)) /* being called */
        tdm__sleep_until(tdm__now_ns() + 100000);
      api->ReleaseEvent(w->e);
      free(w);
    }
  pthread_cond_destroy(&cw->cond);
  pthread_mutex_destroy(&cw->lock);
  free(cw);
  cl_of(rt)->watch = NULL;
}
