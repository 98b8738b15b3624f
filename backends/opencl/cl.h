/*
 * The OpenCL entry points Tandem uses, found with dlsym in the loader
 * (probe.c), and the runtime's OpenCL state. Internal.
 */
#ifndef TDM_BACKEND_CL_H
#define TDM_BACKEND_CL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include "../driver.h"
#include "opencl.h"

typedef cl_int (*get_device_info_fn)(cl_device_id, cl_device_info, size_t, void *, size_t *);
typedef void(CL_CALLBACK *event_callback_fn)(cl_event, cl_int, void *);

typedef struct cl_api {
  /* discovery: required of a loader */
  cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id *, cl_uint *);
  cl_int (*GetPlatformInfo)(cl_platform_id, cl_platform_info, size_t, void *, size_t *);
  cl_int (*GetDeviceIDs)(cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *);
  get_device_info_fn GetDeviceInfo;
  cl_context (*CreateContext)(const cl_context_properties *, cl_uint, const cl_device_id *,
                              void(CL_CALLBACK *)(const char *, const void *, size_t, void *),
                              void *, cl_int *);
  cl_int (*ReleaseContext)(cl_context);
  /* running tasks: a device is used only when the loader has them all */
  cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_command_queue_properties,
                                         cl_int *);
  cl_int (*ReleaseCommandQueue)(cl_command_queue);
  cl_program (*CreateProgramWithSource)(cl_context, cl_uint, const char **, const size_t *,
                                        cl_int *);
  cl_int (*BuildProgram)(cl_program, cl_uint, const cl_device_id *, const char *,
                         void(CL_CALLBACK *)(cl_program, void *), void *);
  cl_int (*GetProgramBuildInfo)(cl_program, cl_device_id, cl_program_build_info, size_t, void *,
                                size_t *);
  cl_int (*ReleaseProgram)(cl_program);
  cl_kernel (*CreateKernel)(cl_program, const char *, cl_int *);
  cl_int (*ReleaseKernel)(cl_kernel);
  cl_int (*SetKernelArg)(cl_kernel, cl_uint, size_t, const void *);
  cl_int (*GetKernelInfo)(cl_kernel, cl_kernel_info, size_t, void *, size_t *);
  /* OpenCL 1.2; NULL where the loader lacks it (the parameters' kinds are
   * then unknown, their count is not) */
  cl_int (*GetKernelArgInfo)(cl_kernel, cl_uint, cl_kernel_arg_info, size_t, void *, size_t *);
  cl_int (*EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t *,
                                 const size_t *, const size_t *, cl_uint, const cl_event *,
                                 cl_event *);
  cl_mem (*CreateBuffer)(cl_context, cl_mem_flags, size_t, void *, cl_int *);
  cl_int (*ReleaseMemObject)(cl_mem);
  cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *,
                               cl_uint, const cl_event *, cl_event *);
  cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint,
                              const cl_event *, cl_event *);
  void *(*EnqueueMapBuffer)(cl_command_queue, cl_mem, cl_bool, cl_map_flags, size_t, size_t,
                            cl_uint, const cl_event *, cl_event *, cl_int *);
  cl_int (*EnqueueUnmapMemObject)(cl_command_queue, cl_mem, void *, cl_uint, const cl_event *,
                                  cl_event *);
  cl_int (*EnqueueMarkerWithWaitList)(cl_command_queue, cl_uint, const cl_event *, cl_event *);
  cl_int (*SetEventCallback)(cl_event, cl_int, event_callback_fn, void *);
  cl_int (*RetainEvent)(cl_event);
  cl_int (*ReleaseEvent)(cl_event);
  cl_int (*WaitForEvents)(cl_uint, const cl_event *);
  cl_int (*GetEventInfo)(cl_event, cl_event_info, size_t, void *, size_t *);
  cl_event (*CreateUserEvent)(cl_context, cl_int *);
  cl_int (*SetUserEventStatus)(cl_event, cl_int);
  cl_int (*EnqueueWriteBufferRect)(cl_command_queue, cl_mem, cl_bool, const size_t *,
                                   const size_t *, const size_t *, size_t, size_t, size_t, size_t,
                                   const void *, cl_uint, const cl_event *, cl_event *);
  cl_int (*EnqueueReadBufferRect)(cl_command_queue, cl_mem, cl_bool, const size_t *,
                                  const size_t *, const size_t *, size_t, size_t, size_t, size_t,
                                  void *, cl_uint, const cl_event *, cl_event *);
  cl_int (*Flush)(cl_command_queue);
  cl_int (*Finish)(cl_command_queue);
  cl_program (*CreateProgramWithBinary)(cl_context, cl_uint, const cl_device_id *,
                                        const size_t *, const unsigned char **, cl_int *,
                                        cl_int *);
  cl_int (*GetProgramInfo)(cl_program, cl_program_info, size_t, void *, size_t *);
  cl_int (*GetEventProfilingInfo)(cl_event, cl_profiling_info, size_t, void *, size_t *);
  /* optional: devices of a platform share a context only with
   * RetainContext, and copy between each other only with
   * EnqueueCopyBuffer (NULL where the loader lacks them) */
  cl_int (*RetainContext)(cl_context);
  cl_int (*EnqueueCopyBuffer)(cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint,
                              const cl_event *, cl_event *);
  bool can_run; /* every entry point above was found */
  const char *missing; /* the first one that was not */
} cl_api;

/* The runtime's OpenCL state: entry points, and per device record its
 * platform, its id and, once activated, its context. */
struct tdm_opencl {
  cl_api api;
  /* Per device record below rec_end (the records discovery made): its
   * platform, id, and context once activated. */
  unsigned rec_end;
  cl_platform_id *platform_of;
  cl_device_id *ids;
  cl_context *contexts;
  /* Its device workers, first .. first + n - 1: dev[k - first]
   * (device.c, while devices run). */
  unsigned first, n;
  struct cl_device **dev;
  /* Tasks whose commands completed, pushed by their callbacks (a Treiber
   * stack through pool_next), ended by CPU workers (cl_progress), or by
   * the watcher when none came for them (all busy): since when the oldest
   * waits (ns). */
  _Atomic(tdm_task *) completions;
  _Atomic uint64_t completions_since;
  struct cl_watch *watch; /* watch.c, while devices run */
  struct cl_builder *builder; /* programs.c, while devices run */
  struct cl_toks *toks; /* tokens.c, while devices run */
};

/* probe.c: "CL_INVALID_ARG_SIZE" for -51; CL_ERR(e) gives a "%s, error
 * %d" format its two arguments. */
const char *tdm__cl_error_name(cl_int err);
#define CL_ERR(e) tdm__cl_error_name(e), (int)(e)

/* The backend's state in rt, or NULL. */
static inline tdm_opencl *cl_of(const tdm_runtime *rt) {
  return tdm__state_of(rt, &tdm__opencl_backend);
}

/* cache.c: program binaries on disk */
#define TDM_CACHE_MAX_ENTRY (1 << 30) /* bytes: a larger file is not an entry */
/* The binary inside an entry read whole (n bytes), at d + *at, *len
 * bytes, for `key`; NULL, or what is wrong with the entry. */
const char *tdm__cache_parse(const unsigned char *d, size_t n, const char *key, size_t keylen,
                             size_t *at, size_t *len);
/* The cached binary for `key` (malloc'd, *size bytes), or NULL. */
void *tdm__cache_load(tdm_runtime *rt, const char *key, size_t keylen, size_t *size);
void tdm__cache_store(tdm_runtime *rt, const char *key, size_t keylen, const void *bin,
                      size_t size);

#endif
