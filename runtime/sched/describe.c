/* Machine descriptions: the text of tdm_config.sim and of the virtual-time
 * tests, parsed into a tdm_vt_machine (policy.h). */
#include "policy.h"

#include "../internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A number with an optional unit suffix: *scale per unit as given. Values
 * beyond TDM_VT_MAX_VALUE are refused: nothing real is that large, and
 * the emulated devices multiply them into nanosecond counts. */
static bool number(const char *s, size_t len, const char *const *units, const double *scales,
                   double *out) {
  char buf[64];
  if (!len || len >= sizeof buf)
    return false;
  memcpy(buf, s, len);
  buf[len] = 0;
  char *end;
  double v = strtod(buf, &end);
  if (end == buf || !(v >= 0) || !isfinite(v))
    return false;
  if (!*end) {
    *out = v;
    return v <= TDM_VT_MAX_VALUE;
  }
  for (unsigned i = 0; units && units[i]; i++)
    if (!strcmp(end, units[i])) {
      *out = v * scales[i];
      return v <= TDM_VT_MAX_VALUE;
    }
  return false;
}

/* Whether x lies in [lo, hi]: the documented range of a setting. */
static bool within(double x, double lo, double hi) {
  return x >= lo && x <= hi;
}

tdm_status tdm__vt_parse_machine(const char *text, const char *const *codelets,
                                 unsigned ncodelets, tdm_vt_machine *m, char *err,
                                 size_t err_size) {
  static const char *const times[] = {"s", "ms", "us", "ns", NULL};
  static const double time_scale[] = {1, 1e-3, 1e-6, 1e-9};
  static const char *const rates[] = {"k", "M", "G", "T", NULL};
  static const double rate_scale[] = {1e3, 1e6, 1e9, 1e12};
  memset(m, 0, sizeof *m);
  m->nnodes = 1;
#define BAD(...) return (snprintf(err, err_size, __VA_ARGS__), TDM_ERR_INVALID_ARG)
  if (!text || !*text)
    BAD("an empty machine");
  const char *p = text;
  while (*p) {
    size_t clen = strcspn(p, ";");
    const char *end = p + clen, *colon = memchr(p, ':', clen);
    size_t nlen = colon ? (size_t)(colon - p) : clen;
    if (!nlen)
      BAD("a class without a name at \"%.20s\"", p);
    if (m->nclasses == TDM_VT_MAX_CLASSES)
      BAD("more than %d classes", TDM_VT_MAX_CLASSES);
    struct tdm_vt_class *c = &m->classes[m->nclasses++];
    if (nlen >= sizeof c->name)
      BAD("class name \"%.*s\" longer than %zu characters", (int)nlen, p, sizeof c->name - 1);
    memcpy(c->name, p, nlen);
    c->workers = 1;
    /* "cpu", and "cpu.N" (a kind of core, for emulated machines), work in
     * the host's memory */
    bool is_cpu = (nlen == 3 && !strncmp(p, "cpu", 3)) || (nlen > 4 && !strncmp(p, "cpu.", 4)),
         shared = is_cpu;
    for (int k = 0; k < 8; k++)
      c->speedup[k] = 1;
    double latency = 0, bandwidth = 0;
    for (const char *q = colon ? colon + 1 : end; q < end;) {
      size_t slen = strcspn(q, ",;");
      if (q + slen > end)
        slen = (size_t)(end - q);
      const char *eq = memchr(q, '=', slen);
      if (!eq)
        BAD("\"%.*s\" is not key=value", (int)slen, q);
      size_t klen = (size_t)(eq - q), vlen = slen - klen - 1;
      const char *v = eq + 1;
      double x = 0;
#define KEY(k) (klen == strlen(k) && !strncmp(q, k, klen))
      if (KEY("workers")) {
        if (!number(v, vlen, NULL, NULL, &x) || x != floor(x) || x > 4096)
          BAD("workers=%.*s: a whole number up to 4096", (int)vlen, v);
        c->workers = (unsigned)x;
      } else if (KEY("memory")) {
        if (vlen == 6 && !strncmp(v, "shared", 6))
          shared = true;
        else if (vlen == 3 && !strncmp(v, "own", 3))
          shared = false;
        else
          BAD("memory=%.*s: shared or own", (int)vlen, v);
      } else if (KEY("speedup")) {
        if (!number(v, vlen, NULL, NULL, &x) ||
            !within(x, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP))
          BAD("speedup=%.*s: a positive number from %g to %g", (int)vlen, v,
              TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP);
        for (int k = 0; k < 8; k++)
          c->speedup[k] = x;
      } else if (KEY("latency") || KEY("slow_at")) {
        if (!number(v, vlen, times, time_scale, &x) || x > TDM_VT_MAX_TIME)
          BAD("%.*s=%.*s: a time (s, ms, us, ns) up to %g s", (int)klen, q, (int)vlen, v,
              TDM_VT_MAX_TIME);
        if (KEY("latency"))
          latency = x;
        else
          c->slow_at = x;
      } else if (KEY("bandwidth")) {
        if (!number(v, vlen, rates, rate_scale, &x) ||
            !within(x, TDM_VT_MIN_BANDWIDTH, TDM_VT_MAX_BANDWIDTH))
          BAD("bandwidth=%.*s: bytes per second (k, M, G, T) from %g to %g", (int)vlen, v,
              TDM_VT_MIN_BANDWIDTH, TDM_VT_MAX_BANDWIDTH);
        bandwidth = x;
      } else if (KEY("slow_factor")) {
        if (!number(v, vlen, NULL, NULL, &x) ||
            !within(x, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP))
          BAD("slow_factor=%.*s: a positive number from %g to %g", (int)vlen, v,
              TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP);
        c->slow_factor = x;
      } else if (!codelets) {
        if (c->nnamed == 8)
          BAD("class %s: more than 8 codelet speed-ups", c->name);
        if (klen >= sizeof c->named[0].name)
          BAD("codelet name \"%.*s\" longer than %zu characters", (int)klen, q,
              sizeof c->named[0].name - 1);
        if (!number(v, vlen, NULL, NULL, &x) ||
            (x != 0 && !within(x, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP)))
          BAD("%.*s=%.*s: 0 (cannot run it) or a speed-up from %g to %g", (int)klen, q,
              (int)vlen, v, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP);
        memcpy(c->named[c->nnamed].name, q, klen);
        c->named[c->nnamed++].speedup = x;
      } else {
        unsigned k;
        for (k = 0; k < ncodelets && k < 8 && !KEY(codelets[k]); k++)
          ;
        if (k == ncodelets || k == 8)
          BAD("unknown setting \"%.*s\"", (int)klen, q);
        if (!number(v, vlen, NULL, NULL, &x) ||
            (x != 0 && !within(x, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP)))
          BAD("%.*s=%.*s: 0 (cannot run it) or a speed-up from %g to %g", (int)klen, q,
              (int)vlen, v, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP);
        c->speedup[k] = x;
      }
#undef KEY
      q += slen + 1;
    }
    if (!shared) {
      if (m->nnodes == TDM_VT_MAX_CLASSES)
        BAD("too many memory nodes");
      if (bandwidth <= 0)
        BAD("class %s has memory of its own: give its link's bandwidth", c->name);
      c->node = m->nnodes;
      m->latency[m->nnodes] = latency;
      m->bandwidth[m->nnodes] = bandwidth;
      m->nnodes++;
    }
    p = *end ? end + 1 : end;
  }
#undef BAD
  return TDM_OK;
}
