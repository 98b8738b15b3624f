/*
 * A fake OpenCL loader for the discovery tests: the few entry points Tandem
 * looks up, answering for a made-up laptop with a docking GPU:
 *
 *   platform 0 "Fake GPU Platform"
 *     device 0  "Fake iGPU"        GPU, host-unified memory
 *     device 1  "Fake dGPU"        GPU, own memory, PCI 0000:00:00.0 through
 *                                  cl_khr_pci_bus_info and NVIDIA's
 *                                  attributes (which hwloc's helpers read)
 *     device 2  "Fake broken GPU"  GPU; creating a context on it fails
 *   platform 1 "Fake Second Platform"
 *     device 3  the same dGPU (same PCI address), a very long name
 *     device 4  "Fake CPU"         CPU device
 *   platform 2 "Fake Empty Platform", no device
 *
 * Selected through tdm_config.opencl_library. fake_live_contexts() tells
 * the tests how many contexts are open.
 */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define NV_PCI_BUS_ID 0x4008
#define NV_PCI_SLOT_ID 0x4009
#define NV_PCI_DOMAIN_ID 0x400A

struct _cl_platform_id {
  const char *name;
};

struct _cl_device_id {
  unsigned platform;
  const char *name;
  cl_device_type type;
  cl_bool unified;
  int pci; /* reports a PCI address */
  int broken;
};

struct _cl_context {
  int unused;
};

static struct _cl_platform_id platforms[3] = {
    {"Fake GPU Platform"}, {"Fake Second Platform"}, {"Fake Empty Platform"}};

#define LONG_NAME                                                                          \
  "Fake dGPU seen again through a second platform whose driver gives it a name far too " \
  "long for any sensible buffer, so that the reader has to cut it somewhere sensible"

static struct _cl_device_id devices[5] = {
    {0, "Fake iGPU", CL_DEVICE_TYPE_GPU, CL_TRUE, 0, 0},
    {0, "Fake dGPU", CL_DEVICE_TYPE_GPU, CL_FALSE, 1, 0},
    {0, "Fake broken GPU", CL_DEVICE_TYPE_GPU, CL_FALSE, 0, 1},
    {1, LONG_NAME, CL_DEVICE_TYPE_GPU, CL_FALSE, 1, 0},
    {1, "Fake CPU", CL_DEVICE_TYPE_CPU, CL_TRUE, 0, 0},
};

static atomic_int live_contexts;

int fake_live_contexts(void) {
  return atomic_load(&live_contexts);
}

/* Copies `size` bytes of `src` out, as OpenCL does: the size asked for is
 * always returned, the value only when there is room. */
static cl_int answer(const void *src, size_t size, size_t room, void *value, size_t *ret) {
  if (ret)
    *ret = size;
  if (value) {
    if (room < size)
      return CL_INVALID_VALUE;
    memcpy(value, src, size);
  }
  return CL_SUCCESS;
}

cl_int clGetPlatformIDs(cl_uint n, cl_platform_id *out, cl_uint *count) {
  if (count)
    *count = 3;
  for (cl_uint i = 0; out && i < n && i < 3; i++)
    out[i] = &platforms[i];
  return CL_SUCCESS;
}

cl_int clGetPlatformInfo(cl_platform_id p, cl_platform_info param, size_t room, void *value,
                         size_t *ret) {
  const char *s;
  switch (param) {
  case CL_PLATFORM_NAME:
    s = p->name;
    break;
  case CL_PLATFORM_VENDOR:
    s = "Fake Vendor";
    break;
  case CL_PLATFORM_VERSION:
    s = "OpenCL 3.0 Fake";
    break;
  default:
    return CL_INVALID_VALUE;
  }
  return answer(s, strlen(s) + 1, room, value, ret);
}

cl_int clGetDeviceIDs(cl_platform_id p, cl_device_type type, cl_uint n, cl_device_id *out,
                      cl_uint *count) {
  (void)type;
  unsigned plat = (unsigned)(p - platforms), k = 0;
  for (unsigned i = 0; i < 5; i++)
    if (devices[i].platform == plat) {
      if (out && k < n)
        out[k] = &devices[i];
      k++;
    }
  if (count)
    *count = k;
  return k ? CL_SUCCESS : CL_DEVICE_NOT_FOUND;
}

