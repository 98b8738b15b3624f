/*
 * The verification mode (tdm_config.verify, TANDEM_VERIFY): a sample of
 * the tasks of chosen codelets is run a second time, by the codelet's CPU
 * variant, from the same inputs, and the outputs are compared within the
 * codelet's tolerance (tdm_codelet.tolerance). A device whose results
 * differ from the CPU's (floating-point contraction, a driver bug, a
 * kernel that reads out of bounds) is thus seen, with the codelet, the
 * device and the largest difference. The CPU variant's results are kept
 * in its place (the comparison writes them over the device's), the
 * application is told (tdm_wait_all returns TDM_ERR_MISMATCH), and
 * after DISABLE_AFTER mismatches the codelet's OpenCL variant is no
 * longer used on that device.
 *
 * A sampled task T is submitted as three tasks:
 *  - P, before T (only when T has read-write buffers): reads them and
 *    keeps a copy, the inputs T overwrites;
 *  - T itself, its callback wrapped to note where it ran and how it ended;
 *  - C, after T: reads every buffer of T (T's read-only inputs, which no
 *    writer can have changed yet) and reads and writes T's outputs: when
 *    T ran on a device, it runs T's CPU variant on the same inputs into
 *    buffers of its own, compares, and on a mismatch writes the CPU's
 *    results over T's.
 * P and C run on the CPU workers. While the mode is on, submissions take
 * one lock, so that no other thread's task comes between P, T and C.
 * What a sampled task costs: its outputs and read-write inputs come to
 * the host, the tasks after it that use its outputs wait for C too, and
 * the second run.
 */
#include "core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SPECS 16
#define MAX_OFF 32       /* codelets whose variant is out somewhere */
#define DISABLE_AFTER 2  /* mismatches of a codelet on a device */

typedef struct spec {
  char *name; /* "*": every codelet */
  double rate;
  _Atomic uint64_t seen;
} spec;

/* A codelet's mismatches per device worker, and those where its OpenCL
 * variant is out (bit k). */
typedef struct off_entry {
  char name[64];
  uint8_t count[TDM_MAX_DEVICE_WORKERS];
  uint64_t off;
} off_entry;

struct tdm_verify {
  pthread_mutex_t lock; /* held around each submission while verifying */
  spec specs[MAX_SPECS];
  unsigned n;
  _Atomic uint64_t sampled, compared, mismatched, skipped;
  /* a leaf lock: guards what follows */
  pthread_mutex_t off_lock;
  off_entry off[MAX_OFF];
  unsigned noff;
  _Atomic unsigned any_off; /* noff, read without the lock */
  uint64_t unreported;      /* mismatches replaced since the last report */
  char first[64];           /* the first of those: its codelet */
};

/* One sampled task. Freed by the last of the submitter, P and C. */
typedef struct record {
  tdm_runtime *rt;
  _Atomic int refs;
  /* T's, copied (the application may free its codelet once T is done) */
  char name[64];
  tdm_cpu_fn cpu_fn;
  tdm_tolerance tol;
  unsigned nbuf;
  /* the buffers compared: the first ones (a reduction's chunk's partial
   * values, last, are not: a kernel and a CPU function split a chunk
   * differently) */
  unsigned ncompared;
  uint8_t *modes;      /* nbuf */
  /* A handle T names more than once is one buffer: first[i] is the first
   * buffer naming buffer i's handle, hmodes[i] the modes of all the
   * buffers naming it at that first one (0 at the others). The second
   * run's buffers of a handle are one too, or it would read as an input
   * what T wrote through another buffer. */
  unsigned *first;     /* nbuf */
  uint8_t *hmodes;     /* nbuf */
  void *args;          /* T's arguments */
  size_t args_size;
  void **pre;          /* nbuf: P's copy of each handle T reads and writes, packed, at its
                          first buffer */
  tdm_access *c_modes; /* nbuf: C's modes (T's outputs TDM_RW, else TDM_R) */
  tdm_access *p_modes; /* nbuf of TDM_R: P's */
  tdm_codelet p_codelet, c_codelet;
  /* T's callback, and how and where T ended (set by note_end) */
  tdm_task_callback callback;
  void *callback_data;
  tdm_status status;
  unsigned worker;
} record;

/* ---- the specification ------------------------------------------------ */

