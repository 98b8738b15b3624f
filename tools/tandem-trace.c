/*
 * tandem-trace: turns a Tandem trace (TANDEM_TRACE=trace.json) into a
 * standalone SVG Gantt chart that opens in any browser: one row per CPU
 * worker, per device and per direction of each device's copies; tasks as
 * bars coloured by codelet, with a legend; copies shaded; idle and parked
 * periods as thin grey bars; a time axis. Hovering a bar shows what it is.
 * Row labels and legend entries get the room their text needs.
 *
 * With --summary, a summary on standard output instead (or besides, with
 * -o): per worker, the share of the run it spent on tasks, looking for
 * work, parked and otherwise; per codelet and class of worker, the tasks'
 * count, total and mean time, and for the chunks of a data-parallel
 * operation (tdm_parallel_submit) their elements and the class's share of
 * them; the critical path (the longest chain of
 * dependent tasks, by their measured times) and its length against the
 * makespan.
 *
 *   tandem-trace trace.json [-o chart.svg] [--width PIXELS] [--summary]
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "units.h"

typedef struct bar {
  unsigned track;
  double ts, dur; /* microseconds */
  const char *name;
  /* a mark: what the application did, at ts (an instant event) */
  enum { BAR_TASK, BAR_COPY, BAR_IDLE, BAR_PARKED, BAR_PAUSE, BAR_RESUME, BAR_CANCEL } kind;
  long long id;
  long long bytes;
  long long elements; /* a data-parallel operation's chunk: its elements; else 0 */
} bar;

typedef struct track {
  unsigned tid;
  long sort;
  const char *name, *cls;
  unsigned row;
  bool used;
} track;

/* A dependency: the flow event at the start of the predecessor's task
 * ("s") or the successor's ("f"). */
typedef struct flow {
  double id;
  unsigned track;
  double ts;
  bool start;
} flow;

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) {
      char *more = realloc(buf, cap *= 2);
      if (!more) {
        free(buf);
        buf = NULL;
      }
      buf = more;
    }
  }
  fclose(f);
  if (buf)
    buf[n] = 0;
  return buf;
}

static void xml_text(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '<':
      fputs("&lt;", f);
      break;
    case '>':
      fputs("&gt;", f);
      break;
    case '&':
      fputs("&amp;", f);
      break;
    case '"':
      fputs("&quot;", f);
      break;
    default:
      if ((unsigned char)*s >= 0x20 || *s == '\t')
        fputc(*s, f);
    }
  }
}

static const json *member(const json *o, const char *k, json_type type) {
  const json *v = json_get(o, k);
  return v && v->type == type ? v : NULL;
}

/* Colours for codelets, in order of first appearance (Okabe & Ito's
 * colour-blind-safe palette, then more). */
static const char *const palette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9",
                                      "#D55E00", "#F0E442", "#7F3C8D", "#11A579", "#3969AC",
                                      "#F2B701", "#E73F74"};
enum { NPALETTE = sizeof palette / sizeof palette[0] };

