/* Lifecycle: 1000 create/destroy cycles leak no thread, file descriptor or
 * memory; two runtimes run side by side in one process; destroy waits for
 * submitted work. */
#include "common.h"

#include "../runtime/internal.h"

#include <dirent.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

static void add_one(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  long *x = b[0].ptr;
  for (size_t i = 0; i < b[0].nx; i++)
    x[i]++;
}

static const tdm_codelet cl_add = {.name = "add", .cpu_fn = add_one,
                                   .nbuffers = 1, .modes = {TDM_RW}};

static void cycle(unsigned nworkers) {
  tdm_runtime *rt = test_runtime(nworkers, NULL);
  long v[4] = {0};
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, v, 4, sizeof(long), &h), TDM_OK);
  for (int i = 0; i < 5; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {h}}),
                     TDM_OK);
  /* a task with arguments too large to live inside it stays referenced as
   * the handle's last writer */
  char big[200] = {0};
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {h},
                                                    .args = big, .args_size = sizeof big}),
                   TDM_OK);
  /* tasks the application created and never released nor submitted, one
   * with an explicit dependency list */
  tdm_task *a, *b;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {h}}, &a),
                   TDM_OK);
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {h}}, &b),
                   TDM_OK);
  assert_int_equal(tdm_task_depends_on(b, a), TDM_OK);
  /* handle left registered, tasks left unreleased, on purpose: destroy
   * must wait for the submitted work and free everything */
  tdm_runtime_destroy(rt);
  assert_int_equal(v[0], 6);
  assert_int_equal(v[3], 6);
}

/* The open file descriptors and what they are, one per line, into buf
 * (for a message when their number changes). */
static void list_fds(char *buf, size_t size) {
  DIR *d = opendir("/proc/self/fd");
  size_t at = 0;
  buf[0] = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.')
      continue;
    char path[300], target[256] = "?";
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 1] = 0;
    int w = snprintf(buf + at, size - at, "  %s -> %s\n", e->d_name, target);
    if (w < 0 || (size_t)w >= size - at)
      break;
    at += (size_t)w;
  }
  if (d)
    closedir(d);
}

static void test_create_destroy_1000_cycles(void **state) {
  (void)state;
  cycle(0); /* warm-up: first-use allocations of libc and hwloc */
  /* Another thread of the process (a sanitizer's, reading /proc) may hold
   * a file open for a moment, and a thread an earlier test joined may
   * still be listed for a moment: the fewest of a few looks, and
   * afterwards a second to come back down to it. A leak never would. */
  int threads0 = count_dir("/proc/self/task"), fds0 = count_dir("/proc/self/fd");
  for (int i = 0; i < 5; i++, usleep(2000)) {
    int n = count_dir("/proc/self/fd"), t = count_dir("/proc/self/task");
    fds0 = n < fds0 ? n : fds0;
    threads0 = t < threads0 ? t : threads0;
  }
  static char before[4096], after[4096];
  list_fds(before, sizeof before);
#ifndef UNDER_SANITIZER
  malloc_trim(0);
  size_t mem0 = mallinfo2().uordblks;
#endif
  for (int i = 0; i < 1000; i++)
    cycle(i % 3); /* 0 = one per core, 1, 2 */
  /* a joined thread can still be listed for a moment (the kernel clears
   * the joiner's wait before it has removed the task): wait up to a
   * second for the count to come back; a leaked thread never would */
  for (int i = 0; i < 100 && count_dir("/proc/self/task") != threads0; i++)
    usleep(10000);
  assert_int_equal(count_dir("/proc/self/task"), threads0);
  for (int i = 0; i < 100 && count_dir("/proc/self/fd") > fds0; i++)
    usleep(10000);
  if (count_dir("/proc/self/fd") > fds0) {
    list_fds(after, sizeof after);
    fail_msg("open file descriptors grew over 1000 cycles; before:\n%safter:\n%s", before,
             after);
  }
#ifndef UNDER_SANITIZER
  malloc_trim(0);
  size_t mem1 = mallinfo2().uordblks;
  /* in use after 1000 cycles: the same, give or take libc's own caches */
  if (mem1 > mem0 + 64 * 1024)
    fail_msg("heap in use grew from %zu to %zu bytes over 1000 cycles", mem0, mem1);
#endif
}

/* Two runtimes, each fed by its own thread at the same time; each task
 * records which runtime's worker ran it. */
