/*
 * Placement in real time, with emulated devices (tdm_config.sim): the
 * runtime's threads, queues, models and copies, on a machine without a
 * GPU. Tasks spin for a given wall time, so that their durations hold on
 * a loaded machine; the bounds below leave room for calibration and for
 * a machine busy with other work (the exact figures are asserted in
 * virtual time, test-vtime). Also: footprints for the models, and the
 * devices' threads refusing blocking calls as the CPU workers do.
 */
#include "common.h"

#include "internal.h"
#include "sched/perfmodel.h"

#include <math.h>

enum { GEMM, SMALL, NCODELETS };
#define MAX_TASKS 4096
#define MAX_CLASSES 4

static tdm_runtime *the_rt;
static double t_zero;
static _Atomic unsigned ran_on[NCODELETS][MAX_CLASSES];
static _Atomic int where[MAX_TASKS];
static double started[MAX_TASKS]; /* seconds after t_zero */

typedef struct work {
  unsigned us; /* wall time to spin */
  unsigned codelet, id;
  bool record; /* where and when it ran, in where[id] and started[id] */
} work;

static void spin_task(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const work *w = args;
  double t0 = now_s(), end = t0 + w->us * 1e-6;
  volatile uint64_t x = 0;
  while (now_s() < end)
    x++;
  int id = tdm_worker_id(the_rt);
  unsigned ncpu = tdm_runtime_ncpu_workers(the_rt);
  assert_true(id >= 0);
  unsigned cls = (unsigned)id < ncpu ? 0 : 1 + (unsigned)id - ncpu;
  if (cls < MAX_CLASSES)
    atomic_fetch_add(&ran_on[w->codelet][cls], 1);
  if (w->record && w->id < MAX_TASKS) {
    atomic_store(&where[w->id], (int)cls);
    started[w->id] = t0 - t_zero;
  }
  uint64_t *v = b[0].ptr;
  v[0] = v[0] * 3 + w->id + 1; /* in order: each task sees the one before */
}

static const tdm_codelet gemm = {
    .name = "gemm", .cpu_fn = spin_task, .nbuffers = 1, .modes = {TDM_RW}};
static const tdm_codelet small = {
    .name = "small", .cpu_fn = spin_task, .nbuffers = 1, .modes = {TDM_RW}};

static void reset_counts(void) {
  for (int c = 0; c < NCODELETS; c++)
    for (int k = 0; k < MAX_CLASSES; k++)
      atomic_store(&ran_on[c][k], 0);
  for (int i = 0; i < MAX_TASKS; i++)
    atomic_store(&where[i], -1);
}

static tdm_runtime *sim_runtime(const char *sim, const char *sched, const char *cache_dir,
                                test_log *log) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.sim = sim;
  cfg.scheduler = sched;
  cfg.cache_dir = cache_dir;
  if (log)
    test_log_attach(&cfg, log);
  reset_counts();
  t_zero = now_s();
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  the_rt = rt;
  return rt;
}

/* Submits n independent tasks, codelet of task i: kinds[i % nkinds];
 * each on a vector of its own, checked after. */
