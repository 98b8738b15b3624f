/*
 * Data-parallel operations (tdm_parallel_submit): a range cut into
 * chunks, each chunk a task on its part of the split handles, so that
 * every rule a task obeys (dependencies, placement and its models,
 * groups, priorities, pause, back-pressure, retries, the verification
 * mode, lineage, the trace) holds for each chunk.
 *
 * The split handles are partitioned by rows at the chunks' boundaries
 * (core/handles.c: the same tiles as tdm_matrix_partition's, so that a
 * device with memory of its own copies only its chunks' rows), the
 * chunks submitted, and the handles joined back at once: tasks submitted
 * later wait for every chunk, as they wait for every tile of an
 * unpartitioned matrix. A last node, a task without buffers that depends
 * on every chunk, ends the operation: it fills the statistics and is
 * what tdm_task_wait waits for.
 *
 * A chunk's arguments are the caller's followed by a tdm_chunk_tail (its
 * range and the operation's CPU function): the chunks' codelet, made
 * once per (codelet, function) and kept for the runtime's life, runs the
 * function through a trampoline, and devices get the caller's arguments
 * alone (objects.h: tdm__task_args_size).
 */
#include "core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct tdm_op_codelet {
  struct tdm_op_codelet *next;
  const tdm_codelet *user;
  bool cpu, reduce;
  tdm_codelet cl;
} tdm_op_codelet;

/* A reduction's partial values, once its operation ended. */
typedef struct tdm_op_scratch {
  struct tdm_op_scratch *next;
  tdm_handle *h;
  void *mem;
} tdm_op_scratch;

static void scratch_add(tdm_runtime *rt, tdm_handle *h, void *mem);

/* One operation, until its last node ends. */
typedef struct op {
  tdm_runtime *rt;
  tdm_parallel_stats *stats;
  tdm_task_callback callback;
  void *callback_data;
  unsigned nchunks, nclasses;
  /* a reduction: how values combine, and the partial values */
  tdm_reduce_op reduce;
  tdm_elem_type type;
  size_t vsize;
  tdm_combine_fn combine;
  unsigned char identity[64];
  tdm_handle *partials;
  void *partials_mem;
  /* One per chunk submitted and one for the last node: the last to go
   * frees it (the last node, unless the operation stopped half-way). */
  _Atomic int64_t refs;
  _Atomic uint64_t first_ns; /* the earliest chunk start; UINT64_MAX: none yet */
  _Atomic uint64_t last_ns;
  _Atomic uint64_t failed;
  _Atomic uint64_t chunks[TDM_PARALLEL_MAX_CLASSES], elements[TDM_PARALLEL_MAX_CLASSES];
  _Atomic uint64_t end_ns[TDM_PARALLEL_MAX_CLASSES];
  _Atomic uint64_t bytes[TDM_PARALLEL_MAX_CLASSES], moved;
  struct chunk_rec {
    struct op *op;
    uint64_t elements;
    _Atomic uint64_t moved; /* its bytes copied (data/access.c, through its tail) */
  } rec[];
} op;

/* ---- the chunks' codelet ------------------------------------------------- */

static void chunk_cpu(const tdm_buffer *bufs, const void *args, size_t args_size) {
  tdm_chunk_tail c;
  size_t user = args_size - sizeof c;
  memcpy(&c, (const unsigned char *)args + user, sizeof c);
  c.fn(bufs, &c.range, user ? args : NULL, user);
}

/* The chunks' codelet for `user` (with a CPU variant when `cpu`, a last
 * buffer of partial values when `reduce`). */
static tdm_op_codelet *find_codelet(tdm_runtime *rt, const tdm_codelet *user, bool cpu,
                                     bool reduce) {
  tdm_op_codelet *c = rt->op_codelets;
  while (c && (c->user != user || c->cpu != cpu || c->reduce != reduce))
    c = c->next;
  return c;
}

static const tdm_codelet *op_codelet(tdm_runtime *rt, const tdm_codelet *user, bool cpu,
                                     bool reduce) {
  tdm__spin_lock(&rt->groups_lock);
  tdm_op_codelet *c = find_codelet(rt, user, cpu, reduce);
  tdm__spin_unlock(&rt->groups_lock);
  if (c)
    return &c->cl;
  tdm_op_codelet *n = tdm__calloc(rt, 1, sizeof *n);
  if (!n)
    return NULL;
  n->user = user;
  n->cpu = cpu;
  n->reduce = reduce;
  n->cl = (tdm_codelet){.struct_size = sizeof n->cl,
                        .name = user->name,
                        .cpu_fn = cpu ? chunk_cpu : NULL,
                        .nbuffers = user->nbuffers + reduce,
                        .opencl = user->opencl,
                        .tolerance = user->tolerance,
                        .footprint = user->footprint};
  memcpy(n->cl.modes, user->modes, sizeof n->cl.modes);
  if (reduce)
    n->cl.modes[user->nbuffers] = TDM_RW; /* the identity in, the chunk's values out */
  tdm__spin_lock(&rt->groups_lock);
  c = find_codelet(rt, user, cpu, reduce);
  if (!c) {
    n->next = rt->op_codelets;
    rt->op_codelets = n;
  }
  tdm__spin_unlock(&rt->groups_lock);
  if (c) { /* made meanwhile by another thread */
    free(n);
    return &c->cl;
  }
  return &n->cl;
}