tdm_status tdm__verify_parse(tdm_runtime *rt, const char *text) {
  if (!text || !*text)
    return TDM_OK;
  struct tdm_verify *v = tdm__calloc(rt, 1, sizeof *v);
  if (!v)
    return TDM_ERR_NO_MEMORY;
  int err = pthread_mutex_init(&v->lock, NULL);
  if (!err && (err = pthread_mutex_init(&v->off_lock, NULL)))
    pthread_mutex_destroy(&v->lock);
  if (err) {
    tdm__log(rt, TDM_LOG_ERROR, "pthread_mutex_init: %s", strerror(err));
    free(v);
    return TDM_ERR_SYSTEM;
  }
  rt->verify = v;
  for (const char *s = text; *s;) {
    const char *end = strchr(s, ',');
    if (!end)
      end = s + strlen(s);
    const char *colon = memchr(s, ':', (size_t)(end - s));
    char rate_text[32];
    size_t rlen = colon ? (size_t)(end - colon - 1) : 0;
    double rate = 0;
    char *e = NULL;
    if (colon && colon > s && rlen && rlen < sizeof rate_text && v->n < MAX_SPECS) {
      memcpy(rate_text, colon + 1, rlen);
      rate_text[rlen] = 0;
      rate = strtod(rate_text, &e);
    }
    if (!e || *e || !(rate > 0 && rate <= 1)) {
      tdm__log(rt, TDM_LOG_ERROR,
               "tdm_runtime_create: verify: bad term \"%.*s\" (expected CODELET:RATE, a "
               "codelet's name or * for all, RATE above 0 and at most 1; at most %d terms, "
               "separated by commas)",
               (int)(end - s), s, MAX_SPECS);
      return TDM_ERR_INVALID_ARG; /* freed by tdm__verify_free */
    }
    spec *p = &v->specs[v->n];
    p->name = tdm__malloc(rt, (size_t)(colon - s) + 1);
    if (!p->name)
      return TDM_ERR_NO_MEMORY;
    memcpy(p->name, s, (size_t)(colon - s));
    p->name[colon - s] = 0;
    p->rate = rate;
    v->n++;
    s = *end ? end + 1 : end;
  }
  return TDM_OK;
}

void tdm__verify_free(tdm_runtime *rt) {
  struct tdm_verify *v = rt->verify;
  if (!v)
    return;
  for (unsigned i = 0; i < v->n; i++)
    free(v->specs[i].name);
  pthread_mutex_destroy(&v->lock);
  pthread_mutex_destroy(&v->off_lock);
  free(v);
  rt->verify = NULL;
}

/* ---- comparing -------------------------------------------------------- */

/* An IEEE value as an integer that orders like it: the distance between
 * two of them is the number of values between (units in the last place). */
static int64_t ordered64(double x) {
  int64_t i;
  memcpy(&i, &x, sizeof i);
  return i < 0 ? INT64_MIN - i : i;
}

static int32_t ordered32(float x) {
  int32_t i;
  memcpy(&i, &x, sizeof i);
  return i < 0 ? INT32_MIN - i : i;
}

/* The element at p as a number when tol compares numbers of its size
 * (false: bytes). *ulp: its place in the order of the values of its type
 * (the distance between two is the number of values between them: units
 * in the last place). */
static bool number(const tdm_tolerance *tol, const void *p, size_t size, double *x,
                   int64_t *ulp) {
  if (tol->type == TDM_ELEM_DOUBLE && size == 8) {
    memcpy(x, p, 8);
    *ulp = ordered64(*x);
    return true;
  }
  if (tol->type == TDM_ELEM_FLOAT && size == 4) {
    float f;
    memcpy(&f, p, 4);
    *x = f;
    *ulp = ordered32(f);
    return true;
  }
  return false;
}

/* How far b is from a under tol (its unit: an absolute difference for
 * exact, relative for relative, ulps for ulps); *outside: beyond it. */
