/*
 * The on-disk cache of OpenCL program binaries, and building programs, on
 * PoCL (integrated or discrete, as test-opencl-run):
 *
 *   test-opencl-cache integrated | discrete [two-users]
 *
 * Entries reused, corrupt, truncated and forged (a binary is code: one
 * made for another key or by another user is never loaded); a kernel that
 * does not build, with hints for a wrong kernel name or arguments;
 * programs built ahead of time off the submitting thread. Exits 77 (skip)
 * where no OpenCL CPU device is installed; two-users needs root.
 */
#include "opencl-fixture.h"

#include <dirent.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the on-disk program cache ------------------------------------------ */

/* Runs one saxpy (y = x + y, x = y = 1) with `cl` on the device in a new
 * runtime; returns y, which every element holds, and the log. */
static float saxpy_with(const tdm_codelet *cl, test_log *log) {
  tdm_runtime *rt = device_runtime(log, 1);
  float *x = array(1, 0), *y = array(1, 0);
  tdm_handle *hx = vector_of(rt, x), *hy = vector_of(rt, y);
  saxpy(rt, cl, hx, hy, 1.0f);
  tdm_runtime_destroy(rt);
  float v = y[0];
  for (int i = 0; i < N; i++)
    assert_true(y[i] == v);
  tdm_free(x);
  tdm_free(y);
  return v;
}

static void one_saxpy(test_log *log) {
  assert_true(saxpy_with(&saxpy_gpu_only, log) == 2.0f);
}

/* The one entry of the (fresh) cache directory. */
static void the_entry_in(const char *dir, char *path, size_t size) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".clbin")) {
      snprintf(path, size, "%s/%s", dir, e->d_name);
      n++;
    }
  closedir(d);
  assert_int_equal(n, 1);
}

static void the_entry(char *path, size_t size) {
  the_entry_in(cache_dir, path, size);
}

/* ---- forged entries: a binary cache is code ------------------------------
 * An entry is "TDMCLBIN", u32 version, u32 key length, the key, u64 binary
 * size, u64 FNV-1a of the binary, the binary (backends/opencl/cache.c).
 * Anyone who can write an entry can make it valid: the key is no secret
 * and the checksum authenticates nothing. What keeps another user's code
 * out is that Tandem reads only entries nobody else could have written. */

/* The same kernel, name and arguments, that writes 666 everywhere. */
static const tdm_opencl_variant evil_cl = {
    .source = "__kernel void saxpy(__global const float *x, ulong nx,\n"
              "                    __global float *y, ulong ny, float a) {\n"
              "  y[get_global_id(0)] = 666.0f;\n"
              "}\n",
    .kernel = "saxpy"};
static const tdm_codelet evil = {
    .name = "evil", .nbuffers = 2, .modes = {TDM_R, TDM_RW}, .opencl = &evil_cl};

typedef struct entry_file {
  unsigned char *bytes;
  size_t size;
  size_t key_at, key_len, bin_at, bin_len;
} entry_file;

static entry_file read_entry(const char *path) {
  entry_file e = {0};
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  e.size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  e.bytes = malloc(e.size);
  assert_non_null(e.bytes);
  assert_int_equal(fread(e.bytes, 1, e.size, f), e.size);
  fclose(f);
  uint32_t klen;
  uint64_t blen;
  memcpy(&klen, e.bytes + 12, 4);
  e.key_at = 16;
  e.key_len = klen;
  memcpy(&blen, e.bytes + 16 + klen, 8);
  e.bin_at = 16 + klen + 16;
  e.bin_len = blen;
  assert_int_equal(e.bin_at + e.bin_len, e.size);
  return e;
}

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* A valid entry for `victim`'s key holding `code`'s binary, at path, with
 * the given mode. */
static void forge(const char *path, const entry_file *victim, const entry_file *code,
                  mode_t mode) {
  unlink(path);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  uint64_t blen = code->bin_len, h = fnv1a(code->bytes + code->bin_at, code->bin_len);
  fwrite(victim->bytes, 1, victim->key_at + victim->key_len, f); /* header and key */
  fwrite(&blen, 8, 1, f);
  fwrite(&h, 8, 1, f);
  fwrite(code->bytes + code->bin_at, 1, code->bin_len, f);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(path, mode), 0);
}

/* Fills *victim with the saxpy entry of cache_dir and *code with the
 * entry of the evil kernel, built in a directory of its own. */
