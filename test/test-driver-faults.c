/*
 * A driver that fails however real drivers do: each OpenCL entry point
 * Tandem uses to run tasks x each way a failure shows (a returned error,
 * an event that fails and says so everywhere, a failure only the event's
 * callback tells, a failed event whose dependents never run, a command
 * that never completes) x onset (the first call, a later one), with a
 * codelet that has a CPU variant too (mixed) and one that runs on OpenCL
 * alone, over vectors and over matrices whose rows are padded (so that
 * copies go by rectangles), on PoCL as an integrated or a discrete
 * device. Every case must
 * end exact (every vector holds what the sequential run gives) or told
 * (tdm_wait_all or tdm_handle_unregister says it failed; a handle whose
 * unregister says TDM_OK must hold the exact result), within a time
 * limit: never a wrong result reported as success, never a hang.
 *
 *   test-driver-faults integrated|discrete|two [MODE [ENTRY]]
 *
 * "two": two discrete PoCL devices (POCL_DEVICES="pthread pthread") in
 * one context, the data moving between them straight: the entry point
 * that copies between them (clEnqueueCopyBuffer) fails.
 *
 * Each case runs in a child process (the parent never touches OpenCL),
 * which the parent kills at the time limit. The failing driver is
 * failing-opencl.c, a loader over the real one. SKIP (77) without an
 * OpenCL CPU device.
 */
#include "common.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>

#include "tandem/opencl.h"

#include "failing-opencl.h"
#include "internal.h" /* rt->blind_to_events: the mutation check */

#define NVEC 32 /* handles: the first half vectors, the rest matrices */
#define STEPS 8
#define N 1024
#define ROWS 32
#define COLS 30
#define LD 32
#define CASE_LIMIT 30 /* s: past it, the case hung */

static bool discrete;
static bool two; /* two devices, copies between them */
static bool blind; /* the mutation: Tandem blind to events' failures */
static char cache_dir[128]; /* a fresh one per run of this program */
static const char *only_mode, *only_entry;

static void inc_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)args;
  (void)size;
  int *v = b[0].ptr;
  for (size_t r = 0; r < b[0].nx; r++)
    for (size_t c = 0; c < b[0].ny; c++)
      v[r * b[0].ld + c] += 1;
}

static const tdm_opencl_variant inc_cl = {
    .source = "__kernel void inc(__global int *v, ulong n) {\n"
              "  size_t i = get_global_id(0);\n"
              "  if (i < n) v[i] += 1;\n"
              "}\n",
    .kernel = "inc"};
static const tdm_opencl_variant incm_cl = {
    .source = "__kernel void incm(__global int *m, ulong rows, ulong cols, ulong ld) {\n"
              "  size_t c = get_global_id(0), r = get_global_id(1);\n"
              "  if (r < rows && c < cols) m[r * ld + c] += 1;\n"
              "}\n",
    .kernel = "incm"};
/* [matrix][device only] */
static const tdm_codelet codelets[2][2] = {
    {{.name = "inc_mixed", .nbuffers = 1, .modes = {TDM_RW}, .cpu_fn = inc_cpu, .opencl = &inc_cl},
     {.name = "inc_device", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &inc_cl}},
    {{.name = "incm_mixed", .nbuffers = 1, .modes = {TDM_RW}, .cpu_fn = inc_cpu,
      .opencl = &incm_cl},
     {.name = "incm_device", .nbuffers = 1, .modes = {TDM_RW}, .opencl = &incm_cl}}};

enum { EXACT, TOLD, WRONG, HANG, NODEV };
static const char *const outcome_name[] = {"exact", "told", "WRONG", "HANG", "no device"};

typedef struct fault_case {
  const char *entry;
  int mode;
  unsigned onset;
  bool device_only;
  bool slow; /* the slow kernel instead (test_slow_kernel_taken_as_hung) */
} fault_case;

/* A kernel that runs for a while (loop iterations in args), then adds 1;
 * its CPU twin adds 1 at once. */
static const tdm_opencl_variant slow_cl = {
    .source = "__kernel void slow(__global int *v, ulong n, uint iters) {\n"
              "  size_t i = get_global_id(0);\n"
              "  uint x = (uint)i;\n"
              "  for (uint k = 0; k < iters; k++) x = x * 1664525u + 1013904223u;\n"
              "  if (i < n) v[i] += 1 + (x == 0x9e3779b9u && iters == 7u);\n"
              "}\n",
    .kernel = "slow"};
static const tdm_codelet slow_mixed = {.name = "slow", .nbuffers = 1, .modes = {TDM_RW},
                                       .cpu_fn = inc_cpu, .opencl = &slow_cl};

