/* Small shared pieces: status strings, logging, the spinlock's slow path,
 * growable task arrays. */
#include "../internal.h"

#include <pthread.h>

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

const char *tdm_version(unsigned *major, unsigned *minor, unsigned *patch) {
  if (major)
    *major = TDM_VERSION_MAJOR;
  if (minor)
    *minor = TDM_VERSION_MINOR;
  if (patch)
    *patch = TDM_VERSION_PATCH;
  return TDM_VERSION;
}

const char *tdm_strerror(tdm_status status) {
  switch (status) {
#define XX(name, value, msg)                                                   \
  case TDM_##name:                                                             \
    return msg;
    TDM_STATUS_MAP(XX)
#undef XX
  }
  return "unknown status";
}

const char *tdm_status_name(tdm_status status) {
  switch (status) {
#define XX(name, value, msg)                                                   \
  case TDM_##name:                                                             \
    return #name;
    TDM_STATUS_MAP(XX)
#undef XX
  }
  return "UNKNOWN";
}

void tdm__vlog(tdm_log_fn fn, void *data, tdm_log_level max,
               tdm_log_level level, const char *fmt, va_list ap) {
  if (!fn || level > max)
    return;
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fn(data, level, msg);
}

/* The log where the environment asked for messages (any TANDEM_*
 * variable set) and the program installed no callback: a line each on
 * standard error, "tandem: " first, written whole by one call. */
void tdm__log_stderr(void *data, tdm_log_level level, const char *msg) {
  (void)data;
  static const char *const names[] = {"error: ", "warning: ", "", ""};
  fprintf(stderr, "tandem: %s%s\n", names[level & 3], msg);
}

void tdm__log(const tdm_runtime *rt, tdm_log_level level, const char *fmt, ...) {
  if (!rt)
    return;
  va_list ap;
  va_start(ap, fmt);
  tdm__vlog(rt->cfg.log_fn, rt->cfg.log_data, rt->cfg.log_level, level, fmt, ap);
  va_end(ap);
}

void tdm__name_thread(const tdm_runtime *rt, const char *fmt, ...) {
  char name[16]; /* what the kernel keeps: 15 characters */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  int err = pthread_setname_np(pthread_self(), name);
  if (err) /* only a name: the thread works without it */
    tdm__log(rt, TDM_LOG_WARNING, "thread %s: could not be named (error %d)", name, err);
}

void tdm__spin_lock_slow(tdm_spinlock *l) {
  for (unsigned spins = 0;; spins++) {
    /* relaxed: test before test-and-set, to spin on a shared cache line */
    while (atomic_load_explicit(&l->locked, memory_order_relaxed)) {
      if (spins++ < 64)
        tdm__cpu_relax();
      else
        sched_yield(); /* the holder may have been preempted */
    }
    /* acquire: as in tdm__spin_lock */
    if (!atomic_exchange_explicit(&l->locked, 1, memory_order_acquire))
      return;
  }
}

void tdm__taskvec_init(tdm_taskvec *v) {
  v->items = v->inline_items;
  v->n = 0;
  v->cap = 2;
}

int tdm__taskvec_push(tdm_runtime *rt, tdm_taskvec *v, tdm_task *t) {
  if (v->n == v->cap) {
    unsigned cap = v->cap * 2;
    tdm_task **items;
    if (v->items == v->inline_items) {
      items = tdm__malloc(rt, cap * sizeof(*items));
      if (items)
        for (unsigned i = 0; i < v->n; i++)
          items[i] = v->items[i];
    } else {
      items = tdm__realloc(rt, v->items, cap * sizeof(*items));
    }
    if (!items)
      return -1;
    v->items = items;
    v->cap = cap;
  }
  v->items[v->n++] = t;
  return 0;
}

void tdm__taskvec_free(tdm_taskvec *v) {
  if (v->items != v->inline_items)
    free(v->items);
  tdm__taskvec_init(v);
}

void tdm__taskvec_move(tdm_taskvec *dst, tdm_taskvec *src) {
  *dst = *src;
  if (src->items == src->inline_items)
    dst->items = dst->inline_items;
  tdm__taskvec_init(src);
}

static bool injected_failure(tdm_runtime *rt) {
  if (!rt) /* the virtual-time driver's coherence: no runtime */
    return false;
  /* relaxed: a test seam; the countdown is armed before the calls it
   * is meant to affect, from the same thread */
  if (atomic_load_explicit(&rt->alloc_countdown, memory_order_relaxed) < 0)
    return false;
  if (atomic_fetch_sub_explicit(&rt->alloc_countdown, 1, memory_order_relaxed) != 0)
    return false;
  tdm__log(rt, TDM_LOG_DEBUG, "allocation failure injected");
  return true;
}

