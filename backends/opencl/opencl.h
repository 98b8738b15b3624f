/*
 * The OpenCL backend as the runtime's table of backends and its tests see
 * it: the backend, and discovery (probe.c).
 */
#ifndef TDM_BACKEND_OPENCL_H
#define TDM_BACKEND_OPENCL_H

#include "../backend.h"

extern const tdm_backend tdm__opencl_backend;

/* The OpenCL backend's state (cl.h). */
typedef struct tdm_opencl tdm_opencl;

/* Opens the OpenCL loader (path NULL: "libOpenCL.so.1") and records every
 * platform and device in rt->platforms and rt->devices (after those
 * there), classified, deduplicated, with their locality in rt->topo;
 * creates no context. *state: the backend's (a tdm_opencl) once the
 * loader is open. Sets rt->opencl_report's summary. Returns TDM_OK,
 * TDM_ERR_NO_OPENCL (no loader, not a loader, no platform, no device:
 * logged, nothing recorded) or TDM_ERR_NO_MEMORY. */
tdm_status tdm__opencl_discover(tdm_runtime *rt, const char *path, void **state);

/* The OpenCL backend's discover: the above, then the choice and the
 * contexts of the devices used (backends/backend.h). */
tdm_status tdm__opencl_claim(tdm_runtime *rt, void **state, bool *last);

/* Creates and keeps an OpenCL context on device i (a selected one). On
 * failure the device is marked unused with the reason, logged, and
 * false is returned. */
bool tdm__opencl_activate(tdm_runtime *rt, unsigned i);

/* Releases the contexts and forgets the loader's entry points (the loader
 * itself stays loaded: unloading an ICD is not safe). */
void tdm__opencl_close(tdm_runtime *rt);

#endif