static double difference(const tdm_tolerance *tol, const void *a, const void *b, size_t size,
                         bool *outside) {
  double x, y;
  int64_t ux, uy;
  if (!number(tol, a, size, &x, &ux) || !number(tol, b, size, &y, &uy)) { /* bytes: exact */
    *outside = memcmp(a, b, size) != 0;
    return *outside;
  }
  if (isnan(x) || isnan(y)) {
    *outside = !(isnan(x) && isnan(y));
    return *outside ? INFINITY : 0;
  }
  double abs_diff = fabs(x - y), d;
  switch (tol->kind) {
  case TDM_TOL_RELATIVE: {
    double m = fmax(fabs(x), fabs(y));
    d = m > 0 ? abs_diff / m : 0;
    *outside = d > tol->value;
    return d;
  }
  case TDM_TOL_ULPS: { /* exact while the distance fits (it does unless huge) */
    int64_t du;
    d = __builtin_sub_overflow(ux, uy, &du) ? fabs((double)ux - (double)uy) : fabs((double)du);
    *outside = d > tol->value;
    return d;
  }
  default:
    *outside = x != y;
    return abs_diff;
  }
}

static const char *tol_text(const tdm_tolerance *tol, char *buf, size_t size) {
  const char *type = tol->type == TDM_ELEM_DOUBLE  ? "doubles"
                     : tol->type == TDM_ELEM_FLOAT ? "floats"
                                                   : "bytes";
  if (tol->kind == TDM_TOL_RELATIVE)
    snprintf(buf, size, "relative %g, %s", tol->value, type);
  else if (tol->kind == TDM_TOL_ULPS)
    snprintf(buf, size, "%g ulps, %s", tol->value, type);
  else
    snprintf(buf, size, "exact, %s", type);
  return buf;
}

/* ---- the three tasks ------------------------------------------------------ */

static void record_unref(record *r) {
  if (atomic_fetch_sub(&r->refs, 1) != 1)
    return;
  for (unsigned i = 0; r->pre && i < r->nbuf; i++)
    free(r->pre[i]);
  free(r->pre);
  free(r->modes);
  free(r->first);
  free(r->hmodes);
  free(r->args);
  free(r->c_modes);
  free(r->p_modes);
  free(r);
}

static size_t row_bytes(const tdm_buffer *b) {
  return b->ny * b->elem_size;
}

/* Copies b's elements into dst, packed (rows of ny elements). */
static void pack(void *dst, const tdm_buffer *b) {
  for (size_t r = 0; r < b->nx; r++)
    memcpy((char *)dst + r * row_bytes(b), (const char *)b->ptr + r * b->ld * b->elem_size,
           row_bytes(b));
}

/* P: the handles T reads and writes, as they are before T. */
static void keep_inputs(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  record *r = *(record *const *)args;
  for (unsigned i = 0, j = 0; i < r->nbuf; i++) {
    if (r->hmodes[i] != TDM_RW)
      continue;
    r->pre[i] = malloc(b[j].nx * row_bytes(&b[j]) + 1);
    if (r->pre[i])
      pack(r->pre[i], &b[j]);
    j++;
  }
}

/* Where the largest difference between T's outputs (b) and the second
 * run's (mine, packed) lies, among the elements outside the tolerance. */
typedef struct worst {
  uint64_t outside, total;
  double d;
  unsigned buf;
  size_t row, col;
} worst;

static const char *element(const tdm_buffer *b, size_t ld, const void *base, size_t row,
                           size_t col) {
  return (const char *)base + (row * ld + col) * b->elem_size;
}

static worst compare_outputs(const record *r, const tdm_buffer *b, void *const *mine) {
  worst w = {.d = -1};
  for (unsigned i = 0; i < r->ncompared; i++) {
    if (!(r->hmodes[i] & TDM_W)) /* not an output, or compared at its first buffer */
      continue;
    for (size_t row = 0; row < b[i].nx; row++)
      for (size_t c = 0; c < b[i].ny; c++) {
        bool out;
        double d = difference(&r->tol, element(&b[i], b[i].ld, b[i].ptr, row, c),
                              element(&b[i], b[i].ny, mine[i], row, c), b[i].elem_size, &out);
        w.total++;
        w.outside += out;
        if (out && d > w.d)
          w = (worst){w.outside, w.total, d, i, row, c};
      }
  }
  return w;
}

