/*
 * OpenCL discovery through the ICD loader, opened at run time.
 *
 * Tandem never links libOpenCL: it dlopen()s it and looks up the handful
 * of entry points it needs, so that a program built with Tandem starts on
 * a machine without the loader, without any ICD, or with a broken one, and
 * runs on its CPU cores. Every failure is logged with the reason. The
 * loader stays loaded for the rest of the process once it was opened:
 * unloading an ICD (PoCL and its LLVM among them) is not safe.
 */

#include "../driver.h"
#include "opencl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void share_contexts(tdm_runtime *rt, unsigned base);

/* The OpenCL backend's discover (backends/backend.h), the first asked:
 * not when emulated devices are asked for (tdm_config.sim) without
 * "+opencl". Finds the devices, chooses those to use, opens a context on
 * each and gives each a worker id after the CPU workers'. Never fails for
 * want of OpenCL: the runtime then runs on the CPU cores. */
tdm_status tdm__opencl_claim(tdm_runtime *rt, void **state, bool *last) {
  *last = false;
  if (rt->cfg.sim && !rt->sim_beside_opencl) {
    snprintf(rt->opencl_report.summary, sizeof rt->opencl_report.summary,
             "not looked for: emulated devices (sim) are used instead");
    return TDM_OK;
  }
  if (rt->selection.none) {
    snprintf(rt->opencl_report.summary, sizeof rt->opencl_report.summary,
             "not looked for: devices=\"none\", CPU cores only");
    return TDM_OK;
  }
  unsigned base = rt->ndevices, first = rt->ndevice_workers;
  tdm_status st = tdm__opencl_discover(rt, rt->cfg.opencl_library, state);
  if (st == TDM_ERR_NO_MEMORY)
    return st;
  rt->opencl_report.status = rt->nplatforms ? TDM_OK : TDM_ERR_NO_OPENCL;
  tdm__select_devices(rt->devices + base, rt->ndevices - base, &rt->selection);
  if (rt->ndevices > base) {
    unsigned *of = tdm__realloc(rt, rt->device_of, (first + rt->ndevices - base) * sizeof *of);
    if (!of)
      return TDM_ERR_NO_MEMORY;
    rt->device_of = of;
  }
  share_contexts(rt, base);
  for (unsigned i = base; i < rt->ndevices; i++) {
    tdm_device_record *d = &rt->devices[i];
    if (d->used && rt->ndevice_workers == TDM_MAX_DEVICE_WORKERS) {
      d->used = false;
      snprintf(d->usage, sizeof d->usage, "not used: at most %d devices are",
               TDM_MAX_DEVICE_WORKERS);
    }
    if (d->used && tdm__opencl_activate(rt, i)) {
      d->worker = (int)(rt->nworkers + rt->ndevice_workers);
      rt->device_of[rt->ndevice_workers++] = i;
    }
    tdm__log(rt, TDM_LOG_INFO, "OpenCL device %u: %s (%s, %s): %s, %s; %s", i, d->name,
             d->platform_name, tdm_device_class_name(d->cls), d->reason,
             d->shared_memory ? "shared memory" : "separate memory", d->usage);
  }
  return TDM_OK;
}

#ifndef TDM_HAVE_OPENCL

tdm_status tdm__opencl_discover(tdm_runtime *rt, const char *path, void **state) {
  (void)path;
  (void)state;
  snprintf(rt->opencl_report.summary, sizeof rt->opencl_report.summary,
           "Tandem was built without the OpenCL headers: CPU cores only");
  tdm__log(rt, TDM_LOG_INFO, "OpenCL: %s", rt->opencl_report.summary);
  return TDM_ERR_NO_OPENCL;
}

bool tdm__opencl_activate(tdm_runtime *rt, unsigned i) {
  (void)rt;
  (void)i;
  return false;
}

static void share_contexts(tdm_runtime *rt, unsigned base) {
  (void)rt;
  (void)base;
}

