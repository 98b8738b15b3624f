/* tandem-info's OpenCL queries: see info-opencl.h. */
#include "info-opencl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TDM_HAVE_OPENCL

bool info_cl_open(const char *loader, char *why, size_t n) {
  (void)loader;
  snprintf(why, n, "Tandem was built without the OpenCL headers");
  return false;
}

void info_cl_close(void) {}

bool info_cl_details(void *device, info_detail *d, char *why, size_t n) {
  (void)device;
  (void)d;
  snprintf(why, n, "Tandem was built without the OpenCL headers");
  return false;
}

bool info_cl_link(void *device, uint64_t max_alloc, info_link *l, char *why, size_t n) {
  (void)device;
  (void)max_alloc;
  (void)l;
  snprintf(why, n, "Tandem was built without the OpenCL headers");
  return false;
}

#else

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>
#include <dlfcn.h>
#include <time.h>

static void *lib;
static struct {
  cl_int (*GetDeviceInfo)(cl_device_id, cl_device_info, size_t, void *, size_t *);
  cl_context (*CreateContext)(const cl_context_properties *, cl_uint, const cl_device_id *,
                              void(CL_CALLBACK *)(const char *, const void *, size_t, void *),
                              void *, cl_int *);
  cl_int (*ReleaseContext)(cl_context);
  cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_command_queue_properties,
                                         cl_int *);
  cl_int (*ReleaseCommandQueue)(cl_command_queue);
  cl_mem (*CreateBuffer)(cl_context, cl_mem_flags, size_t, void *, cl_int *);
  cl_int (*ReleaseMemObject)(cl_mem);
  cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *,
                               cl_uint, const cl_event *, cl_event *);
  cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *,
                              cl_uint, const cl_event *, cl_event *);
} cl;

bool info_cl_open(const char *loader, char *why, size_t n) {
  if (lib)
    return true;
  lib = dlopen(loader && *loader ? loader : "libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(why, n, "cannot open the OpenCL loader: %s", e ? e : "unknown reason");
    return false;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"clGetDeviceInfo", (void **)&cl.GetDeviceInfo},
      {"clCreateContext", (void **)&cl.CreateContext},
      {"clReleaseContext", (void **)&cl.ReleaseContext},
      {"clCreateCommandQueue", (void **)&cl.CreateCommandQueue},
      {"clReleaseCommandQueue", (void **)&cl.ReleaseCommandQueue},
      {"clCreateBuffer", (void **)&cl.CreateBuffer},
      {"clReleaseMemObject", (void **)&cl.ReleaseMemObject},
      {"clEnqueueWriteBuffer", (void **)&cl.EnqueueWriteBuffer},
      {"clEnqueueReadBuffer", (void **)&cl.EnqueueReadBuffer},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
    if (!(*syms[i].slot = dlsym(lib, syms[i].name))) {
      snprintf(why, n, "the OpenCL loader has no %s", syms[i].name);
      dlclose(lib);
      lib = NULL;
      return false;
    }
  return true;
}

void info_cl_close(void) {
  if (lib)
    dlclose(lib);
  lib = NULL;
}

/* One fixed-size property; false (why) when the query fails. */
static bool query(cl_device_id dev, cl_device_info what, const char *name, void *out, size_t size,
                  char *why, size_t n) {
  memset(out, 0, size);
  cl_int err = cl.GetDeviceInfo(dev, what, size, out, NULL);
  if (err != CL_SUCCESS)
    snprintf(why, n, "clGetDeviceInfo(%s): error %d", name, (int)err);
  return err == CL_SUCCESS;
}

#define Q(dev, what, var) query(dev, what, #what, &(var), sizeof(var), why, n)

bool info_cl_details(void *device, info_detail *d, char *why, size_t n) {
  cl_device_id dev = device;
  memset(d, 0, sizeof *d);
  size_t len = 0;
  if (cl.GetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS ||
      !(d->extensions = calloc(1, len + 1)) ||
      cl.GetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, len, d->extensions, NULL) != CL_SUCCESS) {
    snprintf(why, n, "clGetDeviceInfo(CL_DEVICE_EXTENSIONS) failed");
    free(d->extensions);
    d->extensions = NULL;
    return false;
  }
  size_t wg = 0, items[3] = {0, 0, 0}, param = 0, timer = 0;
  cl_uint dims = 0, cargs = 0, align = 0, bits = 0, line = 0, vf = 0, vd = 0;
  cl_ulong cbuf = 0, cache = 0;
  cl_bool images = CL_FALSE;
  bool ok = Q(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, wg) &&
            Q(dev, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, dims) &&
            Q(dev, CL_DEVICE_MAX_PARAMETER_SIZE, param) &&
            Q(dev, CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE, cbuf) &&
            Q(dev, CL_DEVICE_MAX_CONSTANT_ARGS, cargs) &&
            Q(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, align) && Q(dev, CL_DEVICE_ADDRESS_BITS, bits) &&
            Q(dev, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, cache) &&
            Q(dev, CL_DEVICE_GLOBAL_MEM_CACHELINE_SIZE, line) &&
            Q(dev, CL_DEVICE_IMAGE_SUPPORT, images) &&
            Q(dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, vf) &&
            Q(dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE, vd) &&
            Q(dev, CL_DEVICE_PROFILING_TIMER_RESOLUTION, timer) &&
            Q(dev, CL_DEVICE_OPENCL_C_VERSION, d->opencl_c_version);
  /* the sizes of up to three dimensions (a device may have more) */
  size_t all[16] = {0};
  if (ok && dims <= 16)
    ok = Q(dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, all);
  memcpy(items, all, sizeof items);
  d->opencl_c_version[sizeof d->opencl_c_version - 1] = 0;
  d->max_work_group_size = wg;
  d->max_work_item_dims = dims;
  for (int i = 0; i < 3; i++)
    d->max_work_item_sizes[i] = items[i];
  d->max_parameter_bytes = param;
  d->max_constant_buffer_bytes = cbuf;
  d->max_constant_args = cargs;
  d->mem_base_addr_align_bits = align;
  d->address_bits = bits;
  d->global_mem_cache_bytes = cache;
  d->global_mem_cacheline_bytes = line;
  d->image_support = images == CL_TRUE;
  d->preferred_vector_float = vf;
  d->preferred_vector_double = vd;
  d->profiling_timer_resolution_ns = timer;
  return ok;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of `reps` blocking copies of `bytes` one way. */
