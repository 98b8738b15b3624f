/*
 * The machine as the runtime sees it: processor topology, CPU kinds,
 * workers, OpenCL platforms and devices (tdm_runtime_machine and the other
 * queries of tandem.h). The description is computed once, when the runtime
 * is created, and read by the queries without locking: it never changes.
 */
#include "platform.h"
#include "../objects.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tdm_machine {
  tdm_machine_info info;
  char source[512];
  char cpu_model[128];
  char *usable_cpus;
  tdm_cpu_kind_info *kinds;
  char **kind_workers;
  tdm_worker_info *workers; /* CPU and device workers */
  char **worker_cpus;       /* CPU workers */
};

void tdm__machine_free(tdm_runtime *rt) {
  struct tdm_machine *m = rt->machine;
  if (!m)
    return;
  free(m->usable_cpus);
  if (m->kind_workers)
    for (unsigned k = 0; k < m->info.cpu_kinds; k++)
      free(m->kind_workers[k]);
  if (m->worker_cpus)
    for (unsigned w = 0; w < rt->nworkers; w++)
      free(m->worker_cpus[w]);
  free(m->kind_workers);
  free(m->worker_cpus);
  free(m->kinds);
  free(m->workers);
  free(m);
  rt->machine = NULL;
}

static unsigned count(hwloc_topology_t topo, hwloc_obj_type_t type) {
  int n = hwloc_get_nbobjs_by_type(topo, type);
  return n > 0 ? (unsigned)n : 0;
}

static void cache(hwloc_topology_t topo, hwloc_obj_type_t type, uint64_t *bytes,
                  unsigned *n) {
  hwloc_obj_t c = hwloc_get_obj_by_type(topo, type, 0);
  *bytes = c && c->attr ? c->attr->cache.size : 0;
  *n = count(topo, type);
}

static const char *info_of(hwloc_obj_t o, const char *name) {
  const char *v = o ? hwloc_obj_get_info_by_name(o, name) : NULL;
  return v ? v : "";
}

/* hwloc_bitmap_list_asprintf, with NULL on failure. */
static char *list_string(hwloc_const_bitmap_t set) {
  char *s = NULL;
  if (hwloc_bitmap_list_asprintf(&s, set) < 0)
    return NULL;
  return s;
}

static tdm_status describe_kinds(tdm_runtime *rt, struct tdm_machine *m) {
  hwloc_topology_t topo = rt->topo;
  unsigned nk = rt->plan.nkinds;
  int nr = hwloc_cpukinds_get_nr(topo, 0);
  m->kinds = calloc(nk, sizeof *m->kinds);
  m->kind_workers = calloc(nk, sizeof *m->kind_workers);
  hwloc_bitmap_t ids = hwloc_bitmap_alloc();
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  tdm_status st = TDM_OK;
  if (!m->kinds || !m->kind_workers || !ids || !set) {
    st = TDM_ERR_NO_MEMORY;
    goto out;
  }
  m->info.cpu_kinds = nk;
  for (unsigned k = 0; k < nk; k++) {
    tdm_cpu_kind_info *ki = &m->kinds[k];
    ki->struct_size = sizeof *ki;
    ki->efficiency = -1;
    ki->name = "";
    ki->cores = rt->plan.ncores;
    if (nr >= 1) {
      int eff = -1;
      unsigned ninfos = 0;
      struct hwloc_info_s *infos = NULL;
      if (hwloc_cpukinds_get_info(topo, k, set, &eff, &ninfos, &infos, 0) == 0) {
        ki->efficiency = eff;
        for (unsigned i = 0; i < ninfos; i++)
          if (!strcmp(infos[i].name, "CoreType"))
            ki->name = infos[i].value;
        if (hwloc_bitmap_and(set, set, rt->plan.usable) < 0) {
          st = TDM_ERR_NO_MEMORY;
          goto out;
        }
        int n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE);
        ki->cores = n > 0 ? (unsigned)n : 0;
      }
    }
    hwloc_bitmap_zero(ids);
    for (unsigned w = 0; w < rt->nworkers; w++)
      if (rt->plan.kind_of[w] == k) {
        ki->workers++;
        if (hwloc_bitmap_set(ids, w) < 0) {
          st = TDM_ERR_NO_MEMORY;
          goto out;
        }
      }
    m->kind_workers[k] = list_string(ids);
    if (!m->kind_workers[k]) {
      st = TDM_ERR_NO_MEMORY;
      goto out;
    }
    ki->worker_ids = m->kind_workers[k];
  }
out:
  hwloc_bitmap_free(ids);
  hwloc_bitmap_free(set);
  return st;
}