void tdm__fail_allocation(tdm_runtime *rt, long n) {
  atomic_store_explicit(&rt->alloc_countdown, n < 0 ? -1 : n, memory_order_relaxed);
}

void tdm__faults_set(tdm_runtime *rt, unsigned kind, double p, uint64_t seed) {
  double f = p <= 0 ? 0 : p >= 1 ? 4294967295.0 : p * 4294967296.0;
  atomic_store_explicit(&rt->fault_draws, seed, memory_order_relaxed);
  atomic_store_explicit(&rt->fault_p[kind], (uint32_t)f, memory_order_relaxed);
}

static const char *const fault_names[TDM_NFAULTS] = {"launch", "run", "copy", "alloc",
                                                     "hang"};

bool tdm__parse_seconds(const char *s, double max, double *out) {
  static const char *const units[] = {"s", "ms", "us"};
  static const double scale[] = {1, 1e-3, 1e-6};
  char *e;
  errno = 0;
  double t = strtod(s, &e);
  if (errno || e == s || *s < '0' || *s > '9' || !(t >= 0 && t <= 1e6))
    return false;
  for (unsigned u = 0; u < 3; u++)
    if (!strcmp(e, units[u]) && t * scale[u] <= max) {
      *out = t * scale[u];
      return true;
    }
  return false;
}

/* device=D:lost_at=T or device=D:lost_after=N (the text after
 * "device="). */
static bool lost_term(tdm_runtime *rt, const char *s) {
  const char *colon = strchr(s, ':');
  char digits[16];
  uint64_t d, n = 0;
  double t = 0;
  if (!colon || (size_t)(colon - s) >= sizeof digits || rt->nlost == TDM_MAX_LOST)
    return false;
  memcpy(digits, s, (size_t)(colon - s));
  digits[colon - s] = 0;
  if (!tdm__parse_count(digits, 63, &d))
    return false;
  if (!strncmp(colon + 1, "lost_at=", 8)) {
    if (!tdm__parse_seconds(colon + 9, 1e6, &t))
      return false;
  } else if (strncmp(colon + 1, "lost_after=", 11) ||
             !tdm__parse_count(colon + 12, UINT64_MAX, &n) || !n) {
    return false;
  }
  rt->lost[rt->nlost].device = (unsigned)d;
  rt->lost[rt->nlost].at_ns = tdm__ns_of(t);
  rt->lost[rt->nlost].after = n;
  atomic_init(&rt->lost[rt->nlost].launches, 0);
  rt->nlost++;
  return true;
}

/* One term of a faults specification, between s and end. */
static bool fault_term(tdm_runtime *rt, const char *s, const char *end, uint64_t *seed) {
  size_t n = (size_t)(end - s);
  char term[64];
  if (n >= sizeof term)
    return false;
  memcpy(term, s, n);
  term[n] = 0;
  if (!strncmp(term, "seed=", 5))
    return tdm__parse_count(term + 5, UINT64_MAX, seed);
  if (!strncmp(term, "device=", 7))
    return lost_term(rt, term + 7);
  char *colon = strchr(term, ':');
  if (!colon)
    return false;
  *colon = 0;
  unsigned kind = TDM_NFAULTS;
  for (unsigned k = 0; k < TDM_NFAULTS; k++)
    if (!strcmp(term, fault_names[k]))
      kind = k;
  const char *what = colon + 1;
  if (kind == TDM_NFAULTS)
    return false;
  if (!strncmp(what, "nth=", 4)) {
    uint64_t nth;
    if (!tdm__parse_count(what + 4, UINT64_MAX, &nth) || !nth)
      return false;
    rt->fault_nth[kind] = nth;
    return true;
  }
  if (strncmp(what, "p=", 2))
    return false;
  char *e;
  errno = 0;
  double p = strtod(what + 2, &e);
  if (errno || e == what + 2 || *e || !(p >= 0 && p <= 1))
    return false;
  tdm__faults_set(rt, kind, p, 0);
  return true;
}

tdm_status tdm__faults_parse(tdm_runtime *rt, const char *spec) {
  uint64_t seed = 1;
  for (const char *s = spec; s && *s;) {
    const char *end = strchr(s, ';');
    if (!end)
      end = s + strlen(s);
    if (end > s && !fault_term(rt, s, end, &seed)) {
      tdm__log(rt, TDM_LOG_ERROR,
               "tdm_runtime_create: faults: bad term \"%.*s\" (expected KIND:p=X or "
               "KIND:nth=N with KIND launch, run, copy, alloc or hang, seed=S, "
               "device=D:lost_at=T or device=D:lost_after=N; X from 0 to 1, N > 0, T a "
               "time in s, ms or us; at most %d lost devices)",
               (int)(end - s), s, TDM_MAX_LOST);
      return TDM_ERR_INVALID_ARG;
    }
    s = *end ? end + 1 : end;
  }
  atomic_store_explicit(&rt->fault_draws, seed, memory_order_relaxed);
  return TDM_OK;
}