static void independent(tdm_runtime *rt, unsigned n, const unsigned *kinds, unsigned nkinds,
                        unsigned us) {
  static uint64_t data[MAX_TASKS][8];
  tdm_handle *h[MAX_TASKS];
  assert_true(n <= MAX_TASKS);
  for (unsigned i = 0; i < n; i++) {
    memset(data[i], 0, sizeof data[i]);
    assert_int_equal(tdm_register_vector(rt, data[i], 8, sizeof(uint64_t), &h[i]), TDM_OK);
  }
  for (unsigned i = 0; i < n; i++) {
    unsigned k = kinds[i % nkinds];
    work w = {.us = us, .codelet = k, .id = i, .record = true};
    tdm_task_desc d = {.codelet = k == GEMM ? &gemm : &small,
                       .handles = {h[i]},
                       .args = &w,
                       .args_size = sizeof w};
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  for (unsigned i = 0; i < n; i++) {
    assert_int_equal(tdm_handle_unregister(h[i]), TDM_OK);
    assert_int_equal(data[i][0], i + 1);
  }
}

static double share(unsigned codelet, unsigned cls) {
  unsigned total = 0;
  for (int k = 0; k < MAX_CLASSES; k++)
    total += atomic_load(&ran_on[codelet][k]);
  return total ? (double)atomic_load(&ran_on[codelet][cls]) / total : 0;
}

/* 2 CPU workers and a device 10x a core on gemm, 0.5x on small: once
 * the models are calibrated (a first batch), most gemm tasks on the
 * device, most small ones on the CPU. (Counted over both batches, the
 * calibration's tries made the gemm share dip to 59% on a loaded
 * machine.) */
static void test_gemm_on_device_small_on_cpu(void **state) {
  (void)state;
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  tdm_runtime *rt = sim_runtime("gpu:gemm=10,small=0.5,latency=10us,bandwidth=10G", NULL,
                                dir, NULL);
  unsigned kinds[] = {GEMM, SMALL};
  independent(rt, 64, kinds, 2, 100);
  tdm_device_counters c0 = {.struct_size = sizeof c0}, c = {.struct_size = sizeof c};
  assert_int_equal(tdm_runtime_device_counters(rt, 0, &c0), TDM_OK);
  reset_counts();
  independent(rt, 128, kinds, 2, 100);
  double g = share(GEMM, 1), s = share(SMALL, 0);
  printf("gemm on the device: %.0f%%, small on the CPU: %.0f%%\n", 100 * g, 100 * s);
  assert_int_equal(tdm_runtime_device_counters(rt, 0, &c), TDM_OK);
  assert_int_equal(c.tasks - c0.tasks,
                   atomic_load(&ran_on[GEMM][1]) + atomic_load(&ran_on[SMALL][1]));
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
  assert_true(g >= 0.6); /* 84% and 82% in virtual time */
  assert_true(s >= 0.6);
}

/* Two devices, 12x and 4x a core: they share the work 3 to 1. */
static void test_two_devices_in_proportion(void **state) {
  (void)state;
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  tdm_runtime *rt = sim_runtime("fast:speedup=12,latency=10us,bandwidth=10G;"
                                "slow:speedup=4,latency=10us,bandwidth=10G",
                                NULL, dir, NULL);
  unsigned kinds[] = {GEMM};
  independent(rt, 160, kinds, 1, 100);
  unsigned fast = atomic_load(&ran_on[GEMM][1]), slow = atomic_load(&ran_on[GEMM][2]);
  double r = (double)fast / (fast + slow);
  printf("fast %u, slow %u, CPU %u: fast's share of the devices' %.0f%% (speeds: 75%%)\n",
         fast, slow, atomic_load(&ran_on[GEMM][0]), 100 * r);
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
  assert_true(r >= 0.55 && r <= 0.9); /* 75% in virtual time */
}

/* A device 8x a core slows down to 1x (throttling) mid-run: it gets a
 * smaller share of the tasks that start afterwards. */
static void test_slowed_device_gets_less(void **state) {
  (void)state;
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  /* time scale 16: slow_at 4 ms emulated is 64 ms real */
  tdm_runtime *rt = sim_runtime("gpu:speedup=8,latency=10us,bandwidth=10G,slow_at=4ms,"
                                "slow_factor=8",
                                NULL, dir, NULL);
  /* times from when the device's clock started, which slow_at counts
   * from: not from before the runtime's creation, which can take tens of
   * milliseconds under a sanitizer, leaving too few tasks before */
  t_zero = 1e-9 * (double)tdm__sim_t0(rt);
  const double slow_at = 0.064, end = 0.25;
  unsigned kinds[] = {GEMM}, n = 0;
  static uint64_t data[MAX_TASKS][8];
  tdm_handle *h[MAX_TASKS];
  while (now_s() - t_zero < end && n + 16 <= MAX_TASKS) { /* waves of 16 */
    for (unsigned i = n; i < n + 16; i++) {
      memset(data[i], 0, sizeof data[i]);
      assert_int_equal(tdm_register_vector(rt, data[i], 8, sizeof(uint64_t), &h[i]), TDM_OK);
      work w = {.us = 100, .codelet = kinds[0], .id = i, .record = true};
      tdm_task_desc d = {.codelet = &gemm, .handles = {h[i]}, .args = &w, .args_size = sizeof w};
      assert_int_equal(tdm_submit(rt, &d), TDM_OK);
    }
    assert_int_equal(tdm_wait_all(rt), TDM_OK);
    n += 16;
  }
  unsigned before = 0, before_dev = 0, after = 0, after_dev = 0;
  /* after: once the model has had time to see the new speed */
  double settled = slow_at + 0.4 * (end - slow_at);
  for (unsigned i = 0; i < n; i++) {
    assert_int_equal(tdm_handle_unregister(h[i]), TDM_OK);
    assert_int_equal(data[i][0], i + 1);
    int w = atomic_load(&where[i]);
    if (started[i] < slow_at) {
      before++;
      before_dev += w == 1;
    } else if (started[i] >= settled) {
      after++;
      after_dev += w == 1;
    }
  }
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
  double b = before ? (double)before_dev / before : 0, a = after ? (double)after_dev / after : 1;
  printf("device's share: %.0f%% of %u tasks before the slowdown, %.0f%% of %u after\n",
         100 * b, before, 100 * a, after);
  assert_true(before >= 16 && after >= 16);
  assert_true(a < 0.7 * b);
}

/* n small tasks of 40 ms and n gemm tasks of 8 ms, independent, all
 * submitted at once, the small ones first. */
static void small_and_gemm(tdm_runtime *rt, unsigned n) {
  static uint64_t data[2 * 16][8];
  tdm_handle *h[2 * 16];
  assert_true(n <= 16);
  for (unsigned i = 0; i < 2 * n; i++) {
    memset(data[i], 0, sizeof data[i]);
    assert_int_equal(tdm_register_vector(rt, data[i], 8, sizeof(uint64_t), &h[i]), TDM_OK);
  }
  for (unsigned i = 0; i < 2 * n; i++) {
    unsigned k = i < n ? SMALL : GEMM;
    work w = {.us = k == SMALL ? 40000 : 8000, .codelet = k, .id = i, .record = true};
    tdm_task_desc d = {.codelet = k == GEMM ? &gemm : &small, .handles = {h[i]}, .args = &w,
                       .args_size = sizeof w};
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  for (unsigned i = 0; i < 2 * n; i++) {
    assert_int_equal(tdm_handle_unregister(h[i]), TDM_OK);
    assert_int_equal(data[i][0], i + 1);
  }
}

/* 2 CPU workers and a device as fast as a core for gemm that cannot run
 * small: small tasks only the CPU workers run, which no policy places.
 * Once heft has seen a few of each (a first batch), a second batch of
 * 10 small tasks of 40 ms (200 ms of both workers) and 10 gemm tasks of
 * 8 ms, all ready at once: the workers' small tasks are counted in their
 * backlog (tdm__sched_cpu_only_wait), so the gemm tasks go to the device
 * (80 ms). Not counted, heft saw idle workers and gave them most of the
 * gemm tasks (in virtual time: 13 of 20). The counts return to zero,
 * with a cancelled chain of them too (tasks that end without starting). */
static void test_cpu_only_work_counted(void **state) {
  (void)state;
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  tdm_runtime *rt = sim_runtime("gpu:gemm=1,small=0,latency=10us,bandwidth=10G", "heft", dir,
                                NULL);
  small_and_gemm(rt, 8); /* gemm calibrated on both, small's time seen */
  reset_counts();
  small_and_gemm(rt, 10);
  unsigned on_device = atomic_load(&ran_on[GEMM][1]);
  printf("gemm: %u of 10 on the device, %u on the CPU workers; small: %u on the CPU workers\n",
         on_device, atomic_load(&ran_on[GEMM][0]), atomic_load(&ran_on[SMALL][0]));
  assert_int_equal(atomic_load(&ran_on[SMALL][0]), 10);
  /* a chain of them cancelled while its first runs: the others end
   * without starting, and are counted out all the same */
  static uint64_t chain[8];
  tdm_handle *hc;
  tdm_group *g;
  assert_int_equal(tdm_register_vector(rt, chain, 8, sizeof(uint64_t), &hc), TDM_OK);
  assert_int_equal(tdm_group_create(rt, NULL, &g), TDM_OK);
  for (unsigned i = 0; i < 6; i++) {
    work w = {.us = i ? 1000 : 30000, .codelet = SMALL, .id = i};
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &small, .handles = {hc},
                                                     .args = &w, .args_size = sizeof w,
                                                     .group = g}),
                     TDM_OK);
  }
  sleep_ms(10);
  assert_int_equal(tdm_group_cancel(g), TDM_OK);
  assert_int_equal(tdm_group_wait(g), TDM_ERR_CANCELLED);
  tdm_group_release(g);
  tdm_handle_unregister(hc); /* (a cancelled writer's handle: ERR_LOST) */
  assert_true(atomic_load(&ran_on[SMALL][0]) < 16); /* some never ran */
  /* every count made returns: none left queued or running */
  uint64_t in = atomic_load(&rt->cpu_only_in), out = atomic_load(&rt->cpu_only_out);
  uint64_t started = atomic_load(&rt->cpu_only_started);
  for (unsigned i = 0; i < rt->nworkers; i++) {
    in += atomic_load(&rt->workers[i].cpu_only_in);
    started += atomic_load(&rt->workers[i].cpu_only_started);
    out += atomic_load(&rt->workers[i].cpu_only_out);
  }
  assert_true(in >= 18 && in <= 24); /* 8 + 10 small tasks, the chain's that became ready */
  assert_int_equal(started, in);
  assert_int_equal(out, in);
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
  assert_true(on_device >= 8);
}