static tdm_status describe_workers(tdm_runtime *rt, struct tdm_machine *m) {
  unsigned n = rt->nworkers + rt->ndevice_workers;
  m->workers = calloc(n, sizeof *m->workers);
  m->worker_cpus = calloc(rt->nworkers, sizeof *m->worker_cpus);
  if (!m->workers || !m->worker_cpus)
    return TDM_ERR_NO_MEMORY;
  for (unsigned w = 0; w < n; w++) {
    tdm_worker_info *wi = &m->workers[w];
    wi->struct_size = sizeof *wi;
    if (w < rt->nworkers) {
      wi->type = TDM_WORKER_CPU;
      wi->cpu_kind = rt->plan.kind_of[w];
      wi->core = (int)rt->plan.core_logical[w];
      m->worker_cpus[w] = list_string(rt->plan.cpusets[w]);
      if (!m->worker_cpus[w])
        return TDM_ERR_NO_MEMORY;
      wi->cpus = m->worker_cpus[w];
      wi->numa_node = tdm__nearest_numa(rt->topo, rt->plan.cpusets[w]);
      wi->device = -1;
    } else {
      unsigned d = rt->device_of[w - rt->nworkers];
      wi->type = TDM_WORKER_DEVICE;
      wi->core = -1;
      wi->cpus = "";
      wi->numa_node = rt->devices[d].numa_node;
      wi->device = (int)d;
    }
  }
  return TDM_OK;
}

tdm_status tdm__machine_describe(tdm_runtime *rt) {
  struct tdm_machine *m = calloc(1, sizeof *m);
  if (!m)
    return TDM_ERR_NO_MEMORY;
  rt->machine = m;
  hwloc_topology_t topo = rt->topo;
  tdm_machine_info *mi = &m->info;
  mi->struct_size = sizeof *mi;
  if (rt->cfg.synthetic_topology)
    snprintf(m->source, sizeof m->source, "synthetic topology %s", rt->cfg.synthetic_topology);
  else if (rt->cfg.topology_xml)
    snprintf(m->source, sizeof m->source, "XML topology %s", rt->cfg.topology_xml);
  else
    snprintf(m->source, sizeof m->source, "this machine");
  mi->topology_source = m->source;
  /* as the processor reports it, without the padding some add */
  snprintf(m->cpu_model, sizeof m->cpu_model, "%s",
           info_of(hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0), "CPUModel"));
  for (size_t n = strlen(m->cpu_model); n && m->cpu_model[n - 1] == ' '; n--)
    m->cpu_model[n - 1] = 0;
  mi->cpu_model = m->cpu_model;
  mi->packages = count(topo, HWLOC_OBJ_PACKAGE);
  mi->numa_nodes = count(topo, HWLOC_OBJ_NUMANODE);
  mi->cores = count(topo, HWLOC_OBJ_CORE);
  mi->pus = count(topo, HWLOC_OBJ_PU);
  mi->usable_cores = rt->plan.ncores;
  int npu = hwloc_bitmap_weight(rt->plan.usable);
  mi->usable_pus = npu > 0 ? (unsigned)npu : 0;
  m->usable_cpus = list_string(rt->plan.usable);
  if (!m->usable_cpus)
    return TDM_ERR_NO_MEMORY;
  mi->usable_cpus = m->usable_cpus;
  mi->memory_bytes = hwloc_get_root_obj(topo)->total_memory;
  cache(topo, HWLOC_OBJ_L1CACHE, &mi->l1d_bytes, &mi->l1d_count);
  cache(topo, HWLOC_OBJ_L2CACHE, &mi->l2_bytes, &mi->l2_count);
  cache(topo, HWLOC_OBJ_L3CACHE, &mi->l3_bytes, &mi->l3_count);
  mi->cpu_workers = rt->nworkers;
  mi->device_workers = rt->ndevice_workers;
  mi->opencl_status = rt->opencl_report.status;
  mi->opencl_summary = rt->opencl_report.summary;
  mi->opencl_platforms = rt->nplatforms;
  mi->opencl_devices = rt->ndevices;
  mi->devices = rt->selection.text;
  mi->opencl_cpu_devices = rt->cfg.opencl_cpu_devices != 0;
  mi->device_memory = rt->cfg.device_memory;
  tdm_status st = describe_kinds(rt, m);
  if (!st)
    st = describe_workers(rt, m);
  return st;
}

/* ---- the queries -------------------------------------------------------- */

/* Copies `ours` (the current version's structure, `size` bytes) to the
 * caller's, whose struct_size says how much it has room for. */
/* Copies our answer (size bytes) into the caller's structure, whose
 * struct_size must be at least `first`, the structure's size in its first
 * version: fields added since are left out for a caller built before. */
static tdm_status answer_grown(const tdm_runtime *rt, const char *what, void *out,
                               const void *ours, size_t size, size_t first) {
  if (!rt || !out) {
    if (rt)
      tdm__log(rt, TDM_LOG_ERROR, "%s: NULL structure", what);
    return TDM_ERR_INVALID_ARG;
  }
  size_t room = *(const size_t *)out;
  if (room < first) {
    tdm__log(rt, TDM_LOG_ERROR, "%s: struct_size %zu is smaller than %zu (set it to sizeof)",
             what, room, size);
    return TDM_ERR_INVALID_ARG;
  }
  memcpy(out, ours, room < size ? room : size);
  *(size_t *)out = room;
  return TDM_OK;
}

