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
#include "sched.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* Concurrency: tdm__model_predict runs on any thread with no lock, while
 * tdm__model_observe runs on others. Entries and sizes are only added
 * (published with release stores, read with acquire loads) and freed
 * only by clear, merge, forget and free, which, with save, load, each
 * and law, run while nothing else uses the model. A size's window is
 * written under its entry's lock (one codelet on one class of worker:
 * observations of others do not wait), and what predictions read of it,
 * its count and median, is published atomically. Adding an entry takes
 * the model's lock. */
typedef struct size_entry {
  uint64_t size;
  bool fresh; /* observed since loaded: saving keeps this window */
  unsigned n; /* observations ever, the last TDM_MODEL_WINDOW kept */
  double seen[TDM_MODEL_WINDOW];
  bool on_disk; /* while saving: the file still holds it */
  /* for predictions: n, and the median and the mean of the window, as
   * of the last observation */
  _Atomic unsigned count;
  _Atomic double med, avg;
  struct size_entry *_Atomic next;
} size_entry;

typedef struct entry {
  char *codelet, *cls;
  pthread_mutex_t lock; /* its windows, and adding a size */
  size_entry *_Atomic sizes;
  size_entry *last; /* under lock */
  struct entry *_Atomic next;
} entry;

struct tdm_perfmodel {
  pthread_mutex_t lock; /* adding an entry */
  entry *_Atomic entries;
};

/* Lists as they are, with nothing else using the model (or under the
 * locks that add to them). */
#define FIRST(list) atomic_load_explicit(&(list), memory_order_acquire)
#define NEXT(x) atomic_load_explicit(&(x)->next, memory_order_acquire)

tdm_perfmodel *tdm__model_new(void) {
  tdm_perfmodel *m = calloc(1, sizeof(tdm_perfmodel));
  if (m && pthread_mutex_init(&m->lock, NULL)) {
    free(m);
    return NULL;
  }
  return m;
}

static void sizes_free(size_entry *s) {
  while (s) {
    size_entry *next = NEXT(s);
    free(s);
    s = next;
  }
}

static void entry_free(entry *e) {
  free(e->codelet);
  free(e->cls);
  sizes_free(FIRST(e->sizes));
  pthread_mutex_destroy(&e->lock);
  free(e);
}

static void clear(tdm_perfmodel *m) {
  for (entry *e = FIRST(m->entries), *next; e; e = next) {
    next = NEXT(e);
    entry_free(e);
  }
  atomic_store_explicit(&m->entries, NULL, memory_order_relaxed);
}

