/* Classification, deduplication and selection of OpenCL devices (see
 * devices.h): pure functions of the records, tested on fabricated ones. */
#include "platform.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

TDM_API const char *tdm_device_class_name(tdm_device_class c) {
  switch (c) {
  case TDM_DEVICE_INTEGRATED_GPU:
    return "integrated GPU";
  case TDM_DEVICE_DISCRETE_GPU:
    return "discrete GPU";
  case TDM_DEVICE_CPU:
    return "CPU device";
  case TDM_DEVICE_ACCELERATOR:
    return "accelerator";
  case TDM_DEVICE_EMULATED:
    return "emulated device";
  case TDM_DEVICE_UNKNOWN:
    break;
  }
  return "unknown";
}

/*
 * The rules, in order:
 *  1. CL_DEVICE_TYPE_CPU: a CPU device. Its compute units are the cores the
 *     workers already use, so it is never admitted by default.
 *  2. CL_DEVICE_TYPE_GPU with CL_DEVICE_HOST_UNIFIED_MEMORY: an integrated
 *     GPU (it shares the host's memory).
 *  3. CL_DEVICE_TYPE_GPU with fine-grained system SVM: integrated too (only
 *     a GPU on the host's memory controller offers it; drivers of OpenCL
 *     3.0 may no longer report HOST_UNIFIED_MEMORY).
 *  4. Any other GPU: discrete.
 *  5. Accelerator and custom devices: accelerator.
 */
void tdm__classify_device(tdm_device_record *d) {
  /* CL_DEVICE_SVM_FINE_GRAIN_SYSTEM */
  const uint64_t svm_system = 1u << 2;
  if (d->type & TDM_CL_TYPE_CPU) {
    d->cls = TDM_DEVICE_CPU;
    snprintf(d->reason, sizeof d->reason, "reports device type CPU");
  } else if ((d->type & TDM_CL_TYPE_GPU) && d->host_unified) {
    d->cls = TDM_DEVICE_INTEGRATED_GPU;
    snprintf(d->reason, sizeof d->reason, "GPU that reports host-unified memory");
  } else if ((d->type & TDM_CL_TYPE_GPU) && (d->svm_caps & svm_system)) {
    d->cls = TDM_DEVICE_INTEGRATED_GPU;
    snprintf(d->reason, sizeof d->reason,
             "GPU with fine-grained system SVM (shares the host's memory)");
  } else if (d->type & TDM_CL_TYPE_GPU) {
    d->cls = TDM_DEVICE_DISCRETE_GPU;
    snprintf(d->reason, sizeof d->reason, "GPU with memory of its own (no host-unified memory)");
  } else {
    d->cls = TDM_DEVICE_ACCELERATOR;
    snprintf(d->reason, sizeof d->reason, "reports device type %s",
             d->type & TDM_CL_TYPE_ACCELERATOR ? "accelerator" : "custom");
  }
}

static bool same_device(const tdm_device_record *a, const tdm_device_record *b) {
  if (a->has_pci && b->has_pci)
    return a->pci_domain == b->pci_domain && a->pci_bus == b->pci_bus &&
           a->pci_device == b->pci_device && a->pci_function == b->pci_function;
  if (a->has_uuid && b->has_uuid) {
    static const uint8_t zero[16];
    /* an all-zero UUID identifies nothing */
    return memcmp(a->uuid, zero, 16) != 0 && memcmp(a->uuid, b->uuid, 16) == 0;
  }
  return false;
}

void tdm__dedupe_devices(tdm_device_record *d, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    d[i].duplicate_of = -1;
    for (unsigned j = 0; j < i; j++)
      if (d[j].duplicate_of < 0 && same_device(&d[i], &d[j])) {
        d[i].duplicate_of = (int)j;
        break;
      }
  }
}

/* ---- selection ---------------------------------------------------------- */

static const struct {
  const char *term;
  unsigned classes;
} class_terms[] = {
    {"all", 1u << TDM_DEVICE_INTEGRATED_GPU | 1u << TDM_DEVICE_DISCRETE_GPU |
                1u << TDM_DEVICE_ACCELERATOR},
    {"gpu", 1u << TDM_DEVICE_INTEGRATED_GPU | 1u << TDM_DEVICE_DISCRETE_GPU},
    {"integrated", 1u << TDM_DEVICE_INTEGRATED_GPU},
    {"discrete", 1u << TDM_DEVICE_DISCRETE_GPU},
    {"accelerator", 1u << TDM_DEVICE_ACCELERATOR},
    {"cpu", 1u << TDM_DEVICE_CPU},
};

static tdm_status bad_term(const char *term, size_t len, char *bad, size_t bad_size) {
  if (bad_size) {
    size_t n = len < bad_size - 1 ? len : bad_size - 1;
    memcpy(bad, term, n);
    bad[n] = 0;
  }
  return TDM_ERR_INVALID_ARG;
}

