/*
 * The OpenCL backend's programs: built once per device and codelet
 * variant, on a thread of their own, from the binary cache when it holds
 * them (cache.c), with the build log on failure; and which devices may
 * run a task (prepare).
 */
#include "device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A program property as a string (malloc'd), or NULL. */
static char *program_string(tdm_runtime *rt, cl_program prog, cl_device_id dev, bool build_info,
                            cl_uint param) {
  const cl_api *api = api_of(rt);
  size_t len = 0;
  char *s = NULL;
  cl_int err = build_info ? api->GetProgramBuildInfo(prog, dev, param, 0, NULL, &len)
                          : api->GetProgramInfo(prog, param, 0, NULL, &len);
  if (err != CL_SUCCESS || !len || !(s = tdm__malloc(rt, len + 1)))
    return NULL;
  err = build_info ? api->GetProgramBuildInfo(prog, dev, param, len, s, NULL)
                   : api->GetProgramInfo(prog, param, len, s, NULL);
  if (err != CL_SUCCESS) {
    free(s);
    return NULL;
  }
  s[len] = 0;
  return s;
}

/* Logs why p did not build on g: the error's name, then the build log,
 * or where the program built but has no kernel of the variant's name, the
 * kernels it does define. */
static void log_build_failure(cl_device *g, const program *p, const char *name, cl_int err) {
  tdm_runtime *rt = g->rt;
  const char *kernel = p->variant->kernel ? p->variant->kernel : "(none)";
  char *log = NULL, *kernels = NULL;
  if (p->program && err == CL_INVALID_KERNEL_NAME)
    kernels = program_string(rt, p->program, g->id, false, CL_PROGRAM_KERNEL_NAMES);
  else if (p->program)
    log = program_string(rt, p->program, g->id, true, CL_PROGRAM_BUILD_LOG);
  if (kernels) /* ";"-separated */
    for (char *c = strchr(kernels, ';'); c; c = strchr(c, ';'))
      *c = ',';
  /* what follows the error: the kernels defined, why the variant cannot
   * build, or the build log (a blank one says nothing) */
  const char *what = "", *detail = "", *more = "", *rest = "";
  if (kernels) {
    what = ": the program defines no kernel ";
    detail = kernel;
    more = "; it defines ";
    rest = kernels[0] ? kernels : "none";
  } else if (err == CL_INVALID_VALUE && (!p->variant->source || !p->variant->kernel)) {
    what = ": ";
    detail = !p->variant->source ? "the variant has no source" : "the variant names no kernel";
  } else if (log && log[strspn(log, " \n\r\t")]) {
    what = "; build log:\n";
    detail = log;
  }
  tdm__log(rt, TDM_LOG_ERROR, "OpenCL: codelet %s: building kernel %s on device %u (%s) failed "
           "(%s, error %d)%s%s%s%s",
           name, kernel, g->device, rt->devices[g->device].name, CL_ERR(err), what, detail, more,
           rest);
  free(log);
  free(kernels);
}

/* The bytes of a value of OpenCL C built-in scalar or vector type `type`
 * ("uint", "float4"), 0 for another (a struct, a typedef). */
static unsigned type_size(const char *type) {
  static const struct {
    const char *name;
    unsigned size;
  } scalars[] = {{"char", 1},  {"uchar", 1}, {"short", 2}, {"ushort", 2},
                 {"half", 2},  {"int", 4},   {"uint", 4},  {"float", 4},
                 {"long", 8},  {"ulong", 8}, {"double", 8}};
  for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
    size_t n = strlen(scalars[i].name);
    if (strncmp(type, scalars[i].name, n))
      continue;
    const char *rest = type + n;
    if (!*rest)
      return scalars[i].size;
    unsigned lanes = (unsigned)atoi(rest); /* a vector: 3 lanes take 4's room */
    if (!strcmp(rest, "2") || !strcmp(rest, "3") || !strcmp(rest, "4") || !strcmp(rest, "8") ||
        !strcmp(rest, "16"))
      return scalars[i].size * (lanes == 3 ? 4 : lanes);
  }
  return 0;
}