void tdm__opencl_close(tdm_runtime *rt) {
  (void)rt;
}

/* without the OpenCL headers: the same symbol, cl_* being pointers */
TDM_API tdm_status tdm_opencl_device(const tdm_runtime *rt, unsigned device, void **id,
                                     void **context);
tdm_status tdm_opencl_device(const tdm_runtime *rt, unsigned device, void **id, void **context) {
  if (id)
    *id = NULL;
  if (context)
    *context = NULL;
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  if (device >= rt->ndevices) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_opencl_device: no device %u (%u devices)", device,
             rt->ndevices);
    return TDM_ERR_INVALID_ARG;
  }
  return TDM_ERR_NOT_SUPPORTED;
}

#else

/* hwloc's OpenCL helpers (hwloc/opencl.h, inline functions) call
 * clGetDeviceInfo by name, which would link Tandem to the loader. The name
 * is routed to the entry point found with dlsym instead, through a
 * thread-local pointer set around each use of the helpers. */
#define clGetDeviceInfo tdm__hwloc_cl_get_device_info
#include "cl.h"

#include <dlfcn.h>
#include <hwloc/opencl.h>

#include "tandem/opencl.h"

/* The name of an OpenCL error code, as the headers spell it, for the log
 * (names from the Khronos headers; the numbers are theirs). */