/* A tick step of 1, 2 or 5 times a power of ten giving about n ticks. */
static double tick_step(double span, int n) {
  double raw = span / n, p = pow(10, floor(log10(raw)));
  return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

static void usage(FILE *to) {
  fprintf(to, "usage: tandem-trace trace.json [-o chart.svg] [--width PIXELS] [--summary]\n"
              "Turns a Tandem trace (TANDEM_TRACE=trace.json) into an SVG Gantt chart, or\n"
              "with --summary, a summary of it (utilisation, codelets, critical path).\n");
}

/* Pixels a label of n characters takes at 12 px sans-serif, generously
 * (an average glyph is about 0.55 em). */
static int text_px(size_t n) { return (int)(7.2 * (double)n) + 4; }

/* a duration of `us` microseconds, for people */
static const char *shown_time(double us, char *buf, size_t n) {
  return units_seconds(us * 1e-6, buf, n);
}

static const bar *sorted_bars; /* for the comparisons below */

static int by_track_time(const void *a, const void *b) {
  const bar *x = &sorted_bars[*(const size_t *)a], *y = &sorted_bars[*(const size_t *)b];
  if (x->track != y->track)
    return x->track < y->track ? -1 : 1;
  return (x->ts > y->ts) - (x->ts < y->ts);
}

static int by_start(const void *a, const void *b) {
  const bar *x = &sorted_bars[*(const size_t *)a], *y = &sorted_bars[*(const size_t *)b];
  if (x->ts != y->ts)
    return x->ts < y->ts ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

typedef struct dep {
  long succ, pred;
} dep;

static int by_succ(const void *a, const void *b) {
  const dep *x = a, *y = b;
  return (x->succ > y->succ) - (x->succ < y->succ);
}

static int by_flow(const void *a, const void *b) {
  const flow *x = a, *y = b;
  if (x->id != y->id)
    return x->id < y->id ? -1 : 1;
  return (int)y->start - (int)x->start; /* "s" first */
}

/* The task bar starting at ts on track k (tasks[] sorted by track and
 * time, as indices into bars), or -1. */
static long task_at(const bar *bars, const size_t *tasks, size_t ntasks, unsigned k, double ts) {
  size_t lo = 0, hi = ntasks;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const bar *b = &bars[tasks[mid]];
    if (b->track < k || (b->track == k && b->ts < ts - 1e-6))
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < ntasks && bars[tasks[lo]].track == k && fabs(bars[tasks[lo]].ts - ts) <= 1e-6)
    return (long)tasks[lo];
  return -1;
}

/* Whether a track is listed: one with something on it; with named_too
 * (the summary) also one the trace names (a worker that ran nothing). */
static bool listed(const track *t, bool named_too) {
  return t->used || (named_too && t->name[0]);
}

/* The smallest sort index at least `want` among the listed tracks; -1
 * when none is left (the trace's order, a sort index at a time). */
static long next_sort(const track *tracks, size_t ntracks, long want, bool named_too) {
  long next = -1;
  for (size_t k = 0; k < ntracks; k++)
    if (listed(&tracks[k], named_too) && tracks[k].sort >= want &&
        (next < 0 || tracks[k].sort < next))
      next = tracks[k].sort;
  return next;
}

/* The summary (see the top of the file) on standard output. */
static int summary(const char *in, const track *tracks, size_t ntracks, const bar *bars,
                   size_t nbars, flow *flows, size_t nflows, double t_min, double t_max) {
  double span = t_max - t_min;
  size_t ntasks = 0;
  for (size_t i = 0; i < nbars; i++)
    ntasks += bars[i].kind == BAR_TASK;
  size_t *tasks = calloc(ntasks + 1, sizeof *tasks);
  double *cp = calloc(nbars + 1, sizeof *cp);
  long *via = calloc(nbars + 1, sizeof *via), *best_pred = NULL;
  if (!tasks || !cp || !via) {
    fprintf(stderr, "tandem-trace: out of memory\n");
    free(tasks);
    free(cp);
    free(via);
    return 1;
  }
  ntasks = 0;
  for (size_t i = 0; i < nbars; i++)
    if (bars[i].kind == BAR_TASK)
      tasks[ntasks++] = i;
  char b1[32], b2[32], b3[32];
  printf("%s: %zu tasks, makespan %s (first event to last)\n\n", in, ntasks,
         shown_time(span, b1, sizeof b1));

  /* workers: every track with something on it or a name, in the
   * trace's order (a worker that ran nothing is listed too) */
  size_t wname = 6;
  for (size_t k = 0; k < ntracks; k++)
    if (listed(&tracks[k], true) && strlen(tracks[k].name) > wname)
      wname = strlen(tracks[k].name);
  printf("%-*s %7s %7s %8s %7s %7s\n", (int)wname, "worker", "tasks", "busy", "looking", "parked",
         "other");
  for (long want = 0, sort; (sort = next_sort(tracks, ntracks, want, true)) >= 0;
       want = sort + 1) {
    for (size_t k = 0; k < ntracks; k++) {
      if (!listed(&tracks[k], true) || tracks[k].sort != sort)
        continue;
      double busy = 0, looking = 0, parked = 0;
      size_t n = 0;
      for (size_t i = 0; i < nbars; i++) {
        if (bars[i].track != k)
          continue;
        if (bars[i].kind == BAR_TASK || bars[i].kind == BAR_COPY) {
          busy += bars[i].dur;
          n += bars[i].kind == BAR_TASK;
        } else if (bars[i].kind == BAR_PARKED) {
          parked += bars[i].dur;
        } else if (bars[i].kind == BAR_IDLE) {
          looking += bars[i].dur;
        }
      }
      double other = span - busy - looking - parked;
      printf("%-*s %7zu %6.1f%% %7.1f%% %6.1f%% %6.1f%%\n", (int)wname, tracks[k].name, n,
             100 * busy / span, 100 * looking / span, 100 * parked / span,
             100 * (other > 0 ? other : 0) / span);
    }
  }

  /* what the application did: pauses (and how long, to the resume or
   * the end), cancels */
  size_t npause = 0, ncancel = 0;
  double paused = 0, paused_at = -1;
  for (size_t i = 0; i < nbars; i++) { /* in time order on the one track */
    if (bars[i].kind == BAR_PAUSE && paused_at < 0) {
      npause++;
      paused_at = bars[i].ts;
    } else if (bars[i].kind == BAR_RESUME && paused_at >= 0) {
      paused += bars[i].ts - paused_at;
      paused_at = -1;
    }
    ncancel += bars[i].kind == BAR_CANCEL;
  }
  if (paused_at >= 0)
    paused += t_max - paused_at;
  if (npause || ncancel) {
    printf("\napplication: %zu pause%s (paused %s in all), %zu cancel%s", npause,
           npause == 1 ? "" : "s", shown_time(paused, b1, sizeof b1), ncancel,
           ncancel == 1 ? "" : "s");
    for (size_t i = 0, shown = 0; i < nbars && shown < 4; i++)
      if (bars[i].kind == BAR_CANCEL)
        printf("%s group %s at %s (%lld tasks not ended)", shown++ ? "," : ":", bars[i].name,
               shown_time(bars[i].ts - t_min, b2, sizeof b2), bars[i].bytes);
    printf("\n");
  }

  /* codelets, per class of worker */
  size_t cname = 7, kname = 5;
  for (size_t t = 0; t < ntasks; t++) {
    const bar *b = &bars[tasks[t]];
    if (strlen(b->name) > cname)
      cname = strlen(b->name);
    if (strlen(tracks[b->track].cls) > kname)
      kname = strlen(tracks[b->track].cls);
  }
  bool chunks = false; /* data-parallel operations: their shares */
  for (size_t t = 0; t < ntasks; t++)
    chunks |= bars[tasks[t]].elements > 0;
  printf("\n%-*s %-*s %7s %10s %10s%s\n", (int)cname, "codelet", (int)kname, "class", "count",
         "total", "mean", chunks ? "   elements  share" : "");
  /* codelets in the order they first ran, each with its classes */
  bool *done = calloc(ntasks + 1, sizeof *done);
  for (size_t first = 0; done && first < ntasks; first++) {
    const char *name = bars[tasks[first]].name;
    for (size_t t = first; t < ntasks; t++) {
      const bar *b = &bars[tasks[t]];
      if (done[t] || strcmp(b->name, name))
        continue;
      const char *cls = tracks[b->track].cls;
      double total = 0;
      size_t n = 0;
      long long elements = 0, all = 0; /* a chunk's, on this class, and of every class */
      for (size_t u = first; u < ntasks; u++) {
        const bar *c = &bars[tasks[u]];
        if (strcmp(c->name, name))
          continue;
        all += c->elements;
        if (u >= t && !done[u] && !strcmp(tracks[c->track].cls, cls)) {
          done[u] = true;
          total += c->dur;
          elements += c->elements;
          n++;
        }
      }
      printf("%-*s %-*s %7zu %10s %10s", (int)cname, name, (int)kname, cls, n,
             shown_time(total, b1, sizeof b1), shown_time(total / (double)n, b2, sizeof b2));
      if (all > 0)
        printf(" %10lld %5.1f%%", elements, 100.0 * (double)elements / (double)all);
      printf("\n");
    }
  }
  free(done);

  /* the critical path: tasks in order of start (a successor starts after
   * its predecessors end), each the longest chain ending with it */
  sorted_bars = bars;
  qsort(tasks, ntasks, sizeof *tasks, by_track_time);
  qsort(flows, nflows, sizeof *flows, by_flow);
  best_pred = malloc((nbars + 1) * sizeof *best_pred);
  size_t *order = malloc((ntasks + 1) * sizeof *order);
  size_t nedges = 0;
  if (!best_pred || !order) {
    fprintf(stderr, "tandem-trace: out of memory\n");
    free(tasks);
    free(cp);
    free(via);
    free(best_pred);
    free(order);
    return 1;
  }
  for (size_t i = 0; i < nbars; i++)
    via[i] = -1;
  /* the dependencies, as (successor, predecessor) bars sorted by
   * successor */
  dep *deps = malloc((nflows + 1) * sizeof *deps);
  for (size_t i = 0; deps && i + 1 < nflows; i++) {
    if (!flows[i].start || flows[i + 1].start || flows[i].id != flows[i + 1].id)
      continue;
    long p = task_at(bars, tasks, ntasks, flows[i].track, flows[i].ts);
    long s = task_at(bars, tasks, ntasks, flows[i + 1].track, flows[i + 1].ts);
    if (p >= 0 && s >= 0)
      deps[nedges++] = (dep){s, p};
  }
  if (deps)
    qsort(deps, nedges, sizeof *deps, by_succ);
  memcpy(order, tasks, ntasks * sizeof *order);
  qsort(order, ntasks, sizeof *order, by_start);
  long last = -1;
  for (size_t t = 0; t < ntasks; t++) {
    size_t i = order[t];
    double longest = 0;
    best_pred[i] = -1;
    size_t lo = 0, hi = nedges; /* the first dependency of i */
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (deps[mid].succ < (long)i)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (size_t e = lo; e < nedges && deps[e].succ == (long)i; e++)
      if (cp[deps[e].pred] > longest) {
        longest = cp[deps[e].pred];
        best_pred[i] = deps[e].pred;
      }
    cp[i] = longest + bars[i].dur;
    if (last < 0 || cp[i] > cp[last])
      last = (long)i;
  }
  if (last < 0) {
    printf("\ncritical path: no tasks\n");
  } else {
    size_t len = 0;
    for (long i = last; i >= 0; i = best_pred[i])
      via[len++] = i;
    printf("\ncritical path: %zu task%s, %s of work = %.0f%% of the makespan (%s)%s\n", len,
           len == 1 ? "" : "s", shown_time(cp[last], b1, sizeof b1), 100 * cp[last] / span,
           shown_time(span, b2, sizeof b2),
           nedges ? "" : "; the trace holds no dependencies");
    for (size_t k = len; k-- > 0;) {
      if (len > 20 && k == len - 10) { /* its first and last ten */
        printf("  ... %zu more\n", len - 20);
        k = 10;
      }
      const bar *b = &bars[via[k]];
      printf("  %s #%lld on %s, %s\n", b->name, b->id, tracks[b->track].name,
             shown_time(b->dur, b3, sizeof b3));
    }
  }
  free(deps);
  free(tasks);
  free(cp);
  free(via);
  free(best_pred);
  free(order);
  return 0;
}

/* ---- reading a trace ------------------------------------------------------ */

/* A trace's rows, bars, codelets (in order of first appearance) and
 * dependencies, and the times it spans (microseconds). */
typedef struct trace {
  track *tracks;
  bar *bars;
  const char **codelets;
  flow *flows;
  size_t ntracks, nbars, ncodelets, nflows;
  unsigned nrows;
  double t_min, t_max;
} trace;

/* The track of thread id `tid`, added if new. */
static size_t track_of(trace *tr, unsigned tid) {
  size_t k;
  for (k = 0; k < tr->ntracks && tr->tracks[k].tid != tid; k++)
    ;
  if (k == tr->ntracks)
    tr->tracks[tr->ntracks++] = (track){.tid = tid, .sort = (long)tid, .name = ""};
  return k;
}

/* A metadata event: a track's name and class, or its place. */
static void add_metadata(trace *tr, size_t k, const json *nm, const json *args) {
  const json *v;
  if (!strcmp(nm->string, "thread_name") && (v = member(args, "name", JSON_STRING))) {
    tr->tracks[k].name = v->string;
    if ((v = member(args, "class", JSON_STRING)))
      tr->tracks[k].cls = v->string;
  } else if (!strcmp(nm->string, "thread_sort_index") &&
             (v = member(args, "sort_index", JSON_NUMBER))) {
    tr->tracks[k].sort = (long)v->number;
  }
}

/* A complete event ("X"): a task, a copy, or a worker looking for work or
 * parked. */
static void add_bar(trace *tr, size_t k, const json *e, const json *args, const char *cat) {
  bar *b = &tr->bars[tr->nbars++];
  b->track = (unsigned)k;
  b->ts = member(e, "ts", JSON_NUMBER)->number;
  b->dur = member(e, "dur", JSON_NUMBER)->number;
  b->name = member(e, "name", JSON_STRING)->string;
  b->id = -1;
  const json *v;
  if (!strcmp(cat, "task")) {
    b->kind = BAR_TASK;
    if (args && (v = member(args, "id", JSON_NUMBER)))
      b->id = (long long)v->number;
    b->elements = args && (v = member(args, "elements", JSON_NUMBER)) && v->number > 0
                      ? (long long)v->number
                      : 0;
    size_t c;
    for (c = 0; c < tr->ncodelets && strcmp(tr->codelets[c], b->name); c++)
      ;
    if (c == tr->ncodelets)
      tr->codelets[tr->ncodelets++] = b->name;
  } else if (!strcmp(cat, "transfer")) {
    b->kind = BAR_COPY;
    if (args && (v = member(args, "bytes", JSON_NUMBER)))
      b->bytes = (long long)v->number;
  } else {
    b->kind = !strcmp(b->name, "parked") ? BAR_PARKED : BAR_IDLE;
  }
  tr->tracks[k].used = true;
  if (b->ts < tr->t_min)
    tr->t_min = b->ts;
  if (b->ts + b->dur > tr->t_max)
    tr->t_max = b->ts + b->dur;
}

/* An instant event of the application's: a pause, a resume, a group's
 * cancel (the group's name as its name, its tasks not ended as bytes). */
static void add_mark(trace *tr, size_t k, const json *nm, double ts, const json *args) {
  bar *b = &tr->bars[tr->nbars++];
  *b = (bar){.track = (unsigned)k, .ts = ts, .name = nm->string, .id = -1};
  const json *v;
  if (!strcmp(nm->string, "pause")) {
    b->kind = BAR_PAUSE;
  } else if (!strcmp(nm->string, "resume")) {
    b->kind = BAR_RESUME;
  } else {
    b->kind = BAR_CANCEL;
    if (args && (v = member(args, "group", JSON_STRING)))
      b->name = v->string;
    if (args && (v = member(args, "not_ended", JSON_NUMBER)))
      b->bytes = (long long)v->number;
  }
  if (ts < tr->t_min)
    tr->t_min = ts;
  if (ts > tr->t_max)
    tr->t_max = ts;
}

static void add_event(trace *tr, const json *e) {
  const json *ph = member(e, "ph", JSON_STRING), *tid = member(e, "tid", JSON_NUMBER);
  if (!ph || !tid)
    return;
  size_t k = track_of(tr, (unsigned)tid->number);
  const json *args = member(e, "args", JSON_OBJECT);
  const json *nm = member(e, "name", JSON_STRING);
  if (!strcmp(ph->string, "M")) {
    if (nm && args)
      add_metadata(tr, k, nm, args);
    return;
  }
  const json *ts = member(e, "ts", JSON_NUMBER), *dur = member(e, "dur", JSON_NUMBER);
  const json *cat = member(e, "cat", JSON_STRING), *fid = member(e, "id", JSON_NUMBER);
  if ((!strcmp(ph->string, "s") || !strcmp(ph->string, "f")) && ts && fid) {
    tr->flows[tr->nflows++] = (flow){fid->number, (unsigned)k, ts->number, ph->string[0] == 's'};
    return;
  }
  if (!strcmp(ph->string, "X") && ts && dur && cat && nm)
    add_bar(tr, k, e, args, cat->string);
  else if (!strcmp(ph->string, "i") && ts && cat && nm && !strcmp(cat->string, "application"))
    add_mark(tr, k, nm, ts->number, args);
}

/* Rows: the tracks with something on them, in the trace's order; a
 * trace without classes makes each row its own class. */
static void order_rows(trace *tr) {
  if (!tr->nbars) {
    tr->t_min = 0;
    tr->t_max = 1;
  }
  if (tr->t_max <= tr->t_min)
    tr->t_max = tr->t_min + 1;
  tr->nrows = 0;
  for (long want = 0, next; (next = next_sort(tr->tracks, tr->ntracks, want, false)) >= 0;
       want = next + 1)
    for (size_t k = 0; k < tr->ntracks; k++)
      if (listed(&tr->tracks[k], false) && tr->tracks[k].sort == next)
        tr->tracks[k].row = tr->nrows++;
  for (size_t k = 0; k < tr->ntracks; k++)
    if (!tr->tracks[k].cls)
      tr->tracks[k].cls = tr->tracks[k].name[0] ? tr->tracks[k].name : "(unnamed track)";
}

static void trace_free(trace *tr) {
  free(tr->tracks);
  free(tr->bars);
  free(tr->codelets);
  free(tr->flows);
}

/* Reads the trace in `in` into *tr (its strings are doc's): 0, or 1
 * (said). */
static int load(const char *in, json **doc, trace *tr) {
  char *text = read_file(in);
  if (!text) {
    fprintf(stderr, "tandem-trace: cannot read %s\n", in);
    return 1;
  }
  *doc = json_parse(text);
  free(text);
  const json *events = *doc ? member(*doc, "traceEvents", JSON_ARRAY) : NULL;
  if (!events) {
    fprintf(stderr, "tandem-trace: %s is not a trace (JSON with traceEvents)\n", in);
    return 1;
  }
  *tr = (trace){.tracks = calloc(events->n + 1, sizeof *tr->tracks),
                .bars = calloc(events->n + 1, sizeof *tr->bars),
                .codelets = calloc(events->n + 1, sizeof *tr->codelets),
                .flows = calloc(events->n + 1, sizeof *tr->flows),
                .t_min = INFINITY,
                .t_max = -INFINITY};
  if (!tr->tracks || !tr->bars || !tr->codelets || !tr->flows) {
    fprintf(stderr, "tandem-trace: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < events->n; i++)
    add_event(tr, events->items[i]);
  order_rows(tr);
  return 0;
}

/* ---- the chart ------------------------------------------------------------- */

/* Where things go on the chart (pixels). */
typedef struct layout {
  int width, height, label_w, top, row_h, bar_h, left, legend_col, legend_cols, legend_y;
  double plot_w;
} layout;

/* Room for the longest row label and legend entry. */
static layout lay_out(const trace *tr, int width) {
  size_t longest = 0, longest_legend = strlen("copy between host and device");
  for (size_t k = 0; k < tr->ntracks; k++)
    if (tr->tracks[k].used && strlen(tr->tracks[k].name) > longest)
      longest = strlen(tr->tracks[k].name);
  for (size_t c = 0; c < tr->ncodelets; c++)
    if (strlen(tr->codelets[c]) > longest_legend)
      longest_legend = strlen(tr->codelets[c]);
  layout l = {.label_w = 10 + text_px(longest), .top = 50, .row_h = 26, .bar_h = 18};
  l.left = l.label_w + 10;
  if (width < l.left + 200)
    width = l.left + 200;
  l.legend_col = 20 + 14 + 6 + text_px(longest_legend);
  l.legend_cols = (width - 80) / l.legend_col;
  if (l.legend_cols < 1)
    l.legend_cols = 1;
  if (width < 80 + l.legend_col)
    width = 80 + l.legend_col;
  l.width = width;
  l.plot_w = width - l.left - 20;
  l.legend_y = l.top + (int)tr->nrows * l.row_h + 50;
  l.height = l.legend_y + 30 +
             (int)((tr->ncodelets + 3 + (size_t)l.legend_cols - 1) / (size_t)l.legend_cols) * 22;
  return l;
}

static void svg_head(FILE *f, const layout *l, const char *in) {
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
             "<defs><pattern id=\"copy\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
             "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#d9d9d9\"/>"
             "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#8c8c8c\" stroke-width=\"3\"/>"
             "</pattern></defs>\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
             "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">",
          l->width, l->height, l->width, l->height);
  xml_text(f, in);
  fprintf(f, "</text>\n");
}

/* The rows, striped, with their labels; the time axis under them. */
static void svg_rows_and_axis(FILE *f, const layout *l, const trace *tr) {
  for (size_t k = 0; k < tr->ntracks; k++) {
    if (!tr->tracks[k].used)
      continue;
    int y = l->top + (int)tr->tracks[k].row * l->row_h;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", l->left, y,
            l->plot_w, l->row_h, tr->tracks[k].row % 2 ? "#ffffff" : "#f4f4f4");
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", l->label_w, y + l->row_h / 2 + 4);
    xml_text(f, tr->tracks[k].name[0] ? tr->tracks[k].name : "(unnamed track)");
    fprintf(f, "</text>\n");
  }
  double span = tr->t_max - tr->t_min, step = tick_step(span, 8);
  const char *unit = span >= 2e6 ? "s" : span >= 2e3 ? "ms" : "us";
  double div = span >= 2e6 ? 1e6 : span >= 2e3 ? 1e3 : 1;
  int axis_y = l->top + (int)tr->nrows * l->row_h;
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>\n", l->left,
          axis_y, l->left + l->plot_w, axis_y);
  for (double t = 0; t <= span + 1e-9; t += step) {
    double x = l->left + t / span * l->plot_w;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#bbbbbb\"/>\n", x,
            l->top, x, axis_y + 5);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g %s</text>\n", x, axis_y + 18,
            t / div, unit);
  }
}