/* What one runtime learnt, the next one knows: gemm goes to the device
 * at once, without trying it on the CPU again. */
static void test_models_persist(void **state) {
  (void)state;
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  const char *sim = "gpu:gemm=10,latency=10us,bandwidth=10G";
  tdm_runtime *rt = sim_runtime(sim, NULL, dir, NULL);
  unsigned kinds[] = {GEMM};
  independent(rt, 64, kinds, 1, 100);
  tdm_runtime_destroy(rt);
  char path[128];
  snprintf(path, sizeof path, "%s/perfmodel-v1-test-sim.txt", dir);
  tdm_perfmodel *m = tdm__model_new();
  assert_int_equal(tdm__model_load(m, AT_FDCWD, path, NULL), TDM_OK);
  bool cal = false;
  double cpu = tdm__model_predict(m, "gemm", 64, "cpu", &cal);
  assert_true(cal);
  double dev = tdm__model_predict(m, "gemm", 64, "emulated:gpu", &cal);
  assert_true(cal);
  printf("learnt: gemm %.2f ms on the CPU, %.2f ms on the device\n", 1e3 * cpu, 1e3 * dev);
  /* declared 10x; on a loaded machine, under a sanitizer, the device's
   * thread is late and the ratio learnt falls (to 4 and below): the
   * speed of the emulation is not what this test is about */
  assert_true(cpu > dev);
  tdm__model_free(m);

  /* as many tasks as the device finishes, queued one after another,
   * before a CPU worker would finish one (heft puts each where it ends
   * first): all on the device, none tried on the CPU again */
  double ratio = cpu / dev;
  unsigned n = ratio >= 5 ? 3 : ratio >= 4 ? 2 : 1;
  rt = sim_runtime(sim, NULL, dir, NULL);
  independent(rt, n, kinds, 1, 100);
  assert_int_equal(atomic_load(&ran_on[GEMM][0]), 0);
  assert_int_equal(atomic_load(&ran_on[GEMM][1]), n);
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
}

