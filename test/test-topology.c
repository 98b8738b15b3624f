/* Worker placement and steal order on synthetic hwloc topologies, so that
 * they do not depend on the test machine; the process' affinity mask is
 * respected on the real one. */
#include "common.h"

#include "internal.h"

#include <sched.h>

static tdm_runtime dummy; /* tdm__log needs a runtime; no callback set */

static void count_task(const tdm_buffer *b, const void *args, size_t n);

static void plan(const char *synthetic, unsigned nworkers, hwloc_topology_t *topo,
                 tdm_worker_plan *p) {
  assert_int_equal(tdm__topology_load(&dummy, synthetic, NULL, topo), TDM_OK);
  assert_int_equal(tdm__plan_workers(&dummy, *topo, nworkers, p), TDM_OK);
}

/* Victims of worker w, group by group, as "1|2 3|4 5 6 7". */
static void victims_str(const tdm_worker_plan *p, unsigned w, char *out, size_t size) {
  size_t len = 0;
  unsigned k = 0;
  out[0] = 0;
  for (unsigned g = 0; g < p->ngroups[w]; g++) {
    if (g)
      len += (size_t)snprintf(out + len, size - len, "|");
    for (unsigned first = 1; k < p->group_end[w][g]; k++, first = 0)
      len += (size_t)snprintf(out + len, size - len, "%s%u", first ? "" : " ",
                              p->victims[w][k]);
  }
}

static void test_two_packages_shared_l2(void **state) {
  (void)state;
  hwloc_topology_t topo;
  tdm_worker_plan p;
  /* 2 packages x (1 L3 x 2 L2 x 2 cores) x 2 PUs: 8 cores, 16 PUs */
  plan("pack:2 l3:1 l2:2 core:2 pu:2", 0, &topo, &p);
  assert_int_equal(p.ncores, 8);
  assert_int_equal(p.nworkers, 8);
  char s[128];
  victims_str(&p, 0, s, sizeof s);
  assert_string_equal(s, "1|2 3|4 5 6 7");
  victims_str(&p, 5, s, sizeof s);
  assert_string_equal(s, "4|6 7|0 1 2 3");
  /* each worker on its own core, with both of its PUs */
  for (unsigned w = 0; w < 8; w++) {
    assert_int_equal(p.core_of[w], w);
    assert_int_equal(hwloc_bitmap_weight(p.cpusets[w]), 2);
    assert_true(hwloc_bitmap_isset(p.cpusets[w], 2 * w));
    assert_true(hwloc_bitmap_isset(p.cpusets[w], 2 * w + 1));
  }
  tdm__plan_free(&p);
  hwloc_topology_destroy(topo);
}

static void test_numa_nodes_group_victims(void **state) {
  (void)state;
  hwloc_topology_t topo;
  tdm_worker_plan p;
  /* 1 package, 2 NUMA nodes of 3 cores */
  plan("pack:1 numa:2 core:3 pu:1", 0, &topo, &p);
  assert_int_equal(p.nworkers, 6);
  char s[128];
  victims_str(&p, 1, s, sizeof s);
  assert_string_equal(s, "0 2|3 4 5");
  victims_str(&p, 4, s, sizeof s);
  assert_string_equal(s, "3 5|0 1 2");
  tdm__plan_free(&p);
  hwloc_topology_destroy(topo);
}

static void test_more_workers_than_cores(void **state) {
  (void)state;
  hwloc_topology_t topo;
  tdm_worker_plan p;
  plan("pack:1 core:2 pu:1", 5, &topo, &p);
  assert_int_equal(p.nworkers, 5);
  /* round-robin: workers 0, 2, 4 on core 0; 1, 3 on core 1 */
  assert_int_equal(p.core_of[4], 0);
  assert_int_equal(p.core_of[3], 1);
  char s[64];
  victims_str(&p, 0, s, sizeof s);
  assert_string_equal(s, "2 4|1 3");
  tdm__plan_free(&p);
  hwloc_topology_destroy(topo);
}

/* A hybrid chip: 2 performance cores and 4 efficiency cores, declared to
 * hwloc as CPU kinds; workers record the kind of their core. */
