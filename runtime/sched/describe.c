/* Machine descriptions: the text of tdm_config.sim and of the virtual-time
 * tests, parsed into a tdm_vt_machine (policy.h). */

#include "sched.h"

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

/* What the parser of one class needs: where to say what is wrong, the
 * codelets' names, and the settings found so far. */
typedef struct parse_ctx {
  char *err;
  size_t err_size;
  const char *const *codelets;
  unsigned ncodelets;
  bool shared;
  double latency, bandwidth, peer;
} parse_ctx;

#define BAD(...) return (snprintf(x->err, x->err_size, __VA_ARGS__), TDM_ERR_INVALID_ARG)

/* A speed-up for one codelet: by name in c's list (no list of codelets),
 * or in its slot. */
static tdm_status codelet_speedup(parse_ctx *x, struct tdm_vt_class *c, const char *key,
                                  size_t klen, const char *v, size_t vlen) {
  double s = 0;
  unsigned k = 0;
  if (x->codelets) {
    while (k < x->ncodelets && k < 8 &&
           !(klen == strlen(x->codelets[k]) && !strncmp(key, x->codelets[k], klen)))
      k++;
    if (k == x->ncodelets || k == 8)
      BAD("unknown setting \"%.*s\"", (int)klen, key);
  } else {
    if (c->nnamed == 8)
      BAD("class %s: more than 8 codelet speed-ups", c->name);
    if (klen >= sizeof c->named[0].name)
      BAD("codelet name \"%.*s\" longer than %zu characters", (int)klen, key,
          sizeof c->named[0].name - 1);
  }
  if (!number(v, vlen, NULL, NULL, &s) ||
      (s != 0 && !within(s, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP)))
    BAD("%.*s=%.*s: 0 (cannot run it) or a speed-up from %g to %g", (int)klen, key, (int)vlen,
        v, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP);
  if (x->codelets) {
    c->speedup[k] = s;
  } else {
    memcpy(c->named[c->nnamed].name, key, klen);
    c->named[c->nnamed++].speedup = s;
  }
  return TDM_OK;
}

/* One key=value setting of class c. */
static tdm_status setting(parse_ctx *x, struct tdm_vt_class *c, const char *q, size_t klen,
                          const char *v, size_t vlen) {
  static const char *const times[] = {"s", "ms", "us", "ns", NULL};
  static const double time_scale[] = {1, 1e-3, 1e-6, 1e-9};
  static const char *const rates[] = {"k", "M", "G", "T", NULL};
  static const double rate_scale[] = {1e3, 1e6, 1e9, 1e12};
  double n = 0;
#define KEY(k) (klen == strlen(k) && !strncmp(q, k, klen))
  if (KEY("workers")) {
    if (!number(v, vlen, NULL, NULL, &n) || n != floor(n) || n > 4096)
      BAD("workers=%.*s: a whole number up to 4096", (int)vlen, v);
    c->workers = (unsigned)n;
  } else if (KEY("memory")) {
    if (vlen == 6 && !strncmp(v, "shared", 6))
      x->shared = true;
    else if (vlen == 3 && !strncmp(v, "own", 3))
      x->shared = false;
    else
      BAD("memory=%.*s: shared or own", (int)vlen, v);
  } else if (KEY("speedup") || KEY("slow_factor")) {
    if (!number(v, vlen, NULL, NULL, &n) || !within(n, TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP))
      BAD("%.*s=%.*s: a positive number from %g to %g", (int)klen, q, (int)vlen, v,
          TDM_VT_MIN_SPEEDUP, TDM_VT_MAX_SPEEDUP);
    for (int k = 0; k < 8 && KEY("speedup"); k++)
      c->speedup[k] = n;
    if (KEY("slow_factor"))
      c->slow_factor = n;
  } else if (KEY("latency") || KEY("slow_at")) {
    if (!number(v, vlen, times, time_scale, &n) || n > TDM_VT_MAX_TIME)
      BAD("%.*s=%.*s: a time (s, ms, us, ns) up to %g s", (int)klen, q, (int)vlen, v,
          TDM_VT_MAX_TIME);
    *(KEY("latency") ? &x->latency : &c->slow_at) = n;
  } else if (KEY("bandwidth") || KEY("peer")) {
    if (!number(v, vlen, rates, rate_scale, &n) ||
        !within(n, TDM_VT_MIN_BANDWIDTH, TDM_VT_MAX_BANDWIDTH))
      BAD("%.*s=%.*s: bytes per second (k, M, G, T) from %g to %g", (int)klen, q, (int)vlen,
          v, TDM_VT_MIN_BANDWIDTH, TDM_VT_MAX_BANDWIDTH);
    *(KEY("peer") ? &x->peer : &x->bandwidth) = n;
  } else {
    return codelet_speedup(x, c, q, klen, v, vlen);
  }
#undef KEY
  return TDM_OK;
}

