/*
 * Devices as Tandem records them, and the rules that classify them. A
 * backend's discovery (backends/opencl/probe.c, backends/sim/sim.c) fills
 * one record per device; classification and deduplication are pure
 * functions of records, so that tests can run them on fabricated machines
 * (an integrated GPU, a discrete GPU seen through two platforms...).
 */
#ifndef TDM_DEVICES_H
#define TDM_DEVICES_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem.h"

/* Device types, as OpenCL's CL_DEVICE_TYPE_* bits (same values). */
#define TDM_CL_TYPE_CPU (1u << 1)
#define TDM_CL_TYPE_GPU (1u << 2)
#define TDM_CL_TYPE_ACCELERATOR (1u << 3)
#define TDM_CL_TYPE_CUSTOM (1u << 4)

typedef struct tdm_device_record {
  unsigned platform;     /* index of its platform */
  unsigned index;        /* index within the platform */
  char platform_name[128];
  char name[128];
  char vendor[128];
  char driver_version[128];
  char version[128]; /* "OpenCL 3.0 ..." */
  uint64_t type;    /* TDM_CL_TYPE_* bits */
  unsigned compute_units;
  unsigned clock_mhz;
  uint64_t global_mem;
  uint64_t max_alloc;
  uint64_t local_mem;
  bool fp64;
  bool host_unified; /* CL_DEVICE_HOST_UNIFIED_MEMORY */
  uint64_t svm_caps; /* CL_DEVICE_SVM_CAPABILITIES, 0 before OpenCL 2.0 */
  bool has_pci;      /* cl_khr_pci_bus_info */
  uint32_t pci_domain, pci_bus, pci_device, pci_function;
  bool has_uuid;     /* cl_khr_device_uuid */
  uint8_t uuid[16];
  bool context_ok;   /* a context could be created on it */

  /* Locality (hwloc's OpenCL helpers): nearest NUMA node's OS index and
   * the CPUs near the device, -1 and "" when unknown. */
  int numa_node;
  char near_cpus[64];

  /* Set by tdm__classify_device. */
  tdm_device_class cls;
  char reason[160];
  /* Set by tdm__dedupe_devices: index of the record this one is the same
   * physical device as, or -1. */
  int duplicate_of;

  /* Set by tdm__select_devices (and by the context probe of a selected
   * device, which may un-use it). */
  bool used;
  char usage[256];
  bool shared_memory;
  char memory_reason[160];
  int worker; /* its worker when used, else -1 */
  /* Set once, by tdm__device_quarantine (core/place.c). */
  _Atomic bool quarantined;
  char quarantine_reason[128];
} tdm_device_record;

typedef struct tdm_platform_record {
  char name[128];
  char vendor[128];
  char version[128];
  unsigned ndevices;
} tdm_platform_record;

/* What the machine's OpenCL stack told discovery, for tdm_machine_info
 * (its opencl_status and opencl_summary): written by the OpenCL backend,
 * read by machine.c. */
typedef struct tdm_opencl_report {
  tdm_status status;
  char summary[256];
} tdm_opencl_report;

/* A parsed tdm_config.devices (see tandem.h). */
#define TDM_MAX_DEVICE_INDEX 256
typedef struct tdm_device_selection {
  bool none;
  unsigned classes; /* bit (1 << tdm_device_class) per class named */
  uint64_t indices[TDM_MAX_DEVICE_INDEX / 64];
  bool admit_cpu; /* tdm_config.opencl_cpu_devices */
  tdm_device_memory memory;
  const char *text; /* as given, for messages */
} tdm_device_selection;

/* Parses `text` (NULL or "": "all") into *sel, other fields untouched.
 * Returns TDM_OK, or TDM_ERR_INVALID_ARG with the offending term copied
 * into bad. */
tdm_status tdm__parse_devices(const char *text, tdm_device_selection *sel, char *bad,
                              size_t bad_size);

/* Decides for each classified and deduplicated record whether it is used
 * (used, usage) and how it treats memory (shared_memory, memory_reason).
 * A pure function of the records and the selection. */
void tdm__select_devices(tdm_device_record *d, unsigned n, const tdm_device_selection *sel);

/* Sets d->cls and d->reason from what the device reports. */
void tdm__classify_device(tdm_device_record *d);

/* Marks as duplicates the records that are the same physical device seen
 * through another platform (same PCI address, or same UUID), keeping the
 * first. */
void tdm__dedupe_devices(tdm_device_record *d, unsigned n);

#endif