const char *tdm__cl_error_name(cl_int err) {
  switch (err) {
#define X(name)                                                                \
  case name:                                                                   \
    return #name;
    X(CL_SUCCESS)
    X(CL_DEVICE_NOT_FOUND)
    X(CL_DEVICE_NOT_AVAILABLE)
    X(CL_COMPILER_NOT_AVAILABLE)
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    X(CL_OUT_OF_RESOURCES)
    X(CL_OUT_OF_HOST_MEMORY)
    X(CL_PROFILING_INFO_NOT_AVAILABLE)
    X(CL_MEM_COPY_OVERLAP)
    X(CL_IMAGE_FORMAT_MISMATCH)
    X(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    X(CL_BUILD_PROGRAM_FAILURE)
    X(CL_MAP_FAILURE)
    X(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    X(CL_COMPILE_PROGRAM_FAILURE)
    X(CL_LINKER_NOT_AVAILABLE)
    X(CL_LINK_PROGRAM_FAILURE)
    X(CL_DEVICE_PARTITION_FAILED)
    X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
    X(CL_INVALID_VALUE)
    X(CL_INVALID_DEVICE_TYPE)
    X(CL_INVALID_PLATFORM)
    X(CL_INVALID_DEVICE)
    X(CL_INVALID_CONTEXT)
    X(CL_INVALID_QUEUE_PROPERTIES)
    X(CL_INVALID_COMMAND_QUEUE)
    X(CL_INVALID_HOST_PTR)
    X(CL_INVALID_MEM_OBJECT)
    X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    X(CL_INVALID_IMAGE_SIZE)
    X(CL_INVALID_SAMPLER)
    X(CL_INVALID_BINARY)
    X(CL_INVALID_BUILD_OPTIONS)
    X(CL_INVALID_PROGRAM)
    X(CL_INVALID_PROGRAM_EXECUTABLE)
    X(CL_INVALID_KERNEL_NAME)
    X(CL_INVALID_KERNEL_DEFINITION)
    X(CL_INVALID_KERNEL)
    X(CL_INVALID_ARG_INDEX)
    X(CL_INVALID_ARG_VALUE)
    X(CL_INVALID_ARG_SIZE)
    X(CL_INVALID_KERNEL_ARGS)
    X(CL_INVALID_WORK_DIMENSION)
    X(CL_INVALID_WORK_GROUP_SIZE)
    X(CL_INVALID_WORK_ITEM_SIZE)
    X(CL_INVALID_GLOBAL_OFFSET)
    X(CL_INVALID_EVENT_WAIT_LIST)
    X(CL_INVALID_EVENT)
    X(CL_INVALID_OPERATION)
    X(CL_INVALID_GL_OBJECT)
    X(CL_INVALID_BUFFER_SIZE)
    X(CL_INVALID_MIP_LEVEL)
    X(CL_INVALID_GLOBAL_WORK_SIZE)
    X(CL_INVALID_PROPERTY)
    X(CL_INVALID_IMAGE_DESCRIPTOR)
    X(CL_INVALID_COMPILER_OPTIONS)
    X(CL_INVALID_LINKER_OPTIONS)
    X(CL_INVALID_DEVICE_PARTITION_COUNT)
    X(CL_INVALID_PIPE_SIZE)
    X(CL_INVALID_DEVICE_QUEUE)
    X(CL_INVALID_SPEC_ID)
    X(CL_MAX_SIZE_RESTRICTION_EXCEEDED)
    X(CL_PLATFORM_NOT_FOUND_KHR)
#undef X
  }
  return "an error unknown to Tandem";
}

static _Thread_local get_device_info_fn hwloc_get_device_info;

cl_int tdm__hwloc_cl_get_device_info(cl_device_id dev, cl_device_info param, size_t size,
                                     void *value, size_t *ret) {
  return hwloc_get_device_info ? hwloc_get_device_info(dev, param, size, value, ret)
                               : CL_INVALID_OPERATION;
}

static tdm_status load_api(tdm_runtime *rt, const char *path, cl_api *api) {
  if (!path || !*path)
    path = "libOpenCL.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    snprintf(rt->opencl_report.summary, sizeof rt->opencl_report.summary,
             "cannot load the OpenCL loader %s (%s): CPU cores only", path,
             why ? why : "unknown reason");
    tdm__log(rt, TDM_LOG_INFO, "OpenCL: %s", rt->opencl_report.summary);
    return TDM_ERR_NO_OPENCL;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"clGetPlatformIDs", (void **)&api->GetPlatformIDs},
      {"clGetPlatformInfo", (void **)&api->GetPlatformInfo},
      {"clGetDeviceIDs", (void **)&api->GetDeviceIDs},
      {"clGetDeviceInfo", (void **)&api->GetDeviceInfo},
      {"clCreateContext", (void **)&api->CreateContext},
      {"clReleaseContext", (void **)&api->ReleaseContext},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(rt->opencl_report.summary, sizeof rt->opencl_report.summary,
               "%s has no %s: not an OpenCL loader; CPU cores only", path, syms[i].name);
      tdm__log(rt, TDM_LOG_WARNING, "OpenCL: %s", rt->opencl_report.summary);
      dlclose(lib); /* nothing was initialised through it */
      return TDM_ERR_NO_OPENCL;
    }
  }
  /* What running tasks needs. clCreateCommandQueue is deprecated since
   * OpenCL 2.0 but every loader still has it. */
  struct {
    const char *name;
    void **slot;
  } run[] = {
      {"clCreateCommandQueue", (void **)&api->CreateCommandQueue},
      {"clReleaseCommandQueue", (void **)&api->ReleaseCommandQueue},
      {"clCreateProgramWithSource", (void **)&api->CreateProgramWithSource},
      {"clBuildProgram", (void **)&api->BuildProgram},
      {"clGetProgramBuildInfo", (void **)&api->GetProgramBuildInfo},
      {"clReleaseProgram", (void **)&api->ReleaseProgram},
      {"clCreateKernel", (void **)&api->CreateKernel},
      {"clReleaseKernel", (void **)&api->ReleaseKernel},
      {"clSetKernelArg", (void **)&api->SetKernelArg},
      {"clGetKernelInfo", (void **)&api->GetKernelInfo},
      {"clEnqueueNDRangeKernel", (void **)&api->EnqueueNDRangeKernel},
      {"clCreateBuffer", (void **)&api->CreateBuffer},
      {"clReleaseMemObject", (void **)&api->ReleaseMemObject},
      {"clEnqueueWriteBuffer", (void **)&api->EnqueueWriteBuffer},
      {"clEnqueueReadBuffer", (void **)&api->EnqueueReadBuffer},
      {"clEnqueueMapBuffer", (void **)&api->EnqueueMapBuffer},
      {"clEnqueueUnmapMemObject", (void **)&api->EnqueueUnmapMemObject},
      {"clEnqueueMarkerWithWaitList", (void **)&api->EnqueueMarkerWithWaitList},
      {"clSetEventCallback", (void **)&api->SetEventCallback},
      {"clRetainEvent", (void **)&api->RetainEvent},
      {"clReleaseEvent", (void **)&api->ReleaseEvent},
      {"clWaitForEvents", (void **)&api->WaitForEvents},
      {"clGetEventInfo", (void **)&api->GetEventInfo},
      {"clCreateUserEvent", (void **)&api->CreateUserEvent},
      {"clSetUserEventStatus", (void **)&api->SetUserEventStatus},
      {"clEnqueueWriteBufferRect", (void **)&api->EnqueueWriteBufferRect},
      {"clEnqueueReadBufferRect", (void **)&api->EnqueueReadBufferRect},
      {"clCreateProgramWithBinary", (void **)&api->CreateProgramWithBinary},
      {"clGetProgramInfo", (void **)&api->GetProgramInfo},
      {"clGetEventProfilingInfo", (void **)&api->GetEventProfilingInfo},
      {"clFlush", (void **)&api->Flush},
      {"clFinish", (void **)&api->Finish},
  };
  api->can_run = true;
  api->missing = NULL;
  for (size_t i = 0; i < sizeof run / sizeof run[0]; i++) {
    *run[i].slot = dlsym(lib, run[i].name);
    if (!*run[i].slot && api->can_run) {
      api->can_run = false;
      api->missing = run[i].name;
    }
  }
  *(void **)&api->GetKernelArgInfo = dlsym(lib, "clGetKernelArgInfo");
  *(void **)&api->RetainContext = dlsym(lib, "clRetainContext");
  *(void **)&api->EnqueueCopyBuffer = dlsym(lib, "clEnqueueCopyBuffer");
  return TDM_OK;
}