/* The partial values of the reductions that ended: handles unregistered
 * (their tasks have all ended), memory freed. From the application's
 * thread only (unregistering waits). */
static void scratch_drain(tdm_runtime *rt) {
  tdm__spin_lock(&rt->groups_lock);
  tdm_op_scratch *x = rt->op_scratch;
  rt->op_scratch = NULL;
  tdm__spin_unlock(&rt->groups_lock);
  while (x) {
    tdm_op_scratch *next = x->next;
    tdm_handle_unregister(x->h); /* (TDM_ERR_LOST after a failed chunk: no matter) */
    free(x->mem);
    free(x);
    x = next;
  }
}

void tdm__parallel_free(tdm_runtime *rt) {
  for (tdm_op_codelet *c = rt->op_codelets, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  rt->op_codelets = NULL;
  /* the handles went with the others (at destroy): their memory now */
  for (tdm_op_scratch *x = rt->op_scratch, *next; x; x = next) {
    next = x->next;
    free(x->mem);
    free(x);
  }
  rt->op_scratch = NULL;
}

/* ---- the plan ------------------------------------------------------------- */

size_t tdm__parallel_plan(size_t rows, size_t grain, double units, unsigned probes,
                          size_t max_chunks, size_t *sizes) {
  if (!grain)
    grain = 1;
  if (units < 1)
    units = 1;
  if (!max_chunks)
    max_chunks = 1;
  /* Probes first, while a class's model is not calibrated (heft tries
   * each class TDM_MODEL_CALIBRATION times on the first chunks it
   * places): small, so that those tries cost little, and a quarter of
   * the range at most. */
  size_t probe = (size_t)ceil((double)rows / (64 * units));
  if (probe < grain)
    probe = grain;
  while (probes && (size_t)probes * probe > rows / 4)
    probes--;
  if (probes >= max_chunks)
    probes = (unsigned)(max_chunks - 1);
  size_t n = 0, pos = 0;
  while (pos < rows) {
    size_t left = rows - pos;
    size_t c = n < probes ? probe : (size_t)ceil((double)left / (TDM_PARALLEL_GUIDED_K * units));
    if (c < grain)
      c = grain;
    /* no piece under the grain at the end, and no more than max_chunks */
    if (c >= left || left - c < grain || n + 1 == max_chunks)
      c = left;
    pos += c;
    if (sizes)
      sizes[n] = c;
    n++;
  }
  return n;
}

/* k's lowest `bits` bits reversed. */
static uint64_t reversed(uint64_t k, unsigned bits) {
  uint64_t r = 0;
  for (unsigned i = 0; i < bits; i++, k >>= 1)
    r = r << 1 | (k & 1);
  return r;
}

void tdm__parallel_layout(const size_t *sizes, size_t n, size_t *at, size_t *slot_of) {
  /* The chunks in the range in the order of their numbers' bits
   * reversed (van der Corput's sequence): chunk 0 at the start, 1 in the
   * middle, 2 and 3 at the quarters..., so that the chunks given out
   * first, the large ones, and the probes among them, sample the whole
   * range, and a range whose cost varies along it (Mandelbrot's rows) is
   * known by its average: the models learn every class's speed from
   * alike work. */
  unsigned bits = 0;
  while (bits < 63 && ((uint64_t)1 << bits) < n)
    bits++;
  size_t j = 0;
  at[0] = 0;
  for (uint64_t v = 0; j < n; v++) {
    uint64_t k = reversed(v, bits);
    if (k >= n)
      continue;
    at[j + 1] = at[j] + sizes[k];
    slot_of[k] = j++;
  }
}

/* ---- statistics ------------------------------------------------------------- */

static void atomic_min_u64(_Atomic uint64_t *a, uint64_t v) {
  uint64_t was = atomic_load_explicit(a, memory_order_relaxed);
  while (v < was &&
         !atomic_compare_exchange_weak_explicit(a, &was, v, memory_order_relaxed,
                                                memory_order_relaxed))
    ;
}
static void atomic_max_u64(_Atomic uint64_t *a, uint64_t v) {
  uint64_t was = atomic_load_explicit(a, memory_order_relaxed);
  while (v > was &&
         !atomic_compare_exchange_weak_explicit(a, &was, v, memory_order_relaxed,
                                                memory_order_relaxed))
    ;
}

/* The class a chunk's worker counts in: 0 the CPU workers, 1 + d device
 * record d; -1 past the statistics' room. */
static int class_of_worker(const tdm_runtime *rt, unsigned worker) {
  if (worker < rt->nworkers)
    return 0;
  unsigned k = worker - rt->nworkers;
  if (k >= rt->ndevice_workers)
    return -1;
  unsigned d = rt->device_of[k];
  return d + 1 < TDM_PARALLEL_MAX_CLASSES ? (int)d + 1 : -1;
}

static void op_unref(op *o, int64_t n) {
  if (atomic_fetch_sub_explicit(&o->refs, n, memory_order_acq_rel) == n)
    free(o);
}

static void chunk_ended(void *data) {
  struct chunk_rec *r = data;
  op *o = r->op;
  atomic_fetch_sub_explicit(&o->rt->op_chunks, 1, memory_order_relaxed);
  uint64_t t0 = tdm__callback_t0, t1 = tdm__callback_t1 ? tdm__callback_t1 : tdm__now_ns();
  int c = class_of_worker(o->rt, tdm__callback_worker);
  uint64_t moved = atomic_load_explicit(&r->moved, memory_order_relaxed);
  atomic_fetch_add_explicit(&o->moved, moved, memory_order_relaxed);
  if (tdm_callback_status()) {
    atomic_fetch_add_explicit(&o->failed, 1, memory_order_relaxed);
  } else {
    atomic_min_u64(&o->first_ns, t0 ? t0 : t1);
    atomic_max_u64(&o->last_ns, t1);
    if (c >= 0) {
      atomic_fetch_add_explicit(&o->chunks[c], 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&o->elements[c], r->elements, memory_order_relaxed);
      atomic_fetch_add_explicit(&o->bytes[c], moved, memory_order_relaxed);
      atomic_max_u64(&o->end_ns[c], t1);
    }
  }
  op_unref(o, 1);
}

/* The last node: every chunk has ended (its callbacks included). */
static void op_ended(void *data) {
  op *o = data;
  tdm_parallel_stats *s = o->stats;
  if (s) {
    size_t size = s->struct_size ? s->struct_size : sizeof *s;
    tdm_parallel_stats v = {.struct_size = size, .chunks = o->nchunks, .nclasses = o->nclasses};
    uint64_t first = atomic_load(&o->first_ns), last = atomic_load(&o->last_ns);
    double lo = -1, hi = 0;
    for (unsigned c = 0; c < TDM_PARALLEL_MAX_CLASSES; c++) {
      v.class_chunks[c] = atomic_load(&o->chunks[c]);
      v.class_elements[c] = atomic_load(&o->elements[c]);
      v.class_bytes[c] = atomic_load(&o->bytes[c]);
      uint64_t e = atomic_load(&o->end_ns[c]);
      if (v.class_chunks[c] && e >= first) {
        v.class_end[c] = 1e-9 * (double)(e - first);
        lo = lo < 0 || v.class_end[c] < lo ? v.class_end[c] : lo;
        hi = v.class_end[c] > hi ? v.class_end[c] : hi;
      }
    }
    v.makespan = last > first && first != UINT64_MAX ? 1e-9 * (double)(last - first) : 0;
    v.tail = lo >= 0 ? hi - lo : 0;
    v.failed = atomic_load(&o->failed);
    v.bytes_moved = atomic_load(&o->moved);
    memcpy(s, &v, size < sizeof v ? size : sizeof v);
  }
  if (o->callback)
    o->callback(o->callback_data);
  if (o->partials) /* unregistered later: not from here, a task's callback */
    scratch_add(o->rt, o->partials, o->partials_mem);
  op_unref(o, 1);
}

/* ---- reductions ------------------------------------------------------------- */

static void set_identity(tdm_reduce_op op, tdm_elem_type type, void *v) {
  bool dbl = type == TDM_ELEM_DOUBLE;
  double x = op == TDM_REDUCE_MIN ? INFINITY : op == TDM_REDUCE_MAX ? -INFINITY : 0;
  if (dbl) {
    memcpy(v, &x, sizeof x);
  } else {
    float f = (float)x;
    memcpy(v, &f, sizeof f);
  }
}

/* acc = acc (+) v for the built-in operations. */
#define COMBINE(T, op, acc, v)                                                 \
  do {                                                                         \
    T a_, b_;                                                                  \
    memcpy(&a_, acc, sizeof a_);                                               \
    memcpy(&b_, v, sizeof b_);                                                 \
    a_ = op == TDM_REDUCE_SUM ? a_ + b_                                         \
       : op == TDM_REDUCE_MIN ? (b_ < a_ ? b_ : a_)                            \
                              : (b_ > a_ ? b_ : a_);                           \
    memcpy(acc, &a_, sizeof a_);                                               \
  } while (0)

static void combine(const op *o, void *acc, const void *v) {
  if (o->reduce == TDM_REDUCE_USER)
    TDM_USER_CODE(o->combine(acc, v));
  else if (o->type == TDM_ELEM_DOUBLE)
    COMBINE(double, o->reduce, acc, v);
  else
    COMBINE(float, o->reduce, acc, v);
}

/* The last node of a reduction: the partial values (bufs[0]), in the
 * order of the range, into the result (bufs[1]). */
static void merge(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  const op *o;
  memcpy(&o, args, sizeof o);
  unsigned char acc[64];
  memcpy(acc, o->identity, o->vsize);
  const unsigned char *v = b[0].ptr;
  for (size_t i = 0; i < b[0].rows; i++)
    combine(o, acc, v + i * o->vsize);
  memcpy(b[1].ptr, acc, o->vsize);
}

static const tdm_codelet merge_codelet = {
    .name = "tdm_parallel(reduce)", .cpu_fn = merge, .nbuffers = 2, .modes = {TDM_R, TDM_W}};

/* ---- submission ------------------------------------------------------------- */

static tdm_status refuse(tdm_runtime *rt, tdm_status st, const char *why) {
  return tdm__refuse(rt, st, "tdm_parallel_submit", why);
}

/* Checks d against the range; *dims gets 1 or 2. */
static tdm_status check(tdm_runtime *rt, const tdm_parallel_desc *d, unsigned *dims) {
  if (!d || !d->codelet)
    return refuse(rt, TDM_ERR_INVALID_ARG, "NULL description or codelet");
  if (d->struct_size && d->struct_size < sizeof *d)
    return refuse(rt, TDM_ERR_INVALID_ARG, "tdm_parallel_desc.struct_size too small");
  const tdm_codelet *cl = d->codelet;
  unsigned n = cl->nbuffers;
  if (!n || n > TDM_MAX_BUFFERS)
    return refuse(rt, TDM_ERR_INVALID_ARG, "the codelet needs 1 to TDM_MAX_BUFFERS buffers");
  if (!d->cpu_fn && !cl->opencl)
    return refuse(rt, TDM_ERR_INVALID_ARG, "neither a CPU function nor an OpenCL variant");
  if (!d->range[0])
    return refuse(rt, TDM_ERR_INVALID_ARG, "an empty range");
  if (d->flags & ~(TDM_PARALLEL_NO_DEVICES | TDM_PARALLEL_NO_CPU | TDM_PARALLEL_STATIC))
    return refuse(rt, TDM_ERR_INVALID_ARG, "unknown flags");
  if ((d->flags & TDM_PARALLEL_NO_DEVICES) && !d->cpu_fn)
    return refuse(rt, TDM_ERR_INVALID_ARG, "TDM_PARALLEL_NO_DEVICES without a CPU function");
  if ((d->flags & TDM_PARALLEL_NO_DEVICES) && (d->flags & TDM_PARALLEL_NO_CPU))
    return refuse(rt, TDM_ERR_INVALID_ARG,
                  "TDM_PARALLEL_NO_DEVICES and TDM_PARALLEL_NO_CPU: no worker left");
  for (unsigned c = 0; c < TDM_PARALLEL_MAX_CLASSES; c++)
    if (!(d->shares[c] >= 0 && d->shares[c] < INFINITY) ||
        (d->shares[c] && !(d->flags & TDM_PARALLEL_STATIC)))
      return refuse(rt, TDM_ERR_INVALID_ARG,
                    "shares: finite, not negative, and only with TDM_PARALLEL_STATIC");
  if (d->args_size && !d->args)
    return refuse(rt, TDM_ERR_INVALID_ARG, "args_size > 0 but args is NULL");
  if (!(d->split_mask & ((1u << n) - 1)) || (d->split_mask >> n))
    return refuse(rt, TDM_ERR_INVALID_ARG,
                  "split_mask must name at least one of the codelet's buffers, and no other");
  *dims = d->range[1] > 1 ? 2 : 1;
  if (d->reduce) {
    size_t vsize = d->reduce == TDM_REDUCE_USER ? d->reduce_size
                   : d->reduce_type == TDM_ELEM_DOUBLE ? sizeof(double)
                   : d->reduce_type == TDM_ELEM_FLOAT  ? sizeof(float)
                                                       : 0;
    if (d->reduce > TDM_REDUCE_USER)
      return refuse(rt, TDM_ERR_INVALID_ARG, "an unknown reduction");
    if (!vsize || vsize > 64)
      return refuse(rt, TDM_ERR_INVALID_ARG,
                    "a reduction's values: TDM_ELEM_FLOAT or TDM_ELEM_DOUBLE for SUM, MIN and "
                    "MAX; 1 to 64 bytes (reduce_size) for USER");
    if (d->reduce == TDM_REDUCE_USER && (!d->combine || !d->identity))
      return refuse(rt, TDM_ERR_INVALID_ARG, "TDM_REDUCE_USER needs combine and identity");
    if (n + 1 > TDM_MAX_BUFFERS)
      return refuse(rt, TDM_ERR_INVALID_ARG,
                    "with a reduction, the codelet has at most TDM_MAX_BUFFERS - 1 buffers");
    tdm_status st = tdm__handle_check(rt, d->result, "tdm_parallel_submit: result");
    if (st)
      return st;
    if (d->result->kind != TDM_HANDLE_VECTOR || d->result->buf.nx != 1 ||
        d->result->buf.elem_size != vsize)
      return refuse(rt, TDM_ERR_INVALID_ARG,
                    "the result is a vector of one value, of the reduction's size");
    for (unsigned i = 0; i < n; i++)
      if (d->handles[i] == d->result)
        return refuse(rt, TDM_ERR_INVALID_ARG, "the result is one of the operation's handles");
  }
  for (unsigned i = 0; i < n; i++) {
    char where[96];
    snprintf(where, sizeof where, "tdm_parallel_submit: buffer %u", i);
    tdm_status st = tdm__handle_check(rt, d->handles[i], where);
    if (st)
      return st;
    const tdm_handle *h = d->handles[i];
    if (cl->modes[i] != TDM_R && cl->modes[i] != TDM_W && cl->modes[i] != TDM_RW)
      return refuse(rt, TDM_ERR_INVALID_MODE, "an invalid access mode");
    if (!(d->split_mask >> i & 1)) {
      if (cl->modes[i] != TDM_R)
        return refuse(rt, TDM_ERR_INVALID_ARG,
                      "a handle given whole to every chunk must be read only (TDM_R)");
      for (unsigned j = 0; j < n; j++)
        if ((d->split_mask >> j & 1) && d->handles[j] == h)
          return refuse(rt, TDM_ERR_INVALID_ARG, "a handle both split and given whole");
      continue;
    }
    bool fits = h->buf.nx == d->range[0] &&
                (*dims == 1 || (h->kind == TDM_HANDLE_MATRIX && h->buf.ny == d->range[1]));
    if (!fits) {
      char why[200];
      snprintf(why, sizeof why,
               "split buffer %u has %zu x %zu elements: the range is %zu x %zu (a vector of "
               "range[0] elements, or a matrix of range[0] rows)",
               i, h->buf.nx, h->buf.ny, d->range[0], d->range[1] ? d->range[1] : 1);
      return refuse(rt, TDM_ERR_INVALID_ARG, why);
    }
    for (unsigned j = 0; j < i; j++)
      if (d->handles[j] == h)
        return refuse(rt, TDM_ERR_INVALID_ARG, "a split handle named twice");
  }
  return TDM_OK;
}

/* The worker mask of the devices d chooses (tdm_runtime_device's
 * numbers): by default (device_mask 0) every device, but an OpenCL
 * device on the CPU cores beside a CPU function: it runs on the cores
 * the CPU workers run on, so that sharing the range with it only makes
 * them compete (PoCL beside 2 CPU workers: 2.8 to 3 times slower than
 * the CPU workers alone, bench-parallel --real). */
static uint64_t chosen_workers(const tdm_runtime *rt, uint64_t device_mask, bool cpu) {
  uint64_t m = 0;
  for (unsigned k = 0; k < rt->ndevice_workers && k < 64; k++) {
    unsigned dev = rt->device_of[k];
    bool on_cores = rt->devices[dev].cls == TDM_DEVICE_CPU;
    if (device_mask ? dev < 64 && (device_mask >> dev & 1) : !(cpu && on_cores))
      m |= UINT64_C(1) << k;
  }
  return m;
}

/* The description of chunk i: its buffers (the split handles' tiles i),
 * its arguments (the caller's and the tail). */
static void chunk_desc(const tdm_parallel_desc *d, const tdm_codelet *cl, unsigned dims,
                       const size_t *at, size_t i, bool whole, tdm_handle *partial,
                       _Atomic uint64_t *moved, unsigned char *args, tdm_task_desc *td) {
  *td = (tdm_task_desc){.struct_size = sizeof *td,
                        .codelet = cl,
                        .args = args,
                        .args_size = d->args_size + sizeof(tdm_chunk_tail),
                        .priority = d->priority,
                        .group = d->group};
  unsigned n = d->codelet->nbuffers;
  for (unsigned k = 0; k < n; k++)
    td->handles[k] = !whole && (d->split_mask >> k & 1) ? tdm_matrix_tile(d->handles[k], i, 0)
                                                         : d->handles[k];
  if (d->reduce) /* its partial values last */
    td->handles[n] = partial;
  tdm_chunk_tail tail = {.range = {.begin = {at[i], 0},
                                   .end = {at[i + 1], dims == 2 ? d->range[1] : 1}},
                         .fn = d->cpu_fn,
                         .dims = dims,
                         .group = d->reduce ? TDM_REDUCE_GROUP : 0,
                         .moved = moved};
  if (d->args_size)
    memcpy(args, d->args, d->args_size);
  memcpy(args + d->args_size, &tail, sizeof tail);
  td->cost = (float)((at[i + 1] - at[i]) * (dims == 2 ? d->range[1] : 1));
}

/* A reduction's partial values for the plan (chunk k of sizes[k] rows
 * at slot slot_of[k]): one per work-group of each chunk, the identity in
 * each, registered and partitioned with the chunks (in the order of the
 * range); in o. */
static tdm_status make_partials(tdm_runtime *rt, const tdm_parallel_desc *d, unsigned dims,
                                const size_t *sizes, size_t n, const size_t *slot_of, op *o) {
  o->reduce = d->reduce;
  o->type = d->reduce_type;
  o->combine = d->combine;
  o->vsize = d->result->buf.elem_size;
  if (d->reduce == TDM_REDUCE_USER)
    memcpy(o->identity, d->identity, o->vsize);
  else
    set_identity(d->reduce, d->reduce_type, o->identity);
  size_t *per_slot = tdm__calloc(rt, 2 * n + 1, sizeof *per_slot), *bound = per_slot + n;
  if (!per_slot)
    return refuse(rt, TDM_ERR_NO_MEMORY, "out of memory");
  size_t groups_per_row = (d->range[1] + TDM_REDUCE_GROUP - 1) / TDM_REDUCE_GROUP;
  for (size_t k = 0; k < n; k++) /* a chunk's work-groups */
    per_slot[slot_of[k]] = dims == 2 ? groups_per_row * sizes[k]
                                     : (sizes[k] + TDM_REDUCE_GROUP - 1) / TDM_REDUCE_GROUP;
  bound[0] = 0;
  for (size_t j = 0; j < n; j++)
    bound[j + 1] = bound[j] + per_slot[j];
  size_t total = bound[n];
  unsigned char *mem = total <= SIZE_MAX / o->vsize ? tdm__malloc(rt, total * o->vsize) : NULL;
  tdm_status st = mem ? TDM_OK : refuse(rt, TDM_ERR_NO_MEMORY, "out of memory");
  for (size_t i = 0; mem && i < total; i++)
    memcpy(mem + i * o->vsize, o->identity, o->vsize);
  tdm_handle *h = NULL;
  if (!st)
    st = tdm_register_vector(rt, mem, total, o->vsize, &h);
  if (!st && (st = tdm__partition_rows(h, bound, n, "tdm_parallel_submit"))) {
    tdm_handle_unregister(h);
    h = NULL;
  }
  free(per_slot);
  if (st) {
    free(mem);
    return st;
  }
  o->partials = h;
  o->partials_mem = mem;
  return TDM_OK;
}

/* Partial values to unregister later (scratch_drain). */
static void scratch_add(tdm_runtime *rt, tdm_handle *h, void *mem) {
  tdm_op_scratch *x = malloc(sizeof *x);
  if (!x)
    return; /* the handle goes at destroy; its memory is lost */
  *x = (tdm_op_scratch){.h = h, .mem = mem};
  tdm__spin_lock(&rt->groups_lock);
  x->next = rt->op_scratch;
  rt->op_scratch = x;
  tdm__spin_unlock(&rt->groups_lock);
}

/* The static split (TDM_PARALLEL_STATIC): chunk sizes in the order of
 * the range (sizes) and the worker each is bound to (worker_of: -1 the
 * CPU workers, k device worker k), one per active CPU worker when `cpu`
 * and per device worker of `devices` (each[k]: its speed), in
 * proportion to d->shares or, all 0, to their speeds; room for
 * ncpu_workers + ndevice_workers entries in both. Its number of chunks
 * (those of no rows dropped); 0 when the shares are refused (*st). */
static size_t static_plan(tdm_runtime *rt, const tdm_parallel_desc *d, bool cpu,
                          uint64_t devices, const double *each, size_t *sizes, int *worker_of,
                          tdm_status *st) {
  unsigned ncpu = cpu ? tdm_runtime_active_workers(rt) : 0;
  bool given = false;
  unsigned per[TDM_PARALLEL_MAX_CLASSES] = {ncpu}; /* workers per class */
  for (unsigned k = 0; k < rt->ndevice_workers && k < 64; k++)
    if ((devices >> k & 1) && rt->device_of[k] + 1 < TDM_PARALLEL_MAX_CLASSES)
      per[rt->device_of[k] + 1]++;
  for (unsigned c = 0; c < TDM_PARALLEL_MAX_CLASSES; c++) {
    given |= d->shares[c] > 0;
    if (d->shares[c] > 0 && !per[c]) {
      char why[120], who[32] = "the CPU workers";
      if (c)
        snprintf(who, sizeof who, "device %u", c - 1);
      snprintf(why, sizeof why, "shares[%u] > 0 for %s, which takes no chunk", c, who);
      *st = refuse(rt, TDM_ERR_INVALID_ARG, why);
      return 0;
    }
  }
  double *w = tdm__calloc(rt, ncpu + rt->ndevice_workers + 1, sizeof *w), total = 0;
  if (!w) {
    *st = refuse(rt, TDM_ERR_NO_MEMORY, "out of memory");
    return 0;
  }
  size_t m = 0;
  for (unsigned i = 0; i < ncpu; i++, m++) {
    w[m] = given ? d->shares[0] / ncpu : 1;
    worker_of[m] = -1;
  }
  for (unsigned k = 0; k < rt->ndevice_workers && k < 64; k++) {
    if (!(devices >> k & 1))
      continue;
    unsigned c = rt->device_of[k] + 1;
    w[m] = !given ? each[k] : c < TDM_PARALLEL_MAX_CLASSES ? d->shares[c] / per[c] : 0;
    worker_of[m++] = (int)k;
  }
  for (size_t i = 0; i < m; i++)
    total += w[i];
  size_t rows = d->range[0], n = 0, prev = 0;
  double sum = 0;
  for (size_t i = 0; i < m && total > 0; i++) {
    sum += w[i];
    size_t end = i + 1 == m ? rows : (size_t)llround((double)rows * (sum / total));
    if (end > rows)
      end = rows;
    if (end > prev) {
      sizes[n] = end - prev;
      worker_of[n++] = worker_of[i];
      prev = end;
    }
  }
  free(w);
  if (!n) /* (no speed known either: every device worker's is) */
    *st = refuse(rt, TDM_ERR_INVALID_ARG, "no share for a class that takes chunks");
  return n;
}

static void nothing(const tdm_buffer *bufs, const void *args, size_t args_size) {
  (void)bufs, (void)args, (void)args_size;
}
static const tdm_codelet end_codelet = {.name = "tdm_parallel(end)", .cpu_fn = nothing};

tdm_status tdm_parallel_submit(tdm_runtime *rt, const tdm_parallel_desc *d, tdm_task **out) {
  if (out)
    *out = NULL;
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_parallel_submit");
  unsigned dims = 1;
  tdm_status st = check(rt, d, &dims);
  if (st)
    return st;
  if (!tdm__self_in(rt) && !tdm__in_user_code)
    scratch_drain(rt); /* earlier reductions' partial values */
  const tdm_codelet *cl = op_codelet(rt, d->codelet, d->cpu_fn != NULL, d->reduce != 0);
  unsigned char *args = tdm__malloc(rt, d->args_size + sizeof(tdm_chunk_tail));
  if (!cl || !args) {
    free(args);
    return refuse(rt, TDM_ERR_NO_MEMORY, "out of memory");
  }
  bool cpu = d->cpu_fn && !(d->flags & TDM_PARALLEL_NO_CPU);
  bool fixed = d->flags & TDM_PARALLEL_STATIC;
  uint64_t devices = d->flags & TDM_PARALLEL_NO_DEVICES ? 0 : chosen_workers(rt, d->device_mask, cpu);
  if ((st = tdm__submit_wait_room(rt))) {
    free(args);
    return st;
  }

  /* A probe over the whole range, never submitted: whether a device can
   * run it, and the machine's speed by the models. */
  size_t whole[2] = {0, d->range[0]};
  tdm_task_desc td;
  tdm_task *probe = NULL;
  chunk_desc(d, cl, dims, whole, 0, true, d->result, NULL, args, &td); /* (the result stands
                                                                    in for partial values) */
  td.group = NULL;
  if ((st = tdm__chunk_create(rt, &td, &probe))) {
    free(args);
    return st;
  }
  probe->dev_mask &= devices;
  probe->device_ok = probe->dev_mask != 0;
  devices = probe->dev_mask; /* those that can run it */
  if (!probe->device_ok && !cpu) {
    tdm_task_release(probe);
    free(args);
    return refuse(rt, TDM_ERR_NO_DEVICE,
                  "no device chosen can run the codelet, and the CPU workers may not (no CPU "
                  "function, or TDM_PARALLEL_NO_CPU)");
  }
  unsigned unknown = 0;
  /* the static split's: each device worker's speed */
  double *each = fixed ? tdm__calloc(rt, rt->ndevice_workers + 1, sizeof *each) : NULL;
  double units = tdm__sched_speed_units(rt, probe, devices, cpu, &unknown, each);
  tdm_task_release(probe);
  unsigned probes = unknown * TDM_MODEL_CALIBRATION;

  size_t grain = d->grain ? d->grain : 1;
  size_t max_chunks = d->max_chunks ? d->max_chunks : 4096;
  size_t n = fixed ? tdm_runtime_active_workers(rt) + rt->ndevice_workers
                   : tdm__parallel_plan(d->range[0], grain, units, probes, max_chunks, NULL);
  size_t *at = tdm__malloc(rt, (3 * n + 1) * sizeof *at), *sizes = at + n + 1,
         *slot_of = sizes + n;
  int *worker_of = fixed ? tdm__malloc(rt, n * sizeof *worker_of) : NULL;
  tdm_task **chunks = tdm__calloc(rt, n, sizeof *chunks);
  op *o = tdm__calloc(rt, 1, sizeof *o + n * sizeof o->rec[0]);
  if (!at || !chunks || !o || (fixed && (!each || !worker_of))) {
    free(at), free(chunks), free(o), free(args), free(each), free(worker_of);
    return refuse(rt, TDM_ERR_NO_MEMORY, "out of memory");
  }
  if (fixed) { /* in the order of the range */
    n = static_plan(rt, d, cpu, devices, each, sizes, worker_of, &st);
    at[0] = 0;
    for (size_t i = 0; i < n; i++) {
      at[i + 1] = at[i] + sizes[i];
      slot_of[i] = i;
    }
  } else {
    tdm__parallel_plan(d->range[0], grain, units, probes, max_chunks, sizes);
    tdm__parallel_layout(sizes, n, at, slot_of);
  }
  free(each);
  if (st) {
    free(at), free(chunks), free(o), free(args), free(worker_of);
    return st;
  }
  *o = (op){.rt = rt,
            .stats = d->stats,
            .callback = d->callback,
            .callback_data = d->callback_data,
            .nchunks = (unsigned)n,
            .nclasses = 1 + (rt->ndevices < TDM_PARALLEL_MAX_CLASSES - 1
                                 ? rt->ndevices
                                 : TDM_PARALLEL_MAX_CLASSES - 1)};
  atomic_store(&o->first_ns, UINT64_MAX);
  if (d->reduce)
    st = make_partials(rt, d, dims, sizes, n, slot_of, o);

  /* the split handles in rows at the chunks' boundaries */
  unsigned parted = 0;
  for (unsigned k = 0; k < cl->nbuffers && !st; k++)
    if (d->split_mask >> k & 1) {
      if ((st = tdm__partition_rows(d->handles[k], at, n, "tdm_parallel_submit")))
        break;
      parted |= 1u << k;
    }
  /* made in the plan's order (the large chunks first, which placement
   * then sees first), each at its slot in the range */
  size_t made = 0;
  for (; made < n && !st; made++) {
    size_t slot = slot_of[made];
    o->rec[made].op = o;
    o->rec[made].elements = sizes[made] * (dims == 2 ? d->range[1] : 1);
    chunk_desc(d, cl, dims, at, slot, false,
               o->partials ? tdm_matrix_tile(o->partials, slot, 0) : NULL, &o->rec[made].moved,
               args, &td);
    td.callback = chunk_ended;
    td.callback_data = &o->rec[made];
    if ((st = tdm__chunk_create(rt, &td, &chunks[made])))
      break;
    tdm_task *t = chunks[made];
    if (fixed) { /* bound to its kind of worker */
      int k = worker_of[made];
      t->dev_mask &= k < 0 ? 0 : UINT64_C(1) << k;
      t->no_cpu = k >= 0;
      t->cpu_fallback = k >= 0 && cpu;
    } else {
      t->dev_mask &= devices;
      t->no_cpu = !cpu;
    }
    t->device_ok = t->dev_mask != 0;
  }
  /* the last node, then every chunk: nothing is submitted unless all
   * could be made */
  tdm_task *end = NULL;
  if (!st) {
    td = (tdm_task_desc){.struct_size = sizeof td,
                         .codelet = &end_codelet,
                         .callback = op_ended,
                         .callback_data = o,
                         /* tdm_group_wait waits for the operation whole */
                         .group = d->group,
                         .cost = 1e-6f};
    if (d->reduce) { /* it combines the partial values into the result */
      td.codelet = &merge_codelet;
      td.handles[0] = o->partials;
      td.handles[1] = d->result;
      td.args = &o;
      td.args_size = sizeof o;
    }
    st = tdm_task_create(rt, &td, &end);
    for (size_t i = 0; i < n && !st; i++)
      st = tdm_task_depends_on(end, chunks[i]);
  }
  if (!st) {
    end->dev_mask = 0; /* a CPU worker ends the operation */
    end->device_ok = false;
  }
  atomic_store(&o->refs, (int64_t)n + 1);
  size_t submitted = 0;
  while (submitted < n && !st) {
    atomic_fetch_add_explicit(&rt->op_chunks, 1, memory_order_relaxed);
    if (!(st = tdm__submit_created(chunks[submitted])))
      submitted++;
    else
      atomic_fetch_sub_explicit(&rt->op_chunks, 1, memory_order_relaxed);
  }
  for (unsigned k = 0; k < cl->nbuffers; k++)
    if (parted >> k & 1) {
      tdm_status u = tdm__unpartition_rows(d->handles[k], "tdm_parallel_submit");
      if (u && !st)
        st = u;
    }
  if (o->partials) {
    tdm_status u = tdm__unpartition_rows(o->partials, "tdm_parallel_submit");
    if (u && !st)
      st = u;
  }
  if (!st)
    st = tdm__submit_created(end);
  for (size_t i = 0; i < made; i++)
    tdm_task_release(chunks[i]); /* an unsubmitted one is dropped */
  if (st) {
    if (submitted)
      tdm__log(rt, TDM_LOG_ERROR,
               "tdm_parallel_submit: %zu of %zu chunks submitted, then %s: the operation "
               "is incomplete",
               submitted, n, tdm_status_name(st));
    bool end_submitted = end && atomic_load(&end->state) != TDM_TS_CREATED;
    tdm_task_release(end);
    if (!end_submitted && o->partials) /* unregistered later, as an ended one's */
      scratch_add(rt, o->partials, o->partials_mem);
    if (!end_submitted) /* the chunks submitted hold theirs */
      op_unref(o, (int64_t)(n - submitted) + 1);
  } else if (out) {
    *out = end;
  } else {
    tdm_task_release(end);
  }
  free(at), free(chunks), free(args), free(worker_of);
  return st;
}
