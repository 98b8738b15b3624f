/* A spin lock for short critical sections, and the pause of a spin. */
#ifndef TDM_SPINLOCK_H
#define TDM_SPINLOCK_H

#include <stdatomic.h>
#include <stdbool.h>

#if defined(__x86_64__) || defined(__i386__)
#define tdm__cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define tdm__cpu_relax() __asm__ __volatile__("yield")
#else
#define tdm__cpu_relax() ((void)0)
#endif

/* A test-and-test-and-set lock for short critical sections (a handle's
 * dependency state, the task pool). It yields the CPU after a
 * while, because workers may outnumber cores. */
typedef struct {
  _Atomic int locked;
} tdm_spinlock;

void tdm__spin_lock_slow(tdm_spinlock *l);

static inline void tdm__spin_lock(tdm_spinlock *l) {
  /* acquire: the critical section starts after the lock is ours */
  if (!atomic_exchange_explicit(&l->locked, 1, memory_order_acquire))
    return;
  tdm__spin_lock_slow(l);
}

/* Takes the lock if it is free; never waits. */
static inline bool tdm__spin_trylock(tdm_spinlock *l) {
  /* acquire: as tdm__spin_lock */
  return !atomic_load_explicit(&l->locked, memory_order_relaxed) &&
         !atomic_exchange_explicit(&l->locked, 1, memory_order_acquire);
}

static inline void tdm__spin_unlock(tdm_spinlock *l) {
  /* release: the critical section's writes are visible to the next owner */
  atomic_store_explicit(&l->locked, 0, memory_order_release);
}

#endif
