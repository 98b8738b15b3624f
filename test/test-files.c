/*
 * The files Tandem reads and writes, against another local user:
 *
 *   test-files              as any user
 *   test-files two-users    as root: an unprivileged second user (a child
 *                           process that drops to uid 65534) plants a cache;
 *                           exits 77 (skip) when not run as root
 *
 * Every file Tandem writes (trace, graph, performance models) is made
 * under a fresh name and renamed into place: a link planted at the final
 * name or at a predictable temporary name is never written through, and a
 * device or directory at the final name is refused. The cache directory
 * and its files are used only when nobody else could have written them.
 * Eight processes saving models at once lose no record and warn of
 * nothing.
 */
#include "common.h"

#include "internal.h"
#include "sched/perfmodel.h"

#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void spin_task(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  uint64_t *v = b[0].ptr;
  v[0]++;
}

static const tdm_codelet work = {.name = "work", .cpu_fn = spin_task, .nbuffers = 1,
                                 .modes = {TDM_RW}};

/* A runtime with an emulated device (so that it loads and saves models)
 * on cache directory `dir`, trace and graph as given (may be NULL); runs
 * a few tasks; its log in *log. */
static tdm_runtime *model_runtime(const char *dir, const char *trace, const char *dag,
                                  test_log *log) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.sim = "gpu:speedup=2,memory=shared";
  cfg.cache_dir = dir;
  cfg.trace_path = trace;
  cfg.dag_path = dag;
  test_log_attach(&cfg, log);
  cfg.log_level = TDM_LOG_INFO;
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  static uint64_t v[4][8];
  tdm_handle *h[4];
  for (int i = 0; i < 4; i++) {
    memset(v[i], 0, sizeof v[i]);
    assert_int_equal(tdm_register_vector(rt, v[i], 8, sizeof(uint64_t), &h[i]), TDM_OK);
  }
  for (int r = 0; r < 8; r++)
    for (int i = 0; i < 4; i++) {
      tdm_task_desc d = {.codelet = &work, .handles = {h[i]}};
      assert_int_equal(tdm_submit(rt, &d), TDM_OK);
    }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(tdm_handle_unregister(h[i]), TDM_OK);
    assert_int_equal(v[i][0], 8);
  }
  return rt;
}

static void run_model_runtime(const char *dir, test_log *log) {
  tdm_runtime_destroy(model_runtime(dir, NULL, NULL, log));
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

static void assert_text(const char *path, const char *text) {
  char buf[256] = "";
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  assert_string_equal(buf, text);
}

static mode_t mode_of(const char *path) {
  struct stat st;
  assert_int_equal(lstat(path, &st), 0);
  return st.st_mode;
}

/* How many times `part` occurs in the log. */
static unsigned occurrences(test_log *log, const char *part) {
  unsigned n = 0;
  for (const char *p = log->all; (p = strstr(p, part)); p += strlen(part))
    n++;
  return n;
}

/* Removes dir and everything in it, dot files included (one level). */
static void remove_all(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) != 0 && errno == EISDIR)
      remove_all(path);
  }
  if (d)
    closedir(d);
  rmdir(dir);
}

/* Files in dir (dot files too). */
static unsigned count_files(const char *dir) {
  DIR *d = opendir(dir);
  unsigned n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  if (d)
    closedir(d);
  return n;
}

/* ---- files written at the user's paths ---------------------------------- */

/* A link planted where the trace or the graph goes is not written
 * through: the write is refused and the link's target is unchanged. */