/* A corrupt model file: ignored with a message, calibration starts
 * again, results are right, and a good file replaces it. */
static void test_corrupt_model_file(void **state) {
  (void)state;
  char dir[64], path[128];
  test_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/perfmodel-v1-test-sim.txt", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("tandem-perfmodel 1\ngemm\temulated:gpu\t64\t3\t1e9 1e9 1e9\nend 1 0123456789abcdef\n",
        f);
  fclose(f);
  test_log log;
  tdm_runtime *rt = sim_runtime("gpu:gemm=10,latency=10us,bandwidth=10G", NULL, dir, &log);
  assert_true(test_log_has(&log, "performance model: ignoring"));
  unsigned kinds[] = {GEMM};
  independent(rt, 48, kinds, 1, 100);
  assert_true(share(GEMM, 1) >= 0.5); /* the bogus 1e9 s was not believed */
  tdm_runtime_destroy(rt);
  tdm_perfmodel *m = tdm__model_new();
  assert_int_equal(tdm__model_load(m, AT_FDCWD, path, NULL), TDM_OK);
  bool cal = false;
  assert_true(tdm__model_predict(m, "gemm", 64, "emulated:gpu", &cal) < 1);
  tdm__model_free(m);
  pthread_mutex_destroy(&log.lock);
  test_remove_dir(dir);
}

/* A device with memory of its own: what it reads is copied to it once,
 * what it writes comes home when the CPU or the application needs it;
 * a device sharing memory moves nothing. Results are right either way. */
static void copies(const char *sim, bool own) {
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  tdm_runtime *rt = sim_runtime(sim, "random", dir, NULL);
  static uint64_t x[64][8];
  tdm_handle *h[64];
  for (unsigned i = 0; i < 64; i++) {
    memset(x[i], 0, sizeof x[i]);
    assert_int_equal(tdm_register_vector(rt, x[i], 8, sizeof(uint64_t), &h[i]), TDM_OK);
  }
  /* 64 chains of 8 tasks, each placed at random */
  for (unsigned step = 0; step < 8; step++)
    for (unsigned i = 0; i < 64; i++) {
      work w = {.us = 5, .codelet = GEMM, .id = step};
      tdm_task_desc d = {.codelet = &gemm, .handles = {h[i]}, .args = &w, .args_size = sizeof w};
      assert_int_equal(tdm_submit(rt, &d), TDM_OK);
    }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  uint64_t expect = 0;
  for (unsigned step = 0; step < 8; step++)
    expect = expect * 3 + step + 1;
  for (unsigned i = 0; i < 64; i++) {
    assert_int_equal(tdm_handle_acquire(h[i], TDM_R), TDM_OK);
    assert_int_equal(x[i][0], expect);
    assert_int_equal(tdm_handle_release(h[i]), TDM_OK);
  }
  tdm_device_counters c = {.struct_size = sizeof c};
  assert_int_equal(tdm_runtime_device_counters(rt, 0, &c), TDM_OK);
  printf("%s: %llu tasks on the device, %llu bytes to it in %llu copies, %llu back in %llu\n",
         sim, (unsigned long long)c.tasks, (unsigned long long)c.bytes_to_device,
         (unsigned long long)c.copies_to_device, (unsigned long long)c.bytes_to_host,
         (unsigned long long)c.copies_to_host);
  assert_true(c.tasks > 0 && c.tasks < 512);
  if (own) {
    assert_true(c.copies_to_device > 0 && c.copies_to_host > 0);
    assert_int_equal(c.bytes_to_device, 64 * c.copies_to_device);
    assert_int_equal(c.bytes_to_host, 64 * c.copies_to_host);
    /* each device task needs at most one copy in; every vector whose last
     * writer was the device came home for the acquire */
    assert_true(c.copies_to_device <= c.tasks);
  } else {
    assert_int_equal(c.bytes_to_device + c.bytes_to_host, 0);
  }
  for (unsigned i = 0; i < 64; i++)
    assert_int_equal(tdm_handle_unregister(h[i]), TDM_OK);
  tdm_runtime_destroy(rt);
  test_remove_dir(dir);
}