/* Logs a comparison with elements outside the tolerance. */
static void report(const record *r, const tdm_buffer *b, void *const *mine, const worst *w) {
  tdm_runtime *rt = r->rt;
  unsigned k = r->worker - rt->nworkers;
  const tdm_buffer *wb = &b[w->buf];
  double x, y;
  int64_t ux, uy;
  char tol[64], where[160];
  if (number(&r->tol, element(wb, wb->ld, wb->ptr, w->row, w->col), wb->elem_size, &x, &ux) &&
      number(&r->tol, element(wb, wb->ny, mine[w->buf], w->row, w->col), wb->elem_size, &y,
             &uy))
    snprintf(where, sizeof where, "the largest difference %g at buffer %u, element (%zu, %zu) "
             "(%.*g against %.*g)", w->d, w->buf, w->row, w->col, wb->elem_size == 4 ? 9 : 17,
             x, wb->elem_size == 4 ? 9 : 17, y);
  else /* bytes: the first that differs */
    snprintf(where, sizeof where, "the first difference at buffer %u, element (%zu, %zu)",
             w->buf, w->row, w->col);
  tdm__log(rt, TDM_LOG_ERROR,
           "verify: codelet %s: device %u (%s) and the CPU variant differ in %llu of %llu "
           "elements (tolerance: %s); %s. A usual cause: the device contracts a * b + c into "
           "one fused operation; #pragma OPENCL FP_CONTRACT OFF in the kernel makes it round "
           "as the CPU does",
           r->name, rt->device_of[k], rt->devices[rt->device_of[k]].name,
           (unsigned long long)w->outside, (unsigned long long)w->total,
           tol_text(&r->tol, tol, sizeof tol), where);
}

/* A mismatch of r on device worker k, whose results were replaced: to
 * report; the codelet's variant goes out there at the DISABLE_AFTER'th. */
static void mismatch_on(record *r, unsigned k) {
  tdm_runtime *rt = r->rt;
  struct tdm_verify *v = rt->verify;
  bool out = false;
  unsigned seen = 0;
  TDM_PTHREAD(rt, pthread_mutex_lock(&v->off_lock));
  if (!v->unreported++)
    snprintf(v->first, sizeof v->first, "%s", r->name);
  off_entry *e = NULL;
  for (unsigned i = 0; i < v->noff && !e; i++)
    if (!strcmp(v->off[i].name, r->name))
      e = &v->off[i];
  if (!e && v->noff < MAX_OFF) {
    e = &v->off[v->noff++];
    snprintf(e->name, sizeof e->name, "%s", r->name);
  }
  if (e && k < TDM_MAX_DEVICE_WORKERS) {
    seen = e->count[k] < UINT8_MAX ? ++e->count[k] : e->count[k];
    if (seen >= DISABLE_AFTER && !(e->off >> k & 1)) {
      e->off |= UINT64_C(1) << k;
      out = true;
    }
  }
  atomic_store(&v->any_off, v->noff);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&v->off_lock));
  if (out)
    tdm__log(rt, TDM_LOG_ERROR, "verify: codelet %s: its OpenCL variant is no longer used on "
             "device %u (%s): its results differed from the CPU variant's %u times",
             r->name, rt->device_of[k], rt->devices[rt->device_of[k]].name, seen);
}

void tdm__verify_mask(tdm_runtime *rt, tdm_task *t) {
  struct tdm_verify *v = rt->verify;
  const char *name = t->codelet->name;
  if (!atomic_load_explicit(&v->any_off, memory_order_relaxed) || !name)
    return;
  uint64_t off = 0;
  TDM_PTHREAD(rt, pthread_mutex_lock(&v->off_lock));
  for (unsigned i = 0; i < v->noff; i++)
    if (!strcmp(v->off[i].name, name))
      off = v->off[i].off;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&v->off_lock));
  if (t->dev_mask & off)
    tdm__task_without(rt, t, off);
}

bool tdm__verify_report_mismatches(tdm_runtime *rt, const char *what) {
  struct tdm_verify *v = rt->verify;
  TDM_PTHREAD(rt, pthread_mutex_lock(&v->off_lock));
  uint64_t n = v->unreported;
  v->unreported = 0;
  char first[64];
  snprintf(first, sizeof first, "%s", v->first);
  TDM_PTHREAD(rt, pthread_mutex_unlock(&v->off_lock));
  if (n)
    tdm__log(rt, TDM_LOG_ERROR, "%s: %llu task%s ran on a device whose results differed from "
             "the CPU variant's, which were kept (the first: codelet %s)", what,
             (unsigned long long)n, n == 1 ? "" : "s", first);
  return n != 0;
}

