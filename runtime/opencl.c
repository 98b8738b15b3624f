/*
 * OpenCL discovery through the ICD loader, opened at run time.
 *
 * Tandem never links libOpenCL: it dlopen()s it and looks up the handful
 * of entry points discovery needs, so that a program built with Tandem
 * starts on a machine without the loader, without any ICD, or with a
 * broken one, and runs on its CPU cores. Every failure is logged with the
 * reason. The loader stays loaded for the rest of the process once it was
 * opened: unloading an ICD (PoCL and its LLVM among them) is not safe.
 */
#include "devices.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#ifndef TDM_HAVE_OPENCL

tdm_status tdm__discover_opencl(const tdm_runtime *rt, const char *path,
                                tdm_device_record **out, unsigned *n) {
  (void)path;
  *out = NULL;
  *n = 0;
  tdm__log(rt, TDM_LOG_INFO, "OpenCL: Tandem was built without the OpenCL headers");
  return TDM_ERR_NO_OPENCL;
}

#else

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <dlfcn.h>

typedef struct {
  cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id *, cl_uint *);
  cl_int (*GetPlatformInfo)(cl_platform_id, cl_platform_info, size_t, void *, size_t *);
  cl_int (*GetDeviceIDs)(cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *);
  cl_int (*GetDeviceInfo)(cl_device_id, cl_device_info, size_t, void *, size_t *);
  cl_context (*CreateContext)(const cl_context_properties *, cl_uint, const cl_device_id *,
                              void(CL_CALLBACK *)(const char *, const void *, size_t, void *),
                              void *, cl_int *);
  cl_int (*ReleaseContext)(cl_context);
} cl_api;

static tdm_status load_api(const tdm_runtime *rt, const char *path, cl_api *api) {
  if (!path)
    path = getenv("TANDEM_OPENCL_LIBRARY");
  if (!path || !*path)
    path = "libOpenCL.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    tdm__log(rt, TDM_LOG_INFO, "OpenCL: cannot load %s (%s); running on the CPU cores only",
             path, why ? why : "unknown reason");
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
      tdm__log(rt, TDM_LOG_WARNING,
               "OpenCL: %s has no %s: not an OpenCL loader; running on the CPU cores only",
               path, syms[i].name);
      dlclose(lib); /* nothing was initialised through it */
      return TDM_ERR_NO_OPENCL;
    }
  }
  return TDM_OK;
}

static void info_str(const cl_api *api, cl_device_id dev, cl_device_info param, char *buf,
                     size_t size) {
  buf[0] = 0;
  if (api->GetDeviceInfo(dev, param, size, buf, NULL) != CL_SUCCESS)
    buf[0] = 0;
  buf[size - 1] = 0;
}

/* Reads a scalar of `size` bytes into *out; leaves it alone on error. */
static bool info_val(const cl_api *api, cl_device_id dev, cl_device_info param, void *out,
                     size_t size) {
  return api->GetDeviceInfo(dev, param, size, out, NULL) == CL_SUCCESS;
}