static void test_copies_own_memory(void **state) {
  (void)state;
  copies("gpu:speedup=2,latency=5us,bandwidth=1G", true);
}

static void test_no_copies_shared_memory(void **state) {
  (void)state;
  copies("igpu:speedup=2,memory=shared", false);
}

/* A hybrid laptop (4 performance cores, kind 1, and 8 efficiency cores,
 * kind 0, from its hwloc XML) whose efficiency cores are emulated at a
 * quarter of the speed, with an integrated GPU: each kind of core is a
 * class of its own, with a model of its own, and the faster cores get
 * more of the work. */
static _Atomic unsigned per_worker[64];

static void count_task(const tdm_buffer *b, const void *args, size_t n) {
  spin_task(b, args, n);
  int id = tdm_worker_id(the_rt);
  if (id >= 0 && id < 64)
    atomic_fetch_add(&per_worker[id], 1);
}

/* An emulated machine without devices (it declares only its cores'
 * speed): its CPU tasks are stretched all the same, time_scale / speed
 * times their real time (the worker sleeps the rest). A lower bound: a
 * slow machine only makes it longer. */
static void test_cpu_only_emulation_stretches(void **state) {
  (void)state;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.nworkers = 1;
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.sim = "cpu.0:speedup=0.5";
  cfg.sim_time_scale = 10;
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  the_rt = rt; /* (spin_task asks where it runs) */
  assert_int_equal(tdm_runtime_nworkers(rt), 1); /* no device */
  uint64_t x = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &x, 1, sizeof x, &h), TDM_OK);
  work w = {.us = 2000, .codelet = GEMM, .id = 0};
  tdm_task_desc d = {.codelet = &gemm, .handles = {h}, .args = &w, .args_size = sizeof w};
  double t0 = now_s();
  assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  double took = now_s() - t0;
  /* 2 ms of spinning, 10 / 0.5 = 20 times: 40 ms at least */
  assert_true(took >= 0.038);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  tdm_runtime_destroy(rt);
}