/* A string the driver gives of parameter i of kernel k, into buf. */
static bool param_string(const cl_api *api, cl_kernel k, cl_uint i, cl_kernel_arg_info what,
                         char *buf, size_t size) {
  buf[0] = 0;
  size_t len = 0;
  if (api->GetKernelArgInfo(k, i, what, 0, NULL, &len) != CL_SUCCESS || !len || len > size)
    return false;
  return api->GetKernelArgInfo(k, i, what, len, buf, NULL) == CL_SUCCESS;
}

/* p's kernel's parameters, as the driver reports them: their count
 * always, their kinds, types and names where it keeps argument info
 * (OpenCL 1.2; a program from a binary may not). No lock held. */
static void describe_kernel(cl_device *g, program *p) {
  tdm_runtime *rt = g->rt;
  const cl_api *api = api_of(rt);
  cl_uint n = 0;
  if (api->GetKernelInfo(p->kernel, CL_KERNEL_NUM_ARGS, sizeof n, &n, NULL) != CL_SUCCESS)
    return; /* nothing known: nothing checked (params NULL) */
  p->nparams = n;
  p->params = n ? tdm__calloc(rt, n, sizeof *p->params) : NULL;
  size_t cap = 64 + 96 * (size_t)n, at = 0;
  char *text = p->params && api->GetKernelArgInfo ? tdm__malloc(rt, cap) : NULL;
  bool known = text != NULL;
  for (cl_uint i = 0; i < n && known; i++) {
    cl_kernel_arg_address_qualifier q = 0;
    char type[128], name[64];
    known = api->GetKernelArgInfo(p->kernel, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof q, &q,
                                  NULL) == CL_SUCCESS &&
            param_string(api, p->kernel, i, CL_KERNEL_ARG_TYPE_NAME, type, sizeof type);
    if (!known)
      break;
    if (!param_string(api, p->kernel, i, CL_KERNEL_ARG_NAME, name, sizeof name))
      snprintf(name, sizeof name, "p%u", (unsigned)i);
    param *pa = &p->params[i];
    snprintf(pa->type, sizeof pa->type, "%.23s", type); /* cut: for messages */
    const char *qual = "";
    size_t len = strlen(type);
    bool pointer = len && type[len - 1] == '*';
    if (pointer) /* its elements' type */
      type[len - 1] = 0;
    if (q == CL_KERNEL_ARG_ADDRESS_GLOBAL || q == CL_KERNEL_ARG_ADDRESS_CONSTANT) {
      /* a __global image or pipe is no pointer */
      pa->kind = pointer ? PARAM_POINTER : PARAM_OTHER;
      pa->pointee = (uint8_t)type_size(type);
      qual = q == CL_KERNEL_ARG_ADDRESS_GLOBAL ? "__global " : "__constant ";
    } else if (q == CL_KERNEL_ARG_ADDRESS_LOCAL) {
      pa->kind = PARAM_LOCAL;
      qual = "__local ";
    } else {
      static const char *const opaque[] = {"sampler_t", "image", "pipe", "queue_t",
                                           "clk_event_t", "event_t", "reserve_id_t"};
      pa->kind = PARAM_VALUE;
      for (size_t o = 0; o < sizeof opaque / sizeof opaque[0]; o++)
        if (!strncmp(type, opaque[o], strlen(opaque[o])))
          pa->kind = PARAM_OTHER;
      pa->size = (uint8_t)type_size(type);
      pa->integer = !strcmp(type, "char") || !strcmp(type, "uchar") || !strcmp(type, "short") ||
                    !strcmp(type, "ushort") || !strcmp(type, "int") || !strcmp(type, "uint") ||
                    !strcmp(type, "long") || !strcmp(type, "ulong");
    }
    if (pointer)
      type[len - 1] = '*';
    int w = snprintf(text + at, cap - at, "%s%s%s %s", i ? ", " : "", qual, type, name);
    at += w > 0 && (size_t)w < cap - at ? (size_t)w : 0;
  }
  if (!known) { /* the count alone */
    free(text);
    for (cl_uint i = 0; i < n && p->params; i++)
      p->params[i] = (param){.kind = PARAM_UNKNOWN};
    return;
  }
  p->declared = text;
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

/* Builds p from a cached binary: true when the cache decided (p built,
 * or its program built but without the variant's kernel: *err then says
 * CL_INVALID_KERNEL_NAME, a misspelt name and not a bad binary); false
 * (p untouched) when there is none or the driver refuses it. */
static bool from_cache(cl_device *g, program *p, const char *key, size_t keylen, cl_int *kerr) {
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
  if (!kernel && err == CL_INVALID_KERNEL_NAME) { /* the binary is fine; the name is not */
    p->program = prog;
    *kerr = err;
    return true;
  }
  if (!kernel) {
    tdm__log(g->rt, TDM_LOG_WARNING,
             "OpenCL cache: device %u refused a cached binary of kernel %s (%s, error %d; %s, error %d); "
             "building it again",
             g->device, p->variant->kernel, CL_ERR(err), CL_ERR(status));
    if (prog)
      api->ReleaseProgram(prog);
    return false;
  }
  p->program = prog;
  p->kernel = kernel;
  *kerr = CL_SUCCESS;
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

/* ---- the builder ------------------------------------------------------------ */

/* Programs are built on a thread of their own, so that the thread that
 * submits a task never waits for a compiler (0.8 to 1.5 s for a small
 * program with PoCL and a cold cache): a task placed on a device whose
 * program is still building waits for it there (device.c), and one the
 * device turns out unable to run goes elsewhere. */
typedef struct job {
  cl_device *g;
  program *p;
  struct job *next;
} job;

/* A tdm_codelet_build waiting for its programs. */
typedef struct build_wait {
  tdm_build_fn fn;
  void *data;
  unsigned n;
  program *p[TDM_MAX_DEVICE_WORKERS];
  struct build_wait *next;
} build_wait;

struct cl_builder {
  pthread_mutex_t lock; /* guards all below */
  pthread_cond_t cond;
  pthread_t thread;
  bool started, stop;
  job *head, *tail;
  build_wait *waits;
};

static cl_int build_from_source(cl_device *g, program *p, const char *key, size_t keylen) {
  const cl_api *api = api_of(g->rt);
  const tdm_opencl_variant *v = p->variant;
  cl_int err = CL_INVALID_VALUE;
  const char *src = v->source;
  p->program = api->CreateProgramWithSource(g->ctx, 1, &src, NULL, &err);
  if (p->program)
    err = api->BuildProgram(p->program, 1, &g->id, v->options, NULL, NULL);
  if (err == CL_SUCCESS)
    p->kernel = api->CreateKernel(p->program, v->kernel, &err);
  if (err == CL_SUCCESS && key)
    to_cache(g, p, key, keylen);
  return err;
}

/* Builds p for g (from the cache when it holds it); sets p's program,
 * kernel and status. No lock held. */
static void build(cl_device *g, program *p) {
  const tdm_opencl_variant *v = p->variant;
  if (!v->source || !v->kernel) {
    log_build_failure(g, p, p->name, CL_INVALID_VALUE);
    p->status = TDM_ERR_BUILD;
    return;
  }
  size_t keylen = 0;
  char *key = cache_key(g, v, &keylen);
  cl_int err = CL_SUCCESS;
  if (key && from_cache(g, p, key, keylen, &err)) {
    if (err == CL_SUCCESS)
      tdm__log(g->rt, TDM_LOG_INFO, "OpenCL: codelet %s: kernel %s for device %u from the cache",
               p->name, v->kernel, g->device);
  } else {
    err = build_from_source(g, p, key, keylen);
  }
  free(key);
  if (err != CL_SUCCESS) {
    log_build_failure(g, p, p->name, err);
    p->status = TDM_ERR_BUILD;
    return;
  }
  describe_kernel(g, p);
}

/* Under the builder's lock: the waits whose programs are all built,
 * taken off the list (into *fire). */
static void ready_waits(struct cl_builder *b, build_wait **fire) {
  for (build_wait **link = &b->waits; *link;) {
    build_wait *w = *link;
    unsigned i = 0;
    while (i < w->n && atomic_load(&w->p[i]->built))
      i++;
    if (i < w->n) {
      link = &w->next;
      continue;
    }
    *link = w->next;
    w->next = *fire;
    *fire = w;
  }
}

static void fire_waits(tdm_runtime *rt, build_wait *w) {
  while (w) {
    build_wait *next = w->next;
    tdm_status st = w->n ? TDM_ERR_BUILD : TDM_OK;
    for (unsigned i = 0; i < w->n; i++)
      if (!w->p[i]->status)
        st = TDM_OK; /* one device can run it */
    if (w->fn)
      TDM_EVENT_CODE(rt, w->fn(w->data, st));
    free(w);
    w = next;
  }
}

/* p is built (or failed): published under g's lock, the tasks waiting
 * for it go on (or elsewhere), build waiters are told. */
static void built(cl_device *g, program *p) {
  tdm_runtime *rt = g->rt;
  tdm_task *away = NULL, *back = NULL, **back_end = &back;
  TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
  p->building = false;
  /* the tasks of this program waiting here, in their order */
  tdm_taskq keep = {0};
  for (tdm_task *t; (t = tdm__taskq_pop(&g->unbuilt));) {
    if (t->codelet->opencl != p->variant) {
      tdm__taskq_put(&keep, t);
    } else if (p->status) {
      t->pool_next = away;
      away = t;
    } else {
      *back_end = t;
      back_end = &t->pool_next;
    }
  }
  *back_end = NULL;
  g->unbuilt = keep;
  /* out of placement meanwhile: placed again, elsewhere (tdm__place) */
  bool out = atomic_load(&rt->quarantined) & (UINT64_C(1) << g->k);
  for (tdm_task *t = back, *next; t && !out; t = next) {
    next = t->pool_next;
    tdm__taskq_put(&g->q, t);
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
  atomic_store(&p->built, true);
  for (tdm_task *t = out ? back : NULL, *next; t; t = next) {
    next = t->pool_next;
    tdm__place(rt, t);
  }
  for (tdm_task *t = away, *next; t; t = next) {
    next = t->pool_next;
    tdm__cl_unbuildable(g, t);
  }
  tdm__opencl_backend.kick(rt, g->k); /* launches what waited */
  struct cl_builder *b = cl_of(rt)->builder;
  build_wait *fire = NULL;
  TDM_PTHREAD(rt, pthread_mutex_lock(&b->lock));
  ready_waits(b, &fire);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&b->lock));
  fire_waits(rt, fire);
}

static void *builder_main(void *arg) {
  tdm_runtime *rt = arg;
  struct cl_builder *b = cl_of(rt)->builder;
  tdm__name_thread(rt, "tandem-clbuild");
  TDM_PTHREAD(rt, pthread_mutex_lock(&b->lock));
  for (;;) {
    job *j = b->head;
    if (!j) {
      if (b->stop)
        break;
      TDM_PTHREAD(rt, pthread_cond_wait(&b->cond, &b->lock));
      continue;
    }
    b->head = j->next;
    if (!b->head)
      b->tail = NULL;
    bool stopping = b->stop;
    TDM_PTHREAD(rt, pthread_mutex_unlock(&b->lock));
    if (stopping) /* the runtime goes: what has not begun is not built */
      j->p->status = TDM_ERR_BUILD;
    else
      build(j->g, j->p);
    built(j->g, j->p);
    free(j);
    TDM_PTHREAD(rt, pthread_mutex_lock(&b->lock));
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&b->lock));
  return NULL;
}

