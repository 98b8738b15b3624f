/* Injected device faults (tdm_config.faults): where a backend launches,
 * completes and copies, where the memory module allocates, where a watched
 * try starts; and devices made to stop working. */
#include "support.h"
#include "../objects.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void tdm__faults_set(tdm_runtime *rt, unsigned kind, double p, uint64_t seed) {
  double f = p <= 0 ? 0 : p >= 1 ? 4294967295.0 : p * 4294967296.0;
  atomic_store_explicit(&rt->faults.draws, seed, memory_order_relaxed);
  atomic_store_explicit(&rt->faults.p[kind], (uint32_t)f, memory_order_relaxed);
}

static const char *const fault_names[TDM_NFAULTS] = {"launch", "run", "copy", "alloc",
                                                     "hang"};

/* device=D:lost_at=T or device=D:lost_after=N (the text after
 * "device="). */
static bool lost_term(tdm_runtime *rt, const char *s) {
  const char *colon = strchr(s, ':');
  char digits[16];
  uint64_t d, n = 0;
  double t = 0;
  if (!colon || (size_t)(colon - s) >= sizeof digits || rt->faults.nlost == TDM_MAX_LOST)
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
  rt->faults.lost[rt->faults.nlost].device = (unsigned)d;
  rt->faults.lost[rt->faults.nlost].at_ns = tdm__ns_of(t);
  rt->faults.lost[rt->faults.nlost].after = n;
  atomic_init(&rt->faults.lost[rt->faults.nlost].launches, 0);
  rt->faults.nlost++;
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
    rt->faults.nth[kind] = nth;
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
  atomic_store_explicit(&rt->faults.draws, seed, memory_order_relaxed);
  return TDM_OK;
}

/* Whether device worker k's device was made to stop working by now (an
 * operation of that kind starts there). */
static bool lost_now(tdm_runtime *rt, unsigned kind, unsigned k) {
  for (unsigned i = 0; i < rt->faults.nlost; i++) {
    if (rt->faults.lost[i].device != rt->device_of[k])
      continue;
    if (rt->faults.lost[i].after) { /* at its nth launch */
      uint64_t n = kind == TDM_FAULT_LAUNCH
                       ? atomic_fetch_add_explicit(&rt->faults.lost[i].launches, 1,
                                                   memory_order_relaxed) + 1
                       : atomic_load_explicit(&rt->faults.lost[i].launches, memory_order_relaxed);
      if (n < rt->faults.lost[i].after)
        continue;
    } else if (tdm__now_ns() - rt->trace_t0 < rt->faults.lost[i].at_ns) {
      continue;
    }
    uint64_t bit = UINT64_C(1) << i;
    if (!(atomic_fetch_or(&rt->faults.lost_said, bit) & bit))
      tdm__log(rt, TDM_LOG_WARNING, "device %u stops working (injected fault)",
               rt->faults.lost[i].device);
    return true;
  }
  return false;
}

/* A fault of that kind injected now: logged, counted. */
static tdm_status injected(tdm_runtime *rt, unsigned kind) {
  tdm__log(rt, TDM_LOG_DEBUG, "device %s failure injected", fault_names[kind]);
  atomic_fetch_add_explicit(&rt->faults.injected, 1, memory_order_relaxed);
  return TDM_ERR_SYSTEM;
}

tdm_status tdm__fault(tdm_runtime *rt, unsigned kind, unsigned k) {
  if (TDM_UNLIKELY(rt->faults.nlost) && lost_now(rt, kind, k))
    return TDM_ERR_DEVICE_LOST;
  /* a hung device (watchdog.c) does nothing more */
  if (TDM_UNLIKELY(atomic_load_explicit(&rt->hung, memory_order_relaxed) >> k & 1))
    return TDM_ERR_DEVICE_LOST;
  uint64_t nth = rt->faults.nth[kind];
  if (nth && (atomic_fetch_add_explicit(&rt->faults.count[kind], 1, memory_order_relaxed) + 1) %
                     nth == 0)
    return injected(rt, kind);
  uint32_t p = atomic_load_explicit(&rt->faults.p[kind], memory_order_relaxed);
  if (!p)
    return TDM_OK;
  /* the draws of all threads from one sequence (SplitMix64's steps) */
  uint64_t x = atomic_fetch_add_explicit(&rt->faults.draws, 0x9e3779b97f4a7c15ull,
                                         memory_order_relaxed);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (uint32_t)(x >> 32) >= p ? TDM_OK : injected(rt, kind);
}
