/*
 * tandem-info: prints the machine as Tandem sees it: processor layout,
 * kinds of cores, workers, OpenCL platforms and devices with their class
 * and the reason for it, and which devices a runtime would use under the
 * current configuration (TANDEM_* environment variables) and why the
 * others are not used.
 *
 *   tandem-info          for people
 *   tandem-info --json   the same as a JSON document (docs/tandem-info.md)
 *   --verbose            also each OpenCL device's limits and extensions
 *   --bandwidth          also each OpenCL device's copies to and from the
 *                        host, measured: latency and bandwidth each way
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "info-opencl.h"
#include "units.h"
#include "tandem.h"
#ifdef TDM_HAVE_OPENCL
#include "tandem/opencl.h"
#endif

/* ---- the runtime's log, kept to be shown ------------------------------- */

typedef struct message {
  tdm_log_level level;
  char *text;
} message;

typedef struct log_store {
  pthread_mutex_t lock;
  message *items;
  size_t n, cap;
} log_store;

static void keep_log(void *data, tdm_log_level level, const char *text) {
  log_store *l = data;
  pthread_mutex_lock(&l->lock);
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    message *m = realloc(l->items, cap * sizeof *m);
    if (!m) {
      pthread_mutex_unlock(&l->lock);
      return;
    }
    l->items = m;
    l->cap = cap;
  }
  l->items[l->n].level = level;
  l->items[l->n].text = strdup(text);
  if (l->items[l->n].text)
    l->n++;
  pthread_mutex_unlock(&l->lock);
}

static const char *level_name(tdm_log_level l) {
  static const char *const names[] = {"error", "warning", "info", "debug"};
  return (unsigned)l < 4 ? names[l] : "unknown";
}

/* ---- small formatting helpers ------------------------------------------ */