tdm_status tdm__cl_builder_init(tdm_runtime *rt) {
  struct cl_builder *b = tdm__calloc(rt, 1, sizeof *b);
  if (!b)
    return TDM_ERR_NO_MEMORY;
  int err = pthread_mutex_init(&b->lock, NULL);
  if (!err && (err = pthread_cond_init(&b->cond, NULL)))
    pthread_mutex_destroy(&b->lock);
  if (err) {
    free(b);
    tdm__log(rt, TDM_LOG_ERROR, "OpenCL: the program builder: %s", strerror(err));
    return TDM_ERR_SYSTEM;
  }
  cl_of(rt)->builder = b;
  /* started now, not on the first submission's way */
  err = pthread_create(&b->thread, NULL, builder_main, rt);
  if (err)
    tdm__log(rt, TDM_LOG_WARNING, "OpenCL: the program builder could not start (%s): "
             "programs are built on the thread that submits", strerror(err));
  b->started = !err;
  return TDM_OK;
}

void tdm__cl_builder_stop(tdm_runtime *rt) {
  struct cl_builder *b = cl_of(rt) ? cl_of(rt)->builder : NULL;
  if (!b)
    return;
  TDM_PTHREAD(rt, pthread_mutex_lock(&b->lock));
  b->stop = true;
  bool started = b->started;
  TDM_PTHREAD(rt, pthread_cond_signal(&b->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&b->lock));
  if (started) {
    int err = pthread_join(b->thread, NULL);
    if (err)
      tdm__log(rt, TDM_LOG_ERROR, "pthread_join(OpenCL builder): %s", strerror(err));
  }
  /* Nothing is left: the thread empties its queue before it ends (what
   * had not begun then fails), and without it queue_build builds on the
   * caller's thread; a wait is told once its programs are built. */
  pthread_cond_destroy(&b->cond);
  pthread_mutex_destroy(&b->lock);
  free(b);
  cl_of(rt)->builder = NULL;
}

