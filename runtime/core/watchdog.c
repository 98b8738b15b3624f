/*
 * The watchdog for hung devices (tdm_config.watchdog_*).
 *
 * A device that stops answering never completes the try it runs, nor
 * anything queued behind it: without a watchdog, tdm_wait_all would wait
 * for it forever. Each backend tells the watchdog, per device worker,
 * which try runs there now (on an in-order queue, the oldest one in
 * flight: the others wait behind it) and since when (tdm__watch). Its
 * limit is watchdog_factor times the model's calibrated prediction for
 * it, at least watchdog_min; or watchdog_uncalibrated for a codelet the
 * model cannot predict yet (0: not watched).
 *
 * One thread per runtime sleeps until the earliest deadline (on a
 * condition variable with the monotonic clock; with nothing watched it
 * sleeps until woken: an idle runtime costs nothing). A try still
 * running at its deadline makes its device hung: rt->hung has it (every
 * launch, copy and allocation there fails from then on, tdm__fault), it
 * is quarantined, and its backend abandons the tries in flight there
 * (tdm_backend.abandon): they end failed with TDM_ERR_DEVICE_LOST, undone
 * as failed runs, and are tried again elsewhere.
 */
#include "core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct tdm_watchdog {
  pthread_t thread;
  pthread_mutex_t lock; /* guards what follows; a leaf */
  pthread_cond_t cond;
  bool stop;
  uint64_t sleeping_until; /* the deadline it sleeps to; UINT64_MAX: none */
  struct watched {
    uint64_t since, deadline; /* ns; deadline 0: nothing watched */
    double limit, predicted;  /* s; predicted < 0: not calibrated */
    const char *basis;        /* where the prediction comes from */
    char codelet[48];
  } dev[TDM_MAX_DEVICE_WORKERS];
};