static void victim_and_code(entry_file *victim, entry_file *code, char *path, size_t size) {
  test_log log;
  one_saxpy(&log);
  the_entry(path, size);
  *victim = read_entry(path);
  char keep[sizeof cache_dir], other[512];
  snprintf(keep, sizeof keep, "%s", cache_dir);
  snprintf(cache_dir, sizeof cache_dir, "%.100s-evil", keep);
  assert_true(saxpy_with(&evil, &log) == 666.0f);
  the_entry(other, sizeof other);
  *code = read_entry(other);
  test_remove_dir(cache_dir);
  snprintf(cache_dir, sizeof cache_dir, "%s", keep);
}

/* A forged entry of the user's own is run (that is what a binary cache
 * is); the same entry writable by others, or behind a link, is not. */
static void test_forged_entries(void **state) {
  (void)state;
  char sub[sizeof cache_dir], path[512], elsewhere[600];
  snprintf(sub, sizeof sub, "%s", cache_dir);
  if (snprintf(cache_dir, sizeof cache_dir, "%.100s/f", sub) < 0)
    fail();
  entry_file victim, code;
  victim_and_code(&victim, &code, path, sizeof path);
  test_log log;

  forge(path, &victim, &code, 0600);
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 666.0f); /* the threat is real */
  assert_true(test_log_has(&log, "from the cache"));

  forge(path, &victim, &code, 0666); /* anyone could have written it */
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 2.0f);
  assert_true(test_log_has(&log, "not reading"));
  assert_true(test_log_has(&log, "writable by others"));
  assert_true(test_log_has(&log, "OpenCL cache: wrote")); /* replaced */
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 2.0f);
  assert_true(test_log_has(&log, "from the cache"));

  snprintf(elsewhere, sizeof elsewhere, "%s.forged", sub);
  forge(elsewhere, &victim, &code, 0600);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(symlink(elsewhere, path), 0); /* a link to it */
  struct stat before;
  assert_int_equal(stat(elsewhere, &before), 0);
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 2.0f);
  assert_true(test_log_has(&log, "not reading"));
  assert_true(test_log_has(&log, "a symbolic link"));
  /* nor written through: the rebuilt program is not stored over it */
  assert_true(test_log_has(&log, "OpenCL cache: refusing to write"));
  assert_int_equal(stat(elsewhere, &st), 0);
  assert_int_equal(st.st_size, before.st_size);
  assert_int_equal(st.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  unlink(elsewhere);

  free(victim.bytes);
  free(code.bytes);
  test_remove_dir(cache_dir);
  snprintf(cache_dir, sizeof cache_dir, "%s", sub);
}

/* ---- a second user (as root: a child that drops to uid 65534) ---------- */


static entry_file planted_victim, planted_code;
static char planted_dir[sizeof cache_dir], planted_name[64];

/* The other user: a cache directory of theirs, open to all, holding a
 * forged entry for the victim's program. */
static void plant(void) {
  char path[512];
  if (mkdir(planted_dir, 0777) != 0 || chmod(planted_dir, 0777) != 0)
    _exit(4);
  /* the entry's name is no secret: the hash of a key anyone can form */
  snprintf(path, sizeof path, "%s/%s", planted_dir, planted_name);
  forge(path, &planted_victim, &planted_code, 0644);
}

static void test_other_users_entries(void **state) {
  (void)state;
  char sub[sizeof cache_dir], path[512];
  snprintf(sub, sizeof sub, "%s", cache_dir);
  if (snprintf(cache_dir, sizeof cache_dir, "%.100s/u", sub) < 0)
    fail();
  victim_and_code(&planted_victim, &planted_code, path, sizeof path);
  snprintf(planted_name, sizeof planted_name, "%s", strrchr(path, '/') + 1);
  assert_int_equal(chmod(sub, 0777), 0); /* a shared directory, as /tmp */

  /* the other user's directory, as XDG_CACHE_HOME=/tmp would give */
  if (snprintf(planted_dir, sizeof planted_dir, "%.100s/theirs", sub) < 0)
    fail();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
      _exit(3);
    plant();
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char to[600];
  snprintf(to, sizeof to, "%s/%s", planted_dir, planted_name);
  struct stat st;
  assert_int_equal(stat(to, &st), 0);
  assert_int_equal(st.st_uid, OTHER_UID);
  char keep[sizeof cache_dir];
  snprintf(keep, sizeof keep, "%s", cache_dir);
  snprintf(cache_dir, sizeof cache_dir, "%s", planted_dir);
  test_log log;
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 2.0f);
  assert_true(test_log_has(&log, "cache: not using"));
  assert_true(test_log_has(&log, "owned by uid 65534"));
  assert_false(test_log_has(&log, "from the cache"));
  snprintf(cache_dir, sizeof cache_dir, "%s", keep);

  /* the other user's entry in the victim's own directory */
  assert_int_equal(unlink(path), 0);
  assert_int_equal(rename(to, path), 0);
  assert_int_equal(lchown(path, OTHER_UID, OTHER_UID), 0);
  assert_true(saxpy_with(&saxpy_gpu_only, &log) == 2.0f);
  assert_true(test_log_has(&log, "not reading"));
  assert_true(test_log_has(&log, "owned by uid 65534"));
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_uid, geteuid()); /* replaced by the victim's own */

  free(planted_victim.bytes);
  free(planted_code.bytes);
  test_remove_dir(cache_dir);
  rmdir(planted_dir);
  snprintf(cache_dir, sizeof cache_dir, "%s", sub);
}

