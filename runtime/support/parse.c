/* Configuration text: counts, sizes in bytes, times. */
#include "support.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A whole number in decimal digits, at most max; *end is what follows
 * the digits. No sign, space or blank: strtoull would take " -1" for
 * 2^64 - 1. */
static bool digits(const char *s, uint64_t max, uint64_t *out, const char **end) {
  if (*s < '0' || *s > '9')
    return false;
  char *e;
  errno = 0;
  unsigned long long v = strtoull(s, &e, 10);
  *end = e;
  *out = v;
  return !errno && v <= max;
}

bool tdm__parse_count(const char *s, uint64_t max, uint64_t *out) {
  const char *end;
  uint64_t v;
  if (!digits(s, max, &v, &end) || *end)
    return false;
  *out = v;
  return true;
}

bool tdm__parse_bytes(const char *s, uint64_t max, uint64_t *out) {
  const char *end = s;
  uint64_t v = 0;
  bool ok = digits(s, max, &v, &end);
  unsigned shift = *end == 'k' || *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  if (shift)
    end++;
  if (!ok || *end || v > (max >> shift))
    return false;
  *out = v << shift;
  return true;
}


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