cl_int clGetDeviceInfo(cl_device_id d, cl_device_info param, size_t room, void *value,
                       size_t *ret) {
  const char *s = NULL;
  cl_uint u;
  cl_ulong ul;
  switch (param) {
  case CL_DEVICE_NAME:
    s = d->name;
    break;
  case CL_DEVICE_VENDOR:
    s = "Fake Vendor";
    break;
  case CL_DRIVER_VERSION:
    s = "1.2.3";
    break;
  case CL_DEVICE_VERSION:
    s = "OpenCL 3.0 Fake";
    break;
  case CL_DEVICE_EXTENSIONS:
    s = d->pci ? "cl_khr_fp64 cl_khr_pci_bus_info" : "cl_khr_fp64";
    break;
  case CL_DEVICE_TYPE:
    return answer(&d->type, sizeof d->type, room, value, ret);
  case CL_DEVICE_HOST_UNIFIED_MEMORY:
    return answer(&d->unified, sizeof d->unified, room, value, ret);
  case CL_DEVICE_MAX_COMPUTE_UNITS:
    u = 24;
    return answer(&u, sizeof u, room, value, ret);
  case CL_DEVICE_MAX_CLOCK_FREQUENCY:
    u = 1500;
    return answer(&u, sizeof u, room, value, ret);
  case CL_DEVICE_GLOBAL_MEM_SIZE:
    ul = 8ull << 30;
    return answer(&ul, sizeof ul, room, value, ret);
  case CL_DEVICE_MAX_MEM_ALLOC_SIZE:
    ul = 2ull << 30;
    return answer(&ul, sizeof ul, room, value, ret);
  case CL_DEVICE_LOCAL_MEM_SIZE:
    ul = 64 << 10;
    return answer(&ul, sizeof ul, room, value, ret);
  case CL_DEVICE_PCI_BUS_INFO_KHR:
    if (d->pci) {
      cl_device_pci_bus_info_khr pci = {0, 0, 0, 0};
      return answer(&pci, sizeof pci, room, value, ret);
    }
    return CL_INVALID_VALUE;
  case NV_PCI_BUS_ID:
  case NV_PCI_SLOT_ID:
  case NV_PCI_DOMAIN_ID:
    if (d->pci) {
      u = 0; /* 0000:00:00.0 */
      return answer(&u, sizeof u, room, value, ret);
    }
    return CL_INVALID_VALUE;
  default:
    return CL_INVALID_VALUE;
  }
  return answer(s, strlen(s) + 1, room, value, ret);
}

cl_context clCreateContext(const cl_context_properties *props, cl_uint n,
                           const cl_device_id *devs, void(CL_CALLBACK *notify)(const char *,
                                                                              const void *,
                                                                              size_t, void *),
                           void *data, cl_int *err) {
  (void)props;
  (void)notify;
  (void)data;
  for (cl_uint i = 0; i < n; i++)
    if (devs[i]->broken) {
      *err = CL_DEVICE_NOT_AVAILABLE;
      return NULL;
    }
  cl_context c = calloc(1, sizeof *c);
  *err = c ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
  if (c)
    atomic_fetch_add(&live_contexts, 1);
  return c;
}

cl_int clReleaseContext(cl_context c) {
  if (!c)
    return CL_INVALID_CONTEXT;
  free(c);
  atomic_fetch_sub(&live_contexts, 1);
  return CL_SUCCESS;
}

/* Running tasks: queues exist, nothing else does (no test runs a task on
 * the made-up devices). */
struct _cl_command_queue {
  int unused;
};

static struct _cl_command_queue the_queue;

cl_command_queue clCreateCommandQueue(cl_context c, cl_device_id d,
                                      cl_command_queue_properties props, cl_int *err) {
  (void)c;
  (void)d;
  (void)props;
  *err = CL_SUCCESS;
  return &the_queue;
}

cl_int clReleaseCommandQueue(cl_command_queue q) {
  (void)q;
  return CL_SUCCESS;
}

cl_int clFinish(cl_command_queue q) {
  (void)q;
  return CL_SUCCESS;
}