static void test_cpu_kinds_are_classes(void **state) {
  (void)state;
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.bind_workers = 0;
  cfg.ignore_env = 1;
  cfg.topology_xml = TDM_TOPOLOGY_DIR "/hybrid-laptop.xml";
  cfg.sim = "cpu.0:speedup=0.25;igpu:speedup=2,memory=shared";
  /* 12 workers and a device on this machine's cores: each task's time
   * stretched 16 times (100 us: 1.6 ms on a performance core, 6.4 ms on
   * an efficiency core), so that a thread waking late on a busy machine
   * (a millisecond or two under a sanitizer, with other tests running)
   * does not hide the 4x between the kinds (the automatic scale, 4, let
   * it fall to 1 there) */
  cfg.sim_time_scale = 16;
  cfg.cache_dir = dir;
  reset_counts();
  for (int i = 0; i < 64; i++)
    atomic_store(&per_worker[i], 0);
  t_zero = now_s();
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  the_rt = rt;
  assert_int_equal(tdm_runtime_ncpu_workers(rt), 12);
  tdm_codelet counted = gemm;
  counted.cpu_fn = count_task;
  static uint64_t data[480][8];
  tdm_handle *h[480];
  for (unsigned i = 0; i < 480; i++) {
    memset(data[i], 0, sizeof data[i]);
    assert_int_equal(tdm_register_vector(rt, data[i], 8, sizeof(uint64_t), &h[i]), TDM_OK);
    work w = {.us = 100, .codelet = GEMM, .id = i};
    tdm_task_desc d = {.codelet = &counted, .handles = {h[i]}, .args = &w, .args_size = sizeof w};
    assert_int_equal(tdm_submit(rt, &d), TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  unsigned p = 0, e = 0, ne = 0, np = 0;
  for (unsigned w = 0; w < 12; w++) {
    tdm_worker_info wi = {.struct_size = sizeof wi};
    assert_int_equal(tdm_runtime_worker(rt, w, &wi), TDM_OK);
    if (wi.cpu_kind == 1) {
      p += atomic_load(&per_worker[w]);
      np++;
    } else {
      e += atomic_load(&per_worker[w]);
      ne++;
    }
  }
  for (unsigned i = 0; i < 480; i++) {
    assert_int_equal(tdm_handle_unregister(h[i]), TDM_OK);
    assert_int_equal(data[i][0], i + 1);
  }
  unsigned gpu = atomic_load(&per_worker[12]);
  tdm_runtime_destroy(rt);
  char path[128];
  snprintf(path, sizeof path, "%s/perfmodel-v1-test-sim.txt", dir);
  tdm_perfmodel *m = tdm__model_new();
  assert_int_equal(tdm__model_load(m, AT_FDCWD, path, NULL), TDM_OK);
  bool cal_p = false, cal_e = false;
  double tp = tdm__model_predict(m, "gemm", 64, "cpu:IntelCore", &cal_p);
  double te = tdm__model_predict(m, "gemm", 64, "cpu:IntelAtom", &cal_e);
  tdm__model_free(m);
  test_remove_dir(dir);
  printf("per performance core %.1f tasks, per efficiency core %.1f, GPU %u; learnt %.2f ms "
         "and %.2f ms\n",
         (double)p / np, (double)e / ne, gpu, 1e3 * tp, 1e3 * te);
  assert_int_equal(np, 4);
  assert_int_equal(ne, 8);
  assert_true(cal_p && cal_e);
  assert_true(te > 2 * tp);                         /* declared: 4x */
  assert_true((double)p / np > 2 * (double)e / ne); /* heft: 4x */
}

/* The emulated devices are devices like the others: listed, numbered,
 * classed; bad descriptions and policies are refused with a message. */
static void test_description_and_errors(void **state) {
  (void)state;
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  test_log log;
  tdm_runtime *rt = sim_runtime("a:speedup=3,latency=1us,bandwidth=1G;b:memory=shared,workers=2",
                                "eager", dir, &log);
  assert_int_equal(tdm_runtime_nworkers(rt), 2 + 3);
  tdm_device_info info = {.struct_size = sizeof info};
  assert_int_equal(tdm_runtime_device(rt, 0, &info), TDM_OK);
  assert_string_equal(info.name, "a");
  assert_int_equal(info.device_class, TDM_DEVICE_EMULATED);
  assert_int_equal(info.shared_memory, 0);
  assert_int_equal(info.worker, 2);
  assert_int_equal(tdm_runtime_device(rt, 2, &info), TDM_OK);
  assert_string_equal(info.name, "b.1");
  assert_int_equal(info.shared_memory, 1);
  assert_string_equal(tdm_device_class_name(TDM_DEVICE_EMULATED), "emulated device");
  assert_true(test_log_has(&log, "placement policy eager"));
  tdm_runtime_destroy(rt);
  pthread_mutex_destroy(&log.lock);

  static const char *const bad[] = {
      "",                                  /* empty */
      "cpu:workers=2",                     /* the CPU is not emulated */
      "cpu.3:speedup=2",                   /* no such kind of core here */
      "gpu:speedup=10",                    /* own memory without a bandwidth */
      "gpu:speedup=-1,memory=shared",      /* negative */
      "gpu:memory=somewhere",              /* no such memory */
      "gpu:latency=fast,bandwidth=1G",     /* not a time */
      "gpu:gemm,memory=shared",            /* not key=value */
      "gpu:speedup=-1,memory=shared;+opencl", /* beside OpenCL's, still wrong */
      "+opencl;gpu:memory=somewhere",
      "gpu:memory=shared,peer=1G",         /* copies between devices need memory of their own */
      "gpu:bandwidth=1G,peer=0",           /* out of range */
      "gpu:bandwidth=1G,peer=fast",        /* not a bandwidth */
      "gpu:speedup=2,bandwidth=1G,speedup=3", /* a key given twice */
      "gpu:gemm=2,memory=shared,gemm=4",   /* a codelet's speed-up given twice */
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.sim = bad[i];
    cfg.cache_dir = dir;
    test_log_attach(&cfg, &log);
    tdm_runtime *r = NULL;
    assert_int_equal(tdm_runtime_create(&cfg, &r), TDM_ERR_INVALID_ARG);
    assert_null(r);
    assert_true(test_log_has(&log, "sim="));
    pthread_mutex_destroy(&log.lock);
  }
  /* "+opencl" asks for OpenCL's devices beside the emulated ones: none
   * here (devices="none"), the emulated one alone, or none at all */
  static const struct {
    const char *sim;
    unsigned devices;
  } beside[] = {{"gpu:speedup=2,memory=shared;+opencl", 1}, {"+opencl", 0}};
  for (size_t i = 0; i < sizeof beside / sizeof *beside; i++) {
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.devices = "none";
    cfg.sim = beside[i].sim;
    cfg.cache_dir = dir;
    tdm_runtime *r = NULL;
    assert_int_equal(tdm_runtime_create(&cfg, &r), TDM_OK);
    tdm_machine_info mi = {.struct_size = sizeof mi};
    assert_int_equal(tdm_runtime_machine(r, &mi), TDM_OK);
    assert_int_equal(mi.device_workers, beside[i].devices);
    assert_non_null(strstr(mi.opencl_summary, "devices=\"none\""));
    tdm_runtime_destroy(r);
  }
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.scheduler = "fastest";
  test_log_attach(&cfg, &log);
  tdm_runtime *r = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &r), TDM_ERR_INVALID_ARG);
  assert_true(test_log_has(&log, "scheduler=\"fastest\""));
  pthread_mutex_destroy(&log.lock);
  cfg.scheduler = NULL;
  cfg.sim_time_scale = 0.5;
  test_log_attach(&cfg, &log);
  assert_int_equal(tdm_runtime_create(&cfg, &r), TDM_ERR_INVALID_ARG);
  assert_true(test_log_has(&log, "sim_time_scale 0.5"));
  pthread_mutex_destroy(&log.lock);
  test_remove_dir(dir);
}