static void test_trace_and_graph_through_links(void **state) {
  (void)state;
  char dir[64], victim[128], trace[128], dag[128], cache[128];
  test_temp_dir(dir, sizeof dir);
  snprintf(victim, sizeof victim, "%s/precious", dir);
  snprintf(trace, sizeof trace, "%s/trace.json", dir);
  snprintf(dag, sizeof dag, "%s/graph.dot", dir);
  snprintf(cache, sizeof cache, "%s/cache", dir);
  write_text(victim, "precious\n");
  assert_int_equal(symlink(victim, trace), 0);
  assert_int_equal(symlink(victim, dag), 0);
  test_log log;
  tdm_runtime *rt = model_runtime(cache, trace, dag, &log);
  assert_int_equal(tdm_trace_flush(rt), TDM_ERR_SYSTEM);
  tdm_runtime_destroy(rt);
  assert_true(test_log_has(&log, "trace: refusing to write"));
  assert_true(test_log_has(&log, "graph: refusing to write"));
  assert_true(test_log_has(&log, "a symbolic link"));
  assert_text(victim, "precious\n");
  assert_true(S_ISLNK(mode_of(trace)) && S_ISLNK(mode_of(dag)));
  remove_all(dir);
}

/* Links at the names older versions wrote through first ("<path>.tmp")
 * are left alone: the temporary name is new each time. The files are
 * written whole, with the mode the umask leaves of 0666. */
static void test_predictable_temporary_names(void **state) {
  (void)state;
  char dir[64], victim[128], trace[128], dag[128], tmp[160], cache[128];
  test_temp_dir(dir, sizeof dir);
  snprintf(victim, sizeof victim, "%s/precious", dir);
  snprintf(trace, sizeof trace, "%s/trace.json", dir);
  snprintf(dag, sizeof dag, "%s/graph.dot", dir);
  snprintf(cache, sizeof cache, "%s/cache", dir);
  write_text(victim, "precious\n");
  snprintf(tmp, sizeof tmp, "%s.tmp", trace);
  assert_int_equal(symlink(victim, tmp), 0);
  snprintf(tmp, sizeof tmp, "%s.tmp", dag);
  assert_int_equal(symlink(victim, tmp), 0);
  mode_t old = umask(022);
  test_log log;
  tdm_runtime_destroy(model_runtime(cache, trace, dag, &log));
  umask(old);
  assert_int_equal(test_log_errors(&log), 0);
  assert_text(victim, "precious\n");
  assert_int_equal(mode_of(trace) & 07777, 0644);
  assert_int_equal(mode_of(dag) & 07777, 0644);
  assert_true(S_ISREG(mode_of(trace)) && S_ISREG(mode_of(dag)));
  FILE *f = fopen(dag, "r");
  char line[64];
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  assert_string_equal(line, "digraph tandem {\n");
  /* no temporary file left behind: precious, 2 links, trace, graph, cache */
  assert_int_equal(count_files(dir), 6);
  remove_all(dir);
}

/* A device at the final name is refused, not replaced by a file. */
static void test_device_at_the_final_name(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(1, &log);
  tdm_outfile o;
  assert_false(tdm__out_open(rt, &o, AT_FDCWD, "/dev/null", 0666, TDM_LOG_ERROR, "trace"));
  assert_true(test_log_has(&log, "not a regular file"));
  assert_true(S_ISCHR(mode_of("/dev/null")));
  assert_false(tdm__out_open(rt, &o, AT_FDCWD, "/tmp/", 0666, TDM_LOG_ERROR, "trace"));
  assert_false(tdm__out_open(rt, &o, AT_FDCWD, "/tmp", 0666, TDM_LOG_ERROR, "trace"));
  /* a path longer than any: said, not silently dropped */
  static char longer[8192];
  memset(longer, 'a', sizeof longer - 1);
  memcpy(longer, "/tmp/", 5);
  assert_false(tdm__out_open(rt, &o, AT_FDCWD, longer, 0666, TDM_LOG_ERROR, "trace"));
  assert_true(test_log_has(&log, "File name too long"));
  tdm_runtime_destroy(rt);
}

/* ---- the cache directory ------------------------------------------------ */

/* Models are written 0600, and so is the writers' lock; the directory is
 * made 0700. */
