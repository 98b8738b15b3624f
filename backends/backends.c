/* The device backends, in the order the runtime asks them for devices
 * (backends/backend.h): OpenCL's (unless emulated devices are asked for
 * without "+opencl"), then emulated ones when tdm_config.sim asks. A
 * later backend (CUDA, Level Zero) is a folder of its own and a line
 * here. */
#include "driver.h"
#include "opencl/opencl.h"
#include "sim/sim.h"

const tdm_backend *const tdm__backends[] = {&tdm__opencl_backend, &tdm__sim_backend, NULL};