static bool count_names(void *data, const char *codelet, const char *cls, uint64_t size,
                        unsigned k, const double *seen_times) {
  (void)cls;
  (void)size;
  (void)k;
  (void)seen_times;
  unsigned *n = data; /* struct seen, in order */
  if (!strcmp(codelet, "shaped"))
    n[0]++;
  else if (!strncmp(codelet, "shaped#", 7))
    n[1]++;
  else if (!strcmp(codelet, "tagged"))
    n[2]++;
  else if (!strcmp(codelet, "tagged#0000000000000001"))
    n[3]++;
  else if (!strcmp(codelet, "tagged#0000000000000002"))
    n[4]++;
  else
    n[5]++;
  return true;
}

/* Footprints (tdm_codelet.footprint): tasks of one codelet and the same
 * bytes but other shapes have models of their own, vectors and square
 * matrices of any size share the codelet's; a footprint function tells
 * tasks apart by their arguments, its 0 meaning the codelet's name; it
 * may not call Tandem; forgetting a codelet forgets every footprint. */
static _Atomic int fp_calls;
static _Atomic int fp_submit = -1, fp_wait = -1, fp_dispatch = -1;

static void plain_task(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
}

static const tdm_codelet shaped = {.name = "shaped", .cpu_fn = plain_task, .nbuffers = 1,
                                   .modes = {TDM_RW}};

static const tdm_codelet nobuf = {.name = "nobuf", .cpu_fn = plain_task};

static uint64_t by_args(const tdm_buffer *bufs, unsigned n, const void *args, size_t size) {
  (void)bufs;
  assert_int_equal(n, 1);
  assert_int_equal(size, sizeof(unsigned));
  if (atomic_fetch_add(&fp_calls, 1) == 0) { /* no call back into Tandem */
    atomic_store(&fp_submit, tdm_submit(the_rt, &(tdm_task_desc){.codelet = &nobuf}));
    atomic_store(&fp_wait, tdm_wait_all(the_rt));
    atomic_store(&fp_dispatch, tdm_dispatch(the_rt));
  }
  return *(const unsigned *)args;
}

static const tdm_codelet tagged = {.struct_size = sizeof(tdm_codelet), .name = "tagged",
                                   .cpu_fn = plain_task, .nbuffers = 1, .modes = {TDM_RW},
                                   .footprint = by_args};

static void test_footprints(void **state) {
  (void)state;
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  test_log log;
  tdm_runtime *rt = sim_runtime("gpu:speedup=2,latency=10us,bandwidth=10G", NULL, dir, &log);
  static double tall[64 * 4], square[16 * 16], big[32 * 32], vec[256];
  tdm_handle *h[4];
  assert_int_equal(tdm_register_matrix(rt, tall, 4, 64, 4, sizeof(double), &h[0]), TDM_OK);
  assert_int_equal(tdm_register_matrix(rt, square, 16, 16, 16, sizeof(double), &h[1]), TDM_OK);
  assert_int_equal(tdm_register_matrix(rt, big, 32, 32, 32, sizeof(double), &h[2]), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, vec, 256, sizeof(double), &h[3]), TDM_OK);
  for (int r = 0; r < 4; r++)
    for (int k = 0; k < 4; k++)
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &shaped, .handles = {h[k]}}),
                       TDM_OK);
  for (unsigned r = 0; r < 12; r++) {
    unsigned tag = r % 3; /* 0: the codelet's name */
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &tagged,
                                                     .handles = {h[1]},
                                                     .args = &tag,
                                                     .args_size = sizeof tag}),
                     TDM_OK);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&fp_submit), TDM_ERR_IN_TASK);
  assert_int_equal(atomic_load(&fp_wait), TDM_ERR_IN_TASK);
  assert_int_equal(atomic_load(&fp_dispatch), TDM_ERR_IN_TASK);
  assert_true(test_log_has(&log, "or a footprint function"));
  for (int k = 0; k < 4; k++)
    assert_int_equal(tdm_handle_unregister(h[k]), TDM_OK);
  tdm_runtime_destroy(rt);

  char path[128];
  snprintf(path, sizeof path, "%s/perfmodel-v1-test-sim.txt", dir);
  tdm_perfmodel *m = tdm__model_new();
  assert_int_equal(tdm__model_load(m, AT_FDCWD, path, NULL), TDM_OK);
  /* names seen: the shaped codelet's (vector, 16x16, 32x32) and one of a
   * footprint (64x4, the same bytes as 16x16); tagged's: name, #1, #2 */
  struct seen {
    unsigned shaped, shaped_fp, tagged, tagged1, tagged2, other;
  } seen = {0};
  tdm__model_each(m, count_names, &seen);
  printf("models: shaped %u, shaped#... %u, tagged %u, tagged#1 %u, tagged#2 %u, other %u\n",
         seen.shaped, seen.shaped_fp, seen.tagged, seen.tagged1, seen.tagged2, seen.other);
  assert_true(seen.shaped > 0 && seen.shaped_fp > 0);
  assert_true(seen.tagged > 0 && seen.tagged1 > 0 && seen.tagged2 > 0);
  assert_int_equal(seen.other, 0);
  /* 16x16 and 64x4 hold the same bytes: each its own record at that size */
  bool cal = false;
  assert_true(tdm__model_predict(m, "shaped", 16 * 16 * 8, "cpu", &cal) > 0);
  tdm__model_free(m);
  unsigned removed = 0;
  assert_int_equal(tdm__model_forget(AT_FDCWD, path, "shaped", NULL, &removed), TDM_OK);
  m = tdm__model_new();
  assert_int_equal(tdm__model_load(m, AT_FDCWD, path, NULL), TDM_OK);
  seen = (struct seen){0};
  tdm__model_each(m, count_names, &seen);
  assert_true(removed > 0 && !seen.shaped && !seen.shaped_fp && seen.tagged1);
  tdm__model_free(m);
  test_remove_dir(dir);
}