/* Writes T's CPU results (mine, packed) over its device's (b). */
static void keep_cpu_results(const record *r, const tdm_buffer *b, void *const *mine) {
  for (unsigned i = 0; i < r->nbuf; i++) {
    if (!(r->hmodes[i] & TDM_W))
      continue;
    for (size_t row = 0; row < b[i].nx; row++)
      memcpy((char *)b[i].ptr + row * b[i].ld * b[i].elem_size,
             (const char *)mine[i] + row * row_bytes(&b[i]), row_bytes(&b[i]));
  }
}

/* C: T's CPU variant again, into buffers of its own, compared with what
 * T produced (b: T's buffers, on the host); on a mismatch, the CPU's
 * results replace T's. */
static void compare(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  record *r = *(record *const *)args;
  struct tdm_verify *v = r->rt->verify;
  if (r->status != TDM_OK || r->worker < r->rt->nworkers) {
    /* it failed, or ran on the CPU workers: no other class to compare */
    atomic_fetch_add_explicit(&v->skipped, 1, memory_order_relaxed);
    return;
  }
  tdm_buffer *views = malloc(r->nbuf * sizeof *views);
  void **mine = calloc(r->nbuf, sizeof *mine);
  bool ok = views && mine;
  for (unsigned i = 0; ok && i < r->nbuf; i++) {
    views[i] = b[i];
    unsigned f = r->first[i];
    if (!(r->hmodes[f] & TDM_W)) /* an input no one changed yet */
      continue;
    if (f == i && r->hmodes[i] == TDM_RW) {
      mine[i] = r->pre[i]; /* T's input, which T overwrote */
      r->pre[i] = NULL;
    } else if (f == i) {
      mine[i] = calloc(1, b[i].nx * row_bytes(&b[i]) + 1);
    }
    ok = mine[f] != NULL;
    views[i].ptr = mine[f];
    views[i].ld = b[i].ny;
  }
  if (!ok) {
    tdm__log(r->rt, TDM_LOG_WARNING, "verify: codelet %s: out of memory, not compared",
             r->name);
    atomic_fetch_add_explicit(&v->skipped, 1, memory_order_relaxed);
  } else {
    /* as the first run: no arguments, NULL (tandem.h) */
    TDM_USER_CODE(r->cpu_fn(views, r->args_size ? r->args : NULL, r->args_size));
    worst w = compare_outputs(r, b, mine);
    atomic_fetch_add_explicit(&v->compared, 1, memory_order_relaxed);
    if (w.outside) {
      atomic_fetch_add_explicit(&v->mismatched, 1, memory_order_relaxed);
      report(r, b, mine, &w);
      keep_cpu_results(r, b, mine);
      mismatch_on(r, r->worker - r->rt->nworkers);
    }
  }
  for (unsigned i = 0; mine && i < r->nbuf; i++)
    free(mine[i]);
  free(mine);
  free(views);
}

/* T's callback: where and how T ended, then the application's. */
static void note_end(void *data) {
  record *r = data;
  r->status = tdm_callback_status();
  r->worker = tdm__callback_worker;
  if (r->callback)
    TDM_USER_CODE(r->callback(r->callback_data));
}

/* P's and C's: their reference on the record. */
static void p_end(void *data) {
  record_unref(data);
}

/* A C that did not run (cancelled: T failed) counts as not compared. */
static void c_end(void *data) {
  record *r = data;
  if (tdm_callback_status() != TDM_OK)
    atomic_fetch_add_explicit(&r->rt->verify->skipped, 1, memory_order_relaxed);
  record_unref(r);
}

/* ---- submission ------------------------------------------------------------ */

bool tdm__verify_internal(const tdm_task *t) {
  return t->codelet->cpu_fn == compare || t->codelet->cpu_fn == keep_inputs;
}