/* Queues p's build for g (g->lock held; the builder's lock nests in it). */
static void queue_build(cl_device *g, program *p) {
  tdm_runtime *rt = g->rt;
  struct cl_builder *b = cl_of(rt)->builder;
  job *j = tdm__calloc(rt, 1, sizeof *j);
  p->building = true;
  TDM_PTHREAD(rt, pthread_mutex_lock(&b->lock));
  if (!j || !b->started || b->stop) { /* built here, as before the builder existed */
    TDM_PTHREAD(rt, pthread_mutex_unlock(&b->lock));
    free(j);
    build(g, p);
    p->building = false;
    atomic_store(&p->built, true);
    return;
  }
  j->g = g;
  j->p = p;
  if (b->tail)
    b->tail->next = j;
  else
    b->head = j;
  b->tail = j;
  TDM_PTHREAD(rt, pthread_cond_signal(&b->cond));
  TDM_PTHREAD(rt, pthread_mutex_unlock(&b->lock));
}

program *tdm__cl_program_of(cl_device *g, const tdm_codelet *cl) {
  const tdm_opencl_variant *v = cl->opencl;
  for (program *p = g->programs; p; p = p->next)
    if (p->variant == v)
      return p;
  program *p = tdm__calloc(g->rt, 1, sizeof *p);
  if (!p)
    return NULL;
  p->variant = v;
  snprintf(p->name, sizeof p->name, "%s", tdm__name_or(cl->name));
  p->next = g->programs;
  g->programs = p;
  if (v->enqueue) { /* the escape hatch needs no program */
    atomic_store(&p->built, true);
    return p;
  }
  queue_build(g, p);
  return p;
}