/* "1.5 GiB", "512 KiB"... into buf. */
static const char *bytes(uint64_t n, char *buf, size_t size) {
  static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)n;
  unsigned u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, size, "%" PRIu64 " bytes", n);
  else
    snprintf(buf, size, v < 10 && v != (double)(uint64_t)v ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

static const char *plural(unsigned n, const char *one, const char *many) {
  return n == 1 ? one : many;
}

static const char *memory_mode_name(tdm_device_memory m) {
  switch (m) {
  case TDM_MEMORY_SHARED:
    return "integrated";
  case TDM_MEMORY_SEPARATE:
    return "discrete";
  case TDM_MEMORY_AS_REPORTED:
    break;
  }
  return "reported";
}

static const char *class_key(tdm_device_class c) {
  switch (c) {
  case TDM_DEVICE_INTEGRATED_GPU:
    return "integrated_gpu";
  case TDM_DEVICE_DISCRETE_GPU:
    return "discrete_gpu";
  case TDM_DEVICE_CPU:
    return "cpu";
  case TDM_DEVICE_ACCELERATOR:
    return "accelerator";
  case TDM_DEVICE_EMULATED:
    return "emulated";
  case TDM_DEVICE_UNKNOWN:
    break;
  }
  return "unknown";
}

/* s without its prefix, if it has it. */
static const char *without(const char *s, const char *prefix) {
  size_t n = strlen(prefix);
  return strncmp(s, prefix, n) ? s : s + n;
}

static void pci_string(const tdm_device_info *d, char *buf, size_t size) {
  snprintf(buf, size, "%04x:%02x:%02x.%x", d->pci_domain, d->pci_bus, d->pci_device,
           d->pci_function);
}

static void uuid_string(const tdm_device_info *d, char *buf, size_t size) {
  size_t at = 0;
  for (int i = 0; i < 16 && at + 3 <= size; i++)
    at += (size_t)snprintf(buf + at, size - at, "%02x", d->uuid[i]);
}

/* Everything the runtime reports, gathered once. */
typedef struct view {
  tdm_machine_info m;
  tdm_cpu_kind_info *kinds;
  tdm_worker_info *workers;
  unsigned nworkers;
  tdm_platform_info *platforms;
  tdm_device_info *devices;
  /* --verbose, --bandwidth: per device, what was measured, or why not */
  bool verbose, bandwidth;
  info_detail *details;
  info_link *links;
  bool *has_detail, *has_link;
  char (*detail_why)[128], (*link_why)[128];
} view;

/* The OpenCL device behind device d, or NULL (why). */
static void *cl_device_of(tdm_runtime *rt, unsigned d, char *why, size_t n) {
#ifdef TDM_HAVE_OPENCL
  cl_device_id id = NULL;
  tdm_status st = tdm_opencl_device(rt, d, &id, NULL);
  if (st)
    snprintf(why, n, "%s", st == TDM_ERR_NOT_SUPPORTED ? "an emulated device" : tdm_strerror(st));
  return id;
#else
  (void)rt;
  (void)d;
  snprintf(why, n, "Tandem was built without the OpenCL headers");
  return NULL;
#endif
}

/* --verbose and --bandwidth: the tool's own OpenCL queries. */
static int gather_opencl(tdm_runtime *rt, view *v) {
  unsigned nd = v->m.opencl_devices;
  v->details = calloc(nd + 1, sizeof *v->details);
  v->links = calloc(nd + 1, sizeof *v->links);
  v->has_detail = calloc(nd + 1, sizeof *v->has_detail);
  v->has_link = calloc(nd + 1, sizeof *v->has_link);
  v->detail_why = calloc(nd + 1, sizeof *v->detail_why);
  v->link_why = calloc(nd + 1, sizeof *v->link_why);
  if (!v->details || !v->links || !v->has_detail || !v->has_link || !v->detail_why ||
      !v->link_why)
    return -1;
  char why[128] = "";
  bool open = nd && info_cl_open(getenv("TANDEM_OPENCL_LIBRARY"), why, sizeof why);
  for (unsigned d = 0; d < nd; d++) {
    void *id = open ? cl_device_of(rt, d, why, sizeof why) : NULL;
    if (v->verbose) {
      v->has_detail[d] = id && info_cl_details(id, &v->details[d], why, sizeof why);
      if (!v->has_detail[d])
        snprintf(v->detail_why[d], sizeof v->detail_why[d], "%s", why);
    }
    if (v->bandwidth) {
      v->has_link[d] = id && info_cl_link(id, v->devices[d].max_alloc_bytes, &v->links[d], why,
                                          sizeof why);
      if (!v->has_link[d])
        snprintf(v->link_why[d], sizeof v->link_why[d], "%s", why);
    }
  }
  return 0;
}

static void free_view(view *v) {
  for (unsigned d = 0; v->details && d < v->m.opencl_devices; d++)
    free(v->details[d].extensions);
  free(v->details);
  free(v->links);
  free(v->has_detail);
  free(v->has_link);
  free(v->detail_why);
  free(v->link_why);
  free(v->kinds);
  free(v->workers);
  free(v->platforms);
  free(v->devices);
}

static int gather(tdm_runtime *rt, view *v) {
  v->m.struct_size = sizeof v->m;
  if (tdm_runtime_machine(rt, &v->m))
    return -1;
  v->nworkers = tdm_runtime_nworkers(rt);
  v->kinds = calloc(v->m.cpu_kinds, sizeof *v->kinds);
  v->workers = calloc(v->nworkers, sizeof *v->workers);
  v->platforms = calloc(v->m.opencl_platforms + 1, sizeof *v->platforms);
  v->devices = calloc(v->m.opencl_devices + 1, sizeof *v->devices);
  if (!v->kinds || !v->workers || !v->platforms || !v->devices)
    return -1;
  for (unsigned k = 0; k < v->m.cpu_kinds; k++) {
    v->kinds[k].struct_size = sizeof v->kinds[k];
    if (tdm_runtime_cpu_kind(rt, k, &v->kinds[k]))
      return -1;
  }
  for (unsigned w = 0; w < v->nworkers; w++) {
    v->workers[w].struct_size = sizeof v->workers[w];
    if (tdm_runtime_worker(rt, w, &v->workers[w]))
      return -1;
  }
  for (unsigned p = 0; p < v->m.opencl_platforms; p++) {
    v->platforms[p].struct_size = sizeof v->platforms[p];
    if (tdm_runtime_platform(rt, p, &v->platforms[p]))
      return -1;
  }
  for (unsigned d = 0; d < v->m.opencl_devices; d++) {
    v->devices[d].struct_size = sizeof v->devices[d];
    if (tdm_runtime_device(rt, d, &v->devices[d]))
      return -1;
  }
  return v->verbose || v->bandwidth ? gather_opencl(rt, v) : 0;
}

/* A rate in bytes per second, for people: "12.3 GB/s" */
static const char *rate(double bps, char *buf, size_t size) {
  if (bps >= 1e9)
    snprintf(buf, size, "%.3g GB/s", bps / 1e9);
  else if (bps >= 1e6)
    snprintf(buf, size, "%.3g MB/s", bps / 1e6);
  else
    snprintf(buf, size, "%.3g kB/s", bps / 1e3);
  return buf;
}

/* The --verbose and --bandwidth lines of device d. */
static void print_device_extras(const view *v, unsigned d) {
  char b1[32], b2[32], b3[32], b4[32];
  if (v->verbose && v->has_detail[d]) {
    const info_detail *x = &v->details[d];
    printf("      OpenCL C: %s\n", x->opencl_c_version);
    printf("      Work:     groups of at most %" PRIu64 " items; %u dimensions, at most %" PRIu64
           " x %" PRIu64 " x %" PRIu64 "\n",
           x->max_work_group_size, x->max_work_item_dims, x->max_work_item_sizes[0],
           x->max_work_item_sizes[1], x->max_work_item_sizes[2]);
    printf("      Limits:   kernel arguments %s in all; constant memory %s in %u arguments; "
           "%u-bit addresses; buffers aligned to %u bits\n",
           bytes(x->max_parameter_bytes, b1, sizeof b1),
           bytes(x->max_constant_buffer_bytes, b2, sizeof b2), x->max_constant_args,
           x->address_bits, x->mem_base_addr_align_bits);
    printf("      Caches:   %s of global memory cache, lines of %u bytes; images %s; vectors of "
           "%u floats, %u doubles preferred; timer %" PRIu64 " ns\n",
           bytes(x->global_mem_cache_bytes, b3, sizeof b3), x->global_mem_cacheline_bytes,
           x->image_support ? "yes" : "no", x->preferred_vector_float,
           x->preferred_vector_double, x->profiling_timer_resolution_ns);
    printf("      Extensions: %s\n", x->extensions[0] ? x->extensions : "none");
  } else if (v->verbose) {
    printf("      Details:  not available (%s)\n", v->detail_why[d]);
  }
  if (v->bandwidth && v->has_link[d]) {
    const info_link *l = &v->links[d];
    printf("      Link:     host to device %s latency, %s; device to host %s latency, %s\n",
           units_seconds(l->latency_to_device_s, b1, sizeof b1),
           rate(l->bandwidth_to_device, b2, sizeof b2),
           units_seconds(l->latency_to_host_s, b3, sizeof b3),
           rate(l->bandwidth_to_host, b4, sizeof b4));
    for (unsigned i = 0; i < l->nsamples; i++) {
      const info_link_sample *s = &l->samples[i];
      printf("        %10" PRIu64 " bytes: to device %s, to host %s\n", s->bytes,
             units_seconds(s->to_device_s, b1, sizeof b1),
             units_seconds(s->to_host_s, b2, sizeof b2));
    }
    if (v->devices[d].shared_memory)
      printf("        (the device shares the host's memory: the runtime makes no copies for it)\n");
  } else if (v->bandwidth) {
    printf("      Link:     not measured (%s)\n", v->link_why[d]);
  }
}

/* ---- for people --------------------------------------------------------- */

/* One OpenCL device, under its platform. */
static void print_text_device(const view *v, unsigned i) {
  const tdm_device_info *d = &v->devices[i];
  char b1[32], b2[32], b3[32];
  printf("    Device %u: %s (%s)\n", i, d->name, d->vendor);
  printf("      Class:    %s: %s\n", tdm_device_class_name(d->device_class),
         d->class_reason);
  printf("      Memory:   %s; %s\n", d->shared_memory ? "shared with the host" : "its own",
         d->memory_reason);
  printf("      Compute:  %u compute %s at %u MHz; double precision %s\n", d->compute_units,
         plural(d->compute_units, "unit", "units"), d->clock_mhz, d->fp64 ? "yes" : "no");
  printf("      Sizes:    %s of memory, at most %s per buffer, %s local memory\n",
         bytes(d->global_mem_bytes, b1, sizeof b1), bytes(d->max_alloc_bytes, b2, sizeof b2),
         bytes(d->local_mem_bytes, b3, sizeof b3));
  char pci[32] = "unknown", uuid[40] = "unknown";
  if (d->has_pci)
    pci_string(d, pci, sizeof pci);
  if (d->has_uuid)
    uuid_string(d, uuid, sizeof uuid);
  printf("      Identity: PCI %s, UUID %s", pci, uuid);
  if (d->duplicate_of >= 0)
    printf(", the same hardware as device %d", d->duplicate_of);
  printf("\n");
  if (d->numa_node >= 0)
    printf("      Near:     NUMA node %d, CPUs %s\n", d->numa_node, d->near_cpus);
  else if (d->near_cpus[0])
    printf("      Near:     CPUs %s\n", d->near_cpus);
  else
    printf("      Near:     unknown\n");
  printf("      Versions: %s; driver %s\n", d->opencl_version, d->driver_version);
  if (d->used)
    printf("      Used:     yes, as worker %d (%s)\n", d->worker, without(d->usage, "used: "));
  else
    printf("      Used:     no (%s)\n", without(d->usage, "not used: "));
  if (d->quarantined)
    printf("      State:    quarantined: %s\n", d->quarantine_reason);
  print_device_extras(v, i);
}

static void print_text_processor(const view *v) {
  const tdm_machine_info *m = &v->m;
  char b1[32];
  printf("Processor (%s)\n", m->topology_source);
  if (m->cpu_model[0])
    printf("  Model:      %s\n", m->cpu_model);
  printf("  Layout:     %u %s, %u memory %s (NUMA), %u %s, %u hardware %s\n", m->packages,
         plural(m->packages, "package (socket)", "packages (sockets)"), m->numa_nodes,
         plural(m->numa_nodes, "node", "nodes"), m->cores, plural(m->cores, "core", "cores"),
         m->pus, plural(m->pus, "thread", "threads"));
  printf("  Usable:     %u %s, %u hardware %s (CPUs %s): those this process may run on\n",
         m->usable_cores, plural(m->usable_cores, "core", "cores"), m->usable_pus,
         plural(m->usable_pus, "thread", "threads"), m->usable_cpus);
  if (m->memory_bytes)
    printf("  Memory:     %s\n", bytes(m->memory_bytes, b1, sizeof b1));
  const struct {
    const char *name;
    uint64_t bytes;
    unsigned count;
  } caches[] = {{"L1 data", m->l1d_bytes, m->l1d_count},
                {"L2", m->l2_bytes, m->l2_count},
                {"L3", m->l3_bytes, m->l3_count}};
  printf("  Caches:     ");
  unsigned shown = 0;
  for (int c = 0; c < 3; c++)
    if (caches[c].count)
      printf("%s%s %s x %u", shown++ ? ", " : "", caches[c].name,
             bytes(caches[c].bytes, b1, sizeof b1), caches[c].count);
  printf("%s\n", shown ? "" : "unknown");
  if (m->cpu_kinds <= 1) {
    printf("  Core kinds: one (all cores alike)\n");
  } else {
    printf("  Core kinds: %u (a hybrid chip: performance and efficiency cores)\n",
           m->cpu_kinds);
    for (unsigned k = m->cpu_kinds; k-- > 0;)
      printf("    kind %u %-10s rank %d%s: %u %s, workers %s\n", k,
             v->kinds[k].name[0] ? v->kinds[k].name : "(unnamed)", v->kinds[k].efficiency,
             k + 1 == m->cpu_kinds ? " (fastest)" : (k == 0 ? " (most frugal)" : ""),
             v->kinds[k].cores, plural(v->kinds[k].cores, "core", "cores"),
             v->kinds[k].worker_ids);
  }

}

static void print_text_workers(const view *v) {
  const tdm_machine_info *m = &v->m;
  printf("\nWorkers: %u on CPU cores (one thread per usable core), %u for devices\n",
         m->cpu_workers, m->device_workers);
  for (unsigned w = 0; w < v->nworkers; w++) {
    const tdm_worker_info *wi = &v->workers[w];
    if (wi->type == TDM_WORKER_CPU) {
      printf("  worker %-3u CPU     core %d, CPUs %s", w, wi->core, wi->cpus);
      if (m->cpu_kinds > 1)
        printf(", kind %u (%s)", wi->cpu_kind, v->kinds[wi->cpu_kind].name);
      if (wi->numa_node >= 0 && m->numa_nodes > 1)
        printf(", NUMA node %d", wi->numa_node);
      printf("\n");
    } else {
      bool emulated = v->devices[wi->device].device_class == TDM_DEVICE_EMULATED;
      printf("  worker %-3u device  device %d (%s); %s\n", w, wi->device,
             v->devices[wi->device].name,
             emulated ? "emulated, on a thread of its own" : "uses no CPU core of its own");
    }
  }

}

static void print_text_opencl(const view *v) {
  const tdm_machine_info *m = &v->m;
  printf("\nOpenCL devices (GPUs and other accelerators): %s\n", m->opencl_summary);
  printf("  Selection: devices=\"%s\", OpenCL CPU devices %s, device memory %s\n", m->devices,
         m->opencl_cpu_devices ? "admitted" : "not admitted (TANDEM_OPENCL_CPU=1 admits them)",
         m->device_memory == TDM_MEMORY_AS_REPORTED
             ? "as reported"
             : (m->device_memory == TDM_MEMORY_SHARED ? "treated as integrated"
                                                      : "treated as discrete"));
  for (unsigned p = 0; p < m->opencl_platforms; p++) {
    const tdm_platform_info *pi = &v->platforms[p];
    printf("  Platform %u: %s (%s), %s; %u %s\n", p, pi->name, pi->vendor, pi->version,
           pi->devices, plural(pi->devices, "device", "devices"));
    for (unsigned i = 0; i < m->opencl_devices; i++) {
      const tdm_device_info *d = &v->devices[i];
      if (d->platform != p)
        continue;
      print_text_device(v, i);
    }
  }
}

static void print_text_emulated(const view *v) {
  const tdm_machine_info *m = &v->m;
  bool header = false;
  for (unsigned i = 0; i < m->opencl_devices; i++) {
    const tdm_device_info *d = &v->devices[i];
    if (d->device_class != TDM_DEVICE_EMULATED)
      continue;
    if (!header)
      printf("\nEmulated devices (tdm_config.sim, TANDEM_SIM)\n");
    header = true;
    printf("  Device %u: %s, worker %d\n", i, d->name, d->worker);
    printf("    Memory: %s; %s\n", d->shared_memory ? "shared with the host" : "its own",
           d->memory_reason);
    printf("    Speed:  %s\n", without(d->usage, "used: "));
    if (d->quarantined)
      printf("    State:  quarantined: %s\n", d->quarantine_reason);
  }
}

static void print_text(const view *v, const log_store *log) {
  printf("Tandem %d.%d.%d: the machine as Tandem sees it\n\n", TDM_VERSION_MAJOR,
         TDM_VERSION_MINOR, TDM_VERSION_PATCH);
  print_text_processor(v);
  print_text_workers(v);
  print_text_opencl(v);
  print_text_emulated(v);
  unsigned warnings = 0;
  for (size_t i = 0; i < log->n; i++)
    if (log->items[i].level <= TDM_LOG_WARNING)
      printf("%s  %s: %s\n", warnings++ ? "" : "\nWarnings\n", level_name(log->items[i].level),
             log->items[i].text);
}

/* ---- JSON --------------------------------------------------------------- */

static void json_string(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"':
      fputs("\\\"", stdout);
      break;
    case '\\':
      fputs("\\\\", stdout);
      break;
    case '\n':
      fputs("\\n", stdout);
      break;
    case '\t':
      fputs("\\t", stdout);
      break;
    case '\r':
      fputs("\\r", stdout);
      break;
    default:
      if (*p < 0x20)
        printf("\\u%04x", *p);
      else
        putchar(*p);
    }
  }
  putchar('"');
}

