/*
 * Chase–Lev work-stealing deque, in the C11 formulation of Lê, Pop, Cohen and
 * Zappa Nardelli, "Correct and Efficient Work-Stealing for Weak Memory
 * Models", PPoPP 2013.
 *
 * One owner pushes and pops at the bottom (LIFO, cache-warm), any number of
 * thieves steal at the top (FIFO, the oldest and usually largest work).
 * Owner and thieves race only for the last item, settled by a CAS on top.
 *
 * The ring grows by doubling when full. A thief may still be reading the old
 * ring after the owner replaced it, so retired rings are kept on a list and
 * freed only when the deque is destroyed (by then no thief can run). Their
 * total size is bounded by the size of the current ring.
 *
 * Field layout follows lace: what only the owner writes (bottom, the ring
 * pointer as the owner sees it) and what thieves write (top) live on
 * separate cache lines. The owner keeps the top it read last and reads
 * top again only when the ring looks full, so a push does not pull the
 * thieves' line (a nested producer pushing while others steal).
 */
#ifndef TDM_DEQUE_H
#define TDM_DEQUE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TDM_CACHE_LINE 64

/* A sequentially consistent fence. ThreadSanitizer does not model fences
 * (GCC refuses them under -fsanitize=thread); in such builds only, a seq_cst
 * read-modify-write of one shared word stands in: it orders the same way
 * and ThreadSanitizer sees the synchronisation. */
#if defined(__SANITIZE_THREAD__)
extern _Atomic int tdm__tsan_fence_word;
#define tdm__fence_seq_cst()                                                   \
  ((void)atomic_fetch_add_explicit(&tdm__tsan_fence_word, 0, memory_order_seq_cst))
#else
#define tdm__fence_seq_cst() atomic_thread_fence(memory_order_seq_cst)
#endif

typedef struct tdm_ring {
  int64_t mask; /* capacity - 1; capacity is a power of two */
  struct tdm_ring *retired_next;
  _Atomic(void *) slots[];
} tdm_ring;

typedef struct tdm_deque {
  _Alignas(TDM_CACHE_LINE) _Atomic int64_t top;
  _Alignas(TDM_CACHE_LINE) _Atomic int64_t bottom;
  _Atomic(tdm_ring *) ring;
  int64_t top_seen; /* owner only: top as last read, never above top */
  tdm_ring *retired; /* owner only */
} tdm_deque;

/* Returns 0, or -1 when out of memory. capacity is rounded up to a power
 * of two. */
int tdm__deque_init(tdm_deque *d, size_t capacity);
void tdm__deque_destroy(tdm_deque *d);

/* Owner only. Returns 0, or -1 when the ring could not grow (out of memory;
 * the item was not pushed). */
int tdm__deque_push(tdm_deque *d, void *item);
/* Owner only. NULL when empty. */
void *tdm__deque_pop(tdm_deque *d);
/* Any thread. NULL when empty or when it lost a race (callers retry
 * elsewhere; the item is not lost). */
void *tdm__deque_steal(tdm_deque *d);
/* Any thread; a hint only. */
int64_t tdm__deque_size(tdm_deque *d);

#endif
