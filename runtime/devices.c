/* Classification and deduplication of OpenCL devices (see devices.h). */
#include "devices.h"

#include <stdio.h>
#include <string.h>

const char *tdm__device_class_name(tdm_device_class c) {
  switch (c) {
  case TDM_CLASS_INTEGRATED_GPU:
    return "integrated GPU";
  case TDM_CLASS_DISCRETE_GPU:
    return "discrete GPU";
  case TDM_CLASS_CPU_DEVICE:
    return "CPU device";
  case TDM_CLASS_ACCELERATOR:
    return "accelerator";
  case TDM_CLASS_UNKNOWN:
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
    d->cls = TDM_CLASS_CPU_DEVICE;
    snprintf(d->reason, sizeof d->reason, "reports device type CPU");
  } else if ((d->type & TDM_CL_TYPE_GPU) && d->host_unified) {
    d->cls = TDM_CLASS_INTEGRATED_GPU;
    snprintf(d->reason, sizeof d->reason, "GPU that reports host-unified memory");
  } else if ((d->type & TDM_CL_TYPE_GPU) && (d->svm_caps & svm_system)) {
    d->cls = TDM_CLASS_INTEGRATED_GPU;
    snprintf(d->reason, sizeof d->reason,
             "GPU with fine-grained system SVM (shares the host's memory)");
  } else if (d->type & TDM_CL_TYPE_GPU) {
    d->cls = TDM_CLASS_DISCRETE_GPU;
    snprintf(d->reason, sizeof d->reason, "GPU with memory of its own (no host-unified memory)");
  } else {
    d->cls = TDM_CLASS_ACCELERATOR;
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
