/*
 * The OpenCL backend's programs: built once per device and codelet
 * variant, from the binary cache when it holds them (cache.c), with the
 * build log on failure; and which devices may run a task (prepare).
 */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void log_build_failure(cl_device *g, const program *p, const char *name, cl_int err) {
  tdm_runtime *rt = g->rt;
  const cl_api *api = api_of(rt);
  size_t len = 0;
  char *log = NULL;
  if (p->program &&
      api->GetProgramBuildInfo(p->program, g->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &len) ==
          CL_SUCCESS &&
      len && (log = tdm__malloc(rt, len + 1)) &&
      api->GetProgramBuildInfo(p->program, g->id, CL_PROGRAM_BUILD_LOG, len, log, NULL) ==
          CL_SUCCESS)
    log[len] = 0;
  else if (log)
    log[0] = 0;
  tdm__log(rt, TDM_LOG_ERROR, "OpenCL: codelet %s: building kernel %s on device %u (%s) failed "
           "(error %d); build log:\n%s",
           name, p->variant->kernel ? p->variant->kernel : "(none)", g->device,
           rt->devices[g->device].name, (int)err, log && log[0] ? log : "(empty)");
  free(log);
}

/* What identifies a compiled program: its source and options, and the
 * device and driver it is compiled for (cache.c). */
static char *cache_key(const cl_device *g, const tdm_opencl_variant *v, size_t *len) {
  const tdm_device_record *d = &g->rt->devices[g->device];
  const char *parts[] = {"source", v->source,   "options", v->options ? v->options : "",
                         "device", d->name,     "vendor",  d->vendor,
                         "driver", d->driver_version, "opencl", d->version,
                         "platform", d->platform_name};
  size_t n = 0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    n += strlen(parts[i]) + 1;
  char *key = tdm__malloc(g->rt, n), *at = key;
  if (!key)
    return NULL;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    size_t l = strlen(parts[i]) + 1; /* the NULs separate the parts */
    memcpy(at, parts[i], l);
    at += l;
  }
  *len = n;
  return key;
}

/* Builds p from a cached binary; false (p untouched) when there is none
 * or the driver refuses it. */
static bool from_cache(cl_device *g, program *p, const char *key, size_t keylen) {
  const cl_api *api = api_of(g->rt);
  size_t size = 0;
  unsigned char *bin = tdm__cache_load(g->rt, key, keylen, &size);
  if (!bin)
    return false;
  const unsigned char *bins[1] = {bin};
  cl_int status = CL_SUCCESS, err = CL_SUCCESS;
  cl_program prog = api->CreateProgramWithBinary(g->ctx, 1, &g->id, &size, bins, &status, &err);
  free(bin);
  if (prog && err == CL_SUCCESS && status == CL_SUCCESS)
    err = api->BuildProgram(prog, 1, &g->id, p->variant->options, NULL, NULL);
  cl_kernel kernel = NULL;
  if (prog && err == CL_SUCCESS && status == CL_SUCCESS)
    kernel = api->CreateKernel(prog, p->variant->kernel, &err);
  if (!kernel) {
    tdm__log(g->rt, TDM_LOG_WARNING,
             "OpenCL cache: device %u refused a cached binary of kernel %s (error %d, %d); "
             "building it again",
             g->device, p->variant->kernel, (int)err, (int)status);
    if (prog)
      api->ReleaseProgram(prog);
    return false;
  }
  p->program = prog;
  p->kernel = kernel;
  return true;
}