/* The slow kernel on the device, its watchdog limit far shorter: the
 * device is taken as hung while the kernel still runs, and the kernel's
 * write lands after Tandem has given the try up. WRONG if a handle said
 * TDM_OK and does not hold one increment once the kernel had time to
 * land; else TOLD or EXACT. */
static int run_slow(void) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.opencl_cpu_devices = 1;
  cfg.device_memory = discrete ? TDM_MEMORY_SEPARATE : TDM_MEMORY_SHARED;
  cfg.scheduler = "eager";
  cfg.cache_dir = cache_dir;
  cfg.watchdog_uncalibrated = 0.05;
  cfg.watchdog_min = 0.05;
  test_log_if_asked(&cfg);
  tdm_runtime *rt = NULL;
  if (tdm_runtime_create(&cfg, &rt) != TDM_OK)
    return NODEV;
  tdm_codelet_build(rt, &slow_mixed, NULL, NULL);
  static int v[N];
  tdm_handle *h;
  if (tdm_register_vector(rt, v, N, sizeof(int), &h) != TDM_OK)
    return NODEV;
  unsigned iters = 400000; /* about half a second on two cores */
  bool told = false;
  /* eager: the idle device takes the first task */
  if (tdm_submit(rt, &(tdm_task_desc){.codelet = &slow_mixed, .handles = {h}, .args = &iters,
                                      .args_size = sizeof iters}) != TDM_OK)
    told = true;
  told |= tdm_wait_all(rt) != TDM_OK;
  told |= tdm_handle_unregister(h) != TDM_OK;
  sleep_ms(2000); /* the kernel, still running on the device given up, lands */
  int wrong = 0;
  for (int j = 0; j < N; j++)
    wrong += v[j] != 1;
  tdm_status destroyed = tdm_runtime_destroy(rt);
  if (destroyed != TDM_OK && destroyed != TDM_ERR_DEVICE_LOST)
    return WRONG;
  return told ? TOLD : wrong ? WRONG : EXACT;
}

static const char *const mode_name[] = {"", "return", "event", "callback", "stall", "never"};

/* The child: runs the workload through the failing driver; exits with
 * its outcome, having written to `out` how many calls the driver failed. */
static int run_case(const fault_case *c, int out) {
  if (c->slow) {
    unsigned none = 0;
    return write(out, &none, sizeof none) == sizeof none ? run_slow() : WRONG;
  }
  void *drv = dlopen(TDM_FAILING_OPENCL, RTLD_NOW | RTLD_LOCAL);
  if (!drv)
    return NODEV;
  void (*set)(const char *, int, unsigned, unsigned);
  unsigned (*failed)(void);
  *(void **)&set = dlsym(drv, "failcl_set");
  *(void **)&failed = dlsym(drv, "failcl_failed");
  if (!set || !failed)
    return NODEV;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.opencl_library = TDM_FAILING_OPENCL;
  cfg.opencl_cpu_devices = 1;
  cfg.device_memory = discrete ? TDM_MEMORY_SEPARATE : TDM_MEMORY_SHARED;
  cfg.scheduler = "eager";
  cfg.cache_dir = cache_dir;
  /* a command that never ends: caught by the watchdog's limit for an
   * uncalibrated try, 1 s here */
  cfg.watchdog_uncalibrated = 1;
  cfg.watchdog_min = 0.2;
  test_log_if_asked(&cfg);
  if (getenv("TEST_LOG") && atoi(getenv("TEST_LOG")) > 1)
    cfg.log_level = TDM_LOG_DEBUG;
  tdm_runtime *rt = NULL;
  if (tdm_runtime_create(&cfg, &rt) != TDM_OK)
    return NODEV;
  rt->blind_to_events = blind;
  tdm_machine_info mi = {.struct_size = sizeof mi};
  if (tdm_runtime_machine(rt, &mi) != TDM_OK || !mi.device_workers) {
    tdm_runtime_destroy(rt);
    return NODEV;
  }
  /* built before the fault is set: the driver's failures, not a build's */
  for (int m = 0; m < 2; m++)
    tdm_codelet_build(rt, &codelets[m][c->device_only], NULL, NULL);
  set(c->entry, c->mode, c->onset, 1);
  static int v[NVEC][N];
  tdm_handle *h[NVEC];
  bool told = false;
  for (int i = 0; i < NVEC; i++)
    if ((i < NVEC / 2 ? tdm_register_vector(rt, v[i], N, sizeof(int), &h[i])
                      : tdm_register_matrix(rt, v[i], LD, ROWS, COLS, sizeof(int), &h[i])) !=
        TDM_OK)
      return NODEV;
  for (int s = 0; s < STEPS; s++)
    for (int i = 0; i < NVEC; i++)
      if (tdm_submit(rt, &(tdm_task_desc){.codelet = &codelets[i >= NVEC / 2][c->device_only],
                                          .handles = {h[i]}}) != TDM_OK)
        told = true;
  if (tdm_wait_all(rt) != TDM_OK)
    told = true;
  int wrong = 0;
  for (int i = 0; i < NVEC; i++) {
    if (tdm_handle_unregister(h[i]) != TDM_OK) {
      told = true;
      continue;
    }
    int was = wrong;
    for (int j = 0; j < N; j++) /* a matrix's padding is never written */
      wrong += v[i][j] != (i < NVEC / 2 || j % LD < COLS ? STEPS : 0);
    if (wrong > was && getenv("TEST_LOG"))
      fprintf(stderr, "vector %d: %d wrong, the first element %d\n", i, wrong - was, v[i][0]);
  }
  /* TDM_ERR_DEVICE_LOST: destroyed, a hung device's commands left behind */
  tdm_status destroyed = tdm_runtime_destroy(rt);
  if (destroyed != TDM_OK && destroyed != TDM_ERR_DEVICE_LOST)
    return WRONG;
  unsigned n = failed();
  if (write(out, &n, sizeof n) != sizeof n)
    return WRONG;
  if (getenv("TEST_LOG"))
    fprintf(stderr, "case %s %s onset %u: %u calls failed, %d wrong\n", c->entry,
            mode_name[c->mode], c->onset, failed(), wrong);
  return wrong ? WRONG : told ? TOLD : EXACT;
}

