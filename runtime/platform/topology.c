/*
 * Topology: which cores the workers run on and whom each worker steals from.
 *
 * The usable cores are the cores of the hwloc topology that have at least
 * one PU in the allowed cpuset (hwloc removes what the cgroup forbids) and,
 * on the real machine, in the process' affinity mask (taskset). One worker
 * runs per usable core unless the configuration asks for a number; extra
 * workers are spread round-robin over the cores.
 *
 * Steal order: a thief first tries victims that share the deepest hwloc
 * ancestor with it (same core, then same L2, L3, NUMA node, package...),
 * because the data their tasks touch is likely in a cache it shares. Victims
 * at the same distance form a group; within a group the thief starts at a
 * random member so that thieves spread out.
 *
 * CPU kinds: on hybrid chips hwloc reports kinds of cores (efficiency and
 * performance cores) with an efficiency rank; each worker records the kind
 * of its core, so that scheduling can treat kinds as worker classes.
 * Workers are numbered kind by kind, the most powerful kind first, so that
 * each kind is a range of workers.
 */
#include "../internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void tdm__synthetic_size(const char *s, uint64_t *leaves, uint64_t *objects) {
  const uint64_t big = UINT64_MAX / 2;
  uint64_t width = 1, total = 1;
  int depth = 0;
  for (const char *p = s; *p;) {
    bool at_level = p == s || p[-1] == ':' || isspace((unsigned char)p[-1]);
    if (*p == '(' || *p == ')') {
      depth += *p == '(' ? 1 : -1;
      p++;
    } else if (!depth && at_level && isdigit((unsigned char)*p)) {
      char *end;
      unsigned long long v = strtoull(p, &end, 10);
      width = v && width > big / v ? big : width * v;
      total = total > big - width ? big : total + width;
      p = end;
    } else {
      p++;
    }
  }
  *leaves = width;
  *objects = total;
}

tdm_status tdm__topology_load(const tdm_runtime *rt, const char *synthetic,
                              const char *xml, hwloc_topology_t *out) {
  hwloc_topology_t topo;
  *out = NULL;
  uint64_t leaves, objects;
  if (synthetic && (tdm__synthetic_size(synthetic, &leaves, &objects),
                    leaves > TDM_MAX_SYNTHETIC_PUS || objects > TDM_MAX_SYNTHETIC_OBJECTS)) {
    tdm__log(rt, TDM_LOG_ERROR,
             "synthetic topology \"%.200s\" is too large: %llu processing units and %llu "
             "objects, at most %d and %d",
             synthetic, (unsigned long long)leaves, (unsigned long long)objects,
             TDM_MAX_SYNTHETIC_PUS, TDM_MAX_SYNTHETIC_OBJECTS);
    return TDM_ERR_TOPOLOGY;
  }
  if (hwloc_topology_init(&topo) < 0) {
    tdm__log(rt, TDM_LOG_ERROR, "hwloc_topology_init failed");
    return TDM_ERR_TOPOLOGY;
  }
  if (synthetic && hwloc_topology_set_synthetic(topo, synthetic) < 0) {
    tdm__log(rt, TDM_LOG_ERROR, "invalid synthetic topology \"%s\"", synthetic);
    hwloc_topology_destroy(topo);
    return TDM_ERR_TOPOLOGY;
  }
  if (xml && hwloc_topology_set_xml(topo, xml) < 0) {
    tdm__log(rt, TDM_LOG_ERROR, "cannot read the XML topology \"%s\"", xml);
    hwloc_topology_destroy(topo);
    return TDM_ERR_TOPOLOGY;
  }
  if (hwloc_topology_load(topo) < 0) {
    tdm__log(rt, TDM_LOG_ERROR, "hwloc_topology_load failed");
    hwloc_topology_destroy(topo);
    return TDM_ERR_TOPOLOGY;
  }
  *out = topo;
  return TDM_OK;
}

/* The cpuset the workers may use: allowed by hwloc and, on this machine,
 * by the binding of the thread creating the runtime (taskset), which the
 * workers would otherwise inherit. */
