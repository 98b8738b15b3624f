/* Runtime lifecycle: creation (topology, devices, workers), waiting for
 * everything, destruction. Its configuration: config.c. */
#include "core.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

_Atomic unsigned tdm__fork_generation;

static void forked_child(void) {
  /* relaxed: the child has one thread now */
  atomic_fetch_add_explicit(&tdm__fork_generation, 1, memory_order_relaxed);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int atfork_err;
static void register_atfork(void) {
  atfork_err = pthread_atfork(NULL, NULL, forked_child);
}

/* Asks the backends, in order, for devices (backends/backend.h): each
 * that finds some drives them, until one says it is the last to ask.
 * Never fails for want of devices: the runtime then runs on the CPU
 * cores. */
static tdm_status setup_devices(tdm_runtime *rt) {
  rt->opencl_report.status = TDM_ERR_NO_OPENCL;
  bool last = false;
  for (const tdm_backend *const *b = tdm__backends; *b && !last && rt->nattached < TDM_MAX_BACKENDS;
       b++) {
    /* its state is found (tdm__state_of) while it discovers */
    unsigned i = rt->nattached++;
    tdm_attached *a = &rt->attached[i];
    *a = (tdm_attached){.ops = *b, .first = rt->ndevice_workers};
    tdm_status st = (*b)->discover(rt, &a->state, &last);
    a->n = rt->ndevice_workers - a->first;
    if (a->state || a->n) { /* released at teardown, even after a failure */
      for (unsigned k = a->first; k < rt->ndevice_workers; k++)
        rt->attached_of[k] = (uint8_t)i;
      /* an emulated machine stretches its CPU tasks, devices or none
       * (one that declares only its cores' speeds, cpu.N) */
      if (!rt->cpu_stretch)
        rt->cpu_stretch = (*b)->cpu_factor;
    } else {
      rt->nattached--;
    }
    if (st)
      return st;
  }
  rt->time_cpu_tasks = rt->recording || rt->timing || rt->cpu_stretch;
  return TDM_OK;
}

/* The devices' memory nodes, then each backend's device workers. */
static tdm_status start_devices(tdm_runtime *rt) {
  if (!rt->ndevice_workers)
    return TDM_OK;
  tdm_status st = tdm__nodes_make(&rt->nodes, rt, 1 + rt->ndevice_workers);
  for (unsigned i = 0; i < rt->nattached && !st; i++)
    if (rt->attached[i].n)
      st = rt->attached[i].ops->start(rt);
  return st;
}

static tdm_status init_sync(tdm_runtime *rt) {
  int err;
  if ((err = pthread_mutex_init(&rt->park_lock, NULL)))
    goto fail;
  if ((err = pthread_cond_init(&rt->park_cond, NULL)))
    goto fail1;
  if ((err = pthread_cond_init(&rt->bench_cond, NULL)))
    goto fail2;
  if ((err = pthread_mutex_init(&rt->wait_lock, NULL)))
    goto fail2b;
  if ((err = pthread_cond_init(&rt->wait_cond, NULL)))
    goto fail3;
  atomic_init(&rt->deps_lock.locked, 0);
  atomic_init(&rt->redux_lock.locked, 0);
  if ((err = pthread_mutex_init(&rt->handles_lock, NULL)))
    goto fail5;
  if ((err = pthread_mutex_init(&rt->trace_lock, NULL)))
    goto fail7;
  if ((err = pthread_mutex_init(&rt->cache_lock, NULL)))
    goto fail8;
  if ((err = pthread_mutex_init(&rt->fail_lock, NULL)))
    goto fail9;
  if ((err = pthread_mutex_init(&rt->dispatch_lock, NULL)))
    goto fail10;
  if ((err = pthread_mutex_init(&rt->idle_lock, NULL)))
    goto fail11;
  rt->mutexes_ready = true;
  return TDM_OK;
fail11:
  pthread_mutex_destroy(&rt->dispatch_lock);
fail10:
  pthread_mutex_destroy(&rt->fail_lock);
fail9:
  pthread_mutex_destroy(&rt->cache_lock);
fail8:
  pthread_mutex_destroy(&rt->trace_lock);
fail7:
  pthread_mutex_destroy(&rt->handles_lock);
fail5:
  pthread_cond_destroy(&rt->wait_cond);
fail3:
  pthread_mutex_destroy(&rt->wait_lock);
fail2b:
  pthread_cond_destroy(&rt->bench_cond);
fail2:
  pthread_cond_destroy(&rt->park_cond);
fail1:
  pthread_mutex_destroy(&rt->park_lock);
fail:
  tdm__log(rt, TDM_LOG_ERROR, "pthread mutex/condition init failed: %s", strerror(err));
  return TDM_ERR_SYSTEM;
}

static void destroy_sync(tdm_runtime *rt) {
  if (!rt->mutexes_ready)
    return;
  pthread_mutex_destroy(&rt->idle_lock);
  pthread_mutex_destroy(&rt->dispatch_lock);
  pthread_mutex_destroy(&rt->fail_lock);
  pthread_mutex_destroy(&rt->cache_lock);
  pthread_mutex_destroy(&rt->trace_lock);
  pthread_mutex_destroy(&rt->handles_lock);
  pthread_cond_destroy(&rt->wait_cond);
  pthread_mutex_destroy(&rt->wait_lock);
  pthread_cond_destroy(&rt->bench_cond);
  pthread_cond_destroy(&rt->park_cond);
  pthread_mutex_destroy(&rt->park_lock);
}

/* Stops and joins the workers that were started, frees everything. */
/* Stops and frees rt; whether a device was found hung (what it never
 * completed is left behind: see the backends' stop and release). */
static bool teardown(tdm_runtime *rt) {
  if (rt->workers) {
    atomic_store(&rt->stop, true);
    tdm__wake_all(rt);
    for (unsigned i = 0; i < rt->nworkers; i++) {
      tdm_worker *w = &rt->workers[i];
      if (w->started) {
        int err = pthread_join(w->thread, NULL);
        if (err)
          tdm__log(rt, TDM_LOG_ERROR, "pthread_join(worker %u): %s", i, strerror(err));
      }
    }
  }
  /* the devices stop before the handles go (an emulated device's thread
   * may still be ending a task), and before the deques (it looks at
   * them); their memory nodes go after the handles, their state with
   * the backends' release */
  tdm__watchdog_stop(rt); /* it may call on the devices */
  for (unsigned i = rt->nattached; i-- > 0;)
    if (rt->attached[i].n && rt->attached[i].ops->stop)
      rt->attached[i].ops->stop(rt);
  tdm__handles_destroy(rt);
  tdm__sched_stop(rt);
  if (rt->workers) {
    for (unsigned i = 0; i < rt->nworkers; i++) {
      for (unsigned b = 0; b < TDM_BANDS; b++)
        tdm__deque_destroy(&rt->workers[i].deques[b]);
      free(rt->workers[i].trace.ev);
    }
    free(rt->workers);
  }
  free(rt->trace_shared.ev);
  free(rt->trace_marks.v);
  tdm__pool_destroy(rt);
  tdm__groups_free(rt);
  tdm__graphs_free(rt);
  tdm__parallel_free(rt);
  tdm__dispatch_close(rt);
  tdm__plan_free(&rt->plan);
  tdm__machine_free(rt);
  tdm__nodes_fini(&rt->nodes);
  for (unsigned i = rt->nattached; i-- > 0;)
    if (rt->attached[i].ops->release)
      rt->attached[i].ops->release(rt);
  tdm__cache_close(rt);
  free(rt->platforms);
  free(rt->devices);
  free(rt->device_of);
  tdm__topology_release(rt, rt->topo);
  destroy_sync(rt);
  tdm__verify_free(rt);
  tdm__config_free(rt);
  bool hung = atomic_load(&rt->hung) != 0;
  free(rt);
  return hung;
}

static tdm_status start_workers(tdm_runtime *rt) {
  /* aligned: a worker's deque has cache-line-aligned members */
  rt->workers = tdm__zalloc_aligned(_Alignof(tdm_worker), rt->nworkers * sizeof *rt->workers);
  if (!rt->workers)
    return TDM_ERR_NO_MEMORY;
  for (unsigned i = 0; i < rt->nworkers; i++) {
    tdm_worker *w = &rt->workers[i];
    w->rt = rt;
    w->id = i;
    w->rng = 0x9e3779b97f4a7c15ull * (i + 1);
    /* the normal band's deque is the busy one */
    for (unsigned b = 0; b < TDM_BANDS; b++)
      if (tdm__deque_init(&w->deques[b], b == TDM_BAND_NORMAL ? 256 : 16)) {
        /* the deques after this one were zeroed by calloc: give them a
         * ring so that teardown can destroy all of them alike */
        for (unsigned j = i; j < rt->nworkers; j++)
          for (unsigned c = j == i ? b : 0; c < TDM_BANDS; c++)
            tdm__deque_init(&rt->workers[j].deques[c], 0);
        return TDM_ERR_NO_MEMORY;
      }
  }
  for (unsigned i = 0; i < rt->nworkers; i++) {
    tdm_worker *w = &rt->workers[i];
    int err = pthread_create(&w->thread, NULL, tdm__worker_main, w);
    if (err) {
      tdm__log(rt, TDM_LOG_ERROR, "could not start worker %u: %s", i, strerror(err));
      return TDM_ERR_SYSTEM;
    }
    w->started = true;
  }
  return TDM_OK;
}

tdm_status tdm_runtime_create(const tdm_config *config, tdm_runtime **out) {
  if (!out)
    return TDM_ERR_INVALID_ARG;
  *out = NULL;
  tdm_config defaults;
  tdm_config_init(&defaults);
  if (!config)
    config = &defaults;
  /* fields up to flags exist since version 0.1: a smaller struct_size
   * means an uninitialised config */
  if (config->struct_size < offsetof(tdm_config, flags) + sizeof(unsigned))
    return TDM_ERR_INVALID_ARG;
  if (config->flags != 0) {
    tdm_runtime tmp = {.cfg = defaults};
    memcpy(&tmp.cfg, config, config->struct_size < sizeof tmp.cfg ? config->struct_size : sizeof tmp.cfg);
    tdm__log(&tmp, TDM_LOG_ERROR, "tdm_runtime_create: config flags must be 0");
    return TDM_ERR_INVALID_ARG;
  }

  int err = pthread_once(&atfork_once, register_atfork);
  if (err || atfork_err)
    return TDM_ERR_NO_MEMORY; /* pthread_atfork fails only for want of memory */
  /* aligned: its members on lines of their own are _Alignas(64), more
   * than malloc promises */
  tdm_runtime *rt = tdm__zalloc_aligned(_Alignof(tdm_runtime), sizeof *rt);
  if (!rt)
    return TDM_ERR_NO_MEMORY;
  rt->fork_generation = atomic_load_explicit(&tdm__fork_generation, memory_order_relaxed);
  atomic_init(&rt->faults.alloc_countdown, -1);
  rt->cache_fd = -1;
  rt->event_fd = -1;
  atomic_init(&rt->dispatcher, tdm__thread_mark()); /* until a thread dispatches */
  rt->pid = getpid();
  rt->ranges.rng = 0x9e3779b97f4a7c15ull;
  rt->graph.gap = UINT64_C(1) << 32;
  rt->cfg = defaults;
  memcpy(&rt->cfg, config, config->struct_size < sizeof rt->cfg ? config->struct_size : sizeof rt->cfg);
  rt->cfg.struct_size = sizeof rt->cfg;
  if (!rt->cfg.ignore_env)
    tdm__config_env(rt);
  tdm_status st = TDM_ERR_INVALID_ARG;
  if (rt->cfg.synthetic_topology && rt->cfg.topology_xml) {
    tdm__log(rt, TDM_LOG_ERROR,
             "tdm_runtime_create: synthetic_topology and topology_xml both set");
    goto fail_early;
  }
  /* the selection is parsed from the copy, which it keeps pointing at */
  if ((st = tdm__config_copy(rt)) || (st = tdm__model_file(rt, rt->cfg.app, &rt->model_file)) ||
      (st = tdm__config_check(rt)) ||
      (st = tdm__faults_parse(rt, rt->cfg.faults)) ||
      (st = tdm__verify_parse(rt, rt->cfg.verify)) || (st = init_sync(rt)))
    goto fail_early;
  rt->cfg.faults = rt->cfg.verify = NULL; /* parsed: the caller's strings are not kept */
  rt->recording = rt->cfg.trace_path || rt->cfg.dag_path || rt->cfg.stats;
  if (rt->cfg.stats && rt->cfg.log_level < TDM_LOG_INFO)
    rt->cfg.log_level = TDM_LOG_INFO; /* the summary is logged at info */
  rt->timing = rt->cfg.trace_path || rt->cfg.stats;
  rt->trace_t0 = tdm__now_ns();
  st = tdm__config_topology(rt);
  if (st)
    goto fail;
  st = tdm__plan_workers(rt, rt->topo, rt->cfg.nworkers, &rt->plan);
  if (st)
    goto fail;
  rt->nworkers = rt->plan.nworkers;
  rt->active = rt->nworkers;
  atomic_store_explicit(&rt->run_limit, rt->nworkers, memory_order_relaxed);
  rt->bind = rt->cfg.bind_workers && !rt->cfg.synthetic_topology && !rt->cfg.topology_xml &&
             hwloc_topology_is_thissystem(rt->topo);
  /* the devices last: an emulated device's thread looks at the CPU
   * workers' deques */
  if ((st = setup_devices(rt)) || (st = tdm__machine_describe(rt)) ||
      (st = tdm__sched_start(rt)) || (st = start_workers(rt)) ||
      (st = tdm__watchdog_start(rt)) || (st = start_devices(rt)))
    goto fail;
  atomic_store_explicit(&rt->devices_ready, true, memory_order_release);
  tdm__log(rt, TDM_LOG_INFO, "runtime started: %u CPU workers on %u usable cores%s, %u device "
           "workers", rt->nworkers, rt->plan.ncores, rt->bind ? ", bound" : "",
           rt->ndevice_workers);
  *out = rt;
  return TDM_OK;
fail_early:
  tdm__verify_free(rt);
  tdm__config_free(rt);
  free(rt);
  return st;
fail:
  teardown(rt);
  return st;
}

tdm_status tdm__refuse_locked(const tdm_runtime *rt, const char *what) {
  tdm__log(rt, TDM_LOG_ERROR, "%s called from an enqueue or work-size function, which runs "
           "under its device's lock, or a footprint function, which runs under the "
           "scheduler's: it would wait for that lock (enqueue OpenCL commands there, and "
           "submit from the task's callback)", what);
  return TDM_ERR_IN_TASK;
}

tdm_status tdm__check_blocking(const tdm_runtime *rt, const char *what) {
  if (TDM_UNLIKELY(tdm__locked_of == rt)) /* under a lock: say which code */
    return tdm__refuse_locked(rt, what);
  if (tdm__self_in(rt)) {
    tdm__log(rt, TDM_LOG_ERROR,
             "%s called from a task of the same runtime: it could deadlock", what);
    return TDM_ERR_IN_TASK;
  }
  if (TDM_UNLIKELY(tdm__dispatch_of == rt)) {
    tdm__log(rt, TDM_LOG_ERROR,
             "%s called from a task or callback that tdm_dispatch runs: it would wait for "
             "the thread it runs on", what);
    return TDM_ERR_IN_TASK;
  }
  if (TDM_UNLIKELY(tdm__event_of == rt)) {
    tdm__log(rt, TDM_LOG_ERROR,
             "%s called from an event or build callback, or an enqueue, work-size or "
             "footprint function, of the same runtime: it could deadlock", what);
    return TDM_ERR_IN_TASK;
  }
  if (TDM_UNLIKELY(tdm__thread_of == rt)) { /* a device's thread, the OpenCL watcher */
    tdm__log(rt, TDM_LOG_ERROR,
             "%s called from a task or callback that a thread of the same runtime runs (an "
             "emulated device's, or the one that ends OpenCL completions): it could deadlock",
             what);
    return TDM_ERR_IN_TASK;
  }
  return TDM_OK;
}

static bool all_done(const void *rt) {
  return atomic_load(&((const tdm_runtime *)rt)->inflight) == 0;
}

tdm_status tdm_wait_all(tdm_runtime *rt) {
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_wait_all");
  tdm_status st = tdm__check_blocking(rt, "tdm_wait_all");
  if (st)
    return st;
  /* Announce the wait first: idle workers then flush their counts of
   * finished tasks at once (worker.c). seq_cst: pairs with their check. */
  atomic_fetch_add(&rt->nwaiters, 1);
  if (tdm__waits_dispatching(rt)) { /* what it waits for may be pinned here */
    tdm__wait_dispatching(rt, all_done, rt);
    atomic_fetch_sub(&rt->nwaiters, 1);
    return tdm__report_failures(rt, "tdm_wait_all");
  }
  /* Poll a little before blocking: short work then costs no wake-up.
   * acquire: the finished tasks' writes are visible to the caller. */
  uint64_t deadline = 0;
  while (atomic_load_explicit(&rt->inflight, memory_order_acquire) != 0 &&
         tdm__idle_step(&deadline, rt->cfg.spin_us))
    ;
  if (atomic_load(&rt->inflight) != 0) {
    TDM_PTHREAD(rt, pthread_mutex_lock(&rt->wait_lock));
    while (atomic_load(&rt->inflight) != 0)
      TDM_PTHREAD(rt, pthread_cond_wait(&rt->wait_cond, &rt->wait_lock));
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->wait_lock));
  }
  atomic_fetch_sub(&rt->nwaiters, 1);
  return tdm__report_failures(rt, "tdm_wait_all");
}

