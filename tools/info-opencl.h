/*
 * tandem-info's own OpenCL queries (info-opencl.c): a device's limits and
 * extensions (--verbose), and the cost of copies between the host and it
 * (--bandwidth), measured as clinfo reports limits and StarPU calibrates
 * its buses. The device comes from the runtime (tdm_opencl_device); the
 * loader is opened here at run time, as the library does, so that the
 * tool runs where there is none.
 */
#ifndef TDM_INFO_OPENCL_H
#define TDM_INFO_OPENCL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct info_detail {
  char opencl_c_version[128];
  char *extensions; /* malloc'd, space-separated */
  uint64_t max_work_group_size;
  unsigned max_work_item_dims;
  uint64_t max_work_item_sizes[3];
  uint64_t max_parameter_bytes;     /* the most a kernel's arguments may take */
  uint64_t max_constant_buffer_bytes;
  unsigned max_constant_args;
  unsigned mem_base_addr_align_bits;
  unsigned address_bits;
  uint64_t global_mem_cache_bytes;
  unsigned global_mem_cacheline_bytes;
  bool image_support;
  unsigned preferred_vector_float, preferred_vector_double;
  uint64_t profiling_timer_resolution_ns;
} info_detail;

/* The copies of one size: median seconds each way. */
typedef struct info_link_sample {
  uint64_t bytes;
  double to_device_s, to_host_s;
} info_link_sample;

#define INFO_LINK_SIZES 6

typedef struct info_link {
  info_link_sample samples[INFO_LINK_SIZES];
  unsigned nsamples;
  /* latency: the smallest copy's time; bandwidth: the largest copy's
   * bytes over its time less the latency */
  double latency_to_device_s, latency_to_host_s;
  double bandwidth_to_device, bandwidth_to_host; /* bytes per second */
} info_link;

/* `loader`: the OpenCL loader the runtime opened (TANDEM_OPENCL_LIBRARY
 * or the default). False, with why, where it cannot be used. */
bool info_cl_open(const char *loader, char *why, size_t n);
void info_cl_close(void);
/* A device's limits; false (why) when a query fails. d->extensions is
 * to be freed. */
bool info_cl_details(void *device, info_detail *d, char *why, size_t n);
/* Copies between the host and the device, in a context and queue of the
 * tool's own; false (why) when it cannot. */
bool info_cl_link(void *device, uint64_t max_alloc, info_link *l, char *why, size_t n);

#endif