/* Platform info when p is given, device info otherwise. */
static cl_int query(const cl_api *api, cl_platform_id p, cl_device_id d, cl_uint param,
                    size_t size, void *value, size_t *ret) {
  return p ? api->GetPlatformInfo(p, param, size, value, ret)
           : api->GetDeviceInfo(d, param, size, value, ret);
}

/* A string property of a platform or device, cut to fit `size` bytes when
 * longer (OpenCL refuses to return a string into too small a buffer). */
static void cl_string(tdm_runtime *rt, const cl_api *api, cl_platform_id p, cl_device_id d,
                      cl_uint param, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = 0;
  if (query(api, p, d, param, 0, NULL, &len) != CL_SUCCESS || len == 0)
    return;
  char *all = len > size ? tdm__malloc(rt, len) : buf;
  if (!all)
    return;
  if (query(api, p, d, param, len, all, NULL) != CL_SUCCESS)
    all[0] = 0;
  if (all != buf) {
    memcpy(buf, all, size - 1);
    free(all);
  }
  buf[size - 1] = 0;
}

static void info_str(tdm_runtime *rt, const cl_api *api, cl_device_id dev, cl_device_info param,
                     char *buf, size_t size) {
  cl_string(rt, api, NULL, dev, param, buf, size);
}

static void platform_str(tdm_runtime *rt, const cl_api *api, cl_platform_id p,
                         cl_platform_info param, char *buf, size_t size) {
  cl_string(rt, api, p, NULL, param, buf, size);
}