tdm_status tdm_runtime_destroy(tdm_runtime *rt) {
  if (!rt)
    return TDM_OK;
  if (tdm__forked(rt)) /* the workers are the parent's: nothing to stop */
    return tdm__forked_error(rt, "tdm_runtime_destroy");
  tdm_status st = tdm__check_blocking(rt, "tdm_runtime_destroy");
  if (st)
    return st;
  if (tdm__in_user_code || tdm__dispatch_of) {
    /* it would free what the runtime that called this code still uses */
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_destroy called from a task or a callback: call "
             "it once that code has returned (from the event loop, say)");
    return TDM_ERR_IN_TASK;
  }
  tdm__redux_flush_all(rt); /* the application's memory holds the reductions too */
  atomic_store(&rt->closing, true);
  tdm__wake_waiters(rt); /* submitters waiting for room are refused now */
  tdm_runtime_resume(rt); /* the tasks queued run */
  tdm__release_acquisitions(rt); /* tasks may wait for them */
  /* tasks pinned to the application's thread run here meanwhile */
  while (atomic_load(&rt->pinned) && atomic_load(&rt->inflight) != 0)
    if (tdm_dispatch(rt) <= 0)
      usleep(100);
  tdm_wait_all(rt);
  while (tdm_dispatch(rt) > 0) /* callbacks and progress calls left */
    ;
  tdm__submit_wait_unblocked(rt); /* none of them still uses rt */
  tdm__handles_home(rt); /* the application's memory holds every result */
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->handles_lock));
  for (tdm_handle *h = rt->all_handles; h; h = h->all_next)
    tdm__redux_free(h, true);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->handles_lock));
  tdm__trace_write(rt);
  tdm__trace_finish(rt);
  tdm__log(rt, TDM_LOG_INFO, "runtime stopping");
  return teardown(rt) ? TDM_ERR_DEVICE_LOST : TDM_OK;
}

unsigned tdm_runtime_nworkers(const tdm_runtime *rt) {
  return rt && !tdm__forked(rt) ? rt->nworkers + rt->ndevice_workers : 0;
}

unsigned tdm_runtime_ncpu_workers(const tdm_runtime *rt) {
  return rt && !tdm__forked(rt) ? rt->nworkers : 0;
}

int tdm_worker_id(const tdm_runtime *rt) {
  if (rt && tdm__forked(rt))
    return -1; /* no thread of this process is a worker of rt */
  tdm_worker *w = rt ? tdm__self_in(rt) : NULL;
  if (w)
    return (int)w->id;
  int k = rt ? tdm__device_current(rt) : -1;
  return k >= 0 ? (int)rt->nworkers + k : -1;
}
