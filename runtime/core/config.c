/*
 * Configuration: tdm_config's defaults, the TANDEM_* environment (one
 * list of the variables read, and a warning for one that is not), the
 * copies of the configuration's strings, and the checks of its values
 * before anything is made.
 */
#include "core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
  config->opencl_peer = 1;
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
    "TANDEM_OPENCL_PEER",
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

/* What a parse tried on an environment value logged first. */
enum { WHY_ROOM = 400 };
static void capture(void *data, tdm_log_level level, const char *message) {
  char *first = data;
  (void)level;
  if (!first[0])
    snprintf(first, WHY_ROOM, "%s", message);
}

/* The parses tdm_runtime_create makes of these settings, tried on a
 * value and undone (it parses them again, the config's or the
 * environment's). */
static tdm_status try_faults(tdm_runtime *rt, const char *s) {
  tdm_faults saved;
  memcpy(&saved, &rt->faults, sizeof saved);
  tdm_status st = tdm__faults_parse(rt, s);
  memcpy(&rt->faults, &saved, sizeof saved);
  return st;
}

static tdm_status try_verify(tdm_runtime *rt, const char *s) {
  tdm_status st = tdm__verify_parse(rt, s);
  tdm__verify_free(rt);
  return st;
}

/* tdm_config.sim's text without its "+opencl" terms (in place): what
 * the emulator parses. Whether there was one. */
static bool strip_opencl_terms(char *text) {
  char *out = text;
  bool first = true, beside = false;
  for (char *s = text;;) {
    char *end = strchr(s, ';');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    if (n == 7 && !memcmp(s, "+opencl", 7)) {
      beside = true;
    } else {
      if (!first)
        *out++ = ';';
      memmove(out, s, n);
      out += n;
      first = false;
    }
    if (!end)
      break;
    s = end + 1;
  }
  *out = 0;
  return beside;
}

/* Its syntax, as the emulator will read it (what it checks against the
 * machine comes later: sim_discover). */
static tdm_status try_sim(tdm_runtime *rt, const char *s) {
  char *text = strdup(s);
  if (!text)
    return TDM_ERR_NO_MEMORY;
  bool beside = strip_opencl_terms(text);
  tdm_vt_machine m;
  char err[160];
  tdm_status st = TDM_OK;
  if ((*text || !beside) && tdm__vt_parse_machine(text, NULL, 0, &m, err, sizeof err)) {
    tdm__log(rt, TDM_LOG_ERROR, "%s", err);
    st = TDM_ERR_INVALID_ARG;
  }
  free(text);
  return st;
}

/* parse(rt, s) with what it logs kept in why[WHY_ROOM] (the first message),
 * not logged: an environment value's trial. */
static tdm_status quietly(tdm_runtime *rt, tdm_status (*parse)(tdm_runtime *, const char *),
                          const char *s, char *why) {
  tdm_log_fn fn = rt->cfg.log_fn;
  void *data = rt->cfg.log_data;
  tdm_log_level level = rt->cfg.log_level;
  rt->cfg.log_fn = capture;
  rt->cfg.log_data = why;
  rt->cfg.log_level = TDM_LOG_ERROR;
  tdm_status st = parse(rt, s);
  rt->cfg.log_fn = fn;
  rt->cfg.log_data = data;
  rt->cfg.log_level = level;
  return st;
}

/* A setting that tdm_runtime_create parses (parse), into *field when it
 * parses, else ignored with a warning saying why, as any other variable:
 * the environment never stops a program from starting. Whether taken. */
