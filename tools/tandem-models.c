/*
 * tandem-models: what the runtime learnt of each application's codelets
 * (the performance models placement plans with), and a way to forget it.
 *
 *   tandem-models [--cache-dir DIR] [--json] [list]
 *   tandem-models [--cache-dir DIR] [--json] show APP [CODELET]
 *   tandem-models [--cache-dir DIR] reset APP [CODELET]
 *
 * The cache directory is the runtime's: --cache-dir, else
 * TANDEM_CACHE_DIR, else $XDG_CACHE_HOME/tandem, else ~/.cache/tandem.
 * An application's models are in one file there (TANDEM_APP, or the
 * program's name, keys it); `show` gives, per codelet and kind of worker,
 * each data size seen with the durations kept, their median, and the
 * power law fitted through them; `reset` removes a codelet's records, or
 * the application's, under the lock running programs take to save.
 */
#include "../runtime/internal.h"
#include "../runtime/sched/perfmodel.h"
#include "units.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct record {
  char *codelet, *cls;
  uint64_t size;
  unsigned k;
  double median, min, max;
} record;

typedef struct records {
  record *r;
  size_t n, cap;
  bool failed;
} records;

static bool collect(void *data, const char *codelet, const char *cls, uint64_t size, unsigned k,
                    const double *seen) {
  records *rs = data;
  if (rs->n == rs->cap) {
    size_t cap = rs->cap ? 2 * rs->cap : 64;
    record *r = realloc(rs->r, cap * sizeof *r);
    if (!r) {
      rs->failed = true;
      return false;
    }
    rs->r = r;
    rs->cap = cap;
  }
  record *r = &rs->r[rs->n];
  double v[TDM_MODEL_WINDOW];
  memcpy(v, seen, k * sizeof *v);
  r->codelet = strdup(codelet);
  r->cls = strdup(cls);
  if (!r->codelet || !r->cls) {
    free(r->codelet);
    free(r->cls);
    rs->failed = true;
    return false;
  }
  r->size = size;
  r->k = k;
  r->min = r->max = k ? v[0] : 0;
  for (unsigned i = 1; i < k; i++) {
    r->min = v[i] < r->min ? v[i] : r->min;
    r->max = v[i] > r->max ? v[i] : r->max;
  }
  r->median = k ? tdm__median(v, k) : 0;
  rs->n++;
  return true;
}

static int by_name(const void *a, const void *b) {
  const record *x = a, *y = b;
  int c = strcmp(x->codelet, y->codelet);
  if (!c)
    c = strcmp(x->cls, y->cls);
  return c ? c : (x->size > y->size) - (x->size < y->size);
}

static void free_records(records *rs) {
  for (size_t i = 0; i < rs->n; i++) {
    free(rs->r[i].codelet);
    free(rs->r[i].cls);
  }
  free(rs->r);
}

static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

typedef struct tool {
  int dir;
  const char *dir_path;
  bool json;
} tool;

/* The application's name from a model file's name, or NULL. */
static char *app_of(const char *file) {
  size_t n = strlen(file), p = strlen(TDM_MODEL_PREFIX), s = strlen(TDM_MODEL_SUFFIX);
  if (n <= p + s || strncmp(file, TDM_MODEL_PREFIX, p) || strcmp(file + n - s, TDM_MODEL_SUFFIX))
    return NULL;
  return strndup(file + p, n - p - s);
}

/* Loads the file into a sorted record list; false (said) when it is
 * missing, not the user's own or not a model. */
static bool load(const tool *t, const char *file, tdm_perfmodel *m, records *rs) {
  tdm_status st = tdm__model_load(m, t->dir, file, NULL);
  if (st) {
    fprintf(stderr, "tandem-models: %s/%s: %s\n", t->dir_path, file,
            st == TDM_ERR_INVALID_ARG ? "not a valid model file (the runtime ignores it)"
            : faccessat(t->dir, file, F_OK, AT_SYMLINK_NOFOLLOW) != 0
                ? "no such file"
                : "not read: not a regular file of this user's that only this user may write");
    return false;
  }
  tdm__model_each(m, collect, rs);
  if (rs->failed) {
    fprintf(stderr, "tandem-models: out of memory\n");
    return false;
  }
  qsort(rs->r, rs->n, sizeof *rs->r, by_name);
  return true;
}

