/* Runtime lifecycle: configuration, creation (topology, workers), waiting
 * for everything, destruction. */
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

void tdm_config_init(tdm_config *config) {
  if (!config)
    return;
  memset(config, 0, sizeof *config);
  config->struct_size = sizeof *config;
  config->nworkers = 0;
  config->bind_workers = 1;
  config->spin_us = 50;
  config->log_level = TDM_LOG_WARNING;
  config->retries = 2;
  config->max_pending = 1u << 16;
  config->quarantine_failures = 3;
  config->watchdog_factor = 50;
  config->watchdog_min = 1;
  config->watchdog_uncalibrated = 10;
  config->lineage = 16;
}

/* Every TANDEM_* variable Tandem reads: the one list, which env() checks
 * (a variable read but missing here would be warned about as unknown) and
 * the unknown-variable check compares against. docs/environment.md
 * describes each (test-errors checks that the two agree). */
static const char *const env_names[] = {
    "TANDEM_APP",           "TANDEM_BIND",         "TANDEM_CACHE_DIR",
    "TANDEM_DAG",           "TANDEM_DEVICES",      "TANDEM_DEVICE_MEMORY",
    "TANDEM_DEVICE_MEMORY_LIMIT", "TANDEM_DEVICE_TASKS", "TANDEM_FAULTS",
    "TANDEM_LINEAGE",       "TANDEM_LOG_LEVEL",    "TANDEM_MAX_PENDING",
    "TANDEM_NWORKERS",      "TANDEM_OPENCL_CPU",   "TANDEM_OPENCL_LIBRARY",
    "TANDEM_QUARANTINE",    "TANDEM_RETRIES",      "TANDEM_SCHED",
    "TANDEM_SIM",           "TANDEM_SIM_SCALE",    "TANDEM_SPIN_US",
    "TANDEM_STATS",         "TANDEM_SYNTHETIC_TOPOLOGY", "TANDEM_TOPOLOGY_XML",
    "TANDEM_TRACE",         "TANDEM_VERIFY",       "TANDEM_WATCHDOG",
    "TANDEM_WORKER_NICE",   "TANDEM_WRITEBACK",
};
#define NENV (sizeof env_names / sizeof env_names[0])

const char *tdm__env_name(size_t i) { return i < NENV ? env_names[i] : NULL; }

static bool env_known(const char *name, size_t len) {
  for (size_t i = 0; i < NENV; i++)
    if (strlen(env_names[i]) == len && !memcmp(env_names[i], name, len))
      return true;
  return false;
}

/* A TANDEM_* variable's value: every read goes through here, so that the
 * list above stays the whole list. */
static const char *env(const char *name) {
  assert(env_known(name, strlen(name)));
  return getenv(name);
}

/* The edit distance between a[0..n) and b (insertions, deletions,
 * substitutions and swaps of neighbours, each 1), at most 255: for the
 * closest known name to a misspelt one. */
static unsigned edit_distance(const char *a, size_t n, const char *b) {
  size_t m = strlen(b);
  if (n > 63 || m > 63)
    return 255;
  unsigned d[64][64];
  for (size_t i = 0; i <= n; i++)
    d[i][0] = (unsigned)i;
  for (size_t j = 0; j <= m; j++)
    d[0][j] = (unsigned)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      unsigned best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best)
        best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best)
        best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[n][m];
}

/* Warns about each TANDEM_* variable of the environment that Tandem does
 * not read, naming the closest one it does (a misspelt setting would
 * otherwise be ignored without a word). */
static void env_check_names(tdm_runtime *rt) {
  for (char **e = environ; *e; e++) {
    if (strncmp(*e, "TANDEM_", 7))
      continue;
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    if (env_known(*e, len))
      continue;
    unsigned best = 255;
    const char *closest = NULL;
    for (size_t i = 0; i < NENV; i++) {
      unsigned d = edit_distance(*e, len, env_names[i]);
      if (d < best) {
        best = d;
        closest = env_names[i];
      }
    }
    /* a guess only when it changes less than a third of the name */
    if (closest && best * 3 <= len - 7 + 2)
      tdm__log(rt, TDM_LOG_WARNING, "unknown setting %.*s: did you mean %s?", (int)len, *e,
               closest);
    else
      tdm__log(rt, TDM_LOG_WARNING,
               "unknown setting %.*s: not a Tandem variable (see docs/environment.md)",
               (int)len, *e);
  }
}

/* True when a TANDEM_* variable is set: the user asked the environment
 * for something, so messages must reach them even where the program
 * installed no log callback. */