/* Tasks and callbacks that an emulated device's thread runs are the
 * runtime's code as on a CPU worker: a blocking call or tdm_dispatch
 * there fails with TDM_ERR_IN_TASK (it would wait for the device). */
static _Atomic int blocked_calls, refused_calls, on_device;

static void try_blocking(void) {
  atomic_fetch_add(&blocked_calls, 2);
  if (tdm_wait_all(the_rt) == TDM_ERR_IN_TASK)
    atomic_fetch_add(&refused_calls, 1);
  if (tdm_dispatch(the_rt) == TDM_ERR_IN_TASK)
    atomic_fetch_add(&refused_calls, 1);
  if (tdm_worker_id(the_rt) >= (int)tdm_runtime_ncpu_workers(the_rt))
    atomic_fetch_add(&on_device, 1);
}

static void blocking_task(const tdm_buffer *b, const void *args, size_t n) {
  (void)b;
  (void)args;
  (void)n;
  try_blocking();
}

static void blocking_callback(void *data) {
  (void)data;
  try_blocking();
}

static const tdm_codelet blocker = {.name = "blocker", .cpu_fn = blocking_task, .nbuffers = 1,
                                    .modes = {TDM_RW}};

static void test_device_threads_refuse_blocking(void **state) {
  (void)state;
  /* random: about a third of the tasks on the device, however loaded
   * the machine (heft may keep such short tasks on the CPU workers) */
  tdm_runtime *rt = sim_runtime("gpu:speedup=50,latency=1us,bandwidth=10G", "random", NULL, NULL);
  atomic_store(&blocked_calls, 0);
  atomic_store(&refused_calls, 0);
  atomic_store(&on_device, 0);
  static double v[32][4];
  tdm_handle *h[32];
  for (int i = 0; i < 32; i++)
    assert_int_equal(tdm_register_vector(rt, v[i], 4, sizeof(double), &h[i]), TDM_OK);
  for (int r = 0; r < 4; r++)
    for (int i = 0; i < 32; i++)
      assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &blocker,
                                                       .handles = {h[i]},
                                                       .callback = blocking_callback}),
                       TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  printf("%d blocking calls from tasks and callbacks, %d refused, %d on the device's thread\n",
         atomic_load(&blocked_calls), atomic_load(&refused_calls), atomic_load(&on_device));
  assert_int_equal(atomic_load(&refused_calls), atomic_load(&blocked_calls));
  assert_true(atomic_load(&on_device) > 0);
  for (int i = 0; i < 32; i++)
    assert_int_equal(tdm_handle_unregister(h[i]), TDM_OK);
  tdm_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_on_device_small_on_cpu),
      cmocka_unit_test(test_two_devices_in_proportion),
      cmocka_unit_test(test_slowed_device_gets_less),
      cmocka_unit_test(test_cpu_only_work_counted),
      cmocka_unit_test(test_models_persist),
      cmocka_unit_test(test_corrupt_model_file),
      cmocka_unit_test(test_copies_own_memory),
      cmocka_unit_test(test_no_copies_shared_memory),
      cmocka_unit_test(test_cpu_kinds_are_classes),
      cmocka_unit_test(test_description_and_errors),
      cmocka_unit_test(test_footprints),
      cmocka_unit_test(test_device_threads_refuse_blocking),
      cmocka_unit_test(test_cpu_only_emulation_stretches),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