/* Reads a scalar of `size` bytes into *out; leaves it alone on error. */
static bool info_val(const cl_api *api, cl_device_id dev, cl_device_info param, void *out,
                     size_t size) {
  return api->GetDeviceInfo(dev, param, size, out, NULL) == CL_SUCCESS;
}

static bool has_extension(tdm_runtime *rt, const cl_api *api, cl_device_id dev,
                          const char *ext) {
  size_t len = 0;
  if (api->GetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || !len)
    return false;
  char *all = tdm__malloc(rt, len + 1);
  if (!all)
    return false;
  bool found = false;
  if (api->GetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, len, all, NULL) == CL_SUCCESS) {
    all[len] = 0;
    size_t n = strlen(ext);
    for (char *p = strstr(all, ext); p && !found; p = strstr(p + 1, ext))
      found = (p == all || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0);
  }
  free(all);
  return found;
}

static void fill_record(tdm_runtime *rt, const cl_api *api, cl_device_id dev,
                        tdm_device_record *d) {
  cl_device_type type = 0;
  cl_uint cu = 0, clock = 0;
  cl_ulong gmem = 0, maxalloc = 0, lmem = 0;
  cl_device_fp_config fp64 = 0;
  cl_bool unified = CL_FALSE;
  cl_device_svm_capabilities svm = 0;
  info_str(rt, api, dev, CL_DEVICE_NAME, d->name, sizeof d->name);
  info_str(rt, api, dev, CL_DEVICE_VENDOR, d->vendor, sizeof d->vendor);
  info_str(rt, api, dev, CL_DRIVER_VERSION, d->driver_version, sizeof d->driver_version);
  info_str(rt, api, dev, CL_DEVICE_VERSION, d->version, sizeof d->version);
  if (!info_val(api, dev, CL_DEVICE_TYPE, &type, sizeof type))
    tdm__log(rt, TDM_LOG_WARNING, "OpenCL: %s does not report its type", d->name);
  info_val(api, dev, CL_DEVICE_MAX_COMPUTE_UNITS, &cu, sizeof cu);
  info_val(api, dev, CL_DEVICE_MAX_CLOCK_FREQUENCY, &clock, sizeof clock);
  info_val(api, dev, CL_DEVICE_GLOBAL_MEM_SIZE, &gmem, sizeof gmem);
  info_val(api, dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, &maxalloc, sizeof maxalloc);
  info_val(api, dev, CL_DEVICE_LOCAL_MEM_SIZE, &lmem, sizeof lmem);
  info_val(api, dev, CL_DEVICE_DOUBLE_FP_CONFIG, &fp64, sizeof fp64);
  /* deprecated in OpenCL 2.0 but still answered by most drivers */
  info_val(api, dev, CL_DEVICE_HOST_UNIFIED_MEMORY, &unified, sizeof unified);
  info_val(api, dev, CL_DEVICE_SVM_CAPABILITIES, &svm, sizeof svm);
  d->type = type;
  d->compute_units = cu;
  d->clock_mhz = clock;
  d->global_mem = gmem;
  d->max_alloc = maxalloc;
  d->local_mem = lmem;
  d->fp64 = fp64 != 0;
  d->host_unified = unified == CL_TRUE;
  d->svm_caps = svm;
  if (has_extension(rt, api, dev, "cl_khr_pci_bus_info")) {
    cl_device_pci_bus_info_khr pci;
    if (info_val(api, dev, CL_DEVICE_PCI_BUS_INFO_KHR, &pci, sizeof pci)) {
      d->has_pci = true;
      d->pci_domain = pci.pci_domain;
      d->pci_bus = pci.pci_bus;
      d->pci_device = pci.pci_device;
      d->pci_function = pci.pci_function;
    }
  }
  if (has_extension(rt, api, dev, "cl_khr_device_uuid"))
    d->has_uuid = info_val(api, dev, CL_DEVICE_UUID_KHR, d->uuid, sizeof d->uuid);
}