/* "key": value pairs; `first` says whether a comma is needed. */
static void key(const char *k, int *first) {
  printf("%s", *first ? "" : ", ");
  *first = 0;
  json_string(k);
  fputs(": ", stdout);
}

static void kv_str(const char *k, const char *v, int *first) {
  key(k, first);
  json_string(v);
}

static void kv_u64(const char *k, uint64_t v, int *first) {
  key(k, first);
  printf("%" PRIu64, v);
}

/* An integer that may be unknown (negative): null then. */
static void kv_opt(const char *k, long long v, int *first) {
  key(k, first);
  if (v < 0)
    fputs("null", stdout);
  else
    printf("%lld", v);
}

static void kv_bool(const char *k, int v, int *first) {
  key(k, first);
  fputs(v ? "true" : "false", stdout);
}

/* "details": --verbose's limits and extensions, or null and a reason */
static void print_json_details(const view *v, unsigned n, int *i) {
  key("details", i);
  if (!v->has_detail[n]) {
    fputs("null", stdout);
    kv_str("details_unavailable", v->detail_why[n], i);
    return;
  }
  const info_detail *x = &v->details[n];
  int j = 1;
  printf("{");
  kv_str("opencl_c_version", x->opencl_c_version, &j);
  kv_u64("max_work_group_size", x->max_work_group_size, &j);
  kv_u64("max_work_item_dimensions", x->max_work_item_dims, &j);
  key("max_work_item_sizes", &j);
  printf("[%" PRIu64 ", %" PRIu64 ", %" PRIu64 "]", x->max_work_item_sizes[0],
         x->max_work_item_sizes[1], x->max_work_item_sizes[2]);
  kv_u64("max_parameter_bytes", x->max_parameter_bytes, &j);
  kv_u64("max_constant_buffer_bytes", x->max_constant_buffer_bytes, &j);
  kv_u64("max_constant_args", x->max_constant_args, &j);
  kv_u64("mem_base_addr_align_bits", x->mem_base_addr_align_bits, &j);
  kv_u64("address_bits", x->address_bits, &j);
  kv_u64("global_mem_cache_bytes", x->global_mem_cache_bytes, &j);
  kv_u64("global_mem_cacheline_bytes", x->global_mem_cacheline_bytes, &j);
  kv_bool("image_support", x->image_support, &j);
  kv_u64("preferred_vector_width_float", x->preferred_vector_float, &j);
  kv_u64("preferred_vector_width_double", x->preferred_vector_double, &j);
  kv_u64("profiling_timer_resolution_ns", x->profiling_timer_resolution_ns, &j);
  key("extensions", &j);
  printf("[");
  const char *p = x->extensions;
  for (int e = 0; *p;) {
    size_t len = strcspn(p, " ");
    if (len) {
      char ext[256];
      snprintf(ext, sizeof ext, "%.*s", (int)len, p);
      printf("%s", e++ ? ", " : "");
      json_string(ext);
    }
    p += len + (p[len] == ' ');
  }
  printf("]}");
}