static void test_program_cache(void **state) {
  (void)state;
  char sub[sizeof cache_dir], path[512];
  /* in a directory of its own, created on first use */
  snprintf(sub, sizeof sub, "%s", cache_dir);
  if (snprintf(cache_dir, sizeof cache_dir, "%.100s/c", sub) < 0)
    fail();
  test_log log;
  one_saxpy(&log);
  assert_true(test_log_has(&log, "OpenCL cache: wrote"));
  assert_false(test_log_has(&log, "from the cache"));
  struct stat st;
  assert_int_equal(stat(cache_dir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  the_entry(path, sizeof path);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  off_t full = st.st_size;

  /* the second run reuses it */
  one_saxpy(&log);
  assert_true(test_log_has(&log, "from the cache"));
  assert_false(test_log_has(&log, "OpenCL cache: wrote"));

  /* a corrupt entry is ignored, said, and replaced */
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, -10, SEEK_END), 0);
  int c = fgetc(f);
  assert_int_equal(fseek(f, -10, SEEK_END), 0);
  fputc(c ^ 0xff, f);
  fclose(f);
  one_saxpy(&log);
  assert_true(test_log_has(&log, "corrupt (checksum)"));
  assert_true(test_log_has(&log, "OpenCL cache: wrote"));
  one_saxpy(&log);
  assert_true(test_log_has(&log, "from the cache"));

  /* so is a truncated one */
  assert_int_equal(truncate(path, full / 2), 0);
  one_saxpy(&log);
  assert_true(test_log_has(&log, "truncated"));
  assert_true(test_log_has(&log, "OpenCL cache: wrote"));
  one_saxpy(&log);
  assert_true(test_log_has(&log, "from the cache"));
  assert_int_equal(test_log_errors(&log), 0);

  test_remove_dir(cache_dir); /* the entry and the performance models */
  snprintf(cache_dir, sizeof cache_dir, "%s", sub);
}

static void test_build_failure(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  static const tdm_opencl_variant broken = {
      .source = "__kernel void broken(__global float *y, ulong n) { y[0] = ; }\n",
      .kernel = "broken"};
  static const tdm_codelet only = {
      .name = "broken", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &broken};
  float *y = array(1, 0), *x = array(1, 0), *z = array(1, 0);
  tdm_handle *hy, *hx, *hz;
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, z, N, sizeof(float), &hz), TDM_OK);
  /* the build happens off this thread: the task ends with the failure */
  tdm_task *t;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &only, .handles = {hz}}, &t),
                   TDM_OK);
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  assert_int_equal(tdm_task_wait(t), TDM_ERR_BUILD);
  tdm_task_release(t);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  /* once the failure is known, a submission says so at once */
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &only, .handles = {hz}}),
                   TDM_ERR_BUILD);
  assert_int_equal(tdm_handle_unregister(hz), TDM_ERR_LOST); /* never written */
  /* the build log reached the log callback */
  assert_true(test_log_has(&log, "building kernel broken"));
  assert_true(test_log_has(&log, "build log:"));
  assert_true(test_log_has(&log, "error"));
  /* with a CPU variant the task runs there */
  static const tdm_codelet with_cpu = {.name = "broken with CPU",
                                       .cpu_fn = saxpy_cpu,
                                       .nbuffers = 2,
                                       .modes = {TDM_R, TDM_RW},
                                       .opencl = &broken};
  unsigned errors = test_log_errors(&log), messages = test_log_count(&log);
  saxpy(rt, &with_cpu, hx, hy, 1.0f);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_true(y[0] == 2.0f);
  /* the failure was told once, when it happened */
  assert_int_equal(test_log_errors(&log), errors);
  assert_int_equal(test_log_count(&log), messages);
  run_end(rt, x, y);
  tdm_free(z);
}

