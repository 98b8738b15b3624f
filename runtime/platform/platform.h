/*
 * The platform layer: the machine the runtime runs on. The hwloc topology
 * and where each CPU worker runs (topology.c), the records of devices and
 * the rules that classify and choose them (devices.c, devices.h), and the
 * description of the machine that tdm_runtime_machine reports
 * (machine.c). It calls only the support layer.
 */
#ifndef TDM_PLATFORM_H
#define TDM_PLATFORM_H

#include <hwloc.h>

#include "../support/support.h"
#include "devices.h"

/* ---- topology and worker placement (topology.c) ------------------------ */

/* How many leaves and objects a synthetic description makes: the arities
 * (a number at the start of a level, or after "type:") multiplied level
 * by level, ignoring attributes in parentheses; saturating. */
void tdm__synthetic_size(const char *s, uint64_t *leaves, uint64_t *objects);

/* Where each worker runs and whom it steals from, computed from an hwloc
 * topology. Kept separate from thread creation so that tests can check it
 * on synthetic topologies. */
typedef struct tdm_worker_plan {
  unsigned nworkers;
  unsigned ncores;          /* usable cores found */
  hwloc_bitmap_t usable;    /* the PUs they have that the process may use */
  hwloc_bitmap_t *cpusets;  /* per worker: where to bind (owned) */
  unsigned *core_of;        /* per worker: index of its core in [0,ncores) */
  unsigned *core_logical;   /* per worker: hwloc logical index of its core */
  /* Victims of worker w: victims[w][0 .. nworkers-2], nearest first.
   * group_end[w][k] is the end (exclusive) of the k-th group of equally
   * near victims; ngroups[w] groups. */
  unsigned **victims;
  unsigned **group_end;
  unsigned *ngroups;
  /* CPU kinds (hybrid chips: efficiency and performance cores), from
   * hwloc's cpukinds, ranked as hwloc ranks them: 0 is the most energy
   * efficient. kind_of[w] is the kind of worker w's core; nkinds is 1
   * where the machine reports no kinds. */
  unsigned nkinds;
  unsigned *kind_of;
} tdm_worker_plan;

/* Loads the topology of this machine (loaded once per process and shared
 * by its runtimes, read only), a synthetic one (synthetic != NULL) or an
 * XML one (xml != NULL): given back with tdm__topology_release.
 * Returns TDM_OK or TDM_ERR_TOPOLOGY (logged). */
tdm_status tdm__topology_load(const tdm_runtime *rt, const char *synthetic,
                              const char *xml, hwloc_topology_t *out);
void tdm__topology_release(const tdm_runtime *rt, hwloc_topology_t topo);
/* nworkers 0: one per usable core. Returns TDM_OK, TDM_ERR_TOPOLOGY (no
 * usable core) or TDM_ERR_NO_MEMORY. */
tdm_status tdm__plan_workers(const tdm_runtime *rt, hwloc_topology_t topo,
                             unsigned nworkers, tdm_worker_plan *plan);
void tdm__plan_free(tdm_worker_plan *plan);
/* OS index of the one NUMA node whose CPUs intersect `set`, or -1 when
 * none or several do. */
int tdm__nearest_numa(hwloc_topology_t topo, hwloc_const_cpuset_t set);


/* ---- the machine's description (machine.c) ------------------------------- */

/* Describes the machine once the workers are planned and the devices
 * chosen; frees that description. */
tdm_status tdm__machine_describe(tdm_runtime *rt);
void tdm__machine_free(tdm_runtime *rt);

#endif