/* Runs c in a child, killed at the limit; *failed: the calls the driver
 * failed. */
static int run_child(const fault_case *c, double *took, unsigned *failed) {
  double t0 = now_s();
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    _exit(run_case(c, fds[1]));
  }
  close(fds[1]);
  *failed = 0;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (now_s() - t0 > CASE_LIMIT) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      *took = now_s() - t0;
      close(fds[0]);
      return HANG;
    }
    sleep_ms(10);
  }
  *took = now_s() - t0;
  if (read(fds[0], failed, sizeof *failed) != sizeof *failed)
    *failed = 0;
  close(fds[0]);
  if (!WIFEXITED(status)) {
    fprintf(stderr, "case %s %s: the child died (signal %d)\n", c->entry, mode_name[c->mode],
            WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return WRONG;
  }
  int code = WEXITSTATUS(status);
  if (code > NODEV)
    fprintf(stderr, "case %s %s: the child exited with %d\n", c->entry, mode_name[c->mode],
            code);
  return code <= NODEV ? code : WRONG;
}

/* The entry points a device task goes through on this kind of device
 * (clCreateBuffer and clSetEventCallback fail by returning an error
 * only). clEnqueueMarkerWithWaitList is used only before an
 * application's own enqueue function, and to read a device's clock when
 * recording a trace: not here. */
static const char *const entries_discrete[] = {
    "clEnqueueNDRangeKernel",   "clEnqueueWriteBuffer",    "clEnqueueReadBuffer",
    "clEnqueueWriteBufferRect", "clEnqueueReadBufferRect", "clCreateBuffer",
    "clSetEventCallback"};
static const char *const entries_two[] = {"clEnqueueCopyBuffer"};
static const char *const entries_integrated[] = {"clEnqueueNDRangeKernel", "clEnqueueMapBuffer",
                                                 "clEnqueueUnmapMemObject", "clCreateBuffer",
                                                 "clSetEventCallback"};

static bool return_only(const char *entry) {
  return !strcmp(entry, "clCreateBuffer") || !strcmp(entry, "clSetEventCallback");
}

static int nodev;