static void svg_bar(FILE *f, const layout *l, const trace *tr, const bar *b) {
  double span = tr->t_max - tr->t_min;
  double x = l->left + (b->ts - tr->t_min) / span * l->plot_w;
  double w = b->dur / span * l->plot_w;
  if (w < 0.5)
    w = 0.5;
  int y = l->top + (int)tr->tracks[b->track].row * l->row_h + (l->row_h - l->bar_h) / 2;
  const char *fill, *cls;
  int h = l->bar_h;
  if (b->kind == BAR_PAUSE || b->kind == BAR_RESUME || b->kind == BAR_CANCEL) {
    /* a line across every row, at the moment */
    fprintf(f, "<line class=\"mark\" x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" "
               "stroke=\"%s\" stroke-dasharray=\"4 3\"><title>",
            x, l->top, x, l->top + (int)tr->nrows * l->row_h,
            b->kind == BAR_CANCEL ? "#c0392b" : "#2c3e50");
    if (b->kind == BAR_CANCEL)
      fprintf(f, "cancel of group ");
    xml_text(f, b->name);
    fprintf(f, " at %.1f us</title></line>\n", b->ts - tr->t_min);
    return;
  }
  if (b->kind == BAR_TASK) {
    size_t c;
    for (c = 0; c < tr->ncodelets && strcmp(tr->codelets[c], b->name); c++)
      ;
    fill = palette[c % NPALETTE];
    cls = "task";
  } else if (b->kind == BAR_COPY) {
    fill = "url(#copy)";
    cls = "transfer";
  } else {
    fill = b->kind == BAR_PARKED ? "#e3e3e3" : "#c8c8c8";
    cls = b->kind == BAR_PARKED ? "parked" : "idle";
    y += l->bar_h / 2 - 2;
    h = 4;
  }
  fprintf(f, "<rect class=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
             "<title>",
          cls, x, y, w, h, fill);
  xml_text(f, b->name);
  if (b->id >= 0)
    fprintf(f, " #%lld", b->id);
  if (b->kind == BAR_COPY)
    fprintf(f, ", %lld bytes", b->bytes);
  fprintf(f, ": %.1f us at %.1f us</title></rect>\n", b->dur, b->ts - tr->t_min);
}