/* "link": --bandwidth's measured copies, or null and a reason */
static void print_json_link(const view *v, unsigned n, int *i) {
  key("link", i);
  if (!v->has_link[n]) {
    fputs("null", stdout);
    kv_str("link_unmeasured", v->link_why[n], i);
    return;
  }
  const info_link *l = &v->links[n];
  int j = 1;
  printf("{");
  key("latency_to_device_s", &j);
  printf("%.9g", l->latency_to_device_s);
  key("latency_to_host_s", &j);
  printf("%.9g", l->latency_to_host_s);
  key("bandwidth_to_device_bytes_per_s", &j);
  printf("%.6g", l->bandwidth_to_device);
  key("bandwidth_to_host_bytes_per_s", &j);
  printf("%.6g", l->bandwidth_to_host);
  key("samples", &j);
  printf("[");
  for (unsigned s = 0; s < l->nsamples; s++) {
    int k = 1;
    printf("%s{", s ? ", " : "");
    kv_u64("bytes", l->samples[s].bytes, &k);
    key("to_device_s", &k);
    printf("%.9g", l->samples[s].to_device_s);
    key("to_host_s", &k);
    printf("%.9g", l->samples[s].to_host_s);
    printf("}");
  }
  printf("]}");
}

/* A member of one of the library's info structs, printed as a JSON
 * member by kv_fields: its key, its type, where it is. */
