/* The device backends, in the order the runtime asks them for devices
 * (backends/backend.h): emulated devices when they are asked for, else
 * OpenCL's. */
#include "driver.h"
#include "opencl/opencl.h"
#include "sim/sim.h"

const tdm_backend *const tdm__backends[] = {&tdm__sim_backend, &tdm__opencl_backend, NULL};
