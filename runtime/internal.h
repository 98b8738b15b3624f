/* Every internal declaration of the runtime and its backends, for tests
 * and tools that reach inside. The runtime's own files include only their
 * layer's header (docs/ARCHITECTURE.md), backends only backends/driver.h;
 * including both here lets the compiler check that the driver header's
 * declarations agree with the layers'. */
#ifndef TDM_INTERNAL_H
#define TDM_INTERNAL_H

#include "core/core.h"

#include "../backends/driver.h"
#include "../backends/opencl/opencl.h"
#include "../backends/sim/sim.h"

#endif
