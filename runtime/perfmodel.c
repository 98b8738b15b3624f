/*
 * Performance models (see perfmodel.h).
 *
 * The file format, version 1, one record per line:
 *
 *   tandem-perfmodel 1
 *   <codelet> TAB <class> TAB <size> TAB <count> TAB <seconds> ...
 *   ...
 *   end <number of records> <FNV-1a 64 of every byte before "end", hex>
 *
 * Names have tabs and newlines replaced by spaces. Seconds are written
 * with %.9g. Anything else — a missing end line, a checksum or count that
 * does not match, another first line — makes the whole file ignored.
 */
#include "internal.h"
#include "perfmodel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct size_entry {
  uint64_t size;
  unsigned n; /* observations ever, the last TDM_MODEL_WINDOW kept */
  double seen[TDM_MODEL_WINDOW];
} size_entry;

typedef struct entry {
  char *codelet, *cls;
  size_entry *sizes;
  unsigned nsizes, cap;
  struct entry *next;
} entry;

struct tdm_perfmodel {
  entry *entries;
};

tdm_perfmodel *tdm__model_new(void) {
  return calloc(1, sizeof(tdm_perfmodel));
}

static void clear(tdm_perfmodel *m) {
  for (entry *e = m->entries, *next; e; e = next) {
    next = e->next;
    free(e->codelet);
    free(e->cls);
    free(e->sizes);
    free(e);
  }
  m->entries = NULL;
}

void tdm__model_free(tdm_perfmodel *m) {
  if (!m)
    return;
  clear(m);
  free(m);
}

static entry *find(const tdm_perfmodel *m, const char *codelet, const char *cls) {
  for (entry *e = m->entries; e; e = e->next)
    if (!strcmp(e->codelet, codelet) && !strcmp(e->cls, cls))
      return e;
  return NULL;
}

/* A copy of s with tabs and newlines made spaces (they separate fields). */
static char *clean_copy(const char *s) {
  char *c = strdup(s ? s : "(unnamed)");
  for (char *p = c; p && *p; p++)
    if (*p == '\t' || *p == '\n' || *p == '\r')
      *p = ' ';
  return c;
}

static size_entry *size_slot(tdm_perfmodel *m, const char *codelet, const char *cls,
                             uint64_t size) {
  entry *e = find(m, codelet, cls);
  if (!e) {
    e = calloc(1, sizeof *e);
    if (!e)
      return NULL;
    e->codelet = clean_copy(codelet);
    e->cls = clean_copy(cls);
    if (!e->codelet || !e->cls) {
      free(e->codelet);
      free(e->cls);
      free(e);
      return NULL;
    }
    e->next = m->entries;
    m->entries = e;
  }
  for (unsigned i = 0; i < e->nsizes; i++)
    if (e->sizes[i].size == size)
      return &e->sizes[i];
  if (e->nsizes == e->cap) {
    unsigned cap = e->cap ? 2 * e->cap : 4;
    size_entry *s = realloc(e->sizes, cap * sizeof *s);
    if (!s)
      return NULL;
    e->sizes = s;
    e->cap = cap;
  }
  size_entry *s = &e->sizes[e->nsizes++];
  memset(s, 0, sizeof *s);
  s->size = size;
  return s;
}

bool tdm__model_observe(tdm_perfmodel *m, const char *codelet, uint64_t size, const char *cls,
                        double seconds) {
  if (!(seconds >= 0) || !isfinite(seconds))
    return true; /* not a duration: ignored */
  size_entry *s = size_slot(m, codelet, cls, size);
  if (!s)
    return false;
  s->seen[s->n % TDM_MODEL_WINDOW] = seconds;
  s->n++;
  return true;
}

static double median(const size_entry *s) {
  unsigned k = s->n < TDM_MODEL_WINDOW ? s->n : TDM_MODEL_WINDOW;
  double v[TDM_MODEL_WINDOW];
  memcpy(v, s->seen, k * sizeof *v);
  return tdm__median(v, k);
}