/* Whether T (not yet submitted) is to be verified. */
static bool sampled(struct tdm_verify *v, const tdm_task *t) {
  const char *name = t->codelet->name;
  if (!t->codelet->cpu_fn || t->kind != TDM_TASK_CODELET || !t->dev_mask)
    return false; /* no CPU variant to compare with, or no device to run it */
  bool writes = false; /* nothing to compare otherwise (and C, reading
                        * only T's inputs, would not wait for T) */
  const uint8_t *modes = tdm__task_modes(t);
  for (unsigned i = 0; i < t->nbuf; i++)
    writes |= (modes[i] & TDM_W) != 0;
  if (!writes)
    return false;
  for (unsigned i = 0; i < v->n; i++) {
    spec *s = &v->specs[i];
    if (strcmp(s->name, "*") && (!name || strcmp(s->name, name)))
      continue;
    uint64_t n = atomic_fetch_add_explicit(&s->seen, 1, memory_order_relaxed);
    /* evenly spread: the tasks where n * rate crosses a whole number */
    return floor((double)(n + 1) * s->rate) > floor((double)n * s->rate);
  }
  return false;
}

/* A helper task (P or C) of r on T's handles hs (P: each handle T reads
 * and writes, once; C: every buffer), on the CPU workers. */
static tdm_status helper(record *r, tdm_codelet *cl, tdm_cpu_fn fn, const char *what,
                         tdm_handle *const *hs, unsigned n) {
  tdm_handle **mine = malloc(n * sizeof *mine);
  if (!mine)
    return TDM_ERR_NO_MEMORY;
  unsigned k = 0;
  for (unsigned i = 0; i < r->nbuf; i++)
    if (fn == compare || r->hmodes[i] == TDM_RW)
      mine[k++] = hs[i];
  *cl = (tdm_codelet){.name = what, .cpu_fn = fn, .nbuffers = k};
  tdm_task_desc d = {.codelet = cl, .args = &r, .args_size = sizeof r,
                     .callback = fn == compare ? c_end : p_end, .callback_data = r};
  /* P reads; C reads T's inputs and reads and writes its outputs */
  if (k <= TDM_MAX_BUFFERS) {
    for (unsigned i = 0; i < k; i++)
      cl->modes[i] = fn == compare ? r->c_modes[i] : TDM_R;
    memcpy(d.handles, mine, k * sizeof *mine);
  } else {
    cl->dyn_modes = fn == compare ? r->c_modes : r->p_modes;
    d.dyn_handles = mine;
  }
  tdm_task *t = NULL;
  tdm_status st = tdm_task_create(r->rt, &d, &t);
  free(mine);
  if (st)
    return st;
  t->dev_mask = 0; /* the CPU workers' */
  t->device_ok = false;
  atomic_fetch_add(&r->refs, 1); /* released by its callback */
  st = tdm_task_submit(t);
  if (st)
    atomic_fetch_sub(&r->refs, 1);
  tdm_task_release(t);
  return st;
}

/* The runtime whose mode's lock this thread holds (tdm__verify_held). */
static _Thread_local const tdm_runtime *holder TDM_TLS_MODEL;