static void svg_legend(FILE *f, const layout *l, const trace *tr) {
  static const struct {
    const char *fill, *label;
  } fixed[] = {{"url(#copy)", "copy between host and device"},
               {"#c8c8c8", "looking for work"},
               {"#e3e3e3", "parked"}};
  fprintf(f, "<text x=\"10\" y=\"%d\" font-weight=\"bold\">Legend</text>\n", l->legend_y);
  for (size_t c = 0; c < tr->ncodelets + 3; c++) {
    int x = 80 + (int)(c % (size_t)l->legend_cols) * l->legend_col,
        y = l->legend_y + 12 + (int)(c / (size_t)l->legend_cols) * 22;
    bool codelet = c < tr->ncodelets;
    const char *fill = codelet ? palette[c % NPALETTE] : fixed[c - tr->ncodelets].fill;
    const char *label = codelet ? tr->codelets[c] : fixed[c - tr->ncodelets].label;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\" "
               "stroke=\"#666666\"/><text x=\"%d\" y=\"%d\">",
            x, y - 11, fill, x + 20, y);
    xml_text(f, label);
    fprintf(f, "</text>\n");
  }
}

/* The chart into `out` (NULL: standard output): 0, or 1 (said). */
static int chart(const char *in, const char *out, int width, const trace *tr) {
  layout l = lay_out(tr, width);
  FILE *f = out ? fopen(out, "w") : stdout;
  if (!f) {
    fprintf(stderr, "tandem-trace: cannot write %s\n", out);
    return 1;
  }
  svg_head(f, &l, in);
  svg_rows_and_axis(f, &l, tr);
  for (int pass = 0; pass < 2; pass++) /* idle first, tasks and copies over them */
    for (size_t i = 0; i < tr->nbars; i++) {
      bool idle = tr->bars[i].kind == BAR_IDLE || tr->bars[i].kind == BAR_PARKED;
      if (idle == (pass == 0))
        svg_bar(f, &l, tr, &tr->bars[i]);
    }
  svg_legend(f, &l, tr);
  fprintf(f, "</svg>\n");
  if (ferror(f) || (out && fclose(f) != 0)) {
    fprintf(stderr, "tandem-trace: writing failed\n");
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  int width = 1100;
  bool want_summary = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-o") && i + 1 < argc)
      out = argv[++i];
    else if (!strcmp(argv[i], "--summary"))
      want_summary = true;
    else if (!strcmp(argv[i], "--width") && i + 1 < argc)
      width = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (!in && argv[i][0] != '-')
      in = argv[i];
    else {
      usage(stderr);
      return 2;
    }
  }
  if (!in || width < 200) {
    usage(stderr);
    return 2;
  }
  json *doc = NULL;
  trace tr = {0};
  int rc = load(in, &doc, &tr);
  if (!rc && want_summary)
    rc = summary(in, tr.tracks, tr.ntracks, tr.bars, tr.nbars, tr.flows, tr.nflows, tr.t_min,
                 tr.t_max);
  if (!rc && (!want_summary || out))
    rc = chart(in, out, width, &tr);
  trace_free(&tr);
  json_free(doc);
  return rc;
}