/* A misspelt kernel name: the error's name and the kernels the program
 * does define reach the log, and the task fails (its output untouched).
 * Its program is in the cache (the same source, built for the right
 * name): the cached binary is not blamed for the name. */
static void test_kernel_name_hint(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
#define TWO_KERNELS                                                          \
  "__kernel void brighten(__global float *y, ulong n) { y[0] = 1; }\n"      \
  "__kernel void contrast(__global float *y, ulong n) { y[0] = 2; }\n"
  static const tdm_opencl_variant right = {.source = TWO_KERNELS, .kernel = "brighten"};
  static const tdm_opencl_variant misspelt = {.source = TWO_KERNELS, .kernel = "brigthen"};
  static const tdm_codelet right_cl = {
      .name = "right", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &right};
  static const tdm_codelet only = {
      .name = "misspelt", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &misspelt};
  float *y = array(5.0f, 0), *z = array(0, 0);
  tdm_handle *hy, *hz;
  assert_int_equal(tdm_register_vector(rt, z, N, sizeof(float), &hz), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &right_cl, .handles = {hz}}),
                   TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK); /* its binary cached */
  assert_int_equal(tdm_handle_unregister(hz), TDM_OK);
  tdm_free(z);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &only, .handles = {hy}}), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  assert_true(test_log_has(&log, "CL_INVALID_KERNEL_NAME, error -46"));
  assert_true(test_log_has(&log, "the program defines no kernel brigthen; it defines"));
  assert_true(test_log_has(&log, "brighten"));
  assert_true(test_log_has(&log, "contrast"));
  assert_false(test_log_has(&log, "build log:")); /* empty: not shown */
  assert_false(test_log_has(&log, "refused a cached binary"));
  /* the failed write's version is lost; the memory keeps what it held */
  assert_int_equal(tdm_handle_unregister(hy), TDM_ERR_LOST);
  assert_true(y[0] == 5.0f && y[N - 1] == 5.0f);
  tdm_runtime_destroy(rt);
  tdm_free(y);
}

/* A kernel whose argument list is not what Tandem passes (it forgot the
 * vector's length and the by-value arguments): found before it is
 * launched, the count the kernel declares against the count passed, and
 * both lists; the task fails (TDM_ERR_KERNEL), its output untouched.
 * Every kind of mismatch: test-opencl-kernels. */
static void test_argument_hint(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  static const tdm_opencl_variant short_list = {
      .source = "__kernel void fill(__global float *y) { y[get_global_id(0)] = 1; }\n",
      .kernel = "fill"};
  static const tdm_codelet only = {
      .name = "short list", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &short_list};
  float *y = array(5.0f, 0);
  tdm_handle *hy;
  double scale = 2;
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &only, .handles = {hy},
                                                   .args = &scale, .args_size = sizeof scale}),
                   TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_ERR_TASK_FAILED);
  assert_true(test_log_has(&log, "first failed: short list (ERR_KERNEL)"));
  assert_true(test_log_has(&log, "codelet short list, kernel fill, on device"));
  assert_true(test_log_has(&log, "declares 1 parameters where Tandem passes 3"));
  char want[128];
  snprintf(want, sizeof want, "(__global T0 *v0 /* %d elements of 4 bytes */, ulong n0, "
           "struct args /* 8 bytes, by value */)", N);
  assert_true(test_log_has(&log, want));
  /* the failed write's version is lost; the memory keeps what it held */
  assert_int_equal(tdm_handle_unregister(hy), TDM_ERR_LOST);
  assert_true(y[0] == 5.0f && y[N - 1] == 5.0f);
  tdm_runtime_destroy(rt);
  tdm_free(y);
}

static _Atomic int builds_done, build_status = 1;

static void on_built(void *data, tdm_status st) {
  (void)data;
  atomic_store(&build_status, st);
  atomic_fetch_add(&builds_done, 1);
}

/* The first submission of a codelet whose program is in no cache returns
 * at once: the program builds on the runtime's thread while the task
 * waits for it on the device. tdm_codelet_build builds ahead of time and
 * says when it is done. */