void *tdm__verify_before(tdm_task *t) {
  tdm_runtime *rt = t->rt;
  struct tdm_verify *v = rt->verify;
  TDM_PTHREAD(rt, pthread_mutex_lock(&v->lock)); /* held until tdm__verify_after */
  holder = rt;
  /* Not one that accumulates: its submission binds it to a lane. (The
   * lanes of a handle it uses otherwise are combined when the first of
   * P and T is submitted: P then keeps what T reads.) */
  if (t->redux || !sampled(v, t))
    return NULL;
  record *r = tdm__calloc(rt, 1, sizeof *r);
  unsigned n = t->nbuf;
  if (r) {
    r->modes = tdm__malloc(rt, n + 1);
    r->hmodes = tdm__calloc(rt, n + 1, 1);
    r->first = tdm__malloc(rt, (n + 1) * sizeof *r->first);
    r->pre = tdm__calloc(rt, n + 1, sizeof *r->pre);
    r->c_modes = tdm__malloc(rt, (n + 1) * sizeof *r->c_modes);
    r->p_modes = tdm__malloc(rt, (n + 1) * sizeof *r->p_modes);
    r->args = tdm__malloc(rt, t->args_size + 1);
  }
  if (!r || !r->modes || !r->hmodes || !r->first || !r->pre || !r->c_modes || !r->p_modes ||
      !r->args) {
    if (r)
      atomic_init(&r->refs, 1);
    if (r)
      record_unref(r);
    tdm__log(rt, TDM_LOG_WARNING, "verify: out of memory: a task not verified");
    return NULL;
  }
  atomic_init(&r->refs, 1);
  r->rt = rt;
  snprintf(r->name, sizeof r->name, "%s", tdm__codelet_name(t));
  r->cpu_fn = t->codelet->cpu_fn;
  const tdm_codelet *cl = t->codelet;
  r->tol = cl->struct_size && cl->struct_size < offsetof(tdm_codelet, tolerance) +
                                                    sizeof cl->tolerance
               ? (tdm_tolerance){TDM_TOL_EXACT, TDM_ELEM_BYTES, 0}
               : cl->tolerance;
  r->nbuf = n;
  r->ncompared = t->chunk && tdm__chunk_tail(t).group ? n - 1 : n;
  memcpy(r->modes, tdm__task_modes(t), n);
  for (unsigned i = 0; i < n; i++) {
    r->c_modes[i] = r->modes[i] & TDM_W ? TDM_RW : TDM_R;
    r->p_modes[i] = TDM_R;
  }
  r->args_size = t->args_size;
  if (t->args_size)
    memcpy(r->args, t->args, t->args_size);
  tdm_handle *const *ths = tdm__task_handles(t);
  for (unsigned i = 0; i < n; i++) { /* by pairs: a sampled task only */
    unsigned f = 0;
    while (ths[f] != ths[i])
      f++;
    r->first[i] = f;
    r->hmodes[f] |= r->modes[i] & TDM_RW; /* (TDM_COMMUTE's is TDM_RW's here) */
  }
  unsigned rw = 0;
  for (unsigned i = 0; i < n; i++)
    rw += r->hmodes[i] == TDM_RW;
  if (rw && helper(r, &r->p_codelet, keep_inputs, "tandem-verify-inputs", ths, rw) != TDM_OK) {
    tdm__log(rt, TDM_LOG_WARNING, "verify: codelet %s: a task not verified (no room)", r->name);
    record_unref(r);
    return NULL;
  }
  r->callback = t->callback;
  r->callback_data = t->callback_data;
  t->callback = note_end;
  t->callback_data = r;
  atomic_fetch_add(&t->refs, 1); /* its handles, for C (tdm__verify_after) */
  atomic_fetch_add_explicit(&v->sampled, 1, memory_order_relaxed);
  return r;
}

bool tdm__verify_held(const tdm_runtime *rt) {
  return holder == rt;
}

void tdm__verify_after(tdm_runtime *rt, void *rec, tdm_task *t, bool submitted) {
  struct tdm_verify *v = rt->verify;
  record *r = rec;
  if (r && submitted && helper(r, &r->c_codelet, compare, "tandem-verify",
                               tdm__task_handles(t), r->nbuf) != TDM_OK) {
    tdm__log(rt, TDM_LOG_WARNING, "verify: codelet %s: a task not verified (no room)", r->name);
    atomic_fetch_add_explicit(&v->skipped, 1, memory_order_relaxed);
  }
  holder = NULL;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&v->lock));
  if (r) {
    tdm__task_unref(t);
    record_unref(r);
  }
}

tdm_status tdm_runtime_verify_counts(const tdm_runtime *rt, tdm_verify_counts *out) {
  if (!rt || !out || out->struct_size < sizeof *out)
    return TDM_ERR_INVALID_ARG;
  const struct tdm_verify *v = rt->verify;
  out->sampled = v ? atomic_load(&v->sampled) : 0;
  out->compared = v ? atomic_load(&v->compared) : 0;
  out->mismatched = v ? atomic_load(&v->mismatched) : 0;
  out->skipped = v ? atomic_load(&v->skipped) : 0;
  return TDM_OK;
}

void tdm__verify_report(tdm_runtime *rt) {
  const struct tdm_verify *v = rt->verify;
  if (!v || !atomic_load(&v->sampled))
    return;
  tdm__log(rt, TDM_LOG_INFO,
           "verify: %llu tasks sampled, %llu compared with their CPU variant, %llu differed, "
           "%llu not compared (ran on the CPU workers, or failed)",
           (unsigned long long)atomic_load(&v->sampled),
           (unsigned long long)atomic_load(&v->compared),
           (unsigned long long)atomic_load(&v->mismatched),
           (unsigned long long)atomic_load(&v->skipped));
}