/* Where the device sits: hwloc's helpers know it for AMD and NVIDIA
 * devices (by their PCI address) on Linux, on this machine's topology. */
static void locate(tdm_runtime *rt, const cl_api *api, cl_device_id dev,
                   tdm_device_record *d) {
  d->numa_node = -1;
  d->near_cpus[0] = 0;
  if (!hwloc_topology_is_thissystem(rt->topo))
    return;
  unsigned dom, bus, slot, fn;
  hwloc_get_device_info = api->GetDeviceInfo;
  hwloc_bitmap_t set = NULL;
  if (hwloc_opencl_get_device_pci_busid(dev, &dom, &bus, &slot, &fn) == 0 &&
      (set = hwloc_bitmap_alloc()) && hwloc_opencl_get_device_cpuset(rt->topo, dev, set) == 0 &&
      !hwloc_bitmap_iszero(set)) {
    d->numa_node = tdm__nearest_numa(rt->topo, set);
    if (hwloc_bitmap_list_snprintf(d->near_cpus, sizeof d->near_cpus, set) < 0)
      d->near_cpus[0] = 0;
  }
  hwloc_get_device_info = NULL;
  hwloc_bitmap_free(set);
}

static void no_opencl(tdm_runtime *rt, const char *why, int err) {
  if (err)
    snprintf(rt->opencl_report.summary, sizeof rt->opencl_report.summary,
             "%s (%s, error %d): CPU cores only", why, CL_ERR(err));
  else
    snprintf(rt->opencl_report.summary, sizeof rt->opencl_report.summary, "%s: CPU cores only",
             why);
  tdm__log(rt, TDM_LOG_INFO, "OpenCL: %s", rt->opencl_report.summary);
}

/* Grows the runtime's and cl's arrays by `more` device slots. */
static bool grow_devices(tdm_runtime *rt, tdm_opencl *cl, unsigned more) {
  unsigned n = rt->ndevices + more;
  tdm_device_record *d = tdm__realloc(rt, rt->devices, n * sizeof *d);
  if (d)
    rt->devices = d;
  cl_platform_id *p = tdm__realloc(rt, cl->platform_of, n * sizeof *p);
  if (p)
    cl->platform_of = p;
  cl_device_id *ids = tdm__realloc(rt, cl->ids, n * sizeof *ids);
  if (ids)
    cl->ids = ids;
  cl_context *ctx = tdm__realloc(rt, cl->contexts, n * sizeof *ctx);
  if (ctx)
    cl->contexts = ctx;
  return d && p && ids && ctx;
}