void tdm__model_free(tdm_perfmodel *m) {
  if (!m)
    return;
  clear(m);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

/* Whether a stored name (clean_copy's) is the one given, as clean_copy
 * would make it, without making it. */
static bool same_name(const char *stored, const char *given) {
  given = tdm__name_or(given);
  size_t i = 0;
  for (; i < TDM_MODEL_NAME_MAX && given[i]; i++) {
    char c = given[i] == '\t' || given[i] == '\n' || given[i] == '\r' ? ' ' : given[i];
    if (stored[i] != c)
      return false;
  }
  return !stored[i];
}

static entry *find(const tdm_perfmodel *m, const char *codelet, const char *cls) {
  for (entry *e = FIRST(m->entries); e; e = NEXT(e))
    if (same_name(e->codelet, codelet) && same_name(e->cls, cls))
      return e;
  return NULL;
}

static size_entry *size_in(const entry *e, uint64_t size) {
  for (size_entry *s = FIRST(e->sizes); s; s = NEXT(s))
    if (s->size == size)
      return s;
  return NULL;
}

/* A copy of s with tabs and newlines made spaces (they separate fields),
 * cut to TDM_MODEL_NAME_MAX bytes so that a record fits a line. */
static char *clean_copy(const char *s) {
  char *c = strndup(tdm__name_or(s), TDM_MODEL_NAME_MAX);
  for (char *p = c; p && *p; p++)
    if (*p == '\t' || *p == '\n' || *p == '\r')
      *p = ' ';
  return c;
}

/* (codelet, cls)'s entry, made if new (published under the model's
 * lock); NULL when out of memory. */
static entry *entry_of(tdm_perfmodel *m, const char *codelet, const char *cls) {
  entry *e = find(m, codelet, cls);
  if (e)
    return e;
  TDM_PTHREAD(NULL, pthread_mutex_lock(&m->lock));
  e = find(m, codelet, cls); /* another thread may have made it */
  if (!e && (e = calloc(1, sizeof *e))) {
    e->codelet = clean_copy(codelet);
    e->cls = clean_copy(cls);
    if (!e->codelet || !e->cls || pthread_mutex_init(&e->lock, NULL)) {
      free(e->codelet);
      free(e->cls);
      free(e);
      e = NULL;
    } else {
      atomic_store_explicit(&e->next, FIRST(m->entries), memory_order_relaxed);
      atomic_store_explicit(&m->entries, e, memory_order_release);
    }
  }
  TDM_PTHREAD(NULL, pthread_mutex_unlock(&m->lock));
  return e;
}

/* e's window for `size`, added last if new (e's lock held); NULL when out
 * of memory. */
static size_entry *size_slot(entry *e, uint64_t size) {
  size_entry *s = size_in(e, size);
  if (s || !(s = calloc(1, sizeof *s)))
    return s;
  s->size = size;
  if (e->last)
    atomic_store_explicit(&e->last->next, s, memory_order_release);
  else
    atomic_store_explicit(&e->sizes, s, memory_order_release);
  e->last = s;
  return s;
}

/* s's median published, from its window (e's lock held). */
static void publish(size_entry *s) {
  unsigned k = s->n < TDM_MODEL_WINDOW ? s->n : TDM_MODEL_WINDOW;
  double v[TDM_MODEL_WINDOW];
  memcpy(v, s->seen, k * sizeof *v);
  double sum = 0;
  for (unsigned i = 0; i < k; i++)
    sum += v[i];
  atomic_store_explicit(&s->avg, k ? sum / k : 0, memory_order_relaxed);
  atomic_store_explicit(&s->med, k ? tdm__median(v, k) : 0, memory_order_relaxed);
  atomic_store_explicit(&s->count, s->n, memory_order_release);
}

bool tdm__model_observe(tdm_perfmodel *m, const char *codelet, uint64_t size, const char *cls,
                        double seconds) {
  if (!(seconds >= 0) || !isfinite(seconds))
    return true; /* not a duration: ignored */
  entry *e = entry_of(m, codelet, cls);
  if (!e)
    return false;
  TDM_PTHREAD(NULL, pthread_mutex_lock(&e->lock));
  size_entry *s = size_slot(e, size);
  if (s) {
    s->seen[s->n % TDM_MODEL_WINDOW] = seconds;
    s->n++;
    s->fresh = true;
    publish(s);
  }
  TDM_PTHREAD(NULL, pthread_mutex_unlock(&e->lock));
  return s != NULL;
}

/* What a prediction reads of s: its observations, its median. */
static unsigned count_of(const size_entry *s) {
  return atomic_load_explicit(&((size_entry *)s)->count, memory_order_acquire);
}

static double median(const size_entry *s) {
  return atomic_load_explicit(&((size_entry *)s)->med, memory_order_relaxed);
}

/* The calibrated sizes of e: their span and the range of their medians. */
typedef struct span {
  uint64_t lo, hi; /* sizes */
  double fast, slow; /* seconds */
} span;

/* log(time) = a + b log(size), least squares over e's calibrated sizes
 * (their span in *sp when not NULL); false with fewer than two. */
static bool fit(const entry *e, double *a, double *b, span *sp) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  unsigned k = 0;
  span r = {UINT64_MAX, 0, INFINITY, 0};
  for (const size_entry *s = FIRST(e->sizes); s; s = NEXT(s)) {
    double t = count_of(s) >= TDM_MODEL_CALIBRATION ? median(s) : 0;
    if (s->size == 0 || t <= 0)
      continue;
    double x = log((double)s->size), y = log(t);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    k++;
    r.lo = s->size < r.lo ? s->size : r.lo;
    r.hi = s->size > r.hi ? s->size : r.hi;
    r.fast = t < r.fast ? t : r.fast;
    r.slow = t > r.slow ? t : r.slow;
  }
  if (k < 2 || fabs(k * sxx - sx * sx) < 1e-12)
    return false;
  *b = (k * sxy - sx * sy) / (k * sxx - sx * sx);
  *a = (sy - *b * sx) / k;
  if (sp)
    *sp = r;
  return true;
}