static bool env_used(void) {
  for (char **e = environ; *e; e++)
    if (!strncmp(*e, "TANDEM_", 7))
      return true;
  return false;
}

/* Reads an unsigned environment variable into *out; leaves *out alone and
 * warns, naming it, when it is blank, signed, malformed or beyond max. */
static void env_unsigned(tdm_runtime *rt, const char *name, unsigned max,
                         unsigned *out) {
  const char *s = env(name);
  uint64_t v;
  if (!s)
    return;
  if (!tdm__parse_count(s, max, &v)) {
    tdm__log(rt, TDM_LOG_WARNING, "ignoring %s=\"%s\": expected an integer in [0, %u]",
             name, s, max);
    return;
  }
  *out = (unsigned)v;
}

/* Reads an environment variable naming one of `names` (NULL-terminated,
 * any case) into *out, its index; false when unset, or malformed (then
 * with a warning). */
static bool env_choice(tdm_runtime *rt, const char *name, const char *const *names,
                       unsigned *out) {
  const char *s = env(name);
  if (!s || !*s)
    return false;
  char expected[128] = "";
  for (unsigned i = 0; names[i]; i++) {
    if (!strcasecmp(s, names[i])) {
      *out = i;
      return true;
    }
    size_t at = strlen(expected);
    snprintf(expected + at, sizeof expected - at, "%s%s", i ? ", " : "", names[i]);
  }
  tdm__log(rt, TDM_LOG_WARNING, "ignoring %s=\"%s\": expected one of %s", name, s, expected);
  return false;
}

/* A string setting: a nonempty value replaces the config's (the
 * environment outlives the runtime's creation, when it is copied). */
static void env_string(const char *name, const char **field) {
  const char *s = env(name);
  if (s && *s)
    *field = s;
}

/* An on/off setting (0 or 1) into an int field of the config. */
static void env_flag(tdm_runtime *rt, const char *name, int *field) {
  unsigned on = *field != 0;
  env_unsigned(rt, name, 1, &on);
  *field = (int)on;
}

/* TANDEM_WATCHDOG: "off" or F[,MIN[,UNCALIBRATED]] into the config;
 * false (nothing changed) if malformed. */
static bool env_watchdog(tdm_runtime *rt, const char *s) {
  if (!strcmp(s, "off")) {
    rt->cfg.watchdog_factor = rt->cfg.watchdog_uncalibrated = 0;
    return true;
  }
  char text[96], *parts[3] = {NULL, NULL, NULL};
  if (strlen(s) >= sizeof text)
    return false;
  strcpy(text, s);
  unsigned n = 0;
  for (char *p = text; p;) {
    if (n == 3)
      return false;
    parts[n++] = p;
    if ((p = strchr(p, ',')))
      *p++ = 0;
  }
  char *end;
  errno = 0;
  double f = strtod(parts[0], &end), min = rt->cfg.watchdog_min,
         unc = rt->cfg.watchdog_uncalibrated;
  if (errno || end == parts[0] || *end || *parts[0] < '0' || *parts[0] > '9' ||
      !(f >= 0 && f <= 1e6) || (parts[1] && !tdm__parse_seconds(parts[1], 1e6, &min)) ||
      (parts[2] && !tdm__parse_seconds(parts[2], 1e6, &unc)))
    return false;
  rt->cfg.watchdog_factor = f;
  rt->cfg.watchdog_min = min;
  rt->cfg.watchdog_uncalibrated = unc;
  return true;
}

/* The settings that are checked here, not only at creation: a bad value
 * is ignored with a warning, the config's value kept. */
