/* What the tests of tasks on a real OpenCL device share
 * (opencl-fixture.h). */
#include "opencl-fixture.h"

#include <unistd.h>

bool discrete;
uint64_t memory_limit;
int writeback;
char cache_dir[128];
_Atomic unsigned device_events;
_Atomic unsigned cpu_runs;
_Atomic unsigned kernel_events;
char kernel_event_codelet[64];

static void on_device_event(void *data, unsigned device, const char *why) {
  (void)data;
  (void)device;
  assert_non_null(why);
  atomic_fetch_add(&device_events, 1);
}

static void on_kernel_event(void *data, const char *codelet, unsigned device, tdm_status status,
                            const char *why) {
  (void)data;
  (void)device;
  assert_int_equal(status, TDM_ERR_KERNEL);
  assert_non_null(why);
  snprintf(kernel_event_codelet, sizeof kernel_event_codelet, "%s", codelet);
  atomic_fetch_add(&kernel_events, 1);
}

tdm_runtime *device_runtime(test_log *log, int admit) {
  return device_runtime_with(log, admit, NULL, 1);
}

tdm_runtime *device_runtime_with(test_log *log, int admit, const char *policy, int peer) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.scheduler = policy;
  cfg.opencl_peer = peer;
  cfg.device_event_fn = on_device_event;
  cfg.kernel_event_fn = on_kernel_event;
  cfg.device_memory_limit = memory_limit;
  cfg.writeback = writeback;
  cfg.cache_dir = cache_dir;
  cfg.ignore_env = 1;
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.opencl_cpu_devices = admit;
  cfg.device_memory = discrete ? TDM_MEMORY_SEPARATE : TDM_MEMORY_SHARED;
  test_log_attach(&cfg, log);
  cfg.log_level = TDM_LOG_INFO;
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  return rt;
}

int the_device(tdm_runtime *rt) {
  unsigned id;
  return test_used_devices(rt, &id, 1) ? (int)id : -1;
}

tdm_device_counters counters(tdm_runtime *rt) {
  return test_counters(rt, (unsigned)the_device(rt));
}

const tdm_opencl_variant saxpy_cl = {
    .source = "__kernel void saxpy(__global const float *x, ulong nx,\n"
              "                    __global float *y, ulong ny, float a) {\n"
              "  size_t i = get_global_id(0);\n"
              "  y[i] = a * x[i] + y[i];\n"
              "}\n",
    .kernel = "saxpy"};

void saxpy_cpu(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  float a = *(const float *)args;
  const float *x = b[0].ptr;
  float *y = b[1].ptr;
  for (size_t i = 0; i < b[0].nx; i++)
    y[i] = a * x[i] + y[i];
  atomic_fetch_add(&cpu_runs, 1);
}

const tdm_codelet saxpy_gpu_only = {
    .name = "saxpy (OpenCL)", .nbuffers = 2, .modes = {TDM_R, TDM_RW}, .opencl = &saxpy_cl};
const tdm_codelet saxpy_cpu_only = {
    .name = "saxpy (CPU)", .cpu_fn = saxpy_cpu, .nbuffers = 2, .modes = {TDM_R, TDM_RW}};
const tdm_codelet saxpy_both = {.name = "saxpy (both)",
                                .cpu_fn = saxpy_cpu,
                                .nbuffers = 2,
                                .modes = {TDM_R, TDM_RW},
                                .opencl = &saxpy_cl};

float *array(float first, float step) {
  float *p = tdm_malloc(N * sizeof *p);
  assert_non_null(p);
  for (int i = 0; i < N; i++)
    p[i] = first + step * (float)(i % 100);
  return p;
}

tdm_handle *vector_of(tdm_runtime *rt, float *p) {
  tdm_handle *h = NULL;
  assert_int_equal(tdm_register_vector(rt, p, N, sizeof(float), &h), TDM_OK);
  return h;
}

void saxpy(tdm_runtime *rt, const tdm_codelet *cl, tdm_handle *x, tdm_handle *y, float a) {
  assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = cl,
                                                    .handles = {x, y},
                                                    .args = &a,
                                                    .args_size = sizeof a}),
                   TDM_OK);
}

void run_end(tdm_runtime *rt, float *x, float *y) {
  tdm_runtime_destroy(rt);
  tdm_free(x);
  tdm_free(y);
}

int opencl_fixture_main(int argc, char **argv, const char *program,
                        const struct CMUnitTest *tests, size_t ntests,
                        const struct CMUnitTest *two, size_t ntwo,
                        const struct CMUnitTest *users, size_t nusers) {
  if (argc < 2 || argc > 3 || (strcmp(argv[1], "integrated") && strcmp(argv[1], "discrete")) ||
      (argc == 3 && strcmp(argv[2], "two-devices") && strcmp(argv[2], "two-users"))) {
    fprintf(stderr, "usage: %s integrated|discrete [two-devices|two-users]\n", program);
    return 2;
  }
  discrete = !strcmp(argv[1], "discrete");
  bool as_users = argc == 3 && !strcmp(argv[2], "two-users");
  bool as_two = argc == 3 && !as_users;
  const struct CMUnitTest *run = as_users ? users : as_two ? two : tests;
  size_t nrun = as_users ? nusers : as_two ? ntwo : ntests;
  if (!nrun) {
    printf("%s: no test in this mode: skipped\n", program);
    return 77;
  }
  if (as_users && geteuid() != 0) {
    printf("needs root to act as a second user: skipped\n");
    return 77;
  }
  if (as_users && !test_other_user_can_write("/tmp", OTHER_UID)) {
    printf("uid %d cannot write in /tmp here (a path above it is closed): skipped\n",
           OTHER_UID);
    return 77;
  }
  snprintf(cache_dir, sizeof cache_dir, "/tmp/tandem-test-XXXXXX");
  if (!mkdtemp(cache_dir))
    return 1;
  test_log log;
  tdm_runtime *rt = device_runtime(&log, 1);
  unsigned ids[8];
  unsigned found = test_used_devices(rt, ids, 8);
  tdm_runtime_destroy(rt);
  if (found < (as_two ? 2u : 1u)) {
    test_remove_dir(cache_dir);
    printf("not %s OpenCL CPU device%s here (install pocl-opencl-icd): skipped\n",
           as_two ? "two" : "an", as_two ? "s (POCL_DEVICES=\"pthread pthread\")" : "");
    return 77;
  }
  int rc = _cmocka_run_group_tests(program, run, nrun, NULL, NULL);
  test_remove_dir(cache_dir);
  return rc;
}
