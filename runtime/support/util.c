/* Small shared pieces: the spinlock's slow path, growable task arrays,
 * FNV-1a, the median. */
#include "support.h"

#include <sched.h>
#include <stdlib.h>

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

int tdm__taskvec_reserve(tdm_runtime *rt, tdm_taskvec *v, unsigned cap) {
  if (cap <= v->cap)
    return 0;
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
  return 0;
}

int tdm__taskvec_push(tdm_runtime *rt, tdm_taskvec *v, tdm_task *t) {
  if (v->n == v->cap && tdm__taskvec_reserve(rt, v, v->cap * 2))
    return -1;
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