double tdm__model_predict(const tdm_perfmodel *m, const char *codelet, uint64_t size,
                          const char *cls, bool *calibrated) {
  bool dummy;
  if (!calibrated)
    calibrated = &dummy;
  *calibrated = false;
  char *name = clean_copy(codelet), *klass = clean_copy(cls);
  const entry *e = name && klass ? find(m, name, klass) : NULL;
  free(name);
  free(klass);
  if (!e)
    return -1;
  for (unsigned i = 0; i < e->nsizes; i++)
    if (e->sizes[i].size == size && e->sizes[i].n) {
      *calibrated = e->sizes[i].n >= TDM_MODEL_CALIBRATION;
      return median(&e->sizes[i]);
    }
  /* a size not seen: log(time) = a + b log(size) over the calibrated sizes */
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  unsigned k = 0;
  for (unsigned i = 0; i < e->nsizes; i++) {
    const size_entry *s = &e->sizes[i];
    double t = s->n >= TDM_MODEL_CALIBRATION ? median(s) : 0;
    if (s->size == 0 || t <= 0)
      continue;
    double x = log((double)s->size), y = log(t);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    k++;
  }
  if (k < 2 || size == 0 || fabs(k * sxx - sx * sx) < 1e-12)
    return -1;
  double b = (k * sxy - sx * sy) / (k * sxx - sx * sx), a = (sy - b * sx) / k;
  *calibrated = true;
  return exp(a + b * log((double)size));
}

/* ---- files ---------------------------------------------------------------- */

#define HEADER "tandem-perfmodel 1\n"

tdm_status tdm__model_save(const tdm_perfmodel *m, const char *path, const tdm_runtime *rt) {
  /* the text in memory first: its checksum goes at its end */
  size_t cap = 4096, len = 0;
  char *text = malloc(cap);
  unsigned records = 0;
  bool ok = text != NULL;
  if (ok)
    len = (size_t)snprintf(text, cap, "%s", HEADER);
  for (const entry *e = m->entries; e && ok; e = e->next)
    for (unsigned i = 0; i < e->nsizes && ok; i++) {
      const size_entry *s = &e->sizes[i];
      unsigned k = s->n < TDM_MODEL_WINDOW ? s->n : TDM_MODEL_WINDOW;
      size_t need = strlen(e->codelet) + strlen(e->cls) + 64 + 24 * (size_t)k;
      if (len + need >= cap) {
        while (len + need >= cap)
          cap *= 2;
        char *t = realloc(text, cap);
        if (!t) {
          ok = false;
          break;
        }
        text = t;
      }
      len += (size_t)snprintf(text + len, cap - len, "%s\t%s\t%llu\t%u", e->codelet, e->cls,
                              (unsigned long long)s->size, k);
      for (unsigned j = 0; j < k; j++) /* oldest first, so the window survives */
        len += (size_t)snprintf(text + len, cap - len, "\t%.9g",
                                s->seen[(s->n - k + j) % TDM_MODEL_WINDOW]);
      text[len++] = '\n';
      records++;
    }
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = ok ? fopen(tmp, "w") : NULL;
  if (f) {
    fwrite(text, 1, len, f);
    fprintf(f, "end %u %016llx\n", records,
            (unsigned long long)tdm__fnv1a(text, len, TDM_FNV_OFFSET));
    ok = !ferror(f);
    if (fclose(f) != 0)
      ok = false;
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
      remove(tmp);
  }
  free(text);
  if (!f || !ok) {
    if (rt)
      tdm__log(rt, TDM_LOG_WARNING, "performance model: cannot write %s: %s", path,
               strerror(errno));
    return TDM_ERR_SYSTEM;
  }
  return TDM_OK;
}

