/*
 * tandem/opencl.h - OpenCL variants of codelets. Include it (it includes
 * <CL/cl.h>) to give a codelet a variant that runs on OpenCL devices:
 *
 *   static const tdm_opencl_variant add_cl = {
 *       .source = "__kernel void add(__global float *x, ulong n, ...) {...}",
 *       .kernel = "add"};
 *   static const tdm_codelet add = {.name = "add", .cpu_fn = add_cpu,
 *       .nbuffers = 1, .modes = {TDM_RW}, .opencl = &add_cl};
 *
 * Kernel arguments, in this order:
 *   for each buffer of the task, in the codelet's order:
 *     a vector:  __global T *data, ulong count
 *     a matrix:  __global T *data, ulong rows, ulong cols, ulong ld
 *                (row-major; ld is the distance between rows, in elements,
 *                on the device: the matrix's own on a device sharing the
 *                host's memory, cols on one with memory of its own, where
 *                a tile is copied packed)
 *   then, when the task has by-value arguments (tdm_task_desc.args), one
 *   more argument holding them: a scalar or a struct of the same layout.
 * With flags = TDM_OPENCL_POINTERS, each buffer is its pointer alone
 * (then the by-value arguments, which carry whatever sizes the kernel
 * needs): a three-buffer kernel takes three pointers. A matrix is then
 * always given packed (ld = cols): a device with memory of its own
 * copies a tile packed, but one working in the host's memory cannot, so
 * a task with a tile does not go there (a warning says so): it runs on
 * another device or its CPU variant, and without either its submission
 * is refused (TDM_ERR_INVALID_ARG).
 *
 * The default work size is one work-item per element of the first
 * buffer; for a matrix, dimension 0 (get_global_id(0)) runs along a row,
 * over its columns, and dimension 1 over its rows:
 *
 *   __kernel void scale(__global float *m, ulong rows, ulong cols,
 *                       ulong ld, float a) {
 *     size_t c = get_global_id(0), r = get_global_id(1);
 *     m[r * ld + c] *= a;
 *   }
 *
 * A kernel whose parameters cannot take these arguments (their number, a
 * pointer where a value goes, a uint where Tandem passes a ulong), or
 * that the driver refuses to launch as set up (work-group size, ...), is
 * a programming error, not a failing device: its variant is disabled on
 * that device (TDM_ERR_KERNEL; tdm_config.kernel_event_fn), the log says
 * what it declares and what Tandem passes, the device keeps running
 * other codelets, and the task runs elsewhere or ends with
 * TDM_ERR_KERNEL. The count is checked before the first launch, and the
 * parameters' kinds and sizes where the driver reports them.
 *
 * Each program is built once per device, from the first time a task of
 * the codelet is submitted (or tdm_codelet_build asks for it), on a
 * thread of the runtime: the submitting thread never waits for the
 * compiler. A task placed on a device whose program is still building
 * waits for it there; if it does not build, the task goes to another
 * device or to its CPU variant, or, having neither, ends with
 * TDM_ERR_BUILD (a submission after the failure is known returns it at
 * once). Programs are kept for the runtime's life, and in the cache
 * (tdm_config.cache_dir) for the next.
 */
#ifndef TANDEM_OPENCL_H
#define TANDEM_OPENCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "tandem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdm_opencl_variant {
  /** 0, or sizeof(tdm_opencl_variant): see tdm_codelet in tandem.h. */
  size_t struct_size;
  /** OpenCL C source of the program, and the kernel to run. */
  const char *source;
  const char *kernel;
  /** Build options (clBuildProgram), or NULL. */
  const char *options;
  /* In work_size and enqueue, bufs[i] describes buffer i as the device
   * holds it: on a device with memory of its own a matrix is packed (ld is
   * its number of columns); ptr is the host's copy, not for device use. */
  /** Sets the work size: dims (1 to 3), global[0..dims-1] and, when local
   * is wanted, local[0..dims-1] (leave local[0] at 0 to let OpenCL
   * choose). NULL: one work-item per element of the first buffer (a
   * vector: 1 dimension of count; a matrix: 2 dimensions, {cols, rows}). */
  void (*work_size)(const tdm_buffer *bufs, const void *args, size_t args_size,
                    unsigned *dims, size_t global[3], size_t local[3]);
  /** The escape hatch: when set, source and kernel are ignored and this
   * function enqueues the task's work itself (its own kernels, a BLAS
   * library...) on `queue`, an in-order queue on which the task's input
   * transfers are already waited for; mems[i] holds buffer i on the
   * device. It returns CL_SUCCESS and in *done an event marking the end
   * of its last command (the runtime releases it), or an error code
   * (CL_INVALID_ARG_SIZE and the other programming errors disable the
   * variant on the device, as for a kernel; on a device working in host
   * memory, what it enqueued before failing is waited for and its writes
   * undone). It is called with the device's lock held: it must not wait,
   * and the calls of this runtime that would take that lock or wait
   * (submissions, pause, resume, tdm_codelet_build, the waits) return
   * TDM_ERR_IN_TASK there. The same holds for work_size. */
  cl_int (*enqueue)(cl_command_queue queue, const cl_mem *mems, const tdm_buffer *bufs,
                    const void *args, size_t args_size, cl_event *done);
  /** 0 (default) or TDM_OPENCL_POINTERS: see the kernel arguments above. */
  unsigned flags;
} tdm_opencl_variant;

/** tdm_opencl_variant.flags: each buffer is passed as its pointer alone. */
#define TDM_OPENCL_POINTERS 1u

/** The OpenCL objects behind device `device` (numbered as
 * tdm_runtime_device numbers devices), for a program's own OpenCL calls
 * beside the runtime's: its cl_device_id in *id, and in *context the
 * context the runtime runs its tasks in, or NULL where the runtime does
 * not use the device (either pointer may be NULL). Both stay the
 * runtime's: valid until tdm_runtime_destroy, not to be released. What
 * the program enqueues on its own queues is not ordered with the
 * runtime's tasks: it must not touch a registered handle's memory unless
 * the handle is acquired (tdm_handle_acquire). Any
 * thread. TDM_ERR_INVALID_ARG for a NULL runtime or a number out of
 * range (logged); TDM_ERR_NOT_SUPPORTED for an emulated device, or a
 * Tandem built without OpenCL. */
TDM_API tdm_status tdm_opencl_device(const tdm_runtime *rt, unsigned device, cl_device_id *id,
                                     cl_context *context);

#ifdef __cplusplus
}
#endif

#endif