static void test_cache_modes(void **state) {
  (void)state;
  char dir[64], cache[128], path[192];
  test_temp_dir(dir, sizeof dir);
  snprintf(cache, sizeof cache, "%s/made/here", dir);
  mode_t old = umask(0); /* the modes are Tandem's, not the umask's */
  test_log log;
  run_model_runtime(cache, &log);
  umask(old);
  assert_int_equal(mode_of(cache) & 07777, 0700);
  snprintf(path, sizeof path, "%s/made", dir);
  assert_int_equal(mode_of(path) & 07777, 0700);
  snprintf(path, sizeof path, "%s/perfmodel-v1-test-files.txt", cache);
  assert_int_equal(mode_of(path) & 07777, 0600);
  snprintf(path, sizeof path, "%s/perfmodel-v1-test-files.txt.lock", cache);
  assert_int_equal(mode_of(path) & 07777, 0600);
  assert_int_equal(count_files(cache), 2);
  assert_false(test_log_has(&log, "cache:"));
  remove_all(dir);
}

/* A directory others (or the group) may write to is not used: one
 * warning, nothing read, nothing written. */
static void test_cache_dir_writable_by_others(void **state) {
  (void)state;
  const mode_t modes[] = {0777, 0770, 0722};
  for (unsigned i = 0; i < 3; i++) {
    char dir[64], path[128];
    test_temp_dir(dir, sizeof dir);
    assert_int_equal(chmod(dir, modes[i]), 0);
    test_log log;
    run_model_runtime(dir, &log);
    assert_int_equal(occurrences(&log, "cache: not using"), 1);
    assert_true(test_log_has(&log, "running without a cache"));
    assert_int_equal(count_files(dir), 0);
    /* nor is a model put there read */
    snprintf(path, sizeof path, "%s/perfmodel-v1-test-files.txt", dir);
    write_text(path, "tandem-perfmodel 1\nend 0 0\n");
    run_model_runtime(dir, &log);
    assert_false(test_log_has(&log, "performance model:"));
    assert_int_equal(count_files(dir), 1);
    remove_all(dir);
  }
}

/* Files in the cache that others may write, links and FIFOs are not
 * read; a file that is the user's own and private is. */