static unsigned count_codelets(const records *rs) {
  unsigned n = 0;
  for (size_t i = 0; i < rs->n; i++)
    n += !i || strcmp(rs->r[i].codelet, rs->r[i - 1].codelet);
  return n;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list(const tool *t) {
  int fd = dup(t->dir);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0)
      close(fd);
    fprintf(stderr, "tandem-models: %s: %s\n", t->dir_path, strerror(errno));
    return 1;
  }
  char **files = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    char *app = app_of(e->d_name);
    if (!app)
      continue;
    free(app);
    char **more = realloc(files, (n + 1) * sizeof *files);
    if (!more || !(more[n] = strdup(e->d_name))) {
      fprintf(stderr, "tandem-models: out of memory\n");
      files = more ? more : files;
      break;
    }
    files = more;
    n++;
  }
  closedir(d);
  if (n)
    qsort(files, n, sizeof *files, cmp_str);
  if (t->json) {
    printf("{\"cache_dir\": ");
    json_string(t->dir_path);
    printf(", \"applications\": [");
  } else if (!n) {
    printf("no performance models in %s\n", t->dir_path);
  } else {
    printf("performance models in %s:\n%-24s %9s %8s %13s\n", t->dir_path, "application",
           "codelets", "sizes", "observations");
  }
  unsigned shown = 0;
  for (size_t i = 0; i < n; i++) {
    char *app = app_of(files[i]);
    tdm_perfmodel *m = tdm__model_new();
    records rs = {0};
    if (app && m && load(t, files[i], m, &rs)) {
      unsigned long obs = 0;
      for (size_t j = 0; j < rs.n; j++)
        obs += rs.r[j].k;
      if (t->json) {
        printf("%s{\"app\": ", shown ? ", " : "");
        json_string(app);
        printf(", \"file\": ");
        json_string(files[i]);
        printf(", \"codelets\": %u, \"sizes\": %zu, \"observations\": %lu}",
               count_codelets(&rs), rs.n, obs);
      } else {
        printf("%-24s %9u %8zu %13lu\n", app, count_codelets(&rs), rs.n, obs);
      }
      shown++;
    }
    free_records(&rs);
    tdm__model_free(m);
    free(app);
    free(files[i]);
  }
  free(files);
  if (t->json)
    printf("]}\n");
  return 0;
}

static int show(const tool *t, const char *app, const char *codelet) {
  char *file = NULL;
  if (tdm__model_file(NULL, app, &file))
    return 1;
  tdm_perfmodel *m = tdm__model_new();
  records rs = {0};
  int rc = 1;
  if (!m || !load(t, file, m, &rs))
    goto done;
  size_t first = 0;
  /* a codelet's name shows its models of every footprint too */
  while (codelet && first < rs.n && !tdm__model_named(rs.r[first].codelet, codelet))
    first++;
  if (codelet && first == rs.n) {
    fprintf(stderr, "tandem-models: %s has no model of codelet %s\n", app, codelet);
    goto done;
  }
  if (t->json) {
    printf("{\"app\": ");
    json_string(app);
    printf(", \"file\": ");
    json_string(file);
    printf(", \"codelets\": [");
  } else {
    printf("application %s (%s/%s)\n", app, t->dir_path, file);
  }
  char b1[32], b2[32], b3[32];
  for (size_t i = first; i < rs.n;) {
    if (codelet && !tdm__model_named(rs.r[i].codelet, codelet)) {
      i++;
      continue;
    }
    const char *name = rs.r[i].codelet;
    if (t->json) {
      printf("%s{\"codelet\": ", i > first ? ", " : "");
      json_string(name);
      printf(", \"classes\": [");
    } else {
      printf("\ncodelet %s\n", name);
    }
    for (size_t c = i; i < rs.n && !strcmp(rs.r[i].codelet, name); c = i) {
      const char *cls = rs.r[c].cls;
      double coef = 0, expo = 0;
      bool law = tdm__model_law(m, name, cls, &coef, &expo);
      if (t->json) {
        printf("%s{\"class\": ", c > 0 && !strcmp(rs.r[c - 1].codelet, name) ? ", " : "");
        json_string(cls);
        printf(", \"sizes\": [");
      } else {
        printf("  on %s\n    %14s %5s %10s %10s %10s\n", cls, "bytes", "kept", "median", "min",
               "max");
      }
      for (; i < rs.n && !strcmp(rs.r[i].codelet, name) && !strcmp(rs.r[i].cls, cls); i++) {
        const record *r = &rs.r[i];
        if (t->json)
          printf("%s{\"bytes\": %llu, \"count\": %u, \"median_s\": %.9g, \"min_s\": %.9g, "
                 "\"max_s\": %.9g, \"calibrated\": %s}",
                 i > c ? ", " : "", (unsigned long long)r->size, r->k, r->median, r->min, r->max,
                 r->k >= TDM_MODEL_CALIBRATION ? "true" : "false");
        else
          printf("    %14llu %5u %10s %10s %10s%s\n", (unsigned long long)r->size, r->k,
                 units_seconds(r->median, b1, sizeof b1),
                 units_seconds(r->min, b2, sizeof b2),
                 units_seconds(r->max, b3, sizeof b3),
                 r->k >= TDM_MODEL_CALIBRATION ? "" : "  (calibrating)");
      }
      if (t->json) {
        if (law)
          printf("], \"law\": {\"seconds_at_1_byte\": %.9g, \"exponent\": %.6g}}", coef, expo);
        else
          printf("], \"law\": null}");
      } else if (law) {
        printf("    law: time = %.4g s * bytes^%.3f\n", coef, expo);
      } else {
        printf("    law: none yet (fitted once two sizes are calibrated)\n");
      }
    }
    if (t->json)
      printf("]}");
  }
  if (t->json)
    printf("]}\n");
  rc = 0;
done:
  free_records(&rs);
  tdm__model_free(m);
  free(file);
  return rc;
}