static hwloc_bitmap_t usable_cpuset(const tdm_runtime *rt, hwloc_topology_t topo) {
  hwloc_bitmap_t set = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo));
  if (!set)
    return NULL;
  if (hwloc_topology_is_thissystem(topo)) {
    hwloc_bitmap_t bound = hwloc_bitmap_alloc();
    if (!bound) {
      hwloc_bitmap_free(set);
      return NULL;
    }
    if (hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_THREAD) == 0 &&
        !hwloc_bitmap_iszero(bound)) {
      if (hwloc_bitmap_and(set, set, bound) < 0) {
        hwloc_bitmap_free(bound);
        hwloc_bitmap_free(set);
        return NULL;
      }
    } else {
      tdm__log(rt, TDM_LOG_INFO,
               "process CPU binding unknown: using every allowed CPU");
    }
    hwloc_bitmap_free(bound);
  }
  return set;
}

void tdm__plan_free(tdm_worker_plan *p) {
  if (p->cpusets)
    for (unsigned i = 0; i < p->nworkers; i++)
      hwloc_bitmap_free(p->cpusets[i]);
  if (p->victims)
    for (unsigned i = 0; i < p->nworkers; i++)
      free(p->victims[i]);
  if (p->group_end)
    for (unsigned i = 0; i < p->nworkers; i++)
      free(p->group_end[i]);
  free(p->cpusets);
  free(p->core_of);
  free(p->core_logical);
  free(p->victims);
  free(p->group_end);
  free(p->ngroups);
  free(p->kind_of);
  hwloc_bitmap_free(p->usable);
  memset(p, 0, sizeof *p);
}

/* Sorting victims: by closeness, descending, then by index. */
typedef struct {
  unsigned worker;
  int closeness;
} victim_key;

static int cmp_victims(const void *a, const void *b) {
  const victim_key *x = a, *y = b;
  if (x->closeness != y->closeness)
    return x->closeness > y->closeness ? -1 : 1;
  return x->worker < y->worker ? -1 : (x->worker > y->worker);
}

tdm_status tdm__plan_workers(const tdm_runtime *rt, hwloc_topology_t topo,
                             unsigned nworkers, tdm_worker_plan *p) {
  memset(p, 0, sizeof *p);
  hwloc_bitmap_t usable = usable_cpuset(rt, topo);
  if (!usable)
    return TDM_ERR_NO_MEMORY;

  /* Cores (or PUs where the machine reports no cores) with a usable PU. */
  hwloc_obj_type_t type = HWLOC_OBJ_CORE;
  int n = hwloc_get_nbobjs_by_type(topo, type);
  if (n <= 0) {
    type = HWLOC_OBJ_PU;
    n = hwloc_get_nbobjs_by_type(topo, type);
  }
  hwloc_obj_t *cores = n > 0 ? calloc((size_t)n, sizeof *cores) : NULL;
  hwloc_bitmap_t *core_sets = n > 0 ? calloc((size_t)n, sizeof *core_sets) : NULL;
  unsigned *core_kind = NULL;
  tdm_status st = TDM_OK;
  unsigned ncores = 0;
  if (n > 0 && (!cores || !core_sets)) {
    st = TDM_ERR_NO_MEMORY;
    goto out;
  }
  for (int i = 0; i < n; i++) {
    hwloc_obj_t c = hwloc_get_obj_by_type(topo, type, (unsigned)i);
    if (!c || !c->cpuset || !hwloc_bitmap_intersects(c->cpuset, usable))
      continue;
    hwloc_bitmap_t s = hwloc_bitmap_alloc();
    if (!s || hwloc_bitmap_and(s, c->cpuset, usable) < 0) {
      hwloc_bitmap_free(s);
      st = TDM_ERR_NO_MEMORY;
      goto out;
    }
    cores[ncores] = c;
    core_sets[ncores++] = s;
  }
  if (ncores == 0) {
    tdm__log(rt, TDM_LOG_ERROR, "no usable CPU core found in the topology");
    st = TDM_ERR_TOPOLOGY;
    goto out;
  }
  /* CPU kinds: hwloc lists them by increasing efficiency rank. A core in
   * no kind, or in several (hwloc returns -1), counts as kind 0. Cores are
   * then ordered by kind, the most powerful first (a stable insertion
   * sort: a few hundred cores at most). */
  int nkinds = hwloc_cpukinds_get_nr(topo, 0);
  p->nkinds = nkinds > 1 ? (unsigned)nkinds : 1;
  core_kind = calloc(ncores, sizeof *core_kind);
  if (!core_kind) {
    st = TDM_ERR_NO_MEMORY;
    goto out;
  }
  for (unsigned c = 0; c < ncores && nkinds > 1; c++) {
    int k = hwloc_cpukinds_get_by_cpuset(topo, core_sets[c], 0);
    core_kind[c] = k > 0 ? (unsigned)k : 0;
  }
  for (unsigned c = 1; c < ncores; c++) {
    hwloc_obj_t o = cores[c];
    hwloc_bitmap_t s = core_sets[c];
    unsigned k = core_kind[c], j = c;
    for (; j > 0 && core_kind[j - 1] < k; j--) {
      cores[j] = cores[j - 1];
      core_sets[j] = core_sets[j - 1];
      core_kind[j] = core_kind[j - 1];
    }
    cores[j] = o;
    core_sets[j] = s;
    core_kind[j] = k;
  }
  if (nworkers == 0)
    nworkers = ncores;

  p->nworkers = nworkers;
  p->ncores = ncores;
  p->cpusets = calloc(nworkers, sizeof *p->cpusets);
  p->core_of = calloc(nworkers, sizeof *p->core_of);
  p->core_logical = calloc(nworkers, sizeof *p->core_logical);
  p->victims = calloc(nworkers, sizeof *p->victims);
  p->group_end = calloc(nworkers, sizeof *p->group_end);
  p->ngroups = calloc(nworkers, sizeof *p->ngroups);
  p->kind_of = calloc(nworkers, sizeof *p->kind_of);
  victim_key *keys = calloc(nworkers, sizeof *keys);
  if (!p->cpusets || !p->core_of || !p->core_logical || !p->victims || !p->group_end || !p->ngroups ||
      !p->kind_of || !keys) {
    free(keys);
    st = TDM_ERR_NO_MEMORY;
    goto out;
  }
  for (unsigned w = 0; w < nworkers; w++) {
    p->core_of[w] = w % ncores;
    p->core_logical[w] = cores[w % ncores]->logical_index;
    p->cpusets[w] = hwloc_bitmap_dup(core_sets[w % ncores]);
    p->victims[w] = calloc(nworkers, sizeof(unsigned));
    p->group_end[w] = calloc(nworkers, sizeof(unsigned));
    if (!p->cpusets[w] || !p->victims[w] || !p->group_end[w]) {
      free(keys);
      st = TDM_ERR_NO_MEMORY;
      goto out;
    }
  }
  for (unsigned w = 0; w < nworkers; w++)
    p->kind_of[w] = core_kind[w % ncores];

  for (unsigned w = 0; w < nworkers; w++) {
    unsigned nk = 0;
    hwloc_obj_t mine = cores[p->core_of[w]];
    for (unsigned v = 0; v < nworkers; v++) {
      if (v == w)
        continue;
      hwloc_obj_t theirs = cores[p->core_of[v]];
      hwloc_obj_t common =
          mine == theirs ? mine : hwloc_get_common_ancestor_obj(topo, mine, theirs);
      keys[nk].worker = v;
      keys[nk++].closeness = common ? common->depth : 0;
    }
    qsort(keys, nk, sizeof *keys, cmp_victims);
    unsigned g = 0;
    for (unsigned k = 0; k < nk; k++) {
      p->victims[w][k] = keys[k].worker;
      if (k + 1 == nk || keys[k + 1].closeness != keys[k].closeness)
        p->group_end[w][g++] = k + 1;
    }
    p->ngroups[w] = g;
  }
  free(keys);
out:
  for (unsigned i = 0; i < ncores; i++)
    hwloc_bitmap_free(core_sets[i]);
  free(core_sets);
  free(cores);
  free(core_kind);
  if (st) {
    hwloc_bitmap_free(usable);
    tdm__plan_free(p);
  } else {
    p->usable = usable;
  }
  return st;
}

int tdm__nearest_numa(hwloc_topology_t topo, hwloc_const_cpuset_t set) {
  int found = -1;
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, NULL); n;
       n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) {
    if (!n->cpuset || !hwloc_bitmap_intersects(n->cpuset, set))
      continue;
    if (found >= 0)
      return -1; /* equally near several nodes */
    found = (int)n->os_index;
  }
  return found;
}