typedef struct jfield {
  const char *key;
  enum { J_STR, J_UNSIGNED, J_U64, J_INT_OR_NULL, J_BOOL } type;
  size_t at;
} jfield;
#define JF(key, type, of, member) {key, type, offsetof(of, member)}

static void kv_fields(const void *obj, const jfield *f, size_t n, int *first) {
  for (size_t i = 0; i < n; i++) {
    const char *p = (const char *)obj + f[i].at;
    switch (f[i].type) {
    case J_STR:
      kv_str(f[i].key, *(const char *const *)p, first);
      break;
    case J_UNSIGNED:
      kv_u64(f[i].key, *(const unsigned *)p, first);
      break;
    case J_U64:
      kv_u64(f[i].key, *(const uint64_t *)p, first);
      break;
    case J_INT_OR_NULL:
      kv_opt(f[i].key, *(const int *)p, first);
      break;
    case J_BOOL:
      kv_bool(f[i].key, *(const int *)p, first);
      break;
    }
  }
}
#define NFIELDS(a) (sizeof a / sizeof a[0])

static const jfield machine_fields[] = {
    JF("topology_source", J_STR, tdm_machine_info, topology_source),
    JF("cpu_model", J_STR, tdm_machine_info, cpu_model),
    JF("packages", J_UNSIGNED, tdm_machine_info, packages),
    JF("numa_nodes", J_UNSIGNED, tdm_machine_info, numa_nodes),
    JF("cores", J_UNSIGNED, tdm_machine_info, cores),
    JF("pus", J_UNSIGNED, tdm_machine_info, pus),
    JF("usable_cores", J_UNSIGNED, tdm_machine_info, usable_cores),
    JF("usable_pus", J_UNSIGNED, tdm_machine_info, usable_pus),
    JF("usable_cpus", J_STR, tdm_machine_info, usable_cpus),
    JF("memory_bytes", J_U64, tdm_machine_info, memory_bytes),
};