typedef struct {
  tdm_runtime *rt;
  long data[64];
  _Atomic int foreign; /* tasks run by a thread that is not rt's worker */
} side;

static void record(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  side *s = *(side *const *)args;
  if (tdm_worker_id(s->rt) < 0)
    atomic_fetch_add(&s->foreign, 1);
  ((long *)b[0].ptr)[0]++;
}

static void *feed(void *arg) {
  side *s = arg;
  static const tdm_codelet cl = {.name = "record", .cpu_fn = record,
                                 .nbuffers = 1, .modes = {TDM_RW}};
  tdm_handle *h[64];
  for (int i = 0; i < 64; i++)
    if (tdm_register_vector(s->rt, &s->data[i], 1, sizeof(long), &h[i]))
      return NULL;
  for (int k = 0; k < 20000; k++)
    tdm_submit(s->rt, &(tdm_task_desc){.codelet = &cl, .handles = {h[k % 64]},
                                        .args = &s, .args_size = sizeof s});
  tdm_wait_all(s->rt);
  for (int i = 0; i < 64; i++)
    tdm_handle_unregister(h[i]);
  return NULL;
}

static void test_two_runtimes_side_by_side(void **state) {
  (void)state;
  side a = {.rt = test_runtime(2, NULL)}, b = {.rt = test_runtime(3, NULL)};
  pthread_t ta, tb;
  assert_int_equal(pthread_create(&ta, NULL, feed, &a), 0);
  assert_int_equal(pthread_create(&tb, NULL, feed, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  assert_int_equal(tdm_runtime_nworkers(a.rt), 2);
  assert_int_equal(tdm_runtime_nworkers(b.rt), 3);
  for (int i = 0; i < 64; i++) {
    assert_int_equal(a.data[i], 20000 / 64 + (i < 20000 % 64));
    assert_int_equal(b.data[i], 20000 / 64 + (i < 20000 % 64));
  }
  assert_int_equal(atomic_load(&a.foreign), 0);
  assert_int_equal(atomic_load(&b.foreign), 0);
  tdm_runtime_destroy(a.rt);
  tdm_runtime_destroy(b.rt);
}

/* Runtimes made and destroyed from four threads at once, each running
 * tasks: they share this machine's topology (loaded once per process,
 * read only), and a synthetic one is each runtime's own. No assertion in
 * the threads (cmocka's are not for them): each counts what went wrong. */
static void *churn(void *arg) {
  _Atomic int *wrong = arg;
  for (int k = 0; k < 10; k++) {
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.nworkers = 2;
    cfg.bind_workers = 0;
    cfg.ignore_env = 1;
    cfg.devices = k % 2 ? "none" : NULL;
    tdm_runtime *rt;
    if (tdm_runtime_create(&cfg, &rt)) {
      atomic_fetch_add(wrong, 1);
      continue;
    }
    long x = 0;
    tdm_handle *h;
    if (tdm_register_vector(rt, &x, 1, sizeof x, &h) == TDM_OK) {
      for (int i = 0; i < 100; i++)
        tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {h}});
      if (tdm_handle_unregister(h) || x != 100)
        atomic_fetch_add(wrong, 1);
    } else {
      atomic_fetch_add(wrong, 1);
    }
    tdm_runtime_destroy(rt);
  }
  return NULL;
}

static void test_runtimes_made_at_once(void **state) {
  (void)state;
  _Atomic int wrong = 0;
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, churn, &wrong), 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_join(t[i], NULL), 0);
  assert_int_equal(atomic_load(&wrong), 0);
  /* one topology of this machine for every runtime; a synthetic one of its own */
  tdm_runtime *a = test_runtime(1, NULL), *b = test_runtime(1, NULL);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.synthetic_topology = "pack:1 core:2 pu:1";
  tdm_runtime *c;
  assert_int_equal(tdm_runtime_create(&cfg, &c), TDM_OK);
  assert_ptr_equal(a->topo, b->topo);
  assert_ptr_not_equal(c->topo, a->topo);
  assert_int_equal(tdm_runtime_ncpu_workers(c), 2);
  tdm_runtime_destroy(c);
  tdm_runtime_destroy(b);
  tdm_runtime_destroy(a);
}

/* The runtime and its workers have members on cache lines of their own
 * (_Alignas): they must come from memory aligned that much, which malloc
 * does not promise (UBSan's alignment check fires on glibc's malloc). */