static void test_build_off_the_submitter(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  /* a source no cache holds: this run's own */
  static char source[256];
  snprintf(source, sizeof source,
           "/* %ld %d */ __kernel void twice(__global float *y, ulong n) {\n"
           "  y[get_global_id(0)] *= 2.0f;\n}\n",
           (long)time(NULL), (int)getpid());
  static tdm_opencl_variant twice_cl = {.kernel = "twice"};
  twice_cl.source = source;
  static const tdm_codelet twice = {
      .name = "twice", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &twice_cl};
  float *y = array(1, 1);
  tdm_handle *hy;
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  tdm_task *t;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &twice, .handles = {hy}}, &t),
                   TDM_OK);
  double t0 = now_s();
  assert_int_equal(tdm_task_submit(t), TDM_OK);
  double submitted = now_s() - t0;
  assert_int_equal(tdm_task_wait(t), TDM_OK);
  double ended = now_s() - t0;
  tdm_task_release(t);
  printf("first submission of an uncached codelet: returned in %.3f ms, the task ended after "
         "%.0f ms (its build)\n", 1e3 * submitted, 1e3 * ended);
  assert_true(submitted < ended / 10); /* the build was not on this thread */
  assert_int_equal(tdm_handle_acquire(hy, TDM_R), TDM_OK);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == 2 * (1 + (float)(i % 100)));
  assert_int_equal(tdm_handle_release(hy), TDM_OK);

  /* ahead of time: built (from the cache now), then a broken one, then
   * nothing to build */
  atomic_store(&builds_done, 0);
  assert_int_equal(tdm_codelet_build(rt, &twice, on_built, NULL), TDM_OK);
  for (int i = 0; i < 5000 && !atomic_load(&builds_done); i++)
    sleep_ms(1);
  assert_int_equal(atomic_load(&builds_done), 1);
  assert_int_equal(atomic_load(&build_status), TDM_OK);
  static const tdm_opencl_variant broken_cl = {.source = "__kernel void b( { }\n",
                                               .kernel = "b"};
  static const tdm_codelet broken = {.name = "b", .nbuffers = 1, .modes = {TDM_RW},
                                     .opencl = &broken_cl};
  assert_int_equal(tdm_codelet_build(rt, &broken, on_built, NULL), TDM_OK);
  for (int i = 0; i < 10000 && atomic_load(&builds_done) < 2; i++)
    sleep_ms(1);
  assert_int_equal(atomic_load(&builds_done), 2);
  assert_int_equal(atomic_load(&build_status), TDM_ERR_BUILD);
  assert_int_equal(tdm_codelet_build(rt, &saxpy_cpu_only, on_built, NULL), TDM_OK);
  assert_int_equal(atomic_load(&builds_done), 3); /* at once */
  assert_int_equal(atomic_load(&build_status), TDM_OK);
  assert_int_equal(tdm_codelet_build(NULL, &twice, on_built, NULL), TDM_ERR_INVALID_ARG);
  assert_int_equal(tdm_codelet_build(rt, NULL, on_built, NULL), TDM_ERR_INVALID_ARG);
  /* a build asked for and never waited for: destroy waits for it */
  static tdm_opencl_variant late_cl = {.kernel = "late"};
  static char late_src[128];
  snprintf(late_src, sizeof late_src, "/* %d */ __kernel void late(__global float *y, ulong n) {}\n",
           (int)getpid() + 1);
  late_cl.source = late_src;
  static const tdm_codelet late = {.name = "late", .nbuffers = 1, .modes = {TDM_RW},
                                   .opencl = &late_cl};
  assert_int_equal(tdm_codelet_build(rt, &late, on_built, NULL), TDM_OK);
  tdm_handle_unregister(hy);
  tdm_runtime_destroy(rt);
  assert_int_equal(atomic_load(&builds_done), 4); /* told before destroy returned */
  tdm_free(y);
}


int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_program_cache),
      cmocka_unit_test(test_forged_entries),
      cmocka_unit_test(test_build_failure),
      cmocka_unit_test(test_kernel_name_hint),
      cmocka_unit_test(test_argument_hint),
      cmocka_unit_test(test_build_off_the_submitter),
  };
  const struct CMUnitTest users[] = {cmocka_unit_test(test_other_users_entries)};
  return opencl_fixture_main(argc, argv, "test-opencl-cache", tests, sizeof tests / sizeof *tests,
                             NULL, 0, users, 1);
}