static void env_checked(tdm_runtime *rt) {
  const char *s = env("TANDEM_DEVICES");
  tdm_device_selection sel;
  char bad[64];
  if (s && *s && tdm__parse_devices(s, &sel, bad, sizeof bad) == TDM_OK)
    rt->cfg.devices = s;
  else if (s && *s)
    tdm__log(rt, TDM_LOG_WARNING,
             "ignoring TANDEM_DEVICES=\"%s\": \"%s\" is not all, gpu, integrated, discrete, "
             "accelerator, cpu, a device number or none (alone)",
             s, bad);
  s = env("TANDEM_SCHED");
  tdm_policy p;
  if (s && *s && tdm__policy_parse(s, &p))
    rt->cfg.scheduler = s;
  else if (s && *s)
    tdm__log(rt, TDM_LOG_WARNING,
             "ignoring TANDEM_SCHED=\"%s\": expected heft, ws, eager or random", s);
  s = env("TANDEM_SIM_SCALE");
  char *end;
  double v = s ? strtod(s, &end) : 0;
  if (s && (*s < '0' || *s > '9' || *end || !(v >= 1 && v <= 1e6)))
    tdm__log(rt, TDM_LOG_WARNING,
             "ignoring TANDEM_SIM_SCALE=\"%s\": expected a number from 1 to 1e6", s);
  else if (s)
    rt->cfg.sim_time_scale = v;
  s = env("TANDEM_DEVICE_MEMORY_LIMIT");
  uint64_t bytes;
  if (s && !tdm__parse_bytes(s, TDM_MAX_MEMORY_LIMIT, &bytes))
    tdm__log(rt, TDM_LOG_WARNING,
             "ignoring TANDEM_DEVICE_MEMORY_LIMIT=\"%s\": expected bytes, with k, M or G "
             "allowed, up to 2^50 (1 PiB)",
             s);
  else if (s)
    rt->cfg.device_memory_limit = bytes;
  s = env("TANDEM_WORKER_NICE");
  uint64_t nice;
  if (s && !strcasecmp(s, "idle"))
    rt->cfg.worker_nice = TDM_WORKERS_IDLE;
  else if (s && tdm__parse_count(s, 19, &nice))
    rt->cfg.worker_nice = (int)nice;
  else if (s)
    tdm__log(rt, TDM_LOG_WARNING,
             "ignoring TANDEM_WORKER_NICE=\"%s\": expected idle or a nice value in [0, 19]", s);
  s = env("TANDEM_WATCHDOG");
  if (s && !env_watchdog(rt, s))
    tdm__log(rt, TDM_LOG_WARNING,
             "ignoring TANDEM_WATCHDOG=\"%s\": expected off, or F[,MIN[,UNCALIBRATED]]: a "
             "factor from 0 to 1e6, times with a unit (s, ms or us)",
             s);
}

static void apply_env(tdm_runtime *rt) {
  static const char *const levels[] = {"error", "warning", "info", "debug", NULL};
  static const char *const memory[] = {"reported", "integrated", "discrete", NULL};
  unsigned choice;
  /* first, so that what follows is heard */
  if (!rt->cfg.log_fn && env_used())
    rt->cfg.log_fn = tdm__log_stderr;
  env_check_names(rt);
  if (env_choice(rt, "TANDEM_LOG_LEVEL", levels, &choice))
    rt->cfg.log_level = (tdm_log_level)choice;
  env_unsigned(rt, "TANDEM_NWORKERS", 4096, &rt->cfg.nworkers);
  env_flag(rt, "TANDEM_BIND", &rt->cfg.bind_workers);
  env_unsigned(rt, "TANDEM_SPIN_US", 10u * 1000 * 1000, &rt->cfg.spin_us);
  env_unsigned(rt, "TANDEM_RETRIES", TDM_MAX_RETRIES, &rt->cfg.retries);
  env_unsigned(rt, "TANDEM_MAX_PENDING", UINT32_MAX, &rt->cfg.max_pending);
  env_flag(rt, "TANDEM_WRITEBACK", &rt->cfg.writeback);
  env_unsigned(rt, "TANDEM_LINEAGE", TDM_MAX_LINEAGE, &rt->cfg.lineage);
  env_unsigned(rt, "TANDEM_QUARANTINE", TDM_MAX_QUARANTINE_FAILURES,
               &rt->cfg.quarantine_failures);
  env_string("TANDEM_SYNTHETIC_TOPOLOGY", &rt->cfg.synthetic_topology);
  env_string("TANDEM_TOPOLOGY_XML", &rt->cfg.topology_xml);
  env_flag(rt, "TANDEM_OPENCL_CPU", &rt->cfg.opencl_cpu_devices);
  if (env_choice(rt, "TANDEM_DEVICE_MEMORY", memory, &choice))
    rt->cfg.device_memory = (tdm_device_memory)choice;
  env_string("TANDEM_OPENCL_LIBRARY", &rt->cfg.opencl_library);
  env_unsigned(rt, "TANDEM_DEVICE_TASKS", 1024, &rt->cfg.device_tasks);
  env_string("TANDEM_CACHE_DIR", &rt->cfg.cache_dir);
  env_string("TANDEM_APP", &rt->cfg.app);
  env_string("TANDEM_TRACE", &rt->cfg.trace_path);
  env_string("TANDEM_DAG", &rt->cfg.dag_path);
  env_string("TANDEM_SIM", &rt->cfg.sim);
  env_string("TANDEM_FAULTS", &rt->cfg.faults);
  env_string("TANDEM_VERIFY", &rt->cfg.verify);
  env_flag(rt, "TANDEM_STATS", &rt->cfg.stats);
  env_checked(rt);
}