static void test_runtime_memory_aligned(void **state) {
  (void)state;
  for (int i = 0; i < 8; i++) {
    tdm_runtime *rt = test_runtime(2, NULL);
    assert_int_equal((uintptr_t)rt % _Alignof(tdm_runtime), 0);
    assert_true(_Alignof(tdm_runtime) >= TDM_CACHE_LINE);
    assert_int_equal((uintptr_t)rt->workers % _Alignof(tdm_worker), 0);
    assert_int_equal((uintptr_t)&rt->workers[1] % _Alignof(tdm_worker), 0);
    tdm_runtime_destroy(rt);
  }
}

static void test_destroy_null_is_harmless(void **state) {
  (void)state;
  tdm_runtime_destroy(NULL);
  tdm_task_release(NULL);
}

/* An idle runtime parks its workers: over 200 ms, its threads use almost
 * no CPU time. */
static double process_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_idle_runtime_parks(void **state) {
  (void)state;
  tdm_runtime *rt = test_runtime(4, NULL);
  sleep_ms(50); /* let the workers finish spinning */
  double c0 = process_cpu_s();
  sleep_ms(200);
  double used = process_cpu_s() - c0;
  /* spinning 4 workers would burn up to 800 ms; parked ones nearly 0 */
  if (used > 0.02)
    fail_msg("idle runtime used %.1f ms of CPU in 200 ms", used * 1e3);
  tdm_runtime_destroy(rt);
}

/* ---- thread names ---------------------------------------------------------- */

/* The id of a thread of this process named `name` (/proc/self/task),
 * or -1. */
static long thread_tid(const char *name) {
  DIR *d = opendir("/proc/self/task");
  assert_non_null(d);
  long tid = -1;
  struct dirent *e;
  while (tid < 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char path[300], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f)
      continue; /* gone meanwhile */
    if (fgets(comm, sizeof comm, f))
      comm[strcspn(comm, "\n")] = 0;
    fclose(f);
    if (!strcmp(comm, name))
      tid = atol(e->d_name);
  }
  closedir(d);
  return tid;
}

static bool thread_named(const char *name) {
  return thread_tid(name) >= 0;
}

/* The id of the thread named `name`, waiting for it to name itself. */
static long wait_for_thread(const char *name) {
  for (int tries = 0; tries < 200 && !thread_named(name); tries++)
    sleep_ms(10);
  long tid = thread_tid(name);
  if (tid < 0)
    fail_msg("no thread named %s", name);
  return tid;
}

static bool have_proc_tasks(void) {
  DIR *proc = opendir("/proc/self/task");
  if (proc)
    closedir(proc);
  return proc != NULL;
}

/* The runtime's threads read well in `top -H`, `perf` and debuggers:
 * tandem-cpuN for the CPU workers, tandem-devN for emulated devices'
 * threads, tandem-watchdog for the watchdog (on by default where there
 * are devices). */
static void test_threads_named(void **state) {
  (void)state;
  if (!have_proc_tasks())
    skip(); /* not Linux's /proc: nothing to read the names from */
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.sim = "a:latency=1us,bandwidth=1G;b:latency=1us,bandwidth=1G";
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  static const char *const names[] = {"tandem-cpu0", "tandem-cpu1", "tandem-dev0",
                                      "tandem-dev1", "tandem-watchdog"};
  for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
    wait_for_thread(names[i]); /* each thread names itself as it starts */
  tdm_runtime_destroy(rt);
  assert_false(thread_named("tandem-cpu0")); /* they are gone with it */
}

/* A runtime of one worker, worker_nice `nice`, the environment read
 * (with TANDEM_WORKER_NICE=env unless NULL): its worker's thread id, or
 * -1 when creating it fails with `expect`. */
static long lowered_worker(int nice, const char *env, tdm_status expect, tdm_runtime **rt) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.bind_workers = 0;
  cfg.devices = "none";
  cfg.worker_nice = nice;
  if (env)
    setenv("TANDEM_WORKER_NICE", env, 1);
  *rt = NULL;
  tdm_status st = tdm_runtime_create(&cfg, rt);
  unsetenv("TANDEM_WORKER_NICE");
  assert_int_equal(st, expect);
  return st ? -1 : wait_for_thread("tandem-cpu0");
}

/* Field 19 of the thread's /proc stat line: its nice value. */
static int nice_of(long tid) {
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  const char *p = strrchr(line, ')'); /* after the name, which may hold spaces */
  assert_non_null(p);
  int field = 2, nice = 0;
  for (char *tok = strtok((char *)p + 1, " "); tok; tok = strtok(NULL, " "))
    if (++field == 19)
      nice = atoi(tok);
  return nice;
}