static tdm_status answer(const tdm_runtime *rt, const char *what, void *out, const void *ours,
                         size_t size) {
  return answer_grown(rt, what, out, ours, size, size);
}

static tdm_status out_of_range(const tdm_runtime *rt, const char *what, unsigned i,
                               unsigned n) {
  if (rt)
    tdm__log(rt, TDM_LOG_ERROR, "%s: index %u out of range (there are %u)", what, i, n);
  return TDM_ERR_INVALID_ARG;
}

tdm_status tdm_runtime_machine(const tdm_runtime *rt, tdm_machine_info *info) {
  if (rt)
    TDM_FORK_GUARD(rt, "tdm_runtime_machine");
  return answer(rt, "tdm_runtime_machine", info, rt ? &rt->machine->info : NULL,
                sizeof *info);
}

tdm_status tdm_runtime_cpu_kind(const tdm_runtime *rt, unsigned kind, tdm_cpu_kind_info *info) {
  if (rt)
    TDM_FORK_GUARD(rt, "tdm_runtime_cpu_kind");
  if (rt && kind >= rt->machine->info.cpu_kinds)
    return out_of_range(rt, "tdm_runtime_cpu_kind", kind, rt->machine->info.cpu_kinds);
  return answer(rt, "tdm_runtime_cpu_kind", info, rt ? &rt->machine->kinds[kind] : NULL,
                sizeof *info);
}

tdm_status tdm_runtime_worker(const tdm_runtime *rt, unsigned worker, tdm_worker_info *info) {
  if (rt)
    TDM_FORK_GUARD(rt, "tdm_runtime_worker");
  unsigned n = rt ? rt->nworkers + rt->ndevice_workers : 0; /* every worker */
  if (rt && worker >= n)
    return out_of_range(rt, "tdm_runtime_worker", worker, n);
  return answer(rt, "tdm_runtime_worker", info, rt ? &rt->machine->workers[worker] : NULL,
                sizeof *info);
}

tdm_status tdm_runtime_platform(const tdm_runtime *rt, unsigned platform,
                                tdm_platform_info *info) {
  if (rt)
    TDM_FORK_GUARD(rt, "tdm_runtime_platform");
  if (rt && platform >= rt->nplatforms)
    return out_of_range(rt, "tdm_runtime_platform", platform, rt->nplatforms);
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  const tdm_platform_record *p = &rt->platforms[platform];
  tdm_platform_info pi = {.struct_size = sizeof pi,
                          .name = p->name,
                          .vendor = p->vendor,
                          .version = p->version,
                          .devices = p->ndevices};
  return answer(rt, "tdm_runtime_platform", info, &pi, sizeof pi);
}

tdm_status tdm_runtime_device(const tdm_runtime *rt, unsigned device, tdm_device_info *info) {
  if (rt)
    TDM_FORK_GUARD(rt, "tdm_runtime_device");
  if (rt && device >= rt->ndevices)
    return out_of_range(rt, "tdm_runtime_device", device, rt->ndevices);
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  const tdm_device_record *d = &rt->devices[device];
  tdm_device_info di = {
      .struct_size = sizeof di,
      .platform = d->platform,
      .name = d->name,
      .vendor = d->vendor,
      .driver_version = d->driver_version,
      .opencl_version = d->version,
      .device_class = d->cls,
      .class_reason = d->reason,
      .shared_memory = d->shared_memory,
      .memory_reason = d->memory_reason,
      .compute_units = d->compute_units,
      .clock_mhz = d->clock_mhz,
      .global_mem_bytes = d->global_mem,
      .max_alloc_bytes = d->max_alloc,
      .local_mem_bytes = d->local_mem,
      .fp64 = d->fp64,
      .host_unified_memory = d->host_unified,
      .svm_capabilities = d->svm_caps,
      .has_pci = d->has_pci,
      .pci_domain = d->pci_domain,
      .pci_bus = d->pci_bus,
      .pci_device = d->pci_device,
      .pci_function = d->pci_function,
      .has_uuid = d->has_uuid,
      .duplicate_of = d->duplicate_of,
      .numa_node = d->numa_node,
      .near_cpus = d->near_cpus,
      .used = d->used,
      .usage = d->usage,
      .worker = d->worker,
      .quarantined = atomic_load(&d->quarantined),
      .quarantine_reason = "",
  };
  if (di.quarantined) /* written before the flag, never again */
    di.quarantine_reason = d->quarantine_reason;
  memcpy(di.uuid, d->uuid, sizeof di.uuid);
  /* version 0.1 ended at `worker` */
  return answer_grown(rt, "tdm_runtime_device", info, &di, sizeof di,
                      offsetof(tdm_device_info, worker) + sizeof di.worker);
}