static void test_cpu_kinds(void **state) {
  (void)state;
  hwloc_topology_t topo;
  assert_int_equal(tdm__topology_load(&dummy, "pack:1 core:6 pu:1", NULL, &topo), TDM_OK);
  hwloc_bitmap_t p_cores = hwloc_bitmap_alloc(), e_cores = hwloc_bitmap_alloc();
  hwloc_bitmap_set_range(p_cores, 0, 1);
  hwloc_bitmap_set_range(e_cores, 2, 5);
  assert_int_equal(hwloc_cpukinds_register(topo, e_cores, 0, 0, NULL, 0), 0);
  assert_int_equal(hwloc_cpukinds_register(topo, p_cores, 1, 0, NULL, 0), 0);
  tdm_worker_plan p;
  assert_int_equal(tdm__plan_workers(&dummy, topo, 0, &p), TDM_OK);
  assert_int_equal(p.nworkers, 6);
  assert_int_equal(p.nkinds, 2);
  /* kind 0 is the most energy-efficient: the E cores */
  for (unsigned w = 0; w < 6; w++)
    assert_int_equal(p.kind_of[w], w < 2 ? 1 : 0);
  tdm__plan_free(&p);
  hwloc_topology_destroy(topo);
  /* efficiency cores first in the machine's order (as on many ARM chips):
   * workers are still numbered the most powerful kind first */
  assert_int_equal(tdm__topology_load(&dummy, "pack:1 core:6 pu:1", NULL, &topo), TDM_OK);
  hwloc_bitmap_zero(p_cores);
  hwloc_bitmap_zero(e_cores);
  hwloc_bitmap_set_range(e_cores, 0, 3);
  hwloc_bitmap_set_range(p_cores, 4, 5);
  assert_int_equal(hwloc_cpukinds_register(topo, e_cores, 0, 0, NULL, 0), 0);
  assert_int_equal(hwloc_cpukinds_register(topo, p_cores, 1, 0, NULL, 0), 0);
  assert_int_equal(tdm__plan_workers(&dummy, topo, 0, &p), TDM_OK);
  static const unsigned core[6] = {4, 5, 0, 1, 2, 3};
  for (unsigned w = 0; w < 6; w++) {
    assert_int_equal(p.kind_of[w], w < 2 ? 1 : 0);
    assert_int_equal(p.core_logical[w], core[w]);
    assert_true(hwloc_bitmap_isset(p.cpusets[w], core[w]));
  }
  tdm__plan_free(&p);
  /* without kinds: one kind */
  hwloc_topology_t plain;
  assert_int_equal(tdm__topology_load(&dummy, "pack:1 core:3 pu:1", NULL, &plain), TDM_OK);
  assert_int_equal(tdm__plan_workers(&dummy, plain, 0, &p), TDM_OK);
  assert_int_equal(p.nkinds, 1);
  assert_int_equal(p.kind_of[2], 0);
  tdm__plan_free(&p);
  hwloc_bitmap_free(p_cores);
  hwloc_bitmap_free(e_cores);
  hwloc_topology_destroy(plain);
  hwloc_topology_destroy(topo);
}