/* The entry of (codelet, cls), *calibrated cleared (pointing at *room
 * when NULL), or NULL. */
static const entry *entry_for(const tdm_perfmodel *m, const char *codelet, const char *cls,
                              bool **calibrated, bool *room) {
  if (!*calibrated)
    *calibrated = room;
  **calibrated = false;
  return find(m, codelet, cls);
}

double tdm__model_predict(const tdm_perfmodel *m, const char *codelet, uint64_t size,
                          const char *cls, bool *calibrated) {
  bool room;
  const entry *e = entry_for(m, codelet, cls, &calibrated, &room);
  if (!e)
    return -1;
  const size_entry *at = size_in(e, size);
  unsigned n = at ? count_of(at) : 0;
  if (n) {
    *calibrated = n >= TDM_MODEL_CALIBRATION;
    return median(at);
  }
  /* A size not seen: the law fitted through the calibrated sizes, between
   * them only, and within the times seen there. Outside, a law fitted on
   * noise (two sizes close together, times from a loaded machine) can be
   * off by any factor: fitted on 96 and 104 bytes at 0.1 and 10 ms, its
   * exponent is 58 and it predicts 1e55 s for 1 KiB. Such a size is
   * calibrated as a new one (StarPU's regression models likewise predict
   * only near the sizes they were fitted on: perfmodel_history.c). */
  double a, b;
  span sp;
  if (size == 0 || !fit(e, &a, &b, &sp) || size < sp.lo || size > sp.hi)
    return -1;
  *calibrated = true;
  double p = exp(a + b * log((double)size));
  return p < sp.fast ? sp.fast : p > sp.slow ? sp.slow : p;
}

bool tdm__model_observe_linear(tdm_perfmodel *m, const char *codelet, uint64_t size,
                               const char *cls, double seconds) {
  uint64_t b = 1; /* the power of two at or below size: its record */
  while (b <= size / 2)
    b *= 2;
  return tdm__model_observe(m, codelet, b, cls, size ? seconds * (double)b / (double)size : 0);
}

double tdm__model_predict_linear(const tdm_perfmodel *m, const char *codelet, uint64_t size,
                                 const char *cls, bool *calibrated) {
  bool room;
  const entry *e = entry_for(m, codelet, cls, &calibrated, &room);
  if (!e)
    return -1;
  /* the time per unit of size over the windows of every size: their
   * sums' ratio, which work that varies from one task to the next (the
   * rows of an irregular range) does not bias as a median would */
  double seconds = 0, units = 0;
  unsigned seen = 0;
  for (const size_entry *s = FIRST(e->sizes); s; s = NEXT(s)) {
    unsigned n = count_of(s), k = n < TDM_MODEL_WINDOW ? n : TDM_MODEL_WINDOW;
    double avg = atomic_load_explicit(&((size_entry *)s)->avg, memory_order_relaxed);
    if (!k || s->size == 0 || !(avg >= 0))
      continue;
    seconds += k * avg;
    units += k * (double)s->size;
    seen += k;
  }
  if (!seen || units <= 0)
    return -1;
  *calibrated = seen >= TDM_MODEL_CALIBRATION;
  return seconds / units * (double)size;
}

bool tdm__model_law(const tdm_perfmodel *m, const char *codelet, const char *cls, double *c,
                    double *b) {
  const entry *e = find(m, codelet, cls);
  double a;
  if (!e || !fit(e, &a, b, NULL))
    return false;
  *c = exp(a);
  return true;
}