/* tdm_config.worker_nice lowers the workers (no privilege needed): a
 * nice value, or SCHED_IDLE; the environment says the same
 * (TANDEM_WORKER_NICE, a malformed value ignored); out of range, the
 * runtime is refused. */
static void test_workers_lowered(void **state) {
  (void)state;
  if (!have_proc_tasks())
    skip();
  tdm_runtime *rt;
  long tid = lowered_worker(7, NULL, TDM_OK, &rt);
  assert_int_equal(nice_of(tid), 7);
  assert_int_equal(sched_getscheduler((pid_t)tid), SCHED_OTHER);
  tdm_runtime_destroy(rt);
  tid = lowered_worker(TDM_WORKERS_IDLE, NULL, TDM_OK, &rt);
  assert_int_equal(sched_getscheduler((pid_t)tid), SCHED_IDLE);
  tdm_runtime_destroy(rt);
  tid = lowered_worker(0, "idle", TDM_OK, &rt);
  assert_int_equal(sched_getscheduler((pid_t)tid), SCHED_IDLE);
  tdm_runtime_destroy(rt);
  tid = lowered_worker(0, "12", TDM_OK, &rt);
  assert_int_equal(nice_of(tid), 12);
  tdm_runtime_destroy(rt);
  tid = lowered_worker(3, "twelve", TDM_OK, &rt); /* ignored, with a warning */
  assert_int_equal(nice_of(tid), 3);
  tdm_runtime_destroy(rt);
  tid = lowered_worker(0, NULL, TDM_OK, &rt); /* as created: this thread's */
  assert_int_equal(nice_of(tid), nice_of((long)gettid()));
  tdm_runtime_destroy(rt);
  lowered_worker(21, NULL, TDM_ERR_INVALID_ARG, &rt);
  lowered_worker(-1, NULL, TDM_ERR_INVALID_ARG, &rt);
}

/* ---- fork --------------------------------------------------------------- */

static void slow_add(const tdm_buffer *b, const void *args, size_t n) {
  sleep_ms(100);
  add_one(b, args, n);
}

static const tdm_codelet cl_slow = {.name = "slow", .cpu_fn = slow_add,
                                    .nbuffers = 1, .modes = {TDM_RW}};

/* A runtime of two workers, no device, no log (a thread holding the log's
 * lock when the process forks would leave it locked in the child). */
static tdm_status two_workers(tdm_runtime **rt) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.devices = "none";
  return tdm_runtime_create(&cfg, rt);
}

/* In the child: fails with the line number when a check does not hold
 * (no cmocka here: its state is the parent's). */
#define CHILD_CHECK(cond)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "child: %s failed (line %d)\n", #cond, __LINE__);       \
      _exit(1);                                                                \
    }                                                                          \
  } while (0)
#define FORKED(call) CHILD_CHECK((call) == TDM_ERR_FORKED)