/* Recorded machines, as hwloc XML (test/topologies/). */
static void test_xml_two_socket_numa_server(void **state) {
  (void)state;
  hwloc_topology_t topo;
  tdm_worker_plan p;
  assert_int_equal(tdm__topology_load(&dummy, NULL, TDM_TOPOLOGY_DIR "/two-socket-numa.xml", &topo),
                   TDM_OK);
  assert_int_equal(tdm__plan_workers(&dummy, topo, 0, &p), TDM_OK);
  /* 2 packages x 8 cores, 2 PUs each: one worker per core, on both PUs */
  assert_int_equal(p.ncores, 16);
  assert_int_equal(p.nworkers, 16);
  assert_int_equal(hwloc_bitmap_weight(p.cpusets[9]), 2);
  assert_int_equal(p.nkinds, 1);
  char s[128];
  victims_str(&p, 0, s, sizeof s);
  assert_string_equal(s, "1 2 3 4 5 6 7|8 9 10 11 12 13 14 15"); /* own socket first */
  victims_str(&p, 12, s, sizeof s);
  assert_string_equal(s, "8 9 10 11 13 14 15|0 1 2 3 4 5 6 7");
  /* NUMA locality: a set inside one socket is near that socket's node */
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_bitmap_set_range(set, 16, 19);
  assert_int_equal(tdm__nearest_numa(topo, set), 1);
  hwloc_bitmap_set_range(set, 0, 1);
  assert_int_equal(tdm__nearest_numa(topo, set), -1); /* near both */
  hwloc_bitmap_free(set);
  tdm__plan_free(&p);
  hwloc_topology_destroy(topo);

  /* the machine as the runtime reports it */
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.topology_xml = TDM_TOPOLOGY_DIR "/two-socket-numa.xml";
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  assert_non_null(strstr(mi.topology_source, "XML topology "));
  assert_int_equal(mi.packages, 2);
  assert_int_equal(mi.numa_nodes, 2);
  assert_int_equal(mi.cores, 16);
  assert_int_equal(mi.pus, 32);
  assert_int_equal(mi.usable_cores, 16);
  assert_int_equal(mi.usable_pus, 32);
  assert_string_equal(mi.usable_cpus, "0-31");
  assert_int_equal(mi.l3_count, 2);
  assert_int_equal(mi.l2_count, 16);
  assert_int_equal(mi.cpu_kinds, 1);
  assert_int_equal(mi.cpu_workers, 16);
  for (unsigned w = 0; w < 16; w++) {
    tdm_worker_info wi = {.struct_size = sizeof wi};
    assert_int_equal(tdm_runtime_worker(rt, w, &wi), TDM_OK);
    assert_int_equal(wi.type, TDM_WORKER_CPU);
    assert_int_equal(wi.core, (int)w);
    assert_int_equal(wi.numa_node, w < 8 ? 0 : 1);
    char cpus[16];
    snprintf(cpus, sizeof cpus, "%u-%u", 2 * w, 2 * w + 1);
    assert_string_equal(wi.cpus, cpus);
  }
  tdm_cpu_kind_info ki = {.struct_size = sizeof ki};
  assert_int_equal(tdm_runtime_cpu_kind(rt, 0, &ki), TDM_OK);
  assert_int_equal(ki.cores, 16);
  assert_int_equal(ki.workers, 16);
  assert_string_equal(ki.worker_ids, "0-15");
  tdm_runtime_destroy(rt);
}

static void test_xml_hybrid_laptop(void **state) {
  (void)state;
  hwloc_topology_t topo;
  tdm_worker_plan p;
  assert_int_equal(tdm__topology_load(&dummy, NULL, TDM_TOPOLOGY_DIR "/hybrid-laptop.xml", &topo),
                   TDM_OK);
  assert_int_equal(tdm__plan_workers(&dummy, topo, 0, &p), TDM_OK);
  /* 4 performance and 8 efficiency cores, the kinds recorded in the XML */
  assert_int_equal(p.nworkers, 12);
  assert_int_equal(p.nkinds, 2);
  for (unsigned w = 0; w < 12; w++)
    assert_int_equal(p.kind_of[w], w < 4 ? 1 : 0);
  tdm__plan_free(&p);
  hwloc_topology_destroy(topo);
  /* through the public API: 12 workers, not bound, running tasks */
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.topology_xml = TDM_TOPOLOGY_DIR "/hybrid-laptop.xml";
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  assert_int_equal(tdm_runtime_nworkers(rt), 12);
  assert_false(rt->bind);
  /* the kinds as the runtime reports them: workers grouped by kind */
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  assert_int_equal(mi.cpu_kinds, 2);
  static const struct {
    const char *name, *ids;
    int efficiency;
    unsigned cores;
  } kinds[2] = {{"IntelAtom", "4-11", 0, 8}, {"IntelCore", "0-3", 1, 4}};
  for (unsigned k = 0; k < 2; k++) {
    tdm_cpu_kind_info ki = {.struct_size = sizeof ki};
    assert_int_equal(tdm_runtime_cpu_kind(rt, k, &ki), TDM_OK);
    assert_string_equal(ki.name, kinds[k].name);
    assert_string_equal(ki.worker_ids, kinds[k].ids);
    assert_int_equal(ki.efficiency, kinds[k].efficiency);
    assert_int_equal(ki.cores, kinds[k].cores);
    assert_int_equal(ki.workers, kinds[k].cores);
  }
  tdm_worker_info wi = {.struct_size = sizeof wi};
  assert_int_equal(tdm_runtime_worker(rt, 5, &wi), TDM_OK);
  assert_int_equal(wi.cpu_kind, 0);
  assert_string_equal(wi.cpus, "5");
  _Atomic int n = 0, *pn = &n;
  static const tdm_codelet cl = {.name = "count", .cpu_fn = count_task};
  for (int i = 0; i < 100; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .args = &pn,
                                                      .args_size = sizeof pn}), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&n), 100);
  tdm_runtime_destroy(rt);
  /* a missing file, and both kinds of topology at once, are refused */
  cfg.topology_xml = "/nonexistent/machine.xml";
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_TOPOLOGY);
  cfg.topology_xml = TDM_TOPOLOGY_DIR "/hybrid-laptop.xml";
  cfg.synthetic_topology = "pack:1 core:2 pu:1";
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_INVALID_ARG);
}