void tdm__cl_build(tdm_runtime *rt, const tdm_codelet *cl, tdm_build_fn done, void *data) {
  struct cl_builder *b = cl_of(rt) ? cl_of(rt)->builder : NULL;
  build_wait *w = tdm__calloc(rt, 1, sizeof *w);
  if (!w) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_codelet_build: out of memory: its programs are built "
             "when its first task is submitted");
    if (done)
      TDM_EVENT_CODE(rt, done(data, TDM_ERR_NO_MEMORY));
    return;
  }
  w->fn = done;
  w->data = data;
  const tdm_opencl *o = cl_of(rt);
  for (unsigned k = o->first; cl->opencl && b && k < o->first + o->n; k++) {
    cl_device *g = dev_of(rt, k);
    TDM_PTHREAD(rt, pthread_mutex_lock(&g->lock));
    program *p = tdm__cl_program_of(g, cl);
    TDM_PTHREAD(rt, pthread_mutex_unlock(&g->lock));
    if (p)
      w->p[w->n++] = p;
  }
  build_wait *fire = w; /* no device: nothing to build */
  if (b) {
    fire = NULL;
    TDM_PTHREAD(rt, pthread_mutex_lock(&b->lock));
    w->next = b->waits;
    b->waits = w;
    ready_waits(b, &fire); /* built already (or nothing to build) */
    TDM_PTHREAD(rt, pthread_mutex_unlock(&b->lock));
  }
  fire_waits(rt, fire);
}

/* Whether g can run t: its program builds there, and each of its buffers
 * fits in the device's memory (logged when `say`). */