static const jfield kind_fields[] = {
    JF("name", J_STR, tdm_cpu_kind_info, name),
    JF("efficiency", J_INT_OR_NULL, tdm_cpu_kind_info, efficiency),
    JF("cores", J_UNSIGNED, tdm_cpu_kind_info, cores),
    JF("workers", J_UNSIGNED, tdm_cpu_kind_info, workers),
    JF("worker_ids", J_STR, tdm_cpu_kind_info, worker_ids),
};

static const jfield worker_fields[] = {
    JF("cpu_kind", J_UNSIGNED, tdm_worker_info, cpu_kind),
    JF("core", J_INT_OR_NULL, tdm_worker_info, core),
    JF("cpus", J_STR, tdm_worker_info, cpus),
    JF("numa_node", J_INT_OR_NULL, tdm_worker_info, numa_node),
    JF("device", J_INT_OR_NULL, tdm_worker_info, device),
};

static const jfield platform_fields[] = {
    JF("name", J_STR, tdm_platform_info, name),
    JF("vendor", J_STR, tdm_platform_info, vendor),
    JF("version", J_STR, tdm_platform_info, version),
    JF("devices", J_UNSIGNED, tdm_platform_info, devices),
};

/* A device's members before "class" and after it, to "pci" and from
 * "duplicate_of" on. */