void tdm__model_each(const tdm_perfmodel *m, tdm_model_record_fn fn, void *data) {
  double seen[TDM_MODEL_WINDOW];
  for (const entry *e = FIRST(m->entries); e; e = NEXT(e))
    for (const size_entry *s = FIRST(e->sizes); s; s = NEXT(s)) {
      unsigned k = s->n < TDM_MODEL_WINDOW ? s->n : TDM_MODEL_WINDOW;
      for (unsigned j = 0; j < k; j++)
        seen[j] = s->seen[(s->n - k + j) % TDM_MODEL_WINDOW];
      if (!fn(data, e->codelet, e->cls, s->size, k, seen))
        return;
    }
}

tdm_status tdm__model_file(const tdm_runtime *rt, const char *app, char **out) {
  if (!app || !*app)
    app = program_invocation_short_name;
  if (!app || !*app)
    app = "unnamed";
  size_t n = strlen(app) < TDM_MODEL_APP_MAX ? strlen(app) : TDM_MODEL_APP_MAX;
  size_t len = sizeof TDM_MODEL_PREFIX - 1 + n + sizeof TDM_MODEL_SUFFIX;
  char *name = malloc(len), *at = name + sizeof TDM_MODEL_PREFIX - 1;
  if (!(*out = name)) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_create: out of memory");
    return TDM_ERR_NO_MEMORY;
  }
  memcpy(name, TDM_MODEL_PREFIX, sizeof TDM_MODEL_PREFIX - 1);
  for (size_t i = 0; i < n; i++) { /* a file name, whatever the program's name */
    char c = app[i];
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '+' || c == '-';
    at[i] = keep ? c : '_';
  }
  memcpy(at + n, TDM_MODEL_SUFFIX, sizeof TDM_MODEL_SUFFIX);
  return TDM_OK;
}

/* ---- files ---------------------------------------------------------------- */

#define HEADER "tandem-perfmodel 1\n"

/* Writes m's records to o, then the end line. */
static bool write_records(const tdm_perfmodel *m, FILE *f) {
  uint64_t h = TDM_FNV_OFFSET;
  unsigned records = 0;
  char line[256];
  h = tdm__fnv1a(HEADER, strlen(HEADER), h);
  fputs(HEADER, f);
  for (const entry *e = FIRST(m->entries); e; e = NEXT(e))
    for (const size_entry *s = FIRST(e->sizes); s; s = NEXT(s)) {
      unsigned k = s->n < TDM_MODEL_WINDOW ? s->n : TDM_MODEL_WINDOW;
      /* the names as they are, the numbers through a small buffer */
      int n = snprintf(line, sizeof line, "\t%llu\t%u", (unsigned long long)s->size, k);
      h = tdm__fnv1a(e->codelet, strlen(e->codelet), h);
      h = tdm__fnv1a("\t", 1, h);
      h = tdm__fnv1a(e->cls, strlen(e->cls), h);
      h = tdm__fnv1a(line, (size_t)n, h);
      fprintf(f, "%s\t%s%s", e->codelet, e->cls, line);
      for (unsigned j = 0; j < k; j++) { /* oldest first, so the window survives */
        n = snprintf(line, sizeof line, "\t%.9g", s->seen[(s->n - k + j) % TDM_MODEL_WINDOW]);
        h = tdm__fnv1a(line, (size_t)n, h);
        fputs(line, f);
      }
      h = tdm__fnv1a("\n", 1, h);
      fputc('\n', f);
      records++;
    }
  fprintf(f, "end %u %016llx\n", records, (unsigned long long)h);
  return !ferror(f);
}

/* Takes the file on disk into m, under the writers' lock: its windows
 * replace those m has not added to since it was loaded, and its records
 * that m lacks are added, so that what another process saved meanwhile
 * is kept; the records m loaded and has not added to that the file no
 * longer holds (or no file) are dropped, so that a reset meanwhile
 * (tdm__model_forget) is kept too. */