static bool has_extension(const cl_api *api, cl_device_id dev, const char *ext) {
  size_t len = 0;
  if (api->GetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || !len)
    return false;
  char *all = malloc(len + 1);
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

static void fill_record(const tdm_runtime *rt, const cl_api *api, cl_platform_id plat,
                        cl_device_id dev, tdm_device_record *d) {
  cl_device_type type = 0;
  cl_uint cu = 0, clock = 0;
  cl_ulong gmem = 0, maxalloc = 0, lmem = 0;
  cl_device_fp_config fp64 = 0;
  cl_bool unified = CL_FALSE;
  cl_device_svm_capabilities svm = 0;
  info_str(api, dev, CL_DEVICE_NAME, d->name, sizeof d->name);
  info_str(api, dev, CL_DEVICE_VENDOR, d->vendor, sizeof d->vendor);
  info_str(api, dev, CL_DRIVER_VERSION, d->driver_version, sizeof d->driver_version);
  info_str(api, dev, CL_DEVICE_VERSION, d->version, sizeof d->version);
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
  if (has_extension(api, dev, "cl_khr_pci_bus_info")) {
    cl_device_pci_bus_info_khr pci;
    if (info_val(api, dev, CL_DEVICE_PCI_BUS_INFO_KHR, &pci, sizeof pci)) {
      d->has_pci = true;
      d->pci_domain = pci.pci_domain;
      d->pci_bus = pci.pci_bus;
      d->pci_device = pci.pci_device;
      d->pci_function = pci.pci_function;
    }
  }
  if (has_extension(api, dev, "cl_khr_device_uuid"))
    d->has_uuid = info_val(api, dev, CL_DEVICE_UUID_KHR, d->uuid, sizeof d->uuid);
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
  cl_int err = CL_SUCCESS;
  cl_context ctx = api->CreateContext(props, 1, &dev, NULL, NULL, &err);
  d->context_ok = ctx && err == CL_SUCCESS;
  if (ctx)
    api->ReleaseContext(ctx);
  if (!d->context_ok)
    tdm__log(rt, TDM_LOG_WARNING, "OpenCL: no context on %s (error %d): device skipped",
             d->name, (int)err);
}

tdm_status tdm__discover_opencl(const tdm_runtime *rt, const char *path,
                                tdm_device_record **out, unsigned *n) {
  *out = NULL;
  *n = 0;
  cl_api api;
  tdm_status st = load_api(rt, path, &api);
  if (st)
    return st;
  cl_uint nplat = 0;
  cl_int err = api.GetPlatformIDs(0, NULL, &nplat);
  if (err != CL_SUCCESS || nplat == 0) {
    /* -1001 is CL_PLATFORM_NOT_FOUND_KHR: the loader found no ICD */
    tdm__log(rt, TDM_LOG_INFO,
             "OpenCL: no platform (clGetPlatformIDs: error %d, %u platforms); "
             "running on the CPU cores only",
             (int)err, (unsigned)nplat);
    return TDM_ERR_NO_OPENCL;
  }
  cl_platform_id *plats = calloc(nplat, sizeof *plats);
  if (!plats)
    return TDM_ERR_NO_MEMORY;
  err = api.GetPlatformIDs(nplat, plats, NULL);
  if (err != CL_SUCCESS) {
    free(plats);
    tdm__log(rt, TDM_LOG_WARNING, "OpenCL: clGetPlatformIDs failed: error %d", (int)err);
    return TDM_ERR_NO_OPENCL;
  }
  tdm_device_record *recs = NULL;
  unsigned count = 0;
  for (cl_uint p = 0; p < nplat; p++) {
    char pname[128] = "";
    if (api.GetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL) != CL_SUCCESS)
      pname[0] = 0;
    pname[sizeof pname - 1] = 0;
    cl_uint ndev = 0;
    err = api.GetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev);
    if (err != CL_SUCCESS || ndev == 0) {
      tdm__log(rt, TDM_LOG_INFO, "OpenCL: platform %s has no device (error %d)", pname,
               (int)err);
      continue;
    }
    cl_device_id *devs = calloc(ndev, sizeof *devs);
    tdm_device_record *grown = devs ? realloc(recs, (count + ndev) * sizeof *recs) : NULL;
    if (!grown) {
      free(devs);
      free(recs);
      free(plats);
      return TDM_ERR_NO_MEMORY;
    }
    recs = grown;
    if (api.GetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, devs, NULL) != CL_SUCCESS) {
      free(devs);
      continue;
    }
    for (cl_uint i = 0; i < ndev; i++) {
      tdm_device_record *d = &recs[count++];
      memset(d, 0, sizeof *d);
      d->platform = p;
      d->index = i;
      memcpy(d->platform_name, pname, sizeof pname);
      fill_record(rt, &api, plats[p], devs[i], d);
      tdm__classify_device(d);
    }
    free(devs);
  }
  free(plats);
  tdm__dedupe_devices(recs, count);
  for (unsigned i = 0; i < count; i++) {
    tdm__log(rt, TDM_LOG_INFO, "OpenCL: device %u: %s (%s) on %s: %s, %s%s", i, recs[i].name,
             recs[i].vendor, recs[i].platform_name, tdm__device_class_name(recs[i].cls),
             recs[i].reason, recs[i].duplicate_of >= 0 ? " (duplicate)" : "");
  }
  if (!count) {
    free(recs);
    tdm__log(rt, TDM_LOG_INFO, "OpenCL: no device on any platform; running on the CPU cores only");
    return TDM_ERR_NO_OPENCL;
  }
  *out = recs;
  *n = count;
  return TDM_OK;
}

#endif