/* The config's strings are only valid during tdm_runtime_create: the
 * runtime keeps copies, and cfg points at them. */
static tdm_status copy_strings(tdm_runtime *rt) {
  struct {
    const char **field;
    char **copy;
  } strs[] = {
      {&rt->cfg.synthetic_topology, &rt->synthetic},
      {&rt->cfg.topology_xml, &rt->xml},
      {&rt->cfg.devices, &rt->devices_text},
      {&rt->cfg.opencl_library, &rt->opencl_library},
      {&rt->cfg.cache_dir, &rt->cache_dir},
      {&rt->cfg.app, &rt->app},
      {&rt->cfg.trace_path, &rt->trace_path},
      {&rt->cfg.dag_path, &rt->dag_path},
      {&rt->cfg.sim, &rt->sim_text},
  };
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    if (!*strs[i].field)
      continue;
    *strs[i].copy = strdup(*strs[i].field);
    *strs[i].field = *strs[i].copy;
    if (!*strs[i].copy)
      return TDM_ERR_NO_MEMORY;
  }
  return TDM_OK;
}

static void free_strings(tdm_runtime *rt) {
  free(rt->synthetic);
  free(rt->xml);
  free(rt->devices_text);
  free(rt->opencl_library);
  free(rt->cache_dir);
  free(rt->app);
  free(rt->model_file);
  free(rt->trace_path);
  free(rt->dag_path);
  free(rt->sim_text);
}

/* Checks the device fields of the config (after the environment). */
static tdm_status check_device_config(tdm_runtime *rt) {
  if ((unsigned)rt->cfg.device_memory > TDM_MEMORY_SEPARATE) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_create: device_memory %d is not a tdm_device_memory",
             (int)rt->cfg.device_memory);
    return TDM_ERR_INVALID_ARG;
  }
  char bad[64];
  if (tdm__parse_devices(rt->cfg.devices, &rt->selection, bad, sizeof bad)) {
    tdm__log(rt, TDM_LOG_ERROR,
             "tdm_runtime_create: devices=\"%s\": \"%s\" is not all, gpu, integrated, "
             "discrete, accelerator, cpu, a device number or none (alone)",
             rt->cfg.devices, bad);
    return TDM_ERR_INVALID_ARG;
  }
  rt->selection.admit_cpu = rt->cfg.opencl_cpu_devices != 0;
  rt->selection.memory = rt->cfg.device_memory;
  if (rt->cfg.scheduler && *rt->cfg.scheduler &&
      !tdm__policy_parse(rt->cfg.scheduler, &rt->policy)) {
    tdm__log(rt, TDM_LOG_ERROR,
             "tdm_runtime_create: scheduler=\"%s\": expected heft, ws, eager or random",
             rt->cfg.scheduler);
    return TDM_ERR_INVALID_ARG;
  }
  if (rt->cfg.device_memory_limit > TDM_MAX_MEMORY_LIMIT) {
    tdm__log(rt, TDM_LOG_ERROR,
             "tdm_runtime_create: device_memory_limit %llu: at most 2^50 bytes (1 PiB)",
             (unsigned long long)rt->cfg.device_memory_limit);
    return TDM_ERR_INVALID_ARG;
  }
  double scale = rt->cfg.sim_time_scale;
  if (scale != 0 && !(scale >= 1 && scale <= 1e6)) {
    tdm__log(rt, TDM_LOG_ERROR,
             "tdm_runtime_create: sim_time_scale %g: 0 (automatic) or from 1 to 1e6", scale);
    return TDM_ERR_INVALID_ARG;
  }
  if (rt->cfg.retries > TDM_MAX_RETRIES) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_create: retries %u: at most %d",
             rt->cfg.retries, TDM_MAX_RETRIES);
    return TDM_ERR_INVALID_ARG;
  }
  const double watch[3] = {rt->cfg.watchdog_factor, rt->cfg.watchdog_min,
                           rt->cfg.watchdog_uncalibrated};
  for (unsigned i = 0; i < 3; i++)
    if (!(watch[i] >= 0 && watch[i] <= 1e6)) {
      tdm__log(rt, TDM_LOG_ERROR,
               "tdm_runtime_create: watchdog_factor, watchdog_min and "
               "watchdog_uncalibrated must be from 0 to 1e6 (%g, %g, %g)",
               watch[0], watch[1], watch[2]);
      return TDM_ERR_INVALID_ARG;
    }
  if (rt->cfg.lineage > TDM_MAX_LINEAGE) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_create: lineage %u: at most %d", rt->cfg.lineage,
             TDM_MAX_LINEAGE);
    return TDM_ERR_INVALID_ARG;
  }
  if (rt->cfg.quarantine_failures > TDM_MAX_QUARANTINE_FAILURES) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_create: quarantine_failures %u: at most %d",
             rt->cfg.quarantine_failures, TDM_MAX_QUARANTINE_FAILURES);
    return TDM_ERR_INVALID_ARG;
  }
  if (rt->cfg.worker_nice < 0 || rt->cfg.worker_nice > TDM_WORKERS_IDLE) {
    tdm__log(rt, TDM_LOG_ERROR,
             "tdm_runtime_create: worker_nice %d: 0 to 19, or TDM_WORKERS_IDLE (%d)",
             rt->cfg.worker_nice, TDM_WORKERS_IDLE);
    return TDM_ERR_INVALID_ARG;
  }
  return TDM_OK;
}