static void test_bad_synthetic_topology(void **state) {
  (void)state;
  hwloc_topology_t topo;
  assert_int_equal(tdm__topology_load(&dummy, "pack:x nonsense", NULL, &topo), TDM_ERR_TOPOLOGY);
  assert_null(topo);
  /* through the public API: a clear status and a log message */
  test_log log;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.synthetic_topology = "not a topology";
  test_log_attach(&cfg, &log);
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_TOPOLOGY);
  assert_null(rt);
  assert_true(test_log_errors(&log) >= 1);
}

/* Descriptions beyond the documented size are refused at once, before
 * hwloc builds millions of objects; the largest one taken loads. */
static void test_huge_synthetic_topology(void **state) {
  (void)state;
  static const char *const huge[] = {
      "pack:1000 core:1000 pu:1000",
      "pack:4 core:4 pu:1025",                              /* 16400 PUs */
      "pack:99999999999999999999 pu:99999999999999999999", /* overflows */
      "numa:2(memory=1GB) core:20000",
  };
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    test_log log;
    tdm_config cfg;
    tdm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.synthetic_topology = huge[i];
    test_log_attach(&cfg, &log);
    tdm_runtime *rt;
    assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_ERR_TOPOLOGY);
    assert_true(test_log_has(&log, "is too large")); /* refused before hwloc builds it */
  }
  /* 1 + 2 + 8 + 64 + 16384 objects: taken */
  hwloc_topology_t topo;
  assert_int_equal(tdm__topology_load(&dummy, "pack:2 numa:4 core:8 pu:256", NULL, &topo),
                   TDM_OK);
  assert_int_equal(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU), 16384);
  hwloc_topology_destroy(topo);
}

/* A runtime on a synthetic machine: 8 workers, unbound, running tasks. */
static void count_task(const tdm_buffer *b, const void *args, size_t n) {
  (void)b; (void)n;
  atomic_fetch_add(*(_Atomic int *const *)args, 1);
}

static void test_runtime_on_synthetic_machine(void **state) {
  (void)state;
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.synthetic_topology = "pack:2 core:4 pu:1";
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  assert_int_equal(tdm_runtime_nworkers(rt), 8);
  _Atomic int n = 0, *pn = &n;
  static const tdm_codelet cl = {.name = "count", .cpu_fn = count_task};
  for (int i = 0; i < 1000; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .args = &pn,
                                                      .args_size = sizeof pn}), TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(atomic_load(&n), 1000);
  tdm_runtime_destroy(rt);
}

/* taskset: with the process bound to one CPU, the runtime plans one
 * worker, on that CPU. */
static void test_affinity_mask_respected(void **state) {
  (void)state;
  cpu_set_t old, one;
  assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
  int cpu = -1;
  for (int i = 0; i < CPU_SETSIZE && cpu < 0; i++)
    if (CPU_ISSET(i, &old))
      cpu = i;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(&cfg, &rt);
  assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
  assert_int_equal(st, TDM_OK);
  assert_int_equal(tdm_runtime_nworkers(rt), 1);
  assert_true(hwloc_bitmap_isset(rt->plan.cpusets[0], (unsigned)cpu));
  tdm_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_packages_shared_l2),
      cmocka_unit_test(test_numa_nodes_group_victims),
      cmocka_unit_test(test_more_workers_than_cores),
      cmocka_unit_test(test_cpu_kinds),
      cmocka_unit_test(test_xml_two_socket_numa_server),
      cmocka_unit_test(test_xml_hybrid_laptop),
      cmocka_unit_test(test_bad_synthetic_topology),
      cmocka_unit_test(test_huge_synthetic_topology),
      cmocka_unit_test(test_runtime_on_synthetic_machine),
      cmocka_unit_test(test_affinity_mask_respected),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