static const jfield device_fields_a[] = {
    JF("platform", J_UNSIGNED, tdm_device_info, platform),
    JF("name", J_STR, tdm_device_info, name),
    JF("vendor", J_STR, tdm_device_info, vendor),
    JF("driver_version", J_STR, tdm_device_info, driver_version),
    JF("opencl_version", J_STR, tdm_device_info, opencl_version),
};
static const jfield device_fields_b[] = {
    JF("class_reason", J_STR, tdm_device_info, class_reason),
    JF("shared_memory", J_BOOL, tdm_device_info, shared_memory),
    JF("memory_reason", J_STR, tdm_device_info, memory_reason),
    JF("compute_units", J_UNSIGNED, tdm_device_info, compute_units),
    JF("clock_mhz", J_UNSIGNED, tdm_device_info, clock_mhz),
    JF("global_mem_bytes", J_U64, tdm_device_info, global_mem_bytes),
    JF("max_alloc_bytes", J_U64, tdm_device_info, max_alloc_bytes),
    JF("local_mem_bytes", J_U64, tdm_device_info, local_mem_bytes),
    JF("fp64", J_BOOL, tdm_device_info, fp64),
    JF("host_unified_memory", J_BOOL, tdm_device_info, host_unified_memory),
    JF("svm_capabilities", J_U64, tdm_device_info, svm_capabilities),
};
static const jfield device_fields_c[] = {
    JF("duplicate_of", J_INT_OR_NULL, tdm_device_info, duplicate_of),
    JF("numa_node", J_INT_OR_NULL, tdm_device_info, numa_node),
    JF("near_cpus", J_STR, tdm_device_info, near_cpus),
    JF("used", J_BOOL, tdm_device_info, used),
    JF("usage", J_STR, tdm_device_info, usage),
    JF("worker", J_INT_OR_NULL, tdm_device_info, worker),
    JF("quarantined", J_BOOL, tdm_device_info, quarantined),
    JF("quarantine_reason", J_STR, tdm_device_info, quarantine_reason),
};

/* "key": [ {"index": i, the fields of item i}, ... ] for n items of
 * `size` bytes from `items` (index_key NULL: no index). */
static void json_list(const char *k, const char *index_key, const void *items, size_t size,
                      unsigned n, const jfield *f, size_t nf, int *first) {
  key(k, first);
  printf("[");
  for (unsigned e = 0; e < n; e++) {
    int i = 1;
    printf("%s{", e ? ", " : "");
    if (index_key)
      kv_u64(index_key, e, &i);
    kv_fields((const char *)items + e * size, f, nf, &i);
    printf("}");
  }
  printf("]");
}

static void print_json_machine(const tdm_machine_info *m, int *f) {
  key("machine", f);
  int g = 1;
  printf("{");
  kv_fields(m, machine_fields, NFIELDS(machine_fields), &g);
  key("caches", &g);
  const struct {
    const char *name;
    uint64_t bytes;
    unsigned count;
  } caches[] = {{"l1d", m->l1d_bytes, m->l1d_count},
                {"l2", m->l2_bytes, m->l2_count},
                {"l3", m->l3_bytes, m->l3_count}};
  printf("{");
  for (int c = 0, h = 1; c < 3; c++) {
    key(caches[c].name, &h);
    int i = 1;
    printf("{");
    kv_u64("bytes", caches[c].bytes, &i);
    kv_u64("count", caches[c].count, &i);
    printf("}");
  }
  printf("}}");
}

static void print_json_workers(const view *v, int *f) {
  key("workers", f);
  printf("[");
  for (unsigned w = 0; w < v->nworkers; w++) {
    const tdm_worker_info *wi = &v->workers[w];
    int i = 1;
    printf("%s{", w ? ", " : "");
    kv_u64("id", w, &i);
    kv_str("type", wi->type == TDM_WORKER_CPU ? "cpu" : "device", &i);
    kv_fields(wi, worker_fields, NFIELDS(worker_fields), &i);
    printf("}");
  }
  printf("]");
}

/* "pci" or "uuid": the device's, or null. */
static void kv_identity(const char *k, const tdm_device_info *d, int has,
                        void (*as_string)(const tdm_device_info *, char *, size_t), int *i) {
  key(k, i);
  if (has) {
    char buf[40];
    as_string(d, buf, sizeof buf);
    json_string(buf);
  } else {
    fputs("null", stdout);
  }
}