/* Asks the backends, in order, for devices (backends/backend.h): the
 * first that claims the runtime drives its device workers. Never fails
 * for want of devices: the runtime then runs on the CPU cores. */
static tdm_status setup_devices(tdm_runtime *rt) {
  rt->opencl_status = TDM_ERR_NO_OPENCL;
  for (const tdm_backend *const *b = tdm__backends; *b; b++) {
    bool claims = false;
    tdm_status st = (*b)->discover(rt, &claims);
    if (claims)
      rt->claimed = *b; /* released at teardown, even after a failure */
    if (st)
      return st;
    if (claims) {
      if (rt->ndevice_workers)
        rt->dev = *b;
      rt->cpu_stretch = (*b)->cpu_factor;
      break;
    }
  }
  rt->time_cpu_tasks = rt->recording || rt->timing || rt->cpu_stretch;
  return TDM_OK;
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
  if ((err = pthread_mutex_init(&rt->deps_lock, NULL)))
    goto fail4;
  if ((err = pthread_mutex_init(&rt->handles_lock, NULL)))
    goto fail5;
  if ((err = pthread_mutex_init(&rt->any_lock, NULL)))
    goto fail6;
  if ((err = pthread_mutex_init(&rt->trace_lock, NULL)))
    goto fail7;
  if ((err = pthread_mutex_init(&rt->cache_lock, NULL)))
    goto fail8;
  if ((err = pthread_mutex_init(&rt->fail_lock, NULL)))
    goto fail9;
  if ((err = pthread_mutex_init(&rt->dispatch_lock, NULL)))
    goto fail10;
  rt->mutexes_ready = true;
  return TDM_OK;
fail10:
  pthread_mutex_destroy(&rt->fail_lock);
fail9:
  pthread_mutex_destroy(&rt->cache_lock);
fail8:
  pthread_mutex_destroy(&rt->trace_lock);
fail7:
  pthread_mutex_destroy(&rt->any_lock);
fail6:
  pthread_mutex_destroy(&rt->handles_lock);
fail5:
  pthread_mutex_destroy(&rt->deps_lock);
fail4:
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
  pthread_mutex_destroy(&rt->dispatch_lock);
  pthread_mutex_destroy(&rt->fail_lock);
  pthread_mutex_destroy(&rt->cache_lock);
  pthread_mutex_destroy(&rt->trace_lock);
  pthread_mutex_destroy(&rt->any_lock);
  pthread_mutex_destroy(&rt->handles_lock);
  pthread_mutex_destroy(&rt->deps_lock);
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
   * them); their memory nodes and state go with the backend's release */
  tdm__watchdog_stop(rt); /* it may call on the devices */
  if (rt->dev && rt->dev->stop)
    rt->dev->stop(rt);
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
  tdm__pool_destroy(rt);
  tdm__groups_free(rt);
  tdm__dispatch_close(rt);
  tdm__plan_free(&rt->plan);
  tdm__machine_free(rt);
  if (rt->claimed && rt->claimed->release)
    rt->claimed->release(rt);
  tdm__cache_close(rt);
  free(rt->platforms);
  free(rt->devices);
  free(rt->device_of);
  if (rt->topo)
    hwloc_topology_destroy(rt->topo);
  destroy_sync(rt);
  tdm__verify_free(rt);
  free_strings(rt);
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
  rt->pid = getpid();
  rt->ranges.rng = 0x9e3779b97f4a7c15ull;
  rt->graph.gap = UINT64_C(1) << 32;
  rt->cfg = defaults;
  memcpy(&rt->cfg, config, config->struct_size < sizeof rt->cfg ? config->struct_size : sizeof rt->cfg);
  rt->cfg.struct_size = sizeof rt->cfg;
  if (!rt->cfg.ignore_env)
    apply_env(rt);
  tdm_status st = TDM_ERR_INVALID_ARG;
  if (rt->cfg.synthetic_topology && rt->cfg.topology_xml) {
    tdm__log(rt, TDM_LOG_ERROR,
             "tdm_runtime_create: synthetic_topology and topology_xml both set");
    goto fail_early;
  }
  /* the selection is parsed from the copy, which it keeps pointing at */
  if ((st = copy_strings(rt)) || (st = tdm__model_file(rt, rt->cfg.app, &rt->model_file)) ||
      (st = check_device_config(rt)) ||
      (st = tdm__faults_parse(rt, rt->cfg.faults)) ||
      (st = tdm__verify_parse(rt, rt->cfg.verify)) || (st = init_sync(rt)))
    goto fail_early;
  rt->cfg.faults = rt->cfg.verify = NULL; /* parsed: the caller's strings are not kept */
  rt->recording = rt->trace_path || rt->dag_path || rt->cfg.stats;
  if (rt->cfg.stats && rt->cfg.log_level < TDM_LOG_INFO)
    rt->cfg.log_level = TDM_LOG_INFO; /* the summary is logged at info */
  rt->timing = rt->trace_path || rt->cfg.stats;
  rt->trace_t0 = tdm__now_ns();
  st = tdm__topology_load(rt, rt->synthetic, rt->xml, &rt->topo);
  if (st)
    goto fail;
  st = tdm__plan_workers(rt, rt->topo, rt->cfg.nworkers, &rt->plan);
  if (st)
    goto fail;
  rt->nworkers = rt->plan.nworkers;
  rt->active = rt->nworkers;
  atomic_store_explicit(&rt->run_limit, rt->nworkers, memory_order_relaxed);
  rt->bind = rt->cfg.bind_workers && !rt->synthetic && !rt->xml &&
             hwloc_topology_is_thissystem(rt->topo);
  /* the devices last: an emulated device's thread looks at the CPU
   * workers' deques */
  if ((st = setup_devices(rt)) || (st = tdm__machine_describe(rt)) ||
      (st = tdm__sched_start(rt)) || (st = start_workers(rt)) ||
      (st = tdm__watchdog_start(rt)) || (rt->dev && (st = rt->dev->start(rt))))
    goto fail;
  atomic_store_explicit(&rt->devices_ready, true, memory_order_release);
  tdm__log(rt, TDM_LOG_INFO, "runtime started: %u CPU workers on %u usable cores%s, %u device "
           "workers", rt->nworkers, rt->plan.ncores, rt->bind ? ", bound" : "",
           rt->ndevice_workers);
  *out = rt;
  return TDM_OK;
