/* The Chase–Lev deque: concurrent push/pop by the owner and steals by
 * thieves lose and duplicate no item; the ring grows, and wraps. */
#include "common.h"

#include "support/deque.h"

#include <stdlib.h>

#define NITEMS 400000
#define NTHIEVES 3

typedef struct {
  tdm_deque d;
  _Atomic int done;
  _Atomic unsigned char *seen; /* times each item was taken */
  _Atomic long stolen;
} stress;

static void take(stress *s, void *item) {
  uintptr_t id = (uintptr_t)item;
  assert_true(id >= 1 && id <= NITEMS);
  atomic_fetch_add(&s->seen[id - 1], 1);
}

static void *thief(void *arg) {
  stress *s = arg;
  for (;;) {
    void *item = tdm__deque_steal(&s->d);
    if (item) {
      take(s, item);
      atomic_fetch_add(&s->stolen, 1);
    } else if (atomic_load(&s->done) && tdm__deque_size(&s->d) == 0) {
      break;
    }
  }
  return NULL;
}

/* A deque of 16 slots and NTHIEVES thieves stealing from it. */
static void stress_start(stress *s, pthread_t *th) {
  assert_int_equal(tdm__deque_init(&s->d, 16), 0);
  s->seen = calloc(NITEMS, 1);
  assert_non_null(s->seen);
  atomic_init(&s->done, 0);
  atomic_init(&s->stolen, 0);
  for (int i = 0; i < NTHIEVES; i++)
    assert_int_equal(pthread_create(&th[i], NULL, thief, s), 0);
}

/* The owner pops what is left; then every item was taken exactly once,
 * some by the thieves. */
static void stress_finish(stress *s, pthread_t *th, long popped) {
  void *item;
  while ((item = tdm__deque_pop(&s->d))) {
    take(s, item);
    popped++;
  }
  atomic_store(&s->done, 1);
  for (int i = 0; i < NTHIEVES; i++)
    pthread_join(th[i], NULL);
  for (long i = 0; i < NITEMS; i++)
    if (s->seen[i] != 1)
      fail_msg("item %ld taken %d times", i + 1, (int)s->seen[i]);
  assert_int_equal(popped + atomic_load(&s->stolen), NITEMS);
  /* with three thieves racing, some items must have been stolen */
  assert_true(atomic_load(&s->stolen) > 0);
  free((void *)s->seen);
}

static void test_deque_concurrent_push_pop_steal(void **state) {
  (void)state;
  stress s;
  pthread_t th[NTHIEVES];
  stress_start(&s, th); /* small: forces growth */
  /* The owner pushes in bursts and pops some back, as a worker does. */
  uint64_t rng = 12345;
  long popped = 0;
  for (uintptr_t id = 1; id <= NITEMS; id++) {
    assert_int_equal(tdm__deque_push(&s.d, (void *)id), 0);
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    if ((rng >> 33) % 3 == 0) {
      void *item = tdm__deque_pop(&s.d);
      if (item) {
        take(&s, item);
        popped++;
      }
    }
  }
  stress_finish(&s, th, popped);
  tdm__deque_destroy(&s.d);
}

/* A deque that stays small wraps its ring many times: every push reuses
 * a slot a thief or the owner took shortly before. The owner reads top
 * only when the ring looks full (deque.c), so this is where a slot
 * reused before its thief read it would lose or duplicate items. */
static void test_deque_wraps_small_ring(void **state) {
  (void)state;
  stress s;
  pthread_t th[NTHIEVES];
  stress_start(&s, th);
  uint64_t rng = 987654321;
  long popped = 0;
  uintptr_t id = 1;
  while (id <= NITEMS) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    unsigned burst = 1 + (unsigned)((rng >> 33) % 12); /* never past 16 */
    for (unsigned k = 0; k < burst && id <= NITEMS; k++, id++)
      assert_int_equal(tdm__deque_push(&s.d, (void *)id), 0);
    while (tdm__deque_size(&s.d) > 3) {
      void *item = tdm__deque_pop(&s.d);
      if (item) {
        take(&s, item);
        popped++;
      }
    }
  }
  stress_finish(&s, th, popped);
  /* at most 15 items at once: the ring never had to grow */
  assert_int_equal(atomic_load(&s.d.ring)->mask, 15);
  tdm__deque_destroy(&s.d);
}

static void test_deque_lifo_owner_fifo_thief(void **state) {
  (void)state;
  tdm_deque d;
  assert_int_equal(tdm__deque_init(&d, 4), 0);
  for (uintptr_t i = 1; i <= 100; i++)
    assert_int_equal(tdm__deque_push(&d, (void *)i), 0);
  assert_int_equal(tdm__deque_size(&d), 100);
  assert_ptr_equal(tdm__deque_steal(&d), (void *)1);   /* oldest */
  assert_ptr_equal(tdm__deque_pop(&d), (void *)100);   /* newest */
  for (uintptr_t i = 99; i >= 2; i--)
    assert_ptr_equal(tdm__deque_pop(&d), (void *)i);
  assert_null(tdm__deque_pop(&d));
  assert_null(tdm__deque_steal(&d));
  tdm__deque_destroy(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deque_lifo_owner_fifo_thief),
      cmocka_unit_test(test_deque_concurrent_push_pop_steal),
      cmocka_unit_test(test_deque_wraps_small_ring),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
