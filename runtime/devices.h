/*
 * OpenCL devices as Tandem records them, and the rules that classify them.
 *
 * The OpenCL loader is opened at run time (opencl.c), never linked: a
 * program using Tandem starts and runs CPU-only where libOpenCL.so.1 is
 * missing, where no ICD is installed, or where an ICD is broken. Discovery
 * fills one record per device; classification and deduplication are pure
 * functions of records, so that tests can run them on fabricated machines
 * (an integrated GPU, a discrete GPU seen through two platforms...).
 */
#ifndef TDM_DEVICES_H
#define TDM_DEVICES_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem.h"

typedef enum tdm_device_class {
  TDM_CLASS_UNKNOWN = 0,
  TDM_CLASS_INTEGRATED_GPU, /* a GPU sharing host memory: zero-copy */
  TDM_CLASS_DISCRETE_GPU,   /* a GPU with memory of its own: copies */
  TDM_CLASS_CPU_DEVICE,     /* an OpenCL device on the CPU cores (PoCL...) */
  TDM_CLASS_ACCELERATOR     /* anything else (FPGA, DSP, custom) */
} tdm_device_class;

const char *tdm__device_class_name(tdm_device_class c);

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
  char driver_version[64];
  char version[64]; /* "OpenCL 3.0 ..." */
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

  /* Set by tdm__classify_device. */
  tdm_device_class cls;
  char reason[160];
  /* Set by tdm__dedupe_devices: index of the record this one is the same
   * physical device as, or -1. */
  int duplicate_of;
} tdm_device_record;

/* Sets d->cls and d->reason from what the device reports. */
void tdm__classify_device(tdm_device_record *d);

/* Marks as duplicates the records that are the same physical device seen
 * through another platform (same PCI address, or same UUID), keeping the
 * first. */
void tdm__dedupe_devices(tdm_device_record *d, unsigned n);

/* Loads the OpenCL loader (path NULL: "libOpenCL.so.1", or the environment
 * variable TANDEM_OPENCL_LIBRARY) and enumerates every device of every
 * platform into *out (malloc'd, *n records, classified and deduplicated).
 * Where the loader is missing or broken, or no platform exists, returns
 * TDM_ERR_NO_OPENCL with *out NULL and *n 0, having logged why; a device
 * whose context cannot be created is kept with context_ok false and
 * logged. */
tdm_status tdm__discover_opencl(const tdm_runtime *rt, const char *path,
                                tdm_device_record **out, unsigned *n);

#endif
