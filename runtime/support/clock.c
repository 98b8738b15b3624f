/* The runtime's clock (CLOCK_MONOTONIC, in nanoseconds) and sleeping
 * until a time on it. */
#include "support.h"

#include <sched.h>
#include <time.h>

uint64_t tdm__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* cannot fail with this clock */
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* nanosleep wakes up tens of microseconds late: it sleeps until a little
 * before, and the rest passes yielding the core (emulated durations of a
 * few hundred microseconds stay within a few percent). */
#define SLEEP_SLACK_NS 80000

void tdm__sleep_until(uint64_t until) {
  for (;;) {
    uint64_t now = tdm__now_ns();
    if (now >= until)
      return;
    uint64_t d = until - now;
    if (d <= SLEEP_SLACK_NS) {
      sched_yield();
      continue;
    }
    d -= SLEEP_SLACK_NS;
    struct timespec ts = {.tv_sec = (time_t)(d / 1000000000u), .tv_nsec = (long)(d % 1000000000u)};
    nanosleep(&ts, NULL); /* interrupted: the loop sleeps the rest */
  }
}