static void run_mode(int mode) {
  if (only_mode && strcmp(only_mode, mode_name[mode]))
    skip();
  const char *const *entries = two ? entries_two : discrete ? entries_discrete : entries_integrated;
  size_t nentries = two        ? sizeof entries_two / sizeof *entries_two
                    : discrete ? sizeof entries_discrete / sizeof *entries_discrete
                               : sizeof entries_integrated / sizeof *entries_integrated;
  int bad = 0, unreached = 0;
  for (size_t e = 0; e < nentries; e++) {
    if (only_entry && strcmp(only_entry, entries[e]))
      continue;
    if (return_only(entries[e]) && mode != FAILCL_RETURN)
      continue; /* it has no event */
    unsigned reached = 0;
    for (unsigned onset = 0; onset <= 10; onset += 10)
      for (int dev_only = 0; dev_only < 2; dev_only++) {
        fault_case c = {.entry = entries[e], .mode = mode, .onset = onset, .device_only = dev_only};
        double took;
        unsigned failed;
        int r = run_child(&c, &took, &failed);
        if (r == NODEV) {
          nodev = 1;
          skip();
        }
        printf("%-26s %-8s onset %-2u %-7s %-6s %u failed  %.2f s\n", c.entry,
               mode_name[mode], onset, dev_only ? "opencl" : "mixed", outcome_name[r], failed,
               took);
        bad += r == WRONG || r == HANG;
        reached += failed;
      }
    if (!reached) { /* the matrix must exercise what it names */
      printf("%s: no call failed in any case\n", entries[e]);
      unreached++;
    }
  }
  assert_int_equal(bad, 0);
  assert_int_equal(unreached, 0);
}

static void test_returned_error(void **state) {
  (void)state;
  run_mode(FAILCL_RETURN);
}
static void test_event_fails(void **state) {
  (void)state;
  run_mode(FAILCL_EVENT);
}
static void test_callback_only(void **state) {
  (void)state;
  run_mode(FAILCL_CALLBACK);
}
static void test_dependents_stall(void **state) {
  (void)state;
  run_mode(FAILCL_STALL);
}
static void test_never_completes(void **state) {
  (void)state;
  run_mode(FAILCL_NEVER);
}

/* A device taken as hung while its kernel still runs: the result is the
 * CPU's, or the application is told; never a late write over a result
 * reported right. */
static void test_slow_kernel_taken_as_hung(void **state) {
  (void)state;
  if ((only_mode && strcmp(only_mode, "slow")) || only_entry || two)
    skip();
  const fault_case c = {.entry = "slow kernel", .slow = true};
  double took;
  unsigned failed;
  int r = run_child(&c, &took, &failed);
  if (r == NODEV)
    skip();
  printf("slow kernel taken as hung: %s (%.2f s)\n", outcome_name[r], took);
  assert_true(r == EXACT || r == TOLD);
}

/* The mutation check: with Tandem blind to the failures events report,
 * the matrix finds wrong results reported as success (so it would catch
 * a check that goes missing). */
static void test_mutation_blind_to_events(void **state) {
  (void)state;
  if (only_mode || only_entry || two)
    skip();
  static const fault_case cases[] = {
      {.entry = "clEnqueueNDRangeKernel", .mode = FAILCL_EVENT},
      {.entry = "clEnqueueNDRangeKernel", .mode = FAILCL_CALLBACK},
      {.entry = "clEnqueueWriteBuffer", .mode = FAILCL_EVENT},
      {.entry = "clEnqueueWriteBuffer", .mode = FAILCL_CALLBACK},
      {.entry = "clEnqueueReadBuffer", .mode = FAILCL_CALLBACK},
  };
  blind = true;
  unsigned wrong = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double took;
    unsigned failed;
    int r = run_child(&cases[i], &took, &failed);
    printf("blind: %-26s %-8s %-6s %u failed\n", cases[i].entry, mode_name[cases[i].mode],
           outcome_name[r], failed);
    wrong += r == WRONG;
  }
  blind = false;
  assert_true(wrong > 0);
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "integrated") && strcmp(argv[1], "discrete") &&
                    strcmp(argv[1], "two"))) {
    fprintf(stderr, "usage: test-driver-faults integrated|discrete|two [MODE [ENTRY]]\n");
    return 2;
  }
  two = !strcmp(argv[1], "two");
  discrete = two || !strcmp(argv[1], "discrete");
  if (two) /* PoCL makes two devices of the CPU (before it starts) */
    setenv("POCL_DEVICES", "pthread pthread", 1);
  only_mode = argc > 2 ? argv[2] : NULL;
  only_entry = argc > 3 ? argv[3] : NULL;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_returned_error), cmocka_unit_test(test_event_fails),
      cmocka_unit_test(test_callback_only), cmocka_unit_test(test_dependents_stall),
      cmocka_unit_test(test_never_completes), cmocka_unit_test(test_slow_kernel_taken_as_hung),
      cmocka_unit_test(test_mutation_blind_to_events),
  };
  test_temp_dir(cache_dir, sizeof cache_dir);
  int failures = cmocka_run_group_tests(tests, NULL, NULL);
  test_remove_dir(cache_dir);
  return nodev && !failures ? 77 : failures;
}