static void merge_disk(tdm_perfmodel *m, int dirfd, const char *name) {
  tdm_perfmodel *disk = tdm__model_new();
  if (!disk)
    return;
  /* quietly (no runtime to log to): the load at start said what was wrong
   * with the file */
  tdm_status st = tdm__model_load(disk, dirfd, name, NULL);
  bool gone = st != TDM_OK && faccessat(dirfd, name, F_OK, 0) != 0 && errno == ENOENT;
  if (st != TDM_OK && !gone) { /* unreadable: ours are written as they are */
    tdm__model_free(disk);
    return;
  }
  for (entry *e = FIRST(m->entries); e; e = NEXT(e))
    for (size_entry *s = FIRST(e->sizes); s; s = NEXT(s))
      s->on_disk = false;
  for (const entry *e = FIRST(disk->entries); e; e = NEXT(e))
    for (const size_entry *d = FIRST(e->sizes); d; d = NEXT(d)) {
      entry *me = entry_of(m, e->codelet, e->cls);
      size_entry *mine = me ? size_slot(me, d->size) : NULL;
      if (mine && !mine->fresh) { /* the file's window */
        mine->n = d->n;
        memcpy(mine->seen, d->seen, sizeof mine->seen);
        publish(mine);
      }
      if (mine)
        mine->on_disk = true;
    }
  tdm__model_free(disk);
  /* what this process loaded and did not measure again, and the file no
   * longer holds, was removed (tdm__model_forget): it stays removed */
  entry *_Atomic *link = &m->entries;
  for (entry *e; (e = FIRST(*link));) {
    size_entry *kept = NULL, *last = NULL;
    for (size_entry *s = FIRST(e->sizes), *next; s; s = next) {
      next = NEXT(s);
      if (s->fresh || s->on_disk) {
        atomic_store_explicit(&s->next, NULL, memory_order_relaxed);
        if (last)
          atomic_store_explicit(&last->next, s, memory_order_relaxed);
        else
          kept = s;
        last = s;
      } else {
        free(s);
      }
    }
    atomic_store_explicit(&e->sizes, kept, memory_order_relaxed);
    e->last = last;
    if (kept) {
      link = &e->next;
    } else {
      atomic_store_explicit(link, NEXT(e), memory_order_relaxed);
      entry_free(e);
    }
  }
}

/* One writer at a time: an exclusive flock on a lock file beside the
 * model (name + ".lock"), held until the descriptor returned is closed;
 * -1 (logged, `then` saying what happens instead) when it cannot be had. */
static int take_lock(int dirfd, const char *name, const tdm_runtime *rt, const char *then) {
  size_t n = strlen(name) + sizeof ".lock";
  char *lock_name = malloc(n);
  int lock = -1;
  if (lock_name) {
    snprintf(lock_name, n, "%s.lock", name);
    lock = openat(dirfd, lock_name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    while (lock >= 0 && flock(lock, LOCK_EX) != 0 && errno == EINTR)
      ;
  }
  if (lock < 0)
    tdm__log(rt, TDM_LOG_WARNING, "performance model: cannot lock %s: %s; %s",
             lock_name ? lock_name : name, lock_name ? strerror(errno) : "out of memory", then);
  free(lock_name);
  return lock;
}

/* m written whole over the file `name` (a new file renamed over it). */
static bool write_file(const tdm_perfmodel *m, int dirfd, const char *name,
                       const tdm_runtime *rt) {
  tdm_outfile o;
  if (!tdm__out_open(rt, &o, dirfd, name, 0600, TDM_LOG_WARNING, "performance model"))
    return false;
  if (!write_records(m, o.f)) {
    tdm__out_abort(&o);
    tdm__log(rt, TDM_LOG_WARNING, "performance model: cannot write %s", name);
    return false;
  }
  return tdm__out_commit(rt, &o);
}

bool tdm__model_named(const char *model, const char *codelet) {
  size_t n = strlen(codelet);
  return !strncmp(model, codelet, n) && (!model[n] || (model[n] == '#' && !strchr(codelet, '#')));
}

tdm_status tdm__model_forget(int dirfd, const char *name, const char *codelet,
                             const tdm_runtime *rt, unsigned *removed) {
  *removed = 0;
  int lock = take_lock(dirfd, name, rt, "nothing removed");
  if (lock < 0)
    return TDM_ERR_SYSTEM;
  tdm_perfmodel *m = tdm__model_new();
  tdm_status st = m ? TDM_OK : TDM_ERR_NO_MEMORY;
  /* a file that is not there has nothing to forget; a bad one, everything */
  tdm_status loaded = m ? tdm__model_load(m, dirfd, name, rt) : TDM_OK;
  for (entry *_Atomic *link = m ? &m->entries : NULL; link && FIRST(*link);) {
    entry *e = FIRST(*link);
    if (codelet && !tdm__model_named(e->codelet, codelet)) {
      link = &e->next;
      continue;
    }
    for (const size_entry *s = FIRST(e->sizes); s; s = NEXT(s))
      ++*removed;
    atomic_store_explicit(link, NEXT(e), memory_order_relaxed);
    entry_free(e);
  }
  if (m && (loaded == TDM_ERR_INVALID_ARG || (!FIRST(m->entries) && *removed))) {
    if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT) {
      tdm__log(rt, TDM_LOG_WARNING, "performance model: cannot remove %s: %s", name,
               strerror(errno));
      st = TDM_ERR_SYSTEM;
    }
  } else if (m && *removed && !write_file(m, dirfd, name, rt)) {
    st = TDM_ERR_SYSTEM;
  }
  tdm__model_free(m);
  close(lock);
  return st;
}