static bool env_parsed(tdm_runtime *rt, const char *name,
                       tdm_status (*parse)(tdm_runtime *, const char *), const char **field) {
  const char *s = env(name);
  if (!s || !*s)
    return false;
  char why[WHY_ROOM] = "";
  tdm_status st = quietly(rt, parse, s, why);
  if (st != TDM_ERR_INVALID_ARG) { /* out of memory: creation says so */
    *field = s;
    return true;
  }
  const char *prefix = "tdm_runtime_create: ";
  const char *said = strncmp(why, prefix, strlen(prefix)) ? why : why + strlen(prefix);
  tdm__log(rt, TDM_LOG_WARNING, "ignoring %s=\"%s\": %s", name, s, said);
  return false;
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

void tdm__config_env(tdm_runtime *rt) {
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
  rt->cfg_synthetic = rt->cfg.synthetic_topology;
  rt->cfg_xml = rt->cfg.topology_xml;
  env_string("TANDEM_SYNTHETIC_TOPOLOGY", &rt->cfg.synthetic_topology);
  env_string("TANDEM_TOPOLOGY_XML", &rt->cfg.topology_xml);
  if (rt->cfg.synthetic_topology != rt->cfg_synthetic)
    rt->topology_env = "TANDEM_SYNTHETIC_TOPOLOGY";
  else if (rt->cfg.topology_xml != rt->cfg_xml)
    rt->topology_env = "TANDEM_TOPOLOGY_XML";
  env_flag(rt, "TANDEM_OPENCL_CPU", &rt->cfg.opencl_cpu_devices);
  env_flag(rt, "TANDEM_OPENCL_PEER", &rt->cfg.opencl_peer);
  if (env_choice(rt, "TANDEM_DEVICE_MEMORY", memory, &choice))
    rt->cfg.device_memory = (tdm_device_memory)choice;
  env_string("TANDEM_OPENCL_LIBRARY", &rt->cfg.opencl_library);
  env_unsigned(rt, "TANDEM_DEVICE_TASKS", 1024, &rt->cfg.device_tasks);
  env_string("TANDEM_CACHE_DIR", &rt->cfg.cache_dir);
  env_string("TANDEM_APP", &rt->cfg.app);
  env_string("TANDEM_TRACE", &rt->cfg.trace_path);
  env_string("TANDEM_DAG", &rt->cfg.dag_path);
  rt->sim_from_env = env_parsed(rt, "TANDEM_SIM", try_sim, &rt->cfg.sim);
  env_parsed(rt, "TANDEM_FAULTS", try_faults, &rt->cfg.faults);
  env_parsed(rt, "TANDEM_VERIFY", try_verify, &rt->cfg.verify);
  env_flag(rt, "TANDEM_STATS", &rt->cfg.stats);
  env_checked(rt);
}

/* The config's strings are only valid during tdm_runtime_create: the
 * runtime keeps copies (rt->copies, these indexes), and cfg points at
 * them. */
enum { COPY_SYNTHETIC = 0, COPY_XML = 1, COPY_SIM = TDM_CONFIG_COPIES - 1 };

/* *field's copy becomes the runtime's copy i, and *field points at it
 * (NULL stays NULL); false without memory. */
static bool keep_copy(tdm_runtime *rt, unsigned i, const char **field) {
  free(rt->copies[i]);
  rt->copies[i] = *field ? strdup(*field) : NULL;
  bool kept = !*field || rt->copies[i];
  *field = rt->copies[i];
  return kept;
}

/* The topology the config (after the environment) names. */
static tdm_status load_topology(tdm_runtime *rt, const char *unused) {
  (void)unused;
  return tdm__topology_load(rt, rt->cfg.synthetic_topology, rt->cfg.topology_xml, &rt->topo);
}

tdm_status tdm__config_topology(tdm_runtime *rt) {
  const char *name = rt->topology_env;
  if (!name)
    return load_topology(rt, NULL);
  const char *value = rt->cfg.synthetic_topology ? rt->cfg.synthetic_topology
                                                 : rt->cfg.topology_xml;
  char why[WHY_ROOM] = "";
  tdm_status st = quietly(rt, load_topology, NULL, why);
  if (st != TDM_ERR_TOPOLOGY)
    return st;
  /* as every variable: ignored, the config's own topology (or the
   * machine) instead */
  tdm__log(rt, TDM_LOG_WARNING, "ignoring %s=\"%s\": %s", name, value, why);
  rt->cfg.synthetic_topology = rt->cfg_synthetic;
  rt->cfg.topology_xml = rt->cfg_xml;
  if (!keep_copy(rt, COPY_SYNTHETIC, &rt->cfg.synthetic_topology) ||
      !keep_copy(rt, COPY_XML, &rt->cfg.topology_xml))
    return TDM_ERR_NO_MEMORY;
  rt->topology_env = NULL;
  return load_topology(rt, NULL);
}

tdm_status tdm__config_copy(tdm_runtime *rt) {
  const char **strs[TDM_CONFIG_COPIES] = {
      [COPY_SYNTHETIC] = &rt->cfg.synthetic_topology,
      [COPY_XML] = &rt->cfg.topology_xml,
      &rt->cfg.devices,
      &rt->cfg.opencl_library,
      &rt->cfg.cache_dir,
      &rt->cfg.app,
      &rt->cfg.trace_path,
      &rt->cfg.dag_path,
      [COPY_SIM] = &rt->cfg.sim,
  };
  for (unsigned i = 0; i < TDM_CONFIG_COPIES; i++)
    if (!keep_copy(rt, i, strs[i]))
      return TDM_ERR_NO_MEMORY;
  return TDM_OK;
}

void tdm__config_free(tdm_runtime *rt) {
  for (size_t i = 0; i < TDM_CONFIG_COPIES; i++)
    free(rt->copies[i]);
  free(rt->model_file);
}

/* The term "+opencl" of tdm_config.sim (OpenCL's devices beside the
 * emulated ones) out of the runtime's copy, which the emulator parses;
 * a list left empty is no emulated device at all. */
static void take_sim_terms(tdm_runtime *rt) {
  char *text = rt->copies[COPY_SIM];
  if (text && strip_opencl_terms(text)) {
    rt->sim_beside_opencl = true;
    if (!*text)
      rt->cfg.sim = NULL; /* OpenCL's devices alone */
  }
}

/* Checks the device fields of the config (after the environment). */
tdm_status tdm__config_check(tdm_runtime *rt) {
  take_sim_terms(rt);
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

