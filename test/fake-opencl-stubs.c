/* The rest of the fake OpenCL loader (fake-opencl.c): entry points that
 * no test reaches on the made-up devices, but that a loader must have for
 * Tandem to use a device. Kept apart from <CL/cl.h>'s prototypes. */
#define UNUSED_ENTRY(name)                                                                 \
  int name(void);                                                                          \
  int name(void) {                                                                         \
    return -59; /* CL_INVALID_OPERATION */                                                 \
  }
UNUSED_ENTRY(clCreateProgramWithSource)
UNUSED_ENTRY(clBuildProgram)
UNUSED_ENTRY(clGetProgramBuildInfo)
UNUSED_ENTRY(clReleaseProgram)
UNUSED_ENTRY(clCreateKernel)
UNUSED_ENTRY(clReleaseKernel)
UNUSED_ENTRY(clSetKernelArg)
UNUSED_ENTRY(clGetKernelInfo)
UNUSED_ENTRY(clEnqueueNDRangeKernel)
UNUSED_ENTRY(clCreateBuffer)
UNUSED_ENTRY(clReleaseMemObject)
UNUSED_ENTRY(clEnqueueWriteBuffer)
UNUSED_ENTRY(clEnqueueReadBuffer)
UNUSED_ENTRY(clEnqueueMapBuffer)
UNUSED_ENTRY(clEnqueueUnmapMemObject)
UNUSED_ENTRY(clEnqueueMarkerWithWaitList)
UNUSED_ENTRY(clSetEventCallback)
UNUSED_ENTRY(clRetainEvent)
UNUSED_ENTRY(clReleaseEvent)
UNUSED_ENTRY(clWaitForEvents)
UNUSED_ENTRY(clGetEventInfo)
UNUSED_ENTRY(clFlush)
UNUSED_ENTRY(clCreateUserEvent)
UNUSED_ENTRY(clSetUserEventStatus)
UNUSED_ENTRY(clEnqueueWriteBufferRect)
UNUSED_ENTRY(clEnqueueReadBufferRect)
UNUSED_ENTRY(clCreateProgramWithBinary)
UNUSED_ENTRY(clGetProgramInfo)
UNUSED_ENTRY(clGetEventProfilingInfo)