tdm_status tdm__parse_devices(const char *text, tdm_device_selection *sel, char *bad,
                              size_t bad_size) {
  sel->none = false;
  sel->classes = 0;
  memset(sel->indices, 0, sizeof sel->indices);
  sel->text = text && *text ? text : "all";
  const char *p = sel->text;
  unsigned nterms = 0;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *t = p;
    size_t tl = len;
    while (tl && isspace((unsigned char)*t))
      t++, tl--;
    while (tl && isspace((unsigned char)t[tl - 1]))
      tl--;
    p += len + (end != NULL);
    if (!tl)
      return bad_term(t, tl, bad, bad_size);
    nterms++;
    bool known = false;
    for (size_t i = 0; i < sizeof class_terms / sizeof class_terms[0] && !known; i++)
      if (strlen(class_terms[i].term) == tl && !strncasecmp(t, class_terms[i].term, tl)) {
        sel->classes |= class_terms[i].classes;
        known = true;
      }
    if (!known && tl == 4 && !strncasecmp(t, "none", 4)) {
      sel->none = true;
      known = true;
    }
    if (!known) {
      unsigned v = 0;
      size_t k;
      for (k = 0; k < tl && isdigit((unsigned char)t[k]) && v < TDM_MAX_DEVICE_INDEX; k++)
        v = v * 10 + (unsigned)(t[k] - '0');
      if (k != tl || v >= TDM_MAX_DEVICE_INDEX)
        return bad_term(t, tl, bad, bad_size);
      sel->indices[v / 64] |= 1ull << (v % 64);
    }
  }
  if (!nterms || (sel->none && nterms > 1)) /* "none" stands alone */
    return bad_term(sel->text, strlen(sel->text), bad, bad_size);
  return TDM_OK;
}

static bool index_selected(const tdm_device_selection *sel, unsigned i) {
  return i < TDM_MAX_DEVICE_INDEX && (sel->indices[i / 64] >> (i % 64) & 1);
}

static void memory_behaviour(tdm_device_record *d, tdm_device_memory forced) {
  switch (d->cls) {
  case TDM_DEVICE_INTEGRATED_GPU:
    d->shared_memory = true;
    snprintf(d->memory_reason, sizeof d->memory_reason,
             "integrated GPU: works in the host's memory, no copies");
    break;
  case TDM_DEVICE_CPU:
    d->shared_memory = true;
    snprintf(d->memory_reason, sizeof d->memory_reason,
             "CPU device: works in the host's memory, no copies");
    break;
  default:
    d->shared_memory = d->host_unified;
    snprintf(d->memory_reason, sizeof d->memory_reason, "%s",
             d->host_unified ? "reports host-unified memory: no copies"
                             : "memory of its own: data is copied to it and back");
    break;
  }
  if (forced != TDM_MEMORY_AS_REPORTED) {
    d->shared_memory = forced == TDM_MEMORY_SHARED;
    snprintf(d->memory_reason, sizeof d->memory_reason, "%s, forced by device_memory=%s",
             d->shared_memory ? "treated as integrated: no copies"
                              : "treated as discrete: data is copied to it and back",
             d->shared_memory ? "integrated" : "discrete");
  }
}

void tdm__select_devices(tdm_device_record *d, unsigned n, const tdm_device_selection *sel) {
  for (unsigned i = 0; i < n; i++) {
    tdm_device_record *r = &d[i];
    memory_behaviour(r, sel->memory);
    r->worker = -1;
    r->used = false;
    bool by_index = index_selected(sel, i);
    bool by_class = (sel->classes >> r->cls & 1) != 0;
    bool by_admission = r->cls == TDM_DEVICE_CPU && sel->admit_cpu;
    if (sel->none) {
      snprintf(r->usage, sizeof r->usage, "not used: devices=\"none\"");
    } else if (r->duplicate_of >= 0) {
      snprintf(r->usage, sizeof r->usage,
               "not used: the same device as device %d, seen through another platform",
               r->duplicate_of);
    } else if (by_index || by_class || by_admission) {
      r->used = true;
      if (by_admission && !by_index && !by_class)
        snprintf(r->usage, sizeof r->usage, "used: CPU devices admitted by opencl_cpu_devices=1 (TANDEM_OPENCL_CPU=1)");
      else
        snprintf(r->usage, sizeof r->usage, "used: selected by devices=\"%s\"", sel->text);
    } else if (r->cls == TDM_DEVICE_CPU) {
      snprintf(r->usage, sizeof r->usage,
               "not used: an OpenCL CPU device runs on the cores the CPU workers already "
               "use; admit it with TANDEM_OPENCL_CPU=1 or TANDEM_DEVICES=cpu");
    } else {
      snprintf(r->usage, sizeof r->usage, "not used: not selected by devices=\"%s\"", sel->text);
    }
  }
}