static void child_of_runtime(tdm_runtime *rt, tdm_handle *h, tdm_handle *m, tdm_task *t) {
  alarm(60); /* a hang kills the child: the parent sees the signal */
  long v[4] = {0};
  tdm_handle *other = NULL;
  tdm_buffer b;
  size_t r, c;
  tdm_machine_info mi = {.struct_size = sizeof mi};
  tdm_cpu_kind_info ki = {.struct_size = sizeof ki};
  tdm_worker_info wi = {.struct_size = sizeof wi};
  tdm_platform_info pi = {.struct_size = sizeof pi};
  tdm_device_info di = {.struct_size = sizeof di};
  tdm_device_counters dc = {.struct_size = sizeof dc};
  tdm_worker_stats ws = {.struct_size = sizeof ws};
  FORKED(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {h}}));
  FORKED(tdm_wait_all(rt));
  tdm_task *made = NULL;
  FORKED(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {h}}, &made));
  CHILD_CHECK(made == NULL);
  FORKED(tdm_task_depends_on(t, t));
  FORKED(tdm_task_submit(t));
  FORKED(tdm_task_wait(t));
  FORKED(tdm_register_vector(rt, v, 4, sizeof(long), &other));
  FORKED(tdm_register_matrix(rt, v, 2, 2, 2, sizeof(long), &other));
  CHILD_CHECK(other == NULL);
  FORKED(tdm_handle_buffer(h, &b));
  FORKED(tdm_handle_acquire(h, TDM_R));
  FORKED(tdm_handle_release(h));
  FORKED(tdm_matrix_partition(m, 1, 1, 0));
  FORKED(tdm_matrix_tiles(m, &r, &c));
  CHILD_CHECK(tdm_matrix_tile(m, 0, 0) == NULL);
  FORKED(tdm_matrix_unpartition(m, 0));
  FORKED(tdm_handle_unregister(h));
  FORKED(tdm_runtime_machine(rt, &mi));
  FORKED(tdm_runtime_cpu_kind(rt, 0, &ki));
  FORKED(tdm_runtime_worker(rt, 0, &wi));
  FORKED(tdm_runtime_platform(rt, 0, &pi));
  FORKED(tdm_runtime_device(rt, 0, &di));
  FORKED(tdm_runtime_device_counters(rt, 0, &dc));
  FORKED(tdm_runtime_worker_stats(rt, 0, &ws));
  FORKED(tdm_trace_flush(rt));
  FORKED(tdm_runtime_pause(rt));
  FORKED(tdm_runtime_resume(rt));
  FORKED(tdm_runtime_set_active_workers(rt, 1));
  CHILD_CHECK(tdm_runtime_active_workers(rt) == 0);
  CHILD_CHECK(tdm_runtime_nworkers(rt) == 0 && tdm_runtime_ncpu_workers(rt) == 0);
  CHILD_CHECK(tdm_worker_id(rt) == -1);
  tdm_task_release(t);     /* does nothing, does not hang */
  FORKED(tdm_runtime_destroy(rt)); /* likewise */
#ifdef UNDER_TSAN
  /* ThreadSanitizer cannot start threads in the child of a process that
   * had threads ("dup thread with used id"): this part runs in the other
   * builds. */
  _exit(0);
#endif
  /* a runtime of the child's own works */
  tdm_runtime *mine = NULL;
  CHILD_CHECK(two_workers(&mine) == TDM_OK);
  CHILD_CHECK(tdm_register_vector(mine, v, 4, sizeof(long), &other) == TDM_OK);
  for (int i = 0; i < 100; i++)
    CHILD_CHECK(tdm_submit(mine, &(tdm_task_desc){.codelet = &cl_add, .handles = {other}}) ==
                TDM_OK);
  CHILD_CHECK(tdm_wait_all(mine) == TDM_OK);
  CHILD_CHECK(tdm_handle_unregister(other) == TDM_OK);
  tdm_runtime_destroy(mine);
  CHILD_CHECK(v[0] == 100 && v[3] == 100);
  _exit(0);
}

/* A child of a process with a runtime (work in flight, a created task)
 * gets TDM_ERR_FORKED from every call on it, never a hang, and may make a
 * runtime of its own; the parent's runtime goes on unharmed. */
static void test_fork(void **state) {
  (void)state;
  tdm_runtime *rt = NULL;
  assert_int_equal(two_workers(&rt), TDM_OK);
  long v[4] = {0}, w[4] = {0};
  tdm_handle *h, *m;
  assert_int_equal(tdm_register_vector(rt, v, 4, sizeof(long), &h), TDM_OK);
  assert_int_equal(tdm_register_matrix(rt, w, 2, 2, 2, sizeof(long), &m), TDM_OK);
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_slow, .handles = {h}}),
                     TDM_OK);
  tdm_task *t;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &cl_add, .handles = {h}}, &t),
                   TDM_OK);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0)
    child_of_runtime(rt, h, m, t);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status))
    fail_msg("the child was killed by signal %d (a hang?)", WTERMSIG(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  /* the parent's runtime is unharmed */
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  assert_int_equal(tdm_task_wait(t), TDM_OK);
  tdm_task_release(t);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(tdm_handle_unregister(m), TDM_OK);
  tdm_runtime_destroy(rt);
  assert_int_equal(v[0], 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_destroy_null_is_harmless),
      cmocka_unit_test(test_runtime_memory_aligned),
      cmocka_unit_test(test_two_runtimes_side_by_side),
      cmocka_unit_test(test_runtimes_made_at_once),
      cmocka_unit_test(test_idle_runtime_parks),
      cmocka_unit_test(test_fork),
      cmocka_unit_test(test_threads_named),
      cmocka_unit_test(test_workers_lowered),
      cmocka_unit_test(test_create_destroy_1000_cycles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