tdm_status tdm__model_save(tdm_perfmodel *m, int dirfd, const char *name, const tdm_runtime *rt) {
  /* under the lock, so that the merge reads what the previous writer
   * wrote */
  int lock = take_lock(dirfd, name, rt, "saving unmerged");
  if (lock >= 0)
    merge_disk(m, dirfd, name);
  bool ok = write_file(m, dirfd, name, rt);
  if (lock >= 0)
    close(lock); /* and the lock with it */
  for (entry *e = FIRST(m->entries); ok && e; e = NEXT(e))
    for (size_entry *s = FIRST(e->sizes); s; s = NEXT(s))
      s->fresh = false;
  return ok ? TDM_OK : TDM_ERR_SYSTEM;
}

const char *tdm__model_parse(tdm_perfmodel *m, FILE *f) {
  clear(m);
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
    uint64_t size, k;
    if (!codelet || !cls || !size_s || !count_s || !tdm__parse_count(size_s, UINT64_MAX, &size) ||
        !tdm__parse_count(count_s, TDM_MODEL_WINDOW, &k)) {
      why = "a malformed record";
      break;
    }
    for (unsigned i = 0; i < k && !why; i++) {
      char *v = strtok(NULL, "\t"), *end;
      double secs = v ? strtod(v, &end) : -1;
      if (!v || *end || !(secs >= 0 && secs <= TDM_MODEL_MAX_SECONDS))
        why = "a malformed duration";
      else if (!tdm__model_observe(m, codelet, size, cls, secs))
        why = "out of memory";
    }
    if (!why && strtok(NULL, "\t"))
      why = "a malformed record";
    records++;
  }
  if (!why && !ended)
    why = "truncated (no end line)";
  for (entry *e = FIRST(m->entries); e; e = NEXT(e)) /* as loaded: nothing new */
    for (size_entry *s = FIRST(e->sizes); s; s = NEXT(s))
      s->fresh = false;
  if (why)
    clear(m);
  return why;
}

tdm_status tdm__model_load(tdm_perfmodel *m, int dirfd, const char *path,
                          const tdm_runtime *rt) {
  clear(m);
  int fd = tdm__open_trusted(rt, dirfd, path, "performance model");
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    if (fd >= 0)
      close(fd);
    return TDM_ERR_SYSTEM;
  }
  const char *why = tdm__model_parse(m, f);
  fclose(f);
  if (why) {
    tdm__log(rt, TDM_LOG_WARNING, "performance model: ignoring %s: %s; calibrating again", path,
             why);
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