/* Whether a setting in [from, to) (settings separated by commas) has the
 * key [key, key + klen). */
static bool key_given(const char *from, const char *to, const char *key, size_t klen) {
  for (const char *q = from; q < to;) {
    size_t slen = strcspn(q, ",;");
    if (q + slen > to)
      slen = (size_t)(to - q);
    const char *eq = memchr(q, '=', slen);
    if (eq && (size_t)(eq - q) == klen && !strncmp(q, key, klen))
      return true;
    q += slen + 1;
  }
  return false;
}

/* One class, text [p, end): "name" or "name:setting,setting...". */
static tdm_status parse_class(parse_ctx *x, tdm_vt_machine *m, const char *p, const char *end) {
  const char *colon = memchr(p, ':', (size_t)(end - p));
  size_t nlen = colon ? (size_t)(colon - p) : (size_t)(end - p);
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
  x->shared = (nlen == 3 && !strncmp(p, "cpu", 3)) || (nlen > 4 && !strncmp(p, "cpu.", 4));
  x->latency = x->bandwidth = x->peer = 0;
  for (int k = 0; k < 8; k++)
    c->speedup[k] = 1;
  for (const char *q = colon ? colon + 1 : end; q < end;) {
    size_t slen = strcspn(q, ",;");
    if (q + slen > end)
      slen = (size_t)(end - q);
    const char *eq = memchr(q, '=', slen);
    if (!eq)
      BAD("\"%.*s\" is not key=value", (int)slen, q);
    size_t klen = (size_t)(eq - q);
    if (key_given(colon + 1, q, q, klen))
      BAD("class %s: %.*s= given twice", c->name, (int)klen, q);
    tdm_status st = setting(x, c, q, klen, eq + 1, slen - klen - 1);
    if (st)
      return st;
    q += slen + 1;
  }
  if (x->shared && x->peer > 0)
    BAD("class %s works in the host's memory: peer= is for devices with memory of their own",
        c->name);
  if (x->shared)
    return TDM_OK;
  if (m->nnodes == TDM_VT_MAX_CLASSES)
    BAD("too many memory nodes");
  if (x->bandwidth <= 0)
    BAD("class %s has memory of its own: give its link's bandwidth", c->name);
  c->node = m->nnodes;
  m->latency[m->nnodes] = x->latency;
  m->bandwidth[m->nnodes] = x->bandwidth;
  m->peer[m->nnodes] = x->peer;
  m->nnodes++;
  return TDM_OK;
}

tdm_status tdm__vt_parse_machine(const char *text, const char *const *codelets,
                                 unsigned ncodelets, tdm_vt_machine *m, char *err,
                                 size_t err_size) {
  parse_ctx ctx = {.err = err, .err_size = err_size, .codelets = codelets,
                   .ncodelets = ncodelets}, *x = &ctx;
  memset(m, 0, sizeof *m);
  m->nnodes = 1;
  if (!text || !*text)
    BAD("an empty machine");
  for (const char *p = text; *p;) {
    const char *end = p + strcspn(p, ";");
    tdm_status st = parse_class(x, m, p, end);
    if (st)
      return st;
    p = *end ? end + 1 : end;
  }
  return TDM_OK;
}
#undef BAD