static void test_cache_files_untrusted(void **state) {
  (void)state;
  char dir[64], path[128], victim[128];
  test_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/perfmodel-v1-test-files.txt", dir);
  test_log log;
  run_model_runtime(dir, &log); /* a good model */
  assert_int_equal(chmod(path, 0666), 0);
  run_model_runtime(dir, &log);
  assert_true(test_log_has(&log, "performance model: not reading perfmodel-v1-test-files.txt: writable by "
                                 "others (mode 666)"));
  assert_int_equal(mode_of(path) & 07777, 0600); /* replaced by a private one */
  run_model_runtime(dir, &log);
  assert_false(test_log_has(&log, "not reading"));

  /* a link to a model elsewhere: not followed, neither to read nor to
   * write (the save is refused and said) */
  snprintf(victim, sizeof victim, "%s.elsewhere", dir);
  assert_int_equal(rename(path, victim), 0);
  assert_int_equal(symlink(victim, path), 0);
  struct stat before, after;
  assert_int_equal(stat(victim, &before), 0);
  run_model_runtime(dir, &log);
  assert_true(test_log_has(&log, "not reading perfmodel-v1-test-files.txt: a symbolic link"));
  assert_true(test_log_has(&log, "refusing to write"));
  assert_int_equal(stat(victim, &after), 0);
  assert_int_equal(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  assert_int_equal(before.st_size, after.st_size);
  assert_true(S_ISLNK(mode_of(path)));
  unlink(victim);

  /* a link at the writers' lock: not followed either (the save goes on,
   * unmerged, and says so) */
  unlink(path);
  char lock[160];
  snprintf(lock, sizeof lock, "%s.lock", path);
  write_text(victim, "precious\n");
  unlink(lock);
  assert_int_equal(symlink(victim, lock), 0);
  run_model_runtime(dir, &log);
  assert_true(test_log_has(&log, "cannot lock perfmodel-v1-test-files.txt.lock"));
  assert_text(victim, "precious\n");
  assert_true(S_ISREG(mode_of(path)));
  unlink(lock);
  unlink(victim);

  /* a FIFO: the open does not block */
  unlink(path);
  assert_int_equal(mkfifo(path, 0600), 0);
  run_model_runtime(dir, &log);
  assert_true(test_log_has(&log, "not reading perfmodel-v1-test-files.txt: not a regular file"));
  remove_all(dir);
}

/* A cache path longer than any path is said, not silently dropped. */
static void test_cache_path_too_long(void **state) {
  (void)state;
  char dir[8192] = "/tmp/";
  memset(dir + 5, 'a', sizeof dir - 6);
  dir[sizeof dir - 1] = 0;
  test_log log;
  run_model_runtime(dir, &log);
  assert_true(test_log_has(&log, "File name too long"));
  assert_true(test_log_has(&log, "running without a cache"));
}

/* ---- concurrent writers --------------------------------------------------- */

enum { WRITERS = 8, ROUNDS = 50 };

static unsigned warnings_seen;
static void count_warnings(void *data, tdm_log_level level, const char *msg) {
  (void)data;
  if (level <= TDM_LOG_WARNING) {
    warnings_seen++;
    fprintf(stderr, "writer %d: %s\n", (int)getpid(), msg);
  }
}

/* One writer (a process of its own: this program run as "writer DIR ID"):
 * each round, as a runtime does, loads the models, learns one codelet of
 * its own and saves. Exits with the number of warnings. */
static void writer(const char *dir, int id) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.cache_dir = dir;
  cfg.log_fn = count_warnings;
  tdm_runtime *rt = NULL;
  if (tdm_runtime_create(&cfg, &rt) != TDM_OK)
    _exit(100);
  int fd = tdm__cache_fd(rt);
  for (int r = 0; r < ROUNDS && fd >= 0; r++) {
    tdm_perfmodel *m = tdm__model_new();
    tdm__model_load(m, fd, "perfmodel-v1-test-files.txt", rt);
    char name[32];
    snprintf(name, sizeof name, "w%d-r%d", id, r);
    for (int k = 0; k < 3; k++)
      tdm__model_observe(m, name, 64, "gpu", 1e-3 * (id + 1));
    if (tdm__model_save(m, fd, "perfmodel-v1-test-files.txt", rt) != TDM_OK)
      warnings_seen++;
    tdm__model_free(m);
  }
  if (fd < 0)
    warnings_seen++;
  tdm_runtime_destroy(rt);
  _exit((int)(warnings_seen > 99 ? 99 : warnings_seen));
}

static void test_concurrent_model_writers(void **state) {
  (void)state;
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  pid_t pids[WRITERS];
  for (int i = 0; i < WRITERS; i++) {
    char id[16];
    snprintf(id, sizeof id, "%d", i);
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) { /* exec: a fresh process may start threads (TSan) */
      execl("/proc/self/exe", "test-files", "writer", dir, id, (char *)NULL);
      _exit(101);
    }
  }
  for (int i = 0; i < WRITERS; i++) {
    int status;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0); /* no warning, no failed save */
  }
  char path[128];
  snprintf(path, sizeof path, "%s/perfmodel-v1-test-files.txt", dir);
  tdm_perfmodel *m = tdm__model_new();
  assert_int_equal(tdm__model_load(m, AT_FDCWD, path, NULL), TDM_OK);
  unsigned found = 0;
  for (int i = 0; i < WRITERS; i++)
    for (int r = 0; r < ROUNDS; r++) {
      char name[32];
      snprintf(name, sizeof name, "w%d-r%d", i, r);
      bool cal = false;
      double t = tdm__model_predict(m, name, 64, "gpu", &cal);
      found += cal && t > 0.999e-3 * (i + 1) && t < 1.001e-3 * (i + 1);
    }
  tdm__model_free(m);
  printf("%u of %d records kept, each with its 3 observations\n", found, WRITERS * ROUNDS);
  assert_int_equal(found, WRITERS * ROUNDS);
  assert_int_equal(count_files(dir), 2); /* the models and the lock */
  remove_all(dir);
}