tdm_status tdm__opencl_discover(tdm_runtime *rt, const char *path, void **state) {
  cl_api api;
  tdm_status st = load_api(rt, path, &api);
  if (st)
    return st;
  cl_uint nplat = 0;
  cl_int err = api.GetPlatformIDs(0, NULL, &nplat);
  if (err != CL_SUCCESS || nplat == 0) {
    /* -1001 is CL_PLATFORM_NOT_FOUND_KHR: the loader found no ICD */
    no_opencl(rt, "the OpenCL loader found no platform", err);
    return TDM_ERR_NO_OPENCL;
  }
  cl_platform_id *plats = tdm__calloc(rt, nplat, sizeof *plats);
  rt->platforms = tdm__calloc(rt, nplat, sizeof *rt->platforms);
  tdm_opencl *cl = tdm__calloc(rt, 1, sizeof *cl);
  *state = cl;
  if (!plats || !rt->platforms || !cl) {
    free(plats);
    return TDM_ERR_NO_MEMORY; /* the caller's teardown frees the rest */
  }
  cl->api = api;
  err = api.GetPlatformIDs(nplat, plats, NULL);
  if (err != CL_SUCCESS) {
    free(plats);
    no_opencl(rt, "clGetPlatformIDs failed", err);
    return TDM_ERR_NO_OPENCL;
  }
  rt->nplatforms = nplat;
  for (cl_uint p = 0; p < nplat; p++) {
    tdm_platform_record *pr = &rt->platforms[p];
    platform_str(rt, &api, plats[p], CL_PLATFORM_NAME, pr->name, sizeof pr->name);
    platform_str(rt, &api, plats[p], CL_PLATFORM_VENDOR, pr->vendor, sizeof pr->vendor);
    platform_str(rt, &api, plats[p], CL_PLATFORM_VERSION, pr->version, sizeof pr->version);
    cl_uint ndev = 0;
    err = api.GetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev);
    if (err != CL_SUCCESS || ndev == 0) {
      tdm__log(rt, TDM_LOG_INFO, "OpenCL: platform %s has no device (%s, error %d)", pr->name,
               CL_ERR(err));
      continue;
    }
    if (!grow_devices(rt, cl, ndev)) {
      free(plats);
      return TDM_ERR_NO_MEMORY;
    }
    cl_device_id *ids = cl->ids + rt->ndevices;
    err = api.GetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, ids, NULL);
    if (err != CL_SUCCESS) {
      tdm__log(rt, TDM_LOG_WARNING, "OpenCL: cannot list the devices of %s (%s, error %d)",
               pr->name, CL_ERR(err));
      continue;
    }
    for (cl_uint i = 0; i < ndev; i++) {
      unsigned k = rt->ndevices++;
      tdm_device_record *d = &rt->devices[k];
      memset(d, 0, sizeof *d);
      d->platform = p;
      d->index = i;
      memcpy(d->platform_name, pr->name, sizeof d->platform_name);
      cl->platform_of[k] = plats[p];
      cl->contexts[k] = NULL;
      cl->rec_end = k + 1;
      fill_record(rt, &api, ids[i], d);
      locate(rt, &api, ids[i], d);
      tdm__classify_device(d);
    }
    pr->ndevices = ndev;
  }
  free(plats);
  tdm__dedupe_devices(rt->devices, rt->ndevices);
  if (!rt->ndevices) {
    no_opencl(rt, "no device on any OpenCL platform", 0);
    return TDM_ERR_NO_OPENCL;
  }
  snprintf(rt->opencl_report.summary, sizeof rt->opencl_report.summary,
           "%u platform%s, %u device%s", rt->nplatforms, rt->nplatforms == 1 ? "" : "s",
           rt->ndevices, rt->ndevices == 1 ? "" : "s");
  return TDM_OK;
}

/* tdm_config.opencl_peer: the devices of a platform to be used that
 * have memory of their own get one context, shared (each record holds a
 * reference), so that copies between them go straight
 * (clEnqueueCopyBuffer) and their commands wait for each other's events
 * without a bridge. Where that context cannot be made, each gets its own
 * (tdm__opencl_activate). Those past the workers' limit are left out. */