static int reset(const tool *t, const char *app, const char *codelet) {
  char *file = NULL;
  if (tdm__model_file(NULL, app, &file))
    return 1;
  unsigned removed = 0;
  tdm_status st = tdm__model_forget(t->dir, file, codelet, NULL, &removed);
  if (st)
    fprintf(stderr, "tandem-models: %s/%s: could not be changed (%s)\n", t->dir_path, file,
            tdm_strerror(st));
  else if (!removed)
    printf("%s: no model%s%s to reset\n", app, codelet ? " of codelet " : "",
           codelet ? codelet : "");
  else
    printf("%s: %u size%s forgotten%s%s\n", app, removed, removed == 1 ? "" : "s",
           codelet ? " of codelet " : "", codelet ? codelet : "");
  free(file);
  return st ? 1 : 0;
}

static int usage(void) {
  fprintf(stderr, "usage: tandem-models [--cache-dir DIR] [--json] [list]\n"
                  "       tandem-models [--cache-dir DIR] [--json] show APP [CODELET]\n"
                  "       tandem-models [--cache-dir DIR] reset APP [CODELET]\n");
  return 2;
}

int main(int argc, char **argv) {
  tool t = {.dir = -1};
  const char *dir = getenv("TANDEM_CACHE_DIR"), *args[3] = {NULL, NULL, NULL};
  unsigned nargs = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      t.json = true;
    else if (!strcmp(argv[i], "--cache-dir") && i + 1 < argc)
      dir = argv[++i];
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
      return usage() - 2;
    else if (argv[i][0] == '-' || nargs == 3)
      return usage();
    else
      args[nargs++] = argv[i];
  }
  const char *cmd = nargs ? args[0] : "list";
  bool is_list = !strcmp(cmd, "list"), is_show = !strcmp(cmd, "show"),
       is_reset = !strcmp(cmd, "reset");
  if ((!is_list && !is_show && !is_reset) || (is_list && nargs > 1) ||
      (!is_list && nargs < 2) || (is_reset && t.json))
    return usage();
  char *path = tdm__cache_path(dir && *dir ? dir : NULL);
  if (!path) {
    fprintf(stderr, "tandem-models: no cache directory (HOME is not set)\n");
    return 1;
  }
  t.dir_path = path;
  t.dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int rc = 0;
  if (t.dir < 0 && errno == ENOENT && is_list && !t.json) {
    printf("no performance models in %s\n", path);
  } else if (t.dir < 0 && errno == ENOENT && is_list) {
    printf("{\"cache_dir\": ");
    json_string(path);
    printf(", \"applications\": []}\n");
  } else if (t.dir < 0) {
    fprintf(stderr, "tandem-models: %s: %s\n", path, strerror(errno));
    rc = 1;
  } else {
    rc = is_list ? list(&t) : is_show ? show(&t, args[1], args[2]) : reset(&t, args[1], args[2]);
    close(t.dir);
  }
  free(path);
  return rc;
}