/* Whether device worker k's device was made to stop working by now (an
 * operation of that kind starts there). */
static bool lost_now(tdm_runtime *rt, unsigned kind, unsigned k) {
  for (unsigned i = 0; i < rt->nlost; i++) {
    if (rt->lost[i].device != rt->device_of[k])
      continue;
    if (rt->lost[i].after) { /* at its nth launch */
      uint64_t n = kind == TDM_FAULT_LAUNCH
                       ? atomic_fetch_add_explicit(&rt->lost[i].launches, 1,
                                                   memory_order_relaxed) + 1
                       : atomic_load_explicit(&rt->lost[i].launches, memory_order_relaxed);
      if (n < rt->lost[i].after)
        continue;
    } else if (tdm__now_ns() - rt->trace_t0 < rt->lost[i].at_ns) {
      continue;
    }
    uint64_t bit = UINT64_C(1) << i;
    if (!(atomic_fetch_or(&rt->lost_said, bit) & bit))
      tdm__log(rt, TDM_LOG_WARNING, "device %u stops working (injected fault)",
               rt->lost[i].device);
    return true;
  }
  return false;
}

/* A fault of that kind injected now: logged, counted. */
static tdm_status injected(tdm_runtime *rt, unsigned kind) {
  tdm__log(rt, TDM_LOG_DEBUG, "device %s failure injected", fault_names[kind]);
  atomic_fetch_add_explicit(&rt->faults_injected, 1, memory_order_relaxed);
  return TDM_ERR_SYSTEM;
}

tdm_status tdm__fault(tdm_runtime *rt, unsigned kind, unsigned k) {
  if (TDM_UNLIKELY(rt->nlost) && lost_now(rt, kind, k))
    return TDM_ERR_DEVICE_LOST;
  /* a hung device (watchdog.c) does nothing more */
  if (TDM_UNLIKELY(atomic_load_explicit(&rt->hung, memory_order_relaxed) >> k & 1))
    return TDM_ERR_DEVICE_LOST;
  uint64_t nth = rt->fault_nth[kind];
  if (nth && (atomic_fetch_add_explicit(&rt->fault_count[kind], 1, memory_order_relaxed) + 1) %
                     nth == 0)
    return injected(rt, kind);
  uint32_t p = atomic_load_explicit(&rt->fault_p[kind], memory_order_relaxed);
  if (!p)
    return TDM_OK;
  /* the draws of all threads from one sequence (SplitMix64's steps) */
  uint64_t x = atomic_fetch_add_explicit(&rt->fault_draws, 0x9e3779b97f4a7c15ull,
                                         memory_order_relaxed);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (uint32_t)(x >> 32) >= p ? TDM_OK : injected(rt, kind);
}

void *tdm__malloc(tdm_runtime *rt, size_t size) {
  return injected_failure(rt) ? NULL : malloc(size);
}

void *tdm__calloc(tdm_runtime *rt, size_t n, size_t size) {
  return injected_failure(rt) ? NULL : calloc(n, size);
}

void *tdm__realloc(tdm_runtime *rt, void *p, size_t size) {
  return injected_failure(rt) ? NULL : realloc(p, size);
}

void *tdm__zalloc_aligned(size_t align, size_t size) {
  if (align < sizeof(void *))
    align = sizeof(void *);
  size = (size + align - 1) / align * align; /* aligned_alloc wants a multiple */
  void *p = aligned_alloc(align, size ? size : align);
  if (p)
    memset(p, 0, size);
  return p;
}

void *tdm__aligned_alloc(tdm_runtime *rt, size_t align, size_t size) {
  return injected_failure(rt) ? NULL : aligned_alloc(align, size);
}

/* Memory aligned for devices that share the host's memory: OpenCL
 * implementations use CL_MEM_USE_HOST_PTR memory in place when it is
 * page-aligned and its size a multiple of a cache line (Intel requires
 * 4096 and 64 bytes); a whole number of pages satisfies both. */
void *tdm_malloc(size_t size) {
  const size_t page = 4096;
  if (size == 0 || size > SIZE_MAX - page)
    return NULL;
  return aligned_alloc(page, (size + page - 1) / page * page);
}

void tdm_free(void *ptr) {
  free(ptr);
}

/* FNV-1a, 64 bits (Fowler, Noll and Vo): checksums of cache and model
 * files, and names for cache entries. Start with TDM_FNV_OFFSET. */
uint64_t tdm__fnv1a(const void *data, size_t n, uint64_t h) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double tdm__median(double *v, unsigned n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