static void share_contexts(tdm_runtime *rt, unsigned base) {
  tdm_opencl *cl = cl_of(rt);
  if (!cl || !rt->cfg.opencl_peer || !cl->api.can_run || !cl->api.RetainContext ||
      !cl->api.EnqueueCopyBuffer)
    return;
  for (unsigned p = 0; p < rt->nplatforms; p++) {
    cl_device_id ids[TDM_MAX_DEVICE_WORKERS];
    unsigned of[TDM_MAX_DEVICE_WORKERS], n = 0;
    for (unsigned i = base; i < cl->rec_end && i < rt->ndevices; i++) {
      const tdm_device_record *d = &rt->devices[i];
      if (d->used && !d->shared_memory && d->platform == p && !cl->contexts[i] &&
          rt->ndevice_workers + n < TDM_MAX_DEVICE_WORKERS) {
        of[n] = i;
        ids[n++] = cl->ids[i];
      }
    }
    if (n < 2)
      continue;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                     (cl_context_properties)cl->platform_of[of[0]], 0};
    cl_int err = CL_SUCCESS;
    cl_context ctx = cl->api.CreateContext(props, n, ids, NULL, NULL, &err);
    if (!ctx || err != CL_SUCCESS) {
      if (ctx)
        cl->api.ReleaseContext(ctx);
      tdm__log(rt, TDM_LOG_INFO,
               "OpenCL: platform %s: no context for its %u devices together (%s, error %d): "
               "one each, copies between them through the host",
               rt->platforms[p].name, n, CL_ERR(err));
      continue;
    }
    unsigned shared = 0;
    for (unsigned j = 0; j < n; j++) {
      /* the first reference is the creation's */
      err = j ? cl->api.RetainContext(ctx) : CL_SUCCESS;
      if (err != CL_SUCCESS) {
        tdm__log(rt, TDM_LOG_WARNING, "OpenCL: clRetainContext: %s, error %d", CL_ERR(err));
        break; /* the others get their own */
      }
      cl->contexts[of[j]] = ctx;
      shared++;
    }
    tdm__log(rt, TDM_LOG_INFO, "OpenCL: platform %s: %u devices in one context: copies "
             "between them go straight", rt->platforms[p].name, shared);
  }
}

bool tdm__opencl_activate(tdm_runtime *rt, unsigned i) {
  tdm_opencl *cl = cl_of(rt);
  tdm_device_record *d = &rt->devices[i];
  if (cl->contexts[i])
    return true; /* shared with others of its platform */
  if (!cl->api.can_run) {
    d->used = false;
    snprintf(d->usage, sizeof d->usage,
             "not used: the OpenCL loader lacks %s, which running tasks needs", cl->api.missing);
    tdm__log(rt, TDM_LOG_WARNING, "OpenCL: device %u (%s): %s", i, d->name, d->usage);
    return false;
  }
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)cl->platform_of[i],
                                   0};
  cl_int err = CL_SUCCESS;
  cl_context ctx = cl->api.CreateContext(props, 1, &cl->ids[i], NULL, NULL, &err);
  if (ctx && err == CL_SUCCESS) {
    cl->contexts[i] = ctx;
    return true;
  }
  if (ctx)
    cl->api.ReleaseContext(ctx);
  d->used = false;
  snprintf(d->usage, sizeof d->usage,
           "not used: no OpenCL context could be created on it (%s, error %d)", CL_ERR(err));
  tdm__log(rt, TDM_LOG_WARNING, "OpenCL: device %u (%s): %s", i, d->name, d->usage);
  return false;
}

tdm_status tdm_opencl_device(const tdm_runtime *rt, unsigned device, cl_device_id *id,
                             cl_context *context) {
  if (id)
    *id = NULL;
  if (context)
    *context = NULL;
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_opencl_device");
  if (device >= rt->ndevices) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_opencl_device: no device %u (%u devices)", device,
             rt->ndevices);
    return TDM_ERR_INVALID_ARG;
  }
  const tdm_opencl *cl = cl_of(rt);
  if (!cl || device >= cl->rec_end) /* an emulated device */
    return TDM_ERR_NOT_SUPPORTED;
  if (id)
    *id = cl->ids[device];
  if (context) /* set before the devices start, not changed until destroy */
    *context = cl->contexts[device];
  return TDM_OK;
}

void tdm__opencl_close(tdm_runtime *rt) {
  tdm_opencl *cl = cl_of(rt);
  if (!cl)
    return;
  for (unsigned i = 0; cl->contexts && i < cl->rec_end; i++)
    if (cl->contexts[i]) {
      cl_int err = cl->api.ReleaseContext(cl->contexts[i]);
      if (err != CL_SUCCESS)
        tdm__log(rt, TDM_LOG_WARNING, "OpenCL: clReleaseContext: %s, error %d", CL_ERR(err));
    }
  free(cl->platform_of);
  free(cl->ids);
  free(cl->contexts);
  free(cl);
}

#endif