/* Stores p's binary for g in the cache. */
static void to_cache(cl_device *g, program *p, const char *key, size_t keylen) {
  const cl_api *api = api_of(g->rt);
  size_t size = 0;
  if (api->GetProgramInfo(p->program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) !=
          CL_SUCCESS ||
      !size)
    return;
  unsigned char *bin = tdm__malloc(g->rt, size);
  unsigned char *bins[1] = {bin};
  if (bin &&
      api->GetProgramInfo(p->program, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS)
    tdm__cache_store(g->rt, key, keylen, bin, size);
  free(bin);
}

/* The program of `cl`'s variant on device g, built on first use. Called
 * with g->lock held. */
program *tdm__cl_program_of(cl_device *g, const tdm_codelet *cl) {
  const tdm_opencl_variant *v = cl->opencl;
  for (program *p = g->programs; p; p = p->next)
    if (p->variant == v)
      return p;
  program *p = tdm__calloc(g->rt, 1, sizeof *p);
  if (!p)
    return NULL;
  p->variant = v;
  p->next = g->programs;
  g->programs = p;
  if (v->enqueue) /* the escape hatch needs no program */
    return p;
  const cl_api *api = api_of(g->rt);
  const char *name = cl->name ? cl->name : "(unnamed)";
  cl_int err = CL_INVALID_VALUE;
  if (!v->source || !v->kernel) {
    log_build_failure(g, p, name, err);
    p->status = TDM_ERR_BUILD;
    return p;
  }
  size_t keylen = 0;
  char *key = cache_key(g, v, &keylen);
  if (key && from_cache(g, p, key, keylen)) {
    tdm__log(g->rt, TDM_LOG_INFO, "OpenCL: codelet %s: kernel %s for device %u from the cache",
             name, v->kernel, g->device);
    free(key);
    return p;
  }
  const char *src = v->source;
  p->program = api->CreateProgramWithSource(g->ctx, 1, &src, NULL, &err);
  if (p->program)
    err = api->BuildProgram(p->program, 1, &g->id, v->options, NULL, NULL);
  if (err == CL_SUCCESS)
    p->kernel = api->CreateKernel(p->program, v->kernel, &err);
  if (err == CL_SUCCESS && key)
    to_cache(g, p, key, keylen);
  free(key);
  if (err != CL_SUCCESS) {
    log_build_failure(g, p, name, err);
    p->status = TDM_ERR_BUILD;
  }
  return p;
}

/* Whether g can run t: its program builds there, and each of its buffers
 * fits in the device's memory (logged when `say`). */
static tdm_status can_run_locked(cl_device *g, const tdm_task *t, bool say) {
  tdm_runtime *rt = g->rt;
  program *p = tdm__cl_program_of(g, t->codelet);
  tdm_status st = p ? p->status : TDM_ERR_NO_MEMORY;
  uint64_t total = 0;
  tdm_handle *const *hs = tdm__task_handles(t);
  for (unsigned i = 0; i < t->nbuf && !st && !g->shared; i++) {
    size_t bytes = tdm__coh_bytes(hs[i]);
    total += bytes;
    if ((g->max_alloc && bytes > g->max_alloc) || bytes > g->limit || total > g->limit) {
      if (say)
        tdm__log(rt, TDM_LOG_WARNING,
               "OpenCL: codelet %s: buffer %u (%zu bytes) does not fit on device %u (at most "
               "%llu bytes per buffer, %llu in all)",
               t->codelet->name ? t->codelet->name : "(unnamed)", i, bytes, g->device,
               (unsigned long long)g->max_alloc, (unsigned long long)g->limit);
      st = TDM_ERR_TOO_LARGE;
    }
  }
  return st;
}

static tdm_status can_run(cl_device *g, const tdm_task *t, bool say) {
  TDM_PTHREAD(g->rt, pthread_mutex_lock(&g->lock));
  tdm_status st = can_run_locked(g, t, say);
  TDM_PTHREAD(g->rt, pthread_mutex_unlock(&g->lock));
  return st;
}

tdm_status tdm__cl_prepare(tdm_runtime *rt, tdm_task *t, const char *what) {
  const tdm_codelet *cl = t->codelet;
  const char *name = cl->name ? cl->name : "(unnamed)";
  t->device_ok = false;
  t->dev_mask = 0;
  if (!cl->opencl)
    return TDM_OK;
  size_t vs = cl->opencl->struct_size;
  if (vs && vs < sizeof *cl->opencl) {
    tdm__log(rt, TDM_LOG_ERROR, "%s: codelet %s: tdm_opencl_variant.struct_size %zu: 0 or at "
             "least %zu", what, name, vs, sizeof *cl->opencl);
    return TDM_ERR_INVALID_ARG;
  }
  tdm_status st = TDM_ERR_BUILD;
  for (unsigned k = 0; k < rt->ndevice_workers; k++) {
    tdm_status pst = can_run(gpus(rt)[k], t, true);
    if (!pst) {
      st = TDM_OK; /* at least one device can run it */
      t->dev_mask |= 1ull << k;
    } else if (pst != TDM_ERR_BUILD && st == TDM_ERR_BUILD) {
      st = pst;
    }
  }
  if (st == TDM_OK) {
    t->device_ok = true;
    return TDM_OK;
  }
  if (cl->cpu_fn) {
    tdm__log(rt, TDM_LOG_WARNING, "%s: codelet %s: its OpenCL variant cannot run; the task "
             "runs on the CPU", what, name);
    return TDM_OK;
  }
  return st;
}