static tdm_status can_run_locked(cl_device *g, const tdm_task *t, bool say) {
  tdm_runtime *rt = g->rt;
  program *p = tdm__cl_program_of(g, t->codelet);
  /* building: it may run here (if not, it goes elsewhere then) */
  tdm_status st = !p ? TDM_ERR_NO_MEMORY : p->building ? TDM_OK : p->status;
  uint64_t total = 0;
  tdm_handle *const *hs = tdm__task_handles(t);
  bool pointers = tdm__cl_flags(t->codelet->opencl) & TDM_OPENCL_POINTERS;
  for (unsigned i = 0; i < t->nbuf && !st && g->shared && pointers; i++) {
    const tdm_buffer *b = &hs[i]->buf;
    if (hs[i]->kind == TDM_HANDLE_VECTOR || b->ld == b->cols)
      continue;
    if (say) /* a kernel given pointers alone could not find its rows */
      tdm__log(rt, TDM_LOG_WARNING,
               "OpenCL: codelet %s: buffer %u's rows are not contiguous (%zu columns, %zu "
               "elements from a row to the next: a tile, or a matrix with a larger ld): its "
               "pointers-only variant cannot take it on device %u, which works in the host's "
               "memory",
               tdm__codelet_name(t), i, b->cols, b->ld, g->device);
    st = TDM_ERR_INVALID_ARG;
  }
  for (unsigned i = 0; i < t->nbuf && !st && !g->shared; i++) {
    size_t bytes = tdm__coh_bytes(hs[i]);
    total += bytes;
    if ((g->max_alloc && bytes > g->max_alloc) || bytes > g->limit || total > g->limit) {
      if (say)
        tdm__log(rt, TDM_LOG_WARNING,
               "OpenCL: codelet %s: buffer %u (%zu bytes) does not fit on device %u (at most "
               "%llu bytes per buffer, %llu in all)",
               tdm__codelet_name(t), i, bytes, g->device,
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
  const char *name = tdm__name_or(cl->name);
  if (!cl->opencl)
    return TDM_OK;
  size_t vs = cl->opencl->struct_size;
  if (vs && vs < sizeof *cl->opencl) {
    tdm__log(rt, TDM_LOG_ERROR, "%s: codelet %s: tdm_opencl_variant.struct_size %zu: 0 or at "
             "least %zu", what, name, vs, sizeof *cl->opencl);
    return TDM_ERR_INVALID_ARG;
  }
  if (t->chunk && (cl->opencl->enqueue || cl->opencl->work_size)) {
    /* a chunk's work size is its range (tandem.h) */
    tdm__log(rt, cl->cpu_fn ? TDM_LOG_WARNING : TDM_LOG_ERROR,
             "%s: codelet %s: an OpenCL variant with its own enqueue or work_size does not "
             "run an operation's chunks%s",
             what, name, cl->cpu_fn ? ": they run on the CPU" : ", and it has no CPU function");
    return cl->cpu_fn ? TDM_OK : TDM_ERR_INVALID_ARG;
  }
  tdm_status st = TDM_ERR_BUILD;
  const tdm_opencl *o = cl_of(rt);
  for (unsigned k = o->first; k < o->first + o->n; k++) {
    tdm_status pst = can_run(dev_of(rt, k), t, true);
    if (!pst) {
      st = TDM_OK; /* at least one device can run it */
      t->dev_mask |= 1ull << k;
    } else if (pst != TDM_ERR_BUILD && st == TDM_ERR_BUILD) {
      st = pst;
    }
  }
  if (st == TDM_OK)
    return TDM_OK;
  if (cl->cpu_fn) { /* a failed build or a disabled kernel was told as it happened */
    tdm__log(rt, st == TDM_ERR_BUILD || st == TDM_ERR_KERNEL ? TDM_LOG_DEBUG : TDM_LOG_WARNING,
             "%s: codelet %s: its OpenCL variant cannot run (%s); the task runs on the CPU",
             what, name, tdm_status_name(st));
    return TDM_OK;
  }
  tdm__log(rt, TDM_LOG_ERROR, "%s: codelet %s: no device can run its OpenCL variant (%s: %s) "
           "and it has no CPU variant: refused", what, name, tdm_status_name(st),
           tdm_strerror(st));
  return st;
}