static bool time_copies(cl_command_queue q, cl_mem m, void *host, size_t bytes, bool to_device,
                        unsigned reps, double *median) {
  double t[16];
  for (unsigned r = 0; r < reps; r++) {
    double t0 = now_s();
    cl_int err = to_device
                     ? cl.EnqueueWriteBuffer(q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL)
                     : cl.EnqueueReadBuffer(q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS)
      return false;
    t[r] = now_s() - t0;
  }
  qsort(t, reps, sizeof t[0], by_value);
  *median = t[reps / 2];
  return true;
}

bool info_cl_link(void *device, uint64_t max_alloc, info_link *l, char *why, size_t n) {
  cl_device_id dev = device;
  memset(l, 0, sizeof *l);
  cl_platform_id platform = NULL;
  if (!Q(dev, CL_DEVICE_PLATFORM, platform))
    return false;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
  cl_int err = CL_SUCCESS;
  cl_context ctx = cl.CreateContext(props, 1, &dev, NULL, NULL, &err);
  if (!ctx) {
    snprintf(why, n, "clCreateContext: error %d", (int)err);
    return false;
  }
  /* 64 B (the latency) to 64 MiB, within what the device allocates */
  const size_t sizes[INFO_LINK_SIZES] = {64, 4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  size_t largest = 0;
  for (unsigned i = 0; i < INFO_LINK_SIZES; i++)
    if (sizes[i] <= max_alloc)
      largest = sizes[i];
  cl_command_queue q = cl.CreateCommandQueue(ctx, dev, 0, &err);
  cl_mem m = q && largest ? cl.CreateBuffer(ctx, CL_MEM_READ_WRITE, largest, NULL, &err) : NULL;
  void *host = m ? aligned_alloc(4096, (largest + 4095) / 4096 * 4096) : NULL;
  bool ok = host != NULL;
  if (!ok)
    snprintf(why, n, "%s", !q ? "clCreateCommandQueue failed"
                           : !m ? "clCreateBuffer failed"
                                : "out of memory");
  else
    memset(host, 1, largest);
  for (unsigned i = 0; ok && i < INFO_LINK_SIZES && sizes[i] <= largest; i++) {
    info_link_sample *s = &l->samples[l->nsamples];
    unsigned reps = sizes[i] >= (16 << 20) ? 5 : 15;
    s->bytes = sizes[i];
    /* a first copy each way, untimed: the driver's first-touch work */
    double ignored;
    ok = time_copies(q, m, host, sizes[i], true, 1, &ignored) &&
         time_copies(q, m, host, sizes[i], true, reps, &s->to_device_s) &&
         time_copies(q, m, host, sizes[i], false, 1, &ignored) &&
         time_copies(q, m, host, sizes[i], false, reps, &s->to_host_s);
    if (!ok)
      snprintf(why, n, "a copy of %zu bytes failed", sizes[i]);
    else
      l->nsamples++;
  }
  if (ok && l->nsamples >= 2) {
    const info_link_sample *small = &l->samples[0], *big = &l->samples[l->nsamples - 1];
    l->latency_to_device_s = small->to_device_s;
    l->latency_to_host_s = small->to_host_s;
    double td = big->to_device_s - small->to_device_s, th = big->to_host_s - small->to_host_s;
    l->bandwidth_to_device = (double)big->bytes / (td > 0 ? td : big->to_device_s);
    l->bandwidth_to_host = (double)big->bytes / (th > 0 ? th : big->to_host_s);
  } else if (ok) {
    snprintf(why, n, "the device allocates too little to measure");
    ok = false;
  }
  free(host);
  if (m)
    cl.ReleaseMemObject(m);
  if (q)
    cl.ReleaseCommandQueue(q);
  cl.ReleaseContext(ctx);
  return ok;
}

#endif