tdm_status tdm__model_load(tdm_perfmodel *m, const char *path, const tdm_runtime *rt) {
  clear(m);
  FILE *f = fopen(path, "r");
  if (!f)
    return TDM_ERR_SYSTEM;
  const char *why = NULL;
  char line[8192];
  uint64_t h = TDM_FNV_OFFSET;
  unsigned records = 0;
  bool ended = false;
  if (!fgets(line, sizeof line, f) || strcmp(line, HEADER))
    why = "not a Tandem performance model of this version";
  else
    h = tdm__fnv1a(line, strlen(line), h);
  while (!why && !ended && fgets(line, sizeof line, f)) {
    size_t n = strlen(line);
    if (!n || line[n - 1] != '\n') {
      why = "truncated";
      break;
    }
    unsigned count;
    unsigned long long sum;
    if (!strncmp(line, "end ", 4)) {
      if (sscanf(line, "end %u %llx", &count, &sum) != 2 || count != records || sum != h)
        why = "corrupt (count or checksum)";
      ended = true;
      break;
    }
    h = tdm__fnv1a(line, n, h);
    line[n - 1] = 0;
    char *codelet = strtok(line, "\t"), *cls = strtok(NULL, "\t");
    char *size_s = strtok(NULL, "\t"), *count_s = strtok(NULL, "\t");
    if (!codelet || !cls || !size_s || !count_s) {
      why = "a malformed record";
      break;
    }
    uint64_t size = strtoull(size_s, NULL, 10);
    count = (unsigned)strtoul(count_s, NULL, 10);
    for (unsigned i = 0; i < count && !why; i++) {
      char *v = strtok(NULL, "\t"), *end;
      double secs = v ? strtod(v, &end) : -1;
      if (!v || *end || !(secs >= 0))
        why = "a malformed duration";
      else if (!tdm__model_observe(m, codelet, size, cls, secs))
        why = "out of memory";
    }
    records++;
  }
  if (!why && !ended)
    why = "truncated (no end line)";
  fclose(f);
  if (why) {
    clear(m);
    if (rt)
      tdm__log(rt, TDM_LOG_WARNING, "performance model: ignoring %s: %s; calibrating again",
               path, why);
    return TDM_ERR_INVALID_ARG;
  }
  return TDM_OK;
}

/* ---- links ------------------------------------------------------------- */

void tdm__link_observe(tdm_link_model *l, uint64_t bytes, double seconds) {
  if (!(seconds >= 0) || !isfinite(seconds))
    return;
  l->bytes[l->n % TDM_LINK_WINDOW] = (double)bytes;
  l->seconds[l->n % TDM_LINK_WINDOW] = seconds;
  l->n++;
}

bool tdm__link_estimate(const tdm_link_model *l, double *latency, double *bandwidth) {
  unsigned k = l->n < TDM_LINK_WINDOW ? l->n : TDM_LINK_WINDOW;
  double slopes[TDM_LINK_WINDOW * (TDM_LINK_WINDOW - 1) / 2];
  unsigned ns = 0;
  for (unsigned i = 0; i < k; i++)
    for (unsigned j = i + 1; j < k; j++)
      if (l->bytes[j] != l->bytes[i])
        slopes[ns++] = (l->seconds[j] - l->seconds[i]) / (l->bytes[j] - l->bytes[i]);
  if (ns) {
    double slope = tdm__median(slopes, ns), icpt[TDM_LINK_WINDOW];
    if (slope > 0) {
      for (unsigned i = 0; i < k; i++)
        icpt[i] = l->seconds[i] - slope * l->bytes[i];
      double lat = tdm__median(icpt, k);
      *latency = lat > 0 ? lat : 0;
      *bandwidth = 1 / slope;
      return true;
    }
  }
  if (l->declared_bandwidth > 0) {
    *latency = l->declared_latency;
    *bandwidth = l->declared_bandwidth;
    return true;
  }
  return false;
}

double tdm__link_predict(const tdm_link_model *l, uint64_t bytes) {
  double lat, bw;
  if (!tdm__link_estimate(l, &lat, &bw))
    return -1;
  return lat + (double)bytes / bw;
}