/* ---- a second user ------------------------------------------------------- */

#define OTHER_UID 65534 /* "nobody": no file of the test is theirs */

/* Runs fn(arg) in a child process as the other user; waits for it. */
static void as_other_user(void (*fn)(const char *), const char *arg) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
      _exit(3);
    fn(arg);
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* The other user's part: a cache directory of theirs, writable by all, with
 * a model that says the device is a thousand times slower than it is. */
static void plant_cache(const char *dir) {
  if (mkdir(dir, 0777) != 0 || chmod(dir, 0777) != 0)
    _exit(4);
  char path[256];
  snprintf(path, sizeof path, "%s/perfmodel-v1-test-files.txt", dir);
  tdm_perfmodel *m = tdm__model_new();
  for (int k = 0; k < 5; k++) {
    tdm__model_observe(m, "work", 64, "sim:gpu", 1.0);
    tdm__model_observe(m, "work", 64, "cpu", 1e-3);
  }
  bool ok = tdm__model_save(m, AT_FDCWD, path, NULL) == TDM_OK && chmod(path, 0666) == 0;
  tdm__model_free(m);
  if (!ok)
    _exit(5);
}

static void test_other_users_cache(void **state) {
  (void)state;
  char base[64], dir[128], path[192];
  test_temp_dir(base, sizeof base);
  assert_int_equal(chmod(base, 0777), 0); /* a shared directory, as /tmp */
  snprintf(dir, sizeof dir, "%s/tandem", base);
  as_other_user(plant_cache, dir);
  snprintf(path, sizeof path, "%s/perfmodel-v1-test-files.txt", dir);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_uid, OTHER_UID);

  /* the victim's runtime, pointed there as XDG_CACHE_HOME=base would */
  test_log log;
  run_model_runtime(dir, &log);
  assert_true(test_log_has(&log, "cache: not using"));
  assert_true(test_log_has(&log, "owned by uid 65534"));
  assert_false(test_log_has(&log, "performance model:"));
  assert_int_equal(count_files(dir), 2); /* the planted model and its lock */
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_uid, OTHER_UID); /* not replaced either */

  /* a file of the other user's in the victim's own directory (copied in
   * with its owner, say) is not read, and is replaced */
  char mine[128], their[192];
  snprintf(mine, sizeof mine, "%s/mine", base);
  run_model_runtime(mine, &log);
  snprintf(their, sizeof their, "%s/perfmodel-v1-test-files.txt", mine);
  assert_int_equal(chown(their, OTHER_UID, OTHER_UID), 0);
  run_model_runtime(mine, &log);
  assert_true(test_log_has(&log, "not reading perfmodel-v1-test-files.txt: owned by uid 65534"));
  assert_int_equal(stat(their, &st), 0);
  assert_int_equal(st.st_uid, geteuid());
  remove_all(mine);
  remove_all(dir);
  remove_all(base);
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "writer"))
    writer(argv[2], atoi(argv[3]));
  if (argc > 1 && !strcmp(argv[1], "two-users")) {
    if (geteuid() != 0) {
      printf("needs root to act as a second user: skipped\n");
      return 77;
    }
    if (!test_other_user_can_write("/tmp", OTHER_UID)) {
      printf("uid %d cannot write in /tmp here (a path above it is closed): skipped\n",
             OTHER_UID);
      return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_other_users_cache)};
    return cmocka_run_group_tests(tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_and_graph_through_links),
      cmocka_unit_test(test_predictable_temporary_names),
      cmocka_unit_test(test_device_at_the_final_name),
      cmocka_unit_test(test_cache_modes),
      cmocka_unit_test(test_cache_dir_writable_by_others),
      cmocka_unit_test(test_cache_files_untrusted),
      cmocka_unit_test(test_cache_path_too_long),
      cmocka_unit_test(test_concurrent_model_writers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
