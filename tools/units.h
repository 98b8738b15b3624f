/*
 * Figures for people, shared by the tools: a duration as "1.23 ms".
 * Header-only, every function static.
 */
#ifndef TDM_UNITS_H
#define TDM_UNITS_H

#include <stddef.h>
#include <stdio.h>

/* s seconds in buf, in s, ms or us, three significant digits; buf. */
static inline const char *units_seconds(double s, char *buf, size_t n) {
  if (s >= 1)
    snprintf(buf, n, "%.3g s", s);
  else if (s >= 1e-3)
    snprintf(buf, n, "%.3g ms", s * 1e3);
  else
    snprintf(buf, n, "%.3g us", s * 1e6);
  return buf;
}

#endif
