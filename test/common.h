/* Helpers shared by the tests. */
#ifndef TDM_TEST_COMMON_H
#define TDM_TEST_COMMON_H

#include <setjmp.h> /* cmocka needs these first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "tandem.h"

/* Captures the log of a runtime. */
typedef struct test_log {
  pthread_mutex_t lock;
  unsigned count;       /* messages received */
  unsigned errors;      /* of level TDM_LOG_ERROR */
  char last[1024];      /* the last message */
  char all[16384];      /* the first messages, one per line */
  size_t all_len;
} test_log;

static void test_log_fn(void *data, tdm_log_level level, const char *msg) {
  test_log *l = data;
  pthread_mutex_lock(&l->lock);
  l->count++;
  if (level == TDM_LOG_ERROR)
    l->errors++;
  snprintf(l->last, sizeof l->last, "%s", msg);
  if (l->all_len < sizeof l->all - 1) {
    int n = snprintf(l->all + l->all_len, sizeof l->all - l->all_len, "%s\n", msg);
    l->all_len += n > 0 ? (size_t)n : 0;
    if (l->all_len > sizeof l->all - 1)
      l->all_len = sizeof l->all - 1;
  }
  pthread_mutex_unlock(&l->lock);
  if (getenv("TDM_TEST_VERBOSE"))
    fprintf(stderr, "[tandem %d] %s\n", (int)level, msg);
}

static inline unsigned test_log_count(test_log *l) {
  pthread_mutex_lock(&l->lock);
  unsigned n = l->count;
  pthread_mutex_unlock(&l->lock);
  return n;
}

/* Whether a message containing `part` was logged. */
static inline int test_log_has(test_log *l, const char *part) {
  pthread_mutex_lock(&l->lock);
  int found = strstr(l->all, part) != NULL;
  pthread_mutex_unlock(&l->lock);
  return found;
}

static inline unsigned test_log_errors(test_log *l) {
  pthread_mutex_lock(&l->lock);
  unsigned n = l->errors;
  pthread_mutex_unlock(&l->lock);
  return n;
}

/* Sends cfg's log, every level, into *log (emptied). */
static inline void test_log_attach(tdm_config *cfg, test_log *log) {
  memset(log, 0, sizeof *log);
  pthread_mutex_init(&log->lock, NULL);
  cfg->log_fn = test_log_fn;
  cfg->log_data = log;
  cfg->log_level = TDM_LOG_DEBUG;
}

/* Each of the n malformed values bad[i], put into the config of a
 * runtime without devices by set, makes tdm_runtime_create fail with
 * TDM_ERR_INVALID_ARG, logging a message that contains `says`. */
static inline void test_refused(const char *const *bad, size_t n,
                                void (*set)(tdm_config *, const char *), const char *says) {
  for (size_t i = 0; i < n; i++) {
    test_log log;
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.bind_workers = 0;
    cfg.devices = "none";
    set(&cfg, bad[i]);
    test_log_attach(&cfg, &log);
    tdm_runtime *rt = NULL;
    assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_INVALID_ARG);
    assert_null(rt);
    if (!test_log_has(&log, says))
      fail_msg("\"%s\": no message \"%s\" (log: %s)", bad[i], says, log.all);
  }
}

static void test_log_to_stderr(void *data, tdm_log_level level, const char *msg) {
  (void)data;
  fprintf(stderr, "tandem (%d): %s\n", (int)level, msg);
}

/* Tests whose runs log failures on purpose: shown on stderr when the
 * environment has TEST_LOG, else not at all. */
static inline void test_log_if_asked(tdm_config *cfg) {
  cfg->log_fn = getenv("TEST_LOG") ? test_log_to_stderr : NULL;
}

/* The splitmix64 finaliser (Steele, Lea and Flood, "Fast splittable
 * pseudorandom number generators", OOPSLA 2014): a well-mixed 64-bit value
 * of x, for tests that derive data and choices from a seed. */
static inline uint64_t test_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* A runtime with `nworkers` workers (0: one per core), unbound (tests
 * often ask for more workers than cores), logging into *log if not NULL. */
static inline tdm_runtime *test_runtime(unsigned nworkers, test_log *log) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = nworkers;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  if (log)
    test_log_attach(&cfg, log);
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  assert_non_null(rt);
  return rt;
}

/* A runtime with `nworkers` unbound workers and no OpenCL device; with
 * `sim`, those emulated devices instead (at the real machine's speed,
 * placed at random: about half the tasks go to a device). Logging into
 * *log if not NULL, else to stderr when TDM_TEST_LOG is set. */
static inline tdm_runtime *test_runtime_emulated(unsigned nworkers, const char *sim,
                                                 test_log *log) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = nworkers;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.devices = sim ? NULL : "none";
  if (sim) {
    cfg.sim = sim;
    cfg.sim_time_scale = 1;
    cfg.scheduler = "random";
  }
  if (log)
    test_log_attach(&cfg, log);
  else
    test_log_if_asked(&cfg);
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  return rt;
}

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits until *flag becomes nonzero or `timeout` seconds pass; returns the
 * flag. */
static inline int wait_flag(_Atomic int *flag, double timeout) {
  double end = now_s() + timeout;
  while (!atomic_load(flag) && now_s() < end)
    sleep_ms(1);
  return atomic_load(flag);
}

/* A new empty directory under /tmp into buf (a cache directory for one
 * test run); the test fails if none can be made. */
/* The device records in use (the first `max` of them into ids), and how
 * many there are. */
static inline unsigned test_used_devices(tdm_runtime *rt, unsigned *ids, unsigned max) {
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  unsigned n = 0;
  for (unsigned i = 0; i < mi.opencl_devices; i++) {
    tdm_device_info d = {.struct_size = sizeof d};
    assert_int_equal(tdm_runtime_device(rt, i, &d), TDM_OK);
    if (d.used && n++ < max)
      ids[n - 1] = i;
  }
  return n;
}

/* Device record `device`'s counters. */
static inline tdm_device_counters test_counters(tdm_runtime *rt, unsigned device) {
  tdm_device_counters c = {.struct_size = sizeof c};
  assert_int_equal(tdm_runtime_device_counters(rt, device, &c), TDM_OK);
  return c;
}

static inline void test_temp_dir(char *buf, size_t size) {
  snprintf(buf, size, "/tmp/tandem-test-XXXXXX");
  assert_non_null(mkdtemp(buf));
}

/* For the two-user tests (run as root): whether user `uid` can reach and
 * write `dir`, checked in a child process that becomes that user. Not
 * so where a path above it is closed to others (a chroot whose root is
 * 0700, say): the tests then skip. */
static inline int test_other_user_can_write(const char *dir, unsigned uid) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(uid) != 0 || setuid(uid) != 0)
      _exit(1);
    _exit(access(dir, W_OK | X_OK) == 0 ? 0 : 1);
  }
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

/* Removes a directory made by test_temp_dir and the files in it. */
static inline void test_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (e->d_name[0] != '.')
      unlink(path);
  }
  if (d)
    closedir(d);
  rmdir(dir);
}

/* Runs `tool` (a path) with `args` (shell words) and returns its exit
 * status, its standard output in *out (malloc'd). */
static inline int test_run(const char *tool, const char *args, char **out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s", tool, args);
  FILE *f = popen(cmd, "r");
  assert_non_null(f);
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  size_t got;
  while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
  }
  buf[n] = 0;
  int status = pclose(f);
  *out = buf;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif
