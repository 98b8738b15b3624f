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
#include "platform.h"

#include <ctype.h>
#include <pthread.h>
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

static tdm_status load(const tdm_runtime *rt, const char *synthetic, const char *xml,
                       hwloc_topology_t *out) {
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

/* This machine's topology, loaded once per process and kept to its end:
 * a load reads some two hundred files of sysfs and /proc, and loads (and
 * at its last topology's destruction unloads) hwloc's plugins: 1.2 ms of
 * the 1.5 ms a runtime took to start on a 2-core machine. The runtimes of
 * the process only read it (hwloc's queries may run concurrently on one
 * topology). It is the machine as at its first load: a cgroup's cpuset
 * changed later is not seen (the calling thread's binding is, asked at
 * every creation: usable_cpuset). */
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static hwloc_topology_t shared;

tdm_status tdm__topology_load(const tdm_runtime *rt, const char *synthetic,
                              const char *xml, hwloc_topology_t *out) {
  if (synthetic || xml)
    return load(rt, synthetic, xml, out);
  tdm_status st = TDM_OK;
  TDM_PTHREAD(rt, pthread_mutex_lock(&shared_lock));
  if (!shared)
    st = load(rt, NULL, NULL, &shared);
  *out = shared;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&shared_lock));
  return st;
}

void tdm__topology_release(const tdm_runtime *rt, hwloc_topology_t topo) {
  TDM_PTHREAD(rt, pthread_mutex_lock(&shared_lock));
  bool mine = topo != shared;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&shared_lock));
  if (topo && mine)
    hwloc_topology_destroy(topo);
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

/* The cores (or PUs where the machine reports no cores) with a usable
 * PU, their usable PUs and their kind. */
typedef struct core_list {
  unsigned n;
  hwloc_obj_t *obj;
  hwloc_bitmap_t *set;
  unsigned *kind;
} core_list;

static void cores_free(core_list *c) {
  for (unsigned i = 0; i < c->n; i++)
    hwloc_bitmap_free(c->set[i]);
  free(c->set);
  free(c->obj);
  free(c->kind);
}

static tdm_status find_cores(const tdm_runtime *rt, hwloc_topology_t topo,
                             hwloc_const_bitmap_t usable, core_list *cl) {
  memset(cl, 0, sizeof *cl);
  hwloc_obj_type_t type = HWLOC_OBJ_CORE;
  int n = hwloc_get_nbobjs_by_type(topo, type);
  if (n <= 0) {
    type = HWLOC_OBJ_PU;
    n = hwloc_get_nbobjs_by_type(topo, type);
  }
  cl->obj = n > 0 ? calloc((size_t)n, sizeof *cl->obj) : NULL;
  cl->set = n > 0 ? calloc((size_t)n, sizeof *cl->set) : NULL;
  cl->kind = n > 0 ? calloc((size_t)n, sizeof *cl->kind) : NULL;
  if (n > 0 && (!cl->obj || !cl->set || !cl->kind))
    return TDM_ERR_NO_MEMORY;
  for (int i = 0; i < n; i++) {
    hwloc_obj_t c = hwloc_get_obj_by_type(topo, type, (unsigned)i);
    if (!c || !c->cpuset || !hwloc_bitmap_intersects(c->cpuset, usable))
      continue;
    hwloc_bitmap_t s = hwloc_bitmap_alloc();
    if (!s || hwloc_bitmap_and(s, c->cpuset, usable) < 0) {
      hwloc_bitmap_free(s);
      return TDM_ERR_NO_MEMORY;
    }
    cl->obj[cl->n] = c;
    cl->set[cl->n++] = s;
  }
  if (cl->n == 0) {
    tdm__log(rt, TDM_LOG_ERROR, "no usable CPU core found in the topology");
    return TDM_ERR_TOPOLOGY;
  }
  return TDM_OK;
}

/* CPU kinds: hwloc lists them by increasing efficiency rank. A core in no
 * kind, or in several (hwloc returns -1), counts as kind 0. Cores are
 * then ordered by kind, the most powerful first (a stable insertion sort:
 * a few hundred cores at most). Returns the number of kinds. */
static unsigned sort_by_kind(hwloc_topology_t topo, core_list *cl) {
  int nkinds = hwloc_cpukinds_get_nr(topo, 0);
  for (unsigned c = 0; c < cl->n && nkinds > 1; c++) {
    int k = hwloc_cpukinds_get_by_cpuset(topo, cl->set[c], 0);
    cl->kind[c] = k > 0 ? (unsigned)k : 0;
  }
  for (unsigned c = 1; c < cl->n; c++) {
    hwloc_obj_t o = cl->obj[c];
    hwloc_bitmap_t s = cl->set[c];
    unsigned k = cl->kind[c], j = c;
    for (; j > 0 && cl->kind[j - 1] < k; j--) {
      cl->obj[j] = cl->obj[j - 1];
      cl->set[j] = cl->set[j - 1];
      cl->kind[j] = cl->kind[j - 1];
    }
    cl->obj[j] = o;
    cl->set[j] = s;
    cl->kind[j] = k;
  }
  return nkinds > 1 ? (unsigned)nkinds : 1;
}

/* Worker w on core w mod ncores, with that core's PUs and kind. */
static tdm_status assign_workers(tdm_worker_plan *p, const core_list *cl, unsigned nworkers) {
  p->nworkers = nworkers;
  p->ncores = cl->n;
  p->cpusets = calloc(nworkers, sizeof *p->cpusets);
  p->core_of = calloc(nworkers, sizeof *p->core_of);
  p->core_logical = calloc(nworkers, sizeof *p->core_logical);
  p->victims = calloc(nworkers, sizeof *p->victims);
  p->group_end = calloc(nworkers, sizeof *p->group_end);
  p->ngroups = calloc(nworkers, sizeof *p->ngroups);
  p->kind_of = calloc(nworkers, sizeof *p->kind_of);
  if (!p->cpusets || !p->core_of || !p->core_logical || !p->victims || !p->group_end ||
      !p->ngroups || !p->kind_of)
    return TDM_ERR_NO_MEMORY;
  for (unsigned w = 0; w < nworkers; w++) {
    p->core_of[w] = w % cl->n;
    p->core_logical[w] = cl->obj[w % cl->n]->logical_index;
    p->kind_of[w] = cl->kind[w % cl->n];
    p->cpusets[w] = hwloc_bitmap_dup(cl->set[w % cl->n]);
    p->victims[w] = calloc(nworkers, sizeof(unsigned));
    p->group_end[w] = calloc(nworkers, sizeof(unsigned));
    if (!p->cpusets[w] || !p->victims[w] || !p->group_end[w])
      return TDM_ERR_NO_MEMORY;
  }
  return TDM_OK;
}

/* Each worker's victims, nearest first, in groups of equal distance (the
 * depth of the closest common ancestor of their cores). */
static tdm_status order_victims(hwloc_topology_t topo, tdm_worker_plan *p, const core_list *cl) {
  unsigned nworkers = p->nworkers;
  victim_key *keys = calloc(nworkers, sizeof *keys);
  if (!keys)
    return TDM_ERR_NO_MEMORY;
  for (unsigned w = 0; w < nworkers; w++) {
    unsigned nk = 0;
    hwloc_obj_t mine = cl->obj[p->core_of[w]];
    for (unsigned v = 0; v < nworkers; v++) {
      if (v == w)
        continue;
      hwloc_obj_t theirs = cl->obj[p->core_of[v]];
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
  return TDM_OK;
}

tdm_status tdm__plan_workers(const tdm_runtime *rt, hwloc_topology_t topo,
                             unsigned nworkers, tdm_worker_plan *p) {
  memset(p, 0, sizeof *p);
  hwloc_bitmap_t usable = usable_cpuset(rt, topo);
  if (!usable)
    return TDM_ERR_NO_MEMORY;
  core_list cl;
  tdm_status st = find_cores(rt, topo, usable, &cl);
  if (!st) {
    p->nkinds = sort_by_kind(topo, &cl);
    st = assign_workers(p, &cl, nworkers ? nworkers : cl.n);
  }
  if (!st)
    st = order_victims(topo, p, &cl);
  cores_free(&cl);
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