bool tdm__watch(tdm_runtime *rt, unsigned k, const tdm_task *t, uint64_t since) {
  struct tdm_watchdog *g = rt->watchdog;
  if (!g)
    return false;
  double limit = 0, predicted = -1;
  const char *basis = "";
  if (t) {
    bool calibrated;
    double p = tdm__sched_predict_on(rt, t, k, &calibrated);
    if (calibrated && p >= 0 && rt->cfg.watchdog_factor > 0) {
      predicted = p;
      limit = rt->cfg.watchdog_factor * p;
      if (limit < rt->cfg.watchdog_min)
        limit = rt->cfg.watchdog_min;
    } else if (!calibrated && rt->cfg.watchdog_uncalibrated > 0) {
      /* not calibrated here (its first launches there may include a
       * driver's compilation): the limit for uncalibrated tries, or more
       * for a task that takes long on another class (a CPU's, most
       * often) */
      limit = rt->cfg.watchdog_uncalibrated;
      double elsewhere = rt->cfg.watchdog_factor > 0 ? tdm__sched_predict_elsewhere(rt, t, k)
                                                     : -1;
      if (elsewhere >= 0 && rt->cfg.watchdog_factor * elsewhere > limit) {
        predicted = elsewhere;
        limit = rt->cfg.watchdog_factor * elsewhere;
        basis = " on another class";
      }
    }
  }
  struct watched w = {.since = since, .limit = limit, .predicted = predicted, .basis = basis};
  if (limit > 0) {
    w.deadline = since + tdm__ns_of(limit);
    snprintf(w.codelet, sizeof w.codelet, "%s",
             tdm__codelet_name(t));
  }
  TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
  g->dev[k] = w;
  if (w.deadline && w.deadline < g->sleeping_until)
    TDM_PTHREAD(rt, pthread_cond_signal(&g->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
  return w.deadline != 0;
}

void tdm__device_hung(tdm_runtime *rt, unsigned k, const char *why) {
  if (atomic_fetch_or(&rt->hung, UINT64_C(1) << k) >> k & 1)
    return; /* once */
  tdm__device_quarantine(rt, k, why);
  if (tdm__backend_of(rt, k)->abandon)
    tdm__backend_of(rt, k)->abandon(rt, k);
}

/* Device worker k ran w past its deadline: hung. */
static void hung(tdm_runtime *rt, unsigned k, const struct watched *w) {
  char why[256];
  double ran = 1e-9 * (double)(tdm__now_ns() - w->since);
  if (w->predicted >= 0)
    snprintf(why, sizeof why, "hung: codelet %s ran %.3g s, over its limit of %.3g s "
             "(predicted %.3g s%s)", w->codelet, ran, w->limit, w->predicted, w->basis);
  else
    snprintf(why, sizeof why, "hung: codelet %s ran %.3g s, over its limit of %.3g s "
             "(not calibrated)", w->codelet, ran, w->limit);
  tdm__device_hung(rt, k, why);
}

static void *watchdog_main(void *arg) {
  tdm_runtime *rt = arg;
  struct tdm_watchdog *g = rt->watchdog;
  tdm__name_thread(rt, "tandem-watchdog");
  TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
  while (!g->stop) {
    uint64_t now = tdm__now_ns(), next = UINT64_MAX;
    int late = -1;
    for (unsigned k = 0; k < rt->ndevice_workers && late < 0; k++) {
      uint64_t d = g->dev[k].deadline;
      if (d && d <= now)
        late = (int)k;
      else if (d && d < next)
        next = d;
    }
    if (late >= 0) {
      struct watched w = g->dev[late];
      g->dev[late].deadline = 0; /* once */
      TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
      hung(rt, (unsigned)late, &w);
      TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
      continue;
    }
    g->sleeping_until = next;
    if (next == UINT64_MAX) {
      TDM_PTHREAD(rt, pthread_cond_wait(&g->cond, &g->lock));
    } else {
      struct timespec ts = {.tv_sec = (time_t)(next / 1000000000u),
                            .tv_nsec = (long)(next % 1000000000u)};
      int err = pthread_cond_timedwait(&g->cond, &g->lock, &ts);
      if (err && err != ETIMEDOUT)
        tdm__log(rt, TDM_LOG_ERROR, "pthread_cond_timedwait (watchdog): %s", strerror(err));
    }
    g->sleeping_until = UINT64_MAX;
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
  return NULL;
}

tdm_status tdm__watchdog_start(tdm_runtime *rt) {
  if (!rt->ndevice_workers ||
      (!(rt->cfg.watchdog_factor > 0) && !(rt->cfg.watchdog_uncalibrated > 0)))
    return TDM_OK;
  struct tdm_watchdog *g = tdm__calloc(rt, 1, sizeof *g);
  if (!g)
    return TDM_ERR_NO_MEMORY;
  g->sleeping_until = UINT64_MAX;
  pthread_condattr_t attr;
  int err = pthread_condattr_init(&attr);
  if (!err) {
    /* deadlines are tdm__now_ns's: the monotonic clock */
    err = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (!err)
      err = pthread_cond_init(&g->cond, &attr);
    pthread_condattr_destroy(&attr);
  }
  if (!err && (err = pthread_mutex_init(&g->lock, NULL)))
    pthread_cond_destroy(&g->cond);
  if (err) {
    tdm__log(rt, TDM_LOG_ERROR, "watchdog: %s", strerror(err));
    free(g);
    return TDM_ERR_SYSTEM;
  }
  rt->watchdog = g;
  if ((err = pthread_create(&g->thread, NULL, watchdog_main, rt))) {
    tdm__log(rt, TDM_LOG_ERROR, "could not start the watchdog: %s", strerror(err));
    rt->watchdog = NULL;
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    free(g);
    return TDM_ERR_SYSTEM;
  }
  return TDM_OK;
}

void tdm__watchdog_stop(tdm_runtime *rt) {
  struct tdm_watchdog *g = rt->watchdog;
  if (!g)
    return;
  TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
  g->stop = true;
  TDM_PTHREAD(rt, pthread_cond_signal(&g->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
  int err = pthread_join(g->thread, NULL);
  if (err)
    tdm__log(rt, TDM_LOG_ERROR, "pthread_join(watchdog): %s", strerror(err));
  rt->watchdog = NULL;
  pthread_cond_destroy(&g->cond);
  pthread_mutex_destroy(&g->lock);
  free(g);
}
