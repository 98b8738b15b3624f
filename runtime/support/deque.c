/* Chase–Lev deque after Lê et al., PPoPP 2013 (Fig. 1, the C11 version).
 * See deque.h for the design. */
#include "deque.h"

#include <stdlib.h>

#if defined(__SANITIZE_THREAD__)
_Atomic int tdm__tsan_fence_word;
#endif

static tdm_ring *ring_new(int64_t capacity) {
  tdm_ring *r = malloc(sizeof(*r) + (size_t)capacity * sizeof(r->slots[0]));
  if (!r)
    return NULL;
  r->mask = capacity - 1;
  r->retired_next = NULL;
  for (int64_t i = 0; i < capacity; i++)
    atomic_init(&r->slots[i], NULL);
  return r;
}

int tdm__deque_init(tdm_deque *d, size_t capacity) {
  int64_t cap = 16;
  while ((size_t)cap < capacity)
    cap <<= 1;
  tdm_ring *r = ring_new(cap);
  if (!r)
    return -1;
  atomic_init(&d->top, 0);
  atomic_init(&d->bottom, 0);
  atomic_init(&d->ring, r);
  d->top_seen = 0;
  d->retired = NULL;
  return 0;
}

void tdm__deque_destroy(tdm_deque *d) {
  free(atomic_load_explicit(&d->ring, memory_order_relaxed));
  while (d->retired) {
    tdm_ring *next = d->retired->retired_next;
    free(d->retired);
    d->retired = next;
  }
}

static tdm_ring *grow(tdm_deque *d, tdm_ring *old, int64_t top, int64_t bottom) {
  tdm_ring *r = ring_new(2 * (old->mask + 1));
  if (!r)
    return NULL;
  for (int64_t i = top; i < bottom; i++)
    atomic_store_explicit(&r->slots[i & r->mask],
                          atomic_load_explicit(&old->slots[i & old->mask],
                                               memory_order_relaxed),
                          memory_order_relaxed);
  /* release: a thief that loads the new ring must see its slots filled */
  atomic_store_explicit(&d->ring, r, memory_order_release);
  old->retired_next = d->retired;
  d->retired = old;
  return r;
}

int tdm__deque_push(tdm_deque *d, void *item) {
  /* relaxed: only the owner writes bottom */
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
  tdm_ring *r = atomic_load_explicit(&d->ring, memory_order_relaxed);
  /* top only grows, so the top seen last bounds the size from above: the
   * owner reads top (a line the thieves write) only when the ring looks
   * full, not at every push. acquire: pairs with the thieves' CAS on top,
   * so a slot reused has been read by the thief that took it (a slot is
   * reused only below a top read this way). */
  if (b - d->top_seen > r->mask) {
    int64_t t = d->top_seen = atomic_load_explicit(&d->top, memory_order_acquire);
    if (b - t > r->mask) {
      r = grow(d, r, t, b);
      if (!r)
        return -1;
    }
  }
  atomic_store_explicit(&r->slots[b & r->mask], item, memory_order_relaxed);
  /* release: publishes the slot (and the task it points to) to thieves;
   * a release store rather than the paper's release fence, same cost on
   * x86 and visible to ThreadSanitizer */
  atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
  return 0;
}

void *tdm__deque_pop(tdm_deque *d) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
  tdm_ring *r = atomic_load_explicit(&d->ring, memory_order_relaxed);
  atomic_store_explicit(&d->bottom, b, memory_order_relaxed);
  /* seq_cst: the store of bottom must be visible before we read top, or a
   * thief and the owner could both take the last item */
  tdm__fence_seq_cst();
  int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
  void *item = NULL;
  if (t <= b) {
    item = atomic_load_explicit(&r->slots[b & r->mask], memory_order_relaxed);
    if (t == b) {
      /* last item: race the thieves for it */
      if (!atomic_compare_exchange_strong_explicit(
              &d->top, &t, t + 1, memory_order_seq_cst, memory_order_relaxed))
        item = NULL;
      atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
    }
  } else {
    atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
  }
  return item;
}

void *tdm__deque_steal(tdm_deque *d) {
  /* acquire: see the slots as of the owner's last update of top */
  int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
  /* seq_cst: orders the load of top before the load of bottom (pairs with
   * the fence in pop) */
  tdm__fence_seq_cst();
  /* acquire: pairs with the release store in push, so the item is visible */
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_acquire);
  if (t >= b)
    return NULL;
  /* consume in the paper; acquire is the portable equivalent */
  tdm_ring *r = atomic_load_explicit(&d->ring, memory_order_acquire);
  void *item = atomic_load_explicit(&r->slots[t & r->mask], memory_order_relaxed);
  if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1,
                                               memory_order_seq_cst,
                                               memory_order_relaxed))
    return NULL;
  return item;
}

int64_t tdm__deque_size(tdm_deque *d) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
  int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
  return b > t ? b - t : 0;
}