fail_early:
  tdm__verify_free(rt);
  free_strings(rt);
  free(rt);
  return st;
fail:
  teardown(rt);
  return st;
}

tdm_status tdm__check_blocking(const tdm_runtime *rt, const char *what) {
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
  return TDM_OK;
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
  /* Poll a little before blocking: short work then costs no wake-up.
   * acquire: the finished tasks' writes are visible to the caller. */
  uint64_t deadline = 0;
  for (unsigned i = 0; atomic_load_explicit(&rt->inflight, memory_order_acquire) != 0 &&
                       tdm__idle_step(i, &deadline, rt->cfg.spin_us);
       i++)
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
  atomic_store(&rt->closing, true);
  tdm_runtime_resume(rt); /* the tasks queued run */
  tdm__release_acquisitions(rt); /* tasks may wait for them */
  /* tasks pinned to the application's thread run here meanwhile */
  while (atomic_load(&rt->pinned) && atomic_load(&rt->inflight) != 0)
    if (tdm_dispatch(rt) <= 0)
      usleep(100);
  tdm_wait_all(rt);
  while (tdm_dispatch(rt) > 0) /* callbacks and progress calls left */
    ;
  tdm__handles_home(rt); /* the application's memory holds every result */
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
  int k = rt && rt->dev ? rt->dev->current(rt) : -1;
  return k >= 0 ? (int)rt->nworkers + k : -1;
}