static void print_json_devices(const view *v, int *f) {
  key("devices", f);
  printf("[");
  for (unsigned n = 0; n < v->m.opencl_devices; n++) {
    const tdm_device_info *d = &v->devices[n];
    int i = 1;
    printf("%s{", n ? ", " : "");
    kv_u64("index", n, &i);
    kv_fields(d, device_fields_a, NFIELDS(device_fields_a), &i);
    kv_str("class", class_key(d->device_class), &i);
    kv_fields(d, device_fields_b, NFIELDS(device_fields_b), &i);
    kv_identity("pci", d, d->has_pci, pci_string, &i);
    kv_identity("uuid", d, d->has_uuid, uuid_string, &i);
    kv_fields(d, device_fields_c, NFIELDS(device_fields_c), &i);
    if (v->verbose)
      print_json_details(v, n, &i);
    if (v->bandwidth)
      print_json_link(v, n, &i);
    printf("}");
  }
  printf("]");
}

static void print_json(const view *v, const log_store *log) {
  const tdm_machine_info *m = &v->m;
  int f = 1;
  printf("{");
  kv_str("format", "tandem-info", &f);
  kv_u64("format_version", 1, &f);
  kv_str("tandem_version", tdm_version(NULL, NULL, NULL), &f); /* the library's */
  print_json_machine(m, &f);
  json_list("cpu_kinds", "index", v->kinds, sizeof *v->kinds, m->cpu_kinds, kind_fields,
            NFIELDS(kind_fields), &f);
  print_json_workers(v, &f);

  key("selection", &f);
  int g = 1;
  printf("{");
  kv_str("devices", m->devices, &g);
  kv_bool("opencl_cpu_devices", m->opencl_cpu_devices, &g);
  kv_str("device_memory", memory_mode_name(m->device_memory), &g);
  printf("}");

  key("opencl", &f);
  g = 1;
  printf("{");
  kv_bool("available", m->opencl_status == TDM_OK, &g);
  kv_str("summary", m->opencl_summary, &g);
  json_list("platforms", "index", v->platforms, sizeof *v->platforms, m->opencl_platforms,
            platform_fields, NFIELDS(platform_fields), &g);
  printf("}");

  print_json_devices(v, &f);

  key("log", &f);
  printf("[");
  for (size_t n = 0; n < log->n; n++) {
    int i = 1;
    printf("%s{", n ? ", " : "");
    kv_str("level", level_name(log->items[n].level), &i);
    kv_str("message", log->items[n].text, &i);
    printf("}");
  }
  printf("]}\n");
}

static void usage(FILE *to) {
  fprintf(to, "usage: tandem-info [--json] [--verbose] [--bandwidth]\n"
              "Prints the machine as Tandem sees it: cores, kinds of cores, workers, OpenCL\n"
              "devices and which of them a runtime would use. TANDEM_* environment\n"
              "variables (TANDEM_DEVICES, TANDEM_OPENCL_CPU, TANDEM_NWORKERS...) apply.\n"
              "  --json       print a JSON document instead (described in docs/tandem-info.md)\n"
              "  --verbose    also each OpenCL device's limits and extensions\n"
              "  --bandwidth  also measure each OpenCL device's copies to and from the host\n"
              "               (latency and bandwidth each way; a few seconds)\n");
}

int main(int argc, char **argv) {
  int json = 0;
  view v;
  memset(&v, 0, sizeof v);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--verbose")) {
      v.verbose = true;
    } else if (!strcmp(argv[i], "--bandwidth")) {
      v.bandwidth = true;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "tandem-info: unknown argument \"%s\"\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  log_store log = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.log_fn = keep_log;
  cfg.log_data = &log;
  cfg.log_level = TDM_LOG_INFO;
  tdm_runtime *rt = NULL;
  tdm_status st = tdm_runtime_create(&cfg, &rt);
  int rc = 0;
  if (st) {
    fprintf(stderr, "tandem-info: no runtime could be created: %s (%s)\n", tdm_strerror(st),
            tdm_status_name(st));
    for (size_t i = 0; i < log.n; i++)
      fprintf(stderr, "  %s: %s\n", level_name(log.items[i].level), log.items[i].text);
    rc = 1;
  } else if (gather(rt, &v)) {
    fprintf(stderr, "tandem-info: out of memory\n");
    rc = 1;
  } else {
    pthread_mutex_lock(&log.lock); /* workers may log meanwhile */
    if (json)
      print_json(&v, &log);
    else
      print_text(&v, &log);
    pthread_mutex_unlock(&log.lock);
  }
  tdm_runtime_destroy(rt);
  info_cl_close();
  free_view(&v);
  for (size_t i = 0; i < log.n; i++)
    free(log.items[i].text);
  free(log.items);
  return rc;
}
